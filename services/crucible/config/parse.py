"""CRUCIBLE_CONFIG, the spec's free-form `config`: JSON in, the library's config dataclasses
out, or a ConfigError whose sentence names the bad path and value.

Each section is checked by a pydantic model made from its dataclass in `config/workload.py`
(same fields, types and defaults, so the dataclass stays the one place the knobs are
documented), keeping JSON's types apart: `1` is not `true` and `"10"` is not a number.
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError
from pydantic import create_model as create_pydantic_model
from pydantic_core import ErrorDetails

from crucible.config.engine import EngineConfig
from crucible.config.model_source import HFModelSource, ModelSourceError, ModelSpec
from crucible.config.online_rl import EpisodeConfig, OnlineRLConfig
from crucible.config.workload import (
    DataConfig,
    DatagenConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    TaskConfig,
    TokenizerConfig,
    TrainConfig,
    model_preset,
)

DEFAULT_PRESET = "tiny"
"""The model preset when `config.model` names none."""


class ConfigError(Exception):
    """A bad CRUCIBLE_CONFIG, CRUCIBLE_SPEC or CRUCIBLE_INPUTS: the job exits 2 with this
    sentence, before any heavy work."""


# -- the sections ----------------------------------------------------------------------------


def _whole_number(value: Any) -> Any:
    # JSON has one number type: 10.0 is the integer 10 (10.5 and true are still refused).
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeNumber = Annotated[int, BeforeValidator(_whole_number)]
Count = Annotated[WholeNumber, Field(ge=1)]

_JSON_TYPES: dict[Any, Any] = {
    int: WholeNumber,
    int | None: WholeNumber | None,
    # JSON has lists, not tuples, and strict mode would take only a tuple.
    tuple[str, ...]: Annotated[tuple[str, ...], Strict(False)],
    tuple[int, ...]: Annotated[tuple[WholeNumber, ...], Strict(False)],
}

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


def section_model(cls: type[Any], **job_fields: tuple[Any, Any]) -> type[BaseModel]:
    """The keys a config section takes: `job_fields` (`name=(type, default)`: keys of the
    job's own, or tighter types for the dataclass's), then the fields of dataclass `cls`."""
    hints = get_type_hints(cls)
    fields: dict[str, Any] = dict(job_fields)
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        fields.setdefault(field.name, (_JSON_TYPES.get(annotation, annotation), field.default))
    model: type[BaseModel] = create_pydantic_model(
        f"{cls.__name__}Section", __config__=_STRICT, **fields
    )
    return model


class HFSection(BaseModel):
    """`config.model.hf`: a Hugging Face causal LM (`model_spec.HFModelSource`)."""

    model_config = _STRICT
    path: str | None = None
    architecture: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class OptionsSection(BaseModel):
    """`config.suite`: the eval suite's keyword arguments, free-form (the suite's signature
    checks them, `plugins.resolve`)."""

    model_config = ConfigDict(extra="allow", frozen=True)


@dataclass(frozen=True)
class EpisodesJob:
    """`config.episodes`: a RolloutJob whose policy plays an agent environment
    (`jobs/episodes.py`), to make demonstrations."""

    environment: str
    """The environment: a reference environment's name or `module:attribute`."""

    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments for the environment."""

    count: int = 256
    """Episodes played, one per task."""

    seed: int = 0
    """Seeds the tasks and a checkpoint policy's sampling."""

    min_reward: float | None = None
    """Publish only the episodes whose reward is at least this (None: every episode)."""

    max_failed_fraction: float = 0.5
    """More than this share of the episodes failed (the environment raised or broke its
    contract, a tool failed, a reward was not a number) fails the job, naming the reasons,
    and publishes nothing; below it they are counted (`episodes/failed/<reason>`) and left
    out."""

    episode: EpisodeConfig = dataclasses.field(default_factory=EpisodeConfig)
    """How episodes are played: turns, tokens per turn, sampling (a checkpoint's)."""

    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    """The engine a checkpoint policy plays through."""

    def __post_init__(self) -> None:
        if self.min_reward is not None and not math.isfinite(self.min_reward):
            raise ValueError(f"min_reward must be a finite number, got {self.min_reward!r}")
        if not 0 <= self.max_failed_fraction <= 1:
            raise ValueError(
                f"max_failed_fraction must be from 0 to 1, got {self.max_failed_fraction!r}"
            )


_EpisodeSection = section_model(EpisodeConfig)
_EngineSection = section_model(EngineConfig)


