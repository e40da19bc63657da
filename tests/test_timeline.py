"""The timeline of a traced run: what the trace records, the PNG, the HTML page and its marks.

One scripted run (two inputs, DROP and ADJUST, a CTI import, a union and a tumbling window), cut
into 3 epochs, and the seed's illustrated example of the arrival-time policies (§7) with DROP and
ADJUST. Every expected value below is derived by hand from the script.
"""

from __future__ import annotations

import io
import itertools
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    CtiViolationError,
    EventShape,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.temporal import MAX_TIME, to_ticks
from ctistream.viz.trace import Trace
from pyspark.sql import functions as F

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)  # a multiple of 10 s: the window grid
S = 1_000_000
t0 = to_ticks(T0)
INF = MAX_TIME
_names = itertools.count()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def script() -> EventScript:
    """Arrival stamps are the call order, 0..9.

    ``data``: a CTI 2 s behind each point; DROP. ``ref``: imports data's CTIs; ADJUST.
    """
    s = EventScript()
    s.insert("data", point(at(1), {"v": 1.0}))  # 0: CTI 1-2 = -1 s
    s.insert("data", point(at(5), {"v": 1.0}))  # 1: CTI 3 s
    s.insert("ref", interval(at(2), at(8), {"v": 2.0}))  # 2: 2 < 3: adjusted to [3, 8)
    s.insert("data", point(at(2), {"v": 1.0}))  # 3: 2 < 3: dropped (no new CTI: max start 5)
    s.insert("data", point(at(12), {"v": 1.0}))  # 4: CTI 10 s
    s.insert("ref", interval(at(4), at(6), {"v": 2.0}))  # 5: ends before 10: dropped
    s.insert("data", point(at(9), {"v": 1.0}))  # 6: 9 < 10: dropped
    s.insert("data", point(at(15), {"v": 1.0}))  # 7: CTI 13 s
    s.insert("ref", interval(at(14), at(20), {"v": 2.0}))  # 8: kept
    s.end("data")  # 9: flush: CTI +inf (imported by ref too)
    return s


def build(app, cap_script: EventScript | None = None):
    events = cap_script or script()
    data = Stream.create(
        "data",
        MemoryInputFactory(),
        MemoryInputConfig(script=events),
        EventShape.POINT,
        AdvanceTimeSettings(
            AdvanceTimeGenerationSettings(1, timedelta(seconds=2), True),
            None,
            AdvanceTimePolicy.DROP,
        ),
    )
    ref = Stream.create(
        "ref",
        MemoryInputFactory(),
        MemoryInputConfig(script=events),
        EventShape.INTERVAL,
        AdvanceTimeSettings(None, AdvanceTimeImportSettings("data"), AdvanceTimePolicy.ADJUST),
    )
    name = f"timeline{next(_names)}"
    query = (
        data.union(ref)
        .tumbling_window(timedelta(seconds=10))
        .aggregate(n=F.count("*"))
        .to_query(app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT)
    )
    return query


@pytest.fixture(scope="module")
def traced(app):
    query = build(app)
    query.run(epochs=3, trace=True)
    yield query
    app.queries.pop(query.name, None)


# Hand-derived: the data CTIs after arrivals 0, 1, 4, 7 (point - 2 s) and the flush at 9; ref
# imports each at the same place; the union's CTI is the smaller of both (the same here); the
# window pulls each back to the start of the earliest open 10 s window (-1 -> -10, 3 -> 0,
# 10 -> 10, 13 -> 10: no rise).
DATA_CTIS = [(0, t0 - S), (1, t0 + 3 * S), (4, t0 + 10 * S), (7, t0 + 13 * S), (9, INF)]
WINDOW_CTIS = [(0, t0 - 10 * S), (1, t0), (4, t0 + 10 * S), (9, INF)]


def test_a_traced_run_delivers_the_same_results(traced):
    out = MemoryOutputFactory.collected(traced.name)
    # [0, 10 s): points 1 and 5, ref [3, 8) (2 and 9 dropped, [4, 6) dropped); [10, 20 s): 12,
    # 15 and ref [14, 20).
    events = [(e.start, e.payload["n"]) for e in out if not e.is_cti]
    assert events == [(t0, 3), (t0 + 10 * S, 3)]
    assert [e.start for e in out if e.is_cti] == [c for _, c in WINDOW_CTIS]


