"""Ways to spread and slim a model (the built-in GPT or a Hugging Face one) for training:
FSDP2 sharding, activation checkpointing, per-block compilation (the trainer compiles
forward and loss as one graph otherwise: `train.compile_loss`). Each `apply_*` changes the model in
place (or wraps it) and is a no-op when its option is off; the trainer and the GPU
benchmarks build models through the same functions.
"""

import torch
import torch.distributed as dist

from crucible.models.hf import LanguageModel


def apply_activation_checkpointing(model: LanguageModel, enabled: bool) -> None:
    model.activation_checkpointing = enabled


def apply_fsdp(model: LanguageModel, *, param_dtype: torch.dtype | None) -> None:
    """Shard `model` over the default process group with FSDP2 (`fully_shard`).

    Each block is its own unit, so only one block's full weights exist at a time and its
    all-gather overlaps the previous block's compute; the root unit holds the embeddings,
    the final norm and the (tied) head. `param_dtype` bf16 all-gathers and computes in bf16
    while the sharded master weights, gradients' reduction and the optimizer stay float32.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not dist.is_initialized():
        raise RuntimeError("FSDP needs a process group: start the run under torchrun")
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def compile_blocks(model: LanguageModel) -> None:
    """Compile each block on its own: FSDP's hooks sit between blocks, so per-block graphs
    keep them out of the compiled code (torchtitan's recipe)."""
    for block in model.blocks:
        block.compile()
