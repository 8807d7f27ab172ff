"""The random Hadamard transform: orthonormal, cancels in a product, spreads outliers."""

import pytest
import torch

from crucible.training.precision.hadamard import apply_hadamard, hadamard_matrix, random_hadamard


def test_the_transform_is_orthonormal_with_seeded_signs() -> None:
    q = random_hadamard(seed=0)
    assert torch.equal(q @ q.t(), torch.eye(16))
    assert set(q.abs().flatten().tolist()) == {0.25}
    assert torch.equal(q, random_hadamard(seed=0))
    assert not torch.equal(q, random_hadamard(seed=1))
    h = hadamard_matrix(16)
    assert torch.equal(h @ h.t(), 16 * torch.eye(16))


def test_transforming_both_operands_along_the_reduction_leaves_the_product() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(24, 64, generator=g), torch.randn(40, 64, generator=g)
    q = random_hadamard(seed=3)
    product = apply_hadamard(a, q) @ apply_hadamard(b, q).t()
    torch.testing.assert_close(product, a @ b.t(), rtol=1e-5, atol=1e-5)


def test_an_outlier_is_spread_over_its_block() -> None:
    x = torch.randn(1, 16, generator=torch.Generator().manual_seed(0)) * 0.01
    x[0, 5] = 100.0
    spread = apply_hadamard(x, random_hadamard(seed=0))
    # Orthonormal: the norm is kept, and the outlier's energy is shared by all 16.
    assert spread.norm().item() == pytest.approx(x.norm().item(), rel=1e-6)
    assert spread.abs().max().item() < 0.26 * x.abs().max().item()


def test_a_last_dimension_off_the_transform_is_refused() -> None:
    with pytest.raises(ValueError, match=r"runs of 16.*\(2, 24\)"):
        apply_hadamard(torch.randn(2, 24), random_hadamard(seed=0))
