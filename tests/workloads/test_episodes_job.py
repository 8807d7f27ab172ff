"""Agent episodes as a RolloutJob: `python -m crucible.jobs.episodes` with the
environment the executor sets, against a real API server (SQLite in a temp dir).

A scripted teacher's episodes, and a checkpoint's played through the engine, are published
as a chat dataset that SFT reads: each record the conversation as the policy saw it."""

from typing import Any

import pytest

from crucible.models.tokenizer import ByteTokenizer
from crucible.training.records import read_jsonl
from crucible.training.shape_of import detect_shape
from crucible.training.shapes import encode_chat
from tests.sdk.conftest import server
from tests.workloads.test_jobs import Platform, platform

__all__ = ["platform", "server"]  # the fixtures, imported for this module

CALCULATOR = {"environment": "calculator", "options": {"digits": 3, "operators": ["+"]}}


def teacher_job(platform: Platform, output: str, **episodes: Any) -> int:
    return platform.submit(
        "rollout",
        policy={"teacher": "calculator-solver", "options": {"tool_share": 0.5}},
        output=output,
        config={"episodes": {**CALCULATOR, **episodes}},
    )


def published(platform: Platform, run_id: int, name: str) -> tuple[Any, list[dict[str, Any]]]:
    version = platform.api.resolve_dataset("default", f"{name}@latest")
    path = platform.home / "runs" / str(run_id) / "outputs" / f"{name}.attempt-1.jsonl"
    return version, list(read_jsonl(path))


def test_a_teachers_episodes_are_published_as_chats_sft_reads(platform: Platform) -> None:
    run_id = teacher_job(platform, "calc-demos", count=24, seed=3, min_reward=1.0)
    platform.start("episodes", run_id).ok()
    version, records = published(platform, run_id, "calc-demos")
    assert version.record_count == len(records) == 24  # the teacher solves every task
    assert version.produced_by_run_id == run_id
    assert version.schema_["source"] == "teacher calculator-solver"
    assert (version.schema_["episodes_played"], version.schema_["min_reward"]) == (24, 1.0)
    called = [r for r in records if any(m["role"] == "tool" for m in r["messages"])]
    assert 0 < len(called) < 24  # tool_share 0.5: some with the tool, some without
    for record in records:
        assert detect_shape(record, "record") == "chat" and record["reward"] == 1.0
        system, user, *_ = record["messages"]
        # What the policy saw: the environment's system message with the tools described.
        assert "<tools>" in system["content"] and user["content"].startswith("What is ")
        example = encode_chat(ByteTokenizer(), record["messages"])
        assert example.trained is not None and any(example.trained)
    assert platform.metric_keys(run_id) >= {"episodes/played", "episodes/kept"}


def test_episodes_below_min_reward_are_left_out_and_none_left_fails_naming_it(
    platform: Platform,
) -> None:
    run_id = teacher_job(platform, "calc-none", count=4, min_reward=2.0)
    finished = platform.start("episodes", run_id).result()
    assert finished.returncode == 1, finished.output
    assert "none of the 4 episodes by teacher calculator-solver reached min_reward 2.0" in (
        finished.output
    )
    assert not (
        platform.home / "runs" / str(run_id) / "outputs" / "calc-none.attempt-1.jsonl"
    ).exists()


