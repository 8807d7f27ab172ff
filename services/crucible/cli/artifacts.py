"""`crucible artifacts`: register a model or tokenizer directory (or any file) as an artifact
made by no run, list, show and download artifacts with their digest checked."""

import json
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any
from urllib.parse import urlparse

import typer
from rich.markup import escape

from crucible.cli.common import ProjectOpt, client, friendly_errors
from crucible.cli.datasets import every_item, refuse_to_replace
from crucible.cli.downloads import download_into
from crucible.cli.output import age, console, table
from crucible.cli.project_storage import register_where_accepted
from crucible.client import ApiError, CrucibleClient
from crucible.domain.enums import ArtifactKind, NodeType
from crucible.domain.errors import CrucibleError
from crucible.schemas.lineage import DATASET_NAME_PATTERN, ArtifactPublic, ArtifactSource
from crucible.settings import DEFAULT_PROJECT

artifacts_app = typer.Typer(no_args_is_help=True, help="Artifacts.")

MODEL_CONFIG = "config.json"
MODEL_WEIGHTS = "*.safetensors"
KINDS = ", ".join(kind.value for kind in ArtifactKind)
SOURCE_FORMS = "dataset:NAME@VERSION (or @latest) or checkpoint:ID"
DIGEST_SHORT = 12
"""Hex digits of a digest `ls` shows."""


