"""The gate language: a TOML file read into a ``Gate`` and its rules.

docs/GATES.md documents every table and key. In short::

    [gate]      name, description, scope
    [exit]      code, otherwise, unfinished
    [[step]]    name, exit, min/max/count, stderr_contains
    [[receipt]] name, where, min/max/count, status, schema, step, equal,
                artifacts, step_exit, step_stderr
    [[artifact]] glob, attrs, min/max/count, sha256_from, schema
    [[equal]]   values = ["RECEIPT.FIELD", ...]
    [[each]]    receipt, needs, on, where, status, equal
    [[order]]   sequence = ["step:NAME" | "receipt:NAME", ...]
    [[tests]]   junit | tap, min_tests, failures, errors, max_skipped, require, step
    [[check]]   name, uses, args        (a named Python check, gates/checks.py)
    [[rebuild]] command, outputs, compare, timeout   (the recorder rebuilds the recorded commit)
    [[device]]  gpus, reason, ecc, persistence, mig, pcie_width_min   (the GPUs' health facts, gates/health.py)
    [[part]]    name, when, scope, skipped, and any of the rule tables above

Every rule may carry ``id`` (the check's name in the verdict) and ``when``
(a condition over the recording's start; see ``Condition``). A malformed
file raises ``GateFileError`` naming the file and the key.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aos.attrs import RECEIPT_STATUSES
from gates.refusals import GateFileError
from gates.wording import count

__all__ = [
    "ArtifactRule",
    "CheckRule",
    "Condition",
    "DeviceRule",
    "EachRule",
    "EqualRule",
    "ExitRule",
    "Gate",
    "GateFileError",
    "OrderRule",
    "Part",
    "RebuildRule",
    "ReceiptArtifact",
    "ReceiptRule",
    "Rule",
    "Setup",
    "StepRule",
    "TestsRule",
    "load_gate",
    "parse_gate",
    "parse_gate_text",
]

_FAILURE_STATUSES = ("fail", "inconclusive")


# -- conditions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """When a part or rule applies, judged on ``stream.open`` (the recording's start).

    ``env``: that variable was set and non-empty; with ``equals``, set to that
    value. ``env_unset``: that variable was not set (or empty). ``label``: that
    ``--label`` was given (with ``equals``, with that value). All given keys must hold.
    """

    env: str | None = None
    env_unset: str | None = None
    label: str | None = None
    equals: str | None = None

    def describe(self) -> str:
        parts = []
        if self.env:
            parts.append(f"{self.env}={self.equals!r}" if self.equals is not None else f"{self.env} set")
        if self.env_unset:
            parts.append(f"{self.env_unset} unset")
        if self.label:
            parts.append(f"label {self.label}={self.equals!r}" if self.equals is not None else f"label {self.label}")
        return " and ".join(parts) + " at recording start"


# -- rules ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Count:
    min: int = 1
    max: int | None = None

    def describe(self) -> str:
        if self.max is None:
            return f"at least {self.min}"
        if self.max == self.min:
            return f"exactly {self.min}"
        return f"{self.min} to {self.max}"


@dataclass(frozen=True)
class ExitRule:
    """The command's exit code."""

    id: str = "exit-code"
    code: int = 0
    otherwise: str = "fail"
    unfinished: str = "fail"
    when: Condition | None = None
    #: The recording was interrupted (a SIGINT, SIGTERM or SIGHUP forwarded to the command)
    #: and the command still exited on its own: its exit code does not say it finished its work.
    interrupted: str = "inconclusive"

    def describe(self) -> str:
        return (
            f"the command exits {self.code} (otherwise {self.otherwise}; killed or timed out: {self.unfinished}; "
            f"interrupted: {self.interrupted})"
        )


@dataclass(frozen=True)
class StepRule:
    """A step that must have run, and how it must have ended."""

    id: str
    name: str
    exit: int | str = 0  # an int, "nonzero" or "any"
    count: _Count = field(default_factory=_Count)
    stderr_contains: tuple[str, ...] = ()
    when: Condition | None = None

    def describe(self) -> str:
        n = self.count.describe()
        text = f"step {self.name!r} ran {n} {'time' if n.endswith(' 1') else 'times'}, exit {self.exit}"
        if self.stderr_contains:
            text += f", stderr shows {list(self.stderr_contains)}"
        return text


@dataclass(frozen=True)
class ReceiptArtifact:
    """A receipt field naming a file, cross-checked against its captured bytes."""

    path: str
    sha256: str | None = None
    required: bool = True


@dataclass(frozen=True)
class ReceiptRule:
    """Receipts that must have been recorded, and what their fields must say."""

    id: str
    name: str
    where: Mapping[str, Any] = field(default_factory=dict)
    count: _Count = field(default_factory=_Count)
    status: tuple[str, ...] = ("pass",)
    schema: Mapping[str, Any] | None = None
    step: str | None = None
    equal: tuple[tuple[str, str], ...] = ()
    artifacts: tuple[ReceiptArtifact, ...] = ()
    step_exit: str | None = None
    step_stderr: tuple[str, ...] = ()
    when: Condition | None = None

    def describe(self) -> str:
        sel = f" where {dict(self.where)}" if self.where else ""
        text = f"receipt {self.name!r}{sel}: {self.count.describe()}, status {'/'.join(self.status)}"
        if self.schema is not None:
            text += ", fields match schema"
        if self.step:
            text += f", emitted in step {self.step!r}"
        for a, b in self.equal:
            text += f", {a} == {b}"
        for art in self.artifacts:
            text += f", file {art.path} " + ("captured" if art.required else "(where captured)")
            text += f" with sha256 == {art.sha256}" if art.sha256 else ""
        if self.step_exit:
            text += f", {self.step_exit} == step exit code"
        if self.step_stderr:
            text += f", step stderr shows {list(self.step_stderr)}"
        return text


@dataclass(frozen=True)
class ArtifactRule:
    """Captured files matching a glob."""

    id: str
    glob: str
    count: _Count = field(default_factory=_Count)
    sha256_from: str | None = None
    schema: Mapping[str, Any] | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    when: Condition | None = None

    def what(self) -> str:
        """The files this rule counts, in words."""
        text = "artifacts" if self.glob == "**" and self.attrs else f"artifacts matching {self.glob!r}"
        if self.attrs:
            text += " with " + ", ".join(f"{k} {v!r}" for k, v in self.attrs.items())
        return text

    def describe(self) -> str:
        text = f"{self.what()}: {self.count.describe()} captured"
        if self.sha256_from:
            text += f", sha256 == {self.sha256_from}"
        if self.schema is not None:
            text += ", JSON content matches schema"
        return text


@dataclass(frozen=True)
class EqualRule:
    """Receipt fields (``RECEIPT.FIELD``) that must all hold one value."""

    id: str
    values: tuple[str, ...]
    when: Condition | None = None

    def describe(self) -> str:
        return " == ".join(self.values)


@dataclass(frozen=True)
class EachRule:
    """Every ``receipt`` is matched, on fields ``on``, by a good ``needs`` receipt."""

    id: str
    receipt: str
    needs: str
    on: tuple[str, ...]
    where: Mapping[str, Any] = field(default_factory=dict)
    status: tuple[str, ...] = ("pass",)
    equal: tuple[tuple[str, str], ...] = ()
    when: Condition | None = None

    def describe(self) -> str:
        text = f"every {self.receipt!r} has a {'/'.join(self.status)} {self.needs!r} with the same {list(self.on)}"
        for a, b in self.equal:
            text += f", {self.receipt}.{a} == {self.needs}.{b}"
        return text


@dataclass(frozen=True)
class OrderRule:
    """Steps and receipts that must come in this order."""

    id: str
    sequence: tuple[str, ...]
    when: Condition | None = None

    def describe(self) -> str:
        return " < ".join(self.sequence)


@dataclass(frozen=True)
class TestsRule:
    """Captured test-results files (JUnit XML or TAP) and what their test cases must show."""

    __test__ = False  # not a pytest class

    id: str
    glob: str
    format: str  # "junit" or "tap"
    min_tests: int = 1
    failures: int = 0
    errors: int = 0
    max_skipped: int | None = None
    require: tuple[str, ...] = ()
    step: str | None = None
    when: Condition | None = None

    def describe(self) -> str:
        text = (
            f"captured {self.format} files matching {self.glob!r}: at least {count(self.min_tests, 'test')}, "
            f"at most {count(self.failures, 'failure')} and {count(self.errors, 'error')}"
        )
        if self.max_skipped is not None:
            text += f", at most {self.max_skipped} skipped"
        if self.require:
            text += f", {list(self.require)} present and passing"
        if self.step:
            text += f", captured during step {self.step!r}"
        return text


@dataclass(frozen=True)
class CheckRule:
    """A named Python check (registered in gates/checks.py)."""

    id: str
    uses: str
    args: Mapping[str, Any] = field(default_factory=dict)
    when: Condition | None = None

    def describe(self) -> str:
        from gates.checks import CHECKS

        doc = (CHECKS[self.uses].__doc__ or "").strip().splitlines()
        return f"python check {self.uses!r}" + (f": {doc[0]}" if doc else "")


@dataclass(frozen=True)
class RebuildRule:
    """The executables the run captured rebuild byte for byte from the recorded commit.

    The recorder (never the gate) checks the commit out into a fresh tree of its own after
    the command ends, runs ``command`` there (the word ``OUT`` replaced by a fresh output
    folder) as its step ``rebuild``, and captures ``outputs`` (globs relative to ``OUT``);
    the gate compares. ``compare`` limits the comparison to the targets of receipts of that name.
    """

    id: str
    command: tuple[str, ...]
    outputs: tuple[str, ...]
    compare: str | None = None
    timeout: float = 600.0
    when: Condition | None = None

    def describe(self) -> str:
        which = f"the targets of {self.compare!r} receipts" if self.compare else "every executable the run captured"
        return (
            f"{which} rebuild byte for byte from the recorded commit with {list(self.command)} "
            f"(outputs {list(self.outputs)})"
        )


@dataclass(frozen=True)
class DeviceRule:
    """Health facts the recorder observed on the GPUs (gates/health.py): each requirement in every observation."""

    id: str
    gpus: str  # "bound" (the preflight's) or "all" (every GPU observed)
    require: tuple[tuple[str, Any], ...]  # (key of gates.health.DEVICE_REQUIREMENTS, wanted value)
    reason: str = ""
    when: Condition | None = None

    def describe(self) -> str:
        wanted = ", ".join(f"{k} = {v!r}" for k, v in self.require)
        return f"the {self.gpus} GPUs' health as the recorder observed it: {wanted}" + (
            f" ({self.reason})" if self.reason else ""
        )


Rule = (
    ExitRule
    | StepRule
    | ReceiptRule
    | ArtifactRule
    | EqualRule
    | EachRule
    | OrderRule
    | TestsRule
    | CheckRule
    | RebuildRule
    | DeviceRule
)


@dataclass(frozen=True)
class Setup:
    """A part's setup step (``[part.setup]``) and the exit codes of it that are refusals of the run's own setup
    (``refusals``: name -> code): a run that stopped at one, before anything else of the part ran, did not run."""

    step: str
    refusals: tuple[tuple[str, int], ...]

    def refusal(self, code: int | None) -> str | None:
        """The refusal's name for the step's exit ``code``, or None when it is none of them."""
        return next((name for name, value in self.refusals if value == code), None)


@dataclass(frozen=True)
class Part:
    """A group of rules that applies when its condition holds."""

    name: str
    rules: tuple[Rule, ...]
    when: Condition | None = None
    scope: str | None = None
    skipped: str = ""
    setup: Setup | None = None


@dataclass(frozen=True)
class Gate:
    """A named policy: its parts (the first is unconditional) and their rules."""

    name: str
    description: str
    scope: str
    parts: tuple[Part, ...]
    source: str = ""
    digest: str = ""

    @property
    def rules(self) -> list[Rule]:
        return [r for p in self.parts for r in p.rules]

    @property
    def uses_receipts(self) -> bool:
        return any(isinstance(r, ReceiptRule | EachRule | EqualRule) for r in self.rules)


# -- parsing -------------------------------------------------------------------------


class _Table:
    """A TOML table being read: every key must be known and well typed."""

    def __init__(self, data: Any, where: str, source: str) -> None:
        if not isinstance(data, dict):
            raise GateFileError(f"{source}: {where} must be a table")
        self.data: dict[str, Any] = data
        self.where = where
        self.source = source
        self.used: set[str] = set()

    def error(self, msg: str) -> GateFileError:
        return GateFileError(f"{self.source}: {self.where}: {msg}")

    def get(self, key: str, typ: type | tuple[type, ...], default: Any = None, *, required: bool = False) -> Any:
        self.used.add(key)
        if key not in self.data:
            if required:
                raise self.error(f"missing required key {key!r}")
            return default
        value = self.data[key]
        if typ is int and isinstance(value, bool):
            raise self.error(f"{key!r} must be an integer")
        if not isinstance(value, typ):
            names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise self.error(f"{key!r} must be {names}, not {type(value).__name__}")
        return value

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self.get(key, (str, list), None)
        if value is None:
            return default
        if isinstance(value, str):
            return (value,)
        if not all(isinstance(v, str) for v in value):
            raise self.error(f"{key!r} must be a string or a list of strings")
        return tuple(value)

    def pairs(self, key: str) -> tuple[tuple[str, str], ...]:
        value = self.get(key, list, [])
        if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in value):
            raise self.error(f"{key!r} must be a list of [FIELD, FIELD] pairs")
        return tuple((p[0], p[1]) for p in value)

    def count(self) -> _Count:
        count = self.get("count", int)
        lo = self.get("min", int)
        hi = self.get("max", int)
        if count is not None:
            if lo is not None or hi is not None:
                raise self.error("give either 'count' or 'min'/'max', not both")
            lo = hi = count
        lo = 1 if lo is None else lo
        if lo < 0 or (hi is not None and hi < lo):
            raise self.error(f"bad count: min {lo}, max {hi}")
        return _Count(lo, hi)

    def status_of(self, key: str, default: str) -> str:
        value = self.get(key, str, default)
        if value not in _FAILURE_STATUSES:
            raise self.error(f"{key!r} must be 'fail' or 'inconclusive'")
        return str(value)

    def schema(self, key: str = "schema") -> Mapping[str, Any] | None:
        value = self.get(key, dict)
        if value is None:
            return None
        from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
        from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

        from gates.patterns import PatternError, check_schema_safety

        try:
            Draft202012Validator.check_schema(value)
            check_schema_safety(value)
        except SchemaError as exc:
            raise self.error(f"{key!r} is not a valid JSON Schema: {exc.message}") from None
        except PatternError as exc:
            raise self.error(f"{key!r}: {exc}") from None
        except RecursionError:
            raise self.error(f"{key!r} is nested too deeply") from None
        schema: Mapping[str, Any] = value
        return schema

    def when(self) -> Condition | None:
        value = self.get("when", dict)
        if value is None:
            return None
        t = _Table(value, f"{self.where}.when", self.source)
        cond = Condition(
            env=t.get("env", str),
            env_unset=t.get("env_unset", str),
            label=t.get("label", str),
            equals=t.get("equals", str),
        )
        t.done()
        if not (cond.env or cond.env_unset or cond.label):
            raise t.error("needs one of 'env', 'env_unset', 'label'")
        return cond

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.error(f"unknown key(s) {', '.join(repr(k) for k in unknown)}")


