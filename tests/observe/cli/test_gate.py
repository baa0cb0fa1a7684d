"""``alpha observe gate`` and ``gates`` end to end: real recordings, sealed verdicts, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aos.reader import read_stream
from aos.verify import verify_stream
from gates.engine import evaluate
from gates.evaluation import evaluate_stream
from gates.registry import resolve_gate
from gates.testing import SyntheticStream
from observe.recorder.gating import run_gate
from observe.recorder.record import RecordOptions
from tests.helpers.paths import MUTANTS
from tests.helpers.run import alpha

LANE = MUTANTS / "device_lane.sh"


def sealed_verdict(path: Path) -> dict[str, Any]:
    """The verdict sealed in ``path`` (the stream must verify)."""
    v = verify_stream(path)
    assert v.verdict is not None
    return v.verdict


def check_status(verdict: dict[str, Any], name: str) -> str:
    return str(next(c["status"] for c in verdict["checks"] if c["name"] == name))


class TestExitZero:
    def test_pass(self, tmp_path: Path) -> None:
        """A command that exits 0 passes exit-zero; its stdout is echoed unchanged and the verdict is sealed."""
        p = alpha("observe", "gate", "exit-zero", "--out", "s.aos", "--", "printf", "abc", cwd=tmp_path)
        assert (0, b"abc") == (p.returncode, p.stdout)
        assert b"gate exit-zero: PASS (scope command)" in p.stderr
        assert ("pass", "command") == (
            sealed_verdict(tmp_path / "s.aos")["verdict"],
            sealed_verdict(tmp_path / "s.aos")["scope"],
        )

    def test_fail(self, tmp_path: Path) -> None:
        """A command that exits 3 fails exit-zero with exit 1."""
        p = alpha("observe", "gate", "exit-zero", "--quiet", "--out", "s.aos", "--", "sh", "-c", "exit 3", cwd=tmp_path)
        assert (1, "fail") == (p.returncode, sealed_verdict(tmp_path / "s.aos")["verdict"])

    @pytest.mark.parametrize(
        ("argv", "env", "expect"),
        [
            (["--", "sh", "-c", "kill -SEGV $$"], {}, "SIGSEGV"),
            (["--", "sh", "-c", "kill -KILL $$"], {}, "SIGKILL"),
            (["--timeout", "0.5", "--", "sleep", "30"], {"ALPHA_OBSERVE_KILL_GRACE": "0.5"}, "timed out"),
        ],
        ids=["crash", "killed", "timeout"],
    )
    def test_crash_kill_timeout_still_sealed(
        self, tmp_path: Path, argv: list[str], env: dict[str, str], expect: str
    ) -> None:
        """A command that crashes, is killed or times out still gets a sealed fail verdict saying so."""
        p = alpha("observe", "gate", "exit-zero", "--quiet", "--out", "s.aos", *argv, cwd=tmp_path, env=env)
        v = sealed_verdict(tmp_path / "s.aos")
        assert (1, "fail") == (p.returncode, v["verdict"])
        assert expect in v["checks"][0]["reason"]

    def test_json_and_junit(self, tmp_path: Path) -> None:
        """--json prints only the verdict on stdout (even under GitHub Actions); --junit writes XML."""
        argv = ["--quiet", "--json", "--junit", "j.xml", "--out", "s.aos", "--", "sh", "-c", "exit 4"]
        p = alpha("observe", "gate", "exit-zero", *argv, cwd=tmp_path, env={"GITHUB_ACTIONS": "true"})
        doc = json.loads(p.stdout)
        assert ("fail", "exit-code") == (doc["verdict"], doc["checks"][0]["name"])
        assert (str(tmp_path / "s.aos"), "s.aos") == (str(tmp_path / doc["stream"]), doc["stream"])
        assert '<testcase classname="exit-zero" name="exit-code" time="' in (tmp_path / "j.xml").read_text()

    def test_github_annotations(self, tmp_path: Path) -> None:
        """Under GitHub Actions each check that did not pass is also an ::error line on stdout."""
        argv = ["--quiet", "--out", "s.aos", "--", "sh", "-c", "exit 4"]
        p = alpha("observe", "gate", "exit-zero", *argv, cwd=tmp_path, env={"GITHUB_ACTIONS": "true"})
        want = b"::error title=gate exit-zero%3A exit-code fail::the command exited 4; required exit 0\n"
        assert (1, want) == (p.returncode, p.stdout)


class TestRefusals:
    def test_unknown_gate_is_usage_error_before_running(self, tmp_path: Path) -> None:
        """An unknown gate name exits 2 and the command never runs, nor is a stream written."""
        p = alpha("observe", "gate", "no-such-gate", "--out", "s.aos", "--", "touch", "ran", cwd=tmp_path)
        assert (2, False, False) == (p.returncode, (tmp_path / "ran").exists(), (tmp_path / "s.aos").exists())
        assert b"no-such-gate" in p.stderr

    def test_bad_gate_file_is_usage_error(self, tmp_path: Path) -> None:
        """A malformed gate file exits 2 before the command runs."""
        (tmp_path / "g.toml").write_text('[gate]\nname = "g"\n[[step]]\n')
        p = alpha("observe", "gate", "g", "--gate-file", "g.toml", "--", "touch", "ran", cwd=tmp_path)
        assert (2, False) == (p.returncode, (tmp_path / "ran").exists())
        assert b"refused: gate-file:" in p.stderr

    def test_unwritable_out_is_125(self, tmp_path: Path) -> None:
        """An --out that cannot be written exits 125 and the command does not run."""
        p = alpha("observe", "gate", "exit-zero", "--out", "no/such/dir/s.aos", "--", "touch", "ran", cwd=tmp_path)
        assert (125, False) == (p.returncode, (tmp_path / "ran").exists())


class TestGatesListing:
    def test_lists_every_gate_one_line_each(self, tmp_path: Path) -> None:
        """gates lists every built-in gate and a gate file's gate, one line each: name, description, source."""
        (tmp_path / "g.toml").write_text('[gate]\nname = "mine"\n[[step]]\nname = "s"\n')
        p = alpha("observe", "gates", "--gate-file", "g.toml", cwd=tmp_path)
        lines = p.stdout.decode().splitlines()
        assert 0 == p.returncode
        names = ["coordinate-device", "distributed-device", "exit-zero", "independent-device", "mine", "tests-pass"]
        assert names == [line.split()[0] for line in lines]
        assert lines[2].startswith("exit-zero           The command exited 0")
        assert lines[2].endswith("[builtin:exit-zero.toml]")
        assert lines[4].endswith("  (no description) [g.toml]")

    def test_a_gates_rules_in_plain_text(self, tmp_path: Path) -> None:
        """gates NAME lists its rules, without reStructuredText markup and with counts as sentences."""
        p = alpha("observe", "gates", "coordinate-device")
        out = p.stdout.decode()
        assert 0 == p.returncode
        for check in ("preflight-rules", "checkpoints-equal", "qualification-files", "refusal-control:wrong-uuid"):
            assert f"    {check}: " in out
        for markup in ("``", ":func:", "(s)"):
            assert markup not in out
        assert "    devices-observed: python check 'devices-observed': devices-observed: over the remote" in out
        assert "    step:preflight: step 'preflight' ran at least 1 time, exit 0\n" in out


