"""Typed configuration for the reference workloads, one dataclass per section.

The config is the documentation of the knobs: every field carries a docstring.
"""

from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the GPT in `model.py`."""

    n_layer: int = 2
    """Number of transformer blocks."""

    n_head: int = 4
    """Attention heads per block; `d_model` must be divisible by it."""

    d_model: int = 64
    """Width of the residual stream."""

    max_seq_len: int = 64
    """Longest sequence (prompt plus completion) the position embedding covers."""

    vocab_size: int = 264
    """Embedding rows: the byte tokenizer's 259 ids, padded to a multiple of 8."""

    mlp_ratio: int = 4
    """Hidden width of the MLP as a multiple of `d_model`."""

    def __post_init__(self) -> None:
        if self.d_model % self.n_head != 0:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "pick a head count that divides the width"
            )


MODEL_PRESETS: dict[str, ModelConfig] = {
    # CPU tests: trains in seconds.
    "tiny": ModelConfig(n_layer=2, n_head=4, d_model=64, max_seq_len=64),
    # The CPU demo: minutes on two cores.
    "small": ModelConfig(n_layer=4, n_head=4, d_model=128, max_seq_len=64),
    # GPT-2 shapes for the GPU work (issue 10).
    "124M": ModelConfig(n_layer=12, n_head=12, d_model=768, max_seq_len=1024, vocab_size=50304),
    "350M": ModelConfig(n_layer=24, n_head=16, d_model=1024, max_seq_len=1024, vocab_size=50304),
    "1.3B": ModelConfig(n_layer=24, n_head=32, d_model=2048, max_seq_len=1024, vocab_size=50304),
}


def model_preset(name: str, **overrides: int) -> ModelConfig:
    """The preset called `name`, with any field overridden."""
    try:
        preset = MODEL_PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown model preset {name!r}; choose one of {', '.join(MODEL_PRESETS)}"
        ) from None
    return replace(preset, **overrides)


TASK_OPERATORS = ("+", "-", "*")
"""The arithmetic task's operators."""


@dataclass(frozen=True)
class TaskConfig:
    """The built-in arithmetic task."""

    digits: int = 2
    """Largest number of digits in each operand (operands are drawn from 0 .. 10**digits-1)."""

    operators: tuple[str, ...] = ("+",)
    """Operators to draw from: any of "+", "-", "*"."""

    held_out_fraction: float = 0.2
    """Share of all possible problems reserved for evaluation, never trained on."""

    def __post_init__(self) -> None:
        unknown = set(self.operators) - set(TASK_OPERATORS)
        if unknown or not self.operators:
            raise ValueError(
                f"operators={self.operators!r} must be a non-empty subset of {TASK_OPERATORS}"
            )
        if self.digits < 1:
            raise ValueError(f"digits={self.digits} must be at least 1")
        if not 0.0 < self.held_out_fraction < 1.0:
            raise ValueError(f"held_out_fraction={self.held_out_fraction} must be between 0 and 1")


PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4")
"""`TrainConfig.precision`'s values (`training/precision/apply.py`)."""
FP8_SCALINGS = ("tensor", "row", "block")
"""`TrainConfig.fp8_scaling`'s values."""


