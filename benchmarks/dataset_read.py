"""Dataset read throughput through the train job's own data path: a dataset version on the
test stack's S3 server (SeaweedFS, scripts/objectstore) against the same files registered
where they lie on this machine's disk (file://).

There are no range reads from object storage: a run resolves an S3 dataset by downloading
it whole into the digest-named cache ($CRUCIBLE_HOME/datasets/<digest>/) and checking the
copy's digest, and a file:// one by checking its digest where it is; then the trainer opens
the local files (`open_files`: one pass that counts, indexes and checks every record) and
streams them a shuffle block at a time (`ShuffledRecords`). That is the path measured.

Each sample is a fresh process with a fresh CRUCIBLE_HOME (so an empty dataset cache, and
the S3 download in every S3 sample) that joins one run of a local `crucible server` and
reports: the time to its first record (`input_files` as the train job calls it, then
`open_files`, then the first record of the shuffled stream), one full pass over the records
through `ShuffledRecords` (records/s, and MiB/s of the file's bytes), and its peak RSS.
Formats and places alternate in rounds (which place goes first flips each round),
`--samples` rounds.

    eval "$(scripts/objectstore up)"
    .venv/bin/python -m benchmarks.dataset_read --samples 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# The test-stack helpers (tests.*, benchmarks.operator_bench) are imported where the parent
# uses them: a sample process imports only what a train job has.
MIB = 2**20
FORMATS = ("jsonl", "parquet")
PLACES = ("local", "s3")
ROW_GROUP = 1000
"""Rows per Parquet row group: what Hugging Face `datasets` writes (`to_parquet`)."""
CHUNK = 1000
"""Records generated at a time (and one Parquet row group each, at the default)."""


# -- the datasets -----------------------------------------------------------------------------


class RecordMaker:
    """Prompt/completion records of instruction-data length (prompts ~0.7 KB, completions
    ~0.5 KB, log-normal), their text cut from a corpus of Zipf-distributed pseudo-words, so
    Snappy compresses it about as much as it does English (to ~47% here)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        vocab = ["".join(self.rng.choice(letters, n)) for n in self.rng.integers(2, 11, 20_000)]
        ranks = np.minimum(self.rng.zipf(1.1, 2_000_000), len(vocab)) - 1
        self.corpus = " ".join(vocab[i] for i in ranks)
        self.made = 0

    def chunk(self, n: int) -> tuple[list[str], list[str]]:
        rng, corpus = self.rng, self.corpus
        prompt_len = np.clip(rng.lognormal(6.3, 0.7, n), 40, 6000).astype(int)
        completion_len = np.clip(rng.lognormal(5.9, 0.8, n), 10, 4000).astype(int)
        prompt_at = rng.integers(0, len(corpus) - 6000, n)
        completion_at = rng.integers(0, len(corpus) - 4000, n)
        prompts = [
            f"### Instruction {self.made + i}\n{corpus[a : a + b]}"
            for i, (a, b) in enumerate(zip(prompt_at, prompt_len, strict=True))
        ]
        completions = [
            corpus[a : a + b] for a, b in zip(completion_at, completion_len, strict=True)
        ]
        self.made += n
        return prompts, completions


def make_jsonl(path: Path, target_bytes: int, seed: int = 0) -> int:
    """Write records until the file holds `target_bytes`; returns how many."""
    maker = RecordMaker(seed)
    with path.open("w", encoding="utf-8") as f:
        while f.tell() < target_bytes:
            for prompt, completion in zip(*maker.chunk(CHUNK), strict=True):
                f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    return maker.made


