"""The journal: every change made through the tool, append-only and hash-chained.

Each change the tool makes (a record function, ``attach``, a migration) appends
one entry in the same transaction as the change itself, so the two commit
together or not at all. An entry is the canonical JSON (``aos.canonical``) of::

    {"seq": N, "at": ISO-8601 UTC, "op": "run.start", "args": {...},
     "changes": [{"table": T, "key": [KEY...], "row": {COLUMN: VALUE...} | null}, ...],
     "snapshot": true}                       # only on a migration's entry: every row of every table

``changes`` holds every row the change wrote, as the table holds it afterwards
(null: deleted). The entry's ``hash`` is BLAKE3 of a domain tag, the previous
entry's hash (64 zeros before the first) and the entry's text, so each entry
commits to all before it; with a signing key (the tracker's own Ed25519 key),
``signature`` is over the tag and that hash. The database keeps the table
append-only (migration 3).

:func:`check` verifies the chain and the signatures, replays the entries into
the rows the tables should hold, and names every difference: a row edited,
added or removed outside the tool, even when the rules were bypassed to do it.
A snapshot (a migration's entry) is compared with the replay before it, then
replaces it. What a journal cannot show: an attacker who rewrites the journal
itself and recomputes every hash. Signed entries stop that (audit with the
public key); without a key, compare the head with one recorded elsewhere.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blake3 import blake3

from aos.canonical import canonical_json
from tracker.backends import Connection

if TYPE_CHECKING:
    from aos.signing import Signer, Verifier

__all__ = [
    "GENESIS",
    "SINCE",
    "TABLES",
    "Entry",
    "JournalCheck",
    "append",
    "change",
    "check",
    "entries",
    "entry_hash",
    "iter_entries",
    "pages",
    "rows_of",
    "signature_message",
    "snapshot",
]

GENESIS = "0" * 64
_TAG = b"alpha-tracker-journal-v1\x00"
_SIGNATURE_TAG = b"alpha-tracker-journal-signature-v1\x00"

#: Every table the journal covers, with its key columns (the order rows are compared in).
TABLES: dict[str, tuple[str, ...]] = {
    "milestones": ("id",),
    "items": ("id",),
    "item_deps": ("item_id", "depends_on"),
    "experiments": ("id",),
    "devices": ("id",),
    "runs": ("id",),
    "run_devices": ("run_id", "device_id"),
    "evidence": ("id",),
    "item_evidence": ("item_id", "evidence_id"),
    "measurements": ("id",),
    "trusted_keys": ("key_id",),
    "session_members": ("origin", "member"),
}

#: The migration that created each table not there from the journal's first (older migrations' snapshots skip it).
SINCE: dict[str, int] = {"session_members": 7}

Row = dict[str, Any]
Key = tuple[Any, ...]


def entry_hash(prev: str, entry: str) -> str:
    """The hash an entry with text ``entry`` following the hash ``prev`` must have."""
    return blake3(_TAG + bytes.fromhex(prev) + entry.encode("utf-8")).hexdigest()


def signature_message(entry_hash_hex: str) -> bytes:
    """What the tracker's key signs for an entry: a domain tag and the entry's hash."""
    return _SIGNATURE_TAG + bytes.fromhex(entry_hash_hex)


@dataclass(frozen=True)
class Entry:
    """One journal row, its text parsed."""

    seq: int
    prev: str
    hash: str
    text: str
    key_id: str | None
    signature: str | None
    body: dict[str, Any]

    @property
    def op(self) -> str:
        return str(self.body.get("op", ""))

    @property
    def args(self) -> dict[str, Any]:
        args = self.body.get("args")
        return args if isinstance(args, dict) else {}

    @property
    def changes(self) -> list[dict[str, Any]]:
        changes = self.body.get("changes")
        return [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []


def rows_of(cur: Any) -> list[Row]:
    """A cursor's rows as dicts by column name."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _where(table: str) -> str:
    return " AND ".join(f"{k} = ?" for k in TABLES[table])


def change(conn: Connection, table: str, *key: Any) -> dict[str, Any]:
    """The change record of the row of ``table`` with ``key``, as it is now (``row`` null: gone)."""
    found = rows_of(conn.execute(f"SELECT * FROM {table} WHERE {_where(table)}", key))
    return {"table": table, "key": list(key), "row": found[0] if found else None}


