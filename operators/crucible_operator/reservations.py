"""Capacity promised to gangs whose pods the pod index does not show ungated yet.

A gang is placed (gang.fit) and then its pods are created ungated or have their gate lifted:
API calls that take milliseconds to seconds, during which other gangs are checked. Until the
index shows a pod ungated (then it counts as bound, or released-but-unbound, from the index
itself) its demand is held here, so two gangs placed back to back never count the same
GPUs. A reservation whose pod never shows up (deleted at once, created by nobody) expires.
"""

import time
from collections.abc import Callable, Iterable

from crucible_operator.facts import Demand

PodKey = tuple[str, str]  # (namespace, name)

EXPIRE_SECONDS = 60.0


class Reservations:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._held: dict[PodKey, tuple[Demand, float]] = {}
        self._clock = clock

    def hold(self, key: PodKey, demand: Demand) -> None:
        self._held[key] = (demand, self._clock())

    def drop(self, key: PodKey) -> None:
        self._held.pop(key, None)

    def settle(self, ungated: Iterable[PodKey]) -> None:
        """Forget the pods the index now shows ungated, and the expired."""
        for key in ungated:
            self._held.pop(key, None)
        oldest = self._clock() - EXPIRE_SECONDS
        for key in [k for k, (_, since) in self._held.items() if since < oldest]:
            del self._held[key]

    def demands(self) -> list[Demand]:
        return [demand for demand, _ in self._held.values()]

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __len__(self) -> int:
        return len(self._held)
