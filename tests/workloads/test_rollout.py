"""Rollouts: K scored samples per prompt, reproducible from the seed, written as JSONL."""

from dataclasses import replace

import pytest
import torch

from crucible.config.workload import RolloutConfig, model_preset
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.datagen import teach
from crucible.rollouts.rollout import (
    ModelTeacher,
    generate,
    greedy_completions,
    per_sample,
    rollout,
    sample_next,
    write_trajectories,
)
from crucible.tasks.arithmetic import Problem, Teacher, exact_match_reward
from crucible.training.records import read_jsonl

TOK = ByteTokenizer()
PROMPTS = ["1+2=", "3+4=", "5+5="]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(model_preset("tiny"))


def test_k_samples_per_prompt_with_rewards_and_logprobs(tmp_path) -> None:
    config = RolloutConfig(samples_per_prompt=4, batch_size=2, max_new_tokens=3, seed=1)
    trajectories = rollout(_model(), TOK, PROMPTS, per_sample(exact_match_reward), config)
    assert [t.prompt for t in trajectories] == [p for p in PROMPTS for _ in range(4)]
    assert [t.group for t in trajectories] == [g for g in range(3) for _ in range(4)]
    for t in trajectories:
        assert 1 <= len(t.completion_tokens) <= 3
        assert len(t.logprobs) == len(t.completion_tokens)
        assert all(lp <= 0 for lp in t.logprobs)
        assert abs(t.logprob - sum(t.logprobs)) < 1e-9
        assert t.reward == exact_match_reward(t.prompt, t.completion)
    # An untrained model at temperature 1 does not say the same thing K times.
    assert len({tuple(t.completion_tokens) for t in trajectories[:4]}) > 1

    assert write_trajectories(tmp_path / "r.jsonl", trajectories) == 12
    records = list(read_jsonl(tmp_path / "r.jsonl"))
    assert records[5]["completion_tokens"] == trajectories[5].completion_tokens
    assert set(records[0]) >= {"prompt", "completion", "reward", "logprobs", "logprob"}


def test_same_seed_same_rollout_whatever_the_other_prompts() -> None:
    config = RolloutConfig(samples_per_prompt=3, max_new_tokens=3, seed=7)
    model = _model()
    first = rollout(model, TOK, PROMPTS, per_sample(exact_match_reward), config)
    again = rollout(model, TOK, PROMPTS, per_sample(exact_match_reward), config)
    assert [t.completion_tokens for t in first] == [t.completion_tokens for t in again]
    # The last prompt alone, in a batch of one: the same three samples.
    alone = rollout(model, TOK, PROMPTS[-1:], per_sample(exact_match_reward), config)
    assert [t.completion_tokens for t in alone] == [t.completion_tokens for t in first[-3:]]
    other = rollout(model, TOK, PROMPTS, per_sample(exact_match_reward), replace(config, seed=8))
    assert [t.completion_tokens for t in other] != [t.completion_tokens for t in first]


def test_greedy_rollout_equals_the_reference_generation() -> None:
    config = RolloutConfig(
        temperature=0.0, samples_per_prompt=2, batch_size=2, max_new_tokens=5, seed=3
    )
    model = _model()
    engine = rollout(model, TOK, PROMPTS, per_sample(exact_match_reward), config)
    reference = generate(
        model,
        [TOK.encode(p, bos=True) for p in PROMPTS for _ in range(2)],
        max_new_tokens=5,
        eos_id=TOK.EOS,
        pad_id=TOK.PAD,
        use_cache=False,
    )
    assert [t.completion_tokens for t in engine] == reference.tokens
    assert [t.group for t in engine] == [0, 0, 1, 1, 2, 2]
    for trajectory, logprobs in zip(engine, reference.logprobs, strict=True):
        assert trajectory.logprobs == pytest.approx(logprobs, abs=1e-4)


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    generator = torch.Generator().manual_seed(0)
    tiny_p = sample_next(logits, temperature=1.0, top_p=1e-6, generator=generator)
    assert set(tiny_p.tolist()) == {0}
    nucleus = sample_next(logits, temperature=1.0, top_p=0.8, generator=generator)
    assert set(nucleus.tolist()) == {0, 1}
    everything = sample_next(logits, temperature=1.0, top_p=1.0, generator=generator)
    assert set(everything.tolist()) == {0, 1, 2, 3}
    assert set(sample_next(logits, temperature=0.0, top_p=1.0, generator=None).tolist()) == {0}


def test_a_model_can_teach() -> None:
    model = _model()
    teacher: Teacher = ModelTeacher(model, TOK, max_new_tokens=3)
    problems = [Problem(p, "") for p in PROMPTS]
    records = teach(teacher, problems)
    expected = greedy_completions(model, TOK, PROMPTS, max_new_tokens=3, batch_size=8)
    assert [r["completion"] for r in records] == expected
    assert [r["prompt"] for r in records] == PROMPTS
