"""``devices-observed``: physical scope rests on what the recorder observed, never on what the lane says.

The recorder queries NVML itself and appends ``device.observed`` events (and
``telemetry``); a command can send receipts and artifacts, but no event of
those kinds. This check binds the lane's claims to those observations:

1. the observer is ``nvml`` in every observation, from its start to its end
   (``simulated`` and ``none`` are never a physical device: inconclusive);
2. every GPU the ``preflight`` receipt names is one the recorder observed,
   with the same name and driver (else fail);
3. processes are tied to roles by identity only: the SHA-256 of the file the
   kernel executed (``exe``) or, for an interpreter, of the script file it holds
   open (``script``), compared with the bytes of each role's executables as the
   stream captured them (the targets of its ``static-build`` and ``build``
   receipts). argv is for display. A role's process working on a GPU other than
   its role's fails, wherever and whenever it is seen; each role's own process
   must be seen on its own bound GPU during the run steps (descending from one of
   them); a process seen exiting (its script closed by its interpreter's
   finalisation, or its ``/proc`` entry gone while NVML still lists it) keeps
   the identity it was read with earlier under the same pid and ``exe``;
   a process on a bound GPU during a run step that is tied to no role
   (another tenant, or a process of the tree running no role's executable) makes
   it inconclusive; a process of the tree on a GPU no role is bound to fails;
4. a bound GPU is shared when memory in use that the listed processes do not
   explain exceeds ``IDLE_MEMORY``, or it is busy while listing no process
   (NVML inside a container lists only that container's processes):
   inconclusive, never physical;
5. a bound GPU whose health was in doubt during the recording (a critical XID,
   uncorrected ECC errors growing, a pending or failed row remap, a pending
   retired page: gates/health.py) is inconclusive.

When the lane config the recorder captured names remote nodes (pods over SSH),
the same rules are applied to each node's own observations instead
(gates/devices_nodes.py, which registers the check); here, only this
machine's observations (those without ``node``) count.

Streams whose observations carry no identities (recorded before this rule,
without ``namespace``) are inconclusive: "recorded before attribution by
identity".

A process listed on several GPUs works on the one where it holds the most
memory: a CUDA process on one card can hold a small context on another.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aos.attrs import json_int
from aos.event import Event
from gates.evidence import Evidence, Receipt
from gates.health import bound_gpus, health_findings
from gates.typing import Findings, Outcome
from gates.wording import count

__all__ = [
    "IDLE_MEMORY",
    "RUN_STEPS",
    "Told",
    "devices_observed",
    "placed",
    "preflight_gpus",
    "run_intervals",
    "works_on",
]

#: The lane steps whose roles run on the device (docs/GATES.md, "Lane receipts").
RUN_STEPS: tuple[str, ...] = ("uninterrupted-run", "split-run", "host-shadow-control", "fresh-evaluation")

#: A card's idle level: the most memory in use that no listed process explains on a card nobody uses.
#: An idle H200 (driver 580) reports 615 MiB in use with no process at all, and about 8 MiB more per
#: CUDA context beyond what its processes are listed with; a CUDA context alone takes about 500 MiB.
#: Above this, memory is held by a process NVML does not list (another PID namespace): shared.
IDLE_MEMORY = 768 << 20

_MIB = 1 << 20
#: What the rule calls a stream recorded before it.
BEFORE_IDENTITY = "recorded before attribution by identity"


def lane_preflight(ev: Evidence, f: Findings) -> Receipt | None:
    """The lane's last `preflight` receipt (the GPUs it bound), used; None, inconclusive, when there is none."""
    preflights = ev.receipts_named("preflight")
    if not preflights:
        f.inconclusive("no preflight receipt: no bound GPU to compare with what the recorder observed")
        return None
    f.use([preflights[-1].seq])
    return preflights[-1]


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _digest(value: Any) -> str | None:
    sha = value.get("sha256") if isinstance(value, dict) else None
    return sha.lower() if isinstance(sha, str) else None


def _name(value: Any) -> str | None:
    path = value.get("path") if isinstance(value, dict) else None
    return posixpath.basename(path) if isinstance(path, str) and path else None


