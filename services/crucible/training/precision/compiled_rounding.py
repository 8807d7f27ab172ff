"""The emulated formats' roundings compiled on their own (OperandQuantizer's `compiled`), to
the bits the eager ones give.

Two things stand between a compiled rounding and the eager one's bits on a GPU. Triton's
float32 `/` is an approximate division (`div.full.f32`, up to 2 ulp), and NVFP4's scales are
quotients whose last bit decides an element's code; Inductor emits IEEE division (`div_rn`)
when asked, under a config key whose name changed between torch releases. And a kernel may
flush subnormals to zero where eager keeps them, which moves the underflow share; newer
Inductors can be told not to.

Every call hands the compiled graph a plain, contiguous float32 tensor with autocast off
(`OperandQuantizer`): Dynamo guards on parameters' static shapes, on views and on the
autocast state, so a weight, its transpose and the forward's and backward's operands would
each compile again otherwise, past its recompile limit, after which calls run eager.
"""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

Rounding = TypeVar("Rounding", bound=Callable[..., object])

DIVISION_KEYS = ("eager_numerics.division_rounding", "emulate_divison_rounding")
"""IEEE division in Triton: the current name, then torch 2.10-2.11's (spelled so)."""
SUBNORMAL_KEYS = ("eager_numerics.disable_ftz",)


@functools.cache
def compiled_rounding(rounding: Rounding) -> Rounding:
    """`rounding` under torch.compile with dynamic shapes and eager division; one wrapper a
    function, so every layer shares its graphs."""
    return torch.compile(rounding, dynamic=True, options=eager_numerics())  # type: ignore[return-value]


def eager_numerics() -> dict[str, str | int | bool | Callable[..., Any]]:
    # Imported here: Inductor's config loads Triton, whose bindings report leaks on stderr at
    # exit, the last lines of every job's log that imported this module and never compiled.
    from torch._inductor import config as inductor_config

    known = inductor_config.get_config_copy()
    division = [key for key in DIVISION_KEYS if key in known]
    if not division:
        raise RuntimeError(
            f"torch {torch.__version__}'s Inductor has no IEEE-division option "
            f"(none of {DIVISION_KEYS}): compiled NVFP4 roundings would differ from eager; "
            "run with compile off, or a torch of 2.10 or later"
        )
    return {key: True for key in (division[0], *(k for k in SUBNORMAL_KEYS if k in known))}
