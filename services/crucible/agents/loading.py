"""An agent environment named by a built-in's name or an import path, with options: resolved
and checked as the workloads' rewards and environments are (`plugins.py`).

The factory is called once at load time, so a bad option value (`digits: 0`) is a
ConfigError naming the options field before any model loads; then once per episode.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crucible.agents.protocol import AgentEnvironment, ScriptedPolicy
from crucible.config.parse import ConfigError
from crucible.plugins import Kind, Plugin, resolve

AGENT_ENVIRONMENT = Kind(
    "agent environment",
    (),
    {
        "calculator": "crucible.agents.envs.calculator:CalculatorEnvironment",
        "guessing": "crucible.agents.envs.guessing:GuessingEnvironment",
        "letter_or_digit": "crucible.agents.envs.letter_or_digit:LetterOrDigitEnvironment",
    },
)

AGENT_TEACHER = Kind(
    "agent teacher",
    (),
    {"calculator-solver": "crucible.agents.teachers:calculator_solver"},
)

_METHODS = ("tasks", "reset", "tools", "step")


@dataclass(frozen=True)
class EnvironmentSource:
    """A resolved environment factory: a new environment per episode, and the tasks."""

    plugin: Plugin

    @property
    def reference(self) -> str:
        return self.plugin.reference

    def new(self) -> AgentEnvironment:
        """A fresh environment, checked to have the protocol's methods."""
        instance = self.plugin()
        missing = [m for m in _METHODS if not callable(getattr(instance, m, None))]
        if missing:
            raise RuntimeError(
                f"agent environment {self.reference} returned a {type(instance).__name__}, "
                f"which has no {', '.join(m + '()' for m in missing)}; an agent environment "
                "has tasks(count, seed), reset(task), tools() and step(message, tool_results)"
            )
        return instance  # type: ignore[no-any-return]

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` tasks, each a JSON mapping, or a RuntimeError naming the environment."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"the number of tasks must be a positive integer, got {count!r}")
        name = f"agent environment {self.reference} tasks()"
        values = self.new().tasks(count, seed)
        if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__len__"):
            raise RuntimeError(f"{name} returned {type(values).__name__}, not a list of tasks")
        if len(values) != count:
            raise RuntimeError(f"{name} returned {len(values)} tasks for count={count}")
        tasks = []
        for number, task in enumerate(values, start=1):
            if not isinstance(task, Mapping):
                raise RuntimeError(
                    f"{name} task {number} is a {type(task).__name__}, not a mapping"
                )
            try:
                # A task is stored in every record: it must survive JSON as it is.
                tasks.append(json.loads(json.dumps(dict(task))))
            except (TypeError, ValueError) as exc:
                raise RuntimeError(f"{name} task {number} is not JSON: {exc}") from None
        return tasks


def load_environment(
    reference: str,
    options: Mapping[str, Any] | None = None,
    *,
    where: str = "environment.name",
    options_where: str = "environment.options",
) -> EnvironmentSource:
    """The environment `reference` names, built once with `options` to check them."""
    plugin = resolve(
        AGENT_ENVIRONMENT, reference, options, where=where, options_where=options_where
    )
    try:
        source = EnvironmentSource(plugin)
        source.new()
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{options_where} of agent environment {reference}: {exc}") from None
    return source


def load_teacher(
    reference: str,
    options: Mapping[str, Any] | None = None,
    *,
    where: str = "policy.teacher",
    options_where: str = "policy.options",
) -> ScriptedPolicy:
    """The scripted policy of the teacher `reference` names (`agents/teachers.py`), made with
    `options`."""
    plugin = resolve(AGENT_TEACHER, reference, options, where=where, options_where=options_where)
    try:
        policy = plugin()
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{options_where} of agent teacher {reference}: {exc}") from None
    if not callable(policy):
        raise ConfigError(
            f"{where} {reference!r} returned a {type(policy).__name__}, not a policy: an agent "
            "teacher is a factory returning a function of the messages so far"
        )
    return policy  # type: ignore[no-any-return]
