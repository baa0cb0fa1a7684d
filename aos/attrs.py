"""Facts about attrs values that every layer reads: the receipt statuses, and what a JSON integer is.

They live in ``aos``, the format, because every other package needs them and
``aos`` is the only one they all may import: ``gates`` (which validates a gate
file's statuses and reads counts out of attrs) imports nothing else, and the
light receipt client (``observe.channel``) may load nothing heavy. So this module
imports nothing at all; ``alpha observe receipt`` pays for a tuple and a function.
"""

from __future__ import annotations

__all__ = ["RECEIPT_STATUSES", "json_int"]

#: The statuses a ``receipt`` event may carry (docs/FORMAT.md, section 4), ``info`` the default.
RECEIPT_STATUSES: tuple[str, ...] = ("pass", "fail", "skip", "inconclusive", "info")


def json_int(value: object) -> int | None:
    """Return ``value`` when it is a JSON integer, else None.

    Parsed JSON gives ``true`` and ``false`` as Python's ``bool``, a subclass of
    ``int``: a count, a size or a time that a forged stream sets to ``true`` is no
    integer, and is None here as a string or a float is.
    """
    return value if isinstance(value, int) and not isinstance(value, bool) else None
