"""Which weights produced a trajectory: the policy version stamped on every episode that
online RL generates (docs/agents.md, "Online RL in process").

A version is the number of weight updates the trainer has published to the generators
since the run began, and the checkpoint the run started from. Two episodes with the same
version were sampled from the same weights, so a sample's staleness at training time is
the trainer's update count minus the sample's.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PolicyVersion:
    update: int
    """Weight updates published to the generators before this one: 0 is the starting
    policy, 1 the weights after the first round of training, and so on."""

    checkpoint_id: int | None = None
    """The checkpoint the run's starting policy was loaded from; None for weights that
    came from elsewhere (a model built in a test, a Hugging Face directory)."""

    checkpoint_step: int | None = None
    """That checkpoint's training step."""

    def __post_init__(self) -> None:
        if isinstance(self.update, bool) or not isinstance(self.update, int) or self.update < 0:
            raise ValueError(
                f"a policy version's update must be an integer >= 0, got {self.update!r}"
            )

    def next(self) -> "PolicyVersion":
        """The version after one more published update, from the same checkpoint."""
        return PolicyVersion(self.update + 1, self.checkpoint_id, self.checkpoint_step)

    def to_record(self) -> dict[str, Any]:
        return {
            "update": self.update,
            "checkpoint_id": self.checkpoint_id,
            "checkpoint_step": self.checkpoint_step,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "PolicyVersion":
        return cls(
            update=record["update"],
            checkpoint_id=record.get("checkpoint_id"),
            checkpoint_step=record.get("checkpoint_step"),
        )
