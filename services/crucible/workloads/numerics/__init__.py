"""Block-scaled low-precision numerics (MXFP8, NVFP4), emulated by rounding through the formats.

mxfp8.py and nvfp4.py quantize; reference.py re-derives the same bits slowly for the tests;
hadamard.py is NVFP4's random Hadamard transform; recipes.py says which GEMM operand gets what;
emulated_linear.py puts it in a model; telemetry.py reports saturation and underflow.
"""
