"""What every job shares: the environment contract, config parsing with one-sentence errors,
torch setup, models from registered checkpoints, the SDK-backed checkpointer, JSONL datasets.

The environment (set by the local executor or the operator, see docs/workloads.md):
CRUCIBLE_CONFIG (the spec's free-form `config`), CRUCIBLE_SPEC (the whole spec, camelCase),
CRUCIBLE_INPUTS (`{"datasets": ["name@3", ...], "checkpoint": 12}`, resolved by the control
plane), plus what `crucible.init()` reads (run id, attempt, API, token, checkpoint URI,
resume point).

torch and the SDK are imported inside the functions that need them, so that a bad config
fails in well under a second where the entry point itself does not import torch.
"""

import dataclasses
import json
import logging
import os
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin, get_type_hints

from crucible.domain import contract
from crucible.workloads.config import (
    DatagenConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    TaskConfig,
    TrainConfig,
    model_preset,
)
from crucible.workloads.tasks.arithmetic import ArithmeticTask

if TYPE_CHECKING:
    import torch

    from crucible.schemas.lineage import CheckpointPublic
    from crucible.sdk import Run
    from crucible.workloads.checkpoint import Stateful
    from crucible.workloads.model import GPT

log = logging.getLogger("crucible.workloads")

BAD_CONFIG_EXIT_CODE = 2
INPUT_ERROR_EXIT_CODE = 1

DEFAULT_PRESET = "tiny"
"""The model preset when `config.model` names none."""


class ConfigError(Exception):
    """A bad CRUCIBLE_CONFIG, CRUCIBLE_SPEC or CRUCIBLE_INPUTS: the job exits 2 with this
    sentence, before any heavy work."""


# -- the config ------------------------------------------------------------------------------

SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "task": TaskConfig,
    "train": TrainConfig,
    "rollout": RolloutConfig,
    "eval": EvalConfig,
    "datagen": DatagenConfig,
}
"""`config` section -> the dataclass whose fields it sets."""

_EXTRA_FIELDS: dict[str, dict[str, Any]] = {
    "model": {"preset": str},
    "rollout": {"num_prompts": int | None},
}
"""Keys a section takes besides its dataclass's fields."""


def section_fields(section: str) -> dict[str, Any]:
    """The keys `config.<section>` takes, with their types, in declaration order."""
    cls = SECTIONS[section]
    hints = get_type_hints(cls)
    declared = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return {**_EXTRA_FIELDS.get(section, {}), **declared}


@dataclass(frozen=True)
class JobConfig:
    """CRUCIBLE_CONFIG parsed: every section built (defaults where absent) and validated."""

    model: ModelConfig
    task: TaskConfig
    train: TrainConfig
    rollout: RolloutConfig
    eval: EvalConfig
    datagen: DatagenConfig
    rollout_num_prompts: int | None
    """`config.rollout.num_prompts`: the most prompts a rollout samples (None: all)."""

    given: Mapping[str, Mapping[str, Any]]
    """The sections and fields as given (converted), to lay over a checkpoint's meta."""

    def task_over(self, base: Mapping[str, Any] | None, where: str) -> TaskConfig:
        """`base` (e.g. a checkpoint's `meta.task`, described by `where`) with the fields of
        `config.task` on top."""
        fields = dict(parse_fields(where, "task", base)) if base else {}
        fields.update(self.given.get("task", {}))
        task: TaskConfig = build_section(TaskConfig, "config.task", fields)
        validate_task(task, "config.task")
        return task