def make_parquet(path: Path, target_bytes: int, row_group: int = ROW_GROUP, seed: int = 0) -> int:
    """Write records (Snappy, pyarrow's default) until the file holds about `target_bytes`;
    returns how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    maker = RecordMaker(seed)
    schema = pa.schema([("prompt", pa.string()), ("completion", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        while path.stat().st_size < target_bytes:
            prompts, completions = maker.chunk(CHUNK)
            table = pa.table({"prompt": prompts, "completion": completions}, schema=schema)
            writer.write_table(table, row_group_size=row_group)
    return maker.made


# -- one sample, in a fresh process ---------------------------------------------------------------


def timed(module: Any, name: str, spent: dict[str, float]) -> None:
    """Wrap `module.name` so the seconds spent in it add up in `spent[name]` (behaviour
    unchanged: the SDK looks the function up in its module at each call)."""
    inner: Callable[..., Any] = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

    setattr(module, name, wrapper)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(ref: str) -> dict[str, Any]:
    """One sample in this process (CRUCIBLE_RUN_ID, CRUCIBLE_ATTEMPT, CRUCIBLE_HOME set):
    resolve `ref` as the train job does, open it as the trainer does, read every record."""
    # Imported before the clock starts, as a train job has imported them before its data.
    import pyarrow.parquet  # noqa: F401  (open_files imports it on first use)

    import crucible
    from crucible.config.workload import DataConfig
    from crucible.jobs.datasets import input_files
    from crucible.sdk import datasets
    from crucible.training.records import ShuffledRecords
    from crucible.training.train_data import open_files

    spent: dict[str, float] = {}
    timed(datasets, "_download", spent)  # S3 only: the whole file into the cache
    timed(datasets, "verify", spent)  # the digest check (of the copy, or of the file)
    rss_at_start = peak_rss_mib()
    started = time.perf_counter()
    run = crucible.init()
    joined = time.perf_counter()
    found = input_files(run, [ref])
    resolved = time.perf_counter()
    source, shape = open_files(found.files, DataConfig())
    opened = time.perf_counter()
    stream = ShuffledRecords(source, seed=0)
    stream.peek()
    first = time.perf_counter()
    rss_at_first = peak_rss_mib()
    for _ in range(source.num_records):  # one epoch, in the trainer's shuffled block order
        stream.take()
    passed = time.perf_counter()
    assert (stream.epoch, stream.block_cursor, stream.record_cursor) == (1, 0, 0)
    run.finish()
    file_bytes = sum(path.stat().st_size for path in found.files)
    return {
        "records": source.num_records,
        "shape": shape,
        "file_bytes": file_bytes,
        "cached_under_home": all(
            Path(os.environ["CRUCIBLE_HOME"]) in path.parents for path in found.files
        ),
        "init_s": joined - started,
        "resolve_s": resolved - joined,
        "download_s": spent.get("_download", 0.0),
        "verify_s": spent.get("verify", 0.0),
        "open_s": opened - resolved,
        "first_record_s": first - opened,
        "ttfr_s": first - started,
        "pass_s": passed - first,
        "records_per_s": source.num_records / (passed - first),
        "mib_per_s": file_bytes / MIB / (passed - first),
        "peak_rss_mib": peak_rss_mib(),
        "rss_at_start_mib": rss_at_start,
        "rss_growth_mib": peak_rss_mib() - rss_at_start,
        "peak_rss_at_first_record_mib": rss_at_first,
    }


def run_child(ref: str, env: dict[str, str]) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="crucible-dataset-read-home-"))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.dataset_read", "--child", ref],
            env={**env, "CRUCIBLE_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"the sample for {ref} failed ({done.returncode}):\n{done.stderr}")
    sample: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    sample["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return sample


# -- rounds and summary ---------------------------------------------------------------------------


def kinds(round_index: int) -> Iterator[tuple[str, str]]:
    """The (format, place) order of one round: formats in turn, and which place goes first
    flips every round, so drift in the machine's speed hits both places alike."""
    places = PLACES if round_index % 2 == 0 else PLACES[::-1]
    for fmt in FORMATS:
        for place in places:
            yield fmt, place


MEASURES = (
    "ttfr_s",
    "init_s",
    "resolve_s",
    "download_s",
    "verify_s",
    "open_s",
    "first_record_s",
    "pass_s",
    "records_per_s",
    "mib_per_s",
    "peak_rss_mib",
    "rss_growth_mib",
)


