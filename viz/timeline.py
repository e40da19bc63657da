"""A picture of time for a traced run: event time against arrival time, as PNG and as HTML.

The x axis is arrival (the arrival stamps of semantics §4), the y axis event (application) time.
One panel per input shows what the input received: each event at (arrival, original start; an
END edge at its end), an interval with its lifetime as a bar, **dropped** events in red,
**adjusted** events as an orange arrow from the original start to the new one (a late END edge:
from its end to the CTI it closes its edge at), each marked by its reason (a cross or circle for
a CTI violation; for the arrival-time policies of an ordered input a triangle up for ``early``,
down for ``late``, a square for ``out-of-order``, a diamond below the lowest time for
``no-event-time``, a plus for several), explicit CTIs as hollow
diamonds (grey when ignored), the end of input as a dashed line, and the input's CTIs (explicit,
generated, imported, merged over partitions) as a step line. A last panel shows each stateful
operator's output CTIs and the query's output CTIs as step lines, over the inputs' CTIs in faint.
A stream with substreams (an input with ``EventOrderingSettings(over=...)`` and the stateful
operators that keep its key) also has a thin step line per key: the key's CTI, the larger of the
stream's latest CTI and the key's latest keyed CTI (docs/decisions.md, "Per-key CTIs"), drawn
where it is above the stream's CTI: from the stream's line up to each keyed CTI (a dot) until the
stream's CTI catches up. At most ``max_keys`` keys per stream (10; the first to get a keyed
CTI), and the page says how many were left out.
Dotted vertical lines are the epoch cuts. CTIs at ``+inf`` are drawn on a row above the finite
range, and the CTIs that flush inputs when a bounded run stops in a "stop" column on the right.

The last panel also shows the query's **output events**, each at the arrival it was emitted
at. Intervals are vertical bars from start to end; an **edge** is a lifetime bar from its START
edge's arrival along its start to its END edge's arrival and up to its end (paired as ingress
pairs them: ``TraceItem.match``); an edge never closed runs to the right edge and ends in a
hollow arrowhead. When arrival stamps and event times are both dates or both counters, both
axes share one time origin and unit, and a dotted diagonal marks event time = arrival time.

The PNG is drawn with matplotlib (Agg, no pyplot state), which only the ``viz`` extra installs
(``pip install "ctistream[viz]"``): it is imported when a PNG is drawn, and without it
:meth:`Timeline.png` raises ImportError saying so (:func:`require_matplotlib`). The HTML page
is self-contained: one file, inline SVG, CSS and script (``viz/timeline.js``: zoom and pan by
wheel, drag and buttons, a filter by substream key), nothing fetched; every mark is an element
with a class and ``data-`` attributes (``event kept|dropped|adjusted`` with ``data-reason`` and
``data-adjusted``, ``event output``, ``lifetime edge`` and ``lifetime edge open``,
``lifetime interval``, ``diagonal``, ``explicit-cti``, ``cti input-cti|operator-cti|output-cti``,
``epoch-cut``, ``end-of-input``; per key ``key-cti-line`` and ``keyed-cti`` with ``data-key``,
events of a stream with substreams with ``data-key`` too, and ``keys-left-out``) and a tooltip
(``<title>``); the legend and the summary table count dropped and adjusted events by reason.
The page thins dense series (at most ``PAGE_EVENTS`` events and ``PAGE_CTIS`` CTI dots per
series, :func:`_thin`) and says "showing N of M"; the PNG draws all the trace holds.
"""

from __future__ import annotations

import html as _html
import io
import json
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctistream.engine.temporal import MAX_TIME, MIN_TIME, to_datetime
from ctistream.viz.trace import (
    INPUT_CTI,
    INPUT_KEYED_CTI,
    ITEM,
    OPERATOR_CTI,
    OPERATOR_KEYED_CTI,
    OUTPUT_CTI,
    OUTPUT_EVENT,
    Trace,
    TraceItem,
)

__all__ = ["MAX_KEYS", "PAGE_CTIS", "PAGE_EVENTS", "Timeline", "require_matplotlib"]

#: Keys drawn per stream with substreams (the first to get a keyed CTI); the rest are counted.
MAX_KEYS = 10

_INPUT_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"]
_OPERATOR_COLORS = ["#e377c2", "#bcbd22", "#17becf", "#8c564b", "#7f7f7f", "#9467bd"]
_DROP, _ADJUST, _IGNORED, _OUTPUT = "#d62728", "#ff7f0e", "#aaaaaa", "#000000"
#: Per-key CTI lines (darker and lighter shades, away from the dropped red and adjusted orange).
_KEY_COLORS = [
    "#393b79",
    "#637939",
    "#8c6d31",
    "#7b4173",
    "#3182bd",
    "#31a354",
    "#756bb1",
    "#843c39",
    "#636363",
    "#9c9ede",
]
#: What the HTML page draws per series at most: events (an edge's two marks count as two) and
#: CTI dots; the rest are left out, and the page says "showing N of M" (:func:`_thin`).
PAGE_EVENTS = 1_000
PAGE_CTIS = 300
_PAGE_KEYS = 1_000  # keys the filter offers in its list (any key can be typed)
_THINNED_HOW = (
    "a sample: every dropped and adjusted event while they fit in half the cap, and of the "
    "others those whose hash is a multiple of a power of two; an edge's marks go together"
)
_THINNED_DOTS = "a sample: those whose hash is a multiple of a power of two"
_LEFT, _PLOT_W, _PLOT_H = 90, 840, 230  # the plot boxes of the HTML page (px)
_COUNTER_LIMIT = 10**10  # below this, stamps read as counters (memory scripts), not as dates
#: Reasons in the order legends list them, and the marker of each (matplotlib's names; the SVG
#: draws the same shapes). Other reasons: a cross (dropped) or a circle (adjusted); several: "P".
_REASONS = ("cti-violation", "start-dropped", "early", "late", "out-of-order", "no-event-time")
_REASON_MARKERS = {"early": "^", "late": "v", "out-of-order": "s", "no-event-time": "D"}
_SVG_SHAPES = {
    "^": "M-5,4 L5,4 L0,-5 z",
    "v": "M-5,-4 L5,-4 L0,5 z",
    "s": "M-4,-4 L4,-4 L4,4 L-4,4 z",
    "D": "M0,-5 L5,0 L0,5 L-5,0 z",
}
_SVG_STROKES = {"x": "M-5,-5 L5,5 M-5,5 L5,-5", "P": "M-5,0 L5,0 M0,-5 L0,5"}


# -- axes -------------------------------------------------------------------------------------
@dataclass
class _Axis:
    """Ticks onto a float axis: ``(t - origin) / unit``; +inf (or "stop") on its own row."""

    title: str
    origin: int
    unit: int
    counter: bool
    lo: float
    hi: float
    pad: float
    inf: float | None
    inf_label: str

    def at(self, t: int) -> float:
        if t >= MAX_TIME:
            return self.inf if self.inf is not None else self.hi
        if t <= MIN_TIME:
            return self.lo
        return (t - self.origin) / self.unit

    def clip(self, t: int) -> float:
        return min(self.at(t), self.hi + self.pad / 2)

    @property
    def low(self) -> float:
        return self.lo - self.pad

    @property
    def high(self) -> float:
        return (self.inf if self.inf is not None else self.hi) + self.pad

    def ticks(self) -> list[tuple[float, str]]:
        out = [(v, self._fmt(v)) for v in _nice_ticks(self.lo - self.pad, self.hi + self.pad)]
        if self.inf is not None:
            out.append((self.inf, self.inf_label))
        return out

    def _fmt(self, v: float) -> str:
        return f"{round(v):d}" if self.counter else f"{v:g}"

    def describe(self, t: int | None) -> str:
        if t is None:
            return "-"
        if t >= MAX_TIME:
            return self.inf_label
        if t <= MIN_TIME:
            return "-inf"
        if self.counter:
            return str(t)
        return to_datetime(t).isoformat().replace("+00:00", "Z")


