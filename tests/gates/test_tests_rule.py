"""``[[tests]]``: the JUnit and TAP files the recorder captured, read case by case, and nothing else."""

from __future__ import annotations

import time

import pytest

from gates.junit import parse_junit
from gates.language import GateFileError, TestsRule, parse_gate_text
from gates.results import parse_test_file
from gates.tap import parse_tap
from gates.testcases import MAX_BYTES, TestFileError
from gates.testing import SyntheticStream
from tests.helpers.paths import ASSETS

DIALECTS = ASSETS / "dialects"


def gate(body: str) -> str:
    return '[gate]\nname = "t"\n' + body


def junit(*cases: str, totals: str = 'tests="1" failures="0" errors="0"') -> bytes:
    return (f'<testsuites><testsuite name="s" {totals}>' + "".join(cases) + "</testsuite></testsuites>").encode()


PASS = '<testcase classname="app" name="test_ok"/>'
FAIL = (
    '<testcase classname="app" name="test_bad"><failure message="1 != 2">app.py:7: AssertionError</failure></testcase>'
)
SKIP = '<testcase classname="app" name="test_later"><skipped message="later"/></testcase>'


def run(rule: str, *files: tuple[str, bytes], step: str | None = None) -> tuple[str, str, tuple[int, ...]]:
    """Evaluate one ``[[tests]]`` rule over a synthetic stream holding ``files`` as captures."""
    s = SyntheticStream()
    if step:
        s.step_start(step)
    for path, data in files:
        s.artifact(path, data, step=step)
    if step:
        s.step_end(step)
    s.exit(0)
    v = s.evaluate(parse_gate_text(gate(rule), "t.toml"))
    (check,) = v.checks
    return check.status, check.reason, check.evidence


class TestLanguage:
    """The rule's keys, defaults and refusals."""

    def test_defaults(self) -> None:
        """`junit` alone: at least one test, no failure, no error, skips unbounded, id tests:GLOB."""
        (rule,) = parse_gate_text(gate('[[tests]]\njunit = "r/*.xml"\n'), "t").rules
        assert TestsRule("tests:r/*.xml", "r/*.xml", "junit") == rule

    @pytest.mark.parametrize(
        "body",
        [
            "[[tests]]\nmin_tests = 1\n",
            '[[tests]]\njunit = "a"\ntap = "b"\n',
            '[[tests]]\njunit = "a"\nfailures = -1\n',
            '[[tests]]\njunit = "a"\nrequire = [""]\n',
            '[[tests]]\njunit = "a"\nfailure = 0\n',
        ],
    )
    def test_malformed(self, body: str) -> None:
        """Neither or both formats, a negative limit, an empty required id or an unknown key is refused."""
        with pytest.raises(GateFileError):
            parse_gate_text(gate(body), "t")