def snapshot(conn: Connection, version: int | None = None) -> list[dict[str, Any]]:
    """Every row of every journalled table (at schema ``version``: the tables it has), as change records."""
    out: list[dict[str, Any]] = []
    for table, keys in TABLES.items():
        if version is not None and SINCE.get(table, 0) > version:
            continue
        for row in rows_of(conn.execute(f"SELECT * FROM {table} ORDER BY {', '.join(keys)}")):
            out.append({"table": table, "key": [row[k] for k in keys], "row": row})
    return out


def _now() -> str:
    ns = time.time_ns()
    seconds, us = divmod(ns // 1000, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{us:06d}Z"


def append(
    conn: Connection,
    op: str,
    args: Mapping[str, Any],
    changes: Iterable[dict[str, Any]],
    *,
    snapshot_of_all: bool = False,
) -> Entry:
    """Append an entry for a change just made; call it inside the change's transaction.

    Signed when the connection carries a signer (``conn.signer``, set by :func:`tracker.db.connect`).
    """
    last = conn.execute("SELECT seq, hash FROM journal ORDER BY seq DESC LIMIT 1").fetchone()
    seq, prev = (0, GENESIS) if last is None else (int(last[0]) + 1, str(last[1]))
    body: dict[str, Any] = {"seq": seq, "at": _now(), "op": op, "args": dict(args), "changes": list(changes)}
    if snapshot_of_all:
        body["snapshot"] = True
    text = canonical_json(body)
    h = entry_hash(prev, text)
    signer: Signer | None = getattr(conn, "signer", None)
    key_id, signature = (signer.key_id, signer.sign(signature_message(h))) if signer is not None else (None, None)
    conn.execute(
        "INSERT INTO journal (seq, prev, hash, entry, key_id, signature) VALUES (?, ?, ?, ?, ?, ?)",
        (seq, prev, h, text, key_id, signature),
    )
    return Entry(seq, prev, h, text, key_id, signature, body)


def new_tracker_id() -> str:
    """A tracker's own id (recorded in its first journal entry): 32 random hex digits."""
    return secrets.token_hex(16)


def _parse(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def entries(conn: Connection) -> list[Entry]:
    """Every journal entry, in order."""
    return [
        Entry(int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], r[5], _parse(str(r[3])))
        for r in conn.execute("SELECT seq, prev, hash, entry, key_id, signature FROM journal ORDER BY seq")
    ]


@dataclass
class JournalCheck:
    """What :func:`check` found: problems (each names what differs), and facts for the summary."""

    entries: int = 0
    head: str = GENESIS
    signed: int = 0
    unchecked: int = 0
    journal_key: str | None = None
    tracker_id: str | None = None
    schema_version: int | None = None
    #: PostgreSQL: the schema fingerprint the last migration journalled (tracker.pg.schema_fingerprint).
    pg_schema: str | None = None
    problems: list[str] = field(default_factory=list)
    #: The first signed entry: its seq and key id (every later entry must be signed by that key).
    first_signed: tuple[int, str] | None = None
    #: The seq the check began at (None: the whole journal), and the keys of the rows the entries from there wrote.
    since: int | None = None
    changed: dict[str, set[Key]] = field(default_factory=dict)


def _key(value: Any) -> Key:
    return tuple(value) if isinstance(value, list) else (value,)


def _show(table: str, key: Key) -> str:
    return f"{table} {key[0]!r}" if len(key) == 1 else f"{table} {key!r}"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):  # pragma: no cover - the tables hold no booleans
        return a is b
    return bool(a == b) and (a is None) == (b is None)


def _apply(state: dict[str, dict[Key, Row]], changes: Sequence[dict[str, Any]], seq: int, problems: list[str]) -> None:
    for c in changes:
        table, row = c.get("table"), c.get("row")
        if table not in TABLES:
            problems.append(f"journal entry {seq} changes {table!r}, which is not a tracker table")
            continue
        key = _key(c.get("key"))
        if row is None:
            state.setdefault(str(table), {}).pop(key, None)
        elif isinstance(row, dict):
            state.setdefault(str(table), {})[key] = row