def _is_counter(values: list[int]) -> bool:
    """Whether finite stamps read as counters (near 0, negative CTIs too), not as dates."""
    finite = [v for v in values if MIN_TIME < v < MAX_TIME] or [0]
    return min(finite) > -_COUNTER_LIMIT and max(finite) < _COUNTER_LIMIT


def _axes(xs: list[int], ys: list[int]) -> tuple[_Axis, _Axis, bool]:
    """The arrival (x) and event time (y) axes, and whether they share one time origin and
    unit: both are dates, or both counters, so a value on one reads as the same moment on the
    other and the event time = arrival time diagonal can be drawn (docs/decisions.md,
    "Timeline"). Each axis keeps its own range."""
    if _is_counter(xs) != _is_counter(ys):
        x = _axis(xs, "arrival", "arrival stamp", "stop")
        return x, _axis(ys, "event time", "event time (ticks)", "+inf"), False
    scale = _scale(max(_span(xs), _span(ys)), [v for v in xs + ys if MIN_TIME < v < MAX_TIME])
    return (
        _axis(xs, "arrival", "arrival stamp", "stop", scale),
        _axis(ys, "event time", "event time (ticks)", "+inf", scale),
        True,
    )


def _span(values: list[int]) -> int:
    finite = [v for v in values if MIN_TIME < v < MAX_TIME] or [0]
    return max(finite) - min(finite)


def _scale(span: int, values: list[int]) -> tuple[int, int, str]:
    """The origin, unit and unit name of an axis of dates: seconds, minutes or hours by the
    span, the origin the lowest of ``values`` rounded down to the unit."""
    unit, name = (
        (1_000_000, "s")
        if span <= 600 * 1_000_000
        else (60_000_000, "min")
        if span <= 600 * 60_000_000
        else (3_600_000_000, "h")
    )
    low = min(values or [0])
    return low - low % unit, unit, name


def _axis(
    values: list[int],
    what: str,
    counter_title: str,
    inf_label: str,
    scale: tuple[int, int, str] | None = None,
) -> _Axis:
    """An axis over ``values``, with the origin and unit of ``scale`` when given (an axis of
    dates: both axes share them)."""
    finite = [v for v in values if MIN_TIME < v < MAX_TIME] or [0]
    lo_t, hi_t = min(finite), max(finite)
    has_inf = any(v >= MAX_TIME for v in values)
    if _is_counter(values):
        title, origin, unit, counter = counter_title, 0, 1, True
    else:
        origin, unit, name = scale or _scale(hi_t - lo_t, finite)
        stamp = to_datetime(origin).isoformat().replace("+00:00", "Z")
        title, counter = f"{what} ({name} after {stamp})", False
    lo, hi = (lo_t - origin) / unit, (hi_t - origin) / unit
    pad = (hi - lo) * 0.06 or 1.0
    inf = hi + 3 * pad if has_inf else None
    return _Axis(title, origin, unit, counter, lo, hi, pad, inf, inf_label)


def _nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    count = int((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 10) for i in range(count)]


# -- the model both renderers draw ------------------------------------------------------------
@dataclass
class _Mark:
    x: float
    y: float
    item: TraceItem
    y2: float | None = None  # adjusted: the new start; interval: the (clipped) end


@dataclass
class _Bar:
    """An edge's lifetime: from its START edge's arrival ``x0`` along its start ``y0`` to its
    END edge's arrival ``x1``, then up to its end ``y1``; ``end`` None: never closed (it runs
    to the right edge)."""

    x0: float
    y0: float
    x1: float | None
    y1: float | None
    start: TraceItem
    end: TraceItem | None


@dataclass
class _Line:
    label: str
    role: str
    name: str
    color: str
    width: float
    dash: str | None
    points: list[tuple[float, float, TraceItem]]
    faint: bool = False
    # A key's CTI line (``role`` is a keyed role): ``segments`` the polylines where the key's CTI
    # is above the stream's; ``values[i]`` the key's CTI at ``points[i]`` (a keyed CTI);
    # ``steps`` the (arrival, key's CTI) changes drawn, ending where the stream's CTI catches up.
    key: str | None = None
    segments: list[list[tuple[float, float]]] = field(default_factory=list)
    values: list[int] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Panel:
    kind: str  # "input" or "output"
    name: str
    title: str
    color: str
    kept: list[_Mark] = field(default_factory=list)
    dropped: list[_Mark] = field(default_factory=list)
    adjusted: list[_Mark] = field(default_factory=list)
    explicit: list[_Mark] = field(default_factory=list)
    ends: list[_Mark] = field(default_factory=list)
    lines: list[_Line] = field(default_factory=list)
    bars: list[_Bar] = field(default_factory=list)
    keys_left_out: list[tuple[str, int, int]] = field(default_factory=list)  # (what, drawn, all)


def _marker(item: TraceItem) -> str:
    """The marker of a dropped or adjusted event, by its reason."""
    reasons = (item.reason or "").split(",")
    if len(reasons) > 1:
        return "P"
    return _REASON_MARKERS.get(reasons[0], "x" if item.action == "dropped" else "o")


def _by_reason(marks: list[_Mark]) -> list[tuple[str, list[_Mark]]]:
    """Marks grouped by reason (None: ``"-"``), known reasons first, in ``_REASONS`` order."""
    groups: dict[str, list[_Mark]] = {}
    for m in marks:
        groups.setdefault(m.item.reason or "-", []).append(m)
    order = {r: i for i, r in enumerate(_REASONS)}
    return sorted(groups.items(), key=lambda g: (order.get(g[0], len(order)), g[0]))


def _counts(marks: list[_Mark]) -> str:
    """``"3 (early 1, late 2)"``: the number of marks, by reason."""
    groups = _by_reason(marks)
    if not groups:
        return "0"
    return f"{len(marks)} (" + ", ".join(f"{r} {len(ms)}" for r, ms in groups) + ")"


def _svg_mark(marker: str, px: float, py: float, color: str, filled: bool = True) -> str:
    if marker == "o":
        fill = color if filled else "none"
        return f'<circle cx="{px}" cy="{py}" r="3.5" fill="{fill}" stroke="{color}"/>'
    if marker in _SVG_STROKES:
        return (
            f'<path transform="translate({px},{py})" d="{_SVG_STROKES[marker]}" '
            f'stroke="{color}" stroke-width="2.2"/>'
        )
    fill = color if filled else "none"
    return (
        f'<path transform="translate({px},{py})" d="{_SVG_SHAPES[marker]}" fill="{fill}" '
        f'stroke="{color}" stroke-width="1.2"/>'
    )


def _shape(item: TraceItem) -> str:
    if item.edge == "START":
        return "start"
    if item.edge == "END":
        return "end"
    if item.end is not None and item.start is not None and item.end - item.start > 1:
        return "interval"
    return "point"


