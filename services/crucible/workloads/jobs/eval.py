"""`python -m crucible.workloads.jobs.eval`: score one checkpoint on an eval suite.

The checkpoint is CRUCIBLE_INPUTS.checkpoint; its meta gives the model shape and the task
(config.task overrides fields, config.eval sets the problems). The scores are recorded
against the checkpoint (`run.record_eval`) and logged as metrics at its step.
"""

import logging

from crucible.workloads.jobs.checkpoints import load_model
from crucible.workloads.jobs.config import ConfigError
from crucible.workloads.jobs.env import read_env
from crucible.workloads.jobs.process import run_job, setup_torch

log = logging.getLogger("crucible.workloads.eval")

SUITES = ("arithmetic",)
"""Eval suites this workload knows."""


def main() -> None:
    run_job("eval", eval_job)


def eval_job() -> None:
    env = read_env()
    suite = env.spec.get("suite")
    if suite is None:
        raise ConfigError(f"spec.suite names no eval suite; known: {', '.join(SUITES)}")
    if suite not in SUITES:
        raise ConfigError(
            f"spec.suite {suite!r} is not an eval suite of crucible.workloads.eval; known: "
            f"{', '.join(SUITES)}"
        )
    checkpoint_id = env.inputs.checkpoint
    if checkpoint_id is None:
        raise ConfigError("an eval needs the checkpoint to score; CRUCIBLE_INPUTS names none")

    import crucible
    from crucible.workloads.evaluate import evaluate
    from crucible.workloads.tasks.arithmetic import ArithmeticTask

    torch_setup = setup_torch(distributed=False)
    if torch_setup.rank != 0:
        return  # one process does the work
    run = crucible.init()
    model, tokenizer, record = load_model(
        run, checkpoint_id, device=torch_setup.device, fallback=env.config.model
    )
    task = ArithmeticTask(
        env.config.task_over(record.meta.get("task"), f"checkpoint {record.id} meta.task")
    )
    config = env.config.eval
    problems = task.sample("held_out", config.num_problems, seed=config.seed, unique=True)
    result = evaluate(model, tokenizer, problems, config)
    scores = {
        "accuracy": result.accuracy,
        "loss": result.loss,
        "num_problems": float(result.num_problems),
    }
    run.record_eval(record.id, suite, scores)
    run.log(
        {**result.as_metrics(), "eval/num_problems": float(result.num_problems)}, step=record.step
    )
    log.info(
        "%s on checkpoint %d (run %d, step %d): accuracy %.3f, loss %.4f over %d problems",
        suite,
        record.id,
        record.run_id,
        record.step,
        result.accuracy,
        result.loss,
        result.num_problems,
    )
    run.finish()


if __name__ == "__main__":
    main()
