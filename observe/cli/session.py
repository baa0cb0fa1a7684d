"""``alpha observe session`` and ``alpha observe node``: fleet sessions (observe.session)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from observe.cli.options import (
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
    without_numpy,
)
from observe.refusals import OutExists

__all__ = [
    "COMMANDS",
    "node_command",
    "session_gate_command",
    "session_group",
    "session_run_command",
    "session_verify_command",
]


@example("alpha observe session run fleet.json --dir run-7 -- ./launch.sh")
@click.group("session")
def session_group() -> None:
    """Fleet sessions: one sealed checkpoint over the streams every node sealed (docs/NODES.md)."""


def _no_out(kwargs: dict[str, Any]) -> None:
    if kwargs.get("out") is not None:
        raise click.UsageError("a session's streams lie where its folder puts them: no --out here")


def _session_place(directory: Path | None, origin: str | None) -> tuple[Path, str]:
    """The session folder and origin a member belongs to: the options, else the launcher's environment."""
    from observe.env import SessionVars
    from observe.refusals import SessionSpec

    folder = directory if directory is not None else os.environ.get(SessionVars.DIR)
    named = origin if origin is not None else os.environ.get(SessionVars.ORIGIN)
    if not folder or not named:
        raise SessionSpec(
            f"no session to belong to: give --session-dir and --origin, or run under a session's launcher "
            f"({SessionVars.DIR}, {SessionVars.ORIGIN})"
        )
    return Path(folder), named


def _member_options(func: Any) -> Any:
    func = click.option(
        "--origin", default=None, metavar="ORIGIN", help="The session's origin (default: $ALPHA_FLEET_ORIGIN)."
    )(func)
    return click.option(
        "--session-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        metavar="DIR",
        help="The session's folder (default: $ALPHA_FLEET_DIR).",
    )(func)


@example(
    "alpha observe session run fleet.json --dir run-7 --sign-key session.key -- ./launch.sh",
    "alpha observe session run rack.json --member rack-0 --sign-key rack-0.key -- ./launch-rack.sh",
)
@session_group.command("run", cls=CommandAfterOptions)
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The session's folder (required unless --member puts it in the parent session's).",
)
@click.option("--member", default=None, metavar="NAME", help="Run as sub-session NAME of the enclosing session.")
@_member_options
@recording_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_refusals(
    Exit.RECORDER, by_name={OutExists.name: Exit.USAGE, "session-spec": Exit.USAGE, "session-unsigned": Exit.USAGE}
)
def session_run_command(
    spec: Path,
    directory: Path | None,
    member: str | None,
    session_dir: Path | None,
    origin: str | None,
    command: tuple[str, ...],
    **kwargs: Any,
) -> None:
    """Record COMMAND (the launcher) as the coordinating recording of a session of SPEC's members.

    The stream declares SPEC's expected members first; COMMAND runs with
    ALPHA_FLEET_DIR and ALPHA_FLEET_ORIGIN set, for the node recorders and
    sub-sessions it starts. When it ends, each member is judged from its sealed
    stream in the folder (signed by the key SPEC declares for it), and the session
    seals a checkpoint over the proven ones (DIR/checkpoint, DIR/proofs/NAME.proof).
    A SPEC member without a key is refused (session-unsigned) unless SPEC says
    "unsigned": true. Exit: COMMAND's code when it failed; 3 when a member did not
    run, is not proven, or has no key (each named on stderr); 0 when every member
    is proven by its key.
    """
    without_numpy()
    from observe.session.coordinator import Parent, run_session
    from observe.session.spec import read_spec

    _no_out(kwargs)
    parent = None
    if member is not None:
        from observe.session import layout

        folder, parent_origin = _session_place(session_dir, origin)
        parent = Parent(parent_origin, member)
        directory = directory or layout.sub_session(folder, member)
    if directory is None:
        raise click.UsageError("name the session's folder: --dir DIR (or --member NAME inside a session)")
    outcome = run_session(read_spec(spec), directory, command, options_from_click(**kwargs), parent=parent)
    for j in outcome.missing:
        click.echo(f"alpha observe: session member {j.name}: {j.status}: {j.reason}", err=True)
    for j in outcome.unsigned:
        click.echo(f"alpha observe: session member {j.name}: unsigned: the spec declares no key for it", err=True)
    sys.exit(outcome.exit_code)


