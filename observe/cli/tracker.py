"""The tracker's command line: ``alpha tracker ...`` and ``alpha observe attach``.

A thin layer over :mod:`tracker.records`, :mod:`tracker.attach`,
:mod:`tracker.status` and :mod:`tracker.audit`. Refusals (the database's
included) print ``refused: NAME: detail`` on stderr and exit 1; usage errors
exit 2; ``audit`` exits 1 when it finds anything wrong. Every read command
takes ``--json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from observe.cli.options import (
    Exit,
    db_option,
    example,
    json_option,
    public_key,
    public_key_option,
    reports_refusals,
    sign_key_options,
    signing_key,
    without_numpy,
)
from observe.env import TrackerVars

if TYPE_CHECKING:
    from aos.refusals import Refusal
    from tracker.backends import Connection

__all__ = ["attach_command", "tracker_group"]


def _db_refusal(exc: Exception) -> Refusal | None:
    """A database error as the refusal it names (a read outside any transaction included); None for others."""
    from tracker.refusals import from_db_error, is_db_error

    return from_db_error(exc) if is_db_error(exc) else None


#: Every tracker command reports its refusals, the database's included, and exits 1.
_refusals = reports_refusals(Exit.FAIL, translate=_db_refusal)

#: The tracker's own private key: ``--sign-key`` (once ``--signing-key``, still accepted) or ``--sign-key-env``.
_sign_key_options = sign_key_options(
    "every journal entry written (the tracker's own key)",
    aliases=("--signing-key",),
    envvar=TrackerVars.SIGNING_KEY,
)


@contextmanager
def _open(ctx: click.Context) -> Iterator[Connection]:
    from tracker.db import connect

    conn = connect(ctx.obj["db"], signer=signing_key(*ctx.obj["sign_key"]))
    try:
        yield conn
    finally:
        conn.close()


def _json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


_json_option = json_option("Print JSON instead of text.")


# -- alpha observe attach ------------------------------------------------------------


def _index_options(command: Any) -> Any:
    """``--index STORE`` / ``--no-index``: where the streams verified here get their evidence index rows."""
    command = click.option(
        "--no-index", "no_index", is_flag=True, help="Write no evidence index row for the streams verified here."
    )(command)
    return click.option(
        "--index",
        "index_store",
        metavar="STORE",
        help="The store (a folder or s3://) whose evidence index gets the row of each stream verified here "
        "(default: the folder of an SQLite tracker; none for PostgreSQL).",
    )(command)


def _evidence_index(db: str, index_store: str | None, no_index: bool) -> Any:
    """The ``observe.store_index.Appender`` the verified streams' rows go to, or None."""
    from observe.store import open_store
    from observe.store_index import Appender
    from tracker.backends import is_postgres_url

    if no_index:
        if index_store is not None:
            raise click.UsageError("give --index STORE or --no-index, not both")
        return None
    if index_store is not None:
        return Appender(open_store(index_store))
    return None if is_postgres_url(db) else Appender(open_store(Path(db).resolve().parent))


