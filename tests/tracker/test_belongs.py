"""Evidence must belong to its run (lane, time, devices), every stream of a run counts, and
`attach` refuses what `alpha observe verdict` refuses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aos.refusals import Refusal
from aos.writer import StreamWriter
from tests.helpers.backends import integrity_errors
from tests.helpers.cli import Cli
from tests.helpers.refusals import refused
from tracker import records
from tracker.attach import attach
from tracker.backends import Connection
from tracker.db import init
from tracker.testing import sealed_stream

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


@pytest.fixture
def conn(tracker_db: str) -> Iterator[Connection]:
    """An empty tracker that knows two GPUs."""
    c = init(tracker_db)
    records.add_device(c, "NVIDIA GeForce RTX 3090", GPU_A)
    records.add_device(c, "NVIDIA GeForce RTX 3070", GPU_B)
    yield c
    c.close()


def count(conn: Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM evidence").fetchone()[0])


class TestLane:
    def test_stream_of_another_lane_refused(self, conn: Connection, tmp_path: Path) -> None:
        """A stream whose gate is not the run's lane is not evidence for it."""
        run = records.start_run(conn, lane="distributed-device")
        sealed_stream(tmp_path / "s.aos", gate="exit-zero")
        assert "tracker-evidence-lane" == refused(attach, conn, tmp_path / "s.aos", run).name
        assert 0 == count(conn)

    def test_run_without_lane_takes_its_first_streams_gate(self, conn: Connection, tmp_path: Path) -> None:
        """A run started without a lane becomes a run of its first stream's gate; another gate is then refused."""
        run = records.start_run(conn)
        sealed_stream(tmp_path / "a.aos", gate="coordinate-device")
        attach(conn, tmp_path / "a.aos", run)
        assert "coordinate-device" == conn.execute("SELECT lane FROM runs WHERE id = ?", (run,)).fetchone()[0]
        sealed_stream(tmp_path / "b.aos", gate="distributed-device")
        assert "tracker-evidence-lane" == refused(attach, conn, tmp_path / "b.aos", run).name

    def test_database_refuses_the_wrong_lane(self, conn: Connection) -> None:
        """A plain SQL insert of evidence of another gate is refused by the database itself."""
        run = records.start_run(conn, lane="distributed-device")
        with pytest.raises(integrity_errors(), match=r"^tracker-evidence-lane: "):
            insert(conn, run, gate="exit-zero")


