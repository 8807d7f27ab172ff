"""Training: exact resume, learning, RL on rollouts, gradient accumulation."""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
import torch

from crucible.config.workload import EvalConfig, RolloutConfig, TrainConfig, model_preset
from crucible.rollouts.evaluate import evaluate
from crucible.rollouts.rollout import per_sample, rollout, write_trajectories
from crucible.tasks.arithmetic import ArithmeticTask, exact_match_reward
from crucible.training.checkpoint import DirectoryCheckpointer, Stateful
from crucible.training.records import read_jsonl
from crucible.training.train import Trainer

TINY = model_preset("tiny")


class Preempted(Exception):
    pass


class PreemptedAfterSave(DirectoryCheckpointer):
    """Saves, then dies like a process killed right after its checkpoint at `step`."""

    def __init__(self, directory: Any, step: int) -> None:
        super().__init__(directory)
        self.preempt_at = step

    def save(self, step: int, state: Mapping[str, Stateful]) -> None:
        super().save(step, state)
        if step == self.preempt_at:
            raise Preempted


def test_resumed_run_has_bitwise_the_same_losses(tmp_path, one_digit_records) -> None:
    # 20 records with batch 8: the interruption falls mid-epoch, the resume crosses epochs.
    records = one_digit_records[:20]
    config = TrainConfig(steps=8, batch_size=8, warmup_steps=2, checkpoint_every=4, seed=3)
    straight = Trainer(config, TINY, records)
    expected = straight.train()

    first = Trainer(config, TINY, records, checkpointer=PreemptedAfterSave(tmp_path, 4))
    seen: list[float] = []
    first.log = lambda step, metrics: seen.append(metrics["loss"])
    with pytest.raises(Preempted):
        first.train()
    resumed = Trainer(config, TINY, records, checkpointer=DirectoryCheckpointer(tmp_path))
    assert resumed.step == 4
    rest = resumed.train()

    assert seen + rest == expected
    for a, b in zip(straight.raw_model.parameters(), resumed.raw_model.parameters(), strict=True):
        assert torch.equal(a, b)


