"""Re-verifying the tracker: every attached stream, every row, and the rules themselves.

Streams: for each evidence row the stream is verified again and every derived
column derived again from it (:func:`tracker.streams.derive`, the code path
``attach`` used): stream id, seal head, file BLAKE3, size, event count, gate,
verdict, scope, signed, key id, recording time, observed devices. A file that is
gone is ``missing``; one that no longer verifies, or whose columns differ from
the row, is ``changed``, and each differing column is named.
A stream attached from a store URL is fetched from the store again (its bytes
must still hash to its name, ``observe.store.fetch``) and that copy checked the
same way; gone from the store, or the store unreachable, is ``missing``.

Journal: the chain and signatures are verified and replayed into the rows the
tables should hold (:func:`tracker.journal.check`); any row edited, added or
removed outside the tool is named, even when the rules were bypassed to do it.

Sessions: each fleet session attached to a run (``session_members``) has its
folder verified again (:mod:`tracker.sessions`, as ``attach`` did); gone is
``missing``, no longer verifying or saying other members' statuses or digests
than recorded is ``changed``, each member named.

Rules: the schema must be exactly the one the migrations ship (every table,
index and trigger with its shipped SQL, none added), its cookie the one the
tool left (SQLite counts every schema change: a trigger dropped and re-created
word for word still moves it), the record of applied migrations intact, and no
row present that the rules would have refused.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.refusals import Refusal, StreamMissing
from tracker.attach import trusted_keys
from tracker.backends import Connection, db_errors, db_message, is_sqlite, migration_record_problems
from tracker.db import expected_schema, migrations, schema_cookie
from tracker.journal import JournalCheck, pages, rows_of
from tracker.journal import check as check_journal
from tracker.streams import derive, file_blake3

if TYPE_CHECKING:
    from aos.signing import Verifier

__all__ = [
    "AuditReport",
    "StreamFinding",
    "audit",
    "expected_triggers",
    "finding_line",
    "format_audit",
    "format_audit_tail",
]


@dataclass(frozen=True)
class StreamFinding:
    """What the audit found for one attached stream: ``ok``, ``missing`` or ``changed``.

    ``columns``: the derived columns whose recorded value differs from the stream's.
    """

    stream_id: str
    run_id: str
    path: str
    state: str
    detail: str
    columns: list[str] = field(default_factory=list)


@dataclass
class AuditReport:
    """Every stream's finding, any broken rule, and what the journal check found."""

    streams: list[StreamFinding] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    journal: list[str] = field(default_factory=list)
    journal_check: JournalCheck = field(default_factory=JournalCheck)
    #: How many streams were found in each state (those ``streams`` holds and those it did not keep).
    tally: dict[str, int] = field(default_factory=lambda: {"ok": 0, "changed": 0, "missing": 0})

    @property
    def ok(self) -> bool:
        return not self.rules and not self.journal and self.tally["ok"] == sum(self.tally.values())

    def counts(self) -> dict[str, int]:
        return dict(self.tally)

    def as_dict(self) -> dict[str, Any]:
        jc = self.journal_check
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "streams": [asdict(f) for f in self.streams],
            "rules": list(self.rules),
            "journal": {
                "entries": jc.entries,
                "since": jc.since,
                "head": jc.head,
                "signed": jc.signed,
                "unchecked_signatures": jc.unchecked,
                "journal_key": jc.journal_key,
                "tracker_id": jc.tracker_id,
                "problems": list(self.journal),
            },
        }


def expected_triggers() -> dict[str, str]:
    """Trigger name -> its ``CREATE TRIGGER`` text, as the migrations leave them."""
    return {name: sql for (kind, name), sql in expected_schema().items() if kind == "trigger"}


def _check_stream(row: Any, keys: dict[str, Verifier]) -> StreamFinding:
    path = Path(row["path"])

    def finding(state: str, detail: str, columns: list[str] | None = None) -> StreamFinding:
        return StreamFinding(row["stream_id"], row["run_id"], row["path"], state, detail, columns or [])

    if not path.is_file():
        return finding("missing", "the file is gone")
    try:
        facts = derive(path, keys, require_trusted=False)
    except Refusal as exc:
        try:
            now = file_blake3(path)
        except OSError:  # pragma: no cover - vanished between the checks
            return finding("missing", "the file is gone")
        changed = "bytes unchanged" if now == row["file_digest"] else f"file blake3 now {now}"
        return finding("changed", f"no longer verifies ({exc.diagnostics()}); {changed}")
    derived = facts.columns()
    differ = facts.differing(row)
    if differ:
        said = "; ".join(f"{c} {row[c]!r} in the tracker, {derived[c]!r} in the stream" for c in differ)
        return finding("changed", f"the tracker's row differs from the stream: {said}", differ)
    signature = ", signature good" if facts.signature_checked else ""
    return finding("ok", f"intact and sealed, {facts.events} events, every column as the stream says{signature}")


