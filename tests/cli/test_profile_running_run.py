"""`crucible runs profile ID --steps N --wait` on a real local train run, as docs/workloads.md
says: against `crucible up`, the built-in train job on the CPU hears of the request with a
heartbeat, records the next N steps, and the CLI prints their profile once it is written."""

import re
from pathlib import Path

import pytest

from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.schemas.runs import RunSubmit
from crucible.training.records import write_jsonl
from tests.servers import crucible, local_server, wait_for

STEPS = 20_000
"""Far more than the test lets it run: it is cancelled once profiled."""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_running_train_run_records_the_requested_steps_and_the_cli_prints_them(
    tmp_path: Path,
) -> None:
    records = tmp_path / "sums.jsonl"
    write_jsonl(
        records,
        [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(10) for b in range(10)],
    )
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "profiled-live"},
        "spec": {
            "experiment": "profiles",
            "inputs": [{"dataset": "sums@1"}],
            "config": {
                "model": {"preset": "tiny"},
                "train": {"steps": STEPS, "batch_size": 4, "warmup_steps": 1},
            },
            # Beats every half second, so the request reaches the run soon.
            "env": [
                {"name": "CRUCIBLE_HEARTBEAT_INTERVAL", "value": "0.5"},
                {"name": "OMP_NUM_THREADS", "value": "1"},
            ],
        },
    }
    with (
        local_server(tmp_path, command="up") as server,
        CrucibleClient(server.url, server.token) as api,
    ):
        api.register_dataset_version(
            DatasetVersionCreate(
                project="default",
                name="sums",
                uri=records.as_uri(),
                digest=content_of(records).digest,
                record_count=100,
            )
        )
        run = api.submit_run(RunSubmit.model_validate({"project": "default", "manifest": manifest}))

        def training() -> bool:
            current = api.get_run(run.id)
            assert not current.phase.is_terminal, (current.phase, current.message)
            return current.phase is Phase.Running and (current.latest_step or 0) >= 1

        wait_for("the run's first steps", training, 300)
        before = api.get_run(run.id).latest_step or 0
        try:
            asked = crucible(
                server.env, "runs", "profile", str(run.id), "--steps", "2", "--wait", timeout=180
            )
            assert asked.returncode == 0, asked.stderr
            again = crucible(server.env, "runs", "profile", str(run.id), "--steps", "2")
            zero = crucible(server.env, "runs", "profile", str(run.id), "--steps", "0")
        finally:
            api.cancel_run(run.id)
        ended = crucible(server.env, "runs", "profile", str(run.id))
        out = asked.stdout
        assert re.search(rf"profile request \d+ of run {run.id}: 2 steps", out), out
        first, last = (int(n) for n in re.findall(r"steps (\d+)-(\d+) recorded", out)[0])
        assert last == first + 1 and first > before, (before, out)
        # The profile as `crucible runs profiles` prints it: its steps, split and operators.
        assert f"rank0-steps{first}-{last} (steps {first}-{last}, rank 0)" in out, out
        assert f"/api/v1/runs/{run.id}/profiles/rank0-steps{first}-{last}/trace" in out
        assert "split on the cpu: compute" in out and "top operators (self time)" in out

        listed = api.list_run_profiles(run.id)
        profile = listed.profiles[0]
        assert (profile.first_step, profile.last_step) == (first, last)
        assert profile.summary is not None and profile.summary.annotated
        # The first request done, a second one is taken (newest first).
        assert again.returncode == 0, again.stderr
        second, request = listed.requests
        assert (request.state, request.first_step, request.last_step) == ("done", first, last)
        assert second.steps == 2 and second.id > request.id
        assert zero.returncode == 1 and "profile 1 to 20 steps, not 0" in zero.stderr
        assert ended.returncode == 1
        assert f"run {run.id} cannot be profiled now: it is Cancelled" in ended.stderr
