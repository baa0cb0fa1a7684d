"""The gate commands: ``gate``, ``verdict``, ``gates``.

``gate NAME -- CMD`` records CMD exactly as ``record`` does; just before the
seal it reads the stream back, evaluates the gate and appends one ``verdict``
event, so the verdict is sealed with the evidence it rests on. ``verdict``
verifies a stream and prints its sealed verdict without re-evaluating it.

Both publish the verdict where CI reads it (``observe.ci.publish``): JUnit XML
(``--junit``), a markdown summary (``--summary``; under GitHub Actions also
``$GITHUB_STEP_SUMMARY``, under Buildkite ``STREAM.md`` by default), step outputs
(``$GITHUB_OUTPUT``) and annotations (``::error``/``::warning``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from observe.cli.options import (
    STREAM,
    CommandAfterOptions,
    Exit,
    example,
    gate_file_option,
    json_option,
    options_from_click,
    public_key,
    public_key_option,
    recording_options,
    reports_refusals,
)
from observe.refusals import OutExists

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from gates.language import Gate
    from gates.report import Facts
    from gates.verdict import Verdict

#: A gate file or name that is not valid (gates.refusals: by name, so that ``record`` loads no gates) is a
#: usage error (exit 2), printed as every refusal is.
GATE_USAGE = {"gate-file": Exit.USAGE, "gate-unknown": Exit.USAGE}

__all__ = ["COMMANDS", "complete_gate_name", "gate_command", "gates_command", "verdict_command"]


def complete_gate_name(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion for a gate NAME: the built-in gates and those of any ``--gate-file`` given so far."""
    from click.shell_completion import CompletionItem

    from gates.refusals import GateFileError
    from gates.registry import builtin_gates, load_user_gate

    found = {name: g.description for name, g in builtin_gates().items()}
    for path in ctx.params.get("gate_files") or ():
        try:
            g = load_user_gate(path)
        except (GateFileError, OSError):
            continue
        found[g.name] = g.description
    return [CompletionItem(n, help=(d or None)) for n, d in sorted(found.items()) if n.startswith(incomplete)]


def _terminal_width(stream: Any) -> int:
    """The width of the terminal ``stream`` writes to (the table may go to stderr while stdout is piped)."""
    import shutil

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


def _emit(
    v: Verdict,
    *,
    stream: str,
    stream_id: str,
    facts: Facts | None,
    as_json: bool,
    junit: Path | None,
    summary: Path | None,
    table_err: bool,
    key_id: str | None,
) -> bool:
    """Print the verdict and publish it for CI (``observe.ci.publish``); False when a report asked for failed."""
    from gates import report
    from observe.ci.publish import publish_verdict

    if as_json:
        click.echo(report.to_json(v, stream=stream, stream_id=stream_id), nl=False)
    else:
        target = sys.stderr if table_err else sys.stdout
        tty = target.isatty()
        width = _terminal_width(target) if tty else None
        text = report.table(v, width=width, stream=stream, colour=report.use_colour(tty, os.environ), facts=facts)
        click.echo(text, nl=False, err=table_err, color=True)
    return publish_verdict(
        v,
        stream=stream,
        stream_id=stream_id,
        env=os.environ,
        json_stdout=as_json,
        junit=junit,
        summary=summary,
        facts=facts,
        key_id=key_id,
        echo=_echo,
    )


def _echo(text: str, to_stderr: bool) -> None:
    click.echo(text, err=to_stderr)


_REPORT_OPTIONS = [
    json_option("Print the verdict, stream path and id as JSON."),
    click.option(
        "--junit",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="Also write the verdict as JUnit XML (missing folders are created).",
    ),
    click.option(
        "--summary",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="Also write the verdict as markdown (for buildkite-agent annotate; under Buildkite the default "
        "is STREAM.md).",
    ),
]


def _report_options(func: Any) -> Any:
    for option in reversed(_REPORT_OPTIONS):
        func = option(func)
    return func


@example(
    "alpha observe gate exit-zero --junit reports/junit.xml -- make test",
    "alpha observe gate distributed-device -- bash scripts/ci/distributed-device.sh OUT",
)
@click.command("gate", cls=CommandAfterOptions)
@click.argument("name", shell_complete=complete_gate_name)
@recording_options
@gate_file_option("Load gates from a TOML gate file (repeatable).")
@_report_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_refusals(Exit.RECORDER, by_name={OutExists.name: Exit.USAGE, **GATE_USAGE})
def gate_command(
    name: str,
    gate_files: tuple[Path, ...],
    as_json: bool,
    junit: Path | None,
    summary: Path | None,
    command: tuple[str, ...],
    **kwargs: Any,
) -> None:
    """Record COMMAND, evaluate gate NAME over it, and seal the verdict into the stream.

    Exit codes: 0 pass, 1 fail, 3 inconclusive, 125 the recorder failed (or
    a report asked for cannot be written), 123 COMMAND replaced or edited the
    stream file (the recorder put its own back), 2 usage: an unknown gate, a
    mistyped option or an --out that exists (out-exists) is refused before
    COMMAND runs. With --json, stdout is one
    JSON document and the command's echo goes to stderr.
    """
    from gates.registry import resolve_gate
    from observe.ci.publish import prepare_files
    from observe.recorder.gating import run_gate

    argv = list(command)
    gate_ = resolve_gate(name, gate_files)  # gate-file, gate-unknown: refused (exit 2) before COMMAND runs
    if not prepare_files(((junit, "the JUnit report"), (summary, "the summary")), _echo):
        sys.exit(Exit.RECORDER)  # before the command runs, as for an --out that cannot be written
    outcome = run_gate(gate_, argv, options_from_click(**kwargs, echo_to_stderr=as_json))
    if outcome.verdict is None:
        click.echo(f"alpha observe gate: the recorder failed; no sealed verdict in {outcome.record.path}", err=True)
        sys.exit(Exit.RECORDER)
    v = outcome.verdict
    ok = _emit(
        v,
        stream=str(outcome.record.path),
        stream_id=outcome.record.stream_id,
        facts=outcome.facts,
        as_json=as_json,
        junit=junit,
        summary=summary,
        table_err=True,
        key_id=outcome.record.seal.key_id if outcome.record.seal is not None else None,
    )
    sys.exit(outcome.exit_code if ok else Exit.RECORDER)  # 125 for a verdict sealed when the machine failed


