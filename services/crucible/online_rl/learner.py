"""The training side of online RL: one optimizer step on a batch of episode rows, and what
the trainer's logprobs say about the rollout's.

The loss is the offline trainer's (`training/train.py` `clipped_policy_loss`): the
importance ratio exp(logp_train - old_logp) to the policy that sampled the tokens, clipped,
times the group-normalised advantage; so a sample from an older policy version is
corrected for, within the clip. The same forward gives the comparison with the rollout's
logprobs (`LogprobComparison`), so the health checks cost no second pass.

One process, one device, the model in its own dtype (no autocast): the generator's copy
runs in the same dtype, so on the same weights the two must agree. A step's rows may be
split into micro-batches whose gradients accumulate: a round of hundreds of long episodes
does not fit one forward's activations on a GPU.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from crucible.config.workload import TrainConfig
from crucible.models.hf import LanguageModel
from crucible.training.data import Example, collate_rows
from crucible.training.train import (
    build_optimizer,
    clipped_policy_loss,
    maybe_build_reference,
    token_logprobs,
)


@dataclass(frozen=True)
class LogprobComparison:
    """The trainer's logprobs against the rollout's, on the same completion tokens."""

    tokens: int
    kl: float
    """k3 estimate of KL(rollout policy || trainer policy) per token, mean of
    r - 1 - log r with r = exp(logp_train - logp_rollout): 0 when they agree, never below."""

    ratio_mean: float
    ratio_max_deviation: float
    """max |r - 1| over the tokens."""

    logprob_diff_mean: float
    """mean |logp_train - logp_rollout|."""

    logprob_diff_max: float


@dataclass(frozen=True)
class UpdateResult:
    loss: float
    grad_norm: float
    comparison: LogprobComparison
    """Measured in the update's forward, before its step."""


class Learner:
    def __init__(
        self,
        model: LanguageModel,
        *,
        pad_id: int,
        lr: float,
        weight_decay: float,
        grad_clip: float,
        clip_eps: float,
        kl_coef: float,
        micro_batch_size: int = 0,
    ) -> None:
        """model: trained in place. kl_coef > 0 keeps a frozen copy of it as it is now, the
        reference policy of the KL penalty. micro_batch_size: rows per forward and
        backward within a step; 0 takes the step's rows in one."""
        self.model = model
        self.pad_id = pad_id
        self.micro_batch_size = micro_batch_size
        self.grad_clip = grad_clip
        self.clip_eps = clip_eps
        self.kl_coef = kl_coef
        self.device = next(model.parameters()).device
        # The offline trainer's optimizer and reference, from the fields they read.
        config = TrainConfig(
            mode="rl", lr=lr, weight_decay=weight_decay, clip_eps=clip_eps, kl_coef=kl_coef
        )
        self.optimizer = build_optimizer(config, model, self.device)
        self.reference = maybe_build_reference(config, model)

    def update(
        self,
        examples: Sequence[Example],
        *,
        before_step: Callable[[LogprobComparison], None] | None = None,
    ) -> UpdateResult:
        """One optimizer step on `examples`, one row each. `before_step` sees the logprob
        comparison of all the rows before the step: a check that raises there leaves the
        weights as they were."""
        size = self.micro_batch_size or len(examples)
        batches = [
            collate_rows([[e] for e in examples[i : i + size]], pad_id=self.pad_id).to(self.device)
            for i in range(0, len(examples), size)
        ]
        # Each micro-batch's loss is its token mean; weighted by its share of the step's
        # tokens, the accumulated gradient is the one-pass step's (a single batch: x 1.0).
        tokens = [float(b.loss_mask.sum()) for b in batches]
        total = max(sum(tokens), 1.0)
        self.model.train()
        diffs: list[Tensor] = []
        loss_sum = 0.0
        for batch, count in zip(batches, tokens, strict=True):
            logp = token_logprobs(self.model(batch.inputs).float(), batch.targets)
            diffs.append((logp.detach() - batch.old_logprobs)[batch.loss_mask > 0])
            reference_logp = None
            if self.reference is not None:
                with torch.no_grad():
                    reference_logp = token_logprobs(
                        self.reference(batch.inputs).float(), batch.targets
                    )
            loss = clipped_policy_loss(
                logp,
                batch,
                clip_eps=self.clip_eps,
                kl_coef=self.kl_coef,
                reference_logp=reference_logp,
            )
            if len(batches) > 1:
                loss = loss * (count / total)
            torch.autograd.backward(loss)
            loss_sum += float(loss.detach())
        comparison = comparison_of(torch.cat(diffs))
        if before_step is not None:
            try:
                before_step(comparison)
            except BaseException:
                self.optimizer.zero_grad(set_to_none=True)
                raise
        grad_norm = nn.utils.clip_grad_norm_(
            self.model.parameters(), self.grad_clip or float("inf")
        )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return UpdateResult(loss=loss_sum, grad_norm=float(grad_norm), comparison=comparison)

    def state_dict(self) -> dict[str, Any]:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.reference is not None:
            # The reference is the run's starting policy: a resumed run must keep it, not
            # take the weights it resumes from.
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.reference is not None:
            self.reference.load_state_dict(state["reference"])


def comparison_of(diff: Tensor) -> LogprobComparison:
    """`LogprobComparison` of the per-token differences logp_train - logp_rollout."""
    diff = diff.double()
    tokens = int(diff.numel())
    if tokens == 0:
        return LogprobComparison(0, 0.0, 1.0, 0.0, 0.0, 0.0)
    ratio = diff.exp()
    return LogprobComparison(
        tokens=tokens,
        kl=float((ratio - 1 - diff).mean()),
        ratio_mean=float(ratio.mean()),
        ratio_max_deviation=float((ratio - 1).abs().max()),
        logprob_diff_mean=float(diff.abs().mean()),
        logprob_diff_max=float(diff.abs().max()),
    )
