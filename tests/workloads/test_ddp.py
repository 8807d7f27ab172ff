"""Two-process DDP on CPU with gloo: both ranks see the same losses and stay in sync."""

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from crucible.config.workload import TrainConfig, model_preset
from crucible.training.train import Trainer
from tests.workloads.ranks import run_ranks

WORLD_SIZE = 2


def _run_rank(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD_SIZE
    )
    try:
        records = [
            {"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(10) for b in range(10)
        ]
        config = TrainConfig(steps=4, batch_size=8, grad_accum_steps=2, warmup_steps=1)
        trainer = Trainer(config, model_preset("tiny"), records)
        losses = trainer.train()
        torch.save(
            {"losses": losses, "params": [p.detach() for p in trainer.raw_model.parameters()]},
            Path(tmp) / f"rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_agree_on_losses_and_parameters(tmp_path) -> None:
    initial = Trainer(TrainConfig(), model_preset("tiny"), [{"prompt": "1+1=", "completion": "2"}])
    run_ranks(_run_rank, (str(tmp_path),), WORLD_SIZE)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD_SIZE))
    assert len(rank0["losses"]) == 4
    assert rank0["losses"] == rank1["losses"]
    assert rank0["losses"][-1] < rank0["losses"][0]
    for a, b in zip(rank0["params"], rank1["params"], strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(rank0["params"][0], initial.raw_model.wte.weight)
