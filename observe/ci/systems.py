"""What CI systems read: step folding in the live echo, job outputs, summaries.

The recorder detects the CI it runs under from the environment (``detect``):

- GitHub Actions (``GITHUB_ACTIONS=true``): each step of the live echo is folded
  in ``::group::NAME`` / ``::endgroup::``; ``gate`` prints an ``::error`` or
  ``::warning`` annotation for each check that did not pass; ``gate`` and ``verdict`` append a
  markdown job summary to ``$GITHUB_STEP_SUMMARY`` and ``verdict=``,
  ``scope=``, ``stream=``, ``stream_id=`` to ``$GITHUB_OUTPUT``.
- GitLab CI (``GITLAB_CI``): each step is a collapsible section
  (``ESC[0Ksection_start:TIME:NAME[collapsed=true]\\rESC[0KHEADER``, then
  ``section_end``).
- Buildkite (``BUILDKITE``): each step opens a ``--- NAME`` group, and a step that
  failed re-opens it with ``^^^ +++``; the summary is written to a file for
  ``buildkite-agent annotate``.

The markers go to the recorder's own echo only, never into the stream: what a
stream says the command printed is what it printed. Under GitHub the echo also
follows ``::stop-commands::TOKEN`` (``observe.ci.workflow``): a fold marker is
written between ``::TOKEN::`` and the same stop again, and when the recording
ends the recorder resumes workflow commands and leaves them running, so its
annotations are processed. This module is light
(standard library only): the recorder imports it at start.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from observe.ci.workflow import WorkflowCommands
from observe.env import BuildkiteVars, GitHubVars, GitLabVars

if TYPE_CHECKING:
    from gates.verdict import Verdict

__all__ = [
    "BUILDKITE",
    "GITHUB",
    "GITLAB",
    "Markers",
    "append_github_outputs",
    "append_text",
    "detect",
    "escape_data",
    "escape_property",
    "github_annotations",
    "github_output_lines",
    "markers_for",
    "parse_github_file",
]

GITHUB = "github"
GITLAB = "gitlab"
BUILDKITE = "buildkite"


def _truthy(value: str | None) -> bool:
    return bool(value) and (value or "").strip().lower() not in ("0", "false", "no", "off")


def detect(env: Mapping[str, str]) -> str | None:
    """The CI this process runs under (``github``, ``gitlab``, ``buildkite``), or None.

    GitHub Actions sets ``GITHUB_ACTIONS=true``, GitLab ``GITLAB_CI=true``,
    Buildkite ``BUILDKITE=true``.
    """
    if env.get(GitHubVars.ACTIONS) == "true":
        return GITHUB
    if _truthy(env.get(GitLabVars.CI)):
        return GITLAB
    if _truthy(env.get(BuildkiteVars.BUILDKITE)):
        return BUILDKITE
    return None


# -- GitHub's escaping ---------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as the Actions toolkit does (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``title=``): also ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(v: Verdict) -> list[str]:
    """Workflow commands, one per check that did not pass: ``::error`` for a failure,
    ``::warning`` for an inconclusive check, each with a ``title=``."""
    out = []
    for c in v.failing():
        command = "error" if c.status == "fail" else "warning"
        title = escape_property(f"gate {v.gate}: {c.name} {c.status}")
        out.append(f"::{command} title={title}::{escape_data(c.reason)}")
    return out


# -- step folding ----------------------------------------------------------------------

_SECTION_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _one_line(name: str) -> str:
    """A step name as one line of plain text: control characters (ESC, CR, LF, ...) shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", name)


