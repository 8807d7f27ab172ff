"""Counter-based uniform draws: lowbias32 as its reference writes it, uniform in [0, 1), a
stream per key, and unbiased stochastic rounding when NVFP4 draws from them."""

import torch

from crucible.training.precision import counter_rng
from crucible.training.precision.nvfp4 import fake_quantize_nvfp4


def lowbias32(x: int) -> int:
    """Wellons' reference, in 32-bit unsigned arithmetic."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_hash32_is_lowbias32_over_the_whole_32_bit_range() -> None:
    values = [0, 1, 2, 12345, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, 0xFFFFFFFE, 0xFFFFFFFF]
    hashed = counter_rng.hash32(torch.tensor(values, dtype=torch.int64)).tolist()
    assert hashed == [lowbias32(v) for v in values]


def test_draws_are_uniform_on_the_unit_interval_and_a_key_is_one_stream() -> None:
    key = counter_rng.stream_key(7, torch.tensor(3, dtype=torch.int64))
    draws = counter_rng.uniform((256, 256), key)
    assert draws.dtype == torch.float32 and draws.shape == (256, 256)
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean().item() - 0.5) < 0.005
    # Deciles hold a tenth each, within a few standard errors.
    counts = torch.histc(draws, bins=10, min=0, max=1) / draws.numel()
    assert ((counts - 0.1).abs() < 0.004).all()
    assert torch.equal(draws, counter_rng.uniform((256, 256), key))
    for other in (
        counter_rng.stream_key(8, torch.tensor(3, dtype=torch.int64)),
        counter_rng.stream_key(7, torch.tensor(4, dtype=torch.int64)),
        counter_rng.stream_key(7, torch.tensor(3 + 2**32, dtype=torch.int64)),
    ):
        assert (counter_rng.uniform((256, 256), other) == draws).float().mean() < 0.001


def test_nvfp4_rounds_without_bias_on_counter_draws() -> None:
    x = torch.full((16, 16), 0.3) * torch.linspace(0.5, 6.0, 16)
    x[0, 0] = 6.0  # pins the tensor scale, so the other values sit between grid points
    total = torch.zeros_like(x)
    draws = 400
    for counter in range(draws):
        key = counter_rng.stream_key(0, torch.tensor(counter, dtype=torch.int64))
        uniform = counter_rng.uniform(x.shape, key)
        total += fake_quantize_nvfp4(x, stochastic=True, uniform=uniform)
    nearest = fake_quantize_nvfp4(x)
    assert ((total / draws - x).abs() < 0.02 * x.abs().max()).all()
    assert ((nearest - x).abs().max()) > 0.05
