"""Interop commands: ``attest`` (a DSSE/in-toto/SLSA VSA envelope) and ``export`` (OTLP, asciicast).

Both read the stream once and verify it first; a stream that does not verify
is refused by name (``refused: NAME: detail`` on stderr, exit 1) and nothing is
written. Usage errors exit 2.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from observe.cli.options import STREAM, example, gate_file_option, private_key, public_key, reports_refusals

__all__ = ["COMMANDS", "attest_command", "export_command"]

_URI = re.compile(r"[a-z][a-z0-9+.-]*:\S+")


@example("alpha observe attest ci.aos --key attest.key -o ci.aos.intoto.json")
@click.command("attest")
@click.argument("stream", type=STREAM)
@click.option(
    "--key",
    "key",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="KEY",
    help="Ed25519 private key (PEM) that signs the envelope; without it the statement is unsigned.",
)
@click.option(
    "--seal-key",
    "seal_key",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="PUBKEY",
    help="Also require the stream's seal to be signed by this Ed25519 public key.",
)
@gate_file_option("The definition of a gate from a file (repeatable); built-in gates need none.")
@click.option(
    "--resource-uri",
    default=None,
    metavar="URI",
    help="The VSA's resourceUri (e.g. the stream's store URL); default: the stream's file:// URI.",
)
@click.option(
    "-o", "--output", "output", required=True, metavar="FILE", help="Where to write the envelope (- for stdout)."
)
@reports_refusals()
def attest_command(
    stream: Path,
    key: str | None,
    seal_key: str | None,
    gate_files: tuple[Path, ...],
    resource_uri: str | None,
    output: str,
) -> None:
    """Attest STREAM's sealed verdict as an in-toto statement (SLSA VSA) in a DSSE envelope.

    The envelope's payload is an in-toto Statement v1 whose subject is the
    stream file and whose predicate is a SLSA verification summary v1; it is
    signed with --key (Ed25519), else its signatures list is empty.
    STREAM is verified first, and its sealed verdict re-evaluated by the same gate
    (found by name and digest); a pass is PASSED, a fail or inconclusive FAILED.
    Exit 0 written, 1 refused (nothing written), 2 usage.
    """
    from observe.interop.attest import attest
    from observe.interop.export import write_output

    if resource_uri is not None and not _URI.fullmatch(resource_uri):
        raise click.BadParameter(f"{resource_uri!r} is not a URI (scheme:rest)", param_hint="--resource-uri")
    signer = private_key(key)
    a = attest(stream, signer=signer, seal_key=public_key(seal_key), gate_files=gate_files, resource_uri=resource_uri)
    write_output(output, a.envelope_bytes())
    for note in a.notes:
        click.echo(f"alpha observe attest: {note}", err=True)
    if output != "-":
        click.echo(f"alpha observe attest: wrote {output}", err=True)


@example(
    "alpha observe export ci.aos --format otlp -o ci.otlp.json",
    "alpha observe export ci.aos --format asciicast -o ci.cast && asciinema play ci.cast",
)
@click.command("export")
@click.argument("stream", type=STREAM)
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["otlp", "asciicast"]),
    help="otlp: OTLP/JSON traces; asciicast: asciicast v2 (the terminal output with its timing).",
)
@click.option("-o", "--output", "output", required=True, metavar="FILE", help="Where to write it (- for stdout).")
@reports_refusals()
def export_command(stream: Path, fmt: str, output: str) -> None:
    """Export STREAM as OTLP/JSON traces or as an asciicast v2 recording.

    STREAM is verified first (intact and sealed); exit 0 written, 1 refused
    (nothing written), 2 usage.
    """
    import json

    from observe.interop.export import asciicast_chunks, load_verified, otlp_traces, write_output

    s = load_verified(stream)
    if fmt == "otlp":
        write_output(output, (json.dumps(otlp_traces(s), ensure_ascii=False) + "\n").encode("utf-8"))
    else:
        write_output(output, asciicast_chunks(s))
    if output != "-":
        click.echo(f"alpha observe export: wrote {output} ({fmt})", err=True)


COMMANDS: list[click.Command] = [attest_command, export_command]
