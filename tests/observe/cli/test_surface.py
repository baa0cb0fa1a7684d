"""The command line as CI and people use it: strict options, clean --json, following evidence,
nested alpha, help examples, completion and colour."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from aos.verify import verify_stream
from gates.testing import SyntheticStream
from gates.verdict import Check, Verdict
from observe.cli.root import main
from tests.helpers.cli import Cli
from tests.helpers.recorder import events
from tests.helpers.run import ALPHA, alpha, child_env


def gate_stream(tmp_path: Path, script: str, *opts: str) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    (tmp_path / "lane.sh").write_text(script)
    p = alpha("observe", "gate", "exit-zero", "--quiet", "--out", "s.aos", *opts, "--", "sh", "lane.sh", cwd=tmp_path)
    return p, tmp_path / "s.aos"


class TestStrictOptions:
    def test_mistyped_gate_option_is_usage_error_and_nothing_runs(self, tmp_path: Path) -> None:
        """gate exit-zero --jnuit o.xml -- CMD exits 2 suggesting --junit; the command never runs, no stream."""
        p = alpha("observe", "gate", "exit-zero", "--jnuit", "o.xml", "--", "touch", "ran", cwd=tmp_path)
        assert (2, False, False) == (p.returncode, (tmp_path / "ran").exists(), (tmp_path / "aos-streams").exists())
        assert b"did you mean --junit?" in p.stderr

    @pytest.mark.parametrize(
        ("argv", "hint"),
        [
            (["record", "--quite", "--", "touch", "ran"], b"did you mean --quiet?"),
            (["record", "--quite", "touch", "ran"], b"did you mean --quiet?"),
            (["step", "s", "--standalon", "--", "touch", "ran"], b"did you mean --standalone?"),
            (["gate", "exit-zero", "--summry", "x.md", "touch", "ran"], b"did you mean --summary?"),
        ],
        ids=["record", "record-without-dashes", "step", "gate-without-dashes"],
    )
    def test_mistyped_option_anywhere(self, tmp_path: Path, argv: list[str], hint: bytes) -> None:
        """A mistyped option before the command is a usage error for record, step and gate alike."""
        p = alpha("observe", *argv, cwd=tmp_path)
        assert (2, False) == (p.returncode, (tmp_path / "ran").exists())
        assert hint in p.stderr

    def test_everything_after_double_dash_is_verbatim(self, tmp_path: Path) -> None:
        """After --, options (even ours, even a second --) belong to the command."""
        argv = ["--", "sh", "-c", 'printf "%s|" "$@"', "sh", "--jnuit", "--", "--quiet"]
        p = alpha("observe", "record", "--out", "s.aos", *argv, cwd=tmp_path)
        assert (0, b"--jnuit|--|--quiet|") == (p.returncode, p.stdout)

    def test_command_starts_at_its_first_word(self, tmp_path: Path) -> None:
        """Without --, the command starts at the first word that is not our option, and is kept verbatim."""
        p = alpha("observe", "gate", "exit-zero", "--out", "s.aos", "printf", "%s|", "--", "-k", cwd=tmp_path)
        assert (0, b"--|-k|") == (p.returncode, p.stdout)


class TestJson:
    def test_record_json_is_one_document(self, tmp_path: Path) -> None:
        """record --json: stdout is one JSON document naming the stream; the command's output goes to stderr."""
        p = alpha(
            "observe",
            "record",
            "--json",
            "--out",
            "s.aos",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 4",
            cwd=tmp_path,
        )
        doc = json.loads(p.stdout)
        sealed = verify_stream(tmp_path / "s.aos")
        assert (4, "s.aos", sealed.stream_id, 4, sealed.seal["head"]) == (
            p.returncode,
            doc["stream"],
            doc["stream_id"],
            doc["exit_code"],
            doc["seal"]["head"],  # what the seal committed to
        )
        assert b"out\n" in p.stderr
        assert b"err\n" in p.stderr

    def test_gate_json_without_quiet(self, tmp_path: Path) -> None:
        """gate --json without --quiet: the echo (once mixed into stdout) goes to stderr."""
        p = alpha("observe", "gate", "exit-zero", "--json", "--out", "s.aos", "--", "echo", "noise", cwd=tmp_path)
        doc = json.loads(p.stdout)
        assert ("pass", "s.aos", verify_stream(tmp_path / "s.aos").stream_id) == (
            doc["verdict"],
            doc["stream"],
            doc["stream_id"],
        )
        assert b"noise\n" in p.stderr

    def test_show_json(self, tmp_path: Path) -> None:
        """show --json is one document naming the stream's path and id, with the verdict."""
        _, stream = gate_stream(tmp_path, "exit 0\n")
        p = alpha("observe", "show", "--json", str(stream))
        doc = json.loads(p.stdout)
        assert (0, str(stream), verify_stream(stream).stream_id, "pass", True) == (
            p.returncode,
            doc["stream"],
            doc["stream_id"],
            doc["verdict"]["verdict"],
            doc["intact"],
        )

    def test_gates_json(self) -> None:
        """gates --json lists every gate with its rules."""
        p = alpha("observe", "gates", "--json")
        found = {g["name"]: g for g in json.loads(p.stdout)["gates"]}
        assert {"exit-zero", "distributed-device", "coordinate-device", "independent-device"} <= set(found)
        assert ["exit-code"] == [r["id"] for part in found["exit-zero"]["parts"] for r in part["rules"]]


