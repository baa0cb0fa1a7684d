"""CI systems simulated by their variables and files: GitHub Actions, GitLab CI, Buildkite.

Where the convention fixes the bytes (workflow commands, ``$GITHUB_OUTPUT``,
GitLab's section markers, Buildkite's group headers) the tests compare them
byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aos.verify import verify_stream
from gates.report import markdown
from gates.testing import SyntheticStream
from gates.verdict import Check, Verdict
from observe.ci.systems import Markers, by_name, detect
from observe.ci.systems.github import github_annotations, github_output_lines, parse_github_file
from tests.helpers.run import alpha

#: A lane with a step, a nested step, a step whose output ends mid-line, and output outside steps.
LANE = (
    "echo pre\n"
    'alpha observe step build -- sh -c "echo building; alpha observe step inner -- echo nested"\n'
    "alpha observe step partial -- printf 'no newline'\n"
    "echo post\n"
)


def gate(
    tmp_path: Path, env: dict[str, str], *opts: str, script: str = LANE, name: str = "exit-zero"
) -> tuple[int, bytes, bytes]:
    (tmp_path / "lane.sh").write_text(script)
    p = alpha("observe", "gate", name, "--out", "s.aos", *opts, "--", "sh", "lane.sh", cwd=tmp_path, env=env)
    return p.returncode, p.stdout, p.stderr


def recorded_stdout(path: Path) -> bytes:
    p = alpha("observe", "read", str(path), "--stdout")
    assert 0 == p.returncode, p.stderr
    return p.stdout


class TestDetect:
    @pytest.mark.parametrize(
        ("env", "ci"),
        [
            ({"GITHUB_ACTIONS": "true"}, "github"),
            ({"GITLAB_CI": "true"}, "gitlab"),
            ({"BUILDKITE": "true"}, "buildkite"),
            ({"GITHUB_ACTIONS": "false"}, None),
            ({"CI": "true"}, None),
            ({}, None),
        ],
    )
    def test_detect(self, env: dict[str, str], ci: str | None) -> None:
        """Each CI is known by its own variable; a generic CI=true is none of them."""
        assert ci == detect(env)


class TestGitHubFolds:
    def test_steps_fold_in_the_echo_and_never_in_the_stream(self, tmp_path: Path) -> None:
        """Each top-level step is folded in ::group::/::endgroup:: in the live echo (nested steps fold with it;
        a step ending mid-line closes on a line of its own); the stream's stdout holds none of it."""
        code, out, _ = gate(tmp_path, {"GITHUB_ACTIONS": "true"})
        assert 0 == code
        expected = (
            b"pre\n::group::build\nbuilding\nnested\n::endgroup::\n::group::partial\nno newline\n::endgroup::\npost\n"
        )
        assert expected == out
        assert b"pre\nbuilding\nnested\nno newline" + b"post\n" == recorded_stdout(tmp_path / "s.aos")

    def test_no_folds_outside_ci(self, tmp_path: Path) -> None:
        """Outside CI the echo is exactly the command's output."""
        code, out, _ = gate(tmp_path, {})
        assert (0, b"pre\nbuilding\nnested\nno newlinepost\n") == (code, out)

    def test_step_name_cannot_inject_a_workflow_command(self, tmp_path: Path) -> None:
        """A step named with a line break and a workflow command stays one ::group:: line (escaped)."""
        script = "alpha observe step \"$(printf 'x\\n::error::forged')\" -- true\n"
        _, out, _ = gate(tmp_path, {"GITHUB_ACTIONS": "true"}, script=script)
        assert b"::group::x%0A::error::forged\n::endgroup::\n" == out

    def test_json_keeps_stdout_one_document(self, tmp_path: Path) -> None:
        """With --json the echo and its folds go to stderr, and stdout is the one JSON document."""
        code, out, err = gate(tmp_path, {"GITHUB_ACTIONS": "true"}, "--json")
        doc = json.loads(out)
        assert (0, "pass", "s.aos") == (code, doc["verdict"], doc["stream"])
        assert doc["stream_id"] == verify_stream(tmp_path / "s.aos").stream_id
        assert b"::group::build\nbuilding\nnested\n::endgroup::\n" in err


