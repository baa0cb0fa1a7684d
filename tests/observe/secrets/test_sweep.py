"""The sweep: secrets placed everywhere a recording reaches, then every byte of the stream searched.

One command, recorded by ``record`` and by ``gate``, meets its secrets in every
way the issue lists: env with secret-looking and innocent names, a DATABASE_URL,
``--mask``, ``--mask-env``, ``--mask-file``, ``::add-mask::`` on stdout and
stderr, stdout/stderr split across writes, receipts with quotes, backslashes and
``\\uXXXX`` escapes (valid and invalid), step names and argv, labels, artifact
paths, symlink targets and contents (mid-run and at the end, one straddling the
1 MiB read chunk). Then the stream is decoded with plain pyarrow: every column of
every batch, attrs raw and parsed, the file's own bytes and the batches written
out again uncompressed, are searched for each secret and its JSON-escaped forms.
The recorder's own stdout and stderr (the live echo) are searched too.
"""

from __future__ import annotations

import base64
import io
import json
import secrets as random_tokens
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observe.recorder.artifacts import CHUNK
from tests.helpers.run import ALPHA, alpha


def _token(prefix: str) -> str:
    return f"{prefix}-{random_tokens.token_hex(6)}"


def _forms(secret: str) -> set[bytes]:
    """The secret as bytes, and as JSON writes it inside a string (ASCII-escaped or not, \\/ or /)."""
    forms = {secret.encode()}
    for ensure_ascii in (True, False):
        esc = json.dumps(secret, ensure_ascii=ensure_ascii)[1:-1]
        forms |= {esc.encode(), esc.replace("/", "\\/").encode()}
    return forms


def _strings(value: Any) -> Iterator[str]:
    """Every string and key in a parsed JSON value."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            yield from (str(k) for k in v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def _haystacks(path: Path) -> tuple[list[bytes], list[str], int]:
    """Everything the stream holds, as searchable bytes and texts, and the number of events."""
    import pyarrow as pa

    raw = path.read_bytes()
    hay: list[bytes] = [raw]
    texts: list[str] = []
    reader = pa.ipc.open_stream(pa.BufferReader(raw))
    schema = reader.schema
    hay.append(str(schema).encode() + b"".join(k + v for k, v in (schema.metadata or {}).items()))
    plain = io.BytesIO()
    events = 0
    with pa.ipc.new_stream(plain, schema) as rewrite:  # the batches again, uncompressed
        for batch in reader:
            rewrite.write_batch(batch)
            events += batch.num_rows
            for name in batch.schema.names:
                parts = []
                for value in batch.column(name).to_pylist():
                    if value is None:
                        continue
                    parts.append(value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape"))
                    if name == "attrs":
                        texts.extend(_strings(json.loads(value)))
                hay.append(b"\0".join(parts))
    hay.append(plain.getvalue())
    return hay, texts, events


@pytest.fixture
def lane(tmp_path: Path) -> dict[str, Any]:
    """The command, its files and its secrets (every run gets fresh random ones)."""
    s = {
        "env_token": _token("envtok"),  # API_TOKEN: a secret-looking name
        "innocent_hidden": _token("innocent"),  # INNOCENT_HIDDEN: never printed, only not recorded
        "innocent_masked": _token("masked-env"),  # INNOCENT_MASKED: --mask-env, printed
        "db_pass": _token("dbpass"),
        "webhook": _token("hook"),
        "pypi": _token("pypi"),
        "mask": _token("mask") + '"q\\b',  # --mask, with a quote and a backslash
        "file_a": _token("filea"),  # --mask-file; also an artifact's file name
        "file_b": _token("fileb") + '\\"é/',  # --mask-file, with \, ", non-ASCII and /
        "added_out": _token("addout"),  # ::add-mask:: on stdout
        "added_err": _token("adderr"),  # ::add-mask:: on stderr
    }
    s["db_pair"] = f"ci:{s['db_pass']}"
    (tmp_path / "masks.txt").write_text(f"{s['file_a']}\n{s['file_b']}\r\n", encoding="utf-8")
    (tmp_path / "secrets.json").write_text(json.dumps(s), encoding="utf-8")
    (tmp_path / "lane.py").write_text(LANE, encoding="utf-8")
    env = {
        "API_TOKEN": s["env_token"],
        "INNOCENT_HIDDEN": s["innocent_hidden"],
        "INNOCENT_MASKED": s["innocent_masked"],
        "DATABASE_URL": f"postgres://{s['db_pair']}@db.internal/app",
        "SLACK_WEBHOOK": f"https://hooks.slack.example/services/T0/B0/{s['webhook']}",
        "PYPI_PW": s["pypi"],
        "ALPHA_BIN": ALPHA,
    }
    argv = [sys.executable, "lane.py", "secrets.json", s["mask"]]
    opts = [
        "--mask",
        s["mask"],
        "--mask-env",
        "INNOCENT_MASKED",
        "--mask-file",
        "masks.txt",
        "--env",
        "INNOCENT_MASKED",
        "--env",
        "DATABASE_URL",
        "--label",
        f"who={s['mask']}",
        "--label",
        f"{s['file_b']}=key",
        "--artifact",
        "late",
        "--artifact",
        "out",
    ]
    return {"secrets": s, "env": env, "argv": argv, "opts": opts, "cwd": tmp_path}


#: The recorded command. It reads its secrets from a file, so none is in the recorder's
#: argv except where the test puts one on purpose (the --mask value, also an argument).
LANE = r"""
import json, os, subprocess, sys, time
s = json.load(open(sys.argv[1], encoding="utf-8"))
alpha = os.environ["ALPHA_BIN"]
out, err = sys.stdout.buffer, sys.stderr.buffer

