"""Several generator processes sampling each batch together (`OnlineRLConfig.generators`).

A batch's tasks are split into contiguous shares of whole groups, one per generator, and
played at the same time; each share's episodes are numbered by their place in the whole
batch, so an episode's seeds, and with them its tokens, do not depend on how many
generators there are or which one played it. The records come back in the batch's order.

A generator that falls behind: the batch waits for its slowest share, so the pool times
each generator's share and, when one plays at less than `BEHIND_SHARE` of the fastest one's
rate, notes it with the two rates and cuts the next batch in proportion to the rates (each
still playing at least one group, so its rate keeps being measured); while none is behind
the shares stay equal, and the same generators get the same episodes. A generator that
does not answer within `timeout_s`, or is gone, is dropped from the pool with the reason
noted and its share played again by the others: the seeds are the share's, so the
episodes are those it would have played. The run fails only when no generator is left.
The notes are taken by the run (`take_notes`) into its round's health.

A policy version is written once, as one safetensors file in the exchange directory, and
every generator loads it from there at the same time; the file of the version before is
removed once all have the new one. The pool has `Generator`'s interface (`version`,
`generate`, `load_weights`) and `close`.
"""

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EpisodeRecord
from crucible.online_rl.health import GeneratorNote
from crucible.online_rl.remote_generator import (
    GeneratorProcessError,
    GeneratorUnavailable,
    RemoteGenerator,
    write_weights,
)

BEHIND_SHARE = 0.5
"""A generator playing at less than this share of the fastest one's episodes per second is
behind; a generator at half the others' speed would hold a batch of equal shares up by as
long again as the rest take."""


def shares(tasks: int, group_size: int, parts: int) -> list[tuple[int, int]]:
    """(start, end) of each of `parts` contiguous shares of `tasks` played tasks, cut only
    between groups of `group_size`; the first shares take one group more when the groups
    do not divide evenly. A share may be empty when there are fewer groups than parts."""
    return weighted_shares(0, tasks, group_size, [1.0] * parts)


def weighted_shares(
    start: int, end: int, group_size: int, weights: Sequence[float]
) -> list[tuple[int, int]]:
    """(start, end) of contiguous shares of the played tasks `start` to `end`, cut only
    between groups of `group_size`, the groups in proportion to `weights` (largest
    remainders first, the earlier share among equals). With at least as many groups as
    shares, every share gets one group or more."""
    groups, uneven = divmod(end - start, group_size)
    if uneven:
        raise ValueError(f"{end - start} played tasks are not whole groups of {group_size}")
    if not weights or any(not w > 0 for w in weights):
        raise ValueError(f"share weights must be positive, got {list(weights)}")
    floor = 1 if groups >= len(weights) else 0
    spare = groups - floor * len(weights)
    total = sum(weights)
    exact = [spare * w / total for w in weights]
    counts = [floor + int(e) for e in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - int(exact[i])), i))
    for i in by_remainder[: groups - sum(counts)]:
        counts[i] += 1
    bounds, at = [], start
    for count in counts:
        bounds.append((at, at + count * group_size))
        at += count * group_size
    return bounds


