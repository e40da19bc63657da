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

The PNG is drawn with matplotlib (Agg, no pyplot state), which only the ``viz`` extra installs
(``pip install "ctistream[viz]"``): it is imported when a PNG is drawn, and without it
:meth:`Timeline.png` raises ImportError saying so (:func:`require_matplotlib`). The HTML page
is self-contained: one file, inline SVG and CSS, no scripts; every mark is an element with a
class and ``data-`` attributes (``event kept|dropped|adjusted`` with ``data-reason`` and
``data-adjusted``, ``explicit-cti``, ``cti input-cti|operator-cti|output-cti``, ``epoch-cut``,
``end-of-input``; per key ``key-cti-line`` and ``keyed-cti`` with ``data-key``, and
``keys-left-out``) and a tooltip (``<title>``); the legend and the summary table count dropped
and adjusted events by reason.
"""

from __future__ import annotations

import html as _html
import io
import math
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
    Trace,
    TraceItem,
)

__all__ = ["MAX_KEYS", "Timeline", "require_matplotlib"]

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


def _axis(values: list[int], what: str, counter_title: str, inf_label: str) -> _Axis:
    finite = [v for v in values if MIN_TIME < v < MAX_TIME] or [0]
    lo_t, hi_t = min(finite), max(finite)
    has_inf = any(v >= MAX_TIME for v in values)
    if lo_t > -_COUNTER_LIMIT and hi_t < _COUNTER_LIMIT:  # near 0 (negative CTIs too): counters
        title, origin, unit, counter = counter_title, 0, 1, True
    else:
        span = hi_t - lo_t
        unit, name = (
            (1_000_000, "s")
            if span <= 600 * 1_000_000
            else (60_000_000, "min")
            if span <= 600 * 60_000_000
            else (3_600_000_000, "h")
        )
        origin = lo_t - lo_t % unit
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
        for name in t.inputs:
            for it in t.items(name):
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
        self.x = _axis(xs + t.cuts, "arrival", "arrival stamp", "stop")
        self.y = _axis(ys, "event time", "event time (ticks)", "+inf")
        self.panels = self._panels()
        what = {
            ITEM: "input {} items",
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
        out = _Panel("output", t.query, f"query {t.query}: output CTIs and operators' CTIs", "")
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
        """The timeline as one self-contained HTML page (written to ``path`` too, when given)."""
        t = self.trace
        q = _esc(t.query)
        notes = "".join(f'<p class="sampled">{_esc(n)}</p>' for n in self.notes)
        notes += "".join(
            f'<p class="keys-left-out" data-series="{_esc(what)}" data-drawn="{drawn}" '
            f'data-keys="{total}">{_esc(note)}</p>'
            for (what, drawn, total), note in zip(
                [k for p in self.panels for k in p.keys_left_out], self.key_notes, strict=True
            )
        )
        page = (
            "<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><title>timeline of query {q}</title>'
            f"<style>{_CSS}</style></head><body>\n"
            f'<h1>Timeline of query <code>{q}</code></h1>\n<p class="axes">x: '
            f"{_esc(self.x.title)}; y: {_esc(self.y.title)}. Dotted lines: epoch cuts. Hover "
            "a mark for its details.</p>\n"
            f"{notes}\n{self._svg()}\n{self._summary()}\n</body></html>\n"
        )
        if path is not None:
            _write(path, page.encode())
        return page

    def _svg(self) -> str:
        left, right, top, plot_w, plot_h, gap = 90, 230, 20, 840, 230, 80
        width = left + plot_w + right
        legends = [self._svg_legend_rows(p) for p in self.panels]
        # a panel whose legend is taller than its plot (many keys) takes the room it needs
        spans = [max(plot_h, 17 * len(rows)) + gap for rows in legends]
        tops = [top + sum(spans[:i]) for i in range(len(spans))]
        height = top + sum(spans) + 10
        x, y = self.x, self.y

        def sx(v: float) -> float:
            return round(left + (v - x.low) / (x.high - x.low) * plot_w, 2)

        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{_ADJUST}"/></marker></defs>',
        ]
        for i, panel in enumerate(self.panels):
            y0 = tops[i] + 24

            def sy(v: float, y0: float = y0) -> float:
                return round(y0 + plot_h - (v - y.low) / (y.high - y.low) * plot_h, 2)

            parts.append(
                f'<g class="panel" data-panel="{panel.kind}" data-name="{_esc(panel.name)}">'
            )
            parts.append(
                f'<text x="{left}" y="{y0 - 8}" font-size="13" font-weight="bold">'
                f"{_esc(panel.title)}</text>"
            )
            parts.append(
                f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{plot_h}" fill="#fff" '
                'stroke="#888"/>'
            )
            for v, label in x.ticks():
                if x.low <= v <= x.high:
                    parts.append(
                        f'<line x1="{sx(v)}" y1="{y0}" x2="{sx(v)}" y2="{y0 + plot_h}" '
                        f'stroke="#eee"/><text x="{sx(v)}" y="{y0 + plot_h + 14}" '
                        f'text-anchor="middle">{_esc(label)}</text>'
                    )
            for v, label in y.ticks():
                if y.low <= v <= y.high:
                    parts.append(
                        f'<line x1="{left}" y1="{sy(v)}" x2="{left + plot_w}" y2="{sy(v)}" '
                        f'stroke="#eee"/><text x="{left - 6}" y="{sy(v) + 4}" '
                        f'text-anchor="end">{_esc(label)}</text>'
                    )
            for cut in self.trace.cuts:
                cx = sx(x.at(cut))
                parts.append(
                    f'<line class="epoch-cut" data-arrival="{cut}" x1="{cx}" y1="{y0}" '
                    f'x2="{cx}" y2="{y0 + plot_h}" stroke="#999" stroke-dasharray="2,3">'
                    f"<title>epoch cut at arrival {_esc(x.describe(cut))}</title></line>"
                )
            parts.extend(self._svg_panel(panel, sx, sy, y0, plot_h))
            parts.append(self._svg_legend(legends[i], left + plot_w + 14, y0 + 6))
            parts.append("</g>")
        last = tops[-1] + 24 + plot_h
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{last + 32}" text-anchor="middle">'
            f"{_esc(x.title)}</text>"
        )
        parts.append("</svg>")
        return "\n".join(parts)

    def _svg_panel(self, panel: _Panel, sx, sy, y0: float, plot_h: float) -> list[str]:
        x, y = self.x, self.y
        name = _esc(panel.name)
        out: list[str] = []

        def attrs(m: _Mark) -> str:
            it = m.item
            a = (
                f'data-input="{name}" data-kind="{_shape(it)}" '
                f'data-arrival="{_val(it.arrival, "stop")}" data-time="{_val(it.time)}" '
                f'data-partition="{it.partition}"'
            )
            if it.reason:
                a += f' data-reason="{_esc(it.reason)}"'
            if it.adjusted is not None:
                a += f' data-adjusted="{_val(it.adjusted)}"'
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
            s += f"; arrival {x.describe(it.arrival)}, partition {it.partition}; {it.action}"
            if it.reason:
                s += f" ({it.reason})"
            if it.adjusted is not None:  # an END edge's end (semantics §3.4), else the start
                s += f" to {'end' if it.edge == 'END' else 'start'} {y.describe(it.adjusted)}"
            if it.cti is not None:
                s += f"; CTI in force {y.describe(it.cti)}"
            return f"<title>{_esc(s)}</title>"

        keys: list[str] = []  # drawn last: a keyed CTI's dot sits on its key's event
        for line in panel.lines:
            if line.key is not None:
                keys.extend(self._svg_key_line(line, sx, sy))
                continue
            xs, ys = self._step(line)
            if not xs:
                continue
            d = " ".join(
                f"{'M' if i == 0 else 'L'}{sx(a)},{sy(b)}"
                for i, (a, b) in enumerate(zip(xs, ys, strict=True))
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
            for px, py, c in line.points:
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
        for m in panel.kept:
            px, py = sx(m.x), sy(m.y)
            shape = _shape(m.item)
            if shape == "interval":
                body = (
                    f'<line x1="{px}" y1="{py}" x2="{px}" y2="{sy(m.y2)}" stroke="{panel.color}" '
                    f'stroke-opacity="0.35" stroke-width="3"/><circle cx="{px}" cy="{py}" r="3.5" '
                    f'fill="{panel.color}"/>'
                )
            elif shape == "point":
                body = f'<circle cx="{px}" cy="{py}" r="3.5" fill="{panel.color}"/>'
            else:
                tri = "M-4,3 L4,3 L0,-5 z" if shape == "start" else "M-4,-3 L4,-3 L0,5 z"
                body = f'<path transform="translate({px},{py})" d="{tri}" fill="{panel.color}"/>'
            out.append(f'<g class="event kept" {attrs(m)}>{tip(m)}{body}</g>')
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
            px, py = sx(m.x), sy(m.y)
            out.append(
                f'<g class="event dropped" {attrs(m)}>{tip(m)}'
                f"{_svg_mark(_marker(m.item), px, py, _DROP)}</g>"
            )
        for m in panel.adjusted:
            px, py, py2 = sx(m.x), sy(m.y), sy(m.y2)
            marker = _marker(m.item)
            out.append(
                f'<g class="event adjusted" {attrs(m)}>{tip(m)}<line x1="{px}" y1="{py}" '
                f'x2="{px}" y2="{py2}" stroke="{_ADJUST}" stroke-width="1.6" '
                f'marker-end="url(#arrow)"/>{_svg_mark(marker, px, py, _ADJUST, filled=False)}'
                f"{_svg_mark(marker, px, py2, _ADJUST)}</g>"
            )
        return out + keys

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
        for (px, py, c), v in zip(line.points, line.values, strict=True):
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
            rows.append(
                ('<line x1="0" y1="0" x2="18" y2="0" stroke="#999" stroke-width="1"/>', "inputs")
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


_CSS = (
    "body{font-family:sans-serif;margin:16px;color:#222}"
    "h1{font-size:18px}.axes{color:#555}.sampled{color:#d62728;font-weight:bold}"
    ".event:hover,.cti:hover,.keyed-cti:hover{stroke:#000;stroke-width:1}"
    ".key-cti-line:hover{stroke-width:2.5}.keys-left-out{color:#555}"
    "table.summary{border-collapse:collapse;margin-top:12px}"
    "table.summary td,table.summary th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "table.summary td:first-child{text-align:left}"
)


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
