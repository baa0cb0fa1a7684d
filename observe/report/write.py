"""``alpha observe report``: one self-contained HTML page of a stream.

``write_report`` gathers the model in one bounded pass (``observe.report.model``),
lays it out (``observe.report.page``: Jinja2, autoescape on, every attr untrusted
text; style inline, no script, nothing loaded from the network) and writes it.
The same stream gives the same bytes (no clock, no randomness). It never raises
for a damaged, unsealed or garbage stream: the page says what is wrong; it
raises ``OSError`` only when ``out`` cannot be written. docs/REPORT.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from observe.report.model import CAPS, Caps, ReportModel, ansi_html, build_model, text
from observe.report.page import render
from observe.util.atomic import replace_file

if TYPE_CHECKING:
    from aos.signing import Verifier
    from aos.verify import Verification

__all__ = ["CAPS", "Caps", "ReportFacts", "ReportModel", "ansi_html", "build_model", "render", "text", "write_report"]


@dataclass(frozen=True)
class ReportFacts:
    """What a report found, for callers (``alpha tracker site``) that link to it."""

    stream_id: str | None
    verdict: str | None  # pass / fail / inconclusive of the sealed verdict; None when no sealed verdict
    scope: str | None
    gate: str | None
    #: One short phrase: "intact and sealed" (then ", signed by key ID", and " (signature checked)" when a key
    #: was given), "unsealed (recorder killed?)" or "damaged: NAME" (the verifier's refusal).
    integrity: str
    events: int
    page_bytes: int


def write_report(
    stream: Path,
    out: Path,
    *,
    back_link: tuple[str, str] | None = None,
    public_key: Verifier | None = None,
    verification: Verification | None = None,
) -> ReportFacts:
    """Write the HTML report of ``stream`` to ``out``; return what it found.

    Never raises for a damaged, unsealed or garbage stream (the page says what is
    wrong); ``OSError`` when ``out`` cannot be written. The same stream gives the
    same bytes. With ``public_key`` the seal's signature is checked as well. ``verification``: the stream's
    verification (no key) the caller already made, of this file: not made again (``build_model``).
    """
    model = build_model(stream, public_key=public_key, verification=verification)
    page = render(model, stream_name=Path(stream).name, back_link=back_link).encode("utf-8")
    replace_file(out, page)
    v = model.sealed_verdict
    return ReportFacts(
        stream_id=model.stream_id,
        verdict=None if v is None else str(v.get("verdict")),
        scope=None if v is None else text(v.get("scope"), 64),
        gate=None if v is None else text(v.get("gate"), 256),
        integrity=model.integrity,
        events=model.events,
        page_bytes=len(page),
    )
