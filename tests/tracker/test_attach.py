"""Attaching streams: verified before anything is recorded, never a tampered one, nothing lost under concurrency."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aos.refusals import Refusal
from aos.signing import generate_keypair, load_signer
from aos.verify import verify_stream
from aos.writer import StreamWriter
from tests.helpers.backends import integrity_errors
from tracker import records
from tracker.attach import attach, trusted_keys
from tracker.backends import Connection
from tracker.db import init
from tracker.streams import derive
from tracker.testing import flip_byte, sealed_stream


def count(conn: Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM evidence").fetchone()[0])


class TestAttach:
    def test_records_what_was_verified(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """The evidence row holds the verified stream id, seal head, whole-file digest and sealed verdict."""
        path = tmp_path / "s.aos"
        sealed_stream(path, verdict="pass", scope="physical", gate="distributed-device")
        v = verify_stream(path)
        a = attach(conn, path, run)
        assert (v.stream_id, v.head, v.file_blake3, v.events) == (a.stream_id, a.seal_head, a.file_digest, a.events)
        assert ("pass", "physical", "distributed-device", True) == (a.verdict, a.scope, a.gate, a.new)
        assert str(path.resolve()) == a.path
        assert path.stat().st_size == a.size

    def test_stream_without_verdict(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """A sealed stream without a verdict (a plain recording) is not evidence: stream-verdict, as `verdict` says."""
        path = tmp_path / "s.aos"
        sealed_stream(path, verdict=None)
        with pytest.raises(Refusal) as info:
            attach(conn, path, run)
        assert "stream-verdict" == info.value.name
        assert 0 == count(conn)

    def test_again_unchanged_is_a_no_op(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """Attaching the same unchanged stream to the same run twice records it once."""
        path = tmp_path / "s.aos"
        sealed_stream(path)
        first, second = attach(conn, path, run), attach(conn, path, run)
        assert (True, False) == (first.new, second.new)
        assert first.evidence_id == second.evidence_id
        assert 1 == count(conn)

    def test_unknown_run(self, conn: Connection, tmp_path: Path) -> None:
        """A run that does not exist is refused before the stream is read."""
        with pytest.raises(Refusal) as info:
            attach(conn, tmp_path / "absent.aos", 42)
        assert "tracker-unknown" == info.value.name

    def test_terminal_run(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """A terminal run takes no new evidence."""
        records.finish_run(conn, run, "completed")
        sealed_stream(tmp_path / "s.aos")
        with pytest.raises(Refusal) as info:
            attach(conn, tmp_path / "s.aos", run)
        assert "tracker-run-immutable" == info.value.name
        assert 0 == count(conn)

    def test_other_run(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """A stream already evidence for one run is refused for another."""
        sealed_stream(tmp_path / "s.aos")
        attach(conn, tmp_path / "s.aos", run)
        other = records.start_run(conn)
        with pytest.raises(Refusal) as info:
            attach(conn, tmp_path / "s.aos", other)
        assert "tracker-stream-attached" == info.value.name


class TestTampered:
    @pytest.mark.parametrize("where", ["middle", "seal", "first-batch"])
    def test_flipped_byte_never_attached(self, conn: Connection, run: str, tmp_path: Path, where: str) -> None:
        """A sealed stream with one byte flipped is refused by name and nothing is recorded."""
        path = tmp_path / "s.aos"
        sealed_stream(path, scope="physical")
        size = path.stat().st_size
        flip_byte(path, {"middle": None, "seal": size - 40, "first-batch": size // 3}[where])
        with pytest.raises(Refusal) as info:
            attach(conn, path, run)
        assert info.value.name.startswith("stream-")
        assert 0 == count(conn)

    def test_known_bad_assets_never_attached(
        self,
        conn: Connection,
        run: str,
        asset: Callable[[str], Path],
        asset_manifest: dict[str, dict[str, Any]],
    ) -> None:
        """Every named known-bad stream in tests/assets is refused (signed ones against the tracker's key)."""
        records.add_key(conn, asset("signer.pub"))
        bad = [name for name, m in asset_manifest.items() if m.get("refusal")]
        assert bad
        for name in bad:
            with pytest.raises(Refusal):
                attach(conn, asset(name), run)
        assert 0 == count(conn)

    def test_unsealed_stream_refused(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """A stream that was never sealed is refused as stream-unsealed."""
        path = tmp_path / "s.aos"
        w = StreamWriter(path, background_flush=False)
        w.append("stream.open", {})
        w.close()
        with pytest.raises(Refusal) as info:
            attach(conn, path, run)
        assert "stream-unsealed" == info.value.name

    def test_rewritten_stream_refused_as_changed(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """A stream rewritten under its id after attachment (a valid chain, other bytes) is refused on re-attach."""
        path = tmp_path / "s.aos"
        info = sealed_stream(path, verdict="pass", scope="static")
        attach(conn, path, run)
        w = StreamWriter(path, stream_id=info.stream_id, exclusive=False, background_flush=False)
        w.append("stream.open", {})
        w.append("verdict", {"gate": "distributed-device", "verdict": "pass", "scope": "physical", "checks": []})
        w.seal()
        verify_stream(path)  # it verifies on its own: only the tracker's record catches it
        with pytest.raises(Refusal) as refused:
            attach(conn, path, run)
        assert "tracker-stream-changed" == refused.value.name
        assert "static" == conn.execute("SELECT scope FROM evidence").fetchone()[0]


class TestSignature:
    def test_trusted_key_required_once_any_is_held(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """With a trusted key, unsigned streams and streams signed by other keys are refused; its own are attached."""
        _, pub = generate_keypair(tmp_path / "lab")
        other_key, _ = generate_keypair(tmp_path / "other")
        key_id = records.add_key(conn, pub)
        sealed_stream(tmp_path / "plain.aos")
        sealed_stream(tmp_path / "other.aos", signer=load_signer(other_key))
        for name in ("plain.aos", "other.aos"):
            with pytest.raises(Refusal) as info:
                attach(conn, tmp_path / name, run)
            assert "stream-signature" == info.value.name
        sealed_stream(tmp_path / "good.aos", signer=load_signer(tmp_path / "lab.key"))
        a = attach(conn, tmp_path / "good.aos", run)
        assert (True, key_id) == (a.signed, a.key_id)

    def test_forged_seal_refused_with_the_key(self, conn: Connection, run: str, asset: Callable[[str], Path]) -> None:
        """A seal re-signed by a forger under the signer's key id verifies alone, but not against the trusted key."""
        verify_stream(asset("forged-seal.aos"))
        records.add_key(conn, asset("signer.pub"))
        with pytest.raises(Refusal) as info:
            attach(conn, asset("forged-seal.aos"), run)
        assert "stream-signature" == info.value.name
        # The good asset was recorded long before any run here: its signature is what is checked.
        assert derive(asset("good-signed.aos"), trusted_keys(conn), require_trusted=True).signature_checked

    def test_database_refuses_untrusted_key(self, conn: Connection, run: str, tmp_path: Path) -> None:
        """Even around attach, the database refuses evidence not signed by a trusted key once it holds one."""
        _, pub = generate_keypair(tmp_path / "lab")
        records.add_key(conn, pub)
        with pytest.raises(integrity_errors(), match=r"^tracker-key-untrusted: "):
            conn.execute(
                "INSERT INTO evidence (run_id, stream_id, path, seal_head, file_digest, size, events, verdict, scope,"
                " gate, recorded_at, devices) VALUES (?, 'x', '/x', ?, ?, 1, 1, 'pass', 'static', 'distributed-device',"
                " strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), '[]')",
                (run, "a" * 64, "b" * 64),
            )


def test_store_url_recorded(tracker_db: str, tmp_path: Path) -> None:
    """A copy fetched from a store is recorded by its URL (url and path); the database takes only store URLs."""
    conn = init(tracker_db)
    run = records.start_run(conn, lane="distributed-device")
    sealed_stream(tmp_path / "copy.aos")
    a = attach(conn, tmp_path / "copy.aos", run, url="s3://bucket/prefix/abc.aos")
    assert ("s3://bucket/prefix/abc.aos", "s3://bucket/prefix/abc.aos") == (a.url, a.path)
    with pytest.raises(integrity_errors(), match=r"CHECK constraint failed|violates check constraint"):
        conn.execute(
            "INSERT INTO evidence (run_id, stream_id, path, url, seal_head, file_digest, size, events, verdict, scope,"
            " gate, recorded_at, devices) VALUES (?, 'y', 'p', 'http://x', ?, ?, 1, 1, 'pass', 'static',"
            " 'distributed-device', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), '[]')",
            (run, "a" * 64, "b" * 64),
        )
    conn.close()


def test_attach_records_each_gpus_serial_beside_its_uuid(tracker_db: str) -> None:
    """The H200 recording of issue 35: attached to a run on its GPU, the serial NVML gave is kept beside the UUID
    (in the attach's journal entry)."""
    from tests.helpers.paths import ROOT
    from tracker import journal

    stream = ROOT / "samples" / "evidence" / "gpu-health-h200" / "worker.aos"
    uuid = "GPU-c5e39284-e09f-9924-148e-f1889a6843f0"
    conn = init(tracker_db)
    try:
        records.add_device(conn, "NVIDIA H200", uuid)
        # the stream was recorded on 2026-12-02: the run started before it
        run = records.start_run(conn, devices=[uuid], started_at_ns=1_796_083_200_000_000_000, environ={})
        attach(conn, stream, run)
        assert "1653924043232" == conn.execute("SELECT serial FROM devices WHERE uuid = ?", (uuid,)).fetchone()[0]
        changes = journal.entries(conn)[-1].changes
        assert any(c["table"] == "devices" and c["row"]["serial"] == "1653924043232" for c in changes)
        assert [] == journal.check(conn).problems  # the replayed journal is the tables, serial included
    finally:
        conn.close()
