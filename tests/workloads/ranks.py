"""Start a test's distributed ranks as processes forked from a fork server."""

import multiprocessing
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


def run_ranks(rank_main: Callable[..., None], args: tuple[Any, ...], nprocs: int) -> None:
    """Run rank_main(rank, *args) in nprocs processes and wait for all of them."""
    # Forked straight from a pytest-xdist worker that has run other tests, a rank fails in
    # its first backward ("Unable to handle autograd's threading in combination with
    # fork-based multiprocessing"). Spawned, each rank would import torch and the trainer
    # again (about 20 s of CPU each on this machine). A fork server imports them once, in
    # a clean process, and forks each rank from it.
    multiprocessing.set_forkserver_preload(["torch", "crucible.training.train"])
    mp.start_processes(rank_main, args=args, nprocs=nprocs, join=True, start_method="forkserver")
