"""Telemetry plots for the HTML report: bounded series, and the geometry of inline SVG line plots.

A stream may hold millions of samples; the page shows a fixed number of points.
``Series`` keeps at most ``2 * buckets`` buckets whatever it is fed: when full, it
merges neighbours pairwise (so each bucket covers twice the samples), keeping each
bucket's minimum and maximum with their times, so a spike is never averaged away.
``line_plot`` turns series into a ``Plot``: polyline points, axis ticks and a legend,
all integers or fixed-point strings (the same stream gives the same bytes). The SVG
markup itself is written by the template (``templates/report.html.j2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from observe.util.formatting import BINARY_UNITS

__all__ = ["BUCKETS", "PALETTE", "Plot", "Series", "Trace", "line_plot"]

#: Points a series keeps, at most twice this many buckets (each a min and a max).
BUCKETS = 200

#: Line colours, one per series in legend order (colour-blind safe: Okabe-Ito).
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442")


@dataclass
class Series:
    """One named line, downsampled as it is fed: buckets of ``[t_lo, lo, t_hi, hi]``."""

    label: str
    buckets: int = BUCKETS
    width: int = 1  # samples per bucket
    _data: list[list[int]] = field(default_factory=list)
    _fill: int = 0  # samples in the last bucket
    samples: int = 0

    def add(self, t: int, value: int) -> None:
        """Add a sample ``value`` at time ``t`` (integers; times non-decreasing)."""
        self.samples += 1
        if self._data and self._fill < self.width:
            b = self._data[-1]
            if value < b[1]:
                b[0], b[1] = t, value
            if value > b[3]:
                b[2], b[3] = t, value
            self._fill += 1
            return
        if len(self._data) >= 2 * self.buckets:
            merged = []
            for i in range(0, len(self._data), 2):
                a = self._data[i]
                c = self._data[i + 1] if i + 1 < len(self._data) else a
                lo = a if a[1] <= c[1] else c
                hi = a if a[3] >= c[3] else c
                merged.append([lo[0], lo[1], hi[2], hi[3]])
            self._data = merged
            self.width *= 2
        self._data.append([t, value, t, value])
        self._fill = 1

    def points(self) -> list[tuple[int, int]]:
        """The kept points in time order: each bucket's min and max (once when they are one sample)."""
        out: list[tuple[int, int]] = []
        for t_lo, lo, t_hi, hi in self._data:
            pair = [(t_lo, lo), (t_hi, hi)] if (t_lo, lo) != (t_hi, hi) else [(t_lo, lo)]
            out.extend(sorted(pair))
        return out


@dataclass(frozen=True)
class Trace:
    """One line of a plot: its label, colour and SVG polyline points."""

    label: str
    color: str
    points: str
    samples: int


@dataclass(frozen=True)
class Plot:
    """An SVG line plot's geometry: frame, ticks (position, label), traces."""

    title: str
    width: int
    height: int
    left: int
    top: int
    inner_w: int
    inner_h: int
    xticks: tuple[tuple[int, str], ...]
    yticks: tuple[tuple[int, str], ...]
    traces: tuple[Trace, ...]


def _nice(top: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at least ``top`` (at least 1)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= top:
                return m * step
        step *= 10


def _secs(ns: int) -> str:
    s = ns // 1_000_000_000
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def line_plot(
    title: str,
    series: Sequence[Series],
    *,
    span_ns: int,
    fmt: str = "int",
    width: int = 560,
    height: int = 200,
) -> Plot:
    """Lay out ``series`` (times in ns from the command's start, up to ``span_ns``) as a line plot.

    ``fmt`` labels the y axis: ``int``, ``percent`` or ``bytes``.
    """
    left, top, right, bottom = 64, 24, 12, 28
    iw, ih = width - left - right, height - top - bottom
    span = max(span_ns, 1)
    peak = max((v for s in series for _, v in s.points()), default=0)
    if fmt == "percent" and peak <= 100:
        ymax = 100
    elif fmt == "bytes":
        unit = next((u for u in (1 << 30, 1 << 20, 1 << 10) if peak >= u), 1)
        ymax = _nice(-(-peak // unit)) * unit
    else:
        ymax = _nice(max(peak, 1))
    traces = []
    for i, s in enumerate(series):
        pts = []
        for t, v in s.points():
            x = left + min(max(t, 0), span) * iw // span
            y = top + ih - min(max(v, 0), ymax) * ih // ymax
            pts.append(f"{x},{y}")
        traces.append(Trace(s.label, PALETTE[i % len(PALETTE)], " ".join(pts), s.samples))
    yticks = tuple((top + ih - k * ih // 4, _label(ymax * k // 4, fmt)) for k in range(5))
    xticks = tuple((left + k * iw // 4, _secs(span * k // 4)) for k in range(5))
    return Plot(title, width, height, left, top, iw, ih, xticks, yticks, tuple(traces))


def _label(value: int, fmt: str) -> str:
    if fmt == "percent":
        return f"{value}%"
    if fmt == "bytes":
        for unit, size in BINARY_UNITS:
            if value >= size:
                return f"{value * 100 // size / 100:g} {unit}"
        return f"{value} B"
    return str(value)
