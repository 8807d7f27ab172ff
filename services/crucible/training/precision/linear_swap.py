"""Swapping a model's nn.Linear layers for low-precision ones that share their parameters:
the loop fp8.py, fp8_scaled.py and numerics/emulated_linear.py all convert a model with."""

from collections.abc import Callable

from torch import nn


def swap_linears(
    model: nn.Module,
    make: Callable[[nn.Linear, int], nn.Linear],
    *,
    skip: tuple[str, ...],
) -> int:
    """Replace every plain nn.Linear in `model` not named in `skip` by `make(linear, n)` (n
    numbers the swaps in module order), moved to the linear's device and given its weight and
    bias; returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear or name in skip:
                continue
            layer = make(child, swapped)
            layer.to(child.weight.device)
            layer.weight = child.weight
            layer.bias = child.bias
            setattr(parent, name, layer)
            swapped += 1
    return swapped
