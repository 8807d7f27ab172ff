"""A reward, eval suite or teacher named by a built-in's name or an import path: what it
resolves to, the ConfigError (exit 2) for each kind of bad reference, and the checks on what
the user's code returns."""

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from crucible.workloads.jobs import builtins
from crucible.workloads.jobs.config import ConfigError
from crucible.workloads.jobs.plugins import (
    EVAL_SUITE,
    REWARD,
    TEACHER,
    Plugin,
    checked_completions,
    checked_metrics,
    checked_scores,
    resolve,
)

TEAM_CODE = """
import math

def length_reward(prompts, completions, metadata, *, target=3, scale=1.0):
    return [scale * -abs(len(c) - target) for c in completions]

def needs_threshold(prompts, completions, metadata, *, threshold):
    return [1.0] * len(completions)

class Suites:
    @staticmethod
    def constant(model):
        return {"score": 1.0}

NOT_A_FUNCTION = 3
"""


@pytest.fixture
def team_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package `team_code_<id>` on sys.path, as a run's workingDir puts it there."""
    package = f"team_code_{tmp_path.name.replace('-', '_')}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "rewards.py").write_text(textwrap.dedent(TEAM_CODE))
    (tmp_path / package / "broken.py").write_text("import a_dependency_nobody_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


def reward(reference: str, **options: object) -> Plugin:
    return resolve(REWARD, reference, options, where="spec.reward.name", options_where="opts")


def test_built_in_names_resolve_to_the_built_ins() -> None:
    assert reward("exact_match").function is builtins.exact_match
    suite = resolve(EVAL_SUITE, "arithmetic", {}, where="spec.suite", options_where="o")
    assert suite.function is builtins.arithmetic
    teacher = resolve(TEACHER, "arithmetic-solver", {}, where="t", options_where="o")
    assert teacher(["2+3=", "9*9="]) == ["5", "81"]


def test_an_import_path_resolves_and_its_options_are_keyword_arguments(team_code: str) -> None:
    plugin = reward(f"{team_code}.rewards:length_reward", target=2, scale=2.0)
    assert plugin.target == f"{team_code}.rewards:length_reward"
    assert plugin(["p", "p"], ["ab", "abcd"], [{}, {}]) == [0.0, -4.0]
    nested = resolve(
        EVAL_SUITE, f"{team_code}.rewards:Suites.constant", {}, where="s", options_where="o"
    )
    assert nested(object()) == {"score": 1.0}


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("no_such_builtin", "'no_such_builtin' is neither a built-in reward (exact_match) nor"),
        ("pkg.module:", "is neither a built-in reward"),
        (":function", "is neither a built-in reward"),
    ],
)
def test_a_reference_that_is_neither_a_built_in_nor_an_import_path(
    reference: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=r"spec\.reward\.name") as caught:
        reward(reference)
    assert expected in str(caught.value)


def test_a_missing_module_is_named(team_code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        reward("nobody_ships_this.rewards:score")
    assert "no module named 'nobody_ships_this'" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        reward(f"{team_code}.absent:score")
    assert f"no module named '{team_code}.absent'" in str(caught.value)


def test_a_module_whose_own_import_fails_says_so(team_code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        reward(f"{team_code}.broken:score")
    message = str(caught.value)
    assert f"importing {team_code}.broken failed" in message
    assert "a_dependency_nobody_installed" in message


def test_a_missing_attribute_names_module_and_attribute(team_code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        reward(f"{team_code}.rewards:lenght_reward")
    assert f"module {team_code}.rewards has no attribute 'lenght_reward'" in str(caught.value)


def test_something_not_callable_is_refused(team_code: str) -> None:
    with pytest.raises(ConfigError, match="is a int, not a function"):
        reward(f"{team_code}.rewards:NOT_A_FUNCTION")


def test_options_the_function_does_not_take_or_needs_are_refused(team_code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        reward(f"{team_code}.rewards:length_reward", tagret=2)
    assert str(caught.value) == (
        f"opts.tagret is not an option of reward {team_code}.rewards:length_reward; its "
        "options: target, scale"
    )
    with pytest.raises(ConfigError) as caught:
        reward(f"{team_code}.rewards:needs_threshold", threshold=1, limit=2)
    assert "opts.limit is not an option" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        reward(f"{team_code}.rewards:needs_threshold")
    assert "opts (given: none) do not fit" in str(caught.value)
    assert "missing a required argument: 'threshold'" in str(caught.value)
    with pytest.raises(ConfigError, match=r"opts\.case is not an option of reward exact_match"):
        reward("exact_match", case=False)


def test_a_function_of_the_wrong_arity_is_refused_before_it_runs(team_code: str) -> None:
    # a reward where a suite is expected: three positional parameters, one given
    with pytest.raises(ConfigError, match="missing a required argument: 'completions'"):
        resolve(EVAL_SUITE, f"{team_code}.rewards:length_reward", {}, where="s", options_where="o")


def test_scores_must_be_one_finite_number_per_sample() -> None:
    plugin = Plugin("mine", "m:f", lambda *a: None)
    assert checked_scores(plugin, [1, 0.5], 2) == [1.0, 0.5]
    assert checked_scores(plugin, np.array([1.0, 0.0], dtype=np.float32), 2) == [1.0, 0.0]
    with pytest.raises(RuntimeError, match="returned 1 scores for 2 samples"):
        checked_scores(plugin, [1.0], 2)
    with pytest.raises(RuntimeError, match="nan"):
        checked_scores(plugin, [1.0, math.nan], 2)
    with pytest.raises(RuntimeError, match="'high'"):
        checked_scores(plugin, [1.0, "high"], 2)
    with pytest.raises(RuntimeError, match="True"):
        checked_scores(plugin, [1.0, True], 2)
    with pytest.raises(RuntimeError, match="returned float"):
        checked_scores(plugin, 1.0, 1)


def test_metrics_must_be_a_mapping_of_names_to_finite_numbers() -> None:
    plugin = Plugin("mine", "m:f", lambda *a: None)
    assert checked_metrics(plugin, {"acc": np.float32(0.5), "n": 3}) == {"acc": 0.5, "n": 3.0}
    with pytest.raises(RuntimeError, match="not a non-empty mapping"):
        checked_metrics(plugin, {})
    with pytest.raises(RuntimeError, match="not a non-empty mapping"):
        checked_metrics(plugin, [0.5])
    with pytest.raises(RuntimeError, match="inf"):
        checked_metrics(plugin, {"acc": math.inf})


def test_completions_must_be_one_string_per_prompt() -> None:
    plugin = Plugin("mine", "m:f", lambda *a: None)
    assert checked_completions(plugin, ("a", "b"), 2) == ["a", "b"]
    with pytest.raises(RuntimeError, match="one string per prompt: 2 prompts, 1 values"):
        checked_completions(plugin, ["a"], 2)
    with pytest.raises(RuntimeError, match="returned str"):
        checked_completions(plugin, "ab", 2)


def test_exact_match_uses_the_records_answer_else_the_arithmetic_solver() -> None:
    prompts = ["2+3=", "2+3=", "capital of France?", "9*9="]
    completions = ["5", " 6 ", "Paris", "81 "]
    metadata = [{}, {"answer": "6"}, {"answer": "Paris"}, {"completion": "80"}]
    assert builtins.exact_match(prompts, completions, metadata) == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="needs an `answer` field in the record of prompt 0"):
        builtins.exact_match(["capital of France?"], ["Paris"], [{}])
