"""`crucible sweeps run examples/sweep.yaml` as docs/sweeps.md says: against `crucible up`,
once the teacher of examples/train-and-eval.yaml has written arith-sft-data. Its trials
are runs tagged with the sweep, their number and their point; ASHA stops the trial of the
tiny learning rate against the first trial, the run is cancelled and the reason printed;
the best trial is the first; running the file again after the end starts nothing more."""

import json
import os
from pathlib import Path

import pytest
import yaml

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from tests.servers import crucible, local_server, wait_for

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sweep_runs_its_trials_as_runs_and_asha_stops_the_slow_learner(tmp_path: Path) -> None:
    teacher = next(
        d
        for d in yaml.safe_load_all((EXAMPLES / "train-and-eval.yaml").read_text())
        if d["kind"] == "RolloutJob"
    )
    teacher_file = tmp_path / "teacher.yaml"
    teacher_file.write_text(yaml.safe_dump(teacher))
    with local_server(tmp_path, command="up") as server:
        submitted = crucible(server.env, "submit", str(teacher_file))
        assert submitted.returncode == 0, submitted.stderr
        with CrucibleClient(server.url, server.token) as api:

            def teacher_done() -> bool:
                (run,) = [r for r in api.list_runs(project="default").items]
                assert run.phase not in (Phase.Failed, Phase.Cancelled), run.message
                return run.phase == Phase.Succeeded

            wait_for("the teacher", teacher_done, 300)
            summary = tmp_path / "summary.json"
            swept = crucible(
                server.env,
                "sweeps",
                "run",
                str(EXAMPLES / "sweep.yaml"),
                "--poll",
                "0.5",
                "--summary",
                str(summary),
                timeout=600,
            )
            assert swept.returncode == 0, swept.stderr
            result = json.loads(summary.read_text())
            trials = {t["trial"]: t for t in result["trials"]}
            assert sorted(trials) == [0, 1, 2]
            assert trials[0]["phase"] == "Succeeded" and trials[0]["last_step"] == 600
            assert trials[0]["stopped"] is None
            # lr 3e-5 against 3e-3 at step 20: not the best of the two there.
            assert trials[1]["phase"] == "Cancelled"
            assert trials[1]["stopped"].startswith("stopped by ASHA at step ")
            assert "(rung 20): loss " in trials[1]["stopped"]
            assert trials[1]["stopped"] in swept.stdout
            assert trials[1]["last_step"] < 600
            assert result["best"] == 0
            assert f"{server.url}/#/compare?runs=" in swept.stdout

            runs = {
                int(r.tags["sweep.trial"]): r
                for r in api.list_runs(project="default", tag="sweep=arith-lr").items
            }
            assert sorted(runs) == [0, 1, 2]
            assert runs[1].name == "arith-lr-001"
            assert runs[1].tags["sweep.config.train.lr"] == "3e-05"
            assert runs[1].manifest["spec"]["config"]["train"]["lr"] == 3e-05
            assert runs[2].manifest["spec"]["config"]["train"]["lr"] == 0.0003

            again = crucible(server.env, "sweeps", "run", str(EXAMPLES / "sweep.yaml"))
            assert again.returncode == 0, again.stderr
            assert "started" not in again.stdout
            assert len(api.list_runs(project="default", tag="sweep=arith-lr").items) == 3


def offline_env(home: Path) -> dict[str, str]:
    """No server: the file is refused before the CLI calls one."""
    return {**os.environ, "CRUCIBLE_HOME": str(home), "CRUCIBLE_API_URL": "http://127.0.0.1:9"}


def test_a_sweep_file_with_an_unknown_parameter_is_refused_naming_it(tmp_path: Path) -> None:
    document = yaml.safe_load((EXAMPLES / "sweep.yaml").read_text())
    document["spec"]["parameters"] = {"config.train.lrate": {"values": [0.1]}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(document))
    answer = crucible(offline_env(tmp_path), "sweeps", "run", str(bad))
    assert answer.returncode == 1
    assert "parameter 'config.train.lrate': config.train has no key 'lrate'" in answer.stderr


def test_a_point_the_run_config_refuses_is_named_before_any_trial(tmp_path: Path) -> None:
    document = yaml.safe_load((EXAMPLES / "sweep.yaml").read_text())
    document["spec"]["parameters"] = {"config.train.lr": {"values": [0.1, 0.2, "fast"]}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(document))
    answer = crucible(offline_env(tmp_path), "sweeps", "run", str(bad))
    assert answer.returncode == 1
    assert "config.train.lr='fast' makes a bad run config" in answer.stderr
