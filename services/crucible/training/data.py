"""From tokenised examples to batches, one example a row or several packed into a row, and
a resumable sampler.

An SFT sequence is [BOS] prompt completion [EOS]; the loss mask covers the completion and
EOS only, so the model is never trained to produce the prompt. A packed row holds several
documents end to end: positions restart at 0 at each one, which is how the models know not
to attend across a document boundary (`GPT.forward`, `HFCausalLM.forward`), and no target
crosses one.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from crucible.models.tokenizer import Tokenizer


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

    trained: list[bool] | None = None
    """Per token, whether the model learns to produce it (chat: the assistant's turns);
    None: every token from `prompt_len` on."""

    @property
    def num_targets(self) -> int:
        """Positions this example takes in a row: one per token after the first."""
        return len(self.tokens) - 1

    def target_mask(self) -> list[float]:
        """Per target (token t+1 predicted at position t): 1.0 where it is trained."""
        if self.trained is not None:
            return [1.0 if t else 0.0 for t in self.trained[1:]]
        first = self.prompt_len - 1
        return [0.0] * first + [1.0] * (self.num_targets - first)


Row = Sequence[Example]
"""The examples of one row of a batch: one, or several packed end to end."""


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

    positions: Tensor | None = None
    """(batch, seq) each token's position in its own document, for packed rows (None: one
    document a row, positions 0, 1, ...)."""

    def to(self, device: torch.device) -> "Batch":
        return Batch(
            inputs=self.inputs.to(device),
            targets=self.targets.to(device),
            loss_mask=self.loss_mask.to(device),
            old_logprobs=self.old_logprobs.to(device),
            advantages=self.advantages.to(device),
            positions=self.positions.to(device) if self.positions is not None else None,
        )


def encode_sft(tokenizer: Tokenizer, prompt: str, completion: str) -> Example:
    prompt_tokens = tokenizer.encode(prompt, bos=True)
    return Example(
        tokens=prompt_tokens + tokenizer.encode(completion, eos=True),
        prompt_len=len(prompt_tokens),
    )


def collate(examples: Sequence[Example], *, pad_id: int) -> Batch:
    """One example a row, right-padded to the longest."""
    return collate_rows([[e] for e in examples], pad_id=pad_id)


def collate_rows(rows: Sequence[Row], *, pad_id: int) -> Batch:
    """Rows of one or more examples each, right-padded to the longest row. A row's advantage
    is its first example's (RL rows hold one sample each)."""
    seq = max(sum(e.num_targets for e in row) for row in rows)
    n = len(rows)
    inputs = torch.full((n, seq), pad_id, dtype=torch.long)
    targets = torch.full((n, seq), pad_id, dtype=torch.long)
    loss_mask = torch.zeros(n, seq)
    old_logprobs = torch.zeros(n, seq)
    packed = any(len(row) > 1 for row in rows)
    # Padding counts on from the last document, so it never starts a document of its own.
    positions = torch.arange(seq).repeat(n, 1) if packed else None
    for row_index, row in enumerate(rows):
        at = 0
        for example in row:
            tokens = torch.tensor(example.tokens, dtype=torch.long)
            length = example.num_targets
            span = slice(at, at + length)
            inputs[row_index, span] = tokens[:-1]
            targets[row_index, span] = tokens[1:]
            loss_mask[row_index, span] = torch.tensor(example.target_mask())
            if example.old_logprobs is not None:
                # Target t predicts token t+1: completion tokens are targets prompt_len-1 on.
                first = at + example.prompt_len - 1
                old_logprobs[row_index, first : first + len(example.old_logprobs)] = torch.tensor(
                    example.old_logprobs
                )
            if positions is not None:
                positions[row_index, span] = torch.arange(length)
            at += length
        if positions is not None and at < seq:
            positions[row_index, at:] = positions[row_index, at - 1] + 1 + torch.arange(seq - at)
    advantages = torch.tensor([row[0].advantage for row in rows])
    return Batch(inputs, targets, loss_mask, old_logprobs, advantages, positions)


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
