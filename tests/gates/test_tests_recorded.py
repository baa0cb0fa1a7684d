"""Test results as evidence on real runs: pytest, node's and Perl's TAP, recorded and gated, and what CI is shown."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import xmlschema

from gates.evaluation import evaluate_stream
from gates.language import parse_gate_text
from gates.report import Facts
from gates.verdict import Check, Verdict
from observe.ci.junit import MAX_ANNOTATIONS, junit_report, summary_markdown
from observe.ci.systems.github import github_lines
from tests.helpers.paths import ASSETS, ROOT
from tests.helpers.run import alpha

XSD = ASSETS / "junit-jenkins.xsd"

PROJECT = {
    "test_calc.py": (
        "import pytest\n"
        "def test_adds():\n    assert 1 + 1 == 2\n"
        "def test_divides():\n    print('dividing')\n    assert 6 / 2 == 2\n"
        "@pytest.mark.skip(reason='later')\ndef test_later():\n    pass\n"
        "@pytest.mark.parametrize('word', ['caf\u00e9'])\ndef test_w\u00f6rd(word):\n    assert word\n"
    ),
}
PASSING = {"test_calc.py": "def test_adds():\n    assert 1 + 1 == 2\ndef test_more():\n    assert 2 * 2 == 4\n"}


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def pytest_gate(cwd: Path, *opts: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``alpha observe gate tests-pass --artifact 'reports/*.xml' -- python -m pytest --junitxml reports/junit.xml``."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", "reports/junit.xml"]
    p = alpha(
        "observe", "gate", "tests-pass", "--quiet", "--out", "s.aos", "--artifact", "reports/*.xml", *opts, "--", *argv,
        cwd=cwd, env=env, timeout=120,
    )  # fmt: skip
    return p.returncode, p.stdout.decode() + p.stderr.decode()


class TestPytest:
    """A tiny pytest project, recorded under the built-in `tests-pass`."""

    def test_passing_suite_passes(self, tmp_path: Path) -> None:
        """Two passing tests, captured: exit 0, both checks pass and the reason counts them."""
        rc, out = pytest_gate(project(tmp_path, PASSING))
        assert 0 == rc, out
        assert "reports/junit.xml: 2 tests: 2 passed, 0 failed, 0 errors, 0 skipped" in out

    def test_failing_suite_everything_ci_is_shown(self, tmp_path: Path) -> None:
        """A failing test fails the gate by name; --junit (gate and verdict) carries every case, valid and ASCII;
        GitHub gets an ::error at the failing line and a summary listing it."""
        cwd = project(tmp_path, PROJECT)
        summary = tmp_path / "summary.md"
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
        rc, out = pytest_gate(cwd, "--junit", "out/gate.xml", env=env)
        assert 1 == rc, out
        assert "4 tests: 2 passed, 1 failed, 0 errors, 1 skipped" in out
        assert "failing: test_calc.test_divides" in out
        assert "::error file=test_calc.py,line=6,title=test test_calc.test_divides failed::" in out
        assert "test\\_calc\\.test\\_divides (test\\_calc\\.py\\:6)" in summary.read_text(encoding="utf-8")
        v = alpha("observe", "verdict", "s.aos", "--junit", "out/verdict.xml", cwd=cwd)
        assert 1 == v.returncode
        schema = xmlschema.XMLSchema(str(XSD))
        for name in ("gate.xml", "verdict.xml"):
            raw = (cwd / "out" / name).read_bytes()
            assert raw == raw.decode("ascii").encode()  # every other character a reference
            schema.validate(str(cwd / "out" / name))
            root = ET.fromstring(raw)
            suites = {s.get("name"): s for s in root.iter("testsuite")}
            assert ["tests-pass", "reports/junit.xml"] == list(suites)
            cases = [c.get("name") for c in suites["reports/junit.xml"].iter("testcase")]
            assert [
                "test_adds",
                "test_divides",
                "test_later",
                "test_w\u00f6rd[caf\\xe9]",
            ] == cases  # pytest escapes the id
            assert "2" == suites["tests-pass"].get("failures")  # exit-code and tests
            body = suites["tests-pass"].find("testcase[@name='exit-code']/failure")
            assert body is not None
            assert "stdout of the command" in (body.text or "")
            assert "FAILED test_calc.py::test_divides" in (body.text or "")

    def test_a_receipt_claiming_passing_tests_never_satisfies_it(self, tmp_path: Path) -> None:
        """A command that exits 0 and only claims passing tests in a receipt is inconclusive (exit 3)."""
        claim = "alpha observe receipt tests --status pass --field passed=64204 --field failed=0"
        p = alpha(
            "observe", "gate", "tests-pass", "--quiet", "--out", "s.aos", "--", "sh", "-c", claim,
            cwd=tmp_path, timeout=60,
        )  # fmt: skip
        assert 3 == p.returncode, p.stderr.decode()
        assert "no captured artifact matches '**/*.xml'" in p.stderr.decode()

    def test_file_edited_after_capture_is_not_what_is_read(self, tmp_path: Path) -> None:
        """The gate reads the bytes captured, not the file rewritten afterwards (nor later, on disk)."""
        failing = (
            '<testsuite name="s" tests="1" failures="0" errors="0"><testcase name="t"><failure/></testcase></testsuite>'
        )
        passing = '<testsuite name="s" tests="1" failures="0" errors="0"><testcase name="t"/></testsuite>'
        (tmp_path / "gate.toml").write_text('[gate]\nname = "mine"\n[[tests]]\njunit = "j.xml"\n')
        script = f"echo '{failing}' > j.xml && alpha observe artifact j.xml && echo '{passing}' > j.xml"
        p = alpha(
            "observe", "gate", "mine", "--gate-file", "gate.toml", "--quiet", "--out", "s.aos",
            "--", "sh", "-c", script, cwd=tmp_path, timeout=60,
        )  # fmt: skip
        assert 1 == p.returncode, p.stderr.decode()
        assert "<failure/>" not in (tmp_path / "j.xml").read_text()  # on disk: the passing rewrite
        gate = parse_gate_text((tmp_path / "gate.toml").read_text(), "gate.toml")
        assert "fail" == evaluate_stream(gate, tmp_path / "s.aos").verdict


def tap_gate(cwd: Path, command: str) -> tuple[int, str]:
    (cwd / "gate.toml").write_text('[gate]\nname = "tap"\n[[tests]]\ntap = "*.tap"\n')
    p = alpha(
        "observe", "gate", "tap", "--gate-file", "gate.toml", "--quiet", "--out", "s.aos", "--artifact", "*.tap",
        "--", "sh", "-c", command, cwd=cwd, timeout=120,
    )  # fmt: skip
    return p.returncode, p.stderr.decode()


class TestTapProducers:
    """Real TAP producers here: node's test runner (TAP 13 with subtests and YAML) and Perl's Test::More."""

    @pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
    def test_node_test_runner(self, tmp_path: Path) -> None:
        """node --test: a failing subtest fails the gate by its path; skip and todo are not failures."""
        (tmp_path / "calc.test.js").write_text(
            "const test = require('node:test'); const assert = require('node:assert');\n"
            "test('adds', () => assert.strictEqual(1 + 1, 2));\n"
            "test('later', { skip: 'not now' }, () => {});\n"
            "test('someday', { todo: true }, () => { throw new Error('x'); });\n"
            "test('group', async (t) => {\n"
            "  await t.test('inner ok', () => {});\n"
            "  await t.test('inner bad', () => { throw new Error('nope'); });\n"
            "});\n"
        )
        rc, out = tap_gate(tmp_path, "node --test --test-reporter=tap calc.test.js > node.tap; true")
        assert 1 == rc, out
        assert "node.tap: 5 tests: 2 passed, 1 failed, 0 errors, 2 skipped" in out
        assert "failing: group > inner bad" in out

    @pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
    def test_perl_test_more(self, tmp_path: Path) -> None:
        """Test::More's TAP (a subtest, a skip) passes when every test does."""
        (tmp_path / "basic.t").write_text(
            "use strict; use Test::More tests => 3;\n"
            "ok(1, 'adds');\n"
            "subtest 'group' => sub { plan tests => 2; ok(1, 'one'); ok(1, 'two'); };\n"
            "SKIP: { skip 'no network', 1; ok(0, 'net'); }\n"
        )
        rc, out = tap_gate(tmp_path, "perl basic.t > perl.tap")
        assert 0 == rc, out
        assert "perl.tap: 4 tests: 3 passed, 0 failed, 0 errors, 1 skipped" in out


