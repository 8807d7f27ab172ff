"""The test stack's S3 server (scripts/objectstore, started by scripts/test): its address
and keys, as a client gets them, and a fresh prefix of the bucket for each test."""

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from s3fs import S3FileSystem  # type: ignore[import-untyped]

NOT_STARTED = (
    "no object store: CRUCIBLE_S3_ENDPOINT_URL is unset. scripts/test starts one; by hand: "
    'eval "$(scripts/objectstore up)"'
)


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str

    @property
    def client_env(self) -> dict[str, str]:
        """What a process needs to reach the store: the variables the AWS SDKs read."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def prefix(self, what: str) -> str:
        return f"s3://{self.bucket}/tests/{what}-{uuid.uuid4().hex[:10]}"

    @classmethod
    def from_exports(cls, values: dict[str, str | None]) -> "ObjectStore":
        """From scripts/objectstore's CRUCIBLE_S3_* lines (or the environment they set)."""
        if not all(values.get(f"CRUCIBLE_S3_{name}") for name in _NAMES):
            pytest.fail(NOT_STARTED)
        return cls(*(str(values[f"CRUCIBLE_S3_{name}"]) for name in _NAMES))


_NAMES = ("ENDPOINT_URL", "BUCKET", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY")  # field order
# Read once, at import: fixtures that give a workload a clean CRUCIBLE_* environment
# remove these variables before a test runs.
_SETTINGS: dict[str, str | None] = {
    f"CRUCIBLE_S3_{name}": os.environ.get(f"CRUCIBLE_S3_{name}") for name in _NAMES
}


def object_store() -> ObjectStore:
    return ObjectStore.from_exports(_SETTINGS)


def point_at(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point this process's S3 clients at `store`. fsspec keeps one filesystem per set of
    arguments, made from the environment of its day, so its cache goes too; the test that
    calls this must clear it again when done (`s3` and `forget_s3_clients` do)."""
    for name, value in store.client_env.items():
        monkeypatch.setenv(name, value)
    S3FileSystem.clear_instance_cache()


@pytest.fixture
def forget_s3_clients() -> Iterator[None]:
    """After the test, no S3 filesystem it made (maybe for another store) is reused."""
    yield
    S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, forget_s3_clients: None) -> ObjectStore:
    """The store, with this process's environment pointed at it."""
    store = object_store()
    point_at(store, monkeypatch)
    return store
