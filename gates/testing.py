"""Helpers to test gates without running anything: synthetic streams.

``SyntheticStream`` is an editable list of events (kind, attrs, data, step)
with helpers to build and to break them; ``events()`` gives ``aos.Event``
objects in memory and ``write(path)`` a real sealed (or unsealed) stream.
``device_lane(gate)`` builds a complete, right device lane, with what a
recorder observing through NVML would add (``device.observed`` at the start,
during the uninterrupted run and at the end; its own capture of the lane
config), so a test can break exactly one thing in it and see which check
notices::

    lane = device_lane("distributed-device")
    lane.receipt("split-run")["attrs"]["fields"]["epoch_after"] = 3
    verdict = lane.evaluate()
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aos import kinds
from aos.canonical import canonical_json
from aos.event import Event
from gates.oracle_results import ORACLE_CHECKPOINT, ORACLE_TRAJECTORY

if TYPE_CHECKING:
    from aos.signing import Signer
    from aos.writer import SealInfo
    from gates.verdict import Verdict

__all__ = [
    "DEVICE_CONFIG_VARS",
    "NAMESPACE",
    "NVML_LIBRARY",
    "SyntheticStream",
    "device_lane",
    "observed_gpu",
    "sha256",
]

#: The lane config variable of each device gate.
DEVICE_CONFIG_VARS = {
    "distributed-device": "ALPHA_PARTITIONED_DEVICE_CONFIG",
    "coordinate-device": "ALPHA_COORDINATE_DEVICE_CONFIG",
    "independent-device": "ALPHA_INDEPENDENT_DEVICE_CONFIG",
}


#: The NVML library a synthetic observation names.
NVML_LIBRARY = {"path": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "sha256": "a" * 64}

_MIB = 1 << 20


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def observed_gpu(
    index: int, uuid: str, name: str = "NVIDIA GeForce RTX 3090", *, memory_used: int = _MIB, utilization: int = 0
) -> dict[str, Any]:
    """One GPU as a ``device.observed`` event lists it (24 GiB; idle unless told)."""
    return {
        "index": index,
        "minor": index,
        "uuid": uuid,
        "name": name,
        "memory": 24 << 30,
        "memory_used": memory_used,
        "utilization": utilization,
        "pci_bus_id": f"00000000:{index + 1:02x}:00.0",
        "compute_mode": "default",
    }


#: Where a synthetic recorder runs: the initial PID namespace, no container markers.
NAMESPACE: dict[str, Any] = {
    "pid": "initial",
    "ns": "pid:[4026531836]",
    "pid1_ns": "pid:[4026531836]",
    "nspid": [4242],
    "markers": [],
}


def _explain(gpus: list[dict[str, Any]], processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU with what its listed processes explain, as the sampler records it (unless the GPU says)."""
    out = []
    for g in gpus:
        listed = [p.get("used_memory") or 0 for p in processes if p.get("gpu") == g.get("uuid")]
        used = g.get("memory_used")
        facts = {
            "listed_memory": sum(listed),
            "unexplained_memory": used - sum(listed) if isinstance(used, int) else None,
            "unexplained_utilization": 0 if listed else g.get("utilization"),
        }
        out.append({**facts, **g})
    return out


Op = dict[str, Any]


