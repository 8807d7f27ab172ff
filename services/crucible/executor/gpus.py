"""Which GPUs this machine has and which are free; runs that need more wait their turn."""

import os
import shutil
import subprocess


def detect_gpus() -> list[int]:
    """GPU indices from CUDA_VISIBLE_DEVICES when set, else nvidia-smi, else none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(i) for i in visible.split(",") if i.strip().isdigit()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [smi, "--query-gpu=index", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return [int(line) for line in result.stdout.split() if line.strip().isdigit()]


class GpuPool:
    def __init__(self, gpus: list[int]) -> None:
        self._free = sorted(gpus)
        self.total = len(gpus)

    def take(self, count: int) -> list[int] | None:
        """`count` GPUs, or None while not enough are free (the caller queues the run)."""
        if count > len(self._free):
            return None
        taken, self._free = self._free[:count], self._free[count:]
        return taken

    def give_back(self, gpus: list[int]) -> None:
        self._free = sorted(self._free + gpus)
