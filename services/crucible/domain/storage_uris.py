"""Where checkpoints and datasets may live: URIs that cannot climb out of their directory,
and, when the operator lists storage roots, only URIs under one of them.

Workloads and evals open these URIs with the credentials of the run that reads them, so a
URI pointing at `/etc`, at another project's bucket or at `../../` of a shared volume would
hand that run files it was never meant to read.
"""

from collections.abc import Sequence
from urllib.parse import unquote, urlparse

from crucible.domain.errors import InvalidInput


def uri_problem(uri: str) -> str | None:
    """Why `uri` is unsafe to store, or None. Needs no settings, so the schema checks it."""
    if any(ord(c) < 0x20 or c in "\x7f\\" for c in uri):
        return "must not contain control characters or backslashes"
    parsed = urlparse(uri)
    if parsed.scheme == "" and not uri.startswith("/"):
        return "must be an absolute path or a URI with a scheme (file:///..., s3://...)"
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        return "a file:// URI must name no host: use file:///absolute/path"
    path = parsed.path
    for _ in range(3):  # %252e%252e decodes to %2e%2e, then to ..
        path = unquote(path)
    if ".." in path.split("/"):
        return "must not contain a '..' path segment"
    return None


def require_under_roots(uri: str, roots: Sequence[str], *, field: str = "uri") -> None:
    """Refuse `uri` unless it lies under one of `roots` (no roots: any safe URI)."""
    if not roots:
        return
    normalised = f"file://{uri}" if uri.startswith("/") else uri
    for root in roots:
        prefix = root.rstrip("/")
        if normalised == prefix or normalised.startswith(prefix + "/"):
            return
    raise InvalidInput(
        field,
        uri,
        f"is outside the allowed storage roots ({', '.join(roots)}); write it under one of "
        "them or ask an operator to add a root to CRUCIBLE_STORAGE_ROOTS",
        location="body",
    )