def _setup(part: _Table) -> Setup | None:
    """``[part.setup]``: ``step`` (a step name) and ``refusals`` (a table of refusal name -> exit code, 1..255)."""
    value = part.get("setup", dict)
    if value is None:
        return None
    t = _Table(value, f"{part.where}setup", part.source)
    step = t.get("step", str, required=True)
    refusals = t.get("refusals", dict, required=True)
    t.done()
    if not step:
        raise t.error("'step' must name a step")
    if not refusals:
        raise t.error("'refusals' must name at least one refusal")
    for name, code in refusals.items():
        if not name or isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
            raise t.error(f"refusal {name!r} needs an exit code from 1 to 255, not {code!r}")
    if len(set(refusals.values())) != len(refusals):
        raise t.error("two refusals share an exit code")
    return Setup(step, tuple(sorted(refusals.items(), key=lambda kv: kv[1])))


def _statuses(t: _Table, key: str) -> tuple[str, ...]:
    statuses = t.strings(key, ("pass",))
    bad = [s for s in statuses if s not in RECEIPT_STATUSES]
    if bad:
        raise t.error(f"{key!r}: unknown status {bad[0]!r} (one of {', '.join(RECEIPT_STATUSES)})")
    return statuses


def _exit(t: _Table) -> ExitRule:
    rule = ExitRule(
        id=t.get("id", str, "exit-code"),
        code=t.get("code", int, 0),
        otherwise=t.status_of("otherwise", "fail"),
        unfinished=t.status_of("unfinished", "fail"),
        when=t.when(),
        interrupted=t.status_of("interrupted", "inconclusive"),
    )
    t.done()
    return rule


