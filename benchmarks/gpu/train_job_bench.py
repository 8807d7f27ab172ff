"""Training throughput through the platform's own train job: a `crucible server` on SQLite,
datasets registered with it, and for each run a TrainingRun submitted and its job
(`python -m crucible.jobs.train`) started with the environment the local executor
gives it. Tokens/s is what the job itself logs to the API every step (positions trained on,
padding not counted), read back from the API; nothing here times a step.

    python3 benchmarks/gpu/train_job_bench.py --plan smoke                # CPU, tiny models
    python3 benchmarks/gpu/train_job_bench.py --plan mfu --repeats 2 --no-final-checkpoint
    python3 benchmarks/gpu/train_job_bench.py --plan fp8 --repeats 3 --no-final-checkpoint
    python3 benchmarks/gpu/train_job_bench.py --plan fp8-scaling --no-final-checkpoint
    python3 benchmarks/gpu/train_job_bench.py --plan packing --repeats 3 --no-final-checkpoint

Plans (`PLANS`): `mfu`, the built-in GPT at 1.3B against a TinyLlama-shaped Hugging Face
Llama in bf16 and fp8 on full rows of real text; `fp8`, the Llama's two runs of `mfu` alone,
8 steps each by default (the first 2 dropped), for alternated fp8/bf16 pairs (three need
about 600 s of command time: two fitted a 540 s call on 2026-12-03); `fp8-scaling`, the GPT
at 1.3B in bf16 and in fp8 at tensor, row and block scaling (issue 28); `profile`, the bf16
runs of `mfu` with their last three steps recorded by the trainer's profiler (kernel tables
as `profile-<run>-r<N>-rank0-steps<A>-<B>.txt` beside the results); `packing`, a 150M Llama
on chat records of spread-out lengths, padded against packed; `smoke`, tiny models for a
CPU. A plan's runs go in alternation, repeated (A B C A B C ...), so that its comparisons
are like for like within one session. The first `--warmup` steps of every run (the
compile) are dropped; a run's figure is the median of the rest, a run's overall figure the
median of its repeats.
MFU = tokens/s x FLOPs per token / `common.PEAK_BF16_FLOPS`, for runs on full rows only.
All runs share one TorchInductor cache, so repeats skip most of the compile.

On the device machine, which has torch and transformers but not the API server's
dependencies: carry `.whl` (the wheels of those, for Python 3.12) and run

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \
PYTHONUNBUFFERED=1 python3 benchmarks/gpu/train_job_bench.py --plan mfu --repeats 2 \
--no-final-checkpoint

Results: `train_job_<plan>.json` under `--out` (default $OUT, else
benchmarks/results/gpu/raw/train_job), rewritten after every run so that a command stopped
at its time limit still leaves the runs it finished; a short table at the end.
"""

import argparse
import dataclasses
import json
import math
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import torch
from common import PEAK_BF16_FLOPS, REPO, byte_corpus

from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.config.model_source import ModelSpec
from crucible.config.parse import parse_config_object
from crucible.models.gpt import flops_per_token
from crucible.models.tokenizer import ByteTokenizer
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.schemas.runs import AttemptStart, RunSubmit
from crucible.training.flops import StepFlops
from crucible.training.records import write_jsonl
from crucible.training.shapes import encode_chat, split_text

ADMIN_TOKEN = "cru_train-job-bench-admin"
PROJECT = "default"
EXPERIMENT = "train-job-bench"

TEXT_ROW_MULTIPLE = 2048
"""Every text document is `k * TEXT_ROW_MULTIPLE` positions long (BOS and EOS included), so
the job splits it into full rows for any row length dividing that: no row is padded."""

TINYLLAMA = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
"""TinyLlama-1.1B's shape, random weights (vocab 32000 holds the byte tokenizer's ids)."""

LLAMA_150M = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}

LLAMA_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 264,
    "max_position_embeddings": 512,
}


# -- plans -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRun:
    name: str
    config: dict[str, Any]
    """The TrainingRun's `config` (docs/workloads.md), steps included."""

    dataset: str
    """Which of the plan's datasets it trains on: "text" or "chat"."""


