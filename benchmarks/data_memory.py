"""The trainer's memory and data throughput with SFT datasets 1x and 10x the demo's size:
records read whole into memory (how the train job read them before issue 21) against
streamed from the JSONL file a block at a time (how it reads them now), like for like.

Each sample is a fresh process that builds a `Trainer` (the tiny GPT, on the CPU) over a
JSONL file of N prompt/completion records and trains `--steps` steps; it reports its peak
resident memory (ru_maxrss) and the records per second its data path delivers (opening and
checking the file included). The kinds and sizes alternate, `--samples` rounds of them.

    .venv/bin/python -m benchmarks.data_memory --samples 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.operator_bench import write

DEMO_RECORDS = 40_000
"""The 1x size: ten times the demo's 4,000 teacher records, so both sizes are research-like."""


def child(path: Path, kind: str, steps: int) -> None:
    """One sample, in this process: print a JSON line with the peak RSS and the rates."""
    from crucible.config.workload import DataConfig, TrainConfig, model_preset
    from crucible.training.records import read_jsonl
    from crucible.training.train import Trainer
    from crucible.training.train_data import open_files

    started = time.perf_counter()
    data = DataConfig(shape="prompt_completion")
    records: Any = list(read_jsonl(path)) if kind == "in-memory" else open_files([path], data)
    trainer = Trainer(
        TrainConfig(steps=steps, batch_size=32, warmup_steps=1, bf16=False),
        model_preset("tiny"),
        records,
        data=data,
    )
    opened = time.perf_counter() - started
    began = time.perf_counter()
    trainer.train()
    trained = time.perf_counter() - began
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"open_s": opened, "train_s": trained, "peak_rss_mib": peak_kib / 1024, "steps": steps}
        )
    )


def make_dataset(path: Path, count: int) -> None:
    with path.open("w") as f:
        for i in range(count):
            a, b = i % 997, (i * 7) % 991
            # A long-ish prompt, as instruction data has: the file is ~250 bytes a record.
            prompt = f"Question {i}: add {a} and {b}, then write only the sum. {a}+{b}="
            f.write(json.dumps({"prompt": prompt, "completion": str(a + b)}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--child", nargs=2, metavar=("PATH", "KIND"))
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], args.steps)
        return
    folder = Path(tempfile.mkdtemp(prefix="data-memory-"))
    sizes = {"1x": DEMO_RECORDS, "10x": 10 * DEMO_RECORDS}
    files = {}
    for name, count in sizes.items():
        files[name] = folder / f"sft-{name}.jsonl"
        make_dataset(files[name], count)
    results: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.samples):
        for name in sizes:
            for kind in ("in-memory", "streamed"):
                command = [
                    sys.executable,
                    "-m",
                    "benchmarks.data_memory",
                    "--steps",
                    str(args.steps),
                ]
                done = subprocess.run(
                    [*command, "--child", str(files[name]), kind],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                sample = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault(f"{name} {kind}", []).append(sample)
                print(f"{name:>4} {kind:>9}: {sample}", flush=True)
    summary = {
        key: {
            "records": sizes[key.split()[0]],
            "file_mib": round(files[key.split()[0]].stat().st_size / 2**20, 1),
            "peak_rss_mib_median": round(statistics.median(s["peak_rss_mib"] for s in samples), 1),
            "peak_rss_mib_range": [
                round(min(s["peak_rss_mib"] for s in samples), 1),
                round(max(s["peak_rss_mib"] for s in samples), 1),
            ],
            "open_s_median": round(statistics.median(s["open_s"] for s in samples), 2),
            "train_s_median": round(statistics.median(s["train_s"] for s in samples), 2),
        }
        for key, samples in results.items()
    }
    config = {"what": (__doc__ or "").split("\n\n")[0], "steps": args.steps}
    config["samples"] = args.samples
    write("data_memory", config, {"summary": summary, "raw": results})
    for key, row in summary.items():
        print(key, row)


if __name__ == "__main__":
    main()
