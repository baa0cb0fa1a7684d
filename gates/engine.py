"""The policy engine: a ``Gate`` over a stream's events gives a ``Verdict``.

Each rule becomes one check. A rule never passes on a claim alone where the
stream holds independent evidence to check it against: receipts are checked
against step exit codes, step stderr and captured artifact bytes. A rule
whose own code raises is ``inconclusive``, never a pass.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from aos import kinds
from aos.event import Event
from gates.containment import CONTAINMENT_CHECK, containment_recorded
from gates.evidence import Evidence, Receipt, Step
from gates.health import evaluate_device
from gates.language import (
    ArtifactRule,
    CheckRule,
    Condition,
    DeviceRule,
    EachRule,
    EqualRule,
    ExitRule,
    Gate,
    OrderRule,
    Part,
    RebuildRule,
    ReceiptRule,
    Rule,
    StepRule,
    TestsRule,
)
from gates.rebuild import SOURCE_CHECK, evaluate_rebuild
from gates.typing import Findings, Outcome
from gates.verdict import Check, Status, Verdict
from gates.wording import count

__all__ = ["evaluate", "evaluate_evidence", "holds", "lean_evidence", "needs_output", "schema_errors", "stderr_steps"]

_MISSING = object()


def holds(cond: Condition | None, ev: Evidence) -> bool:
    """Whether a condition held when the recording started."""
    if cond is None:
        return True
    if cond.env is not None:
        if not ev.env_set(cond.env):
            return False
        if cond.equals is not None and str(ev.env.get(cond.env)) != cond.equals:
            return False
    if cond.env_unset is not None and ev.env_set(cond.env_unset):
        return False
    if cond.label is not None:
        if cond.label not in ev.labels:
            return False
        if cond.equals is not None and str(ev.labels.get(cond.label)) != cond.equals:
            return False
    return True


#: The registered checks known not to read the output events' ``data`` (gates/checks.py): a gate
#: whose checks are all among them is evaluated over an ``Evidence`` that keeps no output but the
#: steps' stderr and a stdout tail. Any other check (``output-free-of``, one registered later) gets it all.
_CHECKS_WITHOUT_OUTPUT = frozenset(
    {"device-preflight", "preflight-binding", "qualification-files", "source-identity", CONTAINMENT_CHECK}
)


def needs_output(gate: Gate) -> bool:
    """Whether evaluating ``gate`` reads the recorded stdout/stderr beyond what ``Evidence`` keeps per step."""
    return any(isinstance(r, CheckRule) and r.uses not in _CHECKS_WITHOUT_OUTPUT for r in gate.rules)


def stderr_steps(gate: Gate) -> frozenset[str]:
    """The names of the steps whose stderr ``gate``'s rules search (``stderr_contains``, a receipt's
    ``step_stderr`` claim): an ``Evidence`` without the output keeps no other step's stderr."""
    names = {r.name for r in gate.rules if isinstance(r, StepRule) and r.stderr_contains}
    names |= {r.step for r in gate.rules if isinstance(r, ReceiptRule) and r.step is not None and r.step_stderr}
    return frozenset(names)


def lean_evidence(gate: Gate, events: Iterable[Event]) -> Evidence:
    """The evidence index of ``events`` that keeps what ``gate``'s rules read and no more (``needs_output``,
    ``stderr_steps``): one pass, in memory that follows the events other than output, not the output."""
    if needs_output(gate):
        return Evidence(events)
    return Evidence(events, keep_output=False, stderr_of=stderr_steps(gate))


def versioned_out(rule: Rule, ev: Evidence) -> bool:
    """Whether ``rule`` is left out: a source rule (``[[rebuild]]``, the ``source-identity`` check) over a stream
    recorded before the recorder recorded sources (no ``source`` in its ``stream.open``), or the
    ``process-containment`` check over one recorded before it contained commands (no ``containment`` in its
    ``process.start``)."""
    if isinstance(rule, RebuildRule) or (isinstance(rule, CheckRule) and rule.uses == SOURCE_CHECK):
        return not ev.source_recorded
    if isinstance(rule, CheckRule) and rule.uses == CONTAINMENT_CHECK:
        return not containment_recorded(ev)
    return False