class Box:
    """The smallest Stateful: one tensor."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.x = state_dict["x"]


def test_checkpointer_ignores_a_partial_file(tmp_path) -> None:
    checkpointer = DirectoryCheckpointer(tmp_path)
    box = Box(torch.zeros(2))
    assert checkpointer.load({"box": box}) is None
    assert torch.equal(box.x, torch.zeros(2)), "nothing to resume leaves the state alone"
    checkpointer.save(3, {"box": Box(torch.ones(2))})
    (tmp_path / "step_00000009.pt.partial").write_bytes(b"truncated")
    assert checkpointer.load({"box": box}) == 3
    assert torch.equal(box.x, torch.ones(2))


def test_saving_at_step_zero_changes_nothing(tmp_path, one_digit_records) -> None:
    # Materialising a fresh AdamW's state for the step-0 checkpoint must not leak into
    # training, and resuming from it must continue like a fresh start.
    records = one_digit_records[:20]
    config = TrainConfig(steps=3, batch_size=8, warmup_steps=1, seed=5)
    expected = Trainer(config, TINY, records).train()
    initial = replace(config, save_initial=True)
    saved = Trainer(initial, TINY, records, checkpointer=DirectoryCheckpointer(tmp_path / "a"))
    assert saved.train() == expected
    assert sorted(p.name for p in (tmp_path / "a").iterdir())[0] == "step_00000000.pt"

    stopping = Trainer(initial, TINY, records, checkpointer=DirectoryCheckpointer(tmp_path / "b"))
    assert stopping.train(should_stop=lambda: True) == [] and stopping.stopped
    resumed = Trainer(initial, TINY, records, checkpointer=DirectoryCheckpointer(tmp_path / "b"))
    assert resumed.step == 0 and resumed.last_checkpoint_step == 0
    assert resumed.train() == expected and not resumed.stopped


def test_should_stop_checkpoints_the_current_step_once(tmp_path, one_digit_records) -> None:
    records = one_digit_records[:20]
    config = TrainConfig(steps=8, batch_size=8, warmup_steps=2, checkpoint_every=2, seed=3)
    expected = Trainer(config, TINY, records).train()
    for stop_at in (3, 4):  # between checkpoints, and right after one
        directory = tmp_path / str(stop_at)
        first = Trainer(config, TINY, records, checkpointer=DirectoryCheckpointer(directory))
        losses = first.train(should_stop=lambda first=first: first.step == stop_at)
        assert first.stopped and first.step == stop_at
        saved = sorted(p.name for p in directory.iterdir())
        assert saved[-1] == f"step_{stop_at:08d}.pt" and len(saved) == len(set(saved)) == 2
        resumed = Trainer(config, TINY, records, checkpointer=DirectoryCheckpointer(directory))
        assert losses + resumed.train() == expected


def test_gradient_accumulation_matches_one_big_batch(one_digit_records) -> None:
    # Same token count per micro-batch (1-digit sums of equal length) makes the two exact
    # up to float rounding.
    records = [r for r in one_digit_records if len(r["prompt"]) + len(r["completion"]) == 5]
    base = dict(steps=3, batch_size=8, warmup_steps=1, seed=0)
    whole = Trainer(TrainConfig(**base), TINY, records[:64]).train()
    accumulated = Trainer(TrainConfig(**base, grad_accum_steps=4), TINY, records[:64]).train()
    assert accumulated == pytest.approx(whole, rel=1e-5)


def test_indivisible_batch_is_refused_with_the_numbers(one_digit_records) -> None:
    with pytest.raises(ValueError, match=r"batch_size=10 .* grad_accum_steps=4"):
        Trainer(TrainConfig(batch_size=10, grad_accum_steps=4), TINY, one_digit_records)


@pytest.fixture(scope="module")
def sft_trainer(one_digit_records) -> Trainer:
    torch.set_num_threads(1)
    config = TrainConfig(steps=300, batch_size=32, lr=3e-3, warmup_steps=10, seed=0)
    return Trainer(config, TINY, one_digit_records)


def test_sft_raises_held_out_exact_match(sft_trainer, one_digit_task: ArithmeticTask) -> None:
    held_out = one_digit_task.sample("held_out", 100, seed=1, unique=True)
    eval_config = EvalConfig(max_new_tokens=4)
    model, tokenizer = sft_trainer.raw_model, sft_trainer.tokenizer
    before = evaluate(model, tokenizer, held_out, eval_config)
    losses = sft_trainer.train()
    after = evaluate(model, tokenizer, held_out, eval_config)
    assert len(held_out) >= 15
    assert sum(losses[-20:]) / 20 < 0.5 * losses[0]
    assert after.loss < before.loss
    # Untrained: about 0; trained on disjoint sums it generalises to most held-out ones.
    assert after.accuracy >= before.accuracy + 0.3, (before, after)


def test_rl_on_rollouts_from_the_sft_policy(
    tmp_path, sft_trainer, one_digit_task: ArithmeticTask
) -> None:
    if sft_trainer.step == 0:
        sft_trainer.train()
    sft_state = {k: v.clone() for k, v in sft_trainer.raw_model.state_dict().items()}
    prompts = [p.prompt for p in one_digit_task.sample("train", 16, seed=9, unique=True)]
    config = RolloutConfig(samples_per_prompt=4, temperature=1.5, max_new_tokens=4, seed=0)
    trajectories = rollout(
        sft_trainer.raw_model,
        sft_trainer.tokenizer,
        prompts,
        per_sample(exact_match_reward),
        config,
    )
    write_trajectories(tmp_path / "rollouts.jsonl", trajectories)
    records = list(read_jsonl(tmp_path / "rollouts.jsonl"))
    rewards = [r["reward"] for r in records]
    assert 0 < sum(rewards) < len(rewards), "the rollout needs both right and wrong samples"

    rl_config = TrainConfig(
        mode="rl",
        steps=6,
        batch_size=4,
        samples_per_prompt=4,
        lr=1e-3,
        warmup_steps=1,
        kl_coef=0.05,
    )
    rl = Trainer(rl_config, TINY, records, init_model_state=sft_state)
    losses = rl.train()
    assert all(torch.isfinite(torch.tensor(losses)))
    assert len(set(losses)) > 1
    moved = [not torch.equal(p, sft_state[n]) for n, p in rl.raw_model.named_parameters()]
    assert all(moved)


def test_rl_refuses_groups_of_the_wrong_size(tmp_path) -> None:
    record = {"prompt": "1+1=", "completion_tokens": [50], "reward": 1.0, "logprobs": [-0.1]}
    with pytest.raises(ValueError, match="1 samples but samples_per_prompt=4"):
        Trainer(TrainConfig(mode="rl", samples_per_prompt=4), TINY, [record], init_model_state={})
