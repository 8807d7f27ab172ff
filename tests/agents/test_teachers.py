"""The built-in agent teacher `calculator-solver`: it solves every task, calls the tool on
the share of tasks it is told to, and a bad option is refused at load time."""

import pytest

from crucible.agents.loading import load_environment, load_teacher
from crucible.agents.runner import run_scripted
from crucible.agents.sandbox import Sandbox
from crucible.config.online_rl import EpisodeConfig
from crucible.config.parse import ConfigError

CALCULATOR = load_environment("calculator", {"digits": 3, "operators": ["+", "*"]})


def play(tool_share: float, count: int = 200) -> list[bool]:
    """Whether the teacher called the tool, per episode; every episode must be solved."""
    teacher = load_teacher("calculator-solver", {"tool_share": tool_share})
    tasks = CALCULATOR.tasks(count, seed=5)
    records = run_scripted(
        teacher, CALCULATOR, tasks, seed=0, config=EpisodeConfig(), sandbox=Sandbox()
    )
    assert [r.reward for r in records] == [1.0] * count
    return [any(m["role"] == "tool" for m in r.messages) for r in records]


@pytest.mark.parametrize(
    ("share", "count", "low", "high"), [(1.0, 40, 40, 40), (0.0, 40, 0, 0), (0.5, 200, 80, 120)]
)
def test_the_teacher_calls_the_tool_on_its_share_of_tasks(
    share: float, count: int, low: int, high: int
) -> None:
    assert low <= sum(play(share, count)) <= high


def test_the_same_task_is_solved_the_same_way() -> None:
    assert play(0.5, count=40) == play(0.5, count=40)


@pytest.mark.parametrize("share", [1.5, -0.1, "half", True])
def test_a_bad_share_is_refused_naming_the_options_field(share: object) -> None:
    with pytest.raises(ConfigError, match=r"policy\.options of agent teacher calculator-solver"):
        load_teacher("calculator-solver", {"tool_share": share})


def test_an_unknown_teacher_is_refused_naming_the_built_ins() -> None:
    with pytest.raises(ConfigError, match="calculator-solver"):
        load_teacher("calculator-solverr")