class TestCounts:
    """Counts come from the cases the captured files hold."""

    def test_pass_names_counts_and_cites_the_artifact(self) -> None:
        """A file of passing and skipped cases passes, naming the counts and citing the capture's events."""
        status, reason, evidence = run('[[tests]]\njunit = "r/*.xml"\n', ("r/j.xml", junit(PASS, SKIP)))
        assert "pass" == status
        assert "r/j.xml: 2 tests: 1 passed, 0 failed, 0 errors, 1 skipped" == reason
        assert (2, 3) == evidence  # the artifact event and its one chunk

    def test_failure_names_the_failing_ids(self) -> None:
        """A failing case fails the check, naming it, although the suite's totals say no failure."""
        status, reason, _ = run('[[tests]]\njunit = "**/*.xml"\n', ("j.xml", junit(PASS, FAIL)))
        assert "fail" == status
        assert reason.endswith("at most 0 failures and 0 errors allowed; failing: app.test_bad")

    def test_failures_allowed(self) -> None:
        """`failures = 1` lets one failure through."""
        status, _, _ = run('[[tests]]\njunit = "j.xml"\nfailures = 1\n', ("j.xml", junit(PASS, FAIL)))
        assert "pass" == status

    def test_too_few_tests_is_inconclusive(self) -> None:
        """A file of no test cases (whatever its totals say) establishes nothing."""
        status, reason, _ = run('[[tests]]\njunit = "j.xml"\n', ("j.xml", junit(totals='tests="500" failures="0"')))
        assert ("inconclusive", True) == (status, "at least 1 required" in reason)

    def test_max_skipped(self) -> None:
        """More skips than `max_skipped` fail."""
        status, reason, _ = run('[[tests]]\njunit = "j.xml"\nmax_skipped = 0\n', ("j.xml", junit(PASS, SKIP)))
        assert ("fail", True) == (status, "at most 0 skipped allowed" in reason)

    def test_require(self) -> None:
        """A required test must be present (else inconclusive) and pass (else fail); globs match ids."""
        data = ("j.xml", junit(PASS, FAIL))
        assert "pass" == run('[[tests]]\njunit = "j.xml"\nfailures = 1\nrequire = ["app.test_ok"]\n', data)[0]
        assert "pass" == run('[[tests]]\njunit = "j.xml"\nfailures = 1\nrequire = ["app::test_o*"]\n', data)[0]
        status, reason, _ = run('[[tests]]\njunit = "j.xml"\nfailures = 1\nrequire = ["app.test_bad"]\n', data)
        assert ("fail", "required test 'app.test_bad': app.test_bad failed") == (status, reason)
        status, reason, _ = run('[[tests]]\njunit = "j.xml"\nrequire = ["test_gone"]\n', ("j.xml", junit(PASS)))
        assert ("inconclusive", "required test 'test_gone' is not among the 1 test captured") == (status, reason)

    def test_files_add_up(self) -> None:
        """Every matching capture counts; the reason names the files."""
        status, reason, _ = run('[[tests]]\njunit = "r/*.xml"\n', ("r/a.xml", junit(PASS)), ("r/b.xml", junit(PASS)))
        assert ("pass", True) == (status, reason.startswith("2 files (r/a.xml, r/b.xml): 2 tests: 2 passed"))

    def test_not_captured_is_inconclusive(self) -> None:
        """No capture matches: inconclusive, saying how to capture one."""
        status, reason, _ = run('[[tests]]\njunit = "r/*.xml"\n', ("other.xml", junit(PASS)))
        assert ("inconclusive", True) == (status, "no captured artifact matches 'r/*.xml'" in reason)

    def test_omitted_content_is_inconclusive(self) -> None:
        """A capture whose bytes were not recorded (masked, too large) cannot be read."""
        s = SyntheticStream()
        s.add("artifact", {"path": "j.xml", "size": 10, "sha256": "0" * 64, "content": "omitted", "masked": True})
        s.exit(0)
        (check,) = s.evaluate(parse_gate_text(gate('[[tests]]\njunit = "j.xml"\n'), "t")).checks
        assert ("inconclusive", True) == (check.status, "it held a masked value" in check.reason)

    def test_bytes_that_do_not_hash_to_the_digest(self) -> None:
        """Chunks that are not the bytes the artifact event hashed are not read."""
        s = SyntheticStream()
        op = s.artifact("j.xml", junit(FAIL))
        op["attrs"]["sha256"] = "1" * 64
        s.exit(0)
        (check,) = s.evaluate(parse_gate_text(gate('[[tests]]\njunit = "j.xml"\n'), "t")).checks
        assert ("inconclusive", True) == (check.status, "hash to" in check.reason)

    def test_step(self) -> None:
        """`step`: only captures made during that step count."""
        rule = '[[tests]]\njunit = "j.xml"\nstep = "test"\n'
        assert "pass" == run(rule, ("j.xml", junit(PASS)), step="test")[0]
        status, reason, _ = run(rule, ("j.xml", junit(PASS)), step="build")
        assert ("inconclusive", "step 'test' was never recorded, so no file can have been captured during it") == (
            status,
            reason,
        )
        status, reason, _ = run(rule.replace('"test"', '"build"'), ("j.xml", junit(PASS)))
        assert "inconclusive" == status

    def test_a_receipt_claiming_passing_tests_is_not_evidence(self) -> None:
        """Receipts saying the tests passed (with counts) never satisfy the rule."""
        s = SyntheticStream()
        s.receipt("tests", "pass", passed=64204, failed=0, junit="r/j.xml")
        s.exit(0)
        (check,) = s.evaluate(parse_gate_text(gate('[[tests]]\njunit = "r/*.xml"\n'), "t")).checks
        assert "inconclusive" == check.status


