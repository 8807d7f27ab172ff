"""How a trainer finds and trusts generators it did not start (`generator: pod`): each
generator pod listens on its pod's address and writes that address, as
`<index>.json`, into a directory of the run's outputs on the shared volume that every
pod of the attempt mounts; the trainer waits for the file of each generator it needs.

The connection is authenticated (`multiprocessing.connection`'s HMAC challenge) with a key
both sides derive from what the operator already gives every pod of the run, its API
token, bound to the run and the attempt: nothing secret is written to the volume or to a
pod spec, and a generator of an earlier attempt does not answer this one's trainer.
"""

import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    key: bytes

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def endpoint_key(token: str, run_id: int, attempt: int) -> bytes:
    """The connection's key for one attempt of one run."""
    message = f"crucible-generator:{run_id}:{attempt}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).digest()


def endpoint_key_from_env() -> bytes:
    """This attempt's key, from the token, run id and attempt the operator gives every pod
    of the run (trainer and generators alike)."""
    return endpoint_key(
        os.environ["CRUCIBLE_TOKEN"],
        int(os.environ["CRUCIBLE_RUN_ID"]),
        int(os.environ["CRUCIBLE_ATTEMPT"]),
    )


def write_endpoint(directory: Path, index: int, host: str, port: int) -> Path:
    """Generator `index`'s address, renamed into place whole."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{index}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"host": host, "port": port}))
    os.replace(partial, path)
    return path


def wait_for_endpoint(directory: Path, index: int, key: bytes, *, timeout: float) -> Endpoint:
    """Generator `index`'s endpoint once its file is there; TimeoutError naming the file
    after `timeout` seconds (its pod did not start, or cannot write the volume)."""
    path = directory / f"{index}.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"generator {index} did not write its address to {path} in {timeout:.0f} s"
            )
        time.sleep(0.5)
    found = json.loads(path.read_text())
    return Endpoint(str(found["host"]), int(found["port"]), key)