@dataclass(frozen=True)
class TrainConfig:
    """The training loop: SFT or RL."""

    mode: Literal["sft", "rl"] = "sft"
    """Either "sft" (masked next-token loss on completions) or "rl" (GRPO-style policy
    gradient on a rollout dataset, initialised from an SFT checkpoint)."""

    steps: int = 300
    """Optimizer steps to run in total (a resumed run continues up to this number)."""

    batch_size: int = 32
    """Sequences per optimizer step over all ranks; in RL mode, prompts per step (each
    brings its `samples_per_prompt` samples)."""

    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; `batch_size` must divide into
    `grad_accum_steps * world_size` equal parts."""

    lr: float = 3e-3
    """Peak learning rate, reached at the end of warmup."""

    min_lr_ratio: float = 0.1
    """The cosine schedule decays to `lr * min_lr_ratio` at the last step."""

    warmup_steps: int = 20
    """Steps of linear warmup from zero to `lr`."""

    weight_decay: float = 0.1
    """AdamW weight decay, applied to matrices only (not biases, norms or embeddings)."""

    beta1: float = 0.9
    """AdamW first-moment decay."""

    beta2: float = 0.95
    """AdamW second-moment decay."""

    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 disables clipping."""

    seed: int = 0
    """Seeds model initialisation, data order and every RNG saved in checkpoints."""

    bf16: bool = True
    """bf16 autocast for forward passes on CUDA; ignored on CPU, which always runs float32."""

    compile: bool = False
    """Wrap the model in torch.compile (each block on its own under FSDP). With precision
    "mxfp8" or "nvfp4", compile the emulated roundings instead and run the model eager
    (`precision.compiles_whole_model` says why)."""

    precision: Literal["bf16", "fp8", "mxfp8", "nvfp4"] = "bf16"
    """Matmul precision of the transformer blocks' Linear layers
    (`training/precision/apply.py`). "bf16": autocast as `bf16` says. "fp8": scaled float8
    matmuls (e4m3 forward, e5m2 gradients, dynamic per-tensor scales;
    `training/precision/fp8.py`) with the rest in bf16; needs a GPU with fp8 tensor cores
    (H100/H200) and is refused elsewhere. Per-layer amax and scale are logged as
    `fp8/<layer>/<stat>` every `fp8_stats_every` steps. "mxfp8" (OCP MX: 32 values share a
    power-of-two scale, e4m3 elements) and "nvfp4" (16 e2m1 values share an e4m3 scale,
    under an fp32 tensor scale): emulated on any device (`training/precision/`), numerics
    and not speed, only with `emulate_precision`; they log
    `numerics/<layer>/<operand>_{saturated,underflow}` at the same steps."""

    fp8_scaling: Literal["tensor", "row", "block"] = "tensor"
    """With precision "fp8", how finely values share a scale. "tensor": one per tensor
    (`training/precision/fp8.py`). "row": one per row of each GEMM operand. "block": DeepSeek-V3's,
    one per 1x128 tile of activations and gradients and per 128x128 block of weights (Linear
    widths must be multiples of 128). "row" and "block" use E4M3 for every operand
    (`training/precision/fp8_scaled.py`) and run on `torch._scaled_mm`'s kernels on Hopper;
    elsewhere only with `emulate_precision`."""

    emulate_precision: bool = False
    """Let a precision with no native kernels on the device run emulated: "mxfp8" and "nvfp4"
    everywhere but Blackwell, "fp8" with `fp8_scaling` "row" or "block" off Hopper. Each GEMM
    operand is rounded through the format and back and the matmul runs in float32. Without
    it such a run is refused at start, naming the device."""

    mxfp8_scale_rounding: Literal["ceil", "floor"] = "ceil"
    """"ceil": each block's scale is the smallest power of two that saturates nothing, as
    NVIDIA trains; "floor": the OCP spec's algorithm, which saturates a block's largest
    values at times."""

    nvfp4_stochastic_rounding: bool = True
    """NVIDIA's NVFP4 recipe rounds gradients stochastically (unbiased); false: to nearest."""

    nvfp4_hadamard: bool = True
    """NVIDIA's NVFP4 recipe applies a 16x16 random Hadamard transform to the weight-gradient
    GEMM's operands, spreading outliers across a block; false: none."""

    fp8_stats_every: int = 50
    """With precision "fp8": log the per-layer amax/scale statistics every this many steps
    (and at step 1); with "mxfp8" or "nvfp4", each operand's amax and saturation and
    underflow shares. On those steps every low-precision layer also measures its forward
    GEMM's relative error against bf16's on the step's batch (`matmul_rel_error`)."""

    profile_from_step: int = 0
    """Record `profile_steps` steps with the torch profiler, starting at this step (0:
    never): their kernel table and trace go to the run's outputs under `profile/`."""

    profile_steps: int = 3
    """How many steps `profile_from_step` records."""

    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass: less memory, about a third
    more compute."""

    fsdp: bool = False
    """With several ranks: shard parameters, gradients and optimizer state with FSDP2
    (`fully_shard`, one unit per block) instead of replicating the model with DDP."""

    checkpoint_every: int = 0
    """Save a checkpoint every this many steps and at the last step; 0 saves only at
    the last step (when a checkpointer is given)."""

    save_initial: bool = False
    """Also checkpoint the freshly initialised model at step 0 (on a fresh start only), so
    evals show where training started from."""

    export_hf: bool = False
    """After the last step, also write the final checkpoint as a Hugging Face model directory
    (safetensors, config, tokenizer; `crucible checkpoints export` writes the same) under the
    run's outputs, registered as a `model` artifact derived from the checkpoint."""

    checkpoint_async: bool = False
    """Save checkpoints asynchronously (DCP `async_save` through the run SDK): a save blocks
    only while it copies the state into host buffers kept between saves (pinned on a GPU),
    and the files are written and the checkpoint registered in the background while
    training goes on. For large models on GPUs, where a synchronous save stalls training for
    the whole write (benchmarks/gpu/README.md measures both ways). It keeps a host-memory
    copy of the rank's weights and optimizer state for the rest of the run. A checkpoint
    counts as saved only once it is registered: the trainer waits for the save in flight
    before the next save, at the end of `train()` and before a preempted attempt exits."""

    samples_per_prompt: int = 8
    """RL: samples per prompt (K) in the rollout dataset; advantages are normalised
    within each group of K."""

    clip_eps: float = 0.2
    """RL: PPO-style clipping of the ratio to the rollout policy to [1-eps, 1+eps];
    0 disables clipping."""

    kl_coef: float = 0.0
    """RL: weight of the KL penalty to the initial (SFT) policy; 0 keeps no reference model."""

    def __post_init__(self) -> None:
        if self.mode not in ("sft", "rl"):
            raise ValueError(f"mode={self.mode!r} is not supported; use 'sft' or 'rl'")
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision={self.precision!r} is not supported; use one of "
                + ", ".join(repr(p) for p in PRECISIONS)
            )
        if self.fp8_scaling not in FP8_SCALINGS:
            raise ValueError(
                f"fp8_scaling={self.fp8_scaling!r} is not supported; use one of "
                + ", ".join(repr(s) for s in FP8_SCALINGS)
            )
        if self.fp8_scaling != "tensor" and self.precision != "fp8":
            raise ValueError(
                f"fp8_scaling={self.fp8_scaling!r} applies to precision 'fp8' only; this run's "
                f"precision is {self.precision!r}"
            )
        if self.mxfp8_scale_rounding not in ("ceil", "floor"):
            raise ValueError(
                f"mxfp8_scale_rounding={self.mxfp8_scale_rounding!r}: use 'ceil' or 'floor'"
            )