def evaluate(gate: Gate, events: Iterable[Event]) -> Verdict:
    """Evaluate ``gate`` over a stream's events (any iterable, read once).

    The evidence keeps only what the gate's rules read (``needs_output``), so a
    stream of a gigabyte of output is evaluated in memory that follows its
    event count and its steps' stderr, not its size.
    """
    return evaluate_evidence(gate, lean_evidence(gate, events))


def evaluate_evidence(gate: Gate, ev: Evidence) -> Verdict:
    """Evaluate ``gate`` over an evidence index."""
    checks: list[Check] = []
    scope = gate.scope
    skipped: list[str] = []
    applied: list[str] = []
    test_files: list[dict[str, Any]] = []
    ran: list[tuple[Part, Rule, int]] = []  # each rule run, its part, and where its check is in ``checks``
    cuts: list[_Cut] = []
    if ev.open is None:
        checks.append(Check("stream-open", "inconclusive", "the stream has no stream.open event: no recording start"))
    for part in gate.parts:
        if not holds(part.when, ev):
            reason = part.skipped
            if part.when is not None:
                reason += f" (needs {part.when.describe()})"
            skipped.append(reason)
            continue
        if part.when is not None:
            applied.append(part.name)
        if part.scope is not None:
            scope = part.scope
        if part.setup is not None:
            cut = _setup_refused(gate, part, ev)
            if cut is not None:
                cuts.append(cut)
        for rule in part.rules:
            if holds(rule.when, ev) and not versioned_out(rule, ev):
                ran.append((part, rule, len(checks)))
                checks.append(_run(rule, ev))
                if isinstance(rule, TestsRule):
                    test_files.append(_test_files(rule, ev))
    cuts.extend(_interrupted(ev))
    if cuts:
        _judge_cut(min(cuts, key=lambda c: c.seq), ran, checks, ev)
        checks[:0] = [c.check for c in sorted(cuts, key=lambda c: c.seq)]  # the cause, before what it cut
    if gate.uses_receipts:
        checks.append(_late_receipts(ev))
        checks.append(_invalid_receipts(ev))
    verdict = Verdict.of(gate.name, scope, checks)
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "fail", "inconclusive")}
    head = f"{verdict.verdict} (scope {scope}): {counts['pass']}/{len(checks)} checks passed"
    if counts["fail"]:
        head += f", {counts['fail']} failed"
    if counts["inconclusive"]:
        head += f", {counts['inconclusive']} inconclusive"
    summary = "; ".join([head, *(c.said for c in sorted(cuts, key=lambda c: c.seq)), *skipped])
    extra: dict[str, Any] = {"not_run": skipped, "gate_source": gate.source, "gate_sha256": gate.digest}
    if test_files:
        extra["test_files"] = test_files
    return Verdict(verdict.gate, verdict.verdict, scope, verdict.checks, summary, extra)


# -- runs cut short: an interrupt, a refusal of the run's own setup -------------------------------------

#: The signals that interrupt a run (the operator's Ctrl-C, a CI's cancel, a hang-up), as recorded.
INTERRUPTS = frozenset({"SIGINT", "SIGTERM", "SIGHUP"})


@dataclass(frozen=True)
class _Cut:
    """Where the evidence of a run was cut short: what follows ``seq`` is not complete evidence of the work.

    ``said`` prefixes the reason of each check that fails only on what follows; ``check`` names the cut.
    """

    seq: int
    said: str
    check: Check
    part: Part | None = None  # a part that did not run: none of its checks fails