class TestGitHubOutputs:
    def test_outputs_byte_for_byte(self, tmp_path: Path) -> None:
        """verdict, scope, stream and stream_id are appended to $GITHUB_OUTPUT as NAME=VALUE lines."""
        out_file = tmp_path / "github_output"
        out_file.write_text("earlier=1\n")
        code, _, _ = gate(tmp_path, {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out_file)}, "--quiet")
        sid = verify_stream(tmp_path / "s.aos").stream_id
        assert 0 == code
        assert f"earlier=1\nverdict=pass\nscope=command\nstream=s.aos\nstream_id={sid}\n" == out_file.read_text()

    def test_a_line_break_uses_the_heredoc_form(self, tmp_path: Path) -> None:
        """A stream path holding a line break is written NAME<<DELIMITER, and the runner reads it back whole."""
        out_file = tmp_path / "github_output"
        env = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out_file)}
        p = alpha(
            "observe", "gate", "exit-zero", "--quiet", "--out", "odd\nname.aos", "--", "true", cwd=tmp_path, env=env
        )
        text = out_file.read_text()
        assert 0 == p.returncode
        assert re.search(r"^stream<<ghadelimiter_[0-9a-f]{32}\nodd\nname\.aos\nghadelimiter_[0-9a-f]{32}\n", text, re.M)
        values, open_delim = parse_github_file(text)
        assert ("odd\nname.aos", "pass", None) == (values["stream"], values["verdict"], open_delim)

    @pytest.mark.parametrize(
        "forgery",
        [
            "verdict=pass\nscope=physical\n",
            "verdict=pass",  # no newline: our first line would read "verdict=passverdict=fail"
            "verdict=pass\nx<<verdict=fail\n",  # an open heredoc whose delimiter is our line: it would vanish
            "verdict=pass\nx<<NEVER\n",  # an open heredoc swallowing everything after it
        ],
        ids=["earlier-lines", "partial-line", "heredoc-eats-our-line", "heredoc-left-open"],
    )
    def test_the_command_cannot_forge_the_outputs(self, tmp_path: Path, forgery: str) -> None:
        """A failing command that writes its own verdict to $GITHUB_OUTPUT: the job still reads fail."""
        out_file = tmp_path / "github_output"
        script = f"printf '%s' '{forgery}' >> \"$GITHUB_OUTPUT\"\nexit 1\n"
        code, _, _ = gate(
            tmp_path, {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out_file)}, "--quiet", script=script
        )
        values, open_delim = parse_github_file(out_file.read_text())
        assert (1, "fail", "command", None) == (code, values["verdict"], values["scope"], open_delim)

    def test_verdict_reports_a_downloaded_stream(self, tmp_path: Path) -> None:
        """verdict STREAM under GitHub Actions writes the same outputs and summary as the gate did."""
        gate(tmp_path, {}, "--quiet")
        out_file, summary = tmp_path / "out", tmp_path / "summary.md"
        env = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary)}
        p = alpha("observe", "verdict", "s.aos", cwd=tmp_path, env=env)
        values, _ = parse_github_file(out_file.read_text())
        assert (0, "pass", "s.aos") == (p.returncode, values["verdict"], values["stream"])
        assert "### ✅ gate exit\\-zero: PASS (scope command)" in summary.read_text()