class SyntheticStream:
    """An editable list of events, in stream order."""

    def __init__(self, env: dict[str, str] | None = None, *, cwd: str = "/lane", gate: str | None = None) -> None:
        self.ops: list[Op] = []
        self.add(
            kinds.STREAM_OPEN,
            {
                "stream_id": "0" * 32,
                "version": "test",
                "argv": ["lane.sh"],
                "recorder_argv": ["alpha", "observe", "gate"],
                "cwd": cwd,
                "env": dict(env or {}),
                "host": "test",
                "gate": gate,
                "labels": {},
            },
        )
        self.add(kinds.PROCESS_START, {"pid": 1, "argv": ["lane.sh"]})

    # -- building --------------------------------------------------------------------

    def add(
        self,
        kind: str,
        attrs: dict[str, Any] | None = None,
        data: bytes | None = None,
        step: str | None = None,
        *,
        at: int | None = None,
    ) -> Op:
        """Append an event (or insert it at index ``at``)."""
        op: Op = {"kind": kind, "attrs": dict(attrs or {}), "data": data, "step": step}
        if at is None:
            self.ops.append(op)
        else:
            self.ops.insert(at, op)
        return op

    def step_start(self, name: str, pid: int | None = None) -> Op:
        """A step's start; ``pid`` is the step client's pid (the recorder takes it from the socket's peer)."""
        attrs: dict[str, Any] = {"name": name, "argv": [name]}
        if pid is not None:
            attrs["pid"] = pid
        return self.add(kinds.STEP_START, attrs, step=name)

    def observe(
        self,
        phase: str = "sample",
        gpus: list[dict[str, Any]] | None = None,
        processes: list[dict[str, Any]] | None = None,
        *,
        observer: str = "nvml",
        driver: str | None = "580.95.05",
        attribution: str = "pids",
        library: dict[str, str] | None = None,
        simulated_from: dict[str, str] | None = None,
        error: str | None = None,
        namespace: dict[str, Any] | None = None,
        at: int | None = None,
    ) -> Op:
        """A ``device.observed`` event, as the recorder's sampler writes it (step null).

        ``processes``: ``{pid, gpu, used_memory, in_tree, steps, exe, script, argv}``
        each. Each GPU gets what the processes listed on it explain, unless it says.
        An observer other than ``nvml`` names no library; ``none`` also no driver or GPU.
        """
        nvml = observer == "nvml"
        attrs = {
            "phase": phase,
            "observer": observer,
            "library": (library or dict(NVML_LIBRARY)) if nvml else None,
            "driver": driver if observer != "none" else None,
            "cuda_driver": 13000 if observer != "none" else None,
            "namespace": dict(namespace or NAMESPACE),
            "gpus": _explain(list(gpus or []), list(processes or [])) if observer != "none" else [],
            "processes": list(processes or []) if observer != "none" else [],
            "attribution": attribution,
            "simulated_from": simulated_from,
            "error": error,
        }
        return self.add(kinds.DEVICE_OBSERVED, attrs, at=at)

    def telemetry(self, gpus: list[dict[str, Any]], *, at: int | None = None) -> Op:
        """A ``telemetry`` event: each GPU's ``{uuid, utilization, memory_used, temperature}``."""
        tree = {"processes": 3, "cpu_ns": 1_000_000, "rss": 64 * _MIB}
        return self.add(kinds.TELEMETRY, {"tree": tree, "gpus": gpus}, at=at)

    def recorder_artifact(self, path: str, content: bytes, env: str, *, at: int | None = None) -> Op:
        """The recorder's own capture of the file ``env`` named at the start (``origin: recorder``)."""
        attrs = {
            "path": path,
            "size": len(content),
            "mode": 0o644,
            "sha256": sha256(content),
            "content": "inline",
            "origin": "recorder",
            "env": env,
        }
        i = len(self.ops) if at is None else at
        op = self.add(kinds.ARTIFACT, attrs, at=i)
        if content:
            self.add(kinds.ARTIFACT_CHUNK, {"path": path, "offset": 0}, content, at=i + 1)
        return op

    def step_end(self, name: str, exit_code: int | None = 0, signal: str | None = None) -> Op:
        return self.add(
            kinds.STEP_END,
            {"name": name, "argv": [name], "exit_code": exit_code, "signal": signal, "duration_ns": 1},
            step=name,
        )

    def output(self, kind: str, data: bytes, step: str | None = None) -> Op:
        return self.add(kind, {}, data, step)

    def receipt(self, name: str, status: str = "pass", step: str | None = None, **fields: Any) -> Op:
        return self.add(kinds.RECEIPT, {"name": name, "status": status, "fields": fields}, step=step)

    def artifact(self, path: str, content: bytes, step: str | None = None, chunk: int = 1 << 16) -> Op:
        op = self.add(
            kinds.ARTIFACT,
            {"path": path, "size": len(content), "mode": 0o644, "sha256": sha256(content), "content": "inline"},
            step=step,
        )
        for off in range(0, max(len(content), 1), chunk):
            if content:
                self.add(kinds.ARTIFACT_CHUNK, {"path": path, "offset": off}, content[off : off + chunk], step)
        return op

    def exit(self, code: int | None = 0, signal: str | None = None, timed_out: bool = False) -> Op:
        return self.add(
            kinds.PROCESS_EXIT,
            {"exit_code": code, "signal": signal, "timed_out": timed_out, "duration_ns": 1, "rusage": {}},
        )

    # -- finding and breaking ----------------------------------------------------------

    def find(self, kind: str, name: str | None = None, **fields: Any) -> list[Op]:
        """Ops of a kind (and ``attrs.name``, and receipt fields) in order."""
        out = []
        for op in self.ops:
            if op["kind"] != kind:
                continue
            if name is not None and op["attrs"].get("name", op["attrs"].get("path")) != name:
                continue
            got = op["attrs"].get("fields", {})
            if all(got.get(k) == v for k, v in fields.items()):
                out.append(op)
        return out

    def one(self, kind: str, name: str | None = None, **fields: Any) -> Op:
        found = self.find(kind, name, **fields)
        if len(found) != 1:
            raise LookupError(f"{len(found)} {kind} {name} {fields}")
        return found[0]

    def receipt_op(self, name: str, **fields: Any) -> Op:
        """The one receipt named ``name`` (matching ``fields``)."""
        return self.one(kinds.RECEIPT, name, **fields)

    def fields(self, name: str, **where: Any) -> dict[str, Any]:
        """The fields of the one receipt ``name`` (edit them in place)."""
        fields: dict[str, Any] = self.receipt_op(name, **where)["attrs"]["fields"]
        return fields

    def drop(self, ops: Iterable[Op]) -> None:
        ids = {id(o) for o in ops}
        self.ops = [o for o in self.ops if id(o) not in ids]

    def drop_step(self, name: str) -> None:
        """Remove a step and everything recorded inside it."""
        self.ops = [o for o in self.ops if o["step"] != name]

    def set_artifact(self, path: str, content: bytes) -> None:
        """Replace a captured file's bytes (its artifact event agrees with them)."""
        art = self.one(kinds.ARTIFACT, path)
        i = self.ops.index(art)
        self.drop(o for o in self.ops if o["kind"] == kinds.ARTIFACT_CHUNK and o["attrs"]["path"] == path)
        art["attrs"].update(size=len(content), sha256=sha256(content))
        self.ops.insert(
            i + 1,
            {"kind": kinds.ARTIFACT_CHUNK, "attrs": {"path": path, "offset": 0}, "data": content, "step": art["step"]},
        )

    def move_after_exit(self, ops: Iterable[Op]) -> None:
        """Move ops after ``process.exit`` (as if something outlived the command)."""
        moving = list(ops)
        self.drop(moving)
        self.ops.extend(moving)

    # -- output ----------------------------------------------------------------------

    def events(self) -> list[Event]:
        """The ops as ``aos.Event`` objects (dense seqs; hashes are not a chain)."""
        out = []
        for seq, op in enumerate(self.ops):
            out.append(
                Event(
                    seq,
                    1_000 + seq,
                    1_000 + seq,
                    op["kind"],
                    op["step"],
                    canonical_json(op["attrs"]),
                    op["data"],
                    b"\0" * 32,
                )
            )
        return out

    def write(
        self, path: str | os.PathLike[str], *, seal: bool = True, signer: Signer | None = None
    ) -> SealInfo | None:
        """Write the ops as a real stream (sealed unless ``seal=False``; signed by ``signer``)."""
        from aos.writer import StreamWriter

        w = StreamWriter(path, background_flush=False, signer=signer)
        for op in self.ops:
            w.append(op["kind"], op["attrs"], op["data"], op["step"])
        if not seal:
            w.close()
            return None
        return w.seal()

    def evaluate(self, gate: str | Any = None) -> Verdict:
        """Evaluate a gate (a name, a ``Gate``, or the one named in ``stream.open``)."""
        from gates.engine import evaluate
        from gates.registry import resolve_gate

        if gate is None:
            gate = self.ops[0]["attrs"].get("gate") or "exit-zero"
        g = resolve_gate(gate) if isinstance(gate, str) else gate
        return evaluate(g, self.events())


