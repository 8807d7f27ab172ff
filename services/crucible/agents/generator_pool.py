"""Several generator processes sampling each batch together (`OnlineRLConfig.generators`).

A batch's tasks are split into contiguous shares of whole groups, as equal as the groups
allow, one per generator, and played at the same time; each share's episodes are numbered
by their place in the whole batch, so an episode's seeds, and with them its tokens, do
not depend on how many generators there are or which one played it. The records come back
in the batch's order.

A policy version is written once, as one safetensors file in the exchange directory, and
every generator loads it from there at the same time; the file of the version before is
removed once all have the new one. The pool has `Generator`'s interface (`version`,
`generate`, `load_weights`) and `close`.
"""

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EpisodeRecord
from crucible.agents.remote_generator import RemoteGenerator, write_weights


def shares(tasks: int, group_size: int, parts: int) -> list[tuple[int, int]]:
    """(start, end) of each of `parts` contiguous shares of `tasks` played tasks, cut only
    between groups of `group_size`; the first shares take one group more when the groups
    do not divide evenly. A share may be empty when there are fewer groups than parts."""
    groups = tasks // group_size
    if groups * group_size != tasks:
        raise ValueError(f"{tasks} played tasks are not whole groups of {group_size}")
    base, extra = divmod(groups, parts)
    bounds, start = [], 0
    for part in range(parts):
        end = start + (base + (1 if part < extra else 0)) * group_size
        bounds.append((start, end))
        start = end
    return bounds


class GeneratorPool:
    def __init__(
        self,
        start: Callable[[int], RemoteGenerator],
        count: int,
        *,
        group_size: int,
        directory: Path,
    ) -> None:
        """`start(i)` starts generator i; all start from the same policy version."""
        self.group_size = group_size
        self.directory = directory
        self._latest: Path | None = None
        self._threads = ThreadPoolExecutor(count, thread_name_prefix="generator-pool")
        self.generators: list[RemoteGenerator] = []
        try:
            for number in range(count):
                self.generators.append(start(number))
        except BaseException:
            self.close()  # the ones that started
            raise
        self.version = self.generators[0].version

    def generate(self, tasks: Sequence[dict[str, Any]], *, seed: int) -> list[EpisodeRecord]:
        """One episode per task, the shares played at once; the records in `tasks`' order."""
        bounds = shares(len(tasks), self.group_size, len(self.generators))
        futures = [
            self._threads.submit(generator.generate, tasks[a:b], seed=seed, first_index=a)
            for generator, (a, b) in zip(self.generators, bounds, strict=True)
            if b > a
        ]
        return [record for future in futures for record in future.result()]

    def load_weights(
        self, weights: nn.Module | Mapping[str, torch.Tensor], version: PolicyVersion
    ) -> float:
        """Write `weights` once and have every generator load them; returns the seconds."""
        started = time.perf_counter()
        path = write_weights(weights, version, self.directory)
        futures = [self._threads.submit(g.load_file, path, version) for g in self.generators]
        for future in futures:
            future.result()
        if self._latest is not None and self._latest != path:
            self._latest.unlink(missing_ok=True)
        self._latest = path
        self.version = version
        return time.perf_counter() - started

    def close(self) -> None:
        """Stop every generator process and remove the last weights' file."""
        for generator in self.generators:
            generator.close()
        self._threads.shutdown()
        if self._latest is not None:
            self._latest.unlink(missing_ok=True)