class TestFollowingEvidence:
    SCRIPT = (
        "echo top\n"
        "alpha observe step build -- sh -c 'echo b-out; echo b-err >&2; "
        'alpha observe step inner -- sh -c "echo i-err >&2"\'\n'
        "alpha observe step test -- sh -c 'echo t-err >&2'\n"
        "exit 5\n"
    )

    def test_read_seq_selects_the_cited_events(self, tmp_path: Path) -> None:
        """read --seq prints exactly the events a check cites, in order."""
        _, stream = gate_stream(tmp_path, self.SCRIPT)
        cited = verify_stream(stream).verdict["checks"][0]["evidence"]  # type: ignore[index]
        wanted = [0, *cited]
        p = alpha("observe", "read", str(stream), "--json", "--seq", ",".join(map(str, wanted)))
        got = [json.loads(line)["seq"] for line in p.stdout.splitlines()]
        assert (0, wanted) == (p.returncode, got)
        assert "process.exit" == json.loads(p.stdout.splitlines()[-1])["kind"]

    def test_read_seq_absent_is_said(self, tmp_path: Path) -> None:
        """A seq the stream does not hold is said on stderr, exit 1."""
        _, stream = gate_stream(tmp_path, "true\n")
        p = alpha("observe", "read", str(stream), "--seq", "0,99999")
        assert (1, True) == (p.returncode, b"no event with seq 99999" in p.stderr)
        assert 1 == len(p.stdout.splitlines())

    def test_read_step_output(self, tmp_path: Path) -> None:
        """read --step NAME --stderr gives that step's stderr, its nested steps' included; --stdout likewise."""
        _, stream = gate_stream(tmp_path, self.SCRIPT)
        err = alpha("observe", "read", str(stream), "--step", "build", "--stderr")
        out = alpha("observe", "read", str(stream), "--step", "build", "--stdout")
        assert (b"b-err\ni-err\n", b"b-out\n") == (err.stdout, out.stdout)
        test = alpha("observe", "read", str(stream), "--step", "test", "--json")
        kinds = [json.loads(line)["kind"] for line in test.stdout.splitlines()]
        assert ["step.start", "stderr", "step.end"] == kinds

    def test_read_step_unknown(self, tmp_path: Path) -> None:
        """A step the stream does not hold is said on stderr, exit 1."""
        _, stream = gate_stream(tmp_path, "true\n")
        p = alpha("observe", "read", str(stream), "--step", "nope")
        assert (1, True) == (p.returncode, b"no step named 'nope'" in p.stderr)

    def test_show_check(self, tmp_path: Path) -> None:
        """show --check NAME shows the check, its reason and every event it cites, and how to read them."""
        _, stream = gate_stream(tmp_path, self.SCRIPT)
        exit_seq = next(e.seq for e in events(stream) if e.kind == "process.exit")
        p = alpha("observe", "show", str(stream), "--check", "exit-code")
        text = p.stdout.decode()
        assert 0 == p.returncode
        assert "check      exit-code: fail (gate exit-zero, verdict fail)" in text
        assert "reason     the command exited 5; required exit 0" in text
        assert f"  {exit_seq:>6} process.exit " in text
        assert f"--seq {exit_seq}" in text
        doc = json.loads(alpha("observe", "show", str(stream), "--check", "exit-code", "--json").stdout)
        assert ([exit_seq], ["process.exit"]) == (doc["check"]["evidence"], [e["kind"] for e in doc["events"]])

    def test_show_check_unknown(self, tmp_path: Path) -> None:
        """A check the verdict does not hold: exit 1, naming the checks there are."""
        _, stream = gate_stream(tmp_path, "true\n")
        p = alpha("observe", "show", str(stream), "--check", "nope")
        assert (1, True) == (p.returncode, b"(checks: exit-code)" in p.stderr)