def parse_config(text: str | None) -> JobConfig:
    raw = _json_object("CRUCIBLE_CONFIG", text)
    unknown = [name for name in raw if name not in SECTIONS]
    if unknown:
        raise ConfigError(f"config.{unknown[0]} is not a section; valid: {', '.join(SECTIONS)}")
    given = {name: parse_fields(f"config.{name}", name, raw[name]) for name in raw}

    model_fields = dict(given.get("model", {}))
    preset = model_fields.pop("preset", DEFAULT_PRESET)
    try:
        model = model_preset(preset, **model_fields)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"config.model: {exc}") from None
    task = build_section(TaskConfig, "config.task", given.get("task", {}))
    validate_task(task, "config.task")
    rollout_fields = dict(given.get("rollout", {}))
    num_prompts = rollout_fields.pop("num_prompts", None)
    if num_prompts is not None and num_prompts < 1:
        raise ConfigError(f"config.rollout.num_prompts must be at least 1, not {num_prompts}")
    config = JobConfig(
        model=model,
        task=task,
        train=build_section(TrainConfig, "config.train", given.get("train", {})),
        rollout=build_section(RolloutConfig, "config.rollout", rollout_fields),
        eval=build_section(EvalConfig, "config.eval", given.get("eval", {})),
        datagen=build_section(DatagenConfig, "config.datagen", given.get("datagen", {})),
        rollout_num_prompts=num_prompts,
        given=given,
    )
    if config.datagen.num_prompts < 1:
        raise ConfigError(
            f"config.datagen.num_prompts must be at least 1, not {config.datagen.num_prompts}"
        )
    return config


def parse_fields(path: str, section: str, value: Any) -> dict[str, Any]:
    """The fields of one section, checked against the dataclass: names and types."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must be an object, not {_show(value)}")
    fields = section_fields(section)
    out: dict[str, Any] = {}
    for name, item in value.items():
        if name not in fields:
            raise ConfigError(f"{path}.{name} is not a field; valid: {', '.join(fields)}")
        out[name] = convert(f"{path}.{name}", fields[name], item)
    return out


def build_section(cls: type[Any], path: str, fields: Mapping[str, Any]) -> Any:
    try:
        return cls(**fields)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def validate_task(task: TaskConfig, path: str) -> None:
    try:
        ArithmeticTask(task)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def convert(path: str, annotation: Any, value: Any) -> Any:
    """`value` (parsed JSON) as the field type `annotation`; JSON lists become tuples."""
    origin = get_origin(annotation)
    if origin is Literal:
        choices = get_args(annotation)
        if value in choices:
            return value
        raise ConfigError(
            f"{path} must be one of {', '.join(_show(c) for c in choices)}, not {_show(value)}"
        )
    if origin in (types.UnionType, typing.Union):
        options = [a for a in get_args(annotation) if a is not type(None)]
        if value is None and len(options) < len(get_args(annotation)):
            return None
        return convert(path, options[0], value)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path} must be a list, not {_show(value)}")
        item = get_args(annotation)[0]
        return tuple(convert(f"{path}[{i}]", item, v) for i, v in enumerate(value))
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false, not {_show(value)}")
    if annotation is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be an integer, not {_show(value)}")
    if annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path} must be a number, not {_show(value)}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path} must be a string, not {_show(value)}")
    raise TypeError(f"{path}: fields of type {annotation!r} are not supported")


def _show(value: Any) -> str:
    return json.dumps(value) if _is_json(value) else repr(value)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _json_object(variable: str, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{variable} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{variable} must be a JSON object, not {_show(value)}")
    return value


# -- the environment -------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """CRUCIBLE_INPUTS: references the control plane resolved to concrete versions and ids."""

    datasets: tuple[str, ...] = ()
    """`name@version` of the run's input datasets, in spec order."""

    checkpoint: int | None = None
    """train: the initFrom weights; rollout/datagen: the policy; eval: the model to score."""


@dataclass(frozen=True)
class JobEnv:
    config: JobConfig
    spec: dict[str, Any]
    """CRUCIBLE_SPEC: the run's spec as submitted, camelCase keys ({} when unset)."""

    inputs: Inputs

    def spec_object(self, key: str) -> dict[str, Any]:
        """`spec.<key>` as an object ({} when absent or null)."""
        value = self.spec.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"spec.{key} must be an object, not {_show(value)}")
        return value


