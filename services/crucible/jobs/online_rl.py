"""`python -m crucible.jobs.online_rl`: a TrainingRun whose `config.online` asks for
online RL, rounds of generate -> train -> update (docs/agents.md, "Online RL as a
TrainingRun").

The policy starts from spec.initFrom's checkpoint, else from a fresh model of config.model
seeded by `config.online.seed`. Each round's health is logged as run metrics at the step of
the round (`rl/...`, with `loss` and `reward` beside them for the charts every run has).
Every spec.checkpoints.everySteps rounds, and after the last, a checkpoint at the step of the
rounds done (the policy version's update count) holds the weights, the optimizer and the
run's progress with its buffer, and carries the model in its meta like a trainer's, so evals
and rollouts load it as one; an attempt resumes from the latest exactly.

Each generated batch's episodes are written to `trajectories/batch-NNNNN.jsonl` under the
run's outputs as the trainer accepts them, each stamped with its policy version. A batch
generated again after a resume is the same batch (same seed, same weights) and replaces its
file. After the last round the directory is published as dataset `config.online.output`
(default `<run name>-trajectories`), produced by the run, its schema mapping each policy
version the run checkpointed to that checkpoint. SIGTERM ends the round in
progress, saves and exits 143.
"""

import json
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crucible.config.parse import ConfigError
from crucible.jobs.artifacts import resolve_model, run_fetch
from crucible.jobs.checkpoints import (
    checked_tokenizer,
    checkpoint_meta,
    load_weights,
    model_spec_from_meta,
)
from crucible.jobs.env import read_env
from crucible.jobs.process import run_job, setup_torch
from crucible.models.build import build_from_spec

if TYPE_CHECKING:
    from crucible.agents.policy import PolicyVersion
    from crucible.agents.records import EpisodeRecord
    from crucible.config.parse import OnlineJob
    from crucible.online_rl.generator_endpoints import Endpoint
    from crucible.online_rl.health import RoundHealth
    from crucible.online_rl.loop import OnlineRL
    from crucible.schemas.lineage import CheckpointPublic
    from crucible.sdk.run import Run

log = logging.getLogger("crucible.jobs.online_rl")

TRAJECTORIES = "trajectories"
"""The directory under the run's outputs that the trajectories are written to."""

POLICY_WEIGHTS = "policy-weights"
"""The directory under the run's outputs that each policy version goes through to a
generator in a process of its own (`generator: process`)."""


def main() -> None:
    run_job("online_rl", online_rl)


def online_rl() -> None:
    env = read_env()
    job = env.config.online
    if job is None:
        raise ConfigError("an online RL run needs config.online (CRUCIBLE_CONFIG has none)")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        raise ConfigError(
            f"online RL runs in one process, and this run has {world} (WORLD_SIZE); give it "
            "nodes: 1 and processesPerNode: 1 (gpusPerNode beyond 1 goes unused)"
        )
    every = env.spec_object("checkpoints").get("everySteps", 100)  # the spec's default
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ConfigError(f"spec.checkpoints.everySteps must be a positive integer: {every}")

    import torch

    import crucible
    from crucible.agents.loading import load_environment
    from crucible.agents.policy import PolicyVersion
    from crucible.online_rl.loop import OnlineRL

    source = load_environment(
        job.environment,
        job.options,
        where="config.online.environment",
        options_where="config.online.options",
    )
    torch_setup = setup_torch(distributed=False)
    run = crucible.init()
    model_spec = env.config.model
    start = PolicyVersion(0)
    record = None
    if env.inputs.checkpoint is not None:
        record = run.get_checkpoint(env.inputs.checkpoint)
        model_spec = model_spec_from_meta(record.id, record.meta) or model_spec
        start = PolicyVersion(0, record.id, record.step)
    resolved = resolve_model(model_spec, run_fetch(run, env.inputs.artifacts))
    tokenizer = checked_tokenizer(resolved.local)
    torch.manual_seed(job.rl.seed)
    model = build_from_spec(resolved.local, device=torch_setup.device)
    if record is not None:
        weights = model.state_dict()
        load_weights(run, record, weights)
        model.load_state_dict(weights)
        log.info(
            "policy from checkpoint %d (run %d, step %d)", record.id, record.run_id, record.step
        )

    trajectories = run.outputs_dir / TRAJECTORIES
    trajectories.mkdir(parents=True, exist_ok=True)
    meta = checkpoint_meta(resolved.pinned, env.config.task, "online")

    online = OnlineRL(
        job.rl,
        model,
        tokenizer,
        source,
        start=start,
        on_batch=lambda index, records: write_batch(trajectories, index, records),
        exchange_dir=run.outputs_dir / POLICY_WEIGHTS,
        endpoints=generator_pods(job.rl.generator),
    )
    try:
        _rounds(run, job, online, every, meta, start, trajectories)
    finally:
        online.close()


