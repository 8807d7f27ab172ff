"""What a run's profiles are called and where they lie in its outputs.

The trainer's StepProfiler writes them and the API and CLI read them back. Both take the
names from here, so a file the one writes is a file the other finds, and the API can refuse
any other name before it goes near the filesystem.
"""

import re
from dataclasses import dataclass

PROFILE_DIR = "profile"
"""Under the run's outputs directory (`run.outputs_dir`)."""

TABLE_SUFFIX = ".txt"
"""The profiler's kernel table, as `key_averages().table()` prints it."""
TRACE_SUFFIX = ".trace.json.gz"
"""The Chrome/Perfetto trace, gzipped."""
SUMMARY_SUFFIX = ".summary.json"
"""`crucible.training.profile_summary`'s reading of the trace: top kernels, time split."""

# Digits only, without leading zeros, so that one profile has one name and a name can never
# reach outside the profile directory. Ranks fit 32 bits, steps 64.
_NAME = re.compile(r"rank(0|[1-9][0-9]{0,8})-steps([1-9][0-9]{0,17})-([1-9][0-9]{0,17})")


@dataclass(frozen=True)
class ProfileName:
    rank: int
    first_step: int
    last_step: int

    def __str__(self) -> str:
        return f"rank{self.rank}-steps{self.first_step}-{self.last_step}"


def parse_profile_name(name: str) -> ProfileName | None:
    """The rank and steps of `rank<R>-steps<A>-<B>`; None for anything else."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    rank, first, last = (int(group) for group in match.groups())
    return ProfileName(rank=rank, first_step=first, last_step=last)