def _judge_cut(cut: _Cut, ran: list[tuple[Part, Rule, int]], checks: list[Check], ev: Evidence) -> None:
    """Each failing check whose rule does not also fail over the events before the cut alone becomes inconclusive,
    saying why: a fail means something that ran failed. A check that fails on the evidence complete before the
    cut stays a fail (that evidence is whole whatever came after), except in a part that did not run (its setup
    refused), where nothing ran to fail. Once, for every rule, here."""
    prefix: Evidence | None = None
    interrupted_exit = ev.exit is not None and bool(ev.exit.attrs.get("interrupted"))
    for part, rule, at in ran:
        check = checks[at]
        if check.status != "fail":
            continue
        if isinstance(rule, ExitRule) and interrupted_exit:
            continue  # the [exit] rule's own ``interrupted`` status said what an interrupted exit is
        if part is not cut.part:
            if prefix is None:
                prefix = ev.before(cut.seq)
            if _run(rule, prefix).status == "fail":
                continue
        checks[at] = Check(
            check.name, "inconclusive", f"{cut.said}: {check.reason}", check.evidence, check.evidence_omitted
        )


def _interrupted(ev: Evidence) -> list[_Cut]:
    """The interrupts of the run: the recorder's own (``recorder.interrupted`` during the command: a signal it
    got and sent on), else a step its client asked the recorder to interrupt (on a terminal, the operator's
    Ctrl-C reaches the command's process group, not the recorder: the client's word, said as such)."""
    for e in ev.interrupts:
        if e.attrs.get("during") == "command":
            sig = str(e.attrs.get("signal"))
            reason = (
                f"interrupted by the operator: {sig} reached the recorder (seq {e.seq}) before the command exited, "
                "and was sent on to the command and each running step; what ran from there on is not complete "
                "evidence, so no check fails on it"
            )
            return [
                _Cut(
                    e.seq,
                    f"interrupted by the operator ({sig})",
                    Check("interrupted", "inconclusive", reason, (e.seq,)),
                )
            ]
    for step in ev.steps:
        if step.end is None or step.start.attrs.get("runner") != "recorder" or step.end.attrs.get("interrupted"):
            continue
        asked = [str(x) for x in step.end.attrs.get("forwarded") or [] if str(x) in INTERRUPTS]
        if asked:
            reason = (
                f"interrupted: step {step.name!r} (seq {step.start.seq}) was sent {asked[0]} at its client's request "
                "(a terminal's Ctrl-C reaches the command, not the recorder: this is the command's word); what ran "
                "from that step on is not complete evidence, so no check fails on it"
            )
            said = f"interrupted ({asked[0]} to step {step.name!r})"
            return [_Cut(step.start.seq, said, Check("interrupted", "inconclusive", reason, tuple(step.seqs)))]
    return []


def _setup_refused(gate: Gate, part: Part, ev: Evidence) -> _Cut | None:
    """The cut of a part that did not run: its setup step (``[part.setup]``), as the recorder ran and saw it,
    exited with one of the refusals of the run's own setup, and nothing else of the part ran.

    Only what the recorder saw counts, never what the command says of itself: the first step of that name ran
    under the recorder and exited (no signal) with a refusal's code; every step that started before it is a step
    another part names (or inside one), so no work of this part ran first; after it started, the command started
    no step but its own nested ones, and sent no receipt and no artifact until it exited; every receipt and artifact
    it sent came from inside those steps.
    """
    assert part.setup is not None
    named = ev.steps_named(part.setup.step)
    if not named:
        return None
    first = min(named, key=lambda s: s.start.seq)
    if first.start.attrs.get("runner") != "recorder" or not first.finished or first.signal:
        return None
    refusal = part.setup.refusal(first.exit_code)
    if refusal is None:
        return None
    others = {r.name for p in gate.parts if p is not part for r in p.rules if isinstance(r, StepRule)}
    spans = {s.span: s for s in ev.steps}

    def under(step: Step, names: set[str] | None, span: str | None) -> bool:
        seen: set[str] = set()
        cur: Step | None = step
        while cur is not None and cur.span not in seen:
            if (names is not None and cur.name in names and cur.start.attrs.get("parent") is None) or cur.span == span:
                return True
            seen.add(cur.span)
            parent = cur.start.attrs.get("parent")
            cur = spans.get(parent) if isinstance(parent, str) else None
        return False

    inside = {s.span for s in ev.steps if under(s, None, first.span)}  # the setup step itself, and what it ran
    before = {s.span for s in ev.steps if under(s, others, None)}  # the other parts' steps, and what they ran
    for step in ev.steps:
        if step.span not in inside and (step.span not in before or step.start.seq > first.start.seq):
            return None
    end = ev.exit.seq if ev.exit is not None else None
    for e in ev.events:  # the command's receipts and artifacts: inside those steps, none after the setup step
        if end is not None and e.seq >= end:
            break
        if e.kind not in (kinds.RECEIPT, kinds.ARTIFACT) or e.attrs.get("origin") == "recorder":
            continue
        if e.seq > first.last_seq or (e.step not in inside and e.step not in before):
            return None
    reason = (
        f"did not run: {refusal}: step {part.setup.step!r} (seq {first.start.seq}) exited {first.exit_code}, which "
        f"this gate names the refusal {refusal!r} of the run's own setup, before any other step of {part.name!r} "
        "ran, and the command recorded nothing after it: none of that part's checks fails (nothing of it ran); a "
        "check of another part that fails on what came before it still fails"
    )
    check = Check("did-not-run", "inconclusive", reason, tuple(first.seqs))
    return _Cut(first.start.seq, f"did not run: {refusal}", check, part)


