"""The timeline's HTML page to explore: output events, edge lifetimes, the diagonal, thinning,
the size of a dense page, and (in a real headless Chromium) the marks, zoom, pan and the key
filter.

Three small traced runs, each one epoch: edges (a closed edge, a never-closed one, a dropped
one), keyed points (a substream key), and 10,000 points (the size budget). One browser for the
module. Every expected value is worked by hand from the scripts.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import shutil
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
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventOrderingSettings,
    EventShape,
    edge_end,
    edge_start,
    point,
)
from ctistream.engine.temporal import to_ticks
from ctistream.viz.timeline import PAGE_CTIS, PAGE_EVENTS

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
S = 1_000_000
t0 = to_ticks(T0)
_names = itertools.count()
CHROMIUM = "/usr/bin/chromium"
# The page's plot boxes (viz/timeline.py): left edge, width and height in px.
LEFT, WIDTH, HEIGHT = 90, 840, 230


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _query(app, stream, shape=EventShape.POINT):
    name = f"page{next(_names)}"
    return stream.to_query(app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), shape)


def _svg(page: str) -> ET.Element:
    return ET.fromstring(page[page.index("<svg") : page.index("</svg>") + len("</svg>")])


def _marks(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter() if e.get("class") == cls]


@pytest.fixture(scope="module")
def pages(app, tmp_path_factory):
    """The three traced runs' pages: {"edges", "keyed", "big"} -> (path, page text)."""
    out = tmp_path_factory.mktemp("pages")
    made = {}
    queries = []
    try:
        # edges: explicit CTIs only (DROP). Arrival stamps are the call order.
        s = EventScript()
        s.insert("edges", edge_start(at(0), {"v": 1.0}))  # 0: closed at 2: [0, 4)
        s.insert("edges", edge_start(at(5), {"v": 2.0}))  # 1: never closed
        s.insert("edges", edge_end(at(0), at(4), {"v": 1.0}))  # 2
        s.cti("edges", at(3))  # 3
        s.insert("edges", edge_start(at(2), {"v": 3.0}))  # 4: 2 < 3: dropped
        s.insert("edges", edge_end(at(2), at(6), {"v": 3.0}))  # 5: dropped with its START
        settings = AdvanceTimeSettings(
            AdvanceTimeGenerationSettings(10**6, timedelta(0)), None, AdvanceTimePolicy.DROP
        )
        edges = Stream.create(
            "edges", MemoryInputFactory(), MemoryInputConfig(script=s), EventShape.EDGE, settings
        )
        queries.append(("edges", _query(app, edges, EventShape.EDGE)))

        # keyed: tests/test_timeline.py's per-key input (late tolerance 100, over="k"), passed
        # through.
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
        kin = Stream.create(
            "kin",
            MemoryInputFactory(),
            MemoryInputConfig(script=s, schema="k string, t bigint, v double"),
            EventShape.POINT,
            ordering=ordering,
        )
        queries.append(("keyed", _query(app, kin)))

        # big: 10,000 points 10 ms apart, each arriving 0.5 s after its time, except every
        # 100th (i % 100 == 50), 3 s behind. A CTI 1 s behind the largest start follows every
        # 100th event (after i = 99, 199, ...): from i = 150 on each late one is below the CTI
        # in force (k - 1.01 s against k - 2.5 s for i = 100 k + 50) and dropped, 99 in all;
        # i = 50 comes before any CTI and is kept. The query passes the events through.
        s = EventScript()
        for i in range(10_000):
            late = 3.0 if i % 100 == 50 else 0.0
            s.insert("big", point(at(i / 100 - late), {"v": 1.0}), arrival=at(i / 100 + 0.5))
        big = Stream.create(
            "big",
            MemoryInputFactory(),
            MemoryInputConfig(script=s),
            EventShape.POINT,
            AdvanceTimeSettings(
                AdvanceTimeGenerationSettings(100, timedelta(seconds=1), True),
                None,
                AdvanceTimePolicy.DROP,
            ),
        )
        queries.append(("big", _query(app, big)))

        for what, query in queries:
            import time

            t = time.time()
            query.run(trace=True)
            print("RUN", what, time.time() - t)
            path = out / f"{what}.html"
            made[what] = (path, query.timeline(html=path).html())
        yield made
    finally:
        for _, query in queries:
            app.queries.pop(query.name, None)


