"""Nothing sent is lost: a client that exits 0 has its event in the stream; one that cannot deliver says so.

Issue 11, "Nothing sent is lost". Under load on a 2-core machine a receipt and two
artifacts that the lane had sent (each client exiting 0) were missing from a
sealed stream. The recorder's side of every exchange now answers only after the
event is appended to the writer, ``receipt`` waits for that answer too (it used
to append to a file and exit 0 whether or not the file was ever read again), and
``step`` exits 125 when its span was not recorded whole.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from observe.channel.protocol import FrameReader, encode_json
from observe.recorder.record import RecordOptions
from observe.recorder.record import record as run_record
from tests.helpers.recorder import events, record
from tests.helpers.run import alpha, child_env


def _env_of(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


class TestLateClients:
    def test_receipt_after_the_last_read_is_not_confirmed(self, tmp_path: Path) -> None:
        """A receipt sent after the recorder's last read of the channel exits non-zero, never 0 and lost."""
        envfile = tmp_path / "env"
        late: list[subprocess.CompletedProcess[bytes]] = []

        def hook(_writer: object) -> None:  # the recording is over; only the seal is left
            env = {k: v for k, v in _env_of(envfile).items() if k in ("AOS_RECEIPTS", "AOS_CONTROL")}
            late.append(alpha("observe", "receipt", "late", env=env))

        out = tmp_path / "late.aos"
        result = run_record(["sh", "-c", f"env > {envfile}"], RecordOptions(out=out, quiet=True), before_seal=hook)
        assert 0 == result.exit_code
        names = [e.attrs["name"] for e in events(out) if e.kind == "receipt"]
        (client,) = late
        assert (client.returncode != 0) or ("late" in names), "exited 0 but its receipt is not in the stream"
        assert 0 != client.returncode
        assert b"did not confirm" in client.stderr or b"not recorded" in client.stderr

    def test_artifact_that_matched_nothing_exits_nonzero(self, tmp_path: Path) -> None:
        """alpha observe artifact of a missing file says so and exits 1 (the stream records artifact.missing)."""
        proc, path = record(tmp_path, ["sh", "-c", "alpha observe artifact no-such-file; echo rc=$?"], cwd=tmp_path)
        assert b"rc=1\n" in proc.stdout
        assert b"no-such-file" in proc.stderr
        assert ["no-such-file"] == [e.attrs["pattern"] for e in events(path) if e.kind == "artifact.missing"]


class _FakeRecorder:
    """A control socket that answers ``step.run``/``receipts.sync`` as told, to test the clients alone."""

    def __init__(self, directory: Path, *, ack_end: bool, ack_sync: bool) -> None:
        self.path = str(directory / "control")
        self.ack_end = ack_end
        self.ack_sync = ack_sync
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(8)
        self.ops: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        import json

        reader = FrameReader()
        with conn:
            while data := conn.recv(65536):
                for kind, payload in reader.feed(data):
                    if kind != b"J":
                        continue
                    op = json.loads(payload)["op"]
                    self.ops.append(op)
                    if op == "step.run" and not self.ack_end:
                        return  # the recorder went away before reporting the step's end
                    elif op == "step.run":  # the step's end as a recorder reports it: exit 3
                        conn.sendall(encode_json({"op": "step.exit", "ok": True, "code": 3, "exit_code": 3}))
                    elif op == "receipts.sync" and not self.ack_sync:
                        return
                    elif op == "receipts.sync":
                        conn.sendall(encode_json({"ok": True}))

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[_FakeRecorder, dict[str, str]]]:
    """A fake recorder (``request.param``: ack_end, ack_sync) and the environment pointing a client at it."""
    ack_end, ack_sync = request.param
    short = Path(os.path.realpath("/tmp")) / f"aos-fake-{os.getpid()}-{time.monotonic_ns()}"
    short.mkdir()
    receipts = short / "receipts"
    receipts.write_bytes(b"")
    server = _FakeRecorder(short, ack_end=ack_end, ack_sync=ack_sync)
    env = child_env()
    env.update(AOS_RECEIPTS=str(receipts), AOS_CONTROL=server.path, FAKE_RECEIPTS=str(receipts))
    try:
        yield server, env
    finally:
        server.close()
        for p in short.iterdir():
            p.unlink()
        short.rmdir()


