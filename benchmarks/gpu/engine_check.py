"""On the GPU: the engine's fast decode path gives what its plain path gives, and where a
decode step's time goes.

    python benchmarks/gpu/engine_check.py --out engine_check.json

1. Greedy completions of a float32 model with unit-scale weights (so greedy decoding
   depends on every key it attends to) through CUDA graphs and the paged attention kernel,
   against `cuda_graphs=False` with the blocks gathered for SDPA: rows whose tokens agree,
   and the largest logprob difference.
2. The sampler on (256, vocab) logits: the fused kernel's tokens against the torch race's,
   per temperature.
3. One decode step at batch 256 on the 124M shape in bf16: the engine's whole step, the graph
   replay alone (the GPU's share), and the host's share (the difference), over a run of
   steps after the graphs are captured.

The CPU tests cover the kernel through Triton's interpreter; CUDA graphs exist only here.
"""

import argparse
import dataclasses
import statistics
import time
from typing import Any

import torch
from common import out_dir, write_result

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams
from crucible.config.workload import model_preset
from crucible.engine.engine import Engine
from crucible.engine.sampler import SamplingRows, sample
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer


def paths_agree(device: str) -> dict[str, Any]:
    torch.manual_seed(0)
    config = dataclasses.replace(model_preset("small"), max_seq_len=512)
    model = build_model(config, device=device)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 1.0)
    tokenizer = ByteTokenizer()
    prompts = [
        [1 + (7 * row + 3 * column) % 250 for column in range(8 + 7 * row)] for row in range(24)
    ]
    # Lengths spread out, so that the batch shrinks and crosses graph buckets as rows end.
    requests = [
        SamplingParams(max_tokens=40 + 11 * i, temperature=0.0, ignore_eos=True) for i in range(24)
    ]
    results = {}
    for fast in (True, False):
        engine = Engine(
            model, tokenizer, EngineConfig(block_size=16, num_blocks=2048, cuda_graphs=fast)
        )
        engine.runner.decode_in_place = fast  # type: ignore[attr-defined]
        ids = [engine.add_request(p, r) for p, r in zip(prompts, requests, strict=True)]
        while engine.has_work:
            engine.step()
        results[fast] = [engine.release(i).completions[0] for i in ids]
    same = sum(a.tokens == b.tokens for a, b in zip(results[True], results[False], strict=True))
    largest = max(
        abs(x.logprob - y.logprob)
        for a, b in zip(results[True], results[False], strict=True)
        if a.tokens == b.tokens
        for x, y in zip(a.logprobs, b.logprobs, strict=True)
    )
    return {"rows": len(prompts), "rows_equal": same, "max_logprob_difference": largest}


def samplers_agree(device: str) -> dict[str, Any]:
    torch.manual_seed(1)
    rows, vocab = 256, 50304
    logits = torch.randn(rows, vocab, device=device) * 3
    agreement = {}
    for temperature in (0.0, 0.7, 1.0, 1.5):
        settings = SamplingRows(
            temperature=torch.full((rows,), temperature, device=device),
            top_p=torch.ones(rows, device=device),
            top_k=torch.zeros(rows, dtype=torch.long, device=device),
            seeds=torch.arange(rows, device=device) * 7919,
            positions=torch.full((rows,), 100, device=device),
            filtered=False,
            top_logprobs=0,
        )
        fused = sample(logits, settings)
        plain = sample(logits.cpu(), _on_cpu(settings))
        agreement[str(temperature)] = {
            "tokens_equal": int((fused.tokens.cpu() == plain.tokens).sum()),
            "max_logprob_difference": float((fused.logprobs.cpu() - plain.logprobs).abs().max()),
        }
    return {"rows": rows, "vocab": vocab, "by_temperature": agreement}


def _on_cpu(settings: SamplingRows) -> SamplingRows:
    return dataclasses.replace(
        settings,
        **{
            f.name: getattr(settings, f.name).cpu()
            for f in dataclasses.fields(SamplingRows)
            if isinstance(getattr(settings, f.name), torch.Tensor)
        },
    )


def step_split(device: str, batch: int, steps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = build_model(model_preset("124M"), device=device).to(torch.bfloat16).eval()
    prompt_len, new = 64, steps + 40
    engine = Engine(
        model,
        ByteTokenizer(),
        EngineConfig(
            block_size=16, num_blocks=batch * (-(-(prompt_len + new) // 16)), max_running=batch
        ),
    )
    params = SamplingParams(max_tokens=new, temperature=1.0, ignore_eos=True, seed=0)
    for row in range(batch):
        engine.add_request([1 + (row + i) % 250 for i in range(prompt_len)], params)
    for _ in range(20):  # the prefill, then the capture of the batch's graph
        engine.step()
    torch.cuda.synchronize()
    step_seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        engine.step()  # ends in the host reading the sampled tokens: a sync
        step_seconds.append(time.perf_counter() - started)
    assert engine.graphs is not None
    graph, _ = engine.graphs._graphs[batch]
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        graph.replay()
    torch.cuda.synchronize()
    replay = (time.perf_counter() - started) / steps
    step = statistics.median(step_seconds)
    return {
        "batch": batch,
        "step_ms_median": round(step * 1e3, 3),
        "graph_replay_ms": round(replay * 1e3, 3),
        "rest_of_step_ms": round((step - replay) * 1e3, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="engine_check.json")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    device = "cuda"
    result: dict[str, Any] = {"paths": paths_agree(device), "samplers": samplers_agree(device)}
    print(result, flush=True)
    result["step_split"] = [step_split(device, batch, args.steps) for batch in (1, 32, 256)]
    print(result["step_split"], flush=True)
    write_result(out_dir() / args.out, {"benchmark": "engine_check", **result})


if __name__ == "__main__":
    main()
