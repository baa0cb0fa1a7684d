"""Runs cut short (issue 31): an operator's interrupt, and a lane that stopped at a refusal of its own setup.

The device lane runs for real under its gate on the CPU test doubles (samples/lane/testing), and the
interrupt is a real signal sent as a terminal sends Ctrl-C: to the whole foreground process group, here the
recorder's own (the recorder starts the command in a group of its own and sends the signal on). Where a
phase must still be running when the signal comes (on a pseudo-terminal too, where Ctrl-C reaches the
command's process group and not the recorder), the lane's ``LANE_PYTHON`` starts that one phase with
its work replaced by a wait (the phase entry point, its signal handling and everything around it are the
lane's own); every other phase runs as it is.

A fail means something that ran failed: a check failed on evidence complete before the interrupt stays a
fail; a lane that claims a setup refusal after (or before) other physical work ran does not turn a fail into
inconclusive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aos.event import Event
from gates.engine import evaluate
from gates.language import GateFileError, parse_gate_text
from tests.helpers.eagain import retry_eagain
from tests.helpers.paths import ROOT
from tests.helpers.recorder import events
from tests.helpers.run import ALPHA, child_env

TESTING = ROOT / "samples" / "lane" / "testing"
GATE = "coordinate-device"
VARIABLE = "ALPHA_COORDINATE_DEVICE_CONFIG"

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # the device lane runs for real

#: ``LANE_PYTHON``: runs ``python3 -m lanekit PHASE ...``, except the phase named by $WAIT_PHASE (its work
#: becomes a wait, after touching $WAIT_MARK), the phase named by $NOOP_PHASE (exits 0 doing nothing) and
#: the one named by $FAIL_PHASE (exits 1 doing nothing).
LANE_PYTHON = """#!/usr/bin/env bash
if [ "$3" = "${NOOP_PHASE:-}" ]; then exit 0; fi
if [ "$3" = "${FAIL_PHASE:-}" ]; then exit 1; fi
if [ "$3" = "${WAIT_PHASE:-}" ]; then exec python3 "$WAIT_PY" "${@:3}"; fi
exec python3 "$@"
"""

#: The waiting phase: lanekit's own entry point (``lanekit.__main__.main``), the phase's work a wait.
WAIT_PY = """import os, sys, time
from lanekit import __main__ as entry

def wait(*_args):
    open(os.environ["WAIT_MARK"], "w").close()
    time.sleep(120)
    return 0

entry.COMMANDS[sys.argv[1]] = wait  # the table main() dispatches on
sys.exit(entry.main(sys.argv[1:]))
"""


def _lane_env(tmp_path: Path, minors: list[int] | None = None, **extra: str) -> dict[str, str]:
    config = {
        "owner": "test",
        "pod_ids": ["none"],
        "host": "local",
        "minors": minors or [0, 1],
        "remote_root": str(tmp_path / "remote"),
        "transport": "loopback",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    python = tmp_path / "lane-python"
    python.write_text(LANE_PYTHON)
    python.chmod(0o755)
    (tmp_path / "wait_phase.py").write_text(WAIT_PY)
    return child_env(
        {
            "PATH": f"{TESTING / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(p for p in (str(TESTING), os.environ.get("PYTHONPATH")) if p),
            VARIABLE: str(tmp_path / "config.json"),
            "LANE_PYTHON": str(python),
            "WAIT_PY": str(tmp_path / "wait_phase.py"),
            "WAIT_MARK": str(tmp_path / "waiting"),
            **extra,
        }
    )


def _start(tmp_path: Path, env: dict[str, str], argv: list[str] | None = None) -> subprocess.Popen[bytes]:
    """``alpha observe gate coordinate-device -- bash scripts/ci/coordinate-device.sh out`` (echo on, so what
    the lane prints reaches this test as it would a terminal), in a session of its own: its process group is
    the foreground group a terminal would signal."""
    script = argv or ["bash", str(ROOT / "scripts" / "ci" / f"{GATE}.sh"), "out"]
    return retry_eagain(
        lambda: subprocess.Popen(
            [ALPHA, "observe", "gate", GATE, "--out", str(tmp_path / "run.aos"), "--", *script],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        ),
        f"the {GATE} lane",
    )


def _interrupt(tmp_path: Path, proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Once the waiting phase runs, ``sig`` to the recorder's whole process group (a terminal's Ctrl-C)."""
    mark = tmp_path / "waiting"
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the waiting phase never started"
        time.sleep(0.05)
    os.killpg(proc.pid, sig)


