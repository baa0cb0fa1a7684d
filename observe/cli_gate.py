"""The gate commands: ``gate``, ``verdict``, ``gates``.

``gate NAME -- CMD`` records CMD exactly as ``record`` does; just before the
seal it reads the stream back, evaluates the gate and appends one ``verdict``
event, so the verdict is sealed with the evidence it rests on. ``verdict``
verifies a stream and prints its sealed verdict without re-evaluating it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from observe.cli_record import options_from_click, recording_options

if TYPE_CHECKING:
    from gates.language import Gate
    from gates.verdict import Verdict

__all__ = ["COMMANDS", "gate", "gates", "verdict"]

_GATE_CONTEXT = {"ignore_unknown_options": True, "allow_interspersed_args": True}


def _resolve(name: str, gate_files: tuple[Path, ...]) -> Gate:
    from gates.language import GateFileError
    from gates.registry import resolve_gate

    try:
        return resolve_gate(name, gate_files)
    except GateFileError as exc:
        raise click.UsageError(exc.diagnostics()) from None


def _emit(v: Verdict, *, as_json: bool, junit: Path | None, stream: str | None, table_err: bool) -> None:
    from gates import report

    if as_json:
        click.echo(report.to_json(v), nl=False)
    else:
        click.echo(report.table(v, stream=stream), nl=False, err=table_err)
    if junit is not None:
        try:
            junit.write_text(report.junit_xml(v, stream=stream), encoding="utf-8")
        except OSError as exc:
            click.echo(f"alpha observe: cannot write {junit}: {exc.strerror or exc}", err=True)
    if os.environ.get("GITHUB_ACTIONS") and not as_json:  # --json keeps stdout one JSON document
        for line in report.github_annotations(v):
            click.echo(line)


@click.command(context_settings=_GATE_CONTEXT)
@click.argument("name")
@recording_options
@click.option(
    "--gate-file",
    "gate_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Load gates from a TOML gate file (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the verdict as JSON on stdout.")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write the verdict as JUnit XML.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def gate(
    name: str, gate_files: tuple[Path, ...], as_json: bool, junit: Path | None, command: tuple[str, ...], **kwargs: Any
) -> None:
    """Record COMMAND, evaluate gate NAME over it, and seal the verdict into the stream.

    Exit codes: 0 pass, 1 fail, 3 inconclusive, 125 the recorder failed,
    2 usage (an unknown gate is refused before COMMAND runs).
    """
    from aos.refusals import Refusal
    from observe.cli_errors import refuse
    from observe.gating import run_gate

    argv = list(command)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise click.UsageError("gate needs a command after NAME (alpha observe gate NAME -- CMD...)")
    gate_ = _resolve(name, gate_files)
    try:
        outcome = run_gate(gate_, argv, options_from_click(**kwargs))
    except Refusal as exc:
        refuse(exc, 125)
    if outcome.verdict is None:
        click.echo(f"alpha observe gate: the recorder failed; no sealed verdict in {outcome.record.path}", err=True)
        sys.exit(125)
    v = outcome.verdict
    _emit(v, as_json=as_json, junit=junit, stream=str(outcome.record.path), table_err=True)
    sys.exit(v.exit_code)


@click.command()
@click.argument("stream", type=click.Path(path_type=Path))  # a directory is stream-missing, not a usage error
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the sealed verdict as JSON.")
@click.option(
    "--key",
    "key",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="PUBKEY",
    help="Also require the seal to be signed by this Ed25519 public key.",
)
def verdict(stream: Path, as_json: bool, key: str | None) -> None:
    """Verify STREAM, print its sealed verdict, and exit with it (never re-evaluates).

    Exit codes: 0 pass, 1 fail, 3 inconclusive; 1 also when the stream is not
    intact and sealed (or not signed by --key), or holds no verdict (the
    refusal is printed). Without a key the chain proves integrity against
    accident, not against a forger who recomputes it.
    """
    from aos.refusals import Refusal
    from aos.verify import require_verdict, verify_stream
    from gates.verdict import Verdict
    from observe.cli_errors import refuse

    try:
        public = None
        if key is not None:
            from aos.signing import load_public_key

            public = load_public_key(key)
        v = Verdict.from_attrs(require_verdict(verify_stream(stream, public)))
    except Refusal as exc:
        refuse(exc, 1)
    _emit(v, as_json=as_json, junit=None, stream=str(stream), table_err=False)
    sys.exit(v.exit_code)


@click.command()
@click.argument("name", required=False)
@click.option(
    "--gate-file",
    "gate_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Also list the gates of a TOML gate file (repeatable).",
)
def gates(name: str | None, gate_files: tuple[Path, ...]) -> None:
    """List every gate and its rules (or only gate NAME)."""
    from gates.language import GateFileError
    from gates.registry import builtin_gates, load_user_gate

    found = dict(builtin_gates())
    for p in gate_files:
        try:
            g = load_user_gate(p)
        except GateFileError as exc:
            raise click.UsageError(exc.diagnostics()) from None
        found[g.name] = g
    if name is not None:
        if name not in found:
            raise click.UsageError(f"no gate named {name!r} (known: {', '.join(sorted(found))})")
        found = {name: found[name]}
    first = True
    for g in sorted(found.values(), key=lambda g: g.name):
        if not first:
            click.echo()
        first = False
        click.echo(f"{g.name}  ({g.source})")
        if g.description:
            click.echo(f"  {g.description}")
        for part in g.parts:
            if part.when is None:
                click.echo(f"  always (scope of a pass: {g.scope}):")
            else:
                click.echo(f"  {part.name}, when {part.when.describe()} (scope of a pass: {part.scope or g.scope}):")
            for rule in part.rules:
                cond = f"  [when {rule.when.describe()}]" if rule.when is not None else ""
                click.echo(f"    {rule.id}: {rule.describe()}{cond}")
        if g.uses_receipts:
            click.echo("    receipts-after-exit: no receipt arrives after the command exited")
            click.echo("    receipts-invalid: every receipt line is a valid receipt")


COMMANDS: list[click.Command] = [gate, verdict, gates]
