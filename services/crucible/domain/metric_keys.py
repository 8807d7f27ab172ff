"""Run metric keys that the control plane reads as well as the workloads write, spelled once
here so that neither imports the other."""

NUMERICS_SATURATED_MAX = "precision/saturated_max"
"""A low-precision run's largest share of a quantized operand's values that the format's
maximum clipped (values that would have rounded past it), over its layers and operands, at
the steps it logs its numerics statistics."""

NUMERICS_UNDERFLOW_MAX = "precision/underflow_max"
"""The same for values that were non-zero and came back zero."""

NUMERICS_MATMUL_ERROR_MAX = "precision/matmul_rel_error_max"
"""A low-precision run's largest relative error of a Linear layer's forward GEMM against bf16's
on the same batch, over its layers, at the steps it samples it."""