@example(
    "alpha observe attach ci.aos --db progress.sqlite3 --run 3",
    "alpha observe attach run-7 --db progress.sqlite3 --run 3",
)
@click.command("attach")
@click.argument("stream", type=click.Path())  # a str: a store URL must keep its "//"; a folder: a session
@db_option(aliases=("--tracker",))
@click.option("--run", "run", required=True, help="The run (its id) the stream is evidence for.")
@_index_options
@_sign_key_options
@_json_option
@_refusals
def attach_command(
    stream: str,
    db: str,
    run: str,
    index_store: str | None,
    no_index: bool,
    sign_key: Path | None,
    sign_key_env: str | None,
    as_json: bool,
) -> None:
    """Verify a sealed stream and attach it to a run in the tracker.

    STREAM is a path, or a store URL as `alpha observe push` prints it
    (s3://..., file://...): fetched and verified first, and the URL recorded.

    The stream must be intact and sealed (and signed by a trusted key when the
    tracker holds any: `alpha tracker key add`), with exactly one well-formed
    sealed verdict (stream-verdict otherwise, as `alpha observe verdict`). It
    must belong to the run: its gate is the run's lane (tracker-evidence-lane),
    it was recorded after the run started (tracker-evidence-time), on every
    device the run names (tracker-evidence-devices). Its stream id, path, seal
    head, file digest, verdict, recording time and observed devices are
    recorded. Attaching it again unchanged changes nothing; a stream whose file
    no longer matches what was recorded is refused (tracker-stream-changed).
    Attaching it again from a store URL (after `alpha observe push`) adds that
    URL, on a finished run too, so `audit` re-fetches it from the store.

    The stream verified here gets its row in the evidence index (docs/FORMAT.md
    section 8) of the tracker's folder (an SQLite tracker), or of --index
    STORE, once the tracker has recorded it; --no-index writes none.

    STREAM may be a fleet session's folder (or its session.aos): the session is
    verified offline (`alpha observe session verify`) and every member it
    expected is recorded on the run, proven, did not run or not proven (with
    the reason); its coordinating stream is attached too when it holds a sealed
    verdict. A physical pass is then refused while any member is not proven
    (tracker-session-unproven).
    """
    from tracker.attach import attach as attach_stream
    from tracker.db import connect
    from tracker.sessions import attach_session, is_session

    index = _evidence_index(db, index_store, no_index)
    conn = connect(db, signer=signing_key(sign_key, sign_key_env))
    try:
        if is_session(stream):
            _attached_session(attach_session(conn, stream, run), as_json)
            return
        a = attach_stream(conn, stream, run, index=index)
    finally:
        conn.close()
    if as_json:
        _json(a.as_dict())
        return
    verdict = f"verdict {a.verdict}" + (f", scope {a.scope}" if a.scope else "") if a.verdict else "no verdict"
    gate = f" (gate {a.gate})" if a.gate else ""
    if a.located:
        click.echo(f"already attached: stream {a.stream_id} of run {a.run_id}, now kept at {a.url}: {verdict}{gate}")
        return
    what = "attached" if a.new else "already attached, unchanged:"
    click.echo(f"{what} stream {a.stream_id} to run {a.run_id}: {verdict}{gate}")


def _attached_session(s: Any, as_json: bool) -> None:
    if as_json:
        _json(s.as_dict())
        return
    what = "attached" if s.new else "already attached, unchanged:"
    missing = s.not_proven
    click.echo(
        f"{what} session {s.origin} to run {s.run_id}: {len(s.members) - len(missing)} of {len(s.members)} members "
        "proven" + (f"; stream {s.evidence.stream_id}: verdict {s.evidence.verdict}" if s.evidence else "")
    )
    for m in missing:
        click.echo(f"  {m['status']}: {m['member']}: {m['reason']}")


# -- alpha tracker -------------------------------------------------------------------


@example("alpha tracker --db progress.sqlite3 status")
@click.group("tracker")
@db_option()
@_sign_key_options
@click.pass_context
def tracker_group(ctx: click.Context, db: str, sign_key: Path | None, sign_key_env: str | None) -> None:
    """The progress tracker: work items, runs, and the sealed streams that are their evidence.

    The rules live in the database (SQLite or PostgreSQL triggers), so every client is held to
    them: a terminal run never changes; an item is verified only with passing
    evidence from a completed run, a hardware item only with a sealed pass of
    scope physical; a physical pass needs such a stream on the run. Every change
    made through this tool is journalled (hash-chained, signed with
    --sign-key or --sign-key-env); `audit` names any change made around it.
    """
    if ctx.invoked_subcommand in NO_NUMPY_TRACKER:
        without_numpy()  # a third of pyarrow's import: most of an added run's site build past its pages
    ctx.ensure_object(dict)
    ctx.obj["db"] = db
    ctx.obj["sign_key"] = (sign_key, sign_key_env)


