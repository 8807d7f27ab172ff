"""Held-out exact-match accuracy and completion loss of a model."""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from crucible.config.workload import EvalConfig
from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer
from crucible.rollouts.rollout import greedy_completions
from crucible.tasks.arithmetic import Problem
from crucible.training.data import collate, encode_sft


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    """Share of problems whose greedy completion is exactly the answer."""

    loss: float
    """Mean next-token cross-entropy over answer tokens (EOS included)."""

    num_problems: int

    def as_metrics(self) -> dict[str, float]:
        return {"eval/accuracy": self.accuracy, "eval/loss": self.loss}


@torch.no_grad()
def evaluate(
    model: LanguageModel,
    tokenizer: Tokenizer,
    problems: Sequence[Problem],
    config: EvalConfig,
) -> EvalResult:
    if not problems:
        raise ValueError("no problems to evaluate; check the task's held-out split")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_sum = 0.0
    token_count = 0.0
    for start in range(0, len(problems), config.batch_size):
        chunk = problems[start : start + config.batch_size]
        batch = collate(
            [encode_sft(tokenizer, p.prompt, p.answer) for p in chunk], pad_id=tokenizer.PAD
        ).to(device)
        logits = model(batch.inputs).float()
        losses = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")
        loss_sum += float((losses * batch.loss_mask).sum())
        token_count += float(batch.loss_mask.sum())
    completions = greedy_completions(
        model,
        tokenizer,
        [p.prompt for p in problems],
        max_new_tokens=config.max_new_tokens,
        batch_size=config.batch_size,
    )
    correct = sum(c.strip() == p.answer for c, p in zip(completions, problems, strict=True))
    model.train(was_training)
    return EvalResult(
        accuracy=correct / len(problems),
        loss=loss_sum / token_count,
        num_problems=len(problems),
    )