def _run(rule: Rule, ev: Evidence) -> Check:
    try:
        out = _EVALUATORS[type(rule)](rule, ev)
    except Exception as exc:  # noqa: BLE001 - a broken rule must never pass, nor lose the verdict
        out = Outcome("inconclusive", f"the check itself raised {type(exc).__name__}: {exc}")
    return Check(rule.id, out.status, out.reason, tuple(sorted(set(out.evidence))), out.evidence_omitted)


def _test_files(rule: TestsRule, ev: Evidence) -> dict[str, Any]:
    """Which captures a ``[[tests]]`` check read (sealed, so reports carry their test cases through)."""
    from gates.results import captured_files

    try:
        arts = captured_files(rule, ev)[0]
    except Exception:  # noqa: BLE001 - the check itself already says what broke
        arts = []
    return {"check": rule.id, "format": rule.format, "artifacts": [a.event.seq for a in arts]}


# -- exit ------------------------------------------------------------------------------


def _exit(rule: ExitRule, ev: Evidence) -> Outcome:
    if ev.exit is None:
        return Outcome("inconclusive", "the command never finished: no process.exit event")
    seqs = (ev.exit.seq,)
    a = ev.exit.attrs
    if a.get("timed_out") or a.get("signal"):
        return Outcome(cast(Status, rule.unfinished), f"{ev.describe_exit()}; required exit {rule.code}", seqs)
    if a.get("interrupted"):
        # It caught the forwarded signal and exited on its own: its code says nothing about its work.
        return Outcome(
            cast(Status, rule.interrupted),
            f"the recording was interrupted ({a.get('interrupted')}) and the command exited {ev.exit_code()}; "
            f"required exit {rule.code} from a run that was not interrupted",
            seqs,
        )
    code = ev.exit_code()
    if code == rule.code:
        return Outcome("pass", f"the command exited {code}", seqs)
    return Outcome(cast(Status, rule.otherwise), f"the command exited {code}; required exit {rule.code}", seqs)


# -- steps -----------------------------------------------------------------------------


def _exit_ok(expected: int | str, step: Step) -> bool:
    if expected == "any":
        return True
    if step.signal or step.exit_code is None:
        return False
    if expected == "nonzero":
        return step.exit_code != 0
    return step.exit_code == expected


def _step(rule: StepRule, ev: Evidence) -> Outcome:
    f = Findings()
    steps = ev.steps_named(rule.name)
    for s in steps:
        f.use(s.seqs)
    _count(f, len(steps), rule.count, f"step {rule.name!r}")
    for s in steps:
        if not s.finished:
            f.inconclusive(f"step {rule.name!r} (seq {s.start.seq}) never finished")
            continue
        if not _exit_ok(rule.exit, s):
            f.fail(f"step {rule.name!r} {s.describe_exit()}; expected exit {rule.exit}")
        for text in rule.stderr_contains:
            f.use(s.output_seqs)
            if text.encode() not in s.stderr:
                f.fail(f"step {rule.name!r}'s stderr does not show {text!r}")
    return f.outcome(f"step {rule.name!r} ran {len(steps)}x, " + ", ".join(s.describe_exit() for s in steps))


