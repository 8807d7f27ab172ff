"""A team's own teacher, reward and eval suite, by import path, through the jobs as processes
(`python -m crucible.jobs.*` against a real API server on SQLite), resolved from
the run's workingDir as the executor starts it there (examples/team-code, the example of
docs/workloads.md): teacher data -> a short SFT -> a
rollout scored by the custom reward -> the custom suite on the checkpoint; and the bad
references a job must refuse with exit 2, naming them."""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from crucible.domain.specs import EvalPolicy, PolicyRef, RewardSpec
from crucible.training.records import read_jsonl
from tests.workloads.test_jobs import Job, Platform, platform, server

__all__ = ["platform", "server"]  # the fixtures, imported for this module

TASK = {"digits": 1, "operators": ["+"]}

WORKDIR = Path(__file__).resolve().parents[2] / "examples" / "team-code"
"""The example of docs/workloads.md: the package team_loop, as a run's workingDir."""


@dataclass
class Loop:
    teacher_run: int
    sft_run: int
    rollout_run: int
    eval_run: int
    rollout: Job
    evaluation: Job
    checkpoint_id: int
    checkpoint_step: int


@pytest.fixture(scope="module")
def workdir() -> Path:
    return WORKDIR


@pytest.fixture(scope="module")
def loop(platform: Platform, workdir: Path) -> Loop:
    teacher_run = platform.submit(
        "rollout",
        policy={"teacher": "team_loop.code:echo_teacher", "options": {"suffix": "0"}},
        output="echo-data",
        config={"task": TASK, "datagen": {"num_prompts": 32}},
    )
    platform.start("rollout", teacher_run, label="custom teacher", cwd=workdir).ok()
    sft_run = platform.submit(
        "train",
        config={
            "model": {"preset": "tiny"},
            "task": TASK,
            "train": {"steps": 4, "batch_size": 8, "warmup_steps": 1},
        },
        inputs=[{"dataset": "echo-data@1"}],
    )
    platform.start("train", sft_run, datasets=["echo-data@1"], label="sft", cwd=workdir).ok()
    final = platform.checkpoints(sft_run)[-1]
    rollout_run = platform.submit(
        "rollout",
        policy={"checkpoint": {"id": final.id}},
        prompts={"dataset": "echo-data@1"},
        reward={"name": "team_loop.code:length_reward", "options": {"target": 2}},
        samplesPerPrompt=2,
        sampling={"temperature": 1.0, "maxNewTokens": 3},
        output="echo-rollouts",
        config={"rollout": {"num_prompts": 8}},
    )
    eval_run = platform.submit(
        "eval",
        checkpoint={"id": final.id},
        suite="team_loop.code:likelihood_suite",
        config={"suite": {"reference": "2"}},
    )
    return Loop(
        teacher_run=teacher_run,
        sft_run=sft_run,
        rollout_run=rollout_run,
        eval_run=eval_run,
        rollout=platform.start(
            "rollout",
            rollout_run,
            datasets=["echo-data@1"],
            checkpoint=final.id,
            label="custom reward",
            cwd=workdir,
        ),
        evaluation=platform.start(
            "eval", eval_run, checkpoint=final.id, label="custom suite", cwd=workdir
        ),
        checkpoint_id=final.id,
        checkpoint_step=final.step,
    )


def records_of(platform: Platform, ref: str) -> list[dict[str, object]]:
    version = platform.api.resolve_dataset("default", ref)
    return list(read_jsonl(Path(version.uri.removeprefix("file://"))))


def test_a_custom_teacher_answers_with_its_options(platform: Platform, loop: Loop) -> None:
    records = records_of(platform, "echo-data@1")
    assert len(records) == 32
    assert all(r["completion"] == f"{r['prompt'][0]}0" for r in records)  # type: ignore[index]
    version = platform.api.resolve_dataset("default", "echo-data@1")
    assert version.schema_["source"] == "teacher team_loop.code:echo_teacher"


def test_a_custom_reward_scores_every_sample(platform: Platform, loop: Loop) -> None:
    loop.rollout.ok()
    records = records_of(platform, "echo-rollouts@latest")
    assert len(records) == 16
    for record in records:
        assert record["reward"] == -abs(len(str(record["completion"])) - 2)
    version = platform.api.resolve_dataset("default", "echo-rollouts@latest")
    assert version.schema_["reward"] == "team_loop.code:length_reward"


def test_a_custom_suite_scores_the_checkpoint_through_the_handle(
    platform: Platform, loop: Loop
) -> None:
    loop.evaluation.ok()
    (result,) = platform.api.request("GET", f"/api/v1/checkpoints/{loop.checkpoint_id}/evals")
    assert result["suite"] == "team_loop.code:likelihood_suite"
    scores = result["scores"]
    assert scores["checkpoint_step"] == loop.checkpoint_step
    # A log-probability of one token beats that of the same token twice.
    assert scores["logprob_doubled"] < scores["logprob_reference"] < 0
    assert 0 <= scores["generated_chars"] <= 2
    assert {"eval/logprob_reference", "eval/checkpoint_step"} <= platform.metric_keys(loop.eval_run)


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        (
            "rollout",
            {"reward": {"name": "team_loop.absent:score"}},
            "spec.reward.name 'team_loop.absent:score': no module named 'team_loop.absent'",
        ),
        (
            "eval",
            {"suite": "team_loop.code:likelyhood_suite"},
            "spec.suite 'team_loop.code:likelyhood_suite': module team_loop.code has no "
            "attribute 'likelyhood_suite'",
        ),
        (
            "eval",
            {"suite": "team_loop.code:likelihood_suite", "config": {"suite": {"refrence": "2"}}},
            "config.suite.refrence is not an option of eval suite "
            "team_loop.code:likelihood_suite; its options: reference",
        ),
        (
            "rollout",
            {"policy": {"teacher": "team_loop.code:echo_teacher"}},
            "spec.policy.options (given: none) do not fit teacher team_loop.code:echo_teacher",
        ),
    ],
)
def test_a_bad_reference_exits_2_naming_it(
    platform: Platform, loop: Loop, workdir: Path, kind: str, spec: dict[str, object], expected: str
) -> None:
    base: dict[str, object] = (
        {
            "policy": {"checkpoint": {"id": loop.checkpoint_id}},
            "reward": {"name": "exact_match"},
            "output": "never-published",
        }
        if kind == "rollout"
        else {"checkpoint": {"id": loop.checkpoint_id}, "suite": "arithmetic"}
    )
    run_id = platform.submit(kind, **{**base, **spec})
    finished = platform.start(kind, run_id, checkpoint=loop.checkpoint_id, cwd=workdir).result()
    assert finished.returncode == 2, finished.output
    assert expected in finished.termination_message, finished.output
    assert expected in finished.output


def test_docs_show_the_example_as_it_is_and_its_spec_fragments_validate() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    section = docs[docs.index("## Your own teacher") : docs.index("## Your own environment")]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert code == (WORKDIR / "team_loop" / "code.py").read_text()
    (fragments,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    teacher, reward, training = yaml.safe_load_all(fragments)
    PolicyRef.model_validate(teacher["policy"])
    RewardSpec.model_validate(reward["reward"])
    for policy in training["evals"]:
        EvalPolicy.model_validate(policy)
