"""The engine's knobs, one dataclass; every field carries its docstring."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16
    """Positions per KV block: smaller wastes less at each sequence's tail, larger gathers
    fewer, longer runs of keys."""

    num_blocks: int | None = None
    """KV blocks in the pool; by default as many as `kv_memory_fraction` of the device's
    free memory holds (on CUDA) or `cpu_kv_gib` (on the CPU)."""

    kv_memory_fraction: float = 0.85
    """Share of the GPU memory free once the model is loaded that goes to the KV cache
    (the rest is for activations and the sampler's (rows, vocab) tensors)."""

    cpu_kv_gib: float = 0.5
    """KV cache size on the CPU when `num_blocks` is not given."""

    max_running: int = 256
    """Sequences decoding at once, at most."""

    max_prefill_tokens: int = 8192
    """Prompt tokens computed in one step, at most (a longer prompt runs alone)."""

    prefix_caching: bool = True
    """Sequences whose prompts begin alike share the KV blocks of that beginning (the K
    samples of one prompt compute it once); off, every sequence computes its own."""

    cuda_graphs: bool = True
    """On CUDA, replay each decode step from a CUDA graph captured once per bucket of
    batch sizes (ignored on the CPU)."""

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"num_blocks must be positive, got {self.num_blocks}")
        if not 0.0 < self.kv_memory_fraction < 1.0:
            raise ValueError(f"kv_memory_fraction must be in (0, 1), got {self.kv_memory_fraction}")
        if self.max_running < 1 or self.max_prefill_tokens < 1:
            raise ValueError("max_running and max_prefill_tokens must be positive")


@dataclass(frozen=True)
class ServeLimits:
    """What one request to the served model may ask for; past a bound it gets a 4xx naming
    the field and the bound, before any of its work reaches the engine."""

    max_body_bytes: int = 8 * 1024 * 1024
    """Request body size; a larger one is refused (413) before it is read, let alone parsed."""

    max_prompts: int = 256
    """Prompts in one completions request (a list of texts)."""

    max_choices: int = 1024
    """Prompts times `n`: the sequences one request starts. Each holds KV blocks and a slot
    among `max_running` until it ends, so this bounds how long one request holds the engine."""

    max_tokens: int | None = None
    """Longest completion one choice may ask for; None: as long as the model's context."""

    max_stops: int = 16
    """Stop strings per request."""

    max_stop_chars: int = 256
    """Characters per stop string (each is searched for in every choice's new text)."""

    max_messages: int = 1024
    """Messages in one chat request, and text parts in one message."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_prompts", "max_choices", "max_stops"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be positive or None, got {self.max_tokens}")
        if self.max_stop_chars < 1 or self.max_messages < 1:
            raise ValueError("max_stop_chars and max_messages must be positive")
