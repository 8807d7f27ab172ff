"""`crucible runs reproduce` on `crucible up`: the same resolved spec, the same input
versions (not whatever `@latest` became) and the same code give bitwise the same losses;
code that is not the run's is refused, naming what differs."""

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import LocalServer, crucible, local_server

LOOP = """\
kind: RolloutJob
metadata: {name: teach}
spec:
  experiment: repro
  policy: {teacher: arithmetic-solver}
  output: sums
  config: {task: {digits: 1}, datagen: {num_prompts: 60, seed: SEED}}
---
kind: TrainingRun
metadata: {name: learn}
spec:
  experiment: repro
  config:
    model: {preset: tiny}
    task: {digits: 1}
    train: {mode: sft, steps: 12, lr: 0.003, batch_size: 8}
  inputs:
    - dataset: sums@latest
  checkpoints: {everySteps: 100}
"""

USER_CODE = """\
import crucible

run = crucible.init()
run.log({"answer": float(open("answer.txt").read())}, step=0)
run.finish()
"""


def api(server: LocalServer) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def wait_succeeded(client: httpx.Client, run_id: int, seconds: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        run: dict[str, Any] = client.get(f"/api/v1/runs/{run_id}").json()
        if run["phase"] in ("Succeeded", "Failed", "Cancelled"):
            assert run["phase"] == "Succeeded", run
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.5)


def losses(client: httpx.Client, run_id: int) -> list[float]:
    history = client.get(
        f"/api/v1/runs/{run_id}/metrics", params={"keys": "loss", "max_points": 10_000}
    ).json()
    (series,) = [s for s in history["series"] if s["key"] == "loss"]
    assert not series["downsampled"]
    values: list[float] = series["values"]
    return values


def run_named(client: httpx.Client, name: str) -> dict[str, Any]:
    (run,) = [
        r
        for r in client.get("/api/v1/runs", params={"limit": 100}).json()["items"]
        if r["name"] == name
    ]
    return run


@pytest.mark.timeout(960)
def test_a_reproduced_run_reads_the_same_versions_and_logs_the_same_losses(
    tmp_path: Path,
) -> None:
    first = tmp_path / "loop.yaml"
    first.write_text(LOOP.replace("SEED", "1"))
    with local_server(tmp_path, command="up") as server:
        client = api(server)
        assert crucible(server.env, "submit", str(first)).returncode == 0
        original = wait_succeeded(client, run_named(client, "learn")["id"])
        assert original["resolved_inputs"]["datasets"] == ["sums@1"]
        code = original["code"]
        assert code["packages"]["crucible"]
        assert code["directory"].endswith("crucible")  # the reference workload's package
        (attempt,) = client.get(f"/api/v1/runs/{original['id']}/attempts").json()
        assert attempt["packages"]["torch"] and attempt["packages"]["python"]

        # Another teacher publishes `sums@2`: `@latest` moves on, the reproduction must not.
        second = tmp_path / "more.yaml"
        second.write_text(LOOP.replace("SEED", "2").replace("name: teach", "name: teach-more"))
        (teacher_doc, _) = second.read_text().split("---\n")
        second.write_text(teacher_doc)
        assert crucible(server.env, "submit", str(second)).returncode == 0
        wait_succeeded(client, run_named(client, "teach-more")["id"])

        reproduced = crucible(server.env, "runs", "reproduce", str(original["id"]))
        assert reproduced.returncode == 0, reproduced.stderr
        assert "learn-r1" in reproduced.stdout
        again = wait_succeeded(client, run_named(client, "learn-r1")["id"])
        assert again["resolved_inputs"]["datasets"] == ["sums@1"]
        assert again["manifest"]["spec"]["inputs"] == [{"dataset": "sums@1"}]
        assert again["tags"]["crucible.dev/reproduces"] == str(original["id"])
        assert again["code"] == original["code"]
        expected = losses(client, original["id"])
        assert len(expected) == 12
        assert losses(client, again["id"]) == expected  # bitwise: floats compared exactly

        shown = crucible(server.env, "runs", "show", str(again["id"]))
        assert shown.returncode == 0, shown.stderr
        assert f"crucible {code['packages']['crucible']}" in shown.stdout


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.timeout(720)
def test_reproduce_refuses_code_that_is_not_the_runs(tmp_path: Path) -> None:
    repo = tmp_path / "code"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "r@example.invalid")
    git(repo, "config", "user.name", "r")
    (repo / "train.py").write_text(USER_CODE)
    (repo / "answer.txt").write_text("42\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    commit = git(repo, "rev-parse", "HEAD")
    manifest = tmp_path / "user.yaml"
    manifest.write_text(
        "kind: TrainingRun\nmetadata: {name: mine}\nspec:\n  experiment: repro\n"
        f"  command: [{sys.executable}, train.py]\n  workingDir: {repo}\n"
    )
    with local_server(tmp_path, command="up") as server:
        client = api(server)
        assert crucible(server.env, "submit", str(manifest)).returncode == 0
        run = wait_succeeded(client, 1)
        assert run["code"]["git"] == {
            "commit": commit,
            "dirty": False,
            "diff_digest": None,
            "top": str(repo.resolve()),
        }
        assert run["code_ref"] == commit[:12]

        (repo / "answer.txt").write_text("41\n")  # an uncommitted change
        refused = crucible(server.env, "runs", "reproduce", "1")
        assert refused.returncode == 1
        assert "has uncommitted changes; the run's tree was clean" in refused.stderr
        assert "Traceback" not in refused.stderr

        git(repo, "commit", "-qam", "second")
        refused = crucible(server.env, "runs", "reproduce", "1")
        assert refused.returncode == 1
        assert f"the run's code was {commit}" in refused.stderr

        # The run's commit checked out elsewhere is the run's code: it runs from there.
        checkout = tmp_path / "checkout"
        git(repo, "worktree", "add", "-q", "--detach", str(checkout), commit)
        done = crucible(server.env, "runs", "reproduce", "1", "--code-dir", str(checkout))
        assert done.returncode == 0, done.stderr
        again = wait_succeeded(client, 2)
        assert again["manifest"]["spec"]["workingDir"] == str(checkout.resolve())
        assert again["code"]["git"]["commit"] == commit
        history = client.get("/api/v1/runs/2/metrics", params={"keys": "answer"}).json()
        assert history["series"][0]["values"] == [42.0]  # the run's code, not the new commit
