"""Checkpoints and datasets on object storage (`s3://...`): the one place that opens an
fsspec filesystem, so the SDK, the workers and the API reach a store the same way.

Credentials and the endpoint come from the environment the AWS SDKs read
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, `AWS_DEFAULT_REGION`); on
Kubernetes they come from a Secret, so no URI, spec or event ever carries them.
"""

from pathlib import Path
from typing import Any

from crucible.artifacts.digest import Content, content_of_remote

# A store that does not answer must fail a save, a check or a submit in seconds, not after
# botocore's default of five attempts with a minute's timeout each.
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 60
MAX_ATTEMPTS = 3


class StorageUnavailable(Exception):
    """The storage behind a URI cannot be reached, or has no driver in this process."""


def configure_defaults() -> None:
    """Give every s3:// filesystem of this process the short timeouts above, unless the user's
    fsspec configuration (FSSPEC_S3_* variables, ~/.config/fsspec) already sets them. Set in
    fsspec's global configuration rather than passed per call, so the filesystems DCP's
    checkpoint reader and writer open get them too."""
    import fsspec.config  # type: ignore[import-untyped]

    s3 = fsspec.config.conf.setdefault("s3", {})
    s3.setdefault(
        "config_kwargs",
        {
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "read_timeout": READ_TIMEOUT_SECONDS,
            "retries": {"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
        },
    )


# The schemes storage URIs may have (domain/storage_uris.py). Any other would let a URI someone
# registered make this process send requests (http://, ftp://) or open what fsspec chains.
SCHEMES = ("s3", "file")


def filesystem(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem of `uri` and the path inside it (no scheme)."""
    import fsspec

    configure_defaults()
    scheme = uri.split("://", 1)[0] if "://" in uri else "file"
    if scheme not in SCHEMES or "::" in uri:
        raise StorageUnavailable(f"{uri!r}: only {' and '.join(SCHEMES)} URIs are storage")
    try:
        fs, root = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise StorageUnavailable(
            f"{uri!r}: no storage driver for {scheme}:// in this process ({exc})"
        ) from exc
    return fs, str(root)


def content(uri: str) -> Content | None:
    """The digest and size of the file or directory at `uri`; None when nothing is there."""
    fs, root = filesystem(uri)
    fs.invalidate_cache(root)  # another process wrote it: never trust a cached listing
    if not fs.exists(root):
        return None
    return content_of_remote(fs, root)


def size(uri: str) -> int | None:
    """Total bytes of the file or directory at `uri`, from its listing; None when nothing is
    there."""
    fs, root = filesystem(uri)
    fs.invalidate_cache(root)
    found = fs.find(root, detail=True)
    if not found:
        return None
    return sum(int(info["size"]) for info in found.values())


def upload(local: Path, uri: str) -> None:
    """Copy the file or directory `local` to `uri`, replacing what was there."""
    fs, root = filesystem(uri)
    if fs.exists(root):
        fs.rm(root, recursive=True)
    if local.is_dir():
        fs.put(str(local), root, recursive=True)
    else:
        fs.put_file(str(local), root)
    fs.invalidate_cache(root)


def download(uri: str, local: Path) -> None:
    """Copy the file or directory at `uri` to `local` (which must not exist yet)."""
    fs, root = filesystem(uri)
    # s3fs fetches an object over its block size as ranges, several at a time, each held in
    # memory until written, so a large dataset cost the trainer more memory than its size
    # (benchmarks/README.md, dataset reads). One stream writes as it reads, in small pieces.
    streamed = {"max_concurrency": 1} if getattr(fs, "max_concurrency", None) else {}
    if fs.isdir(root):
        local.mkdir(parents=True)
        for name in fs.find(root):
            relative = name[len(root.rstrip("/")) :].lstrip("/")
            target = local / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(name, str(target), **streamed)
    else:
        local.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(root, str(local), **streamed)


def remove(uri: str) -> None:
    fs, root = filesystem(uri)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def reachable_problem(uri: str) -> str | None:
    """Why `uri`'s bucket cannot be used from here, or None: it answers and exists."""
    try:
        fs, root = filesystem(uri)
        bucket = root.split("/", 1)[0]
        fs.invalidate_cache(bucket)
        fs.info(bucket)  # not `exists`, which answers False for a store that is down too
    except FileNotFoundError:
        return f"bucket {bucket!r} does not exist"
    except StorageUnavailable as exc:
        return str(exc)
    except Exception as exc:  # botocore and aiohttp raise many kinds; all mean "unreachable"
        return f"the storage does not answer or refuses: {type(exc).__name__}: {exc}"
    return None
