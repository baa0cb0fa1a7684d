"""The entry point of every role executable (``python3 ROLE.pyz COMMAND ...``).

Commands:
  serve      take part in a run as this role's owner
  coordinate be the run's coordinator (owner-0's executable only)
  evaluate   a fresh process predicts from a checkpoint
  selftest   run the learner in-process on the host and print its digests
  manifest   print the embedded manifest

``serve`` and ``evaluate`` check the device binding first and refuse by name
(``device-uuid``, ``nvidia-plan-host``) before writing anything; a checkpoint is
verified before any state is built from it (``checkpoint-chunk``).

Participants meet on ``--socket PATH`` (a Unix socket the driver names, on one
machine), or, on a node reached over SSH, through the driver's link on stdin:
the coordinator started with ``--listen unix|tcp`` makes its own listener (a
Unix socket in a private folder, or TCP on 127.0.0.1 for an SSH tunnel) once its
binding holds and announces it on stderr (``coordinator: listening on ADDR``);
an owner started with ``--connect-stdin`` reads that address as the first line
of its stdin. Either exits once its stdin closes: the driver's connection is gone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from typing import Any

from . import checkpoint
from .device import check_binding
from .learner import Coordinator, Owner, evaluate, initial_chunks
from .numeric import HostBackend, backend_for
from .refusals import CheckpointEpoch, LaneRefusal, PeerIdentity
from .spec import LearnerSpec, canonical_json
from .wire import Channel, WireError, compare_hello, hello

__all__ = ["main", "run_in_process", "trajectory_bytes"]

ACCEPT_TIMEOUT = 300.0
#: A role whose driver link (stdin) closed exits with this code, before anything else happens.
LINK_LOST = 1


def trajectory_bytes(spec: LearnerSpec, rows: list[dict[str, Any]]) -> bytes:
    """The canonical bytes of a trajectory file."""
    body = {"format": "alpha-lane-trajectory/1", "lane": spec.lane, "learner": spec.learner_id, "rows": rows}
    return canonical_json(body) + b"\n"


def _write(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return hashlib.sha256(data).hexdigest()


def _accept_owners(spec: LearnerSpec, server: socket.socket, epoch: int) -> dict[str, Channel]:
    mine = hello(spec, "coordinator", epoch)
    channels: dict[str, Channel] = {}
    server.settimeout(ACCEPT_TIMEOUT)
    while len(channels) < len(spec.owners):
        conn, _ = server.accept()
        conn.settimeout(ACCEPT_TIMEOUT)
        chan = Channel(conn, "a peer")
        theirs = chan.recv("hello")
        try:
            compare_hello(mine, theirs)
            if theirs["role"] in channels or theirs["role"] not in spec.owners:
                raise PeerIdentity(f"{theirs['role']!r} is not an expected owner")
        except PeerIdentity as exc:
            chan.send({"type": "refused", "detail": exc.detail})
            chan.close()
            raise
        chan.peer = str(theirs["role"])
        chan.send(mine)
        channels[chan.peer] = chan
    return channels


def _connect(address: str, deadline: float) -> socket.socket:
    """Connect to ``unix:PATH``, ``tcp:HOST:PORT`` or a bare Unix socket path, retrying until ``deadline``."""
    kind, _, rest = address.partition(":")
    while True:
        if kind == "tcp":
            host, _, port = rest.rpartition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target: Any = (host, int(port))
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target = rest if kind == "unix" else address
        try:
            sock.connect(target)
            sock.settimeout(ACCEPT_TIMEOUT)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise WireError(f"no coordinator at {address}") from None
            time.sleep(0.02)


def _first_line(limit: int = 4096) -> bytes:
    """The first line of stdin, read from the descriptor byte by byte (nothing past it is consumed)."""
    line = b""
    while len(line) < limit:
        byte = os.read(0, 1)
        if not byte or byte == b"\n":
            break
        line += byte
    return line


def _watch_link(role: str) -> None:
    """End this process once stdin (the driver's link over SSH) closes: a lost driver leaves no role behind."""

    def watch() -> None:
        # The descriptor itself: sys.stdin's buffer holds a lock that a daemon thread must not at shutdown.
        while os.read(0, 1 << 12):
            pass
        print(f"error: {role}: the driver's link (stdin) closed; stopping", file=sys.stderr, flush=True)
        os._exit(LINK_LOST)

    threading.Thread(target=watch, daemon=True).start()


def _listener(kind: str) -> tuple[socket.socket, str, str | None]:
    """A listening socket of ``kind`` (unix: in a private folder; tcp: 127.0.0.1, any port), its address, its folder."""
    if kind == "tcp":
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        return server, f"tcp:127.0.0.1:{server.getsockname()[1]}", None
    folder = tempfile.mkdtemp(prefix="lane-")
    path = os.path.join(folder, "coordinator.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    return server, f"unix:{path}", folder


def owner_session(
    spec: LearnerSpec, role: str, chan: Channel, backend: Any, epoch: int, shadow: bool
) -> dict[str, Any]:
    """An owner's whole part in a run over one channel."""
    mine = hello(spec, role, epoch)
    chan.send(mine)
    theirs = chan.recv("hello")
    try:
        compare_hello(mine, theirs)
    except PeerIdentity as exc:
        chan.send({"type": "refused", "detail": exc.detail})
        raise
    chan.peer = "coordinator"
    return Owner(spec, role, backend, shadow=shadow).serve(chan)


def run_in_process(
    spec: LearnerSpec, updates: int = 5, *, shadow: bool = False
) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """The whole learner in one process (threads over socket pairs, host backend): the self-test."""
    channels: dict[str, Channel] = {}
    errors: list[BaseException] = []
    threads = []
    for role in spec.owners:
        a, b = socket.socketpair()
        a.settimeout(30)
        b.settimeout(30)
        chan = Channel(a, role)
        channels[role] = chan

        def work(sock: socket.socket = b, role: str = role) -> None:
            try:
                owner_session(spec, role, Channel(sock, "coordinator"), HostBackend(), 1, shadow)
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                errors.append(exc)

        threads.append(threading.Thread(target=work, daemon=True))
    for t in threads:
        t.start()
    mine = hello(spec, "coordinator", 1)
    for chan in channels.values():
        compare_hello(mine, chan.recv("hello"))
        chan.send(mine)
    chunks, rows, _ = Coordinator(spec, channels).run(0, initial_chunks(spec.lane, len(spec.owners)), updates)
    for t in threads:
        t.join(10)
    if errors:
        raise errors[0]
    return chunks, rows


def _serve_coordinator(spec: LearnerSpec, args: argparse.Namespace) -> int:
    step, chunks = 0, initial_chunks(spec.lane, len(spec.owners))
    resumed_from = None
    epoch_before = None
    if args.resume:
        step, chunks = checkpoint.load(args.resume, lane=spec.lane, learner=spec.learner_id)
        with open(args.resume, "rb") as fh:
            resumed_from = hashlib.sha256(fh.read()).hexdigest()
        if args.resume_membership:
            with open(args.resume_membership, encoding="utf-8") as fh:
                epoch_before = int(json.load(fh)["epoch"])
            if args.epoch <= epoch_before:
                raise CheckpointEpoch(
                    f"resume at epoch {args.epoch} does not advance the checkpoint's epoch {epoch_before}"
                )
    folder = None
    if args.listen:
        _watch_link("coordinator")
        server, address, folder = _listener(args.listen)
    else:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(args.socket)
    server.listen(len(spec.owners))
    if args.listen:
        print(f"coordinator: listening on {address}", file=sys.stderr, flush=True)
    try:
        channels = _accept_owners(spec, server, args.epoch)
        chunks, rows, reports = Coordinator(spec, channels).run(step, chunks, args.updates)
    finally:
        server.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    final_step = step + args.updates
    sha = checkpoint.write(args.checkpoint_out, spec.lane, spec.learner_id, final_step, chunks)
    traj_sha = _write(args.trajectory_out, trajectory_bytes(spec, rows))
    membership = {
        "format": "alpha-lane-membership/1",
        "lane": spec.lane,
        "learner": spec.learner_id,
        **spec.membership(args.epoch),
        "epoch_before": epoch_before,
        "step_from": step,
        "step_to": final_step,
        "resumed_from_sha256": resumed_from,
        "checkpoint_sha256": sha,
        "trajectory_sha256": traj_sha,
        "owners": reports,
    }
    _write(args.membership_out, json.dumps(membership, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    print(f"coordinator: epoch {args.epoch}: updates {step + 1}..{final_step}; checkpoint sha256 {sha}")
    return 0


def _serve_owner(spec: LearnerSpec, role: str, backend: Any, args: argparse.Namespace) -> int:
    address = args.socket
    if args.connect_stdin:
        address = _first_line().decode("utf-8", "replace").strip()
        if not address:
            raise WireError("no coordinator address on stdin (the driver's link closed)")
        _watch_link(role)
    sock = _connect(address, time.monotonic() + ACCEPT_TIMEOUT)
    chan = Channel(sock, "coordinator")
    try:
        report = owner_session(spec, role, chan, backend, args.epoch, args.shadow)
    finally:
        chan.close()
    print(
        f"{role}: state in {report['backend']['kind']} memory, resident={report['resident']}, "
        f"shadow overwrites={report['shadow_overwrites']}"
    )
    return 0 if report["resident"] else 1


def _evaluate(spec: LearnerSpec, backend: Any, args: argparse.Namespace) -> int:
    step, chunks = checkpoint.load(args.checkpoint, lane=spec.lane, learner=spec.learner_id)
    result = evaluate(spec, backend, chunks)
    with open(args.checkpoint, "rb") as fh:
        ckpt_sha = hashlib.sha256(fh.read()).hexdigest()
    body = {
        "format": "alpha-lane-evaluation/1",
        "lane": spec.lane,
        "learner": spec.learner_id,
        "step": step,
        "checkpoint_sha256": ckpt_sha,
        "device": backend.describe(),
        "result": result,
    }
    _write(args.output, json.dumps(body, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    print(f"evaluation: step {step} on {backend.kind}: {json.dumps(result, sort_keys=True)}")
    return 0 if result["resident"] else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="role")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("serve", "coordinate"):
        serve = sub.add_parser(name)
        meet = serve.add_mutually_exclusive_group(required=True)
        meet.add_argument("--socket")
        if name == "coordinate":
            meet.add_argument("--listen", choices=("unix", "tcp"))
        else:
            meet.add_argument("--connect-stdin", action="store_true")
        serve.add_argument("--epoch", type=int, default=1)
        serve.add_argument("--updates", type=int, default=5)
        serve.add_argument("--checkpoint-out")
        serve.add_argument("--trajectory-out")
        serve.add_argument("--membership-out")
        serve.add_argument("--resume")
        serve.add_argument("--resume-membership")
        serve.add_argument("--shadow", action="store_true")
    ev = sub.add_parser("evaluate")
    ev.add_argument("--checkpoint", required=True)
    ev.add_argument("--output", required=True)
    sub.add_parser("selftest")
    sub.add_parser("manifest")
    return p


def main(manifest: dict[str, Any], argv: list[str]) -> int:
    """Run one command of a role built from ``manifest``; return the exit code."""
    args = _parser().parse_args(argv)
    spec = LearnerSpec.from_json(manifest["learner"])
    role = manifest["role"]
    try:
        if args.command == "manifest":
            print(json.dumps(manifest, indent=2, sort_keys=True))
            return 0
        if args.command == "selftest":
            chunks, rows = run_in_process(spec)
            data = checkpoint.encode(spec.lane, spec.learner_id, len(rows), chunks)
            print(
                json.dumps(
                    {
                        "role": role,
                        "checkpoint_sha256": hashlib.sha256(data).hexdigest(),
                        "trajectory_sha256": hashlib.sha256(trajectory_bytes(spec, rows)).hexdigest(),
                    },
                    sort_keys=True,
                )
            )
            return 0
        binding = manifest["binding"]
        check_binding(binding)  # before anything is written
        if args.command == "coordinate":
            if "coordinator" not in manifest.get("hosts", []):
                print(f"error: {role} does not host the coordinator", file=sys.stderr)
                return 2
            if not (args.checkpoint_out and args.trajectory_out and args.membership_out):
                print(
                    "error: the coordinator needs --checkpoint-out, --trajectory-out and --membership-out",
                    file=sys.stderr,
                )
                return 2
            return _serve_coordinator(spec, args)
        if args.command == "evaluate":
            # Verify the checkpoint before the backend (and its device memory) exists.
            checkpoint.load(args.checkpoint, lane=spec.lane, learner=spec.learner_id)
            return _evaluate(spec, backend_for(binding), args)
        return _serve_owner(spec, role, backend_for(binding), args)
    except LaneRefusal as exc:
        print(exc.diagnostics(), file=sys.stderr, flush=True)
        return exc.exit_code
    except (WireError, OSError) as exc:
        print(f"error: {role}: {exc}", file=sys.stderr, flush=True)
        return 1
