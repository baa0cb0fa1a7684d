"""GitHub Actions (``GITHUB_ACTIONS=true``): folds, annotations, job summary and step outputs.

Each step of the live echo is folded in ``::group::NAME`` / ``::endgroup::`` (GitHub
cannot nest groups). ``gate`` prints an ``::error`` or ``::warning`` annotation for
each check that did not pass (and each failing test captured); ``gate`` and
``verdict`` append the markdown job summary to ``$GITHUB_STEP_SUMMARY`` and
``verdict=``, ``scope=``, ``stream=``, ``stream_id=`` to ``$GITHUB_OUTPUT``.

The markers go to the recorder's own echo only, never into the stream: what a
stream says the command printed is what it printed. The echo also follows
``::stop-commands::TOKEN`` (``observe.ci.workflow``): a fold marker is written
between ``::TOKEN::`` and the same stop again, and when the recording ends the
recorder resumes workflow commands and leaves them running, so its annotations
are processed. This module is light (standard library only): the recorder imports
it at start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from observe.ci.systems import CiSystem, Get, Publication, one_line
from observe.ci.workflow import WorkflowCommands
from observe.env import GitHubVars

if TYPE_CHECKING:
    from gates.report import Facts
    from gates.verdict import Verdict

__all__ = [
    "SYSTEM",
    "append_github_outputs",
    "append_text",
    "escape_data",
    "escape_property",
    "github_annotations",
    "github_lines",
    "github_output_lines",
    "parse_github_file",
]


def _detects(env: Mapping[str, str]) -> bool:
    return env.get(GitHubVars.ACTIONS) == "true"


def _fold_open(count: int, name: str) -> tuple[str, str]:
    return f"::group::{one_line(escape_data(name))}\n", ""


def _fold_close(section: str, exit_code: object) -> str:
    return "::endgroup::\n"


def _attributes(get: Get) -> dict[str, str | None]:
    server, repo, run = get(GitHubVars.SERVER_URL), get(GitHubVars.REPOSITORY), get(GitHubVars.RUN_ID)
    repo_url = f"{server.rstrip('/')}/{repo}" if server and repo else None
    run_url = f"{repo_url}/actions/runs/{run}" if repo_url and run else None
    if run_url and (attempt := get(GitHubVars.RUN_ATTEMPT)):
        run_url += f"/attempts/{attempt}"
    ref = get("GITHUB_REF") or ""
    change = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", ref)
    ref_type = get("GITHUB_REF_TYPE")
    return {
        "cicd.pipeline.name": get("GITHUB_WORKFLOW"),
        "cicd.pipeline.run.id": run,
        "cicd.pipeline.run.url.full": run_url,
        "cicd.pipeline.task.name": get("GITHUB_JOB"),
        "vcs.provider.name": "github",
        "vcs.repository.url.full": repo_url,
        "vcs.repository.name": repo.rsplit("/", 1)[-1] if repo else None,
        "vcs.owner.name": get("GITHUB_REPOSITORY_OWNER"),
        "vcs.ref.head.revision": get(GitHubVars.SHA),
        "vcs.ref.head.name": get("GITHUB_HEAD_REF") or get("GITHUB_REF_NAME"),
        "vcs.ref.head.type": ref_type if ref_type in ("branch", "tag") else None,
        "vcs.ref.base.name": get("GITHUB_BASE_REF"),
        "vcs.change.id": change.group(1) if change else None,
    }


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
    import secrets  # hmac and OpenSSL's hashes: only when a value needs a delimiter, never at the recorder's start

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


# -- publishing a verdict ----------------------------------------------------------------


def github_lines(v: Verdict, facts: Facts | None) -> list[str]:
    """GitHub workflow commands: one per check that did not pass, then one ``::error`` per failing test
    (``file=``/``line=`` where known), at most ``MAX_ANNOTATIONS``, then the count of the rest."""
    from observe.ci.junit import MAX_ANNOTATIONS, captured_suites, failing_cases

    out = github_annotations(v)
    failing = list(failing_cases(captured_suites(v, facts)))
    for s, c in failing[:MAX_ANNOTATIONS]:
        props = []
        if c.file:
            props.append(f"file={escape_property(c.file)}")
            if c.line is not None:
                props.append(f"line={c.line}")
        props.append(f"title={escape_property(f'test {c.id} {c.status}')}")
        message = c.message or f"{c.id} {c.status}"
        out.append(f"::error {','.join(props)}::{escape_data(f'{message} ({s.path})')}")
    rest = len(failing) - MAX_ANNOTATIONS
    if rest > 0:
        out.append(f"::error title=more failing tests::{rest} more failing test(s), not annotated one by one")
    return out


def _publish(p: Publication) -> None:
    """The annotations (on stdout, or stderr when stdout holds ``--json``: the runner reads both), the job
    summary and the step outputs (a file that cannot be written is said, never fatal)."""
    for line in github_lines(p.verdict, p.facts):
        p.echo(line, p.json_stdout)
    summary = p.env.get(GitHubVars.STEP_SUMMARY)
    if summary:
        try:
            append_text(Path(summary), p.markdown)
        except OSError as exc:
            p.say(f"cannot append to GITHUB_STEP_SUMMARY {summary}: {exc.strerror or exc}")
    output = p.env.get(GitHubVars.OUTPUT)
    if output:
        values = {"verdict": p.verdict.verdict, "scope": p.verdict.scope, "stream": p.stream, "stream_id": p.stream_id}
        try:
            append_github_outputs(Path(output), values)
        except OSError as exc:
            p.say(f"cannot append to GITHUB_OUTPUT {output}: {exc.strerror or exc}")


SYSTEM = CiSystem(
    name="github",
    title="GitHub Actions",
    detects=_detects,
    nests=False,
    fold_open=_fold_open,
    fold_close=_fold_close,
    attributes=_attributes,
    job_url="cicd.pipeline.run.url.full",
    recorded_names=frozenset(
        {
            "GITHUB_ACTIONS",
            "GITHUB_SHA",
            "GITHUB_REF",
            "GITHUB_REF_NAME",
            "GITHUB_REF_TYPE",
            "GITHUB_HEAD_REF",
            "GITHUB_BASE_REF",
            "GITHUB_RUN_ID",
            "GITHUB_RUN_NUMBER",
            "GITHUB_RUN_ATTEMPT",
            "GITHUB_JOB",
            "GITHUB_WORKFLOW",
            "GITHUB_WORKFLOW_REF",
            "GITHUB_REPOSITORY",
            "GITHUB_REPOSITORY_OWNER",
            "GITHUB_SERVER_URL",
            "GITHUB_EVENT_NAME",
            "GITHUB_ACTOR",
            "GITHUB_WORKSPACE",
            "GITHUB_ACTION",
            "RUNNER_OS",
            "RUNNER_ARCH",
            "RUNNER_NAME",
            "RUNNER_ENVIRONMENT",
        }
    ),
    commands=WorkflowCommands,
    publish=_publish,
)
