"""The train job on research-shaped data, as a process against a real API server: packed
chat SFT of a Llama model from a Parquet dataset (exported after its last step with
`export_hf`), packed pre-training on a folder of text JSONL, and the records and files it
must refuse with exit 2 before the first step, with nothing registered."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from crucible.artifacts import storage
from crucible.artifacts.digest import content_of
from crucible.config.model_source import HFModelSource, ModelSpec
from crucible.models.build import build_from_spec, build_tokenizer
from crucible.rollouts.rollout import greedy_completions
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.training.records import write_jsonl
from tests.cli.test_checkpoints_export import original_model
from tests.workloads.test_hf_model import SMALL
from tests.workloads.test_jobs import Job, Platform, platform, server

__all__ = ["platform", "server"]  # the fixtures, imported for this module

LLAMA = {"architecture": "llama", "config": SMALL["llama"]}
STEPS = 6
TRAIN = {"steps": STEPS, "batch_size": 4, "warmup_steps": 1, "lr": 3e-3}


def conversation(i: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": f"{i}+{i}="},
            {"role": "assistant", "content": str(2 * i)},
        ]
    }


@dataclass
class Jobs:
    chat_run: int
    chat: Job
    text_run: int
    text: Job
    missing_field_run: int
    missing_field: Job
    missing_field_file: Path
    wrong_schema_run: int
    wrong_schema: Job
    wrong_schema_file: Path


def register(platform: Platform, name: str, path: Path) -> str:
    platform.api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": name,
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
            }
        )
    )
    return f"{name}@1"


def train(platform: Platform, ref: str, config: dict[str, Any], label: str) -> tuple[int, Job]:
    run = platform.submit("train", config=config, inputs=[{"dataset": ref}])
    return run, platform.start("train", run, datasets=[ref], label=label)


@pytest.fixture(scope="module")
def jobs(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    data = tmp_path_factory.mktemp("data")
    chat_file = data / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([conversation(i) for i in range(40)]), chat_file)
    text_dir = data / "corpus"
    text_dir.mkdir()
    for part in range(2):
        write_jsonl(
            text_dir / f"part-{part}.jsonl",
            [{"text": f"document {part}-{i}: " + "lorem ipsum " * (i % 7)} for i in range(30)],
        )
    missing = data / "missing.jsonl"
    write_jsonl(missing, [conversation(0), {"messages": [{"role": "user"}]}])
    wrong = data / "wrong.parquet"
    pq.write_table(pa.Table.from_pylist([{"text": 7}]), wrong)

    chat_run, chat = train(
        platform,
        register(platform, "chat", chat_file),
        {
            "model": {"hf": LLAMA},
            "train": TRAIN | {"export_hf": True},
            "data": {"packing": True, "seq_len": 48},
        },
        "packed chat sft",
    )
    text_run, text = train(
        platform,
        register(platform, "corpus", text_dir),
        {"train": TRAIN, "data": {"shape": "text", "packing": True}},
        "packed pre-training",
    )
    missing_run, missing_job = train(
        platform, register(platform, "missing", missing), {}, "missing field"
    )
    wrong_run, wrong_job = train(platform, register(platform, "wrong", wrong), {}, "wrong schema")
    return Jobs(
        chat_run,
        chat,
        text_run,
        text,
        missing_run,
        missing_job,
        missing,
        wrong_run,
        wrong_job,
        wrong,
    )


def test_packed_chat_sft_of_a_llama_model_from_parquet(platform: Platform, jobs: Jobs) -> None:
    output = jobs.chat.ok().output
    assert "training on 40 chat records" in output
    assert platform.checkpoints(jobs.chat_run)[-1].step == STEPS
    assert sorted(platform.losses(jobs.chat_run)) == list(range(1, STEPS + 1))


def test_export_hf_publishes_the_final_checkpoint_as_a_model_artifact(
    platform: Platform, jobs: Jobs
) -> None:
    jobs.chat.ok()
    final = platform.checkpoints(jobs.chat_run)[-1]
    (artifact,) = [
        a
        for a in platform.api.list_artifacts("default", kind="model").items
        if a.produced_by_run_id == jobs.chat_run
    ]
    assert [(s.type, s.id) for s in artifact.sources] == [("checkpoint", final.id)]
    directory = storage.local_path(artifact.uri)
    assert directory is not None and artifact.digest == content_of(directory).digest
    spec = ModelSpec(hf=HFModelSource(path=str(directory)))
    exported, tokenizer = (
        build_from_spec(spec, device=torch.device("cpu")).eval(),
        build_tokenizer(spec),
    )
    original, original_tokenizer = original_model(platform, final.id)
    prompts = [f"{i}+{i}=" for i in range(0, 40, 7)]
    ours = greedy_completions(original, original_tokenizer, prompts, max_new_tokens=3, batch_size=8)
    assert greedy_completions(exported, tokenizer, prompts, max_new_tokens=3, batch_size=8) == ours


def test_packed_pre_training_on_a_folder_of_text_files(platform: Platform, jobs: Jobs) -> None:
    output = jobs.text.ok().output
    assert "training on 60 text records" in output
    losses = platform.losses(jobs.text_run)
    assert losses[STEPS] < losses[1]


def test_a_record_missing_a_field_exits_2_naming_file_record_and_field(
    platform: Platform, jobs: Jobs
) -> None:
    finished = jobs.missing_field.result()
    assert finished.returncode == 2, finished.output
    assert finished.output.strip().endswith(
        f"{jobs.missing_field_file} record 2 (line 2) message 1 has no 'content' field"
    )
    assert "Traceback" not in finished.output
    assert platform.checkpoints(jobs.missing_field_run) == []


def test_a_parquet_file_of_the_wrong_schema_exits_2_naming_it(
    platform: Platform, jobs: Jobs
) -> None:
    finished = jobs.wrong_schema.result()
    assert finished.returncode == 2, finished.output
    assert finished.output.strip().endswith(
        f"{jobs.wrong_schema_file} record 1: field 'text' must be a string, not int"
    )
    assert platform.checkpoints(jobs.wrong_schema_run) == []
