"""Writing the tracker: milestones, items, experiments, devices, runs, measurements, keys.

Each function is one ``BEGIN IMMEDIATE`` transaction that makes its change and
appends the journal entry naming it and every row it wrote (:mod:`tracker.journal`);
what the database refuses comes back as the matching :mod:`tracker.refusals`
class. The functions check little themselves: the rules are the database's
(``migrations/*.sql``).

Runs are named by text ids (:mod:`tracker.ids`); :func:`run_id_of` also finds
a run by a unique prefix of 8 or more characters, or by the number it had
before run ids were text.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from observe.ci.systems import ci_job
from tracker import journal
from tracker.backends import Connection
from tracker.db import transaction
from tracker.ids import iso_ms, new_run_id
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
        journal.append(
            conn,
            "milestone.add",
            {"id": milestone_id, "title": title, "position": position},
            [journal.change(conn, "milestones", milestone_id)],
        )


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
    deps = list(depends_on)
    with transaction(conn, f"item {item_id}"):
        conn.execute(
            "INSERT INTO items (id, title, milestone_id, hardware, status) VALUES (?, ?, ?, ?, ?)",
            (item_id, title, milestone, int(hardware), status),
        )
        changes = [journal.change(conn, "items", item_id)]
        for dep in deps:
            if _has_dep(conn, item_id, dep):
                continue
            conn.execute("INSERT INTO item_deps (item_id, depends_on) VALUES (?, ?)", (item_id, dep))
            changes.append(journal.change(conn, "item_deps", item_id, dep))
        journal.append(
            conn,
            "item.add",
            {
                "id": item_id,
                "title": title,
                "milestone": milestone,
                "hardware": hardware,
                "status": status,
                "depends_on": deps,
            },
            changes,
        )


def _has_dep(conn: Connection, item: str, dep: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM item_deps WHERE item_id = ? AND depends_on = ?", (item, dep)).fetchone() is not None
    )


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
    runs: Iterable[str] = (),
) -> None:
    """Change a work item: link evidence (by stream id, or every stream of a run), add
    dependencies, then set its fields, in one transaction. Marking it ``verified``
    is the database's call (``tracker-evidence-required``, ``tracker-hardware-evidence``).
    """
    deps = list(depends_on)
    evidence = list(evidence)
    runs = list(runs)
    with transaction(conn, f"item {item_id}"):
        if conn.execute("SELECT 1 FROM items WHERE id = ?", (item_id,)).fetchone() is None:
            raise TrackerUnknown(f"no work item {item_id!r}")
        links = _evidence_ids(conn, evidence)
        resolved_runs = [run_id_of(conn, run) for run in runs]
        for run in resolved_runs:
            rows = conn.execute("SELECT id FROM evidence WHERE run_id = ? ORDER BY id", (run,)).fetchall()
            if not rows:
                raise TrackerUnknown(f"run {run} has no attached stream")
            links.extend(int(r[0]) for r in rows)
        changes: list[dict[str, Any]] = []
        for ev in dict.fromkeys(links):
            if conn.execute(
                "SELECT 1 FROM item_evidence WHERE item_id = ? AND evidence_id = ?", (item_id, ev)
            ).fetchone():
                continue
            conn.execute("INSERT INTO item_evidence (item_id, evidence_id) VALUES (?, ?)", (item_id, ev))
            changes.append(journal.change(conn, "item_evidence", item_id, ev))
        for dep in dict.fromkeys(deps):
            if _has_dep(conn, item_id, dep):
                continue
            conn.execute("INSERT INTO item_deps (item_id, depends_on) VALUES (?, ?)", (item_id, dep))
            changes.append(journal.change(conn, "item_deps", item_id, dep))
        sets: list[str] = []
        args: list[object] = []
        for column, value in (("status", status), ("title", title), ("hardware", hardware)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(int(value) if isinstance(value, bool) else value)
        if sets or changes:
            sets.append(f"updated_at = {_NOW}")
            conn.execute(f"UPDATE items SET {', '.join(sets)} WHERE id = ?", (*args, item_id))
            changes.append(journal.change(conn, "items", item_id))
            journal.append(
                conn,
                "item.set",
                {
                    "id": item_id,
                    "status": status,
                    "title": title,
                    "hardware": hardware,
                    "depends_on": deps,
                    "evidence": evidence,
                    "runs": resolved_runs,
                },
                changes,
            )


def add_experiment(conn: Connection, name: str, *, item: str | None = None, description: str | None = None) -> int:
    """Add an experiment (optionally for a work item); returns its id."""
    with transaction(conn, f"experiment {name}"):
        if item is not None and conn.execute("SELECT 1 FROM items WHERE id = ?", (item,)).fetchone() is None:
            raise TrackerUnknown(f"no work item {item!r}")
        cur = conn.execute(
            "INSERT INTO experiments (name, item_id, description) VALUES (?, ?, ?)", (name, item, description)
        )
        exp = int(cur.lastrowid or 0)
        journal.append(
            conn,
            "experiment.add",
            {"name": name, "item": item, "description": description},
            [journal.change(conn, "experiments", exp)],
        )
        return exp


def add_device(conn: Connection, product: str, uuid: str, driver: str | None = None) -> int:
    """Add a device (a GPU, by UUID); returns its id."""
    with transaction(conn, f"device {uuid}"):
        cur = conn.execute("INSERT INTO devices (product, uuid, driver) VALUES (?, ?, ?)", (product, uuid, driver))
        device = int(cur.lastrowid or 0)
        journal.append(
            conn,
            "device.add",
            {"product": product, "uuid": uuid, "driver": driver},
            [journal.change(conn, "devices", device)],
        )
        return device


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
    environ: Mapping[str, str] | None = None,
    started_at_ns: int | None = None,
) -> str:
    """Start a run (state ``running``) on the named devices (by UUID); returns its id.

    The run records the CI job ``environ`` (default: this process's environment)
    names, if any (``observe.ci.systems.ci_job``). Its start time is this machine's clock, the
    clock that records its streams (evidence recorded before it is refused), unless
    ``started_at_ns`` declares an earlier start: a run registered after its work (the
    import of evidence recorded where no tracker was). A declared start is the
    registrar's word, not something the tracker saw: the run's id (a UUIDv7) keeps
    the time it was registered, so the two are always told apart (docs/TRACKER.md).
    """
    uuids = list(devices)
    job = ci_job(os.environ if environ is None else environ)
    with transaction(conn, "run start"):
        exp = _experiment_id(conn, experiment) if experiment is not None else None
        now = time.time_ns()
        run = new_run_id(now)
        if started_at_ns is not None and started_at_ns > now:
            raise ValueError("a run cannot be declared to start in the future")
        conn.execute(
            "INSERT INTO runs (id, experiment_id, lane, note, started_at, ci_provider, ci_job_url, ci_commit)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run,
                exp,
                lane,
                note,
                iso_ms(now if started_at_ns is None else started_at_ns),
                job.provider if job else None,
                job.job_url if job else None,
                job.commit if job else None,
            ),
        )
        changes = [journal.change(conn, "runs", run)]
        for uuid in uuids:
            row = conn.execute("SELECT id FROM devices WHERE uuid = ?", (uuid,)).fetchone()
            if row is None:
                raise TrackerUnknown(f"no device with UUID {uuid!r} (add it with: alpha tracker device add)")
            if conn.execute("SELECT 1 FROM run_devices WHERE run_id = ? AND device_id = ?", (run, row[0])).fetchone():
                continue
            conn.execute("INSERT INTO run_devices (run_id, device_id) VALUES (?, ?)", (run, row[0]))
            changes.append(journal.change(conn, "run_devices", run, row[0]))
        journal.append(
            conn,
            "run.start",
            {"id": run, "experiment": experiment, "lane": lane, "devices": uuids, "note": note},
            changes,
        )
        return run


def run_id_of(conn: Connection, run: str | int) -> str:
    """The id of the run ``run`` names: its id, a unique prefix (8+ characters), or its
    number from before run ids were text; ``tracker-unknown`` otherwise."""
    ref = str(run).strip()
    if conn.execute("SELECT 1 FROM runs WHERE id = ?", (ref,)).fetchone() is not None:
        return ref
    if ref.isdigit():
        row = conn.execute("SELECT id FROM runs WHERE legacy_id = ?", (int(ref),)).fetchone()
        if row is not None:
            return str(row[0])
    elif len(ref) >= 8:
        rows = conn.execute(
            "SELECT id FROM runs WHERE id >= ? AND id < ? || '~' ORDER BY id LIMIT 2", (ref, ref)
        ).fetchall()
        if len(rows) == 1:
            return str(rows[0][0])
        if len(rows) > 1:
            raise TrackerUnknown(f"run prefix {ref!r} is ambiguous")
    raise TrackerUnknown(f"no run {ref}")


def finish_run(conn: Connection, run: str, state: str, *, physical_pass: bool = False, note: str | None = None) -> None:
    """Move a running run to a terminal state, in one update; after it the run never changes.

    ``physical_pass`` records a physical pass: the database accepts it only with
    ``state='completed'``, a linked stream whose sealed verdict is pass with scope
    physical, and every stream of the run a pass (``tracker-physical-pass``).
    """
    if state not in TERMINAL_STATES:
        raise TrackerInvalid(f"run {run}: a run finishes as one of {', '.join(TERMINAL_STATES)}, not {state!r}")
    with transaction(conn, f"run {run}"):
        run = run_id_of(conn, run)
        conn.execute(
            f"UPDATE runs SET state = ?, physical_pass = ?, finished_at = {_NOW}, note = coalesce(?, note)"
            " WHERE id = ?",
            (state, int(physical_pass), note, run),
        )
        journal.append(
            conn,
            "run.finish",
            {"id": run, "state": state, "physical_pass": physical_pass, "note": note},
            [journal.change(conn, "runs", run)],
        )


def add_measurement(conn: Connection, run: str, name: str, value: float, unit: str | None = None) -> int:
    """Record a measurement on a running run; returns its id."""
    if not math.isfinite(value):
        raise TrackerInvalid(f"run {run}: measurement {name} = {value}: a measurement is a finite number")
    with transaction(conn, f"run {run}"):
        run = run_id_of(conn, run)
        cur = conn.execute(
            "INSERT INTO measurements (run_id, name, value, unit) VALUES (?, ?, ?, ?)", (run, name, value, unit)
        )
        measurement = int(cur.lastrowid or 0)
        journal.append(
            conn,
            "measurement.add",
            {"run": run, "name": name, "value": value, "unit": unit},
            [journal.change(conn, "measurements", measurement)],
        )
        return measurement


def add_key(conn: Connection, path: str | Path) -> str:
    """Trust an Ed25519 public key (PEM); from now on every attached stream must be signed by a trusted key."""
    from aos.signing import load_public_key

    verifier = load_public_key(path)
    pem = Path(path).read_text(encoding="ascii")
    with transaction(conn, f"key {verifier.key_id}"):
        if conn.execute("SELECT 1 FROM trusted_keys WHERE key_id = ?", (verifier.key_id,)).fetchone() is None:
            conn.execute("INSERT INTO trusted_keys (key_id, pem) VALUES (?, ?)", (verifier.key_id, pem))
            journal.append(
                conn,
                "key.add",
                {"key_id": verifier.key_id},
                [journal.change(conn, "trusted_keys", verifier.key_id)],
            )
    return verifier.key_id
