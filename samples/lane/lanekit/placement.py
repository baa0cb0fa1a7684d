"""Where a lane's roles run: this machine, or nodes reached over SSH (driver side, never embedded).

The lane config decides (lanekit.config; samples/lane/README.md, "Where the roles run"):

- ``transport: "loopback"``: every role on one machine. ``host`` ``"local"`` (or
  none) is this machine and ``remote_root`` a folder of it; any other ``host`` is a
  node over SSH (``port``, ``ssh_key``, ``known_hosts``) and ``remote_root`` a
  folder there.
- ``transport: "ssh-tunnel"``: ``nodes`` in role order, each
  ``{"host", "port", "ssh_key", "known_hosts", "minors": [M, ...], "remote_root"}``
  carrying one role per minor it names (``known_hosts``, ``remote_root`` default to
  the top level's; a node naming no minors carries the one role of its place, the
  top level's ``minors[i]``). Roles of one node meet over loopback there, roles of
  two nodes through a tunnel.

``node_env`` (top level, or per node over it) is the environment of every
command the lane runs on a node; it is part of the config the recorder captures.

A :class:`Placement` uploads executables (``remote_root/LANE/...``, its SHA-256
read back there), checks them again before each run (``remote-digest``), runs
the participants (:mod:`lanekit.session` here, :mod:`lanekit.remote_run` on
nodes) and copies every output back, a failed run's too, before any phase
judges it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from typing import Any

from .build import sha256_file
from .config import parse_nodes, role_binding
from .device import run_smi
from .refusals import RemoteDigest
from .remote import Link, remote_command
from .remote_run import run_remote, start_participant
from .session import RunResult, run_lane
from .spec import COORDINATOR_HOST, owners_of

__all__ = ["Placement", "describe"]


class Placement:
    """The machine(s) a lane's roles run on, for the length of one phase (a ``with`` block)."""

    def __init__(self, config: dict[str, Any], lane: str, out: str) -> None:
        self.config = config
        self.lane = lane
        self.out = out
        self.transport = str(config.get("transport"))
        self.nodes = parse_nodes(config)
        self.role_nodes = role_binding(config).nodes
        self.owners = owners_of(len(self.role_nodes))
        self.members = ("coordinator", *self.owners)
        self.links: list[Link] = []

    @property
    def local(self) -> bool:
        """Whether the roles run on this machine (no SSH)."""
        return not self.nodes

    def __enter__(self) -> Placement:
        try:
            for node in self.nodes:
                self.links.append(Link(node).__enter__())
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        for link in self.links:
            link.__exit__()
        self.links = []

    # -- where things are ----------------------------------------------------------

    def node_of(self, member: str) -> int:
        """The node (index) a participant runs on: one for loopback, its role's for ssh-tunnel."""
        if self.transport != "ssh-tunnel":
            return 0
        return self.role_nodes[self.owners.index(COORDINATOR_HOST if member == "coordinator" else member)]

    def root(self, member: str) -> str:
        """``remote_root/LANE`` of a participant's node (this machine's for a local lane)."""
        base = self.config["remote_root"] if self.local else self.nodes[self.node_of(member)].remote_root
        return os.path.join(str(base), self.lane)

    def remote_path(self, local: str, member: str) -> str:
        """Where an executable built under OUT lives: OUT/build/ROLE.pyz -> remote_root/LANE/ROLE.pyz, else alike."""
        rel = os.path.relpath(local, self.out)
        if rel.startswith("build" + os.sep):
            rel = rel[len("build" + os.sep) :]
        return os.path.join(self.root(member), rel)

    def where(self, member: str) -> str:
        """The machine a participant runs on, as receipts name it."""
        return "local" if self.local else self.nodes[self.node_of(member)].label

    # -- devices -------------------------------------------------------------------

    def smi(self, queries: list[list[str]]) -> list[list[str | None]]:
        """``nvidia-smi`` queries on every node (this machine: one), one connection each; None where one failed."""
        if self.local:
            return [[run_smi(argv) for argv in queries]]
        return [link.query(queries) for link in self.links]

    # -- executables and inputs ----------------------------------------------------

    def upload(self, local: str, member: str) -> tuple[str, str | None]:
        """Put an executable (and its .sha256) in place for ``member``; its path there and SHA-256 read there."""
        remote = self.remote_path(local, member)
        if self.local:
            os.makedirs(os.path.dirname(remote), exist_ok=True)
            shutil.copyfile(local, remote)
            shutil.copyfile(f"{local}.sha256", f"{remote}.sha256")
            os.chmod(remote, 0o755)
            return remote, sha256_file(remote)
        link = self.links[self.node_of(member)]
        link.upload([local, f"{local}.sha256"], os.path.dirname(remote))
        return remote, link.sha256([remote])[remote]

    def _placed(self, exes: dict[str, str], make: str | None = None) -> dict[str, tuple[str, str]]:
        """Each role's executable where it runs, with the SHA-256 of the local build it must still be.

        ``make``: a folder to make on the coordinator's node in the same connection (a run's outputs).
        """
        placed = {role: (self.remote_path(local, role), sha256_file(local)) for role, local in exes.items()}
        for index in range(max(1, len(self.links))):
            expected = {p: d for role, (p, d) in placed.items() if self.node_of(role) == index}
            if self.local:
                wrong = [
                    f"{p} is {sha256_file(p) if os.path.exists(p) else 'missing'}, not {d}"
                    for p, d in sorted(expected.items())
                    if not os.path.exists(p) or sha256_file(p) != d
                ]
                if wrong:
                    raise RemoteDigest("; ".join(wrong))
            elif expected:
                self.links[index].verify(expected, make if index == self.node_of("coordinator") else None)
        return placed

    def _send(self, member: str, folder: str, files: list[str]) -> list[str]:
        """Upload input files to a fresh folder of a participant's node; refuse unless their SHA-256 holds there."""
        link = self.links[self.node_of(member)]
        link.upload(files, folder)
        remote = [os.path.join(folder, os.path.basename(f)) for f in files]
        link.verify({r: sha256_file(f) for r, f in zip(remote, files, strict=True)})
        return remote

    # -- runs ----------------------------------------------------------------------

    def run(
        self,
        exes: dict[str, str],
        label: str,
        folder: str,
        *,
        updates: int,
        epoch: int,
        resume: str | None = None,
        resume_membership: str | None = None,
        shadow: bool = False,
        timeout: float = 300.0,
    ) -> tuple[RunResult, dict[str, str]]:
        """One run of the lane (``exes``: each role's local build); its outputs are in ``folder`` afterwards."""
        files = {name: os.path.join(folder, f"{name}.json") for name in ("checkpoint", "trajectory", "membership")}
        os.makedirs(folder, exist_ok=True)
        token = f"{label}-{secrets.token_hex(4)}"
        run_dir = os.path.join(self.root("coordinator"), "runs", token)
        placed = self._placed(exes, None if self.local else run_dir)
        if self.local:
            result = run_lane(
                {role: path for role, (path, _) in placed.items()},
                updates=updates,
                epoch=epoch,
                checkpoint_out=files["checkpoint"],
                trajectory_out=files["trajectory"],
                membership_out=files["membership"],
                resume=resume,
                resume_membership=resume_membership,
                shadow=shadow,
                timeout=timeout,
            )
            return result, files
        home = self.links[self.node_of("coordinator")]
        args = ["--epoch", str(epoch), "--updates", str(updates)]
        for name in ("checkpoint", "trajectory", "membership"):
            args += [f"--{name}-out", os.path.join(run_dir, f"{name}.json")]
        inputs = [p for p in (resume, resume_membership) if p]
        if inputs:
            sent = self._send("coordinator", os.path.join(self.root("coordinator"), "inputs", token), inputs)
            if resume:
                args += ["--resume", sent[0]]
            if resume_membership:
                args += ["--resume-membership", sent[-1]]
        try:
            result = run_remote(
                self.links,
                {m: self.node_of(m) for m in self.members},
                placed,
                label=label,
                transport=self.transport,
                coordinator_args=args,
                owner_args=["--epoch", str(epoch), *(["--shadow"] if shadow else [])],
                timeout=timeout,
            )
        finally:
            home.fetch(run_dir, folder)  # every output, a failed run's too, before anything is judged
        return result, files

    def evaluate(self, exe: str, label: str, checkpoint: str, output: str) -> tuple[int, str, str]:
        """A fresh process of owner-0's executable evaluates ``checkpoint``: (exit code, stdout, all output).

        The output file is written where the process runs and copied back to ``output``.
        """
        role = "owner-0"
        token = f"{label}-{secrets.token_hex(4)}"
        run_dir = os.path.join(self.root(role), "runs", token)
        (path, digest) = self._placed({role: exe}, None if self.local else run_dir)[role]
        if self.local:
            done = subprocess.run(
                [sys.executable, path, "evaluate", "--checkpoint", checkpoint, "--output", output],
                capture_output=True,
                text=True,
                check=False,
            )
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            return done.returncode, done.stdout, done.stdout + done.stderr
        link = self.links[self.node_of(role)]
        (sent,) = self._send(role, os.path.join(self.root(role), "inputs", token), [checkpoint])
        remote_out = os.path.join(run_dir, os.path.basename(output))
        try:
            part = start_participant(
                link,
                f"{label}.{role}",
                role,
                path,
                digest,
                ["evaluate", "--checkpoint", sent, "--output", remote_out],
            )
            part.close_stdin()
            code = part.proc.wait()
            for t in part.pumps:
                t.join(5)
        finally:
            link.fetch(run_dir, os.path.dirname(output))
        return code, "".join(part.stdout), "".join(part.output)


def describe(placement: Placement) -> list[dict[str, Any]] | None:
    """The nodes as binding.json records them (None: this machine)."""
    if placement.local:
        return None
    return [
        {
            "host": n.host,
            "port": n.port,
            "remote_root": n.remote_root,
            "known_hosts": n.known_hosts,
            "members": [m for m in placement.members if placement.node_of(m) == n.index],
            "node_env": n.env,
            "command": remote_command([n.python, "ROLE.pyz"], n.env),
        }
        for n in placement.nodes
    ]
