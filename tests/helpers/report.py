"""Streams for the report's tests: recorded for real by the CLI (a gate file judges them), once per module.

``recorded_streams(dir)`` records a passing, a failing and an inconclusive run of the gate ``report-test``,
a forgery (a command that prints and names everything as HTML and script), and a recorder killed with
SIGKILL mid-run; it returns their paths by name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tests.helpers.recorder import kill_recorder_midway
from tests.helpers.run import alpha

GATE = """\
[gate]
name = "report-test"
description = "a build step, a test step, and the tests' receipt"

[exit]

[[step]]
name = "build"

[[step]]
name = "test"

[[receipt]]
name = "tests"
"""

#: What the forgery's command prints, names and claims: each would run script if it reached the page raw.
SCRIPT = "<script>document.title='pwned';console.error('pwned')</script>"
IMG = '"><img src=x onerror="document.title=\'pwned\'">'
OSC_LINK = "\x1b]8;;javascript:document.title='pwned'\x1b\\click me\x1b]8;;\x1b\\"


def _env() -> dict[str, str]:
    """This interpreter's bin folder first on PATH, so the commands' ``alpha`` is the one under test."""
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _gate(out: Path, gate_file: Path, script: str, *opts: str) -> Path:
    proc = alpha(
        "observe", "gate", "report-test", "--gate-file", str(gate_file), "--quiet", "--out", str(out), *opts,
        "--", "sh", "-c", script, env=_env(), timeout=120, cwd=str(out.parent),
    )  # fmt: skip
    assert out.exists(), proc.stderr.decode(errors="replace")
    return out


def recorded_streams(d: Path) -> dict[str, Path]:
    """Record the streams the report's tests read (see the module's docstring)."""
    d.mkdir(parents=True, exist_ok=True)
    gate_file = d / "report-test.toml"
    gate_file.write_text(GATE)
    colour = r"printf '\033[32mok\033[0m \033[1;31mred\033[0m\n'"
    receipt = "alpha observe receipt tests --status pass --field passed=3"
    streams = {
        "pass": _gate(
            d / "pass.aos",
            gate_file,
            f'alpha observe step build -- sh -c "{colour}; echo built >&2" && '
            f"alpha observe step test -- sh -c 'echo testing; {receipt}' && echo done",
        ),
        "fail": _gate(
            d / "fail.aos",
            gate_file,
            "alpha observe step build -- echo built; "
            "alpha observe step test -- sh -c 'echo 2 tests failed >&2; exit 1'; exit 1",
        ),
        "inconclusive": _gate(
            d / "inconclusive.aos",
            gate_file,
            "alpha observe step build -- true && alpha observe step test -- true",
        ),
    }
    art = d / IMG
    forgery = (
        "printf '%s\\n' \"$FORGE_SCRIPT\"; printf '%s\\n' \"$FORGE_LINK\"; "
        'printf x > "$FORGE_IMG"; '
        'alpha observe step "$FORGE_SCRIPT" -- sh -c \'printf "%s" "$FORGE_IMG" >&2\'; '
        'alpha observe receipt "$FORGE_SCRIPT" --status pass --field "x=$FORGE_IMG"; '
        'alpha observe artifact "$FORGE_IMG"'
    )
    env = _env() | {"FORGE_SCRIPT": SCRIPT, "FORGE_IMG": str(art), "FORGE_LINK": OSC_LINK}
    out = d / "forgery.aos"
    alpha(
        "observe", "gate", "report-test", "--gate-file", str(gate_file), "--quiet", "--out", str(out),
        "--label", f"who={SCRIPT}", "--", "sh", "-c", forgery, env=env, timeout=120, cwd=str(d),
    )  # fmt: skip
    assert out.exists()
    streams["forgery"] = out
    streams["unsealed"] = killed(d / "unsealed.aos")
    return streams


def killed(out: Path) -> Path:
    """A recorder killed with SIGKILL while its command runs a step and prints: an unsealed stream."""
    script = "alpha observe step work -- sh -c 'i=0; while :; do i=$((i+1)); echo line-$i; sleep 0.002; done'"
    kill_recorder_midway(out, script, lines=100, env=_env())
    return out


def synthetic_stream(out: Path, size: int, *, steps: int = 4, gpus: int = 2) -> Path:
    """A sealed stream of about ``size`` bytes (on disk) built with the writer: steps printing, telemetry."""
    import base64
    import random

    from aos.writer import StreamWriter

    rng = random.Random(7)
    uuids = [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(gpus)]
    t = 1_000_000_000
    with StreamWriter(out, background_flush=False, checkpoint_interval=float("inf"), batch_max_bytes=256 << 10) as w:

        def add(kind: str, attrs: dict[str, Any], data: bytes | None = None, step: str | None = None) -> None:
            nonlocal t
            t += 10_000_000
            w.append(kind, attrs, data, step, wall_ns=1_800_000_000_000_000_000 + t, mono_ns=t)

        add("stream.open", {"argv": ["train"], "cwd": "/", "host": "h", "gate": None, "labels": {}})
        add("process.start", {"pid": 1, "argv": ["train"]})
        cpu, n = 0, 0
        for s in range(steps):
            span = f"{s:016x}"
            start = {"name": f"epoch-{s}", "argv": ["train", str(s)], "parent": None}
            add("step.start", start, step=span)
            while w.bytes_written < size * (s + 1) // steps:
                n += 1
                noise = base64.b64encode(rng.randbytes(48 * 1024))
                add("stdout", {}, b"\x1b[32mline %d\x1b[0m " % n + noise + b"\n", step=span)
                add("stderr", {}, b"warning: batch %d\n" % n, step=span)
                cpu += rng.randrange(10_000_000)
                tree = {"processes": 3, "cpu_ns": cpu, "rss": rng.randrange(1 << 30)}
                readings = [
                    {"uuid": u, "utilization": rng.randrange(101), "memory_used": rng.randrange(1 << 34)} for u in uuids
                ]
                add("telemetry", {"tree": tree, "gpus": readings})
            add("step.end", {**start, "exit_code": 0, "signal": None, "duration_ns": 1}, step=span)
        add("process.exit", {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": t, "rusage": {}})
        w.seal()
    return out