def read_env(environ: Mapping[str, str] | None = None) -> JobEnv:
    """Parse CRUCIBLE_CONFIG, CRUCIBLE_SPEC and CRUCIBLE_INPUTS; raises ConfigError."""
    environ = os.environ if environ is None else environ
    config = parse_config(environ.get("CRUCIBLE_CONFIG"))
    spec = _json_object("CRUCIBLE_SPEC", environ.get("CRUCIBLE_SPEC"))
    if isinstance(spec.get("spec"), dict) and "kind" in spec:
        spec = spec["spec"]  # a whole manifest: its spec
    return JobEnv(config=config, spec=spec, inputs=parse_inputs(environ.get("CRUCIBLE_INPUTS")))


def parse_inputs(text: str | None) -> Inputs:
    raw = _json_object("CRUCIBLE_INPUTS", text)
    unknown = set(raw) - {"datasets", "checkpoint"}
    if unknown:
        raise ConfigError(
            f"CRUCIBLE_INPUTS.{sorted(unknown)[0]} is not a field; valid: datasets, checkpoint"
        )
    datasets = raw.get("datasets") or []
    if not isinstance(datasets, list) or not all(isinstance(d, str) and "@" in d for d in datasets):
        raise ConfigError(
            f"CRUCIBLE_INPUTS.datasets must be a list of 'name@version', not {_show(datasets)}"
        )
    checkpoint = raw.get("checkpoint")
    if checkpoint is not None and (
        not isinstance(checkpoint, int) or isinstance(checkpoint, bool) or checkpoint < 1
    ):
        raise ConfigError(
            f"CRUCIBLE_INPUTS.checkpoint must be a checkpoint id or null, not {_show(checkpoint)}"
        )
    return Inputs(datasets=tuple(datasets), checkpoint=checkpoint)


# -- the process -----------------------------------------------------------------------------


