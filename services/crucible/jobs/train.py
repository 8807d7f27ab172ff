"""`python -m crucible.jobs.train`: pre-training, SFT or RL on the run's input
datasets.

Pre-training and SFT stream their records (JSONL or Parquet; text, prompt/completion or
chat, `config.data`), checked before the first step; RL reads its rollout dataset whole.

Checkpoints go through the SDK (DCP, registered with the model and task config in `meta`)
every `spec.checkpoints.everySteps` and at the end, in the background with
`config.train.checkpoint_async`; an attempt resumes exactly from CRUCIBLE_RESUME_FROM or the
run's latest checkpoint; SIGTERM saves the current step (or waits for its save in flight)
and exits 143. A live profile request (`crucible runs profile`) is recorded from the next
step (`run.step_control()`).
"""

import logging
from dataclasses import replace
from typing import Any

from crucible.config.model_source import ModelSpec
from crucible.config.parse import ConfigError
from crucible.config.workload import TaskConfig, TrainConfig
from crucible.domain.profile_files import PROFILE_DIR
from crucible.jobs.artifacts import resolve_model, run_fetch
from crucible.jobs.checkpoints import (
    checked_tokenizer,
    checkpoint_meta,
    load_weights,
    model_spec_from_meta,
)
from crucible.jobs.datasets import input_files, read_records, require_fields
from crucible.jobs.env import JobEnv, read_env
from crucible.jobs.process import run_job, setup_torch
from crucible.models.build import state_template
from crucible.training.records import DataError, RecordSource
from crucible.training.train_data import open_files

log = logging.getLogger("crucible.jobs.train")


def main() -> None:
    run_job("train", train)


def train_config(env: JobEnv) -> TrainConfig:
    """config.train, with the spec's checkpoint interval winning over checkpoint_every."""
    config = env.config.train
    every = env.spec_object("checkpoints").get("everySteps")
    if every is not None:
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ConfigError(f"spec.checkpoints.everySteps must be a positive integer: {every}")
        config = replace(config, checkpoint_every=every)
    return config


def train() -> None:
    env = read_env()
    config = train_config(env)
    if not env.inputs.datasets:
        raise ConfigError(
            "a training run needs input datasets (spec.inputs); CRUCIBLE_INPUTS names none"
        )
    if config.mode == "rl" and env.inputs.checkpoint is None:
        raise ConfigError(
            "config.train.mode is 'rl', which starts from a policy: give the SFT checkpoint "
            "as spec.initFrom (CRUCIBLE_INPUTS.checkpoint is empty)"
        )

    import crucible
    from crucible.training.train import Trainer

    torch_setup = setup_torch()
    run = crucible.init()
    model_spec, task_config = env.config.model, env.config.task
    record = None
    if env.inputs.checkpoint is not None:
        record = run.get_checkpoint(env.inputs.checkpoint)
        model_spec, task_config = _configs_from(record.id, record.meta, env)
    # The model is built from the artifacts' local files; the meta names them by id.
    resolved = resolve_model(model_spec, run_fetch(run, env.inputs.artifacts))
    local_spec = resolved.local
    checked_tokenizer(local_spec)  # a model or tokenizer that cannot be used exits 2 here
    init_state = None
    if record is not None:
        init_state = state_template(local_spec)
        load_weights(run, record, init_state)
        if torch_setup.rank == 0:
            log.info(
                "initialised from checkpoint %d (run %d, step %d)",
                record.id,
                record.run_id,
                record.step,
            )

    records: list[dict[str, Any]] | tuple[RecordSource, str]
    if config.mode == "sft":
        # Streamed: every record is checked here, memory holds one shuffle block.
        try:
            records = open_files(input_files(run, env.inputs.datasets).files, env.config.data)
        except DataError as exc:
            raise ConfigError(str(exc)) from None
        if torch_setup.rank == 0:
            log.info("training on %d %s records", records[0].num_records, records[1])
    else:
        records = read_records(run, env.inputs.datasets)
        require_fields(
            records,
            ("prompt", "completion_tokens", "reward", "logprobs"),
            "RL trains on trajectories from crucible.jobs.rollout",
        )
        if "samples_per_prompt" not in env.config.given.get("train", {}):
            config = replace(config, samples_per_prompt=_group_size(records))

    meta = checkpoint_meta(resolved.pinned, task_config, config.mode)

    def log_step(step: int, metrics: dict[str, float]) -> None:
        run.log(metrics, step=step)
        if torch_setup.rank == 0:
            log.info(
                "step %d/%d loss %.4f grad_norm %.3f lr %.2e tokens/s %.0f",
                step,
                config.steps,
                metrics["loss"],
                metrics["grad_norm"],
                metrics["lr"],
                metrics["tokens_per_s"],
            )

    try:
        trainer = Trainer(
            config,
            local_spec,
            records,
            data=env.config.data,
            checkpointer=run.checkpointer(meta=meta, async_save=config.checkpoint_async),
            init_model_state=init_state,
            log=log_step,
            device=torch_setup.device,
            # Always given: a live request (`crucible runs profile`) may come at any step.
            profile_dir=run.outputs_dir / PROFILE_DIR,
        )
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    if trainer.step > 0 and torch_setup.rank == 0:
        log.info("resumed at step %d of %d", trainer.step, config.steps)
    trainer.train(control=run.step_control())
    if trainer.stopped:
        if torch_setup.rank == 0:
            log.info("stopped at step %d on SIGTERM, checkpoint saved", trainer.step)
        run.finish(preempted=True)
    if config.export_hf:
        from crucible.jobs.exports import export_final_checkpoint

        weights = trainer.full_model_state()  # the final checkpoint's: it was the last step
        if torch_setup.rank == 0:
            export_final_checkpoint(run, local_spec, weights)
    run.finish()


def _configs_from(
    checkpoint_id: int, meta: dict[str, Any], env: JobEnv
) -> tuple[ModelSpec, TaskConfig]:
    """Model and task of a run initialised from a checkpoint: the checkpoint's model unless
    config.model gives one (which must then match), and its task under config.task."""
    given = env.config.given
    from_meta = model_spec_from_meta(checkpoint_id, meta)
    if from_meta is None:
        model = env.config.model
    elif "model" in given and env.config.model != from_meta:
        raise ConfigError(
            f"config.model ({env.config.model}) does not match the shape of checkpoint "
            f"{checkpoint_id} ({from_meta}); leave config.model out to use the checkpoint's"
        )
    else:
        model = from_meta
    task = env.config.task_over(meta.get("task"), f"checkpoint {checkpoint_id} meta.task")
    return model, task


def _group_size(records: list[dict[str, Any]]) -> int:
    """The K of a rollout dataset: the size of its groups (the trainer checks they agree)."""
    key = records[0].get("group", records[0]["prompt"])
    return sum(1 for r in records if r.get("group", r["prompt"]) == key)


if __name__ == "__main__":
    main()
