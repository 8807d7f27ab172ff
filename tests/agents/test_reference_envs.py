"""The reference environments, loaded by name and by import path as a team's own would be:
solved by a scripted policy (the calculator through its tool in the sandbox, the guessing
game by bisection within its budget, letter_or_digit by its kind), the calculator's tool
safe, and bad options named."""

import math

import pytest

from crucible.agents.envs.calculator import calculate
from crucible.agents.loading import load_environment
from crucible.agents.records import EndReason
from crucible.agents.runner import run_scripted
from crucible.agents.sandbox import Sandbox
from crucible.config.online_rl import EpisodeConfig
from crucible.config.parse import ConfigError
from tests.agents import policies

CONFIG = EpisodeConfig(max_turns=4)


@pytest.mark.parametrize("digits", [4, 6])
def test_the_calculator_is_solved_through_its_tool(digits: int) -> None:
    source = load_environment(
        "crucible.agents.envs.calculator:CalculatorEnvironment", {"digits": digits}
    )
    tasks = source.tasks(6, seed=3)
    assert {t["question"].split()[3] for t in tasks} == {"+", "*"}
    records = run_scripted(
        policies.calculator, source, tasks, seed=0, config=CONFIG, sandbox=Sandbox()
    )
    for record in records:
        assert (record.reward, record.end) == (1.0, EndReason.DONE), record.end_detail
        (call,) = record.turns[0].tool_calls
        assert (call.name, call.outcome, call.isolation) == ("calculate", "ok", "namespace")
        assert call.content == record.task["answer"]
        assert record.messages[3] == {"role": "tool", "name": "calculate", "content": call.content}


def test_a_wrong_answer_ends_the_calculator_with_no_reward() -> None:
    source = load_environment("calculator", {"digits": 4, "operators": ["-"]})
    records = run_scripted(
        lambda messages: "Answer: 1,234",
        source,
        source.tasks(2, 0),
        seed=0,
        config=CONFIG,
        sandbox=Sandbox(),
    )
    assert [(r.reward, r.end) for r in records] == [(0.0, EndReason.DONE)] * 2
    assert records[0].turns[0].info == {"given": "1234"}


def test_a_reply_without_an_answer_is_told_how_to_answer() -> None:
    source = load_environment("calculator")
    (record,) = run_scripted(
        lambda messages: "Let me think.",
        source,
        source.tasks(1, 0),
        seed=0,
        config=CONFIG,
        sandbox=Sandbox(),
    )
    assert (record.end, len(record.turns)) == (EndReason.MAX_TURNS, CONFIG.max_turns)
    assert "Answer: <number>" in record.turns[0].observations[0]["content"]


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12345 * 6789", "83810205"),
        ("(1 + 2) * -3 // 2 % 7", "2"),
        ("7 / 2", "3.5"),
        ("1 / 0", "error: division by zero"),
        ("2 ** 10", "error: only numbers and + - * / // % ( ) are allowed, not '2 ** 10'"),
        ("__import__('os').getcwd()", "error: only numbers"),
        ("x + 1", "error: only numbers"),
        ("1 +", "error: '1 +' is not an arithmetic expression"),
        ("1" * 201, "error: the expression is longer than 200 characters"),
    ],
)
def test_calculate_evaluates_arithmetic_and_nothing_else(expression: str, value: str) -> None:
    assert calculate(expression).startswith(value)


@pytest.mark.parametrize("high", [2, 7, 100, 1000])
def test_bisection_finds_the_number_within_the_budget(high: int) -> None:
    source = load_environment("guessing", {"high": high})
    budget = math.ceil(math.log2(high)) + 1
    config = EpisodeConfig(max_turns=budget)
    tasks = source.tasks(12, seed=1)
    records = run_scripted(
        policies.bisection, source, tasks, seed=0, config=config, sandbox=Sandbox()
    )
    for record in records:
        assert record.end is EndReason.DONE, record.messages
        guesses = len(record.turns)
        assert guesses <= budget
        assert record.reward == pytest.approx((budget + 1 - guesses) / budget)
        assert int(record.turns[-1].message["content"]) == record.task["hidden"]


def test_fewer_guesses_earn_more() -> None:
    source = load_environment("guessing", {"high": 100})
    task = {"hidden": 50}

    def straight_to_it(messages: object) -> str:
        return "50"

    def counting_up(messages: list[dict[str, str]]) -> str:
        return str(46 + len(messages) // 2)

    (first,) = run_scripted(
        straight_to_it, source, [task], seed=0, config=CONFIG, sandbox=Sandbox()
    )
    (fourth,) = run_scripted(counting_up, source, [task], seed=0, config=CONFIG, sandbox=Sandbox())
    assert (len(first.turns), len(fourth.turns)) == (1, 4)
    assert first.reward == 1.0 > fourth.reward > 0.0


def test_guessing_below_its_budget_is_truncated() -> None:
    source = load_environment("guessing", {"high": 100})
    (record,) = run_scripted(
        lambda messages: "I pick 1",
        source,
        [{"hidden": 77}],
        seed=0,
        config=CONFIG,
        sandbox=Sandbox(),
    )
    assert (record.end, record.reward, record.truncated) == (EndReason.MAX_TURNS, 0.0, True)
    assert [t.observations[0]["content"] for t in record.turns] == ["Higher."] * 4


def test_letter_or_digit_rewards_a_reply_that_starts_with_the_kind_asked_for() -> None:
    source = load_environment("letter_or_digit")
    tasks = source.tasks(6, seed=0)
    assert sorted(t["kind"] for t in tasks) == ["digit"] * 3 + ["letter"] * 3
    records = run_scripted(
        lambda messages: "7 apples", source, tasks, seed=0, config=CONFIG, sandbox=Sandbox()
    )
    for record in records:
        assert record.reward == (1.0 if record.task["kind"] == "digit" else 0.0)
        assert (record.end, len(record.turns)) == (EndReason.DONE, 1)
    digits = load_environment("letter_or_digit", {"kinds": ["digit"]})
    assert digits.tasks(3, seed=1) == [{"kind": "digit"}] * 3


@pytest.mark.parametrize("name", ["calculator", "guessing"])
def test_tasks_are_the_same_for_a_seed(name: str) -> None:
    source = load_environment(name)
    assert source.tasks(20, seed=5) == source.tasks(20, seed=5)
    assert source.tasks(20, seed=5) != source.tasks(20, seed=6)


@pytest.mark.parametrize(
    ("name", "options", "named"),
    [
        ("calculator", {"digits": 0}, "digits must be a whole number from 1 to 18, got 0"),
        ("calculator", {"digits": "5"}, "got '5'"),
        ("calculator", {"operators": ["^"]}, "operators must be a non-empty list of +, -, *"),
        ("guessing", {"high": 1}, "high must be a whole number of at least 2, got 1"),
        ("guessing", {"highest": 10}, "spec.options.highest is not an option"),
        (
            "letter_or_digit",
            {"kinds": ["emoji"]},
            "kinds must be a non-empty list of ['digit', 'letter'], got ['emoji']",
        ),
    ],
)
def test_a_bad_option_is_a_config_error_naming_it(
    name: str, options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_environment(name, options, where="spec.name", options_where="spec.options")
    assert named in str(raised.value)


def test_a_bad_reference_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="neither a built-in agent environment"):
        load_environment("calculater")
    with pytest.raises(ConfigError, match="no module named 'team_missing'"):
        load_environment("team_missing.env:Thing")
