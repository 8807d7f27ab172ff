"""Records streamed from JSONL and Parquet files: every record once an epoch in a fresh
order, one block in memory, an exact resume, and bad records refused before training."""

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crucible.training.records import (
    DataError,
    FileRecords,
    ListRecords,
    ShuffledRecords,
    data_files,
    write_jsonl,
)
from crucible.training.shapes import record_check

RECORDS = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(23)]


def write_parquet(path: Path, records: list[dict[str, Any]], *, row_group_size: int) -> Path:
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=row_group_size)
    return path


def prompts(stream: ShuffledRecords, n: int) -> list[str]:
    return [stream.take()["prompt"] for _ in range(n)]


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    """RECORDS over a JSONL and a Parquet file (row groups of 4, blocks of 5)."""
    write_jsonl(tmp_path / "a.jsonl", RECORDS[:11])
    write_parquet(tmp_path / "b.parquet", RECORDS[11:], row_group_size=4)
    return data_files(tmp_path)


def test_an_epoch_visits_every_record_once_and_the_next_in_a_new_order(files) -> None:
    stream = ShuffledRecords(FileRecords(files, block_size=5), seed=0)
    first, second = prompts(stream, 23), prompts(stream, 23)
    assert sorted(first) == sorted(second) == sorted(r["prompt"] for r in RECORDS)
    assert first != second
    assert first != [r["prompt"] for r in RECORDS]


def test_jsonl_and_parquet_of_the_same_records_stream_the_same(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "all.jsonl", RECORDS)
    write_parquet(tmp_path / "all.parquet", RECORDS, row_group_size=3)
    jsonl = ShuffledRecords(FileRecords([tmp_path / "all.jsonl"], block_size=4), seed=7)
    parquet = ShuffledRecords(FileRecords([tmp_path / "all.parquet"], block_size=4), seed=7)
    assert prompts(jsonl, 50) == prompts(parquet, 50)


def test_a_restored_stream_continues_with_the_same_records(files) -> None:
    straight = ShuffledRecords(FileRecords(files, block_size=5), seed=3)
    expected = prompts(straight, 60)
    interrupted = ShuffledRecords(FileRecords(files, block_size=5), seed=3)
    got = prompts(interrupted, 17)  # mid-block, mid-epoch
    resumed = ShuffledRecords(FileRecords(files, block_size=5), seed=3)
    resumed.load_state_dict(interrupted.state_dict())
    assert got + prompts(resumed, 43) == expected


class BlockReads:
    """A source that notes the size of every block read from it."""

    def __init__(self, inner: FileRecords) -> None:
        self.inner = inner
        self.num_records = inner.num_records
        self.block_size = inner.block_size
        self.num_blocks = inner.num_blocks
        self.sizes: list[int] = []

    def read_block(self, block: int) -> list[dict[str, Any]]:
        records = self.inner.read_block(block)
        self.sizes.append(len(records))
        return records


def test_each_block_is_read_once_an_epoch_and_none_is_larger_than_its_size(files) -> None:
    source = BlockReads(FileRecords(files, block_size=5))
    prompts(ShuffledRecords(source, seed=0), 23)
    # 11 + 12 records: blocks of 5, 5, 1 and 5, 5, 2 (blocks never span two files).
    assert sorted(source.sizes) == [1, 2, 5, 5, 5, 5]


def test_a_parquet_file_of_one_row_group_is_decoded_once_a_pass_not_once_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow writes one row group by default; every block is a slice of it. Decoding it
    again for each block made a pass quadratic in the file (8x slower at 15 MiB)."""
    path = write_parquet(tmp_path / "one.parquet", RECORDS, row_group_size=len(RECORDS))
    decoded = []
    read = pq.ParquetFile.read_row_group

    def counted(self: pq.ParquetFile, group: int, *args: Any, **kwargs: Any) -> pa.Table:
        decoded.append(group)
        return read(self, group, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    stream = ShuffledRecords(FileRecords([path], block_size=2), seed=0)
    assert sorted(prompts(stream, 23)) == sorted(r["prompt"] for r in RECORDS)
    assert decoded == [0]  # 12 blocks, one decode


def test_row_groups_past_the_cache_budget_are_decoded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache is bounded: with no room beyond the group in use, a shuffled pass decodes a
    group again when its blocks are not consecutive."""
    import crucible.training.records as records

    monkeypatch.setattr(records, "ROW_GROUP_CACHE_BYTES", 0)
    path = write_parquet(tmp_path / "groups.parquet", RECORDS, row_group_size=6)
    source = FileRecords([path], block_size=2)
    stream = ShuffledRecords(source, seed=0)
    assert sorted(prompts(stream, 23)) == sorted(r["prompt"] for r in RECORDS)
    assert len(source._row_groups) == 1


def test_a_stream_state_from_other_data_is_refused(files) -> None:
    other = ShuffledRecords(ListRecords(RECORDS[:7], block_size=5), seed=3)
    stream = ShuffledRecords(FileRecords(files, block_size=5), seed=3)
    with pytest.raises(ValueError, match="num_records=7, but this run has num_records=23"):
        stream.load_state_dict(other.state_dict())


def test_a_jsonl_record_without_its_field_names_file_record_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, [*RECORDS[:3], {"prompt": "2+2="}, *RECORDS[3:]])
    with pytest.raises(DataError) as caught:
        FileRecords([bad], block_size=5, check=record_check("prompt_completion"))
    assert str(caught.value) == f"{bad} record 4 (line 4) has no 'completion' field"


def test_a_parquet_file_of_the_wrong_schema_is_refused_naming_the_field(tmp_path: Path) -> None:
    wrong = write_parquet(
        tmp_path / "wrong.parquet",
        [{"prompt": "1+1=", "completion": 2}],
        row_group_size=10,
    )
    with pytest.raises(DataError) as caught:
        FileRecords([wrong], block_size=5, check=record_check("prompt_completion"))
    assert str(caught.value) == f"{wrong} record 1: field 'completion' must be a string, not int"


def test_a_chat_record_needs_an_assistant_message(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    write_jsonl(path, [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(DataError, match=r"record 1 .*no message has role 'assistant'"):
        FileRecords([path], block_size=5, check=record_check("chat"))


def test_a_line_that_is_not_json_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "a"}\n{"text": \n')
    with pytest.raises(DataError, match=rf"{path}:2 is not valid JSON"):
        FileRecords([path], block_size=5)


def test_a_folder_without_data_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not data")
    with pytest.raises(DataError, match=r"no \.jsonl or \.parquet files under"):
        data_files(tmp_path)
