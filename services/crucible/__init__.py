"""Crucible: model-improvement experiments on Kubernetes with full lineage."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crucible.sdk.run import Run

__version__ = "0.1.0"


def init(**kwargs: Any) -> "Run":
    """Join the run this process serves; see `crucible.sdk.run.init`.

    Imported on call: `import crucible` stays cheap for the CLI, which never needs torch.
    """
    from crucible.sdk.run import init as _init

    return _init(**kwargs)