def w(stream, data):
    stream.write(data)
    stream.flush()

def split(stream, text):
    data = text.encode() if isinstance(text, str) else text
    w(stream, data[: len(data) // 2])
    time.sleep(0.05)
    w(stream, data[len(data) // 2 :] + b"\n")

def u_escaped(text):
    return "".join("\\u%04x" % ord(c) for c in text)

# env values, split across writes, on both streams
for name in ("API_TOKEN", "INNOCENT_MASKED", "PYPI_PW", "SLACK_WEBHOOK", "DATABASE_URL"):
    split(out, "%s=%s" % (name, os.environ[name]))
    split(err, os.environ[name])
split(out, "password alone: " + s["db_pass"])
split(out, "pair alone: " + s["db_pair"])
# --mask / --mask-file values, as written and JSON-escaped
for key in ("mask", "file_a", "file_b"):
    split(out, s[key])
    split(err, json.dumps({"v": s[key]}))
    split(out, json.dumps({"v": s[key]}, ensure_ascii=False))
split(out, "argv: " + sys.argv[2])
# ::add-mask:: on stdout: honoured for what follows, on stdout and stderr
w(out, ("::add-mask::" + s["added_out"] + "\n").encode())
split(out, s["added_out"])
split(err, "err " + s["added_out"])
split(out, json.dumps([s["added_out"]]))
# ::add-mask:: on stderr; a step's start drains both pipes, so it is honoured before the step
w(err, ("  ::add-mask::" + s["added_err"] + "\r\n").encode())
code = "import sys; print(sys.argv[1]); print(sys.argv[2], file=sys.stderr)"
subprocess.run(
    [alpha, "observe", "step", "step " + s["mask"] + " " + s["added_err"], "--",
     sys.executable, "-c", code, s["file_a"], s["added_err"]],
    check=True,
)
split(out, "after the step: " + s["added_err"])
# receipts: raw lines with escapes (valid and invalid), and the receipt command
with open(os.environ["AOS_RECEIPTS"], "ab") as f:
    f.write(json.dumps({"name": "escaped", "fields": {"a": s["file_b"], "b": [s["mask"]]}}).encode() + b"\n")
    f.write(('{"name": "u", "fields": {"x": "' + u_escaped(s["mask"]) + '"}}\n').encode())
    f.write(('{"name": "broken", "fields": {"x": "' + u_escaped(s["file_b"]) + '"\n').encode())
    f.write(b"not json " + s["file_a"].encode() + b" " + json.dumps(s["mask"]).encode() + b"\n")
subprocess.run(
    [alpha, "observe", "receipt", "cli-" + s["added_out"], "--field", "k=" + s["env_token"],
     "--json", json.dumps({"j": s["db_pass"], s["file_a"]: 1})],
    check=True,
)
# artifacts captured mid-run: secret file name, secret contents, symlink target, straddling chunk
os.makedirs("mid", exist_ok=True)
open("mid/clean.txt", "w").write("nothing to hide\n")
open("mid/" + s["file_a"] + ".txt", "w").write("named after a secret\n")
open("mid/holds.txt", "wb").write(b"prefix " + s["added_out"].encode() + b" suffix\n")
big = bytearray(b"x" * (CHUNK + 4096))
needle = s["innocent_masked"].encode()
big[CHUNK - 7 : CHUNK - 7 + len(needle)] = needle
open("mid/big.bin", "wb").write(bytes(big))
os.symlink("/nowhere/" + s["file_b"], "mid/link")
subprocess.run([alpha, "observe", "artifact", "mid"], check=True)
# artifacts captured at the end (--artifact late --artifact out)
os.makedirs("late", exist_ok=True)
os.makedirs("out", exist_ok=True)
open("late/db.conf", "w").write("url = " + os.environ["DATABASE_URL"] + "\n")
open("late/escaped.json", "w").write(json.dumps({"k": s["file_b"]}))
open("late/clean.txt", "w").write("also clean\n")
os.symlink(s["added_err"], "out/" + s["mask"].replace("/", "_"))
""".replace("CHUNK", str(CHUNK))


def _check(proc: Any, out: Path, secrets: dict[str, str]) -> list[dict[str, Any]]:
    """Zero hits for every secret in every byte of the stream and the echo; the evidence is really there."""
    hay, texts, count = _haystacks(out)
    assert count > 40
    echo = proc.stdout + proc.stderr
    for key, secret in secrets.items():
        for form in _forms(secret):
            hits = [i for i, h in enumerate(hay) if form in h]
            assert not hits, (key, form, hits)
            assert form not in echo, (key, form)
        assert not [t for t in texts if secret in t], key
    read = alpha("observe", "read", str(out), "--json")
    assert 0 == read.returncode, read.stderr
    evs: list[dict[str, Any]] = [json.loads(line) for line in read.stdout.splitlines()]
    return evs


def _assert_evidence(evs: list[dict[str, Any]]) -> None:
    """What the sweep searched really holds the masked places (the test cannot pass vacuously)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in evs:
        by_kind.setdefault(e["kind"], []).append(e)
    open_ = by_kind["stream.open"][0]["attrs"]
    assert "[NOT RECORDED]" == open_["env"]["API_TOKEN"] == open_["env"]["INNOCENT_HIDDEN"]
    assert "[MASKED]" == open_["env"]["INNOCENT_MASKED"]
    assert "postgres://[MASKED]@db.internal/app" == open_["env"]["DATABASE_URL"]
    assert {"who": "[MASKED]", "[MASKED]": "key"} == open_["labels"]
    assert "[MASKED]" == open_["argv"][-1]
    receipts = {e["attrs"]["name"]: e["attrs"]["fields"] for e in by_kind["receipt"]}
    assert {"a": "[MASKED]", "b": ["[MASKED]"]} == receipts["escaped"]
    assert {"x": "[MASKED]"} == receipts["u"]
    assert {"k": "[MASKED]", "j": "[MASKED]", "[MASKED]": 1} == receipts["cli-[MASKED]"]
    assert 2 == len(by_kind["receipt.invalid"])
    assert "step [MASKED] [MASKED]" == by_kind["step.start"][0]["attrs"]["name"]
    files = {e["attrs"]["path"]: e["attrs"] for e in by_kind["artifact"]}
    for name in ("mid/holds.txt", "mid/big.bin", "late/db.conf", "late/escaped.json"):
        assert ("omitted", True) == (files[name]["content"], files[name]["masked"]), name
        assert 64 == len(files[name]["sha256"])
    for name in ("mid/clean.txt", "mid/[MASKED].txt", "late/clean.txt"):
        assert "inline" == files[name]["content"], name
    assert "/nowhere/[MASKED]" == files["mid/link"]["target"]
    assert "[MASKED]" == files["out/[MASKED]"]["target"]
    chunked = {e["attrs"]["path"] for e in by_kind["artifact.chunk"]}
    assert {"mid/clean.txt", "mid/[MASKED].txt", "late/clean.txt"} == chunked
    stdout = b"".join(base64.b64decode(e["data_b64"]) for e in by_kind["stdout"])
    assert b"password alone: [MASKED]\n" in stdout
    assert b"DATABASE_URL=postgres://[MASKED]@db.internal/app\n" in stdout
    assert b"::add-mask::[MASKED]\n" in stdout
    assert stdout.count(b"[MASKED]") >= 19  # every split(out, ...) of a secret above


class TestSweep:
    def test_record(self, lane: dict[str, Any]) -> None:
        """`record`: no secret, in any form, in any byte of the stream or of the live echo."""
        out = lane["cwd"] / "record.aos"
        proc = alpha(
            "observe",
            "record",
            "--out",
            str(out),
            *lane["opts"],
            "--",
            *lane["argv"],
            env=lane["env"],
            cwd=lane["cwd"],
            timeout=180,
        )
        assert 0 == proc.returncode, proc.stderr
        _assert_evidence(_check(proc, out, lane["secrets"]))

    def test_gate(self, lane: dict[str, Any]) -> None:
        """`gate`: the same, with the sealed verdict in the stream, and the verdict still pass."""
        out = lane["cwd"] / "gate.aos"
        proc = alpha(
            "observe",
            "gate",
            "exit-zero",
            "--out",
            str(out),
            *lane["opts"],
            "--",
            *lane["argv"],
            env=lane["env"],
            cwd=lane["cwd"],
            timeout=180,
        )
        assert 0 == proc.returncode, proc.stderr
        evs = _check(proc, out, lane["secrets"])
        _assert_evidence(evs)
        assert "pass" == next(e for e in evs if e["kind"] == "verdict")["attrs"]["verdict"]