#: The tracker's commands that never hand numpy anything (Arrow buffers and Python objects only).
NO_NUMPY_TRACKER = frozenset({"site"})


@example("alpha tracker init")
@tracker_group.command("init")
@click.pass_context
@_refusals
def init_command(ctx: click.Context) -> None:
    """Create the tracker database (or bring its schema up to date)."""
    from tracker.db import init, schema_version

    conn = init(ctx.obj["db"], signer=signing_key(*ctx.obj["sign_key"]))
    try:
        version = schema_version(conn)
    finally:
        conn.close()
    from tracker.pg import redact

    click.echo(f"tracker {redact(ctx.obj['db'])}: schema version {version}")


@example("alpha tracker status --json")
@tracker_group.command("status")
@_json_option
@click.pass_context
@_refusals
def status_command(ctx: click.Context, as_json: bool) -> None:
    """Counts per status and per milestone, runs, and evidence, at a glance."""
    from tracker.status import format_status, status

    with _open(ctx) as conn:
        s = status(conn)
    _json(s) if as_json else click.echo(format_status(s))


@example("alpha tracker next")
@tracker_group.command("next")
@_json_option
@click.pass_context
@_refusals
def next_command(ctx: click.Context, as_json: bool) -> None:
    """Work items not yet done whose dependencies are all done (implemented or verified)."""
    from tracker.status import format_next, next_items

    with _open(ctx) as conn:
        items = next_items(conn)
    _json(items) if as_json else click.echo(format_next(items))


@example("alpha tracker show N10")
@tracker_group.command("show")
@click.argument("ref", metavar="ID")
@_json_option
@click.pass_context
@_refusals
def show_command(ctx: click.Context, ref: str, as_json: bool) -> None:
    """Show a work item (N10), a run (its id, an 8+ character prefix of it, or an old number) or an attached
    stream (its id or an 8+ digit prefix), with its evidence."""
    from tracker.status import format_show, show

    with _open(ctx) as conn:
        d = show(conn, ref)
    _json(d) if as_json else click.echo(format_show(d))


@example("alpha tracker audit --json", "alpha tracker audit --since 120")
@tracker_group.command("audit")
@public_key_option("The tracker's public key: every journal entry must be signed by it.", aliases=("--journal-key",))
@click.option(
    "--since",
    type=click.IntRange(min=0),
    metavar="ENTRY",
    help="Check only the journal entries from seq ENTRY on, and the rows and streams they wrote (the rules and "
    "schema whole). A row changed outside the tool that no entry since then wrote is found by the full audit only.",
)
@_json_option
@click.pass_context
@_refusals
def audit_command(ctx: click.Context, key: str | None, since: int | None, as_json: bool) -> None:
    """Re-verify every attached stream, the journal and the database's rules; exit 1 on any finding.

    A stream whose file is gone is `missing`; one that no longer verifies, or
    any of whose derived columns (verdict, scope, gate, signer, seal head,
    digest, ...) differs from the stream, is `changed`. The journal is replayed
    and compared with every table; the schema with the shipped one. Each
    stream's line is printed as it is checked (with --json, the document lists
    every stream at the end). `--since ENTRY` checks what changed from that
    journal entry on (the head the last audit printed is the entry before).
    """
    from tracker.audit import audit, finding_line, format_audit_tail

    journal_key = public_key(key)
    with _open(ctx) as conn:
        if as_json:
            report = audit(conn, journal_key=journal_key, since=since)
            _json(report.as_dict())
        else:
            report = audit(conn, journal_key=journal_key, since=since, on_stream=lambda f: click.echo(finding_line(f)))
            click.echo(format_audit_tail(report))
    if not report.ok:
        sys.exit(Exit.FAIL)