class GeneratorPool:
    def __init__(
        self,
        start: Callable[[int], RemoteGenerator],
        count: int,
        *,
        group_size: int,
        directory: Path,
        timeout_s: float,
    ) -> None:
        """`start(i)` starts generator i; all start from the same policy version. A share
        or a weight update not answered in `timeout_s` drops the generator."""
        self.group_size = group_size
        self.directory = directory
        self.timeout_s = timeout_s
        self._latest: Path | None = None
        self._threads = ThreadPoolExecutor(count, thread_name_prefix="generator-pool")
        self.live: dict[int, RemoteGenerator] = {}
        """The generators still in the pool, by number."""

        self._rates: dict[int, float] = {}
        """Episodes per second of each generator's last share."""

        self._weights: dict[int, float] = {}
        """How the next batch is cut: equal unless one is behind."""

        self.played: dict[int, int] = {}
        """Episodes each generator played of the last batch."""

        self._notes: list[GeneratorNote] = []
        self._notes_lock = threading.Lock()
        try:
            for number in range(count):
                self.live[number] = start(number)
        except BaseException:
            self.close()  # the ones that started
            raise
        self.version = self.live[0].version

    @property
    def generators(self) -> list[RemoteGenerator]:
        return list(self.live.values())

    def generate(self, tasks: Sequence[dict[str, Any]], *, seed: int) -> list[EpisodeRecord]:
        """One episode per task, the shares played at once; the records in `tasks`' order.
        A share whose generator is dropped is played again by the others."""
        played: dict[int, list[EpisodeRecord]] = {}
        self.played = {}
        left = [(0, len(tasks))]
        while left:
            numbers = list(self.live)
            weights = [self._weights.get(n, 1.0) for n in numbers]
            pieces: dict[int, list[tuple[int, int]]] = {n: [] for n in numbers}
            for a, b in left:
                cuts = weighted_shares(a, b, self.group_size, weights)
                for number, (x, y) in zip(numbers, cuts, strict=True):
                    if y > x:
                        pieces[number].append((x, y))
            # One request at a time on a generator's connection: its pieces in turn.
            work = {
                number: self._threads.submit(self._play, number, tasks, mine, seed)
                for number, mine in pieces.items()
                if mine
            }
            left = []
            timed: dict[int, tuple[int, float]] = {}
            for number, future in work.items():
                try:
                    records, seconds = future.result()
                except GeneratorUnavailable as error:
                    self._drop(number, str(error))
                    left += pieces[number]
                    continue
                played.update(records)
                episodes = sum(y - x for x, y in pieces[number])
                timed[number] = (episodes, seconds)
                self.played[number] = self.played.get(number, 0) + episodes
            self._measure(timed)
        return [record for start in sorted(played) for record in played[start]]

    def load_weights(
        self, weights: nn.Module | Mapping[str, torch.Tensor], version: PolicyVersion
    ) -> float:
        """Write `weights` once and have every generator load them; returns the seconds."""
        started = time.perf_counter()
        path = write_weights(weights, version, self.directory)
        futures = {
            number: self._threads.submit(g.load_file, path, version, timeout=self.timeout_s)
            for number, g in self.live.items()
        }
        for number, future in futures.items():
            try:
                future.result()
            except GeneratorUnavailable as error:
                self._drop(number, str(error))
        if self._latest is not None and self._latest != path:
            self._latest.unlink(missing_ok=True)
        self._latest = path
        self.version = version
        return time.perf_counter() - started

    def take_notes(self) -> list[GeneratorNote]:
        """What the pool noted since the last call, oldest first."""
        with self._notes_lock:
            notes, self._notes = self._notes, []
        return notes

    def close(self) -> None:
        """Stop every generator process and remove the last weights' file."""
        for generator in self.live.values():
            generator.close()
        self._threads.shutdown()
        if self._latest is not None:
            self._latest.unlink(missing_ok=True)

    def _play(
        self,
        number: int,
        tasks: Sequence[dict[str, Any]],
        pieces: Sequence[tuple[int, int]],
        seed: int,
    ) -> tuple[dict[int, list[EpisodeRecord]], float]:
        """Generator `number` plays each (start, end) of `pieces` in turn; the records by
        start and the seconds it took."""
        started = time.perf_counter()
        generator = self.live[number]
        records = {
            a: generator.generate(tasks[a:b], seed=seed, first_index=a, timeout=self.timeout_s)
            for a, b in pieces
        }
        return records, time.perf_counter() - started

    def _measure(self, timed: Mapping[int, tuple[int, float]]) -> None:
        """Each generator's rate from the share it just played; shares in proportion to
        the rates while one is behind, equal otherwise."""
        for number, (episodes, seconds) in timed.items():
            if number in self.live:
                self._rates[number] = episodes / max(seconds, 1e-9)
        rates = {n: self._rates[n] for n in self.live if n in self._rates}
        if len(rates) < 2:
            self._weights = {}
            return
        fastest = max(rates, key=lambda n: rates[n])
        behind = [n for n, rate in rates.items() if rate < BEHIND_SHARE * rates[fastest]]
        for number in behind:
            if number in timed:  # noted once per share it played
                self._note(
                    "behind",
                    number,
                    f"generator {number} is behind: {rates[number]:.3g} episodes/s against "
                    f"{rates[fastest]:.3g} of generator {fastest}; the next batch is cut in "
                    "proportion to their rates",
                )
        self._weights = dict(rates) if behind else {}

    def _drop(self, number: int, reason: str) -> None:
        generator = self.live.pop(number)
        generator.abandon()
        self._rates.pop(number, None)
        self._weights.pop(number, None)
        left = len(self.live)
        self._note(
            "dropped",
            number,
            f"generator {number} dropped from the pool ({left} left): {reason}",
        )
        if not self.live:
            raise GeneratorProcessError(f"no generator is left in the pool; the last: {reason}")

    def _note(self, kind: str, number: int, detail: str) -> None:
        with self._notes_lock:
            self._notes.append(GeneratorNote(kind, number, detail))
