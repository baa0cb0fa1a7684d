"""Reading the tracker: status at a glance, what is next, one item or run in full.

Every function returns plain data (for ``--json``) and has a ``format_*``
partner for people.

"Done", for ``next``, means ``implemented`` or ``verified``: an item's code can
build on a dependency whose code exists and whose focused checks pass, even
while that dependency waits for acceptance (for a hardware item, a physical
run). ``next`` lists the items not yet done whose dependencies are all done.
"""

from __future__ import annotations

import json
from typing import Any

from tracker.backends import Connection
from tracker.records import ITEM_STATUSES, RUN_STATES, run_id_of
from tracker.refusals import TrackerUnknown
from tracker.sessions import run_sessions

__all__ = [
    "DONE",
    "format_next",
    "format_show",
    "format_status",
    "next_items",
    "show",
    "status",
]

DONE = ("implemented", "verified")


#: The members that did not run or are not proven that ``status`` lists (``show RUN`` lists them all).
SHOWN = 20


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _counts(rows: list[Any]) -> dict[str, int]:
    counts = dict.fromkeys(ITEM_STATUSES, 0)
    for r in rows:
        counts[r["status"]] = int(r["n"])
    return counts


def status(conn: Connection) -> dict[str, Any]:
    """Counts per status, per milestone, of runs per state, and of evidence."""
    total = _counts(conn.execute("SELECT status, count(*) AS n FROM items GROUP BY status").fetchall())
    milestones = []
    for m in conn.execute("SELECT id, title FROM milestones ORDER BY position, id").fetchall():
        counts = _counts(
            conn.execute(
                "SELECT status, count(*) AS n FROM items WHERE milestone_id = ? GROUP BY status", (m["id"],)
            ).fetchall()
        )
        milestones.append({"id": m["id"], "title": m["title"], "items": sum(counts.values()), "counts": counts})
    runs = dict.fromkeys(RUN_STATES, 0)
    for r in conn.execute("SELECT state, count(*) AS n FROM runs GROUP BY state"):
        runs[r["state"]] = int(r["n"])
    physical_passes = int(conn.execute("SELECT count(*) FROM runs WHERE physical_pass = 1").fetchone()[0])
    evidence = [
        {"verdict": r["verdict"], "scope": r["scope"], "count": int(r["n"])}
        for r in conn.execute(
            "SELECT verdict, scope, count(*) AS n FROM evidence GROUP BY verdict, scope ORDER BY verdict, scope"
        )
    ]
    members = dict(
        (str(r[0]), int(r[1]))
        for r in conn.execute("SELECT status, count(*) FROM session_members GROUP BY status ORDER BY status")
    )
    not_proven = [
        {"run": r[0], "origin": r[1], "member": r[2], "status": r[3], "reason": r[4]}
        for r in conn.execute(
            "SELECT run_id, origin, member, status, reason FROM session_members WHERE status <> 'proven'"
            " ORDER BY run_id, origin, position LIMIT ?",
            (SHOWN + 1,),
        )
    ]
    return {
        "items": sum(total.values()),
        "milestones": len(milestones),
        "counts": total,
        "by_milestone": milestones,
        "runs": runs,
        "physical_passes": physical_passes,
        "evidence": evidence,
        "session_members": members,
        "not_proven": not_proven,
    }


def _status_line(items: int, counts: dict[str, int]) -> str:
    parts = [f"{counts[s]} {s.replace('-', ' ')}" for s in ("implemented", "in-progress", "planned") if counts[s]]
    verified = f"{counts['verified']} verified" if counts["verified"] else "none verified"
    return (", ".join(parts) + "; " if parts else "") + verified


