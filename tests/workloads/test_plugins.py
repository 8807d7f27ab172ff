"""A reward, eval suite, teacher or environment named by a built-in's name or an import path:
what it resolves to, the ConfigError (exit 2) for each kind of bad reference, and the checks on
what the user's code returns; prompt records (a prompt or a chat) as a rollout reads them; and
a RolloutJob's spec and job taking exactly one of an environment and a reward."""

import json
import math
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from crucible.config.parse import ConfigError
from crucible.domain.specs import RolloutJobSpec
from crucible.jobs import builtins
from crucible.jobs.env import read_env
from crucible.jobs.rollout import scoring_of
from crucible.models.tokenizer import ByteTokenizer
from crucible.plugins import (
    ENVIRONMENT,
    EVAL_SUITE,
    REWARD,
    TEACHER,
    CheckedEnvironment,
    Plugin,
    build_environment,
    checked_completions,
    checked_metrics,
    checked_scores,
    resolve,
)
from crucible.rollouts.prompts import build_prompts
from crucible.tasks.arithmetic import solve

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


# -- environments -----------------------------------------------------------------------------

ENVIRONMENTS = """
class Lengths:
    def __init__(self, *, longest=3):
        self.longest = longest

    def prompts(self, count, seed):
        return [{"prompt": "x" * (1 + (seed + i) % self.longest), "i": i} for i in range(count)]

    def score(self, prompts, completions, metadata):
        return [float(len(c) == len(p)) for p, c in zip(prompts, completions)]

class NoScore:
    def prompts(self, count, seed):
        return []
"""


@pytest.fixture
def environments(team_code: str, tmp_path: Path) -> str:
    """The module of environments in the team's package."""
    (tmp_path / team_code / "environments.py").write_text(textwrap.dedent(ENVIRONMENTS))
    return f"{team_code}.environments"


def environment(reference: str, **options: object) -> CheckedEnvironment:
    plugin = resolve(
        ENVIRONMENT,
        reference,
        options,
        where="spec.environment.name",
        options_where="spec.environment.options",
    )
    return build_environment(plugin)


def test_the_built_in_arithmetic_environment_draws_and_scores_the_task() -> None:
    arithmetic = environment("arithmetic", digits=1, operators=["+", "*"])
    records = arithmetic.prompts(20, seed=3)
    assert records == arithmetic.prompts(20, seed=3) != arithmetic.prompts(20, seed=4)
    assert all(r["answer"] == solve(r["prompt"]) for r in records)
    assert {r["prompt"][1] for r in records} == {"+", "*"}
    assert all(re.fullmatch(r"\d[+*]\d=", r["prompt"]) for r in records)
    prompts = [r["prompt"] for r in records[:2]]
    metadata = [{"answer": r["answer"]} for r in records[:2]]
    completions = [f" {records[0]['answer']} ", "wrong"]
    assert arithmetic.score(prompts, completions, metadata) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"digits": 0}, "spec.environment.options: digits=0 must be at least 1"),
        ({"digits": "2"}, 'spec.environment.options.digits must be an integer, not "2"'),
        ({"operators": ["/"]}, "spec.environment.options: operators=('/',) must be a non-empty"),
        ({"digitz": 2}, "spec.environment.options.digitz is not an option of environment"),
    ],
)
def test_the_arithmetic_environment_refuses_options_the_task_cannot_take(
    options: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        environment("arithmetic", **options)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_an_environment_class_is_built_with_its_options(environments: str) -> None:
    lengths = environment(f"{environments}:Lengths", longest=2)
    assert lengths.reference == f"{environments}:Lengths"
    assert lengths.prompts(3, seed=0) == [
        {"prompt": "x", "i": 0},
        {"prompt": "xx", "i": 1},
        {"prompt": "x", "i": 2},
    ]
    assert lengths.score(["x", "xx"], ["a", "a"], [{}, {}]) == [1.0, 0.0]
    with pytest.raises(ConfigError) as caught:
        environment(f"{environments}:Lengths", longset=2)
    assert str(caught.value) == (
        f"spec.environment.options.longset is not an option of environment "
        f"{environments}:Lengths; its options: longest"
    )
    with pytest.raises(ConfigError, match="has no attribute 'Lenghts'"):
        environment(f"{environments}:Lenghts")


def test_an_environment_without_score_is_refused_naming_it(environments: str) -> None:
    with pytest.raises(RuntimeError) as caught:
        environment(f"{environments}:NoScore")
    assert str(caught.value).startswith(
        f"environment {environments}:NoScore returned a NoScore, which has no score()"
    )


def returning(value: object) -> object:
    """An environment whose methods return `value`."""

    class Returning:
        def prompts(self, count: int, seed: int) -> object:
            return value

        def score(self, *arguments: object) -> object:
            return value

    return Returning()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([{"prompt": "a"}], "prompts() returned 1 records for count=2"),
        ({"prompt": "a"}, "prompts() returned dict, not a list of records"),
        (["a", "b"], "prompts() record 1 is a str, not an object"),
        (
            [{"prompt": "a"}, {"text": "b"}],
            "prompts() record 2 has neither a 'prompt' nor a 'messages' field; its fields: text",
        ),
        (
            [{"prompt": "a"}, {"prompt": "b", "messages": []}],
            "prompts() record 2 has both a 'prompt' and a 'messages' field",
        ),
        ([{"prompt": 3}, {"prompt": "b"}], "prompts() record 1: field 'prompt' must be a string"),
        (
            [{"prompt": "a"}, {"messages": [{"role": "user"}]}],
            "prompts() record 2 message 1 has no 'content' field",
        ),
        (
            [{"prompt": "a"}, {"messages": []}],
            "prompts() record 2: field 'messages' must be a non-empty list",
        ),
    ],
)
def test_an_environments_prompts_are_checked(
    environments: str, value: object, expected: str
) -> None:
    with pytest.raises(RuntimeError) as caught:
        build_environment(Plugin("mine", "m:f", lambda: returning(value))).prompts(2, seed=0)
    assert str(caught.value).startswith(f"environment mine {expected}"), str(caught.value)