def _step(t: _Table) -> StepRule:
    name = t.get("name", str, required=True)
    exit_ = t.get("exit", (int, str), 0)
    if isinstance(exit_, str) and exit_ not in ("nonzero", "any"):
        raise t.error("'exit' must be an integer, 'nonzero' or 'any'")
    rule = StepRule(
        id=t.get("id", str, f"step:{name}"),
        name=name,
        exit=exit_,
        count=t.count(),
        stderr_contains=t.strings("stderr_contains"),
        when=t.when(),
    )
    t.done()
    return rule


def _receipt(t: _Table) -> ReceiptRule:
    name = t.get("name", str, required=True)
    arts = []
    for i, raw in enumerate(t.get("artifacts", list, [])):
        a = _Table(raw, f"{t.where}.artifacts[{i}]", t.source)
        arts.append(
            ReceiptArtifact(a.get("path", str, required=True), a.get("sha256", str), a.get("required", bool, True))
        )
        a.done()
    rule = ReceiptRule(
        id=t.get("id", str, f"receipt:{name}"),
        name=name,
        where=t.get("where", dict, {}),
        count=t.count(),
        status=_statuses(t, "status"),
        schema=t.schema(),
        step=t.get("step", str),
        equal=t.pairs("equal"),
        artifacts=tuple(arts),
        step_exit=t.get("step_exit", str),
        step_stderr=t.strings("step_stderr"),
        when=t.when(),
    )
    if (rule.step_exit or rule.step_stderr) and not rule.step:
        raise t.error("'step_exit' and 'step_stderr' need 'step'")
    t.done()
    return rule


