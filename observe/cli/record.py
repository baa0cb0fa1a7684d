"""Recording commands: record, step, receipt, artifact, tail.

Importing this module loads click only. ``receipt``, ``step`` and ``artifact``
run inside recordings, often hundreds of times, so their path
(``observe.channel.client``) never imports pyarrow; ``record`` and ``tail`` load the
writer and reader when they run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from aos.attrs import RECEIPT_STATUSES
from observe.cli.options import (
    STREAM,
    CommandAfterOptions,
    Exit,
    example,
    options_from_click,
    recording_options,
    reports_refusals,
    without_numpy,
)
from observe.refusals import OutExists

__all__ = [
    "COMMANDS",
    "artifact_command",
    "receipt_command",
    "record_command",
    "step_command",
    "tail_command",
]


@example("alpha observe record --out run.aos --artifact 'dist/*' -- make test")
@click.command("record", cls=CommandAfterOptions)
@recording_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    default=False,
    help="Print what was recorded (stream path and id, exit code, seal) as one JSON document on stdout; "
    "the command's echo goes to stderr.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_refusals(Exit.RECORDER, by_name={OutExists.name: Exit.USAGE})
def record_command(command: tuple[str, ...], as_json: bool, **kwargs: Any) -> None:
    """Record COMMAND as a sealed AOS stream; exit with its exit code.

    Exit codes: the command's own; 128+N if killed by signal N; 124 on --timeout;
    126 cannot execute; 127 not found; 125 the recorder itself failed. A
    mistyped option before --, or an --out that exists (refused: out-exists:
    a stream is never overwritten), is exit 2 and COMMAND does not run.
    """
    without_numpy()
    from observe.recorder.record import record

    result = record(command, options_from_click(**kwargs, echo_to_stderr=as_json))
    if as_json:
        import json

        seal = result.seal
        doc = {
            "stream": str(result.path),
            "stream_id": result.stream_id,
            "exit_code": result.exit_code,
            "command_exit": result.command_exit,
            "signal": result.signal,
            "timed_out": result.timed_out,
            "recorder_failed": result.recorder_failed,
            "seal": None
            if seal is None
            else {"head": seal.head, "events": seal.events, "bytes": seal.bytes, "file_blake3": seal.file_blake3},
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    sys.exit(result.exit_code)


@example("alpha observe step unit-tests -- python3 -m pytest -q")
@click.command("step", cls=CommandAfterOptions)
@click.argument("name")
@click.option("--standalone", is_flag=True, default=False, help="Outside a recording, run COMMAND anyway.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def step_command(name: str, standalone: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND as a named span of the enclosing recording; exit with its exit code."""
    from observe.channel import client

    argv = list(command)
    # Options after NAME are not parsed by click (they could be the command's own):
    # accept --standalone there too, up to the "--".
    while argv[:1] == ["--standalone"]:
        standalone = True
        argv = argv[1:]
    if argv[:1] == ["--"]:  # NAME -- CMD: click keeps the "--" after the first argument
        argv = argv[1:]
    if not argv:
        raise click.UsageError("step needs a command after NAME")
    sys.exit(client.step(name, argv, standalone=standalone))


def _field(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not K=V")
        out.append((key, value))
    return out


@example("alpha observe receipt unit-tests --status pass --field passed=120")
@click.command("receipt")
@click.argument("name")
@click.option("--status", default="info", show_default=True, type=click.Choice(RECEIPT_STATUSES))
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="K=V",
    callback=_field,
    help="A field (repeatable); V is parsed as JSON when it parses, else kept as a string.",
)
@click.option("--json", "json_obj", default=None, metavar="OBJ", help="Fields as one JSON object (--field wins).")
def receipt_command(name: str, status: str, fields: list[tuple[str, str]], json_obj: str | None) -> None:
    """Report a fact to the enclosing recording as a receipt event."""
    from observe.channel import client

    try:
        merged = client.build_fields(fields, json_obj)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--json") from exc
    sys.exit(client.receipt(name, status, merged))


@example("alpha observe artifact dist/app.tar.gz 'reports/*.xml'")
@click.command("artifact")
@click.argument("paths", nargs=-1, required=True)
def artifact_command(paths: tuple[str, ...]) -> None:
    """Capture PATHs (files, directories, globs) into the enclosing recording now."""
    from observe.channel import client

    sys.exit(client.artifact(list(paths)))


@example("alpha observe tail aos-streams/20250101T120000.000000Z-1a2b3c.aos --idle 60")
@click.command("tail")
@click.argument("stream", type=STREAM)
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="After SECONDS without growth, check that the recorder still runs; end (stream-unsealed) when it is "
    "gone. Also how long a missing file is waited for. Default 10.",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS", help="Give up after SECONDS in all."
)
@reports_refusals()
def tail_command(stream: Path, idle: float | None, timeout: float | None) -> None:
    """Follow STREAM while it is written, printing its stdout and stderr; stop at the seal.

    Exits 0 at the seal; 1 when it gave up (--timeout), or refused: the stream is
    damaged, never appeared, or stopped growing while its recorder is gone.
    """
    from observe.readback.tail import follow

    sealed = follow(stream, idle=idle, timeout=timeout)
    if not sealed:
        click.echo(f"alpha observe tail: stopped before the seal of {stream}", err=True)
    sys.exit(Exit.OK if sealed else Exit.FAIL)


COMMANDS: list[click.Command] = [record_command, step_command, receipt_command, artifact_command, tail_command]
