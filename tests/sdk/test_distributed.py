"""Two processes under gloo, as torchrun starts them: rank 0 reports, both checkpoint."""

import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn

import crucible
from crucible.client import CrucibleClient
from tests.conftest import ADMIN_TOKEN
from tests.sdk.conftest import ServerProcess, free_port, new_run


def worker(rank: int, world: int, url: str, run_id: int, home: str, port: int) -> None:
    os.environ |= {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "CRUCIBLE_API_URL": url,
        "CRUCIBLE_TOKEN": ADMIN_TOKEN,
        "CRUCIBLE_HOME": home,
        "CRUCIBLE_RUN_ID": str(run_id),
        "CRUCIBLE_ATTEMPT": "1",
    }
    dist.init_process_group("gloo", rank=rank, world_size=world)
    run = crucible.init(flush_interval=0.1)
    for step in range(50):
        run.log({"who": float(rank)}, step=step)

    if rank == 1:
        os.kill(os.getpid(), signal.SIGTERM)  # only one rank is told; both must save
    preempted = run.should_checkpoint()

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    own = {f"rank{rank}": torch.full((4,), float(rank))}
    record = run.save_checkpoint(50, {"model": model.state_dict(), "own": own})

    restored = torch.nn.Linear(4, 4)
    own_restored = {f"rank{rank}": torch.zeros(4)}
    loaded_step = run.load_checkpoint({"model": restored.state_dict(), "own": own_restored})
    result = {
        "rank": rank,
        "reporter": run.is_reporter,
        "preempted": preempted,
        "checkpoint_id": record.id if record else None,
        "loaded_step": loaded_step,
        "model_equal": torch.equal(restored.weight, model.weight),
        "own": own_restored[f"rank{rank}"].tolist(),
    }
    Path(home, f"rank{rank}.json").write_text(json.dumps(result))
    run.finish()
    # Leave together: a rank that tears gloo down while its peer is still in a collective
    # makes the peer's gloo threads abort the process (seen once in CI as SIGABRT).
    dist.barrier()
    dist.destroy_process_group()


def test_two_ranks_rank0_reports_and_both_checkpoint(
    server: ServerProcess, api: CrucibleClient
) -> None:
    run_id = new_run(api)
    home = server.root / "home"  # the server's, as the executor gives it: checkpoints go there
    spawn(worker, args=(2, server.url, run_id, str(home), free_port()), nprocs=2, join=True)  # type: ignore[no-untyped-call]

    results = [json.loads((home / f"rank{r}.json").read_text()) for r in (0, 1)]
    checkpoint = api.latest_checkpoint(run_id)
    assert checkpoint is not None and checkpoint.step == 50
    for rank, result in enumerate(results):
        assert result["reporter"] is (rank == 0)
        assert result["preempted"], "SIGTERM on rank 1 reached every rank"
        assert result["checkpoint_id"] == checkpoint.id, "every rank gets the record"
        assert result["loaded_step"] == 50 and result["model_equal"]
        assert result["own"] == [float(rank)] * 4, "each rank's own shard came back"
    files = {p.name for p in Path(checkpoint.uri.removeprefix("file://")).iterdir()}
    assert {".metadata", "__0_0.distcp", "__1_0.distcp"} <= files
    series = api.request("GET", f"/api/v1/runs/{run_id}/metrics")["series"]
    assert [(s["key"], set(s["values"]), len(s["steps"])) for s in series] == [("who", {0.0}, 50)]
    assert len(api.list_checkpoints(run_id).items) == 1
