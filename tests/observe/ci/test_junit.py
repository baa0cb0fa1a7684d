"""``--junit`` on ``gate`` and ``verdict``: valid Jenkins/Surefire JUnit XML that a person can act on."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any, ClassVar
from xml.etree import ElementTree as ET

import pytest
import xmlschema

from aos.verify import verify_stream
from gates.report import TAIL_BYTES, facts_from_events, junit_xml
from gates.testing import SyntheticStream
from gates.verdict import Check, Verdict
from tests.helpers.paths import ASSETS
from tests.helpers.recorder import events
from tests.helpers.run import alpha

XSD = ASSETS / "junit-jenkins.xsd"

GATE = """\
[gate]
name = "ci-lane"
scope = "lane"

[exit]
code = 0

[[step]]
name = "build"

[[step]]
name = "test"
"""

LANE = (
    'alpha observe step build -- sh -c "sleep 0.3; echo built"\n'
    "alpha observe step test -- sh -c 'echo collecting >&2; echo \"FAILED test_x: 1 != 2\" >&2; exit 3'\n"
    "exit 0\n"
)


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


def run_lane(tmp_path: Path, *opts: str, lane: str = LANE) -> tuple[int, Path]:
    (tmp_path / "gate.toml").write_text(GATE)
    (tmp_path / "lane.sh").write_text(lane)
    p = alpha(
        "observe",
        "gate",
        "ci-lane",
        "--gate-file",
        "gate.toml",
        "--quiet",
        "--out",
        "s.aos",
        *opts,
        "--",
        "sh",
        "lane.sh",
        cwd=tmp_path,
    )
    return p.returncode, tmp_path / "s.aos"


def cases(path: Path) -> dict[str, ET.Element]:
    return {c.attrib["name"]: c for c in ET.parse(path).getroot().iter("testcase")}


class TestGateJunit:
    def test_report_validates_and_carries_times_host_and_stderr(
        self, tmp_path: Path, schema: xmlschema.XMLSchema
    ) -> None:
        """A failing lane's report validates against the Jenkins schema; testcases carry the steps' durations,
        the suite the recording's start and host; the failed check's body holds its reason and the step's stderr."""
        code, stream = run_lane(tmp_path, "--junit", "reports/deep/junit.xml")
        report = tmp_path / "reports" / "deep" / "junit.xml"
        assert 1 == code
        schema.validate(str(report))
        suite = ET.parse(report).getroot().find("testsuite")
        assert suite is not None
        evs = events(stream)
        opened = evs[0]
        stamp = suite.attrib["timestamp"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", stamp)  # Ant's ISO 8601, UTC, no zone
        from datetime import UTC, datetime

        assert datetime.fromtimestamp(opened.wall_ns // 10**9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") == stamp
        assert socket.gethostname() == suite.attrib["hostname"]
        assert verify_stream(stream).stream_id == suite.attrib["id"]
        got = cases(report)
        build_ns = next(e.attrs["duration_ns"] for e in evs if e.kind == "step.end" and e.attrs["name"] == "build")
        assert f"{build_ns / 1e9:.3f}" == got["step:build"].attrib["time"]
        assert float(got["step:build"].attrib["time"]) >= 0.3
        failure = got["step:test"].find("failure")
        assert failure is not None
        assert failure.text is not None
        assert failure.attrib["message"] in failure.text
        assert "--- stderr of step test (last lines) ---\ncollecting\nFAILED test_x: 1 != 2" in failure.text
        assert "evidence seqs: " in failure.text

    def test_passing_lane_has_no_failure(self, tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
        """A passing lane's report validates and holds no failure or error element."""
        lane = 'alpha observe step build -- true\nalpha observe step test -- sh -c "echo ok"\n'
        code, _ = run_lane(tmp_path, "--junit", "j.xml", lane=lane)
        assert 0 == code
        schema.validate(str(tmp_path / "j.xml"))
        root = ET.parse(tmp_path / "j.xml").getroot()
        assert ([], []) == (list(root.iter("failure")), list(root.iter("error")))

    def test_missing_folders_are_created(self, tmp_path: Path) -> None:
        """--junit into folders that do not exist yet creates them (it once warned and exited 0 with no report)."""
        p = alpha("observe", "gate", "exit-zero", "--quiet", "--junit", "a/b/c/j.xml", "--", "true", cwd=tmp_path)
        assert (0, True) == (p.returncode, (tmp_path / "a" / "b" / "c" / "j.xml").is_file())

    def test_unwritable_report_is_125_before_the_command_runs(self, tmp_path: Path) -> None:
        """A --junit path that cannot be written exits 125 and the command does not run (like --out)."""
        (tmp_path / "file").write_text("not a folder")
        p = alpha("observe", "gate", "exit-zero", "--junit", "file/j.xml", "--", "touch", "ran", cwd=tmp_path)
        assert (125, False) == (p.returncode, (tmp_path / "ran").exists())
        assert b"cannot write the JUnit report file/j.xml" in p.stderr


class TestVerdictJunit:
    def test_re_report_a_downloaded_stream(self, tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
        """verdict --junit re-reports a stream recorded elsewhere: the same testcases, times and stderr tail."""
        code, stream = run_lane(tmp_path, "--junit", "first.xml")
        elsewhere = tmp_path / "downloaded"
        elsewhere.mkdir()
        copy = elsewhere / "ci.aos"
        copy.write_bytes(stream.read_bytes())
        p = alpha("observe", "verdict", str(copy), "--junit", "out/again.xml", cwd=elsewhere)
        assert (1, 1) == (code, p.returncode)
        again = elsewhere / "out" / "again.xml"
        schema.validate(str(again))
        first, second = cases(tmp_path / "first.xml"), cases(again)
        assert {n: c.attrib["time"] for n, c in first.items()} == {n: c.attrib["time"] for n, c in second.items()}
        assert "FAILED test_x: 1 != 2" in (second["step:test"].findtext("failure") or "")

    def test_refused_stream_writes_no_report(self, tmp_path: Path) -> None:
        """A stream that does not verify is refused; no report is written for it."""
        p = alpha("observe", "verdict", "none.aos", "--junit", "j.xml", cwd=tmp_path)
        assert (1, False) == (p.returncode, (tmp_path / "j.xml").exists())


class TestJunitText:
    def _verdict(self, reason: str) -> Verdict:
        return Verdict.of("g", "command", [Check("exit-code", "fail", reason, (2,))], "fail")

    def test_hostile_text_stays_valid_xml(self, schema: xmlschema.XMLSchema) -> None:
        """Control characters, terminal escapes and markup in a reason or stderr leave the XML valid."""
        s = SyntheticStream()
        s.add("stderr", {}, data=b"\x1b[31mred\x1b[0m \x00\x07 </failure><x>\n")
        s.exit(1)
        evs = s.events()
        reason = "exited 1 \x1b[1m\x0b <![CDATA[ ]]> & </testcase>"
        v = self._verdict(reason)
        xml = junit_xml(v, stream="s.aos", facts=facts_from_events(evs, [2]))
        schema.validate(xml)
        body = ET.fromstring(xml).findtext(".//failure") or ""
        assert "red \\x00\\x07 </failure><x>" in body
        assert "\x1b" not in xml

    def test_tail_is_bounded(self) -> None:
        """Only the tail of a huge stderr is quoted."""
        s = SyntheticStream()
        s.add("stderr", {}, data=b"x" * 100 + b"\n" + b"y" * (10 * TAIL_BYTES) + b"\nthe end\n")
        s.exit(1)
        xml = junit_xml(self._verdict("r"), facts=facts_from_events(s.events(), [2]))
        body = ET.fromstring(xml).findtext(".//failure") or ""
        assert body.endswith("the end")
        assert len(body) < 2 * TAIL_BYTES

    def test_inconclusive_is_an_error_not_a_skip(self, schema: xmlschema.XMLSchema) -> None:
        """An inconclusive check is an <error>, never <skipped> (it must not render as a pass)."""
        v = Verdict.of("g", "physical", [Check("step:x", "inconclusive", "never ran")])
        xml = junit_xml(v)
        schema.validate(xml)
        root: Any = ET.fromstring(xml)
        assert (1, 0) == (len(list(root.iter("error"))), len(list(root.iter("skipped"))))


def _reporter_position(case: ET.Element, suite: ET.Element, workspace: Path) -> tuple[str, int]:
    """Where mikepenz/action-junit-report (src/testParser.ts, resolveFileAndLine and resolvePath) places a
    failing testcase, by its rule: file from the case, else its failure, else its suite, else the last dotted
    part of the classname; line from the same, else the last `` [^ ]*FILE.*?:N`` of the failure's text, else 1;
    a file that does not exist resolved by the glob ``WORKSPACE/**/FILE.*``."""
    problem = case.find("failure")
    if problem is None:
        problem = case.find("error")
    assert problem is not None
    file = case.get("file") or problem.get("file") or suite.get("file") or ""
    line = case.get("line") or problem.get("line") or suite.get("line")
    name = file or (case.get("classname") or case.get("name") or "").split(".")[-1]
    if not (name and line):
        pattern = rf" [^ ]*{re.escape(name).replace('::', '/')}.*?:\d+"
        matches = re.findall(pattern, (problem.text or "").strip())
        line = matches[-1].split(":")[-1] if matches else (line or "1")
    if not (workspace / name).exists():
        found = sorted(workspace.glob(f"**/{name}.*"))
        name = str(found[0].relative_to(workspace)) if found else name
    return name, int(line)


class TestCarriedCasesKeepTheirPlace:
    """A carried failing test is placed at its own file and line by a reporter reading the JUnit (checked
    here by mikepenz/action-junit-report's rule, reproduced above), never at the results file's line 1."""

    FILES: ClassVar[dict[str, str]] = {
        "tests/test_app.py": (
            "def test_adds():\n    assert 1 + 1 == 2\n\n\ndef test_breaks():\n    x = 1\n    assert x == 2\n"
        ),
        "tests/test_more.py": 'def test_other():\n    assert False, "boom"\n',
    }

    def _junit(self, tmp_path: Path, files: dict[str, str]) -> ET.Element:
        import sys

        for name, text in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", "reports/j.xml"]
        p = alpha(
            "observe", "gate", "tests-pass", "--quiet", "--out", "s.aos", "--junit", "out/gate.xml",
            "--artifact", "reports/j.xml", "--", *pytest_argv, "tests",
            cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert 1 == p.returncode, p.stderr.decode()
        return ET.parse(tmp_path / "out" / "gate.xml").getroot()

    def _placed(self, root: ET.Element, workspace: Path) -> dict[str, tuple[str, int]]:
        suite = next(s for s in root.iter("testsuite") if s.get("name") == "reports/j.xml")
        assert suite.get("file") != "reports/j.xml"
        return {
            c.get("name", ""): _reporter_position(c, suite, workspace)
            for c in suite.iter("testcase")
            if c.find("failure") is not None
        }

    def test_two_source_files(self, tmp_path: Path) -> None:
        root = self._junit(tmp_path, self.FILES)
        assert {"test_breaks": ("tests/test_app.py", 7), "test_other": ("tests/test_more.py", 2)} == self._placed(
            root, tmp_path
        )

    def test_one_source_file_is_the_suites(self, tmp_path: Path) -> None:
        root = self._junit(tmp_path, {"tests/test_app.py": self.FILES["tests/test_app.py"]})
        suite = next(s for s in root.iter("testsuite") if s.get("name") == "reports/j.xml")
        assert "tests/test_app.py" == suite.get("file")
        assert {"test_breaks": ("tests/test_app.py", 7)} == self._placed(root, tmp_path)

    def test_the_rule_places_a_suite_named_by_its_results_file_at_line_1(self, tmp_path: Path) -> None:
        """The rule's own check: the JUnit written before (the suite's file the results file) put every
        failing test at that file's line 1."""
        root = self._junit(tmp_path, self.FILES)
        suite = next(s for s in root.iter("testsuite") if s.get("name") == "reports/j.xml")
        suite.set("file", "reports/j.xml")
        case = next(c for c in suite.iter("testcase") if c.get("name") == "test_breaks")
        assert ("reports/j.xml", 1) == _reporter_position(case, suite, tmp_path)
