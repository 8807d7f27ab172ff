"""The tokenizer job as a process against a real API server: a BPE trained on a Parquet
chat dataset, registered as a `tokenizer` artifact derived from the dataset version with the
digest of its files; a Llama model then trains with it; and a vocabulary that cannot be
exits 2 with nothing registered."""

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from crucible.artifacts import storage
from crucible.artifacts.digest import content_of
from crucible.config.parse import parse_config_object
from crucible.domain.specs import TrainingRunManifest
from crucible.models.hf_tokenizer import HFTokenizer
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.training.shapes import encode_chat
from tests.workloads.test_data_jobs import conversation
from tests.workloads.test_hf_model import SMALL
from tests.workloads.test_jobs import Job, Platform, platform, server

__all__ = ["platform", "server"]  # the fixtures, imported for this module

COMMAND = ["python", "-m", "crucible.jobs.tokenizer"]
VOCAB = 320


@dataclass
class Jobs:
    dataset_version_id: int
    tokenizer_run: int
    tokenizer: Job
    too_small_run: int
    too_small: Job


@pytest.fixture(scope="module")
def jobs(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    path = tmp_path_factory.mktemp("data") / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([conversation(i) for i in range(200)]), path)
    version = platform.api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": "chat",
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
            }
        )
    )

    def start(config: dict[str, object], label: str) -> tuple[int, Job]:
        run = platform.submit(
            "train",
            command=COMMAND,
            config=config,
            inputs=[{"dataset": "chat@1"}],
        )
        return run, platform.start("tokenizer", run, datasets=["chat@1"], label=label)

    tokenizer_run, tokenizer = start(
        {"tokenizer": {"vocab_size": VOCAB, "name": "chat-bpe"}}, "tokenizer"
    )
    too_small_run, too_small = start({"tokenizer": {"vocab_size": 10}}, "tokenizer too small")
    return Jobs(version.id, tokenizer_run, tokenizer, too_small_run, too_small)


def test_the_tokenizer_is_an_artifact_derived_from_its_dataset(
    platform: Platform, jobs: Jobs
) -> None:
    jobs.tokenizer.ok()
    (artifact,) = platform.api.list_artifacts("default", kind="tokenizer").items
    assert artifact.name == "chat-bpe"
    assert artifact.produced_by_run_id == jobs.tokenizer_run
    assert [(s.type, s.id) for s in artifact.sources] == [
        ("dataset_version", jobs.dataset_version_id)
    ]
    directory = storage.local_path(artifact.uri)
    assert directory is not None and artifact.digest == content_of(directory).digest
    assert artifact.meta["shape"] == "chat" and artifact.meta["records"] == 200
    tokenizer = HFTokenizer.from_directory(directory)
    assert tokenizer.vocab_size == artifact.meta["vocab_size"] <= VOCAB
    # It carries the chat template the training data used: the assistant's turn is trained.
    example = encode_chat(tokenizer, conversation(3)["messages"])
    trained = [t for t, on in zip(example.tokens, example.trained, strict=True) if on]
    assert tokenizer.decode(trained).strip() == "6"


def test_a_llama_model_trains_with_the_tokenizer_artifact_in_its_lineage(
    platform: Platform, jobs: Jobs
) -> None:
    jobs.tokenizer.ok()
    (artifact,) = platform.api.list_artifacts("default", kind="tokenizer").items
    llama = {"architecture": "llama", "config": SMALL["llama"] | {"vocab_size": VOCAB}}
    run = platform.submit(
        "train",
        config={
            "model": {"hf": llama, "tokenizer": "artifact:chat-bpe"},
            "train": {"steps": 4, "batch_size": 4, "warmup_steps": 1},
            "data": {"packing": True},
        },
        inputs=[{"dataset": "chat@1"}],
    )
    platform.start("train", run, datasets=["chat@1"], label="train with bpe").ok()
    checkpoint = platform.checkpoints(run)[-1]
    assert checkpoint.step == 4
    assert checkpoint.meta["model"]["tokenizer"] == f"artifact:{artifact.id}"
    inputs = platform.api.request("GET", f"/api/v1/runs/{run}/inputs")
    assert [(i["artifact_id"], i["label"]) for i in inputs if i["artifact_id"]] == [
        (artifact.id, "tokenizer chat-bpe")
    ]
    upstream = platform.api.request(
        "GET",
        f"/api/v1/lineage/checkpoint/{checkpoint.id}",
        params={"direction": "upstream", "depth": 3},
    )
    assert {"type": "artifact", "id": artifact.id} in [
        {"type": n["type"], "id": n["id"]} for n in upstream["nodes"]
    ]


def test_an_artifact_that_is_not_there_exits_2_naming_it(platform: Platform, jobs: Jobs) -> None:
    run = platform.submit(
        "train",
        config={"model": {"tokenizer": "artifact:no-such-tokenizer"}},
        inputs=[{"dataset": "chat@1"}],
    )
    finished = platform.start("train", run, datasets=["chat@1"], label="missing artifact").result()
    assert finished.returncode == 2, finished.output
    assert finished.output.strip().endswith(
        "config.model.tokenizer: project default has no artifact named 'no-such-tokenizer'"
    )


def test_a_vocabulary_below_the_bytes_exits_2_with_nothing_registered(
    platform: Platform, jobs: Jobs
) -> None:
    finished = jobs.too_small.result()
    assert finished.returncode == 2, finished.output
    assert "config.tokenizer: vocab_size=10 is below the 259 ids" in finished.output
    assert "Traceback" not in finished.output
    produced = [
        a
        for a in platform.api.list_artifacts("default").items
        if a.produced_by_run_id == jobs.too_small_run
    ]
    assert produced == []


def test_the_docs_manifest_is_the_job_run_here() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    section = docs[docs.index("## A tokenizer trained on your data") :]
    (manifest,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)[:1]
    run = TrainingRunManifest.model_validate(yaml.safe_load(manifest))
    assert run.spec.command == COMMAND
    assert parse_config_object(run.spec.config).tokenizer.name == "chat-bpe"