class TestDialects:
    """The JUnit writers' dialects, as committed samples of their output."""

    def counts(self, name: str) -> dict[str, int]:
        parsed = parse_junit((DIALECTS / name).read_bytes())
        return {k: parsed.count(k) for k in ("passed", "failed", "error", "skipped")}  # type: ignore[arg-type]

    def test_surefire(self) -> None:
        """Surefire: a flakyFailure passed on a re-run; failure+rerunFailure failed; skipped counted."""
        assert {"passed": 2, "failed": 2, "error": 0, "skipped": 1} == self.counts("surefire.xml")
        flaky = [c for c in parse_junit((DIALECTS / "surefire.xml").read_bytes()).cases if c.flaky]
        assert ["com.example.CalculatorTest.flaky"] == [c.id for c in flaky]

    def test_gotestsum(self) -> None:
        """gotestsum: subtests are cases; the failure body's file:line locates the failure."""
        assert {"passed": 2, "failed": 1, "error": 0, "skipped": 1} == self.counts("gotestsum.xml")
        (bad,) = [c for c in parse_junit((DIALECTS / "gotestsum.xml").read_bytes()).cases if c.status == "failed"]
        assert ("calc_test.go", 17) == (bad.file, bad.line)

    def test_jest_junit(self) -> None:
        """jest-junit: a bare <failure> body, a file attribute, an empty <skipped/>."""
        assert {"passed": 1, "failed": 1, "error": 0, "skipped": 1} == self.counts("jest-junit.xml")

    def test_nextest(self) -> None:
        """cargo-nextest: rerunFailure after a failure fails, flakyFailure alone passes."""
        assert {"passed": 2, "failed": 1, "error": 0, "skipped": 1} == self.counts("nextest.xml")

    def test_jenkins_nested(self) -> None:
        """Nested testsuites, <error> apart from <failure>, file/line attributes; lying totals ignored."""
        parsed = parse_junit((DIALECTS / "jenkins-nested.xml").read_bytes())
        assert {"passed": 1, "failed": 1, "error": 1, "skipped": 1} == self.counts("jenkins-nested.xml")
        crash = next(c for c in parsed.cases if c.status == "error")
        assert ("inner", "suite/inner.py", 12, "core dumped") == (crash.suite, crash.file, crash.line, crash.output)

    def test_pytest_lines_are_one_based(self) -> None:
        """pytest's xunit1 `line` is 0-based: it is read as the 1-based line an annotation needs."""
        data = (
            b'<testsuites><testsuite name="pytest"><testcase name="t" file="t.py" line="4"/></testsuite></testsuites>'
        )
        (case,) = parse_junit(data).cases
        assert 5 == case.line


