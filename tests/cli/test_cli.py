"""The CLI against a real `crucible server` process in embedded mode, as a user runs it."""

import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "train-and-eval.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One server for the module: starting one costs seconds, and tests use distinct names."""
    tmp_path = tmp_path_factory.mktemp("server")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env |= {"CRUCIBLE_HOME": str(tmp_path / "home"), "CRUCIBLE_API_URL": f"http://127.0.0.1:{port}"}
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "crucible", "server", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{env['CRUCIBLE_API_URL']}/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("server did not start:\n" + (tmp_path / "server.log").read_text())
        time.sleep(0.2)
    yield env
    process.terminate()
    process.wait(10)


def crucible(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crucible", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_first_start_saves_an_owner_only_admin_token(local_server: dict[str, str]) -> None:
    token_file = Path(local_server["CRUCIBLE_HOME"]) / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token.startswith("cru_")
    log = (Path(local_server["CRUCIBLE_HOME"]).parent / "server.log").read_text()
    assert log.count(token) == 1  # printed once, at first start


def test_submit_list_show_and_lineage(local_server: dict[str, str]) -> None:
    submitted = crucible(local_server, "submit", str(EXAMPLE))
    assert submitted.returncode == 0, submitted.stderr
    assert "TrainingRun arith-sft submitted as run 1" in submitted.stdout
    assert "EvalJob arith-sft-eval submitted as run 2" in submitted.stdout
    listed = crucible(local_server, "runs", "ls")
    assert "arith-sft" in listed.stdout and "Pending" in listed.stdout
    shown = crucible(local_server, "runs", "show", "1")
    assert shown.returncode == 0 and "Submitted" in shown.stdout
    lineage = crucible(local_server, "lineage", "run", "1")
    assert lineage.returncode == 0, lineage.stderr


def test_token_create_prints_a_working_token(local_server: dict[str, str]) -> None:
    created = crucible(local_server, "token", "create", "--project", "default", "--role", "viewer")
    assert created.returncode == 0, created.stderr
    viewer = created.stdout.strip()
    listed = crucible(local_server | {"CRUCIBLE_TOKEN": viewer}, "runs", "ls")
    assert listed.returncode == 0, listed.stderr
    refused = crucible(local_server | {"CRUCIBLE_TOKEN": viewer}, "submit", str(EXAMPLE))
    assert refused.returncode == 1
    assert "403" in refused.stderr and "editor" in refused.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("kind: TrainingRun\nmetadata: {name: BAD}\nspec: {experiment: x}\n", "metadata.name"),
        (
            "kind: TrainingRun\nmetadata: {name: ok}\nspec: {experiment: x, nodes: 0}\n",
            "spec.nodes",
        ),
        ("kind: Pod\nmetadata: {name: ok}\n", "kind"),
        ("a: [unclosed\n", "while parsing"),
        ("", "is-never-submitted"),
    ],
)
def test_bad_yaml_is_one_clear_line_and_submits_nothing(
    local_server: dict[str, str], tmp_path: Path, content: str, expected: str
) -> None:
    """A valid document first, then a bad one: the file is refused whole, before any submit."""
    good = (
        "kind: TrainingRun\nmetadata: {name: is-never-submitted}\nspec: {experiment: x}\n"
        if content
        else ""
    )
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(good + "---\n" + content if content else "")
    result = crucible(local_server, "submit", str(bad_file))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    if content:
        assert expected in result.stderr, result.stderr
    else:
        assert "holds no YAML documents" in result.stderr
    assert "is-never-submitted" not in crucible(local_server, "runs", "ls").stdout


def test_unknown_run_and_unreachable_api(local_server: dict[str, str]) -> None:
    missing = crucible(local_server, "runs", "show", "999")
    assert missing.returncode == 1 and "run 999 not found" in missing.stderr
    down = crucible(
        local_server | {"CRUCIBLE_API_URL": f"http://127.0.0.1:{free_port()}"}, "runs", "ls"
    )
    assert down.returncode == 1 and "cannot reach" in down.stderr
