"""The records a job reads from its input datasets and the files it writes to publish one."""

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crucible.config.parse import ConfigError

if TYPE_CHECKING:
    from crucible.schemas.lineage import DatasetVersionPublic
    from crucible.sdk import Run

log = logging.getLogger("crucible.jobs")

READ_BLOCK = 1024
"""Records `read_records` reads at a time (for Parquet, the row groups that hold them)."""


@dataclass(frozen=True)
class InputFiles:
    files: list[Path]
    """The data files (.jsonl, .parquet) of every input dataset, in order."""

    versions: list["DatasetVersionPublic"]
    """The dataset versions they belong to."""


def input_files(run: "Run", refs: Sequence[str]) -> InputFiles:
    """The data files of the input datasets; each dataset is resolved and digest-checked by
    the SDK and recorded as an input."""
    from crucible.training.records import DataError, data_files

    files: list[Path] = []
    versions: list[DatasetVersionPublic] = []
    for ref in refs:
        dataset = run.input_dataset(ref)
        try:
            found = data_files(dataset.path)
        except DataError as exc:
            raise ConfigError(f"dataset {dataset.version.ref}: {exc}") from None
        log.info("dataset %s: %d files at %s", dataset.version.ref, len(found), dataset.path)
        files.extend(found)
        versions.append(dataset.version)
    return InputFiles(files, versions)


def read_records(run: "Run", refs: Sequence[str]) -> list[dict[str, Any]]:
    """Every record of the input datasets (JSONL and Parquet files, or directories of them),
    in order; each dataset is resolved and digest-checked by the SDK and recorded as an
    input."""
    from crucible.training.records import DataError, FileRecords, data_files, in_file_order

    records: list[dict[str, Any]] = []
    for ref in refs:
        dataset = run.input_dataset(ref)
        path = dataset.path
        try:
            found = list(in_file_order(FileRecords(data_files(path), block_size=READ_BLOCK)))
        except DataError as exc:
            raise ConfigError(f"dataset {dataset.version.ref}: {exc}") from None
        records.extend(found)
        log.info("dataset %s: %d records from %s", dataset.version.ref, len(found), path)
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
