"""The sampling side of online RL in process: its own copy of the policy, an engine over it,
and the weight update that brings the trainer's new weights into the copy.

The copy is a second module on the trainer's device. The trainer never shares its module
with the engine, so generation may run in a thread while the trainer steps, and the
weight update is a real transfer that the first update of a synchronous round can check
(`health.check_agreement`). `load_weights` copies every parameter and buffer in place
(`copy_` under no_grad), which is how weights reach an engine that holds a reference to
its model; it must run while no episode is being generated.

An engine caches the keys and values of prompt prefixes it has seen (the K samples of a
task, the turns of an episode share them): computed with the old weights, they would
be wrong under the new ones, so a weight update resets that cache. The engine itself, its
KV pool and its CUDA graphs, stays from one version to the next.
"""

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from crucible.agents.loading import EnvironmentSource
from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EpisodeRecord
from crucible.agents.runner import run_episodes
from crucible.agents.sandbox import Sandbox
from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig
from crucible.engine.engine import Engine
from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer


class Generator:
    def __init__(
        self,
        model: LanguageModel,
        tokenizer: Tokenizer,
        source: EnvironmentSource,
        *,
        version: PolicyVersion,
        engine_config: EngineConfig,
        episode_config: EpisodeConfig,
        sandbox: Sandbox,
    ) -> None:
        """model: the trainer's; the generator samples from a copy of it as it is now,
        which is policy `version`."""
        self.model: LanguageModel = copy.deepcopy(model).eval()
        self.model.requires_grad_(False)
        self.tokenizer = tokenizer
        self.source = source
        self.version = version
        self.engine_config = engine_config
        self.episode_config = episode_config
        self.sandbox = sandbox
        self._engine: Engine | None = None

    def generate(
        self, tasks: Sequence[dict[str, Any]], *, seed: int, first_index: int = 0
    ) -> list[EpisodeRecord]:
        """One episode per task, each stamped with the version of the weights it ran on;
        numbered from `first_index` (`runner.run_episodes`)."""
        if self._engine is None:
            self._engine = Engine(self.model, self.tokenizer, self.engine_config)
        records = run_episodes(
            self._engine,
            self.source,
            tasks,
            seed=seed,
            config=self.episode_config,
            sandbox=self.sandbox,
            first_index=first_index,
        )
        return [replace(r, policy=self.version) for r in records]

    def load_weights(
        self, weights: nn.Module | Mapping[str, torch.Tensor], version: PolicyVersion
    ) -> float:
        """Copy `weights` (a model's parameters and buffers, or a `weights_snapshot` of them)
        into the generator's copy, which becomes policy `version`; returns the seconds it
        took."""
        started = time.perf_counter()
        source = tensors_of(weights) if isinstance(weights, nn.Module) else weights
        target = tensors_of(self.model)
        if source.keys() != target.keys():
            raise ValueError(
                "the trainer's model and the generator's copy have different parameters: "
                f"{sorted(source.keys() ^ target.keys())[:5]}"
            )
        with torch.no_grad():
            for name, tensor in target.items():
                tensor.copy_(source[name])
        if target and next(iter(target.values())).is_cuda:
            torch.cuda.synchronize()  # the copies are queued: time them done
        if self._engine is not None:
            self._engine.reset_prefix_cache()  # they hold keys and values of the old weights
        self.version = version
        return time.perf_counter() - started

    def close(self) -> None:
        """Nothing to stop: the copy goes with the object (`RemoteGenerator` has a process)."""


def weights_snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of `model`'s parameters and buffers as they are now, on their device: a
    policy version that a generator busy with an older one loads later, while the trainer
    goes on changing the model."""
    with torch.no_grad():
        return {name: tensor.detach().clone() for name, tensor in tensors_of(model).items()}


def tensors_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters (a tied weight once) and buffers by name."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}
