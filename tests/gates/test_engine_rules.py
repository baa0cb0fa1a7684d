"""The policy engine, one rule kind at a time, on small synthetic streams."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from aos.refusals import StreamVerdict
from gates import report
from gates.checks import CHECKS, register
from gates.engine import evaluate
from gates.evidence import Evidence, glob_match
from gates.language import parse_gate_text
from gates.testing import SyntheticStream, sha256
from gates.typing import Outcome
from gates.verdict import Check, Verdict, combine
from observe.ci.systems.github import github_annotations


def run(toml: str, s: SyntheticStream) -> Verdict:
    return evaluate(parse_gate_text('[gate]\nname = "t"\n' + toml, "t.toml"), s.events())


def status(v: Verdict, name: str) -> str:
    return next(c.status for c in v.checks if c.name == name)


def stream(env: dict[str, str] | None = None) -> SyntheticStream:
    return SyntheticStream(env or {})


class TestCombine:
    @pytest.mark.parametrize(
        ("statuses", "expected"),
        [
            (["pass", "pass"], "pass"),
            (["pass", "inconclusive"], "inconclusive"),
            (["inconclusive", "fail"], "fail"),
            ([], "inconclusive"),
        ],
    )
    def test_combine(self, statuses: list[str], expected: str) -> None:
        """Any fail fails, else any inconclusive is inconclusive, and no checks at all is not a pass."""
        assert expected == combine(statuses)

    def test_verdict_round_trips_through_attrs(self) -> None:
        """A verdict read back from its attrs equals the one written."""
        v = Verdict.of("g", "s", [Check("a", "pass", "ok", (1, 2)), Check("b", "fail", "no", (3,))], "sum", not_run=[])
        assert v == Verdict.from_attrs(v.to_attrs())
        assert (1, "fail") == (v.exit_code, v.verdict)

    @pytest.mark.parametrize(
        "attrs",
        [
            {"gate": "g", "verdict": "great", "scope": "s", "checks": []},
            {"gate": "g", "verdict": "pass", "scope": "s", "checks": "all"},
            {"gate": "g", "verdict": "pass", "scope": "s", "checks": [{"name": "a", "status": "ok"}]},
        ],
    )
    def test_malformed_verdict_refused(self, attrs: dict[str, Any]) -> None:
        """A malformed sealed verdict is refused as stream-verdict."""
        with pytest.raises(StreamVerdict):
            Verdict.from_attrs(attrs)


class TestExit:
    @pytest.mark.parametrize(
        ("exit_attrs", "expected"),
        [
            ({"exit_code": 0}, "pass"),
            ({"exit_code": 2}, "fail"),
            ({"exit_code": None, "signal": "SIGSEGV"}, "fail"),
            ({"exit_code": None, "signal": "SIGTERM", "timed_out": True}, "fail"),
        ],
    )
    def test_exit_zero(self, exit_attrs: dict[str, Any], expected: str) -> None:
        """exit-zero passes only on exit 0; a crash or a timeout fails."""
        s = stream()
        s.exit(
            **{
                "code": exit_attrs.get("exit_code"),
                "signal": exit_attrs.get("signal"),
                "timed_out": exit_attrs.get("timed_out", False),
            }
        )
        assert expected == s.evaluate("exit-zero").verdict

    def test_no_process_exit_is_inconclusive(self) -> None:
        """A stream whose command never finished is inconclusive for exit-zero."""
        assert "inconclusive" == stream().evaluate("exit-zero").verdict

    def test_otherwise_and_unfinished(self) -> None:
        """otherwise and unfinished set the status of a wrong exit and of a kill."""
        toml = '[exit]\ncode = 0\notherwise = "inconclusive"\nunfinished = "inconclusive"\n'
        s = stream()
        s.exit(1)
        assert "inconclusive" == run(toml, s).verdict

    def test_no_stream_open_is_inconclusive(self) -> None:
        """A stream without its start cannot pass."""
        s = stream()
        s.exit(0)
        s.ops.pop(0)
        v = s.evaluate("exit-zero")
        assert ("inconclusive", "inconclusive") == (v.verdict, status(v, "stream-open"))


class TestSteps:
    def test_step_exit_and_stderr(self) -> None:
        """A step must end with its exit and show its text on its own stderr."""
        s = stream()
        s.step_start("ctl")
        s.output("stderr", b"refused: nope: x\n", "ctl")
        s.step_end("ctl", 2)
        s.exit(0)
        ok = run('[[step]]\nname = "ctl"\nexit = "nonzero"\nstderr_contains = "refused: nope"\n', s)
        bad = run('[[step]]\nname = "ctl"\nexit = 0\n', s)
        assert ("pass", "fail") == (ok.verdict, bad.verdict)

    def test_unfinished_step(self) -> None:
        """A step that never ended is inconclusive, as is one whose client went away."""
        s = stream()
        s.step_start("a")
        s.step_start("b")
        s.step_end("b", None)["attrs"]["incomplete"] = True
        v = run('[[step]]\nname = "a"\n[[step]]\nname = "b"\nexit = "any"\n', s)
        assert ("inconclusive", "inconclusive") == (status(v, "step:a"), status(v, "step:b"))

    def test_step_killed_meets_only_any(self) -> None:
        """A step killed by a signal meets neither exit 0 nor nonzero."""
        s = stream()
        s.step_start("a")
        s.step_end("a", None, "SIGKILL")
        assert "fail" == run('[[step]]\nname = "a"\nexit = "nonzero"\n', s).verdict
        assert "pass" == run('[[step]]\nname = "a"\nexit = "any"\n', s).verdict

    def test_step_count(self) -> None:
        """Fewer runs than min are inconclusive, more than max fail."""
        s = stream()
        for _ in range(3):
            s.step_start("a")
            s.step_end("a")
        assert "fail" == run('[[step]]\nname = "a"\nmax = 2\n', s).verdict
        assert "inconclusive" == run('[[step]]\nname = "a"\nmin = 4\n', s).verdict
        assert "pass" == run('[[step]]\nname = "a"\ncount = 3\n', s).verdict


class TestReceipts:
    def test_status_schema_and_late(self) -> None:
        """Receipts are judged by status and schema; late ones do not count."""
        s = stream()
        s.receipt("r", "pass", n=1)
        s.receipt("q", "skip")
        s.exit(0)
        s.receipt("late", "pass")
        toml = (
            '[[receipt]]\nname = "r"\nschema = { type = "object", properties = { n = { const = 2 } } }\n'
            '[[receipt]]\nname = "q"\n[[receipt]]\nname = "late"\n'
        )
        v = run(toml, s)
        got = [status(v, n) for n in ("receipt:r", "receipt:q", "receipt:late", "receipts-after-exit")]
        assert ["fail", "inconclusive", "inconclusive", "inconclusive"] == got

    def test_receipt_status_fail_fails(self) -> None:
        """A receipt that says fail fails its rule."""
        s = stream()
        s.receipt("r", "fail")
        assert "fail" == run('[[receipt]]\nname = "r"\n', s).verdict

    def test_where_selects(self) -> None:
        """where judges only the receipts whose fields match."""
        s = stream()
        s.receipt("r", "pass", kind="a")
        s.receipt("r", "fail", kind="b")
        assert "pass" == run('[[receipt]]\nname = "r"\nwhere = { kind = "a" }\ncount = 1\n', s).verdict

    def test_artifact_cross_check(self) -> None:
        """A receipt's digest is checked against the captured file's bytes."""
        s = stream()
        s.artifact("out/f.bin", b"data")
        s.receipt("r", "pass", path="out/f.bin", sha=sha256(b"data"), bad=sha256(b"other"))
        ok = run('[[receipt]]\nname = "r"\nartifacts = [{ path = "path", sha256 = "sha" }]\n', s)
        bad = run('[[receipt]]\nname = "r"\nartifacts = [{ path = "path", sha256 = "bad" }]\n', s)
        assert ("pass", "fail") == (ok.verdict, bad.verdict)

    def test_absolute_path_inside_cwd(self) -> None:
        """A receipt naming a file by its absolute path under the recording's cwd finds the capture."""
        s = stream()
        s.artifact("out/f.bin", b"data")
        s.receipt("r", "pass", path="/lane/out/f.bin", sha=sha256(b"data"))
        assert "pass" == run('[[receipt]]\nname = "r"\nartifacts = [{ path = "path", sha256 = "sha" }]\n', s).verdict

    def test_uncaptured_optional_artifact(self) -> None:
        """An optional artifact that was not captured is noted, not required."""
        s = stream()
        s.receipt("r", "pass", path="nowhere", sha=sha256(b"x"))
        toml = '[[receipt]]\nname = "r"\nartifacts = [{ path = "path", sha256 = "sha", required = false }]\n'
        assert "pass" == run(toml, s).verdict
        assert "inconclusive" == run(toml.replace(", required = false", ""), s).verdict

    def test_omitted_content_uses_recorded_digest(self) -> None:
        """A file captured without its content is judged by the recorder's digest."""
        s = stream()
        s.add("artifact", {"path": "big", "size": 10, "sha256": sha256(b"x" * 10), "content": "omitted"})
        s.receipt("r", "pass", path="big", sha=sha256(b"x" * 10))
        assert "pass" == run('[[receipt]]\nname = "r"\nartifacts = [{ path = "path", sha256 = "sha" }]\n', s).verdict

    def test_invalid_receipt(self) -> None:
        """A receipt.invalid makes receipts-invalid inconclusive."""
        s = stream()
        s.receipt("r")
        s.add("receipt.invalid", {"reason": "not JSON"}, b"{")
        assert "inconclusive" == status(run('[[receipt]]\nname = "r"\n', s), "receipts-invalid")


