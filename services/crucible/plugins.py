"""The reward, eval suite, teacher or environment a job runs: a built-in's name or an import
path `package.module:attribute` to a team's own code, resolved to a callable before any heavy
work.

An import path resolves in the job's own Python: the packages installed in the workload
image (or the local virtual environment), then the run's `workingDir`, which `python -m`
puts first on sys.path, so a module beside the spec ships with the run. The built-ins are
import paths too (`jobs/builtins.py`), so both go through the same checks: the path names a
callable, and the options the spec gives are keyword arguments it takes. Each failure is a
ConfigError (exit 2) naming the spec field, the module and the attribute.

The contracts (docs/workloads.md):
- reward: `reward(prompts, completions, metadata, **options) -> scores`, one float per sample;
  `metadata[i]` is the prompt's record without its "prompt" field (or the task's answer).
- eval suite: `suite(model, **options) -> {metric: float}`; `model` is a
  `crucible.extensions.ModelHandle` with generate and logprob.
- teacher: `teacher(prompts, **options) -> completions`, one string per prompt.
- environment: `environment(**options)` (a function or a class) returns an object with
  `prompts(count, seed) -> records`, `count` mappings each with a "prompt" (a string) or
  "messages" (a chat: a list of {role, content}) and any metadata, the same for the same
  seed; and `score(prompts, completions, metadata) -> scores`, as a reward's. A rollout
  with an environment takes its prompts from it and scores with it, instead of a prompts
  dataset and a reward. The factory is called before the model loads.

What the code returns is checked (`checked_*`, `CheckedEnvironment`): a wrong count or type,
or a number that is not finite, is a RuntimeError naming the function (exit 1).
"""

import importlib
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crucible.config.parse import ConfigError
from crucible.rollouts.environments import Environment
from crucible.rollouts.prompts import record_problem


@dataclass(frozen=True)
class Kind:
    """One kind of user code: its name in messages, the arguments its contract passes before
    the options (for checking a signature), and the built-ins by name."""

    noun: str
    arguments: tuple[str, ...]
    builtins: Mapping[str, str]


REWARD = Kind(
    "reward",
    ("prompts", "completions", "metadata"),
    {"exact_match": "crucible.jobs.builtins:exact_match"},
)
EVAL_SUITE = Kind(
    "eval suite",
    ("model",),
    {
        "arithmetic": "crucible.jobs.builtins:arithmetic",
        "agent-environment": "crucible.agents.eval_suite:environment_reward",
    },
)
TEACHER = Kind(
    "teacher",
    ("prompts",),
    {
        "arithmetic-solver": "crucible.jobs.builtins:arithmetic_solver",
        "openai-endpoint": "crucible.jobs.endpoint_teacher:openai_endpoint",
    },
)
ENVIRONMENT = Kind(
    "environment", (), {"arithmetic": "crucible.jobs.builtins:arithmetic_environment"}
)


@dataclass(frozen=True)
class Plugin:
    """A resolved reference: call it with the contract's arguments; the options follow."""

    reference: str
    """As the spec gave it: a built-in's name or an import path."""

    target: str
    """The import path it resolved to."""

    function: Callable[..., Any]
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, *arguments: Any) -> Any:
        return self.function(*arguments, **self.options)


def resolve(
    kind: Kind,
    reference: str,
    options: Mapping[str, Any] | None = None,
    *,
    where: str,
    options_where: str,
) -> Plugin:
    """The callable `reference` names (`where`: the spec field that gave it), checked against
    its kind's contract with `options` (from the field `options_where`)."""
    options = dict(options or {})
    target = kind.builtins.get(reference, reference)
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigError(
            f"{where} {reference!r} is neither a built-in {kind.noun} "
            f"({', '.join(kind.builtins)}) nor an import path package.module:name"
        )
    function = _attribute(_module(module_name, where, reference), attribute, where, reference)
    if not callable(function):
        raise ConfigError(
            f"{where} {reference!r}: {target} is a {type(function).__name__}, "
            f"not a function ({kind.noun})"
        )
    _check_signature(kind, reference, function, options, options_where)
    return Plugin(reference=reference, target=target, function=function, options=options)


