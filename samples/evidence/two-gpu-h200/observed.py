"""Print what the recorder observed on the GPUs in these streams, as the README's tables.

    python3 samples/evidence/two-gpu-h200/observed.py [STREAM...]

Reads each stream (default: every ``RUN/*.aos`` beside this file) with
``alpha observe read STREAM --kind device.observed --kind step.start --kind step.end --json``
and prints two Markdown tables: the observer (observer, NVML library path and
SHA-256, driver, CUDA driver, attribution, the GPUs by minor), one line per
distinct value across all streams; then, per stream and per run step, which
processes NVML listed on each GPU: the role executable and its command for a
process of the recorded tree, or the name and pid of one outside it.

A process is placed in the step its ``steps`` attr names (the recorder's own
attribution of a tree process), else in the run step whose ``step.start`` and
``step.end`` enclose the observation; a process seen in the ``start``
observation (before the command ran) gets its own ``before the command`` row.
tests/samples/test_evidence_two_gpu.py checks that the README holds this output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUNS = ("forward", "swapped", "control-visible-swap", "control-busy")
RUN_STEPS = ("uninterrupted-run", "split-run", "host-shadow-control", "fresh-evaluation")
BEFORE = "before the command"


def read(stream: Path) -> list[dict[str, Any]]:
    """The stream's device observations and step boundaries, as ``alpha observe read --json`` gives them."""
    kinds = ("device.observed", "step.start", "step.end")
    argv = [os.environ.get("ALPHA", "alpha"), "observe", "read", str(stream), "--json"]
    for kind in kinds:
        argv += ["--kind", kind]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def _who(proc: dict[str, Any]) -> str:
    argv = [str(a) for a in proc.get("argv") or []]
    if not proc.get("in_tree"):
        return f"pid {proc['pid']}, **not of the tree**"  # the recorder keeps no argv of other processes
    for i, arg in enumerate(argv):
        if arg.endswith(".pyz"):
            command = argv[i + 1] if i + 1 < len(argv) else ""
            return f"{Path(arg).stem} `{command}` pid {proc['pid']}"
    return f"{' '.join(argv[:2])} pid {proc['pid']}"


def processes(events: list[dict[str, Any]]) -> dict[str, dict[str, set[str]]]:
    """``{step: {gpu uuid: {who}}}`` over the run steps (and ``before the command``)."""
    open_steps: dict[str, str] = {}
    table: dict[str, dict[str, set[str]]] = {}
    for ev in events:
        attrs: dict[str, Any] = ev["attrs"]
        if ev["kind"] == "step.start":
            open_steps[str(ev["step"])] = str(attrs["name"])
            continue
        if ev["kind"] == "step.end":
            open_steps.pop(str(ev["step"]), None)
            continue
        for proc in attrs.get("processes") or []:
            named = [s for s in proc.get("steps") or [] if s in RUN_STEPS]
            current = [s for s in open_steps.values() if s in RUN_STEPS]
            where = [BEFORE] if attrs.get("phase") == "start" else named or current
            for step in where:
                table.setdefault(step, {}).setdefault(str(proc["gpu"]), set()).add(_who(proc))
    return table


def _observer_rows(streams: list[Path], everything: dict[Path, list[dict[str, Any]]]) -> list[str]:
    seen: dict[str, set[str]] = {}
    for stream in streams:
        for ev in everything[stream]:
            if ev["kind"] != "device.observed":
                continue
            a: dict[str, Any] = ev["attrs"]
            lib: dict[str, Any] = a.get("library") or {}
            seen.setdefault("observer", set()).add(f"`{a.get('observer')}`")
            seen.setdefault("NVML library", set()).add(f"`{lib.get('path')}`")
            seen.setdefault("its SHA-256", set()).add(f"`{lib.get('sha256')}`")
            seen.setdefault("driver", set()).add(str(a.get("driver")))
            seen.setdefault("CUDA driver API", set()).add(str(a.get("cuda_driver")))
            seen.setdefault("process attribution", set()).add(f"`{a.get('attribution')}`")
            for g in a.get("gpus") or []:
                seen.setdefault(f"GPU minor {g['minor']}", set()).add(
                    f"{g['name']}, `{g['uuid']}`, PCI {g['pci_bus_id']}, {int(g['memory']) >> 20} MiB"
                )
    rows = ["| observed | value (every observation in every stream) |", "|---|---|"]
    rows += [f"| {key} | {'; '.join(sorted(values))} |" for key, values in seen.items()]
    return rows


def main(args: list[str]) -> int:
    streams = [Path(a) for a in args] or [s for run in RUNS for s in sorted((HERE / run).glob("*.aos"))]
    everything = {stream: read(stream) for stream in streams}
    gpus: list[str] = []
    for ev in everything[streams[0]]:
        if ev["kind"] == "device.observed":
            gpus = [str(g["uuid"]) for g in sorted(ev["attrs"]["gpus"], key=lambda g: g["minor"])]
            break
    lines = _observer_rows(streams, everything)
    lines += ["", "| run | step | " + " | ".join(f"GPU {i} (`{u[4:12]}`)" for i, u in enumerate(gpus)) + " |"]
    lines.append("|---|---|" + "---|" * len(gpus))
    for stream in streams:
        table = processes(everything[stream])
        name = f"{stream.parent.name}/{stream.stem}"
        for step in (BEFORE, *RUN_STEPS):
            if step not in table:
                continue
            cells = ["<br>".join(sorted(table[step].get(u, set()))) or "(none)" for u in gpus]
            lines.append(f"| {name} | {step} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