class TestClientsWithoutAcknowledgement:
    @pytest.mark.parametrize("fake", [(False, True)], indirect=True)
    def test_step_whose_end_is_not_acknowledged_exits_125(self, fake: tuple[_FakeRecorder, dict[str, str]]) -> None:
        """A step whose end the recorder never reported exits 125, and the client never runs it itself."""
        server, env = fake
        marker = Path(env["AOS_RECEIPTS"]).with_name("ran")
        proc = alpha("observe", "step", "s", "--", "touch", str(marker), env=env)
        assert ["step.run"] == server.ops
        assert 125 == proc.returncode, proc.stderr
        assert b"did not report the step's end" in proc.stderr
        assert not marker.exists()  # the recorder runs steps: a client that ran it too would run it twice

    @pytest.mark.parametrize("fake", [(True, True)], indirect=True)
    def test_step_exits_with_the_code_the_recorder_reports(self, fake: tuple[_FakeRecorder, dict[str, str]]) -> None:
        """The client exits with the code in the recorder's step.exit (the recorder ran the command, not it)."""
        _server, env = fake
        proc = alpha("observe", "step", "s", "--", "true", env=env)
        assert 3 == proc.returncode, proc.stderr

    @pytest.mark.parametrize("fake", [(True, False)], indirect=True)
    def test_receipt_not_confirmed_exits_1(self, fake: tuple[_FakeRecorder, dict[str, str]]) -> None:
        """A receipt the recorder does not confirm exits 1 and says so."""
        server, env = fake
        proc = alpha("observe", "receipt", "r", env=env)
        assert ["receipts.sync"] == server.ops
        assert 1 == proc.returncode
        assert b"did not confirm" in proc.stderr

    @pytest.mark.parametrize("fake", [(True, True)], indirect=True)
    def test_receipt_confirmed_exits_0(self, fake: tuple[_FakeRecorder, dict[str, str]]) -> None:
        """A confirmed receipt exits 0, after asking for the confirmation with its line's end offset."""
        server, env = fake
        proc = alpha("observe", "receipt", "r", env=env)
        assert (0, ["receipts.sync"]) == (proc.returncode, server.ops), proc.stderr

    def test_step_that_cannot_reach_the_recorder_runs_and_exits_125(self, tmp_path: Path) -> None:
        """With no recorder listening, step still runs its command, but exits 125: nothing of it was recorded."""
        receipts = tmp_path / "receipts"
        receipts.write_bytes(b"")
        marker = tmp_path / "ran"
        env = {"AOS_RECEIPTS": str(receipts), "AOS_CONTROL": str(tmp_path / "nobody")}
        proc = alpha("observe", "step", "s", "--", "touch", str(marker), env=env)
        assert marker.exists()
        assert 125 == proc.returncode


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that keep a core each busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


class TestStress:
    def test_concurrent_clients_on_busy_cores_lose_nothing(self, tmp_path: Path) -> None:
        """Many concurrent receipt, step and artifact clients, both cores kept busy: each exits 0 and arrives."""
        n = 24
        script = f"""
mkdir -p arts
i=1
while [ $i -le {n} ]; do
  echo "bytes $i" > arts/f$i
  ( alpha observe receipt r$i --field i=$i; echo "receipt $i $?" >> codes ) &
  ( alpha observe artifact arts/f$i; echo "artifact $i $?" >> codes ) &
  ( alpha observe step s$i -- sh -c "echo out-$i; alpha observe receipt in$i"; echo "step $i $?" >> codes ) &
  echo '{{"name":"sh'$i'"}}' >> "$AOS_RECEIPTS" &
  i=$((i + 1))
done
wait
"""
        busy = _busy(3)
        try:
            proc, path = record(tmp_path, ["sh", "-c", script], "--quiet", cwd=tmp_path, timeout=300)
        finally:
            for b in busy:
                b.kill()
                b.wait()
        assert 0 == proc.returncode, proc.stderr
        codes = sorted((tmp_path / "codes").read_text().split("\n")[:-1])
        expected = sorted(f"{what} {i} 0" for what in ("receipt", "artifact", "step") for i in range(1, n + 1))
        assert expected == codes, proc.stderr
        evs = events(path)
        receipts = {e.attrs["name"] for e in evs if e.kind == "receipt"}
        for i in range(1, n + 1):
            assert {f"r{i}", f"in{i}", f"sh{i}"} <= receipts
        captured = {e.attrs["path"]: e for e in evs if e.kind == "artifact"}
        assert {f"arts/f{i}" for i in range(1, n + 1)} == set(captured)
        ends = {e.attrs["name"]: e.attrs for e in evs if e.kind == "step.end"}
        assert {f"s{i}" for i in range(1, n + 1)} == set(ends)
        assert all(a["exit_code"] == 0 and not a.get("incomplete") for a in ends.values())
        spans = {e.step: e.attrs["name"] for e in evs if e.kind == "step.start"}
        inner = {e.attrs["name"]: spans.get(e.step) for e in evs if e.kind == "receipt" and e.attrs["name"][:2] == "in"}
        assert {f"in{i}": f"s{i}" for i in range(1, n + 1)} == inner
        exit_at = next(i for i, e in enumerate(evs) if e.kind == "process.exit")
        assert all(i < exit_at for i, e in enumerate(evs) if e.kind in ("receipt", "artifact", "step.end"))
