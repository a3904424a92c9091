"""A paged KV cache with prefix caching, the way vLLM V1 keeps it.

A fixed number of blocks, each holding ``block_size`` tokens. A block that is
full of prompt tokens gets a hash that chains the hash of the block before it,
so a hash names a whole prefix. Blocks are reference counted: two requests
that share a system prompt share its blocks. A block nobody references goes to
the tail of the free queue but keeps its hash, so a later request can still
hit it until the block is reused (LRU eviction from the head of the queue).
Usage, like vLLM's ``kv_cache_usage_perc``, counts only referenced blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (a partial last block has none)."""
    hashes: list[int] = []
    prev = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        prev = hash((prev, tuple(token_ids[start : start + block_size])))
        hashes.append(prev)
    return hashes


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        # Free blocks in eviction order (oldest first); values unused.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def in_use(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        return self.in_use / self.num_blocks

    def lookup(self, hashes: Iterable[int]) -> list[int]:
        """Blocks holding the longest cached prefix named by ``hashes``."""
        found: list[int] = []
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def cost_of_touch(self, blocks: Iterable[int]) -> int:
        """How many free blocks touching ``blocks`` would take out of the free queue."""
        return sum(1 for b in blocks if self._ref[b] == 0)

    def touch(self, blocks: Iterable[int]) -> None:
        for b in blocks:
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks from the head of the free queue, evicting their cached hashes."""
        if n > len(self._free):
            raise RuntimeError(f"KV cache: {n} blocks asked, {len(self._free)} free")
        out: list[int] = []
        for _ in range(n):
            b, _unused = self._free.popitem(last=False)
            old = self._hash[b]
            if old is not None:
                if self._cached.get(old) == b:
                    del self._cached[old]
                self._hash[b] = None
            self._ref[b] = 1
            out.append(b)
        return out

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; the last blocks of a request are evicted first."""
        for b in reversed(blocks):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free[b] = None

    def register(self, block: int, block_hash: int) -> None:
        """Mark a block as holding the prefix named by ``block_hash``."""
        if self._hash[block] is not None:
            return
        if block_hash in self._cached:
            # Another block already holds this prefix (computed concurrently); keep the first.
            return
        self._hash[block] = block_hash
        self._cached[block_hash] = block