def _check_schema(conn: Connection, jc: JournalCheck) -> list[str]:
    if not is_sqlite(conn):
        from tracker import pg

        assert isinstance(conn, pg.PgConnection)
        return pg.schema_problems(conn, jc.pg_schema)
    assert isinstance(conn, sqlite3.Connection)
    problems: list[str] = []
    present = {
        (str(r[0]), str(r[1])): (r[2] or "").strip()
        for r in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    }
    expected = expected_schema()
    for (kind, name), sql in sorted(expected.items()):
        if (kind, name) not in present:
            rule = ": its rule is no longer enforced" if kind == "trigger" else ""
            problems.append(f"{kind} {name} is missing{rule}")
        elif present[(kind, name)] != sql.strip():
            problems.append(f"{kind} {name} was altered")
    for kind, name in sorted(present.keys() - expected.keys()):
        problems.append(f"{kind} {name} is not one of the tracker's")
    if jc.schema_version is not None and schema_cookie(conn) != jc.schema_version:
        problems.append(
            f"the schema was changed outside the tool (its cookie is {schema_cookie(conn)}, the tool left"
            f" {jc.schema_version}): a table, index or trigger dropped, re-created or added, or a VACUUM"
            " outside `alpha tracker vacuum`"
        )
    return problems + migration_record_problems(conn, migrations())


def _check_from_store(row: Any, keys: dict[str, Any]) -> StreamFinding:
    """A stream attached from a store URL: fetch it again into a temporary folder and check that copy."""
    from observe.refusals import StoreUnreachable
    from observe.store import fetch

    url = row["url"]
    with tempfile.TemporaryDirectory(prefix="alpha-audit-") as tmp:
        copy = f"{tmp}/stream.aos"
        try:
            fetch(url, copy)
        except (StreamMissing, StoreUnreachable) as exc:
            return StreamFinding(
                row["stream_id"], row["run_id"], url, "missing", f"not in the store: {exc.diagnostics()}"
            )
        except Refusal as exc:
            return StreamFinding(
                row["stream_id"], row["run_id"], url, "changed", f"the stored copy is refused: {exc.diagnostics()}"
            )
        fields = {k: row[k] for k in row.keys()}  # noqa: SIM118 - a row iterates its values, not its keys
        return replace(_check_stream({**fields, "path": copy}, keys), path=url)