def evaluate_stream_events(gate: str, events: list[Any]) -> dict[str, Any]:
    """The attrs of ``gate`` evaluated over ``events`` now."""
    return evaluate(resolve_gate(gate), events).to_attrs()


def run_lane(
    tmp_path: Path, mutant: str = "", *, physical: bool = True, gate: str = "distributed-device"
) -> tuple[int, dict[str, Any]]:
    """Run the mutant lane script under ``gate``; return the exit code and the sealed verdict."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"owner": "ci", "host": "gpu-host"}')
    var = {
        "distributed-device": "ALPHA_PARTITIONED_DEVICE_CONFIG",
        "coordinate-device": "ALPHA_COORDINATE_DEVICE_CONFIG",
    }[gate]
    env = {"MUTANT": mutant, "LANE_GATE": gate, "ALPHA_OBSERVE_DRAIN": "1"}
    if physical:
        env[var] = str(cfg)
    p = alpha(
        "observe",
        "gate",
        gate,
        "--quiet",
        "--out",
        "s.aos",
        "--artifact",
        "out",
        "--",
        str(LANE),
        "out",
        cwd=tmp_path,
        env=env,
    )
    return p.returncode, sealed_verdict(tmp_path / "s.aos")


class TestDeviceLaneEndToEnd:
    def test_right_lane_is_not_physical_on_its_word(self, tmp_path: Path) -> None:
        """A lane reporting every physical step right, with no GPU the recorder saw running it, is no physical pass.

        devices-observed is inconclusive (no observation, or observer none); on a machine
        whose real GPUs NVML lists it fails, since the lane's GPU-0000/GPU-0001 are not among
        them. Checks resting on the recorder's capture of the config are open where it made none.
        The rebuild is inconclusive: the lane runs in a folder that is no git checkout, so there is
        no recorded commit to rebuild from.
        """
        code, v = run_lane(tmp_path, gate="coordinate-device")
        events = read_stream(tmp_path / "s.aos").events
        on_nvml = any(e.kind == "device.observed" and e.attrs.get("observer") == "nvml" for e in events)
        captured = any(e.kind == "artifact" and e.attrs.get("origin") == "recorder" for e in events)
        expected = {"devices-observed": "fail" if on_nvml else "inconclusive", "rebuild": "inconclusive"}
        if not captured:
            expected.update({"lane-config": "inconclusive", "preflight-rules": "inconclusive"})
        open_checks = {c["name"]: c["status"] for c in v["checks"] if c["status"] != "pass"}
        assert ((1 if on_nvml else 3), "physical", expected) == (code, v["scope"], open_checks), v["summary"]
        at = next(e.seq for e in events if e.kind == "verdict")
        again = evaluate_stream_events("coordinate-device", events[:at])
        assert v == again  # the sealed verdict is what the evidence before it gives

    def test_right_lane_static_only(self, tmp_path: Path) -> None:
        """With no config the lane's static half passes with scope static, saying the physical lane did not run."""
        code, v = run_lane(tmp_path, physical=False)
        assert (0, "pass", "static") == (code, v["verdict"], v["scope"])
        assert "physical lane did not run" in v["summary"]

    @pytest.mark.parametrize(
        ("mutant", "code", "check", "status"),
        [
            ("refusal-exits-zero", 1, "refusal-control:wrong-uuid", "fail"),
            ("exit-name-not-shown", 1, "refusal-control:wrong-uuid", "fail"),
            ("checkpoints-unequal", 1, "checkpoints-equal", "fail"),
            ("qualification-hash", 1, "qualification-files", "fail"),
            ("skip-split", 1, "step:split-run", "inconclusive"),
            ("physical-missing", 3, "step:preflight", "inconclusive"),
            ("died-then-receipts", 3, "receipts-after-exit", "inconclusive"),
        ],
    )
    def test_mutant_lane(self, tmp_path: Path, mutant: str, code: int, check: str, status: str) -> None:
        """A lane script with one thing wrong is not a pass, and the right check names it."""
        got_code, v = run_lane(tmp_path, mutant)
        assert (code, status) == (got_code, check_status(v, check))


