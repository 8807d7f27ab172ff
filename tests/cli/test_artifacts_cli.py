"""`crucible artifacts` as a user runs it, against a real `crucible server` (SQLite): a
Hugging Face model directory registered by no run (once per place and content), listed,
shown by name and by id with what it was made from, and downloaded digest-checked; and the
refusals (a directory that is not a model, a bad kind or source, a download over a
directory in use, files changed since registration), each of which leaves nothing behind."""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crucible.artifacts import remote, storage
from crucible.artifacts.digest import content_of
from crucible.schemas.lineage import ArtifactPublic, CheckpointCreate
from crucible.schemas.runs import RunSubmit
from crucible.training.records import write_jsonl
from tests.cli.test_datasets import SFT, Server, data, same_files, server
from tests.conftest import training_run
from tests.object_store import ObjectStore

__all__ = ["data", "server"]  # the fixtures, imported for this module

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Llama-architecture causal LM with random weights, as `save_pretrained` writes it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging

    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    logging.disable_progress_bar()
    directory = tmp_path_factory.mktemp("model") / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    assert (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()
    return directory


@pytest.fixture
def model(tiny_model: Path, data: Path) -> Path:
    """This test's own copy of the model, under the storage root."""
    return Path(shutil.copytree(tiny_model, data / "tiny-llama"))


def artifacts(server: Server, name: str) -> list[ArtifactPublic]:
    return server.api.list_artifacts("default", name=name).items


def rows(out: str, first: str | None = None, *, name: str | None = None) -> list[list[str]]:
    """The cells of the table rows of `out`: those whose first cell is `first`, or that
    have a cell `name`."""
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line
    ]
    return [
        row
        for row in cells
        if (first is None or row[:1] == [first]) and (name is None or name in row)
    ]


def said(err: str) -> str:
    """An error as one line of words, whatever box typer drew around it."""
    return " ".join(err.replace("│", " ").split())


def test_a_model_directory_is_registered_once_then_listed_shown_and_downloaded(
    server: Server, model: Path, tmp_path: Path
) -> None:
    code, out, err = server.cli("artifacts", "register", "cli-llama", str(model), "--kind", "model")
    assert code == 0, err
    (artifact,) = artifacts(server, "cli-llama")
    content = content_of(model)
    assert (artifact.kind, artifact.uri) == ("model", model.as_uri())
    assert (artifact.digest, artifact.size_bytes) == (content.digest, content.size_bytes)
    assert artifact.produced_by_run_id is None and artifact.sources == []
    assert artifact.meta == {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "files": 3,
    }
    assert out.strip() == (
        f"registered artifact {artifact.id} (cli-llama, {artifact.digest}) at {model.as_uri()}"
    )

    # The same files at the same place are the artifact already registered...
    code, out, err = server.cli("artifacts", "register", "cli-llama", str(model), "--kind", "model")
    assert code == 0, err
    assert f"artifact {artifact.id} (cli-llama, {artifact.digest})" in out
    assert "already holds these files; nothing new was registered" in out
    assert [a.id for a in artifacts(server, "cli-llama")] == [artifact.id]
    # ...and under another name still that artifact, which keeps its name.
    code, out, err = server.cli("artifacts", "register", "other", str(model), "--kind", "model")
    assert code == 0, err
    assert "nothing new was registered (it stays a model named cli-llama)" in out
    assert artifacts(server, "other") == []

    # A copy elsewhere is another artifact of the name, which says it holds the same content.
    copy = Path(shutil.copytree(model, model.with_name("copy")))
    code, out, err = server.cli("artifacts", "register", "cli-llama", str(copy), "--kind", "model")
    assert code == 0, err
    newer, older = artifacts(server, "cli-llama")
    assert older.id == artifact.id and newer.uri == copy.as_uri()
    assert f"registered artifact {newer.id}" in out
    assert f"artifact {artifact.id} of that name holds the same content" in out

    code, out, err = server.cli("artifacts", "ls", "--kind", "model", "--name", "cli-llama")
    assert code == 0, err
    assert [row[0] for row in rows(out, name="cli-llama")] == [str(newer.id), str(artifact.id)]
    (row,) = rows(out, str(artifact.id))
    size = f"{artifact.size_bytes / 1024:.1f} KiB"
    assert row[1:] == ["model", "cli-llama", size, artifact.digest[:19], artifact.uri, "", row[-1]]
    assert re.fullmatch(r"\d+[smhd]", row[-1])  # its age; made by no run: an empty cell
    code, out, err = server.cli("artifacts", "ls", "--kind", "tokenizer")
    assert code == 0, err
    assert rows(out, name="cli-llama") == []

    code, by_name, err = server.cli("artifacts", "show", "cli-llama")
    assert code == 0, err
    assert f"(artifact {newer.id}, model)" in by_name  # a name: its newest
    code, out, err = server.cli("artifacts", "show", str(artifact.id))
    assert code == 0, err
    for expected in (
        f"cli-llama (artifact {artifact.id}, model)",
        f"uri: {artifact.uri}",
        f"digest: {artifact.digest}",
        f"({artifact.size_bytes} bytes)",
        "produced by: no run (registered directly)",
        "meta model_type: llama",
        'meta architectures: ["LlamaForCausalLM"]',
        "made from: nothing recorded",
        "artifacts named cli-llama",
    ):
        assert expected in out, out
    assert copy.as_uri() in out  # in the table of the name's artifacts

    target = tmp_path / "downloaded"
    code, out, err = server.cli("artifacts", "download", "cli-llama", str(target))
    assert code == 0, err
    assert f"downloaded artifact {newer.id} (cli-llama, {newer.digest}, verified)" in out
    assert same_files(model, target)  # the directory's files, straight in DIR
    assert sorted(p.name for p in tmp_path.iterdir()) == ["downloaded"]  # no temporary left


