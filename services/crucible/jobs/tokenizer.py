"""`python -m crucible.jobs.tokenizer`: a byte-level BPE tokenizer trained on the
input datasets' text, registered as a `tokenizer` artifact derived from them.

Run it as a TrainingRun's `command` (`["python", "-m", "crucible.jobs.tokenizer"]`);
`config.tokenizer` sets the vocabulary and the artifact's name (`TokenizerConfig`),
`config.data.shape` how records read (the first record's fields by default). The records
stream as the train job reads them, checked first; the directory is written beside its final
name and renamed into place, so a registered tokenizer is always whole. `crucible tokenizers
train` runs the same on a laptop, without a run.
"""

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from crucible.config.parse import ConfigError
from crucible.config.workload import DataConfig, TokenizerConfig
from crucible.jobs.datasets import input_files
from crucible.jobs.env import read_env
from crucible.jobs.process import run_job
from crucible.training.records import DataError

log = logging.getLogger("crucible.jobs.tokenizer")


@dataclass(frozen=True)
class TrainedTokenizer:
    directory: Path
    vocab_size: int
    shape: str
    records: int

    def meta(self) -> dict[str, object]:
        """What the artifact records about it."""
        return {
            "format": "huggingface",
            "algorithm": "byte-level BPE",
            "vocab_size": self.vocab_size,
            "shape": self.shape,
            "records": self.records,
        }


def main() -> None:
    run_job("tokenizer", tokenizer_job)


def train_from_files(
    files: list[Path], directory: Path, config: TokenizerConfig, data: DataConfig
) -> TrainedTokenizer:
    """Train on every record of `files` (checked against the shape first) and write the
    tokenizer to `directory`, which must not exist yet. DataError for bad records,
    ConfigError for a vocabulary that cannot be."""
    from crucible.models.bpe import train_bpe
    from crucible.training.records import in_file_order
    from crucible.training.shapes import texts_of
    from crucible.training.train_data import open_files

    if directory.exists():
        raise FileExistsError(f"{directory} exists; write the tokenizer to a new directory")
    source, shape = open_files(files, data)
    texts = (text for record in in_file_order(source) for text in texts_of(shape, record))
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a crashed attempt's, ours to drop
    try:
        vocab_size = train_bpe(
            texts, partial, vocab_size=config.vocab_size, min_frequency=config.min_frequency
        )
    except ValueError as exc:  # the vocabulary asked for (records fail as DataError)
        if isinstance(exc, DataError):
            raise
        raise ConfigError(f"config.tokenizer: {exc}") from None
    partial.rename(directory)
    log.info(
        "trained a %d-token BPE on %d %s records into %s",
        vocab_size,
        source.num_records,
        shape,
        directory,
    )
    return TrainedTokenizer(directory, vocab_size, shape, source.num_records)


def tokenizer_job() -> None:
    env = read_env()
    if not env.inputs.datasets:
        raise ConfigError("a tokenizer is trained on input datasets (spec.inputs); none given")
    import crucible

    run = crucible.init()
    inputs = input_files(run, env.inputs.datasets)
    name = env.config.tokenizer.name or f"{run.name}-tokenizer"
    suffix = f".attempt-{run.attempt}" if run.attempt is not None else ""
    directory = run.outputs_dir / f"{name}{suffix}"
    shutil.rmtree(directory, ignore_errors=True)  # this attempt's own, never registered
    try:
        trained = train_from_files(inputs.files, directory, env.config.tokenizer, env.config.data)
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    artifact = run.publish_artifact(
        "tokenizer",
        name,
        directory,
        sources=[{"type": "dataset_version", "id": v.id} for v in inputs.versions],
        meta=trained.meta(),
    )
    log.info(
        "registered tokenizer artifact %d (%s, %s)", artifact.id, artifact.name, artifact.digest
    )
    run.finish()


if __name__ == "__main__":
    main()
