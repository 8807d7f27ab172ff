"""Records read streaming from JSONL and Parquet files, in a shuffled order that resumes.

A dataset is cut into blocks of `block_size` consecutive records. Each epoch visits the
blocks in a permutation of its own and the records of a block in a permutation of their
own, both drawn from (seed, epoch, ...). Only one block is in memory at a time (for
Parquet, the row groups that hold it, and recently read row groups up to
ROW_GROUP_CACHE_BYTES in Arrow's columns), so memory is bounded by a buffer, not the
dataset, and the position (epoch, block, record) is the whole state: a restored stream continues
with exactly the records an uninterrupted one would have produced.

Opening the files makes one pass over them: it counts the records, notes where each block
of a JSONL file begins, and checks every record against the shape the job reads (a bad
record fails here, naming the file, the record and the field, before any training).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

DATA_SUFFIXES = (".jsonl", ".parquet")

ROW_GROUP_CACHE_BYTES = 64 * 2**20
"""Decoded Parquet row groups kept for the blocks that follow. A block is a slice of a row
group, and a file written with pyarrow's defaults is one row group: without the cache every
block decoded the whole file again, a pass quadratic in the file's size. The group in use is
always kept, whatever its size. Small: with groups of about a block (Hugging Face's 1,000
rows) nothing is gained past two groups, and 256 MiB cost 400 MiB of resident memory."""

Record = dict[str, Any]
RecordCheck = Callable[[Record, str], None]
"""Raises (a ValueError naming the place) when a record lacks what the job needs; the
second argument names the record, e.g. "data/train.jsonl record 17"."""


class DataError(ValueError):
    """A data file that cannot be read as records of the shape the job needs."""


class RecordSource(Protocol):
    """Records addressed by block: what `ShuffledRecords` reads from."""

    num_records: int
    block_size: int

    @property
    def num_blocks(self) -> int: ...

    def read_block(self, block: int) -> list[Record]: ...


def data_files(path: Path) -> list[Path]:
    """The data files of a dataset: `path` itself, or the .jsonl and .parquet files under
    it in name order."""
    if path.is_file():
        if path.suffix not in DATA_SUFFIXES:
            raise DataError(f"{path} is neither .jsonl nor .parquet")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES)
    if not files:
        raise DataError(f"no .jsonl or .parquet files under {path}")
    return files


@dataclass
class _FileBlocks:
    path: Path
    num_records: int
    first_block: int
    """Global index of this file's first block."""
    offsets: list[int] = field(default_factory=list)
    """JSONL: the byte offset of each of this file's blocks."""
    row_groups: list[int] = field(default_factory=list)
    """Parquet: the number of rows of each row group."""