class TestGitHubSummary:
    def test_summary_names_everything(self, tmp_path: Path) -> None:
        """The job summary holds the gate, verdict, scope, every check with its reason, what did not run,
        the stream and how to verify it."""
        summary = tmp_path / "summary.md"
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
        script = "alpha observe step static-build -- true\n"
        code, _, _ = gate(tmp_path, env, "--quiet", script=script, name="distributed-device")
        text = summary.read_text()
        v = verify_stream(tmp_path / "s.aos").verdict
        assert v is not None
        assert 3 == code
        assert "### ⚠️ gate distributed\\-device: INCONCLUSIVE (scope static)" in text
        for c in v["checks"]:
            row = next(
                line
                for line in text.splitlines()
                if line.startswith("| ")
                and c["status"] in line
                and line.split(" | ")[0][2:].replace("\\", "") == c["name"]
            )
            assert c["reason"][:20].replace("\\", "") in row.replace("\\", "")
        assert "**Not run:**" in text
        assert "physical lane" in text
        assert "**Stream:** s\\.aos (id " in text
        assert "alpha observe verify s.aos\nalpha observe verdict s.aos\n" in text

    def test_summary_text_cannot_become_markup(self) -> None:
        """A reason quoting hostile text cannot open an HTML comment, a link, a new row or a heading."""
        reason = "x | y <!-- hide --> [click](https://evil.example) \n# heading\r`code`"
        v = Verdict.of("g", "command", [Check("c|d", "fail", reason)])
        text = markdown(v, stream="a`b.aos")
        row = next(line for line in text.splitlines() if line.startswith("| c\\|d"))
        assert "<!--" not in text
        assert "](https" not in text
        assert "\n# heading" not in text
        assert 3 == row.count(" | ")  # the four cells' inner borders only: the hostile pipes are escaped
        assert "`code`" not in row


class TestGitHubAnnotations:
    def test_fail_is_error_and_inconclusive_is_warning(self) -> None:
        """A failed check is ::error, an inconclusive one ::warning, each titled; % CR LF : , are escaped."""
        v = Verdict.of(
            "g:1",
            "physical",
            [
                Check("exit-code", "fail", "50% done\r\nthen: stop, now"),
                Check("step:a,b", "inconclusive", "never ran"),
                Check("ok", "pass", "fine"),
            ],
        )
        assert [
            "::error title=gate g%3A1%3A exit-code fail::50%25 done%0D%0Athen: stop, now",
            "::warning title=gate g%3A1%3A step%3Aa%2Cb inconclusive::never ran",
        ] == github_annotations(v)

    def test_verdict_prints_warning_for_inconclusive(self, tmp_path: Path) -> None:
        """verdict on an inconclusive stream under GitHub Actions prints a ::warning line."""
        s = SyntheticStream()
        s.exit(0)
        s.add("verdict", Verdict.of("g", "physical", [Check("step:x", "inconclusive", "never ran")]).to_attrs())
        s.write(tmp_path / "s.aos")
        p = alpha("observe", "verdict", "s.aos", cwd=tmp_path, env={"GITHUB_ACTIONS": "true"})
        assert 3 == p.returncode
        assert b"\n::warning title=gate g%3A step%3Ax inconclusive::never ran\n" in p.stdout

    def test_add_mask_is_honoured(self, tmp_path: Path) -> None:
        """Under GitHub Actions a value the command masks with ::add-mask:: is in neither the echo nor the stream,
        inside a step or not."""
        script = (
            "echo '::add-mask::Sup3rS3cretV4lue'\n"
            "echo token Sup3rS3cretV4lue\n"
            "alpha observe step use -- sh -c 'echo again Sup3rS3cretV4lue >&2'\n"
        )
        code, out, err = gate(tmp_path, {"GITHUB_ACTIONS": "true"}, script=script)
        raw = (tmp_path / "s.aos").read_bytes()
        stdout, stderr = (
            recorded_stdout(tmp_path / "s.aos"),
            alpha("observe", "read", "s.aos", "--stderr", cwd=tmp_path).stdout,
        )
        assert 0 == code
        assert b"Sup3rS3cretV4lue" not in out + err + stdout + stderr
        assert b"token " in stdout
        assert b"again " in stderr
        assert b"Sup3rS3cretV4lue" not in raw  # (compressed, but a stored copy would be findable after decode)


