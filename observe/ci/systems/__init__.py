"""The CI systems the tool knows, one module each, registered here: the one place every consumer reads.

A CI system (``CiSystem``) says everything the tool does differently under it:

- ``detects(env)``: whether this process runs under it (``detect``/``system_for`` are the one detector:
  the recorder's fold markers, ``gate``'s publishing, the OTLP attributes and the tracker's run all ask it);
- ``nests``, ``fold_open`` and ``fold_close``: the bytes that fold a step in the live echo (``Markers``);
- ``commands``: the workflow-command state the echo follows (GitHub's ``::stop-commands::``), or None;
- ``recorded_names`` and ``recorded_prefixes``: its variables whose values ``stream.open`` records
  (``observe.secrets.envpolicy``);
- ``attributes(get)``: its OpenTelemetry ``cicd.*``/``vcs.*`` attributes (``observe.interop.semconv``),
  of which ``job_url`` names the attribute the tracker records as the run's CI job (``ci_job``);
- ``publish``: what it reads of a verdict after ``gate``/``verdict`` (``observe.ci.publish``), and
  ``summary_beside_stream``: whether the markdown summary defaults to ``STREAM.md``.

``MODULES`` lists the modules of this package, in the order they are asked; each defines ``SYSTEM``.
This package is light (standard library only): the recorder imports it at start.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gates.report import Facts
    from gates.verdict import Verdict
    from observe.ci.workflow import WorkflowCommands

__all__ = [
    "COMMIT",
    "MODULES",
    "SYSTEMS",
    "CiJob",
    "CiSystem",
    "Echo",
    "Get",
    "Markers",
    "Publication",
    "by_name",
    "ci_job",
    "detect",
    "load",
    "markers_for",
    "one_line",
    "system_for",
    "truthy",
    "without_credentials",
]

#: ``get(NAME)``: the value of variable NAME as the consumer reads it, or None when it gives none.
Get = Callable[[str], "str | None"]
#: ``echo(text, to_stderr)``: print one line on stdout, or on stderr.
Echo = Callable[[str, bool], None]
#: The attribute that names the commit a CI job runs (the tracker records it with the run).
COMMIT = "vcs.ref.head.revision"


@dataclass(frozen=True)
class Publication:
    """A verdict to publish where a CI reads it (``observe.ci.publish`` fills it in)."""

    verdict: Verdict
    stream: str
    stream_id: str
    env: Mapping[str, str]
    #: the job summary (``observe.ci.junit.summary_markdown``)
    markdown: str
    facts: Facts | None
    #: where the summary was written, or None
    summary: Path | None
    #: stdout holds the one ``--json`` document: lines for the CI go to stderr
    json_stdout: bool
    echo: Echo

    def say(self, message: str) -> None:
        """A note on stderr (never fatal)."""
        self.echo(f"alpha observe: {message}", True)


def _no_publish(p: Publication) -> None:
    """A CI that reads nothing of a verdict but the command's output."""


@dataclass(frozen=True)
class CiSystem:
    """One CI system: how it is detected, folds steps, what of it is recorded, attributed and published."""

    #: the name streams, the tracker and the OTLP attributes use (``github``)
    name: str
    #: what a person calls it (``GitHub Actions``)
    title: str
    detects: Callable[[Mapping[str, str]], bool]
    #: whether a fold may open inside an open fold
    nests: bool
    #: ``fold_open(count, name)``: ``(text, section)`` opening the ``count``-th fold, for step ``name``
    fold_open: Callable[[int, str], tuple[str, str]]
    #: ``fold_close(section, exit_code)``: the text closing a fold (``exit_code`` None when killed or lost)
    fold_close: Callable[[str, object], str]
    attributes: Callable[[Get], dict[str, str | None]]
    #: the attribute of ``attributes`` that is the job's URL for the tracker
    job_url: str
    recorded_names: frozenset[str] = frozenset()
    recorded_prefixes: tuple[str, ...] = ()
    commands: Callable[[Mapping[str, str]], WorkflowCommands] | None = None
    publish: Callable[[Publication], None] = _no_publish
    summary_beside_stream: bool = False


