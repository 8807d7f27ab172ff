"""`python -m crucible.workloads.jobs.rollout`: K scored samples per prompt from a policy
checkpoint, published as a trajectories dataset for RL.

The policy is CRUCIBLE_INPUTS.checkpoint (its model shape from the checkpoint's meta); the
prompts are the "prompt" fields of the first input dataset (at most
`config.rollout.num_prompts`), or train-split problems of the task when there is none; the
reward is `spec.reward.name` (a built-in or an import path, `plugins.py`) with the rest of
each prompt's record as its metadata; K is `spec.samplesPerPrompt`, sampling `spec.sampling`. A
RolloutJob whose policy is a teacher is data generation: it runs
`crucible.workloads.jobs.datagen`.
"""

import logging
from collections.abc import Mapping
from dataclasses import replace
from statistics import fmean
from typing import TYPE_CHECKING, Any

from crucible.workloads.jobs import datagen
from crucible.workloads.jobs.checkpoints import load_model
from crucible.workloads.jobs.config import ConfigError
from crucible.workloads.jobs.datasets import (
    output_path,
    read_records,
    require_fields,
    write_atomically,
)
from crucible.workloads.jobs.env import JobEnv, read_env
from crucible.workloads.jobs.plugins import REWARD, Plugin, checked_scores, resolve
from crucible.workloads.jobs.process import run_job, setup_torch
from crucible.workloads.jobs.sampling import fit_new_tokens, rollout_config
from crucible.workloads.tasks.arithmetic import ArithmeticTask

if TYPE_CHECKING:
    from crucible.workloads.rollout import Scorer

log = logging.getLogger("crucible.workloads.rollout")

DEFAULT_NUM_PROMPTS = 256
"""Problems sampled when the job has no prompts dataset and config.rollout.num_prompts is
unset."""

TRAJECTORY_SCHEMA = {
    "format": "jsonl",
    "fields": {
        "prompt": "string",
        "completion": "string",
        "completion_tokens": "list[int]",
        "reward": "float",
        "logprobs": "list[float]",
        "logprob": "float",
        "group": "int",
    },
}


def main() -> None:
    run_job("rollout", rollout_job)


def reward_of(env: JobEnv) -> Plugin:
    """`spec.reward`, resolved with its options."""
    reward = env.spec_object("reward")
    name = reward.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            "spec.reward is required to score the samples: a built-in "
            f"({', '.join(REWARD.builtins)}) or an import path package.module:function"
        )
    options = reward.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError("spec.reward.options must be an object")
    return resolve(
        REWARD, name, options, where="spec.reward.name", options_where="spec.reward.options"
    )


def scorer(reward: Plugin) -> "Scorer":
    """The reward as `rollout`'s batch scorer, its return value checked."""

    def score(
        prompts: list[str], completions: list[str], metadata: list[Mapping[str, Any]]
    ) -> list[float]:
        return checked_scores(reward, reward(prompts, completions, metadata), len(prompts))

    return score


def rollout_job() -> None:
    env = read_env()
    if env.spec_object("policy").get("teacher") is not None:
        datagen.datagen()
        return
    name = datagen.output_name(env)
    reward = reward_of(env)
    config = rollout_config(env)
    checkpoint_id = env.inputs.checkpoint
    if checkpoint_id is None:
        raise ConfigError(
            "spec.policy is a checkpoint but CRUCIBLE_INPUTS names none to sample from"
        )

    import torch

    import crucible
    from crucible.workloads.rollout import rollout, write_trajectories

    torch_setup = setup_torch(distributed=False)
    if torch_setup.rank != 0:
        return  # one process does the work
    run = crucible.init()
    model, tokenizer, record = load_model(
        run, checkpoint_id, device=torch_setup.device, fallback=env.config.model
    )
    if torch_setup.device.type == "cuda":
        # Sample in bf16, as the trainer's autocast computes the same logprobs and as the
        # generator was measured (benchmarks/gpu/README.md); the CPU keeps float32.
        model = model.to(torch.bfloat16)
    limit = env.config.rollout_num_prompts
    if env.inputs.datasets:
        records = read_records(run, env.inputs.datasets[:1])
        require_fields(records, ("prompt",), "a prompts dataset has a prompt per record")
        records = records[:limit] if limit is not None else records
        prompts = [str(r["prompt"]) for r in records]
        # The reward sees the rest of each prompt's record (a reference answer, a test).
        metadata = [{k: v for k, v in r.items() if k != "prompt"} for r in records]
    else:
        task = ArithmeticTask(
            env.config.task_over(record.meta.get("task"), f"checkpoint {record.id} meta.task")
        )
        problems = task.sample("train", limit or DEFAULT_NUM_PROMPTS, seed=config.seed)
        prompts = [p.prompt for p in problems]
        metadata = [{"answer": p.answer} for p in problems]
    if not prompts:
        raise ConfigError("the prompts dataset has no records")
    config = replace(
        config,
        max_new_tokens=fit_new_tokens(
            config.max_new_tokens,
            model.max_seq_len,
            [len(tokenizer.encode(p, bos=True)) for p in prompts],
        ),
    )

    trajectories = rollout(model, tokenizer, prompts, scorer(reward), config, metadata=metadata)
    path = output_path(run, name)
    count = write_atomically(path, lambda p: write_trajectories(p, trajectories))
    rewards = [t.reward for t in trajectories]
    schema = {
        **TRAJECTORY_SCHEMA,
        "samples_per_prompt": config.samples_per_prompt,
        "reward": reward.reference,
        "policy_checkpoint": record.id,
    }
    version = run.publish_dataset(name, path, count, schema=schema)
    mean_reward = fmean(rewards)
    run.log(
        {"rollout/mean_reward": mean_reward, "rollout/trajectories": float(count)},
        step=record.step,
    )
    log.info(
        "published %s: %d trajectories (%d prompts x %d), mean reward %.3f",
        version.ref,
        count,
        len(prompts),
        config.samples_per_prompt,
        mean_reward,
    )
    run.finish()


if __name__ == "__main__":
    main()
