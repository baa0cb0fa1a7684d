"""How a command reports a refusal: one decorator, ``refused: NAME: detail`` on stderr, the command's exit code."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from aos.refusals import Refusal, StreamMissing
from observe.cli.options import Exit, reports_refusals
from observe.cli.root import main
from observe.refusals import QuerySQL


def invoke(command: click.Command, *args: str) -> tuple[int, str]:
    """Run ``command`` in process; its exit code and stderr."""
    result = CliRunner().invoke(command, list(args))
    return result.exit_code, result.stderr


class TestDecorator:
    def test_default_code_and_per_name_codes(self) -> None:
        """A refusal exits with the decorator's code, or with the code given for its name."""

        @click.command()
        @click.argument("which")
        @reports_refusals(Exit.RECORDER, by_name={"query-sql": Exit.USAGE})
        def demo_command(which: str) -> None:
            raise QuerySQL("bad sql") if which == "sql" else StreamMissing("gone")

        assert (125, "refused: stream-missing: gone\n") == invoke(demo_command, "stream")
        assert (2, "refused: query-sql: bad sql\n") == invoke(demo_command, "sql")

    def test_translate_names_other_errors_and_lets_the_rest_through(self) -> None:
        """``translate`` turns a foreign error into its refusal; an error it does not know propagates."""

        def translate(exc: Exception) -> Refusal | None:
            return StreamMissing(str(exc)) if isinstance(exc, LookupError) else None

        @click.command()
        @click.argument("which")
        @reports_refusals(translate=translate)
        def demo_command(which: str) -> None:
            raise KeyError("k") if which == "lookup" else RuntimeError("bug")

        assert (1, "refused: stream-missing: 'k'\n") == invoke(demo_command, "lookup")
        result = CliRunner().invoke(demo_command, ["other"])
        assert isinstance(result.exception, RuntimeError)

    def test_usage_errors_are_not_refusals(self) -> None:
        """A click usage error inside a decorated command stays a usage error (exit 2)."""

        @click.command()
        @reports_refusals(translate=lambda exc: None)
        def demo_command() -> None:
            raise click.UsageError("no")

        assert 2 == invoke(demo_command)[0]


class TestKeygen:
    def test_an_existing_key_is_refused_by_name(self, tmp_path: Path) -> None:
        """keygen over an existing key pair is refused as key-exists (exit 1) and the key is kept."""
        prefix = str(tmp_path / "k")
        assert 0 == invoke(main, "observe", "keygen", prefix)[0]
        before = (tmp_path / "k.key").read_bytes()
        expected = f"refused: key-exists: {prefix}.key already exists; not overwriting a key\n"
        assert (1, expected) == invoke(main, "observe", "keygen", prefix)
        assert before == (tmp_path / "k.key").read_bytes()

    def test_a_key_that_cannot_be_written_is_refused_by_name(self, tmp_path: Path) -> None:
        """keygen into a folder that does not exist is refused as key-write (exit 1), nothing written."""
        code, err = invoke(main, "observe", "keygen", str(tmp_path / "absent" / "k"))
        assert 1 == code
        assert err.startswith("refused: key-write: ")
        assert [] == list(tmp_path.iterdir())