SECTIONS: dict[str, type[BaseModel]] = {
    "model": section_model(
        ModelConfig,
        preset=(str, DEFAULT_PRESET),
        hf=(HFSection | None, None),
        tokenizer=(str | None, None),
    ),
    "task": section_model(TaskConfig),
    "train": section_model(TrainConfig),
    "data": section_model(
        DataConfig, seq_len=(Count | None, None), shuffle_block=(Count, DataConfig.shuffle_block)
    ),
    "rollout": section_model(RolloutConfig, num_prompts=(Count | None, None)),
    "eval": section_model(EvalConfig),
    "datagen": section_model(DatagenConfig, num_prompts=(Count, DatagenConfig.num_prompts)),
    "tokenizer": section_model(
        TokenizerConfig,
        vocab_size=(Count, TokenizerConfig.vocab_size),
        min_frequency=(Count, TokenizerConfig.min_frequency),
    ),
    "suite": OptionsSection,
    "episodes": section_model(
        EpisodesJob,
        environment=(str, ...),
        options=(dict[str, Any], Field(default_factory=dict)),
        count=(Count, EpisodesJob.count),
        episode=(_EpisodeSection, Field(default_factory=_EpisodeSection)),
        engine=(_EngineSection, Field(default_factory=_EngineSection)),
    ),
    "online": section_model(
        OnlineRLConfig,
        environment=(str, ...),
        options=(dict[str, Any], Field(default_factory=dict)),
        rounds=(Count, 10),
        output=(str | None, None),
        episode=(_EpisodeSection, Field(default_factory=_EpisodeSection)),
        engine=(_EngineSection, Field(default_factory=_EngineSection)),
    ),
}
"""`config` section -> the model of the keys it takes."""

_REQUIRED_FIELDS = {"online", "episodes"}
"""Sections with a field of their own that must be given: absent, the section is None."""

_OPTIONAL_SECTIONS: dict[str, Any] = {
    name: (model | None, None)
    if name in _REQUIRED_FIELDS
    else (model, Field(default_factory=model))
    for name, model in SECTIONS.items()
}
ConfigSections: type[BaseModel] = create_pydantic_model(
    "ConfigSections", __config__=_STRICT, **_OPTIONAL_SECTIONS
)
"""CRUCIBLE_CONFIG as given: every section optional."""


def validated(
    model: type[BaseModel],
    where: str,
    value: Any,
    *,
    names: Mapping[str, str] | None = None,
) -> BaseModel:
    """`value` checked by `model`, or a ConfigError naming every bad key under `where`
    (`names`: a top-level key -> the path to show for it instead)."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        errors = (_sentence(model, where, error, names or {}) for error in exc.errors())
        raise ConfigError("; ".join(errors)) from None


_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "float_type": "a number",
    "string_type": "a string",
    "tuple_type": "a list",
    "model_type": "an object",
}
"""Pydantic's error type -> what the value must be, in the words of JSON."""


def _sentence(
    model: type[BaseModel], where: str, error: ErrorDetails, names: Mapping[str, str]
) -> str:
    loc = error["loc"]
    if loc and loc[0] in names:
        path, rest = names[str(loc[0])], loc[1:]
    else:
        path, rest = where, loc
    path += "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest)
    kind = error["type"]
    if kind == "missing":
        return f"{path} is required"
    if kind == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        what = "section" if owner is ConfigSections else "field"
        return f"{path} is not a {what}; valid: {', '.join(owner.model_fields)}"
    if kind == "literal_error":
        choices = get_args(_model_at(model, loc[:-1]).model_fields[str(loc[-1])].annotation)
        expected = "one of " + ", ".join(json.dumps(choice) for choice in choices)
    elif kind == "greater_than_equal":
        expected = f"at least {error.get('ctx', {}).get('ge')}"
    elif kind in _EXPECTED:
        expected = _EXPECTED[kind]
    else:
        return f"{path}: {error['msg']}"
    return f"{path} must be {expected}, not {json.dumps(error['input'], default=repr)}"


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The model of the object at `loc` inside `model` (sections are nested models)."""
    for part in loc:
        annotation = model.model_fields[str(part)].annotation
        if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        assert isinstance(annotation, type)
        assert issubclass(annotation, BaseModel)
        model = annotation
    return model


# -- the config ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineJob:
    """`config.online`: a TrainingRun that runs online RL (`jobs/online_rl.py`)."""

    environment: str
    """The environment: a reference environment's name or `module:attribute`
    (`agents.loading.load_environment`)."""

    options: Mapping[str, Any]
    """Keyword arguments for the environment."""

    rounds: int
    """Rounds of generate -> train -> update in the whole run."""

    output: str | None
    """The dataset the trajectories are published as; default `<run name>-trajectories`."""

    rl: OnlineRLConfig


@dataclass(frozen=True)
class JobConfig:
    """CRUCIBLE_CONFIG parsed: every section built (defaults where absent) and validated."""

    model: ModelSpec
    task: TaskConfig
    train: TrainConfig
    data: DataConfig
    rollout: RolloutConfig
    eval: EvalConfig
    datagen: DatagenConfig
    tokenizer: TokenizerConfig
    rollout_num_prompts: int | None
    """`config.rollout.num_prompts`: the most prompts a rollout samples (None: all)."""

    suite_options: Mapping[str, Any]
    """`config.suite`: keyword arguments for the eval suite."""

    online: OnlineJob | None
    """`config.online`, when the run is online RL."""

    episodes: EpisodesJob | None
    """`config.episodes`, when a rollout plays an agent environment."""

    given: Mapping[str, Mapping[str, Any]]
    """The sections and fields as given (converted), to lay over a checkpoint's meta."""

    def task_over(self, base: Mapping[str, Any] | None, where: str) -> TaskConfig:
        """`base` (e.g. a checkpoint's `meta.task`, described by `where`) with the fields of
        `config.task` on top."""
        fields = given_fields(validated(SECTIONS["task"], where, base)) if base else {}
        fields.update(self.given.get("task", {}))
        return build_task(fields, "config.task")