def device_lane(
    gate: str = "distributed-device",
    *,
    physical: bool = True,
    roles: tuple[str, ...] = ("alpha", "beta"),
    observer: str | None = "nvml",
) -> SyntheticStream:
    """A complete, right device lane for ``gate`` (static only with ``physical=False``).

    With ``physical``, the recorder's side is there too: its capture of the lane
    config (``origin: recorder``) and its device observations by ``observer``
    (``nvml``: start, a sample during the uninterrupted run showing each role's
    process working on its GPU, end; ``None``: no observation at all). Each role
    ``r`` is bound to GPU ``GPU-000i-r``; its process runs ``out/build/r``.
    """
    var = DEVICE_CONFIG_VARS[gate]
    env = {"PATH": "/usr/bin", "HOME": "/home/ci"}
    if physical:
        env[var] = "/etc/alpha/lane.json"
    s = SyntheticStream(env, gate=gate)
    out = "out"
    uuids = {r: f"GPU-{i:04d}-{r}" for i, r in enumerate(roles)}
    idle = [observed_gpu(i, uuids[r]) for i, r in enumerate(roles)]
    produced: dict[str, bytes] = {}

    def art(rel: str, data: bytes, step: str) -> str:
        path = f"{out}/{rel}"
        s.artifact(path, data, step)
        produced[rel] = data
        return path

    static = {r: f"static binary {r}\n".encode() for r in roles}
    s.step_start("static-build")
    for r in roles:
        path = art(f"static/{r}", static[r], "static-build")
        s.receipt("static-build", step="static-build", role=r, target=path, sha256=sha256(static[r]))
    s.step_end("static-build")
    s.step_start("static-check")
    for r in roles:
        s.receipt(
            "static-check",
            step="static-check",
            role=r,
            check="elf-header",
            result="pass",
            target=f"{out}/static/{r}",
            sha256=sha256(static[r]),
        )
    s.step_end("static-check")
    if not physical:
        s.exit(0)
        return s

    config = {
        "owner": "ci",
        "pod_ids": ["p1"],
        "host": "local",  # the recorder's own machine (a remote host would be judged by its nodes' observations)
        "port": 22,
        "ssh_key": "/k",
        "minors": [0, 1],
        "remote_root": "/srv/lane",
        "transport": "loopback",
    }
    # The recorder's side, before the command ran: its observation and its capture of the config.
    if observer is not None:
        s.observe("start", idle, observer=observer, at=1)
    s.recorder_artifact(env[var], json.dumps(config).encode(), var, at=2 if observer is not None else 1)

    s.step_start("preflight")
    s.artifact(f"{out}/lane-config.json", json.dumps(config).encode(), "preflight")
    gpus = [
        {"minor": i, "uuid": uuids[r], "product": "NVIDIA GeForce RTX 3090", "driver": "580.95.05"}
        for i, r in enumerate(roles)
    ]
    binding = art("binding.json", json.dumps({"gpus": gpus}).encode(), "preflight")
    s.receipt("preflight", step="preflight", gpus=gpus, compute_processes=[], binding=binding)
    s.step_end("preflight")

    s.step_start("build")
    executables = {r: f"device binary {r}\n".encode() for r in roles}
    for r in roles:
        exe = executables[r]
        path = art(f"build/{r}", exe, "build")
        s.receipt("build", step="build", role=r, target=path, sha256_local=sha256(exe), sha256_remote=sha256(exe))
    s.step_end("build")

    for control, expected, step in (
        ("wrong-uuid", "device-uuid", "refusal-wrong-uuid"),
        ("wrong-product", "nvidia-plan-host", "refusal-wrong-product"),
    ):
        s.step_start(step)
        s.output(kinds.STDERR, f"refused: {expected}: the binding does not match this device\n".encode(), step)
        s.step_end(step, exit_code=3)
        s.receipt(
            "refusal-control",
            step=step,
            control=control,
            expected=expected,
            exit_code=3,
            exit_name=expected,
            checkpoint_written=False,
            output_bytes=0,
        )

    checkpoint = ORACLE_CHECKPOINT.get(gate, b"checkpoint after 5 updates\n" * 4)
    trajectory = ORACLE_TRAJECTORY.get(gate, b"trajectory of 5 updates\n")
    s.step_start("uninterrupted-run")
    if observer is not None:
        busy = [observed_gpu(i, uuids[r], memory_used=900 * _MIB, utilization=40) for i, r in enumerate(roles)]
        procs = []
        for i, r in enumerate(roles):
            argv = [f"/srv/lane/remote/{r}", "serve"]
            steps = ["uninterrupted-run"]
            # What the recorder read: the SHA-256 of the file the kernel executed (the role's build).
            ident = {"path": f"/srv/lane/remote/{r}", "sha256": sha256(executables[r])}
            procs.append(
                {
                    "pid": 200 + i,
                    "gpu": uuids[r],
                    "used_memory": 600 * _MIB,
                    "in_tree": True,
                    "steps": steps,
                    "exe": ident,
                    "script": None,
                    "argv": argv,
                }
            )
            if i:  # a CUDA process also holds a small context on the first card: it works where it holds the most
                procs.append(
                    {
                        "pid": 200 + i,
                        "gpu": uuids[roles[0]],
                        "used_memory": 300 * _MIB,
                        "in_tree": True,
                        "steps": steps,
                        "exe": ident,
                        "script": None,
                        "argv": argv,
                    }
                )
        s.observe("sample", busy, procs, observer=observer)
    cp1 = art("uninterrupted/checkpoint.bin", checkpoint, "uninterrupted-run")
    tr1 = art("uninterrupted/trajectory.json", trajectory, "uninterrupted-run")
    s.receipt(
        "uninterrupted-run",
        step="uninterrupted-run",
        updates=5,
        checkpoint=cp1,
        checkpoint_sha256=sha256(checkpoint),
        trajectory=tr1,
    )
    s.step_end("uninterrupted-run")

    s.step_start("split-run")
    cp2 = art("split/checkpoint.bin", checkpoint, "split-run")
    s.receipt(
        "split-run",
        step="split-run",
        updates_before=3,
        updates_after=2,
        checkpoint=cp2,
        resumed_checkpoint_sha256=sha256(checkpoint),
        epoch_before=1,
        epoch_after=2,
    )
    s.step_end("split-run")

    if gate != "distributed-device":
        s.step_start("host-shadow-control")
        cp3 = art("shadow/checkpoint.bin", checkpoint, "host-shadow-control")
        tr3 = art("shadow/trajectory.json", trajectory, "host-shadow-control")
        s.receipt(
            "host-shadow-control",
            step="host-shadow-control",
            trajectory_sha256=sha256(trajectory),
            shadow_trajectory_sha256=sha256(trajectory),
            checkpoint_sha256=sha256(checkpoint),
            shadow_checkpoint_sha256=sha256(checkpoint),
            shadow_checkpoint=cp3,
            shadow_trajectory=tr3,
        )
        s.step_end("host-shadow-control")

    s.step_start("fresh-evaluation")
    output = art("eval/output.json", b'{"loss": 0.25}\n', "fresh-evaluation")
    s.receipt(
        "fresh-evaluation",
        step="fresh-evaluation",
        device="gpu",
        checkpoint=cp2,
        checkpoint_sha256=sha256(checkpoint),
        output=output,
    )
    s.step_end("fresh-evaluation")

    s.step_start("corrupted-checkpoint")
    s.output(kinds.STDERR, b"refused: checkpoint-chunk: chunk 2 does not match its digest\n", "corrupted-checkpoint")
    s.step_end("corrupted-checkpoint", exit_code=4)
    s.receipt("corrupted-checkpoint", step="corrupted-checkpoint", exit_code=4, exit_name="checkpoint-chunk")

    s.step_start("qualification")
    record = {"lane": gate, "files": [{"path": p, "sha256": sha256(d)} for p, d in sorted(produced.items())]}
    qdata = json.dumps(record, indent=1).encode()
    qpath = f"{out}/qualification.json"
    s.artifact(qpath, qdata, "qualification")
    s.receipt("qualification", step="qualification", path=qpath, sha256=sha256(qdata))
    s.step_end("qualification")
    s.exit(0)
    if observer is not None:
        s.observe("end", idle, observer=observer)
    return s


