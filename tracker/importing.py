"""Moving a tracker into another, or merging two: ``alpha tracker import SOURCE``.

The source is untrusted: whoever holds it can edit any row with a plain SQL
client. So nothing the source *says* about evidence is copied:

1. The source is audited first, by :func:`tracker.audit.audit` (what ``alpha
   tracker audit`` runs): every attached stream re-verified from its path or
   store URL, the journal replayed, the schema and the rules' rows checked. Any
   finding refuses the whole import (``tracker-import``). A source at an older
   schema is refused with how to migrate it (opening it with the tool does);
   the import never writes to the source.
2. In the target, one transaction replays the source as the tool would have
   written it, so the target's own rules (its triggers) judge every row:
   milestones, items, dependencies, experiments, devices, runs as started (their
   original ``started_at``), their devices, their evidence, their measurements,
   then each terminal run's finish (state, physical pass, ``finished_at``), the
   items' evidence links and statuses, and last the source's trusted keys (so a
   source cannot make the target trust its key to get its own streams in).
   Each evidence row goes through the code ``attach`` uses
   (:func:`tracker.streams.derive`, :func:`tracker.attach.insert_evidence`):
   the stream is verified again against the *target's* trusted keys and every
   derived column (verdict, scope, gate, signer, devices, ...) read from it; a
   stream that no longer matches the source's row is refused
   (``tracker-stream-changed``).
3. Ids: run ids are kept (UUIDv7, globally unique); a run already in the
   target is refused (``tracker-exists``). A run's old number (``legacy_id``) is
   kept unless the target has a run with that number, which refuses the import
   (``--run 3`` would silently mean another run), or ``drop_legacy_ids``.
   Milestones and items are matched by id, experiments by name, devices by UUID,
   trusted keys by key id: an identical row is merged, one that differs refuses
   the import naming it (``tracker-exists``). Integer ids (experiments, devices,
   evidence, measurements) are the target's own: rows get the target's next id.
4. The whole import is one journal entry (``op`` ``import``) in the same
   transaction, naming the source (a password masked), its tracker id and
   journal head, and holding every row written, so ``audit`` on the target stays
   clean and any later edit of an imported row is named.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracker import journal
from tracker.attach import EvidenceIndex, insert_evidence, trusted_keys
from tracker.audit import AuditReport, audit, format_audit
from tracker.backends import APPLICATION_ID, Connection, backend_of, is_postgres_url
from tracker.db import migrations, schema_version, transaction
from tracker.records import ITEM_STATUSES
from tracker.refusals import (
    TrackerExists,
    TrackerImport,
    TrackerMissing,
    TrackerSchema,
    TrackerStreamChanged,
)
from tracker.sessions import insert_rows
from tracker.streams import StreamFacts, derive

__all__ = ["ImportResult", "SourceSnapshot", "import_tracker", "open_source", "read_source"]

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

#: The source's tables, read whole, in the order rows are replayed (what ``ORDER BY`` each uses).
_READ = {
    "milestones": "position, id",
    "items": "id",
    "item_deps": "item_id, depends_on",
    "experiments": "id",
    "devices": "id",
    "trusted_keys": "key_id",
    "runs": "started_at, id",
    "run_devices": "run_id, device_id",
    "evidence": "id",
    "measurements": "id",
    "item_evidence": "item_id, evidence_id",
    "session_members": "origin, position",
}


def _redact(target: str) -> str:
    if is_postgres_url(target):
        from tracker.pg import redact

        return redact(target)
    return str(Path(target).resolve())


def open_source(source: str | os.PathLike[str]) -> Connection:
    """Open the source tracker without migrating it (the import never writes to it).

    ``tracker-missing`` where there is none; ``tracker-import`` for one at an older
    schema (with how to bring it up to date); ``tracker-schema`` for one from a newer
    tool or a database that is not a tracker.
    """
    known = len(migrations())
    where = _redact(str(source))
    if is_postgres_url(source):
        from tracker import pg

        conn: Connection = pg._open(str(source))
        try:
            assert isinstance(conn, pg.PgConnection)
            version = schema_version(conn)
            if version > 0:
                pg._check_version(conn)
        except BaseException:
            conn.close()
            raise
    else:
        from tracker import db

        p = Path(source)
        if not p.is_file():
            raise TrackerMissing(f"no source tracker at {p}")
        raw = db._open(p)
        conn = raw
        try:
            try:
                version = schema_version(raw)
                app = int(raw.execute("PRAGMA application_id").fetchone()[0])
            except sqlite3.DatabaseError as exc:
                raise TrackerSchema(f"{where} is not a tracker database: {exc}") from exc
            if version > known:
                raise TrackerSchema(f"{where} is at schema version {version}; this tool knows {known}")
            if version > 0 and app != APPLICATION_ID:
                raise TrackerSchema(f"{where} is an SQLite database, but not an alpha tracker")
        except BaseException:
            conn.close()
            raise
    if version == 0:
        conn.close()
        raise TrackerMissing(f"no source tracker at {where}")
    if version < known:
        conn.close()
        db_flag = "URL" if is_postgres_url(source) else where
        raise TrackerImport(
            f"the source {where} is at schema version {version}, this tool's is {known}: the import never writes"
            f" to its source, so migrate it first by opening it with this tool, which audits it too:"
            f" alpha tracker --db {db_flag} audit"
        )
    return conn


@dataclass
class SourceSnapshot:
    """What was read from the source in one consistent read: its audit and every row."""

    where: str
    backend: str
    report: AuditReport
    rows: dict[str, list[dict[str, Any]]]

    @property
    def tracker_id(self) -> str | None:
        return self.report.journal_check.tracker_id

    @property
    def head(self) -> str:
        return self.report.journal_check.head


@contextmanager
def _read_transaction(conn: Connection) -> Iterator[None]:
    """One snapshot for the audit and the rows read after it (SQLite: a deferred read; PostgreSQL: repeatable read)."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute("BEGIN")
    else:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")


