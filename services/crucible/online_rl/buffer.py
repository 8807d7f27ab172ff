"""The accepted episodes waiting to be trained on, in groups of one task.

A `Group` is the episodes of one task from one batch: sampled by one policy version, they
share the baseline their advantages are normalised against. The buffer hands groups out
oldest first, each once; one whose version is more than `max_staleness` updates behind the
trainer's is dropped instead, and counted. Its `state_dict()` goes into the run's
checkpoint, so a resumed run trains on exactly the groups an uninterrupted one would:
none accepted is lost, none trained is trained again.
"""

import enum
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from crucible.agents.records import EpisodeRecord


class Discard(enum.StrEnum):
    """Why the buffer dropped a group instead of keeping it for training."""

    STALE = "stale"
    """Its policy version was more than `max_staleness` updates behind the trainer's."""

    DUPLICATE = "duplicate"
    """A group of its id was added before (a batch delivered twice)."""

    TOO_SMALL = "too_small"
    """Fewer than 2 episodes: a group's advantages need a baseline of others."""


@dataclass(frozen=True)
class Group:
    id: str
    """Unique within a run: the batch and the task, "<batch>/<task>"."""

    episodes: tuple[EpisodeRecord, ...]
    """Each stamped with the policy version that sampled it, the same for all."""

    def __post_init__(self) -> None:
        if not self.episodes:
            raise ValueError(f"group {self.id} has no episodes")
        if any(e.policy is None for e in self.episodes):
            raise ValueError(
                f"group {self.id}: every episode needs the policy version that sampled it"
            )
        versions = {e.policy.update for e in self.episodes if e.policy is not None}
        if len(versions) > 1:
            raise ValueError(
                f"group {self.id} mixes policy versions {sorted(versions)}; a group is one "
                "batch, sampled by one version"
            )

    @property
    def version(self) -> int:
        """The update count of the policy that sampled it."""
        policy = self.episodes[0].policy
        assert policy is not None  # checked when the group was made
        return policy.update

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "episodes": [e.to_record() for e in self.episodes]}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Group":
        return cls(record["id"], tuple(EpisodeRecord.from_record(e) for e in record["episodes"]))


class SampleBuffer:
    def __init__(self, *, max_staleness: int) -> None:
        if (
            isinstance(max_staleness, bool)
            or not isinstance(max_staleness, int)
            or max_staleness < 0
        ):
            raise ValueError(
                f"max_staleness must be an integer >= 0 (0: synchronous), got {max_staleness!r}"
            )
        self.max_staleness = max_staleness
        self._waiting: deque[Group] = deque()
        self._seen: set[str] = set()
        """Ids of every group ever added, trained or not: what makes a second delivery of
        a trained batch a duplicate rather than a second training."""
        self.accepted = 0
        """Episodes that entered the buffer."""
        self.trained = 0
        """Episodes handed out for training."""
        self.discarded: Counter[Discard] = Counter()
        """Episodes dropped, by reason."""

    def __len__(self) -> int:
        """Groups waiting."""
        return len(self._waiting)

    @property
    def waiting_samples(self) -> int:
        return sum(len(g.episodes) for g in self._waiting)

    def add(self, group: Group) -> bool:
        """Keep `group` for training; False (and counted) when it is a duplicate or has
        fewer than 2 episodes."""
        if group.id in self._seen:
            self.discarded[Discard.DUPLICATE] += len(group.episodes)
            return False
        self._seen.add(group.id)
        if len(group.episodes) < 2:
            self.discarded[Discard.TOO_SMALL] += len(group.episodes)
            return False
        self._waiting.append(group)
        self.accepted += len(group.episodes)
        return True

    def take(self, count: int, *, trainer_version: int) -> list[Group]:
        """Up to `count` groups, oldest first, none of them again; groups that the
        trainer's `trainer_version` leaves more than `max_staleness` updates behind are
        dropped on the way."""
        if count < 1:
            raise ValueError(f"take at least one group, got {count}")
        taken: list[Group] = []
        while self._waiting and len(taken) < count:
            group = self._waiting.popleft()
            if trainer_version - group.version > self.max_staleness:
                self.discarded[Discard.STALE] += len(group.episodes)
                continue
            taken.append(group)
            self.trained += len(group.episodes)
        return taken

    def state_dict(self) -> dict[str, Any]:
        """The buffer as JSON values: the waiting groups whole, the ids seen, the counts."""
        return {
            "waiting": [g.to_record() for g in self._waiting],
            "seen": sorted(self._seen),
            "accepted": self.accepted,
            "trained": self.trained,
            "discarded": {str(k): v for k, v in sorted(self.discarded.items())},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._waiting = deque(Group.from_record(g) for g in state["waiting"])
        self._seen = set(state["seen"])
        self.accepted = int(state["accepted"])
        self.trained = int(state["trained"])
        self.discarded = Counter({Discard(k): int(v) for k, v in state["discarded"].items()})
