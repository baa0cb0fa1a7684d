"""Read-side commands: read, show, verify, keygen."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from aos.refusals import Refusal

__all__ = ["COMMANDS"]


def _refuse(exc: Refusal) -> None:
    click.echo(exc.diagnostics(), err=True)
    sys.exit(1)


def _key(path: str | None):  # type: ignore[no-untyped-def]
    if path is None:
        return None
    from aos.signing import load_public_key

    return load_public_key(path)


#: A stream argument is any path: what is not a regular file is refused as stream-missing, not a usage error.
STREAM_PATH = click.Path(path_type=Path)


@click.command("verify")
@click.argument("stream", type=STREAM_PATH)
@click.option(
    "--key", "key", type=click.Path(dir_okay=False), help="Ed25519 public key (PEM) the seal must be signed by."
)
@click.option("--json", "as_json", is_flag=True, help="Print what was verified as JSON.")
def verify_cmd(stream: Path, key: str | None, as_json: bool) -> None:
    """Check a stream: intact chain, sealed, and signed when --key is given.

    Exit 0 when it is; otherwise print `refused: NAME: detail` and exit 1.
    """
    from aos.verify import verify_stream

    try:
        v = verify_stream(stream, _key(key))
    except Refusal as exc:
        _refuse(exc)
        return
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


@click.command("read")
@click.argument("stream", type=STREAM_PATH)
@click.option("--stdout", "what", flag_value="stdout", help="Write the recorded stdout bytes, exactly.")
@click.option("--stderr", "what", flag_value="stderr", help="Write the recorded stderr bytes, exactly.")
@click.option("--artifact", "artifact", metavar="PATH", help="Write a captured file's bytes.")
@click.option("--json", "what", flag_value="json", help="One JSON object per event (JSON Lines).")
@click.option("--kind", "kinds", multiple=True, metavar="K", help="Only events of this kind (repeatable).")
def read_cmd(stream: Path, what: str | None, artifact: str | None, kinds: tuple[str, ...]) -> None:
    """Read a stream back: events, raw output, or an artifact.

    A damaged stream is read up to its damage; the refusal is printed after
    and the exit code is 1.
    """
    from observe.summary import artifact_bytes, event_json, iter_stream

    damage: list[Refusal] = []
    try:
        events = iter_stream(stream, damage)
        if kinds:
            events = (ev for ev in events if ev.kind in kinds)
        out = sys.stdout.buffer
        if artifact is not None:
            artifact_bytes(events, artifact, out)
        elif what in ("stdout", "stderr"):
            for ev in events:
                if ev.kind == what and ev.data:
                    out.write(ev.data)
        elif what == "json":
            for ev in events:
                out.write(event_json(ev).encode("utf-8") + b"\n")
        else:
            from aos.text import key_bytes

            for ev in events:
                size = "" if ev.data is None else f" +{len(ev.data)}B"
                # the step column is byte text (FORMAT.md 3.7): shown decoded, undecodable bytes as \xNN
                step = f" [{key_bytes(ev.step).decode('utf-8', 'backslashreplace')!s}]" if ev.step else ""
                out.write(f"{ev.seq:>6} {ev.kind}{step} {ev.attrs_json}{size}\n".encode())
        out.flush()
    except Refusal as exc:
        _refuse(damage[0] if damage else exc)  # damage first: what was asked for may lie beyond it
    if damage:
        _refuse(damage[0])


@click.command("show")
@click.argument("stream", type=STREAM_PATH)
@click.option("--key", "key", type=click.Path(dir_okay=False), help="Check the signature against this public key.")
def show_cmd(stream: Path, key: str | None) -> None:
    """A human summary: command, exit, steps, receipts, artifacts, verdict, integrity.

    Exit 1 when the stream is not intact and sealed.
    """
    from observe.summary import format_summary, summarize

    try:
        s = summarize(stream, _key(key))
    except Refusal as exc:
        _refuse(exc)
        return
    click.echo(format_summary(s))
    if not s.intact:
        sys.exit(1)


@click.command("keygen")
@click.argument("prefix")
def keygen_cmd(prefix: str) -> None:
    """Write an Ed25519 key pair: PREFIX.key (mode 0600) and PREFIX.pub."""
    from aos.signing import generate_keypair

    try:
        key, pub = generate_keypair(prefix)
    except FileExistsError as exc:
        click.echo(f"refused: key-exists: {exc.filename} already exists; not overwriting a key", err=True)
        sys.exit(1)
    except OSError as exc:
        click.echo(f"refused: key-write: {exc}", err=True)
        sys.exit(1)
    click.echo(f"private key: {key}\npublic key:  {pub}")


COMMANDS: list[click.Command] = [read_cmd, show_cmd, verify_cmd, keygen_cmd]
