"""The rollout job's generator before the serving engine took its place, kept as the
baseline `rollout_bench.py` measures: a static KV cache and a fixed-shape decode step, replayed as a
CUDA graph on the GPU.

`rollout.generate` grows its tensors every step (fine for correctness, slow at scale: each
decode step is some hundred small kernels, launched one by one from Python, and a
host-device sync to check for EOS). Here every buffer is allocated once for prompt plus
completion, the decode step reads and writes them at a position held in a device tensor, so
one step has the same shapes and addresses every time; on CUDA it is captured once as a
graph and replayed `max_new_tokens` times, with no sync until the end. On the CPU the same
step runs eagerly, which is what the tests compare against the uncached path.

Rows that produced EOS keep being computed (the batch has a static shape); their later
tokens are dropped from the result, as `rollout.generate` never produces them.
"""

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from crucible.models.gpt import GPT, Block
from crucible.rollouts.rollout import Generation

TopPMethod = Literal["sort", "bisect"]
TOP_P_BISECTION_STEPS = 32
"""Halvings of the probability threshold in the bisecting `top_p_mask`: the kept set is exact
unless two probabilities differ by less than max(p) * 2**-32."""

LARGE_BATCH = 128
"""From this many rows `fast_generator` compiles the sampling and bisects the nucleus: that
pays only at large batches, while at small ones the three ways come out alike
(benchmarks/gpu/README.md has the sampling measurements)."""


def top_p_mask(probs: Tensor, top_p: float, method: TopPMethod = "sort") -> Tensor:
    """True for the tokens nucleus sampling keeps: those ranked above the first token at which
    the cumulative probability reaches top_p, and that token (as `rollout.sample_next`).

    "sort" sorts each row once; "bisect" halves a threshold t (keep p >= t) a fixed number
    of times, one fused pass each, with no sort. Both have no host sync and can be captured
    in a CUDA graph. On the H200 the sort was as fast at batch 1 and faster from batch 32 up
    (benchmarks/gpu/README.md), so it is the default.
    """
    if method == "sort":
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
        return torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, keep)
    low = torch.zeros_like(probs[:, :1])
    high = probs.max(dim=-1, keepdim=True).values
    for _ in range(TOP_P_BISECTION_STEPS):
        middle = (low + high) / 2
        enough = (probs * (probs >= middle)).sum(dim=-1, keepdim=True) >= top_p
        low = torch.where(enough, middle, low)
        high = torch.where(enough, high, middle)
    # The mass of p >= high may already reach top_p (the top token alone can).
    high_enough = (probs * (probs >= high)).sum(dim=-1, keepdim=True) >= top_p
    return probs >= torch.where(high_enough, high, low)


