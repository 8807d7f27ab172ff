"""Decode steps replayed from CUDA graphs, one graph per bucket of batch sizes.

A small model's decode step is a few hundred kernels that each run for microseconds: launched
one by one from Python, the launches take longer than the work. A graph records a step's
launches once and replays them as one. A graph has fixed shapes and addresses, so each
bucket (1, 2, 4, 8, then every multiple of 8 up to the engine's `max_running`) gets one,
captured the first time a step of that size comes, over one set of input buffers; a step
is padded up to its bucket with rows that write to the scratch block and attend to one key.

The block tables are as wide as the model's context in blocks: the attention kernel reads a
row's table only up to its length, so the rest is never looked at.
"""

from dataclasses import fields

import torch
from torch import Tensor

from crucible.engine.runner import ForwardBatch, ModelRunner


def buckets(max_rows: int) -> list[int]:
    """The batch sizes that get a graph: every step is padded up to the next one."""
    sizes = [size for size in (1, 2, 4) if size < max_rows]
    sizes += list(range(8, max_rows, 8))
    return [*sizes, max_rows]


class DecodeGraphs:
    def __init__(self, runner: ModelRunner, *, max_rows: int, block_size: int) -> None:
        self.runner = runner
        self.buckets = buckets(max_rows)
        self.table_width = -(-runner.max_seq_len // block_size)
        self.scratch_slot = runner.scratch_block * block_size
        self._inputs = self._padding(self.buckets[-1])
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle()

    def bucket(self, rows: int) -> int | None:
        """The size a step of `rows` runs at; None past the largest (it runs eagerly)."""
        for size in self.buckets:
            if size >= rows:
                return size
        return None

    def forward(self, batch: ForwardBatch, rows: int) -> Tensor:
        """(rows, vocab) logits of `batch`, a decode step padded to a bucket with padding
        rows (`decode_batch.py` builds it) and its tables `table_width` wide."""
        bucket = batch.tokens.size(0)
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(bucket)
        graph, logits = self._graphs[bucket]
        self._load(bucket, batch)
        graph.replay()
        return logits[:rows]

    def _load(self, bucket: int, batch: ForwardBatch) -> None:
        inputs = self._slice(bucket)
        for field in fields(ForwardBatch):
            getattr(inputs, field.name).copy_(getattr(batch, field.name))

    def _capture(self, bucket: int) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        # Captured over padding rows only: the warm-up runs for real, and must not write
        # into any sequence's blocks.
        self._load(bucket, self._padding(bucket))
        inputs = self._slice(bucket)
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # The first calls compile the attention kernel and set up cuBLAS, neither of
            # which may happen inside a capture.
            for _ in range(2):
                self.runner.forward(inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.runner.forward(inputs)
        return graph, logits

    def _slice(self, bucket: int) -> ForwardBatch:
        return ForwardBatch(
            **{f.name: getattr(self._inputs, f.name)[:bucket] for f in fields(ForwardBatch)}
        )

    def _padding(self, rows: int) -> ForwardBatch:
        device = self.runner.device

        def filled(shape: tuple[int, ...], value: int) -> Tensor:
            return torch.full(shape, value, dtype=torch.long, device=device)

        return ForwardBatch(
            tokens=filled((rows, 1), 0),
            positions=filled((rows, 1), 0),
            slots=filled((rows, 1), self.scratch_slot),
            block_tables=filled((rows, self.table_width), self.runner.scratch_block),
            lengths=filled((rows,), 1),
            last=filled((rows,), 0),
        )