class FileRecords:
    """The records of data files, by block (blocks never span two files)."""

    def __init__(
        self, files: Sequence[Path], *, block_size: int, check: RecordCheck | None = None
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1: {block_size}")
        self.block_size = block_size
        self._row_groups: OrderedDict[tuple[Path, int], pa.Table] = OrderedDict()
        self._files: list[_FileBlocks] = []
        self._block_file: list[int] = []
        for path in files:
            blocks = self._index(path, len(self._block_file), check)
            self._block_file.extend([len(self._files)] * _ceil_div(blocks.num_records, block_size))
            self._files.append(blocks)
        self.num_records = sum(f.num_records for f in self._files)
        if self.num_records == 0:
            raise DataError(f"the data files hold no records: {', '.join(map(str, files))}")

    @property
    def num_blocks(self) -> int:
        return len(self._block_file)

    def read_block(self, block: int) -> list[Record]:
        blocks = self._files[self._block_file[block]]
        local = block - blocks.first_block
        start = local * self.block_size
        count = min(self.block_size, blocks.num_records - start)
        if blocks.path.suffix == ".parquet":
            return self._parquet_rows(blocks, start, count)
        return _jsonl_records(blocks.path, blocks.offsets[local], count)

    def _parquet_rows(self, blocks: _FileBlocks, start: int, count: int) -> list[Record]:
        import pyarrow as pa

        groups: list[int] = []
        group_start = 0
        first_row = 0
        for group, rows in enumerate(blocks.row_groups):
            if group_start + rows > start and group_start < start + count:
                if not groups:
                    first_row = start - group_start
                groups.append(group)
            group_start += rows
        table = pa.concat_tables([self._row_group(blocks.path, g) for g in groups])
        rows_out: list[Record] = table.slice(first_row, count).to_pylist()
        return rows_out

    def _row_group(self, path: Path, group: int) -> pa.Table:
        """Row group `group` of `path`, decoded once while it stays among the most recently
        used within ROW_GROUP_CACHE_BYTES (always at least the one asked for)."""
        import pyarrow.parquet as pq

        key = (path, group)
        table = self._row_groups.get(key)
        if table is not None:
            self._row_groups.move_to_end(key)
            return table
        table = pq.ParquetFile(path).read_row_group(group)
        self._row_groups[key] = table
        while len(self._row_groups) > 1 and self._cached_bytes() > ROW_GROUP_CACHE_BYTES:
            self._row_groups.popitem(last=False)
        return table

    def _cached_bytes(self) -> int:
        return sum(table.nbytes for table in self._row_groups.values())

    def _index(self, path: Path, first_block: int, check: RecordCheck | None) -> _FileBlocks:
        if path.suffix == ".parquet":
            return _index_parquet(path, first_block, check, self.block_size)
        return _index_jsonl(path, first_block, check, self.block_size)


def in_file_order(source: RecordSource) -> Iterator[Record]:
    """Every record of `source` once, in the files' order, a block at a time."""
    for block in range(source.num_blocks):
        yield from source.read_block(block)


class ListRecords:
    """Records already in memory, behind the same interface (tests, small rollouts)."""

    def __init__(self, records: Sequence[Record], *, block_size: int) -> None:
        if not records:
            raise DataError("the dataset has no records")
        self.records = records
        self.num_records = len(records)
        self.block_size = block_size

    @property
    def num_blocks(self) -> int:
        return _ceil_div(self.num_records, self.block_size)

    def read_block(self, block: int) -> list[Record]:
        start = block * self.block_size
        return list(self.records[start : start + self.block_size])


class ShuffledRecords:
    """An endless stream of a source's records, reshuffled every epoch (see the module
    docstring); `peek()` looks at the next record without taking it."""

    def __init__(self, source: RecordSource, *, seed: int) -> None:
        self.source = source
        self.seed = seed
        self.num_blocks = source.num_blocks
        self.epoch = 0
        self.block_cursor = 0
        """Position in this epoch's block order."""
        self.record_cursor = 0
        """Position in the current block's record order."""
        self._block_order = self._permutation(self.num_blocks, self.epoch)
        self._loaded: tuple[int, int, list[Record]] | None = None
        """(epoch, block cursor, the block's records in their shuffled order)."""

    def peek(self) -> Record:
        records = self._current_block()
        return records[self.record_cursor]

    def take(self) -> Record:
        record = self.peek()
        self.record_cursor += 1
        if self.record_cursor == len(self._current_block()):
            self.record_cursor = 0
            self.block_cursor += 1
            if self.block_cursor == self.num_blocks:
                self.block_cursor = 0
                self.epoch += 1
                self._block_order = self._permutation(self.num_blocks, self.epoch)
        return record

    def __iter__(self) -> Iterator[Record]:
        while True:
            yield self.take()

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "block": self.block_cursor,
            "record": self.record_cursor,
            "seed": self.seed,
            "num_records": self.source.num_records,
            "block_size": self.source.block_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        ours = self.state_dict()
        for key in ("seed", "num_records", "block_size"):
            if state[key] != ours[key]:
                raise ValueError(
                    f"the data order saved in the checkpoint is for {key}={state[key]}, but "
                    f"this run has {key}={ours[key]}; resume with the same datasets, seed "
                    "and data.shuffle_block"
                )
        self.epoch = state["epoch"]
        self.block_cursor = state["block"]
        self.record_cursor = state["record"]
        self._block_order = self._permutation(self.num_blocks, self.epoch)
        self._loaded = None

    def _current_block(self) -> list[Record]:
        key = (self.epoch, self.block_cursor)
        if self._loaded is None or self._loaded[:2] != key:
            block = self._block_order[self.block_cursor]
            records = self.source.read_block(block)
            order = self._permutation(len(records), self.epoch, block)
            self._loaded = (*key, [records[i] for i in order])
        return self._loaded[2]

    def _permutation(self, n: int, *keys: int) -> list[int]:
        rng = np.random.default_rng([self.seed, *keys])
        return [int(i) for i in rng.permutation(n)]


def read_first_record(path: Path) -> Record:
    """A data file's first record (what `data.shape: auto` reads the shape from)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=1):
            rows: list[Record] = batch.to_pylist()
            if rows:
                return rows[0]
    else:
        for record in read_jsonl(path):
            return record
    raise DataError(f"{path} holds no records")


# -- JSONL ------------------------------------------------------------------------------------


def _index_jsonl(
    path: Path, first_block: int, check: RecordCheck | None, block_size: int
) -> _FileBlocks:
    blocks = _FileBlocks(path=path, num_records=0, first_block=first_block)
    offset = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                if blocks.num_records % block_size == 0:
                    blocks.offsets.append(offset)
                record = _parse_line(line, path, number)
                if check is not None:
                    check(record, f"{path} record {blocks.num_records + 1} (line {number})")
                blocks.num_records += 1
            offset += len(line)
    return blocks


def _jsonl_records(path: Path, offset: int, count: int) -> list[Record]:
    records: list[Record] = []
    with path.open("rb") as f:
        f.seek(offset)
        for line in f:
            if line.strip():
                records.append(_parse_line(line, path, None))
                if len(records) == count:
                    break
    return records


def _parse_line(line: bytes, path: Path, number: int | None) -> Record:
    where = f"{path}:{number}" if number is not None else str(path)
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where} is not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise DataError(f"{where} is a JSON {type(record).__name__}, not an object")
    return record


def write_jsonl(path: Path | str, records: Iterable[Record]) -> int:
    """Write records one JSON object a line; returns how many."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
            count += 1
    return count


def read_jsonl(path: Path | str) -> Iterator[Record]:
    """Every record of a JSONL file, in order (for files small enough to read whole)."""
    path = Path(path)
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                yield _parse_line(line, path, number)


# -- Parquet ----------------------------------------------------------------------------------


def _index_parquet(
    path: Path, first_block: int, check: RecordCheck | None, block_size: int
) -> _FileBlocks:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:
        raise DataError(f"{path} is not a Parquet file ({exc})") from None
    metadata = parquet.metadata
    blocks = _FileBlocks(
        path=path,
        num_records=metadata.num_rows,
        first_block=first_block,
        row_groups=[metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)],
    )
    if check is not None:
        # Row group by row group: memory stays bounded by the largest group.
        number = 0
        for group in range(metadata.num_row_groups):
            for record in parquet.read_row_group(group).to_pylist():
                number += 1
                check(record, f"{path} record {number}")
    return blocks


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
