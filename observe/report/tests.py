"""The report's "Tests" section: the captured test results a verdict's ``[[tests]]`` checks read, failing first.

The verdict names the files (``test_files``); their bytes are read back from
the stream in one more targeted pass (``gates.report.facts_from_events``, bounded
as ``[[tests]]`` reads), parsed as the check parsed them, and kept under caps:
every failing test up to ``MAX_FAILING`` per file, then up to ``MAX_OTHERS`` of
the rest. A damaged stream or a malformed verdict gives no section, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gates.testcases import TestCase

__all__ = ["MAX_FAILING", "MAX_OTHERS", "read_tests"]

#: Failing tests listed per file, and other tests.
MAX_FAILING = 200
MAX_OTHERS = 500


def text(value: str, limit: int) -> str:
    """Recorded text for the page: control characters as escapes (line breaks kept), cut to ``limit``."""
    from aos.text import printable

    shown = "\n".join(printable(line) for line in value.split("\n"))
    return shown if len(shown) <= limit else shown[:limit] + f"... (+{len(shown) - limit} characters)"


def _row(c: TestCase, detail: bool) -> dict[str, Any]:
    where = f"{c.file}:{c.line}" if c.file and c.line is not None else (c.file or "")
    return {
        "id": text(c.id, 512),
        "status": c.status,
        "where": text(where, 256),
        "message": text(c.message, 1024),
        "detail": text(c.detail, 4096) if detail and c.detail else "",
    }


def read_tests(path: str, verdict: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The section's files, in the verdict's order (empty when it names none or cannot be read)."""
    from aos.reader import StreamFile
    from aos.refusals import Refusal
    from gates.report import facts_from_events
    from gates.verdict import Verdict
    from observe.ci.junit import captured_suites, named_test_files

    if not verdict or not verdict.get("test_files"):
        return []
    try:
        v = Verdict.from_attrs(verdict)
        seqs = [s for _, _, s in named_test_files(v)]
        with StreamFile(path) as f:
            facts = facts_from_events(f.events(), (), seqs)
    except Refusal:
        return []
    out = []
    for s in captured_suites(v, facts):
        cases = s.parsed.cases if s.parsed is not None else ()
        failing = [c for c in cases if c.status in ("failed", "error")]
        others = [c for c in cases if c.status not in ("failed", "error")]
        out.append(
            {
                "path": s.path,
                "format": s.format,
                "seq": s.seq,
                "problem": s.problem,
                "total": len(cases),
                "counts": {k: sum(1 for c in cases if c.status == k) for k in ("passed", "failed", "error", "skipped")},
                "failing": [_row(c, True) for c in failing[:MAX_FAILING]],
                "failing_omitted": max(len(failing) - MAX_FAILING, 0),
                "others": [_row(c, False) for c in others[:MAX_OTHERS]],
                "others_omitted": max(len(others) - MAX_OTHERS, 0),
            }
        )
    return out
