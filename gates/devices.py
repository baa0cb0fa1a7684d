"""``devices-observed``: physical scope rests on what the recorder observed, never on what the lane says.

The recorder queries NVML itself and appends ``device.observed`` events (and
``telemetry``); a command can send receipts and artifacts, but no event of
those kinds. This check binds the lane's claims to those observations:

1. the observer is ``nvml`` in every observation, from its start to its end
   (``simulated`` and ``none`` are never a physical device: inconclusive);
2. every GPU the ``preflight`` receipt names is one the recorder observed,
   with the same name and driver (else fail);
3. every bound GPU was seen running a process of the recorded tree during the
   run steps (by pid; where NVML cannot attribute processes, by activity above
   the idle level it observed before them), and no process of the tree worked
   on a GPU other than its role's (else fail).

A process listed on several GPUs works on the one where it holds the most
memory: a CUDA process on one card can hold a small context on another.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aos.attrs import json_int
from aos.event import Event
from gates.evidence import Evidence, Receipt
from gates.typing import Findings, Outcome

__all__ = ["MEMORY_RISE", "RUN_STEPS", "UTILIZATION_RISE", "devices_observed"]

#: The lane steps whose roles run on the device (docs/GATES.md, "Lane receipts").
RUN_STEPS: tuple[str, ...] = ("uninterrupted-run", "split-run", "host-shadow-control", "fresh-evaluation")

#: Activity, where NVML cannot attribute processes: memory in use this far above
#: the idle level (a CUDA context alone is hundreds of MiB), or utilisation this
#: many points above it.
MEMORY_RISE = 64 << 20
UTILIZATION_RISE = 10

_MIB = 1 << 20


@dataclass
class _Seen:
    """What shows one bound GPU at work."""

    how: str
    seqs: list[int] = field(default_factory=list)


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _short(uuid: str) -> str:
    return uuid if len(uuid) <= 20 else uuid[:20] + "..."


def _exe(argv: Sequence[str] | None) -> str:
    if not argv:
        return "?"
    words = [a for a in argv if not a.startswith("-")][:2]
    return " ".join(posixpath.basename(a) for a in words)


class _Roles:
    """Which role each GPU is bound to, and which argv names which role's executable."""

    def __init__(self, ev: Evidence, preflight: Receipt, f: Findings) -> None:
        self.ev = ev
        gpus = _list(preflight.fields.get("gpus"))
        self.bound: list[str] = list(dict.fromkeys(g["uuid"] for g in gpus if isinstance(g.get("uuid"), str)))
        builds = ev.receipts_named("static-build")
        order = list(dict.fromkeys(str(r.fields.get("role")) for r in builds if r.fields.get("role")))
        self.of_role: dict[str, str] = {}
        path = preflight.fields.get("binding")
        art = ev.artifact(path) if isinstance(path, str) and path else None
        doc: Any = None
        if art is not None:
            try:
                doc = art.json()
            except ValueError:
                doc = None
        roles = doc.get("roles") if isinstance(doc, dict) else None
        if isinstance(roles, dict) and roles:
            f.use(art.seqs if art is not None else [])
            for role, b in roles.items():
                uuid = b.get("uuid") if isinstance(b, dict) else None
                if not isinstance(uuid, str):
                    continue
                self.of_role[str(role)] = uuid
                if uuid not in self.bound:
                    f.fail(
                        f"{path} binds {role} to GPU {uuid}, which the preflight (seq {preflight.seq}) does not name"
                    )
        elif len(order) == len(gpus):
            # docs/GATES.md: the preflight's gpus are one per role binding, in role order.
            self.of_role = {role: str(g.get("uuid")) for role, g in zip(order, gpus, strict=True)}
        f.use(r.seq for r in builds)
        # Every path a role's executable was built, checked or uploaded to.
        self.paths: dict[str, set[str]] = {}
        for r in [*builds, *ev.receipts_named("build")]:
            role = r.fields.get("role")
            if not isinstance(role, str):
                continue
            for key in ("target", "remote"):
                p = r.fields.get(key)
                if isinstance(p, str) and p:
                    self.paths.setdefault(role, set()).add(ev.relative(p))
        names: dict[str, set[str]] = {}
        for role, paths in self.paths.items():
            for p in paths:
                names.setdefault(posixpath.basename(p), set()).add(role)
        # A file name that one role's executables alone carry names that role wherever it was copied.
        self.by_name = {n: next(iter(rs)) for n, rs in names.items() if len(rs) == 1 and n}

    def roles_on(self, uuid: str) -> list[str]:
        return [r for r, u in self.of_role.items() if u == uuid]

    def role_of(self, argv: Sequence[str] | None) -> str | None:
        """The one role whose executable ``argv`` names, or None (none, or several)."""
        found: set[str] = set()
        for word in argv or ():
            if not word or word.startswith("-"):
                continue
            p = self.ev.relative(word)
            exact = {r for r, paths in self.paths.items() if p in paths}
            if exact:
                found |= exact
            elif posixpath.basename(p) in self.by_name:
                found.add(self.by_name[posixpath.basename(p)])
        return next(iter(found)) if len(found) == 1 else None


