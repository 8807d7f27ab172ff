"""The counter hash behind the sampler's noise, spelled once for the torch sampler
(`sampler.py`) and its Triton kernel (`sampler_kernel.py`): MurmurHash3's 64-bit finalizer
constants and the golden-ratio step, as the int64 values torch's tensors hold."""

MIX_1 = 0xFF51AFD7ED558CCD - 2**64
MIX_2 = 0xC4CEB9FE1A85EC53 - 2**64
GOLDEN = 0x9E3779B97F4A7C15 - 2**64
LOW_31 = (1 << 31) - 1
