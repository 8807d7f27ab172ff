"""Online RL in one process: rounds of generate -> train -> update the generator's weights
(docs/agents.md, "Online RL in process").

Each round the trainer takes the groups the buffer holds, trains `updates_per_round`
optimizer steps on them, publishes a new policy version and copies it into the generator.
Batch i is sampled by policy version max(0, i - `max_staleness`), so a sample is at most
`max_staleness` versions old when trained on, and the importance ratio corrects for it.
With 0 a round first generates its own batch with the current weights (strictly
alternating). With k >= 1 the generator, in a thread, samples the batches of the next k
rounds while the trainer trains on this one: with 1 it is idle again when the round ends
and takes the new weights then; with more it is still busy, so the new weights wait for it
as a snapshot (`weights_snapshot`), which it loads before the batch that needs them.

`run()` -> `_round()` -> `_train()` reads top to bottom; what a round did comes back as
a `RoundHealth`, and goes to `on_round` as it ends. `state_dict()` between rounds is
everything that decides the rest of the run: a fresh `OnlineRL` that loads it goes on as
the first would have.
"""

import hashlib
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from crucible.agents.loading import EnvironmentSource
from crucible.agents.policy import PolicyVersion
from crucible.agents.records import FAILED_ENDS, EpisodeRecord
from crucible.agents.sandbox import Sandbox
from crucible.config.online_rl import OnlineRLConfig
from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer
from crucible.online_rl.buffer import Discard, Group, SampleBuffer
from crucible.online_rl.generator import Generator, weights_snapshot
from crucible.online_rl.generator_endpoints import Endpoint
from crucible.online_rl.generator_pool import GeneratorPool, shares
from crucible.online_rl.health import (
    RoundHealth,
    check_agreement,
    check_failures,
    failed_by_reason,
)
from crucible.online_rl.kv_sizing import generator_engine_config
from crucible.online_rl.learner import Learner, LogprobComparison
from crucible.online_rl.remote_generator import RemoteGenerator
from crucible.online_rl.rl_rows import episode_examples, group_advantages
from crucible.training.data import Example

RoundHook = Callable[[RoundHealth], None]
"""Receives each round's health as the round ends (`health.metrics()` for a metrics log);
the run is between rounds then, so `state_dict()` may be taken."""

BatchHook = Callable[[int, list[EpisodeRecord]], None]
"""Receives each generated batch (its round's index and every episode, failed ones too) as
the trainer accepts it into the buffer, before any checkpoint can hold it: where a job
writes its trajectories."""