def _count(f: Findings, n: int, count: Any, what: str, late: int = 0) -> None:
    if n < count.min:
        extra = f" ({late} more arrived after the command exited and do not count)" if late else ""
        f.inconclusive(f"{what}: {n} recorded, {count.describe()} required{extra}")
    elif count.max is not None and n > count.max:
        f.fail(f"{what}: {n} recorded, {count.describe()} allowed")


# -- receipts --------------------------------------------------------------------------


def _field(obj: Mapping[str, Any], path: str) -> Any:
    if type(obj) is dict and "." not in path:  # the common case, once per receipt and rule: no walk
        return obj.get(path, _MISSING)
    cur: Any = obj
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def _selected(receipts: list[Receipt], where: Mapping[str, Any]) -> list[Receipt]:
    return [r for r in receipts if all(_field(r.fields, k) == v for k, v in where.items())]


def schema_errors(schema: Mapping[str, Any], value: Any) -> list[str]:
    """Every way ``value`` fails a JSON Schema, as ``path: message`` lines."""
    from gates.patterns import schema_validator

    # RE2 for every pattern, and no $ref is ever fetched (gates.patterns): bounded, offline.
    return _errors(schema_validator(schema), value)


def _errors(validator: Any, value: Any) -> list[str]:
    """``schema_errors`` with a validator built once (a rule checks every receipt against one schema)."""
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    out = []
    for e in errors:
        where = ".".join(str(p) for p in e.absolute_path) or "(top)"
        out.append(f"{where}: {e.message}")
    return out


def _status_finding(f: Findings, r: Receipt, allowed: Sequence[str], what: str) -> None:
    if r.status in allowed:
        return
    msg = f"{what} (seq {r.seq}) has status {r.status!r}, needs {'/'.join(allowed)}"
    f.add("fail" if r.status == "fail" else "inconclusive", msg)


def _step_for(ev: Evidence, r: Receipt, name: str) -> Step | None:
    """The step named ``name`` that the receipt was emitted in (by span, else by position)."""
    own = ev.step_of_span(r.span)
    if own is not None and own.name == name:
        return own
    for s in ev.steps_named_view(name):
        if s.start.seq < r.seq and (s.end is None or r.seq < s.end.seq):
            return s
    return None


def _receipt(rule: ReceiptRule, ev: Evidence) -> Outcome:
    f = Findings()
    what = f"receipt {rule.name!r}" + (f" where {dict(rule.where)}" if rule.where else "")
    found = _selected(ev.receipts_named(rule.name), rule.where)
    late = _selected(ev.late_named(rule.name), rule.where)
    f.use(r.seq for r in found)
    f.use(r.seq for r in late)
    _count(f, len(found), rule.count, what, late=len(late))
    checked_artifacts: list[str] = []
    validator = quick = None
    if rule.schema is not None and found:
        from gates.patterns import schema_validator, simple_check

        # Built once per rule; the quick test proves the usual receipt valid without the full validator.
        validator, quick = schema_validator(rule.schema), simple_check(rule.schema)
    for r in found:
        _status_finding(f, r, rule.status, what)
        if validator is not None and not (quick is not None and quick(r.fields)):
            for err in _errors(validator, r.fields)[:3]:
                f.fail(f"{what} (seq {r.seq}) fields fail its schema at {err}")
        for a, b in rule.equal:
            va, vb = _field(r.fields, a), _field(r.fields, b)
            if va is _MISSING or vb is _MISSING:
                f.inconclusive(f"{what} (seq {r.seq}) lacks {a if va is _MISSING else b!r}")
            elif va != vb:
                f.fail(f"{what} (seq {r.seq}): {a} {va!r} != {b} {vb!r}")
        if rule.step is not None:
            _receipt_step(f, rule, ev, r, what)
        for spec in rule.artifacts:
            done = _receipt_artifact(f, ev, r, spec.path, spec.sha256, spec.required, what)
            if done:
                checked_artifacts.append(done)
    statuses = "/".join(sorted({r.status for r in found})) or "-"
    passed = f"{count(len(found), 'receipt')} {what.removeprefix('receipt ')} recorded, status {statuses}"
    if rule.schema is not None:
        passed += ", fields match schema"
    if checked_artifacts:
        passed += f"; checked against captured {', '.join(sorted(set(checked_artifacts)))}"
    return f.outcome(passed)