def spread(values: list[float]) -> dict[str, float]:
    digits = 1 if max(values) >= 100 else 3
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def summarize(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per kind ("jsonl local", ...): median, min and max of each measure; per format: the
    S3/local ratio of each round's pair and the median of those ratios."""
    out: dict[str, Any] = {}
    for kind, runs in samples.items():
        out[kind] = {m: spread([s[m] for s in runs]) for m in MEASURES}
        out[kind]["records"] = runs[0]["records"]
        out[kind]["file_mib"] = round(runs[0]["file_bytes"] / MIB, 1)
    ratios: dict[str, Any] = {}
    for fmt in FORMATS:
        pairs = list(zip(samples[f"{fmt} s3"], samples[f"{fmt} local"], strict=True))
        ratios[fmt] = {}
        for measure in ("ttfr_s", "pass_s", "records_per_s", "peak_rss_mib", "rss_growth_mib"):
            per_round = [round(s3[measure] / local[measure], 2) for s3, local in pairs]
            ratios[fmt][measure] = {
                "per_round": per_round,
                "median": round(statistics.median(per_round), 2),
            }
    out["s3_vs_local"] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--mib", type=float, default=256, help="each file's size on disk")
    parser.add_argument("--row-group", type=int, default=ROW_GROUP, help="Parquet rows a group")
    parser.add_argument("--child", metavar="REF", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    from benchmarks.operator_bench import write
    from tests.object_store import object_store

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    store = object_store()
    os.environ.update(store.client_env)
    with tempfile.TemporaryDirectory(prefix="crucible-dataset-read-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        target = int(args.mib * MIB)
        files = {"jsonl": work / "sft.jsonl", "parquet": work / "sft.parquet"}
        counts = {
            "jsonl": make_jsonl(files["jsonl"], target),
            "parquet": make_parquet(files["parquet"], target, args.row_group),
        }
        print(f"datasets built in {time.perf_counter() - started:.1f} s: {counts}", flush=True)
        prefix = store.prefix("dataset-read")
        try:
            results, registered = measure(work, files, prefix, args.samples)
        finally:
            from crucible.artifacts import remote

            remote.remove(prefix)
    results["load_average"] = {
        "start": load_at_start,
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    config = {
        "what": (__doc__ or "").split("\n\n")[0],
        "samples": args.samples,
        "datasets": {
            fmt: {
                "records": counts[fmt],
                "file_bytes": files_bytes,
                "file_mib": round(files_bytes / MIB, 1),
            }
            for fmt, files_bytes in registered.items()
        },
        "record": "prompt/completion, ~0.7 KB prompt + ~0.5 KB completion of pseudo-word text",
        "parquet": f"Snappy (pyarrow's default), {args.row_group} rows a row group",
        "reader": "open_files(DataConfig()) then ShuffledRecords, shuffle_block 1024",
        "s3": f"SeaweedFS at {store.endpoint} (scripts/objectstore), s3fs get_file, whole "
        "file into $CRUCIBLE_HOME/datasets/<digest>/, then sha256 of the copy",
        "local": "file:// on this machine's disk, sha256 where it lies (page cache warm)",
        "ttfr": "crucible.init + input_files (resolve, download for S3, digest, link) + "
        "open_files + the first record; excludes the interpreter's start and imports",
        "rss": "peak_rss_mib: ru_maxrss of the sample process, torch included (the SDK "
        "imports it); rss_growth_mib: that peak less the peak after the imports",
    }
    write("dataset_read", config, results)


def measure(
    work: Path, files: dict[str, Path], prefix: str, rounds: int
) -> tuple[dict[str, Any], dict[str, int]]:
    from tests.conftest import training_run
    from tests.servers import crucible as crucible_cli
    from tests.servers import local_server

    from crucible.client import CrucibleClient
    from crucible.schemas.runs import AttemptStart, RunSubmit

    with local_server(work, command="server") as server:
        with CrucibleClient(server.url, server.token) as api:
            manifest = training_run(name="dataset-read", experiment="bench")
            submitted = api.submit_run(
                RunSubmit.model_validate({"project": "default", "manifest": manifest})
            )
            api.start_attempt(submitted.id, AttemptStart())
        env = {
            **server.env,
            "CRUCIBLE_TOKEN": server.token,
            "CRUCIBLE_RUN_ID": str(submitted.id),
            "CRUCIBLE_ATTEMPT": "1",
        }
        refs: dict[str, str] = {}
        registration: dict[str, float] = {}
        for fmt, path in files.items():
            for place in PLACES:
                name = f"bench-{fmt}-{place}"
                to = ("--to", f"{prefix}/{fmt}") if place == "s3" else ()
                began = time.perf_counter()
                done = crucible_cli(env, "datasets", "register", name, str(path), *to, timeout=600)
                if done.returncode != 0:
                    raise RuntimeError(f"registering {name} failed:\n{done.stdout}{done.stderr}")
                registration[f"{fmt} {place}"] = round(time.perf_counter() - began, 2)
                refs[f"{fmt} {place}"] = f"{name}@latest"
                print(done.stdout.strip(), flush=True)
        samples: dict[str, list[dict[str, Any]]] = {}
        for index in range(rounds):
            for fmt, place in kinds(index):
                kind = f"{fmt} {place}"
                sample = run_child(refs[kind], env)
                assert sample["cached_under_home"] == (place == "s3"), sample
                samples.setdefault(kind, []).append(sample)
                print(
                    f"round {index + 1} {kind:>13}: ttfr {sample['ttfr_s']:.2f} s (download "
                    f"{sample['download_s']:.2f}, digest {sample['verify_s']:.2f}, open "
                    f"{sample['open_s']:.2f}), pass {sample['pass_s']:.2f} s "
                    f"{sample['records_per_s']:,.0f} rec/s {sample['mib_per_s']:.1f} MiB/s, "
                    f"peak {sample['peak_rss_mib']:.0f} MiB, load {sample['load_average'][0]}",
                    flush=True,
                )
    results = summarize(samples)
    results["registration_s"] = registration
    results["raw"] = samples
    return results, {fmt: path.stat().st_size for fmt, path in files.items()}


if __name__ == "__main__":
    main()