class _Roles:
    """Which role each GPU is bound to, and the digests of each role's captured executables."""

    def __init__(self, ev: Evidence, preflight: Receipt, f: Findings) -> None:
        self.ev = ev
        gpus = _list(preflight.fields.get("gpus"))
        self.bound: list[str] = list(dict.fromkeys(g["uuid"] for g in gpus if isinstance(g.get("uuid"), str)))
        builds = ev.receipts_named("static-build")
        order = list(dict.fromkeys(str(r.fields.get("role")) for r in builds if r.fields.get("role")))
        self.of_role: dict[str, str] = {}
        if not self._bind(preflight, f) and len(order) == len(gpus):
            # docs/GATES.md: the preflight's gpus are one per role binding, in role order.
            self.of_role = {role: str(g.get("uuid")) for role, g in zip(order, gpus, strict=True)}
        f.use(r.seq for r in builds)
        self._capture(ev, [*builds, *ev.receipts_named("build")], f)

    def _bind(self, preflight: Receipt, f: Findings) -> bool:
        """The roles of the binding artifact the preflight names (``roles``: role -> ``{"uuid"}``); False when
        there is none; fail for a role bound to a GPU the preflight does not name."""
        path = preflight.fields.get("binding")
        art = self.ev.artifact(path) if isinstance(path, str) and path else None
        doc: Any = None
        if art is not None:
            try:
                doc = art.json()
            except ValueError:
                doc = None
        roles = doc.get("roles") if isinstance(doc, dict) else None
        if not isinstance(roles, dict) or not roles:
            return False
        f.use(art.seqs if art is not None else [])
        for role, b in roles.items():
            uuid = b.get("uuid") if isinstance(b, dict) else None
            if not isinstance(uuid, str):
                continue
            self.of_role[str(role)] = uuid
            if uuid not in self.bound:
                f.fail(f"{path} binds {role} to GPU {uuid}, which the preflight (seq {preflight.seq}) does not name")
        return True

    def _capture(self, ev: Evidence, receipts: Sequence[Receipt], f: Findings) -> None:
        """The bytes of each role's executables, as captured: never a digest a receipt states."""
        self.executables: dict[str, set[str]] = {}
        self.uncaptured: dict[str, list[str]] = {}
        for r in receipts:
            role, target = r.fields.get("role"), r.fields.get("target")
            if not isinstance(role, str) or not isinstance(target, str) or not target:
                continue
            captured = ev.artifact(target)
            sha = captured.sha256()[0] if captured is not None else None
            if sha is None:
                self.uncaptured.setdefault(role, []).append(target)
                continue
            f.use(captured.seqs[:1] if captured is not None else [])
            self.executables.setdefault(role, set()).add(sha)
        owners: dict[str, set[str]] = {}
        for role, digests in self.executables.items():
            for sha in digests:
                owners.setdefault(sha, set()).add(role)
        #: A digest that one role's executables alone carry names that role; one shared by roles names none.
        self.by_digest = {sha: next(iter(rs)) for sha, rs in owners.items() if len(rs) == 1}

    def roles_on(self, uuid: str) -> list[str]:
        return [r for r, u in self.of_role.items() if u == uuid]

    def role_of(self, proc: _Process) -> str | None:
        """The role whose captured executable this process runs (by its exe, else by its held script)."""
        for sha in (proc.exe, proc.script):
            if sha is not None and sha in self.by_digest:
                return self.by_digest[sha]
        return None


@dataclass
class _Process:
    pid: int
    entries: list[tuple[str, int | None]]  # (gpu uuid, used memory)
    in_tree: bool
    steps: list[str]
    exe: str | None = None
    script: str | None = None
    shown: str = "?"

    def work(self) -> tuple[str | None, list[str]]:
        """The GPU this process works on (None when it cannot be told), and every GPU it was listed on."""
        gpus = list(dict.fromkeys(g for g, _ in self.entries))
        if len(gpus) == 1:
            return gpus[0], gpus
        if any(m is None for _, m in self.entries):
            return None, gpus
        per: dict[str, int] = {}
        for g, m in self.entries:
            per[g] = per.get(g, 0) + (m or 0)
        top = max(per.values())
        winners = [g for g, m in per.items() if m == top]
        return (winners[0] if len(winners) == 1 else None), gpus

    def describe(self) -> str:
        """``pid N (NAMES: exe sha256 ..., script sha256 ...)``: the names are the recorded paths' basenames."""
        digests = [f"{what} sha256 {sha[:12]}" for what, sha in (("exe", self.exe), ("script", self.script)) if sha]
        return f"pid {self.pid} ({self.shown}: {', '.join(digests) or 'no identity recorded'})"


