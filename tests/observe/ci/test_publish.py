"""observe.ci.publish, called directly: what each CI system gets after a verdict, and where it goes."""

from __future__ import annotations

from pathlib import Path

from gates.verdict import Check, Verdict
from observe.ci.publish import prepare_files, publish_verdict

VERDICT = Verdict.of("g", "command", [Check("exit-code", "fail", "exited 1"), Check("step:x", "inconclusive", "gone")])


class Echoed:
    """An ``echo`` that keeps each line with the stream it went to."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, bool]] = []

    def __call__(self, text: str, to_stderr: bool) -> None:
        self.lines.append((text, to_stderr))


class TestPublishVerdict:
    def test_no_ci_writes_only_what_was_asked(self, tmp_path: Path) -> None:
        """Outside CI, only --junit and --summary are written, and nothing is said."""
        echo = Echoed()
        ok = publish_verdict(
            VERDICT,
            stream=str(tmp_path / "s.aos"),
            stream_id="id",
            env={},
            junit=tmp_path / "r" / "junit.xml",
            summary=tmp_path / "r" / "summary.md",
            echo=echo,
        )
        assert ok
        assert [] == echo.lines
        assert ["junit.xml", "summary.md"] == sorted(p.name for p in (tmp_path / "r").iterdir())
        assert [] == sorted(p.name for p in tmp_path.glob("*.md"))

    def test_buildkite_writes_the_default_summary_and_says_how_to_annotate(self, tmp_path: Path) -> None:
        """Under Buildkite without --summary, the markdown goes to STREAM.md and the annotate line is said on stderr."""
        echo = Echoed()
        stream = str(tmp_path / "s.aos")
        assert publish_verdict(VERDICT, stream=stream, stream_id="id", env={"BUILDKITE": "true"}, echo=echo)
        assert "gate g: FAIL" in (tmp_path / "s.aos.md").read_text()
        expected = f"alpha observe: summary in {stream}.md (buildkite-agent annotate --style error"
        assert [True] == [err for _, err in echo.lines]
        assert echo.lines[0][0].startswith(expected)

    def test_github_annotations_follow_stdout_or_stderr(self, tmp_path: Path) -> None:
        """Under GitHub Actions the annotations go to stdout, or to stderr when stdout is the --json document."""
        for json_stdout in (False, True):
            echo = Echoed()
            env = {"GITHUB_ACTIONS": "true"}
            assert publish_verdict(VERDICT, stream="s.aos", stream_id="id", env=env, json_stdout=json_stdout, echo=echo)
            assert [("error", json_stdout), ("warning", json_stdout)] == [
                (text.split(" ")[0].strip(":"), err) for text, err in echo.lines
            ]

    def test_github_summary_and_outputs_are_appended(self, tmp_path: Path) -> None:
        """$GITHUB_STEP_SUMMARY and $GITHUB_OUTPUT are appended to, never replaced."""
        summary, output = tmp_path / "summary", tmp_path / "output"
        summary.write_text("before\n")
        output.write_text("earlier=1\n")
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)}
        assert publish_verdict(VERDICT, stream="s.aos", stream_id="abc", env=env, echo=Echoed())
        assert summary.read_text().startswith("before\n")
        assert "gate g: FAIL" in summary.read_text()
        lines = output.read_text().splitlines()
        assert ["earlier=1", "verdict=fail", "scope=command", "stream=s.aos", "stream_id=abc"] == lines

    def test_a_github_file_that_cannot_be_written_is_said_not_fatal(self, tmp_path: Path) -> None:
        """A $GITHUB_OUTPUT that cannot be appended to is said on stderr; the result stays True."""
        echo = Echoed()
        env = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path)}  # a folder
        assert publish_verdict(VERDICT, stream="s.aos", stream_id="id", env=env, echo=echo)
        assert any(err and text.startswith("alpha observe: cannot append to GITHUB_OUTPUT") for text, err in echo.lines)

    def test_a_report_that_cannot_be_written_is_false(self, tmp_path: Path) -> None:
        """A --junit that cannot be written makes the result False and is said."""
        echo = Echoed()
        assert not publish_verdict(VERDICT, stream="s.aos", stream_id="id", env={}, junit=tmp_path, echo=echo)
        assert [True] == [err for _, err in echo.lines]
        assert echo.lines[0][0].startswith(f"alpha observe: cannot write the JUnit report {tmp_path}")


class TestPrepareFiles:
    def test_creates_folders_and_stops_at_the_first_failure(self, tmp_path: Path) -> None:
        """Missing folders are created; the first file that cannot be written is said and ends the check."""
        echo = Echoed()
        assert prepare_files(((tmp_path / "a" / "j.xml", "the JUnit report"), (None, "the summary")), echo)
        assert (tmp_path / "a" / "j.xml").exists()
        assert not prepare_files(((tmp_path, "the JUnit report"), (tmp_path, "the summary")), echo)
        assert 1 == len(echo.lines)


class TestTheSummaryNamesTheKey:
    """A signed seal's summary verifies with the public key (``--key``) and names the key's id; the gate
    and ``verdict`` both give it the key that signed."""

    def test_signed_by_a_gate(self, tmp_path: Path) -> None:
        from aos.signing import generate_keypair, load_public_key
        from tests.helpers.run import alpha

        generate_keypair(tmp_path / "seal")
        key_id = load_public_key(tmp_path / "seal.pub").key_id
        p = alpha(
            "observe", "gate", "exit-zero", "--quiet", "--sign-key", str(tmp_path / "seal.key"),
            "--summary", "gate.md", "--out", "s.aos", "--", "true",
            cwd=tmp_path,
        )  # fmt: skip
        assert 0 == p.returncode, p.stderr.decode()
        gate_md = (tmp_path / "gate.md").read_text()
        assert "alpha observe verify s.aos --key seal.pub" in gate_md
        assert f"signed by key {key_id}" in gate_md
        v = alpha("observe", "verdict", "s.aos", "--key", "seal.pub", "--summary", "verdict.md", cwd=tmp_path)
        assert 0 == v.returncode, v.stderr.decode()
        assert "alpha observe verify s.aos --key seal.pub" in (tmp_path / "verdict.md").read_text()
        assert f"signed by key {key_id}" in (tmp_path / "verdict.md").read_text()

    def test_unsigned(self, tmp_path: Path) -> None:
        publish_verdict(VERDICT, stream="s.aos", stream_id="id", env={}, summary=tmp_path / "s.md", echo=Echoed())
        text = (tmp_path / "s.md").read_text()
        assert "alpha observe verify s.aos\n" in text
        assert "--key" not in text