@example("alpha observe verdict downloaded/ci.aos --key ci.pub --junit reports/junit.xml")
@click.command("verdict")
@click.argument("stream", type=STREAM)
@_report_options
@public_key_option("Also require the seal to be signed by this Ed25519 public key.")
@reports_refusals()
def verdict_command(stream: Path, as_json: bool, junit: Path | None, summary: Path | None, key: str | None) -> None:
    """Verify STREAM, print its sealed verdict, and exit with it (never re-evaluates).

    Exit codes: 0 pass, 1 fail, 3 inconclusive; 1 also when the stream is not
    intact and sealed (or not signed by --key), or holds no verdict (the
    refusal is printed); 125 when a report asked for cannot be written.
    Without a key the chain proves integrity against accident, not against a
    forger who recomputes it.
    """
    from aos.verify import require_verdict, verify_stream
    from gates.verdict import Verdict
    from observe.ci.junit import stream_facts
    from observe.ci.systems import system_for

    checked = verify_stream(stream, public_key(key))
    v = Verdict.from_attrs(require_verdict(checked))
    # The facts name the stream's simulated GPUs in the table too (and feed --junit, the summary and what a CI reads).
    reports = junit is not None or summary is not None or system_for(os.environ) is not None
    facts = stream_facts(stream, v) if reports or not as_json else None
    ok = _emit(
        v,
        stream=str(stream),
        stream_id=checked.stream_id,
        facts=facts,
        as_json=as_json,
        junit=junit,
        summary=summary,
        table_err=False,
        key_id=checked.key_id if checked.signed else None,
    )
    sys.exit(v.exit_code if ok else Exit.RECORDER)


def _gate_doc(g: Gate) -> dict[str, Any]:
    parts = []
    for part in g.parts:
        parts.append(
            {
                "name": part.name,
                "when": None if part.when is None else part.when.describe(),
                "scope": part.scope or g.scope,
                "rules": [
                    {
                        "id": rule.id,
                        "rule": rule.describe(),
                        "when": None if rule.when is None else rule.when.describe(),
                    }
                    for rule in part.rules
                ],
            }
        )
    extra = (
        [
            {"id": "receipts-after-exit", "rule": "no receipt arrives after the command exited"},
            {"id": "receipts-invalid", "rule": "every receipt line is a valid receipt"},
        ]
        if g.uses_receipts
        else []
    )
    return {
        "name": g.name,
        "source": g.source,
        "sha256": g.digest,
        "description": g.description,
        "scope": g.scope,
        "parts": parts,
        "receipt_checks": extra,
    }


@example("alpha observe gates exit-zero", "alpha observe gates --gate-file samples/gates/nightly.toml")
@click.command("gates")
@click.argument("name", required=False, shell_complete=complete_gate_name)
@gate_file_option("Also list the gates of a TOML gate file (repeatable).")
@json_option("Print the gates as one JSON document.")
@reports_refusals(by_name=GATE_USAGE)
def gates_command(name: str | None, gate_files: tuple[Path, ...], as_json: bool) -> None:
    """List every gate, one line each; with NAME, gate NAME and its rules."""
    from gates.refusals import UnknownGate
    from gates.registry import builtin_gates, load_user_gate

    found = dict(builtin_gates())
    for p in gate_files:
        g = load_user_gate(p)  # gate-file
        found[g.name] = g
    if name is not None:
        if name not in found:
            raise UnknownGate(f"no gate named {name!r} (known: {', '.join(sorted(found))})")
        found = {name: found[name]}
    if as_json:
        import json

        docs = [_gate_doc(g) for g in sorted(found.values(), key=lambda g: g.name)]
        click.echo(json.dumps({"gates": docs}, indent=2, sort_keys=True))
        return
    if name is None:  # one line per gate; its rules with NAME
        width = max(len(g.name) for g in found.values())
        for g in sorted(found.values(), key=lambda g: g.name):
            about = _plain(g.description) if g.description else "(no description)"
            click.echo(f"{g.name:<{width}}  {about} [{g.source}]")
        return
    g = found[name]
    click.echo(f"{g.name}  ({g.source})")
    if g.description:
        click.echo(f"  {_plain(g.description)}")
    for part in g.parts:
        if part.when is None:
            click.echo(f"  always (scope of a pass: {g.scope}):")
        else:
            click.echo(f"  {part.name}, when {part.when.describe()} (scope of a pass: {part.scope or g.scope}):")
        for rule in part.rules:
            cond = f"  [when {rule.when.describe()}]" if rule.when is not None else ""
            click.echo(f"    {rule.id}: {_plain(rule.describe())}{cond}")
    if g.uses_receipts:
        click.echo("    receipts-after-exit: no receipt arrives after the command exited")
        click.echo("    receipts-invalid: every receipt line is a valid receipt")


_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|ref):`~?([^`]+)`")


def _plain(text: str) -> str:
    """Text for a terminal: reStructuredText markup (``code``, :func:`name`) as the plain words it marks."""
    return _RST_ROLE.sub(r"\1", _RST_LITERAL.sub(r"\1", text))


COMMANDS: list[click.Command] = [gate_command, verdict_command, gates_command]
