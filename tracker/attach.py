"""Attaching a sealed stream to a run.

The stream is verified first (intact and sealed; when the tracker trusts any
public key, signed by one of them), and only then recorded: stream id, absolute
path, seal head (the seal event's hash), BLAKE3 of the whole file, size, and the
sealed verdict's gate, verdict and scope. The database refuses the rest: a run
that is not running, a stream already evidence for another run, and a stream id
attached before with a different seal or file digest (``tracker-stream-changed``).
Attaching the same unchanged stream to the same run again changes nothing.

A store URL (``s3://...``, ``file://...``, as ``alpha observe push`` prints) is
fetched first (``observe.store.fetch``: its BLAKE3 must equal its name, and it
must verify) into a temporary file, which is attached; the row keeps the URL
(``path`` and ``url``), so ``audit`` re-fetches from the store.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.refusals import StreamSignature
from aos.signing import Verifier
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


def trusted_keys(conn: sqlite3.Connection) -> dict[str, Verifier]:
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


def _row(conn: sqlite3.Connection, stream_id: str, new: bool) -> Attached:
    r = conn.execute(
        "SELECT id, run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope, gate,"
        " signed, key_id, attached_at FROM evidence WHERE stream_id = ?",
        (stream_id,),
    ).fetchone()
    return Attached(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], bool(r[11]), r[12], r[13], new)


def attach(conn: sqlite3.Connection, path: str | os.PathLike[str], run: int, *, url: str | None = None) -> Attached:
    """Verify the stream at ``path`` and link it to ``run``; raises a ``Refusal`` and records nothing otherwise.

    ``path`` may be a store URL: see :func:`_attach_from_store`. ``url`` is where a
    fetched copy at ``path`` came from.
    """
    from observe.store import is_store_url  # light: stdlib and aos.refusals

    if url is None and is_store_url(path):
        return _attach_from_store(conn, str(path), run)
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
            " verdict, scope, gate, signed, key_id, url) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run,
                v.stream_id,
                url or str(p.resolve()),
                v.head,
                v.file_blake3,
                size,
                v.events,
                verdict.get("verdict") if v.verdict is not None else None,
                verdict.get("scope") if v.verdict is not None else None,
                verdict.get("gate") if v.verdict is not None else None,
                int(v.signed),
                v.key_id,
                url,
            ),
        )
        # A BEFORE trigger's RAISE(IGNORE) (same stream, same run, unchanged) inserts nothing.
        return _row(conn, v.stream_id, new=cur.rowcount == 1)


def _attach_from_store(conn: sqlite3.Connection, url: str, run: int) -> Attached:
    """Fetch a stored stream (its digest checked and the stream verified) into a temporary folder,
    attach that copy, and record the URL it came from; the copy is removed after."""
    from observe.store import fetch

    run_id_of(conn, run)  # an unknown run is refused before anything is downloaded
    with tempfile.TemporaryDirectory(prefix="alpha-attach-") as tmp:
        return attach(conn, fetch(url, os.path.join(tmp, "stream.aos")), run, url=url)
