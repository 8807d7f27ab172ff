"""`python -m crucible.agents.generator_process`: a generator of online RL in a process of
its own, the other end of `remote_generator.RemoteGenerator`.

It listens on a loopback port, prints the port on its first line of output, and takes one
connection, authenticated with the key in CRUCIBLE_GENERATOR_KEY (hex; the environment, not
the command line, so that no process listing shows it). The first message builds a
`Generator` over the model the trainer saved; then each request is answered in order:
`load` a policy version from its safetensors file, `generate` a batch, `stop`. A request
that fails is answered with the error's text, and the process goes on; a connection that
ends ends the process.
"""

import os
import sys
import traceback
from multiprocessing.connection import Connection, Listener
from typing import Any

KEY_ENV = "CRUCIBLE_GENERATOR_KEY"


def main() -> None:
    key = bytes.fromhex(os.environ.pop(KEY_ENV))
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        print(listener.address[1], flush=True)
        with listener.accept() as connection:
            serve(connection)


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

    from crucible.agents.generator import Generator
    from crucible.agents.sandbox import Sandbox

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
    main()
    sys.exit(0)
