"""Attaching a sealed stream to a run.

The stream is verified first (intact and sealed; when the tracker trusts any
public key, signed by one of them), and only then recorded: stream id, absolute
path, seal head (the seal event's hash), BLAKE3 of the whole file, size, and the
sealed verdict's gate, verdict and scope. The database refuses the rest: a run
that is not running, a stream already evidence for another run, and a stream id
attached before with a different seal or file digest (``tracker-stream-changed``).
Attaching the same unchanged stream to the same run again changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.refusals import StreamSignature
from aos.signing import Verifier
from tracker.backends import Connection
from tracker.db import transaction
from tracker.records import run_id_of
from tracker.refusals import TrackerUnknown

if TYPE_CHECKING:
    from aos.verify import Verification

__all__ = ["Attached", "attach", "trusted_keys", "verify_for_tracker"]


@dataclass(frozen=True)
class Attached:
    """An evidence row, and whether this call created it."""

    evidence_id: int
    run_id: int
    stream_id: str
    path: str
    seal_head: str
    file_digest: str
    size: int
    events: int
    verdict: str | None
    scope: str | None
    gate: str | None
    signed: bool
    key_id: str | None
    attached_at: str
    new: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trusted_keys(conn: Connection) -> dict[str, Verifier]:
    """The tracker's trusted public keys, by key id."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    keys: dict[str, Verifier] = {}
    for key_id, pem in conn.execute("SELECT key_id, pem FROM trusted_keys").fetchall():
        public = serialization.load_pem_public_key(pem.encode("ascii"))
        if isinstance(public, Ed25519PublicKey):
            keys[key_id] = Verifier(public)
    return keys


def verify_for_tracker(path: str | os.PathLike[str], keys: dict[str, Verifier]) -> Verification:
    """``aos.verify.verify_stream``, with the signature checked when ``keys`` is not empty."""
    from aos.verify import verify_stream

    v = verify_stream(path)
    if keys:
        if not v.signed:
            raise StreamSignature(
                f"{path} is not signed, and this tracker accepts only streams signed by a trusted key"
            )
        key = keys.get(v.key_id or "")
        if key is None:
            raise StreamSignature(f"{path} is signed by key {v.key_id}, which this tracker does not trust")
        v = verify_stream(path, key)
    return v


def _row(conn: Connection, stream_id: str, new: bool) -> Attached:
    r = conn.execute(
        "SELECT id, run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate,"
        " signed, key_id, attached_at FROM evidence WHERE stream_id = ?",
        (stream_id,),
    ).fetchone()
    return Attached(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], bool(r[11]), r[12], r[13], new)


def attach(conn: Connection, path: str | os.PathLike[str], run: int) -> Attached:
    """Verify the stream at ``path`` and link it to ``run``; raises a ``Refusal`` and records nothing otherwise."""
    run_id_of(conn, run)
    p = Path(path)
    v = verify_for_tracker(p, trusted_keys(conn))
    size = p.stat().st_size
    verdict: dict[str, Any] = v.verdict or {}
    with transaction(conn, f"stream {v.stream_id}"):
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run,)).fetchone() is None:  # pragma: no cover
            raise TrackerUnknown(f"no run {run}")
        cur = conn.execute(
            "INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events,"
            " verdict, scope, gate, signed, key_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run,
                v.stream_id,
                str(p.resolve()),
                v.head,
                v.file_blake3,
                size,
                v.events,
                verdict.get("verdict") if v.verdict is not None else None,
                verdict.get("scope") if v.verdict is not None else None,
                verdict.get("gate") if v.verdict is not None else None,
                int(v.signed),
                v.key_id,
            ),
        )
        # A BEFORE trigger's RAISE(IGNORE) (same stream, same run, unchanged) inserts nothing.
        return _row(conn, v.stream_id, new=cur.rowcount == 1)
