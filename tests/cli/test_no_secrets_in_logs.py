"""No secret in any log: a full embedded flow (`crucible up`, a run that logs metrics and
saves a checkpoint, CLI calls, a sign-in) and then every file it wrote that is not a secret
store is scanned for the admin token, the workload's token and the sign-in code."""

import sys
import time
from pathlib import Path

import httpx
import pytest

from crucible.core.signin import issue_code
from tests.servers import crucible, local_server

WORKLOAD = """\
kind: TrainingRun
metadata: {name: leaky}
spec:
  experiment: secrets
  command:
    - PYTHON
    - -c
    - |
      import os, pathlib, torch, crucible
      from crucible.sdk import TrainState
      # Kept outside every log, so the test knows what to look for.
      pathlib.Path(os.environ["CRUCIBLE_HOME"], "..", "workload-token").write_text(
          os.environ["CRUCIBLE_TOKEN"])
      run = crucible.init()
      model = torch.nn.Linear(2, 2)
      optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
      for step in range(20):
          run.log({"train/loss": 1.0 / (step + 1)}, step=step)
      run.save_checkpoint(20, {"train": TrainState(model, optimizer)})
      print("trained", flush=True)
      run.finish()
"""

# Where secrets are meant to be, each readable by its owner only.
SECRET_STORES = {"token", "signin-code", "workload-token"}

pytestmark = pytest.mark.slow  # a real workload: torch's import dominates


@pytest.mark.timeout(480)  # past its own waits: the server's start, the run
def test_a_full_embedded_run_leaves_no_secret_in_any_log(tmp_path: Path) -> None:
    manifest = tmp_path / "run.yaml"
    manifest.write_text(WORKLOAD.replace("PYTHON", sys.executable))
    with local_server(tmp_path, command="up") as server:
        admin_token = server.token
        submitted = crucible(server.env, "submit", str(manifest))
        assert submitted.returncode == 0, submitted.stderr
        deadline = time.monotonic() + 240  # torch's import alone is slow on a busy machine
        while "Succeeded" not in (listed := crucible(server.env, "runs", "ls").stdout):
            assert "Failed" not in listed, crucible(server.env, "runs", "logs", "1").stdout
            assert time.monotonic() < deadline, listed
            time.sleep(1)
        run_logs = crucible(server.env, "runs", "logs", "1")
        assert "trained" in run_logs.stdout
        code = issue_code(server.home)
        signed_in = httpx.post(f"{server.url}/api/v1/auth/sign-in-code", json={"code": code})
        assert signed_in.status_code == 200
        session_token = signed_in.json()["token"]
        wrong = httpx.get(f"{server.url}/api/v1/runs", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        checkpoints = httpx.get(
            f"{server.url}/api/v1/runs/1/checkpoints",
            headers={"Authorization": f"Bearer {admin_token}"},
        ).json()["items"]
        assert len(checkpoints) == 1

    workload_token = (tmp_path / "workload-token").read_text()
    secrets = {
        "admin token": admin_token,
        "workload token": workload_token,
        "sign-in code": code,
        "session token": session_token,
    }
    assert all(len(s) >= 20 for s in secrets.values())
    scanned = [server.log.name]
    texts = {server.log: server.log.read_text(errors="replace")}
    outputs = {"crucible submit": submitted.stdout + submitted.stderr, "runs logs": run_logs.stdout}
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and path.name not in SECRET_STORES and "checkpoints" not in path.parts:
            texts[path] = path.read_text(errors="replace")
            scanned.append(str(path.relative_to(tmp_path)))
    assert any(p.name == "attempt-1.log" for p in texts), scanned
    for what, secret in secrets.items():
        for path, text in texts.items():
            assert secret not in text, f"the {what} is in {path}"
        for name, text in outputs.items():
            assert secret not in text, f"the {what} is in the output of {name}"
