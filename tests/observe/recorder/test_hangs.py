"""No hangs: link loops under an artifact glob, signals and --timeout during captures,
processes in sessions of their own, and --pty with piped input (issue 11)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from aos.verify import verify_stream
from tests.helpers.recorder import events, one, output, record, wait_for
from tests.helpers.run import ALPHA


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def _reading(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open and has read into it (its offset, /proc/PID/fdinfo, past 0)."""
    target = str(path.resolve())
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            if os.readlink(fd) == target:
                info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
                if int(info.split("pos:", 1)[1].split()[0]) > 0:
                    return True
    except OSError:  # a descriptor closed while looked at, or the process gone
        return False
    return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


class TestArtifactWalk:
    def test_link_loops_under_a_glob_end(self, tmp_path: Path) -> None:
        """``--artifact 'out/**'`` over directory links to their own ancestors records each link once and seals."""
        script = (
            "mkdir -p out/a/b && echo x > out/a/b/f && ln -s .. out/a/up && ln -s . out/self && ln -s ../.. out/a/b/top"
        )
        proc, path = record(
            tmp_path, ["sh", "-c", script], "--artifact", "out/**", "--timeout", "60", cwd=tmp_path, timeout=60
        )
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        kinds = {e.attrs["path"]: e.attrs["kind"] for e in evs if e.kind == "artifact"}
        assert {"out/a/b/f": "file", "out/a/up": "symlink", "out/self": "symlink", "out/a/b/top": "symlink"} == kinds
        verify_stream(path)

    def test_links_in_the_middle_of_a_glob_are_not_entered(self, tmp_path: Path) -> None:
        """``out/*/f`` does not go through a link named by ``*``: only real directories are entered."""
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "f").write_text("outside")
        (tmp_path / "out" / "real").mkdir(parents=True)
        (tmp_path / "out" / "real" / "f").write_text("inside")
        (tmp_path / "out" / "link").symlink_to(tmp_path / "elsewhere")
        proc, path = record(tmp_path, ["true"], "--artifact", "out/*/f", cwd=tmp_path)
        assert 0 == proc.returncode, proc.stderr
        assert ["out/real/f"] == [e.attrs["path"] for e in events(path) if e.kind == "artifact"]


def _sparse(path: Path, size: int) -> None:
    with path.open("wb") as fh:
        fh.truncate(size)


class TestCaptureUnderSignalsAndTimeout:
    def test_sigterm_during_the_final_capture_seals(self, tmp_path: Path) -> None:
        """SIGTERM while ``--artifact`` captures a huge file ends the capture, records it, and seals."""
        _sparse(tmp_path / "huge", 1 << 40)
        out = tmp_path / "term.aos"
        proc = subprocess.Popen(
            [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--artifact", "huge", "--", "touch", "ready"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
        )
        try:
            wait_for(lambda: (tmp_path / "ready").exists(), timeout=30)
            wait_for(lambda: _reading(proc.pid, tmp_path / "huge"), timeout=30)  # the recorder is hashing it now
            proc.terminate()
            proc.communicate(timeout=30)
        finally:
            proc.kill()
        evs = events(out)
        stopped = [e.attrs for e in evs if e.kind == "artifact.error"]
        assert stopped
        assert stopped[0]["stopped"] is True
        assert "SIGTERM" == one(evs, "recorder.interrupted").attrs["signal"]
        verify_stream(out)

    def test_timeout_bounds_the_final_capture(self, tmp_path: Path) -> None:
        """``--timeout`` also ends the ``--artifact`` capture: exit 124, a sealed stream saying what was stopped."""
        _sparse(tmp_path / "huge", 1 << 40)
        begun = time.monotonic()
        proc, path = record(tmp_path, ["true"], "--artifact", "huge", "--timeout", "2", cwd=tmp_path, timeout=60)
        assert 124 == proc.returncode, proc.stderr
        assert time.monotonic() - begun < 50
        evs = events(path)
        assert [True] == [e.attrs["stopped"] for e in evs if e.kind == "artifact.error"]
        assert one(evs, "process.exit").attrs["timed_out"] is False  # the command itself finished in time
        verify_stream(path)


class TestProcessTree:
    def test_timeout_reaches_a_new_session(self, tmp_path: Path) -> None:
        """``--timeout`` ends a process that started its own session (setsid), and records it."""
        pidfile = tmp_path / "pid"
        script = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & wait"
        try:
            proc, path = record(
                tmp_path, ["sh", "-c", script], "--timeout", "1", env={"ALPHA_OBSERVE_KILL_GRACE": "1"}, timeout=60
            )
            pid = int(pidfile.read_text())
            assert 124 == proc.returncode
            wait_for(lambda: not _alive(pid), timeout=10)
        finally:
            if pidfile.exists():
                _kill(int(pidfile.read_text()))
        verify_stream(path)
        ended = one(events(path), "process.stray").attrs["ended"]
        assert pid in [p["pid"] for p in ended]
        assert {"SIGTERM", "SIGKILL"} >= {p["signal"] for p in ended if p["pid"] == pid}

    def test_daemon_left_behind_is_ended_and_recorded(self, tmp_path: Path) -> None:
        """A daemon the command leaves running (own session, no pipes) is ended after the drain, and recorded."""
        pidfile = tmp_path / "pid"
        script = (
            f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pidfile};"
            ' until [ "$(head -c 5 /proc/$!/cmdline)" = sleep ]; do sleep 0.01; done'
        )
        try:
            proc, path = record(tmp_path, ["sh", "-c", script], env={"ALPHA_OBSERVE_DRAIN": "0.2"}, timeout=60)
            pid = int(pidfile.read_text())
            assert 0 == proc.returncode, proc.stderr
            assert not _alive(pid)
        finally:
            if pidfile.exists():
                _kill(int(pidfile.read_text()))
        stray = one(events(path), "process.stray").attrs
        assert [] == stray["still_open"]
        assert [(pid, "SIGTERM")] == [(p["pid"], p["signal"]) for p in stray["ended"]]
        assert "sleep" in stray["ended"][0]["argv"][0]


