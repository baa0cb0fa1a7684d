"""End-to-end: what ``alpha observe record`` captures, byte for byte."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aos.verify import verify_stream
from tests.helpers.recorder import events, index, kinds, one, output, record

PY = sys.executable


class TestRoundTrip:
    def test_random_binary_without_trailing_newline(self, tmp_path: Path) -> None:
        """Random binary on stdout and stderr (invalid UTF-8, no final newline) reads back and echoes exactly."""
        blob_out = os.urandom(300_000) + b"\xff\xfe no newline"
        blob_err = os.urandom(70_000) + b"\x00"
        (tmp_path / "out.bin").write_bytes(blob_out)
        (tmp_path / "err.bin").write_bytes(blob_err)
        script = (
            "import sys; o=open(sys.argv[1],'rb').read(); e=open(sys.argv[2],'rb').read();"
            "sys.stdout.buffer.write(o[:1000]); sys.stdout.flush(); sys.stderr.buffer.write(e); sys.stderr.flush();"
            "sys.stdout.buffer.write(o[1000:])"
        )
        proc, path = record(tmp_path, [PY, "-c", script, str(tmp_path / "out.bin"), str(tmp_path / "err.bin")])
        assert 0 == proc.returncode, proc.stderr
        evs = events(path)
        assert blob_out == output(evs, "stdout")
        assert blob_err == output(evs, "stderr")
        assert blob_out == proc.stdout
        assert proc.stderr.startswith(blob_err)
        assert "seal" == evs[-1].kind
        verify_stream(path)

    def test_ten_megabyte_line(self, tmp_path: Path) -> None:
        """A 10 MB line with no newline in it round-trips exactly, through stream and echo."""
        script = "import sys; sys.stdout.buffer.write(bytes(range(33, 127)) * (10_000_000 // 94) + b'end')"
        proc, path = record(tmp_path, [PY, "-c", script])
        expected = bytes(range(33, 127)) * (10_000_000 // 94) + b"end"
        assert 0 == proc.returncode
        assert expected == output(events(path), "stdout")
        assert expected == proc.stdout

    def test_read_stdout_through_the_cli_matches(self, tmp_path: Path) -> None:
        """``alpha observe read --stdout`` gives back exactly what the command wrote (when read exists)."""
        from tests.helpers.run import alpha

        data = b"a\x00b\xc3\x28\nlast"
        (tmp_path / "d.bin").write_bytes(data)
        _proc, path = record(tmp_path, ["cat", str(tmp_path / "d.bin")])
        read = alpha("observe", "read", str(path), "--stdout")
        assert data == read.stdout

    def test_quiet_echoes_nothing_but_records_everything(self, tmp_path: Path) -> None:
        """--quiet keeps the terminal clean while the stream still holds the output."""
        proc, path = record(tmp_path, ["sh", "-c", "echo out; echo err >&2"], "--quiet")
        assert b"" == proc.stdout
        assert b"err" not in proc.stderr
        evs = events(path)
        assert b"out\n" == output(evs, "stdout")
        assert b"err\n" == output(evs, "stderr")


class TestEvents:
    def test_stream_open_attrs(self, tmp_path: Path) -> None:
        """stream.open names the command, recorder, cwd, host, labels, and every env name; values only
        for the allow-list and --env (docs/SECRETS.md)."""
        proc, path = record(
            tmp_path,
            ["true"],
            "--label",
            "lane=ci",
            "--label",
            "n=1",
            "--env",
            "ASKED_FOR",
            env={
                "MY_API_TOKEN": "tok-1234567890",
                "PLAIN_VALUE": "not-on-the-list",
                "ASKED_FOR": "visible",
                "ALPHA_LANE_SETTING": "allowed",
                "EMPTY_ONE": "",
            },
            cwd=tmp_path,
        )
        assert 0 == proc.returncode
        evs = events(path)
        assert "stream.open" == evs[0].kind
        attrs = evs[0].attrs
        assert ["true"] == attrs["argv"]
        assert "alpha-observe" == attrs["tool"]
        assert str(tmp_path) == attrs["cwd"]
        assert {"lane": "ci", "n": "1"} == attrs["labels"]
        assert "[NOT RECORDED]" == attrs["env"]["MY_API_TOKEN"]
        assert "[NOT RECORDED]" == attrs["env"]["PLAIN_VALUE"]
        assert "visible" == attrs["env"]["ASKED_FOR"]
        assert "allowed" == attrs["env"]["ALPHA_LANE_SETTING"]
        assert "" == attrs["env"]["EMPTY_ONE"]
        assert os.environ["PATH"] == attrs["env"]["PATH"]
        assert attrs["gate"] is None
        assert attrs["pty"] is False
        assert attrs["stream_id"] == evs[0].attrs["stream_id"]
        assert "record" in attrs["recorder_argv"]
        assert {"stream_id", "version", "host", "pid", "timeout"} <= set(attrs)

    def test_event_order_and_process_start(self, tmp_path: Path) -> None:
        """Events come as stream.open, the start observation, process.start, output, process.exit, the end
        observation, seal; seq is dense."""
        _proc, path = record(tmp_path, ["echo", "hi"])
        evs = events(path)
        assert [
            "stream.open",
            "device.observed",
            "process.start",
            "stdout",
            "process.exit",
            "device.observed",
            "seal",
        ] == [k for k in kinds(evs) if k not in ("checkpoint", "telemetry")]
        assert list(range(len(evs))) == [e.seq for e in evs]
        start = one(evs, "process.start")
        assert ["echo", "hi"] == start.attrs["argv"]
        assert isinstance(start.attrs["pid"], int)

    def test_command_sees_channel_environment(self, tmp_path: Path) -> None:
        """The command gets AOS_STREAM (the stream's path) and AOS_RECEIPTS, and no inherited AOS_STEP."""
        script = 'printf "%s|%s|%s" "$AOS_STREAM" "${AOS_RECEIPTS:+set}" "${AOS_STEP:-none}"'
        _proc, path = record(tmp_path, ["sh", "-c", script], env={"AOS_STEP": "stale"})
        out = output(events(path)).decode()
        assert f"{path.resolve()}|set|none" == out

    def test_output_before_exit_precedes_process_exit(self, tmp_path: Path) -> None:
        """stdout, stderr and receipts written before the command exits are recorded before process.exit."""
        script = 'echo a; echo b >&2; echo \'{"name":"r"}\' >> "$AOS_RECEIPTS"; echo c'
        _proc, path = record(tmp_path, ["sh", "-c", script])
        evs = events(path)
        exit_at = index(evs, "process.exit")
        for kind in ("stdout", "stderr", "receipt"):
            assert all(i < exit_at for i, e in enumerate(evs) if e.kind == kind), kinds(evs)
        assert b"a\nc\n" == output(evs)

    def test_pty_mode(self, tmp_path: Path) -> None:
        """--pty runs the command on a terminal; its output is recorded as stdout and the exit code kept."""
        script = "if [ -t 1 ]; then echo tty; else echo notty; fi; echo err >&2; exit 4"
        proc, path = record(tmp_path, ["sh", "-c", script], "--pty")
        assert 4 == proc.returncode
        evs = events(path)
        assert b"tty\r\nerr\r\n" == output(evs)
        assert evs[0].attrs["pty"] is True


def test_pty_gets_the_terminal_size(tmp_path: Path) -> None:
    """Under --pty the command's terminal has the size of the recorder's own terminal."""
    import fcntl
    import pty
    import struct
    import termios

    from tests.helpers.run import ALPHA

    out = tmp_path / "size.aos"
    pid, master = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 132, 0, 0))
        os.execv(ALPHA, [ALPHA, "observe", "record", "--quiet", "--pty", "--out", str(out), "--", "stty", "size"])
    try:
        while True:
            try:
                if not os.read(master, 4096):
                    break
            except OSError:
                break
        os.waitpid(pid, 0)
    finally:
        os.close(master)
    assert b"40 132\r\n" == output(events(out))


def test_echo_is_live_without_a_newline(tmp_path: Path) -> None:
    """A partial line reaches the terminal while the command is still running (no line buffering)."""
    import select
    import subprocess
    import time

    from tests.helpers.run import ALPHA

    proc = subprocess.Popen(
        [ALPHA, "observe", "record", "--out", str(tmp_path / "live.aos"), "--", "sh", "-c", "printf first; sleep 60"],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        seen = b""
        deadline = time.monotonic() + 20
        while b"first" not in seen and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                seen += os.read(proc.stdout.fileno(), 100)
        assert b"first" == seen
        assert proc.poll() is None  # the command is still sleeping
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
