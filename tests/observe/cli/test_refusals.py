"""How a command reports a refusal: one decorator, ``refused: NAME: detail`` on stderr, the command's exit code."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from aos.refusals import Refusal, StreamMissing
from observe.cli import entry
from observe.cli.options import Exit, reports_refusals
from observe.cli.root import main
from observe.env import DebugVars
from observe.refusals import QuerySQL
from tests.helpers.run import alpha


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


class TestGateRefusals:
    """A gate file or name that is not valid prints as every refusal does (never inside click's usage block),
    and stays a usage error: exit 2, before the command runs."""

    def test_an_unknown_gate(self, tmp_path: Path) -> None:
        p = alpha("observe", "gate", "no-such-gate", "--out", "s.aos", "--", "touch", "ran", cwd=tmp_path)
        assert (2, False) == (p.returncode, (tmp_path / "ran").exists())
        assert p.stderr.startswith(b"refused: gate-unknown: no gate named 'no-such-gate'"), p.stderr
        assert 1 == len(p.stderr.splitlines()), p.stderr  # no "Usage: ...", no "Error: ..."

    def test_a_malformed_gate_file(self, tmp_path: Path) -> None:
        (tmp_path / "g.toml").write_text('[gate]\nname = "g"\n[[step]]\n')
        for args in (["gate", "g", "--gate-file", "g.toml", "--", "touch", "ran"], ["gates", "--gate-file", "g.toml"]):
            p = alpha("observe", *args, cwd=tmp_path)
            assert (2, False) == (p.returncode, (tmp_path / "ran").exists()), p.stderr
            assert p.stderr.startswith(b"refused: gate-file: "), p.stderr
            assert 1 == len(p.stderr.splitlines()), p.stderr

    def test_gates_with_an_unknown_name(self, tmp_path: Path) -> None:
        p = alpha("observe", "gates", "no-such-gate", cwd=tmp_path)
        assert 2 == p.returncode
        assert p.stderr.startswith(b"refused: gate-unknown: no gate named 'no-such-gate'"), p.stderr
        assert 1 == len(p.stderr.splitlines()), p.stderr


class TestDebug:
    """``ALPHA_DEBUG=1``: a refusal is printed with the traceback of where it was raised, then its one line,
    with the same exit code; without it, the one line only."""

    def test_a_refusal_shows_its_traceback(self, monkeypatch: pytest.MonkeyPatch) -> None:
        @click.command()
        @reports_refusals(Exit.RECORDER)
        def demo_command() -> None:
            raise StreamMissing("gone")

        monkeypatch.delenv(DebugVars.DEBUG, raising=False)
        assert (125, "refused: stream-missing: gone\n") == invoke(demo_command)
        monkeypatch.setenv(DebugVars.DEBUG, "1")
        code, err = invoke(demo_command)
        assert 125 == code
        assert err.startswith("Traceback (most recent call last):"), err
        assert "in demo_command" in err
        assert err.endswith("StreamMissing: stream-missing: gone\nrefused: stream-missing: gone\n"), err

    def test_a_translated_error_shows_the_original(self, monkeypatch: pytest.MonkeyPatch) -> None:
        @click.command()
        @reports_refusals(translate=lambda exc: StreamMissing(str(exc)) if isinstance(exc, LookupError) else None)
        def demo_command() -> None:
            raise KeyError("k")

        monkeypatch.setenv(DebugVars.DEBUG, "1")
        code, err = invoke(demo_command)
        assert 1 == code
        assert "KeyError: 'k'" in err
        assert err.endswith("refused: stream-missing: 'k'\n"), err

    def test_end_to_end(self, tmp_path: Path) -> None:
        """As a user runs it: the same code, the traceback first, the refusal's line last."""
        plain = alpha("observe", "verify", "missing.aos", cwd=tmp_path)
        debug = alpha("observe", "verify", "missing.aos", cwd=tmp_path, env={DebugVars.DEBUG: "1"})
        assert (1, 1) == (plain.returncode, debug.returncode)
        assert b"Traceback" not in plain.stderr
        assert debug.stderr.startswith(b"Traceback (most recent call last):"), debug.stderr
        assert debug.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]
        assert plain.stderr.startswith(b"refused: stream-missing: ")

    def test_the_entry_point_shows_a_machine_error(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An error of the machine no command caught is ``refused: resource``, with its traceback only under
        ALPHA_DEBUG=1."""
        import observe.cli.root

        def out_of_threads() -> None:
            raise RuntimeError("can't start new thread")

        def leave_now(code: int) -> None:  # the real one ends the process at once (observe.exits.leave_now)
            raise SystemExit(code)

        monkeypatch.setattr(observe.cli.root, "main", out_of_threads)
        monkeypatch.setattr(entry, "leave_now", leave_now)
        monkeypatch.setattr("sys.argv", ["alpha", "observe", "verify", "x.aos"])
        for debug, traced in (("0", False), ("1", True)):
            monkeypatch.setenv(DebugVars.DEBUG, debug)
            with pytest.raises(SystemExit) as info:
                entry.main()
            err = capsys.readouterr().err
            assert (1, traced) == (info.value.code, "Traceback" in err), err
            assert err.splitlines()[-1].startswith("refused: resource: "), err