def _artifact(t: _Table) -> ArtifactRule:
    attrs = t.get("attrs", dict, {})
    if not all(isinstance(v, str | int | bool) for v in attrs.values()):
        raise t.error("'attrs' values must be strings, integers or booleans")
    glob = t.get("glob", str, "**" if attrs else None, required=not attrs)
    src = t.get("sha256_from", str)
    if src is not None and "." not in src:
        raise t.error("'sha256_from' must be RECEIPT.FIELD")
    rule = ArtifactRule(
        id=t.get("id", str, f"artifact:{glob}"),
        glob=glob,
        count=t.count(),
        sha256_from=src,
        schema=t.schema(),
        attrs=attrs,
        when=t.when(),
    )
    t.done()
    return rule


def _equal(t: _Table) -> EqualRule:
    values = t.strings("values")
    if len(values) < 2 or not all("." in v for v in values):
        raise t.error("'values' must list at least two RECEIPT.FIELD references")
    rule = EqualRule(id=t.get("id", str, "equal:" + "=".join(values)), values=values, when=t.when())
    t.done()
    return rule


def _each(t: _Table) -> EachRule:
    receipt = t.get("receipt", str, required=True)
    needs = t.get("needs", str, required=True)
    rule = EachRule(
        id=t.get("id", str, f"each:{receipt}->{needs}"),
        receipt=receipt,
        needs=needs,
        on=t.strings("on"),
        where=t.get("where", dict, {}),
        status=_statuses(t, "status"),
        equal=t.pairs("equal"),
        when=t.when(),
    )
    if not rule.on:
        raise t.error("'on' must name at least one field")
    t.done()
    return rule


