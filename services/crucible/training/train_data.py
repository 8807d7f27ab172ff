"""What a trainer draws its batches from: items of rows, and the position that resumes them.

An item is the unit a global batch counts and the ranks split: in SFT and pre-training one
row (one example, or several packed end to end with `data.packing`), streamed from the
datasets' records (`records.ShuffledRecords`); in RL one group of K samples, a row each,
from a rollout dataset held in memory (a group's advantages need all of it).

`state_dict()` is the data order's whole state, saved in every checkpoint, so a resumed
run draws exactly the rows an uninterrupted one would have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from crucible.config.workload import DataConfig, TrainConfig
from crucible.models.tokenizer import Tokenizer
from crucible.training.data import Example, Row, Sampler
from crucible.training.records import (
    DataError,
    FileRecords,
    ListRecords,
    Record,
    RecordSource,
    ShuffledRecords,
    read_first_record,
)
from crucible.training.shape_of import AUTO, detect_shape
from crucible.training.shapes import encoder, record_check

Item = list[Row]


class TrainData(Protocol):
    def take(self, n: int) -> list[Item]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def build_train_data(
    config: TrainConfig,
    data: DataConfig,
    tokenizer: Tokenizer,
    records: Sequence[dict[str, Any]] | tuple[RecordSource, str],
    model_max_seq_len: int,
) -> TrainData:
    if config.mode == "rl":
        if isinstance(records, tuple):
            raise ValueError("RL trains on a rollout dataset in memory, not a record stream")
        if not records:
            raise ValueError("the training dataset has no records")
        groups = build_rl_groups(tokenizer, records, config.samples_per_prompt)
        return RLGroups(groups, seed=config.seed)
    source, shape = records if isinstance(records, tuple) else list_source(records, data)
    max_targets = data.seq_len or model_max_seq_len
    if max_targets > model_max_seq_len:
        raise DataError(
            f"data.seq_len={max_targets} is longer than the model's max_seq_len={model_max_seq_len}"
        )
    return StreamedRows(
        source,
        encoder(shape, tokenizer, max_targets=max_targets),
        seed=config.seed,
        max_targets=max_targets,
        packing=data.packing,
    )


def build_rl_groups(
    tokenizer: Tokenizer, records: Sequence[dict[str, Any]], samples_per_prompt: int
) -> list[list[Example]]:
    """Group trajectories by prompt and give each its GRPO advantage:
    (reward - group mean) / (group std + eps)."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(record.get("group", record["prompt"]), []).append(record)
    items: list[list[Example]] = []
    for key, group in groups.items():
        if len(group) != samples_per_prompt:
            raise ValueError(
                f"group {key!r} has {len(group)} samples but samples_per_prompt="
                f"{samples_per_prompt}; roll out with the same K as the trainer"
            )
        rewards = torch.tensor([float(r["reward"]) for r in group])
        advantages = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-6)
        items.append(
            [
                _rl_example(tokenizer, r, float(a))
                for r, a in zip(group, advantages.tolist(), strict=True)
            ]
        )
    return items


def _rl_example(tokenizer: Tokenizer, record: dict[str, Any], advantage: float) -> Example:
    completion_tokens = record["completion_tokens"]
    logprobs = record.get("logprobs")
    if logprobs is None or len(logprobs) != len(completion_tokens):
        raise ValueError(
            f"trajectory for {record['prompt']!r} needs one logprob per completion token; "
            "produce the dataset with rollout.py"
        )
    prompt_tokens = tokenizer.encode(record["prompt"], bos=True)
    return Example(
        tokens=prompt_tokens + list(completion_tokens),
        prompt_len=len(prompt_tokens),
        old_logprobs=[float(x) for x in logprobs],
        advantage=advantage,
    )


def open_files(files: Sequence[Path], config: DataConfig) -> tuple[FileRecords, str]:
    """The records of data files, every one checked against the shape (`config.shape`, or
    the first record's); returns them and the shape."""
    if not files:
        raise DataError("no data files to train on")
    shape: str = config.shape
    if shape == AUTO:
        shape = detect_shape(read_first_record(files[0]), f"{files[0]} record 1")
    source = FileRecords(files, block_size=config.shuffle_block, check=record_check(shape))
    return source, shape


def list_source(records: Sequence[Record], config: DataConfig) -> tuple[ListRecords, str]:
    """Records in memory as a source, checked as `open_files` checks files."""
    if not records:
        raise DataError("the training dataset has no records")
    shape = config.shape if config.shape != AUTO else detect_shape(records[0], "record 1")
    check = record_check(shape)
    for number, record in enumerate(records, start=1):
        check(record, f"record {number}")
    return ListRecords(records, block_size=config.shuffle_block), shape


class StreamedRows:
    """SFT and pre-training items: rows built from a record stream, one example a row or,
    packed, as many whole examples as fit in `max_targets` positions (greedy, in stream
    order; a row closes when the next example does not fit, which then opens the next)."""

    def __init__(
        self,
        source: RecordSource,
        encode: Callable[[Record], list[Example]],
        *,
        seed: int,
        max_targets: int,
        packing: bool,
    ) -> None:
        self.stream = ShuffledRecords(source, seed=seed)
        self.encode = encode
        self.max_targets = max_targets
        self.packing = packing
        self.piece = 0
        """Examples of the record at the stream's position already placed in a row."""
        self._pieces: tuple[tuple[int, int, int], list[Example]] | None = None

    def take(self, n: int) -> list[Item]:
        return [[self._row()] for _ in range(n)]

    def _row(self) -> list[Example]:
        row = [self._next()]
        used = row[0].num_targets
        while self.packing and used < self.max_targets:
            example = self._peek()
            if used + example.num_targets > self.max_targets:
                break
            row.append(self._next())
            used += example.num_targets
        return row

    def _peek(self) -> Example:
        skipped = 0
        while True:
            pieces = self._current_pieces()
            if self.piece < len(pieces):
                return pieces[self.piece]
            self._advance()
            skipped += 1
            if skipped > self.stream.source.num_records:
                raise DataError(
                    f"no record of the dataset has a trained token within {self.max_targets} "
                    "positions (data.seq_len, else the model's max_seq_len)"
                )

    def _next(self) -> Example:
        example = self._peek()
        self.piece += 1
        if self.piece == len(self._current_pieces()):
            self._advance()
        return example

    def _advance(self) -> None:
        self.stream.take()
        self.piece = 0

    def _current_pieces(self) -> list[Example]:
        key = (self.stream.epoch, self.stream.block_cursor, self.stream.record_cursor)
        if self._pieces is None or self._pieces[0] != key:
            self._pieces = (key, self.encode(self.stream.peek()))
        return self._pieces[1]

    def state_dict(self) -> dict[str, Any]:
        return {"stream": self.stream.state_dict(), "piece": self.piece}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["stream"])
        self.piece = int(state["piece"])
        self._pieces = None


class RLGroups:
    """RL items: the groups of a rollout dataset in a shuffled order, one row a sample."""

    def __init__(self, groups: Sequence[list[Example]], *, seed: int) -> None:
        self.groups = groups
        self.sampler = Sampler(len(groups), seed=seed)

    def take(self, n: int) -> list[Item]:
        return [[[sample] for sample in self.groups[i]] for i in self.sampler.take(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
