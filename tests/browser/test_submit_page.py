"""The submit page in Debian's Chromium against a real `crucible server`: a run typed with a
bad value shows the API's problem at its path and line, and is submitted once fixed; a
finished local run is resubmitted and reproduced from its page (its code checked on this
machine, where the server runs); a sweep is started from the project page; and a viewer's
submission is refused with the API's own sentence. Needs what tests/browser/test_dashboard.py
needs, and git.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible import provenance
from tests import checkpoint_files
from tests.browser.test_dashboard import CHROMIUM, _call, _prepare, _run_e2e, _vite_preview
from tests.servers import LocalServer, local_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MANIFEST = """apiVersion: crucible.dev/v1alpha1
kind: TrainingRun
metadata:
  name: typed
spec:
  experiment: typed
  gpusPerNode: {gpus}
  config:
    train:
      steps: 10
"""
BAD_LINE = 7  # gpusPerNode's


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _seed(server: LocalServer, repo: Path) -> dict[str, Any]:
    """A local run of the code in `repo` that read `sums@latest` (version 1 then) and
    succeeded, as the executor would have reported it; then `sums@2`, so a reproduction must
    pin what the run read; and a viewer's token."""
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "r@example.invalid")
    _git(repo, "config", "user.name", "r")
    (repo / "train.py").write_text("print(42)\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:

        def dataset(version: int) -> None:
            digest = f"sha256:{version:064x}"
            body = {
                "project": "default",
                "name": "sums",
                "uri": (checkpoint_files.ROOT / "datasets" / f"d{version}").as_uri(),
                "digest": digest,
            }
            _call(client, "POST", "/datasets/versions", json=body)

        dataset(1)
        manifest = {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": "learn"},
            "spec": {
                "experiment": "arithmetic",
                "command": [sys.executable, "train.py"],
                "workingDir": str(repo),
                "inputs": [{"dataset": "sums@latest"}],
            },
        }
        code = provenance.capture(repo).model_dump(mode="json")
        run = _call(
            client, "POST", "/runs", json={"project": "default", "manifest": manifest, "code": code}
        )
        rid = run["id"]
        assert _call(client, "POST", f"/runs/{rid}/inputs/resolve")["ready"] is True
        _call(client, "POST", f"/runs/{rid}/phase", json={"phase": "Scheduling"})
        _call(client, "POST", f"/runs/{rid}/attempts", json={"reason": "initial"})
        _call(client, "POST", f"/runs/{rid}/phase", json={"phase": "Running"})
        end = {"end_reason": "Succeeded", "exit_code": 0}
        _call(client, "POST", f"/runs/{rid}/attempts/1/end", json=end)
        finished = _call(client, "POST", f"/runs/{rid}/phase", json={"phase": "Succeeded"})
        dataset(2)
        viewer = {"name": "onlooker", "project": "default", "role": "viewer"}
        viewer_token = _call(client, "POST", "/tokens", json=viewer)["token"]
    return {"run": finished, "viewer_token": viewer_token}


@pytest.mark.timeout(600)
def test_submit_resubmit_reproduce_and_sweep_from_the_dashboard(tmp_path: Path) -> None:
    dist, screenshots = _prepare(tmp_path)
    with local_server(tmp_path / "server") as server:
        seeded = _seed(server, tmp_path / "code")
        run = seeded["run"]
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                "BASE_URL": base_url,
                "EDITOR_TOKEN": server.token,
                "VIEWER_TOKEN": seeded["viewer_token"],
                "PROJECT_ID": str(run["project_id"]),
                "FINISHED_RUN_ID": str(run["id"]),
                "BAD_MANIFEST": MANIFEST.format(gpus=-1),
                "GOOD_MANIFEST": MANIFEST.format(gpus=0),
                "CHROMIUM": CHROMIUM,
                "SCREENSHOT_DIR": str(screenshots),
            }
            browser = _run_e2e("submit.e2e.mjs", env)
        assert browser.returncode == 0, browser.stdout + browser.stderr
        seen = json.loads(browser.stdout.strip().splitlines()[-1])
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:

            def shown(landed: dict[str, str], kind: str = "runs") -> dict[str, Any]:
                got: dict[str, Any] = _call(
                    client, "GET", f"/{kind}/{landed['hash'].split('/')[-1]}"
                )
                return got

            typed = shown(seen["typed"])
            resubmitted = shown(seen["resubmitted"])
            reproduced = shown(seen["reproduced"])
            sweep = shown(seen["sweep"], "sweeps")
            names = [
                r["name"] for r in _call(client, "GET", "/runs", params={"limit": 1000})["items"]
            ]

    assert seen["editorProblems"] == [] and seen["viewerProblems"] == []
    # The template named a free run; the bad value was named at its path and line, which the
    # editor marked, and the submission waited for the fix.
    assert "kind: TrainingRun" in seen["template"] and "name: run" in seen["template"]
    (problem,) = seen["problems"]
    assert problem.startswith(f"line {BAD_LINE} spec.gpusPerNode:"), problem
    assert "greater than or equal to 0" in problem
    assert seen["badStatus"] == "1 problem to fix." and seen["submitDisabled"] is True
    assert seen["markedText"] == ["  gpusPerNode: -1"]
    assert seen["syntaxProblem"].startswith("line 3 YAML:"), seen["syntaxProblem"]
    assert (screenshots / "submit.png").stat().st_size > 10_000

    # Fixed, it was submitted as typed and the page went to the new run's.
    assert seen["typed"]["title"].startswith("typed")
    assert typed["manifest"]["spec"]["gpusPerNode"] == 0 and typed["backend"] == "local"
    assert typed["phase"] == "Pending"
    assert seen["refusedReproduction"].startswith(
        f"run {typed['id']} never resolved its inputs (it is Pending)"
    ), seen["refusedReproduction"]

    # Resubmitted: the same manifest under the next free name, on the same backend.
    assert "name: learn-2" in seen["resubmitText"] and seen["resubmitBackend"] == "local"
    assert resubmitted["name"] == "learn-2"
    assert resubmitted["manifest"]["spec"] == run["manifest"]["spec"]
    assert resubmitted["tags"] == {}

    # Reproduced: the submission the CLI would make, its input pinned to what the run read.
    assert "name: learn-r1" in seen["reproduceText"] and "sums@1" in seen["reproduceText"]
    assert seen["reproduceBackendFixed"] is True
    assert reproduced["name"] == "learn-r1"
    assert reproduced["manifest"]["spec"]["inputs"] == [{"dataset": "sums@1"}]
    assert reproduced["tags"] == {"crucible.dev/reproduces": str(run["id"])}
    assert reproduced["code"] == run["code"]

    # The sweep started from the project page's template, every trial's config accepted.
    assert "kind: Sweep" in seen["sweepText"]
    assert sweep["name"] == "sweep" and sweep["phase"] == "Running" and sweep["budget"] == 3
    assert seen["editorPosts"] == [
        "201 /api/v1/runs",
        "201 /api/v1/runs",
        "201 /api/v1/runs",
        "201 /api/v1/sweeps",
    ]

    # The viewer's submission was refused with the API's sentence, and nothing was made.
    assert seen["viewerPosts"] == ["403 /api/v1/runs"]
    assert "editor" in seen["viewerError"], seen["viewerError"]
    assert seen["viewerHash"].endswith("/submit")
    assert "watched" not in names