def _order(t: _Table) -> OrderRule:
    seq = t.strings("sequence")
    bad = [s for s in seq if not (s.startswith("step:") or s.startswith("receipt:"))]
    if len(seq) < 2 or bad:
        raise t.error("'sequence' must list at least two 'step:NAME' or 'receipt:NAME' items")
    rule = OrderRule(id=t.get("id", str, "order"), sequence=seq, when=t.when())
    t.done()
    return rule


def _tests(t: _Table) -> TestsRule:
    junit, tap = t.get("junit", str), t.get("tap", str)
    if (junit is None) == (tap is None):
        raise t.error("give exactly one of 'junit = \"GLOB\"' or 'tap = \"GLOB\"'")
    glob, fmt = (junit, "junit") if junit is not None else (tap, "tap")
    counts = {key: t.get(key, int, default) for key, default in (("min_tests", 1), ("failures", 0), ("errors", 0))}
    max_skipped = t.get("max_skipped", int)
    bad = [k for k, v in {**counts, "max_skipped": max_skipped}.items() if v is not None and v < 0]
    if bad:
        raise t.error(f"{bad[0]!r} must not be negative")
    rule = TestsRule(
        id=t.get("id", str, f"tests:{glob}"),
        glob=glob,
        format=fmt,
        min_tests=counts["min_tests"],
        failures=counts["failures"],
        errors=counts["errors"],
        max_skipped=max_skipped,
        require=t.strings("require"),
        step=t.get("step", str),
        when=t.when(),
    )
    if any(not r for r in rule.require):
        raise t.error("'require' entries must not be empty")
    t.done()
    return rule