@example("alpha tracker --db progress.sqlite3 site public/tracker")
@tracker_group.command("site")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@_json_option
@click.pass_context
@_refusals
def site_command(ctx: click.Context, directory: Path, as_json: bool) -> None:
    """Write a static site of the tracker into DIR: index.html, a page per run, a report per stream.

    What is shown is what the attached streams prove: each stream is verified
    again and its verdict, scope, GPUs (UUIDs and driver, as the recorder
    observed them) and artifacts (SHA-256) read from it; a stream that is
    missing, damaged or disagrees with its row is said so, and an item the
    streams do not prove verified is shown as claimed. Links are relative;
    nothing is loaded from outside DIR. Regenerating is idempotent and removes
    pages that no longer belong (only files it wrote, listed in
    DIR/alpha-site.json); a DIR that is not empty and not such a site is
    refused (tracker-site-dir).
    """
    from tracker.site import write_site

    with _open(ctx) as conn:
        result = write_site(conn, directory)
    if as_json:
        s = result.site
        _json(
            {
                "directory": str(result.directory),
                "files": result.files,
                "written": result.written,
                "unchanged": result.unchanged,
                "removed": result.removed,
                "kept": result.kept,
                "runs": len(s.runs),
                "streams": {k: s.stream_count(k) for k in ("proven", "disagrees", "damaged", "missing")},
            }
        )
        return
    click.echo(result.summary())


@example("alpha tracker --db postgresql://tracker@db.example/progress import progress.sqlite3")
@tracker_group.command("import")
@click.argument("source", metavar="SOURCE")
@click.option(
    "--drop-legacy-ids",
    is_flag=True,
    help="Import runs without their old numbers (from before text run ids) where the target uses them too.",
)
@_index_options
@_json_option
@click.pass_context
@_refusals
def import_command(
    ctx: click.Context, source: str, drop_legacy_ids: bool, index_store: str | None, no_index: bool, as_json: bool
) -> None:
    """Import the tracker SOURCE (an SQLite file or postgresql://...) into this one (--db), all or nothing.

    The source is audited first, as `alpha tracker audit` does (its streams
    re-verified, its journal replayed, its rules checked): any finding refuses
    the import (tracker-import). Each of its rows is then written as the tool
    writes it, in one transaction, so this tracker's rules judge every one:
    every stream is verified again and attached as `attach` does (verdict,
    scope, gate, signer read from the stream, never copied), each run finishes
    as `run finish` does. Run ids are kept; milestones and items (by id),
    experiments (by name), devices (by UUID) already here must be identical
    (merged) or the import is refused (tracker-exists). The whole import is one
    journal entry naming the source. The target must exist (`init` it first).
    Every stream verified here gets its row in the evidence index of this
    tracker's folder (an SQLite tracker) or of --index STORE once the import
    is written; --no-index writes none.
    """
    from tracker.importing import import_tracker

    index = _evidence_index(ctx.obj["db"], index_store, no_index)
    with _open(ctx) as conn:
        result = import_tracker(conn, source, drop_legacy_ids=drop_legacy_ids, index=index)
    _json(result.as_dict()) if as_json else click.echo(result.summary())


# -- milestones and items --------------------------------------------------------------


@example("alpha tracker milestone add M1 'first light'")
@tracker_group.group("milestone")
def milestone_group() -> None:
    """Milestones: the groups work items belong to."""


@example("alpha tracker milestone add M1 'first light' --position 1")
@milestone_group.command("add")
@click.argument("milestone_id", metavar="ID")
@click.argument("title")
@click.option("--position", type=int, help="Sort position (default: after the last).")
@click.pass_context
@_refusals
def milestone_add_command(ctx: click.Context, milestone_id: str, title: str, position: int | None) -> None:
    """Add a milestone."""
    from tracker.records import add_milestone

    with _open(ctx) as conn:
        add_milestone(conn, milestone_id, title, position)
    click.echo(f"milestone {milestone_id} added")


@example("alpha tracker item list -m M1")
@tracker_group.group("item")
def item_group() -> None:
    """Work items: add, change, list."""


_STATUS = click.Choice(["planned", "in-progress", "implemented", "verified"])


