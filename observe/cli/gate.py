"""The gate commands: ``gate``, ``verdict``, ``gates``.

``gate NAME -- CMD`` records CMD exactly as ``record`` does; just before the
seal it reads the stream back, evaluates the gate and appends one ``verdict``
event, so the verdict is sealed with the evidence it rests on. ``verdict``
verifies a stream and prints its sealed verdict without re-evaluating it.

Both report the verdict where CI reads it (``observe.ci.systems``): JUnit XML
(``--junit``), a markdown summary (``--summary``; under GitHub Actions also
``$GITHUB_STEP_SUMMARY``, under Buildkite ``STREAM.md`` by default), step outputs
(``$GITHUB_OUTPUT``) and annotations (``::error``/``::warning``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from observe.cli.record import (
    CommandAfterOptions,
    example,
    options_from_click,
    public_key_option,
    recording_options,
)

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from gates.language import Gate
    from gates.report import Facts
    from gates.verdict import Verdict

__all__ = ["COMMANDS", "complete_gate_name", "gate", "gates", "verdict"]

#: Exit code when a report that was asked for (--junit, --summary) cannot be written.
REPORT_FAILED = 125


F = TypeVar("F", bound=Callable[..., Any])


def gate_file_option(help_text: str) -> Callable[[F], F]:
    """The ``--gate-file FILE`` option (repeatable), as every command that resolves gates takes it."""
    return click.option(
        "--gate-file",
        "gate_files",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        help=help_text,
    )


def complete_gate_name(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion for a gate NAME: the built-in gates and those of any ``--gate-file`` given so far."""
    from click.shell_completion import CompletionItem

    from gates.language import GateFileError
    from gates.registry import builtin_gates, load_user_gate

    found = {name: g.description for name, g in builtin_gates().items()}
    for path in ctx.params.get("gate_files") or ():
        try:
            g = load_user_gate(path)
        except (GateFileError, OSError):
            continue
        found[g.name] = g.description
    return [CompletionItem(n, help=(d or None)) for n, d in sorted(found.items()) if n.startswith(incomplete)]


def _resolve(name: str, gate_files: tuple[Path, ...]) -> Gate:
    from gates.language import GateFileError
    from gates.registry import resolve_gate

    try:
        return resolve_gate(name, gate_files)
    except GateFileError as exc:
        raise click.UsageError(exc.diagnostics()) from None


def _say(message: str) -> None:
    click.echo(f"alpha observe: {message}", err=True)