@example("alpha observe node node-3 --sign-key /etc/alpha-observe/node-3.key -- ./train.sh")
@click.command("node", cls=CommandAfterOptions)
@click.argument("name")
@_member_options
@recording_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_refusals(Exit.RECORDER, by_name={OutExists.name: Exit.USAGE, "session-spec": Exit.USAGE})
def node_command(
    name: str, session_dir: Path | None, origin: str | None, command: tuple[str, ...], **kwargs: Any
) -> None:
    """Record COMMAND on this node as member NAME of a session; seal it at DIR/nodes/NAME.aos.

    The node's GPUs and processes are observed as `record` observes them. Sign
    with the key the session's spec declares for NAME (--sign-key or
    --sign-key-env): the session proves a member only by a stream its declared
    key signed. Exit codes are `record`'s.
    """
    without_numpy()
    from observe.session.node import run_node

    _no_out(kwargs)
    folder, named = _session_place(session_dir, origin)
    result = run_node(name, folder, named, command, options_from_click(**kwargs))
    sys.exit(result.exit_code)


@example(
    "alpha observe session verify run-7 --key session.pub", "alpha observe session verify run-7 --member rack-0/node-3"
)
@session_group.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--member", default=None, metavar="PATH", help="Walk one path only (NAME/NAME/...).")
@public_key_option("Ed25519 public key (PEM) the session's seal and checkpoint note must be signed by.")
@json_option("Print the session and every member as JSON.")
@reports_refusals()
def session_verify_command(directory: Path, member: str | None, key: str | None, as_json: bool) -> None:
    """Verify a session offline from its folder: its stream, its checkpoint, each member's stream and proof.

    Each member's stream must be signed by the key the session declared for it.
    Prints each member not proven, and why, and each the session declared without
    a key (unsigned). Exit 0 every member proven by its key; 3 the session sealed
    some as not run or not proven, or some are unsigned; 1 a member changed since
    the session sealed it, or the session itself does not verify (refused: NAME).
    """
    from observe.session.verify import verify_session

    report = verify_session(directory, public_key(key), member)
    if as_json:
        doc = {
            "origin": report.origin,
            "size": report.size,
            "root": report.root,
            "signed": report.signed,
            "members": [
                {
                    "path": m.path,
                    "kind": m.kind,
                    "status": m.status,
                    "reason": m.reason,
                    "sealed": m.sealed,
                    "key_id": m.key_id,
                }
                for m in report.members
            ],
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        proven = len(report.members) - len(report.not_proven)
        signed = ", checkpoint signature good" if report.signed else ""
        click.echo(f"session {report.origin}: {report.size} leaves, root {report.root}{signed}")
        for m in report.not_proven:
            since = "" if m.sealed else " (since the session sealed)"
            click.echo(f"  {m.status}{since}: {m.path}: {m.reason}")
        for m in report.unsigned:
            click.echo(f"  unsigned: {m.path}: the session declared no key for it: proven by its own labels only")
        unsigned = f" ({len(report.unsigned)} of them unsigned)" if report.unsigned else ""
        click.echo(f"{proven} proven{unsigned}, {len(report.not_proven)} did not run or not proven")
    sys.exit(report.exit_code)


@example(
    "alpha observe session gate run-7 --gate exit-zero --key session.pub",
    "alpha observe session gate run-7 --gate lane --gate-file lane.toml",
)
@session_group.command("gate")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--gate", "name", required=True, metavar="NAME", help="The gate each node stream is judged by.")
@gate_file_option("Load gates from a TOML gate file (repeatable).")
@public_key_option("Ed25519 public key (PEM) the session's seal and checkpoint note must be signed by.")
@reports_refusals(by_name={"gate-file": Exit.USAGE, "gate-unknown": Exit.USAGE})
def session_gate_command(directory: Path, name: str, gate_files: tuple[str, ...], key: str | None) -> None:
    """Judge a session offline: the gate over each proven node stream, each member that did not run, is not
    proven or has no declared key inconclusive by name, and no GPU observed by two members.

    Exit 0 pass, 1 fail, 3 inconclusive; 1 and refused: NAME when the session itself does not verify.
    """
    from gates.registry import resolve_gate
    from observe.session.gating import gate_session

    gate = resolve_gate(name, gate_files)
    verdict = gate_session(directory, gate, public_key(key))
    click.echo(verdict.summary)
    for check in verdict.failing():
        click.echo(f"  {check.status}: {check.name}: {check.reason}")
    sys.exit(verdict.exit_code)


COMMANDS = [session_group, node_command]