def test_the_trace_records_items_actions_and_every_ctis_place(traced):
    trace = traced.trace
    assert trace.inputs == ["data", "ref"]
    data = [(i.arrival, i.kind, i.start, i.action) for i in trace.items("data")]
    assert data == [
        (0, "INSERT", t0 + 1 * S, "kept"),
        (1, "INSERT", t0 + 5 * S, "kept"),
        (3, "INSERT", t0 + 2 * S, "dropped"),
        (4, "INSERT", t0 + 12 * S, "kept"),
        (6, "INSERT", t0 + 9 * S, "dropped"),
        (7, "INSERT", t0 + 15 * S, "kept"),
        (9, "EOI", None, "kept"),
    ]
    ref = [(i.arrival, i.start, i.end, i.action, i.adjusted, i.cti) for i in trace.items("ref")]
    assert ref == [
        (2, t0 + 2 * S, t0 + 8 * S, "adjusted", t0 + 3 * S, t0 + 3 * S),
        (5, t0 + 4 * S, t0 + 6 * S, "dropped", None, t0 + 10 * S),
        (8, t0 + 14 * S, t0 + 20 * S, "kept", None, t0 + 13 * S),
    ]
    assert {i.reason for i in trace.items("ref") if i.action != "kept"} == {"cti-violation"}
    assert [(c.arrival, c.start) for c in trace.input_ctis("data")] == DATA_CTIS
    assert [(c.arrival, c.start) for c in trace.input_ctis("ref")] == DATA_CTIS
    assert trace.operators == ["2:union", "3:window"]
    assert [(c.arrival, c.start) for c in trace.operator_ctis("2:union")] == DATA_CTIS
    assert [(c.arrival, c.start) for c in trace.operator_ctis("3:window")] == WINDOW_CTIS
    assert [(c.arrival, c.start) for c in trace.output_ctis()] == WINDOW_CTIS
    assert len(trace.cuts) == 2 and trace.sampled() == {}


