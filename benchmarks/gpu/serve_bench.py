"""`crucible serve` under concurrent streaming clients: throughput, time to first token and
inter-token latency, as an OpenAI client sees them.

    python3 benchmarks/gpu/serve_bench.py --clients 64 --requests 512 --out serve.json

The product's own path: a `crucible server` on SQLite (`train_job_bench.local_server`), a
TrainingRun registered with it and a checkpoint of the built-in GPT (`--preset`, random
weights made to sample ASCII: `register_checkpoint` says why) saved through the SDK as the
trainer saves one (its model in `meta`), then `python -m crucible serve CHECKPOINT` in a
process of its own, as a user starts it.
`--clients` clients (httpx, asyncio) each send streaming /v1/completions requests one after
another until `--requests` have been sent in all: a `--prompt-len`-token prompt of real text
(`common.byte_corpus`, as token ids), exactly `--max-tokens` tokens back (`ignore_eos`,
vLLM's extension), temperature 1, with `return_token_ids` so that every chunk says how
many tokens it carries. A first round of one request per client, timed apart, is the
warm-up (CUDA graphs captured as batch sizes first appear).

Reported: output tokens/s over the timed round's wall time; time to first token (request
sent to the first chunk carrying a token); inter-token latency, the gaps between one
request's successive chunks (a chunk may carry several tokens when the text of one is held
back, e.g. an incomplete UTF-8 sequence; their count is reported); time per output token
of each request after its first; each as p50 and p99. A request that does not end with
`--max-tokens` tokens, finish reason "length" and `[DONE]` counts as failed.

On the device machine, which lacks the servers' dependencies: carry `.whl` (made by
`benchmarks/gpu/wheels.sh`) and install it first, as `train_job_bench.py` says.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import torch
from common import byte_corpus, out_dir, write_result
from train_job_bench import (
    ADMIN_TOKEN,
    PROJECT,
    Server,
    checkpoint_dir,
    free_port,
    local_server,
    serving_process,
    tail,
)

from crucible.client import CrucibleClient
from crucible.config.workload import TaskConfig, model_preset
from crucible.jobs.checkpoints import checkpoint_meta
from crucible.models.gpt import build_model
from crucible.schemas.runs import AttemptStart, RunSubmit
from crucible.sdk.checkpoint import CheckpointStore
from crucible.training.train import model_only

API_KEY = "sk-serve-bench"
MODEL_NAME = "bench"
ASCII = 128
ASCII_SCALE = 10.0
"""Scales the ASCII rows' logits far above the zeroed rows' (their sum of exponentials)."""


def register_checkpoint(api: CrucibleClient, server: Server, preset: str) -> int:
    """A TrainingRun and one checkpoint of the GPT `preset` with random weights, saved and
    registered as the trainer saves its own; its id."""
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": f"serve-bench-{uuid.uuid4().hex[:6]}"},
        "spec": {"experiment": "serve-bench", "config": {"model": {"preset": preset}}},
    }
    run = api.submit_run(RunSubmit.model_validate({"project": PROJECT, "manifest": manifest}))
    api.start_attempt(run.id, AttemptStart())
    torch.manual_seed(0)
    config = model_preset(preset)
    model = build_model(config)
    with torch.no_grad():
        # The byte tokenizer decodes ids past 255 to no text, and a stream sends a chunk only
        # when its text grows: a random model over 50,304 ids would stream next to nothing
        # before its end. Its tied embedding is made to favour ASCII bytes instead (ids under
        # 128, each a character of its own), so that every token reaches the client as a
        # real model's would; what is computed per token is the same.
        model.wte.weight[ASCII:].zero_()
        model.wte.weight[:ASCII].mul_(ASCII_SCALE)
    store = CheckpointStore(
        api, run_id=run.id, attempt=1, base_uri=checkpoint_dir(server, run.id).as_uri()
    )
    saved = store.save(
        1, model_only(model.state_dict()), meta=checkpoint_meta(config, TaskConfig(), "sft")
    )
    if saved is None:
        raise SystemExit("the checkpoint was saved but not registered")
    return saved.id


@contextmanager
def serving(
    server: Server, checkpoint_id: int, args: argparse.Namespace, log: Path
) -> Iterator[str]:
    """`crucible serve` of the checkpoint until the block ends; yields its base URL."""
    port = free_port()
    env = server.env | {
        "CRUCIBLE_API_URL": server.url,
        "CRUCIBLE_TOKEN": ADMIN_TOKEN,
        "CRUCIBLE_HOME": str(server.home),
        "CRUCIBLE_SERVE_API_KEY": API_KEY,
    }
    command = [
        *(sys.executable, "-m", "crucible", "serve", str(checkpoint_id)),
        *("--port", str(port), "--device", args.device, "--name", MODEL_NAME),
        *("--max-running", str(args.max_running)),
    ]
    url = f"http://127.0.0.1:{port}"
    with serving_process(
        command,
        env,
        log=log,
        ready_url=f"{url}/health",
        startup_seconds=args.startup_seconds,
        failure="crucible serve did not become healthy",
    ):
        yield url


@dataclass
class Outcome:
    """One streamed request, as its client saw it."""

    sent: float
    chunks: list[tuple[float, int]] = field(default_factory=list)
    """(arrival time, tokens carried) of each chunk that carried tokens."""

    finish_reason: str | None = None
    done: bool = False
    error: str | None = None

    @property
    def tokens(self) -> int:
        return sum(count for _, count in self.chunks)


async def stream_one(
    client: httpx.AsyncClient, url: str, prompt: list[int], max_tokens: int
) -> Outcome:
    body = {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "stream": True,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    outcome = Outcome(sent=time.perf_counter())
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                outcome.error = f"HTTP {response.status_code}: {text[:300]}"
                return outcome
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    outcome.done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    outcome.error = f"error event: {chunk['error']}"
                    return outcome
                for choice in chunk.get("choices", []):
                    count = len(choice.get("token_ids") or [])
                    if count:
                        outcome.chunks.append((time.perf_counter(), count))
                    if choice.get("finish_reason"):
                        outcome.finish_reason = choice["finish_reason"]
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome


def failure(outcome: Outcome, max_tokens: int) -> str | None:
    if outcome.error is not None:
        return outcome.error
    if not outcome.done:
        return "the stream ended without [DONE]"
    if outcome.tokens != max_tokens or outcome.finish_reason != "length":
        return f"{outcome.tokens} tokens, finish reason {outcome.finish_reason!r}"
    return None


async def load(
    url: str, prompts: list[list[int]], clients: int, max_tokens: int
) -> tuple[list[Outcome], float]:
    """`clients` concurrent clients sending `prompts` one request at a time; the outcomes and
    the wall seconds from the first request to the last answer."""
    queue = iter(prompts)
    outcomes: list[Outcome] = []
    headers = {"Authorization": f"Bearer {API_KEY}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        headers=headers, limits=limits, timeout=httpx.Timeout(600.0)
    ) as client:

        async def worker() -> None:
            # One iterator shared by every worker: asyncio switches only at awaits.
            for prompt in queue:
                outcomes.append(await stream_one(client, url, prompt, max_tokens))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return outcomes, time.perf_counter() - started


def percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | None]:
    """p50 and p99 (nearest rank), in milliseconds by default."""
    if not values:
        return {"p50": None, "p99": None, "count": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale, 2)

    return {"p50": rank(0.50), "p99": rank(0.99), "count": len(ordered)}


def summarize(outcomes: list[Outcome], seconds: float, max_tokens: int) -> dict[str, Any]:
    failures = [f for f in (failure(o, max_tokens) for o in outcomes) if f is not None]
    good = [o for o in outcomes if failure(o, max_tokens) is None]
    ttft = [o.chunks[0][0] - o.sent for o in good]
    gaps = [b[0] - a[0] for o in good for a, b in zip(o.chunks, o.chunks[1:], strict=False)]
    per_token = [
        (o.chunks[-1][0] - o.chunks[0][0]) / (o.tokens - o.chunks[0][1])
        for o in good
        if o.tokens > o.chunks[0][1]
    ]
    chunk_sizes = [count for o in good for _, count in o.chunks]
    tokens = sum(o.tokens for o in outcomes)
    return {
        "requests": len(outcomes),
        "failed": len(failures),
        "failures": failures[:5],
        "seconds": round(seconds, 3),
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / seconds, 1),
        "requests_per_s": round(len(outcomes) / seconds, 2),
        "ttft_ms": percentiles(ttft),
        "itl_ms": percentiles(gaps),
        "tpot_ms": percentiles(per_token),
        "tokens_per_chunk": round(statistics.fmean(chunk_sizes), 3) if chunk_sizes else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=512, help="timed requests in all")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-running", type=int, default=256, help="`crucible serve`'s")
    parser.add_argument("--preset", default="124M", help="tiny or small: a CPU smoke test")
    parser.add_argument("--device", default="cuda", help="`crucible serve --device`")
    parser.add_argument("--startup-seconds", type=float, default=300.0)
    parser.add_argument("--out", default="serve.json")
    args = parser.parse_args()

    context = model_preset(args.preset).max_seq_len
    if args.prompt_len + args.max_tokens > context:
        raise SystemExit(
            f"--prompt-len {args.prompt_len} + --max-tokens {args.max_tokens} exceed the "
            f"{args.preset} model's context of {context} tokens"
        )
    warmup = args.clients
    corpus = byte_corpus((warmup + args.requests) * args.prompt_len)
    prompts = corpus.view(-1, args.prompt_len).tolist()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with (
        tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp,
        local_server(Path(tmp)) as server,
        CrucibleClient(server.url, ADMIN_TOKEN) as api,
    ):
        checkpoint_id = register_checkpoint(api, server, args.preset)
        log = Path(tmp) / "serve.log"
        started = time.perf_counter()
        with serving(server, checkpoint_id, args, log) as url:
            startup = time.perf_counter() - started
            first, first_seconds = asyncio.run(
                load(url, prompts[:warmup], args.clients, args.max_tokens)
            )
            outcomes, seconds = asyncio.run(
                load(url, prompts[warmup:], args.clients, args.max_tokens)
            )
            metrics = httpx.get(f"{url}/metrics").text
        result = {
            "benchmark": "serve",
            "config": {
                "preset": args.preset,
                "device": args.device,
                "clients": args.clients,
                "requests": args.requests,
                "prompt_len": args.prompt_len,
                "max_tokens": args.max_tokens,
                "max_running": args.max_running,
                "sampling": "temperature 1, no top-p, ignore_eos",
            },
            "startup_seconds": round(startup, 1),
            "warmup": summarize(first, first_seconds, args.max_tokens),
            "timed": summarize(outcomes, seconds, args.max_tokens),
            "server_metrics": [
                line for line in metrics.splitlines() if line and not line.startswith("#")
            ],
        }
        print(json.dumps({k: result[k] for k in ("startup_seconds", "warmup", "timed")}, indent=1))
        write_result(out_dir() / args.out, result)
        if result["timed"]["failed"]:
            print(tail(log), file=sys.stderr)
            raise SystemExit(f"{result['timed']['failed']} requests failed")


if __name__ == "__main__":
    main()
