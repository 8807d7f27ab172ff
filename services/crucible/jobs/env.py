"""The environment a job is started with (set by the local executor or the operator, see
docs/workloads.md): CRUCIBLE_CONFIG (the spec's free-form `config`), CRUCIBLE_SPEC (the whole
spec, camelCase) and CRUCIBLE_INPUTS (`{"datasets": ["name@3", ...], "checkpoint": 12,
"artifacts": {"chat-bpe": 4}}`, resolved by the control plane). What `crucible.init()`
reads (run id, attempt, API, token, checkpoint URI, resume point) is the SDK's.
"""

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crucible.config.parse import (
    ConfigError,
    JobConfig,
    json_object,
    parse_config_object,
)


@dataclass(frozen=True)
class Inputs:
    """CRUCIBLE_INPUTS: references the control plane resolved to concrete versions and ids."""

    datasets: tuple[str, ...] = ()
    """`name@version` of the run's input datasets, in spec order."""

    checkpoint: int | None = None
    """train: the initFrom weights; rollout/datagen: the policy; eval: the model to score."""

    artifacts: Mapping[str, int] = field(default_factory=dict)
    """Each `artifact:<ref>` of the config -> the id of the artifact pinned for it."""


@dataclass(frozen=True)
class JobEnv:
    config: JobConfig
    config_given: dict[str, Any]
    """CRUCIBLE_CONFIG as given, before parsing ({} when unset)."""

    spec: dict[str, Any]
    """CRUCIBLE_SPEC: the run's spec as submitted, camelCase keys ({} when unset)."""

    inputs: Inputs

    def spec_object(self, key: str) -> dict[str, Any]:
        """`spec.<key>` as an object ({} when absent or null)."""
        value = self.spec.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"spec.{key} must be an object, not {json.dumps(value)}")
        return value


def read_env(environ: Mapping[str, str] | None = None) -> JobEnv:
    """Parse CRUCIBLE_CONFIG, CRUCIBLE_SPEC and CRUCIBLE_INPUTS; raises ConfigError."""
    environ = os.environ if environ is None else environ
    given = json_object("CRUCIBLE_CONFIG", environ.get("CRUCIBLE_CONFIG"))
    config = parse_config_object(given)
    spec = json_object("CRUCIBLE_SPEC", environ.get("CRUCIBLE_SPEC"))
    if isinstance(spec.get("spec"), dict) and "kind" in spec:
        spec = spec["spec"]  # a whole manifest: its spec
    return JobEnv(
        config=config,
        config_given=given,
        spec=spec,
        inputs=parse_inputs(environ.get("CRUCIBLE_INPUTS")),
    )


def parse_inputs(text: str | None) -> Inputs:
    raw = json_object("CRUCIBLE_INPUTS", text)
    unknown = set(raw) - {"datasets", "checkpoint", "artifacts"}
    if unknown:
        raise ConfigError(
            f"CRUCIBLE_INPUTS.{sorted(unknown)[0]} is not a field; valid: datasets, checkpoint, "
            "artifacts"
        )
    datasets = raw.get("datasets") or []
    if not isinstance(datasets, list) or not all(isinstance(d, str) and "@" in d for d in datasets):
        raise ConfigError(
            f"CRUCIBLE_INPUTS.datasets must be a list of 'name@version', not {json.dumps(datasets)}"
        )
    checkpoint = raw.get("checkpoint")
    if checkpoint is not None and (
        not isinstance(checkpoint, int) or isinstance(checkpoint, bool) or checkpoint < 1
    ):
        raise ConfigError(
            "CRUCIBLE_INPUTS.checkpoint must be a checkpoint id or null, not "
            f"{json.dumps(checkpoint)}"
        )
    artifacts = raw.get("artifacts") or {}
    if not isinstance(artifacts, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in artifacts.values()
    ):
        raise ConfigError(
            "CRUCIBLE_INPUTS.artifacts must map references to artifact ids, not "
            f"{json.dumps(artifacts)}"
        )
    return Inputs(datasets=tuple(datasets), checkpoint=checkpoint, artifacts=artifacts)
