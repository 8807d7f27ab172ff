"""What the workload runs on, for its attempt's provenance: the interpreter, Crucible, the
ML packages it imported, and the distribution its own code came from."""

import importlib.metadata
import platform
import sys

import crucible
from crucible.schemas.provenance import MAX_PACKAGES, AttemptEnvironment

# Imported packages whose versions change numerics or behaviour enough to matter when a
# result is compared or reproduced.
_WATCHED = ("torch", "numpy", "transformers", "tokenizers", "datasets", "accelerate", "triton")


def current_environment() -> AttemptEnvironment:
    packages = {"python": platform.python_version(), "crucible": crucible.__version__}
    for name in _WATCHED:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if isinstance(version, str):
            packages[name] = version
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if isinstance(cuda, str):
        packages["cuda"] = cuda
    main = _main_distribution()
    if main is not None and main[0] not in packages:
        packages[main[0]] = main[1]
    clipped = {k[:128]: v[:128] for k, v in list(packages.items())[:MAX_PACKAGES]}
    return AttemptEnvironment(packages=clipped)


def _main_distribution() -> tuple[str, str] | None:
    """The installed distribution of the `-m` module that runs (None for a bare script)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or not spec.name:
        return None
    top = spec.name.partition(".")[0]
    for distribution in importlib.metadata.packages_distributions().get(top, []):
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