class TestPty:
    def test_piped_stdin_reaches_the_command(self, tmp_path: Path) -> None:
        """``echo hi | record --pty -- cat`` ends, and records hi."""
        out = tmp_path / "pty.aos"
        proc = subprocess.run(
            [ALPHA, "observe", "record", "--pty", "--quiet", "--out", str(out), "--", "cat"],
            input=b"hi\n",
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert 0 == proc.returncode, proc.stderr
        assert b"hi\r\n" == output(events(out))

    def test_stdin_without_final_newline_and_empty_stdin(self, tmp_path: Path) -> None:
        """A last line without newline still reaches the command; empty stdin is end of file at once."""
        for data, want in ((b"a\nb", b"a\r\nb"), (b"", b"")):
            out = tmp_path / f"pty-{len(data)}.aos"
            proc = subprocess.run(
                [ALPHA, "observe", "record", "--pty", "--quiet", "--out", str(out), "--", "cat"],
                input=data,
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert 0 == proc.returncode, proc.stderr
            assert want == output(events(out))

    def test_typed_input_is_echoed_once(self, tmp_path: Path) -> None:
        """With a terminal on stdin, what is typed shows once (the command's terminal echoes it), not twice;
        the recorder's terminal gets its settings back when the recording ends."""
        import pty
        import select
        import termios

        out = tmp_path / "typed.aos"
        pid, master = pty.fork()
        if pid == 0:  # the recorder, on a terminal of the test's own
            argv = [ALPHA, "observe", "record", "--pty", "--out", str(out), "--", "sh", "-c", "echo ready; cat"]
            os.execv(ALPHA, argv)
        seen = b""

        def read_until(want: bytes, count: int = 1) -> None:
            nonlocal seen
            deadline = time.monotonic() + 60
            while seen.count(want) < count and time.monotonic() < deadline:
                if select.select([master], [], [], 0.5)[0]:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:
                        return
                    if not chunk:
                        return
                    seen += chunk

        try:
            read_until(b"ready\r\n")
            os.write(master, b"typed-line\n")
            read_until(b"typed-line", 2)
            # No wait for a third copy: had the recorder's terminal echoed too, its line discipline would have
            # echoed the line when it took it in, before it takes in the end of input below; the recording ends
            # only after that, and everything up to its end is read.
            os.write(master, b"\x04")
            read_until(b"\x00")  # to the end
            settings = termios.tcgetattr(master)
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(master)
        assert 0 == os.waitstatus_to_exitcode(status), seen
        assert 2 == seen.count(b"typed-line"), seen  # the command's terminal's echo, and cat's copy
        assert settings[3] & termios.ECHO  # given back
        assert settings[3] & termios.ICANON
        assert settings[1] & termios.OPOST
        assert b"ready\r\ntyped-line\r\ntyped-line\r\n" == output(events(out))

    def test_command_closing_its_terminal_before_exit_is_not_hung_up(self, tmp_path: Path) -> None:
        """A command that closes its terminal and then exits keeps its exit code (no SIGHUP from the recorder)."""
        script = "echo bye; exec 0<&- 1>&- 2>&-; sleep 0.3; exit 3"
        proc, path = record(tmp_path, ["sh", "-c", script], "--pty", stdin=subprocess.DEVNULL, timeout=60)
        assert 3 == proc.returncode, proc.stderr
        assert (3, None) == (one(events(path), "process.exit").attrs["exit_code"], None)
