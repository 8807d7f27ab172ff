"""`python -m crucible.jobs.rollout`: K scored samples per prompt from a policy
checkpoint, published as a trajectories dataset for RL.

The policy is CRUCIBLE_INPUTS.checkpoint (its model shape from the checkpoint's meta); K is
`spec.samplesPerPrompt`, sampling `spec.sampling`. The prompts and their scores come from
one of:
- `spec.environment` (a built-in or an import path, `plugins.py`): `config.rollout.num_prompts`
  prompts from its `prompts(count, seed)`, scored by its `score`;
- `spec.reward` (likewise), scoring the records of the first input dataset (at most
  `config.rollout.num_prompts`), or train-split problems of the checkpoint's task when
  there is none, with the rest of each record as its metadata.
A record is a "prompt" or a chat ("messages", rendered with the model's chat template:
`prompts.py`). A RolloutJob whose policy is a teacher is data generation: it runs
`crucible.jobs.datagen`.

With `spec.replicas` > 1 (one process each, under torchrun) every replica samples its own
contiguous share of the prompts, in whole waves of `config.rollout.batch_size`, and rank 0
merges the shares (`shards.py`): the dataset is the same for any replica count, and a retry
makes only the shares a lost replica left missing.
"""

import logging
from collections.abc import Mapping
from dataclasses import replace
from statistics import fmean
from typing import TYPE_CHECKING, Any

from crucible.config.parse import ConfigError
from crucible.jobs import datagen
from crucible.jobs.checkpoints import load_model
from crucible.jobs.datasets import output_path, read_records, write_atomically
from crucible.jobs.env import JobEnv, read_env
from crucible.jobs.process import run_job, setup_torch
from crucible.jobs.sampling import fit_new_tokens, rollout_config
from crucible.jobs.shards import Shards
from crucible.plugins import (
    ENVIRONMENT,
    REWARD,
    CheckedEnvironment,
    Kind,
    Plugin,
    build_environment,
    checked_scores,
    resolve,
)
from crucible.rollouts.environments import ArithmeticEnvironment
from crucible.rollouts.prompts import build_prompts, record_problem

if TYPE_CHECKING:
    from crucible.rollouts.rollout import Scorer
    from crucible.schemas.lineage import CheckpointPublic
    from crucible.sdk import Run

log = logging.getLogger("crucible.jobs.rollout")

DEFAULT_NUM_PROMPTS = 256
"""Prompts an environment makes, or task problems sampled when the job has no prompts
dataset, when config.rollout.num_prompts is unset."""

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


def plugin_of(env: JobEnv, field: str, kind: Kind) -> Plugin:
    """`spec.<field>` (`{name, options}`), resolved with its options."""
    given = env.spec_object(field)
    name = given.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"spec.{field}.name must name the {kind.noun}: a built-in "
            f"({', '.join(kind.builtins)}) or an import path package.module:name"
        )
    options = given.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"spec.{field}.options must be an object")
    return resolve(
        kind, name, options, where=f"spec.{field}.name", options_where=f"spec.{field}.options"
    )


def scoring_of(env: JobEnv) -> CheckedEnvironment | Plugin:
    """What scores the samples: `spec.environment`, built (it makes the prompts too), or
    `spec.reward`; exactly one of them."""
    if env.spec.get("environment") is None:
        if env.spec.get("reward") is None:
            raise ConfigError(
                "spec.environment or spec.reward is required to score a checkpoint's samples: "
                f"an environment ({', '.join(ENVIRONMENT.builtins)} or an import path "
                "package.module:factory) makes the prompts and scores them; a reward "
                f"({', '.join(REWARD.builtins)} or package.module:function) scores spec.prompts "
                "or the task's problems"
            )
        return plugin_of(env, "reward", REWARD)
    given = [f"spec.{key}" for key in ("prompts", "reward") if env.spec.get(key) is not None]
    if given or env.inputs.datasets:
        raise ConfigError(
            "spec.environment makes the prompts and scores the samples: drop "
            f"{' and '.join(given or ['the datasets of CRUCIBLE_INPUTS'])}"
        )
    return build_environment(plugin_of(env, "environment", ENVIRONMENT))