def _prepare(path: Path, what: str) -> bool:
    """Create ``path``'s missing folders and check it can be written (before a command runs)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab"):
            pass
    except OSError as exc:
        _say(f"cannot write {what} {path}: {exc.strerror or exc}")
        return False
    return True


def _write(path: Path, text: str, what: str) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        _say(f"cannot write {what} {path}: {exc.strerror or exc}")
        return False
    return True


def _github(v: Verdict, stream: str, stream_id: str, markdown: str) -> None:
    """GitHub Actions: the job summary and the step outputs (a failure to write them is said, not fatal)."""
    from observe.ci.systems import append_github_outputs, append_text

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            append_text(Path(summary), markdown)
        except OSError as exc:
            _say(f"cannot append to GITHUB_STEP_SUMMARY {summary}: {exc.strerror or exc}")
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        values = {"verdict": v.verdict, "scope": v.scope, "stream": stream, "stream_id": stream_id}
        try:
            append_github_outputs(Path(output), values)
        except OSError as exc:
            _say(f"cannot append to GITHUB_OUTPUT {output}: {exc.strerror or exc}")


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
) -> bool:
    """Print the verdict and write every report; False when a report asked for could not be written."""
    from gates import report
    from observe.ci import junit as ci_junit
    from observe.ci.systems import BUILDKITE, GITHUB, detect

    if as_json:
        click.echo(report.to_json(v, stream=stream, stream_id=stream_id), nl=False)
    else:
        target = sys.stderr if table_err else sys.stdout
        tty = target.isatty()
        width = _terminal_width(target) if tty else None
        text = report.table(v, width=width, stream=stream, colour=report.use_colour(tty, os.environ))
        click.echo(text, nl=False, err=table_err, color=True)
    ok = True
    if junit is not None:
        ok = _write(junit, ci_junit.junit_report(v, stream=stream, facts=facts), "the JUnit report") and ok
    ci = detect(os.environ)
    markdown = ci_junit.summary_markdown(v, stream=stream, stream_id=stream_id, facts=facts)
    if summary is None and ci == BUILDKITE:
        summary = Path(stream + ".md")
    if summary is not None:
        ok = _write(summary, markdown, "the summary") and ok
        if ci == BUILDKITE:
            style = {"pass": "success", "fail": "error", "inconclusive": "warning"}[v.verdict]
            _say(f"summary in {summary} (buildkite-agent annotate --style {style} --context alpha-observe < {summary})")
    if ci == GITHUB:
        for line in ci_junit.github_lines(v, facts):
            click.echo(line, err=as_json)  # --json keeps stdout one JSON document; the runner reads both
        _github(v, stream, stream_id, markdown)
    return ok


_REPORT_OPTIONS = [
    click.option(
        "--json", "as_json", is_flag=True, default=False, help="Print the verdict, stream path and id as JSON."
    ),
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


@click.command(
    cls=CommandAfterOptions,
    epilog=example(
        "alpha observe gate exit-zero --junit reports/junit.xml -- make test",
        "alpha observe gate distributed-device -- bash scripts/ci/distributed-device.sh OUT",
    ),
)
@click.argument("name", shell_complete=complete_gate_name)
@recording_options
@gate_file_option("Load gates from a TOML gate file (repeatable).")
@_report_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def gate(
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
    a report asked for cannot be written), 2 usage: an unknown gate or a
    mistyped option is refused before COMMAND runs. With --json, stdout is one
    JSON document and the command's echo goes to stderr.
    """
    from aos.refusals import Refusal
    from observe.cli.refusing import refuse
    from observe.recorder.gating import run_gate

    argv = list(command)
    gate_ = _resolve(name, gate_files)
    for path, what in ((junit, "the JUnit report"), (summary, "the summary")):
        if path is not None and not _prepare(path, what):
            sys.exit(REPORT_FAILED)  # before the command runs, as for an --out that cannot be written
    try:
        outcome = run_gate(gate_, argv, options_from_click(**kwargs, echo_to_stderr=as_json))
    except Refusal as exc:
        refuse(exc, 125)
    if outcome.verdict is None:
        click.echo(f"alpha observe gate: the recorder failed; no sealed verdict in {outcome.record.path}", err=True)
        sys.exit(125)
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
    )
    sys.exit(v.exit_code if ok else REPORT_FAILED)


@click.command(
    epilog=example(
        "alpha observe verdict downloaded/ci.aos --key ci.pub --junit reports/junit.xml",
    )
)
@click.argument("stream", type=click.Path(path_type=Path))  # a directory is stream-missing, not a usage error
@_report_options
@public_key_option("Also require the seal to be signed by this Ed25519 public key.")
def verdict(stream: Path, as_json: bool, junit: Path | None, summary: Path | None, key: str | None) -> None:
    """Verify STREAM, print its sealed verdict, and exit with it (never re-evaluates).

    Exit codes: 0 pass, 1 fail, 3 inconclusive; 1 also when the stream is not
    intact and sealed (or not signed by --key), or holds no verdict (the
    refusal is printed); 125 when a report asked for cannot be written.
    Without a key the chain proves integrity against accident, not against a
    forger who recomputes it.
    """
    from aos.refusals import Refusal
    from aos.verify import require_verdict, verify_stream
    from gates.verdict import Verdict
    from observe.cli.refusing import refuse

    try:
        public = None
        if key is not None:
            from aos.signing import load_public_key

            public = load_public_key(key)
        checked = verify_stream(stream, public)
        v = Verdict.from_attrs(require_verdict(checked))
    except Refusal as exc:
        refuse(exc, 1)
    from observe.ci.junit import stream_facts
    from observe.ci.systems import GITHUB, detect

    facts = stream_facts(stream, v) if junit is not None or detect(os.environ) == GITHUB else None
    ok = _emit(
        v,
        stream=str(stream),
        stream_id=checked.stream_id,
        facts=facts,
        as_json=as_json,
        junit=junit,
        summary=summary,
        table_err=False,
    )
    sys.exit(v.exit_code if ok else REPORT_FAILED)


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


@click.command(
    epilog=example("alpha observe gates exit-zero", "alpha observe gates --gate-file samples/gates/nightly.toml")
)
@click.argument("name", required=False, shell_complete=complete_gate_name)
@gate_file_option("Also list the gates of a TOML gate file (repeatable).")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the gates as one JSON document.")
def gates(name: str | None, gate_files: tuple[Path, ...], as_json: bool) -> None:
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
    if as_json:
        import json

        docs = [_gate_doc(g) for g in sorted(found.values(), key=lambda g: g.name)]
        click.echo(json.dumps({"gates": docs}, indent=2, sort_keys=True))
        return
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