def _check_rules(conn: Connection) -> list[str]:
    """Rows the rules would have refused (in case a client dropped a trigger to write them)."""
    problems: list[str] = []
    for r in conn.execute(
        """SELECT i.id, i.hardware FROM items i WHERE i.status = 'verified' AND NOT EXISTS (
               SELECT 1 FROM item_evidence l JOIN evidence e ON e.id = l.evidence_id JOIN runs r ON r.id = e.run_id
               WHERE l.item_id = i.id AND e.verdict = 'pass' AND r.state = 'completed'
                 AND (i.hardware = 0 OR e.scope = 'physical')
                 AND NOT EXISTS (SELECT 1 FROM evidence o WHERE o.run_id = r.id AND o.verdict IS NOT 'pass'))"""
    ):
        kind = "hardware item" if r[1] else "item"
        problems.append(f"verified {kind} {r[0]} lacks the evidence verification needs")
    for r in conn.execute(
        """SELECT id FROM runs r WHERE physical_pass = 1 AND (state <> 'completed'
               OR NOT EXISTS (SELECT 1 FROM evidence e
                              WHERE e.run_id = r.id AND e.verdict = 'pass' AND e.scope = 'physical')
               OR EXISTS (SELECT 1 FROM evidence e WHERE e.run_id = r.id AND e.verdict IS NOT 'pass'))"""
    ):
        problems.append(
            f"run {r[0]} records a physical pass without a sealed physical pass attached, every stream passing"
        )
    for r in conn.execute(
        "SELECT e.stream_id, e.gate, r.lane FROM evidence e JOIN runs r ON r.id = e.run_id WHERE e.gate IS NOT r.lane"
    ):
        problems.append(f"stream {r[0]} (gate {r[1]}) is evidence for a run of lane {r[2]}")
    for r in conn.execute(
        "SELECT e.stream_id FROM evidence e JOIN runs r ON r.id = e.run_id WHERE e.recorded_at < r.started_at"
    ):
        problems.append(f"stream {r[0]} was recorded before its run started")
    for r in conn.execute(
        """SELECT e.stream_id, d.uuid FROM evidence e JOIN run_devices rd ON rd.run_id = e.run_id
           JOIN devices d ON d.id = rd.device_id
           WHERE e.devices IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM json_each(CASE WHEN json_valid(e.devices) THEN e.devices ELSE '[]' END) j
               WHERE j.value = d.uuid)"""
    ):
        problems.append(f"stream {r[0]} was not observed on its run's device {r[1]}")
    for r in conn.execute(
        """SELECT e.stream_id, e.source_commit, r.ci_commit FROM evidence e JOIN runs r ON r.id = e.run_id
           WHERE r.ci_commit IS NOT NULL AND e.source_commit IS NOT NULL
             AND lower(e.source_commit) <> lower(r.ci_commit)"""
    ):
        problems.append(f"stream {r[0]} was recorded at commit {r[1]}, not its run's commit {r[2]}")
    for r in conn.execute(
        """SELECT DISTINCT r.id FROM runs r JOIN session_members s ON s.run_id = r.id
           WHERE r.physical_pass = 1 AND s.status <> 'proven'"""
    ):
        problems.append(f"run {r[0]} records a physical pass while a member of its sessions is not proven")
    return problems


def audit(
    conn: Connection,
    *,
    journal_key: Verifier | None = None,
    since: int | None = None,
    on_stream: Callable[[StreamFinding], None] | None = None,
) -> AuditReport:
    """Re-verify every attached stream, the journal and the rules; read-only.

    ``journal_key``: the tracker's public key; every journal entry must be signed by it.
    ``since``: a journal entry's seq: only the entries from it on are checked and only the rows and streams
    they wrote (``tracker.journal.check``); the rules and the schema are checked whole either way.
    ``on_stream``: each stream's finding, as it is found; the report then keeps only those not ``ok`` (it
    counts the rest), so memory follows a page of rows, not the streams' count.
    """
    report = AuditReport()
    errors = db_errors(conn)
    # A client may have dropped a table itself: what cannot be read is a finding, never a traceback.
    try:
        keys = trusted_keys(conn)
    except errors as exc:
        keys = {}
        report.rules.append(f"the trusted keys cannot be read: {db_message(exc)}")
    try:
        report.journal_check = check_journal(conn, journal_key=journal_key, trusted=keys, since=since)
        report.journal = list(report.journal_check.problems)
        journal_read = True
    except errors as exc:
        report.journal = [f"the journal cannot be replayed: {db_message(exc)}"]
        journal_read = False
    try:
        for row in _evidence_rows(conn, since, report.journal_check if journal_read else None):
            found = _check_from_store(row, keys) if row["url"] else _check_stream(row, keys)
            report.tally[found.state] += 1
            if on_stream is not None:
                on_stream(found)
            if on_stream is None or found.state != "ok":
                report.streams.append(found)
    except errors as exc:
        report.rules.append(f"the evidence cannot be read: {db_message(exc)}")
    try:
        for found in _check_sessions(conn, keys, since, report.journal_check if journal_read else None):
            report.tally[found.state] += 1
            if on_stream is not None:
                on_stream(found)
            if on_stream is None or found.state != "ok":
                report.streams.append(found)
    except errors as exc:
        report.rules.append(f"the sessions cannot be read: {db_message(exc)}")
    checks: list[Callable[[], list[str]]] = [
        lambda: _check_schema(conn, report.journal_check),
        lambda: _check_rules(conn),
    ]
    for check in checks:
        try:
            report.rules += check()
        except errors as exc:
            report.rules.append(f"the rules cannot be checked: {db_message(exc)}")
    return report