def parse_config(text: str | None) -> JobConfig:
    """CRUCIBLE_CONFIG's text parsed."""
    return parse_config_object(json_object("CRUCIBLE_CONFIG", text))


def parse_config_object(value: Mapping[str, Any]) -> JobConfig:
    """A job's `config` object parsed."""
    parsed = validated(ConfigSections, "config", value)
    sections: dict[str, BaseModel] = dict(parsed)
    rollout = sections["rollout"].model_dump()
    return JobConfig(
        model=build_model_spec(sections["model"], "config.model"),
        task=build_task(sections["task"].model_dump(), "config.task"),
        train=_build(TrainConfig, "config.train", sections["train"].model_dump()),
        data=_build(DataConfig, "config.data", sections["data"].model_dump()),
        rollout=_build(RolloutConfig, "config.rollout", rollout, exclude=("num_prompts",)),
        eval=_build(EvalConfig, "config.eval", sections["eval"].model_dump()),
        datagen=_build(DatagenConfig, "config.datagen", sections["datagen"].model_dump()),
        tokenizer=_build(TokenizerConfig, "config.tokenizer", sections["tokenizer"].model_dump()),
        rollout_num_prompts=rollout["num_prompts"],
        suite_options=sections["suite"].model_dump(),
        online=_build_online(sections["online"]),
        episodes=_build_episodes(sections["episodes"]),
        given={name: given_fields(sections[name]) for name in parsed.model_fields_set},
    )


def _build_online(section: BaseModel | None) -> OnlineJob | None:
    if section is None:
        return None
    fields = section.model_dump()
    own = {name: fields.pop(name) for name in ("environment", "options", "rounds", "output")}
    rl = _build(OnlineRLConfig, "config.online", _with_play_settings(fields, "config.online"))
    return OnlineJob(rl=rl, **own)


def _build_episodes(section: BaseModel | None) -> EpisodesJob | None:
    if section is None:
        return None
    fields = _with_play_settings(section.model_dump(), "config.episodes")
    job: EpisodesJob = _build(EpisodesJob, "config.episodes", fields)
    return job


def _with_play_settings(fields: dict[str, Any], where: str) -> dict[str, Any]:
    """`fields` of a section that plays episodes, its `episode` and `engine` objects built
    (a refusal names `where`.episode or `where`.engine)."""
    return {
        **fields,
        "episode": _build(EpisodeConfig, f"{where}.episode", fields["episode"]),
        "engine": _build(EngineConfig, f"{where}.engine", fields["engine"]),
    }


def given_fields(section: BaseModel) -> dict[str, Any]:
    """The fields of a validated section that its JSON gave."""
    return section.model_dump(exclude_unset=True)


def build_model_spec(section: BaseModel, where: str) -> ModelSpec:
    """The model of a validated model section: a Hugging Face model when it gives `hf`,
    else the built-in GPT of its preset with the fields it gives on top."""
    fields = given_fields(section)
    hf = fields.pop("hf", None)
    tokenizer = fields.pop("tokenizer", None)
    if hf is not None:
        if fields:
            raise ConfigError(
                f"{where}.hf names a Hugging Face model; the built-in GPT's "
                f"{', '.join(sorted(fields))} do not apply to it"
            )
        try:
            return ModelSpec(hf=HFModelSource(**hf), tokenizer=tokenizer)
        except ModelSourceError as exc:
            raise ConfigError(f"{where}.hf: {exc}") from None
    preset = fields.pop("preset", DEFAULT_PRESET)
    try:
        return ModelSpec(gpt=model_preset(preset, **fields), tokenizer=tokenizer)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def build_task(fields: Mapping[str, Any], where: str) -> TaskConfig:
    """The task of `fields`, refused (naming `where`) unless the task can draw from it."""
    task: TaskConfig = _build(TaskConfig, where, fields)
    return task


def _build(
    cls: type[Any], where: str, fields: Mapping[str, Any], *, exclude: tuple[str, ...] = ()
) -> Any:
    """Dataclass `cls` of checked `fields` (but those in `exclude`, the job's own); what its
    `__post_init__` refuses names `where`."""
    try:
        return cls(**{name: value for name, value in fields.items() if name not in exclude})
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def json_object(variable: str, text: str | None) -> dict[str, Any]:
    """The JSON object in environment variable `variable` ({} when unset or blank)."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{variable} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{variable} must be a JSON object, not {json.dumps(value)}")
    return value
