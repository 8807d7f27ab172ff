"""The random Hadamard transform (RHT) of NVIDIA's NVFP4 recipe: each run of 16 elements along
the last dimension is multiplied by Q = diag(signs) @ H16 / 4, with H16 the Sylvester Hadamard
matrix and `signs` a fixed random +-1 vector.

Q is orthonormal (Q @ Q.T = I), so transforming both operands of a matmul along the dimension
it reduces over leaves the product unchanged up to rounding: (A Q)(B Q)^T = A B^T. What it
changes is the distribution inside each block: an outlier is spread over its 16 neighbours, so
the block's amax, and with it the scale that every other element is rounded against, shrinks.
The recipe (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv
2509.25149) applies it to the inputs of the weight-gradient GEMM only; TE and MaxText do the
same (MaxText's NVFP4 example: "a 16x16 Hadamard matrix with a random sign vector is applied to
weight-gradient (Wgrad) inputs").

TE hard-codes one sign vector; here it is drawn from a seed, so it is fixed for a run and
reproducible, and one seed serves every layer, as TE's one vector does.
"""

import math

import torch
from torch import Tensor

HADAMARD_SIZE = 16


def hadamard_matrix(size: int = HADAMARD_SIZE) -> Tensor:
    """The size x size Sylvester Hadamard matrix of +-1 entries (float32); size a power of two."""
    if size < 1 or size & (size - 1):
        raise ValueError(f"Hadamard size={size}: use a power of two")
    h = torch.ones(1, 1)
    while h.shape[0] < size:
        h = torch.cat([torch.cat([h, h], dim=1), torch.cat([h, -h], dim=1)], dim=0)
    return h


def random_hadamard(seed: int, size: int = HADAMARD_SIZE) -> Tensor:
    """The orthonormal float32 transform diag(signs) @ H / sqrt(size), signs drawn from `seed`.

    The entries are +-1/4 for size 16: exact in every float format.
    """
    generator = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (size,), generator=generator).float() * 2 - 1
    return signs.unsqueeze(1) * hadamard_matrix(size) / math.sqrt(size)


def apply_hadamard(x: Tensor, transform: Tensor) -> Tensor:
    """x with each run of len(transform) elements along its last dimension multiplied by it."""
    size = transform.shape[0]
    if x.dim() == 0 or x.shape[-1] % size:
        raise ValueError(
            f"the Hadamard transform mixes runs of {size} along the last dimension; got shape "
            f"{tuple(x.shape)}: use a last dimension that is a multiple of {size}"
        )
    runs = x.reshape(*x.shape[:-1], -1, size)
    return (runs @ transform.to(device=x.device, dtype=x.dtype)).reshape(x.shape)
