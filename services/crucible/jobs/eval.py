"""`python -m crucible.jobs.eval`: score one checkpoint on an eval suite.

The checkpoint is CRUCIBLE_INPUTS.checkpoint, its model built from its meta. The suite is
`spec.suite`, a built-in's name (`arithmetic`) or an import path to a team's own
(`plugins.py`), called with a `ModelHandle` and `config.suite` as keyword arguments. Its
metrics are recorded against the checkpoint (`run.record_eval`) under the suite's name and
logged as `eval/<metric>` at the checkpoint's step.
"""

import logging

from crucible.config.parse import ConfigError
from crucible.jobs.checkpoints import load_model
from crucible.jobs.env import read_env
from crucible.jobs.process import run_job, setup_torch
from crucible.plugins import EVAL_SUITE, checked_metrics, resolve

log = logging.getLogger("crucible.jobs.eval")


def main() -> None:
    run_job("eval", eval_job)


def eval_job() -> None:
    env = read_env()
    name = env.spec.get("suite")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"spec.suite names no eval suite; built-in: {', '.join(EVAL_SUITE.builtins)}, or "
            "an import path package.module:function"
        )
    suite = resolve(
        EVAL_SUITE, name, env.config.suite_options, where="spec.suite", options_where="config.suite"
    )
    checkpoint_id = env.inputs.checkpoint
    if checkpoint_id is None:
        raise ConfigError("an eval needs the checkpoint to score; CRUCIBLE_INPUTS names none")

    import crucible
    from crucible.rollouts.model_handle import CheckpointInfo, ModelHandle

    torch_setup = setup_torch(distributed=False)
    if torch_setup.rank != 0:
        return  # one process does the work
    run = crucible.init()
    model, tokenizer, record = load_model(
        run, checkpoint_id, device=torch_setup.device, fallback=env.config.model
    )
    handle = ModelHandle(
        model,
        tokenizer,
        checkpoint=CheckpointInfo(
            id=record.id, run_id=record.run_id, step=record.step, meta=record.meta
        ),
        config=env.config_given,
        batch_size=env.config.eval.batch_size,
    )
    metrics = checked_metrics(suite, suite(handle))
    run.record_eval(record.id, name, metrics)
    run.log({f"eval/{metric}": value for metric, value in metrics.items()}, step=record.step)
    log.info(
        "%s on checkpoint %d (run %d, step %d): %s",
        name,
        record.id,
        record.run_id,
        record.step,
        ", ".join(f"{metric} {value:.4g}" for metric, value in metrics.items()),
    )
    run.finish()


if __name__ == "__main__":
    main()
