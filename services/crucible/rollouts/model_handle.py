"""What an eval suite is handed: a checkpoint's model to generate from and score with.

A suite written against this handle runs on the built-in GPT and on a Hugging Face model
alike; it may also reach for `model` and `tokenizer` themselves.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer
from crucible.training.data import Example, collate


@dataclass(frozen=True)
class CheckpointInfo:
    """The checkpoint being scored."""

    id: int
    run_id: int
    step: int
    meta: Mapping[str, Any] = field(default_factory=dict)
    """As the trainer wrote it: the model's source, the task, the tokenizer."""


class ModelHandle:
    def __init__(
        self,
        model: LanguageModel,
        tokenizer: Tokenizer,
        *,
        checkpoint: CheckpointInfo,
        config: Mapping[str, Any] | None = None,
        batch_size: int = 64,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.checkpoint = checkpoint
        self.config: Mapping[str, Any] = dict(config or {})
        """The job's `config` as the spec gave it (the EvalPolicy's `config`)."""

        self.batch_size = batch_size
        """Prompts per forward pass in `generate` and `logprob`."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """One completion per prompt, up to EOS or `max_new_tokens` (fewer when the prompt
        leaves less room in the model's context); greedy at temperature 0."""
        encoded = [self.tokenizer.encode(p, bos=True) for p in prompts]
        room = self.model.max_seq_len - max((len(e) for e in encoded), default=0)
        if room < 1:
            longest = max(range(len(prompts)), key=lambda i: len(encoded[i]))
            raise ValueError(
                f"prompt {longest} is {len(encoded[longest])} tokens, the model's context "
                f"is {self.model.max_seq_len}: no room to generate"
            )
        from crucible.config.sampling import SamplingParams
        from crucible.engine.batch import complete

        params = SamplingParams(
            max_tokens=min(max_new_tokens, room), temperature=temperature, top_p=top_p, seed=seed
        )
        outputs = complete(self.model, self.tokenizer, encoded, params, max_running=self.batch_size)
        return [o.completions[0].text for o in outputs]

    @torch.no_grad()
    def logprob(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        """log p(completion | prompt) under the model, summed over the completion's tokens
        (no EOS): the score of a multiple-choice option or a reference answer."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        examples = []
        for prompt, completion in zip(prompts, completions, strict=True):
            head = self.tokenizer.encode(prompt, bos=True)
            tokens = head + self.tokenizer.encode(completion)
            if len(tokens) > self.model.max_seq_len + 1:
                raise ValueError(
                    f"prompt and completion are {len(tokens)} tokens, more than the model's "
                    f"context of {self.model.max_seq_len}"
                )
            examples.append(Example(tokens=tokens, prompt_len=len(head)))
        scores: list[float] = []
        with _eval_mode(self.model):
            for start in range(0, len(examples), self.batch_size):
                chunk = examples[start : start + self.batch_size]
                if not any(len(e.tokens) > e.prompt_len for e in chunk):
                    scores.extend(0.0 for _ in chunk)  # empty completions: log 1
                    continue
                batch = collate(chunk, pad_id=self.tokenizer.PAD).to(self.device)
                logits = self.model(batch.inputs).float()
                token_logprobs = -F.cross_entropy(
                    logits.transpose(1, 2), batch.targets, reduction="none"
                )
                scores.extend((token_logprobs * batch.loss_mask).sum(dim=1).tolist())
        return scores


class _eval_mode:
    """The model in eval mode for a block, back to what it was after."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.was_training = model.training

    def __enter__(self) -> None:
        self.model.eval()

    def __exit__(self, *exc: object) -> None:
        self.model.train(self.was_training)
