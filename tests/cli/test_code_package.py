"""`crucible submit --package DIR` on `crucible up`: a team's code that is installed nowhere and
sits in no workingDir runs from its package, both as a command (`python -m`) and as an import
path a reference workload resolves (a teacher); `crucible runs reproduce` reads the same
package after the directory is gone; a package whose archive changed fails the attempt naming
both digests; and a package that cannot be made is one line, exit 2, nothing registered."""

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.artifacts import code_package
from tests.servers import LocalServer, crucible, local_server

MODULE = "shipped_code"  # importable from the package alone: asserted below

SCRIPT = """\
import crucible

from shipped_code.answer import ANSWER

run = crucible.init()
run.log({"answer": ANSWER}, step=0)
run.finish()
"""

TEACHER = """\
def echo_teacher(prompts, *, suffix):
    return [prompt[0] + suffix for prompt in prompts]
"""

RUNS = """\
kind: TrainingRun
metadata: {name: shipped-script}
spec:
  experiment: packages
  command: [python, -m, shipped_code.train]
  recovery: {maxFailures: 0}
---
kind: RolloutJob
metadata: {name: shipped-teacher}
spec:
  experiment: packages
  policy: {teacher: "shipped_code.teach:echo_teacher", options: {suffix: "0"}}
  output: echo
  config: {task: {digits: 1}, datagen: {num_prompts: 8}}
"""


def package_dir(root: Path) -> Path:
    module = root / MODULE
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("")
    (module / "answer.py").write_text("ANSWER = 42.0\n")
    (module / "train.py").write_text(SCRIPT)
    (module / "teach.py").write_text(TEACHER)
    return root


def api(server: LocalServer) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def wait_ended(client: httpx.Client, name: str, seconds: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        runs = client.get("/runs", params={"limit": 100}).json()["items"]
        run: dict[str, Any] | None = next((r for r in runs if r["name"] == name), None)
        if run is not None and run["phase"] in ("Succeeded", "Failed", "Cancelled"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.5)


def answers(client: httpx.Client, run_id: int) -> list[float]:
    history = client.get(f"/runs/{run_id}/metrics", params={"keys": "answer"}).json()
    values: list[float] = history["series"][0]["values"]
    return values


def code_artifacts(client: httpx.Client) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.get(
        "/artifacts", params={"project": "default", "kind": "code"}
    ).json()["items"]
    return items


@pytest.mark.timeout(900)
def test_runs_read_their_code_from_the_package_and_a_changed_archive_fails_naming_digests(
    tmp_path: Path,
) -> None:
    source = package_dir(tmp_path / "team-code")
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUNS)
    with local_server(tmp_path, command="up") as server:
        client = api(server)
        elsewhere = subprocess.run(
            [sys.executable, "-c", f"import {MODULE}"], env=server.env, cwd=tmp_path, check=False
        )
        assert elsewhere.returncode != 0  # only the package holds it

        done = crucible(server.env, "submit", str(runs), "--package", str(source))
        assert done.returncode == 0, done.stderr
        (artifact,) = code_artifacts(client)
        assert (artifact["name"], artifact["meta"]) == ("team-code", {"files": 4})
        assert f"registered as artifact {artifact['id']}" in done.stdout

        script = wait_ended(client, "shipped-script")
        teacher = wait_ended(client, "shipped-teacher")
        assert (script["phase"], teacher["phase"]) == ("Succeeded", "Succeeded"), (script, teacher)
        assert answers(client, script["id"]) == [42.0]
        echo = client.get("/datasets/resolve", params={"project": "default", "ref": "echo@1"})
        lines = Path(echo.json()["uri"].removeprefix("file://")).read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == 8
        assert all(r["completion"] == r["prompt"][0] + "0" for r in records)
        for run in (script, teacher):
            assert run["manifest"]["spec"]["codePackage"] == f"artifact:{artifact['id']}"
            package = {"artifact_id": artifact["id"], "digest": artifact["digest"]}
            assert run["code"]["package"] == package
        assert script["code"]["directory"] == str(source.resolve())
        unpacked = server.home / "code" / artifact["digest"].removeprefix("sha256:")
        assert (unpacked / MODULE / "train.py").stat().st_mode & 0o222 == 0  # read-only

        # The package, not the directory, is the code: reproduced after the directory is gone.
        shutil.rmtree(source)
        again = crucible(server.env, "runs", "reproduce", str(script["id"]))
        assert again.returncode == 0, again.stderr
        reproduced = wait_ended(client, "shipped-script-r1")
        assert reproduced["phase"] == "Succeeded", reproduced
        assert reproduced["manifest"]["spec"]["codePackage"] == f"artifact:{artifact['id']}"
        assert answers(client, reproduced["id"]) == [42.0]

        # The stored archive changed after registration: the next run refuses it.
        stored = Path(artifact["uri"].removeprefix("file://"))
        changed = stored.read_bytes().replace(b"ANSWER = 42.0", b"ANSWER = 41.0")
        stored.write_bytes(changed)
        tampered = tmp_path / "tampered.yaml"
        tampered.write_text(
            RUNS.split("---")[0]
            .replace("shipped-script", "shipped-tampered")
            .replace("  recovery:", f"  codePackage: artifact:{artifact['id']}\n  recovery:")
        )
        assert crucible(server.env, "submit", str(tampered)).returncode == 0
        failed = wait_ended(client, "shipped-tampered")
        assert failed["phase"] == "Failed", failed
        (attempt,) = client.get(f"/runs/{failed['id']}/attempts").json()
        found = code_package.digest_of(changed)
        assert f"expected {artifact['digest']}, found {found}" in attempt["message"]
        assert (attempt["end_reason"], attempt["exit_code"]) == ("ErrorExit", None)  # never ran


def evil_archive(path: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    path.write_bytes(buffer.getvalue())
    return path


@pytest.mark.timeout(300)
def test_a_package_that_cannot_be_made_is_one_line_exit_2_and_registers_nothing(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUNS)
    (tmp_path / "empty").mkdir()
    big = tmp_path / "big"
    big.mkdir()
    with (big / "weights.bin").open("wb") as out:
        out.truncate(code_package.MAX_PACKAGE_BYTES + 1)  # sparse: no disk, all its size
    (tmp_path / "junk.tar").write_bytes(b"not an archive\n" * 100)
    cases = [
        (["--package", str(tmp_path / "missing")], "missing does not exist"),
        (["--package", str(tmp_path / "empty")], "holds no files to pack"),
        (["--package", str(big)], "more than a code package may hold (64.0 MiB"),
        (["--package", str(tmp_path / "junk.tar")], "junk.tar is not a tar archive"),
        (["--package", str(evil_archive(tmp_path / "evil.tar"))], "a path outside"),
        (
            ["--package", str(package_dir(tmp_path / "ok")), "--backend", "kubernetes"],
            "give --package-to s3://bucket/prefix",
        ),
    ]
    with local_server(tmp_path) as server:
        client = api(server)
        for args, message in cases:
            done = crucible(server.env, "submit", str(runs), *args)
            assert done.returncode == 2, (args, done.stdout, done.stderr)
            assert message in done.stderr, (args, done.stderr)
            assert done.stderr.strip().count("\n") == 0, done.stderr  # one line
            assert "Traceback" not in done.stderr
        assert code_artifacts(client) == []
        assert client.get("/runs").json()["items"] == []
