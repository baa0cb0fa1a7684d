"""Where a session's files lie in its folder (docs/FORMAT.md section 9.5).

DIR/session.aos          the coordinating recording's stream
DIR/checkpoint           the session's checkpoint (a signed note when the session was signed)
DIR/nodes/NAME.aos       a node member's sealed stream
DIR/sessions/NAME/       a sub-session member: a session folder of its own
DIR/proofs/NAME.proof    each proven member's inclusion proof in this session's tree
DIR/gpus                 the GPUs its proven nodes observed, at any depth, sorted (observe.session.gpus)
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CHECKPOINT",
    "GPUS",
    "STREAM",
    "checkpoint",
    "gpus",
    "member_stream",
    "node_partial",
    "node_stream",
    "proof",
    "stream",
    "stream_partial",
    "sub_session",
]

STREAM = "session.aos"
CHECKPOINT = "checkpoint"
GPUS = "gpus"


def stream(directory: Path) -> Path:
    """Return the session's own stream."""
    return directory / STREAM


def stream_partial(directory: Path) -> Path:
    """Return where the session's own stream lies while it records (renamed when sealed)."""
    return directory / f".{STREAM}.partial"


def checkpoint(directory: Path) -> Path:
    """Return the session's checkpoint file."""
    return directory / CHECKPOINT


def gpus(directory: Path) -> Path:
    """Return the session's sorted list of the GPUs its proven nodes observed."""
    return directory / GPUS


def node_stream(directory: Path, name: str) -> Path:
    """Return where node member ``name``'s sealed stream lies."""
    return directory / "nodes" / f"{name}.aos"


def node_partial(directory: Path, name: str) -> Path:
    """Return where node member ``name``'s stream lies while its recorder records (renamed when sealed)."""
    return directory / "nodes" / f".{name}.aos.partial"


def sub_session(directory: Path, name: str) -> Path:
    """Return sub-session member ``name``'s folder."""
    return directory / "sessions" / name


def member_stream(directory: Path, name: str, kind: str) -> Path:
    """Return the sealed stream of member ``name`` of ``kind`` (``stream`` or ``session``)."""
    return stream(sub_session(directory, name)) if kind == "session" else node_stream(directory, name)


def proof(directory: Path, name: str) -> Path:
    """Return member ``name``'s inclusion proof file."""
    return directory / "proofs" / f"{name}.proof"