@dataclass
class _Process:
    pid: int
    entries: list[tuple[str, int | None]]  # (gpu uuid, used memory)
    in_tree: bool
    steps: list[str]
    argv: list[str] | None

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


def _processes(o: Event) -> list[_Process]:
    by_pid: dict[int, _Process] = {}
    for p in _list(o.attrs.get("processes")):
        pid, gpu = json_int(p.get("pid")), p.get("gpu")
        if pid is None or not isinstance(gpu, str):
            continue
        argv = p.get("argv")
        argv = [str(a) for a in argv] if isinstance(argv, list) else None
        steps = [str(s) for s in p.get("steps") or [] if isinstance(s, str)]
        proc = by_pid.setdefault(pid, _Process(pid, [], False, [], None))
        proc.entries.append((gpu, json_int(p.get("used_memory"))))
        proc.in_tree = proc.in_tree or p.get("in_tree") is True
        proc.steps += [s for s in steps if s not in proc.steps]
        proc.argv = proc.argv or argv
    return list(by_pid.values())


def _intervals(ev: Evidence, steps: Sequence[str]) -> list[tuple[str, int, int]]:
    out = []
    for s in ev.steps:
        if s.name in steps:
            out.append((s.name, s.start.seq, s.end.seq if s.end is not None else len(ev.events)))
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


def _activity(
    ev: Evidence, uuid: str, intervals: list[tuple[str, int, int]], obs: list[Event]
) -> tuple[_Seen | None, str]:
    """Activity on ``uuid`` during the run steps above the idle level observed before them."""
    samples: list[tuple[int, int | None, int | None]] = []
    for e in [*obs, *ev.telemetry]:
        for g in _list(e.attrs.get("gpus")):
            if g.get("uuid") == uuid:
                samples.append((e.seq, json_int(g.get("memory_used")), json_int(g.get("utilization"))))
    samples.sort()
    first = min(lo for _, lo, _ in intervals)
    idle = [s for s in samples if s[0] < first]
    idle_mem = max((m for _, m, _ in idle if m is not None), default=None)
    idle_util = max((u for _, _, u in idle if u is not None), default=None)
    if idle_mem is None and idle_util is None:
        return None, f"no idle level of GPU {uuid} was observed before the run steps"
    for seq, mem, util in samples:
        step = _during(seq, intervals)
        if step is None:
            continue
        if mem is not None and idle_mem is not None and mem >= idle_mem + MEMORY_RISE:
            return _Seen(
                f"memory in use rose from {idle_mem // _MIB} MiB (idle) to {mem // _MIB} MiB during {step} (seq {seq})",
                [seq],
            ), ""
        if util is not None and idle_util is not None and util >= idle_util + UTILIZATION_RISE:
            return _Seen(f"utilisation rose from {idle_util}% (idle) to {util}% during {step} (seq {seq})", [seq]), ""
    return None, (
        f"GPU {uuid} showed no activity above its idle level ({idle_mem // _MIB if idle_mem is not None else '?'} MiB, "
        f"{idle_util if idle_util is not None else '?'}%) during the run steps"
    )


