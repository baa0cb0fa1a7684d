"""Read-side commands: read, show, verify, keygen."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING

import click

from aos.kinds import OUTPUT
from aos.refusals import Refusal
from observe.cli.options import STREAM, Exit, example, json_option, public_key, public_key_option, reports_refusals

if TYPE_CHECKING:
    from aos.event import Event

__all__ = ["COMMANDS", "keygen_command", "read_command", "show_command", "verify_command"]


@example("alpha observe verify ci.aos --key ci.pub")
@click.command("verify")
@click.argument("stream", type=STREAM)
@public_key_option("Ed25519 public key (PEM) the seal must be signed by.")
@json_option("Print what was verified as JSON.")
@reports_refusals()
def verify_command(stream: Path, key: str | None, as_json: bool) -> None:
    """Check a stream: intact chain, sealed, and signed when --key is given.

    Exit 0 when it is; otherwise print `refused: NAME: detail` and exit 1.
    """
    from observe.util.allocator import keep_freed_memory

    keep_freed_memory()  # big buffers one after another: reuse their pages

    from aos.verify import verify_stream

    v = verify_stream(stream, public_key(key))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "stream": str(stream),
                    "stream_id": v.stream_id,
                    "events": v.events,
                    "head": v.head,
                    "signed": v.signed,
                    "key_id": v.key_id,
                    "signature_checked": v.signature_checked,
                    "verdict": v.verdict,
                }
            )
        )
        return
    # With --key, v.key_id is the checked key's id (the seal's own claim was checked against it).
    sig = f", signature good (key {v.key_id})" if v.signature_checked else (", signed" if v.signed else "")
    click.echo(f"ok: {stream}: intact and sealed, {v.events} events, head {v.head}{sig}")


def _seqs(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> frozenset[int] | None:
    if not values:
        return None
    out: set[int] = set()
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            lo, sep, hi = item.partition("-")
            try:
                first, last = (int(lo), int(hi)) if sep else (int(item), int(item))
            except ValueError:
                raise click.BadParameter(f"{item!r} is not a seq or a range N-M") from None
            if first < 0 or last < first or last - first > 10_000_000:
                raise click.BadParameter(f"{item!r} is not a range of seqs")
            out.update(range(first, last + 1))
    return frozenset(out)


@example("alpha observe read ci.aos --seq 6,8,9", "alpha observe read ci.aos --step build --stderr")
@click.command("read")
@click.argument("stream", type=STREAM)
@click.option("--stdout", "what", flag_value="stdout", help="Write the recorded stdout bytes, exactly.")
@click.option("--stderr", "what", flag_value="stderr", help="Write the recorded stderr bytes, exactly.")
@click.option("--artifact", "artifact", metavar="PATH", help="Write a captured file's bytes.")
@click.option("--json", "what", flag_value="json", help="One JSON object per event (JSON Lines).")
@click.option("--kind", "kinds", multiple=True, metavar="K", help="Only events of this kind (repeatable).")
@click.option(
    "--seq",
    "seqs",
    multiple=True,
    callback=_seqs,
    metavar="N[,M...]",
    help="Only the events with these seqs (a check's evidence; ranges N-M; repeatable).",
)
@click.option(
    "--step",
    "step_name",
    default=None,
    metavar="NAME",
    help="Only the events of step NAME (every step of that name, with its nested steps).",
)
@reports_refusals()
def read_command(
    stream: Path,
    what: str | None,
    artifact: str | None,
    kinds: tuple[str, ...],
    seqs: frozenset[int] | None,
    step_name: str | None,
) -> None:
    """Read a stream back: events, raw output, or an artifact.

    --seq, --step and --kind select events; --stdout or --stderr then writes
    only the selected output bytes. A damaged stream is read up to its
    damage; the refusal is printed after and the exit code is 1. A seq or step
    that the stream does not hold is said on stderr, exit 1.
    """
    from observe.util.allocator import keep_freed_memory

    keep_freed_memory()  # big buffers one after another: reuse their pages

    from observe.readback.events import StepFilter, artifact_bytes, event_json, iter_stream, only_seqs

    damage: list[Refusal] = []
    found: set[int] = set()
    steps = StepFilter(step_name) if step_name is not None else None
    try:
        events = iter_stream(stream, damage)
        if steps is not None:
            events = (ev for ev in events if steps.admits(ev))
        if seqs is not None:
            events = only_seqs(events, seqs, found)
        if kinds:
            events = (ev for ev in events if ev.kind in kinds)
        out = sys.stdout.buffer
        if artifact is not None:
            artifact_bytes(events, artifact, out)
        elif what in OUTPUT:
            for ev in events:
                if ev.kind == what and ev.data:
                    out.write(ev.data)
        elif what == "json" and steps is None and seqs is None:
            from aos.reader import StreamFile
            from observe.readback.jsonl import write_json_lines

            with StreamFile(stream) as f:  # a batch at a time (the same lines as event_json's)
                write_json_lines((raw.batch for raw in f.batches()), event_json, out, kinds)
                if f.damage is not None:
                    damage.append(f.damage)
        elif what == "json":
            _json_lines(events, event_json, out)
        else:
            from aos.text import key_bytes

            for ev in events:
                size = "" if ev.data is None else f" +{len(ev.data)}B"
                # the step column is byte text (FORMAT.md 3.7): shown decoded, undecodable bytes as \xNN
                step = f" [{key_bytes(ev.step).decode('utf-8', 'backslashreplace')!s}]" if ev.step else ""
                out.write(f"{ev.seq:>6} {ev.kind}{step} {ev.attrs_json}{size}\n".encode())
        out.flush()
    except Refusal as exc:
        raise (damage[0] if damage else exc) from None  # damage first: what was asked for may lie beyond it
    if damage:
        raise damage[0]
    if seqs is not None and seqs - found:
        missing = sorted(seqs - found)
        more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
        click.echo(f"alpha observe read: no event with seq {', '.join(map(str, missing[:10]))}{more}", err=True)
        sys.exit(Exit.FAIL)
    if steps is not None and not steps.matched:
        click.echo(f"alpha observe read: no step named {step_name!r} in {stream}", err=True)
        sys.exit(Exit.FAIL)


def _json_lines(events: Iterable[Event], encode: Callable[[Event], str], out: IO[bytes]) -> None:
    """Each event as one JSON line, written about a MiB at a time: one write per line cost as much as
    the encoding when stdout is unbuffered (``PYTHONUNBUFFERED``). Lines before a damage are written
    before the refusal propagates."""
    import gc

    lines: list[str] = []
    size = 0
    collecting = gc.isenabled()
    gc.disable()  # every object made here is acyclic: the collector's passes over them were a sixth of the time
    try:
        for ev in events:
            line = encode(ev)
            lines.append(line)
            size += len(line)
            if size >= 1 << 20:
                lines.append("")
                out.write("\n".join(lines).encode("utf-8"))
                lines.clear()
                size = 0
    finally:
        if collecting:
            gc.enable()
        if lines:
            lines.append("")
            out.write("\n".join(lines).encode("utf-8"))


@example("alpha observe show ci.aos", "alpha observe show ci.aos --check exit-code")
@click.command("show")
@click.argument("stream", type=STREAM)
@public_key_option("Check the signature against this public key.")
@click.option(
    "--check",
    "check",
    default=None,
    metavar="NAME",
    help="Show the sealed verdict's check NAME with every event it cites as evidence.",
)
@json_option("Print the summary as one JSON document.")
@reports_refusals()
def show_command(stream: Path, key: str | None, check: str | None, as_json: bool) -> None:
    """A human summary: command, exit, steps, receipts, artifacts, verdict, integrity.

    Exit 1 when the stream is not intact and sealed (or holds no check NAME).
    """
    from observe.readback.summary import format_check, format_summary, summarize, summary_json

    s = summarize(stream, public_key(key))
    if check is not None:
        text, known = format_check(stream, s, check, as_json=as_json)
        if not known:
            click.echo(text, err=True)
            sys.exit(Exit.FAIL)
        click.echo(text)
        sys.exit(Exit.OK if s.intact else Exit.FAIL)
    click.echo(summary_json(s, str(stream)) if as_json else format_summary(s))
    if not s.intact:
        sys.exit(Exit.FAIL)


@example("alpha observe keygen ci   # writes ci.key (0600) and ci.pub")
@click.command("keygen")
@click.argument("prefix")
@reports_refusals()
def keygen_command(prefix: str) -> None:
    """Write an Ed25519 key pair: PREFIX.key (mode 0600) and PREFIX.pub."""
    from aos.signing import generate_keypair
    from observe.refusals import KeyExists, KeyWrite

    try:
        key, pub = generate_keypair(prefix)
    except FileExistsError as exc:
        raise KeyExists(f"{exc.filename} already exists; not overwriting a key") from None
    except OSError as exc:
        raise KeyWrite(str(exc)) from None
    click.echo(f"private key: {key}\npublic key:  {pub}")


COMMANDS: list[click.Command] = [read_command, show_command, verify_command, keygen_command]
