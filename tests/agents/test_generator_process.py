"""Online RL with its generator in a process of its own (`generator: process`): each policy
version goes to it through a safetensors file, the batches come back over a socket, and the
run is the in-process run to the bit. A generator process that dies fails the round naming
it; a bad setting is refused."""

import os
import signal
from pathlib import Path

import pytest
import torch

from crucible.agents.online import OnlineRL
from crucible.agents.policy import PolicyVersion
from crucible.agents.remote_generator import GeneratorProcessError, RemoteGenerator
from crucible.workloads.tokenizer import ByteTokenizer
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


@pytest.mark.parametrize("max_staleness", [0, 2])
def test_a_generator_process_gives_the_in_process_run_bit_for_bit(max_staleness: int) -> None:
    here, here_weights = records_and_weights(online(config(max_staleness=max_staleness)), 4)
    there, there_weights = records_and_weights(
        online(config(max_staleness=max_staleness, generator="process")), 4
    )
    assert there == here
    assert all(torch.equal(there_weights[k], here_weights[k]) for k in here_weights)


def test_each_version_goes_through_one_file_that_the_next_replaces(tmp_path: Path) -> None:
    rl = OnlineRL(
        config(generator="process"), tiny_model(), ByteTokenizer(), digits(), exchange_dir=tmp_path
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
        assert isinstance(rl.generator, RemoteGenerator)
        os.kill(rl.generator._process.pid, signal.SIGKILL)
        rl.generator._process.wait()
        with pytest.raises(GeneratorProcessError, match=r"gone \(exit code -9\)"):
            rl.run(1)
    finally:
        rl.close()


def test_an_unknown_generator_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="generator must be one of thread, process, got 'pod'"):
        config(generator="pod")
