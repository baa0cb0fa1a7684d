"""Any bytes (issue 11): values that are not UTF-8 are recorded losslessly and read back exactly."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aos.event import Event
from aos.text import KEY_PREFIX, display, key_bytes, os_text, text_key, text_value, to_bytes, value_bytes
from aos.verify import verify_stream
from gates.evidence import Evidence
from tests.helpers.recorder import events, one
from tests.helpers.run import ALPHA, alpha

FF = os.fsdecode(b"\xff")  # how Python spells a byte that is not UTF-8 in argv and the environment


def decode_value(stored: Any) -> bytes:
    """FORMAT.md 3.7, as a reader in any language would write it: a string is its UTF-8, else base64."""
    if isinstance(stored, str):
        return stored.encode("utf-8")
    assert isinstance(stored, dict)
    assert ["bytes_b64"] == list(stored)
    return base64.b64decode(stored["bytes_b64"], validate=True)


def decode_key(stored: str) -> bytes:
    """FORMAT.md 3.7 for keys and the step column: U+0000 "bytes_b64:" then base64, else UTF-8."""
    if stored.startswith("\x00bytes_b64:"):
        return base64.b64decode(stored[len("\x00bytes_b64:") :], validate=True)
    return stored.encode("utf-8")


def recorded(tmp_path: Path, argv: list[bytes], *opts: bytes, env: dict[bytes, bytes] | None = None) -> Path:
    """``alpha observe record --out OUT OPTS -- ARGV`` with raw bytes; the stream must be sealed and verify."""
    out = tmp_path / "run.aos"
    full_env = os.environb.copy()
    full_env.update(env or {})
    cmd = [os.fsencode(ALPHA), b"observe", b"record", b"--quiet", b"--out", os.fsencode(out), *opts, b"--", *argv]
    proc = subprocess.run(cmd, env=full_env, capture_output=True, timeout=120, check=False)
    assert (0, b"") == (proc.returncode, proc.stderr), proc.stderr
    verify_stream(out)
    return out


def read_json(path: Path) -> list[dict[str, Any]]:
    """`alpha observe read --json` (the documented encoding is what it prints)."""
    proc = alpha("observe", "read", "--json", str(path))
    assert 0 == proc.returncode, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


class TestEncoding:
    """aos.text: one stored form for each byte string, and the bytes back from it."""

    @given(st.binary(max_size=64))
    def test_values_round_trip(self, raw: bytes) -> None:
        """Any bytes: stored as a string exactly when they are UTF-8, and decoded back exactly."""
        stored = text_value(raw)
        assert (raw, raw, isinstance(stored, str)) == (decode_value(stored), value_bytes(stored), _utf8(raw))

    @given(st.binary(max_size=64))
    def test_keys_round_trip(self, raw: bytes) -> None:
        """Any bytes as a key: a plain string only for UTF-8 not starting with NUL, decoded back exactly."""
        stored = text_key(raw)
        plain = _utf8(raw) and not raw.startswith(b"\x00")
        assert (raw, raw, plain) == (decode_key(stored), key_bytes(stored), not stored.startswith(KEY_PREFIX))

    def test_python_strings_are_os_bytes(self) -> None:
        """A str stands for the bytes os.fsencode gives; a lone surrogate no escape stands for is kept too."""
        assert (b"a\xff", b"\xed\xa0\x80") == (to_bytes("a" + FF), to_bytes("\ud800"))
        assert {"bytes_b64": "Yf8="} == text_value("a" + FF)

    def test_display_and_os_text(self) -> None:
        """For people, bytes that are not UTF-8 show as \\xNN; for comparing names, as surrogate escapes."""
        stored = text_value(b"build\xff")
        assert ("build\\xff", "build" + FF, "é") == (display(stored), os_text(stored), os_text("é"))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class TestRecording:
    """Each kind of value that is not UTF-8 gives a sealed stream that reads back the exact bytes."""

    def test_argv(self, tmp_path: Path) -> None:
        """A command argument: stream.open and process.start argv hold it; read --json and show recover it."""
        out = recorded(tmp_path, [b"printf", b"%s", b"a\xffb"])
        evs = events(out)
        assert [b"printf", b"%s", b"a\xffb"] == [decode_value(a) for a in one(evs, "stream.open").attrs["argv"]]
        assert [b"printf", b"%s", b"a\xffb"] == [decode_value(a) for a in one(evs, "process.start").attrs["argv"]]
        (opened,) = [e for e in read_json(out) if e["kind"] == "stream.open"]
        assert b"a\xffb" == decode_value(opened["attrs"]["argv"][2])
        assert b"a\xffb" == one(evs, "stdout").data
        show = alpha("observe", "show", str(out))
        assert b"command    printf %s 'a\\xffb'" in show.stdout

    def test_env_value_and_name(self, tmp_path: Path) -> None:
        """An environment value (OLDPWD, an ALPHA_ variable) and a variable name that are not UTF-8."""
        env = {b"OLDPWD": b"/tmp/\xfe", b"ALPHA_TEST_BYTES": b"v\xfe\xff", b"X\xffNAME": b"1"}
        out = recorded(tmp_path, [b"true"], env=env)
        recorded_env = one(events(out), "stream.open").attrs["env"]
        names = {decode_key(k): v for k, v in recorded_env.items()}
        assert {b"OLDPWD", b"ALPHA_TEST_BYTES", b"X\xffNAME"} <= set(names)
        assert b"v\xfe\xff" == decode_value(names[b"ALPHA_TEST_BYTES"])
        assert "v" + os.fsdecode(b"\xfe\xff") == Evidence(events(out)).env["ALPHA_TEST_BYTES"]

    def test_label(self, tmp_path: Path) -> None:
        """A label whose key and value are not UTF-8."""
        out = recorded(tmp_path, [b"true"], b"--label", b"k\xfe=v\xff")
        labels = one(events(out), "stream.open").attrs["labels"]
        assert {b"k\xfe": b"v\xff"} == {decode_key(k): decode_value(v) for k, v in labels.items()}
        assert b"labels     k\\xfe=v\\xff" in alpha("observe", "show", str(out)).stdout

    def test_out_path(self, tmp_path: Path) -> None:
        """An --out path that is not UTF-8: the stream is written there, sealed, and names itself in recorder_argv."""
        target = os.fsencode(tmp_path) + b"/run\xff.aos"
        cmd = [os.fsencode(ALPHA), b"observe", b"record", b"--quiet", b"--out", target, b"--", b"true"]
        proc = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
        assert (0, b"") == (proc.returncode, proc.stderr)
        path = Path(os.fsdecode(target))
        verify_stream(path)
        assert target in [decode_value(a) for a in one(events(path), "stream.open").attrs["recorder_argv"]]

    def test_cwd(self, tmp_path: Path) -> None:
        """A working directory that is not UTF-8."""
        where = Path(os.fsdecode(os.fsencode(tmp_path) + b"/dir\xff"))
        where.mkdir()
        out = tmp_path / "cwd.aos"
        cmd = [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--", "true"]
        proc = subprocess.run(cmd, cwd=where, capture_output=True, timeout=120, check=False)
        assert (0, b"") == (proc.returncode, proc.stderr)
        assert os.fsencode(where) == decode_value(one(events(out), "stream.open").attrs["cwd"])

    def test_step_name_mid_run(self, tmp_path: Path) -> None:
        """Steps named (and run with arguments) that are not UTF-8, one nested in the other."""
        inner = b"alpha observe step $'inner\\xfe' -- printf '%s' $'x\\xfd'"
        out = recorded(tmp_path, [b"bash", b"-c", b"alpha observe step $'outer\\xff' -- bash -c \"" + inner + b'"'])
        evs = events(out)
        starts = [e for e in evs if e.kind == "step.start"]
        assert [b"outer\xff", b"inner\xfe"] == [decode_value(e.attrs["name"]) for e in starts]
        assert [b"printf", b"%s", b"x\xfd"] == [decode_value(a) for a in starts[1].attrs["argv"]]
        assert starts[0].step == starts[1].attrs["parent"]
        ends = {e.step: decode_value(e.attrs["name"]) for e in evs if e.kind == "step.end"}
        assert {starts[0].step: b"outer\xff", starts[1].step: b"inner\xfe"} == ends
        ev = Evidence(evs)
        assert ([0], [0], []) == (
            [s.exit_code for s in ev.steps_named(os.fsdecode(b"inner\xfe"))],
            [s.exit_code for s in ev.steps_named(os.fsdecode(b"outer\xff"))],
            ev.steps_named("inner\ufffd"),
        )
        assert b"x\xfd" == b"".join(e.data or b"" for e in evs if e.kind == "stdout" and e.step == starts[1].step)

    def test_artifact_path(self, tmp_path: Path) -> None:
        """Artifact paths (and a symlink target) that are not UTF-8, captured at the end and mid-run."""
        work = tmp_path / "w"
        (work / "art").mkdir(parents=True)
        name = os.fsdecode(b"f\xff.txt")
        (work / "art" / name).write_bytes(b"bytes\x00\xff")
        os.symlink(os.fsdecode(b"target\xfe"), work / "art" / "link")
        (work / "mid").mkdir()
        (work / "mid" / os.fsdecode(b"m\xfd")).write_bytes(b"mid")
        out = tmp_path / "a.aos"
        cmd = [ALPHA, "observe", "record", "--quiet", "--out", str(out), "--artifact", "art/*", "--"]
        cmd += ["alpha", "observe", "artifact", "mid/" + os.fsdecode(b"m\xfd")]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, timeout=120, check=False)
        assert (0, b"") == (proc.returncode, proc.stderr)
        verify_stream(out)
        arts = {decode_value(e.attrs["path"]): e.attrs for e in events(out) if e.kind == "artifact"}
        assert {b"art/f\xff.txt", b"art/link", b"mid/m\xfd"} == set(arts)
        assert b"target\xfe" == decode_value(arts[b"art/link"]["target"])
        got = alpha("observe", "read", str(out), "--artifact", os.fsdecode(b"art/f\xff.txt"))
        assert (0, b"bytes\x00\xff") == (got.returncode, got.stdout)
        found = Evidence(events(out)).artifact(os.fsdecode(b"mid/m\xfd"))
        assert found is not None
        assert b"mid" == found.content

    def test_receipts(self, tmp_path: Path) -> None:
        """A receipt named with bytes that are not UTF-8; a JSON line escaping a lone surrogate is receipt.invalid."""
        line = b'{"name": "x\\udcff", "status": "pass"}'
        script = b"alpha observe receipt $'r\\xff' --status pass; echo '" + line + b'\' >> "$AOS_RECEIPTS"'
        evs = events(recorded(tmp_path, [b"bash", b"-c", script]))
        assert b"r\xff" == decode_value(one(evs, "receipt").attrs["name"])
        assert line == one(evs, "receipt.invalid").data
        assert ["pass"] == [r.status for r in Evidence(evs).receipts_named(os.fsdecode(b"r\xff"))]


HOSTILE_CLIENT = r"""
import json, os, socket, struct
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AOS_CONTROL"])
def send(obj):
    payload = json.dumps(obj).encode()
    s.sendall(struct.pack(">cI", b"J", len(payload)) + payload)
    return s.recv(65536)
