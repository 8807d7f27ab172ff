"""A generator that falls behind the others, and one that stops answering
(`online_rl/generator_pool.py`): the first is slowed for real (its process stopped and
continued by signals, nine tenths of the time), the second stopped for good. The slow one
is noted with its rate and gets a smaller share; the silent one is dropped after
`generator_timeout_s` and its share played by the other; either way every episode is the one
a single generator plays. The run fails only when no generator is left."""

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from crucible.agents.records import EpisodeRecord
from crucible.config.online_rl import EpisodeConfig
from crucible.online_rl.generator_pool import GeneratorPool, shares, weighted_shares
from crucible.online_rl.health import RoundHealth
from crucible.online_rl.loop import OnlineRL
from crucible.online_rl.remote_generator import GeneratorProcessError
from tests.agents.online_runs import config, online
from tests.agents.test_generator_process import episodes_of

LONGER = EpisodeConfig(max_turns=1, max_tokens_per_turn=24)
"""Replies long enough that a share takes a while to play."""


def test_shares_follow_the_weights_and_each_keeps_a_group() -> None:
    assert weighted_shares(0, 64, 8, [1.0, 1.0]) == shares(64, 8, 2) == [(0, 32), (32, 64)]
    assert weighted_shares(0, 64, 8, [3.0, 1.0]) == [(0, 48), (48, 64)]
    # Far behind, it still plays one group, so its rate is measured again.
    assert weighted_shares(0, 64, 8, [100.0, 1.0]) == [(0, 56), (56, 64)]
    assert weighted_shares(16, 40, 8, [1.0, 1.0]) == [(16, 32), (32, 40)]
    with pytest.raises(ValueError, match=r"share weights must be positive, got \[1.0, 0.0\]"):
        weighted_shares(0, 16, 8, [1.0, 0.0])


@contextmanager
def slowed(pid: int, *, stopped_s: float = 0.09, running_s: float = 0.01) -> Iterator[None]:
    """Process `pid` stopped (SIGSTOP) `stopped_s` of every `stopped_s + running_s`.

    Nine tenths: on a loaded machine (CI runs the cluster tests beside these) the other
    generator gets only part of a core too, and stopping this one three quarters of the time
    left it above half the other's rate, not behind."""
    done = threading.Event()

    def cycle() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stopped_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(running_s)

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        os.kill(pid, signal.SIGCONT)


def pid_of(rl: OnlineRL, number: int) -> int:
    assert isinstance(rl.generator, GeneratorPool)
    process = rl.generator.live[number]._process
    assert process is not None
    return process.pid


def alone(rounds: int) -> list[tuple[int, list[EpisodeRecord]]]:
    """The episodes one generator plays."""
    batches: list[tuple[int, list[EpisodeRecord]]] = []
    rl = online(config(episode=LONGER, generator="process"))
    rl.on_batch = lambda index, records: batches.append((index, records))
    try:
        rl.run(rounds)
    finally:
        rl.close()
    return batches


def test_a_generator_behind_the_other_is_noted_and_given_a_smaller_share() -> None:
    batches: list[tuple[int, list[EpisodeRecord]]] = []
    rl = online(config(episode=LONGER, generator="process", generators=2))
    rl.on_batch = lambda index, records: batches.append((index, records))
    try:
        first = rl.run(1)[0]
        assert isinstance(rl.generator, GeneratorPool)
        assert rl.generator.played == {0: 16, 1: 16}  # equal shares while none is behind
        assert first.metrics()["generators_behind"] == 0
        with slowed(pid_of(rl, 1)):
            behind = rl.run(1)[0]
            assert behind.generators == 2
            assert behind.metrics()["generators_behind"] == 1
            [note] = behind.generator_notes
            assert note.kind == "behind" and note.generator == 1
            assert note.detail.startswith("generator 1 is behind: ")
            rl.run(1)
            assert rl.generator.played[1] < rl.generator.played[0]
            assert sum(rl.generator.played.values()) == 32
    finally:
        rl.close()
    assert episodes_of(batches) == episodes_of(alone(3))


def test_a_generator_that_stops_answering_is_dropped_and_its_share_played_again() -> None:
    batches: list[tuple[int, list[EpisodeRecord]]] = []
    rl = online(config(episode=LONGER, generator="process", generators=2, generator_timeout_s=2.0))
    rl.on_batch = lambda index, records: batches.append((index, records))
    health: list[RoundHealth] = []
    try:
        health += rl.run(1)
        os.kill(pid_of(rl, 1), signal.SIGSTOP)  # alive, silent
        health += rl.run(2)
        [note] = health[1].generator_notes
        assert note.kind == "dropped" and note.generator == 1
        assert note.detail == (
            "generator 1 dropped from the pool (1 left): the generator process did not "
            "answer 'generate' in 2 s"
        )
        assert health[1].metrics()["generators_dropped"] == 1
        assert [h.generators for h in health] == [2, 1, 1]
        assert rl.generator.played == {0: 32}  # type: ignore[union-attr]

        os.kill(pid_of(rl, 0), signal.SIGKILL)  # and the last one is gone
        with pytest.raises(GeneratorProcessError, match="no generator is left in the pool"):
            rl.run(1)
    finally:
        rl.close()
    assert episodes_of(batches) == episodes_of(alone(3))


def test_the_generator_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="generator_timeout_s must be a number of seconds > 0"):
        config(generator="process", generator_timeout_s=0)
