"""The ``alpha`` command line: a thin layer over library functions.

Only click is imported at start-up; each command imports what it needs when it
runs, so light commands (``receipt``, ``step``) never load pyarrow.
Refusals print ``refused: NAME: detail`` on stderr; usage errors exit 2.
"""

from __future__ import annotations

import click

from observe.cli.refusing import refuse

__all__ = ["main", "observe", "refuse"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="alpha-observe", prog_name="alpha")
def main() -> None:
    """alpha: record commands as sealed evidence streams and gate on them."""


@main.group()
def observe() -> None:
    """Record commands as AOS streams, read them back, verify them, gate on them."""


#: Examples for the commands that do not end their own ``--help`` with one (groups, tracker):
#: every command's help ends with an example (tests/test_ci_cli.py holds it to that).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "alpha": ("alpha observe gate exit-zero -- make test",),
    "alpha observe": ("alpha observe record --out run.aos -- make test", "alpha observe show run.aos"),
    "alpha observe attach": ("alpha observe attach ci.aos --tracker progress.sqlite3 --run 3",),
    "alpha observe attest": ("alpha observe attest ci.aos --key ci.key -o ci.intoto.json",),
    "alpha observe export": ("alpha observe export ci.aos --format otlp -o ci.otlp.json",),
    "alpha observe query": ('alpha observe query "SELECT verdict, count(*) FROM streams GROUP BY ALL" aos-streams/',),
    "alpha observe push": ("alpha observe push ci.aos --store s3://evidence/ci",),
    "alpha observe fetch": ("alpha observe fetch s3://evidence/ci/<blake3>.aos -o ci.aos",),
    "alpha tracker": ("alpha tracker --db progress.sqlite3 status",),
    "alpha tracker audit": ("alpha tracker audit --json",),
    "alpha tracker device": ("alpha tracker device add --product 'NVIDIA GeForce RTX 3090' --uuid GPU-aaaa",),
    "alpha tracker device add": (
        "alpha tracker device add --product 'NVIDIA GeForce RTX 3090' --uuid GPU-aaaa --driver 580.65.06",
    ),
    "alpha tracker experiment": ("alpha tracker experiment add E1 --item N10",),
    "alpha tracker experiment add": ("alpha tracker experiment add E1 --item N10 --description 'split run'",),
    "alpha tracker init": ("alpha tracker init",),
    "alpha tracker item": ("alpha tracker item list -m M1",),
    "alpha tracker item add": ("alpha tracker item add N10 'resume from checkpoint' -m M1 --hardware -d N9",),
    "alpha tracker item list": ("alpha tracker item list -m M1 --status planned",),
    "alpha tracker item set": ("alpha tracker item set N10 --status verified --run 3",),
    "alpha tracker key": ("alpha tracker key add ci.pub",),
    "alpha tracker key add": ("alpha tracker key add ci.pub",),
    "alpha tracker measure": ("alpha tracker measure 3 step-time 0.42 --unit s",),
    "alpha tracker milestone": ("alpha tracker milestone add M1 'first light'",),
    "alpha tracker milestone add": ("alpha tracker milestone add M1 'first light' --position 1",),
    "alpha tracker next": ("alpha tracker next",),
    "alpha tracker run": (
        'RUN=$(alpha tracker run start --lane exit-zero) && alpha tracker run finish "$RUN" --state completed',
    ),
    "alpha tracker run finish": ("alpha tracker run finish 3 --state completed --physical-pass",),
    "alpha tracker run list": ("alpha tracker run list --json",),
    "alpha tracker run start": ("alpha tracker run start --experiment E1 --lane distributed-device --device GPU-aaaa",),
    "alpha tracker show": ("alpha tracker show N10",),
    "alpha tracker site": ("alpha tracker --db progress.sqlite3 site public/tracker",),
    "alpha tracker status": ("alpha tracker status --json",),
    "alpha tracker vacuum": ("alpha tracker vacuum",),
}


def _add_examples(command: click.Command, path: str) -> None:
    """Give each command without an example in its help the one of ``EXAMPLES``."""
    if not command.epilog and path in EXAMPLES:
        lines = "\n".join(f"  {line}" for line in EXAMPLES[path])
        command.epilog = f"Example:\n\n\b\n{lines}"
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            _add_examples(sub, f"{path} {name}")


def _register() -> None:
    # Each command lives in the module of the idea it belongs to; importing them is
    # cheap (click only), the heavy imports happen inside the commands.
    from observe.cli import gate as cli_gate
    from observe.cli import interop as cli_interop
    from observe.cli import query as cli_query
    from observe.cli import read as cli_read
    from observe.cli import record as cli_record
    from observe.cli import report as cli_report
    from observe.cli import store as cli_store
    from tracker import cli as tracker_cli

    for command in (
        *cli_read.COMMANDS,
        *cli_record.COMMANDS,
        *cli_gate.COMMANDS,
        *cli_store.COMMANDS,  # push, fetch
        *cli_interop.COMMANDS,  # attest, export
        *cli_report.COMMANDS,  # report
        *cli_query.COMMANDS,  # query
        tracker_cli.attach,
    ):
        observe.add_command(command)
    main.add_command(tracker_cli.tracker)

    _add_examples(main, "alpha")


_register()
