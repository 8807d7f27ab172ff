"""The arithmetic task: deterministic, a disjoint held-out split, a correct solver."""

import random

import pytest

from crucible.config.workload import TaskConfig
from crucible.rollouts.datagen import write_sft_dataset
from crucible.tasks.arithmetic import (
    ArithmeticTask,
    SolverTeacher,
    exact_match_reward,
    solve,
)
from crucible.training.records import read_jsonl

ALL_OPS = TaskConfig(digits=2, operators=("+", "-", "*"))


def test_same_seed_same_problems_other_seed_other_problems() -> None:
    task = ArithmeticTask(ALL_OPS)
    assert task.sample("train", 50, seed=3) == task.sample("train", 50, seed=3)
    assert task.sample("train", 50, seed=3) != task.sample("train", 50, seed=4)


def test_operators_and_digits_are_respected() -> None:
    problems = ArithmeticTask(ALL_OPS).sample("train", 300, seed=0)
    ops = {next(c for c in p.prompt if c in "+-*") for p in problems}
    assert ops == {"+", "-", "*"}
    for p in problems:
        a, b = p.prompt.rstrip("=").replace("*", "+").replace("-", "+").split("+")
        assert 0 <= int(a) < 100 and 0 <= int(b) < 100


@pytest.mark.parametrize("config", [ALL_OPS, TaskConfig(digits=1), TaskConfig(digits=3)])
def test_held_out_is_disjoint_from_train(config: TaskConfig) -> None:
    task = ArithmeticTask(config)
    train = {p.prompt for p in task.sample("train", 3000, seed=0)}
    held_out = task.sample("held_out", 300, seed=0, unique=True)
    assert held_out
    assert len({p.prompt for p in held_out}) == len(held_out)
    assert train.isdisjoint(p.prompt for p in held_out)


def test_held_out_share_matches_the_config() -> None:
    task = ArithmeticTask(TaskConfig(digits=2, held_out_fraction=0.2))
    held = task.sample("held_out", 100_000, seed=0, unique=True)
    assert 0.15 < len(held) / task.num_possible < 0.25


def test_solver_matches_python_arithmetic() -> None:
    rng = random.Random(0)
    for _ in range(200):
        a, b = rng.randrange(1000), rng.randrange(1000)
        assert solve(f"{a}+{b}=") == str(a + b)
        assert solve(f"{a}-{b}=") == str(a - b)
        assert solve(f"{a}*{b}=") == str(a * b)
    assert solve("37+58=") == "95"


def test_reward_is_exact_match() -> None:
    assert exact_match_reward("37+58=", "95") == 1.0
    assert exact_match_reward("37+58=", " 95 ") == 1.0
    assert exact_match_reward("37+58=", "96") == 0.0
    assert exact_match_reward("37+58=", "950") == 0.0


def test_bad_input_is_refused_with_the_value() -> None:
    with pytest.raises(ValueError, match="'2\\^3='"):
        solve("2^3=")
    with pytest.raises(ValueError, match="'/'"):
        ArithmeticTask(TaskConfig(operators=("/",)))


def test_datagen_writes_the_teachers_answers(tmp_path) -> None:
    problems = ArithmeticTask(ALL_OPS).sample("train", 20, seed=0)
    count = write_sft_dataset(tmp_path / "sft.jsonl", SolverTeacher(), problems)
    records = list(read_jsonl(tmp_path / "sft.jsonl"))
    assert count == len(records) == 20
    assert [r["prompt"] for r in records] == [p.prompt for p in problems]
    assert all(r["completion"] == solve(r["prompt"]) for r in records)


def test_an_unknown_split_is_refused_rather_than_drawn_forever(one_digit_task) -> None:
    with pytest.raises(ValueError, match="unknown split 'eval'; one of train, held_out"):
        one_digit_task.sample("eval", 4, seed=0)  # type: ignore[arg-type]
