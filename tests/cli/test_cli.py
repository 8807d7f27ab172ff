"""The CLI against a real `crucible server` process in embedded mode, as a user runs it."""

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.core.run_profiles import profile_dir
from tests.profile_files import leave_profile
from tests.servers import crucible, free_port, local_server

EXAMPLE = Path(__file__).parents[2] / "examples" / "train-and-eval.yaml"


@pytest.fixture(scope="module")
def server_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One server for the module: starting one costs seconds, and tests use distinct names."""
    with local_server(tmp_path_factory.mktemp("server")) as server:
        yield server.env


def test_first_start_saves_an_owner_only_admin_token(server_env: dict[str, str]) -> None:
    token_file = Path(server_env["CRUCIBLE_HOME"]) / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token.startswith("cru_")
    log = (Path(server_env["CRUCIBLE_HOME"]).parent / "server.log").read_text()
    # Printed only to a terminal: redirected output is a log, and logs hold no secrets.
    assert token not in log
    assert f"Admin token saved for your CLI in {token_file}" in " ".join(log.split())


def test_submit_list_show_and_lineage(server_env: dict[str, str]) -> None:
    submitted = crucible(server_env, "submit", str(EXAMPLE))
    assert submitted.returncode == 0, submitted.stderr
    assert "RolloutJob arith-teacher submitted as run 1" in submitted.stdout
    assert "TrainingRun arith-sft submitted as run 2" in submitted.stdout
    assert "EvalJob arith-sft-eval submitted as run 3" in submitted.stdout
    listed = crucible(server_env, "runs", "ls")
    assert "arith-sft" in listed.stdout and "Pending" in listed.stdout
    shown = crucible(server_env, "runs", "show", "1")
    assert shown.returncode == 0 and "Submitted" in shown.stdout
    lineage = crucible(server_env, "lineage", "run", "1")
    assert lineage.returncode == 0, lineage.stderr


def test_token_create_prints_a_working_token(server_env: dict[str, str]) -> None:
    created = crucible(server_env, "token", "create", "--project", "default", "--role", "viewer")
    assert created.returncode == 0, created.stderr
    viewer = created.stdout.strip()
    listed = crucible(server_env | {"CRUCIBLE_TOKEN": viewer}, "runs", "ls")
    assert listed.returncode == 0, listed.stderr
    refused = crucible(server_env | {"CRUCIBLE_TOKEN": viewer}, "submit", str(EXAMPLE))
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
    server_env: dict[str, str], tmp_path: Path, content: str, expected: str
) -> None:
    """A valid document first, then a bad one: the file is refused whole, before any submit."""
    good = (
        "kind: TrainingRun\nmetadata: {name: is-never-submitted}\nspec: {experiment: x}\n"
        if content
        else ""
    )
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(good + "---\n" + content if content else "")
    result = crucible(server_env, "submit", str(bad_file))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    if content:
        assert expected in result.stderr, result.stderr
    else:
        assert "holds no YAML documents" in result.stderr
    assert "is-never-submitted" not in crucible(server_env, "runs", "ls").stdout


def test_unknown_run_and_unreachable_api(server_env: dict[str, str]) -> None:
    missing = crucible(server_env, "runs", "show", "999")
    assert missing.returncode == 1 and "run 999 not found" in missing.stderr
    down = crucible(
        server_env | {"CRUCIBLE_API_URL": f"http://127.0.0.1:{free_port()}"}, "runs", "ls"
    )
    assert down.returncode == 1 and "cannot reach" in down.stderr


BAD_ARGUMENTS = [
    (("submit", "no-such-file.yaml"), "no-such-file.yaml"),
    (("runs", "show", "not-a-number"), "Invalid value for 'run_id'"),
    (("runs", "ls", "--no-such-option"), "No such option"),
    (("token", "create", "--project", "default", "--role", "emperor"), "emperor"),
    (("frobnicate",), "No such command"),
]


def test_bad_arguments_are_refused_clearly_and_submit_nothing(
    server_env: dict[str, str],
) -> None:
    def runs_listed() -> int:  # rows, not text: the age column moves on between calls
        return len(crucible(server_env, "runs", "ls").stdout.splitlines())

    before = runs_listed()
    for args, expected in BAD_ARGUMENTS:
        result = crucible(server_env, *args)
        assert result.returncode != 0, args
        assert "Traceback" not in result.stderr, args
        assert expected in result.stderr, (args, result.stderr)
    assert runs_listed() == before


def test_runs_profiles_prints_each_profiles_split_and_top_kernels(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    manifest = tmp_path / "profiled.yaml"
    manifest.write_text("kind: TrainingRun\nmetadata: {name: profiled}\nspec: {experiment: x}\n")
    submitted = crucible(server_env, "submit", str(manifest))
    assert submitted.returncode == 0, submitted.stderr
    run_id = int(submitted.stdout.split("submitted as run ")[1].split()[0])

    none_yet = crucible(server_env, "runs", "profiles", str(run_id))
    assert none_yet.returncode == 0, none_yet.stderr
    assert f"run {run_id} has no profiles" in none_yet.stdout
    assert "profile_from_step" in none_yet.stdout

    home = Path(server_env["CRUCIBLE_HOME"])
    leave_profile(profile_dir(home, run_id), "rank0-steps3-4")
    listed = crucible(server_env, "runs", "profiles", str(run_id))
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    assert "rank0-steps3-4 (steps 3-4, rank 0)" in out
    assert f"/api/v1/runs/{run_id}/profiles/rank0-steps3-4/trace" in out
    assert "0.1 ms, split on the cpu: compute 100.0%  communication 0.0%" in out
    assert "idle 0.0%" in out
    assert "top operators (self time)" in out
    (row,) = [line for line in out.splitlines() if "aten::mm" in line]
    assert row.split("│")[2:5] == [" 1     ", " 0.080    ", " 100.0% "], row

    missing = crucible(server_env, "runs", "profiles", "999")
    assert missing.returncode == 1 and "run 999 not found" in missing.stderr