def scorer(reward: Plugin) -> "Scorer":
    """The reward as `rollout`'s batch scorer, its return value checked."""

    def score(
        prompts: list[str], completions: list[str], metadata: list[Mapping[str, Any]]
    ) -> list[float]:
        return checked_scores(reward, reward(prompts, completions, metadata), len(prompts))

    return score


def prompt_records(
    env: JobEnv,
    run: "Run",
    scoring: CheckedEnvironment | Plugin,
    checkpoint: "CheckpointPublic",
    seed: int,
) -> list[dict[str, Any]]:
    """The records to sample from, checked: the environment's, the prompts dataset's, or the
    checkpoint's task problems."""
    limit = env.config.rollout_num_prompts
    count = limit or DEFAULT_NUM_PROMPTS
    if isinstance(scoring, CheckedEnvironment):
        return scoring.prompts(count, seed)
    if not env.inputs.datasets:
        task = env.config.task_over(
            checkpoint.meta.get("task"), f"checkpoint {checkpoint.id} meta.task"
        )
        return ArithmeticEnvironment(task).prompts(count, seed)
    (ref,) = env.inputs.datasets[:1]
    records = read_records(run, [ref])
    for number, record in enumerate(records, start=1):
        problem = record_problem(record, f"dataset {ref} record {number}")
        if problem is not None:
            raise ConfigError(problem)
    if not records:
        raise ConfigError(f"the prompts dataset {ref} has no records")
    return records[:limit] if limit is not None else records


def rollout_job() -> None:
    env = read_env()
    if env.spec_object("policy").get("teacher") is not None:
        datagen.datagen()
        return
    name = datagen.output_name(env)
    scoring = scoring_of(env)
    config = rollout_config(env)
    checkpoint_id = env.inputs.checkpoint
    if checkpoint_id is None:
        raise ConfigError(
            "spec.policy is a checkpoint but CRUCIBLE_INPUTS names none to sample from"
        )

    import torch

    import crucible
    from crucible.rollouts.rollout import rollout
    from crucible.training.records import read_jsonl

    # No process group: the replicas share nothing but storage, so one stopped replica
    # holds up no other (each reads and checks the checkpoint itself).
    torch_setup = setup_torch(distributed=False)
    run = crucible.init()
    shards = Shards(run.outputs_dir / f"{name}.shards", torch_setup.world_size)
    shards.mark_present(torch_setup.rank, run.attempt)
    model, tokenizer, record = load_model(
        run, checkpoint_id, device=torch_setup.device, fallback=env.config.model
    )
    if torch_setup.device.type == "cuda":
        # Sample in bf16, as the trainer's autocast computes the same logprobs and as the
        # generator was measured (benchmarks/gpu/README.md); the CPU keeps float32.
        model = model.to(torch.bfloat16)
    prompts = build_prompts(prompt_records(env, run, scoring, record, config.seed), tokenizer)
    config = replace(
        config,
        max_new_tokens=fit_new_tokens(
            config.max_new_tokens, model.max_seq_len, [len(p.tokens) for p in prompts]
        ),
    )
    rank = torch_setup.rank
    span = shards.span(rank, len(prompts), config.batch_size)
    if shards.written(rank):
        log.info("share %d of %d: written by an earlier attempt", rank, shards.replicas)
    else:
        mine = [prompts[i] for i in span]
        trajectories = rollout(
            model,
            tokenizer,
            [p.text for p in mine],
            scoring.score if isinstance(scoring, CheckedEnvironment) else scorer(scoring),
            config,
            metadata=[p.metadata for p in mine],
            prompt_tokens=[p.tokens for p in mine],
        )
        shards.write(rank, ({**t.to_record(), "group": t.group + span.start} for t in trajectories))
        log.info("share %d of %d: prompts %d-%d", rank, shards.replicas, span.start, span.stop)
    if rank != 0:
        run.finish()
        return
    shards.wait_for_all(run.attempt)
    path = output_path(run, name)
    count = write_atomically(path, shards.merge)
    rewards = [float(r["reward"]) for r in read_jsonl(path)]
    source = "environment" if isinstance(scoring, CheckedEnvironment) else "reward"
    schema = {
        **TRAJECTORY_SCHEMA,
        "samples_per_prompt": config.samples_per_prompt,
        source: scoring.reference,
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
