"""Counts that read as sentences in what people read: "1 receipt", "2 receipts", never "2 receipt(s)"."""

from __future__ import annotations

__all__ = ["count"]


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural unless ``n`` is 1 (``plural`` for an irregular one)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
