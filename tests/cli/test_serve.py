"""`crucible serve CHECKPOINT` as a user runs it: a trained checkpoint behind the engine's
OpenAI-compatible endpoint, answering the official `openai` client's completions and chat
calls with what the checkpoint's model answers offline; and the refusals (no key, a
checkpoint that is not a model, one that does not exist)."""

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import torch

from crucible.jobs.checkpoints import load_model
from crucible.rollouts.rollout import greedy_completions
from crucible.sdk.checkpoint import CheckpointStore
from crucible.sdk.reader import CheckpointReader
from tests.cli.trained import Trained, trained
from tests.servers import crucible, free_port
from tests.workloads.test_jobs import Platform, platform, server

__all__ = ["platform", "server", "trained"]  # the fixtures, imported for this module

KEY = "sk-serve-test"


@pytest.fixture(scope="module")
def served(trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`crucible serve` of the trained checkpoint; yields its /v1 URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = trained.env | {"CRUCIBLE_SERVE_API_KEY": KEY, "OMP_NUM_THREADS": "1"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "crucible", "serve", str(trained.checkpoint_id)),
                *("--port", str(port), "--device", "cpu", "--name", "arith"),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(30)


def offline_answers(platform: Platform, checkpoint_id: int, prompts: list[str]) -> list[str]:
    """What the checkpoint's model answers greedily, loaded as the jobs load it."""
    reader = CheckpointReader(platform.api, project="default", home=platform.home)
    model, tokenizer, _ = load_model(reader, checkpoint_id, device=torch.device("cpu"))
    return greedy_completions(model, tokenizer, prompts, max_new_tokens=3, batch_size=8)


def test_the_openai_client_gets_the_checkpoints_answers(
    platform: Platform, trained: Trained, served: str
) -> None:
    client = openai.OpenAI(base_url=served, api_key=KEY, max_retries=0)
    (card,) = client.models.list().data
    assert card.id == "arith"
    assert (card.model_extra or {})["root"] == f"checkpoint-{trained.checkpoint_id}"
    prompts = ["3+4=", "9+9=", "1+0="]
    completion = client.completions.create(
        model="arith", prompt=prompts, max_tokens=3, temperature=0
    )
    texts = [c.text for c in sorted(completion.choices, key=lambda c: c.index)]
    offline = offline_answers(platform, trained.checkpoint_id, [*prompts, "5+1="])
    assert texts == offline[:3]
    assert completion.usage is not None and completion.usage.prompt_tokens == 3 * 5

    chat = client.chat.completions.create(
        model="arith",
        messages=[{"role": "user", "content": "2+2="}],
        max_tokens=4,
        temperature=0.7,
        seed=3,
        n=2,
    )
    assert len(chat.choices) == 2
    assert all(c.message.role == "assistant" for c in chat.choices)
    assert all(c.finish_reason in ("stop", "length") for c in chat.choices)

    streamed = client.completions.create(
        model="arith", prompt="5+1=", max_tokens=3, temperature=0, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in streamed) == offline[3]


def test_requests_without_the_key_are_refused(served: str) -> None:
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=served, api_key="wrong", max_retries=0).models.list()
    assert httpx.get(f"{served}/models").status_code == 401


def test_a_checkpoint_that_is_not_a_model_and_a_missing_one_are_refused(
    platform: Platform, trained: Trained
) -> None:
    run_id = platform.submit("train", config={"model": {"preset": "tiny"}})
    # The run's folder in the server's home, as the executor gives it: the only place the API
    # takes that run's checkpoints.
    folder = platform.home / "runs" / str(run_id) / "checkpoints"
    store = CheckpointStore(platform.api, run_id=run_id, attempt=1, base_uri=folder.as_uri())
    bare = store.save(1, {"weights": torch.zeros(3)})
    assert bare is not None
    refused = crucible(trained.env, "serve", str(bare.id), "--port", str(free_port()))
    assert refused.returncode == 1
    assert f"cannot serve checkpoint {bare.id}" in refused.stderr
    assert "no model in its meta" in refused.stderr
    missing = crucible(trained.env, "serve", "999999", "--port", str(free_port()))
    assert missing.returncode == 1 and "999999" in missing.stderr
