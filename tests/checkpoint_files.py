"""Checkpoints whose files exist: a directory per (run, step, content) under one folder for
the whole test session, and the fields that register it. Recovery checks a checkpoint's files
before it resumes from one, so a registered URI with nothing behind it would be retired."""

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from crucible.artifacts.digest import content_of

ROOT = Path(tempfile.mkdtemp(prefix="crucible-test-checkpoints-"))
"""A storage root of every test server (tests/conftest.py): checkpoints go in the folder the
platform gives each run there, `runs/<run id>/`, as the only place a run's checkpoints may be."""


def checkpoint_files(run_id: int | str, step: int, content: str) -> dict[str, Any]:
    """`uri`, `digest` and `size_bytes` of a checkpoint directory holding `content`; the
    same arguments give the same directory, so registering it twice is the same checkpoint."""
    tag = hashlib.sha256(content.encode()).hexdigest()[:12]
    folder = ROOT / "runs" / str(run_id) / f"step-{step:08d}-{tag}"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        (folder / "state").write_text(content)
    found = content_of(folder)
    return {"uri": folder.as_uri(), "digest": found.digest, "size_bytes": found.size_bytes}
