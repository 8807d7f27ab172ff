"""A job's prompts split over its replicas, and their outputs merged back in order.

Replica r of R takes a contiguous share of the items, in whole waves (the rollout's
`batch_size` prompts, which always run on an engine of their own and so come out the same
bit for bit wherever they run), and writes what it made as a JSONL file
of its own, under a directory every replica reaches (the run's outputs directory: on
Kubernetes, storage every pod mounts). Rank 0 waits for every share and concatenates them in
rank order, which gives the same bytes as one replica writing everything: the dataset is the
same whatever the replica count. The shares outlive an attempt: when a replica is lost and
the job runs again, the shares already written are kept and only the missing ones are made.
"""

import logging
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crucible.config.parse import ConfigError
from crucible.jobs.datasets import write_atomically
from crucible.training.records import write_jsonl

log = logging.getLogger("crucible.jobs")

POLL_SECONDS = 1.0
"""How often rank 0 looks for the other replicas' shares."""

PRESENCE_SECONDS = 120.0
"""How long rank 0 waits to see every replica's presence mark. torchrun starts the replicas
together, so they mark within seconds of each other; a mark that never shows means the
directory is not shared (each pod has a disk of its own)."""


@dataclass(frozen=True)
class Shards:
    directory: Path
    replicas: int

    def span(self, rank: int, count: int, wave: int) -> range:
        """The items of `count` that replica `rank` makes: whole waves of `wave` items."""
        waves = -(-count // wave)
        first = waves * rank // self.replicas
        last = waves * (rank + 1) // self.replicas
        return range(min(first * wave, count), min(last * wave, count))

    def path(self, rank: int) -> Path:
        return self.directory / f"shard-{rank:05d}-of-{self.replicas:05d}.jsonl"

    def written(self, rank: int) -> bool:
        return self.path(rank).exists()

    def write(self, rank: int, records: Iterable[dict[str, Any]]) -> int:
        """Replica `rank`'s share, written whole or not at all."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return write_atomically(self.path(rank), lambda p: write_jsonl(p, records))

    def mark_present(self, rank: int, attempt: int | None) -> None:
        """Say replica `rank` of this attempt is here, before any work."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / f"present-{rank:05d}.attempt-{attempt}").touch()

    def wait_for_all(self, attempt: int | None) -> None:
        """Return once every replica's share is written. A replica that fails ends the whole
        job under torchrun, so this waits only for shares that can come; but a replica
        whose presence mark never shows here means the directory is not shared, and its
        share could never be seen: a ConfigError after `PRESENCE_SECONDS`."""
        started = time.monotonic()
        missing = [r for r in range(self.replicas) if not self.written(r)]
        if missing:
            log.info("waiting for the shares of replicas %s", missing)
        while missing:
            unseen = [r for r in missing if not self._present(r, attempt)]
            if unseen and time.monotonic() - started > PRESENCE_SECONDS:
                raise ConfigError(
                    f"spec.replicas is {self.replicas}, but replicas {unseen} never appeared "
                    f"in {self.directory}: the replicas share no storage. Give the cluster a "
                    "volume every pod mounts (the chart's storage.claim), or run one replica"
                )
            time.sleep(POLL_SECONDS)
            missing = [r for r in missing if not self.written(r)]

    def _present(self, rank: int, attempt: int | None) -> bool:
        return (self.directory / f"present-{rank:05d}.attempt-{attempt}").exists()

    def merge(self, target: Path) -> int:
        """Every share, in rank order, into `target`; returns the record count."""
        count = 0
        with target.open("wb") as out:
            for rank in range(self.replicas):
                with self.path(rank).open("rb") as share:
                    shutil.copyfileobj(share, out)
                with self.path(rank).open("rb") as share:
                    count += sum(1 for line in share if line.strip())
        return count