@dataclass(frozen=True)
class Comparison:
    name: str
    numerator: str
    denominator: str
    """Run names; the ratio is of their median tokens/s."""

    target: float | None = None
    """The ratio the issue asks for, if any."""


@dataclass(frozen=True)
class ChatLengths:
    """Synthetic chats: total tokens (template included) drawn lognormal, capped at a row."""

    seq_len: int
    median: int
    sigma: float = 0.8
    records: int = 8192


@dataclass(frozen=True)
class Plan:
    runs: list[BenchRun]
    comparisons: list[Comparison]
    steps: int
    warmup: int
    chat: ChatLengths | None = None
    """The chat dataset's lengths; None: the plan trains on text only."""


def train_section(steps: int, batch_size: int, **options: Any) -> dict[str, Any]:
    # One optimizer step per micro-batch (grad_accum_steps 1); a lower lr than the CPU
    # default keeps a 1B model's loss finite over these few steps.
    return {"steps": steps, "batch_size": batch_size, "warmup_steps": 2, "lr": 3e-4, **options}


def mfu_plan(steps: int | None, warmup: int | None) -> Plan:
    steps = steps or 25
    text = {"shape": "text", "packing": False}
    gpu = {"compile": True}
    llama = {"hf": {"architecture": "llama", "config": TINYLLAMA}}
    runs = [
        BenchRun(
            "gpt-1.3B-bf16-mb32",
            {
                "model": {"preset": "1.3B"},
                "train": train_section(steps, 32, precision="bf16", **gpu),
                "data": text,
            },
            "text",
        ),
        BenchRun(
            "llama-1.1B-bf16-mb16",
            {
                "model": llama,
                "train": train_section(steps, 16, precision="bf16", **gpu),
                "data": text,
            },
            "text",
        ),
        BenchRun(
            "llama-1.1B-fp8-mb16",
            {
                "model": llama,
                "train": train_section(steps, 16, precision="fp8", **gpu),
                "data": text,
            },
            "text",
        ),
    ]
    comparisons = [Comparison("llama fp8/bf16", "llama-1.1B-fp8-mb16", "llama-1.1B-bf16-mb16")]
    return Plan(runs, comparisons, steps, warmup if warmup is not None else 10)


def packing_plan(steps: int | None, warmup: int | None) -> Plan:
    steps = steps or 25
    llama = {"hf": {"architecture": "llama", "config": LLAMA_150M}}
    runs = [
        BenchRun(
            f"llama-150M-chat-{name}-b32",
            {
                "model": llama,
                "train": train_section(steps, 32, precision="bf16", compile=True),
                "data": {"shape": "chat", "packing": packing, "seq_len": 2048},
            },
            "chat",
        )
        for name, packing in (("padded", False), ("packed", True))
    ]
    comparisons = [
        Comparison(
            "packing/padding", "llama-150M-chat-packed-b32", "llama-150M-chat-padded-b32", 1.5
        )
    ]
    return Plan(
        runs,
        comparisons,
        steps,
        warmup if warmup is not None else 10,
        ChatLengths(seq_len=2048, median=300),
    )


def profile_plan(steps: int | None, warmup: int | None) -> Plan:
    """The `mfu` plan's bf16 runs with three steps recorded by the trainer's profiler
    (`train.profile_from_step`): where a step's time goes, kernel by kernel."""
    steps = steps or 16
    runs = [
        replace(
            run,
            config={
                **run.config,
                "train": {**run.config["train"], "profile_from_step": steps - 3},
            },
        )
        for run in mfu_plan(steps, warmup).runs
        if "fp8" not in run.name
    ]
    return Plan(runs, [], steps, warmup if warmup is not None else 10)


