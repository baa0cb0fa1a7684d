"""The ``alpha`` command line: a thin layer over library functions.

Only click is imported at start-up; each command imports what it needs when it
runs, so light commands (``receipt``, ``step``) never load pyarrow.
Refusals print ``refused: NAME: detail`` on stderr; usage errors exit 2.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from aos.refusals import Refusal

__all__ = ["main", "observe", "refuse"]


def refuse(exc: Refusal, code: int = 1) -> NoReturn:
    """Print a refusal the one way the CLI prints them, and exit."""
    click.echo(exc.diagnostics(), err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="alpha-observe", prog_name="alpha")
def main() -> None:
    """alpha: record commands as sealed evidence streams and gate on them."""


@main.group()
def observe() -> None:
    """Record commands as AOS streams, read them back, verify them, gate on them."""


def _register() -> None:
    # Each command lives in the module of the idea it belongs to.
    from observe import cli_read

    for command in cli_read.COMMANDS:
        observe.add_command(command)
    # -- registration of further command modules (one line each) --
    try:
        from observe import cli_record
    except ImportError:  # pragma: no cover - during bring-up only
        cli_record = None  # type: ignore[assignment]
    if cli_record is not None:
        for command in cli_record.COMMANDS:
            observe.add_command(command)
    try:
        from gates import cli as gates_cli
    except ImportError:  # pragma: no cover - during bring-up only
        gates_cli = None  # type: ignore[assignment]
    if gates_cli is not None:
        for command in gates_cli.COMMANDS:
            observe.add_command(command)
    try:
        from tracker import cli as tracker_cli
    except ImportError:  # pragma: no cover - during bring-up only
        tracker_cli = None  # type: ignore[assignment]
    if tracker_cli is not None:
        observe.add_command(tracker_cli.attach)
        main.add_command(tracker_cli.tracker)


_register()
