"""Promoting a checkpoint from its page in Debian's Chromium against a real `crucible server`:
a run with two checkpoints, a ServedModel's deployment reported as the operator reports it
(the PUT route, with the admin token) serving the first; a viewer is refused with the API's
own sentence, an editor's promotion of the second is accepted. `crucible server` runs no
workers, so the promotion stays accepted, recorded on the run; the worker's patch of the
ServedModel is tests/operator/test_served_models.py's. Needs what
tests/browser/test_dashboard.py needs."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.test_dashboard import (
    CHROMIUM,
    _call,
    _digest,
    _prepare,
    _run_e2e,
    _submit_training_run,
    _vite_preview,
    run_folder,
)
from tests.servers import LocalServer, local_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _seed(server: LocalServer) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        run_id = _submit_training_run(client, "sft-serve", experiment="serving")
        checkpoints = [
            _call(
                client,
                "POST",
                f"/runs/{run_id}/checkpoints",
                json={
                    "step": step,
                    "uri": run_folder(run_id, f"step-{step}"),
                    "digest": _digest(step),
                    "size_bytes": 1,
                },
            )["id"]
            for step in (100, 200)
        ]
        report = {
            "uid": "uid-chat",
            "checkpoint": {"id": checkpoints[0]},
            "replicas": 2,
            "ready_replicas": 2,
            "serving_checkpoint_id": checkpoints[0],
            "phase": "Ready",
        }
        deployment = _call(client, "PUT", "/deployments/kubernetes/default/chat", json=report)

        def token(role: str) -> str:
            body = {"name": f"promote-{role}", "project": "default", "role": role}
            created: str = _call(client, "POST", "/tokens", json=body)["token"]
            return created

        return {
            "run_id": run_id,
            "served": checkpoints[0],
            "promoted": checkpoints[1],
            "deployment": deployment,
            "viewer_token": token("viewer"),
            "editor_token": token("editor"),
        }


@pytest.mark.timeout(600)
def test_an_editor_promotes_a_checkpoint_from_its_page_and_a_viewer_is_told_why_not(
    tmp_path: Path,
) -> None:
    dist, screenshots = _prepare(tmp_path)
    with local_server(tmp_path / "server") as server:
        seeded = _seed(server)
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            browser = _run_e2e(
                "promote.e2e.mjs",
                {
                    "BASE_URL": base_url,
                    "EDITOR_TOKEN": seeded["editor_token"],
                    "VIEWER_TOKEN": seeded["viewer_token"],
                    "CHECKPOINT_ID": str(seeded["promoted"]),
                    "DEPLOYMENT_NAME": "chat",
                    "CHROMIUM": CHROMIUM,
                    "SCREENSHOT_DIR": str(screenshots),
                },
            )
        assert browser.returncode == 0, browser.stdout + browser.stderr
        seen = json.loads(browser.stdout.strip().splitlines()[-1])
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            events = _call(client, "GET", f"/runs/{seeded['run_id']}/events")

    served, promoted = seeded["served"], seeded["promoted"]
    path = f"/api/v1/deployments/{seeded['deployment']['id']}/promote"
    # The choice names what the deployment serves now; nothing is sent before one is made.
    assert seen["options"] == ["choose one…", f"chat — serving {served} · sft-serve step 100"]
    assert seen["disabledBeforeChoice"] is True
    assert seen["question"].startswith(
        f"Promote checkpoint {promoted} (sft-serve step 200) to deployment chat in default? "
        f"Its live endpoint moves from checkpoint {served} · sft-serve step 100"
    )
    # The viewer asked, and was refused with the API's own sentence.
    assert seen["viewerPosts"] == [f"403 {path}"]
    assert "this token's role viewer cannot do this; it needs editor" in seen["viewerError"]
    # The editor's promotion was accepted, once, and the page says so.
    assert seen["editorPosts"] == [f"202 {path}"]
    assert seen["accepted"].startswith(
        f"Promotion accepted: ServedModel default/chat will serve checkpoint {promoted}"
    )
    assert seen["dialogsAfter"] == 0
    assert seen["viewerProblems"] == [] and seen["editorProblems"] == []
    assert (screenshots / "promote.png").stat().st_size > 10_000
    # Recorded on the run: one promotion, the editor's.
    promotions = [e for e in events if e["type"] == "CheckpointPromoted"]
    assert [e["data"]["checkpoint_id"] for e in promotions] == [promoted]
