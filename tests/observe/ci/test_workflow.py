"""``::stop-commands::TOKEN`` cannot silence the recorder's own workflow commands (observe/ci/workflow.py).

The GitHub runner stops processing workflow commands after ``::stop-commands::TOKEN``
until ``::TOKEN::``. The recorder follows that state over what its echo writes and
resumes commands before its own folds and annotations.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.ci.workflow import ALLOW_ANY_TOKEN, WorkflowCommands
from tests.helpers.run import alpha


def followed(*chunks: bytes, env: dict[str, str] | None = None) -> WorkflowCommands:
    """A state fed ``chunks`` on stdout (fd 1), one read each."""
    w = WorkflowCommands(env or {})
    for chunk in chunks:
        w.feed(1, chunk)
    return w


class TestWorkflowCommands:
    """The runner's state, followed line by line as ActionCommandManager parses them."""

    @pytest.mark.parametrize(
        "chunks",
        [
            (b"::stop-commands::abc\n",),
            (b"out\n  ::stop-commands::abc\r",),
            (b"::stop-com", b"mands::ab", b"c\nmore"),
            (b"text before ##[stop-commands]abc\n",),
            (b"::STOP-COMMANDS::abc\n",),
        ],
        ids=["plain", "indented-cr", "split-across-reads", "legacy-anywhere", "upper-case"],
    )
    def test_stopped(self, chunks: tuple[bytes, ...]) -> None:
        """Each form the runner honours stops it, also when the line arrives in pieces."""
        w = followed(*chunks)
        assert ("abc", b"::abc::\n") == (w.token, w.resume())

    def test_resumed_by_the_command(self) -> None:
        """The command's own ``::TOKEN::`` (any case, on stderr too) resumes: nothing is left to resume."""
        w = followed(b"::stop-commands::abc\n")
        w.feed(2, b"::ABC::\n")
        assert (None, b"") == (w.token, w.resume())

    def test_while_stopped_a_stop_is_text(self) -> None:
        """A second stop while stopped is not processed: the first token still resumes."""
        w = followed(b"::stop-commands::abc\n::stop-commands::xyz\n")
        assert "abc" == w.token

    @pytest.mark.parametrize("token", ["", "error", "pause-logging"])
    def test_tokens_the_runner_refuses(self, token: str) -> None:
        """An empty token, ``pause-logging`` or a command's name does not stop the runner, unless it allows any."""
        line = f"::stop-commands::{token}\n".encode()
        assert (None, False) == (followed(line).token, followed(line).lost)
        allowed = followed(line, env={ALLOW_ANY_TOKEN: "true"})
        assert (token or None, not token) == (allowed.token, allowed.lost)

    def test_token_holding_colons_resumes_in_the_legacy_form(self) -> None:
        """``::a::b::`` would be command ``a``: ``##[a::b]`` is the line that resumes."""
        assert b"##[a::b]\n" == followed(b"::stop-commands::a::b\n").resume()

    def test_escaped_token(self) -> None:
        """The token is the unescaped data; the stop written again escapes it back."""
        w = followed(b"::stop-commands::50%25\n")
        assert ("50%", b"::50%::\n", b"::stop-commands::50%25\n") == (w.token, w.resume(), w.stop("50%"))

    @pytest.mark.parametrize(
        "line", [b"::stop-commands::a b\n", b"::stop-commands:: ab\n", b"::stop-commands::a%0Ab\n"]
    )
    def test_a_token_no_line_resumes_is_lost(self, line: bytes) -> None:
        """A space or a line break in the token: no line resumes it, and the state says so."""
        w = followed(line)
        assert (None, True, b"") == (w.token, w.lost, w.resume())

    def test_a_stop_past_the_longest_line_followed_is_lost(self) -> None:
        """A stop hidden after a megabyte of one line cannot be read whole: lost, never missed."""
        assert followed(b"A" * (2 << 20), b"x ##[stop-com", b"mands]zz\n").lost

    def test_ordinary_output_changes_nothing(self) -> None:
        """Output that only mentions commands leaves them running."""
        w = followed(b"std::vector ::group::x\nstop-commands is a word\n::warning::stop-commands::x\n")
        assert (None, False) == (w.token, w.lost)


