"""`crucible datasets`: register files as dataset versions, list, show and download them."""

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape

from crucible.cli.common import ProjectOpt, client, friendly_errors
from crucible.cli.downloads import download_into
from crucible.cli.output import age, console, table
from crucible.cli.project_storage import register_where_accepted
from crucible.client import ApiError, CrucibleClient
from crucible.domain.errors import CrucibleError
from crucible.schemas.common import Page
from crucible.schemas.lineage import DATASET_NAME_PATTERN, DatasetVersionPublic
from crucible.settings import DEFAULT_PROJECT

T = TypeVar("T")
datasets_app = typer.Typer(no_args_is_help=True, help="Datasets.")

# The survey never reads a block back, so the size only sets how many offsets it notes.
SURVEY_BLOCK_SIZE = 4096
TYPE_NAMES = {
    str: "string",
    bool: "bool",
    int: "int",
    float: "float",
    type(None): "null",
    dict: "object",
    list: "list",
}
"""Names as the workloads' own schemas spell them (`"list[int]"`, `"float"`)."""
MISSING = "missing"
"""In a field's types: some records lack the field."""


@datasets_app.command("register")
@friendly_errors
def datasets_register(
    name: Annotated[str, typer.Argument(help="Dataset name: letters, digits, '.', '_', '-'.")],
    path: Annotated[
        Path, typer.Argument(exists=True, help="A .jsonl or .parquet file, or a folder of them.")
    ],
    project: ProjectOpt = DEFAULT_PROJECT,
    to: Annotated[
        str | None,
        typer.Option(
            help="Object storage (s3://bucket/prefix) to copy the files to first; the copy "
            "is what is registered. Default: the files where they are, or, where the server "
            "refuses them, a copy in the project's storage under this machine's CRUCIBLE_HOME."
        ),
    ] = None,
) -> None:
    """Register a file, or a folder of .jsonl and .parquet files, as the next version of
    dataset NAME, with its record count and schema. The same content again is the version
    that already holds it."""
    from crucible.artifacts import remote, storage
    from crucible.sdk.datasets import DatasetCorrupt, publish
    from crucible.training.records import DataError

    if re.fullmatch(DATASET_NAME_PATTERN, name) is None:
        raise typer.BadParameter(
            f"use letters, digits, '.', '_' and '-', starting with a letter or digit; got {name!r}",
            param_hint="NAME",
        )
    if to is not None and not to.startswith("s3://"):
        raise typer.BadParameter(
            f"must be an s3://bucket/prefix URI (leave it out to register local files where "
            f"they are), got {to!r}",
            param_hint="--to",
        )
    path = path.absolute()
    try:
        count, schema = survey(path)
    except DataError as exc:
        raise CrucibleError(f"{exc}; nothing was registered") from None
    with client() as api:
        latest = latest_version(api, project, name)
        try:
            if to is not None:
                refuse_to_replace(path, storage.join(to, path.name))
            version = register_where_accepted(
                api,
                project=project,
                section="datasets",
                name=name,
                path=path,
                copy=to is None,
                publish=lambda where: publish(
                    api,
                    project=project,
                    run_id=None,
                    name=name,
                    path=where,
                    record_count=count,
                    schema=schema,
                    outputs_uri=to,
                ),
            )
        except (DatasetCorrupt, remote.StorageUnavailable) as exc:
            raise CrucibleError(str(exc)) from None
    if latest is not None and version.version <= latest:
        console.print(
            f"{version.ref} already holds this content ({version.digest}); nothing new was "
            "registered",
            highlight=False,
            soft_wrap=True,
        )
    else:
        console.print(
            f"registered {version.ref}: {count} records, {version.digest}, at "
            f"{escape(version.uri)}",
            highlight=False,
            soft_wrap=True,
        )


@datasets_app.command("ls")
@friendly_errors
def datasets_ls(project: ProjectOpt = DEFAULT_PROJECT) -> None:
    """List the datasets of a project with their latest versions."""
    with client() as api:
        datasets = every_item(lambda cursor: api.list_datasets(project, cursor=cursor))
    table(
        f"datasets in {project}",
        ["ID", "NAME", "LATEST", "AGE"],
        [(d.id, d.name, d.latest_version, age(d.created_at)) for d in datasets],
    )