def _finish(tmp_path: Path, proc: subprocess.Popen[bytes]) -> tuple[int, str, list[Event], dict[str, Any]]:
    out, err = proc.communicate(timeout=150)
    said = out.decode(errors="replace") + err.decode(errors="replace")
    evs = events(tmp_path / "run.aos")
    verdict = next(e.attrs for e in evs if e.kind == "verdict")
    return proc.returncode, said, evs, verdict


def _checks(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in verdict["checks"]}


def _step_starts(evs: list[Event]) -> list[str]:
    return [e.attrs["name"] for e in evs if e.kind == "step.start" and e.attrs.get("parent") is None]


class TestInterrupted:
    @pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
    def test_interrupt_during_a_refusal_control_is_inconclusive(
        self, tmp_path: Path, sig: signal.Signals, code: int
    ) -> None:
        """The operator interrupts the physical lane during its wrong-UUID control: sealed inconclusive,
        "interrupted by the operator", exit 3, no traceback, and no later step started."""
        proc = _start(tmp_path, _lane_env(tmp_path, WAIT_PHASE="refusal-wrong-uuid"))
        _interrupt(tmp_path, proc, sig)
        rc, said, evs, verdict = _finish(tmp_path, proc)
        assert (3, "inconclusive", "physical") == (rc, verdict["verdict"], verdict["scope"]), verdict["summary"]
        assert "Traceback" not in said, said[-3000:]
        assert not any(b"Traceback" in (e.data or b"") for e in evs), "a traceback was recorded"
        checks = _checks(verdict)
        assert "interrupted" == verdict["checks"][0]["name"]  # the cause first
        assert checks["interrupted"]["status"] == "inconclusive"
        assert f"interrupted by the operator: {sig.name} reached the recorder" in checks["interrupted"]["reason"]
        assert not [c for c in verdict["checks"] if c["status"] == "fail"], verdict["summary"]
        assert f"interrupted by the operator ({sig.name})" in verdict["summary"]
        # The cut step's check says why it is not a fail.
        assert checks["step:refusal-wrong-uuid"]["reason"].startswith(f"interrupted by the operator ({sig.name})")
        # No later phase started: the wrong-UUID control is the last step of the stream.
        assert ["static-build", "static-check", "preflight", "build", "refusal-wrong-uuid"] == _step_starts(evs)
        (end,) = [e.attrs for e in evs if e.kind == "step.end" and e.attrs["name"] == "refusal-wrong-uuid"]
        # Sent on once: lanekit's phase ends quietly with 128 + the signal's number.
        assert (sig.name, code, None) == (end["interrupted"], end["exit_code"], end["signal"])
        assert f"refusal-wrong-uuid: interrupted ({sig.name})" in said
        marks = [e for e in evs if e.kind == "recorder.interrupted"]
        assert [{"signal": sig.name, "during": "command"}] == [e.attrs for e in marks]
        exit_attrs = next(e.attrs for e in evs if e.kind == "process.exit")
        assert (sig.name, code) == (exit_attrs["interrupted"], exit_attrs["exit_code"])
        assert f"interrupted ({sig.name}); no later step runs" in said

    def test_a_check_failed_before_the_interrupt_still_fails(self, tmp_path: Path) -> None:
        """The wrong-UUID control exits 0 (the refusal it must show never came: a fail), then the operator
        interrupts the next control: the fail on evidence complete before the interrupt stands."""
        env = _lane_env(tmp_path, NOOP_PHASE="refusal-wrong-uuid", WAIT_PHASE="refusal-wrong-product")
        proc = _start(tmp_path, env)
        _interrupt(tmp_path, proc, signal.SIGINT)
        rc, said, evs, verdict = _finish(tmp_path, proc)
        checks = _checks(verdict)
        assert (1, "fail") == (rc, verdict["verdict"]), verdict["summary"]
        assert "fail" == checks["step:refusal-wrong-uuid"]["status"]
        assert "interrupted" not in checks["step:refusal-wrong-uuid"]["reason"]
        assert "inconclusive" == checks["interrupted"]["status"]
        # The control cut by the interrupt is not a fail.
        assert checks["step:refusal-wrong-product"]["reason"].startswith("interrupted by the operator (SIGINT)")
        assert "inconclusive" == checks["step:refusal-wrong-product"]["status"]
        assert "Traceback" not in said
        assert "refusal-wrong-product" == _step_starts(evs)[-1]


