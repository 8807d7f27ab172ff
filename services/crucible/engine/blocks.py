"""The KV cache's blocks: which are free, who holds each, and which full blocks hold a
known prefix.

A block holds `block_size` consecutive positions of one sequence. A full block is named
by the hash of every token up to its end (its own tokens and its predecessor's hash), so
two sequences that begin alike find each other's blocks and share them, counted by
reference. A released block keeps its contents and its name until it is handed out
again, least recently released first: a prompt sent again soon after still finds them.
Only full blocks are shared, and a full block is never written again, so sharing needs no
copy-on-write.
"""

from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """The name of each full block of `tokens`, in order."""
    hashes: list[int] = []
    previous = 0
    for end in range(block_size, len(tokens) + 1, block_size):
        previous = hash((previous, tuple(tokens[end - block_size : end])))
        hashes.append(previous)
    return hashes


class OutOfBlocks(Exception):
    """Every block is held by a running sequence."""


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need blocks and positions: {num_blocks} of {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._holders = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._name_of: dict[int, int] = {}
        self._block_named: dict[int, int] = {}

    @property
    def free(self) -> int:
        """Blocks no sequence holds (cached prefixes among them)."""
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_blocks - len(self._free)

    def allocate(self) -> int:
        """A block for one holder, forgetting what it cached."""
        if not self._free:
            raise OutOfBlocks(f"all {self.num_blocks} KV blocks are in use")
        block, _ = self._free.popitem(last=False)
        name = self._name_of.pop(block, None)
        if name is not None:
            del self._block_named[name]
        self._holders[block] = 1
        return block

    def cached(self, name: int) -> int | None:
        """The block holding the prefix `name`, now held once more by the caller."""
        block = self._block_named.get(name)
        if block is None:
            return None
        if self._holders[block] == 0:
            del self._free[block]
        self._holders[block] += 1
        return block

    def name(self, block: int, name: int) -> None:
        """Record that `block`, now full, holds the prefix `name` (unless another block
        already does: then the first stays the one found)."""
        if name not in self._block_named and block not in self._name_of:
            self._block_named[name] = block
            self._name_of[block] = name

    def forget_names(self) -> None:
        """Every cached prefix forgotten (the blocks' contents no longer valid, e.g. computed
        under weights since replaced); holds and free blocks as they were."""
        self._name_of.clear()
        self._block_named.clear()

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one hold on each of `blocks`; the last hold frees it, most recent last.
        Released in reverse, so a sequence's prefix outlives its tail in the cache."""
        for block in reversed(blocks):
            holders = self._holders[block] - 1
            if holders < 0:
                raise ValueError(f"block {block} released more often than it was held")
            self._holders[block] = holders
            if holders == 0:
                self._free[block] = None
