"""The block pool: holds counted, prefixes found by name, the oldest released evicted first."""

import pytest

from crucible.engine.blocks import BlockPool, OutOfBlocks, block_hashes


def test_names_chain_the_whole_prefix() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7], 2)
    assert len(a) == 3  # the partial last block has no name
    assert block_hashes([1, 2, 3, 4], 2) == a[:2]
    # The same block after another prefix is another name.
    assert block_hashes([9, 9, 3, 4], 2)[1] != a[1]


def test_a_named_block_is_shared_and_freed_by_its_last_holder() -> None:
    pool = BlockPool(4, 2)
    first = pool.allocate()
    pool.name(first, 111)
    assert pool.cached(111) == first
    assert pool.cached(222) is None
    pool.release([first])
    assert pool.free == 3  # still held once
    pool.release([first])
    assert pool.free == 4
    assert pool.cached(111) == first  # released, not forgotten
    assert pool.free == 3
    with pytest.raises(ValueError, match="released more often"):
        pool.release([first, first])


def test_the_least_recently_released_block_is_reused_first() -> None:
    pool = BlockPool(3, 2)
    blocks = [pool.allocate() for _ in range(3)]
    for block, name in zip(blocks, (1, 2, 3), strict=True):
        pool.name(block, name)
    with pytest.raises(OutOfBlocks):
        pool.allocate()
    pool.release(blocks)  # released tail first: block 3 is the oldest free block
    assert pool.allocate() == blocks[2]
    assert pool.cached(3) is None  # its name went with it
    assert pool.cached(1) == blocks[0]