@dataclass(frozen=True)
class DataConfig:
    """How SFT and pre-training read their datasets (`training/train_data.py`)."""

    shape: Literal["auto", "text", "prompt_completion", "chat"] = "auto"
    """The records' shape: "text" (pre-training on every token), "prompt_completion" (SFT
    on the completion), "chat" (SFT on the assistant's messages); "auto" reads it from the
    first record's fields."""

    packing: bool = False
    """Pack several examples into each row, up to `seq_len` positions, instead of one
    example a row padded to the batch's longest; documents never attend to each other."""

    seq_len: int | None = None
    """Positions in a row (longer examples are cut, text split); None: the model's
    max_seq_len."""

    shuffle_block: int = 1024
    """Records per shuffle block: each epoch visits the blocks, and the records within each,
    in a new order; only one block is in memory at a time."""


@dataclass(frozen=True)
class TokenizerConfig:
    """A byte-level BPE tokenizer trained on the input datasets' text
    (`python -m crucible.jobs.tokenizer`, `crucible tokenizers train`)."""

    vocab_size: int = 8192
    """Ids in the vocabulary, the 3 special tokens and 256 bytes included; a small corpus
    may run out of merges first."""

    min_frequency: int = 2
    """How often a pair must occur to be merged."""

    name: str | None = None
    """The artifact's name; None: `<run>-tokenizer`."""


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling completions from a policy."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""

    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""

    max_new_tokens: int = 8
    """Longest completion; generation also stops at EOS."""

    samples_per_prompt: int = 8
    """Completions sampled per prompt (K), the group GRPO normalises over."""

    batch_size: int = 32
    """Prompts per generation call (each expands to `samples_per_prompt` rows)."""

    seed: int = 0
    """Seeds the sampling generator, so a rollout is reproducible."""


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation."""

    num_problems: int = 200
    """Held-out problems to score (fewer when the held-out split is smaller)."""

    batch_size: int = 64
    """Problems per forward pass."""

    max_new_tokens: int = 8
    """Longest answer generated greedily."""

    seed: int = 1234
    """Which held-out problems are drawn."""


@dataclass(frozen=True)
class DatagenConfig:
    """Teacher data generation: which problems the teacher answers."""

    num_prompts: int = 2000
    """Train-split problems to sample (or, with a prompts dataset, how many of its prompts
    to answer at most)."""

    seed: int = 0
    """Which problems are drawn."""
