"""``devices-observed`` over remote nodes: the lane's roles ran on GPUs of pods the recorder reached over SSH.

When the lane config the recorder captured (``origin: recorder``) names a host
other than ``"local"`` (or, with ``"transport": "ssh-tunnel"``, a list of
``nodes`` in role order, each carrying one role or the roles of its ``minors``:
gates/lane_roles.py), the recorder observed each node over its
own SSH connection and its ``device.observed`` events carry ``node``. Then the
check judges those observations, node by node, for each of the N roles:

1. every node was observed as DESIGN's two accounts need (:func:`node_account_findings`):
   the recorder logged into the node's observer account, which is not the
   lane's account (neither by name nor by uid), the lane's account is not root
   (uid 0) there, the observer's key came from the recorder's environment
   (``key: env``, never a file the command could read), the interpreter ran
   isolated (``-I -S``), and no other SSH session of root or of the observer's
   account was seen open on the node during the recording; else inconclusive,
   naming the reason and the fix. A node observed by a recorder before the
   two-account rule (no such facts) is inconclusive too;
2. every node the config names was observed, from ``start`` to ``end``, by the
   observer ``nvml`` over a connection whose host key the recorder verified
   (one fingerprint per node throughout); a node refused (unknown or changed
   host key), unreachable, without python3 or NVML (observer ``none``, with the
   reason), simulated, or lost mid-run (``node.lost``) is inconclusive, naming
   the node and the reason;
3. each GPU the preflight binds is one its role's node observed, with the same
   name and driver (else fail); no GPU UUID is observed on two nodes (two
   nodes that show one card are one machine: inconclusive);
4. processes are tied to roles by digest alone (no node process is of the
   recorded tree): each role's own executable must be seen working on its bound
   GPU of its node during the run steps; one running a role's executable on
   another GPU fails; a process on a bound GPU during a run step whose digest
   is no role's is inconclusive (another tenant, or a lane process the
   recorder cannot recognise); a process seen exiting (its script closed by its
   interpreter's finalisation, or its ``/proc`` entry gone while NVML still lists
   it) keeps the identity it was read with under the same pid and ``exe``;
5. a bound GPU with memory or activity its listed processes do not explain is
   shared: inconclusive (as on the recorder's own machine);
6. a bound GPU's health in doubt on its node (gates/health.py) is inconclusive,
   named with its node.

Streams of recorders before remote nodes (``stream.open`` without
``observes_nodes: true`` and no observation with ``node``) are judged by the
rules of the recorder's own machine, as they were sealed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aos import kinds
from aos.event import Event
from gates.devices import (
    RUN_STEPS,
    Told,
    _carry_identity,
    _during,
    _list,
    _Process,
    _processes,
    _Roles,
    _shared_findings,
    devices_observed,
    lane_preflight,
    placed,
    preflight_gpus,
    run_intervals,
    works_on,
)
from gates.evidence import Evidence, Receipt
from gates.health import bound_gpus, health_findings
from gates.lane_roles import captured_config, role_nodes
from gates.typing import Findings, Outcome

__all__ = ["config_nodes", "devices_observed_anywhere", "devices_observed_on_nodes", "node_account_findings"]

LOCAL = ("", "local")


def config_nodes(ev: Evidence, config_env: Any) -> tuple[list[tuple[str, int | None]], str | None] | None:
    """The remote nodes the recorder-captured lane config names, in node order (``(host, port)``), and its
    transport; None when it names none (the roles run on the recorder's own machine)."""
    doc = captured_config(ev, config_env)
    if doc is None:
        return None
    transport = doc.get("transport")
    entries = doc.get("nodes") if transport == "ssh-tunnel" else [doc]
    if not isinstance(entries, list):
        return None
    nodes = []
    for e in entries:
        host = str(e.get("host") or "").strip() if isinstance(e, dict) else ""
        if host not in LOCAL:
            port = e.get("port", doc.get("port"))  # a node's port defaults to the top level's
            nodes.append((host, int(port) if isinstance(port, int) else None))
    return (nodes, str(transport) if transport is not None else None) if nodes else None


def _name(host: str, port: int | None) -> str:
    return f"{host}:{port}" if port is not None else host


def _of(o: Event, host: str, port: int | None) -> bool:
    node = o.attrs.get("node")
    return isinstance(node, dict) and node.get("host") == host and (port is None or node.get("port") == port)


def node_account_findings(name: str, obs: Sequence[Event], lost: Sequence[Event], f: Findings) -> None:
    """Inconclusive unless the node was observed through an observer account the lane could not speak for (the
    module's rule 1), each reason with its fix."""
    facts = [o.attrs["node"] for o in [*obs, *lost] if isinstance(o.attrs.get("node"), Mapping)]
    first = facts[0] if facts else {}
    if not facts or not all(k in first for k in ("lane_user", "lane_uid", "observer_uid", "key", "sessions")):
        f.use([obs[0].seq] if obs else [])
        f.inconclusive(
            f"node {name}: observed before the two-account rule (no observer and lane accounts or key source "
            "recorded): record it again, observing as the node's observer account (docs/TRUST.md)"
        )
        return
    f.use([obs[0].seq])
    _account_findings(name, first, f)
    _session_findings(name, facts, first, f)


def _account_findings(name: str, first: Mapping[str, Any], f: Findings) -> None:
    """Inconclusive unless the observer's account is not the lane's, the lane's is not root, the observer's key
    came from the recorder's environment and its interpreter ran isolated."""
    user, lane = first.get("user"), first.get("lane_user")
    observer_uid, lane_uid = first.get("observer_uid"), first.get("lane_uid")
    fix = "give the lane an unprivileged account of its own (useradd, its own authorized_keys) and observe as root"
    if user == lane or (isinstance(observer_uid, int) and observer_uid == lane_uid):
        f.inconclusive(
            f"node {name}: the observer and the lane share the account {lane} (uid {lane_uid}): whatever the lane "
            f"planted there could have spoken for the observer; {fix}"
        )
    if lane_uid == 0:
        f.inconclusive(
            f"node {name}: the lane's account {lane} is root (uid 0) on the node, and root can forge any "
            "observation there; run the lane as an unprivileged user (useradd; the GPU device files are usually 0666)"
        )
    elif not isinstance(lane_uid, int):
        f.inconclusive(f"node {name}: the observer found no account {lane} (the lane's) on the node; {fix}")
    if not isinstance(observer_uid, int):
        f.inconclusive(f"node {name}: the observer's uid on the node was not recorded")
    if first.get("key") != "env":
        f.inconclusive(
            f"node {name}: the observer's key came from {first.get('key') or 'nowhere'} (--observer-key FILE: a "
            "file the command could read and log in with); give it with --observer-key-env NAME"
        )
    if first.get("isolated") is not True:
        f.inconclusive(f"node {name}: the observer's interpreter did not run isolated (-I -S)")


def _session_findings(name: str, facts: Sequence[Mapping[str, Any]], first: Mapping[str, Any], f: Findings) -> None:
    """Inconclusive when another SSH session of root or of the observer's account was open on the node."""
    user, observer_uid = first.get("user"), first.get("observer_uid")
    seen: dict[int, Mapping[str, Any]] = {}
    for x in facts:
        for s in _list(x.get("sessions")):
            if isinstance(s.get("pid"), int):
                seen.setdefault(s["pid"], s)
    privileged = [
        s
        for s in seen.values()
        if s.get("observer") is not True  # another observer of the same bundle (two hosts on one machine)
        and (
            s.get("user") in ("root", user)
            or s.get("uid") == 0
            or (observer_uid is not None and s.get("uid") == observer_uid)
        )
    ]
    if privileged or any(x.get("sessions_truncated") for x in facts):
        listed = ", ".join(f"{s.get('user')} (pid {s.get('pid')})" for s in privileged[:5]) or "too many to list"
        f.inconclusive(
            f"node {name}: other SSH sessions of root or of the observer's account were open during the recording: "
            f"{listed}; whoever held them could change what the observer saw; record with no other root session "
            "on the node"
        )


def _nvml_findings(name: str, obs: Sequence[Event], f: Findings) -> bool:
    """Whether every observation of the node is NVML's own (else inconclusive, at the first that is not)."""
    for o in obs:
        a = o.attrs
        if a.get("observer") == "simulated" or a.get("simulated_from") is not None:
            f.use([o.seq])
            f.inconclusive(f"node {name}: the devices were simulated (seq {o.seq}): never a physical GPU")
            return False
        if a.get("observer") != "nvml":
            f.use([o.seq])
            f.inconclusive(f"node {name}: unknown device observer {a.get('observer')!r} (seq {o.seq})")
            return False
    return True


def _node_findings(name: str, obs: Sequence[Event], lost: Sequence[Event], f: Findings) -> dict[str, Any] | None:
    """Inconclusive unless the node was observed by nvml, over a verified host key, start to end; the node's
    facts (from its start observation) when it was."""
    if not obs:
        f.inconclusive(f"node {name}: the recorder recorded no observation of it")
        return None
    for o in obs:
        a = o.attrs
        if a.get("observer") == "none" or not (a.get("node") or {}).get("host_key_verified"):
            f.use([o.seq])
            f.inconclusive(f"node {name}: observer none (seq {o.seq}): {a.get('error') or 'no reason recorded'}")
            return None
    node_account_findings(name, obs, lost, f)
    if not _nvml_findings(name, obs, f):
        return None
    for e in lost:
        f.use([e.seq])
        f.inconclusive(f"node {name} was lost during the recording (seq {e.seq}): {e.attrs.get('reason')}")
    phases = {str(o.attrs.get("phase")) for o in obs}
    for phase in ("start", "end"):
        if phase not in phases:
            f.inconclusive(f"node {name}: no {phase} observation")
    keys = {str(((o.attrs.get("node") or {}).get("host_key") or {}).get("sha256")) for o in obs}
    libraries = {str((o.attrs.get("library") or {}).get("sha256")) for o in obs}
    drivers = {str(o.attrs.get("driver")) for o in obs}
    if len(keys) > 1:
        f.fail(f"node {name}: the verified host key changed during the recording: {sorted(keys)}")
    if len(libraries) > 1 or len(drivers) > 1:
        f.fail(f"node {name}: the driver or NVML library changed during the recording")
    f.use([obs[0].seq, obs[-1].seq])
    return dict(obs[0].attrs.get("node") or {}) | {
        "driver": obs[0].attrs.get("driver"),
        "library": obs[0].attrs.get("library"),
    }


Node = tuple[str, "int | None"]


def devices_observed_on_nodes(
    ev: Evidence,
    nodes: list[tuple[str, int | None]],
    transport: str | None,
    run_steps: tuple[str, ...],
    config_env: Any = None,
) -> Outcome:
    """The check of the module's docstring."""
    f = Findings()
    node_obs = {n: [o for o in ev.observations if _of(o, *n)] for n in nodes}
    lost = {n: [e for e in ev.events if e.kind == kinds.NODE_LOST and _of(e, *n)] for n in nodes}
    facts = {n: _node_findings(_name(*n), node_obs[n], lost[n], f) for n in nodes}
    bound = bound_gpus(ev)
    for n in nodes:
        health_findings(node_obs[n], bound, f, f"node {_name(*n)}: ")
    if not f.ok:
        return f.outcome("")
    seen_gpus = _node_gpus(nodes, node_obs, f)
    pre = lane_preflight(ev, f)
    if pre is None:
        return f.outcome("")
    roles = _Roles(ev, pre, f)
    homes = _Homes(ev, nodes, transport, config_env)
    claimed = preflight_gpus(pre, f)
    if not claimed:
        return f.outcome("")
    for g in claimed:
        _node_claim_findings(pre, g, roles, homes, seen_gpus, facts, f)
    intervals = run_intervals(ev, run_steps, f)
    if not intervals:
        return f.outcome("")
    judged = _NodeAttribution(roles, homes, f)
    for n in nodes:
        judged.judge(n, node_obs[n], intervals)
    _node_role_findings(roles, homes, judged.seen, f)
    return f.outcome(
        "observer nvml on " + "; ".join(_described(n, facts[n]) for n in nodes) + "; the preflight's GPUs are ones "
        "each role's node showed; processes attributed by the SHA-256 of what they execute: "
        + "; ".join(judged.seen.values())
    )


def _node_gpus(
    nodes: Sequence[Node], node_obs: Mapping[Node, Sequence[Event]], f: Findings
) -> dict[Node, dict[str, dict[str, Any]]]:
    """The GPUs each node showed, by UUID; inconclusive when two nodes showed one GPU (they are one machine)."""
    seen_gpus: dict[Node, dict[str, dict[str, Any]]] = {}
    for n in nodes:
        gpus = seen_gpus.setdefault(n, {})
        for o in node_obs[n]:
            for g in _list(o.attrs.get("gpus")):
                if isinstance(g.get("uuid"), str):
                    gpus.setdefault(g["uuid"], g)
    where: dict[str, set[str]] = {}
    for n, gpus in seen_gpus.items():
        for uuid in gpus:
            where.setdefault(uuid, set()).add(_name(*n))
    for uuid, names in where.items():
        if len(names) > 1:
            f.inconclusive(f"GPU {uuid} was observed on nodes {', '.join(sorted(names))}: they are one machine")
    return seen_gpus


class _Homes:
    """The node each role runs on: with ``"transport": "ssh-tunnel"`` and several nodes, the node the captured
    config gives the role (its place in the roles the nodes carry, in role order: the lane's ``static-build``
    receipts); else the one node."""

    def __init__(self, ev: Evidence, nodes: Sequence[Node], transport: str | None, config_env: Any = None) -> None:
        self.nodes = list(nodes)
        self.order = list(dict.fromkeys(str(r.fields.get("role")) for r in ev.receipts_named("static-build")))
        self.per_node = transport == "ssh-tunnel" and len(nodes) > 1
        doc = captured_config(ev, config_env)
        carried = role_nodes(doc) if doc is not None else None
        #: Each role's node index, in role order; one role per node where the config says no more.
        self.carried = carried if carried is not None else list(range(len(self.nodes)))

    def of(self, role: str) -> Node | None:
        if not self.per_node:
            return self.nodes[0]
        i = self.order.index(role) if role in self.order else -1
        node = self.carried[i] if 0 <= i < len(self.carried) else -1
        return self.nodes[node] if 0 <= node < len(self.nodes) else None


def _node_claim_findings(
    pre: Receipt,
    g: Mapping[str, Any],
    roles: _Roles,
    homes: _Homes,
    seen_gpus: Mapping[Node, Mapping[str, Mapping[str, Any]]],
    facts: Mapping[Node, Mapping[str, Any] | None],
    f: Findings,
) -> None:
    """Fail unless the preflight's GPU ``g`` is one its role's node showed, with the same name and driver."""
    gpu_uuid = g.get("uuid")
    owner: str | None = next((r for r, u in roles.of_role.items() if u == gpu_uuid), None)
    n = homes.of(owner) if owner is not None else None
    if n is None:
        f.inconclusive(f"the preflight's GPU {gpu_uuid} is bound to no role that a node of the lane config runs")
        return
    observed = seen_gpus.get(n, {}).get(gpu_uuid) if isinstance(gpu_uuid, str) else None
    driver = (facts[n] or {}).get("driver")
    if observed is None:
        f.fail(
            f"the preflight (seq {pre.seq}) names GPU {gpu_uuid} ({g.get('product')}) for {owner}, which the "
            f"recorder never observed on node {_name(*n)} "
            f"(it observed: {', '.join(seen_gpus.get(n, {})) or 'none'})"
        )
        return
    if g.get("product") != observed.get("name"):
        f.fail(
            f"node {_name(*n)}: the preflight says GPU {gpu_uuid} is a {g.get('product')!r}; observed a "
            f"{observed.get('name')!r}"
        )
    if driver is not None and str(g.get("driver")) != str(driver):
        f.fail(
            f"node {_name(*n)}: the preflight says GPU {gpu_uuid} runs driver {g.get('driver')!r}; observed {driver!r}"
        )


class _NodeAttribution:
    """Each node's processes on the GPUs, tied to roles by digest alone (the module's rule 4)."""

    def __init__(self, roles: _Roles, homes: _Homes, f: Findings) -> None:
        self.roles, self.homes, self.f = roles, homes, f
        self.told = Told()
        self.seen: dict[str, str] = {}  # role -> its own process on its GPU of its node in a run step

    def judge(self, n: Node, obs: Sequence[Event], intervals: Sequence[tuple[str, int, int]]) -> None:
        name = _name(*n)
        mine = {u for r, u in self.roles.of_role.items() if self.homes.of(r) == n}
        _shared_findings(obs, mine, self.f)
        identified: dict[int, tuple[str, str | None]] = {}  # pid -> (exe, script) read in full on this node
        for o in obs:
            step_now = _during(o.seq, intervals)
            if o.attrs.get("attribution") == "unavailable":
                if self.told.first((name, -1, "")):
                    self.f.use([o.seq])
                    self.f.inconclusive(f"node {name}: NVML could not attribute processes (seq {o.seq})")
                continue
            for proc in _processes(o):
                _carry_identity(proc, identified)
                self._process(n, mine, proc, o, step_now)

    def _process(self, n: Node, mine: set[str], proc: _Process, o: Event, step_now: str | None) -> None:
        f, name = self.f, _name(*n)
        work, listed, on = placed(proc)
        role = self.roles.role_of(proc)
        what = proc.describe()
        if role is None:
            if step_now is not None and (mine & set(listed)) and self.told.first((name, proc.pid, on)):
                f.use([o.seq])
                f.inconclusive(
                    f"node {name}: {what} ran on bound GPU {on} during {step_now} (seq {o.seq}), but what it "
                    "executes is no role's captured executable: unattributable"
                )
            return
        want = self.roles.of_role.get(role)
        home = self.homes.of(role)
        if not (home == n and want is not None and works_on(work, listed, want)):
            if self.told.first((name, proc.pid, on)):
                f.use([o.seq])
                f.fail(
                    f"node {name}: {role}'s {what} worked on GPU {on}, but {role} is bound to GPU {want}"
                    + (f" of node {_name(*home)}" if home is not None else "")
                    + f" (seq {o.seq})"
                )
            return
        if step_now is not None and role not in self.seen:
            f.use([o.seq])
            self.seen[role] = f"{role}'s {what} on GPU {want} of node {name} during {step_now} (seq {o.seq})"


def _node_role_findings(roles: _Roles, homes: _Homes, seen: Mapping[str, str], f: Findings) -> None:
    """Inconclusive for a role whose own process no node showed on its GPU, or whose executable was not captured."""
    for role in roles.of_role:
        if role not in seen and role in roles.executables:
            home = homes.of(role)
            f.inconclusive(
                f"{role}'s own process (running its captured executable) was not seen on its bound GPU "
                f"{roles.of_role[role]} of node {_name(*home) if home else '?'} during the run steps"
            )
        elif role not in roles.executables:
            f.inconclusive(f"no captured executable of {role}: its processes cannot be recognised on a node")


def _described(n: Node, facts: Mapping[str, Any] | None) -> str:
    """A node as a pass names it: its host key, the observer's digest, driver, NVML and PID namespace."""
    x = facts or {}
    lib: Mapping[str, Any] = x["library"] if isinstance(x.get("library"), Mapping) else {}
    key: Mapping[str, Any] = x["host_key"] if isinstance(x.get("host_key"), Mapping) else {}
    return (
        f"node {_name(*n)} (host key {key.get('sha256')}, observer sha256 {str(x.get('observer_sha256'))[:12]}, "
        f"driver {x.get('driver')}, NVML sha256 {str(lib.get('sha256'))[:12]}, PID namespace "
        f"{x.get('pid_namespace')})"
    )


def devices_observed_anywhere(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """``devices-observed``: over the remote nodes the captured lane config names, else on the recorder's machine."""
    remote = config_nodes(ev, args.get("config_env"))
    opened = ev.first.attrs if ev.first is not None and ev.first.kind == kinds.STREAM_OPEN else {}
    nodes_seen = any(isinstance(o.attrs.get("node"), dict) for o in ev.observations)
    if remote is None or not (opened.get("observes_nodes") is True or nodes_seen):
        # A recorder before remote nodes observed only its own machine (a "localhost" host was this machine
        # then): its streams are judged as they were sealed.
        return devices_observed(ev, args)
    run_steps = tuple(str(s) for s in args.get("steps", RUN_STEPS))
    return devices_observed_on_nodes(ev, remote[0], remote[1], run_steps, args.get("config_env"))