def devices_observed(ev: Evidence, args: Mapping[str, Any]) -> Outcome:
    """Observer nvml; the preflight's GPUs are the recorder's; each bound GPU ran the recorded tree in the run steps."""
    f = Findings()
    run_steps = tuple(str(s) for s in args.get("steps", RUN_STEPS))
    obs = ev.observations
    if not obs:
        f.inconclusive(
            "no device observation: the recorder recorded no device.observed event, so nothing the recorder "
            "saw shows a GPU (the lane's receipts and its own nvidia-smi output are claims, not observations)"
        )
        return f.outcome("")
    _observer_findings(obs, f)
    if not f.ok:
        f.use(o.seq for o in obs[:1])
        return f.outcome("")
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
    driver = next(iter(drivers)) if len(drivers) == 1 else None
    if not drivers:
        f.inconclusive("no observation names the driver")
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

    errors = [o for o in obs if o.attrs.get("error")]
    if not seen_gpus and errors:
        f.use([errors[0].seq])
        f.inconclusive(f"NVML listed no GPU: {errors[0].attrs.get('error')} (seq {errors[0].seq})")
        return f.outcome("")

    # The lane's claims: the preflight names the GPUs it bound.
    preflights = ev.receipts_named("preflight")
    if not preflights:
        f.inconclusive("no preflight receipt: no bound GPU to compare with what the recorder observed")
        return f.outcome("")
    pre = preflights[-1]
    f.use([pre.seq])
    claimed = _list(pre.fields.get("gpus"))
    if not claimed:
        f.inconclusive(f"the preflight (seq {pre.seq}) names no GPU: no binding to compare with the observation")
        return f.outcome("")
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

    roles = _Roles(ev, pre, f)
    bound = set(roles.bound)
    intervals = _intervals(ev, run_steps)
    if not intervals:
        f.inconclusive(f"none of the run steps ({', '.join(run_steps)}) was recorded")
        return f.outcome("")

    seen: dict[str, _Seen] = {}
    unattributed: list[Event] = []
    told: set[tuple[int, str]] = set()  # (pid, GPU) already reported: one finding per process and GPU
    for o in obs:
        if o.attrs.get("attribution") == "unavailable":
            unattributed.append(o)
            continue
        step_now = _during(o.seq, intervals)
        for proc in _processes(o):
            work, listed = proc.work()
            if not proc.in_tree:
                shared = [g for g in listed if g in bound]
                if shared and step_now is not None and (proc.pid, shared[0]) not in told:
                    told.add((proc.pid, shared[0]))
                    f.use([o.seq])
                    f.inconclusive(
                        f"bound GPU {shared[0]} was shared: pid {proc.pid}, not of the recorded tree, ran on it "
                        f"during {step_now} (seq {o.seq})"
                    )
                continue
            what = f"pid {proc.pid} ({_exe(proc.argv)})"
            on = work or "/".join(listed)
            unbound = (work is not None and work not in bound) or (work is None and not bound & set(listed))
            if unbound and (proc.pid, on) not in told:
                told.add((proc.pid, on))
                f.use([o.seq])
                f.fail(f"{what} of the recorded tree worked on GPU {on}, which no role is bound to (seq {o.seq})")
            role = roles.role_of(proc.argv)
            want = roles.of_role.get(role) if role is not None else None
            wrong = want is not None and ((work is not None and work != want) or (work is None and want not in listed))
            if wrong and (proc.pid, on) not in told:
                told.add((proc.pid, on))
                f.use([o.seq])
                f.fail(
                    f"{role}'s {what} worked on GPU {on}, but {role} is bound to GPU {want} "
                    f"(seq {o.seq}; judged by where it holds the most memory)"
                )
            in_step = next((s for s in proc.steps if s in run_steps), None)
            if work in bound and in_step is not None and work is not None:
                if work not in seen:
                    who = f"{role}'s " if role else ""
                    seen[work] = _Seen(f"{who}{what} during {in_step} (seq {o.seq})")
                seen[work].seqs.append(o.seq)

    notes: list[str] = []
    for uuid in roles.bound:
        label = f"GPU {uuid}" + (f" ({', '.join(roles.roles_on(uuid))})" if roles.roles_on(uuid) else "")
        if uuid in seen:
            f.use(seen[uuid].seqs[:1])
            notes.append(f"{label} ran {seen[uuid].how}")
            continue
        if unattributed:
            act, why = _activity(ev, uuid, intervals, obs)
            if act is not None:
                f.use(act.seqs)
                f.use(o.seq for o in unattributed[:1])
                notes.append(f"{label}: {act.how}")
                continue
            f.inconclusive(f"{label}: NVML could not attribute processes (attribution unavailable) and {why}")
            continue
        f.inconclusive(
            f"{label} was not seen running a process of the recorded tree during the run steps "
            f"({', '.join(s for s, _, _ in intervals)})"
        )
    evidence = "processes attributed by pid"
    if unattributed and any(u not in seen for u in roles.bound):
        evidence = (
            "activity above the idle level (NVML could not attribute processes, so which process ran where "
            "was not observed)"
        )
    lib = next(iter(libraries), None)
    lib_text = f", NVML {lib[0]} sha256 {lib[1][:12]}" if lib else ", NVML library not identified"
    return f.outcome(
        f"observer nvml (driver {driver}{lib_text}); the preflight's {len(claimed)} GPU(s) are ones the recorder "
        f"observed, with the same name and driver; evidence: {evidence}: " + "; ".join(notes)
    )