def gate(tmp_path: Path, script: str, *opts: str, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    """``gate exit-zero OPTS -- sh lane.sh`` under GitHub Actions; its exit code, stdout and stderr."""
    (tmp_path / "lane.sh").write_text(script)
    p = alpha(
        "observe",
        "gate",
        "exit-zero",
        "--out",
        "s.aos",
        *opts,
        "--",
        "sh",
        "lane.sh",
        cwd=tmp_path,
        env={"GITHUB_ACTIONS": "true", **(env or {})},
    )
    return p.returncode, p.stdout, p.stderr


def lines(out: bytes) -> list[bytes]:
    return out.splitlines()


class TestRecorderResumes:
    """Under ``GITHUB_ACTIONS=true``, the recorder's own workflow commands follow ``::TOKEN::``."""

    def test_annotations_follow_the_resume(self, tmp_path: Path) -> None:
        """A command that stops commands and fails: the recorder's ``::error`` comes after ``::abc::``."""
        code, out, _ = gate(tmp_path, "echo '::stop-commands::abc'; echo text; exit 1")
        assert 1 == code
        got = lines(out)
        assert [b"::stop-commands::abc", b"text", b"::abc::"] == got[:3]
        assert got[3].startswith(b"::error title=gate exit-zero")

    def test_split_stop_and_a_line_left_open(self, tmp_path: Path) -> None:
        """A stop written in pieces and left without its newline still gets resumed after it."""
        code, out, _ = gate(tmp_path, "printf '::stop-com'; sleep 0.3; printf 'mands::abc'; exit 1")
        assert 1 == code
        got = lines(out)
        assert [b"::stop-commands::abc", b"::abc::"] == got[:2]
        assert got[2].startswith(b"::error ")

    def test_folds_keep_the_commands_stop(self, tmp_path: Path) -> None:
        """A step's fold while stopped: resumed for the marker, stopped again after it, resumed at the end."""
        script = "echo '::stop-commands::abc'; alpha observe step build -- echo inside; exit 1"
        code, out, _ = gate(tmp_path, script)
        assert 1 == code
        got = lines(out)
        expected = [
            b"::stop-commands::abc",
            b"::abc::",
            b"::group::build",
            b"::stop-commands::abc",
            b"inside",
            b"::abc::",
            b"::endgroup::",
            b"::stop-commands::abc",
            b"::abc::",
        ]
        assert expected == got[: len(expected)]
        assert got[len(expected)].startswith(b"::error ")

    def test_json_mode_resumes_on_stderr(self, tmp_path: Path) -> None:
        """With ``--json`` the echo and the annotations share stderr: the resume is there, before the annotation."""
        code, out, err = gate(tmp_path, "echo '::stop-commands::abc' >&2; exit 1", "--json")
        assert 1 == code
        assert out.lstrip().startswith(b"{")
        got = lines(err)
        at = got.index(b"::stop-commands::abc")
        assert b"::abc::" == got[at + 1]
        assert any(line.startswith(b"::error ") for line in got[at + 2 :])

    def test_resumed_by_the_command_itself(self, tmp_path: Path) -> None:
        """A command that resumes on its own gets no extra line."""
        code, out, _ = gate(tmp_path, "echo '::stop-commands::abc'; echo '::abc::'; exit 1")
        assert 1 == code
        assert 1 == lines(out).count(b"::abc::")

    def test_a_token_no_line_resumes_is_said(self, tmp_path: Path) -> None:
        """A token that cannot be resumed: the recorder says on stderr that its annotations are lost."""
        code, _, err = gate(tmp_path, "echo '::stop-commands::a b'; exit 1")
        assert 1 == code
        assert b"stopped GitHub workflow commands with a token no line can resume" in err

    def test_outside_github_nothing_is_added(self, tmp_path: Path) -> None:
        """Outside GitHub Actions the echo is the command's output as it was."""
        (tmp_path / "lane.sh").write_text("echo '::stop-commands::abc'; exit 1")
        p = alpha("observe", "gate", "exit-zero", "--out", "s.aos", "--", "sh", "lane.sh", cwd=tmp_path)
        assert b"::stop-commands::abc\n" == p.stdout
