"""GET /api/v1/runs/{id}/log-tail: the end of an attempt's log, for the run page."""

from pathlib import Path
from types import SimpleNamespace

from fastapi.testclient import TestClient

from crucible.core.run_logs import log_path
from crucible.executor.local import LocalExecutor
from crucible.settings import Settings
from tests.conftest import make_project, submit


def test_the_path_is_the_one_the_local_executor_writes(tmp_path: Path) -> None:
    executor = SimpleNamespace(_home=tmp_path)
    assert log_path(tmp_path, 7, 2) == LocalExecutor.log_path(executor, 7, 2)  # type: ignore[arg-type]


def test_the_tail_of_the_latest_attempt_from_a_line_start(
    admin: TestClient, settings: Settings
) -> None:
    make_project(admin)
    rid = submit(admin)["id"]
    assert isinstance(rid, int)
    url = f"/api/v1/runs/{rid}/log-tail"
    before = admin.get(url).json()
    assert before["attempt"] is None and "no attempt" in before["message"]

    for _ in range(2):
        assert admin.post(f"/api/v1/runs/{rid}/attempts", json={"reason": "initial"}).is_success
        number = admin.get(f"/api/v1/runs/{rid}/attempts").json()[-1]["number"]
        if number == 1:
            end = {"end_reason": "Preempted", "exit_code": 143}
            assert admin.post(f"/api/v1/runs/{rid}/attempts/1/end", json=end).is_success
    missing = admin.get(url).json()
    assert missing["attempt"] == 2 and "no log for attempt 2" in missing["message"]
    # The log's place under the home, never the server's own path.
    assert f"runs/{rid}/attempt-2.log" in missing["message"]
    assert str(settings.home) not in missing["message"]

    path = log_path(settings.home, rid, 2)
    path.parent.mkdir(parents=True)
    lines = [f"step {i} loss {1 / (i + 1):.4f}" for i in range(1000)]
    path.write_text("\n".join(lines) + "\n")
    tail = admin.get(url, params={"tail_bytes": 100}).json()
    assert tail["truncated"] and tail["size_bytes"] == path.stat().st_size
    assert tail["text"].endswith("step 999 loss 0.0010\n")
    assert tail["text"].startswith("step ")  # not half a line
    whole = admin.get(url, params={"tail_bytes": 1 << 20}).json()
    assert not whole["truncated"] and whole["text"].startswith("step 0 loss 1.0000")
    assert admin.get(url, params={"attempt": 1}).json()["attempt"] == 1


def test_an_attempt_the_run_never_had_is_not_found(admin: TestClient, settings: Settings) -> None:
    """The log is found by run id and attempt number: a number the run never had may name
    another run's file (a deleted run's, before ids were never reused)."""
    make_project(admin)
    rid = submit(admin)["id"]
    assert isinstance(rid, int)
    assert admin.post(f"/api/v1/runs/{rid}/attempts", json={"reason": "initial"}).is_success
    planted = log_path(settings.home, rid, 2)
    planted.parent.mkdir(parents=True)
    planted.write_text("not this run's\n")
    answer = admin.get(f"/api/v1/runs/{rid}/log-tail", params={"attempt": 2})
    assert answer.status_code == 404, answer.text
    assert f"run {rid}'s attempt 2 not found" in answer.json()["detail"]
