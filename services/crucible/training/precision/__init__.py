"""Low-precision training: the run's `precision` applied to a model (`apply.py`), fp8 with
per-tensor or finer scales, and the block-scaled formats (MXFP8, NVFP4) emulated by rounding."""
