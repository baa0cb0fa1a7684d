"""End-to-end: exit codes, signals, timeouts, interruption and stray writers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aos.verify import verify_stream
from tests.helpers.recorder import events, index, one, output, record, recorded_stdout_so_far, wait_for
from tests.helpers.run import ALPHA


class TestExitCodes:
    @pytest.mark.parametrize("code", [0, 3, 255])
    def test_command_exit_code(self, tmp_path: Path, code: int) -> None:
        """record exits with the command's own code, and process.exit records it."""
        proc, path = record(tmp_path, ["sh", "-c", f"exit {code}"])
        assert code == proc.returncode
        attrs = one(events(path), "process.exit").attrs
        assert code == attrs["exit_code"]
        assert attrs["signal"] is None
        assert attrs["timed_out"] is False
        assert attrs["duration_ns"] > 0
        assert {"utime_ns", "stime_ns", "maxrss_kb"} <= set(attrs["rusage"])

    @pytest.mark.parametrize("argv", [["no-such-command-xyz"], ["/nonexistent/dir/cmd"]])
    def test_not_found_is_127(self, tmp_path: Path, argv: list[str]) -> None:
        """A command that does not exist exits 127, and the sealed stream says why."""
        proc, path = record(tmp_path, argv)
        assert 127 == proc.returncode
        attrs = one(events(path), "process.exit").attrs
        assert 127 == attrs["exit_code"]
        assert "not found" in attrs["error"]
        verify_stream(path)

    def test_cannot_execute_is_126(self, tmp_path: Path) -> None:
        """A file without execute permission, or a directory, exits 126."""
        script = tmp_path / "script.sh"
        script.write_text("#!/bin/sh\necho hi\n")
        script.chmod(0o644)
        for target in (script, tmp_path):
            proc, path = record(tmp_path, [str(target)])
            assert 126 == proc.returncode
            assert 126 == one(events(path), "process.exit").attrs["exit_code"]
            verify_stream(path)

    def test_killed_by_signal_is_128_plus_n(self, tmp_path: Path) -> None:
        """A command killed by SIGTERM makes record exit 143 and process.exit name the signal."""
        proc, path = record(tmp_path, ["sh", "-c", "echo x; kill -TERM $$"])
        assert 128 + signal.SIGTERM == proc.returncode
        attrs = one(events(path), "process.exit").attrs
        assert attrs["exit_code"] is None
        assert "SIGTERM" == attrs["signal"]

    def test_timeout_is_124(self, tmp_path: Path) -> None:
        """--timeout stops the command's process group with SIGTERM and exits 124."""
        begun = time.monotonic()
        proc, path = record(tmp_path, ["sh", "-c", "echo started; sleep 30; echo never"], "--timeout", "0.5")
        assert 124 == proc.returncode
        assert time.monotonic() - begun < 20
        evs = events(path)
        attrs = one(evs, "process.exit").attrs
        assert attrs["timed_out"] is True
        assert b"started\n" == output(evs)
        verify_stream(path)

    def test_timeout_escalates_to_sigkill(self, tmp_path: Path) -> None:
        """A command that ignores SIGTERM is killed with SIGKILL after the grace period."""
        proc, path = record(
            tmp_path,
            ["sh", "-c", "trap '' TERM; sleep 30"],
            "--timeout",
            "0.3",
            env={"ALPHA_OBSERVE_KILL_GRACE": "0.5"},
        )
        assert 124 == proc.returncode
        attrs = one(events(path), "process.exit").attrs
        assert "SIGKILL" == attrs["signal"]
        assert attrs["timed_out"] is True


def _default_signals() -> None:
    # A test run started in the background (`pytest &`, nohup) inherits ignored SIGINT or
    # SIGHUP, which the recorder, like timeout(1), passes on: a shell cannot trap those.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _start(tmp_path: Path, script: str) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / "run.aos"
    proc = subprocess.Popen(
        [ALPHA, "observe", "record", "--out", str(out), "--", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_signals,
    )
    return proc, out


class TestInterruption:
    @pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
    def test_signal_is_forwarded_and_stream_sealed(self, tmp_path: Path, sig: signal.Signals) -> None:
        """A signal to the recorder reaches the command; the stream is sealed and names the interruption."""
        script = f"trap 'echo caught; exit 7' {sig.name[3:]}; echo ready; while :; do sleep 0.05; done"
        proc, path = _start(tmp_path, script)
        try:
            wait_for(lambda: b"ready" in recorded_stdout_so_far(path))
            proc.send_signal(sig)
            proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert 7 == proc.returncode
        evs = events(path)
        attrs = one(evs, "process.exit").attrs
        assert sig.name == attrs["interrupted"]
        assert b"ready\ncaught\n" == output(evs)
        verify_stream(path)

    def test_untrapped_signal_kills_command(self, tmp_path: Path) -> None:
        """SIGTERM to the recorder kills an untrapping command: exit 143, sealed stream."""
        proc, path = _start(tmp_path, "echo ready; sleep 30")
        try:
            wait_for(lambda: b"ready" in recorded_stdout_so_far(path))
            proc.terminate()
            proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert 143 == proc.returncode
        assert "SIGTERM" == one(events(path), "process.exit").attrs["interrupted"]


class TestStrayWriters:
    def test_background_process_holding_pipes_does_not_hang(self, tmp_path: Path) -> None:
        """A background writer keeps the pipes open: the recorder drains briefly, records it, and seals."""
        script = "(sleep 0.2; echo late; sleep 60) & echo main"
        begun = time.monotonic()
        proc, path = record(tmp_path, ["sh", "-c", script], env={"ALPHA_OBSERVE_DRAIN": "1.5"})
        elapsed = time.monotonic() - begun
        evs = events(path)
        pgid = one(evs, "process.start").attrs["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        assert 0 == proc.returncode
        assert elapsed < 30
        exit_at = index(evs, "process.exit")
        assert evs[exit_at].attrs["stray_writers"] is True
        late = [i for i, e in enumerate(evs) if e.kind == "stdout" and e.data == b"late\n"]
        assert late
        assert late[0] > exit_at
        assert ["stdout", "stderr"] == one(evs, "process.stray").attrs["still_open"]
        assert b"main\nlate\n" == output(evs)
        verify_stream(path)


def test_exit_code_of_record_matches_python_api(tmp_path: Path) -> None:
    """The library's RecordResult carries the same codes the CLI exits with."""
    from observe.recorder.record import RecordOptions
    from observe.recorder.record import record as run

    result = run(
        [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], RecordOptions(out=tmp_path / "a.aos", quiet=True)
    )
    assert (137, None, "SIGKILL", False, False) == (
        result.exit_code,
        result.command_exit,
        result.signal,
        result.timed_out,
        result.recorder_failed,
    )
    assert result.seal is not None
    assert tmp_path / "a.aos" == result.seal.path


def test_command_reading_the_terminal_is_not_stopped(tmp_path: Path) -> None:
    """On a terminal, the command's process group gets the foreground, so reading it does not stop (SIGTTIN) it."""
    import pty
    import select

    out = tmp_path / "tty.aos"
    pid, master = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.execv(ALPHA, [ALPHA, "observe", "record", "--out", str(out), "--", "sh", "-c", "read x; echo got-$x"])
    try:
        os.write(master, b"hello\n")
        seen = b""
        deadline = time.monotonic() + 30
        while b"got-hello" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        _, status = os.waitpid(pid, 0) if b"got-hello" in seen else (0, -1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.close(master)
    assert b"got-hello" in seen
    assert 0 == os.waitstatus_to_exitcode(status)
    assert b"got-hello\n" == output(events(out))