@dataclass
class _GeneratedBatch:
    index: int
    """The round it was generated for."""

    records: list[EpisodeRecord]
    seconds: float
    weight_load_s: float = 0.0
    """Loading the snapshot of its policy version first, when the generator had another."""

    def to_record(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "records": [r.to_record() for r in self.records],
            "seconds": self.seconds,
            "weight_load_s": self.weight_load_s,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "_GeneratedBatch":
        records = [EpisodeRecord.from_record(r) for r in record["records"]]
        return cls(record["index"], records, record["seconds"], record["weight_load_s"])


@dataclass
class _Tally:
    """What a round has done so far, for its `RoundHealth`."""

    discarded_before: Counter[Discard]
    generate_s: float = 0.0
    train_s: float = 0.0
    idle_s: float = 0.0
    weight_update_s: float = 0.0
    episodes: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    accepted: int = 0
    trained: int = 0
    updates: int = 0
    rewards: list[float] = field(default_factory=list)
    tool_calls: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    first_update: LogprobComparison | None = None
    groups: list[str] = field(default_factory=list)


@dataclass
class _Exchange:
    """The directory the weights go through to a generator process: the one given, else a
    temporary one, removed at the end."""

    given: Path | None

    def __post_init__(self) -> None:
        self.path = self.given or Path(tempfile.mkdtemp(prefix="crucible-policy-"))

    def remove(self) -> None:
        if self.given is None:
            shutil.rmtree(self.path, ignore_errors=True)


class OnlineRL:
    def __init__(
        self,
        config: OnlineRLConfig,
        model: LanguageModel,
        tokenizer: Tokenizer,
        source: EnvironmentSource,
        *,
        sandbox: Sandbox | None = None,
        start: PolicyVersion | None = None,
        on_round: RoundHook | None = None,
        on_batch: BatchHook | None = None,
        exchange_dir: Path | None = None,
        endpoints: Callable[[int], Endpoint] | None = None,
    ) -> None:
        """model: the policy, trained in place; the generator samples from a copy of it.
        source: the environment (`load_environment`). start: the starting policy's version,
        naming the checkpoint it was loaded from (version 0 of no checkpoint by default).
        exchange_dir: where the weights go to a generator in a process of its own (a
        temporary directory by default). `close()` stops that process. endpoints: with
        `generator: pod`, generator i's endpoint (`generator_endpoints.wait_for_endpoint`);
        exchange_dir must then be a directory the pods read too."""
        self.config = config
        self.source = source
        self.on_round = on_round
        self.on_batch = on_batch
        self.max_seq_len = int(model.max_seq_len)
        self.version = start or PolicyVersion(0)
        """The trainer's policy version: updates published so far."""
        self.round = 0
        """Rounds done."""
        self.next_batch = 0
        """The round whose batch is generated next (up to `max_staleness` ahead of `round`
        while the generator works ahead)."""
        self.next_accept = 0
        """The round whose batch goes into the buffer next."""
        self._in_flight: dict[int, Future[_GeneratedBatch]] = {}
        """Batches the generator thread is sampling, by round."""
        self._ready: dict[int, _GeneratedBatch] = {}
        """Batches sampled ahead and not yet accepted, kept through a checkpoint
        (`progress()` waits for those in flight and keeps them here)."""
        self._snapshots: dict[int, dict[str, Any]] = {}
        """Policy versions the busy generator still has to load, by update count."""
        self.buffer = SampleBuffer(max_staleness=config.max_staleness)
        self.learner = Learner(
            model,
            pad_id=tokenizer.PAD,
            lr=config.lr,
            weight_decay=config.weight_decay,
            grad_clip=config.grad_clip,
            clip_eps=config.clip_eps,
            kl_coef=config.kl_coef,
            micro_batch_size=config.micro_batch_size,
        )
        self._exchange: _Exchange | None = None
        sandbox = sandbox or Sandbox()
        self.generator: Generator | GeneratorPool
        if config.generator in ("process", "pod"):
            self._exchange = _Exchange(exchange_dir)
            # Each process plays at most the largest share of a batch at once.
            largest_share = max(
                b - a
                for a, b in shares(config.episodes_per_round, config.group_size, config.generators)
            )
            episode = replace(
                config.episode, concurrency=min(config.episode.concurrency, largest_share)
            )
            start_generator = partial(
                RemoteGenerator,
                model,
                tokenizer,
                source,
                version=self.version,
                engine_config=generator_engine_config(config.engine, episode, model),
                episode_config=episode,
                sandbox=sandbox,
                directory=self._exchange.path,
            )
            # Generator pods are found by their endpoints; without any (the local mode)
            # they are processes of this one.
            self.generator = GeneratorPool(
                lambda index: start_generator(
                    endpoint=None if endpoints is None else endpoints(index)
                ),
                config.generators,
                group_size=config.group_size,
                directory=self._exchange.path,
                timeout_s=config.generator_timeout_s,
            )
        else:
            self.generator = Generator(
                model,
                tokenizer,
                source,
                version=self.version,
                engine_config=generator_engine_config(config.engine, config.episode, model),
                episode_config=config.episode,
                sandbox=sandbox,
            )

    def close(self) -> None:
        """Stop the generator's process, if it has one, and remove what it left."""
        self.generator.close()
        if self._exchange is not None:
            self._exchange.remove()

    def run(
        self, rounds: int, *, should_stop: Callable[[], bool] | None = None
    ) -> list[RoundHealth]:
        """Run `rounds` more rounds; each one's health, in order. `should_stop` is asked
        after each round: true ends the run there (a preemption), with the batch generated
        ahead, if any, in the buffer."""
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"run at least one round, got rounds={rounds!r}")
        last = self.round + rounds
        history: list[RoundHealth] = []
        # One thread: the generator samples one batch at a time, in order.
        with ThreadPoolExecutor(1, thread_name_prefix="generator") as pool:
            while self.round < last:
                history.append(self._round(pool, last))
                if should_stop is not None and should_stop():
                    break
            # What was sampled ahead is kept for the next call, not lost with the thread.
            # (A round that raised leaves it: the run is over, its last state_dict whole.)
            self._settle()
        return history

    def _round(self, pool: ThreadPoolExecutor, last: int) -> RoundHealth:
        started = time.perf_counter()
        tally = _Tally(discarded_before=Counter(self.buffer.discarded))
        if self.next_accept <= self.round:
            # This round's batch is not in the buffer yet: every round of a synchronous
            # run, the first of an asynchronous one. The trainer waits for it.
            self._accept_next(tally)
        # Work ahead: the batches of the next max_staleness rounds, those the run has.
        while self.next_batch < min(last, self.round + self.config.max_staleness + 1):
            index = self.next_batch
            self._in_flight[index] = pool.submit(self._generate, index)
            self.next_batch += 1

        training = time.perf_counter()
        self._train(tally)
        tally.train_s = time.perf_counter() - training
        self.version = self.version.next()

        if self.next_accept < self.next_batch:
            self._accept_next(tally)  # the next round's batch, sampled while this trained
        self._publish(tally)
        health = self._health(tally, time.perf_counter() - started)
        self.round += 1
        if self.on_round is not None:
            self.on_round(health)
        return health

    def _accept_next(self, tally: _Tally) -> None:
        """Batch `next_accept` into the buffer: kept from before, sampled in the thread
        (waiting for it, as idle time), or sampled here when it was not started."""
        index = self.next_accept
        waited = time.perf_counter()
        batch = self._ready.pop(index, None)
        if batch is None and index in self._in_flight:
            batch = self._in_flight.pop(index).result()
        if batch is None:
            self.next_batch = max(self.next_batch, index + 1)
            batch = self._generate(index)
        tally.idle_s += time.perf_counter() - waited
        tally.weight_update_s += batch.weight_load_s
        self._accept(batch, tally)
        self.next_accept = index + 1

    def _publish(self, tally: _Tally) -> None:
        """Bring the trainer's new version to the generator: straight into its copy when it
        is idle, else as a snapshot it loads before the batch that needs it."""
        started = time.perf_counter()
        if not self._in_flight:
            self.generator.load_weights(self.learner.model, self.version)
            self._snapshots.clear()
        elif self.version.update + self.config.max_staleness >= self.next_batch:
            self._snapshots[self.version.update] = weights_snapshot(self.learner.model)
        tally.weight_update_s += time.perf_counter() - started

    def _version_for(self, index: int) -> int:
        """The policy version (update count) that samples round `index`'s batch."""
        return max(0, index - self.config.max_staleness)

    def _generate(self, index: int) -> _GeneratedBatch:
        """The episodes of round `index`'s batch: its tasks, each played `group_size`
        times, by its policy version (loaded from its snapshot first when the generator has
        another); in the generator thread when sampled ahead."""
        loaded = 0.0
        wanted = self._version_for(index)
        snapshot = self._snapshots.pop(wanted, None)
        if snapshot is not None and self.generator.version.update != wanted:
            version = replace(self.generator.version, update=wanted)
            loaded = self.generator.load_weights(snapshot, version)
        elif self.generator.version.update < wanted:
            raise RuntimeError(
                f"batch {index} is for policy version {wanted}, which never reached the "
                f"generator (it has {self.generator.version.update})"
            )
        # Else the generator has it, or a newer one: a batch the last call of run() left
        # for later, sampled by the weights the generator took at that call's end.
        started = time.perf_counter()
        seed = batch_seed(self.config.seed, index)
        tasks = self.source.tasks(self.config.groups_per_round, seed=seed)
        played = [task for task in tasks for _ in range(self.config.group_size)]
        records = self.generator.generate(played, seed=seed)
        return _GeneratedBatch(index, records, time.perf_counter() - started, loaded)

    def _settle(self) -> None:
        """Wait for every batch in flight and keep it, to be accepted in its round."""
        for index in sorted(self._in_flight):
            self._ready[index] = self._in_flight.pop(index).result()

    def _accept(self, batch: _GeneratedBatch, tally: _Tally) -> None:
        """Into the buffer, a group per task, without the failed episodes (counted)."""
        check_failures(
            f"round {batch.index}",
            batch.records,
            max_failed_fraction=self.config.max_failed_fraction,
        )
        if self.on_batch is not None:
            self.on_batch(batch.index, batch.records)
        tally.generate_s += batch.seconds
        tally.episodes += len(batch.records)
        tally.failed.update(failed_by_reason(batch.records))
        k = self.config.group_size
        for task in range(self.config.groups_per_round):
            played = batch.records[task * k : (task + 1) * k]
            valid = tuple(r for r in played if r.end not in FAILED_ENDS)
            if valid and self.buffer.add(Group(f"{batch.index}/{task}", valid)):
                tally.accepted += len(valid)

    def _train(self, tally: _Tally) -> None:
        share = self.config.groups_per_round // self.config.updates_per_round
        for _ in range(self.config.updates_per_round):
            groups = self.buffer.take(share, trainer_version=self.version.update)
            examples = self._examples(groups)
            if not examples:
                continue
            staleness = [self.version.update - g.version for g in groups]
            on_policy_first = tally.first_update is None and max(staleness) == 0
            result = self.learner.update(
                examples, before_step=self._check_agreement if on_policy_first else None
            )
            if tally.first_update is None:
                tally.first_update = result.comparison
            tally.updates += 1
            tally.losses.append(result.loss)
            tally.grad_norms.append(result.grad_norm)
            tally.staleness += staleness
            tally.groups += [g.id for g in groups]
            episodes = [e for g in groups for e in g.episodes]
            tally.trained += len(episodes)
            tally.rewards += [e.reward for e in episodes]
            tally.tool_calls += [sum(len(t.tool_calls) for t in e.turns) for e in episodes]

    def _check_agreement(self, comparison: LogprobComparison) -> None:
        check_agreement(self.round, comparison, tolerance=self.config.logprob_tolerance)

    def _examples(self, groups: list[Group]) -> list[Example]:
        examples: list[Example] = []
        for group in groups:
            advantages = group_advantages([e.reward for e in group.episodes])
            for episode, advantage in zip(group.episodes, advantages, strict=True):
                examples += episode_examples(episode, advantage, max_seq_len=self.max_seq_len)
        return examples

    def _health(self, tally: _Tally, wall_s: float) -> RoundHealth:
        discarded = Counter(self.buffer.discarded)
        discarded.subtract(tally.discarded_before)
        pool = self.generator if isinstance(self.generator, GeneratorPool) else None
        return RoundHealth(
            round=self.round,
            version=self.version.update,
            wall_s=wall_s,
            generate_s=tally.generate_s,
            train_s=tally.train_s,
            weight_update_s=tally.weight_update_s,
            idle_s=tally.idle_s,
            episodes=tally.episodes,
            episodes_failed=dict(sorted(tally.failed.items())),
            samples_accepted=tally.accepted,
            discarded={str(k): v for k, v in sorted(discarded.items()) if v},
            samples_trained=tally.trained,
            updates=tally.updates,
            staleness_max=max(tally.staleness) if tally.staleness else None,
            mean_reward=_mean(tally.rewards),
            tool_calls_per_episode=_mean(tally.tool_calls),
            loss=_mean(tally.losses),
            grad_norm=_mean(tally.grad_norms),
            first_update=tally.first_update,
            trained_groups=tuple(tally.groups),
            # What the pool noted since the last round: about this round's batch, or one
            # sampled ahead (a generator behind or dropped while the trainer trained).
            generators=None if pool is None else len(pool.live),
            generator_notes=() if pool is None else tuple(pool.take_notes()),
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything that decides the rest of the run, taken between rounds (from
        `on_round`, or after `run`): the model, the optimizer (and the KL reference), and as
        one JSON string the `progress()`."""
        return {**self.learner.state_dict(), "progress": json.dumps(self.progress())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from `state`: the generator gets the loaded weights, as it had them
        between rounds."""
        self.learner.load_state_dict(state)
        self.load_progress(json.loads(state["progress"]))

    def progress(self) -> dict[str, Any]:
        """The run's state beside the learner's tensors, as JSON: the version, the round,
        the batches generated and accepted, the batches sampled ahead (after waiting for
        those in flight) and the buffer with its accepted samples not yet trained on."""
        self._settle()
        return {
            "version": self.version.to_record(),
            "round": self.round,
            "next_batch": self.next_batch,
            "next_accept": self.next_accept,
            "ready": [self._ready[i].to_record() for i in sorted(self._ready)],
            "buffer": self.buffer.state_dict(),
        }

    def load_progress(self, progress: dict[str, Any]) -> None:
        """Go on from `progress()`, the learner's weights already loaded: the generator
        gets them, as it had them between rounds."""
        self.version = PolicyVersion.from_record(progress["version"])
        self.round = int(progress["round"])
        self.next_batch = int(progress["next_batch"])
        self.next_accept = int(progress["next_accept"])
        ready = (_GeneratedBatch.from_record(r) for r in progress["ready"])
        self._ready = {batch.index: batch for batch in ready}
        self.buffer.load_state_dict(progress["buffer"])
        # The batches still to sample need this version or later: nothing older is kept.
        self._snapshots.clear()
        self.generator.load_weights(self.learner.model, self.version)


def batch_seed(seed: int, index: int) -> int:
    """The seed of round `index`'s tasks and sampling."""
    digest = hashlib.blake2b(f"online:{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