def test_the_page_draws_edges_as_lifetime_bars_and_a_never_closed_one_to_the_right_edge(pages):
    _, page = pages["edges"]
    svg = _svg(page)
    # Closed: START(0) arrived at 0, its END edge (end 4 s) at 2; dropped: START(2) and its END
    # edge; open: START(5) at 1. The input's and the output's (the input passed through).
    query = svg.find(".//*[@data-panel='output']").get("data-name")
    for series in ("input edges", f"query {query}"):
        closed = [e for e in _marks(svg, "lifetime edge") if e.get("data-series") == series]
        assert [
            (
                int(e.get("data-arrival")),
                int(e.get("data-start")),
                int(e.get("data-end")),
                int(e.get("data-closed-at")),
            )
            for e in closed
        ] == [(0, t0, t0 + 4 * S, 2)], series
        (never,) = [e for e in _marks(svg, "lifetime edge open") if e.get("data-series") == series]
        assert (int(never.get("data-arrival")), int(never.get("data-start"))) == (1, t0 + 5 * S)
        bar = never.find("{http://www.w3.org/2000/svg}path")
        assert bar.get("d").split()[-1].startswith(f"L{LEFT + WIDTH}.0,")  # to the right edge
        assert "never closed" in never.find("{http://www.w3.org/2000/svg}title").text
    assert "edge never closed" in page and "edge lifetime" in page
    # Output events: the two START edges and the END edge, at the arrivals they were emitted.
    outputs = sorted(
        (e.get("data-kind"), int(e.get("data-arrival")), int(e.get("data-time")))
        for e in _marks(svg, "event output")
    )
    assert outputs == [("end", 2, t0 + 4 * S), ("start", 0, t0), ("start", 1, t0 + 5 * S)]
    # Arrival stamps are counters, event times dates: no common clock, no diagonal.
    assert not _marks(svg, "diagonal") and "no diagonal" in page


def test_the_axes_share_one_time_origin_and_the_diagonal_is_event_time_equals_arrival(pages):
    _, page = pages["big"]
    svg = _svg(page)
    # Both axes are dates: one origin and unit. Event times run from -2.5 s (i = 50, kept)
    # to 99.99 s, arrivals from 0.5 s to 100.49 s after 12:00: at most 600 s, so seconds,
    # from the lowest of both rounded down: 11:59:57.
    assert (
        "x: arrival (s after 2026-11-21T11:59:57Z); y: event time (s after "
        "2026-11-21T11:59:57Z)" in page
    )
    (diag, *_) = _marks(svg, "diagonal")
    x1, y1, x2, y2 = (float(diag.get(k)) for k in ("x1", "y1", "x2", "y2"))
    # The dropped i = 150: event time 1.5 - 3 = -1.5 s, arrival 2 s: 3.5 s below the diagonal.
    (late,) = [e for e in _marks(svg, "event dropped") if e.get("data-arrival") == str(t0 + 2 * S)]
    assert int(late.get("data-time")) == t0 - 1_500_000
    cross = late.find("{http://www.w3.org/2000/svg}path").get("transform")
    cx, cy = (float(v) for v in cross.removeprefix("translate(").removesuffix(")").split(","))
    on_diagonal = y1 + (cx - x1) / (x2 - x1) * (y2 - y1)  # the diagonal's y at cx (px)
    assert cy > on_diagonal + 5  # below it (larger y on the page)
    # The diagonal's end points are each at one value on both axes: with the plot's pixel
    # mapping, (x1, y1) is (v, v) for the same v.
    axes = json.loads(re.search(r'id="timeline-axes">(.*?)</script>', page).group(1))
    ax, ay = axes["x"], axes["y"]
    panel_top = float(svg.find('.//*[@data-panel="input"]').get("data-top"))
    vx = ax["low"] + (x1 - LEFT) / WIDTH * (ax["high"] - ax["low"])
    vy = ay["low"] + (panel_top + HEIGHT - y1) / HEIGHT * (ay["high"] - ay["low"])
    assert vx == pytest.approx(vy, abs=0.1)
    assert ax["origin"] == ay["origin"] == t0 - 3 * S and ax["unit"] == ay["unit"] == S