@example("alpha tracker item add N10 'resume from checkpoint' -m M1 --hardware -d N9")
@item_group.command("add")
@click.argument("item_id", metavar="ID")
@click.argument("title")
@click.option("--milestone", "-m", required=True, help="The milestone it belongs to.")
@click.option("--hardware", is_flag=True, help="Verifying it needs a physical pass on real hardware.")
@click.option("--status", type=_STATUS, default="planned", show_default=True)
@click.option("--depends-on", "-d", "depends_on", multiple=True, metavar="ID", help="A dependency (repeatable).")
@click.pass_context
@_refusals
def item_add_command(
    ctx: click.Context,
    item_id: str,
    title: str,
    milestone: str,
    hardware: bool,
    status: str,
    depends_on: tuple[str, ...],
) -> None:
    """Add a work item (id like N10: never all digits)."""
    from tracker.records import add_item

    with _open(ctx) as conn:
        add_item(conn, item_id, title, milestone, hardware=hardware, status=status, depends_on=depends_on)
    click.echo(f"item {item_id} added")


@example("alpha tracker item set N10 --status verified --run 3")
@item_group.command("set")
@click.argument("item_id", metavar="ID")
@click.option("--status", type=_STATUS)
@click.option("--title")
@click.option("--hardware/--no-hardware", default=None, help="Change the hardware flag.")
@click.option("--depends-on", "-d", "depends_on", multiple=True, metavar="ID", help="Add a dependency (repeatable).")
@click.option("--evidence", "-e", multiple=True, metavar="STREAM_ID", help="Link an attached stream (repeatable).")
@click.option("--run", "runs", multiple=True, metavar="RUN", help="Link every stream of a run (repeatable).")
@click.pass_context
@_refusals
def item_set_command(
    ctx: click.Context,
    item_id: str,
    status: str | None,
    title: str | None,
    hardware: bool | None,
    depends_on: tuple[str, ...],
    evidence: tuple[str, ...],
    runs: tuple[str, ...],
) -> None:
    """Change a work item, linking evidence first; all or nothing.

    `--status verified` is accepted only with passing evidence from a completed
    run linked (tracker-evidence-required); for a hardware item, a sealed pass
    of scope physical (tracker-hardware-evidence).
    """
    from tracker.records import set_item

    with _open(ctx) as conn:
        set_item(
            conn,
            item_id,
            status=status,
            title=title,
            hardware=hardware,
            depends_on=depends_on,
            evidence=evidence,
            runs=runs,
        )
        row = conn.execute("SELECT status FROM items WHERE id = ?", (item_id,)).fetchone()
    click.echo(f"item {item_id}: {row[0]}")


@example("alpha tracker item list -m M1 --status planned")
@item_group.command("list")
@click.option("--milestone", "-m", help="Only this milestone's items.")
@click.option("--status", type=_STATUS, help="Only items with this status.")
@_json_option
@click.pass_context
@_refusals
def item_list_command(ctx: click.Context, milestone: str | None, status: str | None, as_json: bool) -> None:
    """List work items."""
    with _open(ctx) as conn:
        rows = [
            {
                "id": r["id"],
                "title": r["title"],
                "milestone": r["milestone_id"],
                "hardware": bool(r["hardware"]),
                "status": r["status"],
            }
            for r in conn.execute(
                "SELECT i.* FROM items i JOIN milestones m ON m.id = i.milestone_id"
                " WHERE (?1 IS NULL OR i.milestone_id = ?1) AND (?2 IS NULL OR i.status = ?2)"
                " ORDER BY m.position, m.id, i.id",
                (milestone, status),
            )
        ]
    if as_json:
        _json(rows)
        return
    width = max((len(r["id"]) for r in rows), default=0)
    for r in rows:
        hw = ", hardware" if r["hardware"] else ""
        click.echo(f"{r['id']:<{width}}  [{r['status']}] {r['title']} ({r['milestone']}{hw})")


# -- experiments, devices, runs, measurements, keys ---------------------------------------