def fp8_plan(steps: int | None, warmup: int | None) -> Plan:
    """The `mfu` plan's two Llama runs alone (bf16, fp8, bf16, fp8, ...), short, so that
    alternated pairs fit one call: a step is about half a second and every step after the
    first ran at the steady rate in the `mfu` runs, while a run's time is mostly its start
    and compile. Seconds to the first step on 2026-12-03 (one H200, one call, cold cache at
    first): bf16 71, 32, 45; fp8 175, 117 (the shared cache saves the fp8 compile little).
    So a pair takes about 200 s once warm, three pairs about 600 s of command time."""
    steps = steps or 8
    plan = mfu_plan(steps, warmup if warmup is not None else 2)
    return replace(
        plan,
        runs=[run for run in plan.runs if run.name.startswith("llama-")],
        # Issue 21's target for fp8 over bf16 (`readme_tables.FP8_SPEEDUP`).
        comparisons=[replace(c, target=1.25) for c in plan.comparisons],
    )


FP8_SCALINGS = ("tensor", "row", "block")


def fp8_scaling_plan(steps: int | None, warmup: int | None) -> Plan:
    """The built-in GPT at 1.3B, micro-batch 8, compiled, in bf16 and in fp8 at each scaling
    (issue 28): the figures `fp8_scaling_check.py` timed in a loop of its own, here through
    the train job. Every width of the 1.3B is a multiple of 512, as block scaling wants."""
    steps = steps or 8
    text = {"shape": "text", "packing": False}

    def run(name: str, **precision: Any) -> BenchRun:
        train = train_section(steps, 8, compile=True, **precision)
        return BenchRun(
            f"gpt-1.3B-{name}-mb8",
            {"model": {"preset": "1.3B"}, "train": train, "data": text},
            "text",
        )

    runs = [run("bf16", precision="bf16")] + [
        run(f"fp8-{scaling}", precision="fp8", fp8_scaling=scaling) for scaling in FP8_SCALINGS
    ]
    comparisons = [
        # Issue 28's goal for block scaling; none is set for the others.
        Comparison(
            f"fp8 {scaling}/bf16",
            f"gpt-1.3B-fp8-{scaling}-mb8",
            "gpt-1.3B-bf16-mb8",
            1.15 if scaling == "block" else None,
        )
        for scaling in FP8_SCALINGS
    ]
    return Plan(runs, comparisons, steps, warmup if warmup is not None else 2)


def smoke_plan(steps: int | None, warmup: int | None) -> Plan:
    """Every code path of the big plans at CPU sizes (no compile, no fp8: CPUs lack both)."""
    steps = steps or 3
    llama = {"hf": {"architecture": "llama", "config": LLAMA_TINY}}
    runs = [
        BenchRun(
            "gpt-tiny-text",
            {
                "model": {"preset": "tiny"},
                "train": train_section(steps, 4),
                "data": {"shape": "text"},
            },
            "text",
        ),
        BenchRun(
            "llama-tiny-text",
            {"model": llama, "train": train_section(steps, 4), "data": {"shape": "text"}},
            "text",
        ),
        *(
            BenchRun(
                f"llama-tiny-chat-{name}",
                {
                    "model": llama,
                    "train": train_section(steps, 4),
                    "data": {"shape": "chat", "packing": packing},
                },
                "chat",
            )
            for name, packing in (("padded", False), ("packed", True))
        ),
    ]
    comparisons = [
        Comparison("packing/padding", "llama-tiny-chat-packed", "llama-tiny-chat-padded", 1.5)
    ]
    return Plan(
        runs,
        comparisons,
        steps,
        warmup if warmup is not None else 1,
        ChatLengths(seq_len=512, median=75, records=512),
    )


PLANS: dict[str, Callable[[int | None, int | None], Plan]] = {
    "fp8": fp8_plan,
    "fp8-scaling": fp8_scaling_plan,
    "mfu": mfu_plan,
    "packing": packing_plan,
    "profile": profile_plan,
    "smoke": smoke_plan,
}


# -- FLOPs -----------------------------------------------------------------------------------


def row_length(spec: ModelSpec, data_seq_len: int | None) -> int:
    if data_seq_len is not None:
        return data_seq_len
    if spec.gpt is not None:
        return spec.gpt.max_seq_len
    assert spec.hf is not None
    return int(spec.hf.config["max_position_embeddings"])


def model_flops_per_token(spec: ModelSpec, seq_len: int) -> int:
    """The trainer's own count (`training/flops.py`) at rows of `seq_len`."""
    if spec.gpt is not None:
        return flops_per_token(spec.gpt, seq_len)
    from crucible.models.hf import build_hf_model

    assert spec.hf is not None
    with torch.device("meta"):
        model = build_hf_model(spec.hf, device="meta", weights=False)
    return StepFlops(model).per_token(seq_len)


