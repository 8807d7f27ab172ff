"""How a RolloutJob's prompts split over its replicas and their shares merge back: whole
waves per replica, the merge in rank order, and a directory the replicas do not share
refused instead of waited on forever."""

import threading
import time
from pathlib import Path

import pytest

from crucible.config.parse import ConfigError
from crucible.jobs import shards as shards_module
from crucible.jobs.shards import Shards
from crucible.training.records import read_jsonl


def test_replicas_take_whole_waves_and_cover_every_prompt_once() -> None:
    for replicas in (1, 2, 3, 4, 7):
        for count in (0, 1, 31, 32, 33, 100):
            spans = [Shards(Path("x"), replicas).span(r, count, 32) for r in range(replicas)]
            assert [i for span in spans for i in span] == list(range(count))
            assert all(span.start % 32 == 0 for span in spans if span)


def test_the_merge_is_the_shares_in_rank_order(tmp_path: Path) -> None:
    shards = Shards(tmp_path / "s", 3)
    for rank in (2, 0, 1):  # written in any order
        shards.write(rank, [{"rank": rank, "i": i} for i in range(rank + 1)])
    shards.wait_for_all(attempt=1)
    assert shards.merge(tmp_path / "all.jsonl") == 6
    assert [r["rank"] for r in read_jsonl(tmp_path / "all.jsonl")] == [0, 1, 1, 2, 2, 2]


def test_rank_0_waits_for_a_replica_it_has_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards_module, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(shards_module, "PRESENCE_SECONDS", 0.1)
    shards = Shards(tmp_path / "s", 2)
    shards.mark_present(0, attempt=1)
    shards.mark_present(1, attempt=1)
    shards.write(0, [{"i": 0}])
    late = threading.Timer(0.5, lambda: shards.write(1, [{"i": 1}]))
    late.start()
    started = time.monotonic()
    shards.wait_for_all(attempt=1)  # past PRESENCE_SECONDS: replica 1 was seen
    assert time.monotonic() - started >= 0.4


def test_replicas_that_share_no_storage_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards_module, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(shards_module, "PRESENCE_SECONDS", 0.1)
    shards = Shards(tmp_path / "s", 3)
    shards.mark_present(0, attempt=2)
    shards.mark_present(1, attempt=1)  # an earlier attempt's mark does not count
    shards.write(0, [])
    with pytest.raises(ConfigError, match=r"replicas \[1, 2\] never appeared .* share no storage"):
        shards.wait_for_all(attempt=2)