@example("alpha tracker experiment add E1 --item N10")
@tracker_group.group("experiment")
def experiment_group() -> None:
    """Experiments: named series of runs, optionally for a work item."""


@example("alpha tracker experiment add E1 --item N10 --description 'split run'")
@experiment_group.command("add")
@click.argument("name")
@click.option("--item", help="The work item it is for.")
@click.option("--description")
@click.pass_context
@_refusals
def experiment_add_command(ctx: click.Context, name: str, item: str | None, description: str | None) -> None:
    """Add an experiment; says what it made (its name, id and item): runs name it with --experiment NAME."""
    from tracker.records import add_experiment

    with _open(ctx) as conn:
        exp = add_experiment(conn, name, item=item, description=description)
    where = f", for work item {item}" if item else ""
    click.echo(
        f"added experiment {name} (id {exp}{where}); start its runs with: alpha tracker run start --experiment {name}"
    )


@example("alpha tracker device add --product 'NVIDIA GeForce RTX 3090' --uuid GPU-aaaa")
@tracker_group.group("device")
def device_group() -> None:
    """Devices: GPUs by UUID."""


@example("alpha tracker device add --product 'NVIDIA GeForce RTX 3090' --uuid GPU-aaaa --driver 580.65.06")
@device_group.command("add")
@click.option("--product", required=True, help="e.g. 'NVIDIA GeForce RTX 3090'.")
@click.option("--uuid", "uuid", required=True, help="The device UUID (GPU-...).")
@click.option("--driver", help="Driver release, e.g. 580.65.06.")
@click.pass_context
@_refusals
def device_add_command(ctx: click.Context, product: str, uuid: str, driver: str | None) -> None:
    """Add a device; prints its id."""
    from tracker.records import add_device

    with _open(ctx) as conn:
        click.echo(add_device(conn, product, uuid, driver))


@example('RUN=$(alpha tracker run start --lane exit-zero) && alpha tracker run finish "$RUN" --state completed')
@tracker_group.group("run")
def run_group() -> None:
    """Runs: start one, attach its streams (alpha observe attach), finish it."""


@example("alpha tracker run start --experiment E1 --lane distributed-device --device GPU-aaaa")
@run_group.command("start")
@click.option("--experiment", help="Experiment name (or id).")
@click.option("--lane", help="The lane, e.g. distributed-device.")
@click.option("--device", "devices", multiple=True, metavar="UUID", help="A device it runs on (repeatable).")
@click.option("--note")
@click.option(
    "--started-at",
    metavar="ISO8601",
    default=None,
    help="Register a run whose work started earlier (importing evidence recorded elsewhere): its declared "
    "start, e.g. 2026-11-30T13:16:00Z. The run id keeps the registration time.",
)
@click.pass_context
@_refusals
def run_start_command(
    ctx: click.Context,
    experiment: str | None,
    lane: str | None,
    devices: tuple[str, ...],
    note: str | None,
    started_at: str | None,
) -> None:
    """Start a run; prints the new run's id alone on stdout.

    The id is globally unique text (a UUIDv7). Under GitHub Actions, GitLab CI or
    Buildkite the run records its CI job (provider, job URL, commit). Evidence must
    be recorded after the run started: register the run first, or, for evidence
    recorded where no tracker was, declare its start with --started-at.
    """
    from datetime import datetime

    from tracker.records import start_run

    declared = None
    if started_at is not None:
        try:
            when = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"{started_at!r} is not an ISO 8601 time", param_hint="--started-at") from None
        if when.tzinfo is None:
            raise click.BadParameter("give a time zone (e.g. a trailing Z for UTC)", param_hint="--started-at")
        declared = int(when.timestamp() * 1_000_000) * 1000
    with _open(ctx) as conn:
        try:
            run = start_run(conn, experiment=experiment, lane=lane, devices=devices, note=note, started_at_ns=declared)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--started-at") from None
        click.echo(run)


