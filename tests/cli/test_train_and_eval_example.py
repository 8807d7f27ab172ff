"""examples/train-and-eval.yaml runs as its comment says: `crucible submit` while `crucible
up` runs, and every run it makes (the teacher, the SFT run, an eval per checkpoint and the
eval of the latest checkpoint) succeeds."""

import time
from pathlib import Path

import pytest

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from tests.servers import crucible, local_server

EXAMPLE = Path(__file__).parents[2] / "examples" / "train-and-eval.yaml"


@pytest.mark.slow
@pytest.mark.timeout(780)  # past its own waits: the server's start, the runs
def test_the_train_and_eval_example_runs_to_success(tmp_path: Path) -> None:
    with local_server(tmp_path, command="up") as server:
        submitted = crucible(server.env, "submit", str(EXAMPLE))
        assert submitted.returncode == 0, submitted.stderr
        with CrucibleClient(server.url, server.token) as api:
            deadline = time.monotonic() + 540
            while True:
                runs = api.list_runs(project="default", limit=100).items
                # 3 submitted + an EvalJob for each of the SFT run's 2 checkpoints
                if len(runs) >= 5 and all(r.phase.is_terminal for r in runs):
                    break
                assert time.monotonic() < deadline, [(r.name, r.phase) for r in runs]
                time.sleep(1)
            report = [(r.name, r.phase, r.reason, r.message) for r in runs]
            assert all(r.phase == Phase.Succeeded for r in runs), (
                report,
                server.log.read_text()[-3000:],
            )
            by_name = {r.name: r for r in runs}
            latest = api.latest_checkpoint(by_name["arith-sft"].id)
            assert latest is not None and latest.step == 200
            scored_by = {e.eval_run_id: e for e in api.list_checkpoint_evals(latest.id)}
            explicit = scored_by[by_name["arith-sft-eval"].id]  # and the automatic one
            assert len(scored_by) == 2 and "accuracy" in explicit.scores
