"""The dashboard in Debian's Chromium against a real `crucible server` seeded through the API.

The built dashboard is served by `vite preview`, which forwards /api to the server, so this
test needs only web/node_modules (`npm ci` in web/) and `apt-get install chromium`.
Set CRUCIBLE_SCREENSHOT_DIR to keep the screenshots; otherwise they go to pytest's tmp_path.
"""

import fcntl
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.core.run_logs import log_path
from crucible.core.signin import issue_code
from tests import checkpoint_files
from tests.servers import LocalServer, free_port, local_server, wait_until_serving

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WEB = Path(__file__).resolve().parents[2] / "web"
CHROMIUM = "/usr/bin/chromium"
API = "/api/v1"
STEPS = 600
NEWER_RUNS = 120  # more than the dashboard's page of 100, so the seeded run is on page 2


def _require_tools() -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run `apt-get install -y chromium` (Debian's)")
    if shutil.which("node") is None:
        pytest.fail("no `node` on PATH: install Node 20")
    if not (WEB / "node_modules" / ".bin" / "vite").exists():
        pytest.fail("web/node_modules is missing: run `npm ci` in web/")


def _call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    response = client.request(method, f"{API}{path}", **kwargs)
    assert response.is_success, f"{method} {path}: {response.status_code} {response.text}"
    return response.json()


def _digest(n: int) -> str:
    return f"sha256:{n:064x}"


def run_folder(run_id: int, name: str) -> str:
    """A URI in the folder of run `run_id` under a storage root of the test server, the only
    place the API accepts that run's checkpoints (docs/storage.md)."""
    return (checkpoint_files.ROOT / "runs" / str(run_id) / name).as_uri()


def _seed(server: LocalServer) -> dict[str, Any]:
    """A training run that reads a dataset, is preempted once and resumed, with two metrics
    and two evaluated checkpoints; then a pending eval and a sweep of newer runs that push the
    first two onto the runs table's second page, the newest two with loss curves to compare."""
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:

        def submit(
            kind: str, name: str, spec: dict[str, Any], code: dict[str, Any] | None = None
        ) -> dict[str, Any]:
            manifest = {
                "apiVersion": "crucible.dev/v1alpha1",
                "kind": kind,
                "metadata": {"name": name},
                "spec": {"experiment": "arithmetic", **spec},
            }
            body = {"project": "default", "manifest": manifest, "code": code}
            result: dict[str, Any] = _call(client, "POST", "/runs", json=body)
            return result

        code = {
            "directory": "/home/researcher/arith",
            "packages": {"crucible": "0.1.0"},
            "git": {
                "commit": "c0ffee" * 6 + "c0ff",
                "dirty": True,
                "diff_digest": "sha256:" + "5" * 64,
                "top": "/home/researcher/arith",
            },
        }
        spec = {"gpusPerNode": 2, "config": {"steps": STEPS}}
        run = submit("TrainingRun", "arith-sft", spec, code)
        eval_run = submit(
            "EvalJob", "arith-sft-eval", {"checkpoint": {"run": "arith-sft"}, "suite": "heldout"}
        )
        rid = run["id"]
        sums = {
            "project": "default",
            "name": "sums",
            "uri": (checkpoint_files.ROOT / "datasets" / "sums.jsonl").as_uri(),
            "digest": _digest(1),
            "record_count": 4000,
        }
        dataset = _call(client, "POST", "/datasets/versions", json=sums)
        _call(client, "POST", f"/runs/{rid}/inputs", json={"dataset_version_id": dataset["id"]})

        def checkpoint(step: int, attempt: int, accuracy: float) -> int:
            body = {
                "step": step,
                "uri": run_folder(rid, f"step-{step}"),
                "digest": _digest(step),
                "size_bytes": 3_200_000,
                "attempt": attempt,
            }
            saved = _call(client, "POST", f"/runs/{rid}/checkpoints", json=body)
            scores = {"accuracy": accuracy, "loss": 1 - accuracy}
            result = {"checkpoint_id": saved["id"], "suite": "heldout", "scores": scores}
            _call(client, "POST", "/evals", json={**result, "eval_run_id": eval_run["id"]})
            return int(saved["id"])

        def phase(name: str, reason: str = "", message: str = "") -> None:
            report = {"phase": name, "reason": reason, "message": message}
            _call(client, "POST", f"/runs/{rid}/phase", json=report)

        def log(first: int, last: int) -> None:
            points = [
                {"key": "train/loss", "step": s, "value": 2.5 * math.exp(-s / 150) + 0.1}
                for s in range(first, last)
            ] + [
                {"key": "eval/accuracy", "step": s, "value": 1 - math.exp(-s / 200)}
                for s in range(first, last, 50)
            ]
            _call(client, "POST", f"/runs/{rid}/metrics", json={"points": points})

        phase("Scheduling")
        _call(client, "POST", f"/runs/{rid}/attempts", json={"reason": "initial"})
        phase("Running")
        log(0, 250)
        checkpoint(200, 1, 0.222)
        phase("Interrupted", "Preempted", "node gpu-3 reclaimed")
        end = {"end_reason": "Preempted", "exit_code": 143}
        _call(client, "POST", f"/runs/{rid}/attempts/1/end", json=end)
        phase("Recovering")
        phase("Scheduling")
        _call(client, "POST", f"/runs/{rid}/attempts", json={"reason": "preemption"})
        packages = {"packages": {"python": "3.11.2", "torch": "2.9.1"}}
        _call(client, "PUT", f"/runs/{rid}/attempts/2/environment", json=packages)
        phase("Running")
        log(250, STEPS)
        newest = checkpoint(500, 2, 0.798)
        for index in range(NEWER_RUNS):
            lr = 10 ** -(index % 5)
            sweep = submit("TrainingRun", f"sweep-{index:02d}", {"config": {"lr": lr}})
            if index >= NEWER_RUNS - 2:
                curve = [
                    {
                        "key": "train/loss",
                        "step": s,
                        "value": 2 * math.exp(-s / (30 * (index - NEWER_RUNS + 3))),
                    }
                    for s in range(0, 300)
                ]
                _call(client, "POST", f"/runs/{sweep['id']}/metrics", json={"points": curve})
        # What the backends would report: this machine running the run's second attempt on
        # two GPUs, and a Kubernetes cluster of twelve 8-GPU nodes, some busy, one lost.
        group = {"run_id": rid, "attempt": 2, "name": f"run-{rid}-attempt-2", "phase": "Running"}
        group |= {"node": "workstation", "gpus": 2, "gpu_devices": "0,1", "pid": 4242}
        machine = {"name": "workstation", "ready": True, "gpus_allocatable": 8}
        local = {"nodes": [machine | {"gpus_allocated": 2}], "pods": [group]}
        _call(client, "PUT", "/clusters/local/report", json=local)
        nodes = [
            {
                "name": f"gpu-{index:02d}",
                "ready": index != 11,
                "gpus_allocatable": 8,
                "gpus_allocated": (8, 4, 0)[index % 3] if index != 11 else 0,
                "gpu_product": "NVIDIA-H200",
            }
            for index in range(12)
        ]
        _call(client, "PUT", "/clusters/kubernetes/report", json={"nodes": nodes, "pods": []})
        # And what the operator reports of a ServedModel following the run's latest checkpoint,
        # served by two ready pods.
        served = {
            "uid": "served-1",
            "checkpoint": {"run": _call(client, "GET", f"/runs/{rid}")["name"]},
            "replicas": 2,
            "ready_replicas": 2,
            "serving_checkpoint_id": newest,
            "phase": "Ready",
            "url": "http://arith-chat.default.svc:8000/v1",
        }
        _call(client, "PUT", "/deployments/kubernetes/default/arith-chat", json=served)
        # A run an MLflow client made, through the routes as its client calls them.
        mlflow = "/mlflow/api/2.0/mlflow"
        made = client.post(f"{mlflow}/experiments/create", json={"name": "mlflow-made"})
        create = {"experiment_id": made.json()["experiment_id"], "run_name": "from-mlflow"}
        info = client.post(f"{mlflow}/runs/create", json=create).json()["run"]["info"]
        metrics = [
            {"key": "loss", "value": 1 / (s + 1), "timestamp": 1_700_000_000_000 + s, "step": s}
            for s in range(100)
        ]
        logged = client.post(
            f"{mlflow}/runs/log-batch", json={"run_id": info["run_id"], "metrics": metrics}
        )
        assert logged.status_code == 200, logged.text
        # The second attempt's output, where the local executor would have written it.
        log = log_path(server.home, rid, 2)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(
            "".join(f"step {s} loss {2.5 * math.exp(-s / 150):.4f}\n" for s in range(250, STEPS))
        )
        seeded: dict[str, Any] = _call(client, "GET", f"/runs/{rid}")
        seeded["mlflow_run"] = _call(client, "GET", f"/runs/{info['run_id']}")
        return seeded


@contextmanager
def _vite_preview(dist: Path, api_url: str, log: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        str(WEB / "node_modules" / ".bin" / "vite"),
        "preview",
        "--host=127.0.0.1",
        f"--port={port}",
        "--strictPort",
        f"--outDir={dist}",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=WEB,
            env={**os.environ, "CRUCIBLE_API_URL": api_url},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_serving(url, process, log, 30, what="vite preview")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def _prepare(tmp_path: Path) -> tuple[Path, Path]:
    """What a page's browser test needs before its server: the tools, the dashboard built
    into `tmp_path`, the screenshots' folder (CRUCIBLE_SCREENSHOT_DIR, else a temporary one)
    and an empty folder `server` for the server's home."""
    _require_tools()
    dist = _build_dashboard()
    screenshots = Path(os.environ.get("CRUCIBLE_SCREENSHOT_DIR") or tmp_path / "screenshots")
    screenshots.mkdir(parents=True, exist_ok=True)
    (tmp_path / "server").mkdir()
    return dist, screenshots


# What `vite build` reads: the build is a function of these, so the browser tests (and
# pytest-xdist's workers) share one build per content instead of running a minute-long
# build each.
_BUILD_INPUTS = (
    "src",
    "index.html",
    "package.json",
    "package-lock.json",
    "vite.config.ts",
    "tsconfig.json",
)


def _build_dashboard() -> Path:
    """The dashboard built from web/'s current sources, once per content."""
    digest = hashlib.sha256()
    for name in _BUILD_INPUTS:
        path = WEB / name
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(f"{file.relative_to(WEB)}\0".encode() + file.read_bytes())
    builds = Path(tempfile.gettempdir()) / "crucible-dashboard-builds"
    builds.mkdir(exist_ok=True)
    dist = builds / digest.hexdigest()[:20]
    with (builds / f"{dist.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build, however many workers ask at once
        if not (dist / "index.html").exists():
            partial = builds / f"{dist.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            build = subprocess.run(
                [str(WEB / "node_modules" / ".bin" / "vite"), "build", f"--outDir={partial}"],
                cwd=WEB,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert build.returncode == 0, build.stdout + build.stderr
            partial.rename(dist)
    return dist


# Past its own waits: the build, the server's start, the browser's script.
@pytest.mark.timeout(660)
def test_sign_in_browse_to_a_run_and_see_its_charts(tmp_path: Path) -> None:
    _require_tools()
    dist = _build_dashboard()
    screenshots = Path(os.environ.get("CRUCIBLE_SCREENSHOT_DIR") or tmp_path / "screenshots")

    (tmp_path / "server").mkdir()
    with local_server(tmp_path / "server") as server:
        run = _seed(server)
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                **os.environ,
                "BASE_URL": base_url,
                "TOKEN": server.token,
                "RUN_ID": str(run["id"]),
                "RUN_NAME": run["name"],
                "CHECKPOINT_URI": run_folder(run["id"], "step-590"),
                "EXPERIMENT_NAME": "arithmetic",
                "LATEST_STEP": str(run["latest_step"]),
                "COMPARE": f"sweep-{NEWER_RUNS - 1},sweep-{NEWER_RUNS - 2}",
                "SCREENSHOT_DIR": str(screenshots),
                "SIGNIN_CODE": issue_code(server.home),
                "RUN_LOG": str(log_path(server.home, run["id"], 2)),
                "CHROMIUM": CHROMIUM,
                "MLFLOW_RUN_ID": str(run["mlflow_run"]["id"]),
                "MLFLOW_RUN_NAME": run["mlflow_run"]["name"],
            }
            e2e = subprocess.run(
                ["node", str(WEB / "e2e" / "dashboard.e2e.mjs")],
                cwd=WEB,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
    print(e2e.stdout)
    assert e2e.returncode == 0, e2e.stdout + e2e.stderr
    for name in (
        "experiment.png",
        "run.png",
        "compare.png",
        "lineage.png",
        "checkpoint.png",
        "cluster.png",
        "deployments.png",
    ):
        assert (screenshots / name).stat().st_size > 10_000, f"{name} looks empty"


# Four rounds of an online RL run as the job logs them (RoundHealth.metrics under `rl/`,
# with `loss` and `reward`): round 1 waits for its whole batch, later ones generate ahead.
RL_ROUNDS = [
    {"rl/wall_s": 4.0, "rl/generate_s": 2.0, "rl/idle_s": 2.0, "rl/samples_accepted": 8},
    {"rl/wall_s": 3.0, "rl/generate_s": 2.0, "rl/idle_s": 1.0, "rl/samples_accepted": 8},
    {"rl/wall_s": 3.0, "rl/generate_s": 2.0, "rl/idle_s": 0.0, "rl/samples_accepted": 6},
    {"rl/wall_s": 2.0, "rl/generate_s": 2.0, "rl/idle_s": 0.0, "rl/samples_accepted": 8},
]
RL_LATEST = {"rl/kl": 0.0061, "rl/ratio_mean": 1.002, "rl/logprob_diff_max": 0.0812}


def _submit_training_run(client: httpx.Client, name: str, *, experiment: str) -> int:
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": experiment},
    }
    run = _call(client, "POST", "/runs", json={"project": "default", "manifest": manifest})
    return int(run["id"])


def _run_e2e(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A script of web/e2e in node; its last stdout line is what it saw, as JSON."""
    return subprocess.run(
        ["node", str(WEB / "e2e" / script)],
        cwd=WEB,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _seed_rl(server: LocalServer) -> tuple[int, int]:
    """An online RL run with RL_ROUNDS logged at steps 1..4, and a plain run with a loss."""
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        rl_run = _submit_training_run(client, "agent-rl", experiment="agents")
        plain_run = _submit_training_run(client, "plain-sft", experiment="agents")
        rows = [
            {
                "step": step,
                "values": {
                    **values,
                    "rl/train_s": 1.5,
                    "rl/weight_update_s": 0.25,
                    "rl/samples_trained": 8 if step < len(RL_ROUNDS) else 4,
                    "rl/discarded_stale": 2 if step == 3 else 0,
                    "rl/episodes": 8,
                    "rl/episodes_failed": 2 if step == 3 else 0,
                    "rl/kl": 0.001 * step,
                    "rl/ratio_mean": 1.0,
                    "rl/logprob_diff_max": 0.01 * step,
                    "loss": 1 / step,
                    "reward": 0.2 * step,
                }
                | (RL_LATEST if step == len(RL_ROUNDS) else {}),
            }
            for step, values in enumerate(RL_ROUNDS, start=1)
        ]
        _call(client, "POST", f"/runs/{rl_run}/metrics", json={"rows": rows})
        plain = [{"step": s, "values": {"loss": 1 / (s + 1)}} for s in range(20)]
        _call(client, "POST", f"/runs/{plain_run}/metrics", json={"rows": plain})
        return rl_run, plain_run


@pytest.mark.timeout(660)
def test_an_online_rl_run_shows_where_its_rounds_spent_their_time(tmp_path: Path) -> None:
    _require_tools()
    dist = _build_dashboard()
    (tmp_path / "server").mkdir()
    with local_server(tmp_path / "server") as server:
        rl_run, plain_run = _seed_rl(server)
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                "BASE_URL": base_url,
                "TOKEN": server.token,
                "RL_RUN_ID": str(rl_run),
                "PLAIN_RUN_ID": str(plain_run),
                "CHROMIUM": CHROMIUM,
            }
            browser = _run_e2e("rl-health.e2e.mjs", env)
    assert browser.returncode == 0, browser.stdout + browser.stderr
    seen = json.loads(browser.stdout.strip().splitlines()[-1])
    assert seen["problems"] == []

    totals = seen["totals"]
    # 3 of the 12 seconds of wall time the trainer waited for samples.
    assert totals["Trainer idle"].startswith("25.0%")
    assert totals["Samples"] == "30 accepted · 28 trained · 2 discarded as stale"
    assert totals["Episodes failed"].startswith("2 of 32")
    assert totals["Trainer vs generator"].startswith(
        "KL 0.0061 · ratio mean 1.002 · logprob diff max 0.0812 at step 4"
    )

    header, *body, footer = seen["rows"]
    assert header[2:] == ["Generating", "Training", "Weight update", "Idle", "Wall"]
    assert [row[0] for row in body] == ["1", "2", "3", "4"]
    assert body[0][2:] == ["2.00s", "1.50s", "0.25s", "2.00s", "4.00s"]
    assert footer == ["All 4 rounds", "8.00s", "6.00s", "1.00s", "3.00s", "12.0s"]
    # Round 1's wall time as the trainer spent it; round 4 never waited.
    assert seen["bars"][0] == [
        "training: 1.50s",
        "weight update: 0.25s",
        "idle (waiting for samples): 2.00s",
        "other: 0.25s",
    ]
    assert not any(part.startswith("idle") for part in seen["bars"][3])

    assert seen["plainSections"] == 0, "a run without rl/ metrics shows no RL health"


def _seed_actions(server: LocalServer) -> dict[str, Any]:
    """A Running run and a Pending one, and a viewer's token for the project."""
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        running = _submit_training_run(client, "to-preempt", experiment="actions")
        pending = _submit_training_run(client, "to-cancel", experiment="actions")
        for phase in ("Scheduling", "Running"):
            if phase == "Running":
                _call(client, "POST", f"/runs/{running}/attempts", json={"reason": "initial"})
            _call(client, "POST", f"/runs/{running}/phase", json={"phase": phase})
        viewer = {"name": "onlooker", "project": "default", "role": "viewer"}
        token = _call(client, "POST", "/tokens", json=viewer)["token"]
    return {"running": running, "pending": pending, "viewer_token": token}


@pytest.mark.timeout(600)
def test_a_run_is_preempted_and_cancelled_from_its_page_and_a_viewer_is_told_why_not(
    tmp_path: Path,
) -> None:
    dist, screenshots = _prepare(tmp_path)
    with local_server(tmp_path / "server") as server:
        seeded = _seed_actions(server)
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                "BASE_URL": base_url,
                "EDITOR_TOKEN": server.token,
                "VIEWER_TOKEN": seeded["viewer_token"],
                "RUNNING_ID": str(seeded["running"]),
                "PENDING_ID": str(seeded["pending"]),
                "CHROMIUM": CHROMIUM,
                "SCREENSHOT_DIR": str(screenshots),
            }
            browser = _run_e2e("run-actions.e2e.mjs", env)
        assert browser.returncode == 0, browser.stdout + browser.stderr
        seen = json.loads(browser.stdout.strip().splitlines()[-1])
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            running = _call(client, "GET", f"/runs/{seeded['running']}")
            pending = _call(client, "GET", f"/runs/{seeded['pending']}")
            events = _call(client, "GET", f"/runs/{seeded['running']}/events")

    cancel_path = f"/api/v1/runs/{seeded['pending']}/cancel"
    # The viewer asked, was refused with the API's own reason, and nothing changed.
    assert seen["viewerConfirm"].startswith("Cancel this run?")
    assert seen["viewerResponses"] == [f"403 {cancel_path}"]
    assert "editor" in seen["viewerError"], seen["viewerError"]
    assert "Your token has no access to this" in seen["viewerError"]
    assert seen["viewerPhase"] == "Pending"
    # The editor: preempt and cancel on a Running run, cancel alone on a Pending one; "Keep
    # it running" sent nothing; each confirmed action was one call.
    assert seen["runningButtons"] == ["Cancel run", "Preempt"]
    assert seen["pendingButtons"] == ["Cancel run"]
    assert seen["dialogsAfterKeep"] == 0
    assert seen["preemptStatus"].startswith("Preemption requested")
    assert seen["editorResponses"] == [
        f"200 /api/v1/runs/{seeded['running']}/preempt",
        f"200 {cancel_path}",
    ]
    assert seen["cancelledPhase"] == "Cancelled" and seen["actionsAfterCancel"] == 0
    # What the API holds afterwards.
    assert running["phase"] == "Running"
    assert any(e["type"] == "PreemptRequested" for e in events), events
    assert pending["phase"] == "Cancelled" and pending["reason"] == "CancelledByUser"
    assert (screenshots / "run-actions.png").stat().st_size > 10_000