def test_an_environments_scores_are_checked_like_a_rewards() -> None:
    def scores(value: object) -> list[float]:
        built = build_environment(Plugin("mine", "m:f", lambda: returning(value)))
        return built.score(["p", "p"], ["a", "b"], [{}, {}])

    assert scores(np.array([1, 0])) == [1.0, 0.0]
    with pytest.raises(RuntimeError, match=r"^environment mine score\(\) returned 1 scores for 2"):
        scores([1.0])
    with pytest.raises(RuntimeError, match=r"^environment mine score\(\) returned nan \(at 1\)"):
        scores([1.0, math.nan])


# -- prompt records ---------------------------------------------------------------------------


def test_chat_records_are_rendered_with_the_template_and_keep_their_messages() -> None:
    tokenizer = ByteTokenizer()
    chat = {"messages": [{"role": "user", "content": "hi"}], "tag": 1}
    plain, rendered = build_prompts([{"prompt": "1+1=", "answer": "2"}, chat], tokenizer)
    assert (plain.text, plain.metadata) == ("1+1=", {"answer": "2"})
    assert plain.tokens == [tokenizer.BOS, *b"1+1="]
    assert rendered.text == "<|user|>\nhi\n<|assistant|>\n"
    assert rendered.tokens == [tokenizer.BOS, *b"<|user|>\nhi\n<|assistant|>\n"]
    assert rendered.metadata == chat


# -- the spec and the job ---------------------------------------------------------------------

ROLLOUT = {"experiment": "e", "policy": {"checkpoint": {"id": 1}}, "output": "o"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"reward": {"name": "exact_match"}}, "drop `reward`"),
        ({"prompts": {"dataset": "d@1"}}, "drop `prompts`"),
        (
            {"prompts": {"dataset": "d@1"}, "reward": {"name": "exact_match"}},
            "drop `prompts` and `reward`",
        ),
        (
            {"policy": {"teacher": "arithmetic-solver"}},
            "`environment` scores a checkpoint's samples; a teacher's answers are not scored",
        ),
    ],
)
def test_a_spec_with_an_environment_and_a_prompts_dataset_or_reward_is_refused(
    spec: dict[str, object], expected: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        RolloutJobSpec.model_validate({**ROLLOUT, "environment": {"name": "arithmetic"}, **spec})
    assert expected in str(caught.value)


def test_a_spec_with_an_environment_alone_or_none_is_accepted() -> None:
    alone = RolloutJobSpec.model_validate(
        {**ROLLOUT, "environment": {"name": "team.env:Mine", "options": {"n": 2}}}
    )
    assert alone.environment is not None and alone.environment.options == {"n": 2}
    # Without either, a checkpoint policy is refused by the job, not at submit: a teacher's
    # job takes neither, and specs submitted before environments stay valid.
    assert RolloutJobSpec.model_validate(ROLLOUT).environment is None
    teacher = {**ROLLOUT, "policy": {"teacher": "arithmetic-solver"}}
    assert RolloutJobSpec.model_validate(teacher).reward is None


@pytest.mark.parametrize(
    ("spec", "inputs", "expected"),
    [
        ({}, {}, "spec.environment or spec.reward is required to score a checkpoint's samples"),
        (
            {"environment": {"name": "arithmetic"}, "reward": {"name": "exact_match"}},
            {},
            "spec.environment makes the prompts and scores the samples: drop spec.reward",
        ),
        (
            {"environment": {"name": "arithmetic"}},
            {"datasets": ["d@1"]},
            "spec.environment makes the prompts and scores the samples: drop the datasets of "
            "CRUCIBLE_INPUTS",
        ),
        ({"environment": {"options": {}}}, {}, "spec.environment.name must name the environment"),
    ],
)
def test_the_job_takes_exactly_one_of_environment_and_reward(
    spec: dict[str, object], inputs: dict[str, object], expected: str
) -> None:
    env = read_env(
        {
            "CRUCIBLE_SPEC": json.dumps({**ROLLOUT, **spec}),
            "CRUCIBLE_INPUTS": json.dumps({"checkpoint": 1, **inputs}),
        }
    )
    with pytest.raises(ConfigError) as caught:
        scoring_of(env)
    assert str(caught.value).startswith(expected), str(caught.value)
