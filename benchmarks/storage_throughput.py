"""Checkpoint save and load throughput of a 1 GiB state through the SDK: the test stack's S3
server (SeaweedFS, scripts/objectstore) against a directory on this machine's disk (what a
shared volume is to a pod on this machine).

Each sample is `run.save_checkpoint` (DCP's writer, the digest over what was written, the
registration) and `run.load_checkpoint` (the digest check, DCP's reader) of one float32
tensor of 1 GiB, in the same `crucible server`'s run; the two kinds alternate, `--samples`
of each. The store runs on the same 2 cores as the benchmark, so both sides share them.

    eval "$(scripts/objectstore up)"
    .venv/bin/python -m benchmarks.storage_throughput --samples 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from benchmarks.operator_bench import write
from tests.conftest import training_run
from tests.object_store import object_store
from tests.servers import local_server

import crucible
from crucible.artifacts import remote
from crucible.client import CrucibleClient
from crucible.schemas.runs import AttemptStart, RunSubmit

GIB = 1024**3


def sample(run: Any, step: int, state: dict[str, torch.Tensor]) -> dict[str, float]:
    started = time.perf_counter()
    record = run.save_checkpoint(step, state)
    saved = time.perf_counter() - started
    target = {"weights": torch.empty_like(state["weights"])}
    started = time.perf_counter()
    loaded_step = run.load_checkpoint(target, checkpoint_id=record.id)
    loaded = time.perf_counter() - started
    assert loaded_step == step
    assert torch.equal(target["weights"], state["weights"])
    return {"save_s": saved, "load_s": loaded}


def summary(samples: list[dict[str, float]], size: int) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": samples}
    for key in ("save_s", "load_s"):
        values = [s[key] for s in samples]
        out[key] = {
            "median": round(statistics.median(values), 2),
            "min": round(min(values), 2),
            "max": round(max(values), 2),
        }
        out[key.replace("_s", "_mib_per_s")] = round(size / 2**20 / statistics.median(values), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--gib", type=float, default=1.0)
    args = parser.parse_args()
    store = object_store()
    os.environ.update(store.client_env)
    elements = int(args.gib * GIB) // 4
    state = {"weights": torch.randn(elements, generator=torch.Generator().manual_seed(0))}
    size = state["weights"].numel() * 4
    with tempfile.TemporaryDirectory(prefix="crucible-storage-bench-") as tmp:
        work = Path(tmp)
        with local_server(work, command="server") as server:
            os.environ.update({"CRUCIBLE_API_URL": server.url, "CRUCIBLE_TOKEN": server.token})
            with CrucibleClient(server.url, server.token) as api:
                manifest = training_run(name="throughput", experiment="bench")
                submitted = api.submit_run(
                    RunSubmit.model_validate({"project": "default", "manifest": manifest})
                )
                api.start_attempt(submitted.id, AttemptStart())
            prefix = store.prefix("throughput")
            uris = {"s3": prefix, "volume": (work / "volume").as_uri()}
            runs = {
                kind: crucible.init(run_id=submitted.id, attempt=1, checkpoint_uri=uri)
                for kind, uri in uris.items()
            }
            samples: dict[str, list[dict[str, float]]] = {kind: [] for kind in uris}
            step = 0
            for _ in range(args.samples):
                for kind in ("s3", "volume"):  # alternated, so drift hits both alike
                    step += 1
                    samples[kind].append(sample(runs[kind], step, state))
                    print(kind, samples[kind][-1], flush=True)
            for run in runs.values():
                run.finish()
            remote.remove(prefix)
    results = {kind: summary(values, size) for kind, values in samples.items()}
    results["s3_vs_volume_save"] = round(
        results["s3"]["save_s"]["median"] / results["volume"]["save_s"]["median"], 2
    )
    results["s3_vs_volume_load"] = round(
        results["s3"]["load_s"]["median"] / results["volume"]["load_s"]["median"], 2
    )
    config = {
        "state_bytes": size,
        "samples": args.samples,
        "s3": f"SeaweedFS at {store.endpoint} (scripts/objectstore); s3fs, DCP's FsspecWriter",
        "volume": "a directory on this machine's disk (DCP's FileSystemWriter, fsync, rename)",
    }
    write("storage_throughput", config, results)


if __name__ == "__main__":
    main()
