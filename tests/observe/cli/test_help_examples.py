"""Every ``--help`` under ``alpha`` shows its example block exactly once, written beside its command."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from observe.cli.root import main

#: The heading of an example block as click prints it (a docstring could say "Examples:" too).
HEADING = re.compile(r"^\s*Examples?:\s*$")


def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    """Every command and group below ``cmd``, with the words that name it."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from walk(sub, [*path, name])


COMMANDS = list(walk(main, []))


def help_text(path: list[str]) -> str:
    """What ``alpha PATH --help`` prints."""
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="alpha")
    assert 0 == result.exit_code, result.output
    return result.output


class TestExamples:
    @pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "alpha")
    def test_one_example_block(self, path: list[str]) -> None:
        """The --help of every command and group holds exactly one example block."""
        headings = [line for line in help_text(path).splitlines() if HEADING.match(line)]
        assert 1 == len(headings), help_text(path)

    def test_every_leaf_command_has_its_own_example(self) -> None:
        """Every command that is not a group carries an example of its own (its epilog), none inherited."""
        missing = [" ".join(p) for p, c in COMMANDS if not isinstance(c, click.Group) and not c.epilog]
        assert [] == missing

    def test_no_example_in_a_docstring(self) -> None:
        """Examples live only in the epilog the example mechanism writes, never in a command's own help text."""
        inline = [" ".join(p) for p, c in COMMANDS if c.help and any(HEADING.match(x) for x in c.help.splitlines())]
        assert [] == inline

    def test_example_refuses_a_second_block(self) -> None:
        """Giving a command a second example block is a programming error, raised at import."""
        from observe.cli.options import example

        @example("alpha demo one")
        @click.command("demo")
        def demo_command() -> None:
            """A demo."""

        with pytest.raises(ValueError, match="already has an example"):
            example("alpha demo two")(demo_command)