def _receipt_step(f: Findings, rule: ReceiptRule, ev: Evidence, r: Receipt, what: str) -> None:
    assert rule.step is not None
    step = _step_for(ev, r, rule.step)
    if step is None:
        if ev.steps_named_view(rule.step):
            f.fail(f"{what} (seq {r.seq}) was not emitted inside step {rule.step!r}")
        else:
            f.inconclusive(f"{what} (seq {r.seq}): step {rule.step!r} was never recorded")
        return
    f.use(step.seqs)
    if not (rule.step_exit or rule.step_stderr):
        return
    if not step.finished:
        f.inconclusive(f"step {rule.step!r} never finished, so {what} cannot be checked against it")
        return
    if rule.step_exit:
        claimed = _field(r.fields, rule.step_exit)
        if claimed is _MISSING:
            f.fail(f"{what} (seq {r.seq}) lacks {rule.step_exit!r}")
        elif step.signal or claimed != step.exit_code:
            f.fail(f"{what} claims {rule.step_exit} {claimed!r} but step {rule.step!r} {step.describe_exit()}")
    for key in rule.step_stderr:
        claimed = _field(r.fields, key)
        f.use(step.output_seqs)
        if not isinstance(claimed, str) or not claimed:
            f.fail(f"{what} (seq {r.seq}) lacks a text {key!r}")
        elif claimed.encode() not in step.stderr:
            f.fail(f"{what} claims {key} {claimed!r} but step {rule.step!r}'s stderr does not show it")


def _receipt_artifact(
    f: Findings, ev: Evidence, r: Receipt, path_key: str, sha_key: str | None, required: bool, what: str
) -> str | None:
    path = _field(r.fields, path_key)
    if not isinstance(path, str) or not path:
        f.fail(f"{what} (seq {r.seq}) lacks a path {path_key!r}")
        return None
    art = ev.artifact(path)
    if art is None:
        if required:
            f.inconclusive(f"{path} ({what} {path_key}) was not captured as an artifact")
        else:
            f.note(f"{path} not captured, so not cross-checked")
        return None
    f.use(art.seqs)
    actual, how = art.sha256()
    if actual is None:
        if "hash to" in how:
            f.fail(f"artifact {art.path}: {how}")
        else:
            f.inconclusive(f"artifact {art.path}: {how}")
        return None
    if sha_key is not None:
        claimed = _field(r.fields, sha_key)
        if not isinstance(claimed, str):
            f.fail(f"{what} (seq {r.seq}) lacks a digest {sha_key!r}")
            return None
        if claimed.lower() != actual:
            f.fail(f"{what} says {sha_key} {claimed} but captured {art.path} hashes to {actual}")
            return None
    return art.path


# -- artifacts -------------------------------------------------------------------------


def _receipt_ref(ev: Evidence, ref: str) -> tuple[list[tuple[Receipt, Any]], str]:
    name, _, key = ref.partition(".")
    return [(r, _field(r.fields, key)) for r in ev.receipts_named(name)], key


