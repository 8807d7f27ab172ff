"""`crucible tokenizers train`: a byte-level BPE trained on registered datasets, on this
machine, registered as a `tokenizer` artifact derived from them (what the tokenizer job does
inside a run)."""

from pathlib import Path
from typing import Annotated

import typer

from crucible.cli.common import ProjectOpt, client, friendly_errors
from crucible.cli.output import console
from crucible.domain.errors import CrucibleError
from crucible.settings import DEFAULT_PROJECT, load_settings

tokenizers_app = typer.Typer(no_args_is_help=True, help="Tokenizers.")


@tokenizers_app.command("train")
@friendly_errors
def tokenizers_train(
    datasets: Annotated[
        list[str], typer.Argument(help="Datasets to train on: name@version or name@latest.")
    ],
    directory: Annotated[Path, typer.Option("--out", help="New directory to write.")],
    vocab_size: Annotated[int, typer.Option(min=1, help="Ids in the vocabulary.")] = 8192,
    min_frequency: Annotated[int, typer.Option(min=1, help="Merges need this many pairs.")] = 2,
    shape: Annotated[
        str, typer.Option(help="auto, text, prompt_completion or chat (how records read).")
    ] = "auto",
    name: Annotated[
        str | None, typer.Option(help="Artifact name; default the directory's name.")
    ] = None,
    project: ProjectOpt = DEFAULT_PROJECT,
) -> None:
    """Train a byte-level BPE tokenizer on the datasets' text (digest-checked) and register
    the directory as a tokenizer artifact derived from them; `config.model.tokenizer:
    "artifact:<name>"` then uses it."""
    from crucible.config.parse import ConfigError
    from crucible.config.workload import DataConfig, TokenizerConfig
    from crucible.jobs.tokenizer import train_from_files
    from crucible.sdk.artifacts import publish
    from crucible.sdk.datasets import DatasetCorrupt, fetch
    from crucible.training.records import DataError, data_files

    if shape not in ("auto", "text", "prompt_completion", "chat"):
        raise typer.BadParameter(
            f"must be auto, text, prompt_completion or chat, not {shape!r}", param_hint="--shape"
        )
    cache_dir = load_settings().home / "datasets"
    with client() as api:
        try:
            inputs = [fetch(api, project=project, ref=ref, cache_dir=cache_dir) for ref in datasets]
            files = [file for dataset in inputs for file in data_files(dataset.path)]
            trained = train_from_files(
                files,
                directory,
                TokenizerConfig(vocab_size=vocab_size, min_frequency=min_frequency),
                DataConfig(shape=shape),  # type: ignore[arg-type]  # checked above
            )
        except (DataError, ConfigError, DatasetCorrupt) as exc:
            raise CrucibleError(str(exc)) from None
        artifact = publish(
            api,
            project=project,
            run_id=None,
            kind="tokenizer",
            name=name or directory.name,
            path=directory.absolute(),
            sources=[{"type": "dataset_version", "id": d.version.id} for d in inputs],
            meta=trained.meta(),
        )
    console.print(
        f"trained a {trained.vocab_size}-token BPE on {trained.records} {trained.shape} records "
        f"into {directory}"
    )
    console.print(f"registered artifact {artifact.id} ({artifact.name}, {artifact.digest})")