def format_status(s: dict[str, Any]) -> str:
    """E.g. ``160 work items across 11 milestones: 5 implemented, 46 in progress, 109 planned; none verified``."""
    lines = [
        f"{_plural(s['items'], 'work item')} across {_plural(s['milestones'], 'milestone')}: "
        + _status_line(s["items"], s["counts"])
    ]
    width = max((len(m["id"]) for m in s["by_milestone"]), default=0)
    for m in s["by_milestone"]:
        lines.append(
            f"  {m['id']:<{width}}  {m['title']}: {_plural(m['items'], 'item')}"
            + (": " + _status_line(m["items"], m["counts"]) if m["items"] else "")
        )
    runs = s["runs"]
    run_parts = [f"{runs[k]} {k}" for k in RUN_STATES if runs[k]]
    lines.append(
        f"{_plural(sum(runs.values()), 'run')}"
        + (": " + ", ".join(run_parts) if run_parts else "")
        + f"; {_plural(s['physical_passes'], 'physical pass', 'physical passes')} recorded"
    )
    if s["evidence"]:
        ev = ", ".join(
            f"{e['count']} {e['verdict'] or 'no verdict'}" + (f" ({e['scope']})" if e["scope"] else "")
            for e in s["evidence"]
        )
        lines.append(f"evidence: {ev}")
    else:
        lines.append("evidence: no streams attached")
    members = s["session_members"]
    if members:
        missing = sum(n for k, n in members.items() if k != "proven")
        lines.append(
            f"session members: {members.get('proven', 0)} proven, {missing} did not run or not proven"
            + (" (" + ", ".join(f"{n} {k}" for k, n in members.items() if k != "proven") + ")" if missing else "")
        )
        lines.extend(
            f"  run {m['run']}: session {m['origin']}: {m['status']}: {m['member']}: {m['reason']}"
            for m in s["not_proven"][:SHOWN]
        )
        if len(s["not_proven"]) > SHOWN:
            lines.append(f"  ... and {missing - SHOWN} more (alpha tracker show RUN)")
    return "\n".join(lines)


def next_items(conn: Connection) -> list[dict[str, Any]]:
    """Items not yet done (planned or in progress) whose dependencies are all done."""
    rows = conn.execute(
        """
        SELECT i.id, i.title, i.milestone_id, i.hardware, i.status
        FROM items i JOIN milestones m ON m.id = i.milestone_id
        WHERE i.status IN ('planned', 'in-progress')
          AND NOT EXISTS (
              SELECT 1 FROM item_deps d JOIN items x ON x.id = d.depends_on
              WHERE d.item_id = i.id AND x.status NOT IN ('implemented', 'verified'))
        ORDER BY i.status = 'planned', m.position, m.id, i.id
        """
    ).fetchall()
    out = []
    for r in rows:
        deps = [d[0] for d in conn.execute("SELECT depends_on FROM item_deps WHERE item_id = ? ORDER BY 1", (r[0],))]
        out.append(
            {
                "id": r["id"],
                "title": r["title"],
                "milestone": r["milestone_id"],
                "hardware": bool(r["hardware"]),
                "status": r["status"],
                "depends_on": deps,
            }
        )
    return out


def format_next(items: list[dict[str, Any]]) -> str:
    if not items:
        return "nothing is ready: every item not yet done waits on a dependency (or all are done)"
    width = max(len(i["id"]) for i in items)
    return "\n".join(
        f"{i['id']:<{width}}  [{i['status']}] {i['title']} ({i['milestone']}"
        + (", hardware" if i["hardware"] else "")
        + ")"
        for i in items
    )


_EVIDENCE_COLUMNS = (
    "e.id, e.run_id, e.stream_id, e.path, e.url, e.seal_head, e.file_digest, e.size, e.events,"
    " e.verdict, e.scope, e.gate, e.signed, e.key_id, e.recorded_at, e.devices, e.attached_at"
)


def _evidence(row: Any) -> dict[str, Any]:
    d = dict(row)
    d["signed"] = bool(d["signed"])
    d["devices"] = json.loads(d["devices"]) if d["devices"] else None
    d["observers"] = _observers(d)
    return d


def _observers(d: dict[str, Any]) -> dict[str, str]:
    """Which observer reported each device of an attached stream whose file is here (``simulated`` is said
    wherever a view names such a GPU); empty when the file is not here."""
    from pathlib import Path

    from tracker.streams import device_observers

    path = d.get("path")
    if not d["devices"] or not isinstance(path, str) or not Path(path).is_file():
        return {}
    return device_observers(Path(path))


