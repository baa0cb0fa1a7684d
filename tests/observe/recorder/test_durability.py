"""Durability: a killed recorder, an unwritable or full disk, the before_seal hook, signing, bounded memory."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aos.refusals import StreamUnsealed, StreamWrite
from aos.signing import generate_keypair, load_public_key
from aos.verify import verify_stream
from observe.recorder.record import RecordOptions, record
from tests.helpers.recorder import events, kill_recorder_midway, kinds, one, output
from tests.helpers.recorder import record as record_cli
from tests.helpers.run import ALPHA


class TestKilledRecorder:
    def test_kill_9_leaves_a_readable_unsealed_prefix(self, tmp_path: Path) -> None:
        """kill -9 of the recorder mid-output leaves complete batches that read back and verify as unsealed."""
        out = tmp_path / "killed.aos"
        script = "i=0; while :; do i=$((i+1)); echo line-$i; sleep 0.002; done"
        contents = kill_recorder_midway(out, script, lines=200)
        assert "seal" not in kinds(contents.events)
        lines = output(contents.events).split(b"\n")
        complete = lines[:-1]
        assert len(complete) >= 200
        assert [f"line-{i}".encode() for i in range(1, len(complete) + 1)] == complete
        assert f"line-{len(complete) + 1}".encode().startswith(lines[-1])
        with pytest.raises(StreamUnsealed) as refused:
            verify_stream(out)
        assert "stream-unsealed" == refused.value.name
        assert f"last intact seq {contents.events[-1].seq}" in refused.value.detail


class TestUnwritable:
    @pytest.mark.parametrize(
        ("where", "code", "refusal"),
        [
            ("missing-dir/x.aos", 125, b"stream-write"),
            # an existing stream is evidence, never overwritten: the caller's choice, refused as usage (exit 2)
            ("exists.aos", 2, b"out-exists"),
        ],
    )
    def test_unwritable_out_is_125_and_command_not_run(
        self, tmp_path: Path, where: str, code: int, refusal: bytes
    ) -> None:
        """An --out that cannot be created is refused as stream-write, exit 125 (one that exists as out-exists,
        exit 2), before the command runs, and an existing file is left as it was."""
        (tmp_path / "exists.aos").write_bytes(b"keep me")
        marker = tmp_path / "ran"
        proc = subprocess.run(
            [ALPHA, "observe", "record", "--out", str(tmp_path / where), "--", "touch", str(marker)],
            capture_output=True,
            check=False,
        )
        assert code == proc.returncode
        assert proc.stderr.startswith(b"refused: " + refusal + b": ")
        assert not marker.exists()
        assert b"keep me" == (tmp_path / "exists.aos").read_bytes()

    def test_library_raises_stream_write_before_running(self, tmp_path: Path) -> None:
        """record() raises StreamWrite for an unwritable --out, without running the command."""
        marker = tmp_path / "ran"
        with pytest.raises(StreamWrite):
            record(["touch", str(marker)], RecordOptions(out=tmp_path / "no" / "x.aos", quiet=True))
        assert not marker.exists()

    def test_full_disk_mid_run_never_stops_the_command_or_its_echo(self, tmp_path: Path) -> None:
        """When stream writes fail (ENOSPC), the command runs on, its echo is complete, and record exits 125."""
        driver = tmp_path / "driver.py"
        driver.write_text(
            textwrap.dedent(
                """
                import errno, os, sys
                import aos.writer as w

                class FullDisk:
                    calls = 0
                    def __getattr__(self, name):
                        return getattr(os, name)
                    def write(self, fd, data):
                        FullDisk.calls += 1
                        if FullDisk.calls > 3:
                            raise OSError(errno.ENOSPC, "No space left on device")
                        return os.write(fd, data)

                w.os = FullDisk()
                from observe.cli.root import main
                sys.argv = ["alpha", "observe", "record", "--out", sys.argv[1], "--", "sh", "-c", sys.argv[2]]
                main()
                """
            )
        )
        marker = tmp_path / "finished"
        script = f"for i in $(seq 1 300); do echo line-$i; sleep 0.002; done; touch {marker}"
        proc = subprocess.run(
            [sys.executable, str(driver), str(tmp_path / "full.aos"), script],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert 125 == proc.returncode
        assert b"".join(f"line-{i}\n".encode() for i in range(1, 301)) == proc.stdout
        assert marker.exists()
        assert b"stream write failed" in proc.stderr
        assert b"No space left on device" in proc.stderr


class TestBeforeSeal:
    def test_hook_appends_before_the_seal(self, tmp_path: Path) -> None:
        """before_seal sees everything recorded and what it appends precedes the seal."""
        seen: list[str] = []

        def hook(writer: object) -> None:
            seen.extend(e.kind for e in writer.written_events())  # type: ignore[attr-defined]
            writer.append("verdict", {"gate": "t", "verdict": "pass", "scope": "static", "checks": []})  # type: ignore[attr-defined]

        result = record(["echo", "x"], RecordOptions(out=tmp_path / "v.aos", quiet=True, gate="t"), before_seal=hook)
        assert (0, False) == (result.exit_code, result.recorder_failed)
        assert "process.exit" in seen
        evs = events(tmp_path / "v.aos")
        assert ["verdict", "seal"] == kinds(evs)[-2:]
        assert "t" == evs[0].attrs["gate"]
        verify_stream(tmp_path / "v.aos")

    def test_hook_failure_is_recorded_and_sealed(self, tmp_path: Path) -> None:
        """A before_seal that raises is recorded as recorder.error; the stream is still sealed; exit 125."""

        def hook(writer: object) -> None:
            raise RuntimeError("gate exploded")

        result = record(["true"], RecordOptions(out=tmp_path / "e.aos", quiet=True), before_seal=hook)
        assert (125, True) == (result.exit_code, result.recorder_failed)
        assert result.seal is not None
        assert "gate exploded" in one(events(tmp_path / "e.aos"), "recorder.error").attrs["error"]
        verify_stream(tmp_path / "e.aos")


def test_signed_stream_verifies_with_the_public_key(tmp_path: Path) -> None:
    """--sign-key signs the seal; verify with the matching public key accepts it."""
    key, pub = generate_keypair(tmp_path / "k")
    proc, path = record_cli(tmp_path, ["echo", "signed"], "--sign-key", str(key))
    assert 0 == proc.returncode, proc.stderr
    verification = verify_stream(path, load_public_key(pub))
    assert verification.signed
    assert verification.signature_checked


def test_bad_sign_key_is_refused_before_running(tmp_path: Path) -> None:
    """An unreadable signing key is refused (exit 125) and the command is not run."""
    marker = tmp_path / "ran"
    (tmp_path / "bad.key").write_text("not a key")
    proc, _ = record_cli(tmp_path, ["touch", str(marker)], "--sign-key", str(tmp_path / "bad.key"))
    assert 125 == proc.returncode
    assert proc.stderr.startswith(b"refused: stream-signature: ")
    assert not marker.exists()


def test_recording_output_keeps_memory_bounded(tmp_path: Path) -> None:
    """Recording 120 MB of output keeps the recorder's peak RSS under 150 MB (buffering it would need far more)."""
    code = (
        "import resource, subprocess, sys;"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    gen = (
        "import sys\nline = b'2026-11-29 INFO request handled status=200 latency_ms=12 ' * 2 + b'\\n'\n"
        "for _ in range(120_000_000 // len(line)): sys.stdout.buffer.write(line)"
    )
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            ALPHA,
            "observe",
            "record",
            "--out",
            str(tmp_path / "m.aos"),
            "--",
            sys.executable,
            "-c",
            gen,
        ],
        capture_output=True,
        check=True,
    )
    peak_kb = int(probe.stdout.split()[-1])
    assert peak_kb < 150_000, peak_kb
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0


def test_recorder_bug_still_seals_and_exits_125(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error inside the recorder is recorded as recorder.error; the stream is sealed; exit 125."""
    import observe.recorder.control

    def broken(self: object, *a: object, **k: object) -> None:
        raise RuntimeError("channel broke")

    monkeypatch.setattr(observe.recorder.control.Control, "poll_receipts", broken)
    result = record(["sleep", "0.2"], RecordOptions(out=tmp_path / "bug.aos", quiet=True))
    assert (125, True) == (result.exit_code, result.recorder_failed)
    assert "channel broke" in one(events(tmp_path / "bug.aos"), "recorder.error").attrs["error"]
    verify_stream(tmp_path / "bug.aos")


def test_long_tmpdir_still_gets_a_channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TMPDIR too long for a Unix socket path does not break the channel."""
    import tempfile

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    script = "alpha observe step s -- echo stepped"
    result = record(["sh", "-c", script], RecordOptions(out=tmp_path / "long.aos", quiet=True))
    assert 0 == result.exit_code
    evs = events(tmp_path / "long.aos")
    assert b"stepped\n" == output(evs, "stdout", one(evs, "step.start").step)