def _check(t: _Table) -> CheckRule:
    from gates.checks import CHECKS

    uses = t.get("uses", str)
    name = t.get("name", str, required=True)
    uses = uses or name
    if uses not in CHECKS:
        raise t.error(f"no Python check named {uses!r} (known: {', '.join(sorted(CHECKS))})")
    rule = CheckRule(id=name, uses=uses, args=t.get("args", dict, {}), when=t.when())
    patterns = rule.args.get("patterns")
    if uses == "output-free-of" and isinstance(patterns, list):
        from gates.patterns import PatternError, compile_pattern

        for pattern in patterns:
            try:
                compile_pattern(str(pattern).encode())
            except PatternError as exc:
                raise t.error(f"args.patterns: {exc}") from None
    t.done()
    return rule


def _rebuild(t: _Table) -> RebuildRule:
    command = t.strings("command")
    outputs = t.strings("outputs")
    if not command or not all(command):
        raise t.error("'command' must be a non-empty list of words")
    if not outputs or any(o.startswith("/") or ".." in o.split("/") or not o for o in outputs):
        raise t.error("'outputs' must list globs relative to OUT (no '/' start, no '..')")
    timeout = t.get("timeout", (int, float), 600.0)
    if isinstance(timeout, bool) or not 0 < timeout <= 86400:
        raise t.error("'timeout' must be a number of seconds from 0 to 86400")
    rule = RebuildRule(
        id=t.get("id", str, "rebuild"),
        command=command,
        outputs=outputs,
        compare=t.get("compare", str),
        timeout=float(timeout),
        when=t.when(),
    )
    t.done()
    return rule