@example("alpha tracker run finish 3 --state completed --physical-pass")
@run_group.command("finish")
@click.argument("run")
@click.option(
    "--state", required=True, type=click.Choice(["completed", "failed", "inconclusive"]), help="The terminal state."
)
@click.option(
    "--physical-pass",
    is_flag=True,
    help="Record a physical pass: needs --state completed and an attached sealed pass of scope physical.",
)
@click.option("--note")
@click.pass_context
@_refusals
def run_finish_command(ctx: click.Context, run: str, state: str, physical_pass: bool, note: str | None) -> None:
    """Finish a run; from then on it and its evidence never change.

    A physical pass needs every stream of the run to pass, one of them with scope physical.
    """
    from tracker.records import finish_run, run_id_of

    with _open(ctx) as conn:
        run = run_id_of(conn, run)
        finish_run(conn, run, state, physical_pass=physical_pass, note=note)
    click.echo(f"run {run}: {state}" + ("; physical pass recorded" if physical_pass else ""))


@example("alpha tracker run list --json")
@run_group.command("list")
@_json_option
@click.pass_context
@_refusals
def run_list_command(ctx: click.Context, as_json: bool) -> None:
    """List runs with their evidence counts."""
    from gates.wording import count

    with _open(ctx) as conn:
        rows = [
            dict(r)
            for r in conn.execute(
                "SELECT r.id, x.name AS experiment, r.lane, r.state, r.physical_pass, r.started_at, r.finished_at,"
                " r.ci_provider, r.ci_job_url, r.ci_commit,"
                " (SELECT count(*) FROM evidence e WHERE e.run_id = r.id) AS streams"
                " FROM runs r LEFT JOIN experiments x ON x.id = r.experiment_id ORDER BY r.started_at, r.id"
            )
        ]
    for r in rows:
        r["physical_pass"] = bool(r["physical_pass"])
    if as_json:
        _json(rows)
        return
    for r in rows:
        pp = ", physical pass" if r["physical_pass"] else ""
        what = " ".join(x for x in (r["experiment"], r["lane"]) if x) or "-"
        click.echo(f"{r['id']}  {r['state']:<12} {what}: {count(r['streams'], 'stream')}{pp}")


@example("alpha tracker measure 3 step-time 0.42 --unit s")
@tracker_group.command("measure")
@click.argument("run")
@click.argument("name")
@click.argument("value", type=float)
@click.option("--unit")
@click.pass_context
@_refusals
def measure_command(ctx: click.Context, run: str, name: str, value: float, unit: str | None) -> None:
    """Record a measurement on a running run."""
    from tracker.records import add_measurement, run_id_of

    with _open(ctx) as conn:
        run = run_id_of(conn, run)
        add_measurement(conn, run, name, value, unit)
    click.echo(f"run {run}: {name} = {value:g}" + (f" {unit}" if unit else ""))


@example("alpha tracker key add ci.pub")
@tracker_group.group("key")
def key_group() -> None:
    """Trusted public keys: with any, attached streams must be signed by one."""


@example("alpha tracker key add ci.pub")
@key_group.command("add")
@click.argument("pub", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@_refusals
def key_add_command(ctx: click.Context, pub: Path) -> None:
    """Trust an Ed25519 public key (PEM, as written by `alpha observe keygen`)."""
    from tracker.records import add_key

    with _open(ctx) as conn:
        key_id = add_key(conn, pub)
    click.echo(f"trusted key {key_id}")


@example("alpha tracker vacuum")
@tracker_group.command("vacuum")
@click.pass_context
@_refusals
def vacuum_command(ctx: click.Context) -> None:
    """VACUUM the database, journalling the schema cookie it leaves (so `audit` stays clean)."""
    from tracker.db import vacuum

    with _open(ctx) as conn:
        cookie = vacuum(conn)
    from tracker.pg import redact

    click.echo(f"tracker {redact(ctx.obj['db'])}: vacuumed (schema cookie {cookie})")
