"""examples/train-and-eval.yaml runs as its comment says: `crucible submit` while `crucible
up` runs, every run it makes (the teacher, the SFT run, an eval per checkpoint and the
eval of the latest checkpoint) succeeds, and the SFT run's profile is there to read."""

from pathlib import Path

import pytest

from tests.cli.example_runs import example_succeeds

EXAMPLE = Path(__file__).parents[2] / "examples" / "train-and-eval.yaml"


@pytest.mark.slow
@pytest.mark.timeout(780)  # past its own waits: the server's start, the runs
def test_the_train_and_eval_example_runs_to_success(tmp_path: Path) -> None:
    # 3 submitted + an EvalJob for each of the SFT run's 2 checkpoints
    with example_succeeds(tmp_path, EXAMPLE, runs=5, timeout=540) as done:
        latest = done.api.latest_checkpoint(done.by_name["arith-sft"].id)
        assert latest is not None and latest.step == 200
        scored_by = {e.eval_run_id: e for e in done.api.list_checkpoint_evals(latest.id)}
        explicit = scored_by[done.by_name["arith-sft-eval"].id]  # and the automatic one
        assert len(scored_by) == 2 and "accuracy" in explicit.scores
        # `crucible runs profiles 2`, as the example's comment says, reads this.
        profiles = done.api.list_run_profiles(done.by_name["arith-sft"].id).profiles
        assert [p.name for p in profiles] == ["rank0-steps101-103"]
        assert profiles[0].summary is not None and profiles[0].summary.annotated
