import time
from pathlib import Path
from tests.cli.example_runs import example_succeeds

EXAMPLE = Path("/work/main/examples/calculator-rl.yaml")


def test_x(tmp_path):
    t = time.time()
    with example_succeeds(tmp_path, EXAMPLE, runs=6, timeout=1500) as done:
        print("took", time.time() - t)
        for name, run in done.by_name.items():
            print(name, run.id, run.phase, run.started_at, run.ended_at)
        rl = done.by_name["calculator-rl"]
        a = done.api.request("GET", f"/api/v1/runs/{rl.id}/metrics", params={"keys": "reward"})
        print(a["series"][0]["values"])
        for c in done.api.list_checkpoints(rl.id).items:
            for e in done.api.list_checkpoint_evals(c.id):
                print(c.step, e.scores)
        sft = done.by_name["calculator-sft"]
        a = done.api.request("GET", f"/api/v1/runs/{sft.id}/metrics", params={"keys": "loss"})
        print(a["series"][0]["values"][::50])
