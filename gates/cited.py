"""The seqs a check cites, in memory that follows the stream's length, not the citations' count.

A rule over a long lane cites every output event of every step it read (a
million seqs is usual); a sealed verdict keeps the lowest ``MAX_EVIDENCE`` of
them and counts the rest (gates/verdict.py). ``Cited`` holds them as bits, one
per possible seq in blocks of 65,536 (8 KiB), so citing a seq twice or a
million seqs costs what the stream's span of seqs costs, never an object per
seq: what it gives (the lowest seqs, the count of distinct ones) is what a
sorted set of them would give.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Cited"]

_BLOCK_BITS = 16
_BLOCK = 1 << _BLOCK_BITS
_MASK = _BLOCK - 1


class Cited:
    """A set of seqs (any ints) as bitmaps of 65,536 seqs each."""

    __slots__ = ("_blocks",)

    def __init__(self, seqs: Iterable[int] = ()) -> None:
        self._blocks: dict[int, bytearray] = {}
        self.add(seqs)

    def add(self, seqs: Iterable[int]) -> None:
        blocks = self._blocks
        key, block = None, bytearray()
        for s in seqs:
            k = s >> _BLOCK_BITS
            if k != key:
                got = blocks.get(k)
                if got is None:
                    got = blocks[k] = bytearray(_BLOCK >> 3)
                key, block = k, got
            low = s & _MASK
            block[low >> 3] |= 1 << (low & 7)

    def __len__(self) -> int:
        """How many distinct seqs."""
        return sum(int.from_bytes(b, "little").bit_count() for b in self._blocks.values())

    def lowest(self, n: int) -> list[int]:
        """The ``n`` lowest seqs, ascending."""
        out: list[int] = []
        for k in sorted(self._blocks):
            base = k << _BLOCK_BITS
            block = self._blocks[k]
            for i, byte in enumerate(block):
                while byte and len(out) < n:
                    bit = (byte & -byte).bit_length() - 1
                    out.append(base + (i << 3) + bit)
                    byte &= byte - 1
                if len(out) >= n:
                    return out
        return out
