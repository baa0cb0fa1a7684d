"""The report's page: the model of ``observe.report.model`` laid out for the template (``templates/report.html.j2``).

Everything here is formatting: integers to fixed strings (so the same stream gives the same bytes),
timeline geometry as CSS percentages, output tails through ``ansi_html``, telemetry through
``observe.report.plots``. ``render`` shrinks the output tails and the attrs shown until the page fits
``Caps.page``.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from aos import kinds
from aos.attrs import json_int
from observe.report.model import ReportModel, Tail, ansi_html, cited_seqs, text
from observe.report.plots import Plot, line_plot
from observe.util import formatting

__all__ = ["render"]


def _when(wall: int | None) -> str:
    from datetime import UTC, datetime

    if wall is None:
        return "?"
    try:
        return datetime.fromtimestamp(wall / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{wall} ns (not a date)"


def _pct(part: int, whole: int) -> str:
    """A CSS percentage with two decimals, from integers (the same bytes every time)."""
    value = max(0, min(part, whole)) * 10000 // max(whole, 1)
    return f"{value // 100}.{value % 100:02d}%"


def _cut(shown: str, limit: int) -> str:
    return shown if len(shown) <= limit else shown[:limit] + f"... (+{len(shown) - limit} characters)"


def _context(
    model: ReportModel, stream_name: str, back_link: tuple[str, str] | None, tail: int, attrs: int
) -> dict[str, Any]:
    import shlex

    caps = model.caps
    base = model.process_start_mono if model.process_start_mono is not None else model.start_mono or 0
    end = model.exit_mono if model.exit_mono is not None else model.last_mono or base
    span = max(end - base, 1)
    for st in model.steps:
        stop = st.end_mono if st.end_mono is not None else model.last_mono or st.start_mono
        span = max(span, stop - base)
    timeline = []
    if model.process_start_mono is not None:
        code = model.exit
        timeline.append(
            {
                "label": "command",
                "depth": 0,
                "left": "0.00%",
                "width": _pct(end - base, span),
                "start": formatting.seconds(0),
                "end": formatting.seconds(end - base) if code is not None else "unfinished",
                "duration": formatting.seconds(code.get("duration_ns")) if code is not None else "unfinished",
                "status": _exit_text(code["exit_code"], code["signal"]) if code is not None else "no exit recorded",
                "class": "ok" if code is not None and code["exit_code"] == 0 else "bad",
                "href": None,
            }
        )
    steps = []
    for st in model.steps:
        stop = st.end_mono if st.end_mono is not None else model.last_mono or st.start_mono
        left = st.start_mono - base
        finished = st.end_seq is not None
        status = _exit_text(st.exit_code, st.signal) if finished else "unfinished"
        klass = "ok" if finished and st.exit_code == 0 else ("open" if not finished else "bad")
        timeline.append(
            {
                "label": st.name,
                "depth": st.depth + 1,
                "left": _pct(left, span),
                "width": _pct(max(stop - st.start_mono, span // 500), span),
                "start": formatting.seconds(left),
                "end": formatting.seconds(stop - base) if finished else "unfinished",
                "duration": formatting.seconds(st.duration_ns) if finished else "unfinished",
                "status": status,
                "class": klass,
                "href": f"#step-{st.index}",
            }
        )
        steps.append(
            {
                "index": st.index,
                "name": st.name,
                "argv": st.argv,
                "depth": st.depth,
                "status": status,
                "class": klass,
                "outputs": _outputs(st.out, tail, f"--step {shlex.quote(st.name)}", stream_name),
            }
        )
    v = model.verdict or {}
    raw_checks = v.get("checks")
    checks = []
    for c in raw_checks if isinstance(raw_checks, list) else []:
        if not isinstance(c, dict):
            continue
        ev = c.get("evidence")
        seqs = [s for s in ev if json_int(s) is not None and s >= 0][: caps.cited] if isinstance(ev, list) else []
        checks.append(
            {
                "name": text(c.get("name"), 256),
                "status": text(c.get("status"), 32),
                "reason": text(c.get("reason"), max(attrs, 256)),
                "evidence": seqs,
            }
        )
    not_run = v.get("not_run")
    cited = []
    for seq in cited_seqs(model):
        e = model.cited.get(seq)
        if e is None:
            cited.append({"seq": seq, "missing": True, "kind": "", "step": None, "attrs": "", "data": None})
        else:
            cited.append({**e, "attrs": _cut(e["attrs"], attrs), "data": _cut(e["data"], attrs) if e["data"] else None})
    status_of = model.sealed_verdict
    verdict_word = status_of.get("verdict") if status_of is not None else None
    plots: list[Plot] = []
    if model.telemetry:
        plots.append(line_plot("CPU of the process tree (% of one core)", [model.cpu], span_ns=span, fmt="int"))
        plots.append(line_plot("Resident memory of the process tree", [model.rss], span_ns=span, fmt="bytes"))
        if model.gpu_util:
            plots.append(line_plot("GPU utilisation", list(model.gpu_util.values()), span_ns=span, fmt="percent"))
        if model.gpu_mem:
            plots.append(line_plot("GPU memory in use", list(model.gpu_mem.values()), span_ns=span, fmt="bytes"))
    quoted = shlex.quote(stream_name)
    return {
        "m": model,
        "stream_name": stream_name,
        "quoted": quoted,
        "back_link": back_link,
        "integrity": model.integrity,
        "verdict_word": verdict_word,
        "unsealed_verdict": text(v.get("verdict"), 32) if model.verdict is not None and status_of is None else None,
        "scope": text(v.get("scope"), 64) if model.verdict is not None else None,
        "gate": text(v.get("gate"), 256) if model.verdict is not None else model.gate_requested,
        "summary": text(v.get("summary"), 1024) if model.verdict is not None else "",
        "not_run": [text(n, 1024) for n in not_run[:50]] if isinstance(not_run, list) else [],
        "checks": checks,
        "failing": [c for c in checks if c["status"] != "pass"],
        "cited": cited,
        "receipts": [{**r, "fields": _cut(r["fields"], attrs)} for r in model.receipts],
        "timeline": timeline,
        "steps": steps,
        "top_outputs": _outputs(model.top_out, tail, "", stream_name),
        "command_failed": model.exit is not None and (model.exit["exit_code"] != 0 or bool(model.exit["signal"])),
        "tests": model.tests,
        "plots": plots,
        "started": _when(model.started_wall),
        "exit_text": _exit_text(model.exit["exit_code"], model.exit["signal"]) if model.exit else None,
        "exit_duration": formatting.seconds(model.exit.get("duration_ns")) if model.exit else None,
        "size": formatting.size,
        "receipt_tally": sorted(model.receipt_counts.items()),
        "gpu_processes": list(model.gpu_processes.values()),
        "refusal": None if model.refusal is None else text(model.refusal.diagnostics(), 2048),
        "unreadable": None if model.unreadable is None else text(model.unreadable.diagnostics(), 2048),
        "damage": None if model.damage is None else text(model.damage.diagnostics(), 2048),
    }


def _exit_text(code: int | None, signal: str | None) -> str:
    if signal:
        return f"killed by {signal}"
    return "exit ?" if code is None else f"exit {code}"


def _outputs(outs: dict[str, Tail], cap: int, select: str, stream_name: str) -> list[dict[str, Any]]:
    import shlex

    shown = []
    for kind in (kinds.STDOUT, kinds.STDERR):
        tail = outs.get(kind)
        if tail is None:
            continue
        data = tail.bytes(cap)
        cut = tail.total - len(data)
        read = f"alpha observe read {shlex.quote(stream_name)} --{kind}" + (f" {select}" if select else "")
        shown.append(
            {
                "kind": kind,
                "total": tail.total,
                "cut": cut,
                "html": ansi_html(data),
                "read": read,
            }
        )
    return shown


@functools.cache
def _template() -> Any:
    """The page's template, compiled once per process (compiling it costs far more than rendering a small
    stream's page: a site of many reports compiled it once per report, issue 36)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    from markupsafe import Markup

    from observe.util.templates import bytecode_cache

    env = Environment(
        loader=PackageLoader("observe.report", "templates"),
        bytecode_cache=bytecode_cache(),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["markup"] = Markup  # only ever applied to ansi2html's escaped output
    return env.get_template("report.html.j2")


def render(model: ReportModel, *, stream_name: str | None = None, back_link: tuple[str, str] | None = None) -> str:
    """The page's HTML for ``model``; smaller output tails until it fits ``Caps.page``."""
    template = _template()
    name = stream_name if stream_name is not None else os.path.basename(model.path)
    caps = model.caps
    # Ever smaller output tails, then ever shorter attrs and fields, until the page fits.
    steps = [(caps.tail, caps.attrs), (caps.tail // 4, caps.attrs), (caps.tail // 16, caps.attrs // 4)]
    steps += [(caps.tail // 64, caps.attrs // 16), (0, 128), (0, 0)]
    page = ""
    for tail, attrs in steps:
        page = template.render(**_context(model, name, back_link, tail, attrs))
        if len(page.encode("utf-8")) <= caps.page:
            break
    return page
