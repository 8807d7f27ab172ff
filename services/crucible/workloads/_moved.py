"""A published path that moved: importing it gives the module at its new path (the same
module object, so isinstance and monkeypatching still agree), and `python -m` on it runs
the new one, each with one FutureWarning naming where to go."""

import importlib
import runpy
import sys
import warnings


def moved(old: str, new: str) -> None:
    """Make `old` (the shim's `__name__`) the module `new`, or run `new` as `__main__`."""
    if old == "__main__":
        warnings.warn(f"`python -m {_published(new)}` moved to `python -m {new}`", FutureWarning, 2)
        runpy.run_module(new, run_name="__main__", alter_sys=True)
        return
    warnings.warn(f"{old} moved to {new}", FutureWarning, 3)
    sys.modules[old] = importlib.import_module(new)


_PUBLISHED = {
    "crucible.jobs.": "crucible.workloads.jobs.",
    "crucible.online_rl.generator_process": "crucible.agents.generator_process",
}


def _published(new: str) -> str:
    for prefix, old in _PUBLISHED.items():
        if new.startswith(prefix):
            return old + new[len(prefix) :]
    return new
