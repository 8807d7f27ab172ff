"""Batched generation with the KV cache, and rollouts: K samples per prompt with rewards.

Prompts of different lengths share a batch by left padding; positions and attention skip
the padding, so a prompt gets the same completion alone or in a batch.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from crucible.workloads.config import RolloutConfig
from crucible.workloads.generate import Generation, fast_generator
from crucible.workloads.hf_model import LanguageModel
from crucible.workloads.model import GPT
from crucible.workloads.records import write_jsonl
from crucible.workloads.tokenizer import Tokenizer

RewardFn = Callable[[str, str], float]
"""(prompt, completion) -> reward."""

Scorer = Callable[[list[str], list[str], list[Mapping[str, Any]]], list[float]]
"""(prompts, completions, metadata) -> one reward per sample: the batch contract of a
reward (docs/workloads.md)."""


def per_sample(reward: RewardFn) -> Scorer:
    """A batch scorer from a reward of one (prompt, completion)."""

    def score(
        prompts: list[str], completions: list[str], metadata: list[Mapping[str, Any]]
    ) -> list[float]:
        return [reward(p, c) for p, c in zip(prompts, completions, strict=True)]

    return score


@dataclass
class Trajectory:
    prompt: str
    completion: str
    completion_tokens: list[int]
    reward: float
    logprobs: list[float]
    """Per-token logprobs of `completion_tokens` under the rollout policy."""

    logprob: float
    """Sum of `logprobs`."""

    group: int
    """Index of the prompt in the rollout; the K samples of a prompt share it."""

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def sample_next(
    logits: Tensor, *, temperature: float, top_p: float, generator: torch.Generator | None
) -> Tensor:
    """Next token per row from (batch, vocab) logits; greedy when temperature is 0."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = F.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Drop a token when the tokens ranked above it already reach top_p; the top one
        # always stays.
        drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: LanguageModel,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Generation:
    device = next(model.parameters()).device
    batch = len(prompts)
    prompt_len = max(len(p) for p in prompts)
    tokens = torch.full((batch, prompt_len), pad_id, dtype=torch.long, device=device)
    valid = torch.zeros(batch, prompt_len, dtype=torch.bool, device=device)
    for row, prompt in enumerate(prompts):
        tokens[row, prompt_len - len(prompt) :] = torch.tensor(list(prompt), device=device)
        valid[row, prompt_len - len(prompt) :] = True

    cache = model.new_cache(batch, prompt_len + max_new_tokens) if use_cache else None
    logits = model(tokens, key_valid=valid, cache=cache)[:, -1].float()
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    out_tokens: list[list[int]] = [[] for _ in range(batch)]
    out_logprobs: list[list[float]] = [[] for _ in range(batch)]
    for _ in range(max_new_tokens):
        next_token = sample_next(logits, temperature=temperature, top_p=top_p, generator=generator)
        logprob = F.log_softmax(logits, dim=-1).gather(-1, next_token[:, None]).squeeze(-1)
        # One transfer per step instead of one per row.
        for row, (token, lp, done) in enumerate(
            zip(next_token.tolist(), logprob.tolist(), finished.tolist(), strict=True)
        ):
            if not done:
                out_tokens[row].append(token)
                out_logprobs[row].append(lp)
        alive = ~finished
        finished = finished | (next_token == eos_id)
        if bool(finished.all()):
            break
        next_token = torch.where(alive, next_token, pad_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        valid = torch.cat([valid, alive[:, None]], dim=1)
        if cache is not None:
            logits = model(next_token[:, None], key_valid=valid, cache=cache)[:, -1].float()
        else:
            logits = model(tokens, key_valid=valid)[:, -1].float()
    return Generation(out_tokens, out_logprobs)


def rollout(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    score: Scorer,
    config: RolloutConfig,
    *,
    metadata: Sequence[Mapping[str, Any]] | None = None,
    prompt_tokens: Sequence[Sequence[int]] | None = None,
    static: bool | None = None,
) -> list[Trajectory]:
    """`config.samples_per_prompt` scored samples for each prompt, grouped by prompt.

    score: called once per generated batch with its samples' prompts, completions and the
    metadata of their prompts (`metadata[i]` for `prompts[i]`; empty when None).

    prompt_tokens: the tokens the model continues for each prompt (a chat's, rendered by its
    template); by default each prompt encoded after a BOS.

    static: generate with `generate.fast_generator` (a static KV cache, the decode step
    replayed as a CUDA graph) instead of `generate` above; by default for the built-in GPT
    on CUDA only. The
    static path samples from the default generators, seeded here from `config.seed`.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    k = config.samples_per_prompt
    if prompt_tokens is not None and len(prompt_tokens) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(prompt_tokens)} token lists")
    encoded = (
        [list(tokens) for tokens in prompt_tokens]
        if prompt_tokens is not None
        else [tokenizer.encode(p, bos=True) for p in prompts]
    )
    # The static path is the built-in GPT's (it calls the blocks itself).
    if isinstance(model, GPT) and (static if static is not None else device.type == "cuda"):
        torch.manual_seed(config.seed)  # also seeds every CUDA device's generator
        fast = fast_generator(
            model,
            batch_size=min(config.batch_size, len(prompts)) * k,
            max_prompt_len=max(len(e) for e in encoded),
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
        )

        def complete(rows: list[list[int]]) -> Generation:
            return fast(rows, eos_id=tokenizer.EOS, pad_id=tokenizer.PAD)
    else:
        generator = torch.Generator(device=device).manual_seed(config.seed)

        def complete(rows: list[list[int]]) -> Generation:
            return generate(
                model,
                rows,
                max_new_tokens=config.max_new_tokens,
                eos_id=tokenizer.EOS,
                pad_id=tokenizer.PAD,
                temperature=config.temperature,
                top_p=config.top_p,
                generator=generator,
            )

    if metadata is not None and len(metadata) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(metadata)} metadata records")
    trajectories: list[Trajectory] = []
    for start in range(0, len(prompts), config.batch_size):
        groups = range(start, min(start + config.batch_size, len(prompts)))
        rows = [encoded[g] for g in groups for _ in range(k)]
        generation = complete(rows)
        sample_groups = [g for g in groups for _ in range(k)]
        sample_prompts = [prompts[g] for g in sample_groups]
        completions = [tokenizer.decode(tokens) for tokens in generation.tokens]
        rewards = score(
            sample_prompts,
            completions,
            [metadata[g] if metadata is not None else {} for g in sample_groups],
        )
        for group, prompt, completion, tokens, logprobs, reward in zip(
            sample_groups,
            sample_prompts,
            completions,
            generation.tokens,
            generation.logprobs,
            rewards,
            strict=True,
        ):
            trajectories.append(
                Trajectory(
                    prompt=prompt,
                    completion=completion,
                    completion_tokens=tokens,
                    reward=reward,
                    logprobs=logprobs,
                    logprob=sum(logprobs),
                    group=group,
                )
            )
    model.train(was_training)
    return trajectories


def write_trajectories(path: Path | str, trajectories: Sequence[Trajectory]) -> int:
    return write_jsonl(path, (t.to_record() for t in trajectories))


class ModelTeacher:
    """A model as a `Teacher`: greedy answers, so a stronger checkpoint can teach."""

    def __init__(
        self,
        model: LanguageModel,
        tokenizer: Tokenizer,
        *,
        max_new_tokens: int = 8,
        batch_size: int = 64,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size

    def complete(self, prompts: Sequence[str]) -> list[str]:
        return greedy_completions(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
        )


def greedy_completions(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    batch_size: int,
) -> list[str]:
    was_training = model.training
    model.eval()
    completions: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        generation = generate(
            model,
            [tokenizer.encode(p, bos=True) for p in chunk],
            max_new_tokens=max_new_tokens,
            eos_id=tokenizer.EOS,
            pad_id=tokenizer.PAD,
        )
        completions.extend(tokenizer.decode(t) for t in generation.tokens)
    model.train(was_training)
    return completions