def _device(t: _Table) -> DeviceRule:
    from gates.health import DEVICE_REQUIREMENTS

    gpus = t.get("gpus", str, "bound")
    if gpus not in ("bound", "all"):
        raise t.error(f'\'gpus\' must be "bound" or "all", not {gpus!r}')
    require: list[tuple[str, Any]] = []
    for key, (_fact, kind) in DEVICE_REQUIREMENTS.items():
        if kind == "mode":
            value = t.get(key, str)
            if value is not None and value not in ("enabled", "disabled"):
                raise t.error(f'{key!r} must be "enabled" or "disabled", not {value!r}')
        else:
            value = t.get(key, int)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise t.error(f"{key!r} must be a positive integer")
        if value is not None:
            require.append((key, value))
    if not require:
        raise t.error(f"requires nothing: give at least one of {', '.join(DEVICE_REQUIREMENTS)}")
    rule = DeviceRule(
        id=t.get("id", str, f"device:{gpus}"),
        gpus=gpus,
        require=tuple(require),
        reason=t.get("reason", str, ""),
        when=t.when(),
    )
    t.done()
    return rule


_RULE_TABLES: dict[str, Callable[[_Table], Rule]] = {
    "step": _step,
    "receipt": _receipt,
    "artifact": _artifact,
    "equal": _equal,
    "each": _each,
    "order": _order,
    "tests": _tests,
    "check": _check,
    "rebuild": _rebuild,
    "device": _device,
}


def _rules(t: _Table) -> list[Rule]:
    rules: list[Rule] = []
    for key, parse in _RULE_TABLES.items():
        items = t.get(key, list, [])
        for i, raw in enumerate(items):
            rules.append(parse(_Table(raw, f"{t.where}{key}[{i}]", t.source)))
    return rules


def parse_gate(data: Mapping[str, Any], source: str = "<gate>", digest: str = "") -> Gate:
    """A ``Gate`` from a parsed TOML document (``GateFileError`` when malformed)."""
    top = _Table(dict(data), "", source)
    head = _Table(top.get("gate", dict, required=True), "[gate]", source)
    name = head.get("name", str, required=True)
    if not name or any(c.isspace() for c in name):
        raise head.error(f"bad gate name {name!r}")
    description = head.get("description", str, "")
    scope = head.get("scope", str, "command")
    head.done()
    base: list[Rule] = []
    if "exit" in top.data:
        base.append(_exit(_Table(top.get("exit", dict), "[exit]", source)))
    base.extend(_rules(top))
    parts = [Part("always", tuple(base))]
    for i, raw in enumerate(top.get("part", list, [])):
        pt = _Table(raw, f"part[{i}].", source)
        pname = pt.get("name", str, f"part {i}")
        when = pt.when()
        pscope = pt.get("scope", str)
        skipped = pt.get("skipped", str, f"{pname} did not run")
        setup = _setup(pt)
        prules = _rules(pt)
        pt.done()
        parts.append(Part(pname, tuple(prules), when, pscope, skipped, setup))
    top.done()
    ids = [r.id for p in parts for r in p.rules]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise GateFileError(f"{source}: two rules share the check name(s) {', '.join(dup)}: give one an 'id'")
    return Gate(name, description, scope, tuple(parts), source, digest)


def load_gate(path: str | Path) -> Gate:
    """Read one gate file (a regular file, opened without blocking: a FIFO is refused, not waited on)."""
    p = Path(path)
    try:
        text = _read_text(p)
    except OSError as exc:
        raise GateFileError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise GateFileError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_gate_text(text, str(p))


#: A gate file larger than this is refused: gate files are short, and reading one must be bounded.
MAX_GATE_FILE = 4 << 20


def _read_text(p: Path) -> str:
    """A regular file's text, bounded; a FIFO or device is refused without blocking on it."""
    import stat

    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, f"not a regular file (mode {stat.filemode(st.st_mode)})")
        data = os.read(fd, MAX_GATE_FILE + 1)
        while len(data) <= MAX_GATE_FILE and (more := os.read(fd, MAX_GATE_FILE + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > MAX_GATE_FILE:
        raise OSError(0, f"larger than {MAX_GATE_FILE} bytes")
    return data.decode("utf-8")


def parse_gate_text(text: str, source: str) -> Gate:
    """A ``Gate`` from TOML text; its digest is the SHA-256 of that text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GateFileError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise GateFileError(f"{source}: not valid TOML: nested too deeply") from None
    try:
        return parse_gate(data, source, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    except RecursionError:
        raise GateFileError(f"{source}: nested too deeply") from None
