"""scripts/lib/prereqs.sh: a missing or too old python3, node or go stops the script that needs
it with one line naming the tool, the version found and what to install; this machine's pass.

Each case puts stand-ins printing the versions to test alone on PATH, and runs `require CHECK`
as the scripts do (strict mode, so a check that trips over `set -e` shows here too)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREREQS = REPO / "scripts" / "lib" / "prereqs.sh"
BASH = shutil.which("bash") or "/bin/bash"  # looked up before PATH holds only the stand-ins
NAME = "some-script"  # the calling script's name, which starts its error line


def require(check: str, path: str) -> subprocess.CompletedProcess[str]:
    script = f'set -euo pipefail; shopt -s inherit_errexit; source "$1"; require {check}'
    return subprocess.run(
        [BASH, "-c", script, NAME, str(PREREQS)],
        env={"PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    """An executable `name` in bin_dir: a /bin/sh script using only the shell's builtins."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def python3(version: str, ensurepip: str = "exit 0") -> str:
    """A python3 reporting `version`; `ensurepip` decides `python3 -c 'import ensurepip...'`."""
    return f'case "$1" in --version) echo "Python {version}" ;; -c) {ensurepip} ;; esac'


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done
    assert done.stdout == "", done
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"{NAME}: "), done.stderr
    return last


def go_minimum() -> str:
    """The newest `go` directive of the modules scripts/cluster.d builds."""
    found = [
        tuple(int(part) for part in match.split("."))
        for mod in (REPO / "scripts" / "cluster.d").glob("*/go.mod")
        for match in re.findall(r"^go (\S+)$", mod.read_text(), flags=re.M)
    ]
    return ".".join(str(part) for part in max(found))


@pytest.mark.parametrize(
    ("stand_ins", "check", "says"),
    [
        ({}, "check_python", ["python3 not found", "apt-get install python3 python3-venv"]),
        (
            {"python3": python3("3.9.2")},
            "check_python",
            ["python3 is 3.9.2", "needs Python >= 3.11", "install Python 3.11"],
        ),
        (
            {"python3": python3("3.11.2", ensurepip="exit 1")},
            "check_python",
            ["python3 3.11.2", "not Debian's", "no ensurepip", "python3.11-venv"],
        ),
        ({}, "check_node", ["node not found", "Node ^20.19.0 || >=22.12.0", "install Node 22"]),
        (
            {"node": "echo v18.19.0", "npm": "exit 0"},
            "check_node",
            ["node is 18.19.0", "Vite 7 needs Node ^20.19.0 || >=22.12.0", "install Node 22"],
        ),
        ({"node": "echo v20.18.3", "npm": "exit 0"}, "check_node", ["node is 20.18.3"]),
        ({"node": "echo v21.7.3", "npm": "exit 0"}, "check_node", ["node is 21.7.3"]),
        ({"node": "echo v20.20.2"}, "check_node", ["npm not found beside node 20.20.2"]),
        ({}, "check_go", ["go not found", "needs Go >= 1.26", "https://go.dev/dl/"]),
        (
            {"go": "echo go1.19.8"},
            "check_go",
            ["go is go1.19.8", "needs Go >= 1.26", "1.19", "https://go.dev/dl/"],
        ),
        # a 1.26 older than a module's `go` directive fails too: GOTOOLCHAIN=local
        ({"go": "echo go1.26.0"}, "check_go", ["go is go1.26.0", f"Go >= {go_minimum()}"]),
    ],
)
def test_a_missing_or_old_tool_is_one_line_naming_it_and_what_to_install(
    tmp_path: Path, stand_ins: dict[str, str], check: str, says: list[str]
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in stand_ins.items():
        stand_in(bin_dir, name, body)
    done = require(check, str(bin_dir))
    assert len(done.stderr.splitlines()) == 1, done.stderr
    line = error_line(done)
    for words in says:
        assert words in line, line


@pytest.mark.parametrize(
    ("stand_ins", "check"),
    [
        ({"python3": python3("3.11.2")}, "check_python"),
        ({"python3": python3("3.12.1")}, "check_python"),
        ({"node": "echo v20.19.0", "npm": "exit 0"}, "check_node"),
        ({"node": "echo v22.12.0", "npm": "exit 0"}, "check_node"),
        ({"go": f"echo go{go_minimum()}"}, "check_go"),
        ({"go": "echo go1.27.1"}, "check_go"),
    ],
)
def test_a_new_enough_tool_passes_silently(
    tmp_path: Path, stand_ins: dict[str, str], check: str
) -> None:
    bin_dir = tmp_path / "bin"
    for name, body in stand_ins.items():
        stand_in(bin_dir, name, body)
    done = require(check, str(bin_dir))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_debians_python_without_ensurepip_gets_python3_venv_from_apt_when_root(
    tmp_path: Path,
) -> None:
    bin_dir, installed, apt_log = tmp_path / "bin", tmp_path / "installed", tmp_path / "apt.log"
    stand_in(bin_dir, "python3", python3("3.11.2", ensurepip=f'[ -e "{installed}" ]'))
    stand_in(bin_dir, "dpkg", 'echo "python3-minimal: $2"')
    stand_in(bin_dir, "apt-get", f'echo "$*" >>"{apt_log}"; exit 0')
    done = require("check_python", str(bin_dir))
    if os.geteuid() != 0:
        assert "apt-get install python3.11-venv" in error_line(done)
        assert not apt_log.exists()
        return
    # Root: apt-get is asked for the package; one that does not bring ensurepip is an error...
    assert "apt-get install python3.11-venv" in error_line(done)
    assert "install -y -qq python3.11-venv" in apt_log.read_text()
    # ...and one that does is not.
    stand_in(bin_dir, "apt-get", f'case "$*" in *" install "*) : >"{installed}" ;; esac')
    done = require("check_python", str(bin_dir))
    assert done.returncode == 0, done
    assert done.stderr.splitlines() == [
        f"{NAME}: installing Debian's python3.11-venv (python3 -m venv needs its ensurepip)"
    ]


@pytest.mark.parametrize("check", ["check_python", "check_node", "check_go"])
def test_this_machines_tools_pass(check: str) -> None:
    tool = {"check_python": "python3", "check_node": "node", "check_go": "go"}[check]
    if tool != "python3" and shutil.which(tool) is None:
        pytest.skip(f"no {tool} on PATH (scripts/web and the Go builds would say so)")
    done = require(check, os.environ["PATH"])
    assert (done.returncode, done.stderr) == (0, ""), done


def test_the_node_range_is_vites_own() -> None:
    lock = json.loads((REPO / "web" / "package-lock.json").read_text())
    engines = lock["packages"]["node_modules/vite"]["engines"]["node"]
    match = re.search(r'^VITE_NODE_RANGE="(.*)"$', PREREQS.read_text(), flags=re.M)
    assert match is not None
    assert match.group(1) == engines
