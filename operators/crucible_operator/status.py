"""The custom resource's status, computed from the control plane's run (the record of
phases and attempts) and what the operator sees of the attempt: one pure function, so a
pass writes status once and only when something changed."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from crucible.domain import reasons
from crucible.domain.enums import Phase
from crucible.schemas.runs import RunPublic


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str = ""


def aware(moment: datetime) -> datetime:
    """`moment` with a time zone: a naive time from the API means UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _stamp(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return aware(moment).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_reason(reason: str) -> str:
    """`reason` as a Kubernetes condition reason, CamelCase (the CRD's pattern
    `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`). The control plane's end reasons already are;
    its attempt reasons ("node-lost", "failure-retry") are not, and the API server refuses a
    whole status write for one such condition."""
    words = re.split(r"[^A-Za-z0-9_,:]+", reason)
    camel = "".join(word[:1].upper() + word[1:] for word in words).rstrip(",:")
    return camel if camel[:1].isalpha() else "Unknown"


def _status_word(value: bool | None) -> str:
    return "Unknown" if value is None else ("True" if value else "False")


def merge_conditions(
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Condition],
    generation: int,
    now: datetime,
) -> list[dict[str, Any]]:
    """metav1.Condition semantics: lastTransitionTime moves only when status changes."""
    previous = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        word = _status_word(cond.status)
        before = previous.pop(cond.type, None)
        moved = before is None or before.get("status") != word
        out.append(
            {
                "type": cond.type,
                "status": word,
                "reason": condition_reason(cond.reason),
                "message": cond.message[:32768],
                "lastTransitionTime": _stamp(now)
                if moved or before is None
                else before.get("lastTransitionTime"),
                "observedGeneration": generation,
            }
        )
    out.extend(dict(c) for c in previous.values())  # types this pass did not judge
    return sorted(out, key=lambda c: str(c["type"]))


def conditions_for(run: RunPublic, scheduled: Condition | None) -> list[Condition]:
    phase = run.phase
    waiting = phase in (Phase.Pending, Phase.WaitingForInputs)
    out = [
        Condition(
            reasons.CONDITION_INPUTS_READY,
            run.resolved_inputs is not None or (None if waiting else False),
            "Resolved" if run.resolved_inputs is not None else (run.reason or "Waiting"),
            "" if run.resolved_inputs is not None else run.message,
        ),
        Condition(
            reasons.CONDITION_READY,
            phase is Phase.Running,
            run.reason or phase.value,
            run.message if phase is not Phase.Running else "all pods running",
        ),
    ]
    if phase.is_terminal:
        out.append(
            Condition(
                reasons.CONDITION_SUCCEEDED,
                phase is Phase.Succeeded,
                run.reason or phase.value,
                run.message,
            )
        )
    if scheduled is not None:
        out.append(scheduled)
    return out


def build_status(
    *,
    run: RunPublic,
    old: Mapping[str, Any],
    generation: int,
    scheduled: Condition | None,
    latest_checkpoint: Mapping[str, Any] | None,
    results: Mapping[str, float] | None,
    now: datetime,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": run.phase.value,
        "attempt": run.attempt_count,
        "runId": run.id,
        "observedGeneration": generation,
        "conditions": merge_conditions(
            old.get("conditions") or [], conditions_for(run, scheduled), generation, now
        ),
    }
    if run.started_at is not None:
        status["startTime"] = _stamp(run.started_at)
    if run.finished_at is not None:
        status["finishTime"] = _stamp(run.finished_at)
    if latest_checkpoint:
        status["latestCheckpoint"] = dict(latest_checkpoint)
    elif old.get("latestCheckpoint"):
        status["latestCheckpoint"] = old["latestCheckpoint"]
    if results is not None:
        status["results"] = dict(results)
    return status


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return any(old.get(key) != value for key, value in new.items())