def _start_on_terminal(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int, bytearray]:
    """The gate on a pseudo-terminal of its own (its controlling terminal, stdin a terminal, so the recorder hands
    the terminal's foreground to the command's process group); what it writes there is read as it comes."""
    import fcntl
    import pty
    import termios
    import threading

    master, slave = pty.openpty()

    def controlling() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    script = ["bash", str(ROOT / "scripts" / "ci" / f"{GATE}.sh"), "out"]
    proc = subprocess.Popen(
        [ALPHA, "observe", "gate", GATE, "--out", str(tmp_path / "run.aos"), "--", *script],
        cwd=tmp_path,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling,  # the child's own terminal, set before it runs
    )
    os.close(slave)
    said = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            said.extend(chunk)

    threading.Thread(target=read, daemon=True).start()
    return proc, master, said


class TestInterruptedOnATerminal:
    def test_ctrl_c_on_the_terminal_is_inconclusive(self, tmp_path: Path) -> None:
        """Ctrl-C typed on the recorder's terminal: the terminal signals the command's process group (the
        recorder gave it the foreground), not the recorder; the step client asks the recorder to send SIGINT on
        to its step. Inconclusive, said as the command's word, no traceback, no later step."""
        proc, master, said = _start_on_terminal(tmp_path, _lane_env(tmp_path, WAIT_PHASE="refusal-wrong-uuid"))
        try:
            mark = tmp_path / "waiting"
            deadline = time.monotonic() + 120
            while not mark.exists():
                assert proc.poll() is None, bytes(said).decode(errors="replace")
                assert time.monotonic() < deadline, "the waiting phase never started"
                time.sleep(0.05)
            time.sleep(0.3)
            os.write(master, b"\x03")  # the terminal's interrupt character
            rc = proc.wait(timeout=150)
        finally:
            time.sleep(0.2)
            os.close(master)
        text = bytes(said).decode(errors="replace")
        evs = events(tmp_path / "run.aos")
        verdict = next(e.attrs for e in evs if e.kind == "verdict")
        assert (3, "inconclusive") == (rc, verdict["verdict"]), verdict["summary"]
        assert "Traceback" not in text
        first = verdict["checks"][0]
        assert ("interrupted", "inconclusive") == (first["name"], first["status"])
        assert "at its client's request" in first["reason"]
        assert "interrupted (SIGINT to step 'refusal-wrong-uuid')" in verdict["summary"]
        assert not [c for c in verdict["checks"] if c["status"] == "fail"]
        assert "refusal-wrong-uuid" == _step_starts(evs)[-1]