def test_sources_are_recorded_as_lineage_and_shown(server: Server, data: Path) -> None:
    write_jsonl(data / "sft.jsonl", SFT)
    assert server.cli("datasets", "register", "cli-art-sft", str(data / "sft.jsonl"))[0] == 0
    version = server.api.resolve_dataset("default", "cli-art-sft@1")
    run = server.api.submit_run(RunSubmit(project="default", manifest=training_run("art-src")))
    weights = server.data / "runs" / str(run.id) / "step-10"  # the folder the run was given
    weights.parent.mkdir(parents=True)
    weights.write_text("weights")
    checkpoint = server.api.register_checkpoint(
        run.id,
        CheckpointCreate(
            step=10, uri=weights.as_uri(), digest=content_of(weights).digest, size_bytes=7
        ),
    )
    vocab = data / "vocab.json"
    vocab.write_text('{"a": 0}')

    code, out, err = server.cli(
        "artifacts",
        "register",
        "cli-vocab",
        str(vocab),
        "--kind",
        "tokenizer",
        "--from",
        "dataset:cli-art-sft@latest",
        "--from",
        f"checkpoint:{checkpoint.id}",
        "--from",
        "dataset:cli-art-sft@1",  # the same version again: one edge
    )
    assert code == 0, err
    (artifact,) = artifacts(server, "cli-vocab")
    assert [(s.type, s.id) for s in artifact.sources] == [
        ("dataset_version", version.id),
        ("checkpoint", checkpoint.id),
    ]
    assert artifact.meta == {"files": 1}
    code, out, err = server.cli("artifacts", "show", "cli-vocab")
    assert code == 0, err
    assert rows(out, "dataset_version") == [["dataset_version", str(version.id), "cli-art-sft@1"]]
    assert rows(out, "checkpoint") == [["checkpoint", str(checkpoint.id), f"run {run.id} step 10"]]

    # A single file downloads under its name.
    target = data / "dl"
    code, _, err = server.cli("artifacts", "download", str(artifact.id), str(target))
    assert code == 0, err
    assert [p.name for p in target.iterdir()] == ["vocab.json"]
    assert (target / "vocab.json").read_bytes() == vocab.read_bytes()

    for bad, says in (
        ("artifact:cli-vocab", "an artifact's sources are checkpoints and dataset versions only"),
        ("run:3", "'run:3' is not dataset:NAME@VERSION (or @latest) or checkpoint:ID"),
        ("dataset:cli-art-sft", "is not dataset:NAME@VERSION"),
    ):
        code, _, err = server.cli(
            "artifacts", "register", "cli-bad-src", str(vocab), "--kind", "tokenizer", "--from", bad
        )
        assert code == 2 and says in said(err), err
    code, _, err = server.cli(
        "artifacts", "register", "cli-bad-src", str(vocab), "--kind", "tokenizer",
        "--from", "dataset:cli-art-sft@9",
    )  # fmt: skip
    assert code == 1 and "--from dataset:cli-art-sft@9: no such dataset" in err
    assert artifacts(server, "cli-bad-src") == []


@pytest.mark.parametrize(
    ("remove", "missing"),
    [
        ("config.json", "it has no config.json (as"),
        ("model.safetensors", "it has no *.safetensors weights (as"),
    ],
    ids=["no-config", "no-weights"],
)
def test_a_directory_that_is_not_a_model_is_not_registered(
    server: Server, model: Path, remove: str, missing: str
) -> None:
    name = f"cli-half-{remove.partition('.')[0]}"
    (model / remove).unlink()
    code, _, err = server.cli("artifacts", "register", name, str(model), "--kind", "model")
    assert code == 1
    assert len(err.strip().splitlines()) == 1, err
    assert f"{model} is not a Hugging Face model directory: {missing}" in err
    assert "nothing was registered" in err
    code, out, err = server.cli("artifacts", "ls")
    assert code == 0, err
    assert rows(out, name=name) == []
    assert artifacts(server, name) == []
    # The same files are a tokenizer's, or anything's, to register: only a model is checked.
    code, _, err = server.cli("artifacts", "register", name, str(model), "--kind", "tokenizer")
    assert code == 0, err
    assert [a.kind for a in artifacts(server, name)] == ["tokenizer"]


