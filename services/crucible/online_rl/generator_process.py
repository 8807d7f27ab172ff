"""`python -m crucible.online_rl.generator_process`: a generator of online RL in a process of
its own, the other end of `remote_generator.RemoteGenerator`.

Started by the trainer, it listens on a loopback port, prints the port on its first line of
output, and takes one connection, authenticated with the key in CRUCIBLE_GENERATOR_KEY (hex;
the environment, not the command line, so that no process listing shows it). With
`--pod`, started by the operator as a pod of the run (`generator: pod`), it listens on the
pod's address instead, writes it where the trainer looks (`generator_endpoints.py`), and
takes the first connection that answers the attempt's key. The first message builds a
`Generator` over the model the trainer saved; then each request is answered in order:
`load` a policy version from its safetensors file, `generate` a batch, `stop`. A request
that fails is answered with the error's text, and the process goes on; a connection that
ends ends the process.
"""

import os
import sys
import traceback
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from crucible.domain.resources import GENERATOR_ENDPOINTS_ENV, GENERATOR_INDEX_ENV, POD_IP_ENV
from crucible.online_rl.generator_endpoints import endpoint_key_from_env, write_endpoint

KEY_ENV = "CRUCIBLE_GENERATOR_KEY"


def main() -> None:
    key = bytes.fromhex(os.environ.pop(KEY_ENV))
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        print(listener.address[1], flush=True)
        with listener.accept() as connection:
            serve(connection)


def main_in_pod() -> None:
    """A generator pod: the run's token, id and attempt, its index and address, all from
    the environment the operator gives it."""
    key = endpoint_key_from_env()
    host = os.environ.get(POD_IP_ENV) or "127.0.0.1"
    with Listener((host, 0), authkey=key) as listener:
        path = write_endpoint(
            Path(os.environ[GENERATOR_ENDPOINTS_ENV]),
            int(os.environ[GENERATOR_INDEX_ENV]),
            host,
            listener.address[1],
        )
        print(f"generator listening on {host}:{listener.address[1]} ({path})", flush=True)
        while True:
            try:
                connection = listener.accept()
            except (AuthenticationError, EOFError, OSError):
                continue  # not this attempt's trainer: wait for it
            with connection:
                serve(connection)
            return


def serve(connection: Connection) -> None:
    generator = None
    while True:
        try:
            request, *arguments = connection.recv()
        except EOFError:
            return  # the trainer is gone
        if request == "stop":
            connection.send(("ok", None))
            return
        try:
            if request == "start":
                generator = _start(*arguments)
                answer: Any = None
            elif generator is None:
                raise RuntimeError(f"{request!r} before the generator was started")
            elif request == "load":
                answer = _load(generator, *arguments)
            elif request == "generate":
                tasks, seed, first_index = arguments
                answer = generator.generate(tasks, seed=seed, first_index=first_index)
            else:
                raise RuntimeError(f"unknown request {request!r}")
        except Exception:  # every failure goes back to the trainer
            connection.send(("error", traceback.format_exc()))
            continue
        connection.send(("ok", answer))


def _start(model_path: str, settings: dict[str, Any]) -> Any:
    import torch

    from crucible.agents.sandbox import Sandbox
    from crucible.online_rl.generator import Generator

    torch.set_num_threads(settings["threads"])
    # The trainer's own pickle of its model, in a directory only the two processes use.
    model = torch.load(model_path, map_location=settings["device"], weights_only=False)
    return Generator(
        model,
        settings["tokenizer"],
        settings["source"],
        version=settings["version"],
        engine_config=settings["engine_config"],
        episode_config=settings["episode_config"],
        sandbox=Sandbox(settings["sandbox_limits"]),
    )


def _load(generator: Any, path: str, version: Any) -> float:
    from safetensors.torch import load_file

    device = next(iter(generator.model.parameters())).device
    return float(generator.load_weights(load_file(path, device=str(device)), version))


if __name__ == "__main__":
    main_in_pod() if "--pod" in sys.argv[1:] else main()
    sys.exit(0)