# -- datasets --------------------------------------------------------------------------------


def ascii_text(num_bytes: int) -> str:
    """Real text (`common.byte_corpus`, the installed torch's sources) with non-ASCII bytes
    dropped, so that a string's length is its byte tokenizer's token count."""
    raw = byte_corpus(num_bytes + num_bytes // 8).to(torch.uint8).numpy().tobytes()
    text = raw.translate(None, bytes(range(128, 256))).decode("ascii")
    while len(text) < num_bytes:
        text += text
    return text[:num_bytes]


def text_records(num_docs: int, rows_per_doc: int) -> list[dict[str, str]]:
    # BOS + bytes + EOS is one position longer than the targets: k * multiple targets.
    length = rows_per_doc * TEXT_ROW_MULTIPLE - 1
    text = ascii_text(num_docs * length)
    return [{"text": text[i * length : (i + 1) * length]} for i in range(num_docs)]


def check_full_rows(record: dict[str, str], seq_len: int) -> None:
    pieces = split_text(ByteTokenizer(), record["text"], seq_len)
    if any(p.num_targets != seq_len for p in pieces):
        raise SystemExit(
            f"text rows of {seq_len} positions would not all be full: pick a row length "
            f"dividing {TEXT_ROW_MULTIPLE}"
        )


def chat_records(lengths: ChatLengths, *, seed: int = 0) -> list[dict[str, Any]]:
    """User and assistant turns cut from real text; each chat's total tokens (the default
    chat template's included) drawn lognormal around `median`, at most a row plus one (one
    position a token after the first), so that no chat is cut."""
    rng = random.Random(seed)
    tokenizer = ByteTokenizer()
    template = len(encode_chat(tokenizer, chat("", "")["messages"]).tokens)
    text = ascii_text(4 * 1024 * 1024)
    records = []
    for _ in range(lengths.records):
        drawn = round(rng.lognormvariate(math.log(lengths.median), lengths.sigma))
        total = min(max(drawn, template + 8), lengths.seq_len + 1)
        content = total - template
        user = round(content * rng.uniform(0.2, 0.6))
        records.append(chat(cut(text, user, rng), cut(text, content - user, rng)))
    return records


def chat(user: str, assistant: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": assistant},
        ]
    }


def cut(text: str, length: int, rng: random.Random) -> str:
    start = rng.randrange(len(text) - length)
    return text[start : start + length]


def length_summary(records: list[dict[str, Any]]) -> dict[str, float]:
    tokenizer = ByteTokenizer()
    targets = sorted(encode_chat(tokenizer, r["messages"]).num_targets for r in records)
    return {
        "records": len(targets),
        "mean": statistics.fmean(targets),
        "median": statistics.median(targets),
        "p90": targets[int(0.9 * (len(targets) - 1))],
        "max": targets[-1],
    }


def register(api: CrucibleClient, name: str, path: Path, records: int) -> str:
    version = api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": PROJECT,
                "name": name,
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
                "record_count": records,
            }
        )
    )
    return version.ref