class TestTime:
    def test_stream_recorded_before_the_run_refused(self, conn: Connection, tmp_path: Path) -> None:
        """A stream recorded (stream.open) before the run started is not evidence for it."""
        sealed_stream(tmp_path / "old.aos", opened_ns=time.time_ns() - 3_600_000_000_000)
        run = records.start_run(conn, lane="distributed-device")
        assert "tracker-evidence-time" == refused(attach, conn, tmp_path / "old.aos", run).name
        assert 0 == count(conn)

    def test_stream_recorded_after_the_run_started_accepted(self, conn: Connection, tmp_path: Path) -> None:
        """The stream's recording time is its stream.open wall time, recorded with the evidence."""
        run = records.start_run(conn, lane="distributed-device")
        started = conn.execute("SELECT started_at FROM runs WHERE id = ?", (run,)).fetchone()[0]
        sealed_stream(tmp_path / "new.aos")
        a = attach(conn, tmp_path / "new.aos", run)
        assert a.recorded_at is not None
        assert a.recorded_at >= started

    def test_database_refuses_an_older_recording(self, conn: Connection) -> None:
        """A plain SQL insert claiming a recording before the run (or none) is refused by the database."""
        run = records.start_run(conn, lane="distributed-device")
        for recorded in ("2000-01-01T00:00:00.000Z", None):
            with pytest.raises(integrity_errors(), match=r"^tracker-evidence-time: "):
                insert(conn, run, recorded_at=recorded)

    def test_declared_start_admits_only_what_follows_it(self, conn: Connection, tmp_path: Path) -> None:
        """A run registered after its work (--started-at) admits streams recorded after the declared start,
        never older ones; its id keeps the registration time, so the import stays visible."""
        now = time.time_ns()
        declared = now - 600_000_000_000  # ten minutes ago
        sealed_stream(tmp_path / "during.aos", opened_ns=declared + 60_000_000_000)
        sealed_stream(tmp_path / "before.aos", opened_ns=declared - 60_000_000_000)
        run = records.start_run(conn, lane="distributed-device", started_at_ns=declared)
        attach(conn, tmp_path / "during.aos", run)
        assert "tracker-evidence-time" == refused(attach, conn, tmp_path / "before.aos", run).name
        from tracker.ids import iso_ms

        started = conn.execute("SELECT started_at FROM runs WHERE id = ?", (run,)).fetchone()[0]
        assert iso_ms(declared) == started
        assert int(run.replace("-", "")[:12], 16) >= now // 1_000_000  # UUIDv7: registered now, not then
        with pytest.raises(ValueError, match="future"):
            records.start_run(conn, lane="distributed-device", started_at_ns=time.time_ns() + 3_600_000_000_000)

    def test_declared_start_on_the_command_line(self, tmp_path: Path, cli: Cli) -> None:
        """`run start --started-at` takes ISO 8601 with a zone; anything else is a usage error."""
        db = str(tmp_path / "t.sqlite3")
        assert 0 == cli("tracker", "--db", db, "init").exit_code
        ok = cli("tracker", "--db", db, "run", "start", "--started-at", "2026-01-02T03:04:05Z")
        assert 0 == ok.exit_code, ok.output
        for bad in ("yesterday", "2026-01-02T03:04:05", "2999-01-01T00:00:00Z"):
            r = cli("tracker", "--db", db, "run", "start", "--started-at", bad)
            assert 2 == r.exit_code, (bad, r.output)

    def test_start_time_cannot_be_moved_back(self, conn: Connection) -> None:
        """Moving a run's start back (to admit an older stream) is refused."""
        run = records.start_run(conn, lane="distributed-device")
        with pytest.raises(integrity_errors(), match=r"^tracker-invalid: "):
            conn.execute("UPDATE runs SET started_at = '2000-01-01T00:00:00.000Z' WHERE id = ?", (run,))


class TestDevices:
    def test_stream_observed_on_other_devices_refused(self, conn: Connection, tmp_path: Path) -> None:
        """A run on GPU A does not take a stream whose recorder observed only GPU B."""
        run = records.start_run(conn, lane="distributed-device", devices=[GPU_A])
        sealed_stream(tmp_path / "s.aos", devices=[GPU_B])
        assert "tracker-evidence-devices" == refused(attach, conn, tmp_path / "s.aos", run).name

    def test_stream_without_observed_devices_refused(self, conn: Connection, tmp_path: Path) -> None:
        """A run that names devices does not take a stream whose recorder observed no GPU."""
        run = records.start_run(conn, lane="distributed-device", devices=[GPU_A])
        sealed_stream(tmp_path / "s.aos")
        assert "tracker-evidence-devices" == refused(attach, conn, tmp_path / "s.aos", run).name

    def test_stream_observed_on_every_device_accepted(self, conn: Connection, tmp_path: Path) -> None:
        """A stream observed on every device of the run (and maybe more of the host's) is accepted."""
        run = records.start_run(conn, lane="distributed-device", devices=[GPU_A])
        sealed_stream(tmp_path / "s.aos", devices=[GPU_B, GPU_A])
        assert [GPU_A, GPU_B] == attach(conn, tmp_path / "s.aos", run).devices

    def test_run_without_devices_takes_any(self, conn: Connection, tmp_path: Path) -> None:
        """A run that names no device takes a stream whatever it observed."""
        run = records.start_run(conn, lane="distributed-device")
        sealed_stream(tmp_path / "s.aos", devices=[GPU_B])
        assert attach(conn, tmp_path / "s.aos", run).new

    def test_device_not_added_after_evidence(self, conn: Connection, tmp_path: Path) -> None:
        """A device the run's evidence was not observed on is not added to the run afterwards."""
        run = records.start_run(conn, lane="distributed-device")
        sealed_stream(tmp_path / "s.aos", devices=[GPU_B])
        attach(conn, tmp_path / "s.aos", run)
        with pytest.raises(integrity_errors(), match=r"^tracker-evidence-devices: "):
            conn.execute("INSERT INTO run_devices (run_id, device_id) VALUES (?, 1)", (run,))

    def test_database_refuses_unobserved_devices(self, conn: Connection) -> None:
        """A plain SQL insert claiming other devices, none, or malformed ones is refused by the database."""
        run = records.start_run(conn, lane="distributed-device", devices=[GPU_A])
        for devices in (f'["{GPU_B}"]', None, "not json"):
            with pytest.raises(integrity_errors(), match=r"^tracker-evidence-devices: "):
                insert(conn, run, devices=devices)


