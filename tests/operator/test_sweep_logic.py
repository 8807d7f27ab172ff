"""A Sweep object as the operator registers it and the status it writes from the control
plane's answer (sweep_status.py), and one pass of sweeps.py against a fake control plane:
registered once, refused for good, re-registered when the control plane forgot it. The
cluster-facing behaviour is tests/operator/test_sweeps_on_the_cluster.py's."""

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from crucible.client import ApiError
from crucible.client.calls import Call
from crucible.schemas.sweeps import SweepPublic
from crucible_operator import sweeps
from crucible_operator.context import Namespaces
from crucible_operator.sweep_status import changed, status_of, submission

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep.yaml"


def sweep_object(**status: Any) -> dict[str, Any]:
    """examples/sweep.yaml as the API server hands it to the operator."""
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] |= {"namespace": "team-a", "uid": "uid-1", "generation": 1}
    if status:
        body["status"] = status
    return body


def trial(number: int, phase: str, value: float | None = None) -> dict[str, Any]:
    return {
        "number": number,
        "run_id": 10 + number,
        "run_name": f"arith-lr-{number:03d}",
        "phase": phase,
        "point": {"config.train.lr": 0.003},
        "value": value,
        "step": None if value is None else 600,
        "stopped_reason": None,
    }


def sweep_public(**fields: Any) -> SweepPublic:
    """A `GET /api/v1/sweeps/{id}` answer."""
    answer = {
        "id": 7,
        "project_id": 1,
        "name": "arith-lr",
        "backend": "kubernetes",
        "phase": "Running",
        "message": "",
        "manifest": {},
        "spec_digest": "d",
        "code": None,
        "metric": "loss",
        "goal": "minimize",
        "budget": 3,
        "best_trial": None,
        "k8s_uid": "uid-1",
        "created_at": "2025-01-01T00:00:00Z",
        "finished_at": None,
        "trials": [],
    }
    return SweepPublic.model_validate(answer | fields)


def test_the_registration_is_the_object_in_its_namespaces_project_by_uid() -> None:
    request = submission(sweep_object(), "team-a-project")
    assert (request.project, request.backend.value, request.k8s_uid) == (
        "team-a-project",
        "kubernetes",
        "uid-1",
    )
    sent = sweeps.submit_sweep(request).json()
    manifest = sent["manifest"]
    assert manifest["metadata"]["namespace"] == "team-a"  # the trials' TrainingRuns go there
    spec = manifest["spec"]
    assert spec["earlyStopping"] == {"minSteps": 20, "maxSteps": 600, "reductionFactor": 4}
    assert spec["parameters"] == {"config.train.lr": {"values": [0.003, 0.00003, 0.0003]}}
    assert spec["run"]["config"]["train"]["steps"] == 600
    assert "status" not in manifest


def test_a_spec_the_models_refuse_is_a_value_error_naming_the_field() -> None:
    body = sweep_object()
    del body["spec"]["run"]
    with pytest.raises(ValueError, match="run"):
        submission(body, "team-a")


def test_a_running_sweep_shows_its_id_and_trials_and_no_best_yet() -> None:
    answer = sweep_public(trials=[trial(0, "Succeeded", 0.5), trial(1, "Running")])
    assert status_of(answer, 3) == {
        "phase": "Running",
        "message": "",
        "sweepId": 7,
        "trialsStarted": 2,
        "trialsRunning": 1,
        "bestTrial": None,
        "observedGeneration": 3,
    }


def test_a_succeeded_sweep_shows_its_best_trial() -> None:
    answer = sweep_public(
        phase="Succeeded",
        message="best: trial 1 (run 11), loss 0.12",
        best_trial=1,
        trials=[trial(0, "Succeeded", 0.5), trial(1, "Succeeded", 0.12), trial(2, "Cancelled")],
    )
    status = status_of(answer, 1)
    assert status["bestTrial"] == {"number": 1, "run": "arith-lr-001", "value": 0.12}
    assert (status["phase"], status["trialsRunning"]) == ("Succeeded", 0)
    assert status["message"] == "best: trial 1 (run 11), loss 0.12"


