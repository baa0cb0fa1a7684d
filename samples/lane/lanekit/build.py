"""Build each role into one self-contained executable, and check it.

An executable is a zip application (the layout of the stdlib ``zipapp``
module: a ``#!/usr/bin/env python3`` line, then a zip whose ``__main__.py``
starts the role), runnable as ``python3 ROLE.pyz COMMAND``. It holds the
runtime modules of ``lanekit`` and ``manifest.json``: lane, role, device
binding (minor, UUID, product), the learner, the SHA-256 of every other member
and the oracle's expected self-test digests. Entries are written in sorted
order with a fixed timestamp and mode, so a build is byte-for-byte
reproducible. Beside it, ``ROLE.pyz.sha256`` holds its digest (sha256sum form).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

from .spec import COORDINATOR_HOST, LearnerSpec, canonical_json

__all__ = ["RUNTIME_MODULES", "build_role", "check_executable", "expected_selftest", "read_manifest", "sha256_file"]

RUNTIME_MODULES = ("__init__", "checkpoint", "device", "learner", "numeric", "refusals", "role", "spec", "wire")
EXECUTABLE_FORMAT = "alpha-lane-executable/1"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = b'''"""Role executable built by samples/lane (lanekit.build); see manifest.json."""
import json
import os
import sys
import zipfile

_archive = os.path.dirname(os.path.abspath(__file__))
# Held open while the role runs: a recorder identifies this process by the file it holds (python
# itself closes its script once it has read it).
_held = open(_archive, "rb")
with zipfile.ZipFile(_held) as _zip:
    _manifest = json.loads(_zip.read("manifest.json"))
from lanekit.role import main

sys.exit(main(_manifest, sys.argv[1:]))
'''
PACKAGE_DIR = Path(__file__).resolve().parent


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Lowercase hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def expected_selftest(spec: LearnerSpec) -> dict[str, str]:
    """The self-test digests the oracle predicts (computed without lanekit's learner)."""
    sys.path.insert(0, str(PACKAGE_DIR.parent))
    try:
        import oracle
    finally:
        sys.path.pop(0)
    owners = len(spec.owners)
    rows = oracle.hex_rows(spec.lane, 5, owners)
    chunks = oracle.trajectory(spec.lane, 5, owners)[-1]
    from . import checkpoint  # encoding only, no arithmetic
    from .role import trajectory_bytes

    return {
        "checkpoint_sha256": hashlib.sha256(checkpoint.encode(spec.lane, spec.learner_id, 5, chunks)).hexdigest(),
        "trajectory_sha256": hashlib.sha256(trajectory_bytes(spec, rows)).hexdigest(),
    }


def _members() -> dict[str, bytes]:
    members = {"__main__.py": MAIN}
    for name in RUNTIME_MODULES:
        members[f"lanekit/{name}.py"] = (PACKAGE_DIR / f"{name}.py").read_bytes()
    return members


def build_role(
    spec: LearnerSpec, role: str, binding: dict[str, Any], out_dir: str | os.PathLike[str]
) -> tuple[str, str]:
    """Write ``OUT_DIR/ROLE.pyz`` and its ``.sha256``; return (path, sha256)."""
    if role not in spec.owners:
        raise ValueError(f"unknown role {role!r}")
    members = _members()
    manifest = {
        "format": EXECUTABLE_FORMAT,
        "lane": spec.lane,
        "role": role,
        "hosts": ["coordinator", role] if role == COORDINATOR_HOST else [role],
        "binding": binding,
        "learner": spec.to_json(),
        "members": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(members.items())},
        "selftest": expected_selftest(spec),
    }
    members["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as zf:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            zf.writestr(info, members[name], compresslevel=9)
    data = buffer.getvalue()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{role}.pyz")
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o755)
    digest = hashlib.sha256(data).hexdigest()
    with open(f"{path}.sha256", "w", encoding="utf-8") as fh:
        fh.write(f"{digest}  {role}.pyz\n")
    return path, digest


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The embedded manifest of an executable."""
    with zipfile.ZipFile(path) as zf:
        manifest: dict[str, Any] = json.loads(zf.read("manifest.json"))
    return manifest


def check_executable(
    path: str, *, role: str | None = None, lane: str | None = None, python: str = sys.executable
) -> list[dict[str, Any]]:
    """Check one executable; one result per check: ``{check, result, detail}``."""
    results: list[dict[str, Any]] = []

    def record(check: str, ok: bool, detail: str) -> bool:
        results.append({"check": check, "result": "pass" if ok else "fail", "detail": detail})
        return ok

    actual = sha256_file(path)
    try:
        with open(f"{path}.sha256", encoding="utf-8") as fh:
            recorded = fh.read().split()[0]
    except (OSError, IndexError):
        recorded = ""
    record(
        "integrity",
        actual == recorded,
        f"sha256 {actual} {'equals' if actual == recorded else 'differs from'} the recorded {recorded or '(none)'}",
    )

    manifest: dict[str, Any] | None = None
    problems: list[str] = []
    try:
        with zipfile.ZipFile(path) as zf:
            if zf.testzip() is not None:
                problems.append("a member fails its CRC")
            manifest = json.loads(zf.read("manifest.json"))
            names = set(zf.namelist()) - {"manifest.json"}
            declared = manifest.get("members", {})
            if names != set(declared):
                problems.append(f"members {sorted(names ^ set(declared))} not as declared")
            for name in sorted(names & set(declared)):
                if hashlib.sha256(zf.read(name)).hexdigest() != declared[name]:
                    problems.append(f"{name} does not match its declared sha256")
    except (OSError, zipfile.BadZipFile, zlib.error, EOFError, KeyError, ValueError, NotImplementedError) as exc:
        # A damaged member can fail inside the decompressor rather than at its CRC.
        problems.append(f"unreadable: {exc}")
    if manifest is not None:
        if manifest.get("format") != EXECUTABLE_FORMAT:
            problems.append("unknown manifest format")
        if role is not None and manifest.get("role") != role:
            problems.append(f"built for role {manifest.get('role')!r}, not {role!r}")
        if lane is not None and manifest.get("lane") != lane:
            problems.append(f"built for lane {manifest.get('lane')!r}, not {lane!r}")
        binding = manifest.get("binding", {})
        if not all(k in binding for k in ("kind", "minor", "uuid", "product")):
            problems.append("binding lacks minor, uuid or product")
    binding_text = json.dumps(manifest.get("binding")) if manifest else "?"
    if not record("manifest", not problems, "; ".join(problems) or f"members and binding intact: {binding_text}"):
        return results

    assert manifest is not None
    spec = LearnerSpec.from_json(manifest["learner"])
    expected = expected_selftest(spec)
    try:
        done = subprocess.run([python, path, "selftest"], capture_output=True, text=True, timeout=60, check=False)
        got = json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        done, got = None, {"error": str(exc)}
    same = {k: got.get(k) for k in expected} == expected and manifest.get("selftest") == expected
    detail = (
        f"in-process run of 5 updates matches the oracle: {canonical_json(expected).decode()}"
        if same
        else f"self-test {got} (exit {done.returncode if done else '?'}) differs from the oracle {expected}"
    )
    record("self-test", same, detail)
    return results
