"""`crucible datasets` as a user runs it, against a real `crucible server` (SQLite): files
registered as versions with their record count and schema, listed, shown and downloaded
with their digest checked; and the refusals (a bad record, a URI outside the storage roots,
files changed after registration), each of which leaves nothing behind."""

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crucible.artifacts import remote
from crucible.artifacts.digest import content_of
from crucible.client import ApiError, CrucibleClient
from crucible.schemas.lineage import DatasetVersionPublic
from crucible.training.records import write_jsonl
from tests.object_store import ObjectStore
from tests.servers import crucible, local_server

SFT: list[dict[str, Any]] = [
    {"prompt": "1+1=", "completion": "2", "difficulty": 1},
    {"prompt": "2+2=", "completion": "4", "difficulty": None},
    {"prompt": "3+3=", "completion": "6"},
]


@dataclass(frozen=True)
class Server:
    env: dict[str, str]
    """What the CLI needs to reach the server."""
    api: CrucibleClient
    data: Path
    """The storage root: the server refuses datasets anywhere else on this machine."""

    def cli(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        done = crucible(self.env | (env or {}), *args)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout, done.stderr

    def versions(self, name: str) -> list[DatasetVersionPublic]:
        latest = self.api.resolve_dataset("default", f"{name}@latest")
        return self.api.list_dataset_versions(latest.dataset_id).items


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("data")
    roots = [data.as_uri() + "/"]
    # Read here, not through tests.object_store, which fails at once without a store: the
    # tests that use one take the `s3` fixture, and fail there.
    if bucket := os.environ.get("CRUCIBLE_S3_BUCKET"):
        roots.append(f"s3://{bucket}/")
    env = {"CRUCIBLE_STORAGE_ROOTS": json.dumps(roots)}
    with local_server(tmp_path_factory.mktemp("server"), env=env) as started:
        # Wide enough that a table never cuts a URI or a digest short.
        cli_env = started.env | {"COLUMNS": "400"}
        with CrucibleClient(started.url, started.token) as api:
            yield Server(env=cli_env, api=api, data=data)


@pytest.fixture
def data(server: Server, request: pytest.FixtureRequest) -> Path:
    """A folder of this test's own under the storage root."""
    folder = server.data / str(request.node.name)
    folder.mkdir()
    return folder


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)


def same_files(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
        }

    return files(a) == files(b)


def test_a_jsonl_file_is_registered_once_per_content_then_listed_and_shown(
    server: Server, data: Path
) -> None:
    path = data / "sft.jsonl"
    write_jsonl(path, SFT)

    code, out, err = server.cli("datasets", "register", "cli-sft", str(path))
    assert code == 0, err
    assert "registered cli-sft@1: 3 records" in out
    (first,) = server.versions("cli-sft")
    assert (first.uri, first.digest) == (path.as_uri(), content_of(path).digest)
    assert first.record_count == 3 and first.produced_by_run_id is None
    assert first.schema_ == {
        "format": "jsonl",
        "fields": {"prompt": "string", "completion": "string", "difficulty": "int|missing|null"},
        "shape": "prompt_completion",
    }

    code, out, err = server.cli("datasets", "register", "cli-sft", str(path))
    assert code == 0, err
    assert "cli-sft@1 already holds this content" in out
    assert [v.version for v in server.versions("cli-sft")] == [1]

    write_jsonl(path, [*SFT, {"prompt": "4+4=", "completion": "8"}])
    code, out, err = server.cli("datasets", "register", "cli-sft", str(path))
    assert code == 0, err
    assert "registered cli-sft@2: 4 records" in out

    code, out, err = server.cli("datasets", "ls")
    assert code == 0, err
    (row,) = [line.split("│") for line in out.splitlines() if " cli-sft " in line]
    assert [cell.strip() for cell in row[2:4]] == ["cli-sft", "2"]

    code, out, err = server.cli("datasets", "show", "cli-sft@1")
    assert code == 0, err
    for expected in (
        f"uri: {first.uri}",
        f"digest: {first.digest}",
        "records: 3",
        "produced by: no run",
        "schema shape: prompt_completion",
        "int|missing|null",
    ):
        assert expected in out, out
    versions = out[out.index("versions of cli-sft") :]
    assert first.digest in versions and content_of(path).digest in versions


def test_a_folder_of_parquet_is_registered_with_its_records_and_arrow_types(
    server: Server, data: Path
) -> None:
    corpus = data / "corpus"
    rows = [{"text": f"doc {i}", "tokens": list(range(i + 1)), "score": i / 2} for i in range(5)]
    write_parquet(corpus / "part-0.parquet", rows)
    write_parquet(corpus / "more" / "part-1.parquet", rows[:2])

    code, out, err = server.cli("datasets", "register", "cli-corpus", str(corpus))
    assert code == 0, err
    assert "registered cli-corpus@1: 7 records" in out
    (version,) = server.versions("cli-corpus")
    assert version.digest == content_of(corpus).digest and version.record_count == 7
    assert version.schema_ == {
        "format": "parquet",
        "fields": {"text": "string", "tokens": "list[int]", "score": "float"},
        "shape": "text",
    }