#: Rows read per query when the journal and the tables are walked: memory follows a page, not the history.
PAGE = 2000


def pages(conn: Connection, table: str, keys: Sequence[str], columns: str = "*") -> Iterable[Any]:
    """Every row of ``table`` in key order, ``PAGE`` at a time (keyset paging: the same SQL on both backends)."""
    order = ", ".join(keys)
    after: tuple[Any, ...] | None = None
    while True:
        if after is None:
            cur = conn.execute(f"SELECT {columns} FROM {table} ORDER BY {order} LIMIT {PAGE}")
        else:
            bound = f"({order}) > ({', '.join('?' * len(keys))})" if len(keys) > 1 else f"{keys[0]} > ?"
            cur = conn.execute(f"SELECT {columns} FROM {table} WHERE {bound} ORDER BY {order} LIMIT {PAGE}", after)
        page = rows_of(cur)
        yield from page
        if len(page) < PAGE:
            return
        after = tuple(page[-1][k] for k in keys)


def iter_entries(conn: Connection, since: int = 0) -> Iterable[Entry]:
    """The journal entries from seq ``since`` on, in order, ``PAGE`` at a time."""
    after = int(since) - 1
    while True:
        cur = conn.execute(
            f"SELECT seq, prev, hash, entry, key_id, signature FROM journal WHERE seq > ? ORDER BY seq LIMIT {PAGE}",
            (after,),
        )
        page = [Entry(int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], r[5], _parse(str(r[3]))) for r in cur]
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1].seq


def _digest(row: Mapping[str, Any]) -> bytes:
    """A row's fingerprint: two rows with the same one hold the same values (a differing one is compared
    column by column, ``_same``, so a value the two sides spell differently is never a false finding)."""
    return blake3(json.dumps(row, sort_keys=True, default=repr).encode("utf-8", "surrogatepass")).digest(length=16)


