"""A Hugging Face model through the jobs as processes (`python -m crucible.jobs.*`,
against a real API server on SQLite): SFT with `config.model.hf` built from a Llama config,
then a rollout and an eval of its checkpoint that rebuild the model from the checkpoint's
meta alone; and the model configs a job must refuse before any heavy work, with exit 2."""

from dataclasses import dataclass

import pytest

from crucible.artifacts.digest import content_of
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.tasks.arithmetic import solve
from crucible.training.records import write_jsonl
from tests.workloads.test_hf_model import SMALL
from tests.workloads.test_jobs import Job, Platform, platform, server

__all__ = ["platform", "server"]  # the fixtures, imported for this module

TASK = {"digits": 1, "operators": ["+"]}
LLAMA = {"architecture": "llama", "config": SMALL["llama"]}
STEPS = 20


@dataclass
class Loop:
    sft_run: int
    sft: Job
    gpt_fields: Job
    missing_directory: Job


@pytest.fixture(scope="module")
def loop(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Loop:
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    prompts = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    write_jsonl(path, [{"prompt": p, "completion": solve(p)} for p in prompts])
    platform.api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": "hf-sft",
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
                "record_count": len(prompts),
            }
        )
    )
    train = {"steps": STEPS, "batch_size": 16, "warmup_steps": 2, "lr": 3e-3}
    sft_run = platform.submit(
        "train",
        config={"model": {"hf": LLAMA}, "task": TASK, "train": train},
        inputs=[{"dataset": "hf-sft@1"}],
    )
    gpt_fields_run = platform.submit(
        "train", config={"model": {"hf": LLAMA, "n_layer": 4}}, inputs=[{"dataset": "hf-sft@1"}]
    )
    missing = str(tmp_path_factory.mktemp("models") / "absent")
    missing_run = platform.submit(
        "train", config={"model": {"hf": {"path": missing}}}, inputs=[{"dataset": "hf-sft@1"}]
    )
    return Loop(
        sft_run=sft_run,
        sft=platform.start("train", sft_run, datasets=["hf-sft@1"], label="hf sft"),
        gpt_fields=platform.start(
            "train", gpt_fields_run, datasets=["hf-sft@1"], label="hf + gpt fields"
        ),
        missing_directory=platform.start(
            "train", missing_run, datasets=["hf-sft@1"], label="hf missing dir"
        ),
    )


def test_sft_of_a_hf_model_checkpoints_it_with_its_source_in_the_meta(
    platform: Platform, loop: Loop
) -> None:
    loop.sft.ok()
    checkpoints = platform.checkpoints(loop.sft_run)
    assert checkpoints[-1].step == STEPS
    assert checkpoints[-1].meta["model"] == {"hf": LLAMA}
    losses = platform.losses(loop.sft_run)
    assert sorted(losses) == list(range(1, STEPS + 1)) and losses[STEPS] < losses[1]


def test_rollout_and_eval_rebuild_the_hf_model_from_the_checkpoint(
    platform: Platform, loop: Loop
) -> None:
    loop.sft.ok()
    final = platform.checkpoints(loop.sft_run)[-1]
    rollout_run = platform.submit(
        "rollout",
        policy={"checkpoint": {"id": final.id}},
        prompts={"dataset": "hf-sft@1"},
        reward={"name": "exact_match"},
        samplesPerPrompt=2,
        sampling={"temperature": 1.0, "maxNewTokens": 3},
        output="hf-rollouts",
        config={"rollout": {"num_prompts": 8}},
    )
    eval_run = platform.submit(
        "eval",
        checkpoint={"id": final.id},
        suite="arithmetic",
        config={"task": TASK, "eval": {"num_problems": 16, "max_new_tokens": 3}},
    )
    rollout = platform.start(
        "rollout", rollout_run, datasets=["hf-sft@1"], checkpoint=final.id, label="hf rollout"
    )
    evaluation = platform.start("eval", eval_run, checkpoint=final.id, label="hf eval")
    rollout.ok()
    evaluation.ok()
    version = platform.api.resolve_dataset("default", "hf-rollouts@latest")
    assert version.record_count == 16 and version.schema_["policy_checkpoint"] == final.id
    (result,) = platform.api.request("GET", f"/api/v1/checkpoints/{final.id}/evals")
    assert result["scores"]["num_problems"] > 0 and result["scores"]["loss"] > 0


def test_gpt_fields_beside_a_hf_model_exit_2_naming_them(loop: Loop) -> None:
    finished = loop.gpt_fields.result()
    assert finished.returncode == 2, finished.output
    assert finished.output.strip().endswith(
        "config.model.hf names a Hugging Face model; the built-in GPT's n_layer do not apply to it"
    )


def test_a_model_directory_that_is_not_there_exits_2_naming_it(loop: Loop) -> None:
    finished = loop.missing_directory.result()
    assert finished.returncode == 2, finished.output
    assert "has no config.json" in finished.output and "absent" in finished.output
    assert "Traceback" not in finished.output
