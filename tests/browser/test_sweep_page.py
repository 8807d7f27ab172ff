"""The sweep page in Debian's Chromium against a real `crucible server`: a grid sweep of three
learning rates whose trials are moved and logged through the API as the local executor and
the SDK would, so that ASHA stops one and the sweep ends with a best; and a second sweep
left running, for a viewer to be refused its cancel and an editor to cancel it.

`crucible server` runs no workers (and `crucible up`'s executor would really train the
trials), so the test advances the sweeps itself, with the workers' own tick on the server's
database, at the moments it chooses. Needs what tests/browser/test_dashboard.py needs.
"""

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.db.engine import build_engine, build_session_factory
from crucible.settings import load_settings
from crucible.workers.sweeps import advance_sweeps
from tests.browser.test_dashboard import (
    CHROMIUM,
    _call,
    _prepare,
    _run_e2e,
    _vite_preview,
)
from tests.servers import LocalServer, local_server, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LRS = [0.01, 0.001, 0.0001]
# Each trial's loss curve sits this far above the others': trial 1 is best throughout,
# trial 2 worst, so ASHA (rungs at 10, 20, 40, 80 steps; the best half goes on) stops
# trial 2 at step 10, once trials 0 and 1 have passed it.
FLOORS = {0: 1.0, 1: 0.5, 2: 2.0}
STEPS = 100


def _sweep_manifest(name: str, lrs: list[float]) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": name},
        "spec": {
            "method": "grid",
            "metric": {"name": "loss", "goal": "minimize"},
            "budget": {"trials": len(lrs), "concurrency": len(lrs)},
            "earlyStopping": {"minSteps": 10, "maxSteps": STEPS, "reductionFactor": 2},
            "parameters": {"config.train.lr": {"values": lrs}},
            "run": {
                "experiment": "lr",
                "config": {"model": {"preset": "tiny"}, "train": {"steps": STEPS}},
            },
        },
    }


def _loss(floor: float, step: int) -> float:
    return floor + math.exp(-step / 30)


def _seed(server: LocalServer) -> dict[str, Any]:
    database = f"sqlite:///{server.home / 'crucible.db'}"
    factory = build_session_factory(
        build_engine(load_settings(home=server.home, database_url=database))
    )
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        body = {"project": "default", "manifest": _sweep_manifest("lr", LRS)}
        sweep_id = _call(client, "POST", "/sweeps", json=body)["id"]

        def trials_of(sweep: int, count: int) -> list[dict[str, Any]] | None:
            advance_sweeps(factory)
            trials: list[dict[str, Any]] = _call(client, "GET", f"/sweeps/{sweep}")["trials"]
            return trials if len(trials) == count else None

        trials = wait_for("the sweep's three trials", lambda: trials_of(sweep_id, 3), 60)
        run_of = {t["number"]: t["run_id"] for t in trials}

        def start(run_id: int) -> None:
            _call(client, "POST", f"/runs/{run_id}/phase", json={"phase": "Scheduling"})
            _call(client, "POST", f"/runs/{run_id}/attempts", json={"reason": "initial"})
            _call(client, "POST", f"/runs/{run_id}/phase", json={"phase": "Running"})

        def log(number: int, steps: range) -> None:
            points = [{"key": "loss", "step": s, "value": _loss(FLOORS[number], s)} for s in steps]
            _call(client, "POST", f"/runs/{run_of[number]}/metrics", json={"points": points})

        # Trials 0 and 1 run to the end, in that order, so ASHA sees them first.
        for number in (0, 1):
            start(run_of[number])
            log(number, range(STEPS + 1))
            _call(client, "POST", f"/runs/{run_of[number]}/phase", json={"phase": "Succeeded"})
        start(run_of[2])
        log(2, range(16))

        def ended() -> dict[str, Any] | None:
            advance_sweeps(factory)
            sweep: dict[str, Any] = _call(client, "GET", f"/sweeps/{sweep_id}")
            return sweep if sweep["phase"] != "Running" else None

        sweep = wait_for("the sweep to stop trial 2 and end", ended, 60)

        live = {"project": "default", "manifest": _sweep_manifest("lr-live", [0.001])}
        live_id = _call(client, "POST", "/sweeps", json=live)["id"]
        wait_for("the running sweep's trial", lambda: trials_of(live_id, 1), 60)
        viewer = {"name": "onlooker", "project": "default", "role": "viewer"}
        viewer_token = _call(client, "POST", "/tokens", json=viewer)["token"]
    return {"sweep": sweep, "live_id": live_id, "viewer_token": viewer_token}