send({"op": "step.start", "span": "\udcff\ud800", "name": "n\ud800", "argv": ["a\udcfe", 7], "parent": "\x00p"})
send({"op": "step.end", "exit_code": 0, "signal": None, "duration_ns": 1})
"""


class TestHostileClient:
    """A client that sends lone-surrogate escapes over the control socket cannot stop the recording."""

    def test_recording_completes(self, tmp_path: Path) -> None:
        """The stream is sealed and verifies; names are stored as bytes, the span is the recorder's own."""
        out = recorded(tmp_path, [os.fsencode(sys.executable), b"-c", HOSTILE_CLIENT.encode()])
        start: Event = one(events(out), "step.start")
        assert (b"n\xed\xa0\x80", [b"a\xfe", b"7"]) == (
            decode_value(start.attrs["name"]),
            [decode_value(a) for a in start.attrs["argv"]],
        )
        assert start.step is not None
        # The span is the recorder's own id and a parent it never opened is not taken (a client names neither).
        assert (16, None) == (len(bytes.fromhex(start.step)) * 2, start.attrs["parent"])


@pytest.mark.parametrize("value", [b"\xff", b"ok", b"\x00nul", b""])
def test_key_of_each_kind(value: bytes) -> None:
    """Keys that are valid UTF-8 and do not start with NUL stay plain; the rest use the escape."""
    assert (value, value == b"ok" or value == b"") == (key_bytes(text_key(value)), text_key(value) in ("ok", ""))


class TestGate:
    """A gate over names and paths that are not UTF-8 still seals its verdict."""

    def test_verdict_quoting_a_path(self, tmp_path: Path) -> None:
        """A check whose reason quotes an artifact path that is not UTF-8: the verdict is sealed, the path as \\xNN."""
        work = tmp_path / "w"
        (work / "art").mkdir(parents=True)
        (work / "art" / os.fsdecode(b"f\xff.txt")).write_bytes(b"not json")
        gate = tmp_path / "g.toml"
        gate.write_text('[gate]\nname = "arts"\n[[artifact]]\nglob = "art/*"\nschema = {type = "object"}\n')
        out = tmp_path / "g.aos"
        cmd = [ALPHA, "observe", "gate", "arts", "--gate-file", str(gate), "--quiet", "--out", str(out)]
        proc = subprocess.run([*cmd, "--artifact", "art/*", "--", "true"], cwd=work, capture_output=True, timeout=120)
        assert 1 == proc.returncode, proc.stderr
        (check,) = one(events(out), "verdict").attrs["checks"]
        assert ("fail", True) == (check["status"], "art/f\\xff.txt is not JSON" in check["reason"])