def run_job(name: str, body: Callable[[], None]) -> None:
    """Run a job's body as the process's main.

    Logs go to stderr. A ConfigError exits 2 with its sentence; a corrupt or missing input
    (dataset or checkpoint digest mismatch) exits 1 with its message; anything else raises
    (exit 1 with a traceback). `run.finish(preempted=True)` in the body exits 143.
    """
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    # DCP warns on every save and load of a single process that it is a single process.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")
    try:
        body()
    except ConfigError as exc:
        print(f"crucible.workloads.{name}: {exc}", file=sys.stderr, flush=True)
        leave_termination_message(str(exc))
        raise SystemExit(BAD_CONFIG_EXIT_CODE) from None
    except Exception as exc:
        from crucible.sdk import CheckpointError, DatasetCorrupt

        if isinstance(exc, DatasetCorrupt | CheckpointError):
            print(f"crucible.workloads.{name}: {exc}", file=sys.stderr, flush=True)
            leave_termination_message(str(exc))
            raise SystemExit(INPUT_ERROR_EXIT_CODE) from None
        leave_termination_message(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        teardown_torch()


def leave_termination_message(text: str) -> None:
    """Write why the job stops where the backend reads it into the attempt's end
    (contract.TERMINATION_LOG_ENV); nothing when run by hand, without that variable."""
    path = os.environ.get(contract.TERMINATION_LOG_ENV)
    if not path:
        return
    try:
        with open(path, "w") as out:
            out.write(contract.termination_message(text))
    except OSError as exc:  # a read-only or missing place must not hide the real error
        print(f"crucible: cannot write the termination message to {path}: {exc}", file=sys.stderr)


@dataclass(frozen=True)
class TorchSetup:
    device: "torch.device"
    rank: int
    world_size: int


def setup_torch(*, distributed: bool = True) -> TorchSetup:
    """Pick the device, size the CPU thread pool and, under torchrun (WORLD_SIZE > 1) with
    `distributed`, join the process group: NCCL on CUDA, gloo on CPU.

    Without OMP_NUM_THREADS, each process gets the CPUs it may run on divided by the
    processes on the node, instead of torch's default of every core of the machine.
    """
    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    if "OMP_NUM_THREADS" not in os.environ:
        affinity = getattr(os, "sched_getaffinity", None)
        cpus = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
        torch.set_num_threads(max(1, cpus // max(local_world, 1)))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if distributed and world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    return TorchSetup(device=device, rank=rank, world_size=world_size)


def teardown_torch() -> None:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# -- checkpoints -----------------------------------------------------------------------------


class RunCheckpointer:
    """The trainer's `Checkpointer` on the run SDK: DCP files, digest-checked on load,
    registered with `meta` once complete, resumed from CRUCIBLE_RESUME_FROM or the run's
    latest checkpoint.

    With `async_save` (`config.train.checkpoint_async`) `save` returns once the state is
    copied to host memory; the SDK writes and registers the checkpoint in the background
    and `wait()` (or the next save, or `run.finish()`) blocks until it is registered.
    """

    def __init__(self, run: "Run", meta: dict[str, Any], *, async_save: bool = False) -> None:
        self.run = run
        self.meta = meta
        self.async_save = async_save

    def save(self, step: int, state: Mapping[str, "Stateful"]) -> None:
        self.run.save_checkpoint(step, state, meta=self.meta, async_save=self.async_save)

    def wait(self) -> None:
        self.run.wait_for_checkpoint()

    def load(self, state: Mapping[str, "Stateful"]) -> int | None:
        return self.run.load_checkpoint(state)


def checkpoint_meta(model: ModelConfig, task: TaskConfig, mode: str) -> dict[str, Any]:
    """What a trainer checkpoint carries so that evals and rollouts can rebuild its model."""
    return {"model": dataclasses.asdict(model), "task": dataclasses.asdict(task), "mode": mode}


def model_config_from_meta(checkpoint_id: int, meta: Mapping[str, Any]) -> ModelConfig | None:
    """The model shape a trainer checkpoint was written with (its `meta.model`), if any."""
    meta_model = meta.get("model")
    if meta_model is None:
        return None
    where = f"checkpoint {checkpoint_id} meta.model"
    config: ModelConfig = build_section(
        ModelConfig, where, parse_fields(where, "model", meta_model)
    )
    return config


def model_config_of(record: "CheckpointPublic", fallback: ModelConfig | None) -> ModelConfig:
    """The model shape of a checkpoint: its `meta.model`, else `fallback`."""
    config = model_config_from_meta(record.id, record.meta) or fallback
    if config is None:
        raise ConfigError(
            f"checkpoint {record.id} has no model shape in its meta (it was not written by "
            "crucible.workloads.train); give it as config.model"
        )
    return config


def model_template(config: ModelConfig) -> dict[str, "torch.Tensor"]:
    """Empty CPU tensors shaped like the model's state dict, for DCP to load into, without
    initialising a model."""
    import torch

    from crucible.workloads.model import GPT

    with torch.device("meta"):
        shapes = GPT(config).state_dict()
    return {k: torch.empty(v.shape, dtype=v.dtype) for k, v in shapes.items()}


def load_weights(run: "Run", record: "CheckpointPublic", state: dict[str, "torch.Tensor"]) -> None:
    """Fill `state` (a model state dict) with the weights of trainer checkpoint `record`,
    digest-checked, without its optimizer state."""
    from crucible.workloads.train import model_only

    run.load_checkpoint(model_only(state), checkpoint_id=record.id)


def load_model(
    run: "Run",
    checkpoint_id: int,
    *,
    device: "torch.device",
    fallback: ModelConfig | None = None,
) -> tuple["GPT", "CheckpointPublic"]:
    """The model of a registered trainer checkpoint (shape from its meta), in eval mode."""
    from crucible.workloads.model import build_model

    record = run.get_checkpoint(checkpoint_id)
    model = build_model(model_config_of(record, fallback), device=device)
    state = model.state_dict()
    load_weights(run, record, state)
    model.load_state_dict(state)
    log.info("model of checkpoint %d (run %d, step %d)", record.id, record.run_id, record.step)
    return model.eval(), record


# -- datasets --------------------------------------------------------------------------------


def read_records(run: "Run", refs: Sequence[str]) -> list[dict[str, Any]]:
    """Every record of the input datasets (JSONL files, or directories of them), in order;
    each dataset is resolved and digest-checked by the SDK and recorded as an input."""
    from crucible.workloads.data import read_jsonl

    records: list[dict[str, Any]] = []
    for ref in refs:
        dataset = run.input_dataset(ref)
        path = dataset.path
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*.jsonl"))
        if not files:
            raise ConfigError(f"dataset {dataset.version.ref} has no .jsonl files under {path}")
        before = len(records)
        for file in files:
            records.extend(read_jsonl(file))
        log.info("dataset %s: %d records from %s", dataset.version.ref, len(records) - before, path)
    return records


def require_fields(records: Sequence[dict[str, Any]], fields: Iterable[str], what: str) -> None:
    for number, record in enumerate(records, start=1):
        missing = [f for f in fields if f not in record]
        if missing:
            raise ConfigError(
                f"record {number} of the input datasets has no {', '.join(missing)} field; {what}"
            )


def output_path(run: "Run", name: str) -> Path:
    """Where a job writes the dataset `name` it publishes: a file of its own per attempt
    under $CRUCIBLE_HOME/runs/<run>/outputs/, so that a retry never rewrites the files of a
    version an earlier attempt published."""
    suffix = f".attempt-{run.attempt}" if run.attempt is not None else ""
    return run.outputs_dir / f"{name}{suffix}.jsonl"


def write_atomically(path: Path, write: Callable[[Path], int]) -> int:
    """Run `write` (which writes a file and returns its record count) on a temporary name
    and move the file into place: a crash leaves no half file under the final name."""
    partial = path.with_name(path.name + ".partial")
    count = write(partial)
    os.replace(partial, path)
    return count


# -- sampling --------------------------------------------------------------------------------

_SAMPLING_FIELDS = {"temperature": "temperature", "topP": "top_p", "maxNewTokens": "max_new_tokens"}


def rollout_config(env: JobEnv) -> RolloutConfig:
    """config.rollout with the spec's `samplesPerPrompt` and `sampling` winning."""
    overrides: dict[str, Any] = {}
    if "samplesPerPrompt" in env.spec:
        overrides["samples_per_prompt"] = env.spec["samplesPerPrompt"]
    for key, value in env.spec_object("sampling").items():
        if key in _SAMPLING_FIELDS:
            overrides[_SAMPLING_FIELDS[key]] = value
    fields = section_fields("rollout")
    for name, value in overrides.items():
        overrides[name] = convert(f"spec ({name})", fields[name], value)
    return dataclasses.replace(env.config.rollout, **overrides)


def fit_new_tokens(
    max_new_tokens: int, model: ModelConfig, prompts: Sequence[str], *, bos: int = 1
) -> int:
    """`max_new_tokens`, cut so that the longest prompt plus its completion fits the model's
    context (the spec's default of 64 new tokens does not fit a 64-position model)."""
    longest = max((len(p.encode("utf-8")) + bos for p in prompts), default=0)
    room = model.max_seq_len - longest
    if room < 1:
        raise ConfigError(
            f"a prompt of {longest} tokens leaves no room in the model's context of "
            f"{model.max_seq_len} positions"
        )
    if max_new_tokens > room:
        log.info(
            "max_new_tokens %d cut to %d: the model's context is %d positions",
            max_new_tokens,
            room,
            model.max_seq_len,
        )
    return min(max_new_tokens, room)
