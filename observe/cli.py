"""The ``alpha`` command line: a thin layer over library functions.

Only click is imported at start-up; each command imports what it needs when it
runs, so light commands (``receipt``, ``step``) never load pyarrow.
Refusals print ``refused: NAME: detail`` on stderr; usage errors exit 2.
"""

from __future__ import annotations

import click

from observe.cli_errors import refuse

__all__ = ["main", "observe", "refuse"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="alpha-observe", prog_name="alpha")
def main() -> None:
    """alpha: record commands as sealed evidence streams and gate on them."""


@main.group()
def observe() -> None:
    """Record commands as AOS streams, read them back, verify them, gate on them."""


def _register() -> None:
    # Each command lives in the module of the idea it belongs to; importing them is
    # cheap (click only), the heavy imports happen inside the commands.
    from observe import cli_gate, cli_read, cli_record, cli_store
    from tracker import cli as tracker_cli

    for command in (*cli_read.COMMANDS, *cli_record.COMMANDS, *cli_gate.COMMANDS, tracker_cli.attach):
        observe.add_command(command)
    for command in cli_store.COMMANDS:
        observe.add_command(command)
    main.add_command(tracker_cli.tracker)


_register()