class TestGitLab:
    def test_steps_are_collapsible_sections(self, tmp_path: Path) -> None:
        """Each step is a collapsed section, nested steps nested, ended by the same name; none of it recorded."""
        code, out, _ = gate(tmp_path, {"GITLAB_CI": "true"})
        pattern = (
            rb"pre\n"
            rb"\x1b\[0Ksection_start:(\d+):step_1_build\[collapsed=true\]\r\x1b\[0Kbuild\n"
            rb"building\n"
            rb"\x1b\[0Ksection_start:(\d+):step_2_inner\[collapsed=true\]\r\x1b\[0Kinner\n"
            rb"nested\n"
            rb"\x1b\[0Ksection_end:(\d+):step_2_inner\r\x1b\[0K\n"
            rb"\x1b\[0Ksection_end:(\d+):step_1_build\r\x1b\[0K\n"
            rb"\x1b\[0Ksection_start:(\d+):step_3_partial\[collapsed=true\]\r\x1b\[0Kpartial\n"
            rb"no newline\n"
            rb"\x1b\[0Ksection_end:(\d+):step_3_partial\r\x1b\[0K\n"
            rb"post\n"
        )
        match = re.fullmatch(pattern, out)
        assert (0, True) == (code, match is not None), out
        assert match is not None
        times = [int(t) for t in match.groups()]
        assert times == sorted(times)
        assert b"\x1b" not in recorded_stdout(tmp_path / "s.aos")

    def test_section_names_are_safe(self) -> None:
        """A section name holds only GitLab's allowed characters; the header shows control characters escaped."""
        m = Markers(by_name("gitlab"))
        start = m.begin("span1", "a b/c:\x1b[31m\nd")
        assert re.fullmatch(
            rb"\x1b\[0Ksection_start:\d+:step_1_a_b_c_31m_d\[collapsed=true\]\r\x1b\[0Ka b/c:\\x1b\[31m\\x0ad\n", start
        )


class TestBuildkite:
    def test_steps_are_groups_and_failures_reopen(self, tmp_path: Path) -> None:
        """Each top-level step opens a --- group; a failed step re-opens its group with ^^^ +++."""
        script = (
            "alpha observe step build -- echo built\nalpha observe step test -- sh -c 'echo bad; exit 3'\necho after\n"
        )
        code, out, _ = gate(tmp_path, {"BUILDKITE": "true"}, script=script)
        assert (0, b"--- build\nbuilt\n--- test\nbad\n^^^ +++\nafter\n") == (code, out)
        assert b"built\nbad\nafter\n" == recorded_stdout(tmp_path / "s.aos")

    def test_summary_file_for_annotate(self, tmp_path: Path) -> None:
        """Under Buildkite the markdown summary is written beside the stream (or to --summary) for
        buildkite-agent annotate, and stderr says how to use it."""
        code, _, err = gate(tmp_path, {"BUILDKITE": "true"}, "--quiet", script="exit 2\n")
        text = (tmp_path / "s.aos.md").read_text()
        assert 1 == code
        assert text.startswith("### ❌ gate exit\\-zero: FAIL (scope command)\n")
        assert b"buildkite-agent annotate --style error --context alpha-observe < s.aos.md" in err
        other = tmp_path / "other"
        other.mkdir()
        code, _, _ = gate(other, {"BUILDKITE": "true"}, "--quiet", "--summary", "out/sum.md", script="true\n")
        summary = (other / "out" / "sum.md").read_text()
        assert (0, True, False) == (
            code,
            summary.startswith("### ✅ gate exit\\-zero: PASS"),
            (other / "s.aos.md").exists(),
        )


class TestOutputLines:
    def test_plain_and_heredoc(self) -> None:
        """Single-line values are NAME=VALUE; CR or LF selects the heredoc form."""
        assert "a=1\nb<<D\nx\ry\nD\nc<<D\n\n\nD\n" == github_output_lines({"a": "1", "b": "x\ry", "c": "\n"}, "D")
        values, _ = parse_github_file(github_output_lines({"a": "1", "b": "x\ry", "c": "\n"}))
        assert {"a": "1", "b": "x\ry", "c": "\n"} == values