def test_the_png_is_a_picture_with_the_marks_colours(traced, tmp_path):
    import numpy as np
    from PIL import Image

    path = tmp_path / "timeline.png"
    data = traced.timeline(png=path).png()
    assert path.read_bytes() == data and data.startswith(b"\x89PNG")
    img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
    height, width, _ = img.shape
    assert width >= 1000 and height >= 800
    pixels = img.reshape(-1, 3)
    binned = (pixels // 16) @ np.array([256, 16, 1])
    assert len(np.unique(binned)) >= 20  # lines, marks, text: far from blank
    ink = (pixels != 255).any(axis=1).mean()
    assert 0.02 < ink < 0.6

    def near(rgb: tuple[int, int, int]) -> int:
        return int((np.abs(pixels - np.array(rgb)) <= 12).all(axis=1).sum())

    assert near((0xD6, 0x27, 0x28)) > 30  # the dropped crosses
    assert near((0xFF, 0x7F, 0x0E)) > 30  # the adjusted arrow and markers
    assert near((0x1F, 0x77, 0xB4)) > 100  # input data's events and CTI line


def _svg(page: str) -> ET.Element:
    return ET.fromstring(page[page.index("<svg") : page.index("</svg>") + len("</svg>")])


def _marks(svg: ET.Element, cls: str) -> list[dict[str, str]]:
    return [dict(e.attrib) for e in svg.iter() if e.get("class") == cls]


def test_the_html_page_is_self_contained_and_holds_the_marks(traced, tmp_path):
    path = tmp_path / "timeline.html"
    traced.timeline(html=path)
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    # One file: the scripts inline (zoom, pan, the key filter), nothing fetched, the only
    # references the page's own marker and clip paths.
    assert "<link" not in page and "@import" not in page
    assert set(re.findall(r"\w+://[^\"' ]*", page)) == {"http://www.w3.org/2000/svg"}  # a name
    assert re.findall(r"<script[^>]*>", page) == [
        '<script type="application/json" id="timeline-axes">',
        "<script>",
    ]
    assert not re.search(r"(src|href)=", page) and set(re.findall(r"url\(([^)]*)\)", page)) == {
        "#arrow",
        "#plot-clip-0",
        "#plot-clip-1",
        "#plot-clip-2",
    }
    svg = _svg(page)

    dropped = _marks(svg, "event dropped")
    assert sorted(
        (d["data-input"], int(d["data-arrival"]), int(d["data-time"])) for d in dropped
    ) == [
        ("data", 3, t0 + 2 * S),
        ("data", 6, t0 + 9 * S),
        ("ref", 5, t0 + 4 * S),
    ]
    assert {d["data-reason"] for d in dropped} == {"cti-violation"}
    (adjusted,) = _marks(svg, "event adjusted")
    assert (adjusted["data-input"], adjusted["data-arrival"]) == ("ref", "2")
    assert (int(adjusted["data-time"]), int(adjusted["data-adjusted"])) == (t0 + 2 * S, t0 + 3 * S)
    kept = _marks(svg, "event kept")
    assert sorted((k["data-input"], int(k["data-arrival"])) for k in kept) == [
        ("data", 0),
        ("data", 1),
        ("data", 4),
        ("data", 7),
        ("ref", 8),
    ]

    def ctis(cls: str, series: str) -> list[tuple[int, int]]:
        marks = [c for c in _marks(svg, cls) if c["data-series"] == series]
        value = {"+inf": INF}
        return [
            (int(c["data-arrival"]), value.get(c["data-value"]) or int(c["data-value"]))
            for c in marks
        ]

    assert ctis("cti input-cti", "data") == DATA_CTIS
    assert ctis("cti input-cti", "ref") == DATA_CTIS
    assert ctis("cti operator-cti", "2:union") == DATA_CTIS
    assert ctis("cti operator-cti", "3:window") == WINDOW_CTIS
    assert ctis("cti output-cti", traced.name) == WINDOW_CTIS
    cuts = {int(c["data-arrival"]) for c in _marks(svg, "epoch-cut")}
    assert cuts == set(traced.trace.cuts) and len(cuts) == 2
    assert [e["data-arrival"] for e in _marks(svg, "end-of-input")] == ["9"]
    assert 'class="sampled"' not in page


# -- arrival-time policies (§7): the seed's illustrated example, ADJUST and DROP ---------------
# The seed's events (tests/ordering_seed.py) on two inputs at the same arrivals: "adj" with the
# seed's settings (early window 5 min, late tolerance 5, out-of-order tolerance 2, ADJUST), "drop"
# the same with DROP and a 13th event with no event time. Minutes after 12:00.

# adj: seed.WITH_EARLY (worked from the seed's rules there), as (arrival, event time, action,
# reason, new time).
ADJ_MARKS = [
    (7, 7, "kept", None, None),
    (8, 8, "kept", None, None),
    (11, 17, "dropped", "early", None),  # 6 min ahead of arrival
    (13, 8, "kept", None, None),
    (16, 19, "kept", None, None),
    (17, 12, "adjusted", "out-of-order", 17),  # below the watermark 19 - 2
    (18, 17, "kept", None, None),
    (19, 20, "kept", None, None),
    (21, 16, "adjusted", "out-of-order", 18),  # below 20 - 2
    (22, 23, "kept", None, None),
    (24, 22, "kept", None, None),
    (27, 21, "adjusted", "late", 22),  # 6 min behind arrival: to 27 - 5, not below 23 - 2
]
# drop, worked by hand with the same rules: the largest event time seen takes every event not
# dropped as early (dropped as late or out of order too), so the watermarks are adj's: 5, 6, 6,
# 6, 17, 17, 17, 18, 18, 21, 21, 21; each event that adj moves is dropped here instead.
DROP_MARKS = [
    (7, 7, "kept", None, None),
    (8, 8, "kept", None, None),
    (11, 17, "dropped", "early", None),
    (13, 8, "kept", None, None),  # 5 behind arrival is not late; 8 >= 6
    (16, 19, "kept", None, None),
    (17, 12, "dropped", "out-of-order", None),  # 5 behind: not late; 12 < 17
    (18, 17, "kept", None, None),  # 17 >= 17
    (19, 20, "kept", None, None),
    (21, 16, "dropped", "out-of-order", None),  # 5 behind: not late; 16 < 18
    (22, 23, "kept", None, None),
    (24, 22, "kept", None, None),  # 22 >= 21
    (27, 21, "dropped", "late", None),  # 6 behind
    (28, None, "dropped", "no-event-time", None),
]


def test_the_timeline_marks_what_the_arrival_time_policies_dropped_and_moved(app, tmp_path):
    import numpy as np
    from ctistream.engine import EventOrderingSettings, OrderingAction
    from PIL import Image

    from tests import ordering_seed as seed

    s = EventScript()
    for i, (_, arrival, _) in enumerate(seed.EVENTS):
        for stream in ("adj", "drop"):  # the payload's event time is the application time
            s.insert(stream, point(0, seed.payload(i)), arrival=seed.at(arrival))
    s.insert("drop", point(0, {"device_id": "device4", "event_time": None}), arrival=seed.at(28))
    adjust = seed.settings(early=True)
    drop = EventOrderingSettings(**(adjust.model_dump() | {"action": OrderingAction.DROP}))
    adj_in, drop_in = (
        Stream.create(
            stream,
            MemoryInputFactory(),
            MemoryInputConfig(script=s, schema=seed.SCHEMA),
            EventShape.POINT,
            ordering=ordering,
        )
        for stream, ordering in (("adj", adjust), ("drop", drop))
    )
    name = f"timeline{next(_names)}"
    query = adj_in.union(drop_in).to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    m = seed.ticks
    try:
        query.run(trace=True)  # one epoch (the traced fixture above cuts its run in three)
        items = query.trace.items
        for stream, marks in (("adj", ADJ_MARKS), ("drop", DROP_MARKS)):
            got = [(i.arrival, i.start, i.action, i.reason, i.adjusted) for i in items(stream)]
            assert got == [
                (m(a), None if t is None else m(t), action, reason, None if n is None else m(n))
                for a, t, action, reason, n in marks
            ], stream

        timeline = query.timeline()
        page = timeline.html(tmp_path / "ordering.html")
        svg = _svg(page)

        def marks(cls: str) -> list[tuple]:
            return sorted(
                (
                    d["data-input"],
                    int(d["data-arrival"]),
                    int(d["data-time"]) if d["data-time"] else None,
                    d.get("data-reason"),
                    int(d["data-adjusted"]) if "data-adjusted" in d else None,
                )
                for d in _marks(svg, cls)
            )

        def expected(action: str) -> list[tuple]:
            return sorted(
                (stream, m(a), None if t is None else m(t), reason, None if n is None else m(n))
                for stream, ms in (("adj", ADJ_MARKS), ("drop", DROP_MARKS))
                for a, t, act, reason, n in ms
                if act == action
            )

        assert marks("event dropped") == expected("dropped")
        assert marks("event adjusted") == expected("adjusted")
        assert len(_marks(svg, "event kept")) == 8 + 8
        # The reasons in the tooltips, the legends and the summary table.
        tips = {
            (e.get("data-input"), int(e.get("data-arrival"))): e.find(
                "{http://www.w3.org/2000/svg}title"
            ).text
            for e in svg.iter()
            if e.get("class") in ("event dropped", "event adjusted")
        }
        assert tips[("adj", m(27))].endswith(
            "adjusted (late) to start 2024-05-01T12:22:00Z; CTI in force 2024-05-01T12:21:00Z"
        )
        assert "point at 2024-05-01T12:12:00Z" in tips[("adj", m(17))]
        assert "adjusted (out-of-order) to start 2024-05-01T12:17:00Z" in tips[("adj", m(17))]
        assert tips[("drop", m(11))].endswith("dropped (early)")
        assert tips[("drop", m(28))].startswith("drop: point with no event time;")
        for text in (
            "dropped: early (1)",
            "adjusted: late (1)",
            "adjusted: out-of-order (2)",
            "dropped: out-of-order (2)",
            "dropped: no-event-time (1)",
            "<td>1 (early 1)</td><td>3 (late 1, out-of-order 2)</td>",
            "<td>5 (early 1, late 1, out-of-order 2, no-event-time 1)</td><td>0</td>",
        ):
            assert text in page, text

        png = timeline.png(tmp_path / "ordering.png")
        img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
        pixels = img.reshape(-1, 3)
        assert img.shape[0] >= 800 and img.shape[1] >= 1000
        assert len(np.unique((pixels // 16) @ np.array([256, 16, 1]))) >= 20
        assert 0.02 < (pixels != 255).any(axis=1).mean() < 0.6

        def near(rgb: tuple[int, int, int]) -> int:
            return int((np.abs(pixels - np.array(rgb)) <= 12).all(axis=1).sum())

        assert near((0xD6, 0x27, 0x28)) > 100  # 6 dropped marks and their legend entries
        assert near((0xFF, 0x7F, 0x0E)) > 60  # 3 adjusted arrows and markers
    finally:
        app.queries.pop(name, None)


def test_a_capped_trace_keeps_a_sample_and_says_so(app, traced):
    query = build(app)
    try:
        query.run(epochs=2, trace=Trace(cap=2))
        trace = query.trace
        full = traced.trace
        for name in ("data", "ref"):
            items = trace.items(name)
            assert 1 <= len(items) <= 2
            assert {i.position for i in items} <= {i.position for i in full.items(name)}
            assert 1 <= len(trace.input_ctis(name)) <= 2
        assert trace.sampled()[("item", "data")] == (len(trace.items("data")), 7)
        assert trace.sampled()[("input-cti", "data")] == (len(trace.input_ctis("data")), 5)
        page = query.timeline().html()
        assert 'class="sampled"' in page
        assert f"input data items: {len(trace.items('data'))} of 7 shown" in page
    finally:
        app.queries.pop(query.name, None)


def test_a_failed_run_keeps_its_trace_up_to_the_bad_item(app):
    s = EventScript()
    s.insert("edges", edge_start(at(8), {"v": 2.0}))  # 0: CTI 8 s after it
    s.insert("edges", edge_start(at(6), {"v": 3.0}))  # 1: 6 < 8: dropped
    s.insert("edges", edge_end(at(6), at(9), {"v": 3.0}))  # 2: its START edge was dropped
    s.insert("only", point(at(5), {"v": 1.0}))  # 3
    s.cti("only", at(10))  # 4
    s.cti("only", at(7))  # 5: not above 10: ignored
    s.insert("only", point(at(3), {"v": 1.0}))  # 6: breaks the CTI, and there is no policy
    s.insert("only", point(at(12), {"v": 1.0}))  # 7: never read
    only = Stream.create(
        "only", MemoryInputFactory(), MemoryInputConfig(script=s), EventShape.POINT
    )
    edges = Stream.create(
        "edges",
        MemoryInputFactory(),
        MemoryInputConfig(script=s),
        EventShape.EDGE,
        AdvanceTimeSettings(
            AdvanceTimeGenerationSettings(1, timedelta(0)), None, AdvanceTimePolicy.DROP
        ),
    )
    name = f"timeline{next(_names)}"
    query = only.union(edges).to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    try:
        with pytest.raises(CtiViolationError):
            query.run(trace=True)
        trace = query.trace
        items = [(i.arrival, i.kind, i.start, i.action) for i in trace.items("only")]
        assert items == [
            (3, "INSERT", t0 + 5 * S, "kept"),
            (4, "CTI", t0 + 10 * S, "kept"),
            (5, "CTI", t0 + 7 * S, "ignored"),
        ]
        edge_items = [(i.arrival, i.edge, i.action, i.reason) for i in trace.items("edges")]
        assert edge_items == [
            (0, "START", "kept", None),
            (1, "START", "dropped", "cti-violation"),
            (2, "END", "dropped", "start-dropped"),
        ]
        # The union's CTI is the smaller of both inputs' latest: -inf until "only" has one.
        assert [(c.arrival, c.start) for c in trace.operator_ctis("2:union")] == [(4, t0 + 8 * S)]
        assert [(c.arrival, c.start) for c in trace.output_ctis()] == [(4, t0 + 8 * S)]
        page = query.timeline().html()
        assert page.count('class="explicit-cti ignored"') == 1
        assert page.count('data-reason="start-dropped"') == 1
    finally:
        app.queries.pop(name, None)


def test_a_timeline_needs_a_traced_run(app):
    query = build(app)
    try:
        with pytest.raises(RuntimeError, match=r"no trace .* Fix: call query.run\(trace=True\)"):
            query.timeline()
    finally:
        app.queries.pop(query.name, None)


# -- per-key CTIs: a keyed input (over="k") through a tumbling window grouped by the key --------
# tests/bindings/test_substreams.py's _fast_and_slow(): late tolerance 100, out-of-order 0, no
# early window, so the input's CTI is arrival - 100 at each event and each key's watermark is its
# largest time; (t, arrival, k): (1, 10, a), (25, 11, a), (2, 12, b), (6, 105, b); the end of
# input at 200 flushes (+inf). A key's CTI candidate max(input CTI, watermark) is emitted when
# above the input's CTI and the key's last: a 1 at 10 (> -90), a 25 at 11, b 2 at 12, b 6 at 105
# (> 5). A key's CTI is max(the stream's CTI, its latest keyed CTI): a's stays 25 until the +inf
# at 200; b's is 2 from 12 until the input's 5 at 105 reaches it, then 6 (its keyed CTI there,
# after the CTI) until 200.
KEYED_CTIS = [(10, -90), (11, -89), (12, -88), (105, 5), (200, INF)]
KEYED = [(10, "a", 1), (11, "a", 25), (12, "b", 2), (105, "b", 6)]
# The window (operator 1) pulls each back to its window's start: CTIs -90 (-89, -88: no rise), 0
# at 105, +inf; keyed: a 1 -> 0 at 10 (> -90), a 25 -> 20 at 11, b 2 -> 0 at 12; b 6 -> 0 at 105
# is not above the window's CTI 0 there: none. So b's CTI (0) joins the window's at 105.
WINDOW_KEYED_CTIS = [(10, -90), (105, 0), (200, INF)]
WINDOW_KEYED = [(10, "a", 0), (11, "a", 20), (12, "b", 0)]
# data-steps: "arrival:key's CTI" where it changes while above the stream's CTI, the last where
# the stream's CTI reaches it.
KEY_STEPS = {
    ("input-keyed-cti", "kin", "a"): "10:1 11:25 200:+inf",
    ("input-keyed-cti", "kin", "b"): "12:2 105:5 105:6 200:+inf",
    ("operator-keyed-cti", "1:window", "a"): "10:0 11:20 200:+inf",
    ("operator-keyed-cti", "1:window", "b"): "12:0 105:0",
}


def test_the_timeline_draws_each_keys_cti(app, tmp_path):
    import numpy as np
    from ctistream.engine import EventOrderingSettings
    from ctistream.viz.timeline import Timeline
    from PIL import Image

    s = EventScript()
    for t, arrival, k in ((1, 10, "a"), (25, 11, "a"), (2, 12, "b"), (6, 105, "b")):
        s.insert("kin", point(0, {"k": k, "t": t, "v": 1.0}), arrival=arrival)
    s.end("kin", arrival=200)
    ordering = EventOrderingSettings(
        event_time="t",
        late_arrival_tolerance=TICK * 100,
        early_arrival_window=None,
        over="k",
        flush_on_stop=True,
    )
    stream = Stream.create(
        "kin",
        MemoryInputFactory(),
        MemoryInputConfig(script=s, schema="k string, t bigint, v double"),
        EventShape.POINT,
        ordering=ordering,
    )
    name = f"timeline{next(_names)}"
    query = (
        stream.tumbling_window(TICK * 10)
        .group_by("k")
        .aggregate(n=F.count("*"))
        .to_query(app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT)
    )
    try:
        query.run(trace=True)
        trace = query.trace

        def keyed(items) -> list[tuple]:
            return [(c.arrival, c.key, c.start) for c in items]

        assert [(c.arrival, c.start) for c in trace.input_ctis("kin")] == KEYED_CTIS
        assert keyed(trace.input_keyed_ctis("kin")) == KEYED
        assert trace.operators == ["1:window"]
        assert [(c.arrival, c.start) for c in trace.operator_ctis("1:window")] == WINDOW_KEYED_CTIS
        assert keyed(trace.operator_keyed_ctis("1:window")) == WINDOW_KEYED

        timeline = query.timeline()
        page = timeline.html(tmp_path / "keyed.html")
        svg = _svg(page)
        value = {"+inf": INF}

        def marks(role: str) -> list[tuple]:
            return sorted(
                (
                    m["data-series"],
                    int(m["data-arrival"]),
                    m["data-key"],
                    int(m["data-value"]),
                    value.get(m["data-key-cti"]) or int(m["data-key-cti"]),
                )
                for m in _marks(svg, f"keyed-cti {role}")
            )

        # Each keyed CTI is a dot of its key, with the key's CTI there (here the keyed CTI: each
        # is above the stream's CTI when emitted).
        assert marks("input-keyed-cti") == sorted(("kin", a, k, c, c) for a, k, c in KEYED)
        assert marks("operator-keyed-cti") == sorted(
            ("1:window", a, k, c, c) for a, k, c in WINDOW_KEYED
        )
        lines = {
            (role, m["data-series"], m["data-key"]): m["data-steps"]
            for role in ("input-keyed-cti", "operator-keyed-cti")
            for m in _marks(svg, f"key-cti-line {role}")
        }
        assert lines == KEY_STEPS
        # Tooltips name the key; the legend lists the keys; the summary counts keyed CTIs (keys).
        tips = {
            (e.get("data-series"), e.get("data-key"), e.get("data-arrival")): e.find(
                "{http://www.w3.org/2000/svg}title"
            ).text
            for e in svg.iter()
            if (e.get("class") or "").startswith("keyed-cti")
        }
        assert tips[("kin", "b", "105")] == (
            "input kin, key b: keyed CTI 6 at arrival 105; the key's CTI 6"
        )
        assert "per-key CTIs of kin:" in page and "per-key CTIs of 1:window:" in page
        assert "<td>5</td><td>+inf</td><td>4 (2)</td>" in page  # input kin
        assert "<td>3</td><td>+inf</td><td>3 (2)</td>" in page  # the window
        assert 'class="keys-left-out"' not in page

        # With one key at most: a's lines only, and the page says how many were left out.
        few = _svg(Timeline(trace, max_keys=1).html())
        assert {m["data-key"] for m in _marks(few, "keyed-cti input-keyed-cti")} == {"a"}
        assert {m["data-key"] for m in _marks(few, "key-cti-line operator-keyed-cti")} == {"a"}
        page = Timeline(trace, max_keys=1).html()
        assert page.count('class="keys-left-out"') == 2
        assert "input kin: per-key CTIs drawn for 1 of 2 keys" in page
        assert "operator 1:window: per-key CTIs drawn for 1 of 2 keys" in page

        png = timeline.png(tmp_path / "keyed.png")
        img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
        pixels = img.reshape(-1, 3)
        assert img.shape[0] >= 600 and img.shape[1] >= 1000
        assert len(np.unique((pixels // 16) @ np.array([256, 16, 1]))) >= 20
        assert 0.02 < (pixels != 255).any(axis=1).mean() < 0.6

        def near(rgb: str) -> int:
            want = np.array([int(rgb[i : i + 2], 16) for i in (1, 3, 5)])
            return int((np.abs(pixels - want) <= 12).all(axis=1).sum())

        # Thin lines are mostly antialiased: the exact colours are in the dots and the legend.
        assert near("#393b79") > 40  # key a's (the first key's colour)
        assert near("#637939") > 40  # key b's
    finally:
        app.queries.pop(name, None)


def test_a_late_end_edge_is_traced_as_adjusted_to_the_cti(app):
    # DROP, explicit CTIs. END(0, 4) breaks CTI 10 while its START edge is open: it closes the
    # edge at 10 (semantics §3.4), traced as adjusted with the new end 10. START(5) breaks the
    # CTI and is dropped; its late END edge (8 < 10) is dropped with it ("start-dropped").
    s = EventScript()
    s.insert("edges", edge_start(at(0), {"v": 1.0}))
    s.cti("edges", at(10))
    s.insert("edges", edge_end(at(0), at(4), {"v": 1.0}))
    s.insert("edges", edge_start(at(5), {"v": 2.0}))
    s.insert("edges", edge_end(at(5), at(8), {"v": 2.0}))
    settings = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(10**6, timedelta(0), True), None, AdvanceTimePolicy.DROP
    )
    edges = Stream.create(
        "edges", MemoryInputFactory(), MemoryInputConfig(script=s), EventShape.EDGE, settings
    )
    name = f"timeline{next(_names)}"
    query = edges.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )
    try:
        query.run(epochs=[3], trace=True)
        items = [
            (i.arrival, i.edge, i.action, i.reason, i.adjusted)
            for i in query.trace.items("edges")
            if i.kind == "INSERT"
        ]
        assert items == [
            (0, "START", "kept", None, None),
            (2, "END", "adjusted", "cti-violation", to_ticks(at(10))),
            (3, "START", "dropped", "cti-violation", None),
            (4, "END", "dropped", "start-dropped", None),
        ]
        out = [e for e in MemoryOutputFactory.collected(name) if not e.is_cti]
        assert out == [interval(at(0), at(10), {"v": 1.0})]
        assert (query.metrics()["edges"]["adjusted"], query.metrics()["edges"]["dropped"]) == (1, 2)
    finally:
        app.queries.pop(name, None)
