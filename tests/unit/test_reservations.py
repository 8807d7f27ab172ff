"""Capacity held for placed gangs until the pod index shows their pods ungated."""

from crucible_operator.facts import Demand
from crucible_operator.reservations import EXPIRE_SECONDS, Reservations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_pod_is_held_until_the_index_shows_it_ungated() -> None:
    held = Reservations(clock=Clock())
    held.hold(("ns", "a-0"), Demand(gpus=8))
    held.hold(("ns", "a-1"), Demand(gpus=8))
    # Not in the index yet (being created), or still gated there: both stay held.
    held.settle([("ns", "other-0")])
    assert held.demands() == [Demand(gpus=8), Demand(gpus=8)]
    held.settle([("ns", "a-0")])
    assert ("ns", "a-0") not in held
    assert held.demands() == [Demand(gpus=8)]


def test_a_pod_that_never_shows_up_is_released_after_a_while() -> None:
    clock = Clock()
    held = Reservations(clock=clock)
    held.hold(("ns", "gone-0"), Demand(gpus=2))
    clock.now += EXPIRE_SECONDS - 1
    held.settle([])
    assert len(held) == 1
    clock.now += 2
    held.settle([])
    assert len(held) == 0


def test_a_failed_create_drops_its_hold() -> None:
    held = Reservations(clock=Clock())
    held.hold(("ns", "b-0"), Demand(gpus=1))
    held.drop(("ns", "b-0"))
    held.drop(("ns", "b-0"))  # twice is fine
    assert held.demands() == []