def _artifact(rule: ArtifactRule, ev: Evidence) -> Outcome:
    f = Findings()
    arts = ev.artifacts_matching(rule.glob, rule.attrs)
    for a in arts:
        f.use(a.seqs)
    _count(f, len(arts), rule.count, rule.what())
    if rule.attrs and rule.glob != "**" and len(arts) < rule.count.min:
        others = [a for a in ev.artifacts_matching(rule.glob) if not a.has_attrs(rule.attrs)]
        if others:
            f.inconclusive(
                f"{count(len(others), 'other capture')} ({', '.join(sorted(a.path for a in others)[:3])}) "
                f"{'lacks' if len(others) == 1 else 'lack'} those attrs "
                "and do not count: a file the command sent is not the recorder's capture"
            )
    claims: list[tuple[Receipt, Any]] = []
    if rule.sha256_from is not None:
        claims, _key = _receipt_ref(ev, rule.sha256_from)
        f.use(r.seq for r, _ in claims)
        if not claims:
            f.inconclusive(f"no receipt gives {rule.sha256_from}")
    for a in arts:
        actual, how = a.sha256()
        if actual is None:
            f.add("fail" if "hash to" in how else "inconclusive", f"artifact {a.path}: {how}")
            continue
        for r, claimed in claims:
            if not isinstance(claimed, str) or claimed.lower() != actual:
                f.fail(f"{rule.sha256_from} (seq {r.seq}) is {claimed!r} but captured {a.path} hashes to {actual}")
        if rule.schema is not None:
            try:
                doc = a.json()
            except ValueError as exc:
                f.fail(f"artifact {a.path} is not JSON: {exc}")
                continue
            for err in schema_errors(rule.schema, doc)[:3]:
                f.fail(f"artifact {a.path} fails its schema at {err}")
    what = rule.what() if len(arts) != 1 else "artifact" + rule.what().removeprefix("artifacts")
    return f.outcome(f"{len(arts)} {what}: {', '.join(sorted(a.path for a in arts))}")


# -- cross-receipt rules ---------------------------------------------------------------


def _equal(rule: EqualRule, ev: Evidence) -> Outcome:
    f = Findings()
    seen: list[tuple[str, Receipt, Any]] = []
    for ref in rule.values:
        pairs, key = _receipt_ref(ev, ref)
        if not pairs:
            f.inconclusive(f"no receipt {ref.partition('.')[0]!r} to give {ref}")
        for r, value in pairs:
            f.use([r.seq])
            if value is _MISSING:
                f.inconclusive(f"receipt {r.name!r} (seq {r.seq}) lacks {key!r}")
            else:
                seen.append((ref, r, value))
    if seen:
        first_ref, first_r, first = seen[0]
        for ref, r, value in seen[1:]:
            if value != first:
                f.fail(f"{ref} (seq {r.seq}) is {value!r} but {first_ref} (seq {first_r.seq}) is {first!r}")
    value_text = json.dumps(seen[0][2]) if seen else "-"
    return f.outcome(f"{' == '.join(rule.values)} == {value_text}")


def _each(rule: EachRule, ev: Evidence) -> Outcome:
    f = Findings()
    lefts = ev.receipts_named(rule.receipt)
    if not lefts:
        f.inconclusive(f"no receipt {rule.receipt!r} to match")
    # The candidates of each left receipt, found by its `on` values in an index (a scan of every
    # right receipt per left one was quadratic); the exact comparison below still decides.
    by_key: dict[tuple[Any, ...], list[Receipt]] = {}
    for r in ev.receipts_named(rule.needs):
        by_key.setdefault(tuple(_hashable(_field(r.fields, k)) for k in rule.on), []).append(r)
    for left in lefts:
        f.use([left.seq])
        key = {k: _field(left.fields, k) for k in rule.on}
        if any(v is _MISSING for v in key.values()):
            f.fail(f"receipt {rule.receipt!r} (seq {left.seq}) lacks {list(rule.on)}")
            continue
        bucket = by_key.get(tuple(_hashable(v) for v in key.values()), [])
        cands = [r for r in bucket if all(_field(r.fields, k) == v for k, v in key.items())]
        f.use(r.seq for r in cands)
        if not cands:
            f.inconclusive(f"receipt {rule.receipt!r} ({_label(key)}) has no {rule.needs!r} receipt")
            continue
        problems: list[str] = []
        good = False
        for c in cands:
            if c.status in rule.status and not rule.where and not rule.equal:
                good = True  # nothing more to hold against it (the common case: no text built)
                continue
            bad = []
            if c.status not in rule.status:
                bad.append(f"status {c.status!r}")
            bad += [f"{k} {_field(c.fields, k)!r}" for k, v in rule.where.items() if _field(c.fields, k) != v]
            bad += [
                f"{b} {_field(c.fields, b)!r} != {rule.receipt}.{a} {_field(left.fields, a)!r}"
                for a, b in rule.equal
                if _field(left.fields, a) != _field(c.fields, b) or _field(c.fields, b) is _MISSING
            ]
            if bad:
                problems.append(f"{rule.needs} (seq {c.seq}): " + ", ".join(bad))
            else:
                good = True
        if not good:
            f.fail(f"receipt {rule.receipt!r} ({_label(key)}) has no good {rule.needs!r}: " + "; ".join(problems))
    return f.outcome(f"each of {count(len(lefts), repr(rule.receipt) + ' receipt')} has a good {rule.needs!r}")