@datasets_app.command("show")
@friendly_errors
def datasets_show(
    ref: Annotated[str, typer.Argument(help="name@N or name@latest.")],
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """Show a dataset version (where it is, its digest, records and schema, the run that
    produced it) and every version of its dataset."""
    with client() as api:
        version = api.resolve_dataset(project, ref)
        versions = every_item(
            lambda cursor: api.list_dataset_versions(version.dataset_id, cursor=cursor)
        )
    records = "not recorded" if version.record_count is None else version.record_count
    console.print(f"[bold]{version.ref}[/bold] (dataset version {version.id})")
    console.print(f"uri: {escape(version.uri)}", highlight=False, soft_wrap=True)
    console.print(f"digest: {version.digest}", highlight=False)
    console.print(f"records: {records}", highlight=False)
    console.print(f"produced by: {produced_by(version)}", highlight=False)
    created = version.created_at.isoformat(timespec="seconds")
    console.print(f"created: {created} ({age(version.created_at)} ago)", highlight=False)
    schema = dict(version.schema_)
    fields = schema.pop("fields", None)
    for key, value in sorted(schema.items()):
        console.print(f"schema {escape(key)}: {escape(str(value))}", highlight=False)
    if isinstance(fields, dict):
        table(
            "fields",
            ["FIELD", "TYPE"],
            [(escape(str(k)), escape(str(v))) for k, v in fields.items()],
        )
    table(
        f"versions of {version.name}",
        ["VERSION", "RECORDS", "DIGEST", "PRODUCED BY", "AGE"],
        [
            (
                v.version,
                v.record_count,
                v.digest,
                v.produced_by_run_id and f"run {v.produced_by_run_id}",
                age(v.created_at),
            )
            for v in versions
        ],
    )


@datasets_app.command("download")
@friendly_errors
def datasets_download(
    ref: Annotated[str, typer.Argument(help="name@N or name@latest.")],
    directory: Annotated[Path, typer.Argument(help="New (or empty) directory to write.")],
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """Copy a dataset version's files into a directory (a folder's files straight in it, a
    single file under its name), checked against the version's digest. When the copy fails
    or does not match, nothing is left in the directory."""
    from crucible.sdk.datasets import DatasetCorrupt, copy_verified, stored_name

    directory = directory.absolute()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise CrucibleError(f"{directory} exists and is not an empty directory; name a new one")
    with client() as api:
        version = api.resolve_dataset(project, ref)
    download_into(
        directory,
        stored_name(version),
        lambda destination: copy_verified(version, destination),
        DatasetCorrupt,
    )
    console.print(
        f"downloaded {version.ref} ({version.digest}, verified) to {escape(str(directory))}",
        highlight=False,
        soft_wrap=True,
    )


# -- helpers ---------------------------------------------------------------------------------


class RecordSurvey:
    """A record check (for `FileRecords`) that checks nothing and notes, for every record,
    that there is one more and which types its fields hold."""

    def __init__(self) -> None:
        self.count = 0
        self.first: tuple[dict[str, Any], str] | None = None
        """The first record and where it is."""
        self._types: dict[str, set[str]] = {}
        self._present: dict[str, int] = {}

    def __call__(self, record: dict[str, Any], where: str) -> None:
        if self.first is None:
            self.first = (record, where)
        self.count += 1
        for key, value in record.items():
            self._types.setdefault(key, set()).add(type_name(value))
            self._present[key] = self._present.get(key, 0) + 1

    def fields(self) -> dict[str, str]:
        """Each field's types, `|`-joined in name order, in the order fields first appeared."""
        fields = {}
        for key, types in self._types.items():
            if any(t.startswith("list[") for t in types):
                types = types - {"list"}  # an empty list says nothing its neighbours do not
            if self._present[key] < self.count:
                types = types | {MISSING}
            fields[key] = "|".join(sorted(types))
        return fields


def type_name(value: Any) -> str:
    if isinstance(value, list):
        if not value:
            return "list"
        # map(type) and set() run in C: token lists can be thousands of elements a record.
        kinds = sorted({TYPE_NAMES.get(kind, kind.__name__) for kind in set(map(type, value))})
        return f"list[{'|'.join(kinds)}]"
    return TYPE_NAMES.get(type(value), type(value).__name__)


def survey(path: Path) -> tuple[int, dict[str, Any]]:
    """The record count and schema of the dataset at `path`, from one pass over its files:
    its format, each field's types and, when the first record has one, its training shape.
    Raises DataError naming the file and line of a record that is not valid."""
    from crucible.training.records import DataError, FileRecords, data_files
    from crucible.training.shape_of import detect_shape

    files = data_files(path)
    seen = RecordSurvey()
    FileRecords(files, block_size=SURVEY_BLOCK_SIZE, check=seen)
    suffixes = {f.suffix for f in files}
    schema: dict[str, Any] = {
        "format": suffixes.pop().lstrip(".") if len(suffixes) == 1 else "mixed",
        "fields": seen.fields(),
    }
    assert seen.first is not None  # FileRecords refuses files without records
    # Records of no training shape (an eval set's, say) are still a dataset: no "shape".
    with contextlib.suppress(DataError):
        schema["shape"] = detect_shape(*seen.first)
    return seen.count, schema


def latest_version(api: CrucibleClient, project: str, name: str) -> int | None:
    """The dataset's newest version number; None when it has none (or does not exist)."""
    try:
        return api.resolve_dataset(project, f"{name}@latest").version
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def refuse_to_replace(path: Path, target: str) -> None:
    """Uploading replaces whatever is at `target`, maybe the files of a version registered
    earlier, which would then fail its digest check: refuse unless it holds these very files
    (a second registration of the same content)."""
    from crucible.artifacts import remote
    from crucible.artifacts.digest import content_of

    if remote.size(target) is None:
        return
    there = remote.content(target)
    if there is not None and there.digest != content_of(path).digest:
        raise CrucibleError(
            f"{target} already holds other files (maybe an earlier version's); give --to "
            "another prefix"
        )


def produced_by(version: DatasetVersionPublic) -> str:
    if version.produced_by_run_id is None:
        return "no run (registered directly)"
    return f"run {version.produced_by_run_id}"


def every_item(fetch: Callable[[str | None], Page[T]]) -> list[T]:
    """Every item of a paged list, following its cursors."""
    items: list[T] = []
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor
