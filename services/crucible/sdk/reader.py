"""Registered checkpoints and artifacts read outside any run: what `crucible serve` loads a
checkpoint's model with.

It offers what `workloads.jobs.checkpoints.load_model` asks of a run (the checkpoint's
record, the artifacts its meta names, its weights, digest-checked), without recording
inputs: serving a checkpoint makes nothing whose lineage would need them.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crucible.client import CrucibleClient
from crucible.schemas.lineage import CheckpointPublic
from crucible.sdk import artifacts
from crucible.sdk.artifacts import InputArtifact


class CheckpointReader:
    def __init__(self, client: CrucibleClient, *, project: str, home: Path) -> None:
        self._client = client
        self.project = project
        self._cache_dir = home / "artifacts"

    def get_checkpoint(self, checkpoint_id: int) -> CheckpointPublic:
        return self._client.get_checkpoint(checkpoint_id)

    def input_artifact(self, ref: str) -> InputArtifact:
        return artifacts.fetch(
            self._client, project=self.project, ref=ref, cache_dir=self._cache_dir
        )

    def load_checkpoint(self, state: Mapping[str, Any], *, checkpoint_id: int) -> int | None:
        from crucible.sdk.checkpoint import CheckpointStore

        record = self._client.get_checkpoint(checkpoint_id)
        # A store of the checkpoint's run, only to load by id: it never saves, so it needs
        # no attempt and no base URI.
        store = CheckpointStore(self._client, run_id=record.run_id, attempt=None, base_uri="")
        return store.load(state, None, checkpoint_id=checkpoint_id)