def _label(key: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v!r}" for k, v in key.items())


def _hashable(value: Any) -> Any:
    """A hashable stand-in for a JSON value that keeps Python's ``==``: values equal under ``==``
    (``1``, ``1.0`` and ``True`` included) have equal stand-ins, so an index never misses a match."""
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, _hashable(v)) for k, v in value.items()))
    return value


def _order(rule: OrderRule, ev: Evidence) -> Outcome:
    f = Findings()
    spans: list[tuple[str, int, int]] = []
    for item in rule.sequence:
        kind, _, name = item.partition(":")
        if kind == "step":
            steps = ev.steps_named(name)
            if not steps:
                f.inconclusive(f"{item} was never recorded, so its order cannot be checked")
                continue
            f.use(s.start.seq for s in steps)
            spans.append((item, min(s.start.seq for s in steps), max(s.last_seq for s in steps)))
        else:
            rs = ev.receipts_named(name)
            if not rs:
                f.inconclusive(f"{item} was never recorded, so its order cannot be checked")
                continue
            f.use(r.seq for r in rs)
            spans.append((item, min(r.seq for r in rs), max(r.seq for r in rs)))
    for (a, _a0, a1), (b, b0, _b1) in itertools.pairwise(spans):
        if not a1 < b0:
            f.fail(f"{b} began (seq {b0}) before {a} ended (seq {a1})")
    return f.outcome(f"in order: {' < '.join(s[0] for s in spans)}")


def _tests(rule: TestsRule, ev: Evidence) -> Outcome:
    from gates.results import evaluate_tests

    return evaluate_tests(rule, ev)


def _check(rule: CheckRule, ev: Evidence) -> Outcome:
    from gates.checks import CHECKS

    return CHECKS[rule.uses](ev, rule.args)


_EVALUATORS: dict[type, Any] = {
    ExitRule: _exit,
    StepRule: _step,
    ReceiptRule: _receipt,
    ArtifactRule: _artifact,
    EqualRule: _equal,
    EachRule: _each,
    OrderRule: _order,
    TestsRule: _tests,
    CheckRule: _check,
    RebuildRule: evaluate_rebuild,
    DeviceRule: evaluate_device,
}


# -- automatic receipt checks ----------------------------------------------------------


def _late_receipts(ev: Evidence) -> Check:
    if ev.late_receipts:
        names = sorted({r.name for r in ev.late_receipts})
        return Check(
            "receipts-after-exit",
            "inconclusive",
            f"{count(len(ev.late_receipts), 'receipt')} ({', '.join(names)}) arrived after the command exited "
            f"({ev.describe_exit()}): something outlived the command; they do not count",
            tuple(r.seq for r in ev.late_receipts) + ((ev.exit.seq,) if ev.exit else ()),
        )
    return Check("receipts-after-exit", "pass", "no receipt arrived after the command exited")


def _invalid_receipts(ev: Evidence) -> Check:
    if ev.invalid_receipts:
        first = ev.invalid_receipts[0]
        return Check(
            "receipts-invalid",
            "inconclusive",
            f"{count(len(ev.invalid_receipts), 'receipt line')} "
            f"{'was not a valid receipt' if len(ev.invalid_receipts) == 1 else 'were not valid receipts'} "
            f"(first: {first.attrs.get('reason', '?')}); what they meant to report is missing",
            tuple(e.seq for e in ev.invalid_receipts),
        )
    return Check("receipts-invalid", "pass", "every receipt line was a valid receipt")