def _verdict_with(cases: str) -> tuple[Verdict, Facts]:
    data = f'<testsuite name="s" tests="0" failures="0" errors="0">{cases}</testsuite>'.encode()
    check = Check("tests", "fail", "many failed", (5, 6))
    v = Verdict.of("g", "command", [check], test_files=[{"check": "tests", "format": "junit", "artifacts": [5]}])
    facts = Facts(files={5: ("r/j.xml", data)})
    return v, facts


class TestCiViews:
    """What CI is shown of the captured tests, from the verdict and the captured bytes."""

    def test_annotations_are_capped(self) -> None:
        """At most MAX_ANNOTATIONS failing tests are annotated, then one line counts the rest."""
        cases = "".join(
            f'<testcase classname="c" name="t{i}" file="t.py" line="{i}"><failure message="m{i}"/></testcase>'
            for i in range(MAX_ANNOTATIONS + 7)
        )
        v, facts = _verdict_with(cases)
        lines = github_lines(v, facts)
        per_test = [line for line in lines if "title=test c.t" in line]
        assert MAX_ANNOTATIONS == len(per_test)
        assert "::error file=t.py,line=0,title=test c.t0 failed::m0 (r/j.xml)" == per_test[0]
        assert lines[-1].endswith("::7 more failing test(s), not annotated one by one")

    def test_workflow_command_text_cannot_escape(self) -> None:
        """A test name or message cannot start a workflow command of its own."""
        cases = '<testcase name="x%0A::set-env" file="a,b:c"><failure message="line&#10;::add-mask::x"/></testcase>'
        v, facts = _verdict_with(cases)
        (line,) = [x for x in github_lines(v, facts) if "title=test" in x]
        assert "\n" not in line
        assert "file=a%2Cb%3Ac," in line
        assert "%0A::add-mask::x" in line

    def test_unreadable_capture_is_an_error_suite(self) -> None:
        """A capture that is not JUnit still gets its testsuite: one error case saying why."""
        v, _ = _verdict_with("")
        root = ET.fromstring(junit_report(v, stream="s.aos", facts=Facts(files={5: ("r/j.xml", b"<html/>")})))
        (err,) = root.iter("error")
        assert "not read as junit: junit-schema" in (err.get("message") or "")
        xmlschema.XMLSchema(str(XSD)).validate(
            junit_report(v, stream="s.aos", facts=Facts(files={5: ("r/j.xml", b"<html/>")}))
        )

    def test_summary_lists_failing_tests(self) -> None:
        """The job summary ends with the failing tests, file and line."""
        v, facts = _verdict_with(
            '<testcase classname="c" name="t" file="t.py" line="3"><failure message="no"/></testcase>'
        )
        text = summary_markdown(v, stream="s.aos", stream_id="0" * 32, facts=facts)
        assert "- ❌ c\\.t (t\\.py\\:3): no \\[r/j\\.xml\\]" in text
        assert json.dumps("Tests:")[1:-1] in text