def test_ten_thousand_events_make_at_most_a_megabyte_and_the_page_says_what_it_thinned(pages):
    path, page = pages["big"]
    size = path.stat().st_size
    assert size <= 1_000_000, size
    svg = _svg(page)
    dropped = _marks(svg, "event dropped")
    kept = _marks(svg, "event kept")
    # Every dropped event drawn (99), a sample of the 9,901 kept ones; the output's 9,901
    # events (passed through) sampled too.
    assert len(dropped) == 99
    shown = len(kept) + len(dropped)
    assert 0 < shown <= PAGE_EVENTS
    assert f"input big: showing {shown:,} of 10,000 events" in page
    outputs = len(_marks(svg, "event output"))
    assert 0 < outputs <= PAGE_EVENTS
    query = svg.find(".//*[@data-panel='output']").get("data-name")
    assert f"query {query}: showing {outputs:,} of 9,901 events" in page
    notes = [e.text for e in _marks(svg, "thinned")]
    assert notes == [
        f"showing {shown:,} of 10,000 events (a sample)",
        f"showing {outputs:,} of 9,901 events (a sample)",
    ]
    # 100 CTIs (after i = 99, 199, ..., 9999) and the flush's: few enough to draw each.
    dots = [e for e in _marks(svg, "cti input-cti") if e.get("data-series") == "big"]
    assert len(dots) == 101 <= PAGE_CTIS and "CTIs of big: showing" not in page