def read_source(conn: Connection, where: str) -> SourceSnapshot:
    """Audit the source (as ``alpha tracker audit`` does) and read every row, in one snapshot."""
    with _read_transaction(conn):
        report = audit(conn)
        rows = {
            table: [
                dict(zip(r.keys(), tuple(r), strict=True))
                for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            ]
            for table, order in _READ.items()
        }
    return SourceSnapshot(where, backend_of(conn), report, rows)


@dataclass
class ImportResult:
    """What the import wrote (``added``) and found already in the target (``merged``), per table."""

    source: str
    source_backend: str
    source_tracker_id: str | None
    source_journal_head: str
    source_journal_entries: int
    added: dict[str, int] = field(default_factory=dict)
    merged: dict[str, int] = field(default_factory=dict)
    legacy_ids_dropped: int = 0
    journal_seq: int = -1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        added = ", ".join(f"{n} {t}" for t, n in self.added.items() if n) or "nothing"
        merged = ", ".join(f"{n} {t}" for t, n in self.merged.items() if n)
        lines = [
            f"imported {self.source} (tracker {self.source_tracker_id},"
            f" journal head {self.source_journal_head[:16]}..., {self.source_journal_entries} entries; audited clean)",
            f"added: {added}",
        ]
        if merged:
            lines.append(f"merged (identical rows already in the target): {merged}")
        if self.legacy_ids_dropped:
            lines.append(f"old run numbers dropped: {self.legacy_ids_dropped}")
        lines.append(f"journal entry {self.journal_seq}: every stream verified again, every row judged by the rules")
        return "\n".join(lines)


def _refuse_audit(snap: SourceSnapshot) -> None:
    report = snap.report
    if report.ok:
        return
    findings = [ln for ln in format_audit(report).splitlines() if not ln.startswith(("OK ", "journal intact"))]
    shown = findings[:12] + ([f"... and {len(findings) - 12} more"] if len(findings) > 12 else [])
    raise TrackerImport(
        f"the source {snap.where} fails its audit; nothing was imported (run `alpha tracker --db SOURCE audit`):\n"
        + "\n".join(f"  {ln}" for ln in shown)
    )


