"""Refuse, at submit, a run whose checkpoint storage its pods could not use: a URI outside
the allowed roots, or object storage that does not answer or has no such bucket. Found
then, the mistake costs a 422; found by the workload, it costs a queue wait and a failed
first save."""

from typing import Any

from crucible.artifacts import remote, storage
from crucible.domain.errors import InvalidInput
from crucible.domain.storage_uris import require_under_roots

FIELD = "manifest.spec.checkpoints.storage"


def require_usable_storage(manifest: Any, roots: list[str]) -> None:
    checkpoints = getattr(manifest.spec, "checkpoints", None)
    uri = getattr(checkpoints, "storage", None)
    if not uri:
        return
    require_under_roots(uri, roots, field=FIELD)
    if storage.local_path(uri) is not None:
        return
    problem = remote.reachable_problem(uri)
    if problem is not None:
        raise InvalidInput(
            FIELD,
            uri,
            f"cannot be used: {problem}. The control plane reaches storage with the same "
            "credentials as the run's pods; check the URI, the bucket and the endpoint",
            location="body",
        )
