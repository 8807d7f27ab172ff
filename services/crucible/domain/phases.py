"""The run state machine: every phase change, whoever reports it, goes through it."""

from crucible.domain.enums import Phase
from crucible.domain.errors import InvalidTransition

_P = Phase
ALLOWED: dict[Phase, frozenset[Phase]] = {
    _P.Pending: frozenset({_P.WaitingForInputs, _P.Scheduling, _P.Failed, _P.Cancelled}),
    _P.WaitingForInputs: frozenset({_P.Scheduling, _P.Failed, _P.Cancelled}),
    _P.Scheduling: frozenset({_P.Running, _P.Failed, _P.Cancelled, _P.Interrupted}),
    _P.Running: frozenset({_P.Succeeded, _P.Failed, _P.Cancelled, _P.Interrupted}),
    _P.Interrupted: frozenset({_P.Recovering, _P.Failed, _P.Cancelled}),
    _P.Recovering: frozenset({_P.Scheduling, _P.Failed, _P.Cancelled}),
    _P.Succeeded: frozenset(),
    _P.Failed: frozenset(),
    _P.Cancelled: frozenset(),
}


def can_transition(current: Phase, requested: Phase) -> bool:
    return requested in ALLOWED[current]


def check_transition(current: Phase, requested: Phase) -> None:
    """Raise InvalidTransition unless `current -> requested` is an edge of the machine.

    Staying in the same phase is not an edge; callers that accept repeated reports (the
    operator retrying after a lost response) compare first and skip the call.
    """
    if not can_transition(current, requested):
        raise InvalidTransition(current.value, requested.value)
