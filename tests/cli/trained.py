"""A checkpoint of a few SFT steps of the tiny GPT, trained once per module by the reference
trainer against a real API server: what the CLI's checkpoint commands (`export`, `serve`)
are run on."""

from dataclasses import dataclass

import pytest

from crucible.artifacts.digest import content_of
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.tasks.arithmetic import solve
from crucible.training.records import write_jsonl
from tests.conftest import ADMIN_TOKEN
from tests.workloads.test_jobs import Platform

PROMPTS = [f"{a}+{b}=" for a in range(10) for b in range(10)]


@dataclass(frozen=True)
class Trained:
    checkpoint_id: int
    env: dict[str, str]


@pytest.fixture(scope="module")
def trained(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    write_jsonl(path, [{"prompt": p, "completion": solve(p)} for p in PROMPTS])
    platform.api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": "export-sft",
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
                "record_count": len(PROMPTS),
            }
        )
    )
    train = {"steps": 6, "batch_size": 16, "warmup_steps": 1, "lr": 3e-3}
    run_id = platform.submit(
        "train",
        config={
            "model": {"preset": "tiny"},
            "task": {"digits": 1, "operators": ["+"]},
            "train": train,
        },
        inputs=[{"dataset": "export-sft@1"}],
    )
    platform.start("train", run_id, datasets=["export-sft@1"], label="sft").ok()
    env = platform.server.env | {
        "CRUCIBLE_API_URL": platform.server.url,
        "CRUCIBLE_TOKEN": ADMIN_TOKEN,
        "CRUCIBLE_HOME": str(platform.home),
    }
    return Trained(platform.checkpoints(run_id)[-1].id, env)