def _processes(o: Event) -> list[_Process]:
    by_pid: dict[int, _Process] = {}
    for p in _list(o.attrs.get("processes")):
        pid, gpu = json_int(p.get("pid")), p.get("gpu")
        if pid is None or not isinstance(gpu, str):
            continue
        steps = [str(s) for s in p.get("steps") or [] if isinstance(s, str)]
        proc = by_pid.setdefault(pid, _Process(pid, [], False, []))
        proc.entries.append((gpu, json_int(p.get("used_memory"))))
        proc.in_tree = proc.in_tree or p.get("in_tree") is True
        proc.steps += [s for s in steps if s not in proc.steps]
        proc.exe = proc.exe or _digest(p.get("exe"))
        proc.script = proc.script or _digest(p.get("script"))
        names = [n for n in (_name(p.get("exe")), _name(p.get("script"))) if n]
        if names and proc.shown == "?":
            proc.shown = " ".join(names)
    return list(by_pid.values())


def _intervals(ev: Evidence, steps: Sequence[str]) -> list[tuple[str, int, int]]:
    out = []
    for s in ev.steps:
        if s.name in steps:
            out.append((s.name, s.start.seq, s.end.seq if s.end is not None else ev.count))
    return out


def _during(seq: int, intervals: Iterable[tuple[str, int, int]]) -> str | None:
    for name, lo, hi in intervals:
        if lo < seq < hi:
            return name
    return None


def _observer_findings(obs: list[Event], f: Findings) -> None:
    """Inconclusive unless every observation is NVML's own, not simulated."""
    for o in obs:
        a = o.attrs
        observer = a.get("observer")
        simulated = a.get("simulated_from")
        if observer == "simulated" or simulated is not None:
            src = simulated.get("path") if isinstance(simulated, dict) else None
            f.inconclusive(
                f"the devices were simulated (observer {observer!r}"
                + (f", from {src}" if src else "")
                + f", seq {o.seq}): a simulation never shows a physical GPU"
            )
            return
    for o in obs:
        observer = o.attrs.get("observer")
        if observer == "none":
            error = o.attrs.get("error")
            f.inconclusive(
                f"observer none (seq {o.seq}): the recorder could not query NVML"
                + (f" ({error})" if error else "")
                + ", so no GPU was observed"
            )
            return
        if observer != "nvml":
            f.inconclusive(f"unknown device observer {observer!r} (seq {o.seq})")
            return