class TestCrossReceipt:
    def test_equal(self) -> None:
        """equal compares fields across receipts; a missing receipt is inconclusive."""
        s = stream()
        s.receipt("a", x=1)
        s.receipt("b", y=1)
        s.receipt("c", z=2)
        assert "pass" == run('[[equal]]\nvalues = ["a.x", "b.y"]\n', s).verdict
        assert "fail" == run('[[equal]]\nvalues = ["a.x", "c.z"]\n', s).verdict
        assert "inconclusive" == run('[[equal]]\nvalues = ["a.x", "d.w"]\n', s).verdict

    def test_each(self) -> None:
        """each needs a good partner receipt per key; none is inconclusive, only bad ones fail."""
        s = stream()
        s.receipt("built", role="a", sha="1")
        s.receipt("built", role="b", sha="2")
        s.receipt("checked", role="a", sha="1")
        s.receipt("checked", "pass", role="b", sha="9")
        v = run('[[each]]\nreceipt = "built"\nneeds = "checked"\non = ["role"]\nequal = [["sha", "sha"]]\n', s)
        assert "fail" == v.verdict
        s.drop([s.find("receipt", "checked", role="b")[0]])
        v = run('[[each]]\nreceipt = "built"\nneeds = "checked"\non = ["role"]\nequal = [["sha", "sha"]]\n', s)
        assert "inconclusive" == v.verdict

    def test_order(self) -> None:
        """order requires each item to end before the next begins."""
        s = stream()
        s.step_start("a")
        s.step_end("a")
        s.receipt("r")
        s.step_start("b")
        s.step_end("b")
        assert "pass" == run('[[order]]\nsequence = ["step:a", "receipt:r", "step:b"]\n', s).verdict
        assert "fail" == run('[[order]]\nsequence = ["step:b", "step:a"]\n', s).verdict
        assert "inconclusive" == run('[[order]]\nsequence = ["step:a", "step:c"]\n', s).verdict