# -- the platform: server and jobs -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def process_environment(workdir: Path) -> dict[str, str]:
    """This environment without CRUCIBLE_*, with the checkout's packages importable as an
    install would make them: services/ (`crucible`) and migrations/ as `crucible_migrations`
    (what the server's schema upgrade imports), through a link under `workdir`."""
    links = workdir / "packages"
    links.mkdir(exist_ok=True)
    link = links / "crucible_migrations"
    if not link.exists():
        link.symlink_to(REPO / "migrations", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    paths = [str(REPO / "services"), str(links), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class Server:
    url: str
    home: Path
    env: dict[str, str]
    """The environment the jobs start from."""


@contextmanager
def local_server(workdir: Path, startup_seconds: float = 180) -> Iterator[Server]:
    """`crucible server` on SQLite in `workdir/home`, with an admin token; stopped on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    home = workdir / "home"
    env = process_environment(workdir)
    server_env = env | {
        "CRUCIBLE_HOME": str(home),
        "CRUCIBLE_API_URL": url,
        "CRUCIBLE_ADMIN_TOKEN": ADMIN_TOKEN,
    }
    with serving_process(
        [sys.executable, "-m", "crucible", "server", "--port", str(port)],
        server_env,
        log=workdir / "server.log",
        ready_url=f"{url}/readyz",
        startup_seconds=startup_seconds,
        failure="crucible server did not start",
    ):
        yield Server(url=url, home=home, env=env)


@contextmanager
def serving_process(
    command: list[str],
    env: dict[str, str],
    *,
    log: Path,
    ready_url: str,
    startup_seconds: float,
    failure: str,
) -> Iterator[subprocess.Popen[bytes]]:
    """`command` as a process writing to `log`, once `ready_url` answers 200; stopped when
    the block ends (SIGTERM, SIGKILL after 30 s). Exits with `failure` and the log's tail
    when the process ends or is not ready within `startup_seconds`."""
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            try:
                if httpx.get(ready_url).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{failure}:\n" + tail(log))
            time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class JobResult:
    run_id: int
    exit: str
    """"0", another exit code, or "killed" (--no-final-checkpoint)."""

    seconds: float
    started: float
    log: Path


def submit(api: CrucibleClient, run: BenchRun, dataset: str, *, gpus: int) -> int:
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": f"{run.name.lower().replace('.', '-')}-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "experiment": EXPERIMENT,
            "gpusPerNode": gpus,
            "config": run.config,
            "inputs": [{"dataset": dataset}],
        },
    }
    submitted = api.submit_run(RunSubmit.model_validate({"project": PROJECT, "manifest": manifest}))
    api.start_attempt(submitted.id, AttemptStart())
    return submitted.id


def run_job(
    server: Server,
    api: CrucibleClient,
    run_id: int,
    dataset: str,
    logs: Path,
    *,
    kill_at_end: bool,
) -> JobResult:
    """The train job of `run_id` as the local executor starts it. kill_at_end: once the API
    holds every step's tokens/s, kill it rather than wait for its final checkpoint."""
    spec = api.get_run(run_id).manifest["spec"]  # as stored: defaults filled in
    env = server.env | {
        "CRUCIBLE_API_URL": server.url,
        "CRUCIBLE_TOKEN": ADMIN_TOKEN,
        "CRUCIBLE_HOME": str(server.home),
        "CRUCIBLE_RUN_ID": str(run_id),
        "CRUCIBLE_ATTEMPT": "1",
        "CRUCIBLE_CHECKPOINT_URI": checkpoint_dir(server, run_id).as_uri(),
        "CRUCIBLE_CONFIG": json.dumps(spec.get("config", {})),
        "CRUCIBLE_SPEC": json.dumps(spec),
        "CRUCIBLE_INPUTS": json.dumps({"datasets": [dataset], "checkpoint": None}),
    }
    log = logs / f"run-{run_id}.log"
    steps = int(spec["config"]["train"]["steps"])
    started = time.time()
    with log.open("w") as out:
        # Its own process group, so that a kill takes the compile workers along.
        process = subprocess.Popen(
            [sys.executable, "-m", "crucible.jobs.train"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=server.home,
            start_new_session=True,
        )
    exit_status: str | None = None
    try:
        while process.poll() is None:
            if kill_at_end and points(api, run_id, "tokens_per_s") >= steps:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                exit_status = "killed"
                break
            time.sleep(1.0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return JobResult(
        run_id=run_id,
        exit=exit_status or str(process.returncode),
        seconds=time.time() - started,
        started=started,
        log=log,
    )


def checkpoint_dir(server: Server, run_id: int) -> Path:
    return server.home / "runs" / str(run_id) / "checkpoints"


def keep_profiles(server: Server, run_id: int, out: Path, prefix: str) -> None:
    """The kernel tables the job's profiler wrote, as `out/<prefix>-<table>` (the traces
    stay behind: too large to bring back)."""
    for table in (server.home / "runs" / str(run_id) / "outputs" / "profile").glob("*.txt"):
        shutil.copy(table, out / f"{prefix}-{table.name}")


def points(api: CrucibleClient, run_id: int, key: str) -> int:
    answer = api.request("GET", f"/api/v1/runs/{run_id}/metrics/keys")
    return next((int(k["point_count"]) for k in answer["keys"] if k["key"] == key), 0)


def series(api: CrucibleClient, run_id: int, *keys: str) -> dict[str, dict[str, list[float]]]:
    history = api.request("GET", f"/api/v1/runs/{run_id}/metrics", params={"keys": ",".join(keys)})
    return {
        s["key"]: {"steps": s["steps"], "values": s["values"], "times": s["times"]}
        for s in history["series"]
    }


def tail(path: Path, lines: int = 40) -> str:
    return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


# -- measuring -------------------------------------------------------------------------------


def measure(api: CrucibleClient, job: JobResult, plan: Plan, repeat: int) -> dict[str, Any]:
    """One sample of a run from the API's per-step metrics: the steps after the warm-up."""
    got = series(api, job.run_id, "tokens_per_s", "tokens")
    rate, tokens = got.get("tokens_per_s"), got.get("tokens")
    if rate is None or tokens is None or len(rate["steps"]) != plan.steps:
        found = len(rate["steps"]) if rate else 0
        raise RuntimeError(
            f"run {job.run_id} logged tokens_per_s for {found} of {plan.steps} steps"
        )
    kept = [v for s, v in zip(rate["steps"], rate["values"], strict=True) if s > plan.warmup]
    if not kept:
        raise RuntimeError(f"--warmup {plan.warmup} leaves none of the {plan.steps} steps")
    return {
        "repeat": repeat,
        "run_id": job.run_id,
        "exit": job.exit,
        "tokens_per_s": rate["values"],
        "tokens": tokens["values"],
        "median": statistics.median(kept),
        "min": min(kept),
        "max": max(kept),
        "useful_tokens_per_step": statistics.fmean(
            v for s, v in zip(tokens["steps"], tokens["values"], strict=True) if s > plan.warmup
        ),
        # Seconds from starting the process: to its first logged step (imports, model
        # build, data check, compile), over all steps, to its exit (or kill).
        "first_step_s": rate["times"][0] - job.started,
        "steps_s": rate["times"][-1] - rate["times"][0],
        "job_s": job.seconds,
        # What the run page shows besides: the job's own MFU (`training/flops.py`, on a
        # GPU whose peak it knows) and the SDK's GPU telemetry (`sdk/gpu_telemetry.py`).
        "logged_mfu": _median_after(api, job.run_id, "mfu", plan.warmup),
        "system_metrics": {
            key: _median_after(api, job.run_id, key, -1)
            for key in (
                "system/gpu/utilization",
                "system/gpu0/memory_used_gb",
                "system/gpu0/power_w",
                "system/gpu0/sm_clock_mhz",
            )
        },
        "system_metric_points": points(api, job.run_id, "system/gpu/utilization"),
    }


def _median_after(api: CrucibleClient, run_id: int, key: str, warmup: int) -> float | None:
    """The median of a run's `key` over the steps after `warmup`, None if it logged none."""
    got = series(api, run_id, key).get(key)
    kept = (
        [v for s, v in zip(got["steps"], got["values"], strict=True) if s > warmup] if got else []
    )
    return statistics.median(kept) if kept else None


def summarize_run(entry: dict[str, Any]) -> None:
    medians = [s["median"] for s in entry["samples"]]
    if not medians:
        return
    entry["median_tokens_per_s"] = statistics.median(medians)
    entry["sample_medians_range"] = [min(medians), max(medians)]
    flops = entry["flops_per_token"]
    entry["mfu"] = (
        entry["median_tokens_per_s"] * flops / PEAK_BF16_FLOPS if flops is not None else None
    )


def compare(entries: dict[str, dict[str, Any]], comparison: Comparison) -> dict[str, Any]:
    top, bottom = entries[comparison.numerator], entries[comparison.denominator]
    result: dict[str, Any] = {
        "name": comparison.name,
        "numerator": comparison.numerator,
        "denominator": comparison.denominator,
        "target": comparison.target,
        "ratio": None,
    }
    if "median_tokens_per_s" in top and "median_tokens_per_s" in bottom:
        result["ratio"] = top["median_tokens_per_s"] / bottom["median_tokens_per_s"]
        # Each repeat's own ratio: its two runs ran next to each other.
        by_repeat = {s["repeat"]: s["median"] for s in bottom["samples"]}
        result["per_repeat"] = [
            s["median"] / by_repeat[s["repeat"]] for s in top["samples"] if s["repeat"] in by_repeat
        ]
        if comparison.target is not None:
            result["met"] = result["ratio"] >= comparison.target
    return result


def device_environment() -> dict[str, Any]:
    """`common.environment()`, asked in a child process, so that this one never opens a CUDA
    context of its own on the GPU the jobs measure."""
    probe = "import json, common; print(json.dumps(common.environment()))"
    answer = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=True,
    )
    environment: dict[str, Any] = json.loads(answer.stdout)
    return environment


def print_table(results: dict[str, Any]) -> None:
    print(f"\nplan {results['plan']}: {results['settings']}")
    print(f"{'run':<28} {'n':>2} {'tokens/s median (min-max of samples)':>40} {'MFU':>7}")
    for entry in results["runs"]:
        if "median_tokens_per_s" not in entry:
            print(f"{entry['name']:<28}  -  failed")
            continue
        low, high = entry["sample_medians_range"]
        rate = f"{entry['median_tokens_per_s']:,.0f} ({low:,.0f}-{high:,.0f})"
        mfu = f"{100 * entry['mfu']:.1f}%" if entry["mfu"] is not None else "-"
        print(f"{entry['name']:<28} {len(entry['samples']):>2} {rate:>40} {mfu:>7}")
    for comparison in results["comparisons"]:
        if comparison["ratio"] is None:
            print(f"{comparison['name']}: not measured")
            continue
        rounds = ", ".join(f"{r:.3f}" for r in comparison["per_repeat"])
        target = f" (target {comparison['target']}x)" if comparison["target"] else ""
        print(f"{comparison['name']}: {comparison['ratio']:.3f}x{target}; per repeat {rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--plan", choices=sorted(PLANS), required=True)
    parser.add_argument("--repeats", type=int, default=1, help="Rounds of the plan's runs.")
    parser.add_argument("--steps", type=int, help="Steps per run (default: the plan's).")
    parser.add_argument(
        "--warmup", type=int, help="First steps of each run to drop (default: the plan's)."
    )
    parser.add_argument(
        "--no-final-checkpoint",
        action="store_true",
        help="Kill each job once the API holds all its steps instead of waiting while it "
        "writes its final checkpoint (weights and AdamW state: about 16 bytes a parameter).",
    )
    parser.add_argument("--out", type=Path, help="Results folder (default $OUT, else raw/).")
    parser.add_argument("--only", help="Comma-separated names of the plan's runs to run.")
    args = parser.parse_args()
    plan = PLANS[args.plan](args.steps, args.warmup)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {r.name for r in plan.runs}
        if unknown:
            raise SystemExit(f"--only names no run of plan {args.plan}: {sorted(unknown)}")
        plan = replace(
            plan,
            runs=[r for r in plan.runs if r.name in wanted],
            comparisons=[c for c in plan.comparisons if {c.numerator, c.denominator} <= wanted],
        )
    out = args.out or Path(
        os.environ.get("OUT") or REPO / "benchmarks" / "results" / "gpu" / "raw" / "train_job"
    )
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / f"train_job_{args.plan}.json"
    # One compile cache for every job (and every call on a machine kept warm); set before
    # anything here builds a model, which makes torch set its own default.
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / "train-job-bench-inductor")
    )

    entries: dict[str, dict[str, Any]] = {}
    for run in plan.runs:
        parsed = parse_config_object(run.config)  # a bad config fails here, before any job
        seq_len = row_length(parsed.model, parsed.data.seq_len)
        entries[run.name] = {
            "name": run.name,
            "config": run.config,
            "dataset": run.dataset,
            "seq_len": seq_len,
            # FLOPs a trained position costs are known only for rows full of one document.
            "flops_per_token": model_flops_per_token(parsed.model, seq_len)
            if run.dataset == "text"
            else None,
            "samples": [],
            "failures": [],
        }
    results: dict[str, Any] = {
        "plan": args.plan,
        "settings": {
            "steps": plan.steps,
            "warmup": plan.warmup,
            "repeats": args.repeats,
            "no_final_checkpoint": args.no_final_checkpoint,
            "peak_flops": PEAK_BF16_FLOPS,
            "inductor_cache": os.environ["TORCHINDUCTOR_CACHE_DIR"],
        },
        "environment": device_environment(),
        "datasets": {},
        "runs": list(entries.values()),
        "comparisons": [],
    }

    def save() -> None:
        for entry in entries.values():
            summarize_run(entry)
        results["comparisons"] = [compare(entries, c) for c in plan.comparisons]
        # Written beside, then renamed: a command killed mid-write still leaves the last
        # whole file.
        partial = results_file.with_name(results_file.name + ".partial")
        partial.write_text(json.dumps(results, indent=1) + "\n")
        partial.replace(results_file)

    gpus = min(1, int(results["environment"].get("device_count", 0)))
    failed: set[str] = set()
    with (
        tempfile.TemporaryDirectory(prefix="train-job-bench-") as tmp,
        local_server(Path(tmp)) as server,
        CrucibleClient(server.url, ADMIN_TOKEN) as api,
    ):
        data_dir = server.home / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        refs: dict[str, str] = {}
        if any(r.dataset == "text" for r in plan.runs):
            text = text_records(num_docs=64, rows_per_doc=16)
            for entry in entries.values():
                if entry["dataset"] == "text":
                    check_full_rows(text[0], entry["seq_len"])
            write_jsonl(data_dir / "text.jsonl", text)
            refs["text"] = register(api, "bench-text", data_dir / "text.jsonl", len(text))
            results["datasets"]["text"] = {
                "records": len(text),
                "positions_per_record": len(text[0]["text"]) + 1,
            }
        if plan.chat is not None:
            chats = chat_records(plan.chat)
            write_jsonl(data_dir / "chat.jsonl", chats)
            refs["chat"] = register(api, "bench-chat", data_dir / "chat.jsonl", len(chats))
            results["datasets"]["chat"] = {
                "lengths": dataclasses.asdict(plan.chat),
                "positions": length_summary(chats),
            }
        logs = Path(tmp) / "logs"
        logs.mkdir()
        for repeat in range(args.repeats):
            for run in plan.runs:
                if run.name in failed:
                    continue
                run_id = submit(api, run, refs[run.dataset], gpus=gpus)
                print(f"[{repeat + 1}/{args.repeats}] {run.name}: run {run_id}", flush=True)
                job = run_job(
                    server,
                    api,
                    run_id,
                    refs[run.dataset],
                    logs,
                    kill_at_end=args.no_final_checkpoint,
                )
                shutil.rmtree(checkpoint_dir(server, run_id), ignore_errors=True)
                keep_profiles(server, run_id, out, f"profile-{run.name}-r{repeat + 1}")
                try:
                    if job.exit not in ("0", "killed"):
                        raise RuntimeError(f"the train job exited {job.exit}")
                    sample = measure(api, job, plan, repeat)
                except RuntimeError as exc:
                    failed.add(run.name)
                    output = tail(job.log)
                    entries[run.name]["failures"].append(
                        {"repeat": repeat, "run_id": run_id, "error": str(exc), "tail": output}
                    )
                    print(f"FAILED {run.name} (run {run_id}): {exc}\n{output}", flush=True)
                else:
                    entries[run.name]["samples"].append(sample)
                    print(
                        f"    {sample['median']:,.0f} tokens/s (min {sample['min']:,.0f}, max "
                        f"{sample['max']:,.0f}); first step after {sample['first_step_s']:.0f} s, "
                        f"job {sample['job_s']:.0f} s ({job.exit})",
                        flush=True,
                    )
                save()
    save()
    print_table(results)
    print(f"\nresults: {results_file}")
    if failed:
        raise SystemExit(f"failed: {', '.join(sorted(failed))}")


if __name__ == "__main__":
    main()
