"""One refusal hierarchy: every failure a user can meet has a name.

The names of the stream refusals are a contract (DESIGN.md, Integrity): other
tools match on them. A refusal prints as ``refused: NAME: detail``.
"""

from __future__ import annotations

__all__ = [
    "ArtifactMissing",
    "QuerySQL",
    "QueryStreamId",
    "Refusal",
    "StreamChain",
    "StreamMissing",
    "StreamOrder",
    "StreamSchema",
    "StreamSeal",
    "StreamSignature",
    "StreamTruncated",
    "StreamUnsealed",
    "StreamVerdict",
    "StreamWrite",
    "refusal_by_name",
]


class Refusal(Exception):
    """A named, expected failure. ``name`` is stable; ``detail`` is for people."""

    name: str = "refused"

    def __init__(self, detail: str, **context: object) -> None:
        super().__init__(detail)
        self.detail = detail
        self.context: dict[str, object] = dict(context)

    def diagnostics(self) -> str:
        """The one line the CLI prints on stderr."""
        return f"refused: {self.name}: {self.detail}"

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


class StreamMissing(Refusal):
    """The stream file does not exist or cannot be opened."""

    name = "stream-missing"


class StreamSchema(Refusal):
    """Not an AOS stream, or a version this reader does not know."""

    name = "stream-schema"


class StreamTruncated(Refusal):
    """Bytes follow the last complete batch (a torn write or a cut file)."""

    name = "stream-truncated"


class StreamChain(Refusal):
    """A hash does not follow from the one before; names the first bad seq."""

    name = "stream-chain"


class StreamOrder(Refusal):
    """Sequence numbers are not dense from 0."""

    name = "stream-order"


class StreamUnsealed(Refusal):
    """Intact, but no seal: names the last intact seq and checkpoint."""

    name = "stream-unsealed"


class StreamSeal(Refusal):
    """The seal does not match the chain or the file, or bytes follow it."""

    name = "stream-seal"


class StreamSignature(Refusal):
    """A signature is bad, or missing where a key was given."""

    name = "stream-signature"


class StreamVerdict(Refusal):
    """Intact and sealed, but it holds no verdict."""

    name = "stream-verdict"


class ArtifactMissing(Refusal):
    """The stream holds no artifact at that path (or its bytes were omitted)."""

    name = "artifact-missing"


class StreamWrite(Refusal):
    """The stream could not be written (unwritable path, full disk)."""

    name = "stream-write"


class QuerySQL(Refusal):
    """``query``: SQL that DuckDB does not accept or run here (syntax, names, types, or a file access)."""

    name = "query-sql"


class QueryStreamId(Refusal):
    """``query``: a stream whose stream id another given stream also claims (not merged)."""

    name = "query-stream-id"


_ALL: tuple[type[Refusal], ...] = (
    StreamMissing,
    StreamSchema,
    StreamTruncated,
    StreamChain,
    StreamOrder,
    StreamUnsealed,
    StreamSeal,
    StreamSignature,
    StreamVerdict,
    StreamWrite,
    ArtifactMissing,
    QuerySQL,
    QueryStreamId,
)


def refusal_by_name(name: str) -> type[Refusal]:
    """The refusal class for a contract name (KeyError when unknown)."""
    for cls in _ALL:
        if cls.name == name:
            return cls
    raise KeyError(name)
