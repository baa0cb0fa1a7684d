"""Attaching a sealed stream to a run.

The stream is verified and every evidence column derived from it first
(:func:`tracker.streams.derive`: intact and sealed; when the tracker trusts any
public key, signed by one of them; exactly one well-formed sealed verdict, as
``alpha observe verdict`` requires, else ``stream-verdict``), and only then
recorded: stream id, absolute path (and the store URL it came from, if any),
seal head, BLAKE3 of the whole file, size, event count, the verdict's gate,
verdict and scope, the signer, when the stream was recorded and the GPUs the
recorder observed.

The database refuses the rest: a run that is not running, a stream already
evidence for another run, a stream id attached before with a different seal or
file digest (``tracker-stream-changed``), and evidence that does not belong to
its run: a gate other than the run's lane, a recording older than the run, a
run device the recorder did not observe, a stream not recorded at the commit the
run names (its CI job's; ``tracker-evidence-lane``, ``-time``, ``-devices``,
``-source``). A run started without a lane takes the gate of its first stream
as its lane. Attaching the same unchanged stream to the same run again changes
nothing. Each attach is one journal entry.

A store URL (``s3://...``, ``file://...``, as ``alpha observe push`` prints) is
fetched first (``observe.store.fetch``: its BLAKE3 must equal its name, and it
must verify) into a temporary file, which is attached; the row keeps the URL
(``path`` and ``url``), so ``audit`` re-fetches from the store. A stream already
attached (from a path, or from another store) that is attached again from a
store URL gets that URL added (``located``): the fetched bytes are the row's
(same seal, same file digest, else ``tracker-stream-changed``), the change is
journalled (``attach.location``), and it is allowed on a finished run, since it
changes nothing the evidence says.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aos.signing import Verifier
from tracker import journal
from tracker.backends import Connection
from tracker.db import transaction
from tracker.records import run_id_of
from tracker.refusals import TrackerSchema
from tracker.streams import StreamFacts, derive, verify_for_tracker

if TYPE_CHECKING:
    from aos.verify import Verification

__all__ = ["Attached", "EvidenceIndex", "attach", "insert_evidence", "trusted_keys", "verify_for_tracker"]


@dataclass(frozen=True)
class Attached:
    """An evidence row, and whether this call created it."""

    evidence_id: int
    run_id: str
    stream_id: str
    path: str
    url: str | None
    seal_head: str
    file_digest: str
    size: int
    events: int
    verdict: str | None
    scope: str | None
    gate: str | None
    signed: bool
    key_id: str | None
    recorded_at: str | None
    devices: list[str]
    attached_at: str
    new: bool
    #: The store URL was added to a stream attached before (from a path, or from another store).
    located: bool = False

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


_COLUMNS = (
    "id, run_id, stream_id, path, url, seal_head, file_digest, size, events, verdict, scope, gate,"
    " signed, key_id, recorded_at, devices, attached_at"
)


def _row(conn: Connection, stream_id: str, new: bool) -> Attached | None:
    import json

    r = conn.execute(f"SELECT {_COLUMNS} FROM evidence WHERE stream_id = ?", (stream_id,)).fetchone()
    if r is None:
        return None
    devices = json.loads(r[15]) if r[15] else []
    return Attached(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], bool(r[12]), r[13], r[14],
        devices, r[16], new,
    )  # fmt: skip


class EvidenceIndex(Protocol):
    """Where a stream verified as it enters the evidence gets its index row (``observe.store_index.Appender``)."""

    def entered(self, path: Path, v: Verification, url: str, by: str) -> None:
        """Describe the stream verified at ``path`` (still there) as its row; kept until ``flush``."""

    def flush(self) -> None:
        """Append the rows described, once the tracker has recorded them."""


def attach(
    conn: Connection,
    path: str | os.PathLike[str],
    run: str | int,
    *,
    url: str | None = None,
    index: EvidenceIndex | None = None,
) -> Attached:
    """Verify the stream at ``path`` and link it to ``run``; raises a ``Refusal`` and records nothing otherwise.

    ``path`` may be a store URL: see :func:`_attach_from_store`. ``url``: the store URL
    the file at ``path`` was fetched from; recorded as both ``url`` and ``path`` (the
    fetched copy does not last). With ``index``, a stream attached (or located) by this
    call gets its row in that evidence index, from this verification, once recorded.
    """
    from observe.store import is_store_url  # light: stdlib and aos.refusals

    if url is None and is_store_url(path):
        return _attach_from_store(conn, str(path), run, index)
    run = run_id_of(conn, run)
    p = Path(path)
    facts = derive(p, trusted_keys(conn), require_trusted=True, keep=index is not None)
    row = _record(conn, facts, run, p, url)
    if index is not None and (row.new or row.located) and facts.verification is not None:
        index.entered(p, facts.verification, url or p.resolve().as_uri(), "attach")
        index.flush()
    return row


def _record(conn: Connection, facts: StreamFacts, run: str, p: Path, url: str | None) -> Attached:
    with transaction(conn, f"stream {facts.stream_id}"):
        row, changes = insert_evidence(conn, facts, run, url or str(p.resolve()), url)
        if row.new:
            journal.append(
                conn,
                "attach",
                {"run": run, "path": row.path, "url": url, "stream_id": facts.stream_id},
                changes,
            )
        elif url is not None and row.url != url:
            row = _add_location(conn, row, url)
        return row


def _add_location(conn: Connection, row: Attached, url: str) -> Attached:
    """Record ``url`` as where the stream of ``row`` is kept (its bytes were fetched from there and are the row's).

    The one edit evidence takes, journalled as ``attach.location``; the database
    refuses a URL that does not name the row's file digest (migration 5), on a
    finished run too.
    """
    conn.execute("UPDATE evidence SET url = ? WHERE id = ?", (url, row.evidence_id))
    journal.append(
        conn,
        "attach.location",
        {"run": row.run_id, "stream_id": row.stream_id, "url": url, "was": row.url},
        [journal.change(conn, "evidence", row.evidence_id)],
    )
    moved = _row(conn, row.stream_id, False)
    assert moved is not None  # the row was just updated in this transaction
    return replace(moved, located=True)


def insert_evidence(
    conn: Connection, facts: StreamFacts, run: str, path: str, url: str | None
) -> tuple[Attached, list[dict[str, Any]]]:
    """Insert the evidence row of a stream already verified and derived (``facts``), inside the caller's
    transaction; returns the row and the journal changes it made (none when it was attached unchanged).

    The one code path that writes evidence: ``attach`` and ``tracker import`` both go through it.
    """
    columns = facts.columns()
    changes: list[dict[str, Any]] = []
    lane = conn.execute("SELECT lane FROM runs WHERE id = ?", (run,)).fetchone()[0]
    if (
        lane is None
        and conn.execute("SELECT 1 FROM evidence WHERE stream_id = ?", (facts.stream_id,)).fetchone() is None
    ):
        # A run started without a lane is a run of its first stream's gate.
        conn.execute("UPDATE runs SET lane = ? WHERE id = ? AND lane IS NULL", (facts.gate, run))
        changes.append(journal.change(conn, "runs", run))
    names = ", ".join(["run_id", "path", "url", *columns])
    cur = conn.execute(
        f"INSERT INTO evidence ({names}) VALUES ({', '.join('?' * (3 + len(columns)))})",
        (run, path, url, *columns.values()),
    )
    # A BEFORE trigger's RAISE(IGNORE) (same stream, same run, unchanged) inserts nothing.
    new = cur.rowcount == 1
    row = _row(conn, facts.stream_id, new)
    if row is None:
        raise TrackerSchema(
            f"the database silently dropped stream {facts.stream_id}: a trigger that is not the tracker's"
            " (run `alpha tracker audit`)"
        )
    if not new:
        return row, []
    changes.append(journal.change(conn, "evidence", row.evidence_id))
    changes += _record_serials(conn, facts)
    return row, changes


def _record_serials(conn: Connection, facts: StreamFacts) -> list[dict[str, Any]]:
    """Each GPU's serial as the stream's NVML observations show it, beside the device of that UUID that has none
    yet (migration 6: set once, never changed); the journal's changes."""
    changes = []
    for uuid, serial in facts.serials:
        found = conn.execute("SELECT id FROM devices WHERE uuid = ? AND serial IS NULL", (uuid,)).fetchone()
        if found is not None:
            conn.execute("UPDATE devices SET serial = ? WHERE id = ?", (serial, found[0]))
            changes.append(journal.change(conn, "devices", found[0]))
    return changes


def _attach_from_store(conn: Connection, url: str, run: str | int, index: EvidenceIndex | None) -> Attached:
    """Fetch a stored stream (its digest checked and the stream verified) into a temporary folder,
    attach that copy, and record the URL it came from; the copy is removed after."""
    from observe.store import fetch

    run_id_of(conn, run)  # an unknown run is refused before anything is downloaded
    with tempfile.TemporaryDirectory(prefix="alpha-attach-") as tmp:
        return attach(conn, fetch(url, os.path.join(tmp, "stream.aos")), run, url=url, index=index)
