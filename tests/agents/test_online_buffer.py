"""The sample buffer and the policy versions it keys on: groups out oldest first and once
only, the stale ones dropped and counted, and the state that a checkpoint carries."""

import json

import pytest

from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EndReason, EpisodeRecord, TurnRecord
from crucible.online_rl.buffer import Discard, Group, SampleBuffer


def episode(index: int, version: int | None, reward: float = 0.0) -> EpisodeRecord:
    return EpisodeRecord(
        index=index,
        seed=0,
        environment="letter_or_digit",
        task={"kind": "digit"},
        messages=[{"role": "user", "content": "Reply with one digit."}],
        turns=[
            TurnRecord(
                prompt_ids=[256, 10, 11],
                completion_ids=[52],
                logprobs=[-5.5],
                finish_reason="length",
                message={"role": "assistant", "content": "4"},
                reward=reward,
            )
        ],
        reward=reward,
        end=EndReason.DONE,
        policy=None if version is None else PolicyVersion(version, checkpoint_id=3),
    )


def group(name: str, version: int, size: int = 2) -> Group:
    return Group(name, tuple(episode(i, version, reward=i) for i in range(size)))


def test_a_policy_version_is_stamped_into_the_json_record() -> None:
    record = episode(0, 2)
    line = json.dumps(record.to_record())
    assert json.loads(line)["policy"] == {"update": 2, "checkpoint_id": 3, "checkpoint_step": None}
    assert EpisodeRecord.from_record(json.loads(line)) == record
    # A record from before online RL (or a scripted policy's) has none.
    unversioned = episode(0, None).to_record()
    del unversioned["policy"]
    assert EpisodeRecord.from_record(unversioned).policy is None
    assert PolicyVersion(2, 3, 100).next() == PolicyVersion(3, 3, 100)
    with pytest.raises(ValueError, match="update must be an integer >= 0, got -1"):
        PolicyVersion(-1)


def test_groups_come_out_oldest_first_and_never_twice() -> None:
    buffer = SampleBuffer(max_staleness=1)
    for name in ("0/0", "0/1", "1/0"):
        assert buffer.add(group(name, version=int(name[0])))
    assert [g.id for g in buffer.take(2, trainer_version=1)] == ["0/0", "0/1"]
    assert [g.id for g in buffer.take(5, trainer_version=1)] == ["1/0"]
    assert buffer.take(5, trainer_version=1) == []
    # A batch delivered again is not trained again.
    assert not buffer.add(group("0/0", version=0))
    assert buffer.take(5, trainer_version=1) == []
    assert (buffer.accepted, buffer.trained) == (6, 6)
    assert buffer.discarded == {Discard.DUPLICATE: 2}


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_samples_older_than_max_staleness_are_dropped_and_counted(max_staleness: int) -> None:
    buffer = SampleBuffer(max_staleness=max_staleness)
    for version in range(4):
        buffer.add(group(f"{version}/0", version=version, size=3))
    taken = buffer.take(4, trainer_version=3)
    assert [3 - g.version for g in taken] == list(range(max_staleness, -1, -1))
    assert buffer.discarded[Discard.STALE] == 3 * (3 - max_staleness)
    assert buffer.trained == 3 * (max_staleness + 1)


def test_a_group_needs_two_episodes_and_one_version() -> None:
    buffer = SampleBuffer(max_staleness=0)
    assert not buffer.add(Group("0/0", (episode(0, 0),)))
    assert buffer.discarded == {Discard.TOO_SMALL: 1}
    assert len(buffer) == 0
    with pytest.raises(ValueError, match="mixes policy versions \\[0, 1\\]"):
        Group("0/1", (episode(0, 0), episode(1, 1)))
    with pytest.raises(ValueError, match="needs the policy version"):
        Group("0/2", (episode(0, None), episode(1, None)))
    with pytest.raises(ValueError, match=r"max_staleness must be an integer >= 0.*-1"):
        SampleBuffer(max_staleness=-1)


def test_the_state_survives_json_and_resumes_where_it_was() -> None:
    first = SampleBuffer(max_staleness=1)
    for name in ("0/0", "0/1", "1/0", "1/1"):
        first.add(group(name, version=int(name[0])))
    first.take(1, trainer_version=1)
    state = json.loads(json.dumps(first.state_dict()))

    resumed = SampleBuffer(max_staleness=1)
    resumed.load_state_dict(state)
    assert not resumed.add(group("0/0", version=0))  # trained before the checkpoint
    assert [g.id for g in resumed.take(5, trainer_version=1)] == ["0/1", "1/0", "1/1"]
    assert [g.id for g in first.take(5, trainer_version=1)] == ["0/1", "1/0", "1/1"]
    assert resumed.take(5, trainer_version=1) == []
    assert (resumed.accepted, resumed.trained) == (first.accepted, first.trained) == (8, 8)