class TestNestedAlpha:
    @pytest.fixture
    def bare_path(self) -> str:
        path = "/usr/bin:/bin"
        if shutil.which("alpha", path=path):
            pytest.skip("an alpha is installed system-wide")
        return path

    def test_full_path_recorder_without_alpha_on_path(self, tmp_path: Path, bare_path: str) -> None:
        """Started by full path with no alpha on PATH, the command still finds alpha (and $AOS_ALPHA)."""
        script = (
            "alpha observe step build -- alpha observe receipt built --status pass\n"
            '"$AOS_ALPHA" observe receipt via-env --status pass\n'
        )
        (tmp_path / "lane.sh").write_text(script)
        env = {"VIRTUAL_ENV": None, "PATH": bare_path}
        argv = ["observe", "gate", "exit-zero", "--quiet", "--out", "s.aos", "--", "sh", "lane.sh"]
        p = alpha(*argv, cwd=tmp_path, env=env, timeout=120)
        assert 0 == p.returncode, p.stderr
        names = [e.attrs["name"] for e in events(tmp_path / "s.aos") if e.kind == "receipt"]
        assert ["built", "via-env"] == names

    def test_a_different_alpha_on_path_is_not_used(self, tmp_path: Path, bare_path: str) -> None:
        """An other alpha earlier on PATH does not answer the command: the recorder's own does."""
        fake = tmp_path / "fake"
        fake.mkdir()
        (fake / "alpha").write_text("#!/bin/sh\necho wrong-alpha >&2\nexit 9\n")
        (fake / "alpha").chmod(0o755)
        env = {"PATH": f"{fake}:{bare_path}"}
        argv = ["observe", "record", "--quiet", "--out", "s.aos", "--", "sh", "-c", "alpha observe receipt mine"]
        p = alpha(*argv, cwd=tmp_path, env=env, timeout=120)
        assert (0, b"") == (p.returncode, p.stderr)
        assert ["mine"] == [e.attrs["name"] for e in events(tmp_path / "s.aos") if e.kind == "receipt"]

    def test_shim_is_the_same_tool(self, tmp_path: Path) -> None:
        """$AOS_ALPHA reports the recorder's version."""
        p = alpha("observe", "record", "--out", "s.aos", "--", "sh", "-c", '"$AOS_ALPHA" --version', cwd=tmp_path)
        assert alpha("--version").stdout == p.stdout