def test_failed_episodes_are_counted_left_out_and_past_the_threshold_fail_the_job(
    platform: Platform,
) -> None:
    """Half the tasks call a tool that raises (tests/agents/tools.py:fail): each such episode
    ends tool_failed, is counted and is not published; a threshold below half fails the
    job naming the reason and publishes nothing."""
    calls = [
        {"name": "echo", "arguments": {"text": "fine"}},
        {"name": "fail", "arguments": {"message": "tool bug"}},
    ]

    def job(output: str, **episodes: Any) -> int:
        arguments = {c["name"]: c["arguments"] for c in calls}
        return platform.submit(
            "rollout",
            policy={"teacher": "tests.agents.policies:task_tool_caller",
                    "options": {"arguments": arguments}},
            output=output,
            config={"episodes": {"environment": "tests.agents.broken_envs:OneTool",
                                 "options": {"calls": calls}, "count": 4, **episodes}},
        )  # fmt: skip

    within = job("tools-half")  # the default max_failed_fraction, 0.5, allows 2 of 4
    platform.start("episodes", within).ok()
    version, records = published(platform, within, "tools-half")
    assert version.record_count == len(records) == 2
    assert all(r["end"] == "done" for r in records)
    metrics = platform.api.request("GET", f"/api/v1/runs/{within}/metrics")["series"]
    last = {s["key"]: s["values"][-1] for s in metrics}
    assert (last["episodes/failed"], last["episodes/failed/tool_failed"]) == (2.0, 2.0)

    past = job("tools-past", max_failed_fraction=0.25)
    finished = platform.start("episodes", past).result()
    assert finished.returncode == 1, finished.output
    assert "2 of 4 episodes failed (tool_failed 2)" in finished.output
    assert "max_failed_fraction=0.25" in finished.output and "tool bug" in finished.output
    assert not (
        platform.home / "runs" / str(past) / "outputs" / "tools-past.attempt-1.jsonl"
    ).exists()


@pytest.fixture(scope="module")
def online_checkpoint(platform: Platform) -> int:
    """A policy checkpoint of online RL (two rounds of `letter_or_digit`)."""
    online = {
        "environment": "letter_or_digit",
        "options": {"kinds": ["digit"]},
        "rounds": 2,
        "episodes_per_round": 32,
        "group_size": 8,
        "lr": 0.01,
        "episode": {"max_turns": 1, "max_tokens_per_turn": 1},
        "engine": {"num_blocks": 256, "max_running": 64},
    }
    run_id = platform.submit(
        "train",
        config={"model": {"preset": "tiny"}, "online": online},
        checkpoints={"everySteps": 2},
    )
    platform.start("online_rl", run_id).ok()
    (checkpoint,) = platform.checkpoints(run_id)
    return int(checkpoint.id)


def test_a_checkpoint_plays_through_the_engine_each_episode_stamped_with_it(
    platform: Platform, online_checkpoint: int
) -> None:
    run_id = platform.submit(
        "rollout",
        policy={"checkpoint": {"id": online_checkpoint}},
        output="digits-played",
        config={
            "episodes": {
                "environment": "letter_or_digit",
                "options": {"kinds": ["digit"]},
                "count": 32,
                "episode": {"max_turns": 1, "max_tokens_per_turn": 1},
                "engine": {"num_blocks": 256, "max_running": 64},
            }
        },
    )
    platform.start("episodes", run_id, checkpoint=online_checkpoint).ok()
    version, records = published(platform, run_id, "digits-played")
    assert version.record_count == 32 and version.schema_["min_reward"] is None
    assert version.schema_["source"] == f"checkpoint {online_checkpoint}"
    assert {r["policy"]["checkpoint_id"] for r in records} == {online_checkpoint}
    assert all([m["role"] for m in r["messages"]].count("assistant") == 1 for r in records)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            {"teacher": "calculator-sovler"},
            "spec.policy.teacher 'calculator-sovler' is neither a built-in agent teacher",
        ),
        (
            {"teacher": "calculator-solver", "options": {"tool_share": 2}},
            "spec.policy.options of agent teacher calculator-solver: tool_share must be from "
            "0 to 1, got 2",
        ),
    ],
)
def test_a_bad_teacher_exits_2_naming_the_field(
    platform: Platform, policy: dict[str, Any], expected: str
) -> None:
    run_id = platform.submit(
        "rollout", policy=policy, output="bad", config={"episodes": CALCULATOR}
    )
    finished = platform.start("episodes", run_id).result()
    assert finished.returncode == 2, finished.output
    assert expected in finished.output
