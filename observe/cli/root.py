"""The ``alpha`` command line: a thin layer over library functions.

Only click is imported at start-up; a command's module is imported when that command
is asked for (``LazyGroup``: ``alpha observe record`` loads no other command's module),
and each command imports what it needs when it runs, so light commands never load pyarrow.
Refusals print ``refused: NAME: detail`` on stderr; usage errors exit 2.
Each command is written as ``observe.cli.options`` says: its example beside it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from observe.cli.options import example, one_blas_thread, without_numpy

__all__ = ["LAZY", "LazyGroup", "main", "observe_group"]


class LazyGroup(click.Group):
    """A group whose commands' modules are imported when one of them is first asked for.

    ``lazy`` maps each command's name to ``module:attribute``, where ``attribute`` is the command or a list
    of commands (a module's ``COMMANDS``); every command that attribute holds is added when it is loaded.
    ``commands`` (what the tests and click's error messages walk) loads them all: it is the whole group.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lazy: dict[str, str] = {}
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        for name in list(self._lazy):
            self._load(name)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = value

    def add_lazy(self, lazy: Mapping[str, str]) -> None:
        """Register commands by name and ``module:attribute``, none imported yet."""
        self._lazy.update(lazy)

    def _load(self, name: str) -> None:
        where = self._lazy.pop(name, None)
        if where is None:
            return
        module, _, attribute = where.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        for command in found if isinstance(found, list) else [found]:
            self._lazy.pop(command.name or "", None)
            self._commands[command.name or ""] = command
        if name not in self._commands:
            raise LookupError(f"{where} holds no command named {name!r}")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._load(cmd_name)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._commands, *self._lazy})


@example("alpha observe gate exit-zero -- make test")
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="alpha-observe", prog_name="alpha")
@click.pass_context
def main(ctx: click.Context) -> None:
    """alpha: record commands as sealed evidence streams and gate on them."""
    if ctx.invoked_subcommand != "observe":
        one_blas_thread()  # the tracker reads streams


@example("alpha observe record --out run.aos -- make test", "alpha observe show run.aos")
@main.group("observe", cls=LazyGroup)
@click.pass_context
def observe_group(ctx: click.Context) -> None:
    """Record commands as AOS streams, read them back, verify them, gate on them."""
    if ctx.invoked_subcommand in RUNS_COMMANDS:
        without_numpy()  # neither needs it; so OpenBLAS never starts threads in a recorder
    elif ctx.invoked_subcommand in NO_NUMPY_READERS:
        without_numpy()  # a third of pyarrow's import: most of `read --json` of a small stream
    else:
        one_blas_thread()


#: The commands that run another command, whose environment is the recorder's own.
RUNS_COMMANDS = frozenset({"record", "gate", "node", "session"})
#: The readers that never hand numpy anything (Arrow buffers and Python objects only): pyarrow loads without it.
NO_NUMPY_READERS = frozenset({"read"})


#: Each command of the tree, by group: the module that defines it, and the command (or list of commands) there.
#: A module defines its commands beside the idea they belong to; importing it is cheap (click only), the
#: heavy imports happen inside the commands.
LAZY: dict[str, dict[str, str]] = {
    "alpha": {"tracker": "observe.cli.tracker:tracker_group"},
    "observe": {
        **dict.fromkeys(("read", "show", "verify", "keygen"), "observe.cli.read:COMMANDS"),
        **dict.fromkeys(("record", "step", "receipt", "artifact", "tail"), "observe.cli.record:COMMANDS"),
        **dict.fromkeys(("gate", "verdict", "gates"), "observe.cli.gate:COMMANDS"),
        **dict.fromkeys(("push", "fetch"), "observe.cli.store:COMMANDS"),
        **dict.fromkeys(("attest", "export"), "observe.cli.interop:COMMANDS"),
        "report": "observe.cli.report:COMMANDS",
        "query": "observe.cli.query:COMMANDS",
        "nodes": "observe.cli.nodes:COMMANDS",
        **dict.fromkeys(("session", "node"), "observe.cli.session:COMMANDS"),
        "attach": "observe.cli.tracker:attach_command",
    },
}

for _group, _lazy in ((main, LAZY["alpha"]), (observe_group, LAZY["observe"])):
    assert isinstance(_group, LazyGroup)
    _group.add_lazy(_lazy)