def _derive(row: dict[str, Any], keys: dict[str, Any], index: EvidenceIndex | None = None) -> StreamFacts:
    """The stream of a source evidence row, verified again and every column derived, as ``attach`` does;
    with ``index``, its index row described from that verification (appended once the import is written)."""
    url = row["url"]

    def entered(path: Path, facts: StreamFacts) -> None:
        if index is not None and facts.verification is not None:
            index.entered(path, facts.verification, url or path.resolve().as_uri(), "import")

    if url:
        from observe.store import fetch

        with tempfile.TemporaryDirectory(prefix="alpha-import-") as tmp:
            fetched = fetch(url, os.path.join(tmp, "stream.aos"))
            facts = derive(fetched, keys, require_trusted=True, keep=index is not None)
            entered(fetched, facts)
    else:
        facts = derive(Path(row["path"]), keys, require_trusted=True, keep=index is not None)
        entered(Path(row["path"]), facts)
    derived = facts.columns()
    differ = facts.differing(row)
    if differ:
        said = "; ".join(f"{c} {row[c]!r} in the source, {derived[c]!r} in the stream" for c in differ)
        raise TrackerStreamChanged(f"import: stream {row['stream_id']} is not what the source recorded: {said}")
    return facts


def _by_key(w: _Writer, rows: list[dict[str, Any]], table: str, key: str, compared: tuple[str, ...]) -> dict[int, int]:
    """Rows matched by ``key`` (a name, a UUID), not by their integer ids, which are each tracker's own: an
    identical row already in the target is merged, one that differs refuses the import; the rest are inserted
    with the target's next id. Returns source id -> target id."""
    ids: dict[int, int] = {}
    for row in rows:
        there = w.one(f"SELECT * FROM {table} WHERE {key} = ?", (row[key],))
        if there is not None:
            _differs(table.removesuffix("s"), row[key], there, row, compared)
            w.merged(table)
            ids[int(row["id"])] = int(there["id"])
            continue
        new = w.insert(table, {k: row[k] for k in (key, *compared, "created_at")})
        assert new is not None
        ids[int(row["id"])] = new
        w.touch(table, new)
    return ids


def _differs(kind: str, key: Any, there: dict[str, Any], here: dict[str, Any], columns: tuple[str, ...]) -> None:
    """Refuse (``tracker-exists``) when the target's row and the source's differ in any of ``columns``."""
    for c in columns:
        if there[c] != here[c]:
            raise TrackerExists(
                f"import: {kind} {key!r} is in the target with another {c} ({there[c]!r} there,"
                f" {here[c]!r} in the source); nothing was imported"
            )


class _Writer:
    """The import's writes in the target, each recorded for the journal entry."""

    def __init__(self, conn: Connection, result: ImportResult) -> None:
        self.conn = conn
        self.result = result
        self.touched: dict[tuple[str, tuple[Any, ...]], None] = {}

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [dict(zip(r.keys(), tuple(r), strict=True)) for r in self.conn.execute(sql, args).fetchall()]

    def one(self, sql: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
        found = self.rows(sql, args)
        return found[0] if found else None

    def insert(self, table: str, values: dict[str, Any]) -> int | None:
        names = ", ".join(values)
        cur = self.conn.execute(
            f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(values))})", tuple(values.values())
        )
        self.result.added[table] = self.result.added.get(table, 0) + 1
        return cur.lastrowid if table in ("experiments", "devices", "measurements") else None

    def touch(self, table: str, *key: Any) -> None:
        self.touched[(table, key)] = None

    def merged(self, table: str) -> None:
        self.result.merged[table] = self.result.merged.get(table, 0) + 1

    def changes(self) -> list[dict[str, Any]]:
        return [journal.change(self.conn, table, *key) for table, key in self.touched]