def write_long_lane(path: str | os.PathLike[str], events: int, *, per_step: int = 1000) -> int:
    """Write a sealed lane of about ``events`` events, as a long build writes them, and return its count.

    Steps named ``build`` of ``per_step`` events each: the step's start, lines of stdout with a
    stderr warning every 50th, one ``build`` receipt (its exit code and a warning the step's
    stderr shows), its end; the command exits 0. Most events are output, as in a real lane: a
    gate over it is measured in memory per event (tests/gates/test_memory.py, bench/bench_gate.py).
    """
    from aos.writer import StreamWriter

    steps = max(1, -(-(events - 3) // per_step))  # enough steps for ``events``, rounded up
    lines = max(0, per_step - 3)
    w = StreamWriter(path, background_flush=False)
    w.append(
        kinds.STREAM_OPEN, {"stream_id": w.stream_id, "argv": ["lane.sh"], "cwd": "/lane", "env": {}, "labels": {}}
    )
    w.append(kinds.PROCESS_START, {"pid": 1, "argv": ["lane.sh"]})
    for i in range(steps):
        span = f"build-{i}"
        w.append(kinds.STEP_START, {"name": "build", "argv": ["make", f"part{i}"], "runner": "recorder"}, step=span)
        for n in range(lines):
            if n % 50 == 49:
                w.append(kinds.STDERR, {}, f"warning: unused variable x{n} in part{i}.c\n".encode(), step=span)
            else:
                w.append(kinds.STDOUT, {}, f"cc -O2 -c part{i}/unit{n}.c -o part{i}/unit{n}.o\n".encode(), step=span)
        w.append(
            kinds.RECEIPT,
            {"name": "build", "status": "pass", "fields": {"exit_code": 0, "warning": "unused"}},
            step=span,
        )
        w.append(
            kinds.STEP_END, {"name": "build", "argv": ["make", f"part{i}"], "exit_code": 0, "duration_ns": 1}, step=span
        )
    w.append(kinds.PROCESS_EXIT, {"exit_code": 0})
    w.seal()
    return w.events