class _Replay:
    """The rows the journal says each table holds, kept as a fingerprint and the seq of the entry that wrote
    each (24 bytes a row, not the row): the row itself is read again from that entry when it must be shown."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.state: dict[str, dict[Key, bytes]] = {t: {} for t in TABLES}
        self._cache: dict[int, dict[str, Any]] = {}

    def apply(self, changes: Sequence[dict[str, Any]], seq: int, problems: list[str]) -> None:
        for c in changes:
            table, row = c.get("table"), c.get("row")
            if table not in TABLES:
                problems.append(f"journal entry {seq} changes {table!r}, which is not a tracker table")
                continue
            key = _key(c.get("key"))
            if row is None:
                self.state[str(table)].pop(key, None)
            elif isinstance(row, dict):
                self.state[str(table)][key] = _digest(row) + seq.to_bytes(8, "big")

    def row(self, table: str, key: Key, packed: bytes) -> Row:
        """The row the journal last wrote for ``key``, read again from the entry ``packed`` (its state) names."""
        seq = int.from_bytes(packed[16:], "big")
        body = self._cache.get(seq)
        if body is None:
            text = self.conn.execute("SELECT entry FROM journal WHERE seq = ?", (seq,)).fetchone()[0]
            body = _parse(str(text))
            if len(self._cache) >= 4:
                self._cache.pop(next(iter(self._cache)))
            self._cache[seq] = body
        found: Row = {}
        for c in body.get("changes") or []:
            if isinstance(c, dict) and c.get("table") == table and _key(c.get("key")) == key:
                row = c.get("row")
                found = row if isinstance(row, dict) else found
        return found


def _differences(table: str, key: Key, w: Row | None, h: Row | None, what: str, common_only: bool) -> list[str]:
    """What ``_compare`` names for one key: ``w`` the journal's row, ``h`` the table's (None: no such row)."""
    if w is None and h is not None:
        return [f"{_show(table, key)} is not in the journal (added outside the tool){what}"]
    if h is None and w is not None:
        return [f"{_show(table, key)} is in the journal but not in the table (removed outside the tool){what}"]
    out: list[str] = []
    if w is not None and h is not None:
        columns = (w.keys() & h.keys()) if common_only else (w.keys() | h.keys())
        for col in sorted(columns):
            if col not in w or col not in h or not _same(w[col], h[col]):
                out.append(
                    f"{_show(table, key)}: {col} is {h.get(col)!r} in the table,"
                    f" the journal recorded {w.get(col)!r}{what}"
                )
    return out


def _compare_snapshot(replay: _Replay, taken: Mapping[str, dict[Key, Row]], problems: list[str], what: str) -> None:
    """The replay before a snapshot against the snapshot, on the columns both have (as ``_compare`` did)."""
    for table in TABLES:
        want, have = replay.state[table], taken.get(table, {})
        found: list[tuple[str, list[str]]] = []
        for key in want.keys() | have.keys():
            h = have.get(key)
            if key in want and h is not None and want[key][:16] == _digest(h):
                continue
            w = replay.row(table, key, want[key]) if key in want else None
            said = _differences(table, key, w, h, what, True)
            if said:
                found.append((repr(key), said))
        for _, said in sorted(found, key=lambda f: f[0]):
            problems.extend(said)


def _compare_tables(replay: _Replay, problems: list[str], keys_only: bool) -> None:
    """The replay against the tables, every row read a page at a time; ``keys_only``: only the rows the replay
    holds (``check``'s ``since``: what the entries since then wrote), each read by its key."""
    conn = replay.conn
    for table, keys in TABLES.items():
        want = replay.state[table]
        found: list[tuple[str, list[str]]] = []
        if keys_only:
            where = _where(table)
            rows: Iterable[Row] = (
                r for key in list(want) for r in rows_of(conn.execute(f"SELECT * FROM {table} WHERE {where}", key))
            )
        else:
            rows = pages(conn, table, keys)
        for h in rows:
            key = tuple(h[k] for k in keys)
            packed = want.pop(key, None)  # what is left in ``want`` once every row is read is not in the table
            if packed is not None and packed[:16] == _digest(h):
                continue
            w = replay.row(table, key, packed) if packed is not None else None
            said = _differences(table, key, w, h, "", False)
            if said:
                found.append((repr(key), said))
        for key, packed in want.items():
            found.append((repr(key), _differences(table, key, replay.row(table, key, packed), None, "", False)))
        want.clear()
        for _, said in sorted(found, key=lambda f: f[0]):
            problems.extend(said)


def _signatures(e: Entry, journal_key: Verifier | None, trusted: Mapping[str, Verifier], result: JournalCheck) -> None:
    if e.signature is not None:
        result.signed += 1
    if journal_key is not None:
        if e.signature is None or e.key_id is None:
            result.problems.append(f"journal entry {e.seq} is not signed by the journal key {journal_key.key_id}")
        elif e.key_id != journal_key.key_id:
            result.problems.append(
                f"journal entry {e.seq} is signed by key {e.key_id}, not by the journal key {journal_key.key_id}"
            )
        elif not journal_key.check(signature_message(e.hash), e.signature):
            result.problems.append(f"journal entry {e.seq} has a bad signature by key {e.key_id}")
        return
    # Once an entry is signed, every later one is signed by the same key: a client without the key
    # could otherwise append chained, unsigned entries that match its own edits.
    first = result.first_signed
    if e.signature is None or e.key_id is None:
        if first is not None:
            result.problems.append(
                f"journal entry {e.seq} is not signed, though entry {first[0]} before it is (by key {first[1]})"
            )
        return
    if first is None:
        result.first_signed = (e.seq, e.key_id)
    elif e.key_id != first[1]:
        result.problems.append(
            f"journal entry {e.seq} is signed by key {e.key_id}, not by key {first[1]} that signed entry {first[0]}"
        )
    key = trusted.get(e.key_id)
    if key is None:
        result.unchecked += 1
    elif not key.check(signature_message(e.hash), e.signature):
        result.problems.append(f"journal entry {e.seq} has a bad signature by key {e.key_id}")


def check(
    conn: Connection,
    *,
    journal_key: Verifier | None = None,
    trusted: Mapping[str, Verifier] | None = None,
    since: int | None = None,
) -> JournalCheck:
    """Verify the chain (and signatures), replay it, and compare the result with the tables.

    ``journal_key``: every entry must be signed by it. Otherwise a signature by a
    key in ``trusted`` is checked, and one by any other key is counted as unchecked;
    and once an entry is signed, an unsigned later entry, or one signed by another
    key, is a problem.

    Memory follows a page of entries and rows and 24 bytes a row (``_Replay``), not
    the history. ``since``: only the entries from that seq on are checked (their
    chain from the hash the entry before holds, their signatures) and only the rows
    they wrote compared with the tables; a row changed outside the tool that no
    entry since then wrote is found by the whole check alone.
    """
    result = JournalCheck(journal_key=journal_key.key_id if journal_key is not None else None)
    trusted = trusted or {}
    replay = _Replay(conn)
    start = 0 if since is None else max(0, int(since))
    result.since = since
    prev = GENESIS
    if start:
        _before(conn, start, result)
        row = conn.execute("SELECT hash FROM journal WHERE seq = ?", (start - 1,)).fetchone()
        if row is None:
            result.problems.append(f"journal entry {start - 1} is missing: nothing to check entry {start} against")
        else:
            prev = str(row[0])
    expected_seq = start
    for e in iter_entries(conn, start):
        if e.seq != expected_seq:
            result.problems.append(f"journal entry {expected_seq} is missing (the next is {e.seq})")
        if e.prev != prev:
            result.problems.append(
                f"journal entry {e.seq} names prev {e.prev[:16]}..., the entry before it is {prev[:16]}..."
            )
        if entry_hash(e.prev, e.text) != e.hash or e.body.get("seq") != e.seq:
            result.problems.append(
                f"journal entry {e.seq}: its hash does not follow from the entry before it (the journal was edited)"
            )
        _signatures(e, journal_key, trusted, result)
        if e.body.get("snapshot") is True:
            taken: dict[str, dict[Key, Row]] = {t: {} for t in TABLES}
            _apply(taken, e.changes, e.seq, result.problems)
            if expected_seq > 0:
                _compare_snapshot(replay, taken, result.problems, f" (before journal entry {e.seq})")
            replay.state = {
                t: {k: _digest(r) + e.seq.to_bytes(8, "big") for k, r in rows.items()} for t, rows in taken.items()
            }
        else:
            replay.apply(e.changes, e.seq, result.problems)
        _facts(e, result)
        prev = e.hash
        expected_seq += 1
    if start == 0 and expected_seq == 0:
        result.problems.append("the journal is empty: the tracker's history is gone (or never was)")
    result.entries = expected_seq - start
    result.head = prev
    result.changed = {t: set(rows) for t, rows in replay.state.items()} if start else {}
    _compare_tables(replay, result.problems, keys_only=bool(start))
    return result


def _facts(e: Entry, result: JournalCheck) -> None:
    """What an entry says of the tracker: its schema version and fingerprint (the last), its id (the first)."""
    if e.op.startswith("schema.") and isinstance(e.args.get("sqlite_schema_version"), int):
        result.schema_version = int(e.args["sqlite_schema_version"])
    if e.op.startswith("schema.") and isinstance(e.args.get("pg_schema"), str):
        result.pg_schema = str(e.args["pg_schema"])
    if result.tracker_id is None and isinstance(e.args.get("tracker_id"), str):
        result.tracker_id = str(e.args["tracker_id"])


def _before(conn: Connection, start: int, result: JournalCheck) -> None:
    """What the entries before ``start`` say that a check from ``start`` needs, read, not verified, and only
    from the entries that say it: the tracker's id and schema facts (``_facts``: the schema entries, whose
    canonical text holds ``"op":"schema.``) and the first signed entry (every later one must be signed by its key).
    """
    first = conn.execute(
        "SELECT seq, key_id FROM journal WHERE seq < ? AND signature IS NOT NULL AND key_id IS NOT NULL"
        " ORDER BY seq LIMIT 1",
        (start,),
    ).fetchone()
    if first is not None:
        result.first_signed = (int(first[0]), str(first[1]))
    for r in conn.execute(
        "SELECT seq, prev, hash, entry, key_id, signature FROM journal WHERE seq < ? AND entry LIKE ? ORDER BY seq",
        (start, '%"op":"schema.%'),
    ):
        _facts(Entry(int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], r[5], _parse(str(r[3]))), result)
