"""A Hugging Face model through the loop's library stages on CPU: SFT with exact resume, a
tokenizer trained on the data, rollouts scored by the reward, RL from the SFT weights, and
the eval; the same code paths as the built-in GPT (config/model_source.py)."""

from pathlib import Path

import pytest
import torch

from crucible.config.model_source import HFModelSource, ModelSpec
from crucible.config.workload import EvalConfig, RolloutConfig, TrainConfig
from crucible.models.bpe import train_bpe
from crucible.models.hf import HFCausalLM
from crucible.rollouts.evaluate import evaluate
from crucible.rollouts.rollout import per_sample, rollout, write_trajectories
from crucible.tasks.arithmetic import ArithmeticTask, exact_match_reward
from crucible.training.checkpoint import DirectoryCheckpointer
from crucible.training.records import read_jsonl
from crucible.training.train import Trainer
from tests.workloads.test_hf_model import SMALL
from tests.workloads.test_train import Preempted, PreemptedAfterSave

LLAMA = SMALL["llama"]


def llama(**config: int) -> ModelSpec:
    return ModelSpec(hf=HFModelSource(architecture="llama", config=LLAMA | config))


def test_a_resumed_hf_run_has_bitwise_the_same_losses(tmp_path: Path, one_digit_records) -> None:
    records = one_digit_records[:20]
    config = TrainConfig(steps=6, batch_size=8, warmup_steps=2, checkpoint_every=3, seed=3)
    straight = Trainer(config, llama(), records)
    assert isinstance(straight.raw_model, HFCausalLM)
    expected = straight.train()

    first = Trainer(config, llama(), records, checkpointer=PreemptedAfterSave(tmp_path, 3))
    seen: list[float] = []
    first.log = lambda step, metrics: seen.append(metrics["loss"])
    with pytest.raises(Preempted):
        first.train()
    resumed = Trainer(config, llama(), records, checkpointer=DirectoryCheckpointer(tmp_path))
    assert resumed.step == 3
    assert seen + resumed.train() == expected
    for a, b in zip(straight.raw_model.parameters(), resumed.raw_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_sft_rollouts_rl_and_eval_with_a_trained_tokenizer(
    tmp_path: Path, one_digit_records, one_digit_task: ArithmeticTask
) -> None:
    texts = [r["prompt"] + r["completion"] for r in one_digit_records]
    vocab = train_bpe(texts, tmp_path / "tokenizer", vocab_size=300)
    spec = ModelSpec(
        hf=HFModelSource(architecture="llama", config=LLAMA | {"vocab_size": vocab}),
        tokenizer=str(tmp_path / "tokenizer"),
    )
    sft = Trainer(
        TrainConfig(steps=40, batch_size=32, lr=3e-3, warmup_steps=4), spec, one_digit_records
    )
    assert sft.tokenizer.vocab_size == vocab and sft.tokenizer.EOS == 2
    losses = sft.train()
    assert losses[-1] < 0.6 * losses[0]  # it learns the format from the data

    prompts = [p.prompt for p in one_digit_task.sample("train", 8, seed=9, unique=True)]
    sampling = RolloutConfig(samples_per_prompt=4, temperature=1.5, max_new_tokens=4, seed=0)
    trajectories = rollout(
        sft.raw_model, sft.tokenizer, prompts, per_sample(exact_match_reward), sampling
    )
    write_trajectories(tmp_path / "rollouts.jsonl", trajectories)
    records = list(read_jsonl(tmp_path / "rollouts.jsonl"))
    assert len(records) == 32 and all(
        len(r["logprobs"]) == len(r["completion_tokens"]) for r in records
    )

    sft_state = {k: v.clone() for k, v in sft.raw_model.state_dict().items()}
    rl_config = TrainConfig(
        mode="rl", steps=3, batch_size=4, samples_per_prompt=4, lr=1e-3, kl_coef=0.05
    )
    rl = Trainer(rl_config, spec, records, init_model_state=sft_state)
    rl_losses = rl.train()
    assert all(torch.isfinite(torch.tensor(rl_losses)))
    assert any(not torch.equal(p, sft_state[n]) for n, p in rl.raw_model.named_parameters())

    problems = one_digit_task.sample("held_out", 16, seed=0, unique=True)
    result = evaluate(
        rl.raw_model, rl.tokenizer, problems, EvalConfig(batch_size=16, max_new_tokens=4)
    )
    assert result.num_problems == 16 and 0.0 <= result.accuracy <= 1.0
    assert torch.isfinite(torch.tensor(result.loss))