class TestEveryStreamCounts:
    def test_one_pass_among_fails_is_not_a_physical_pass(self, conn: Connection, tmp_path: Path) -> None:
        """A run with a failing stream and a physical pass cannot be recorded as a physical pass."""
        run = records.start_run(conn, lane="distributed-device")
        sealed_stream(tmp_path / "fail.aos", verdict="fail", scope="physical")
        sealed_stream(tmp_path / "pass.aos", verdict="pass", scope="physical")
        attach(conn, tmp_path / "fail.aos", run)
        attach(conn, tmp_path / "pass.aos", run)
        with pytest.raises(Refusal) as info:
            records.finish_run(conn, run, "completed", physical_pass=True)
        assert "tracker-physical-pass" == info.value.name

    def test_one_pass_among_fails_does_not_verify(self, conn: Connection, tmp_path: Path) -> None:
        """The passing stream of a run that also failed does not verify an item, whichever order they came in."""
        records.add_milestone(conn, "M1", "m")
        records.add_item(conn, "H1", "hardware", "M1", hardware=True)
        records.add_item(conn, "N1", "static", "M1")
        run = records.start_run(conn, lane="distributed-device")
        sealed_stream(tmp_path / "pass.aos", verdict="pass", scope="physical")
        sealed_stream(tmp_path / "fail.aos", verdict="inconclusive", scope="physical")
        passing = attach(conn, tmp_path / "pass.aos", run)
        attach(conn, tmp_path / "fail.aos", run)
        records.finish_run(conn, run, "completed")
        for item in ("H1", "N1"):
            with pytest.raises(Refusal) as info:
                records.set_item(conn, item, status="verified", evidence=[passing.stream_id])
            assert "tracker-evidence-required" == info.value.name

    def test_every_stream_passing_is_a_physical_pass(self, conn: Connection, tmp_path: Path) -> None:
        """A static and a physical pass on one run: every stream passed, one physical; the pass is recorded."""
        run = records.start_run(conn, lane="distributed-device")
        sealed_stream(tmp_path / "static.aos", verdict="pass", scope="static")
        sealed_stream(tmp_path / "physical.aos", verdict="pass", scope="physical")
        attach(conn, tmp_path / "static.aos", run)
        attach(conn, tmp_path / "physical.aos", run)
        records.finish_run(conn, run, "completed", physical_pass=True)