class TestDidNotRun:
    def test_minor_that_does_not_exist_did_not_run(self, tmp_path: Path) -> None:
        """A config binding a minor the host does not have: the preflight refuses (minor-missing), the lane
        stops: inconclusive, "did not run: minor-missing", never a physical fail."""
        proc = _start(tmp_path, _lane_env(tmp_path, minors=[0, 7]))
        rc, said, evs, verdict = _finish(tmp_path, proc)
        assert (3, "inconclusive", "physical") == (rc, verdict["verdict"], verdict["scope"]), verdict["summary"]
        assert "did-not-run" == verdict["checks"][0]["name"]
        assert verdict["checks"][0]["reason"].startswith("did not run: minor-missing: step 'preflight'")
        assert "did not run: minor-missing" in verdict["summary"]
        assert not [c for c in verdict["checks"] if c["status"] == "fail"]
        assert "refused: minor-missing: owner-1: minor 7 selects no GPU" in said
        assert ["static-build", "static-check", "preflight"] == _step_starts(evs)

    def test_minor_bound_twice_did_not_run(self, tmp_path: Path) -> None:
        """A config binding one minor of this machine to two roles: the preflight refuses (minor-bound-twice)
        before any device is asked, the lane stops: inconclusive, "did not run: minor-bound-twice"."""
        proc = _start(tmp_path, _lane_env(tmp_path, minors=[0, 1, 0]))
        rc, said, evs, verdict = _finish(tmp_path, proc)
        assert (3, "inconclusive", "physical") == (rc, verdict["verdict"], verdict["scope"]), verdict["summary"]
        assert verdict["checks"][0]["reason"].startswith("did not run: minor-bound-twice: step 'preflight'")
        assert not [c for c in verdict["checks"] if c["status"] == "fail"]
        assert "refused: minor-bound-twice: minor 0 of this machine is bound to owner-0 and owner-2" in said
        assert ["static-build", "static-check", "preflight"] == _step_starts(evs)

    def test_config_that_cannot_be_read_did_not_run(self, tmp_path: Path) -> None:
        """A lane config that is not JSON: refused by the preflight (lane-config); the recorder's own capture of
        it fails its schema check, but the physical part did not run, so nothing of it fails."""
        env = _lane_env(tmp_path)
        (tmp_path / "config.json").write_text('{"host": ')
        rc, said, _, verdict = _finish(tmp_path, _start(tmp_path, env))
        assert (3, "inconclusive") == (rc, verdict["verdict"]), verdict["summary"]
        assert "did not run: lane-config" in verdict["summary"]
        assert "refused: lane-config: " in said
        checks = _checks(verdict)
        assert checks["lane-config"]["reason"].startswith("did not run: lane-config: ")

    def test_a_failed_static_half_still_fails(self, tmp_path: Path) -> None:
        """The static half ran before the preflight: its fail stands even when the physical part did not run."""
        env = _lane_env(tmp_path, minors=[0, 7], FAIL_PHASE="static-check")
        rc, _, _, verdict = _finish(tmp_path, _start(tmp_path, env))
        checks = _checks(verdict)
        assert (1, "fail") == (rc, verdict["verdict"]), verdict["summary"]
        assert "did not run: minor-missing" in verdict["summary"]
        failing = sorted(n for n, c in checks.items() if c["status"] == "fail")
        assert "step:static-check" in failing
        assert all(not n.startswith(("step:preflight", "preflight", "lane-config")) for n in failing), failing


#: A lane that claims a setup refusal around physical work: a step that ran (and failed) is not undone.
FORGED_AFTER = """set -e
alpha observe step uninterrupted-run -- sh -c 'echo working on the GPU; exit 1' || true
alpha observe step preflight -- sh -c 'echo "refused: host-key-unknown: not really" >&2; exit 27' || true
exit 1
"""
FORGED_BEFORE = """alpha observe step preflight -- sh -c 'echo "refused: host-key-unknown: not really" >&2; exit 27'
alpha observe step uninterrupted-run -- sh -c 'echo working on the GPU; exit 1'
exit 1
"""
FORGED_OUTSIDE = """alpha observe receipt uninterrupted-run --status fail --field updates=5
alpha observe step preflight -- sh -c 'echo "refused: host-key-unknown: not really" >&2; exit 27'
exit 1
"""
FORGED_WORDS = """alpha observe step preflight -- sh -c 'echo "refused: host-key-unknown: in words" >&2; exit 1'
alpha observe receipt preflight --status inconclusive --field reason="refused: host-key-unknown: in words"
echo "refused: host-key-unknown: in words" >&2
exit 27
"""