class TestArtifacts:
    @pytest.mark.parametrize(
        ("pattern", "path", "expected"),
        [
            ("*.json", "a.json", True),
            ("*.json", "d/a.json", False),
            ("**/a.json", "a.json", True),
            ("**/a.json", "x/y/a.json", True),
            ("out/*/c.bin", "out/s/c.bin", True),
            ("out/?.bin", "out/ab.bin", False),
        ],
    )
    def test_glob(self, pattern: str, path: str, expected: bool) -> None:
        """Globs keep * and ? inside one folder; **/ spans folders."""
        assert expected == glob_match(pattern, path)

    def test_artifact_rule(self) -> None:
        """An artifact rule counts matches, cross-checks a receipt digest and a JSON schema."""
        s = stream()
        s.artifact("dist/a.json", b'{"v": 1}')
        s.receipt("pkg", sha=sha256(b'{"v": 1}'))
        ok = run('[[artifact]]\nglob = "dist/*.json"\nsha256_from = "pkg.sha"\nschema = { required = ["v"] }\n', s)
        bad = run('[[artifact]]\nglob = "dist/*.json"\nschema = { required = ["w"] }\n', s)
        missing = run('[[artifact]]\nglob = "dist/*.tar"\n', s)
        assert ("pass", "fail", "inconclusive") == (ok.verdict, bad.verdict, missing.verdict)

    def test_incomplete_chunks(self) -> None:
        """An artifact whose chunks do not cover its size supports no digest: inconclusive."""
        s = stream()
        s.artifact("a.bin", b"0123456789", chunk=4)
        s.drop([s.find("artifact.chunk")[1]])
        s.receipt("r", path="a.bin", sha=sha256(b"0123456789"))
        assert (
            "inconclusive"
            == run('[[receipt]]\nname = "r"\nartifacts = [{ path = "path", sha256 = "sha" }]\n', s).verdict
        )

    def test_artifact_attrs_select_the_recorders_capture(self) -> None:
        """attrs selects artifacts by their event's attrs: a command's capture (no origin) is never the recorder's."""
        toml = '[[artifact]]\nattrs = { origin = "recorder", env = "CFG" }\ncount = 1\nschema = { required = ["v"] }\n'
        sent = stream({"CFG": "/etc/c.json"})
        sent.artifact("/etc/c.json", b'{"v": 1}')
        recorded = stream({"CFG": "/etc/c.json"})
        recorded.recorder_artifact("/etc/c.json", b'{"v": 1}', "CFG")
        other_var = stream({"CFG": "/etc/c.json"})
        other_var.recorder_artifact("/etc/c.json", b'{"v": 1}', "OTHER")
        assert ("inconclusive", "pass", "inconclusive") == (
            run(toml, sent).verdict,
            run(toml, recorded).verdict,
            run(toml, other_var).verdict,
        )
        # A later capture of the same path by the command does not hide the recorder's.
        recorded.artifact("/etc/c.json", b"{}")
        assert "pass" == run(toml, recorded).verdict

    def test_artifact_attrs_with_glob_names_the_captures_that_lack_them(self) -> None:
        """With a glob, the reason names the matching captures that lack the attrs."""
        s = stream()
        s.artifact("out/lane-config.json", b"{}")
        v = run('[[artifact]]\nglob = "**/lane-config.json"\nattrs = { origin = "recorder" }\n', s)
        assert "inconclusive" == v.verdict
        assert "out/lane-config.json" in v.checks[0].reason
        assert "1 other capture (out/lane-config.json) lacks those attrs" in v.checks[0].reason


