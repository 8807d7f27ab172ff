"""What a Sweep object and its sweep in the control plane say to each other: the registration
request built from the object, and the object's status built from the control plane's
answer. Pure functions, so tests/operator/test_sweep_logic.py checks them without a cluster;
sweeps.py sends and writes them."""

from collections.abc import Mapping
from typing import Any

from crucible.domain.enums import Backend, Phase
from crucible.schemas.sweeps import SweepPublic, SweepSubmit
from crucible_operator.registration import manifest_of


def submission(body: Mapping[str, Any], project: str) -> SweepSubmit:
    """The object as the control plane registers it: its trials run on this cluster, and its
    uid lets the control plane tell a repeated registration (an operator restarted before
    the status write) from another sweep of the same name. ValueError when the API's
    models refuse what the CRD's schema let through."""
    return SweepSubmit.model_validate(
        {
            "project": project,
            "manifest": manifest_of(body),
            "backend": Backend.kubernetes,
            "k8s_uid": body["metadata"]["uid"],
        }
    )


def status_of(sweep: SweepPublic, generation: int) -> dict[str, Any]:
    """The status for the control plane's sweep (as `GET /api/v1/sweeps/{id}` answers it).
    `bestTrial` is None until the sweep has picked one: a merge patch then removes it."""
    best = next((t for t in sweep.trials if t.number == sweep.best_trial), None)
    return {
        "phase": sweep.phase.value,
        "message": sweep.message,
        "sweepId": sweep.id,
        "trialsStarted": len(sweep.trials),
        "trialsRunning": sum(not t.phase.is_terminal for t in sweep.trials),
        "bestTrial": None
        if best is None
        else {"number": best.number, "run": best.run_name, "value": best.value},
        "observedGeneration": generation,
    }


def refused_status(message: str, generation: int) -> dict[str, Any]:
    """A Sweep the control plane will not take (or whose namespace has no project): Failed
    for good, so the timer that follows running sweeps lets it be."""
    return {
        "phase": Phase.Failed.value,
        "message": message,
        "observedGeneration": generation,
    }


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing `new` would change the status (a None in `new` is an absent key)."""
    return any(old.get(key) != value for key, value in new.items())
