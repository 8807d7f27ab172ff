"""The CI-sized demo loop end to end, as a user runs it: `crucible up`, then
`crucible demo --quick`; then, through the API, every run succeeded, every checkpoint was
evaluated, and the final checkpoint's lineage reaches back to the teacher's data."""

from pathlib import Path

import pytest

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase, RunKind
from tests.servers import crucible, local_server


@pytest.mark.timeout(840)  # past its own waits: the server's start, the demo
def test_quick_demo_loop_runs_and_is_traced(tmp_path: Path) -> None:
    with local_server(tmp_path, command="up") as server:
        demo = crucible(server.env, "demo", "--quick", timeout=600)
        report = f"{demo.stdout}\n{demo.stderr}\n--- server log ---\n{server.log.read_text()}"
        assert demo.returncode == 0, report
        assert "held-out accuracy: initial" in demo.stdout, report

        with CrucibleClient(server.url, server.token) as api:
            runs = api.list_runs(project="default", limit=100).items
            assert all(r.phase == Phase.Succeeded for r in runs), [
                (r.name, r.phase, r.message) for r in runs
            ]
            by_name = {r.name: r for r in runs}
            evals = [r for r in runs if r.kind == RunKind.eval]
            for stage in ("demo-quick-sft", "demo-quick-rl"):
                run = by_name[stage]
                checkpoints = {c.id for c in api.list_checkpoints(run.id).items}
                scored = {e.checkpoint_id for e in api.list_run_evals(run.id)}
                assert checkpoints and scored == checkpoints, stage
                assert all("accuracy" in e.scores for e in api.list_run_evals(run.id))
            # One eval run per checkpoint (and suite): nothing evaluated twice.
            assert len(evals) == sum(
                len(api.list_checkpoints(by_name[s].id).items)
                for s in ("demo-quick-sft", "demo-quick-rl")
            )
            sft_scores = sorted(
                api.list_run_evals(by_name["demo-quick-sft"].id), key=lambda e: e.step
            )
            assert sft_scores[0].step == 0  # the initial model is evaluated too
            assert sft_scores[-1].scores["accuracy"] > sft_scores[0].scores["accuracy"]

            final = api.latest_checkpoint(by_name["demo-quick-rl"].id)
            assert final is not None
            graph = api.lineage("checkpoint", final.id, "upstream", depth=10)
            upstream_runs = {n["label"] for n in graph["nodes"] if n["type"] == "run"}
            assert {
                "demo-quick-teacher",
                "demo-quick-sft",
                "demo-quick-rollouts",
                "demo-quick-rl",
            } <= upstream_runs, graph
            datasets = [n for n in graph["nodes"] if n["type"] == "dataset_version"]
            assert len(datasets) == 2, datasets
            relations = {e["relation"] for e in graph["edges"]}
            assert relations >= {"produced", "consumed_by", "initialised"}