def sample_top_p(
    logits: Tensor, *, temperature: float, top_p: float, method: TopPMethod = "sort"
) -> Tensor:
    """Next token per row from (batch, vocab) logits, without a host sync or torch.multinomial
    (neither can be captured in a CUDA graph): the exponential race, argmax(p / E) with
    E ~ Exp(1), draws index i with probability p_i. Greedy when temperature is 0."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = F.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        probs = probs * top_p_mask(probs, top_p, method)
    race = probs / torch.empty_like(probs).exponential_()
    return race.argmax(dim=-1)


def sample_with_logprob(
    logits: Tensor, *, temperature: float, top_p: float, method: TopPMethod = "sort"
) -> tuple[Tensor, Tensor]:
    """`sample_top_p`'s token per row and its log-probability under the untempered logits
    (what RL's importance ratios compare against). One function, so that a compiled
    sampler fuses the softmax's and the log-softmax's passes over the vocabulary."""
    logits = logits.float()
    token = sample_top_p(logits, temperature=temperature, top_p=top_p, method=method)
    logprob = F.log_softmax(logits, dim=-1).gather(-1, token[:, None]).squeeze(-1)
    return token, logprob


def fast_generator(
    model: GPT,
    *,
    batch_size: int,
    max_prompt_len: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
) -> "StaticGenerator":
    """A `StaticGenerator` with the settings measured fastest for its batch size: on CUDA
    from `LARGE_BATCH` rows up, compiled sampling with a bisected nucleus (which keeps every
    token tied with the last one kept, where a sort keeps an arbitrary subset of the ties);
    otherwise the sort, uncompiled (no compile time to pay back)."""
    large = batch_size >= LARGE_BATCH and model.wte.weight.device.type == "cuda"
    return StaticGenerator(
        model,
        batch_size=batch_size,
        max_prompt_len=max_prompt_len,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        compile_sampling=large,
        top_p_method="bisect" if large else "sort",
    )


class StaticGenerator:
    """Generates up to `max_new_tokens` after prompts of up to `max_prompt_len` tokens, for a
    fixed `batch_size`; build one per shape and call it many times.

    cuda_graph: capture the decode step as a CUDA graph (on CUDA only; ignored on the CPU).
    The graph samples from the default CUDA generator; seed it with torch.cuda.manual_seed.
    top_p_method: how nucleus sampling finds its tokens (`top_p_mask`).
    compile: torch.compile the decode step first (fewer, fused kernels per step: a graph
    replays every kernel, so fewer kernels is what makes small batches fast).
    compile_sampling: torch.compile only the sampling (softmax, nucleus, draw, logprob):
    at large batches the passes over (batch, vocab) probabilities dominate a step, and
    fusing them is what pays there.
    """

    def __init__(
        self,
        model: GPT,
        *,
        batch_size: int,
        max_prompt_len: int,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        cuda_graph: bool = True,
        compile: bool = False,
        compile_sampling: bool = False,
        top_p_method: TopPMethod = "sort",
    ) -> None:
        config = model.config
        total = max_prompt_len + max_new_tokens
        if total > config.max_seq_len:
            raise ValueError(
                f"prompt {max_prompt_len} + {max_new_tokens} new tokens exceeds "
                f"max_seq_len={config.max_seq_len}"
            )
        self.model = model
        self.batch_size = batch_size
        self.prompt_len = max_prompt_len
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_p_method = top_p_method
        weight = model.wte.weight
        device = weight.device
        self.device = device
        self.cache = model.new_cache(batch_size, total)
        self.key_pos = torch.arange(total, device=device)
        # Decode-step state, all on the device so that a graph replay advances it.
        self.token = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.position = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.write_at = torch.zeros(1, dtype=torch.long, device=device)
        self.prompt_valid = torch.zeros(batch_size, total, dtype=torch.bool, device=device)
        self.out_tokens = torch.zeros(batch_size, max_new_tokens, dtype=torch.long, device=device)
        self.out_logprobs = torch.zeros(batch_size, max_new_tokens, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.use_graph = cuda_graph and device.type == "cuda"
        self.step_fn = torch.compile(self._decode_step) if compile else self._decode_step
        self.sample = (
            torch.compile(sample_with_logprob) if compile_sampling else sample_with_logprob
        )

    @torch.no_grad()
    def __call__(
        self, prompts: Sequence[Sequence[int]], *, eos_id: int | None, pad_id: int
    ) -> Generation:
        """Completions for `prompts` (at most `batch_size`, each at most `max_prompt_len`);
        cut after EOS when `eos_id` is given."""
        rows = len(prompts)
        if rows > self.batch_size or max(len(p) for p in prompts) > self.prompt_len:
            raise ValueError(
                f"generator is built for {self.batch_size} prompts of at most "
                f"{self.prompt_len} tokens; got {rows} of up to {max(len(p) for p in prompts)}"
            )
        self._prefill(prompts, pad_id)
        if self.use_graph and self.graph is None and self.max_new_tokens > 1:
            self.graph = self._capture()
            self._prefill(prompts, pad_id)
        # The prefill sampled the first token; each decode step samples one more.
        for _ in range(self.max_new_tokens - 1):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step_fn()
        tokens = self.out_tokens[:rows].tolist()
        logprobs = self.out_logprobs[:rows].tolist()
        if eos_id is not None:
            for row, row_tokens in enumerate(tokens):
                if eos_id in row_tokens:
                    end = row_tokens.index(eos_id) + 1
                    tokens[row], logprobs[row] = row_tokens[:end], logprobs[row][:end]
        return Generation(tokens, logprobs)

    def _prefill(self, prompts: Sequence[Sequence[int]], pad_id: int) -> None:
        """Run the left-padded prompts through the model into the cache; the first new token
        is sampled from their last logits and written as the decode step's input."""
        batch, length = self.batch_size, self.prompt_len
        tokens = torch.full((batch, length), pad_id, dtype=torch.long)
        valid = torch.zeros(batch, length, dtype=torch.bool)
        for row, prompt in enumerate(prompts):
            tokens[row, length - len(prompt) :] = torch.tensor(list(prompt))
            valid[row, length - len(prompt) :] = True
        # Rows beyond the prompts given see one valid token, so their softmax is defined.
        valid[len(prompts) :, -1] = True
        tokens, valid = tokens.to(self.device), valid.to(self.device)
        self.cache.length = 0
        logits = self.model(tokens, key_valid=valid, cache=self.cache)[:, -1]
        self.prompt_valid.zero_()
        self.prompt_valid[:, :length] = valid
        self.position.copy_(valid.sum(dim=1))
        self.write_at.fill_(length)
        self._emit(logits, step=0)

    def _emit(self, logits: Tensor, *, step: int | Tensor) -> None:
        """Sample from `logits`, record token and logprob at `step`, make it the next input."""
        token, logprob = self.sample(
            logits, temperature=self.temperature, top_p=self.top_p, method=self.top_p_method
        )
        index = step if isinstance(step, Tensor) else torch.tensor([step], device=self.device)
        self.out_tokens.index_copy_(1, index, token[:, None])
        self.out_logprobs.index_copy_(1, index, logprob[:, None])
        self.token.copy_(token)

    def _decode_step(self) -> None:
        """One token for every row; all shapes fixed, all positions read from device tensors."""
        model = self.model
        write_at = self.write_at
        x = model.wte(self.token[:, None]) + model.wpe(self.position[:, None])
        # Keys visible to this query: the valid prompt tokens and every generated one so far.
        generated = (self.key_pos >= self.prompt_len) & (self.key_pos <= write_at)
        mask = (self.prompt_valid | generated)[:, None, None, :]
        for block in model.blocks:
            x = _cached_block(block, x, mask, self.cache.k, self.cache.v, write_at)  # type: ignore[arg-type]
        logits = model.lm_head(model.ln_f(x))[:, -1]
        self._emit(logits, step=write_at - self.prompt_len + 1)
        self.position.add_(1)
        self.write_at.add_(1)

    def _capture(self) -> torch.cuda.CUDAGraph:
        # Warm up on a side stream (cuBLAS and the allocator set themselves up outside the
        # capture), then capture one decode step; the state it advanced is reset by the
        # caller's fresh prefill.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.write_at.fill_(self.prompt_len)
                self.step_fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.write_at.fill_(self.prompt_len)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step_fn()
        return graph


def _cached_block(
    block: Block, x: Tensor, mask: Tensor, k_cache: Tensor, v_cache: Tensor, write_at: Tensor
) -> Tensor:
    """A block's forward for one new position, writing its key and value into the static cache
    at `write_at` and attending over the whole (masked) cache."""
    attn = block.attn
    layer = attn.layer
    batch, _, width = x.shape
    head_dim = width // attn.n_head
    h = block.ln_attn(x)
    q, k, v = (
        t.view(batch, 1, attn.n_head, head_dim).transpose(1, 2)
        for t in attn.qkv(h).split(width, dim=2)
    )
    k_cache[layer].index_copy_(2, write_at, k.to(k_cache.dtype))
    v_cache[layer].index_copy_(2, write_at, v.to(v_cache.dtype))
    y = F.scaled_dot_product_attention(
        q, k_cache[layer], v_cache[layer], attn_mask=mask, scale=1.0 / math.sqrt(head_dim)
    )
    x = x + attn.proj(y.transpose(1, 2).reshape(batch, 1, width))
    return x + block.mlp(block.ln_mlp(x))  # type: ignore[no-any-return]