def _show_item(conn: Connection, row: Any) -> dict[str, Any]:
    item_id = row["id"]
    deps = [
        {"id": d["id"], "status": d["status"]}
        for d in conn.execute(
            "SELECT x.id, x.status FROM item_deps d JOIN items x ON x.id = d.depends_on WHERE d.item_id = ? ORDER BY 1",
            (item_id,),
        )
    ]
    dependants = [
        d[0] for d in conn.execute("SELECT item_id FROM item_deps WHERE depends_on = ? ORDER BY 1", (item_id,))
    ]
    evidence = [
        _evidence(e) | {"run_state": e["run_state"]}
        for e in conn.execute(
            f"SELECT {_EVIDENCE_COLUMNS}, r.state AS run_state FROM item_evidence l"
            " JOIN evidence e ON e.id = l.evidence_id JOIN runs r ON r.id = e.run_id"
            " WHERE l.item_id = ? ORDER BY e.id",
            (item_id,),
        )
    ]
    experiments = [
        dict(x) for x in conn.execute("SELECT id, name FROM experiments WHERE item_id = ? ORDER BY id", (item_id,))
    ]
    return {
        "type": "item",
        "id": item_id,
        "title": row["title"],
        "milestone": row["milestone_id"],
        "hardware": bool(row["hardware"]),
        "status": row["status"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "depends_on": deps,
        "dependants": dependants,
        "experiments": experiments,
        "evidence": evidence,
    }


def _show_run(conn: Connection, row: Any) -> dict[str, Any]:
    run = row["id"]
    exp = conn.execute("SELECT name, item_id FROM experiments WHERE id = ?", (row["experiment_id"],)).fetchone()
    devices = [
        dict(d)
        for d in conn.execute(
            "SELECT d.product, d.uuid, d.driver FROM run_devices rd JOIN devices d ON d.id = rd.device_id"
            " WHERE rd.run_id = ? ORDER BY d.id",
            (run,),
        )
    ]
    evidence = [
        _evidence(e)
        for e in conn.execute(f"SELECT {_EVIDENCE_COLUMNS} FROM evidence e WHERE e.run_id = ? ORDER BY e.id", (run,))
    ]
    measurements = [
        dict(m)
        for m in conn.execute(
            "SELECT name, value, unit, recorded_at FROM measurements WHERE run_id = ? ORDER BY id", (run,)
        )
    ]
    return {
        "type": "run",
        "id": run,
        "legacy_id": row["legacy_id"],
        "experiment": exp["name"] if exp else None,
        "item": exp["item_id"] if exp else None,
        "lane": row["lane"],
        "state": row["state"],
        "physical_pass": bool(row["physical_pass"]),
        "note": row["note"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "ci": {"provider": row["ci_provider"], "job_url": row["ci_job_url"], "commit": row["ci_commit"]}
        if row["ci_provider"]
        else None,
        "devices": devices,
        "evidence": evidence,
        "sessions": run_sessions(conn, run),
        "measurements": measurements,
    }


def show(conn: Connection, ref: str) -> dict[str, Any]:
    """A work item (``N10``), a run (its id, a prefix of 8+ characters, or its number from before
    run ids were text), or an attached stream (its id, or a prefix of 8+ digits)."""
    row = conn.execute("SELECT * FROM items WHERE id = ?", (ref,)).fetchone()
    if row is not None:
        return _show_item(conn, row)
    try:
        run = run_id_of(conn, ref)
    except TrackerUnknown:
        pass
    else:
        return _show_run(conn, conn.execute("SELECT * FROM runs WHERE id = ?", (run,)).fetchone())
    if len(ref) >= 8:
        rows = conn.execute(
            f"SELECT {_EVIDENCE_COLUMNS} FROM evidence e WHERE e.stream_id LIKE ? || '%'", (ref,)
        ).fetchall()
        if len(rows) == 1:
            items = [
                r[0] for r in conn.execute("SELECT item_id FROM item_evidence WHERE evidence_id = ?", (rows[0]["id"],))
            ]
            return {"type": "evidence"} | _evidence(rows[0]) | {"items": items}
    raise TrackerUnknown(f"no work item, run or attached stream {ref!r}")


def _device(e: dict[str, Any], uuid: str) -> str:
    observer = (e.get("observers") or {}).get(uuid)
    if observer == "simulated":
        from gates.report import SIMULATED

        return f"{uuid} ({SIMULATED})"
    return uuid if observer in (None, "nvml") else f"{uuid} (observer {observer})"


def _format_evidence(e: dict[str, Any]) -> str:
    verdict = e["verdict"] or "no verdict"
    scope = f", scope {e['scope']}" if e["scope"] else ""
    gate = f", gate {e['gate']}" if e["gate"] else ""
    signed = f", signed by {e['key_id']}" if e["signed"] else ""
    devices = f", observed on {', '.join(_device(e, u) for u in e['devices'])}" if e["devices"] else ""
    recorded = f", recorded {e['recorded_at']}" if e["recorded_at"] else ""
    return (
        f"stream {e['stream_id']} (run {e['run_id']}): {verdict}{scope}{gate}{signed}{devices}\n"
        f"      {e['url'] or e['path']}\n"
        f"      seal {e['seal_head']}, file blake3 {e['file_digest']}, {e['events']} events, "
        f"{e['size']} bytes{recorded}, attached {e['attached_at']}"
    )


def _format_session(sess: dict[str, Any]) -> list[str]:
    """A session attached to a run: its members proven, and each that did not run or is not proven, why."""
    members = sess["members"]
    proven = [m["member"] for m in members if m["status"] == "proven"]
    missing = [m for m in members if m["status"] != "proven"]
    lines = [
        f"  session {sess['origin']} (root {sess['root']}): {len(proven)} of {len(members)} members proven, "
        f"{len(missing)} did not run or not proven",
        f"      {sess['path']}",
        "    proven: " + (", ".join(proven) or "none"),
    ]
    lines.extend(f"    {m['status']}: {m['member']}: {m['reason']}" for m in missing)
    return lines


def format_show(d: dict[str, Any]) -> str:
    lines: list[str] = []
    if d["type"] == "item":
        hw = ", hardware" if d["hardware"] else ""
        lines.append(f"{d['id']}: {d['title']}")
        lines.append(f"  milestone {d['milestone']}{hw}; status {d['status']} (updated {d['updated_at']})")
        if d["depends_on"]:
            lines.append("  depends on: " + ", ".join(f"{x['id']} ({x['status']})" for x in d["depends_on"]))
        if d["dependants"]:
            lines.append("  needed by: " + ", ".join(d["dependants"]))
        if d["experiments"]:
            lines.append("  experiments: " + ", ".join(x["name"] for x in d["experiments"]))
        lines.append(f"  evidence: {len(d['evidence']) or 'none'}")
        lines.extend(f"    {_format_evidence(e)} [run {e['run_state']}]" for e in d["evidence"])
    elif d["type"] == "run":
        pp = "; physical pass" if d["physical_pass"] else ""
        lines.append(f"run {d['id']}: {d['state']}{pp}")
        if d["experiment"]:
            lines.append(f"  experiment {d['experiment']}" + (f" (item {d['item']})" if d["item"] else ""))
        if d["lane"]:
            lines.append(f"  lane {d['lane']}")
        lines.append(f"  started {d['started_at']}" + (f", finished {d['finished_at']}" if d["finished_at"] else ""))
        if d["ci"]:
            ci = d["ci"]
            lines.append(
                f"  CI: {ci['provider']}"
                + (f" {ci['job_url']}" if ci["job_url"] else "")
                + (f" at {ci['commit']}" if ci["commit"] else "")
            )
        if d["note"]:
            lines.append(f"  note: {d['note']}")
        for dev in d["devices"]:
            lines.append(
                f"  device {dev['product']} {dev['uuid']}" + (f" driver {dev['driver']}" if dev["driver"] else "")
            )
        lines.append(f"  evidence: {len(d['evidence']) or 'none'}")
        lines.extend(f"    {_format_evidence(e)}" for e in d["evidence"])
        for sess in d["sessions"]:
            lines.extend(_format_session(sess))
        for m in d["measurements"]:
            lines.append(f"  measurement {m['name']} = {m['value']:g}" + (f" {m['unit']}" if m["unit"] else ""))
    else:
        lines.append(_format_evidence(d))
        lines.append("  items: " + (", ".join(d["items"]) or "none"))
    return "\n".join(lines)
