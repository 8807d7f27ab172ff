"""What the engine asks of a model: a forward over new tokens with a paged KV cache.

The built-in GPT (`paged_gpt.py`) and Hugging Face models (`paged_hf.py`) each keep their
keys and values in blocks of the engine's pool, addressed by the `ForwardBatch`'s slots and
block tables; the engine never looks inside. Which runner a model gets is `models.py`'s
choice, so this contract imports no model.
"""

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


@dataclass
class ForwardBatch:
    """Rows of new tokens, each continuing its own sequence; padded to one width."""

    tokens: Tensor
    """(rows, width) token ids; padding is any id."""

    positions: Tensor
    """(rows, width) each token's position in its sequence; 0 at padding."""

    slots: Tensor
    """(rows, width) where each token's key and value go: block * block_size + offset;
    padding writes to the scratch block."""

    block_tables: Tensor
    """(rows, blocks) each row's blocks in order, padded with the scratch block."""

    lengths: Tensor
    """(rows,) positions each row holds once this batch is written."""

    last: Tensor
    """(rows,) column of each row's last real token: its logits are returned."""


class ModelRunner(Protocol):
    max_seq_len: int
    vocab_size: int
    """Rows of the model's embedding: a token id must be below it."""

    device: torch.device
    graph_safe: bool
    """Its decode forward may be captured in a CUDA graph: no host syncs, no allocations
    that depend on the batch's values."""

    @property
    def scratch_block(self) -> int:
        """The extra block padding writes to (the pool's blocks are 0 .. scratch_block - 1)."""
        ...

    def forward(self, batch: ForwardBatch) -> Tensor:
        """(rows, vocab) logits of each row's last real token; keys and values written."""
        ...
