"""The reference lane's role executables (samples/lane): reproducible builds and the static check."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers.paths import SAMPLES

LANE_DIR = SAMPLES / "lane"
sys.path.insert(0, str(LANE_DIR))

from lanekit.build import build_role, check_executable, read_manifest, sha256_file  # noqa: E402
from lanekit.device import host_binding  # noqa: E402
from lanekit.spec import default_spec  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _results(path: Path) -> dict[str, str]:
    return {r["check"]: r["result"] for r in check_executable(str(path), role="owner-0", lane="coordinates")}


class TestBuild:
    def test_deterministic(self, tmp_path: Path) -> None:
        """Building the same role twice gives the same bytes and the same recorded SHA-256."""
        spec = default_spec("coordinates")
        _, first = build_role(spec, "owner-0", host_binding(), tmp_path / "a")
        _, second = build_role(spec, "owner-0", host_binding(), tmp_path / "b")
        assert first == second
        assert f"{first}  owner-0.pyz\n" == (tmp_path / "a" / "owner-0.pyz.sha256").read_text()

    def test_binding_is_embedded(self, tmp_path: Path) -> None:
        """The device binding (minor, UUID, product) is baked into the executable's manifest."""
        binding = {"kind": "gpu", "minor": 3, "uuid": "GPU-1234", "product": "NVIDIA GeForce RTX 3090"}
        path, _ = build_role(default_spec("independent"), "owner-1", binding, tmp_path)
        manifest = read_manifest(path)
        assert (binding, "owner-1", "independent") == (manifest["binding"], manifest["role"], manifest["lane"])

    def test_other_binding_other_bytes(self, tmp_path: Path) -> None:
        """A different binding gives a different executable."""
        spec = default_spec("partitioned")
        _, a = build_role(spec, "owner-0", host_binding(), tmp_path / "a")
        _, b = build_role(spec, "owner-0", host_binding(uuid="HOST-other"), tmp_path / "b")
        assert a != b

    def test_runs_standalone(self, tmp_path: Path) -> None:
        """The executable runs as `python3 FILE` from an empty folder, without the repository on its path."""
        path, _ = build_role(default_spec("partitioned"), "owner-0", host_binding(), tmp_path)
        done = subprocess.run(
            [sys.executable, "-I", path, "manifest"], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert 0 == done.returncode, done.stderr
        assert '"role": "owner-0"' in done.stdout


class TestCheck:
    def test_fresh_build_passes(self, tmp_path: Path) -> None:
        """A fresh build passes integrity, manifest and self-test."""
        path, _ = build_role(default_spec("coordinates"), "owner-0", host_binding(), tmp_path)
        assert {"integrity": "pass", "manifest": "pass", "self-test": "pass"} == _results(Path(path))

    def test_any_flipped_byte_is_a_named_failure(self, tmp_path: Path) -> None:
        """A byte flipped anywhere in the executable fails integrity, never raises out of the check."""
        path, _ = build_role(default_spec("coordinates"), "owner-0", host_binding(), tmp_path)
        original = Path(path).read_bytes()
        for pos in range(0, len(original), max(1, len(original) // 97)):
            data = bytearray(original)
            data[pos] ^= 0x01
            Path(path).write_bytes(bytes(data))
            assert "fail" == _results(Path(path))["integrity"], pos

    def test_tampered_byte_caught(self, tmp_path: Path) -> None:
        """Flipping one byte of the executable fails the integrity check."""
        path, _ = build_role(default_spec("coordinates"), "owner-0", host_binding(), tmp_path)
        data = bytearray(Path(path).read_bytes())
        data[len(data) // 2] ^= 0x01
        Path(path).write_bytes(bytes(data))
        assert "fail" == _results(Path(path))["integrity"]

    def test_tampered_member_caught_despite_new_digest(self, tmp_path: Path) -> None:
        """A member replaced and the .sha256 rewritten still fails the manifest check."""
        path, _ = build_role(default_spec("coordinates"), "owner-0", host_binding(), tmp_path)
        src = Path(path)
        with zipfile.ZipFile(src) as zf:
            members = {n: zf.read(n) for n in zf.namelist()}
        members["lanekit/learner.py"] += b"\n# tampered\n"
        forged = tmp_path / "forged.pyz"
        with open(forged, "wb") as fh:
            fh.write(b"#!/usr/bin/env python3\n")
            with zipfile.ZipFile(fh, "w") as zf:
                for name, data in members.items():
                    zf.writestr(name, data)
        forged.replace(src)
        Path(f"{path}.sha256").write_text(f"{sha256_file(src)}  owner-0.pyz\n")
        results = _results(src)
        assert ("pass", "fail") == (results["integrity"], results["manifest"])

    def test_wrong_role_caught(self, tmp_path: Path) -> None:
        """An executable checked as another role fails the manifest check."""
        path, _ = build_role(default_spec("coordinates"), "owner-1", host_binding(), tmp_path)
        assert "fail" == _results(Path(path))["manifest"]