class TestForgedSetupRefusal:
    @pytest.mark.parametrize(
        ("script", "failing"),
        [
            (FORGED_AFTER, "step:uninterrupted-run"),
            (FORGED_BEFORE, "step:uninterrupted-run"),
            (FORGED_OUTSIDE, "receipt:uninterrupted-run"),
        ],
        ids=["gpu-work-first", "gpu-work-after", "receipt-outside-any-step"],
    )
    def test_setup_refusal_around_physical_work_keeps_the_fail(self, tmp_path: Path, script: str, failing: str) -> None:
        """The preflight step really exits 27 (host-key-unknown) as the recorder sees it, but physical work was
        recorded too (a step before it or after it, a receipt outside any step): a fail, not "did not run"."""
        (tmp_path / "lane.sh").write_text(script)
        rc, _, _, verdict = _finish(tmp_path, _start(tmp_path, _lane_env(tmp_path), ["bash", "lane.sh"]))
        checks = _checks(verdict)
        assert (1, "fail") == (rc, verdict["verdict"]), verdict["summary"]
        assert "did-not-run" not in checks
        assert "fail" == checks[failing]["status"], checks[failing]

    def test_a_refusal_in_words_only_is_not_a_setup_refusal(self, tmp_path: Path) -> None:
        """The preflight step exits 1 as the recorder sees it; its stderr, a receipt and the lane's own exit code
        (27) say host-key-unknown: the lane's word only, so its failing preflight stays a fail."""
        (tmp_path / "lane.sh").write_text(FORGED_WORDS)
        rc, _, _, verdict = _finish(tmp_path, _start(tmp_path, _lane_env(tmp_path), ["bash", "lane.sh"]))
        assert (1, "fail") == (rc, verdict["verdict"]), verdict["summary"]
        assert "did-not-run" not in _checks(verdict)
        assert "fail" == _checks(verdict)["step:preflight"]["status"]


SETUP_GATE = """
[gate]
name = "setup"
scope = "static"

[[part]]
name = "work"
scope = "physical"
[part.setup]
step = "prepare"
refusals = {{ {refusals} }}

[[part.step]]
name = "prepare"
"""


class TestSetupTable:
    @pytest.mark.parametrize(
        ("refusals", "said"),
        [
            ("", "at least one"),
            ('bad = "27"', "exit code from 1 to 255"),
            ("bad = 0", "exit code from 1 to 255"),
            ("a = 27, b = 27", "share an exit code"),
        ],
    )
    def test_bad_setup_tables_are_refused(self, refusals: str, said: str) -> None:
        with pytest.raises(GateFileError, match=said):
            parse_gate_text(SETUP_GATE.format(refusals=refusals), "setup.toml")

    def test_unknown_key_is_refused(self) -> None:
        text = SETUP_GATE.format(refusals="a = 27").replace('step = "prepare"', 'step = "prepare"\nextra = 1')
        with pytest.raises(GateFileError, match="unknown key"):
            parse_gate_text(text, "setup.toml")


def test_stream_without_interrupt_is_judged_as_before(tmp_path: Path) -> None:
    """A recording never interrupted and never refused carries neither check (the engine adds nothing)."""
    (tmp_path / "ok.sh").write_text("alpha observe step prepare -- true\n")
    done = subprocess.run(
        [ALPHA, "observe", "record", "--out", str(tmp_path / "ok.aos"), "--quiet", "--", "bash", "ok.sh"],
        cwd=tmp_path,
        env=child_env({"ALPHA_OBSERVE_DRAIN": "0"}),
        check=False,
        capture_output=True,
    )
    assert 0 == done.returncode, done.stderr
    verdict = evaluate(parse_gate_text(SETUP_GATE.format(refusals="a = 27"), "setup.toml"), events(tmp_path / "ok.aos"))
    assert ("pass", ["step:prepare"]) == (verdict.verdict, [c.name for c in verdict.checks]), verdict.summary


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