def insert(conn: Connection, run: str, **columns: Any) -> None:
    """Insert an evidence row with plain SQL (well-formed unless ``columns`` say otherwise)."""
    row: dict[str, Any] = {
        "run_id": run,
        "stream_id": "f" * 32,
        "path": "/nowhere.aos",
        "seal_head": "a" * 64,
        "file_digest": "b" * 64,
        "size": 100,
        "events": 5,
        "verdict": "pass",
        "scope": "physical",
        "gate": "distributed-device",
        "recorded_at": "2999-01-01T00:00:00.000Z",
        "devices": f'["{GPU_A}"]',
    }
    row.update(columns)
    names = ", ".join(row)
    conn.execute(f"INSERT INTO evidence ({names}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))


def stream_with_verdicts(path: Path, *verdicts: dict[str, Any]) -> Path:
    """A sealed stream holding exactly these verdict events (maybe none, maybe malformed)."""
    w = StreamWriter(path, background_flush=False, fsync="never")
    try:
        w.append("stream.open", {"stream_id": w.stream_id, "argv": ["true"], "gate": "distributed-device"})
        w.append("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 1})
        for v in verdicts:
            w.append("verdict", v)
        w.seal()
    finally:
        w.close()
    return path


_GOOD = {"gate": "distributed-device", "verdict": "pass", "scope": "physical", "checks": []}


class TestStreamVerdict:
    @pytest.mark.parametrize(
        ("name", "verdicts"),
        [
            ("none", []),
            ("two", [_GOOD, _GOOD]),
            ("fail-then-pass", [_GOOD | {"verdict": "fail"}, _GOOD]),
            ("unknown-verdict", [_GOOD | {"verdict": "maybe"}]),
            ("scope-missing", [{k: v for k, v in _GOOD.items() if k != "scope"}]),
            ("checks-not-a-list", [_GOOD | {"checks": {"exit-zero": "pass"}}]),
            ("malformed-check", [_GOOD | {"checks": [{"name": "exit-zero", "status": "great"}]}]),
        ],
    )
    def test_attach_refuses_what_verdict_refuses(
        self, conn: Connection, tmp_path: Path, name: str, verdicts: list[dict[str, Any]], cli: Cli
    ) -> None:
        """A stream `alpha observe verdict` refuses (no verdict, two, a malformed one) is refused by attach too."""
        run = records.start_run(conn, lane="distributed-device")
        path = stream_with_verdicts(tmp_path / f"{name}.aos", *verdicts)
        shown = cli("observe", "verdict", str(path))
        assert 1 == shown.exit_code
        assert shown.stderr.startswith("refused: stream-verdict: ")
        assert "stream-verdict" == refused(attach, conn, path, run).name
        assert 0 == count(conn)

    def test_database_refuses_evidence_without_a_verdict(self, conn: Connection) -> None:
        """A plain SQL insert of evidence with no verdict, scope or gate is refused as stream-verdict."""
        run = records.start_run(conn, lane="distributed-device", devices=[GPU_A])
        for column in ("verdict", "scope", "gate"):
            with pytest.raises(integrity_errors(), match=r"^stream-verdict: "):
                insert(conn, run, **{column: None, "scope": None} if column == "verdict" else {column: None})


def test_devices_found_in_a_long_batch(tmp_path: Path) -> None:
    """The observed GPUs are found wherever their event sits, also among thousands of events in one batch."""
    from tracker.streams import derive

    w = StreamWriter(tmp_path / "long.aos", background_flush=False, fsync="never", flush_interval=60)
    try:
        w.append("stream.open", {"stream_id": w.stream_id, "argv": ["true"], "gate": "distributed-device"})
        for i in range(3000):
            w.append("stdout", {}, data=b"line %d\n" % i)
            if i == 1500:
                w.append("device.observed", {"phase": "sample", "observer": "simulated", "gpus": [{"uuid": GPU_B}]})
        w.append("device.observed", {"phase": "end", "observer": "simulated", "gpus": [{"uuid": GPU_A}, {"x": 1}]})
        w.append("verdict", _GOOD)
        w.seal()
    finally:
        w.close()
    facts = derive(tmp_path / "long.aos", {}, require_trusted=True)
    assert (GPU_A, GPU_B) == facts.devices