@dataclass
class Markers:
    """The bytes that open and close a step's fold in the live echo, for one CI.

    GitHub and Buildkite cannot nest folds: only a step that starts while no fold
    is open gets one (its nested steps fold with it). GitLab nests sections.
    """

    ci: str
    #: GitHub: the runner's workflow-command state over what the echo wrote (a ``::stop-commands::``).
    commands: WorkflowCommands | None = None
    _open: list[tuple[str, str]] = field(default_factory=list)  # (span, section name), outermost first
    _count: int = 0

    @property
    def nests(self) -> bool:
        return self.ci == GITLAB

    def begin(self, span: str, name: str) -> bytes:
        """What to echo when step ``name`` (span id ``span``) starts; empty when it gets no fold."""
        if self._open and not self.nests:
            return b""
        self._count += 1
        if self.ci == GITHUB:
            self._open.append((span, ""))
            return f"::group::{_one_line(escape_data(name))}\n".encode("utf-8", "backslashreplace")
        if self.ci == GITLAB:
            section = f"step_{self._count}_{_SECTION_NAME.sub('_', name)[:64]}"
            self._open.append((span, section))
            header = _one_line(name)
            return f"\x1b[0Ksection_start:{int(time.time())}:{section}[collapsed=true]\r\x1b[0K{header}\n".encode(
                "utf-8", "backslashreplace"
            )
        self._open.append((span, ""))
        return f"--- {_one_line(name)}\n".encode("utf-8", "backslashreplace")

    def end(self, span: str, exit_code: object) -> bytes:
        """What to echo when the step of ``span`` ends (with ``exit_code``; None when killed or lost)."""
        if not self._open or span not in {s for s, _ in self._open}:
            return b""
        out = b""
        while self._open:  # a fold closes the folds opened inside it that never ended
            open_span, section = self._open.pop()
            if self.ci == GITHUB:
                out += b"::endgroup::\n"
            elif self.ci == GITLAB:
                out += f"\x1b[0Ksection_end:{int(time.time())}:{section}\r\x1b[0K\n".encode()
            elif exit_code != 0:
                out += b"^^^ +++\n"  # Buildkite: expand the group that just failed
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
    ci = detect(env)
    if ci is None:
        return None
    return Markers(ci, commands=WorkflowCommands(env) if ci == GITHUB else None)


# -- $GITHUB_OUTPUT ----------------------------------------------------------------------


def parse_github_file(text: str) -> tuple[dict[str, str], str | None]:
    """Parse a ``$GITHUB_OUTPUT`` file as the Actions runner does: ``(values, open_delimiter)``.

    ``NAME=VALUE`` lines (split at the first ``=``) and ``NAME<<DELIM`` heredocs;
    a later value of a name replaces an earlier one. ``open_delimiter`` is the
    delimiter of a heredoc the file leaves unterminated (None when none).
    Raises ``ValueError`` on a line the runner rejects.
    """
    values: dict[str, str] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        eq, heredoc = line.find("="), line.find("<<")
        if eq >= 0 and (heredoc < 0 or eq < heredoc):
            name, value = line.split("=", 1)
            if not name:
                raise ValueError(f"invalid line {line!r}: empty name")
            values[name] = value
        elif heredoc >= 0:
            name, delimiter = line.split("<<", 1)
            if not name or not delimiter:
                raise ValueError(f"invalid line {line!r}: empty name or delimiter")
            body: list[str] = []
            while i < len(lines) and lines[i] != delimiter:
                body.append(lines[i])
                i += 1
            if i >= len(lines):
                return values, delimiter
            i += 1
            values[name] = "\n".join(body)
        else:
            raise ValueError(f"invalid line {line!r}")
    return values, None


def github_output_lines(values: Mapping[str, str], delimiter: str | None = None) -> str:
    """``NAME=VALUE`` lines; a value holding CR or LF in the heredoc form with a random delimiter."""
    out = []
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            delim = delimiter or f"ghadelimiter_{secrets.token_hex(16)}"
            while delim in value:  # pragma: no cover - a 128-bit random delimiter
                delim = f"ghadelimiter_{secrets.token_hex(16)}"
            out.append(f"{name}<<{delim}\n{value}\n{delim}\n")
        else:
            out.append(f"{name}={value}\n")
    return "".join(out)


def _repair_prefix(path: Path) -> str:
    """What must precede our lines in ``path`` so the runner reads them as written.

    The recorded command can write ``$GITHUB_OUTPUT`` too (it inherits the
    variable): a last line without its newline would swallow our first name, and
    an unterminated heredoc would swallow our lines as its value (its delimiter
    could even be one of our lines, dropping it). So a missing newline is added
    and an open heredoc is closed first; later values replace earlier ones, so
    ours, written last, are the ones the job sees.
    """
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    prefix = "" if not text or text.endswith("\n") else "\n"
    try:
        _, open_delim = parse_github_file(text + prefix)
    except ValueError:
        return prefix  # the runner rejects the file anyway: a failed step, never our values read wrong
    if open_delim is not None:
        prefix += open_delim + "\n"
    return prefix


def append_text(path: Path, text: str, *, repair: bool = False) -> None:
    """Append ``text`` to ``path`` (creating it), in one write; raises ``OSError``."""
    if repair:
        text = _repair_prefix(path) + text
    data = text.encode("utf-8", "backslashreplace")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def append_github_outputs(path: Path, values: Mapping[str, str]) -> None:
    """Append step outputs to ``$GITHUB_OUTPUT`` so the runner reads exactly ``values`` for them."""
    append_text(path, github_output_lines(values), repair=True)