CI_RUN = ROOT / ".ci" / "run"


def ci_gate_lines() -> str:
    """.ci/run's own lines that gate the suite: from removing the old results file to the gate's exit."""
    text = CI_RUN.read_text()
    return text[text.index('rm -f "$out/pytest.xml"') : text.index("rc=$?")]


class TestCiRunGate:
    """.ci/run gates the suite with [[tests]] over pytest's JUnit: its own lines, run on a tiny suite."""

    def run(self, cwd: Path) -> tuple[int, str]:
        # .ci/run's suite runs on its checkout's .venv: here, the interpreter running these tests stands for it.
        venv_python = cwd / ".venv" / "bin" / "python"
        if not venv_python.exists():  # a script, not a link: a link to a venv's python leaves the venv behind
            venv_python.parent.mkdir(parents=True)
            venv_python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
            venv_python.chmod(0o755)
        script = f'out=.ci-out; mkdir -p "$out"; stream="$out/ci-$(date +%s%N).aos"\n{ci_gate_lines()}'
        p = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, timeout=120, check=False)
        return p.returncode, p.stderr.decode()

    def test_passes_a_passing_suite_and_fails_a_failing_one(self, tmp_path: Path) -> None:
        """Exit 0 with passing cases passes; a failing case fails, named; a stale results file is removed first."""
        assert "tests-pass" in ci_gate_lines()
        cwd = project(tmp_path, PASSING)
        rc, out = self.run(cwd)
        assert 0 == rc, out
        assert ".ci-out/pytest.xml: 2 tests: 2 passed" in out
        # pytest now exits 0 before writing any results: the passing file of the first run must not count.
        (cwd / "conftest.py").write_text("import os\ndef pytest_configure(config):\n    os._exit(0)\n")
        rc, out = self.run(cwd)
        assert 3 == rc, out  # the old passing file was removed: nothing captured, inconclusive
        assert "no captured artifact matches" in out