@artifacts_app.command("register")
@friendly_errors
def artifacts_register(
    name: Annotated[str, typer.Argument(help="Artifact name: letters, digits, '.', '_', '-'.")],
    path: Annotated[
        Path, typer.Argument(exists=True, help="The file or directory, e.g. a model directory.")
    ],
    kind: Annotated[
        str,
        typer.Option(
            metavar="KIND",
            help=f"One of {KINDS}: a model is a Hugging Face directory (config.json and "
            "*.safetensors); code packages come from `crucible submit --package`.",
        ),
    ],
    to: Annotated[
        str | None,
        typer.Option(
            help="Object storage (s3://bucket/prefix) to copy the files to first; the copy "
            "is what is registered. Default: the files where they are, or, where the server "
            "refuses them, a copy in the project's storage under this machine's CRUCIBLE_HOME."
        ),
    ] = None,
    sources: Annotated[
        list[str] | None,
        typer.Option(
            "--from",
            help=f"What it was made from, as lineage: {SOURCE_FORMS}. Repeat for several.",
        ),
    ] = None,
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """Register a file or directory as artifact NAME of KIND, made by no run. The same files
    where an artifact already is are that artifact: nothing new is registered."""
    from crucible.artifacts import remote, storage
    from crucible.sdk.artifacts import ArtifactCopyMismatch, publish

    if re.fullmatch(DATASET_NAME_PATTERN, name) is None or len(name) > 128:
        raise typer.BadParameter(
            "use at most 128 letters, digits, '.', '_' and '-', starting with a letter or "
            f"digit; got {name!r}",
            param_hint="NAME",
        )
    artifact_kind = parse_kind(kind)
    if artifact_kind is ArtifactKind.code:
        raise typer.BadParameter(
            "a code package must be a checked tar archive that runs unpack: register it with "
            "`crucible submit FILE --package DIR`",
            param_hint="--kind",
        )
    if to is not None and not to.startswith("s3://"):
        raise typer.BadParameter(
            f"must be an s3://bucket/prefix URI (leave it out to register the files where "
            f"they are), got {to!r}",
            param_hint="--to",
        )
    refs = [parse_source(ref) for ref in sources or []]
    path = path.absolute()
    meta = model_meta(path) if artifact_kind is ArtifactKind.model else {}
    meta["files"] = sum(1 for p in path.rglob("*") if p.is_file()) if path.is_dir() else 1
    with client() as api:
        lineage = unique([resolve_source(api, project, form, value) for form, value in refs])
        earlier = named(api, project, name)
        try:
            if to is not None:
                refuse_to_replace(path, storage.join(to, path.name))
            artifact = register_where_accepted(
                api,
                project=project,
                section="artifacts",
                name=name,
                path=path,
                copy=to is None,
                publish=lambda where: publish(
                    api,
                    project=project,
                    run_id=None,
                    kind=artifact_kind.value,
                    name=name,
                    path=where,
                    sources=lineage,
                    meta=meta,
                    outputs_uri=to,
                ),
            )
        except (ArtifactCopyMismatch, remote.StorageUnavailable) as exc:
            raise CrucibleError(str(exc)) from None
    what = f"{artifact.id} ({artifact.name}, {artifact.digest}) at {escape(artifact.uri)}"
    if artifact.name != name or artifact.id in {a.id for a in earlier}:
        # The API answers a registration of files it already has at that URI with the
        # artifact recorded for them, as it was recorded.
        message = f"artifact {what} already holds these files; nothing new was registered"
        if artifact.name != name or artifact.kind is not artifact_kind:
            message += f" (it stays a {artifact.kind.value} named {artifact.name})"
        if [s.model_dump(mode="json") for s in artifact.sources] != lineage:
            message += "; its sources stay as first registered"
        console.print(message, highlight=False, soft_wrap=True)
        return
    console.print(f"registered artifact {what}", highlight=False, soft_wrap=True)
    same = [a for a in earlier if a.digest == artifact.digest]
    if same:
        console.print(
            f"artifact {same[0].id} of that name holds the same content, at {escape(same[0].uri)}",
            highlight=False,
            soft_wrap=True,
        )


@artifacts_app.command("ls")
@friendly_errors
def artifacts_ls(
    kind: Annotated[
        str | None, typer.Option(metavar="KIND", help=f"Only of this kind: {KINDS}.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Only of this name.")] = None,
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """List the artifacts of a project, newest first."""
    wanted = None if kind is None else parse_kind(kind)
    with client() as api:
        artifacts = every_item(
            lambda cursor: api.list_artifacts(
                project, kind=wanted.value if wanted else None, cursor=cursor, name=name
            )
        )
    table(
        f"artifacts in {project}",
        ["ID", "KIND", "NAME", "SIZE", "DIGEST", "URI", "MADE BY", "AGE"],
        [
            (
                a.id,
                a.kind.value,
                a.name,
                human_size(a.size_bytes),
                short_digest(a.digest),
                escape(a.uri),
                a.produced_by_run_id and f"run {a.produced_by_run_id}",
                age(a.created_at),
            )
            for a in artifacts
        ],
    )


@artifacts_app.command("show")
@friendly_errors
def artifacts_show(
    ref: Annotated[str, typer.Argument(help="An artifact id, or a name (its newest).")],
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """Show an artifact (where it is, its digest and size, the run that made it, its meta),
    what it was made from, and every artifact of its name."""
    with client() as api:
        artifact = find_artifact(api, project, ref)
        lineage = [(s, describe_source(api, s)) for s in artifact.sources]
        others = named(api, project, artifact.name)
    console.print(
        f"[bold]{escape(artifact.name)}[/bold] (artifact {artifact.id}, {artifact.kind.value})"
    )
    console.print(f"uri: {escape(artifact.uri)}", highlight=False, soft_wrap=True)
    console.print(f"digest: {artifact.digest}", highlight=False)
    console.print(
        f"size: {human_size(artifact.size_bytes)} ({artifact.size_bytes} bytes)", highlight=False
    )
    made_by = artifact.produced_by_run_id
    console.print(
        f"produced by: {'no run (registered directly)' if made_by is None else f'run {made_by}'}",
        highlight=False,
    )
    created = artifact.created_at.isoformat(timespec="seconds")
    console.print(f"created: {created} ({age(artifact.created_at)} ago)", highlight=False)
    for key, value in sorted(artifact.meta.items()):
        shown = value if isinstance(value, str) else json.dumps(value)
        console.print(f"meta {escape(key)}: {escape(shown)}", highlight=False, soft_wrap=True)
    if lineage:
        table(
            "made from",
            ["TYPE", "ID", "WHAT"],
            [(s.type.value, s.id, escape(what)) for s, what in lineage],
        )
    else:
        console.print("made from: nothing recorded", highlight=False)
    table(
        f"artifacts named {artifact.name}",
        ["ID", "KIND", "DIGEST", "URI", "MADE BY", "AGE"],
        [
            (
                a.id,
                a.kind.value,
                a.digest,
                escape(a.uri),
                a.produced_by_run_id and f"run {a.produced_by_run_id}",
                age(a.created_at),
            )
            for a in others
        ],
    )


@artifacts_app.command("download")
@friendly_errors
def artifacts_download(
    ref: Annotated[str, typer.Argument(help="An artifact id, or a name (its newest).")],
    directory: Annotated[Path, typer.Argument(help="New directory to write.")],
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """Copy an artifact's files into a new directory (a directory's files straight in it, a
    single file under its name), checked against the artifact's digest. When the copy fails
    or does not match, nothing is left at the directory."""
    from crucible.sdk.artifacts import ArtifactCorrupt, copy_verified

    directory = directory.absolute()
    if directory.exists() or directory.is_symlink():
        raise CrucibleError(f"{directory} exists; name a new directory")
    with client() as api:
        artifact = find_artifact(api, project, ref)
    download_into(
        directory,
        stored_name(artifact),
        lambda destination: copy_verified(artifact, destination),
        ArtifactCorrupt,
    )
    console.print(
        f"downloaded artifact {artifact.id} ({artifact.name}, {artifact.digest}, verified) to "
        f"{escape(str(directory))}",
        highlight=False,
        soft_wrap=True,
    )


# -- helpers ---------------------------------------------------------------------------------


def model_meta(path: Path) -> dict[str, Any]:
    """What a Hugging Face model directory's config.json says it is; a CrucibleError naming
    what is missing when `path` is not one (config.json and *.safetensors weights)."""
    if not path.is_dir():
        raise CrucibleError(
            f"{path} is not a directory: a model is a Hugging Face directory "
            f"({MODEL_CONFIG} and {MODEL_WEIGHTS} weights); nothing was registered"
        )
    missing = []
    if not (path / MODEL_CONFIG).is_file():
        missing.append(MODEL_CONFIG)
    if not any(p.is_file() for p in path.glob(MODEL_WEIGHTS)):
        missing.append(f"{MODEL_WEIGHTS} weights")
    if missing:
        raise CrucibleError(
            f"{path} is not a Hugging Face model directory: it has no {' and no '.join(missing)} "
            "(as save_pretrained writes them); nothing was registered"
        )
    try:
        config = json.loads((path / MODEL_CONFIG).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CrucibleError(
            f"{path / MODEL_CONFIG} is not valid JSON ({exc}); nothing was registered"
        ) from None
    if not isinstance(config, dict):
        raise CrucibleError(f"{path / MODEL_CONFIG} is not a JSON object; nothing was registered")
    return {key: config[key] for key in ("model_type", "architectures") if key in config}


def parse_kind(kind: str) -> ArtifactKind:
    try:
        return ArtifactKind(kind.lower())
    except ValueError:
        raise typer.BadParameter(
            f"{kind!r} is not an artifact kind: use one of {KINDS}", param_hint="--kind"
        ) from None


def parse_source(ref: str) -> tuple[str, str]:
    """A `--from` value as its form and what it names, checked for shape only."""
    form, colon, value = ref.partition(":")
    if form == "artifact":
        raise typer.BadParameter(
            f"{ref!r}: an artifact's sources are checkpoints and dataset versions only (the "
            f"API records no artifact made from another); use {SOURCE_FORMS}",
            param_hint="--from",
        )
    if colon and form == "dataset" and re.fullmatch(r"[^@\s]+@[^@\s]+", value):
        return form, value
    if colon and form == "checkpoint" and value.isascii() and value.isdigit():
        return form, value
    raise typer.BadParameter(f"{ref!r} is not {SOURCE_FORMS}", param_hint="--from")


def resolve_source(api: CrucibleClient, project: str, form: str, value: str) -> dict[str, Any]:
    """A parsed `--from` as the API's source: the dataset version or checkpoint, which must
    exist (the API then checks that it is in the project)."""
    try:
        if form == "dataset":
            version = api.resolve_dataset(project, value)
            return {"type": NodeType.dataset_version.value, "id": version.id}
        checkpoint = api.get_checkpoint(int(value))
        return {"type": NodeType.checkpoint.value, "id": checkpoint.id}
    except ApiError as exc:
        if exc.status == 404:
            raise CrucibleError(
                f"--from {form}:{value}: no such {form} in project {project}; nothing was "
                "registered"
            ) from None
        raise


def unique(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`sources` in order, each once (two refs may name one version: `@latest` and `@3`)."""
    seen: list[dict[str, Any]] = []
    for source in sources:
        if source not in seen:
            seen.append(source)
    return seen


def named(api: CrucibleClient, project: str, name: str) -> list[ArtifactPublic]:
    """Every artifact of the project called `name`, newest first."""
    return every_item(lambda cursor: api.list_artifacts(project, cursor=cursor, name=name))


def find_artifact(api: CrucibleClient, project: str, ref: str) -> ArtifactPublic:
    """The artifact of id `ref`, or the newest named `ref`."""
    from crucible.sdk.artifacts import ArtifactNotFound, find

    try:
        return find(api, project, ref)
    except ArtifactNotFound as exc:
        raise CrucibleError(str(exc)) from None


def describe_source(api: CrucibleClient, source: ArtifactSource) -> str:
    """What a source is, as a person names it: `name@version`, `run N step S`."""
    try:
        if source.type is NodeType.dataset_version:
            return api.get_dataset_version(source.id).ref
        checkpoint = api.get_checkpoint(source.id)
    except ApiError as exc:
        if exc.status in (403, 404):
            return "not visible"
        raise
    deleted = " (deleted by retention)" if checkpoint.deleted_at is not None else ""
    return f"run {checkpoint.run_id} step {checkpoint.step}{deleted}"


def stored_name(artifact: ArtifactPublic) -> str:
    """The name of the artifact's file or directory: the last part of its URI."""
    from crucible.artifacts import storage

    local = storage.local_path(artifact.uri)
    name = local.name if local is not None else PurePosixPath(urlparse(artifact.uri).path).name
    return name or "artifact"


def short_digest(digest: str) -> str:
    algorithm, _, hexdigits = digest.partition(":")
    return f"{algorithm}:{hexdigits[:DIGEST_SHORT]}"


def human_size(size: int) -> str:
    """`812 B`, `3.4 MiB`: bytes in binary units, one decimal."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"
