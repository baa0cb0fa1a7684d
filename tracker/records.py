"""Writing the tracker: milestones, items, experiments, devices, runs, measurements, keys.

Each function is one ``BEGIN IMMEDIATE`` transaction; what the database refuses
comes back as the matching :mod:`tracker.refusals` class. The functions check
little themselves: the rules are the database's (``migrations/*.sql``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tracker.backends import Connection
from tracker.db import transaction
from tracker.refusals import TrackerInvalid, TrackerUnknown

__all__ = [
    "ITEM_STATUSES",
    "RUN_STATES",
    "TERMINAL_STATES",
    "add_device",
    "add_experiment",
    "add_item",
    "add_key",
    "add_measurement",
    "add_milestone",
    "finish_run",
    "run_id_of",
    "set_item",
    "start_run",
]

ITEM_STATUSES = ("planned", "in-progress", "implemented", "verified")
RUN_STATES = ("running", "completed", "failed", "inconclusive")
TERMINAL_STATES = ("completed", "failed", "inconclusive")
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


def add_milestone(conn: Connection, milestone_id: str, title: str, position: int | None = None) -> None:
    """Add a milestone; ``position`` orders them (default: after the last)."""
    with transaction(conn, f"milestone {milestone_id}"):
        if position is None:
            position = int(conn.execute("SELECT coalesce(max(position), 0) + 1 FROM milestones").fetchone()[0])
        conn.execute("INSERT INTO milestones (id, title, position) VALUES (?, ?, ?)", (milestone_id, title, position))


def add_item(
    conn: Connection,
    item_id: str,
    title: str,
    milestone: str,
    *,
    hardware: bool = False,
    status: str = "planned",
    depends_on: Iterable[str] = (),
) -> None:
    """Add a work item with its dependencies (all or nothing)."""
    with transaction(conn, f"item {item_id}"):
        conn.execute(
            "INSERT INTO items (id, title, milestone_id, hardware, status) VALUES (?, ?, ?, ?, ?)",
            (item_id, title, milestone, int(hardware), status),
        )
        for dep in depends_on:
            conn.execute("INSERT INTO item_deps (item_id, depends_on) VALUES (?, ?)", (item_id, dep))


def _evidence_ids(conn: Connection, refs: Iterable[str]) -> list[int]:
    """Evidence rows named by stream id (or a unique prefix of one, at least 8 digits)."""
    ids: list[int] = []
    for ref in refs:
        rows = conn.execute(
            "SELECT id FROM evidence WHERE stream_id = ? OR (length(?) >= 8 AND stream_id LIKE ? || '%')",
            (ref, ref, ref),
        ).fetchall()
        if len(rows) != 1:
            raise TrackerUnknown(f"no attached stream {ref!r}" if not rows else f"stream prefix {ref!r} is ambiguous")
        ids.append(int(rows[0][0]))
    return ids


def set_item(
    conn: Connection,
    item_id: str,
    *,
    status: str | None = None,
    title: str | None = None,
    hardware: bool | None = None,
    depends_on: Iterable[str] = (),
    evidence: Iterable[str] = (),
    runs: Iterable[int] = (),
) -> None:
    """Change a work item: link evidence (by stream id, or every stream of a run), add
    dependencies, then set its fields, in one transaction. Marking it ``verified``
    is the database's call (``tracker-evidence-required``, ``tracker-hardware-evidence``).
    """
    with transaction(conn, f"item {item_id}"):
        if conn.execute("SELECT 1 FROM items WHERE id = ?", (item_id,)).fetchone() is None:
            raise TrackerUnknown(f"no work item {item_id!r}")
        links = _evidence_ids(conn, evidence)
        for run in runs:
            rows = conn.execute("SELECT id FROM evidence WHERE run_id = ?", (run,)).fetchall()
            if not rows:
                raise TrackerUnknown(f"run {run} has no attached stream")
            links.extend(int(r[0]) for r in rows)
        for ev in links:
            conn.execute("INSERT OR IGNORE INTO item_evidence (item_id, evidence_id) VALUES (?, ?)", (item_id, ev))
        for dep in depends_on:
            conn.execute("INSERT OR IGNORE INTO item_deps (item_id, depends_on) VALUES (?, ?)", (item_id, dep))
        sets: list[str] = []
        args: list[object] = []
        for column, value in (("status", status), ("title", title), ("hardware", hardware)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(int(value) if isinstance(value, bool) else value)
        if sets or links or depends_on:
            sets.append(f"updated_at = {_NOW}")
            conn.execute(f"UPDATE items SET {', '.join(sets)} WHERE id = ?", (*args, item_id))


def add_experiment(conn: Connection, name: str, *, item: str | None = None, description: str | None = None) -> int:
    """Add an experiment (optionally for a work item); returns its id."""
    with transaction(conn, f"experiment {name}"):
        if item is not None and conn.execute("SELECT 1 FROM items WHERE id = ?", (item,)).fetchone() is None:
            raise TrackerUnknown(f"no work item {item!r}")
        cur = conn.execute(
            "INSERT INTO experiments (name, item_id, description) VALUES (?, ?, ?)", (name, item, description)
        )
        return int(cur.lastrowid or 0)


def add_device(conn: Connection, product: str, uuid: str, driver: str | None = None) -> int:
    """Add a device (a GPU, by UUID); returns its id."""
    with transaction(conn, f"device {uuid}"):
        cur = conn.execute("INSERT INTO devices (product, uuid, driver) VALUES (?, ?, ?)", (product, uuid, driver))
        return int(cur.lastrowid or 0)


def _experiment_id(conn: Connection, ref: str) -> int:
    row = conn.execute("SELECT id FROM experiments WHERE name = ? OR CAST(id AS TEXT) = ?", (ref, ref)).fetchone()
    if row is None:
        raise TrackerUnknown(f"no experiment {ref!r}")
    return int(row[0])


def start_run(
    conn: Connection,
    *,
    experiment: str | None = None,
    lane: str | None = None,
    devices: Iterable[str] = (),
    note: str | None = None,
) -> int:
    """Start a run (state ``running``) on the named devices (by UUID); returns its id."""
    with transaction(conn, "run start"):
        exp = _experiment_id(conn, experiment) if experiment is not None else None
        cur = conn.execute("INSERT INTO runs (experiment_id, lane, note) VALUES (?, ?, ?)", (exp, lane, note))
        run = int(cur.lastrowid or 0)
        for uuid in devices:
            row = conn.execute("SELECT id FROM devices WHERE uuid = ?", (uuid,)).fetchone()
            if row is None:
                raise TrackerUnknown(f"no device with UUID {uuid!r} (add it with: alpha tracker device add)")
            conn.execute("INSERT INTO run_devices (run_id, device_id) VALUES (?, ?)", (run, row[0]))
        return run


def run_id_of(conn: Connection, run: int) -> int:
    """``run`` if such a run exists, else ``tracker-unknown``."""
    if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run,)).fetchone() is None:
        raise TrackerUnknown(f"no run {run}")
    return run


def finish_run(conn: Connection, run: int, state: str, *, physical_pass: bool = False, note: str | None = None) -> None:
    """Move a running run to a terminal state, in one update; after it the run never changes.

    ``physical_pass`` records a physical pass: the database accepts it only with
    ``state='completed'`` and a linked stream whose sealed verdict is pass with
    scope physical (``tracker-physical-pass``).
    """
    if state not in TERMINAL_STATES:
        raise TrackerInvalid(f"run {run}: a run finishes as one of {', '.join(TERMINAL_STATES)}, not {state!r}")
    with transaction(conn, f"run {run}"):
        run_id_of(conn, run)
        conn.execute(
            f"UPDATE runs SET state = ?, physical_pass = ?, finished_at = {_NOW}, note = coalesce(?, note)"
            " WHERE id = ?",
            (state, int(physical_pass), note, run),
        )


def add_measurement(conn: Connection, run: int, name: str, value: float, unit: str | None = None) -> int:
    """Record a measurement on a running run; returns its id."""
    with transaction(conn, f"run {run}"):
        cur = conn.execute(
            "INSERT INTO measurements (run_id, name, value, unit) VALUES (?, ?, ?, ?)", (run, name, value, unit)
        )
        return int(cur.lastrowid or 0)


def add_key(conn: Connection, path: str | Path) -> str:
    """Trust an Ed25519 public key (PEM); from now on every attached stream must be signed by a trusted key."""
    from aos.signing import load_public_key

    verifier = load_public_key(path)
    pem = Path(path).read_text(encoding="ascii")
    with transaction(conn, f"key {verifier.key_id}"):
        conn.execute("INSERT OR IGNORE INTO trusted_keys (key_id, pem) VALUES (?, ?)", (verifier.key_id, pem))
    return verifier.key_id