@pytest.mark.timeout(600)
def test_a_sweep_page_shows_its_trials_stopped_and_best_and_a_viewer_cannot_cancel(
    tmp_path: Path,
) -> None:
    dist, screenshots = _prepare(tmp_path)
    with local_server(tmp_path / "server") as server:
        seeded = _seed(server)
        sweep = seeded["sweep"]
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                "BASE_URL": base_url,
                "EDITOR_TOKEN": server.token,
                "VIEWER_TOKEN": seeded["viewer_token"],
                "PROJECT_ID": str(sweep["project_id"]),
                "SWEEP_NAME": sweep["name"],
                "LIVE_SWEEP_ID": str(seeded["live_id"]),
                "CHROMIUM": CHROMIUM,
                "SCREENSHOT_DIR": str(screenshots),
            }
            browser = _run_e2e("sweep.e2e.mjs", env)
        assert browser.returncode == 0, browser.stdout + browser.stderr
        seen = json.loads(browser.stdout.strip().splitlines()[-1])
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            live = _call(client, "GET", f"/sweeps/{seeded['live_id']}")

    # What the API decided, which the page must show.
    assert sweep["phase"] == "Succeeded", sweep["message"]
    assert sweep["best_trial"] == 1
    by_number = {t["number"]: t for t in sweep["trials"]}
    reason = by_number[2]["stopped_reason"]
    assert reason and reason.startswith("stopped by ASHA at step 10"), reason

    # The project page links to both sweeps, this one by its phase and budget.
    listed = {item[0]: item[1:] for item in seen["listed"]}
    assert listed["lr"] == ["Succeeded", "3 trials · minimize loss", sweep["message"]]
    assert listed["lr-live"][:2] == ["Running", "1 trial · minimize loss"]
    assert seen["sweepHash"] == f"#/sweeps/{sweep['id']}"
    # The header.
    assert seen["title"].startswith("lr") and "Succeeded" in seen["title"]
    assert seen["progress"] == "3 of 3 started"
    assert seen["message"] == sweep["message"] and seen["message"].startswith("best: trial 1")
    run_ids = ",".join(str(by_number[n]["run_id"]) for n in (0, 1, 2))
    assert seen["compareHref"] == f"#/compare?runs={run_ids}"
    assert seen["cancelButtons"] == 0, "an ended sweep offers no cancel"
    # The trials table: a column for the parameter, the metric's last value and step.
    assert "train.lr" in seen["headers"] and any(h.startswith("loss") for h in seen["headers"])
    rows = {row[0]: row for row in seen["rows"]}
    assert sorted(rows) == ["0", "1", "2"]
    assert rows["1"][3] == str(by_number[1]["point"]["config.train.lr"])
    assert rows["1"][4] == f"{_loss(FLOORS[1], STEPS):.4g}" and rows["1"][5] == str(STEPS)
    assert rows["2"][2] == "Cancelled" and rows["2"][5] == "15"
    assert seen["bestRow"] == "1" and "best" in seen["bestMark"]
    assert seen["stoppedRow"] == "2"
    assert seen["stoppedTooltip"] == reason and seen["stoppedReason"] == reason
    # Sorted by loss: the best first, then the other way round.
    assert seen["bestFirst"] == ["1", "0", "2"]
    assert seen["worstFirst"] == ["2", "0", "1"]
    # Ink: a point per trial in the one scatter, the best ringed; a line per trial across
    # the parameter's axis and the metric's, the best on top.
    assert seen["scatters"] == 1
    assert seen["scatterPoints"] == 3 and seen["scatterBest"] == 1
    assert "best is trial 1" in seen["scatterLabel"]
    assert [axis.split(" ")[0] for axis in seen["parallelAxes"]] == ["train.lr", "loss"]
    assert len(seen["parallelLines"]) == 3
    assert all(line["d"].count("L") == 1 for line in seen["parallelLines"])
    assert seen["lastLineBest"]
    assert seen["editorProblems"] == [] and seen["cancellerProblems"] == []
    assert (screenshots / "sweep.png").stat().st_size > 10_000

    # The viewer asked, was refused with the API's own reason, and the sweep ran on.
    cancel_path = f"/api/v1/sweeps/{seeded['live_id']}/cancel"
    assert seen["viewerConfirm"].startswith("Cancel this sweep?")
    assert seen["viewerPosts"] == [f"403 {cancel_path}"]
    assert "editor" in seen["viewerError"], seen["viewerError"]
    assert seen["viewerPhase"] == "Running"
    # The editor's cancel went through, once, and the button went with the Running phase.
    assert seen["editorPosts"] == [f"200 {cancel_path}"]
    assert seen["cancelledPhase"] == "Cancelled" and seen["cancelButtonsAfter"] == 0
    assert live["phase"] == "Cancelled"
    assert all(t["phase"] == "Cancelled" for t in live["trials"])
