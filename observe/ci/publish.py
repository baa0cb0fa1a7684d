"""Publishing a verdict where CI systems read it, after ``gate`` or ``verdict``.

:func:`publish_verdict` decides and writes everything but the verdict's table:

- ``--junit FILE``: the verdict as JUnit XML;
- ``--summary FILE``: the verdict as markdown; under a CI whose ``summary_beside_stream``
  is set (Buildkite) the default is ``STREAM.md``;
- then the ``publish`` of the CI the environment names (``observe.ci.systems``): GitHub's
  annotations, job summary and step outputs, Buildkite's ``buildkite-agent annotate`` line.

A file asked for that cannot be written makes the result False (the command then
exits 125); one the CI's environment names is said and never fatal. Text goes out
through ``echo(text, to_stderr)``, so the command line keeps its own output rules.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from observe.ci.systems import Echo, Publication, system_for

if TYPE_CHECKING:
    from gates.report import Facts
    from gates.verdict import Verdict

__all__ = ["Echo", "prepare_files", "publish_verdict", "write_stdio"]


def write_stdio(text: str, to_stderr: bool) -> None:
    """The default ``Echo``: ``text`` and a newline on stdout or stderr, flushed."""
    stream = sys.stderr if to_stderr else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def _say(echo: Echo, message: str) -> None:
    echo(f"alpha observe: {message}", True)


def prepare_files(files: Iterable[tuple[Path | None, str]], echo: Echo = write_stdio) -> bool:
    """Create the missing folders of each ``(path, what)`` asked for and check it can be written.

    ``gate`` calls it before the command runs; False (and each failure said) when any cannot.
    """
    ok = True
    for path, what in files:
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab"):
                pass
        except OSError as exc:
            _say(echo, f"cannot write {what} {path}: {exc.strerror or exc}")
            ok = False
            break  # as before: the first file that cannot be written stops the gate
    return ok


def _write(path: Path, text: str, what: str, echo: Echo) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        _say(echo, f"cannot write {what} {path}: {exc.strerror or exc}")
        return False
    return True


def publish_verdict(
    v: Verdict,
    *,
    stream: str,
    stream_id: str,
    env: Mapping[str, str],
    json_stdout: bool = False,
    junit: Path | None = None,
    summary: Path | None = None,
    facts: Facts | None = None,
    key_id: str | None = None,
    echo: Echo = write_stdio,
) -> bool:
    """Write the verdict of ``stream`` everywhere the CI of ``env`` reads it; False when a file asked for failed.

    ``json_stdout`` says stdout holds one JSON document (``--json``): annotations go to
    stderr then. ``facts`` give the JUnit report its output tails and the captured test files
    (observe.ci.junit), carried into the report, the summary and the annotations. ``key_id``: the key
    that signed the seal (the summary's commands then verify with its public key, ``--key``).
    """
    from observe.ci import junit as ci_junit

    ok = True
    if junit is not None:
        ok = _write(junit, ci_junit.junit_report(v, stream=stream, facts=facts), "the JUnit report", echo) and ok
    system = system_for(env)
    markdown = ci_junit.summary_markdown(v, stream=stream, stream_id=stream_id, facts=facts, key_id=key_id)
    if summary is None and system is not None and system.summary_beside_stream:
        summary = Path(stream + ".md")
    if summary is not None:
        ok = _write(summary, markdown, "the summary", echo) and ok
    if system is not None:
        system.publish(
            Publication(
                verdict=v,
                stream=stream,
                stream_id=stream_id,
                env=env,
                markdown=markdown,
                facts=facts,
                summary=summary,
                json_stdout=json_stdout,
                echo=echo,
            )
        )
    return ok