def test_only_a_different_status_is_written() -> None:
    written = status_of(sweep_public(trials=[trial(0, "Running")]), 1)
    shown = {k: v for k, v in written.items() if v is not None}  # a merge patch drops None
    assert not changed(shown, written)
    assert changed(shown, status_of(sweep_public(trials=[trial(0, "Succeeded", 1.0)]), 1))


class FakeControlPlane:
    """The calls the operator sends, answered from a script: a call name -> an answer, or
    an ApiError to raise."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.sent: list[str] = []

    async def call(self, call: Call[Any]) -> Any:
        self.sent.append(call.name)
        answer = self.answers[call.name]
        if isinstance(answer, Exception):
            raise answer
        return answer


def one_pass(
    monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], answers: dict[str, Any]
) -> tuple[list[str], list[dict[str, Any]], list[tuple[str, str, str]]]:
    """Run one pass; returns the calls sent, the statuses written and the Events emitted."""
    api = FakeControlPlane(answers)
    ctx = SimpleNamespace(call=api.call, kube=None, namespaces=Namespaces({"team-a": "team-a"}))
    written: list[dict[str, Any]] = []
    events: list[tuple[str, str, str]] = []

    async def patch_status(kube: Any, kind: str, meta: Any, status: dict[str, Any]) -> None:
        assert kind == "Sweep"
        written.append(status)

    def event(owner: Any, *, type: str, reason: str, message: str) -> None:
        events.append((type, reason, message))
        assert written, "an Event went out before the status it describes"

    monkeypatch.setattr(sweeps, "patch_status", patch_status)
    monkeypatch.setattr(sweeps.kopf, "event", event)
    asyncio.run(sweeps.reconcile(ctx, body))  # type: ignore[arg-type]
    return api.sent, written, events


def test_a_new_sweep_is_registered_and_its_status_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent, written, events = one_pass(monkeypatch, sweep_object(), {"submit_sweep": sweep_public()})
    assert sent == ["submit_sweep"]
    assert written[0]["sweepId"] == 7 and written[0]["phase"] == "Running"
    assert events == [("Normal", "Registered", "sweep 7 in the control plane")]


def test_a_registered_sweep_is_followed_not_registered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = sweep_object(**status_of(sweep_public(), 1))
    sent, written, events = one_pass(monkeypatch, body, {"get_sweep": sweep_public()})
    assert (sent, written, events) == (["get_sweep"], [], [])  # nothing changed


def test_a_sweep_the_control_plane_forgot_is_registered_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = sweep_object(phase="Running", sweepId=3)
    gone = ApiError(404, "sweep 3 not found", "GET", "/api/v1/sweeps/3")
    sent, written, _ = one_pass(
        monkeypatch, body, {"get_sweep": gone, "submit_sweep": sweep_public()}
    )
    assert sent == ["get_sweep", "submit_sweep"]
    assert written[0]["sweepId"] == 7


def test_a_refused_sweep_fails_with_the_apis_message_and_an_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    detail = [{"loc": ["body", "manifest", "spec"], "msg": "config.train has no key 'lrate'"}]
    refused = ApiError(422, detail, "POST", "/api/v1/sweeps")
    sent, written, events = one_pass(monkeypatch, sweep_object(), {"submit_sweep": refused})
    assert sent == ["submit_sweep"]
    (status,) = written
    assert status["phase"] == "Failed"
    assert "config.train has no key 'lrate'" in status["message"]
    assert events == [("Warning", "InvalidSpec", status["message"])]
    # Failed is terminal: the timer's filter lets it be, so it is never sent again.
    assert not sweeps._running(status)


def test_an_unreachable_control_plane_is_retried_not_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    down = ApiError(503, "unavailable", "POST", "/api/v1/sweeps")
    with pytest.raises(ApiError):
        one_pass(monkeypatch, sweep_object(), {"submit_sweep": down})
