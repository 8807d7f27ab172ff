"""`crucible tokenizers train` as a user runs it, against a real `crucible server`: a
registered dataset's text, digest-checked, trains a BPE that is registered as a tokenizer
artifact derived from the dataset version; a vocabulary that cannot be fails with one line
and leaves neither a directory nor an artifact."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

from crucible.artifacts import storage
from crucible.artifacts.digest import content_of
from crucible.models.hf_tokenizer import HFTokenizer
from crucible.training.records import write_jsonl
from tests.cli.test_datasets import Server, data, server
from tests.workloads.test_data_jobs import conversation

__all__ = ["data", "server"]  # the fixtures, imported for this module

RECORDS = [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a in range(10) for b in range(10)]


def test_a_tokenizer_trained_on_a_dataset_is_an_artifact_derived_from_it(
    server: Server, data: Path
) -> None:
    write_jsonl(data / "sums.jsonl", RECORDS)
    code, _, stderr = server.cli("datasets", "register", "sums", str(data / "sums.jsonl"))
    assert code == 0, stderr
    out = data / "sums-bpe"
    code, stdout, stderr = server.cli(
        "tokenizers", "train", "sums@latest", "--out", str(out), "--vocab-size", "300"
    )
    assert code == 0, stderr
    assert "on 100 prompt_completion records" in stdout
    (artifact,) = server.api.list_artifacts("default", kind="tokenizer", name="sums-bpe").items
    assert f"registered artifact {artifact.id}" in stdout
    assert storage.local_path(artifact.uri) == out.resolve()
    assert artifact.digest == content_of(out).digest
    version = server.api.resolve_dataset("default", "sums@1")
    assert [(s.type, s.id) for s in artifact.sources] == [("dataset_version", version.id)]
    tokenizer = HFTokenizer.from_directory(out)
    assert tokenizer.decode(tokenizer.encode("7+8=15")) == "7+8=15"
    assert tokenizer.vocab_size <= 300


def test_a_vocabulary_below_the_bytes_leaves_nothing(server: Server, data: Path) -> None:
    write_jsonl(data / "few.jsonl", RECORDS[:5])
    assert server.cli("datasets", "register", "few", str(data / "few.jsonl"))[0] == 0
    out = data / "few-bpe"
    code, _, stderr = server.cli(
        "tokenizers", "train", "few@1", "--out", str(out), "--vocab-size", "10"
    )
    assert code == 1
    assert "config.tokenizer: vocab_size=10 is below the 259 ids" in stderr
    assert not out.exists() and not out.with_name("few-bpe.partial").exists()
    assert server.api.list_artifacts("default", name="few-bpe").items == []


def test_the_docs_commands_run_as_written(server: Server, data: Path) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    section = docs[docs.index("## A tokenizer trained on your data") :]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[:1]
    (data / "data").mkdir()
    write_jsonl(data / "data" / "chats.jsonl", [conversation(i) for i in range(50)])
    for line in block.strip().splitlines():
        program, *args = shlex.split(line)
        assert program == "crucible", line
        done = subprocess.run(
            [sys.executable, "-m", "crucible", *args],
            env=server.env,
            cwd=data,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (line, done.stderr)
    (artifact,) = server.api.list_artifacts("default", kind="tokenizer", name="chat-bpe").items
    assert storage.local_path(artifact.uri) == (data / "tokenizers" / "chat-bpe").resolve()
