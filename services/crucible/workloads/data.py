"""From (prompt, completion) records to token batches, and a resumable sampler.

A sequence is [BOS] prompt completion [EOS]; the loss mask covers the completion and
EOS only, so the model is never trained to produce the prompt.
"""

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from crucible.workloads.tokenizer import Tokenizer


@dataclass(frozen=True)
class Example:
    """One tokenised sequence with per-target annotations."""

    tokens: list[int]
    """[BOS] prompt completion (EOS when the completion ended)."""

    prompt_len: int
    """Tokens before the completion, BOS included."""

    old_logprobs: list[float] | None = None
    """RL: per-completion-token logprobs under the rollout policy."""

    advantage: float = 0.0
    """RL: the group-normalised advantage of this sample."""


@dataclass
class Batch:
    inputs: Tensor
    """(batch, seq) token ids, right-padded."""

    targets: Tensor
    """(batch, seq) next-token ids."""

    loss_mask: Tensor
    """(batch, seq) float, 1 where the target is a completion token."""

    old_logprobs: Tensor
    """(batch, seq) rollout logprobs aligned with `targets` (0 outside the mask)."""

    advantages: Tensor
    """(batch,) per-sequence advantage (0 in SFT)."""

    def to(self, device: torch.device) -> "Batch":
        return Batch(
            inputs=self.inputs.to(device),
            targets=self.targets.to(device),
            loss_mask=self.loss_mask.to(device),
            old_logprobs=self.old_logprobs.to(device),
            advantages=self.advantages.to(device),
        )


def encode_sft(tokenizer: Tokenizer, prompt: str, completion: str) -> Example:
    prompt_tokens = tokenizer.encode(prompt, bos=True)
    return Example(
        tokens=prompt_tokens + tokenizer.encode(completion, eos=True),
        prompt_len=len(prompt_tokens),
    )


def collate(examples: Sequence[Example], *, pad_id: int) -> Batch:
    seq = max(len(e.tokens) for e in examples) - 1
    n = len(examples)
    inputs = torch.full((n, seq), pad_id, dtype=torch.long)
    targets = torch.full((n, seq), pad_id, dtype=torch.long)
    loss_mask = torch.zeros(n, seq)
    old_logprobs = torch.zeros(n, seq)
    for row, example in enumerate(examples):
        tokens = torch.tensor(example.tokens, dtype=torch.long)
        length = len(example.tokens) - 1
        inputs[row, :length] = tokens[:-1]
        targets[row, :length] = tokens[1:]
        # Target t predicts token t+1: completion tokens are targets prompt_len-1 onwards.
        first = example.prompt_len - 1
        loss_mask[row, first:length] = 1.0
        if example.old_logprobs is not None:
            old_logprobs[row, first : first + len(example.old_logprobs)] = torch.tensor(
                example.old_logprobs
            )
    advantages = torch.tensor([e.advantage for e in examples])
    return Batch(inputs, targets, loss_mask, old_logprobs, advantages)


class Sampler:
    """Endless shuffled indices over `num_items`, one permutation per epoch.

    The position (epoch, index) is the whole state, so a restored sampler continues with
    exactly the indices an uninterrupted one would have produced.
    """

    def __init__(self, num_items: int, *, seed: int) -> None:
        if num_items <= 0:
            raise ValueError("the dataset is empty; the sampler needs at least one item")
        self.num_items = num_items
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        rng = np.random.default_rng([self.seed, epoch])
        return [int(i) for i in rng.permutation(self.num_items)]

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            if self.index == self.num_items:
                self.epoch += 1
                self.index = 0
                self._order = self._permutation(self.epoch)
            step = min(n - len(out), self.num_items - self.index)
            out.extend(self._order[self.index : self.index + step])
            self.index += step
        return out

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "num_items": self.num_items,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["num_items"] != self.num_items or state["seed"] != self.seed:
            raise ValueError(
                f"sampler state is for {state['num_items']} items with seed {state['seed']}, "
                f"but this dataset has {self.num_items} items with seed {self.seed}; "
                "resume with the same dataset and seed"
            )
        self.epoch = state["epoch"]
        self.index = state["index"]
        self._order = self._permutation(self.epoch)


def write_jsonl(path: Path | str, records: Iterable[dict[str, Any]]) -> int:
    """Write records one JSON object a line; returns how many."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
            count += 1
    return count


def read_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number} is not valid JSON ({exc})") from None
