"""What a training loop learns between two steps from the run it serves, and what it tells
back: the seam between the trainer (`training/train.py`) and the run SDK
(`sdk/step_control.py`), as `Checkpointer` is for checkpoints."""

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ProfileOrder:
    """A live profile request, as the training loop sees it."""

    request_id: int
    steps: int


@dataclass(frozen=True)
class BetweenSteps:
    """The same on every rank: one rank's news, shared."""

    stop: bool = False
    """Checkpoint now and return (a rank got SIGTERM)."""
    profile: ProfileOrder | None = None
    """Record this many steps from the next one (a request rank 0 heard of)."""


class StepControl(Protocol):
    """Every rank calls every method, at the same step."""

    def between_steps(self) -> BetweenSteps:
        """Asked before every step; may be a collective."""
        ...

    def profile_started(self, request_id: int, first_step: int, last_step: int) -> None:
        """The trainer chose the steps it records for the request."""
        ...

    def profile_done(self, request_id: int) -> None:
        """This rank wrote the request's profile files."""
        ...