def generator_pods(generator: str) -> Callable[[int], "Endpoint"] | None:
    """With `generator: pod` on Kubernetes, where generator i listens (the operator's
    generator pods write it to the directory it names in CRUCIBLE_GENERATOR_ENDPOINTS);
    None otherwise, and in the local mode the generators are processes of this one."""
    from crucible.domain.resources import GENERATOR_ENDPOINTS_ENV
    from crucible.online_rl.generator_endpoints import endpoint_key_from_env, wait_for_endpoint
    from crucible.online_rl.remote_generator import START_TIMEOUT_S

    directory = os.environ.get(GENERATOR_ENDPOINTS_ENV)
    if generator != "pod" or not directory:
        if generator == "pod":
            log.info("generator: pod without generator pods (local mode): processes instead")
        return None
    key = endpoint_key_from_env()
    return partial(wait_for_endpoint, Path(directory), key=key, timeout=START_TIMEOUT_S)


def _rounds(
    run: "Run",
    job: "OnlineJob",
    online: "OnlineRL",
    every: int,
    meta: dict[str, Any],
    start: "PolicyVersion",
    trajectories: Path,
) -> None:
    """The rounds left, their checkpoints, and the trajectories published at the end."""
    from crucible.online_rl.checkpoint import OnlineState
    from crucible.training.train import TRAINER_STATE_KEY

    state = {TRAINER_STATE_KEY: OnlineState(online)}
    if run.load_checkpoint(state) is not None:
        log.info("resumed after round %d (policy version %d)", online.round, online.version.update)

    stopping = False

    def end_of_round(health: "RoundHealth") -> None:
        """Log the round; checkpoint it when it is due, the last, or the one SIGTERM ends
        (the run is between rounds here; the batches sampled ahead go into the checkpoint)."""
        nonlocal stopping
        done = health.round + 1
        run.log(round_metrics(health), step=done)
        log.info(
            "round %d/%d reward %s loss %s generate %.2fs train %.2fs idle %.2fs",
            done,
            job.rounds,
            _number(health.mean_reward),
            _number(health.loss),
            health.generate_s,
            health.train_s,
            health.idle_s,
        )
        for note in health.generator_notes:
            log.warning("round %d: %s", done, note.detail)
        stopping = run.preempted
        if stopping or done % every == 0 or done == job.rounds:
            version = online.version.to_record()
            run.save_checkpoint(done, state, meta={**meta, "policy": version})

    online.on_round = end_of_round
    if online.round < job.rounds:
        # One call for all the rounds left: the generator works ahead of the trainer only
        # within a call.
        online.run(job.rounds - online.round, should_stop=lambda: stopping)
    if stopping:
        log.info("stopped after round %d on SIGTERM, checkpoint saved", online.round)
        run.finish(preempted=True)
        return
    name = job.output or f"{run.name}-trajectories"
    published = run.publish_dataset(
        name,
        trajectories,
        record_count=sum(_lines(p) for p in trajectories.glob("*.jsonl")),
        schema={
            "format": "jsonl",
            "records": "crucible.agents.records.EpisodeRecord",
            "environment": job.environment,
            # A record's policy.update -> the checkpoint holding those weights, for the
            # versions the run kept: trajectories join their policy through the lineage.
            "policy_checkpoints": policy_checkpoints(run.checkpoints()),
            "policy_start_checkpoint": start.checkpoint_id,
        },
    )
    log.info("trajectories published as %s@%s", name, published.version)
    run.finish()


def policy_checkpoints(checkpoints: "list[CheckpointPublic]") -> dict[str, int]:
    """The run's live checkpoints by the policy version they hold (JSON keys: strings)."""
    by_version = {str(c.meta["policy"]["update"]): c.id for c in checkpoints if "policy" in c.meta}
    return dict(sorted(by_version.items(), key=lambda item: int(item[0])))


def round_metrics(health: "RoundHealth") -> dict[str, float]:
    """A round's health as run metrics: every number under `rl/`, and the two every run's
    charts show first under their usual names."""
    values = {f"rl/{key}": value for key, value in health.metrics().items()}
    if health.loss is not None:
        values["loss"] = health.loss
    if health.mean_reward is not None:
        values["reward"] = health.mean_reward
    return values


def write_batch(directory: Path, index: int, records: "list[EpisodeRecord]") -> None:
    """Batch `index`'s episodes as JSON lines, written whole or not at all."""
    path = directory / f"batch-{index:05d}.jsonl"
    partial = path.with_suffix(".partial")
    with partial.open("w") as out:
        for record in records:
            out.write(json.dumps(record.to_record(), sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)


def _lines(path: Path) -> int:
    with path.open() as lines:
        return sum(1 for _ in lines)


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}"


if __name__ == "__main__":
    main()