class TestHostile:
    """Known-bad JUnit (tests/assets/junit-*.xml): a named reason at once, never a hang or a read of another file."""

    @pytest.mark.parametrize(
        ("name", "kind"),
        [
            ("junit-billion-laughs.xml", "junit-dtd"),
            ("junit-external-entity.xml", "junit-dtd"),
            ("junit-parameter-entity.xml", "junit-dtd"),
            ("junit-external-dtd.xml", "junit-external"),
            ("junit-deep.xml", "junit-depth"),
            ("junit-not-junit.xml", "junit-schema"),
            ("junit-truncated.xml", "junit-syntax"),
        ],
    )
    def test_refused_by_name(self, name: str, kind: str) -> None:
        """Each asset is refused with its reason's name, within a second, and the gate says it inconclusive."""
        data = (ASSETS / name).read_bytes()
        started = time.monotonic()
        with pytest.raises(TestFileError) as caught:
            parse_test_file(data, "junit")
        assert kind == caught.value.kind
        assert time.monotonic() - started < 1.0
        status, reason, _ = run('[[tests]]\njunit = "j.xml"\n', ("j.xml", data))
        assert ("inconclusive", True, False) == (status, f"not read as junit: {kind}:" in reason, "root:" in reason)

    def test_huge_file(self) -> None:
        """A file beyond the bound is not parsed at all."""
        with pytest.raises(TestFileError) as caught:
            parse_test_file(b"<testsuites>" + b" " * MAX_BYTES + b"</testsuites>", "junit")
        assert "junit-size" == caught.value.kind

    def test_not_utf8_is_not_a_traceback(self) -> None:
        """Bytes that are no XML encoding at all are a named syntax refusal."""
        with pytest.raises(TestFileError) as caught:
            parse_junit(b'<?xml version="1.0" encoding="no-such"?><testsuites/>')
        assert "junit-syntax" == caught.value.kind


TAP14 = b"""TAP version 14
1..4
ok 1 - adds
not ok 2 - divides
  ---
  message: 'expected 2, got 3'
  at:
    file: calc.t
    line: 9
  ...
ok 3 - net # SKIP no network
# Subtest: group
    ok 1 - inner one
    not ok 2 - inner two # TODO not yet
    1..2
ok 4 - group
"""


class TestTap:
    """TAP 13/14 read as a harness reads it."""

    def test_tap14(self) -> None:
        """Plan, ok/not ok, SKIP, TODO (not a failure), YAML file/line, subtests as leaves."""
        cases = parse_tap(TAP14).cases
        assert [
            ("adds", "passed"),
            ("divides", "failed"),
            ("net", "skipped"),
            ("group > inner one", "passed"),
            ("group > inner two", "skipped"),
        ] == [(c.name, c.status) for c in cases]
        assert ("calc.t", 9, "expected 2, got 3") == (cases[1].file, cases[1].line, cases[1].message)

    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            (b"1..3\nok 1\nok 2\n", "the plan is 1..3 but 2 test point(s) ran"),
            (b"ok 1\nok 2\n", "no plan: 2 test point(s) and no 1..N line"),
            (b"1..2\nok 1\nBail out! database down\n", "the run bailed out: database down"),
        ],
    )
    def test_incomplete_runs_are_errors(self, text: bytes, problem: str) -> None:
        """A plan not met, no plan, or a bail out is an error case, as prove fails the file."""
        errors = [c.message for c in parse_tap(text).cases if c.status == "error"]
        assert [problem] == errors

    def test_not_tap(self) -> None:
        """Text with no plan and no test point is not TAP."""
        with pytest.raises(TestFileError) as caught:
            parse_tap(b"<html>all good</html>\n")
        assert "tap-syntax" == caught.value.kind

    def test_parent_failing_alone_is_a_case(self) -> None:
        """A parent that fails while its subtests pass is itself a failed case."""
        cases = parse_tap(b"1..1\n    ok 1 - a\n    1..1\nnot ok 1 - parent\n").cases
        assert [("parent > a", "passed"), ("parent", "failed")] == [(c.name, c.status) for c in cases]

    def test_deep_subtests(self) -> None:
        """Subtests nested beyond the bound are refused by name."""
        text = b"".join(b" " * (4 * d) + b"ok 1\n" for d in range(40, 0, -1))
        with pytest.raises(TestFileError) as caught:
            parse_tap(text)
        assert "tap-depth" == caught.value.kind
