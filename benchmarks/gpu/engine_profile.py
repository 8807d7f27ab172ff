"""Where a decode step's GPU time goes: the kernels of a few eager steps at one batch size,
and the paged attention kernel alone against SDPA over a dense cache of the same size.

    python benchmarks/gpu/engine_profile.py --batch 256 --out engine_profile.txt
"""

import argparse
import math

import torch
import torch.nn.functional as F
from common import out_dir
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams
from crucible.config.workload import model_preset
from crucible.engine.engine import Engine
from crucible.engine.paged_attention import decode_attention
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer


def attention_alone(batch: int, context: int, heads: int, head_dim: int) -> str:
    block = 16
    blocks_per_row = math.ceil(context / block)
    k = torch.randn(batch * blocks_per_row + 1, block, heads, head_dim, device="cuda").bfloat16()
    v = torch.randn_like(k)
    tables = torch.randperm(batch * blocks_per_row, device="cuda").view(batch, blocks_per_row)
    lengths = torch.full((batch,), context, device="cuda")
    q = torch.randn(batch, heads, head_dim, device="cuda").bfloat16()
    variants = []
    for tile in (32, 64, 128):
        for warps in (1, 2, 4, 8):
            seconds = do_bench(
                lambda tile=tile, warps=warps: decode_attention(
                    q, k, v, tables, lengths, scale=0.125, keys_per_tile=tile, num_warps=warps
                )
            )
            variants.append(f"tile {tile} warps {warps}: {seconds * 1e3:.1f} us")
    paged = do_bench(lambda: decode_attention(q, k, v, tables, lengths, scale=0.125))
    dense_k = torch.randn(batch, heads, context, head_dim, device="cuda").bfloat16()
    dense_v = torch.randn_like(dense_k)
    dense = do_bench(
        lambda: F.scaled_dot_product_attention(q[:, :, None], dense_k, dense_v, scale=0.125)
    )
    kv_bytes = 2 * batch * context * heads * head_dim * 2
    return (
        f"attention, batch {batch}, context {context}: paged kernel {paged * 1e3:.1f} us "
        f"({kv_bytes / paged / 1e9:.0f} GB/s), SDPA dense {dense * 1e3:.1f} us "
        f"({kv_bytes / dense / 1e9:.0f} GB/s); " + ", ".join(variants)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--out", default="engine_profile.txt")
    args = parser.parse_args()
    lines = [attention_alone(args.batch, context, 12, 64) for context in (64, 192, 320)]
    print("\n".join(lines), flush=True)

    torch.manual_seed(0)
    model = build_model(model_preset("124M"), device="cuda").to(torch.bfloat16).eval()
    engine = Engine(
        model,
        ByteTokenizer(),
        EngineConfig(block_size=16, num_blocks=args.batch * 24, max_running=args.batch),
    )
    params = SamplingParams(max_tokens=300, temperature=1.0, ignore_eos=True, seed=0)
    for row in range(args.batch):
        engine.add_request([1 + (row + i) % 250 for i in range(64)], params)
    for _ in range(40):
        engine.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as recorded:
        for _ in range(10):
            engine.step()
        torch.cuda.synchronize()
    table = recorded.key_averages().table(sort_by="cuda_time_total", row_limit=25)
    print(table, flush=True)
    (out_dir() / args.out).write_text("\n".join([*lines, table]))


if __name__ == "__main__":
    main()