def _check_sessions(
    conn: Connection, keys: dict[str, Verifier], since: int | None, jc: JournalCheck | None
) -> Iterator[StreamFinding]:
    """Each attached session's folder verified again (tracker.sessions, as attach did), one session's rows at a
    time: ``missing`` when the folder is gone, ``changed`` when it no longer verifies or says other members'
    statuses or digests than recorded (each member named); its finding's stream id is ``session:ORIGIN``. With
    ``since``, only the sessions the entries from there wrote."""
    from tracker.sessions import session_rows, verify_trusted

    origins = [str(r[0]) for r in conn.execute("SELECT DISTINCT origin FROM session_members ORDER BY origin")]
    if since is not None and jc is not None:
        wrote = {str(k[0]) for k in jc.changed.get("session_members", ())}
        origins = [o for o in origins if o in wrote]
    same = ("member", "kind", "status", "digest", "root")
    for origin in origins:
        recorded = rows_of(conn.execute("SELECT * FROM session_members WHERE origin = ? ORDER BY position", (origin,)))
        path, run = str(recorded[0]["path"]), str(recorded[0]["run_id"])

        def finding(state: str, detail: str, members: list[str] | None = None) -> StreamFinding:
            return StreamFinding(f"session:{origin}", run, path, state, detail, members or [])  # noqa: B023

        directory = Path(path)
        if not directory.is_dir():
            yield finding("missing", "the session's folder is gone")
            continue
        try:
            fresh = session_rows(verify_trusted(directory, keys), directory)
        except Refusal as exc:
            yield finding("changed", f"the session no longer verifies ({exc.diagnostics()})")
            continue
        was = {r["member"]: [r[c] for c in same] for r in recorded}
        now = {r["member"]: [r[c] for c in same] for r in fresh}
        differ = sorted(m for m in was.keys() | now.keys() if was.get(m) != now.get(m))
        if differ:
            yield finding("changed", "members no longer as recorded: " + ", ".join(differ[:20]), differ)
            continue
        yield finding("ok", f"verified again: {len(fresh)} members as recorded")


def _evidence_rows(conn: Connection, since: int | None, jc: JournalCheck | None) -> Iterator[dict[str, Any]]:
    """The evidence rows to re-verify, a page at a time: every one, or (``since``) those the entries from
    there wrote (every one when the journal could not be read, so nothing goes unchecked)."""
    if since is None or jc is None:
        yield from pages(conn, "evidence", ("id",))
        return
    for key in sorted(jc.changed.get("evidence", ()), key=repr):
        yield from rows_of(conn.execute("SELECT * FROM evidence WHERE id = ?", key))


def _journal_line(report: AuditReport) -> str:
    jc = report.journal_check
    head = f"head {jc.head[:16]}..."
    checked = f"{jc.entries} entries" + (f" from entry {jc.since}" if jc.since is not None else "")
    if report.journal:
        n = len(report.journal)
        return f"journal: {n} problem{'s' if n != 1 else ''} in {checked}; {head}"
    if jc.journal_key is not None:
        signing = f"every one signed by {jc.journal_key}"
    elif jc.signed:
        signing = f"{jc.signed} signed" + (f" ({jc.unchecked} by a key not given, unchecked)" if jc.unchecked else "")
    else:
        signing = "unsigned"
    return f"journal intact: {checked}, {signing}; {head}"


def finding_line(f: StreamFinding) -> str:
    """One stream's line of ``format_audit``."""
    return f"{f.state.upper():<8} {f.stream_id}  run {f.run_id}  {f.path}: {f.detail}"


def format_audit(report: AuditReport) -> str:
    return "\n".join([*(finding_line(f) for f in report.streams), format_audit_tail(report)])


def format_audit_tail(report: AuditReport) -> str:
    """``format_audit`` after the streams' lines: the rules, the journal, the counts."""
    lines = [f"RULE     {p}" for p in report.rules]
    lines.extend(f"JOURNAL  {p}" for p in report.journal)
    lines.append(_journal_line(report))
    c = report.counts()
    n = sum(c.values())
    rules = (
        "rules intact"
        if not report.rules
        else f"{len(report.rules)} rule problem{'s' if len(report.rules) != 1 else ''}"
    )
    j = len(report.journal)
    journal_state = "journal intact" if not j else f"{j} journal problem{'s' if j != 1 else ''}"
    streams = f"{n} stream{'s' if n != 1 else ''}"
    lines.append(
        f"audit: {streams}: {c['ok']} intact, {c['changed']} changed, {c['missing']} missing; {rules}; {journal_state}"
    )
    return "\n".join(lines)
