"""Fleet sessions: sealing and verifying 1,000 node streams under two levels of sessions (issue 37).

For each fleet size N and fan-out F: N small node streams (made here with the
writer, no SSH, no recorder: a node recorder's stream.open with the session's
labels, a device.observed of 8 GPUs, some output, process.exit, the seal, signed
by the node's own Ed25519 key, which its rack's spec declares) lie in
ceil(N / F) rack sessions of at most F nodes each, under one top session. Each
phase runs in a fresh process, so its peak RSS is its own:

- **seal racks**: each rack's coordinating stream judges its nodes (verifies
  each stream and its seal's signature by the node's declared key, checks its
  labels), builds the tree, writes the checkpoint and
  the proofs, and is sealed (observe.session.coordinator.seal_members, as a
  recording's before_seal runs it); racks one after another, in one process;
- **seal top**: the top session over the racks;
- **verify**: ``verify_session`` of the whole fleet, offline from the files;
- **verify one path**: ``verify_session(..., only="rack-K/node-J")``;
- **gate**: ``alpha observe session gate DIR --gate exit-zero`` (observe.session.gating): every node stream
  judged, and ``devices-distinct`` by a k-way merge per session level over the sealed sorted GPU lists (one
  cursor per member), not a set of every GPU in the fleet.

Printed: the time per node stream of each phase, its peak RSS, and a computed
figure for the seeds' fleet of 200,000 GPUs (25,000 nodes of 8, three levels at
fan-out 64), labelled computed: it is this machine's per-stream cost times the
streams, never a measurement of such a fleet.

    python bench/bench_session.py                       # 250 and 1,000 nodes, fan-out 64 and 32
    python bench/bench_session.py --sizes 1000 --fanouts 64
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GPUS_PER_NODE = 8
FLEET_GPUS = 200_000


def _signer(label: str) -> Any:
    """The Ed25519 key of node or rack ``label``: one per member, as each recorder has its own (derived from the
    label here, so that every phase's process finds the same one; a real fleet generates them)."""
    from blake3 import blake3
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from aos.signing import Signer

    return Signer(Ed25519PrivateKey.from_private_bytes(blake3(f"bench-key/{label}".encode()).digest()))


def _public(label: str) -> str:
    """The raw public key (hex) a spec declares for ``label``."""
    from aos.signing import raw_public

    return raw_public(_signer(label).private.public_key())


def _node(path: Path, origin: str, name: str, index: int, key: str | None = None) -> None:
    """One small node stream, as a node recorder seals it (labels binding it to its session and name), signed by
    member ``key``'s own key (none: unsigned)."""
    from aos import kinds
    from aos.writer import StreamWriter
    from observe.session.members import LABEL_MEMBER, LABEL_ORIGIN

    signer = None if key is None else _signer(key)
    w = StreamWriter(path, signer=signer, background_flush=False, fsync="never")
    labels = {LABEL_ORIGIN: origin, LABEL_MEMBER: name}
    w.append(kinds.STREAM_OPEN, {"stream_id": w.stream_id, "argv": ["train.sh"], "labels": labels, "host": name})
    gpus = [{"index": i, "uuid": f"GPU-{index:06d}-{i}", "name": "NVIDIA H200"} for i in range(GPUS_PER_NODE)]
    w.append(kinds.DEVICE_OBSERVED, {"phase": "start", "observer": "simulated", "gpus": gpus, "processes": []})
    w.append(kinds.PROCESS_START, {"pid": 1, "argv": ["train.sh"]})
    for step in range(20):
        w.append(kinds.STDOUT, {}, f"step {step}: loss {1.0 / (step + 1):.4f}\n".encode())
    w.append(kinds.PROCESS_EXIT, {"exit_code": 0, "signal": None, "timed_out": False, "duration_ns": 10**9})
    w.seal()


def _session_stream(directory: Path, spec: Any, origin: str, parent: Any, key: str | None = None) -> None:
    """A session's coordinating stream, sealed over its members as run_session seals it (without a launcher),
    signed by ``key``'s own key (none: unsigned)."""
    from aos import kinds
    from aos.writer import StreamWriter
    from observe.session import layout
    from observe.session.coordinator import open_attrs, seal_members
    from observe.session.members import LABEL_MEMBER, LABEL_ORIGIN

    for sub in ("nodes", "sessions", "proofs"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    signer = None if key is None else _signer(key)
    w = StreamWriter(layout.stream(directory), signer=signer, background_flush=False, fsync="never")
    labels = {} if parent is None else {LABEL_ORIGIN: parent.origin, LABEL_MEMBER: parent.name}
    w.append(kinds.STREAM_OPEN, {"stream_id": w.stream_id, "argv": ["launch.sh"], "labels": labels})
    w.append(kinds.SESSION_OPEN, open_attrs(spec, origin, parent))
    judged = seal_members(w, spec, directory, origin)
    assert all(j.status == "proven" for j in judged), [j.reason for j in judged if j.status != "proven"]
    w.seal()


def _layout(n: int, fanout: int) -> list[int]:
    """The node count of each rack: N nodes in ceil(N / F) racks, as even as can be."""
    racks = math.ceil(n / fanout)
    return [n // racks + (1 if r < n % racks else 0) for r in range(racks)]


def phase_make(root: Path, n: int, fanout: int) -> dict[str, Any]:
    """Write every node stream in its rack's folder; the origins go to plan.json."""
    from observe.session import layout
    from observe.session.spec import new_origin

    top = new_origin("bench.example/fleet")
    racks = []
    index = 0
    for r, count in enumerate(_layout(n, fanout)):
        origin = new_origin("bench.example/rack")
        folder = layout.sub_session(root, f"rack-{r}")
        (folder / "nodes").mkdir(parents=True)
        for i in range(count):
            _node(layout.node_stream(folder, f"node-{i}"), origin, f"node-{i}", index, f"rack-{r}/node-{i}")
            index += 1
        racks.append({"name": f"rack-{r}", "origin": origin, "nodes": count})
    (root / "plan.json").write_text(json.dumps({"top": top, "racks": racks}))
    return {}


def phase_seal_racks(root: Path) -> dict[str, Any]:
    from observe.session import layout
    from observe.session.coordinator import Parent
    from observe.session.spec import Expected, Spec

    plan = json.loads((root / "plan.json").read_text())
    for rack in plan["racks"]:
        name = rack["name"]
        members = tuple(
            Expected(f"node-{i}", gpus=GPUS_PER_NODE, key=_public(f"{name}/node-{i}")) for i in range(rack["nodes"])
        )
        spec = Spec("bench.example/rack", members)
        _session_stream(layout.sub_session(root, name), spec, rack["origin"], Parent(plan["top"], name), name)
    return {}


def phase_seal_top(root: Path) -> dict[str, Any]:
    from observe.session.spec import Expected, Spec

    plan = json.loads((root / "plan.json").read_text())
    spec = Spec(
        "bench.example/fleet", tuple(Expected(r["name"], session=True, key=_public(r["name"])) for r in plan["racks"])
    )
    _session_stream(root, spec, plan["top"], None)
    return {}


def phase_verify(root: Path) -> dict[str, Any]:
    from observe.session.verify import verify_session

    report = verify_session(root)
    assert report.exit_code == 0, [m.reason for m in report.not_proven]
    return {"members": len(report.members)}


def phase_verify_path(root: Path) -> dict[str, Any]:
    from observe.session.verify import verify_session

    plan = json.loads((root / "plan.json").read_text())
    last = plan["racks"][-1]
    report = verify_session(root, None, f"{last['name']}/node-{last['nodes'] - 1}")
    assert (0, 2) == (report.exit_code, len(report.members))
    return {"members": len(report.members)}


def phase_gate(root: Path) -> dict[str, Any]:
    from gates.registry import resolve_gate
    from observe.session.gating import gate_session

    verdict = gate_session(root, resolve_gate("exit-zero", ()))
    distinct = [c for c in verdict.checks if c.name == "devices-distinct"]
    assert verdict.verdict == "pass", verdict.summary
    assert distinct, verdict.checks
    assert distinct[0].status == "pass", distinct
    return {"checks": len(verdict.checks)}


#: Each phase after "make" (which also takes the size and fan-out), in order.
LATER: dict[str, Callable[[Path], dict[str, Any]]] = {
    "seal-racks": phase_seal_racks,
    "seal-top": phase_seal_top,
    "verify": phase_verify,
    "verify-path": phase_verify_path,
    "gate": phase_gate,
}
PHASES = ["make", *LATER]


def _child(phase: str, root: Path, n: int, fanout: int) -> dict[str, Any]:
    """Run one phase in a fresh interpreter; its wall time (imports excluded) and peak RSS."""
    out = subprocess.run(
        [sys.executable, __file__, "--phase", phase, "--root", str(root), "--sizes", str(n), "--fanouts", str(fanout)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_phase(phase: str, root: Path, n: int, fanout: int) -> None:
    """The child's side: import first (not timed), run, print seconds and peak RSS as JSON."""
    import gates.registry  # noqa: F401
    import observe.session.coordinator
    import observe.session.gating
    import observe.session.verify  # noqa: F401
    from aos.reader import StreamFile
    from aos.verify import verify_stream

    warm = root / "warm.aos"  # pyarrow, zstd and BLAKE3 loaded and their pools started before the clock
    _node(warm, "bench.example/warm", "warm", 0)
    verify_stream(warm)
    with StreamFile(warm) as f:
        next(iter(f.events()))
    warm.unlink()

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    extra = phase_make(root, n, fanout) if phase == "make" else LATER[phase](root)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "rss_kib": peak, "rss_before_kib": before, **extra}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="250,1000")
    p.add_argument("--fanouts", default="64,32")
    p.add_argument("--phase", choices=PHASES)
    p.add_argument("--root", type=Path)
    a = p.parse_args()
    if a.phase is not None:
        run_phase(a.phase, a.root, int(a.sizes), int(a.fanouts))
        return
    rows: list[tuple[int, int, dict[str, dict[str, Any]]]] = []
    for n in (int(x) for x in a.sizes.split(",")):
        for fanout in (int(x) for x in a.fanouts.split(",")):
            root = Path(tempfile.mkdtemp(prefix="bench-session-"))
            try:
                got = {phase: _child(phase, root, n, fanout) for phase in PHASES}
            finally:
                shutil.rmtree(root, ignore_errors=True)
            rows.append((n, fanout, got))
            racks = len(_layout(n, fanout))
            print(f"{n} nodes, fan-out {fanout} ({racks} racks of <= {fanout}, one top session of {racks}):")
            for phase in PHASES:
                g = got[phase]
                count, unit = (
                    (racks, "rack") if phase == "seal-top" else (1, "path") if phase == "verify-path" else (n, "stream")
                )
                per = g["seconds"] / count * 1e3
                grew = (g["rss_kib"] - g["rss_before_kib"]) / 1024
                peak = g["rss_kib"] / 1024
                print(
                    f"  {phase:<12} {g['seconds']:8.3f} s  {per:8.3f} ms/{unit:<6}  peak RSS {peak:6.1f} MiB"
                    f" (+{grew:.1f} MiB over the imports)"
                )
    _computed(rows)


def _computed(rows: list[tuple[int, int, dict[str, dict[str, Any]]]]) -> None:
    """The seeds' 200,000-GPU fleet, computed (not measured) from the largest run at fan-out 64."""
    at64 = [r for r in rows if r[1] == 64] or rows
    n, fanout, got = max(at64, key=lambda r: r[0])
    racks = len(_layout(n, fanout))
    nodes = FLEET_GPUS // GPUS_PER_NODE
    levels = math.ceil(math.log(nodes, fanout))
    sessions = sum(math.ceil(nodes / fanout**k) for k in range(1, levels + 1))
    per_node = got["seal-racks"]["seconds"] / n  # judging one node stream into its rack's tree, and the rack's share
    per_sub = got["seal-top"]["seconds"] / racks  # judging one sub-session into its parent's tree
    verify = got["verify"]["seconds"] / n
    path = got["verify-path"]["seconds"]
    wall = fanout * per_node + (levels - 1) * fanout * per_sub  # each level's coordinators side by side
    print(f"COMPUTED (not measured) for {FLEET_GPUS:,} GPUs = {nodes:,} nodes of {GPUS_PER_NODE}, fan-out {fanout}:")
    print(f"  {levels} levels, {sessions:,} sessions; no coordinator holds more than {fanout} members")
    print(
        f"  from {n} nodes here: {per_node * 1e3:.2f} ms per node stream, {per_sub * 1e3:.2f} ms per sub-session sealed"
    )
    print(f"  sealing: {per_node * nodes + per_sub * (sessions - 1):,.0f} s of CPU in all; wall about {wall:.1f} s")
    print("    when the coordinators of each level seal side by side, one level after another")
    print(f"  verifying every stream offline on one core: {verify * nodes:,.0f} s ({verify * 1e3:.2f} ms per stream)")
    print(f"  verifying one node's path: {path * 1e3:.0f} ms measured at depth 2 (one stream and two proofs a level)")
    smallest = min((r for r in rows if r[1] == fanout), key=lambda r: r[0])
    for what, phase in (("seal", "seal-racks"), ("verify", "verify")):
        here = got[phase]["seconds"] / n
        base = smallest[2][phase]["seconds"] / smallest[0]
        flat = "met" if here <= 1.5 * base else "missed"
        target = f"<= 1.5 x {base * 1e3:.2f} ms (at {smallest[0]} nodes): flat in the fleet's size"
        print(
            f"ROW\tsession {what} per node stream ({n} nodes, fan-out {fanout})\t{here * 1e3:.2f} ms\t{target}\t{flat}"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
