"""Online RL with its generator in a process of its own (`generator: process`): each policy
version goes to it through a safetensors file, the batches come back over a socket, and the
run is the in-process run to the bit; several processes (`generators`) share each batch
and play the episodes one would. A generator process that dies fails the round naming it;
a bad setting is refused."""

import os
import signal
import subprocess
import sys
from functools import partial
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path

import pytest
import torch

from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EpisodeRecord
from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.generator_endpoints import endpoint_key, wait_for_endpoint
from crucible.online_rl.generator_pool import GeneratorPool, shares
from crucible.online_rl.loop import OnlineRL
from crucible.online_rl.remote_generator import GeneratorProcessError
from tests.agents.online_runs import config, digits, online, tiny_model


def records_and_weights(rl: OnlineRL, rounds: int) -> tuple[list[object], dict[str, torch.Tensor]]:
    batches: list[object] = []
    rl.on_batch = lambda index, records: batches.append((index, records))
    try:
        health = rl.run(rounds)
    finally:
        rl.close()
    rewards = [(h.mean_reward, h.loss, h.trained_groups) for h in health]
    return [rewards, batches], rl.learner.model.state_dict()


def episodes_of(batches: list[tuple[int, list[EpisodeRecord]]]) -> list[tuple[object, ...]]:
    """What a policy played: every episode's number, tokens, reward and version."""
    return [
        (index, r.index, [t.completion_ids for t in r.turns], r.reward, r.policy)
        for index, records in batches
        for r in records
    ]


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_three_generator_processes_play_the_episodes_one_plays(max_staleness: int) -> None:
    one: list[tuple[int, list[EpisodeRecord]]] = []
    three: list[tuple[int, list[EpisodeRecord]]] = []
    for count, batches in ((1, one), (3, three)):
        rl = online(config(max_staleness=max_staleness, generator="process", generators=count))
        rl.on_batch = lambda index, records, into=batches: into.append((index, records))
        try:
            rl.run(3)
        finally:
            rl.close()
    assert [r.index for _, records in three for r in records] == list(range(32)) * 3
    assert episodes_of(three) == episodes_of(one)
    # The engine's sums differ with what shares a batch (docs/agents.md, "On the real
    # node"): the logprobs agree to float rounding, not to the bit.
    for (_, mine), (_, theirs) in zip(three, one, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            for turn_a, turn_b in zip(a.turns, b.turns, strict=True):
                assert turn_a.logprobs == pytest.approx(turn_b.logprobs, abs=1e-5)


def test_a_batch_is_cut_between_groups_as_evenly_as_they_allow() -> None:
    assert shares(32, 8, 1) == [(0, 32)]
    assert shares(32, 8, 3) == [(0, 16), (16, 24), (24, 32)]
    assert shares(16, 8, 3) == [(0, 8), (8, 16), (16, 16)]
    with pytest.raises(ValueError, match="30 played tasks are not whole groups of 8"):
        shares(30, 8, 2)


@pytest.mark.parametrize("max_staleness", [0, 2])
def test_a_generator_process_gives_the_in_process_run_bit_for_bit(max_staleness: int) -> None:
    here, here_weights = records_and_weights(online(config(max_staleness=max_staleness)), 4)
    there, there_weights = records_and_weights(
        online(config(max_staleness=max_staleness, generator="process")), 4
    )
    assert there == here
    assert all(torch.equal(there_weights[k], here_weights[k]) for k in here_weights)


@pytest.mark.parametrize("generators", [1, 2])
def test_each_version_goes_through_one_file_that_the_next_replaces(
    tmp_path: Path, generators: int
) -> None:
    rl = OnlineRL(
        config(generator="process", generators=generators),
        tiny_model(),
        ByteTokenizer(),
        digits(),
        exchange_dir=tmp_path,
    )
    try:
        health = rl.run(3)
        assert rl.generator.version == PolicyVersion(3)
        assert [p.name for p in tmp_path.iterdir()] == ["policy-000003.safetensors"]
        assert all(h.weight_update_s > 0 for h in health)
    finally:
        rl.close()
    assert list(tmp_path.iterdir()) == []  # the given directory stays, emptied


def test_a_generator_process_that_dies_fails_the_round_naming_it() -> None:
    rl = online(config(generator="process"))
    try:
        rl.run(1)
        assert isinstance(rl.generator, GeneratorPool)
        process = rl.generator.generators[0]._process
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        with pytest.raises(GeneratorProcessError, match=r"gone \(exit code -9\)"):
            rl.run(1)
    finally:
        rl.close()


def test_an_unknown_generator_is_refused_naming_it() -> None:
    with pytest.raises(
        ValueError, match="generator must be one of thread, process, pod, got 'node'"
    ):
        config(generator="node")


def test_several_generators_need_processes_and_groups_to_share() -> None:
    with pytest.raises(ValueError, match="generators=2 needs generator: process or pod"):
        config(generators=2)
    with pytest.raises(ValueError, match="generators=5 is more than the 4 tasks of a round"):
        config(generator="process", generators=5)
    with pytest.raises(ValueError, match="generators must be a positive integer, got 0"):
        config(generator="process", generators=0)


def start_generator_pod(directory: Path, index: int, token: str) -> subprocess.Popen[str]:
    """`python -m crucible.online_rl.generator_process --pod` with the environment the operator
    gives a generator pod (its address: this machine's loopback)."""
    environment = {
        **os.environ,
        "CRUCIBLE_TOKEN": token,
        "CRUCIBLE_RUN_ID": "7",
        "CRUCIBLE_ATTEMPT": "2",
        "CRUCIBLE_GENERATOR_ENDPOINTS": str(directory),
        "CRUCIBLE_GENERATOR_INDEX": str(index),
        "POD_IP": "127.0.0.1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "crucible.online_rl.generator_process", "--pod"],
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_generators_started_elsewhere_are_found_by_their_addresses_and_play_alike(
    tmp_path: Path,
) -> None:
    endpoints = tmp_path / "generators" / "attempt-2"
    pods = [start_generator_pod(endpoints, index, "s3cret") for index in range(2)]
    try:
        # A stranger without the attempt's key is turned away; the generator waits on.
        stranger = wait_for_endpoint(endpoints, 0, endpoint_key("guess", 7, 2), timeout=60)
        with pytest.raises(AuthenticationError):
            Client((stranger.host, stranger.port), authkey=stranger.key)
        key = endpoint_key("s3cret", 7, 2)
        batches: list[tuple[int, list[EpisodeRecord]]] = []
        rl = OnlineRL(
            config(generator="pod", generators=2),
            tiny_model(),
            ByteTokenizer(),
            digits(),
            exchange_dir=tmp_path / "weights",
            endpoints=partial(wait_for_endpoint, endpoints, key=key, timeout=60),
        )
        rl.on_batch = lambda index, records: batches.append((index, records))
        try:
            rl.run(2)
        finally:
            rl.close()
        assert [p.wait(30) for p in pods] == [0, 0]  # closed by the trainer, they end
    finally:
        for pod in pods:
            pod.kill()
    alone: list[tuple[int, list[EpisodeRecord]]] = []
    rl = online(config(generator="process"))
    rl.on_batch = lambda index, records: alone.append((index, records))
    try:
        rl.run(2)
    finally:
        rl.close()
    assert episodes_of(batches) == episodes_of(alone)


def test_generator_pods_in_the_local_mode_are_processes() -> None:
    rl = online(config(generator="pod", generators=2))
    try:
        rl.run(1)
        assert isinstance(rl.generator, GeneratorPool)
        assert all(g._process is not None for g in rl.generator.generators)
    finally:
        rl.close()
