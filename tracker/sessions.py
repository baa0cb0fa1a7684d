"""A fleet session attached to a run: what has run, on what, and what has not.

    rows = attach_session(conn, Path("run-7"), run)

A session (observe.session) is attached by its folder, or by its coordinating
stream ``session.aos`` (its folder is then the stream's). The folder is verified
offline first (``observe.session.verify.verify_session``: its stream, its
checkpoint, every member's stream and inclusion proof, at any depth; with
trusted keys, the session's stream and checkpoint signed by one of them) and
then every member the session expected is recorded, in its declared order, as
verified: ``proven`` with its stream's BLAKE3, ``did-not-run`` or
``not-proven`` with the reason (migration 7). The database keeps each row as it
was first attached (``tracker-stream-changed``, ``tracker-stream-attached``)
and refuses a physical pass while any member of the run's sessions is not
proven (``tracker-session-unproven``). The coordinating stream is attached as
evidence too when it holds a sealed verdict (``session run --gate``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker import journal
from tracker.db import transaction
from tracker.records import run_id_of

if TYPE_CHECKING:
    from aos.signing import Verifier
    from observe.session.verify import SessionReport
    from tracker.attach import Attached
    from tracker.backends import Connection

__all__ = ["AttachedSession", "attach_session", "is_session", "run_sessions", "session_folder", "session_rows"]

#: The columns of a member's row, in the order ``session_rows`` gives them.
COLUMNS = ("origin", "member", "position", "path", "root", "kind", "status", "reason", "digest")


@dataclass(frozen=True)
class AttachedSession:
    """A session attached to a run: its origin, root and folder, each member's row, the evidence row of its
    coordinating stream (None: it holds no sealed verdict), and whether this call added any row."""

    run_id: str
    origin: str
    root: str
    path: str
    members: list[dict[str, Any]]
    evidence: Attached | None
    new: bool

    @property
    def not_proven(self) -> list[dict[str, Any]]:
        """Return the members that did not run or are not proven."""
        return [m for m in self.members if m["status"] != "proven"]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = None if self.evidence is None else self.evidence.as_dict()
        return d


def session_folder(path: str | os.PathLike[str]) -> Path | None:
    """The session folder ``path`` names (a session's folder, or its ``session.aos``); None when it names none."""
    from observe.session import layout

    p = Path(path)
    if p.is_dir():
        return p
    if p.name == layout.STREAM and layout.checkpoint(p.parent).is_file():
        return p.parent
    return None


def is_session(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a session to attach (rather than a stream)."""
    return session_folder(path) is not None


def verify_trusted(directory: Path, keys: dict[str, Verifier]) -> SessionReport:
    """Verify the session in ``directory``; with trusted ``keys``, signed by one of them (``tracker-key-untrusted``
    otherwise). Raises the session's own ``Refusal`` when it does not verify."""
    from aos.refusals import StreamSignature
    from observe.session.verify import verify_session
    from tracker.refusals import TrackerKeyUntrusted

    if not keys:
        return verify_session(directory)
    for key in keys.values():
        try:
            return verify_session(directory, key)
        except StreamSignature:
            continue
    raise TrackerKeyUntrusted(
        f"the tracker holds trusted keys and the session in {directory} (its stream and checkpoint) is not signed by "
        "one of them"
    )


def session_rows(report: SessionReport, directory: Path) -> list[dict[str, Any]]:
    """Each member of a verified session as its row (``COLUMNS``), in the declared order, at any depth. A member
    proven on its labels alone (its session declared no key for it) is recorded ``not-proven``, ``unsigned``: the
    tracker's proven means shown to come from its recorder."""
    path = str(directory.resolve())
    rows = []
    for i, m in enumerate(report.members):
        proven = m.status == "proven" and not m.unsigned
        status = "not-proven" if m.unsigned else m.status
        reason = None if proven else (m.reason or "no reason given") + ("" if m.sealed else " (since it sealed)")
        if m.unsigned:
            reason = "unsigned: the session declared no key for it; its stream names it by its own labels only"
        values = (report.origin, m.path, i, path, report.root, m.kind, status, reason, m.digest if proven else None)
        rows.append(dict(zip(COLUMNS, values, strict=True)))
    return rows


def insert_rows(conn: Connection, run: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert a session's member rows inside the caller's transaction; the journal's changes (none when every row
    was attached before, unchanged)."""
    changes = []
    names = ", ".join(["run_id", *COLUMNS])
    for row in rows:
        cur = conn.execute(
            f"INSERT INTO session_members ({names}) VALUES ({', '.join('?' * (1 + len(COLUMNS)))})",
            (run, *(row[c] for c in COLUMNS)),
        )
        if cur.rowcount == 1:  # a BEFORE trigger's IGNORE (unchanged, same run) inserts nothing
            changes.append(journal.change(conn, "session_members", row["origin"], row["member"]))
    return changes


def attach_session(conn: Connection, path: str | os.PathLike[str], run: str | int) -> AttachedSession:
    """Verify the session ``path`` names and record its members on ``run`` (and its coordinating stream as evidence
    when it holds a sealed verdict); raises a ``Refusal`` and records nothing otherwise."""
    from aos.refusals import StreamProof, StreamVerdict
    from observe.session import layout
    from tracker.attach import insert_evidence, trusted_keys
    from tracker.streams import derive

    directory = session_folder(path)
    if directory is None:
        raise StreamProof(f"{path} is not a session's folder or its {layout.STREAM}")
    run = run_id_of(conn, run)
    keys = trusted_keys(conn)
    report = verify_trusted(directory, keys)
    rows = session_rows(report, directory)
    stream = layout.stream(directory)
    try:
        facts = derive(stream, keys, require_trusted=True)
    except StreamVerdict:
        facts = None  # a coordinating recording without a gate: its members are the session's record
    with transaction(conn, f"session {report.origin}"):
        evidence = None
        changes: list[dict[str, Any]] = []
        if facts is not None:
            evidence, changes = insert_evidence(conn, facts, run, str(stream.resolve()), None)
        changes += insert_rows(conn, run, rows)
        if changes:
            journal.append(
                conn,
                "attach.session",
                {"run": run, "path": str(directory.resolve()), "origin": report.origin, "root": report.root},
                changes,
            )
    return AttachedSession(run, report.origin, report.root, str(directory.resolve()), rows, evidence, bool(changes))


def run_sessions(conn: Connection, run: str) -> list[dict[str, Any]]:
    """The sessions attached to ``run``, each with its members in their declared order (as recorded)."""
    out: dict[str, dict[str, Any]] = {}
    for r in conn.execute(
        f"SELECT {', '.join(COLUMNS)}, attached_at FROM session_members WHERE run_id = ? ORDER BY attached_at, origin,"
        " position",
        (run,),
    ).fetchall():
        row = dict(zip([*COLUMNS, "attached_at"], r, strict=True))
        s = out.setdefault(
            row["origin"], {"origin": row["origin"], "root": row["root"], "path": row["path"], "members": []}
        )
        s["members"].append({k: row[k] for k in ("member", "kind", "status", "reason", "digest")})
    return list(out.values())
