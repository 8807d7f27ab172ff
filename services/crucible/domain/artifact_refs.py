"""`artifact:<name>` or `artifact:<id>` strings in a run's `config`: the artifacts the run
reads (a tokenizer, an exported model). The control plane waits for each to exist, pins it
(CRUCIBLE_INPUTS.artifacts) and records it in lineage; the job reads the pinned one."""

from collections.abc import Iterator, Mapping
from typing import Any

ARTIFACT_SCHEME = "artifact:"


def artifact_refs(config: Any) -> list[str]:
    """Every `artifact:` reference in `config` (nested objects and lists), without the
    scheme, first occurrence first."""
    seen: dict[str, None] = {}
    for value in _strings(config):
        if value.startswith(ARTIFACT_SCHEME) and len(value) > len(ARTIFACT_SCHEME):
            seen.setdefault(value.removeprefix(ARTIFACT_SCHEME), None)
    return list(seen)


def pin_artifact_refs(config: Any, pinned: Mapping[str, int]) -> Any:
    """`config` with each `artifact:<ref>` that `pinned` resolves rewritten as
    `artifact:<id>`: the same artifacts, whatever has taken their names since."""
    if isinstance(config, str) and config.startswith(ARTIFACT_SCHEME):
        ref = config.removeprefix(ARTIFACT_SCHEME)
        return f"{ARTIFACT_SCHEME}{pinned[ref]}" if ref in pinned else config
    if isinstance(config, dict):
        return {key: pin_artifact_refs(value, pinned) for key, value in config.items()}
    if isinstance(config, list):
        return [pin_artifact_refs(value, pinned) for value in config]
    return config


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