class TestConditions:
    TOML = (
        '[[part]]\nname = "p"\nwhen = { env = "X", equals = "1" }\nscope = "wide"\nskipped = "p skipped"\n'
        '[[part.step]]\nname = "s"\n'
    )

    @pytest.mark.parametrize(
        ("env", "scope", "steps"), [({}, "command", 0), ({"X": "1"}, "wide", 1), ({"X": "2"}, "command", 0)]
    )
    def test_part_applies_by_env(self, env: dict[str, str], scope: str, steps: int) -> None:
        """A part applies only when its env condition held at the recording's start."""
        v = run(self.TOML, stream(env))
        assert (scope, steps) == (v.scope, sum(1 for c in v.checks if c.name == "step:s"))

    def test_skipped_part_is_named(self) -> None:
        """A part that did not apply is named in the summary and not_run."""
        v = run(self.TOML, stream())
        assert "p skipped" in v.summary
        assert 1 == len(v.extra["not_run"])

    def test_rule_conditions(self) -> None:
        """A rule's own when leaves it out when it does not hold (env_unset, label)."""
        s = stream({"Y": "1"})
        s.ops[0]["attrs"]["labels"] = {"lane": "gpu"}
        toml = (
            '[[step]]\nname = "a"\nwhen = { env_unset = "Y" }\n'
            '[[step]]\nname = "b"\nwhen = { label = "lane", equals = "gpu" }\n'
        )
        assert ["step:b"] == [c.name for c in run(toml, s).checks]


class TestPythonChecks:
    def test_broken_check_is_inconclusive(self) -> None:
        """A named check that raises is inconclusive, never a pass."""

        @register("test-broken")
        def broken(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
            raise RuntimeError("boom")

        try:
            v = run('[[check]]\nname = "b"\nuses = "test-broken"\n', stream())
        finally:
            CHECKS.pop("test-broken")
        assert ("inconclusive", "inconclusive") == (v.verdict, status(v, "b"))
        assert "boom" in v.checks[-1].reason

    def test_output_free_of(self) -> None:
        """output-free-of fails on a pattern split across two reads."""
        s = stream()
        s.output("stderr", b"Trace")
        s.output("stderr", b"back (most recent call last)\n")
        s.exit(0)
        toml = '[[check]]\nname = "clean"\nuses = "output-free-of"\nargs = { patterns = ["Traceback"] }\n'
        assert "fail" == run(toml, s).verdict


class TestReports:
    def verdict(self) -> Verdict:
        return Verdict.of(
            "g",
            "s",
            [
                Check("ok", "pass", "fine"),
                Check("bad", "fail", "wrong: 50%\nnext"),
                Check("gap", "inconclusive", "missing"),
            ],
        )

    def test_table_names_each_check(self) -> None:
        """The table shows the verdict, the scope, the first check that did not pass, and every check."""
        text = report.table(self.verdict())
        assert "gate g: FAIL (scope s)" == text.splitlines()[0]
        assert text.splitlines()[1].startswith("first: bad: FAIL: ")
        assert ["ok", "bad", "gap"] == [line.split()[1] for line in text.splitlines()[3:6]]

    def test_junit(self) -> None:
        """JUnit XML has one testsuite per gate and one testcase per check; inconclusive is an error."""
        root = ET.fromstring(report.junit_xml(self.verdict()))
        suite = root.find("testsuite")
        assert suite is not None
        cases = {c.get("name"): [e.tag for e in c] for c in suite.findall("testcase")}
        assert {"ok": ["system-out"], "bad": ["failure"], "gap": ["error"]} == cases

    def test_github_annotations(self) -> None:
        """Every check that did not pass is an escaped annotation: ::error when failed, ::warning when inconclusive."""
        lines = github_annotations(self.verdict())
        assert [
            "::error title=gate g%3A bad fail::wrong: 50%25%0Anext",
            "::warning title=gate g%3A gap inconclusive::missing",
        ] == lines