def test_thinning_keeps_the_dropped_and_adjusted_and_an_edges_marks_together():
    from ctistream.viz.timeline import _thin

    # (id, first?, edge match or None): 40 plain marks, 5 "first" ones, 10 edges as 5 pairs.
    marks = [(i, False, None) for i in range(40)] + [(100 + i, True, None) for i in range(5)]
    marks += [(200 + i, False, i // 2) for i in range(10)]

    def ident(m):
        return ("edge", m[2]) if m[2] is not None else m[0]

    kept = _thin(marks, 20, ident, lambda m: m[1])
    assert len(kept) <= 20 and kept == [m for m in marks if m in kept]  # in order
    assert [m for m in kept if m[1]] == marks[40:45]  # every "first" one: 5 <= 20 / 2
    pairs = [m[2] for m in kept if m[2] is not None]
    assert all(pairs.count(p) == 2 for p in pairs)  # an edge's two marks together
    assert _thin(marks, 20, ident, lambda m: m[1]) == kept  # the same every time
    assert _thin(marks, 100, ident, lambda m: m[1]) == marks  # under the cap: all


# -- in a real browser ---------------------------------------------------------------------
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Debian Chromium for the module (playwright drives it; no browser download:
    .ci/run installs Debian's chromium when missing). Every request but a file's is refused
    and recorded: the page must fetch nothing."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"the timeline page test needs Debian's chromium at {CHROMIUM}; got none. Fix: "
            "apt-get install -y chromium (.ci/run does it when missing)"
        )
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 1100},
        )
        fetched: list[str] = []

        def refuse(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                fetched.append(route.request.url)
                route.abort()

        context.route("**/*", refuse)
        context.fetched = fetched
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def _view(page) -> dict[str, float]:
    return page.evaluate(
        "() => { const s = document.querySelector('svg.timeline'); const v = {};"
        " for (const k of ['x0', 'x1', 'y0', 'y1']) v[k] = +s.getAttribute('data-view-' + k);"
        " return v; }"
    )


def test_in_a_browser_the_marks_are_drawn_and_zoom_and_pan_change_the_visible_range(
    pages, browser, tmp_path
):
    import numpy as np
    from PIL import Image

    path, _ = pages["edges"]
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    shot = page.screenshot(path=str(tmp_path / "edges.png"), full_page=True)
    pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB")).astype(int).reshape(-1, 3)

    def near(rgb: tuple[int, int, int]) -> int:
        return int((np.abs(pixels - np.array(rgb)) <= 12).all(axis=1).sum())

    assert near((0x1F, 0x77, 0xB4)) > 100  # the input's edges, bars and CTI line
    assert near((0xD6, 0x27, 0x28)) > 20  # the dropped START and END edges

    # Each event mark is drawn with a size, inside its panel's plot box.
    boxes = page.evaluate(
        "() => [...document.querySelectorAll('g.event')].map(g => {"
        " const b = g.getBBox(); const top = +g.closest('g.panel').getAttribute('data-top');"
        " return [b.x + b.width / 2, b.y + b.height / 2, b.width, top]; })"
    )
    # input: 3 kept (2 START, 1 END), 2 dropped; output: 3
    assert len(boxes) == 8
    for cx, cy, w, top in boxes:
        assert w > 0 and LEFT <= cx <= LEFT + WIDTH and top <= cy <= top + HEIGHT

    base = _view(page)
    assert base["x1"] > base["x0"] and base["y1"] > base["y0"]
    text = page.inner_text("#view-range")
    # A kept START edge's place before and after zooming in twice about the centre: twice as
    # far from the plot's centre (510 px) each time.
    mark = "g.event.kept[data-arrival='1'] path"

    def where() -> float:
        return float(
            page.eval_on_selector(mark, "e => e.getAttribute('transform')")
            .removeprefix("translate(")
            .split(",")[0]
        )

    before = where()
    page.click("button[data-act=in]")
    page.wait_for_timeout(50)
    zoomed = _view(page)
    assert zoomed["x1"] - zoomed["x0"] == pytest.approx((base["x1"] - base["x0"]) / 2)
    assert zoomed["y1"] - zoomed["y0"] == pytest.approx((base["y1"] - base["y0"]) / 2)
    assert where() == pytest.approx(510 + 2 * (before - 510), abs=0.2)
    assert page.inner_text("#view-range") != text
    # The never-closed edge still runs to the right edge, its marker there.
    end = page.eval_on_selector("g.lifetime.open path.open-end", "e => e.getAttribute('transform')")
    assert end.startswith(f"translate({LEFT + WIDTH - 5},")

    # The mouse wheel zooms about the pointer: the arrival under it stays put.
    top = float(page.eval_on_selector("g.panel", "g => g.getAttribute('data-top')"))
    box = page.eval_on_selector("svg.timeline", "s => s.getBoundingClientRect().toJSON()")
    px, py = box["x"] + LEFT + 200, box["y"] + top + HEIGHT / 2
    under = zoomed["x0"] + 200 / WIDTH * (zoomed["x1"] - zoomed["x0"])
    page.mouse.move(px, py)
    page.mouse.wheel(0, -200)
    page.wait_for_timeout(100)
    wheeled = _view(page)
    assert wheeled["x1"] - wheeled["x0"] < zoomed["x1"] - zoomed["x0"]
    assert wheeled["x0"] + 200 / WIDTH * (wheeled["x1"] - wheeled["x0"]) == pytest.approx(under)

    # Dragging 84 px (a tenth of the plot) to the left shows a tenth further right.
    width = wheeled["x1"] - wheeled["x0"]
    page.mouse.move(px, py)
    page.mouse.down()
    page.mouse.move(px - 84, py, steps=4)
    page.mouse.up()
    page.wait_for_timeout(50)
    dragged = _view(page)
    assert dragged["x0"] == pytest.approx(wheeled["x0"] + width / 10, rel=1e-6)

    page.click("button[data-act=reset]")
    page.wait_for_timeout(50)
    assert _view(page) == pytest.approx(base)
    assert errors == [] and browser.fetched == []
    page.close()


def test_in_a_browser_the_key_filter_shows_one_keys_marks(pages, browser):
    path, html = pages["keyed"]
    keyed = {}
    for e in _svg(html).iter():
        if e.get("data-key") is not None:
            keyed.setdefault(e.get("data-key"), []).append(e.get("class"))
    # Events: a at 10 and 11, b at 12 and 105, each with its key, in the input's panel and
    # (passed through) the output's; per key its keyed CTIs (a at 10 and 11, b at 12 and 105,
    # as tests/test_timeline.py works them out) and its CTI line.
    for k in ("a", "b"):
        assert sorted(keyed[k]) == [
            "event kept",
            "event kept",
            "event output",
            "event output",
            "key-cti-line input-keyed-cti",
            "keyed-cti input-keyed-cti",
            "keyed-cti input-keyed-cti",
        ], k
    page = browser.new_page()
    page.goto(path.as_uri())
    assert page.eval_on_selector_all("#timeline-keys option", "os => os.map(o => o.value)") == [
        "a",
        "b",
    ]
    page.fill("#key-filter", "a")
    page.wait_for_timeout(50)
    shown = page.evaluate(
        "() => [...document.querySelectorAll('[data-key]')].map(e =>"
        " [e.getAttribute('data-key'), getComputedStyle(e).display !== 'none'])"
    )
    assert {k for k, on in shown if on} == {"a"} and {k for k, on in shown if not on} == {"b"}
    assert page.inner_text("#key-count") == (
        f"{len(keyed['a'])} of {len(keyed['a']) + len(keyed['b'])} keyed marks shown"
    )
    # Marks without a key (the stream's CTI lines) stay.
    assert page.eval_on_selector_all(
        "path.cti-line", "ps => ps.every(p => getComputedStyle(p).display !== 'none')"
    )
    page.fill("#key-filter", "")
    page.wait_for_timeout(50)
    assert page.evaluate(
        "() => [...document.querySelectorAll('[data-key]')].every(e => e.style.display === '')"
    )
    assert browser.fetched == []
    page.close()
