"""The download cache that torchrun's local ranks share: eight processes fetching the same
remote dataset or artifact into one cache at once all get the verified copy, and none
sees another's partial download (the two-pod SFT of tests/k8s/test_chart_real_node.py
failed so: one rank found its download removed by another, exited, and every other rank
lost its peer). The files are on the test stack's S3 server: a `file://` dataset or
artifact is read in place, never cached, and storage takes no other scheme."""

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crucible.artifacts import remote
from crucible.artifacts.digest import content_of
from crucible.schemas.lineage import ArtifactPublic, DatasetVersionPublic
from crucible.sdk import artifacts, datasets
from tests.object_store import ObjectStore

PROCESSES = 8


def _dataset_copy(args: tuple[str, str, Path]) -> str:
    uri, digest, cache = args
    # Only the fields a download reads.
    fields: dict[str, Any] = {"uri": uri, "digest": digest, "ref": "data@1"}
    version = DatasetVersionPublic.model_construct(**fields)
    return str(datasets._cached_copy(version, cache))


def _artifact_copy(args: tuple[str, str, Path]) -> str:
    uri, digest, cache = args
    fields: dict[str, Any] = {"id": 1, "name": "model", "uri": uri, "digest": digest}
    artifact = ArtifactPublic.model_construct(**fields)

    class OneArtifact:
        def get_artifact(self, _id: int) -> ArtifactPublic:
            return artifact

    fetched = artifacts.fetch(OneArtifact(), project="p", ref="1", cache_dir=cache)  # type: ignore[arg-type]
    return str(fetched.path)


@pytest.mark.parametrize("copy", [_dataset_copy, _artifact_copy], ids=["dataset", "artifact"])
def test_processes_sharing_a_cache_all_get_the_verified_copy(
    copy: Callable[[tuple[str, str, Path]], str], tmp_path: Path, s3: ObjectStore
) -> None:
    source = tmp_path / "store" / "files"
    source.mkdir(parents=True)
    for part in range(4):  # big enough that the downloads overlap
        (source / f"part-{part}.jsonl").write_bytes(
            b'{"prompt": "1+1=", "completion": "2"}\n' * 60_000
        )
    digest = content_of(source).digest
    uri = f"{s3.prefix('download-cache')}/files"
    remote.upload(source, uri)
    cache = tmp_path / "cache"
    # The spawned processes inherit the environment `s3` points at the store.
    work = [(uri, digest, cache)] * PROCESSES
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        paths = pool.map(copy, work)
    assert len(set(paths)) == 1
    copied = Path(paths[0])
    assert content_of(copied).digest == digest
    leftovers = [p.name for p in copied.parent.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []
