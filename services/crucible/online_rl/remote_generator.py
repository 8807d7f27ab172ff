"""The sampling side of online RL in a process of its own (`generator: process`): each
policy version reaches it through storage, one safetensors file, and the requests and
episodes go over a socket (`multiprocessing.connection`, authenticated with a key only the
two processes hold).

Why a process: the in-process generator shares the trainer's interpreter and so its GIL,
and the engine's scheduling and the trainer's step take turns at it. A generator needs
nothing of the trainer but a directory both read and an address, so the same class talks
to a generator pod (`generator: pod`): given its `Endpoint`, it connects instead of
starting a process (docs/agents.md, "Generators in pods of their own").

It has `Generator`'s interface (`version`, `generate`, `load_weights`) and `close`. The
same weights, seeds and engine give the same records, bit for bit, as the generator in
process.
"""

import os
import secrets
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crucible.agents.loading import EnvironmentSource
from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EpisodeRecord
from crucible.agents.sandbox import Sandbox
from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig
from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer
from crucible.online_rl.generator import tensors_of
from crucible.online_rl.generator_endpoints import Endpoint
from crucible.online_rl.generator_process import KEY_ENV

START_TIMEOUT_S = 300.0
"""How long the generator process may take to start and build its model."""


class GeneratorProcessError(RuntimeError):
    """The generator process failed a request, or is gone."""


class GeneratorUnavailable(GeneratorProcessError):
    """The generator is gone, or did not answer in time: another may play its share."""


class RemoteGenerator:
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
        directory: Path,
        endpoint: Endpoint | None = None,
    ) -> None:
        """Start the process with a copy of `model` as it is now, which is policy
        `version`; `directory` holds the files the weights go through. The process runs its
        tool calls in a sandbox of its own with `sandbox`'s limits. With `endpoint`, the
        generator is one started elsewhere (a generator pod) listening there, and
        `directory` must be one it reads too."""
        self.version = version
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._latest: Path | None = None
        self._process: subprocess.Popen[str] | None = None
        if endpoint is None:
            key = secrets.token_bytes(32)
            self._process = subprocess.Popen(  # our own interpreter and module
                [sys.executable, "-m", "crucible.online_rl.generator_process"],
                env={**os.environ, KEY_ENV: key.hex()},
                stdout=subprocess.PIPE,
                text=True,
            )
            self._stop = weakref.finalize(self, _kill, self._process)
            assert self._process.stdout is not None
            port = self._process.stdout.readline().strip()
            if not (port.isascii() and port.isdigit()):
                self._process.wait(30)
                raise GeneratorProcessError(
                    f"the generator process did not start (exit code {self._process.returncode})"
                )
            endpoint = Endpoint("127.0.0.1", int(port), key)
            self.where = "the generator process"
        else:
            self.where = f"the generator at {endpoint}"
        self._connection: Connection = Client((endpoint.host, endpoint.port), authkey=endpoint.key)
        # Named by the endpoint: several generators may start from one directory.
        model_path = directory / f"model-{endpoint.host}-{endpoint.port}.pt"
        torch.save(model, model_path)
        device = next(iter(model.parameters())).device
        settings = {
            "tokenizer": tokenizer,
            "source": source,
            "version": version,
            "engine_config": engine_config,
            "episode_config": episode_config,
            "sandbox_limits": sandbox.limits,
            "device": str(device),
            "threads": torch.get_num_threads(),
        }
        self._call("start", str(model_path), settings, timeout=START_TIMEOUT_S)
        model_path.unlink()

    def generate(
        self,
        tasks: Sequence[dict[str, Any]],
        *,
        seed: int,
        first_index: int = 0,
        timeout: float | None = None,
    ) -> list[EpisodeRecord]:
        """One episode per task, each stamped with the version of the weights it ran on;
        numbered from `first_index`. `GeneratorUnavailable` past `timeout` seconds."""
        records: list[EpisodeRecord] = self._call(
            "generate", list(tasks), seed, first_index, timeout=timeout
        )
        return records

    def load_weights(
        self, weights: nn.Module | Mapping[str, torch.Tensor], version: PolicyVersion
    ) -> float:
        """Write `weights` to a file of this version and have the process load it; returns
        the seconds both took. The file of the version before is removed once this one is
        loaded."""
        started = time.perf_counter()
        path = write_weights(weights, version, self.directory)
        self.load_file(path, version)
        if self._latest is not None and self._latest != path:
            self._latest.unlink(missing_ok=True)
        self._latest = path
        return time.perf_counter() - started

    def load_file(
        self, path: Path, version: PolicyVersion, *, timeout: float | None = None
    ) -> None:
        """Have the process load policy `version` from `path` (`write_weights`'s file),
        which the caller keeps and removes."""
        self._call("load", str(path), version, timeout=timeout)
        self.version = version

    def close(self) -> None:
        """Stop the generator (waiting for a process of ours a little) and remove the
        weights' file."""
        try:
            self._connection.send(("stop",))
            self._connection.recv()
            if self._process is not None:
                self._process.wait(30)
        except (OSError, EOFError, subprocess.TimeoutExpired):
            pass
        self._connection.close()
        if self._process is not None:
            self._stop()
        if self._latest is not None:
            self._latest.unlink(missing_ok=True)

    def abandon(self) -> None:
        """Let go of a generator that stopped answering, without waiting for it: the
        connection closed (a generator pod then ends), a process of ours killed."""
        self._connection.close()
        if self._process is not None:
            self._stop()

    def _call(self, request: str, *arguments: Any, timeout: float | None = None) -> Any:
        try:
            self._connection.send((request, *arguments))
            if timeout is not None and not self._connection.poll(timeout):
                raise GeneratorUnavailable(
                    f"{self.where} did not answer {request!r} in {timeout:g} s"
                )
            status, answer = self._connection.recv()
        except (OSError, EOFError):
            code = "" if self._process is None else f" (exit code {self._process.poll()})"
            raise GeneratorUnavailable(f"{self.where} is gone{code} during {request!r}") from None
        if status == "error":
            raise GeneratorProcessError(f"{self.where} failed {request!r}:\n{answer}")
        return answer


def write_weights(
    weights: nn.Module | Mapping[str, torch.Tensor], version: PolicyVersion, directory: Path
) -> Path:
    """`weights` as `policy-<update>.safetensors` in `directory`, renamed into place whole,
    for generator processes to load."""
    from safetensors.torch import save_file

    source = tensors_of(weights) if isinstance(weights, nn.Module) else weights
    path = directory / f"policy-{version.update:06d}.safetensors"
    partial = path.with_suffix(".partial")
    save_file({name: t.detach().contiguous() for name, t in source.items()}, partial)
    os.replace(partial, path)
    return path


def _kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