def test_download_copies_the_files_checked_and_refuses_a_directory_in_use(
    server: Server, data: Path, tmp_path: Path
) -> None:
    folder = data / "mixed"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", SFT)
    write_parquet(folder / "b" / "c.parquet", [{"text": "x"}])
    single = data / "one.jsonl"
    write_jsonl(single, SFT)
    for name, path in (("cli-folder", folder), ("cli-single", single)):
        code, _, err = server.cli("datasets", "register", name, str(path))
        assert code == 0, err

    code, out, err = server.cli("datasets", "download", "cli-folder@latest", str(tmp_path / "f"))
    assert code == 0, err
    assert "downloaded cli-folder@1" in out and "verified" in out
    assert same_files(folder, tmp_path / "f")  # the folder's files, straight in DIR
    assert content_of(tmp_path / "f").digest == server.versions("cli-folder")[0].digest

    empty = tmp_path / "s"
    empty.mkdir()
    code, _, err = server.cli("datasets", "download", "cli-single@1", str(empty))
    assert code == 0, err
    assert [p.name for p in empty.iterdir()] == ["one.jsonl"]
    assert (empty / "one.jsonl").read_bytes() == single.read_bytes()

    code, _, err = server.cli("datasets", "download", "cli-single@1", str(empty))
    assert code == 1 and f"{empty} exists and is not an empty directory" in err
    assert [p.name for p in empty.iterdir()] == ["one.jsonl"]


def test_an_invalid_line_is_named_and_nothing_is_registered(server: Server, data: Path) -> None:
    folder = data / "bad"
    folder.mkdir()
    write_jsonl(folder / "a-good.jsonl", SFT)
    (folder / "b-bad.jsonl").write_text('{"prompt": "1+1=", "completion": "2"}\n\n{"prompt": \n')

    code, _, err = server.cli("datasets", "register", "cli-bad", str(folder))
    assert code == 1
    assert len(err.strip().splitlines()) == 1, err
    assert f"{folder / 'b-bad.jsonl'}:3 is not valid JSON" in err
    assert "nothing was registered" in err
    with pytest.raises(ApiError) as missing:
        server.api.resolve_dataset("default", "cli-bad@latest")
    assert missing.value.status == 404


def test_a_file_outside_the_storage_is_registered_as_a_copy_in_the_projects_storage(
    server: Server, tmp_path: Path
) -> None:
    path = tmp_path / "elsewhere.jsonl"  # tmp_path is outside server.data
    write_jsonl(path, SFT)
    code, out, err = server.cli("datasets", "register", "cli-elsewhere", str(path))
    assert code == 0, err
    assert "copied" in out
    version = server.api.resolve_dataset("default", "cli-elsewhere@latest")
    home = Path(server.env["CRUCIBLE_HOME"])
    digest = content_of(path).digest
    copy = home / "projects" / "1" / "datasets" / "cli-elsewhere" / digest[7:23] / path.name
    assert version.uri == copy.as_uri() and copy.read_bytes() == path.read_bytes()
    assert version.digest == digest
    # The same content again is the same version, at the same copy.
    code, out, err = server.cli("datasets", "register", "cli-elsewhere", str(path))
    assert code == 0, err
    assert "nothing new was registered" in out
    assert [v.version for v in server.versions("cli-elsewhere")] == [version.version]


def test_a_uri_outside_the_storage_roots_is_refused_where_the_cli_has_not_the_servers_home(
    server: Server, tmp_path: Path
) -> None:
    path = tmp_path / "elsewhere.jsonl"
    write_jsonl(path, SFT)
    elsewhere = {"CRUCIBLE_HOME": str(tmp_path / "another-home"), "CRUCIBLE_TOKEN": token(server)}
    code, _, err = server.cli("datasets", "register", "cli-remote", str(path), env=elsewhere)
    assert code == 1
    assert "is outside the allowed storage roots" in err and server.data.as_uri() in err
    with pytest.raises(ApiError):
        server.api.resolve_dataset("default", "cli-remote@latest")
    assert not (tmp_path / "another-home").exists()


def token(server: Server) -> str:
    return (Path(server.env["CRUCIBLE_HOME"]) / "token").read_text().strip()


def test_files_changed_after_registration_are_not_downloaded(
    server: Server, data: Path, tmp_path: Path
) -> None:
    folder = data / "changed"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", SFT)
    code, _, err = server.cli("datasets", "register", "cli-changed", str(folder))
    assert code == 0, err
    (version,) = server.versions("cli-changed")
    write_jsonl(folder / "train.jsonl", SFT[:2])

    target = tmp_path / "dl"
    code, _, err = server.cli("datasets", "download", "cli-changed@1", str(target))
    assert code == 1
    assert "does not match its registered digest" in err and version.digest in err
    assert f"nothing was written to {target}" in err
    assert list(tmp_path.iterdir()) == []  # no DIR, and no temporary sibling either


def test_to_copies_the_files_to_object_storage_and_registers_the_copy(
    server: Server, data: Path, tmp_path: Path, s3: ObjectStore
) -> None:
    env, prefix = s3.client_env, s3.prefix("cli-datasets")
    path = data / "sft.jsonl"
    write_jsonl(path, SFT)

    def register() -> tuple[int, str, str]:
        return server.cli("datasets", "register", "cli-s3", str(path), "--to", prefix, env=env)

    code, out, err = register()
    assert code == 0, err
    (version,) = server.versions("cli-s3")
    assert version.uri == f"{prefix}/sft.jsonl" and version.digest == content_of(path).digest
    copied = remote.content(version.uri)
    assert copied is not None and copied.digest == version.digest

    code, out, err = register()
    assert code == 0 and "cli-s3@1 already holds this content" in out, err

    # Other content under the same name would replace the objects version 1 names.
    write_jsonl(path, SFT[:1])
    code, _, err = register()
    assert code == 1 and "already holds other files" in err
    assert [v.version for v in server.versions("cli-s3")] == [1]

    code, _, err = server.cli("datasets", "download", "cli-s3@1", str(tmp_path / "dl"), env=env)
    assert code == 0, err
    assert content_of(tmp_path / "dl" / "sft.jsonl").digest == version.digest