def devices_observed(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """Observer nvml; the preflight's GPUs are the recorder's; each bound GPU ran the recorded tree in the run steps."""
    f = Findings()
    run_steps = tuple(str(s) for s in args.get("steps", RUN_STEPS))
    obs = [o for o in ev.observations if not isinstance(o.attrs.get("node"), dict)]  # this machine's own
    if not obs:
        f.inconclusive(
            "no device observation: the recorder recorded no device.observed event, so nothing the recorder "
            "saw shows a GPU (the lane's receipts and its own nvidia-smi output are claims, not observations)"
        )
        return f.outcome("")
    health_findings(obs, bound_gpus(ev), f)
    machine = _machine_findings(obs, f)
    if machine is None:
        return f.outcome("")
    # The lane's claims: the preflight names the GPUs it bound.
    pre = lane_preflight(ev, f)
    claimed = preflight_gpus(pre, f) if pre is not None else []
    if pre is None or not claimed:
        return f.outcome("")
    _claim_findings(pre, claimed, machine, f)
    roles = _Roles(ev, pre, f)
    intervals = run_intervals(ev, run_steps, f)
    if not intervals or _before_identity(obs, f):
        return f.outcome("")
    _shared_findings(obs, set(roles.bound), f)
    _uncaptured_findings(roles, f)
    judged = _LocalAttribution(roles, run_steps, f)
    judged.judge(obs, intervals)
    notes = _role_seen_findings(roles, judged.seen, intervals, f)
    return f.outcome(_summary(obs, roles, claimed, machine) + "; ".join(notes))


@dataclass
class _Machine:
    """What the recorder saw of one machine: its driver, its NVML libraries, and its GPUs by UUID."""

    driver: str | None
    libraries: set[tuple[str, str]]
    gpus: dict[str, dict[str, Any]]


def _machine_findings(obs: Sequence[Event], f: Findings) -> _Machine | None:
    """The observer, phases, driver, library and GPUs of this machine's observations; None when judging ends."""
    _observer_findings(list(obs), f)
    if not f.ok:
        f.use(o.seq for o in obs[:1])
        return None
    phases = {str(o.attrs.get("phase")): o for o in obs}
    for phase in ("start", "end"):
        if phase in phases:
            f.use([phases[phase].seq])
        else:
            f.inconclusive(f"the device observation has no {phase} (no device.observed of phase {phase!r})")
    # What the recorder saw: one driver, one NVML library, and the GPUs by UUID.
    drivers = {str(o.attrs["driver"]) for o in obs if o.attrs.get("driver")}
    libraries = {
        (str(lib.get("path")), str(lib.get("sha256")))
        for lib in (o.attrs.get("library") for o in obs)
        if isinstance(lib, dict)
    }
    if len(drivers) > 1:
        f.fail(f"the observed driver changed during the recording: {sorted(drivers)}")
    if len(libraries) > 1:
        f.fail(f"the NVML library changed during the recording: {sorted(libraries)}")
    if not drivers:
        f.inconclusive("no observation names the driver")
    seen_gpus = _seen_gpus(obs, f)
    errors = [o for o in obs if o.attrs.get("error")]
    if not seen_gpus and errors:
        f.use([errors[0].seq])
        f.inconclusive(f"NVML listed no GPU: {errors[0].attrs.get('error')} (seq {errors[0].seq})")
        return None
    return _Machine(next(iter(drivers)) if len(drivers) == 1 else None, libraries, seen_gpus)


def _seen_gpus(obs: Sequence[Event], f: Findings) -> dict[str, dict[str, Any]]:
    """The GPUs observed, by UUID (the first observation of each); fail when one changed its name."""
    seen_gpus: dict[str, dict[str, Any]] = {}
    for o in obs:
        for g in _list(o.attrs.get("gpus")):
            uuid = g.get("uuid")
            if not isinstance(uuid, str):
                continue
            before = seen_gpus.setdefault(uuid, g)
            if before.get("name") != g.get("name"):
                f.use([o.seq])
                f.fail(f"GPU {uuid} was observed as {before.get('name')!r} and as {g.get('name')!r}")
    return seen_gpus


def preflight_gpus(pre: Receipt, f: Findings) -> list[dict[str, Any]]:
    """The GPUs the preflight binds; inconclusive when it names none."""
    claimed = _list(pre.fields.get("gpus"))
    if not claimed:
        f.inconclusive(f"the preflight (seq {pre.seq}) names no GPU: no binding to compare with the observation")
    return claimed


def _claim_findings(pre: Receipt, claimed: Sequence[dict[str, Any]], machine: _Machine, f: Findings) -> None:
    """Fail unless each GPU the preflight names is one the recorder observed, with the same name and driver."""
    seen_gpus, driver = machine.gpus, machine.driver
    observed_text = ", ".join(f"{u} ({g.get('name')})" for u, g in seen_gpus.items()) or "none"
    for g in claimed:
        uuid, product = g.get("uuid"), g.get("product")
        observed = seen_gpus.get(uuid) if isinstance(uuid, str) else None
        if observed is None:
            f.fail(
                f"the preflight (seq {pre.seq}) names GPU {uuid} ({product}), which the recorder never observed "
                f"(it observed: {observed_text})"
            )
            continue
        if product != observed.get("name"):
            f.fail(f"the preflight says GPU {uuid} is a {product!r}; the recorder observed a {observed.get('name')!r}")
        if driver is not None and str(g.get("driver")) != driver:
            f.fail(f"the preflight says GPU {uuid} runs driver {g.get('driver')!r}; the recorder observed {driver!r}")


def run_intervals(ev: Evidence, run_steps: Sequence[str], f: Findings) -> list[tuple[str, int, int]]:
    """The run steps' intervals of seqs; inconclusive when none was recorded."""
    intervals = _intervals(ev, run_steps)
    if not intervals:
        f.inconclusive(f"none of the run steps ({', '.join(run_steps)}) was recorded")
    return intervals


def _before_identity(obs: Sequence[Event], f: Findings) -> bool:
    """Whether the observations were recorded before attribution by identity (then inconclusive)."""
    old = [o for o in obs if "namespace" not in o.attrs]
    if old:
        f.use([old[0].seq])
        f.inconclusive(
            f"{BEFORE_IDENTITY}: the device observations (seq {old[0].seq} and {len(old) - 1} more) carry no "
            "process identity (the SHA-256 of what each process executes) and no memory unexplained by listed "
            "processes, so no process can be tied to a role and no hidden tenant ruled out"
        )
    return bool(old)


def _uncaptured_findings(roles: _Roles, f: Findings) -> None:
    """Inconclusive for each bound role none of whose executables the stream captured."""
    for name in roles.of_role:
        if name not in roles.executables:
            where = roles.uncaptured.get(name)
            f.inconclusive(
                f"no captured executable of {name}"
                + (
                    f" ({', '.join(where)} was not captured)"
                    if where
                    else " (no static-build or build receipt names one)"
                )
                + ": its processes cannot be recognised"
            )


class Told:
    """One finding per key (a process and a GPU): the first observation that shows it is the one reported."""

    def __init__(self) -> None:
        self.keys: set[tuple[Any, ...]] = set()

    def first(self, key: tuple[Any, ...]) -> bool:
        """Whether ``key`` was not reported yet (it is from now on)."""
        if key in self.keys:
            return False
        self.keys.add(key)
        return True


def placed(proc: _Process) -> tuple[str | None, list[str], str]:
    """The GPU ``proc`` works on (None: cannot be told), every GPU it was listed on, and how to name where it ran."""
    work, listed = proc.work()
    return work, listed, work or "/".join(listed)


def works_on(work: str | None, listed: Sequence[str], want: str) -> bool:
    """Whether a process placed at ``work`` (listed on ``listed``) works on GPU ``want``."""
    return work == want or (work is None and want in listed)


class _LocalAttribution:
    """This machine's processes on the GPUs, tied to roles by identity (the module's rule 3)."""

    def __init__(self, roles: _Roles, run_steps: Sequence[str], f: Findings) -> None:
        self.roles, self.bound, self.run_steps, self.f = roles, set(roles.bound), run_steps, f
        self.told = Told()
        self.identified: dict[int, tuple[str, str | None]] = {}  # pid -> (exe, script) read in full
        self.seen: dict[str, tuple[str, int]] = {}  # role -> its own process on its GPU in a run step

    def judge(self, obs: Sequence[Event], intervals: Sequence[tuple[str, int, int]]) -> None:
        for o in obs:
            step_now = _during(o.seq, intervals)
            if o.attrs.get("attribution") == "unavailable":
                if self.told.first((-1, "unavailable")):
                    self.f.use([o.seq])
                    self.f.inconclusive(
                        f"NVML could not attribute processes (attribution unavailable, seq {o.seq}): which process "
                        "ran on which GPU was not observed, so no role's process can be seen on its GPU"
                    )
                continue
            for proc in _processes(o):
                if proc.in_tree:
                    _carry_identity(proc, self.identified)  # a process seen exiting keeps the identity it was read with
                    self._of_tree(proc, o, step_now)
                else:
                    self._foreign(proc, o, step_now)

    def _foreign(self, proc: _Process, o: Event, step_now: str | None) -> None:
        """A process not of the recorded tree on a bound GPU during a run step: shared, inconclusive."""
        shared = [g for g in proc.work()[1] if g in self.bound]
        if shared and step_now is not None and self.told.first((proc.pid, shared[0])):
            self.f.use([o.seq])
            self.f.inconclusive(
                f"bound GPU {shared[0]} was shared: pid {proc.pid}, not of the recorded tree, ran on it "
                f"during {step_now} (seq {o.seq})"
            )

    def _of_tree(self, proc: _Process, o: Event, step_now: str | None) -> None:
        f, roles = self.f, self.roles
        work, listed, on = placed(proc)
        what = proc.describe()
        unbound = (work is not None and work not in self.bound) or (work is None and not self.bound & set(listed))
        if unbound and self.told.first((proc.pid, on)):
            f.use([o.seq])
            f.fail(f"{what} of the recorded tree worked on GPU {on}, which no role is bound to (seq {o.seq})")
            return
        role = roles.role_of(proc)
        want: str | None = roles.of_role.get(role) if role is not None else None
        if role is None or want is None:
            if step_now is not None and self.told.first((proc.pid, on)):
                f.use([o.seq])
                f.inconclusive(
                    f"{what} of the recorded tree ran on bound GPU {on} during {step_now} (seq {o.seq}), but "
                    + (
                        f"{role} is bound to no GPU"
                        if role is not None
                        else "what it executes is no role's captured executable: unattributable"
                    )
                )
            return
        if not works_on(work, listed, want):
            if self.told.first((proc.pid, on)):
                f.use([o.seq])
                f.fail(
                    f"{role}'s {what} worked on GPU {on}, but {role} is bound to GPU {want} "
                    f"(seq {o.seq}; judged by where it holds the most memory)"
                )
            return
        in_step = next((st for st in proc.steps if st in self.run_steps), None)
        if in_step is not None and role not in self.seen:
            self.seen[role] = (f"{role}'s {what} during {in_step} (seq {o.seq})", o.seq)


def _role_seen_findings(
    roles: _Roles, seen: Mapping[str, tuple[str, int]], intervals: Sequence[tuple[str, int, int]], f: Findings
) -> list[str]:
    """What each role's own process was seen doing on its GPU; inconclusive for a role never seen, or a GPU
    bound to no role."""
    notes: list[str] = []
    for name, uuid in roles.of_role.items():
        if name in seen:
            f.use([seen[name][1]])
            notes.append(f"GPU {uuid} ran {seen[name][0]}")
        elif name in roles.executables:
            f.inconclusive(
                f"{name}'s own process (running its captured executable) was not seen on its bound GPU {uuid} "
                f"during the run steps ({', '.join(st for st, _, _ in intervals)})"
            )
    for uuid in roles.bound:
        if not roles.roles_on(uuid):
            f.inconclusive(f"GPU {uuid} is bound to no role the binding names")
    return notes


def _summary(obs: Sequence[Event], roles: _Roles, claimed: Sequence[Any], machine: _Machine) -> str:
    """What a pass says, before the roles' notes."""
    space = obs[0].attrs.get("namespace")
    where = space.get("pid") if isinstance(space, dict) else None
    bound = set(roles.bound)
    modes = sorted(
        {str(g.get("compute_mode")) for o in obs for g in _list(o.attrs.get("gpus")) if g.get("uuid") in bound}
    )
    lib = next(iter(machine.libraries), None)
    lib_text = f", NVML {lib[0]} sha256 {lib[1][:12]}" if lib else ", NVML library not identified"
    return (
        f"observer nvml (driver {machine.driver}{lib_text}; PID namespace {where}; compute mode {'/'.join(modes)}); "
        f"the preflight's {count(len(claimed), 'GPU')} are ones the recorder observed, with the same name and driver; "
        "processes attributed by the SHA-256 of what they execute; no memory or activity unexplained by them: "
    )


def _carry_identity(proc: _Process, identified: dict[int, tuple[str, str | None]]) -> None:
    """A process seen exiting keeps the identity it was read with earlier under the same pid: NVML lists a CUDA
    process until its context is torn down, after its interpreter closed its script (finalisation) or after its
    ``/proc`` entry is gone. Only a reading with no digest at all, or the same ``exe`` without a script, inherits;
    any other reading (another program under a reused pid) is judged as it is."""
    if proc.exe is not None and (proc.script is not None or proc.pid not in identified):
        identified[proc.pid] = (proc.exe, proc.script)
        return
    before = identified.get(proc.pid)
    if before is not None and proc.exe in (None, before[0]):
        proc.exe, proc.script = before


def _shared_findings(obs: Sequence[Event], bound: set[str], f: Findings) -> None:
    """Inconclusive for a bound GPU holding memory, or busy, beyond what its listed processes explain."""
    told: set[tuple[str, str]] = set()
    for o in obs:
        space = o.attrs.get("namespace")
        where = ""
        if isinstance(space, dict):
            markers = [str(m) for m in space.get("markers") or []]
            where = f"; the recorder's PID namespace: {space.get('pid')}" + (
                f", container markers: {', '.join(markers)}" if markers else ""
            )
        for g in _list(o.attrs.get("gpus")):
            uuid = g.get("uuid")
            if uuid not in bound:
                continue
            memory = json_int(g.get("unexplained_memory"))
            util = json_int(g.get("unexplained_utilization"))
            if memory is not None and memory > IDLE_MEMORY and (uuid, "memory") not in told:
                told.add((uuid, "memory"))
                f.use([o.seq])
                f.inconclusive(
                    f"bound GPU {uuid} was shared: {memory // _MIB} MiB in use that no listed process explains, "
                    f"above the idle level of {IDLE_MEMORY // _MIB} MiB (seq {o.seq}{where})"
                )
            if util and (uuid, "utilization") not in told:
                told.add((uuid, "utilization"))
                f.use([o.seq])
                f.inconclusive(
                    f"bound GPU {uuid} was shared: {util}% utilisation while it listed no process (seq {o.seq}{where})"
                )