def truthy(value: str | None) -> bool:
    """A flag variable that is set and not ``0``, ``false``, ``no`` or ``off``."""
    return bool(value) and (value or "").strip().lower() not in ("0", "false", "no", "off")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(name: str) -> str:
    """A step name as one line of plain text: control characters (ESC, CR, LF, ...) shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", name)


def without_credentials(url: str | None) -> str | None:
    """``url`` without a user or password in its authority (a clone URL may carry a token)."""
    if not url:
        return None
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def load(modules: tuple[str, ...]) -> list[CiSystem]:
    """The ``SYSTEM`` of each module of this package named in ``modules``, in their order."""
    return [importlib.import_module(f"{__name__}.{m}").SYSTEM for m in modules]


#: The CI modules of this package, in the order they are asked: the one registration point.
MODULES = ("github", "gitlab", "buildkite")
#: The registered systems; every consumer reads this list when it runs.
SYSTEMS: list[CiSystem] = load(MODULES)


def system_for(env: Mapping[str, str]) -> CiSystem | None:
    """The CI system ``env`` runs under (the first of ``SYSTEMS`` that detects it), or None."""
    return next((s for s in SYSTEMS if s.detects(env)), None)


def detect(env: Mapping[str, str]) -> str | None:
    """The name of the CI this process runs under (``github``, ``gitlab``, ``buildkite``), or None."""
    system = system_for(env)
    return None if system is None else system.name


def by_name(name: str) -> CiSystem:
    """The registered system called ``name``; raises ``KeyError`` for an unknown one."""
    for s in SYSTEMS:
        if s.name == name:
            return s
    raise KeyError(name)


# -- step folding ----------------------------------------------------------------------


@dataclass
class Markers:
    """The bytes that open and close a step's fold in the live echo, for one CI.

    A CI that cannot nest folds (``nests`` False: GitHub, Buildkite) folds only a
    step that starts while no fold is open (its nested steps fold with it).
    """

    system: CiSystem
    #: GitHub: the runner's workflow-command state over what the echo wrote (a ``::stop-commands::``).
    commands: WorkflowCommands | None = None
    _open: list[tuple[str, str]] = field(default_factory=list)  # (span, section), outermost first
    _count: int = 0

    @property
    def ci(self) -> str:
        return self.system.name

    @property
    def nests(self) -> bool:
        return self.system.nests

    def begin(self, span: str, name: str) -> bytes:
        """What to echo when step ``name`` (span id ``span``) starts; empty when it gets no fold."""
        if self._open and not self.nests:
            return b""
        self._count += 1
        text, section = self.system.fold_open(self._count, name)
        self._open.append((span, section))
        return text.encode("utf-8", "backslashreplace")

    def end(self, span: str, exit_code: object) -> bytes:
        """What to echo when the step of ``span`` ends (with ``exit_code``; None when killed or lost)."""
        if not self._open or span not in {s for s, _ in self._open}:
            return b""
        out = b""
        while self._open:  # a fold closes the folds opened inside it that never ended
            open_span, section = self._open.pop()
            out += self.system.fold_close(section, exit_code).encode("utf-8", "backslashreplace")
            if open_span == span:
                break
        return out

    def close_all(self) -> bytes:
        """Close every fold still open (the recording ends)."""
        if not self._open:
            return b""
        return self.end(self._open[0][0], None)


def markers_for(env: Mapping[str, str]) -> Markers | None:
    """The fold markers for the CI of ``env``, or None outside CI."""
    system = system_for(env)
    if system is None:
        return None
    return Markers(system, commands=None if system.commands is None else system.commands(env))


# -- the tracker's CI facts -------------------------------------------------------------


@dataclass(frozen=True)
class CiJob:
    """Where a run ran: ``provider`` (a system's ``name``), the job's URL, the commit."""

    provider: str
    job_url: str | None
    commit: str | None


def ci_job(env: Mapping[str, str]) -> CiJob | None:
    """The CI job ``env`` names (its system's ``job_url`` and ``COMMIT`` attributes), or None outside CI.

    A value the environment lacks, or holds only white space, is None.
    """
    system = system_for(env)
    if system is None:
        return None

    def get(name: str) -> str | None:
        return (env.get(name) or "").strip() or None

    attrs = system.attributes(get)
    return CiJob(system.name, attrs.get(system.job_url), attrs.get(COMMIT))