def _commands(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _commands(sub, [*path, name])


class TestHelp:
    @pytest.mark.parametrize("path", [p for p, _ in _commands(main, [])], ids=lambda p: " ".join(p) or "alpha")
    def test_help_ends_with_an_example(self, path: list[str], cli: Cli) -> None:
        """Every command's --help ends with an example command line."""
        r = cli(*path, "--help", prog_name="alpha")
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert 0 == r.exit_code
        assert "Example:" in r.output
        assert lines[-1].strip().split(" ")[0] in ("alpha", "RUN=$(alpha"), lines[-1]

    def test_gate_names_complete(self) -> None:
        """bash completion offers the gate names for gate NAME."""
        env = {
            "_ALPHA_COMPLETE": "bash_complete",
            "COMP_WORDS": "alpha observe gate di",
            "COMP_CWORD": "3",
        }
        p = alpha(env=env)
        assert b"plain,distributed-device\n" == p.stdout

    def test_completion_script(self) -> None:
        """The documented _ALPHA_COMPLETE=bash_source prints a completion script."""
        p = alpha(env={"_ALPHA_COMPLETE": "bash_source"})
        assert b"_alpha_completion" in p.stdout


LONG = "the reason " + "goes on " * 40 + "and ends here"


def _stream(tmp_path: Path) -> Path:
    s = SyntheticStream()
    s.exit(0)
    v = Verdict.of("g", "command", [Check("long", "pass", LONG), Check("other", "fail", LONG)])
    s.add("verdict", v.to_attrs())
    s.write(tmp_path / "s.aos")
    return tmp_path / "s.aos"


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> bytes:
    leader, follower = pty.openpty()
    try:
        subprocess.run(argv, stdout=follower, stderr=follower, env=env, timeout=60, check=False)
    finally:
        os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return out


class TestColourAndWidth:
    def test_reasons_whole_when_not_a_terminal(self, tmp_path: Path) -> None:
        """Piped, each reason is written whole on one line (once they were cut at 110 columns)."""
        out = alpha("observe", "verdict", str(_stream(tmp_path))).stdout.decode()
        assert 3 == sum(1 for line in out.splitlines() if line.endswith(LONG))  # the two checks, and the cause first
        assert "\x1b[" not in out

    def test_colour_on_a_terminal_and_no_color(self, tmp_path: Path) -> None:
        """On a terminal verdicts are coloured; NO_COLOR turns it off; FORCE_COLOR turns it on in a pipe."""
        path = str(_stream(tmp_path))
        env = child_env()
        env["TERM"] = "xterm"
        tty = _on_a_terminal([ALPHA, "observe", "verdict", path], env)
        plain = _on_a_terminal([ALPHA, "observe", "verdict", path], {**env, "NO_COLOR": "1"})
        forced = alpha("observe", "verdict", path, env={"FORCE_COLOR": "1"}).stdout
        assert b"\x1b[1;31mFAIL\x1b[0m" in tty
        assert b"\x1b[" not in plain
        assert b"FAIL" in plain
        assert b"\x1b[1;31mFAIL\x1b[0m" in forced
        both = alpha("observe", "verdict", path, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
        assert b"\x1b[" not in both

    def test_quoted_text_cannot_drive_the_terminal(self) -> None:
        """A reason quoting a terminal escape or a line break stays one inert line of the table."""
        from gates.report import table

        v = Verdict.of("g", "command", [Check("c", "fail", "exited 1\x1b]0;pwned\x07\nFAKE  pass  all good")])
        text = table(v, width=None)
        assert "\x1b" not in text
        assert "first: c: FAIL: exited 1\\x1b]0;pwned\\x07 FAKE  pass  all good" == text.splitlines()[1]
        assert "  FAIL         c  exited 1\\x1b]0;pwned\\x07 FAKE  pass  all good" == text.splitlines()[2]
