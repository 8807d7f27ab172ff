"""`python -m crucible.jobs.episodes`: a RolloutJob whose `config.episodes` asks
for agent episodes: the policy plays `count` tasks of a multi-turn environment, and the
episodes that earn at least `min_reward` are published as a chat dataset, one record per
episode with its messages as the policy saw them (the system message with the tools, the
tool results), ready for SFT (`data.shape` chat; docs/agents.md, "From demonstrations to
online RL"). Episodes that failed (a tool, the environment) are counted by reason and left
out; more than `max_failed_fraction` of them fails the job before anything is published.

The policy is `spec.policy`: a scripted teacher (`agents/teachers.py`: a built-in's name or
an import path, with `policy.options`), which plays one episode after another, or a
checkpoint, whose model plays through the serving engine as `config.episodes.episode`
says (rejection sampling from a model of one's own). The tasks are the environment's for
`config.episodes.seed`. One process does the work; the dataset's schema names the
environment, the policy and how many of the episodes played were kept.
"""

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crucible.config.parse import ConfigError, EpisodesJob
from crucible.jobs.datagen import output_name
from crucible.jobs.datasets import output_path, write_atomically
from crucible.jobs.env import JobEnv, read_env
from crucible.jobs.process import run_job, setup_torch

if TYPE_CHECKING:
    import torch

    from crucible.agents.loading import EnvironmentSource
    from crucible.agents.records import EpisodeRecord
    from crucible.agents.sandbox import Sandbox
    from crucible.sdk.run import Run

log = logging.getLogger("crucible.jobs.episodes")

CHAT_SCHEMA = {"format": "jsonl", "fields": {"messages": "chat", "reward": "number"}}


def main() -> None:
    run_job("episodes", episodes)


def episodes() -> None:
    env = read_env()
    job = env.config.episodes
    if job is None:
        raise ConfigError("an episodes job needs config.episodes (CRUCIBLE_CONFIG has none)")
    name = output_name(env)

    from crucible.agents.loading import load_environment, load_teacher

    source = load_environment(
        job.environment,
        job.options,
        where="config.episodes.environment",
        options_where="config.episodes.options",
    )
    policy = env.spec_object("policy")
    teacher = None
    if policy.get("teacher") is not None:
        teacher = load_teacher(
            str(policy["teacher"]),
            policy.get("options") or {},
            where="spec.policy.teacher",
            options_where="spec.policy.options",
        )
    elif env.inputs.checkpoint is None:
        raise ConfigError(
            "spec.policy names no teacher and CRUCIBLE_INPUTS no checkpoint: nothing plays the "
            "episodes; give an agent teacher (calculator-solver or an import path) or a "
            "policy checkpoint"
        )

    import crucible
    from crucible.agents.records import FAILED_ENDS
    from crucible.agents.runner import run_scripted
    from crucible.agents.sandbox import Sandbox
    from crucible.online_rl.health import check_failures, failed_by_reason

    torch_setup = setup_torch(distributed=False)
    if torch_setup.rank != 0:
        return  # one process does the work
    run = crucible.init()
    tasks = source.tasks(job.count, job.seed)
    sandbox = Sandbox()
    if teacher is not None:
        played = run_scripted(
            teacher, source, tasks, seed=job.seed, config=job.episode, sandbox=sandbox
        )
        by = f"teacher {policy['teacher']}"
    else:
        assert env.inputs.checkpoint is not None  # else refused above
        played, by = _checkpoint_plays(
            env, env.inputs.checkpoint, job, run, torch_setup.device, source, tasks, sandbox
        )
    failed = failed_by_reason(played)
    log.info("%d episodes by %s failed: %s", sum(failed.values()), by, failed or "none")
    run.log(
        {"episodes/failed": float(sum(failed.values()))}
        | {f"episodes/failed/{reason}": float(n) for reason, n in failed.items()},
        step=0,
    )
    check_failures(f"the episodes by {by}", played, max_failed_fraction=job.max_failed_fraction)
    kept = [
        r
        for r in played
        if r.end not in FAILED_ENDS and (job.min_reward is None or r.reward >= job.min_reward)
    ]
    mean_reward = sum(r.reward for r in played) / len(played)
    log.info(
        "%d episodes by %s, mean reward %.4f; %d kept (min_reward %s)",
        len(played),
        by,
        mean_reward,
        len(kept),
        job.min_reward,
    )
    if not kept:
        raise RuntimeError(
            f"none of the {len(played)} episodes by {by} reached min_reward {job.min_reward} "
            f"(mean reward {mean_reward:.4f}): nothing to publish"
        )
    path = output_path(run, name)
    count = write_atomically(path, lambda p: _write(p, kept))
    schema = {
        **CHAT_SCHEMA,
        "environment": job.environment,
        "options": dict(job.options),
        "source": by,
        "episodes_played": len(played),
        "min_reward": job.min_reward,
    }
    version = run.publish_dataset(name, path, count, schema=schema)
    log.info("published %s: %d episodes (%s)", version.ref, count, version.digest)
    run.log(
        {
            "episodes/played": float(len(played)),
            "episodes/kept": float(count),
            "episodes/mean_reward": mean_reward,
        },
        step=0,
    )
    run.finish()


def _checkpoint_plays(
    env: JobEnv,
    checkpoint_id: int,
    job: EpisodesJob,
    run: "Run",
    device: "torch.device",
    source: "EnvironmentSource",
    tasks: list[dict[str, Any]],
    sandbox: "Sandbox",
) -> "tuple[list[EpisodeRecord], str]":
    """The episodes a checkpoint's model plays through the engine, each stamped with the
    checkpoint as its policy."""
    from crucible.agents.policy import PolicyVersion
    from crucible.agents.runner import run_episodes
    from crucible.engine.engine import Engine
    from crucible.jobs.checkpoints import load_model

    model, tokenizer, record = load_model(
        run, checkpoint_id, device=device, fallback=env.config.model
    )
    engine = Engine(model, tokenizer, job.engine)
    played = run_episodes(engine, source, tasks, seed=job.seed, config=job.episode, sandbox=sandbox)
    version = PolicyVersion(0, record.id, record.step)
    return [replace(r, policy=version) for r in played], f"checkpoint {record.id}"


def _write(path: Path, records: "list[EpisodeRecord]") -> int:
    """The episodes as chat records: the messages to train on, and what the episode was."""
    with path.open("w") as out:
        for record in records:
            line = {
                "messages": record.messages,
                "reward": record.reward,
                "task": record.task,
                "end": str(record.end),
                "policy": record.policy.to_record() if record.policy is not None else None,
            }
            out.write(json.dumps(line, sort_keys=True) + "\n")
    return len(records)


if __name__ == "__main__":
    main()
