"""The `openai-endpoint` teacher: a RolloutJob whose teacher is a model served behind an
OpenAI-compatible endpoint, named by URL; the datagen job publishes what that endpoint
answers, and a request the endpoint refuses ends the job with its message."""

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import torch

from crucible.config.engine import EngineConfig
from crucible.config.workload import model_preset
from crucible.engine.async_engine import AsyncEngine
from crucible.engine.engine import Engine
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.serving.openai.app import create_engine_app
from crucible.training.records import read_jsonl
from tests.servers import app_in_thread
from tests.workloads.test_jobs import TASK, Platform, platform, server

__all__ = ["platform", "server"]  # the fixtures, imported for this module

KEY = "sk-teacher"
KEY_VARIABLE = "TEACHER_API_KEY"


@pytest.fixture(scope="module")
def teacher_url() -> Iterator[str]:
    """The tiny GPT served by the engine's app on a free port, as `crucible serve` serves."""
    torch.manual_seed(0)
    engine = AsyncEngine(
        Engine(build_model(model_preset("tiny")), ByteTokenizer(), EngineConfig(block_size=4))
    )
    app = create_engine_app(engine, model_name="teacher", tokenizer=ByteTokenizer(), api_keys=[KEY])
    with app_in_thread(app) as url:
        yield f"{url}/v1"


def datagen(platform: Platform, teacher_url: str, model: str, output: str) -> int:
    return platform.submit(
        "rollout",
        policy={
            "teacher": "openai-endpoint",
            "options": {
                "url": teacher_url,
                "model": model,
                "max_tokens": 4,
                "api_key_env": KEY_VARIABLE,
                "batch_size": 8,
            },
        },
        output=output,
        config={"task": TASK, "datagen": {"num_prompts": 20, "seed": 3}},
    )


def test_the_dataset_holds_the_endpoints_answers(
    platform: Platform, teacher_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    run_id = datagen(platform, teacher_url, "teacher", "served-teacher")
    platform.start("datagen", run_id, label="endpoint teacher").ok()
    version = platform.api.resolve_dataset("default", "served-teacher@1")
    assert version.record_count == 20
    assert version.schema_["source"] == "teacher openai-endpoint"
    records = list(read_jsonl(Path(version.uri.removeprefix("file://"))))
    client = openai.OpenAI(base_url=teacher_url, api_key=KEY, max_retries=0)
    asked = client.completions.create(
        model="teacher", prompt=[r["prompt"] for r in records], max_tokens=4, temperature=0
    )
    answers = [c.text for c in sorted(asked.choices, key=lambda c: c.index)]
    assert [r["completion"] for r in records] == answers


def test_a_refused_request_ends_the_job_with_the_endpoints_message(
    platform: Platform, teacher_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    run_id = datagen(platform, teacher_url, "no-such-model", "refused-teacher")
    finished = platform.start("datagen", run_id, label="refused teacher").result()
    assert finished.returncode == 2, finished.output
    assert "teacher openai-endpoint" in finished.output and "404" in finished.output
    assert "no-such-model" in finished.output
