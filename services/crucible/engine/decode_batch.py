"""A decode step's inputs, built on the host in one pass over the running sequences.

Every running sequence computes its one uncomputed token (the one it sampled last) and
samples the next. At a few hundred rows this runs every step, so it builds plain lists and
two arrays and sends each to the device in one copy, instead of a tensor per field. A row
whose last token the host has not read yet (the step in flight drew it) takes it from that
step's tokens on the device.
"""

from collections.abc import Sequence as Seq

import numpy as np
import torch
from torch import Tensor

from crucible.engine.runner import ForwardBatch
from crucible.engine.sequence import Sequence


def decode_batch(
    seqs: Seq[Sequence],
    *,
    rows: int,
    table_width: int,
    block_size: int,
    scratch_block: int,
    device: torch.device,
    in_flight: Tensor | None,
) -> ForwardBatch:
    """`seqs`' decode step, padded to `rows` with rows that write to the scratch block and
    see one key; block tables `table_width` wide (at least the longest row's). `in_flight`
    holds the tokens of the step in flight, which pending rows continue from."""
    padding = rows - len(seqs)
    scratch_slot = scratch_block * block_size
    tokens, positions, slots, sources = [], [], [], []
    tables = np.full((rows, table_width), scratch_block, dtype=np.int64)
    for row, seq in enumerate(seqs):
        output, blocks = seq.output, seq.blocks
        position = seq.length - 1
        if seq.pending:
            tokens.append(0)
            sources.append(seq.pending_row)
        else:
            tokens.append(output[-1] if output else seq.prompt[-1])
            sources.append(-1)
        positions.append(position)
        slots.append(blocks[position // block_size] * block_size + position % block_size)
        tables[row, : len(blocks)] = blocks
    lengths = [p + 1 for p in positions]
    columns = np.array(
        [
            tokens + [0] * padding,
            positions + [0] * padding,
            slots + [scratch_slot] * padding,
            lengths + [1] * padding,
            [0] * rows,
            sources + [-1] * padding,
        ],
        dtype=np.int64,
    )
    on_device = torch.from_numpy(columns).to(device, non_blocking=True)
    tokens_in = on_device[0]
    if in_flight is not None:
        source = on_device[5]
        tokens_in = torch.where(source >= 0, in_flight[source.clamp(min=0)], tokens_in)
    return ForwardBatch(
        tokens=tokens_in[:, None],
        positions=on_device[1, :, None],
        slots=on_device[2, :, None],
        block_tables=torch.from_numpy(tables).to(device, non_blocking=True),
        lengths=on_device[3],
        last=on_device[4],
    )
