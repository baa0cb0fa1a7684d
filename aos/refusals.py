"""One refusal hierarchy: every failure a user can meet has a name.

A refusal prints as ``refused: NAME: detail``. The names are a contract
(docs/REFUSALS.md lists each, with the package that raises it): other tools
match on them. This module holds the base class, the registry of names and the
format's own refusals (``stream-*``); every other package keeps its refusals in
its own ``refusals`` module (``gates.refusals``, ``observe.refusals``,
``tracker.refusals``).

Each subclass is registered under its ``name`` when the class is created, and a
second class claiming a taken name raises ``TypeError`` at import, so a name
always stands for one class. :func:`refusal_by_name` is the one way back from a
name to its class (the tracker maps its database triggers' messages with it).
A base that is never raised itself is declared ``abstract=True`` and takes no
name in the registry.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import ClassVar

__all__ = [
    "Refusal",
    "StreamChain",
    "StreamMissing",
    "StreamOrder",
    "StreamProof",
    "StreamSchema",
    "StreamSeal",
    "StreamSignature",
    "StreamTruncated",
    "StreamUnsealed",
    "StreamVerdict",
    "StreamWrite",
    "refusal_by_name",
    "registered",
]

_REGISTRY: dict[str, type[Refusal]] = {}


class Refusal(Exception):
    """A named, expected failure. ``name`` is stable; ``detail`` is for people."""

    name: ClassVar[str] = "refused"

    def __init_subclass__(cls, *, abstract: bool = False, **kwargs: object) -> None:
        """Register the new class under its ``name``; raise ``TypeError`` when another class holds it."""
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        if "name" not in cls.__dict__:
            raise TypeError(f"refusal class {cls.__module__}.{cls.__qualname__} names no refusal")
        held = _REGISTRY.get(cls.name)
        # The same class defined again (its module reloaded) keeps its name; another class may not take it.
        if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(
                f"refusal name {cls.name!r} of {cls.__module__}.{cls.__qualname__} "
                f"is already {held.__module__}.{held.__qualname__}'s"
            )
        _REGISTRY[cls.name] = cls

    def __init__(self, detail: str, **context: object) -> None:
        super().__init__(detail)
        self.detail = detail
        self.context: dict[str, object] = dict(context)

    def diagnostics(self) -> str:
        """Return the one line the CLI prints on stderr."""
        return f"refused: {self.name}: {self.detail}"

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


def refusal_by_name(name: str) -> type[Refusal]:
    """Return the refusal class registered under ``name`` (``KeyError`` when none is).

    Only classes whose modules are imported are registered: a package's names are
    known once its ``refusals`` module is.
    """
    return _REGISTRY[name]


def registered() -> MappingProxyType[str, type[Refusal]]:
    """Return every registered refusal class by name (a read-only view)."""
    return MappingProxyType(_REGISTRY)


class StreamChain(Refusal):
    """A hash does not follow from the one before; names the first bad seq."""

    name = "stream-chain"


class StreamMissing(Refusal):
    """The stream file does not exist or cannot be opened."""

    name = "stream-missing"


class StreamOrder(Refusal):
    """Sequence numbers are not dense from 0."""

    name = "stream-order"


class StreamProof(Refusal):
    """A Merkle tree, inclusion proof, checkpoint or signed note that does not hold (aos.tlog, aos.proofs)."""

    name = "stream-proof"


class StreamSchema(Refusal):
    """Not an AOS stream, or a version this reader does not know."""

    name = "stream-schema"


class StreamSeal(Refusal):
    """The seal does not match the chain or the file, or bytes follow it."""

    name = "stream-seal"


class StreamSignature(Refusal):
    """A signature is bad, or missing where a key was given."""

    name = "stream-signature"


class StreamTruncated(Refusal):
    """Bytes follow the last complete batch (a torn write or a cut file)."""

    name = "stream-truncated"


class StreamUnsealed(Refusal):
    """Intact, but no seal: names the last intact seq and checkpoint."""

    name = "stream-unsealed"


class StreamVerdict(Refusal):
    """Intact and sealed, but it holds no verdict."""

    name = "stream-verdict"


class StreamWrite(Refusal):
    """The stream could not be written (unwritable path, full disk)."""

    name = "stream-write"