def _sessions(rows: list[dict[str, Any]], keys: dict[str, Any]) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Each source session (by origin), its folder verified again as ``attach`` does: its run and member rows;
    ``tracker-import`` when a folder no longer says what the source recorded."""
    from aos.refusals import Refusal
    from tracker.sessions import session_rows, verify_trusted

    out: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for origin in dict.fromkeys(str(r["origin"]) for r in rows):
        recorded = [r for r in rows if r["origin"] == origin]
        directory = Path(str(recorded[0]["path"]))
        try:
            fresh = session_rows(verify_trusted(directory, keys), directory)
        except Refusal as exc:
            raise TrackerImport(f"session {origin} ({directory}) no longer verifies: {exc}") from None
        same = ("origin", "member", "kind", "status", "digest", "root")
        if [[r[c] for c in same] for r in fresh] != [[r[c] for c in same] for r in recorded]:
            raise TrackerImport(f"session {origin} ({directory}) no longer holds the members the source recorded")
        out[origin] = (str(recorded[0]["run_id"]), fresh)
    return out


def _write(
    w: _Writer,
    snap: SourceSnapshot,
    facts: dict[int, StreamFacts],
    *,
    drop_legacy_ids: bool,
    sessions: dict[str, tuple[str, list[dict[str, Any]]]] | None = None,
) -> None:
    conn, src = w.conn, snap.rows
    # Milestones (by id; the title must agree; the target's position is kept).
    for m in src["milestones"]:
        there = w.one("SELECT * FROM milestones WHERE id = ?", (m["id"],))
        if there is not None:
            _differs("milestone", m["id"], there, m, ("title",))
            w.merged("milestones")
            continue
        w.insert("milestones", {k: m[k] for k in ("id", "title", "position", "created_at")})
        w.touch("milestones", m["id"])
    # Items (by id; title, milestone and the hardware flag must agree). Verified only later, with its evidence.
    status_of: dict[str, str] = {}
    for i in src["items"]:
        there = w.one("SELECT * FROM items WHERE id = ?", (i["id"],))
        if there is not None:
            _differs("work item", i["id"], there, i, ("title", "milestone_id", "hardware"))
            w.merged("items")
            status_of[i["id"]] = str(there["status"])
            continue
        status = "planned" if i["status"] == "verified" else i["status"]
        w.insert(
            "items",
            {
                "id": i["id"],
                "title": i["title"],
                "milestone_id": i["milestone_id"],
                "hardware": i["hardware"],
                "status": status,
                "created_at": i["created_at"],
            },
        )
        w.touch("items", i["id"])
        status_of[i["id"]] = status
    for d in src["item_deps"]:
        if w.one("SELECT 1 AS x FROM item_deps WHERE item_id = ? AND depends_on = ?", (d["item_id"], d["depends_on"])):
            w.merged("item_deps")
            continue
        w.insert("item_deps", {"item_id": d["item_id"], "depends_on": d["depends_on"]})
        w.touch("item_deps", d["item_id"], d["depends_on"])
    # Experiments (by name) and devices (by UUID): integer ids are the target's own.
    experiment = _by_key(w, src["experiments"], "experiments", "name", ("item_id", "description"))
    device = _by_key(w, src["devices"], "devices", "uuid", ("product", "driver"))
    # Runs, as started: their original start; running, no physical pass (the rules allow nothing else yet).
    for r in src["runs"]:
        there = w.one("SELECT id FROM runs WHERE id = ?", (r["id"],))
        if there is not None:
            raise TrackerExists(f"import: run {r['id']} is in the target already (a run is imported once)")
        legacy = r["legacy_id"]
        if legacy is not None:
            other = w.one("SELECT id FROM runs WHERE legacy_id = ?", (legacy,))
            if drop_legacy_ids:
                legacy = None
                w.result.legacy_ids_dropped += 1
            elif other is not None:
                raise TrackerImport(
                    f"run {r['id']} was number {legacy} in the source, and the target's run {other['id']} is number"
                    f" {legacy}: keeping it would make `--run {legacy}` name another run; import with"
                    " --drop-legacy-ids to import the runs without their old numbers (their ids still name them)"
                )
        w.insert(
            "runs",
            {
                "id": r["id"],
                "legacy_id": legacy,
                "experiment_id": experiment[int(r["experiment_id"])] if r["experiment_id"] is not None else None,
                "lane": r["lane"],
                "note": r["note"],
                "started_at": r["started_at"],
                "ci_provider": r["ci_provider"],
                "ci_job_url": r["ci_job_url"],
                "ci_commit": r["ci_commit"],
            },
        )
        w.touch("runs", r["id"])
    for rd in src["run_devices"]:
        target_device = device[int(rd["device_id"])]
        w.insert("run_devices", {"run_id": rd["run_id"], "device_id": target_device, "role": rd["role"]})
        w.touch("run_devices", rd["run_id"], target_device)
    # Evidence: through attach's own insert, every column from the stream verified again.
    evidence: dict[int, int] = {}
    for e in src["evidence"]:
        row, changes = insert_evidence(conn, facts[int(e["id"])], str(e["run_id"]), str(e["path"]), e["url"])
        if not row.new:  # pragma: no cover - the run is new to the target, so its streams are too
            raise TrackerExists(f"import: stream {row.stream_id} is in the target already")
        w.result.added["evidence"] = w.result.added.get("evidence", 0) + 1
        for c in changes:
            w.touch(str(c["table"]), *c["key"])
        evidence[int(e["id"])] = row.evidence_id
    # Sessions: through attach's own insert, every member verified again from its folder.
    for run, rows in (sessions or {}).values():
        for c in insert_rows(conn, run, rows):
            w.touch(str(c["table"]), *c["key"])
            w.result.added["session_members"] = w.result.added.get("session_members", 0) + 1
    for m in src["measurements"]:
        new = w.insert("measurements", {k: m[k] for k in ("run_id", "name", "value", "unit", "recorded_at")})
        w.touch("measurements", new)
    # Each terminal run's finish, in one update as `run finish` makes it: the physical pass is judged now.
    for r in src["runs"]:
        if r["state"] == "running":
            continue
        conn.execute(
            "UPDATE runs SET state = ?, physical_pass = ?, finished_at = ? WHERE id = ?",
            (r["state"], r["physical_pass"], r["finished_at"], r["id"]),
        )
    # Evidence links, then statuses (the furthest of the two trackers'), judged with the links in place.
    for link in src["item_evidence"]:
        ev = evidence[int(link["evidence_id"])]
        w.insert("item_evidence", {"item_id": link["item_id"], "evidence_id": ev})
        w.touch("item_evidence", link["item_id"], ev)
    rank = {s: n for n, s in enumerate(ITEM_STATUSES)}
    for i in src["items"]:
        now = status_of[i["id"]]
        want = max(now, str(i["status"]), key=rank.__getitem__)
        if want != now:
            conn.execute(f"UPDATE items SET status = ?, updated_at = {_NOW} WHERE id = ?", (want, i["id"]))
            w.touch("items", i["id"])
    # Trusted keys last: the target's own keys judged the imported streams.
    for k in src["trusted_keys"]:
        there = w.one("SELECT * FROM trusted_keys WHERE key_id = ?", (k["key_id"],))
        if there is not None:
            _differs("trusted key", k["key_id"], there, k, ("pem",))
            w.merged("trusted_keys")
            continue
        w.insert("trusted_keys", {k2: k[k2] for k2 in ("key_id", "pem", "added_at")})
        w.touch("trusted_keys", k["key_id"])


def _tracker_id(conn: Connection) -> str | None:
    row = conn.execute("SELECT entry FROM journal ORDER BY seq LIMIT 1").fetchone()
    if row is None:
        return None
    import json

    try:
        first = json.loads(str(row[0]))
    except ValueError:
        return None
    tid = first.get("args", {}).get("tracker_id") if isinstance(first, dict) else None
    return tid if isinstance(tid, str) else None


def import_tracker(
    target: Connection,
    source: str | os.PathLike[str],
    *,
    drop_legacy_ids: bool = False,
    index: EvidenceIndex | None = None,
) -> ImportResult:
    """Import the tracker at ``source`` into ``target`` (an open tracker): all or nothing; see the module docstring.

    With ``index``, the row of every stream verified here is appended to that evidence index once the
    import is written (none when it is refused)."""
    where = _redact(str(source))
    src = open_source(source)
    try:
        snap = read_source(src, where)
    finally:
        src.close()
    _refuse_audit(snap)
    if snap.tracker_id is not None and snap.tracker_id == _tracker_id(target):
        raise TrackerImport(f"the source {where} is the target itself (tracker {snap.tracker_id})")
    # Every stream verified and derived again, against the target's trusted keys, before the write lock is taken.
    keys = trusted_keys(target)
    facts = {int(e["id"]): _derive(e, keys, index) for e in snap.rows["evidence"]}
    sessions = _sessions(snap.rows["session_members"], keys)
    result = ImportResult(
        where,
        snap.backend,
        snap.tracker_id,
        snap.head,
        snap.report.journal_check.entries,
        added=dict.fromkeys(_READ, 0),
        merged=dict.fromkeys(_READ, 0),
    )
    with transaction(target, "import"):
        w = _Writer(target, result)
        _write(w, snap, facts, drop_legacy_ids=drop_legacy_ids, sessions=sessions)
        entry = journal.append(
            target,
            "import",
            {
                "source": where,
                "source_backend": snap.backend,
                "source_tracker_id": snap.tracker_id,
                "source_journal_head": snap.head,
                "source_journal_entries": snap.report.journal_check.entries,
                "drop_legacy_ids": drop_legacy_ids,
                "added": {t: n for t, n in result.added.items() if n},
                "merged": {t: n for t, n in result.merged.items() if n},
            },
            w.changes(),
        )
        result.journal_seq = entry.seq
    if index is not None:
        index.flush()
    return result
