"""The online-RL learner's step: micro-batches accumulate to the one-pass step, and a check
that refuses the step leaves the weights and gradients as they were."""

import pytest
import torch

from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.learner import Learner, LogprobComparison, UpdateResult
from crucible.training.data import Example
from tests.agents.online_runs import tiny_model

TOK = ByteTokenizer()


def rows() -> list[Example]:
    """Seven rows whose completions run from 1 to 13 tokens, so the micro-batches of a split
    hold different numbers of trained tokens."""
    generator = torch.Generator().manual_seed(0)
    examples = []
    for i in range(7):
        prompt = [TOK.BOS, *torch.randint(3, 200, (3 + i,), generator=generator).tolist()]
        completion = torch.randint(3, 200, (1 + 2 * i,), generator=generator).tolist()
        examples.append(
            Example(
                tokens=prompt + completion,
                prompt_len=len(prompt),
                old_logprobs=(-5.0 - torch.rand(len(completion), generator=generator)).tolist(),
                advantage=(-1.0) ** i * (0.5 + 0.1 * i),
            )
        )
    return examples


def learner(micro_batch_size: int) -> Learner:
    return Learner(
        tiny_model(),
        pad_id=TOK.PAD,
        lr=1e-2,
        weight_decay=0.0,
        grad_clip=1.0,
        clip_eps=0.2,
        kl_coef=0.1,
        micro_batch_size=micro_batch_size,
    )


@pytest.mark.parametrize("micro_batch_size", [1, 3])
def test_micro_batches_accumulate_the_gradient_one_pass_takes(micro_batch_size: int) -> None:
    gradients: dict[int, dict[str, torch.Tensor]] = {}

    def step(size: int) -> tuple[Learner, UpdateResult]:
        taker = learner(size)

        def keep_gradients(_: LogprobComparison) -> None:  # after the backward, before the step
            gradients[size] = {
                n: p.grad.clone() for n, p in taker.model.named_parameters() if p.grad is not None
            }

        return taker, taker.update(rows(), before_step=keep_gradients)

    whole, expected = step(0)
    split, got = step(micro_batch_size)
    assert got.loss == pytest.approx(expected.loss, rel=1e-5)
    assert got.grad_norm == pytest.approx(expected.grad_norm, rel=1e-5)
    assert got.comparison.tokens == expected.comparison.tokens == sum(1 + 2 * i for i in range(7))
    assert got.comparison.kl == pytest.approx(expected.comparison.kl, rel=1e-6)
    assert gradients[0].keys() == gradients[micro_batch_size].keys() != set()
    for name, value in gradients[0].items():
        scale = float(value.abs().max())
        torch.testing.assert_close(
            gradients[micro_batch_size][name], value, rtol=1e-4, atol=1e-5 * scale
        )
    # Both took their step.
    untouched = tiny_model().state_dict()
    for taker in (whole, split):
        after = taker.model.state_dict()
        assert any(not torch.equal(untouched[n], after[n]) for n in untouched)


def test_a_check_that_refuses_the_step_leaves_weights_and_gradients_alone() -> None:
    split = learner(2)
    before = {n: p.detach().clone() for n, p in split.model.named_parameters()}

    def refuse(comparison: LogprobComparison) -> None:
        raise RuntimeError(f"refused at {comparison.tokens} tokens")

    with pytest.raises(RuntimeError, match="refused at 49 tokens"):
        split.update(rows(), before_step=refuse)
    for name, param in split.model.named_parameters():
        assert torch.equal(param.detach(), before[name])
        assert param.grad is None
    # The next step starts from no gradient: it equals a fresh learner's first step.
    fresh = learner(2)
    assert split.update(rows()).grad_norm == pytest.approx(fresh.update(rows()).grad_norm)