class TestStaticNeedsExecutables:
    """Issue 10, finding 3: receipts alone once passed the static half with nothing captured."""

    SCRIPT = (
        "set -e\n"
        "for step in static-build static-check; do\n"
        "  fields='--field role=r --field target=nothing/here.pyz --field sha256=" + "0" * 64 + "'\n"
        '  [ "$step" = static-check ] && fields="$fields --field check=c --field result=pass"\n'
        '  alpha observe step "$step" -- sh -c "alpha observe receipt $step --status pass $fields"\n'
        "done\n"
    )

    def test_receipts_naming_no_file_are_not_a_static_pass(self, tmp_path: Path) -> None:
        """Two steps whose receipts claim target=nothing/here.pyz, sha256=0...0 and capture nothing: inconclusive."""
        (tmp_path / "lane.sh").write_text(self.SCRIPT)
        p = alpha(
            "observe", "gate", "distributed-device", "--quiet", "--out", "s.aos", "--", "sh", "lane.sh", cwd=tmp_path
        )
        v = sealed_verdict(tmp_path / "s.aos")
        assert (3, "inconclusive", "static") == (p.returncode, v["verdict"], v["scope"]), v["summary"]
        assert "inconclusive" == check_status(v, "receipt:static-build")
        assert "inconclusive" == check_status(v, "receipt:static-check")
        reason = next(c["reason"] for c in v["checks"] if c["name"] == "receipt:static-build")
        assert "nothing/here.pyz" in reason
        assert "not captured" in reason
        assert [] == [e for e in read_stream(tmp_path / "s.aos").events if e.kind == "artifact"]


class TestLibrary:
    def test_run_gate(self, tmp_path: Path) -> None:
        """run_gate records a command and seals the verdict it returns, with the gate named in stream.open."""
        out = tmp_path / "s.aos"
        outcome = run_gate(resolve_gate("exit-zero"), ["true"], RecordOptions(out=out, quiet=True))
        assert outcome.verdict is not None
        assert (0, outcome.verdict.to_attrs()) == (outcome.exit_code, sealed_verdict(out))
        assert "exit-zero" == read_stream(out).events[0].attrs["gate"]

    def test_damaged_stream_is_inconclusive(self, tmp_path: Path) -> None:
        """A stream that reads back damaged gives an inconclusive verdict naming stream-readback."""
        s = SyntheticStream()
        s.exit(0)
        s.write(tmp_path / "s.aos", seal=False)
        with (tmp_path / "s.aos").open("ab") as f:
            f.write(b"\x01garbage after the last batch")
        v = evaluate_stream(resolve_gate("exit-zero"), tmp_path / "s.aos")
        assert ("inconclusive", "stream-readback") == (v.verdict, v.checks[-1].name)