def require_matplotlib() -> None:
    """Check that matplotlib, which draws the PNG, can be imported; it comes with the ``viz``
    extra, not with ctistream itself. Raises ImportError saying what is missing and the fix.
    Called by :meth:`Timeline.png` and, before it runs the query, by the ``ctistream`` command."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as missing:
        raise ImportError(
            f"drawing the timeline as PNG needs matplotlib, which ctistream installs only with "
            f'its "viz" extra; got: {missing}. Fix: pip install "ctistream[viz]"',
            name="matplotlib",
        ) from missing


class Timeline:
    """The timeline of one traced run (driver). Made by ``query.timeline()``; renders on demand.

    ``png(path)`` returns (and writes, when given a path) the PNG bytes (with matplotlib: the
    ``viz`` extra); ``html(path)`` the self-contained page (nothing more to install). Both draw
    the same picture. ``max_keys``: per-key CTI lines drawn per
    stream with substreams.
    """

    def __init__(self, trace: Trace, max_keys: int = MAX_KEYS) -> None:
        self.trace = trace
        self.max_keys = max_keys
        t = trace
        ys: list[int] = []
        xs: list[int] = []
        for it in [i for name in t.inputs for i in t.items(name)] + t.output_events():
            xs.append(it.arrival)
            if it.time is not None:
                ys.append(it.time)
            if it.adjusted is not None:
                ys.append(it.adjusted)
            if _shape(it) == "interval" and it.end is not None:
                ys.append(it.end)
        ctis = [c for n in t.inputs for c in t.input_ctis(n)]
        ctis += [c for op in t.operators for c in t.operator_ctis(op)] + t.output_ctis()
        ctis += [c for n in t.inputs for c in t.input_keyed_ctis(n)]
        ctis += [c for op in t.operators for c in t.operator_keyed_ctis(op)]
        xs += [c.arrival for c in ctis]
        ys += [c.start for c in ctis if c.start is not None]
        self.x, self.y, self.diagonal = _axes(xs + t.cuts, ys)
        self.panels = self._panels()
        what = {
            ITEM: "input {} items",
            OUTPUT_EVENT: "query {} output events",
            INPUT_CTI: "input {} CTIs",
            OPERATOR_CTI: "operator {} CTIs",
            OUTPUT_CTI: "query {} output CTIs",
            INPUT_KEYED_CTI: "input {} keyed CTIs",
            OPERATOR_KEYED_CTI: "operator {} keyed CTIs",
        }
        self.notes = [
            f"{what.get(role, role + ' {}').format(name)}: {shown:,} of {seen:,} shown "
            f"(deterministic sample, cap {t.cap:,} per series)"
            for (role, name), (shown, seen) in t.sampled().items()
        ]
        self.key_notes = [
            f"{series}: per-key CTIs drawn for {drawn} of {total:,} keys (the first to get a "
            f"keyed CTI); {total - drawn:,} left out"
            for p in self.panels
            for series, drawn, total in p.keys_left_out
        ]

    def _line(self, label, role, name, items, color, width, dash=None, faint=False) -> _Line:
        pts = [(self.x.at(c.arrival), self.y.at(c.start), c) for c in items]
        return _Line(label, role, name, color, width, dash, pts, faint)

    def _panels(self) -> list[_Panel]:
        t, x, y = self.trace, self.x, self.y
        panels = []
        refs = []
        for i, name in enumerate(t.inputs):
            color = _INPUT_COLORS[i % len(_INPUT_COLORS)]
            p = _Panel("input", name, "", color)
            for it in t.items(name):
                ax = x.at(it.arrival)
                if it.kind == "EOI":
                    p.ends.append(_Mark(ax, y.low, it))
                elif it.kind == "CTI":
                    p.explicit.append(_Mark(ax, y.at(it.start), it))
                elif it.action == "dropped":  # no event time: below the lowest time
                    at = y.lo - y.pad / 2 if it.time is None else y.at(it.time)
                    p.dropped.append(_Mark(ax, at, it))
                elif it.action == "adjusted":
                    p.adjusted.append(_Mark(ax, y.at(it.start), it, y.at(it.adjusted)))
                else:
                    end = y.clip(it.end) if _shape(it) == "interval" else None
                    p.kept.append(_Mark(ax, y.at(it.time), it, end))
            p.bars = self._lifetimes(t.items(name))
            ctis = t.input_ctis(name)
            p.lines.append(self._line(f"CTIs of {name}", INPUT_CTI, name, ctis, color, 1.8))
            refs.append(self._line(f"{name}", INPUT_CTI, name, ctis, color, 1.0, faint=True))
            keyed = t.input_keyed_ctis(name)
            self._add_keys(p, f"input {name}", "", INPUT_KEYED_CTI, name, ctis, keyed)
            events = len(p.kept) + len(p.dropped) + len(p.adjusted)
            sampled = " (sampled)" if (ITEM, name) in t.sampled() else ""
            p.title = (
                f"input {name}: {events} events{sampled} ({len(p.dropped)} dropped, "
                f"{len(p.adjusted)} adjusted), {len(ctis)} CTIs"
            )
            if keyed:
                p.title += f", {len(keyed)} keyed CTIs of {len({k.key for k in keyed})} keys"
            panels.append(p)
        outputs = t.output_events()
        sampled = " (sampled)" if (OUTPUT_EVENT, t.query) in t.sampled() else ""
        out = _Panel(
            "output",
            t.query,
            f"query {t.query}: {len(outputs)} output events{sampled}, output CTIs and "
            "operators' CTIs",
            _OUTPUT,
        )
        for it in outputs:
            end = y.clip(it.end) if _shape(it) == "interval" else None
            out.kept.append(_Mark(x.at(it.arrival), y.at(it.time), it, end))
        out.bars = self._lifetimes(outputs)
        out.lines.extend(refs)
        for i, op in enumerate(t.operators):
            color = _OPERATOR_COLORS[i % len(_OPERATOR_COLORS)]
            ctis = t.operator_ctis(op)
            out.lines.append(self._line(f"operator {op}", OPERATOR_CTI, op, ctis, color, 2.0))
            keyed = t.operator_keyed_ctis(op)
            self._add_keys(out, f"operator {op}", f"{op} ", OPERATOR_KEYED_CTI, op, ctis, keyed)
        out.lines.append(
            self._line("output CTIs", OUTPUT_CTI, t.query, t.output_ctis(), _OUTPUT, 2.2, "4,3")
        )
        panels.append(out)
        return panels

    def _lifetimes(self, items: list[TraceItem]) -> list[_Bar]:
        """The lifetimes of the edges among ``items`` (in arrival order): each START edge not
        dropped with the first later END edge of the same ``match`` not dropped (FIFO, as
        ingress pairs them), at the start and end they were given (adjusted ones moved)."""
        x, y = self.x, self.y
        waiting: dict[int | None, list[_Bar]] = {}
        bars: list[_Bar] = []
        for it in items:
            if it.kind != "INSERT" or it.action == "dropped" or it.edge is None:
                continue
            if it.edge == "START":
                start = it.adjusted if it.adjusted is not None else it.start
                bar = _Bar(x.at(it.arrival), y.at(start), None, None, it, None)
                bars.append(bar)
                waiting.setdefault(it.match, []).append(bar)
                continue
            queue = waiting.get(it.match)
            if not queue:  # its START edge was sampled out
                continue
            bar = queue.pop(0)
            end = it.adjusted if it.adjusted is not None else it.end
            bar.x1, bar.y1, bar.end = x.at(it.arrival), y.clip(end), it
        return bars

    def _add_keys(
        self,
        panel: _Panel,
        what: str,
        prefix: str,
        role: str,
        name: str,
        ctis: list[TraceItem],
        keyed: list[TraceItem],
    ) -> None:
        """Add a stream's per-key CTI lines to ``panel``: at most ``max_keys`` keys, the first
        to get a keyed CTI (the others are counted in ``keys_left_out``).

        A key's CTI is the larger of the stream's latest CTI and the key's latest keyed CTI (a
        keyed CTI at the position of a CTI comes after it). Its line is drawn where it is above
        the stream's CTI: from the stream's line up to a keyed CTI, on through the key's later
        ones, and back to the stream's line where the stream's CTI reaches it (or to the right
        end)."""
        if not keyed:
            return
        x, y = self.x, self.y
        keys = list(dict.fromkeys(str(k.key) for k in keyed))
        drawn = keys[: self.max_keys]
        if len(drawn) < len(keys):
            panel.keys_left_out.append((what, len(drawn), len(keys)))
        lines = {
            key: _Line(
                f"{prefix}key {_short(key)}",
                role,
                name,
                _KEY_COLORS[i % len(_KEY_COLORS)],
                1.1,
                None,
                [],
                key=key,
            )
            for i, key in enumerate(drawn)
        }
        merged = sorted(
            [(c.position, 0, "", c) for c in ctis if c.start is not None]
            + [(k.position, 1, str(k.key), k) for k in keyed if k.start is not None],
            key=lambda e: e[:3],
        )
        stream = MIN_TIME
        latest: dict[str, int] = {}
        open_: dict[str, list[tuple[float, float]]] = {}  # the segment of each key above
        for _, typ, key, it in merged:
            ax = x.at(it.arrival)
            if typ == 0:  # the stream's CTI rises: the keys it reaches join its line
                stream = it.start
                for k, seg in list(open_.items()):
                    if stream >= latest[k]:
                        seg.append((ax, y.at(latest[k])))
                        del open_[k]
                        lines[k].steps.append((it.arrival, stream))
                continue
            line = lines.get(key)
            if line is None:
                continue
            before = max(stream, latest.get(key, MIN_TIME))
            latest[key] = max(latest.get(key, it.start), it.start)
            now = max(stream, latest[key])
            line.points.append((ax, y.at(it.start), it))
            line.values.append(now)
            if now <= before:  # not a rise (a sampled trace may miss the ones between)
                continue
            seg = open_.get(key)
            if seg is None:  # from the stream's line
                seg = [] if stream <= MIN_TIME else [(ax, y.at(stream))]
                line.segments.append(seg)
                open_[key] = seg
            else:
                seg.append((ax, y.at(before)))
            seg.append((ax, y.at(now)))
            line.steps.append((it.arrival, now))
        for seg in open_.values():
            if seg[-1][0] < x.high:
                seg.append((x.high, seg[-1][1]))
        panel.lines.extend(lines.values())

    def _diagonal(self) -> tuple[float, float] | None:
        """Where the event time = arrival time diagonal crosses the plot (in axis units), when
        the axes share one time origin and the two ranges overlap."""
        if not self.diagonal:
            return None
        x, y = self.x, self.y
        lo, hi = max(x.low, y.low), min(x.hi + x.pad / 2, y.hi + y.pad / 2)
        return (lo, hi) if lo < hi else None

    def _step(self, line: _Line) -> tuple[list[float], list[float]]:
        """The step line's vertices: each CTI holds until the next, the last to the right end."""
        xs, ys = [], []
        for i, (px, py, _) in enumerate(line.points):
            if i:
                xs.append(px)
                ys.append(ys[-1])
            xs.append(px)
            ys.append(py)
        if xs and xs[-1] < self.x.high:
            xs.append(self.x.high)
            ys.append(ys[-1])
        return xs, ys

    # -- PNG -------------------------------------------------------------------------------
    def png(self, path: str | Path | None = None) -> bytes:
        """The timeline as PNG bytes (written to ``path`` too, when given). Needs matplotlib
        (the ``viz`` extra): raises ImportError saying so and the fix without it."""
        require_matplotlib()
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        n = len(self.panels)
        notes = [(note, _DROP) for note in self.notes] + [(k, "#555555") for k in self.key_notes]
        height = 1.3 + 2.8 * n + 0.2 * len(notes)
        fig = Figure(figsize=(12, height), dpi=100)
        FigureCanvasAgg(fig)
        axes = fig.subplots(n, 1, sharex=True, sharey=True, squeeze=False)[:, 0]
        for ax, panel in zip(axes, self.panels, strict=True):
            self._draw_panel(ax, panel)
        ax = axes[-1]
        ax.set_xlim(self.x.low, self.x.high)
        ax.set_ylim(self.y.low, self.y.high)
        xt, yt = self.x.ticks(), self.y.ticks()
        ax.set_xticks([v for v, _ in xt], [s for _, s in xt])
        ax.set_yticks([v for v, _ in yt], [s for _, s in yt])
        ax.set_xlabel(self.x.title)
        fig.supylabel(self.y.title, fontsize=10)
        fig.suptitle(f"timeline of query {self.trace.query}", fontsize=12)
        for i, (note, color) in enumerate(notes):
            fig.text(0.01, 0.005 + 0.2 * i / height, note, color=color, fontsize=8)
        bottom = (0.7 + 0.2 * len(notes)) / height
        fig.subplots_adjust(left=0.08, right=0.76, top=1 - 0.6 / height, bottom=bottom, hspace=0.3)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        data = buf.getvalue()
        if path is not None:
            _write(path, data)
        return data

    def _draw_panel(self, ax: Any, panel: _Panel) -> None:
        for cut in self.trace.cuts:
            ax.axvline(self.x.at(cut), color="#bbbbbb", lw=0.8, ls=":", zorder=0)
        if self.y.inf is not None:
            ax.axhline(self.y.inf, color="#eeeeee", lw=6, zorder=0)
        if self.x.inf is not None:
            ax.axvline(self.x.inf, color="#eeeeee", lw=6, zorder=0)
        diagonal = self._diagonal()
        if diagonal is not None:
            lo, hi = diagonal
            ax.plot([lo, hi], [lo, hi], color="#999999", lw=1, ls=(0, (1, 2)), zorder=0.5)
        for i, bar in enumerate(panel.bars):
            if bar.end is None:
                ax.plot(
                    [bar.x0, self.x.high],
                    [bar.y0, bar.y0],
                    color=panel.color,
                    alpha=0.45,
                    lw=3,
                    zorder=1,
                    label=None if i else "edge lifetime",
                )
                ax.scatter(
                    [self.x.high],
                    [bar.y0],
                    marker=">",
                    s=40,
                    facecolor="white",
                    edgecolor=panel.color,
                    zorder=4,
                )
            else:
                ax.plot(
                    [bar.x0, bar.x1, bar.x1],
                    [bar.y0, bar.y0, bar.y1],
                    color=panel.color,
                    alpha=0.45,
                    lw=3,
                    zorder=1,
                    label=None if i else "edge lifetime",
                )
        for line in panel.lines:
            if line.key is not None:  # a key's CTI: thin, where above the stream's
                for j, seg in enumerate(line.segments):
                    ax.plot(
                        [p[0] for p in seg],
                        [p[1] for p in seg],
                        color=line.color,
                        lw=line.width,
                        label=None if j else line.label,
                        zorder=2.5,
                    )
                ax.scatter(
                    [p[0] for p in line.points],
                    [p[1] for p in line.points],
                    s=12,
                    color=line.color,
                    label=None if line.segments else line.label,
                    zorder=4.5,  # on its key's event
                )
                continue
            xs, ys = self._step(line)
            if not xs:
                continue
            ax.plot(
                xs,
                ys,
                color=line.color,
                lw=line.width,
                alpha=0.35 if line.faint else 1.0,
                ls=(0, (4, 3)) if line.dash else "-",
                label=None if line.faint else line.label,
                zorder=2,
            )
            if not line.faint:
                ax.scatter(
                    [p[0] for p in line.points],
                    [p[1] for p in line.points],
                    s=10,
                    color=line.color,
                    zorder=3,
                )
        markers = {"point": "o", "interval": "o", "start": "^", "end": "v"}
        for shape, marker in markers.items():
            ms = [m for m in panel.kept if _shape(m.item) == shape]
            if not ms:
                continue
            if shape == "interval":
                ax.vlines(
                    [m.x for m in ms],
                    [m.y for m in ms],
                    [m.y2 for m in ms],
                    color=panel.color,
                    alpha=0.35,
                    lw=3,
                    zorder=1,
                )
            label = {"point": "event", "start": "START edge", "end": "END edge"}.get(shape, shape)
            if panel.kind == "output":
                label = f"output {label}"
            ax.scatter(
                [m.x for m in ms],
                [m.y for m in ms],
                marker=marker,
                s=28,
                color=panel.color,
                label=label,
                zorder=4,
            )
        if panel.explicit:
            for ignored in (False, True):
                ms = [m for m in panel.explicit if (m.item.action == "ignored") is ignored]
                if ms:
                    ax.scatter(
                        [m.x for m in ms],
                        [m.y for m in ms],
                        marker="D",
                        s=22,
                        facecolor="none",
                        edgecolor=_IGNORED if ignored else panel.color,
                        label="explicit CTI (ignored)" if ignored else "explicit CTI",
                        zorder=4,
                    )
        for reason, ms in _by_reason(panel.dropped):
            marker = _marker(ms[0].item)
            stroke = marker in _SVG_STROKES
            ax.scatter(
                [m.x for m in ms],
                [m.y for m in ms],
                marker=marker,
                s=46 if stroke else 30,
                linewidths=1.8 if stroke else 1.0,
                color=_DROP,
                label=f"dropped: {reason} ({len(ms)})",
                zorder=5,
            )
        for m in panel.adjusted:
            ax.annotate(
                "",
                xy=(m.x, m.y2),
                xytext=(m.x, m.y),
                zorder=5,
                arrowprops={"arrowstyle": "-|>", "color": _ADJUST, "lw": 1.4},
            )
        for reason, ms in _by_reason(panel.adjusted):
            marker = _marker(ms[0].item)
            ax.scatter(
                [m.x for m in ms],
                [m.y for m in ms],
                marker=marker,
                s=28,
                facecolor="none",
                edgecolor=_ADJUST,
                zorder=5,
            )
            ax.scatter(
                [m.x for m in ms],
                [m.y2 for m in ms],
                marker=marker,
                s=28,
                color=_ADJUST,
                label=f"adjusted: {reason} ({len(ms)})",
                zorder=5,
            )
        for i, m in enumerate(panel.ends):
            ax.axvline(m.x, color=panel.color, ls="--", lw=1, label=None if i else "end of input")
        for what, drawn, total in panel.keys_left_out:
            ax.plot([], [], " ", label=f"{what}: {total - drawn:,} more keys not drawn")
        ax.set_title(panel.title, loc="left", fontsize=10)
        ax.grid(alpha=0.2)
        entries = len(ax.get_legend_handles_labels()[1])
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.005, 1.0),
            fontsize=8 if entries <= 14 else 7,
            frameon=False,
            ncols=1 if entries <= 14 else 2,
        )

    # -- HTML ------------------------------------------------------------------------------
    def html(self, path: str | Path | None = None) -> str:
        """The timeline as one self-contained HTML page (written to ``path`` too, when given):
        inline SVG, CSS and a script (zoom, pan, the key filter), nothing fetched."""
        t = self.trace
        q = _esc(t.query)
        svg, thinned = self._svg()
        notes = "".join(f'<p class="sampled">{_esc(n)}</p>' for n in self.notes)
        notes += "".join(
            f'<p class="thinned" data-series="{_esc(what)}" data-shown="{shown}" '
            f'data-total="{total}">{_esc(what)}: showing {shown:,} of {total:,} {kind} '
            f"({_esc(how)})</p>"
            for what, kind, shown, total, how in thinned
        )
        notes += "".join(
            f'<p class="keys-left-out" data-series="{_esc(what)}" data-drawn="{drawn}" '
            f'data-keys="{total}">{_esc(note)}</p>'
            for (what, drawn, total), note in zip(
                [k for p in self.panels for k in p.keys_left_out], self.key_notes, strict=True
            )
        )
        keys = sorted(
            {it.key for n in t.inputs for it in t.items(n) if it.key is not None}
            | {it.key for it in t.output_events() if it.key is not None}
            | {str(c.key) for n in t.inputs for c in t.input_keyed_ctis(n)}
            | {str(c.key) for op in t.operators for c in t.operator_keyed_ctis(op)}
        )
        options = "".join(f'<option value="{_esc(k)}"></option>' for k in keys[:_PAGE_KEYS])
        disabled = "" if keys else " disabled"
        diagonal = (
            " Dotted grey diagonal: event time = arrival time (below it an event arrived after "
            "its time)."
            if self.diagonal
            else " The arrival stamps and event times are not on one clock (one is a counter, "
            "the other dates): no diagonal."
        )
        controls = (
            '<div class="controls">'
            '<button type="button" data-act="in" title="zoom in">zoom in</button>'
            '<button type="button" data-act="out" title="zoom out">zoom out</button>'
            '<button type="button" data-act="left" title="pan left">&#8592;</button>'
            '<button type="button" data-act="right" title="pan right">&#8594;</button>'
            '<button type="button" data-act="up" title="pan up">&#8593;</button>'
            '<button type="button" data-act="down" title="pan down">&#8595;</button>'
            '<button type="button" data-act="reset" title="show everything">reset</button> '
            f'<label>key <input id="key-filter" list="timeline-keys" size="14" '
            f'placeholder="{"all keys" if keys else "no substream keys"}"{disabled}></label>'
            f'<datalist id="timeline-keys">{options}</datalist> '
            '<span id="key-count"></span> <span id="view-range"></span></div>\n'
        )
        page = (
            "<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><title>timeline of query {q}</title>'
            f"<style>{_CSS}</style></head><body>\n"
            f'<h1>Timeline of query <code>{q}</code></h1>\n<p class="axes">x: '
            f"{_esc(self.x.title)}; y: {_esc(self.y.title)}. Dotted lines: epoch cuts."
            f"{diagonal} Hover a mark for its details; wheel: zoom (Shift: arrival only, "
            "Alt: event time only); drag: pan; double-click: reset.</p>\n"
            f"{controls}{notes}\n{svg}\n{self._summary()}\n"
            f'<script type="application/json" id="timeline-axes">{self._axes_json()}</script>\n'
            f"<script>{_SCRIPT}</script>\n</body></html>\n"
        )
        if path is not None:
            _write(path, page.encode())
        return page

    def _axes_json(self) -> str:
        """What the page's script needs of the axes and the plot boxes (JSON, ``<`` escaped)."""

        def axis(a: _Axis) -> dict[str, Any]:
            return {
                "low": a.low,
                "high": a.high,
                "origin": a.origin,
                "unit": a.unit,
                "counter": a.counter,
                "inf": a.inf,
                "infLabel": a.inf_label,
                "finite": a.hi + a.pad,  # numbered ticks stop here, below the +inf row
            }

        data: dict[str, Any] = {"left": _LEFT, "width": _PLOT_W, "height": _PLOT_H}
        data |= {"x": axis(self.x), "y": axis(self.y)}
        return json.dumps(data).replace("<", "\\u003c")

    def _svg(self) -> tuple[str, list[tuple[str, str, int, int, str]]]:
        """The SVG and what it thinned: (series, what, drawn, of, how)."""
        left, right, top, plot_w, plot_h, gap = _LEFT, 230, 20, _PLOT_W, _PLOT_H, 80
        width = left + plot_w + right
        legends = [self._svg_legend_rows(p) for p in self.panels]
        # a panel whose legend is taller than its plot (many keys) takes the room it needs
        spans = [max(plot_h, 17 * len(rows)) + gap for rows in legends]
        tops = [top + sum(spans[:i]) for i in range(len(spans))]
        height = top + sum(spans) + 10
        x, y = self.x, self.y

        def sx(v: float) -> float:
            return round(left + (v - x.low) / (x.high - x.low) * plot_w, 1)

        clips = "".join(
            f'<clipPath id="plot-clip-{i}"><rect x="{left}" y="{tops[i] + 24}" '
            f'width="{plot_w}" height="{plot_h}"/></clipPath>'
            for i in range(len(self.panels))
        )
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
            f'font-size="11">',
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{_ADJUST}"/></marker>{clips}</defs>',
        ]
        thinned: list[tuple[str, str, int, int, str]] = []
        for i, panel in enumerate(self.panels):
            y0 = tops[i] + 24

            def sy(v: float, y0: float = y0) -> float:
                return round(y0 + plot_h - (v - y.low) / (y.high - y.low) * plot_h, 1)

            parts.append(
                f'<g class="panel" data-panel="{panel.kind}" data-name="{_esc(panel.name)}" '
                f'data-top="{y0}">'
            )
            parts.append(
                f'<text x="{left}" y="{y0 - 8}" font-size="13" font-weight="bold">'
                f"{_esc(panel.title)}</text>"
            )
            parts.append(
                f'<rect class="frame" x="{left}" y="{y0}" width="{plot_w}" height="{plot_h}" '
                'fill="#fff" stroke="#888"/>'
            )
            ticks = []
            for v, label in x.ticks():
                if x.low <= v <= x.high:
                    ticks.append(
                        f'<line x1="{sx(v)}" y1="{y0}" x2="{sx(v)}" y2="{y0 + plot_h}" '
                        f'stroke="#eee"/><text x="{sx(v)}" y="{y0 + plot_h + 14}" '
                        f'text-anchor="middle">{_esc(label)}</text>'
                    )
            for v, label in y.ticks():
                if y.low <= v <= y.high:
                    ticks.append(
                        f'<line x1="{left}" y1="{sy(v)}" x2="{left + plot_w}" y2="{sy(v)}" '
                        f'stroke="#eee"/><text x="{left - 6}" y="{sy(v) + 4}" '
                        f'text-anchor="end">{_esc(label)}</text>'
                    )
            parts.append(f'<g class="ticks">{"".join(ticks)}</g>')
            parts.append(f'<g class="plot" clip-path="url(#plot-clip-{i})">')
            for cut in self.trace.cuts:
                cx = sx(x.at(cut))
                parts.append(
                    f'<line class="epoch-cut" data-arrival="{cut}" x1="{cx}" y1="{y0}" '
                    f'x2="{cx}" y2="{y0 + plot_h}" stroke="#999" stroke-dasharray="2,3">'
                    f"<title>epoch cut at arrival {_esc(x.describe(cut))}</title></line>"
                )
            diagonal = self._diagonal()
            if diagonal is not None:
                lo, hi = diagonal
                parts.append(
                    f'<line class="diagonal" x1="{sx(lo)}" y1="{sy(lo)}" x2="{sx(hi)}" '
                    f'y2="{sy(hi)}" stroke="#999" stroke-width="1" stroke-dasharray="1,3">'
                    "<title>event time = arrival time: an event below this line arrived after "
                    "its time, above it before</title></line>"
                )
            marks, notes = self._svg_panel(panel, sx, sy, y0, plot_h)
            parts.extend(marks)
            thinned.extend(notes)
            parts.append("</g>")
            shown = [n for n in notes if n[1] == "events"]
            if shown:
                _, _, n, m, _ = shown[0]
                parts.append(
                    f'<text class="thinned" x="{left + plot_w}" y="{y0 - 8}" '
                    f'text-anchor="end" fill="{_DROP}">showing {n:,} of {m:,} events '
                    "(a sample)</text>"
                )
            parts.append(self._svg_legend(legends[i], left + plot_w + 14, y0 + 6))
            parts.append("</g>")
        last = tops[-1] + 24 + plot_h
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{last + 32}" text-anchor="middle">'
            f"{_esc(x.title)}</text>"
        )
        parts.append("</svg>")
        return "\n".join(parts), thinned

    def _svg_panel(
        self, panel: _Panel, sx, sy, y0: float, plot_h: float
    ) -> tuple[list[str], list[tuple[str, str, int, int, str]]]:
        """A panel's marks, thinned to at most ``PAGE_EVENTS`` events and ``PAGE_CTIS`` CTI
        dots per series (:func:`_thin`), and what was thinned."""
        x, y = self.x, self.y
        name = _esc(panel.name)
        output = panel.kind == "output"
        series = f"{'query' if output else 'input'} {panel.name}"
        out: list[str] = []
        notes: list[tuple[str, str, int, int, str]] = []

        def attrs(m: _Mark) -> str:
            it = m.item
            a = (
                f'data-{"series" if output else "input"}="{name}" data-kind="{_shape(it)}" '
                f'data-arrival="{_val(it.arrival, "stop")}" data-time="{_val(it.time)}" '
            )
            a += f'data-end="{_val(it.end)}"' if output else f'data-partition="{it.partition}"'
            if it.reason:
                a += f' data-reason="{_esc(it.reason)}"'
            if it.adjusted is not None:
                a += f' data-adjusted="{_val(it.adjusted)}"'
            if it.key is not None:
                a += f' data-key="{_esc(it.key)}"'
            return a

        def tip(m: _Mark) -> str:
            it = m.item
            what = {"point": "point", "interval": "interval", "start": "START edge"}.get(
                _shape(it), "END edge"
            )
            s = f"{panel.name}: {what} at {y.describe(it.start)}"
            if it.start is None and it.kind == "INSERT":
                s = f"{panel.name}: {what} with no event time"
            if it.edge == "END" or _shape(it) == "interval":
                s += f", end {y.describe(it.end)}"
            if output:
                s = f"query {s}; emitted at arrival {x.describe(it.arrival)}"
                if it.key is not None:
                    s += f"; key {it.key}"
                return f"<title>{_esc(s)}</title>"
            s += f"; arrival {x.describe(it.arrival)}, partition {it.partition}; {it.action}"
            if it.reason:
                s += f" ({it.reason})"
            if it.adjusted is not None:  # an END edge's end (semantics §3.4), else the start
                s += f" to {'end' if it.edge == 'END' else 'start'} {y.describe(it.adjusted)}"
            if it.cti is not None:
                s += f"; CTI in force {y.describe(it.cti)}"
            if it.key is not None:
                s += f"; key {it.key}"
            return f"<title>{_esc(s)}</title>"

        keys: list[str] = []  # drawn last: a keyed CTI's dot sits on its key's event
        for line in panel.lines:
            if line.key is not None:
                drawn_keys = self._svg_key_line(line, sx, sy)
                keys.extend(drawn_keys)
                keyed = sum(1 for k in drawn_keys if k.startswith('<circle class="keyed-cti'))
                if keyed < len(line.points):
                    what = f"{'input' if line.role == INPUT_KEYED_CTI else 'operator'} {line.name}"
                    notes.append(
                        (
                            f"{what}, key {line.key}",
                            "keyed CTI dots",
                            keyed,
                            len(line.points),
                            _THINNED_DOTS,
                        )
                    )
                continue
            xs, ys = self._step(line)
            if not xs:
                continue
            d = " ".join(
                f"{'M' if i == 0 else 'L'}{sx(a)},{sy(b)}"
                for i, (a, b) in enumerate(_columns(xs, ys, sx))
            )
            cls = "cti-ref" if line.faint else f"cti-line {line.role}"
            style = ' stroke-dasharray="6,4"' if line.dash else ""
            if line.faint:
                style += ' stroke-opacity="0.35"'
            out.append(
                f'<path class="{cls}" data-series="{_esc(line.name)}" d="{d}" fill="none" '
                f'stroke="{line.color}" stroke-width="{line.width}"{style}/>'
            )
            if line.faint:
                continue
            dots = _thin(line.points, PAGE_CTIS, lambda p: p[2].position, lambda p: False)
            if len(dots) < len(line.points):
                notes.append((line.label, "CTI dots", len(dots), len(line.points), _THINNED_HOW))
            for px, py, c in dots:
                out.append(
                    f'<circle class="cti {line.role}" data-series="{_esc(line.name)}" '
                    f'data-value="{_val(c.start)}" data-arrival="{_val(c.arrival, "stop")}" '
                    f'cx="{sx(px)}" cy="{sy(py)}" r="2.5" fill="{line.color}"><title>'
                    f"{_esc(line.label)}: CTI {_esc(y.describe(c.start))} at arrival "
                    f"{_esc(x.describe(c.arrival))}</title></circle>"
                )
        for m in panel.ends:
            px = sx(m.x)
            out.append(
                f'<line class="end-of-input" data-input="{name}" '
                f'data-arrival="{_val(m.item.arrival, "stop")}" x1="{px}" y1="{y0}" x2="{px}" '
                f'y2="{y0 + plot_h}" stroke="{panel.color}" stroke-dasharray="6,3"><title>end of '
                f"input {name}, partition {m.item.partition}</title></line>"
            )
        # the events: every dropped and adjusted one while they fit in half the cap, a sample
        # of the others (an edge's two marks and its lifetime together)
        events = [(m, "kept") for m in panel.kept] + [(m, "dropped") for m in panel.dropped]
        events += [(m, "adjusted") for m in panel.adjusted]
        drawn = _thin(events, PAGE_EVENTS, lambda e: _ident(e[0].item), lambda e: e[1] != "kept")
        if len(drawn) < len(events):
            notes.append((series, "events", len(drawn), len(events), _THINNED_HOW))
        shown = {id(m) for m, _ in drawn}
        starts = {id(m.item) for m, _ in drawn if m.item.edge == "START"}
        out.extend(
            self._svg_bar(b, sx, sy, panel, series) for b in panel.bars if id(b.start) in starts
        )
        cls = "event output" if output else "event kept"
        for m in panel.kept:
            if id(m) not in shown:
                continue
            px, py = sx(m.x), sy(m.y)
            shape = _shape(m.item)
            if shape == "interval":
                body = (
                    f'<line class="lifetime interval" x1="{px}" y1="{py}" x2="{px}" '
                    f'y2="{sy(m.y2)}" stroke="{panel.color}" stroke-opacity="0.35" '
                    f'stroke-width="3"/><circle cx="{px}" cy="{py}" r="3.5" fill="{panel.color}"/>'
                )
            elif shape == "point":
                body = f'<circle cx="{px}" cy="{py}" r="3.5" fill="{panel.color}"/>'
            else:
                tri = "M-4,3 L4,3 L0,-5 z" if shape == "start" else "M-4,-3 L4,-3 L0,5 z"
                body = f'<path transform="translate({px},{py})" d="{tri}" fill="{panel.color}"/>'
            out.append(f'<g class="{cls}" {attrs(m)}>{tip(m)}{body}</g>')
        for m in panel.explicit:
            px, py = sx(m.x), sy(m.y)
            ignored = m.item.action == "ignored"
            color = _IGNORED if ignored else panel.color
            out.append(
                f'<path class="explicit-cti {"ignored" if ignored else "kept"}" '
                f'data-input="{name}" data-value="{_val(m.item.start)}" '
                f'data-arrival="{_val(m.item.arrival, "stop")}" '
                f'transform="translate({px},{py})" d="M0,-5 L5,0 L0,5 L-5,0 z" '
                f'fill="none" stroke="{color}" stroke-width="1.5"><title>{name}: explicit CTI '
                f"{_esc(y.describe(m.item.start))}"
                f"{' (ignored: not above the CTI in force)' if ignored else ''}</title></path>"
            )
        for m in panel.dropped:
            if id(m) not in shown:
                continue
            px, py = sx(m.x), sy(m.y)
            out.append(
                f'<g class="event dropped" {attrs(m)}>{tip(m)}'
                f"{_svg_mark(_marker(m.item), px, py, _DROP)}</g>"
            )
        for m in panel.adjusted:
            if id(m) not in shown:
                continue
            px, py, py2 = sx(m.x), sy(m.y), sy(m.y2)
            marker = _marker(m.item)
            out.append(
                f'<g class="event adjusted" {attrs(m)}>{tip(m)}<line x1="{px}" y1="{py}" '
                f'x2="{px}" y2="{py2}" stroke="{_ADJUST}" stroke-width="1.6" '
                f'marker-end="url(#arrow)"/>{_svg_mark(marker, px, py, _ADJUST, filled=False)}'
                f"{_svg_mark(marker, px, py2, _ADJUST)}</g>"
            )
        return out + keys, notes

    def _svg_bar(self, bar: _Bar, sx, sy, panel: _Panel, series: str) -> str:
        """An edge's lifetime (``lifetime edge``; ``open`` when never closed: a bar to the right
        edge ending in a hollow marker), with its start, end and the arrivals of its edges."""
        x, y = self.x, self.y
        it = bar.start
        start = it.adjusted if it.adjusted is not None else it.start
        a = (
            f'data-series="{_esc(series)}" data-start="{_val(start)}" '
            f'data-arrival="{_val(it.arrival, "stop")}"'
        )
        if it.key is not None:
            a += f' data-key="{_esc(it.key)}"'
        x0, y0 = sx(bar.x0), sy(bar.y0)
        style = f'fill="none" stroke="{panel.color}" stroke-opacity="0.45" stroke-width="3"'
        if bar.end is None:
            right = sx(x.high)
            tip = (
                f"{series}: edge from {y.describe(start)}, START edge at arrival "
                f"{x.describe(it.arrival)}; never closed (no END edge by the end of the run)"
            )
            return (
                f'<g class="lifetime edge open" {a}><title>{_esc(tip)}</title>'
                f'<path class="open" d="M{x0},{y0} L{right},{y0}" {style}/>'
                f'<path class="open-end" transform="translate({right - 5},{y0})" '
                f'd="M-5,-5 L5,0 L-5,5 z" fill="#fff" stroke="{panel.color}" '
                'stroke-width="1.5"/></g>'
            )
        e = bar.end
        end = e.adjusted if e.adjusted is not None else e.end
        tip = (
            f"{series}: edge [{y.describe(start)}, {y.describe(end)}), START edge at arrival "
            f"{x.describe(it.arrival)}, END edge at arrival {x.describe(e.arrival)}"
        )
        return (
            f'<path class="lifetime edge" {a} data-end="{_val(end)}" '
            f'data-closed-at="{_val(e.arrival, "stop")}" d="M{x0},{y0} L{sx(bar.x1)},{y0} '
            f'L{sx(bar.x1)},{sy(bar.y1)}" {style}><title>{_esc(tip)}</title></path>'
        )

    def _svg_key_line(self, line: _Line, sx, sy) -> list[str]:
        """A key's CTI line (``key-cti-line``, ``data-steps``: ``arrival:CTI`` where the key's
        CTI changes, the last where the stream's CTI catches up) and its keyed CTIs
        (``keyed-cti``, ``data-value`` the keyed CTI, ``data-key-cti`` the key's CTI there)."""
        x, y = self.x, self.y
        series, key = _esc(line.name), _esc(line.key)
        what = f"{'input' if line.role == INPUT_KEYED_CTI else 'operator'} {line.name}"
        out = []
        d = " ".join(
            f"{'L' if i else 'M'}{sx(a)},{sy(b)}"
            for seg in line.segments
            for i, (a, b) in enumerate(seg)
        )
        steps = " ".join(f"{_val(a, 'stop')}:{_val(v)}" for a, v in line.steps)
        said = ", ".join(f"{y.describe(v)} at arrival {x.describe(a)}" for a, v in line.steps)
        if d:
            out.append(
                f'<path class="key-cti-line {line.role}" data-series="{series}" '
                f'data-key="{key}" data-steps="{steps}" d="{d}" fill="none" '
                f'stroke="{line.color}" stroke-width="{line.width}"><title>'
                f"{_esc(f'{what}, key {line.key}: CTI {said}')}</title></path>"
            )
        dots = list(zip(line.points, line.values, strict=True))
        for (px, py, c), v in _thin(dots, PAGE_CTIS, lambda d: d[0][2].position, lambda d: False):
            tip = (
                f"{what}, key {line.key}: keyed CTI {y.describe(c.start)} at arrival "
                f"{x.describe(c.arrival)}; the key's CTI {y.describe(v)}"
            )
            out.append(
                f'<circle class="keyed-cti {line.role}" data-series="{series}" '
                f'data-key="{key}" data-value="{_val(c.start)}" data-key-cti="{_val(v)}" '
                f'data-arrival="{_val(c.arrival, "stop")}" cx="{sx(px)}" cy="{sy(py)}" r="2.2" '
                f'fill="{line.color}"><title>{_esc(tip)}</title></circle>'
            )
        return out

    def _svg_legend_rows(self, panel: _Panel) -> list[list[tuple[str, str]]]:
        """The legend's rows of (swatch, text) cells; keys two to a row."""
        rows: list[list[tuple[str, str]]] = []
        left_out = {what: total - drawn for what, drawn, total in panel.keys_left_out}
        series = None
        for line in panel.lines:
            if line.faint:
                continue
            dash = ' stroke-dasharray="6,4"' if line.dash else ""
            swatch = (
                f'<line x1="0" y1="0" x2="18" y2="0" stroke="{line.color}" '
                f'stroke-width="{line.width}"{dash}/>'
            )
            if line.key is None:
                rows.append([(swatch, line.label)])
                series = None
                continue
            if series != (line.role, line.name):  # the first key of a stream
                series = (line.role, line.name)
                what = f"{'input' if line.role == INPUT_KEYED_CTI else 'operator'} {line.name}"
                rows.append([("", f"per-key CTIs of {line.name}:")])
                more = left_out.get(what)
                if more:  # says so before its keys: the last row may be a key's
                    rows.append([("", f"(+{more:,} keys not drawn)")])
                rows.append([])
            if len(rows[-1]) == 2:
                rows.append([])
            rows[-1].append((swatch, _short(line.key, 12)))
        return rows + [[cell] for cell in self._svg_legend_marks(panel)]

    def _svg_legend(self, rows: list[list[tuple[str, str]]], lx: float, ly: float) -> str:
        out = [f'<g class="legend" transform="translate({lx},{ly})">']
        for k, cells in enumerate(rows):
            for j, (swatch, text) in enumerate(cells):
                tx = 24 if swatch else 0
                out.append(
                    f'<g transform="translate({j * 104},{k * 17})">{swatch}<text x="{tx}" y="4">'
                    f"{_esc(text)}</text></g>"
                )
        out.append("</g>")
        return "".join(out)

    def _svg_legend_marks(self, panel: _Panel) -> list[tuple[str, str]]:
        """The legend rows of an input's marks (or of the output panel's faint lines)."""
        rows: list[tuple[str, str]] = []
        if panel.kind == "input":
            rows.append((f'<circle cx="9" cy="0" r="3.5" fill="{panel.color}"/>', "event"))
            for reason, ms in _by_reason(panel.dropped) or [("", [])]:
                marker = _marker(ms[0].item) if ms else "x"
                label = f"dropped: {reason} ({len(ms)})" if ms else "dropped"
                rows.append((_svg_mark(marker, 9, 0, _DROP), label))
            arrow = (
                f'<line x1="3" y1="6" x2="3" y2="-5" stroke="{_ADJUST}" stroke-width="1.6" '
                'marker-end="url(#arrow)"/>'
            )
            for reason, ms in _by_reason(panel.adjusted) or [("", [])]:
                marker = _marker(ms[0].item) if ms else "o"
                label = f"adjusted: {reason} ({len(ms)})" if ms else "adjusted"
                rows.append((arrow + _svg_mark(marker, 13, 0, _ADJUST), label))
            if panel.explicit:
                rows.append(
                    (
                        f'<path d="M9,-5 L14,0 L9,5 L4,0 z" fill="none" stroke="{panel.color}"/>',
                        "explicit CTI",
                    )
                )
        else:
            if panel.kept:
                rows.append((f'<circle cx="9" cy="0" r="3.5" fill="{_OUTPUT}"/>', "output event"))
            rows.append(
                ('<line x1="0" y1="0" x2="18" y2="0" stroke="#999" stroke-width="1"/>', "inputs")
            )
        bar = f'stroke="{panel.color}" stroke-opacity="0.45" stroke-width="3" fill="none"'
        if any(b.end is not None for b in panel.bars):
            rows.append((f'<path d="M0,4 L14,4 L14,-5" {bar}/>', "edge lifetime"))
        if any(b.end is None for b in panel.bars):
            rows.append(
                (
                    f'<path d="M0,0 L14,0" {bar}/><path d="M12,-4 L18,0 L12,4 z" fill="#fff" '
                    f'stroke="{panel.color}"/>',
                    "edge never closed",
                )
            )
        return rows

    def _summary(self) -> str:
        t, y = self.trace, self.y
        keyed = {n: t.input_keyed_ctis(n) for n in t.inputs}
        keyed |= {f"operator {op}": t.operator_keyed_ctis(op) for op in t.operators}
        any_keyed = any(keyed.values())

        def keys(name: str) -> str:  # with substreams: "keyed CTIs (keys)"
            if not any_keyed:
                return ""
            ks = keyed.get(name) or []
            return f"<td>{len(ks)} ({len({k.key for k in ks})})</td>" if ks else "<td></td>"

        rows = []
        for p in self.panels:
            if p.kind != "input":
                continue
            ctis = t.input_ctis(p.name)
            last = y.describe(ctis[-1].start) if ctis else "-inf"
            rows.append(
                f'<tr class="input" data-input="{_esc(p.name)}"><td>input {_esc(p.name)}</td>'
                f"<td>{len(p.kept)}</td><td>{_esc(_counts(p.dropped))}</td>"
                f"<td>{_esc(_counts(p.adjusted))}</td>"
                f"<td>{len(ctis)}</td><td>{_esc(last)}</td>{keys(p.name)}</tr>"
            )
        for label, ctis in [(f"operator {op}", t.operator_ctis(op)) for op in t.operators] + [
            ("output", t.output_ctis())
        ]:
            last = y.describe(ctis[-1].start) if ctis else "-inf"
            rows.append(
                f"<tr><td>{_esc(label)}</td><td></td><td></td><td></td><td>{len(ctis)}</td>"
                f"<td>{_esc(last)}</td>{keys(label)}</tr>"
            )
        head = "<th>keyed CTIs (keys)</th>" if any_keyed else ""
        return (
            '<table class="summary"><thead><tr><th></th><th>kept</th><th>dropped</th>'
            f"<th>adjusted</th><th>CTIs</th><th>last CTI</th>{head}</tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )


#: The page's script: zoom and pan (every panel shares the view, as the axes are shared), the
#: ticks and the visible range drawn anew for the view, and the key filter. It moves the marks
#: drawn for the first view (their pixel places), so the page without it is the same picture.
_SCRIPT = (Path(__file__).parent / "timeline.js").read_text(encoding="utf-8")

_CSS = (
    "body{font-family:sans-serif;margin:16px;color:#222}"
    "h1{font-size:18px}.axes{color:#555}.sampled{color:#d62728;font-weight:bold}"
    ".event:hover,.cti:hover,.keyed-cti:hover{stroke:#000;stroke-width:1}"
    ".key-cti-line:hover{stroke-width:2.5}.keys-left-out{color:#555}"
    "table.summary{border-collapse:collapse;margin-top:12px}"
    "table.summary td,table.summary th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "table.summary td:first-child{text-align:left}"
    ".controls{margin:6px 0}.controls button{margin-right:3px}#view-range{color:#555}"
    "p.thinned{color:#d62728}svg.timeline{user-select:none;cursor:grab}"
)


def _ident(item: TraceItem) -> tuple:
    """What the page's sample hashes for an item: an edge's ``match`` (both its edges go
    together), else its position."""
    return (
        ("edge", item.match)
        if item.edge is not None and item.match is not None
        else (item.position)
    )


def _thin(marks: list, cap: int, ident: Callable[[Any], Any], first: Callable[[Any], bool]) -> list:
    """At most ``cap`` of ``marks``, in their order: every mark ``first`` picks (dropped and
    adjusted events) while they are at most half the cap, and of the others (of all, if not)
    those whose hash of ``ident`` is a multiple of ``2**level``, the smallest level that fits.
    The hash (CRC-32 of the repr) is the same on every render of the same trace."""
    if len(marks) <= cap:
        return marks
    picked = [m for m in marks if first(m)]
    sure = picked if len(picked) <= cap // 2 else []
    rest = [m for m in marks if not (sure and first(m))]
    room = cap - len(sure)
    hashes = {id(m): zlib.crc32(repr(ident(m)).encode()) for m in rest}
    level = max(0, math.ceil(math.log2(len(rest) / max(room, 1))))
    while True:
        kept = {id(m) for m in rest if hashes[id(m)] % (1 << level) == 0}
        if len(kept) <= room:
            break
        level += 1
    keep = kept | {id(m) for m in sure}
    return [m for m in marks if id(m) in keep]


def _columns(xs: list[float], ys: list[float], sx: Callable[[float], float]) -> list:
    """A step line's vertices with at most the first and last of each 2 px column of the page
    (what the eye sees at the page's first zoom; a long CTI series stays small)."""
    if len(xs) <= 2 * _PLOT_W:
        return list(zip(xs, ys, strict=True))
    groups: list[list[tuple[float, float]]] = []
    last = None
    for a, b in zip(xs, ys, strict=True):
        column = int(sx(a) // 2)
        if column != last:
            groups.append([])
            last = column
        groups[-1].append((a, b))
    return [p for g in groups for p in (g if len(g) <= 2 else (g[0], g[-1]))]


def _short(key: Any, n: int = 10) -> str:
    """A key for a legend: at most ``n`` characters (the tooltips have it whole)."""
    s = str(key)
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def _esc(s: Any) -> str:
    return _html.escape(str(s), quote=True)


def _val(t: int | None, inf: str = "+inf") -> str:
    if t is None:
        return ""
    if t >= MAX_TIME:
        return inf
    if t <= MIN_TIME:
        return "-inf"
    return str(t)


def _write(path: str | Path, data: bytes) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
