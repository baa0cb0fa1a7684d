"""The ``alpha`` command line: a thin layer over library functions.

Only click is imported at start-up; each command imports what it needs when it
runs, so light commands (``receipt``, ``step``) never load pyarrow.
Refusals print ``refused: NAME: detail`` on stderr; usage errors exit 2.
Each command is written as ``observe.cli.options`` says: its example beside it.
"""

from __future__ import annotations

import click

from observe.cli.options import example, one_blas_thread, without_numpy

__all__ = ["main", "observe_group"]


@example("alpha observe gate exit-zero -- make test")
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="alpha-observe", prog_name="alpha")
@click.pass_context
def main(ctx: click.Context) -> None:
    """alpha: record commands as sealed evidence streams and gate on them."""
    if ctx.invoked_subcommand != "observe":
        one_blas_thread()  # the tracker reads streams


@example("alpha observe record --out run.aos -- make test", "alpha observe show run.aos")
@main.group("observe")
@click.pass_context
def observe_group(ctx: click.Context) -> None:
    """Record commands as AOS streams, read them back, verify them, gate on them."""
    if ctx.invoked_subcommand in RUNS_COMMANDS:
        without_numpy()  # neither needs it; so OpenBLAS never starts threads in a recorder
    else:
        one_blas_thread()


#: The commands that run another command, whose environment is the recorder's own.
RUNS_COMMANDS = frozenset({"record", "gate"})


def _register() -> None:
    # Each command lives in the module of the idea it belongs to; importing them is
    # cheap (click only), the heavy imports happen inside the commands.
    from observe.cli import gate as cli_gate
    from observe.cli import interop as cli_interop
    from observe.cli import nodes as cli_nodes
    from observe.cli import query as cli_query
    from observe.cli import read as cli_read
    from observe.cli import record as cli_record
    from observe.cli import report as cli_report
    from observe.cli import store as cli_store
    from observe.cli import tracker as tracker_cli

    for command in (
        *cli_read.COMMANDS,
        *cli_record.COMMANDS,
        *cli_gate.COMMANDS,
        *cli_store.COMMANDS,  # push, fetch
        *cli_interop.COMMANDS,  # attest, export
        *cli_report.COMMANDS,  # report
        *cli_query.COMMANDS,  # query
        *cli_nodes.COMMANDS,  # nodes check
        tracker_cli.attach_command,
    ):
        observe_group.add_command(command)
    main.add_command(tracker_cli.tracker_group)


_register()