def _module(name: str, where: str, reference: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if name == missing or name.startswith(missing + "."):
            raise ConfigError(
                f"{where} {reference!r}: no module named {missing!r} in the workload's Python "
                "(the image's packages and the run's workingDir)"
            ) from None
        raise ConfigError(f"{where} {reference!r}: importing {name} failed: {exc}") from None
    except ImportError as exc:
        raise ConfigError(f"{where} {reference!r}: importing {name} failed: {exc}") from None


def _attribute(module: Any, attribute: str, where: str, reference: str) -> Any:
    value = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigError(
                f"{where} {reference!r}: module {module.__name__} has no attribute {attribute!r}"
            ) from None
    return value


def _check_signature(
    kind: Kind,
    reference: str,
    function: Callable[..., Any],
    options: Mapping[str, Any],
    options_where: str,
) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # no signature to read (a C function): the call itself will say
    parameters = list(signature.parameters.values())
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    # The options are what the signature has after the contract's own arguments.
    own = [
        p.name
        for p in parameters[len(kind.arguments) :]
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unknown = [name for name in options if name not in own]
    if unknown and not takes_any:
        raise ConfigError(
            f"{options_where}.{unknown[0]} is not an option of {kind.noun} {reference}; its "
            f"options: {', '.join(own) or 'none'}"
        )
    try:
        signature.bind(*kind.arguments, **options)
    except TypeError as exc:
        given = ", ".join(options) or "none"
        raise ConfigError(
            f"{options_where} (given: {given}) do not fit {kind.noun} {reference}{signature}: {exc}"
        ) from None


# -- what the callables return ----------------------------------------------------------------


def checked_scores(plugin: Plugin, values: Any, count: int) -> list[float]:
    """A reward's return value as `count` finite floats, or a RuntimeError naming it."""
    return _scores(f"reward {plugin.reference}", values, count)


def _scores(name: str, values: Any, count: int) -> list[float]:
    scores = _floats(name, values, "scores")
    if len(scores) != count:
        raise RuntimeError(f"{name} returned {len(scores)} scores for {count} samples")
    return scores


def checked_metrics(plugin: Plugin, values: Any) -> dict[str, float]:
    """An eval suite's return value as {name: finite float}, or a RuntimeError naming it."""
    if not isinstance(values, Mapping) or not values:
        raise RuntimeError(
            f"eval suite {plugin.reference} returned {type(values).__name__}, not a non-empty "
            "mapping of metric names to numbers"
        )
    metrics = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise RuntimeError(f"eval suite {plugin.reference} returned a metric named {name!r}")
        (metrics[name],) = _floats(f"eval suite {plugin.reference}", [value], f"metric {name!r}")
    return metrics


def checked_completions(plugin: Plugin, values: Any, count: int) -> list[str]:
    """A teacher's return value as `count` strings, or a RuntimeError naming it."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise RuntimeError(
            f"teacher {plugin.reference} returned {type(values).__name__}, not a list of strings"
        )
    if len(values) != count or not all(isinstance(v, str) for v in values):
        raise RuntimeError(
            f"teacher {plugin.reference} must return one string per prompt: {count} prompts, "
            f"{len(values)} values"
        )
    return list(values)


@dataclass(frozen=True)
class CheckedEnvironment:
    """An environment built by its factory, what its methods return checked."""

    plugin: Plugin
    instance: Environment

    @property
    def reference(self) -> str:
        return self.plugin.reference

    def prompts(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` prompt records, each with a well-formed "prompt" or "messages"."""
        name = f"environment {self.reference}"
        values = self.instance.prompts(count, seed)
        if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
            raise RuntimeError(
                f"{name} prompts() returned {type(values).__name__}, not a list of records"
            )
        if len(values) != count:
            raise RuntimeError(
                f"{name} prompts() returned {len(values)} records for count={count}; it must "
                "return count records (config.rollout.num_prompts sets count)"
            )
        for number, record in enumerate(values, start=1):
            problem = record_problem(record, f"{name} prompts() record {number}")
            if problem is not None:
                raise RuntimeError(problem)
        return [dict(record) for record in values]

    def score(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
    ) -> list[float]:
        """One finite float per sample."""
        values = self.instance.score(list(prompts), list(completions), list(metadata))
        return _scores(f"environment {self.reference} score()", values, len(prompts))


def build_environment(plugin: Plugin) -> CheckedEnvironment:
    """The object a resolved environment factory returns, with its options; a RuntimeError
    naming the factory when it has no prompts() or no score()."""
    instance = plugin()
    missing = [m for m in ("prompts", "score") if not callable(getattr(instance, m, None))]
    if missing:
        raise RuntimeError(
            f"environment {plugin.reference} returned a {type(instance).__name__}, which has "
            f"no {' and no '.join(m + '()' for m in missing)}; an environment's factory returns "
            "an object with prompts(count, seed) and score(prompts, completions, metadata)"
        )
    return CheckedEnvironment(plugin, instance)


def _floats(name: str, values: Any, what: str) -> list[float]:
    if hasattr(values, "tolist"):  # a NumPy array or a torch tensor
        values = values.tolist()
        values = values if isinstance(values, list) else [values]
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise RuntimeError(
            f"{name} returned {type(values).__name__} for its {what}, not a list of numbers"
        )
    floats = []
    for index, value in enumerate(values):
        if hasattr(value, "item"):  # a NumPy or torch scalar
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise RuntimeError(
                f"{name} returned {value!r} (at {index}) among its {what}; each must be a number"
            )
        if not math.isfinite(value):
            raise RuntimeError(f"{name} returned {value} (at {index}) among its {what}")
        floats.append(float(value))
    return floats