def test_a_bad_kind_or_target_is_refused_naming_the_choices(server: Server, model: Path) -> None:
    code, _, err = server.cli("artifacts", "register", "cli-kind", str(model), "--kind", "weights")
    assert code == 2
    assert "'weights' is not an artifact kind: use one of model, tokenizer, code" in said(err)
    code, _, err = server.cli("artifacts", "register", "cli-kind", str(model), "--kind", "code")
    assert code == 2 and "crucible submit FILE --package DIR" in said(err)
    code, _, err = server.cli("artifacts", "ls", "--kind", "weights")
    assert code == 2 and "'weights' is not an artifact kind" in said(err)
    code, _, err = server.cli(
        "artifacts", "register", "cli-kind", str(model), "--kind", "model", "--to", "/tmp"
    )
    assert code == 2 and "--to: must be an s3://bucket/prefix URI" in said(err)
    assert artifacts(server, "cli-kind") == []


def test_download_refuses_a_directory_that_exists_and_a_changed_artifact(
    server: Server, model: Path, tmp_path: Path
) -> None:
    code, _, err = server.cli("artifacts", "register", "cli-dl", str(model), "--kind", "model")
    assert code == 0, err

    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = server.cli("artifacts", "download", "cli-dl", str(empty))
    assert code == 1 and f"{empty} exists; name a new directory" in err
    assert list(empty.iterdir()) == []

    (artifact,) = artifacts(server, "cli-dl")
    (model / "config.json").write_text("{}")
    # Other files where an artifact is registered are refused by the API: it is immutable.
    code, _, err = server.cli("artifacts", "register", "cli-dl", str(model), "--kind", "model")
    assert code == 1 and "(409)" in err and "artifacts are immutable" in err
    assert artifacts(server, "cli-dl") == [artifact]
    target = tmp_path / "dl"
    code, _, err = server.cli("artifacts", "download", "cli-dl", str(target))
    assert code == 1
    assert "does not match its registered digest" in err and artifact.digest in err
    assert f"nothing was written to {target}" in err
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]  # no DIR, no temporary sibling

    code, _, err = server.cli("artifacts", "download", "no-such-artifact", str(target))
    assert code == 1 and "project default has no artifact named 'no-such-artifact'" in err
    assert not target.exists()


def test_to_copies_the_model_to_object_storage_and_registers_the_copy(
    server: Server, model: Path, tmp_path: Path, s3: ObjectStore
) -> None:
    env, prefix = s3.client_env, s3.prefix("cli-artifacts")

    def register() -> tuple[int, str, str]:
        return server.cli(
            "artifacts", "register", "cli-s3-llama", str(model), "--kind", "model",
            "--to", prefix, env=env,
        )  # fmt: skip

    code, out, err = register()
    assert code == 0, err
    (artifact,) = artifacts(server, "cli-s3-llama")
    assert artifact.uri == f"{prefix}/tiny-llama" and artifact.digest == content_of(model).digest
    assert f"registered artifact {artifact.id} (cli-s3-llama, {artifact.digest}) at" in out
    copied = remote.content(artifact.uri)
    assert copied is not None and copied.digest == artifact.digest

    code, out, err = register()
    assert code == 0 and "already holds these files; nothing new was registered" in out, err
    assert [a.id for a in artifacts(server, "cli-s3-llama")] == [artifact.id]

    # Other files under the same name would replace the objects the artifact names.
    (model / "config.json").write_text("{}")
    code, _, err = register()
    assert code == 1 and "already holds other files" in err
    assert [a.id for a in artifacts(server, "cli-s3-llama")] == [artifact.id]
    still = remote.content(artifact.uri)
    assert still is not None and still.digest == artifact.digest  # nothing was uploaded

    target = tmp_path / "dl"
    code, out, err = server.cli("artifacts", "download", "cli-s3-llama", str(target), env=env)
    assert code == 0, err
    assert content_of(target).digest == artifact.digest
    assert (target / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()


def test_the_docs_commands_run_as_written(server: Server, data: Path) -> None:
    docs = (REPO / "docs" / "storage.md").read_text()
    section = docs[docs.index("## Artifacts from the command line") :]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)[:1]
    for line in block.strip().splitlines():
        program, *args = shlex.split(line, comments=True)
        if program == "python":  # the example's script, from this checkout
            args[0] = str(REPO / args[0])
        else:
            assert program == "crucible", line
        done = subprocess.run(
            [sys.executable, *(["-m", "crucible"] if program == "crucible" else []), *args],
            env=server.env,
            cwd=data,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (line, done.stderr)
    (artifact,) = artifacts(server, "tiny-llama")
    assert storage.local_path(artifact.uri) == (data / "hf-inputs" / "model").resolve()
    version = server.api.resolve_dataset("default", "arith@1")
    assert [(s.type, s.id) for s in artifact.sources] == [("dataset_version", version.id)]
    assert same_files(data / "hf-inputs" / "model", data / "tiny-llama")
