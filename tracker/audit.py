"""Re-verifying the tracker: every attached stream, and the rules themselves.

For each evidence row the stream file is read again and verified (signature
too, when it was signed by a key the tracker trusts); it must still be intact
and sealed, carry the same stream id and seal head, and hash (BLAKE3, whole
file) to the digest recorded at attach time. A file that is gone is
``missing``; one whose bytes, seal or verification differ is ``changed``.

The audit also checks that the database's rules are still in force: every
trigger of the shipped migrations present with its shipped text, and no row
that those rules would have refused (a verified item without its evidence, a
physical pass without a physical stream), in case a client dropped a trigger.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from blake3 import blake3

from aos.refusals import Refusal
from tracker.attach import trusted_keys
from tracker.backends import Connection, is_sqlite
from tracker.db import _statements, migrations

__all__ = ["AuditReport", "StreamFinding", "audit", "expected_triggers", "format_audit"]

_TRIGGER = re.compile(r"CREATE\s+TRIGGER\s+(\w+)\b.*?\bEND\s*;", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class StreamFinding:
    """What the audit found for one attached stream: ``ok``, ``missing`` or ``changed``."""

    stream_id: str
    run_id: int
    path: str
    state: str
    detail: str


@dataclass
class AuditReport:
    """Every stream's finding, and any broken rule."""

    streams: list[StreamFinding] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.rules and all(f.state == "ok" for f in self.streams)

    def counts(self) -> dict[str, int]:
        counts = {"ok": 0, "changed": 0, "missing": 0}
        for f in self.streams:
            counts[f.state] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "streams": [asdict(f) for f in self.streams],
            "rules": list(self.rules),
        }


def expected_triggers() -> dict[str, str]:
    """Trigger name -> its ``CREATE TRIGGER`` text, as the migrations ship them."""
    out: dict[str, str] = {}
    for m in migrations():
        for statement in _statements(m.sql):
            match = _TRIGGER.search(statement)
            if match:
                out[match.group(1)] = match.group(0)[:-1].strip()
    return out


def _digest(path: Path) -> str:
    h = blake3()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_stream(row: Any, keys: dict[str, Any]) -> StreamFinding:
    from aos.verify import verify_stream

    path = Path(row["path"])

    def finding(state: str, detail: str) -> StreamFinding:
        return StreamFinding(row["stream_id"], row["run_id"], row["path"], state, detail)

    if not path.is_file():
        return finding("missing", "the file is gone")
    key = keys.get(row["key_id"] or "") if row["signed"] else None
    try:
        v = verify_stream(path, key)
    except Refusal as exc:
        try:
            now = _digest(path)
        except OSError:  # pragma: no cover - vanished between the checks
            return finding("missing", "the file is gone")
        changed = "bytes unchanged" if now == row["file_digest"] else f"file blake3 now {now}"
        return finding("changed", f"no longer verifies ({exc.diagnostics()}); {changed}")
    problems = []
    if v.stream_id != row["stream_id"]:
        problems.append(f"stream id now {v.stream_id}")
    if v.head != row["seal_head"]:
        problems.append(f"seal head now {v.head}, recorded {row['seal_head']}")
    if v.file_blake3 != row["file_digest"]:
        problems.append(f"file blake3 now {v.file_blake3}, recorded {row['file_digest']}")
    if problems:
        return finding("changed", "; ".join(problems))
    return finding("ok", f"intact and sealed, {v.events} events" + (", signature good" if key is not None else ""))


def _catalog_problems(conn: Connection) -> list[str]:
    """Missing or altered triggers (PostgreSQL: also disabled or added ones, altered functions, rewrite rules)."""
    if not is_sqlite(conn):
        from tracker import pg

        assert isinstance(conn, pg.PgConnection)
        return pg.catalog_problems(conn)
    problems: list[str] = []
    present = {
        r[0]: (r[1] or "").strip() for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    }
    for name, sql in expected_triggers().items():
        if name not in present:
            problems.append(f"trigger {name} is missing: its rule is no longer enforced")
        elif present[name] != sql:
            problems.append(f"trigger {name} was altered")
    return problems


def _check_rules(conn: Connection) -> list[str]:
    problems = _catalog_problems(conn)
    for r in conn.execute(
        """SELECT i.id, i.hardware FROM items i WHERE i.status = 'verified' AND NOT EXISTS (
               SELECT 1 FROM item_evidence l JOIN evidence e ON e.id = l.evidence_id JOIN runs r ON r.id = e.run_id
               WHERE l.item_id = i.id AND e.verdict = 'pass' AND r.state = 'completed'
                 AND (i.hardware = 0 OR e.scope = 'physical'))"""
    ):
        kind = "hardware item" if r[1] else "item"
        problems.append(f"verified {kind} {r[0]} lacks the evidence verification needs")
    for r in conn.execute(
        """SELECT id FROM runs r WHERE physical_pass = 1 AND (state <> 'completed' OR NOT EXISTS (
               SELECT 1 FROM evidence e WHERE e.run_id = r.id AND e.verdict = 'pass' AND e.scope = 'physical'))"""
    ):
        problems.append(f"run {r[0]} records a physical pass without a sealed physical pass attached")
    return problems


def audit(conn: Connection) -> AuditReport:
    """Re-verify every attached stream and the rules; read-only."""
    keys = trusted_keys(conn)
    report = AuditReport()
    for row in conn.execute("SELECT * FROM evidence ORDER BY id").fetchall():
        report.streams.append(_check_stream(row, keys))
    report.rules = _check_rules(conn)
    return report


def format_audit(report: AuditReport) -> str:
    lines = []
    for f in report.streams:
        lines.append(f"{f.state.upper():<8} {f.stream_id}  run {f.run_id}  {f.path}: {f.detail}")
    lines.extend(f"RULE     {p}" for p in report.rules)
    c = report.counts()
    n = len(report.streams)
    rules = (
        "rules intact"
        if not report.rules
        else f"{len(report.rules)} rule problem{'s' if len(report.rules) != 1 else ''}"
    )
    streams = f"{n} stream{'s' if n != 1 else ''}"
    lines.append(f"audit: {streams}: {c['ok']} intact, {c['changed']} changed, {c['missing']} missing; {rules}")
    return "\n".join(lines)
