"""The paged decode-attention kernel gives what gathering the blocks and running SDPA gives.

The kernel is Triton; on this CPU it runs through Triton's interpreter, which reads
TRITON_INTERPRET when Triton is first imported, so the checks run in a child process of
their own (this file, run as a script).
"""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="the kernel is Triton's; CPU-only installs go without")


def reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
    window: int | None,
) -> torch.Tensor:
    """Each row's blocks gathered into one run of keys, attended by SDPA with a mask."""
    heads = q.size(1)
    kv_heads = k_cache.size(2)
    keys = k_cache[tables].flatten(1, 2).transpose(1, 2).float()
    values = v_cache[tables].flatten(1, 2).transpose(1, 2).float()
    keys = keys.repeat_interleave(heads // kv_heads, dim=1)
    values = values.repeat_interleave(heads // kv_heads, dim=1)
    index = torch.arange(keys.size(2))
    visible = index[None, :] < lengths[:, None]
    if window is not None:
        visible &= index[None, :] >= lengths[:, None] - window
    out = F.scaled_dot_product_attention(
        q.float()[:, :, None], keys, values, attn_mask=visible[:, None, None], scale=scale
    )
    return out[:, :, 0]


def check(
    *, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, window: int | None
) -> None:
    from crucible.engine.paged_attention import decode_attention

    torch.manual_seed(heads * 100 + head_dim)
    block_size, blocks, rows = 16, 40, 5
    k_cache = torch.randn(blocks + 1, block_size, kv_heads, head_dim).to(dtype)
    v_cache = torch.randn_like(k_cache)
    # Rows of one key, of a part block, of exactly a tile, across tiles; blocks out of order.
    lengths = torch.tensor([1, 7, 64, 65, 150])
    order = torch.randperm(blocks)
    tables = torch.full((rows, 12), blocks, dtype=torch.long)
    used = 0
    for row, length in enumerate(lengths.tolist()):
        count = math.ceil(length / block_size)
        tables[row, :count] = order[used : used + count]
        used += count
    q = torch.randn(rows, heads, head_dim).to(dtype)
    scale = 1 / math.sqrt(head_dim)
    got = decode_attention(q, k_cache, v_cache, tables, lengths, scale=scale, window=window)
    want = reference(q, k_cache, v_cache, tables, lengths, scale, window)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want, atol=tolerance, rtol=tolerance)
    assert got.dtype == dtype


def engine_check() -> None:
    """The built-in GPT's engine decoding through the kernel, against its gather path: the
    same greedy tokens, the same logprobs."""
    from crucible.config.engine import EngineConfig
    from crucible.config.sampling import SamplingParams
    from crucible.config.workload import model_preset
    from crucible.engine.engine import Engine
    from crucible.models.gpt import build_model
    from crucible.models.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    model = build_model(model_preset("tiny"))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 1.0)
    tokenizer = ByteTokenizer()
    prompts = [tokenizer.encode(p, bos=True) for p in ["1+2=", "a longer prompt, 37+58=", "9"]]
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    outputs = {}
    for in_place in (False, True):
        engine = Engine(model, tokenizer, EngineConfig(block_size=4, num_blocks=64))
        engine.runner.decode_in_place = in_place  # type: ignore[attr-defined]
        outputs[in_place] = [o.completions[0] for o in engine.generate(prompts, params)]
    for plain, fast in zip(outputs[False], outputs[True], strict=True):
        assert plain.tokens == fast.tokens
        torch.testing.assert_close(
            [t.logprob for t in fast.logprobs],
            [t.logprob for t in plain.logprobs],
            atol=1e-4,
            rtol=1e-4,
        )
    assert len({tuple(c.tokens) for c in outputs[True]}) > 1


CASES = {
    "gpt_heads": dict(heads=4, kv_heads=4, head_dim=16, dtype=torch.float32, window=None),
    "grouped_query": dict(heads=6, kv_heads=2, head_dim=8, dtype=torch.float32, window=None),
    "head_dim_not_a_power_of_two": dict(
        heads=2, kv_heads=1, head_dim=12, dtype=torch.float32, window=None
    ),
    "sliding_window": dict(heads=2, kv_heads=2, head_dim=16, dtype=torch.float32, window=20),
    "bfloat16": dict(heads=4, kv_heads=4, head_dim=16, dtype=torch.bfloat16, window=None),
}


def test_kernel_and_the_engine_through_it_match_the_gather_path() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == [*sorted(CASES), "engine"], done.stdout


if __name__ == "__main__":
    for name in sorted(CASES):
        check(**CASES[name])  # type: ignore[arg-type]
        print(name, flush=True)
    engine_check()
    print("engine", flush=True)
