"""Hand-checked timelines for §7 (arrival-time policies) in the reference interpreter.

The seed's illustrated example (``tests/ordering_seed.py``) is checked event by event in its three
settings; the other tests take one rule each, with the derivation in the comments. Times are plain
ticks with explicit arrival stamps unless a test says otherwise.
"""

from __future__ import annotations

import pytest
from ctistream.adapters.memory import EventScript
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.events import EventShape, cti, point
from ctistream.engine.settings import (
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimeSettings,
    EventOrderingSettings,
    OrderingAction,
)
from ctistream.engine.temporal import MAX_TIME, TICK

from tests import ordering_seed as seed

from . import Binding, Input, Union, run_reference

DROP, ADJUST = OrderingAction.DROP, OrderingAction.ADJUST
POINT = EventShape.POINT


def ordered(**kwargs) -> EventOrderingSettings:
    kwargs.setdefault("event_time", "t")
    return EventOrderingSettings(**kwargs)


def run(script, ordering, settings=None, columns=("t", "k"), stop=True):
    return run_reference(
        script, [Binding("a", settings, columns, ordering)], Input("a"), POINT, stop=stop
    )


def trace(result, name="a"):
    return [(d.action, d.start, d.watermark) for d in result.ordering[name]]


def ctis(result, name="a"):
    return [e.start for e in result.ingress[name] if e.is_cti]


# -- the seed's illustrated example -------------------------------------------------------------
def seed_script() -> EventScript:
    script = EventScript()
    for i, (_, arrival, _) in enumerate(seed.EVENTS):
        script.insert("in", point(seed.ticks(0), seed.payload(i)), arrival=seed.at(arrival))
    return script


def seed_run(ordering):
    return run_reference(
        seed_script(),
        [Binding("in", None, ("device_id", "event_time"), ordering)],
        Input("in"),
        POINT,
    )


def minutes(expected):
    return [
        (a, None if s is None else seed.ticks(s), None if w is None else seed.ticks(w))
        for a, s, w in expected
    ]


@pytest.mark.parametrize(
    ("early", "over", "expected"),
    [
        (True, None, seed.WITH_EARLY),
        (False, None, seed.WITHOUT_EARLY),
        (True, "device_id", seed.SUBSTREAMS),
    ],
    ids=["with-early-policy", "without-early-policy", "substreams"],
)
def test_the_seeds_illustrated_example_event_by_event(early, over, expected):
    r = seed_run(seed.settings(early, over))
    assert trace(r, "in") == minutes(expected)
    # The events leave with the application time decided, in arrival order; the payload keeps
    # its event-time field.
    events = [e for e in r.ingress["in"] if not e.is_cti]
    kept = [(i, s) for i, (_, s, _) in enumerate(expected) if s is not None]
    assert [e.start for e in events] == [seed.ticks(s) for _, s in kept]
    assert [e.payload["event_time"] for e in events] == [
        seed.payload(i)["event_time"] for i, _ in kept
    ]
    if over is None:
        # The watermark is the input's CTI, emitted when it rises.
        rises = sorted({w for _, _, w in expected})
        assert ctis(r, "in") == [seed.ticks(w) for w in rises]
    else:
        assert ctis(r, "in") == [seed.ticks(c) for c in seed.SUBSTREAM_INPUT_CTI]


def test_the_seeds_substreams_adjust_fewer_events_and_count_per_device():
    shared = seed_run(seed.settings(True, None)).counts["in"]
    per_device = seed_run(seed.settings(True, "device_id")).counts["in"]
    assert shared["adjusted_by_reason"] == {"cti-violation": 0, "late": 1, "out-of-order": 2}
    assert per_device["adjusted_by_reason"] == {"cti-violation": 0, "late": 1, "out-of-order": 0}
    assert shared["dropped_by_reason"]["early"] == per_device["dropped_by_reason"]["early"] == 1
    keys = per_device["keys"]
    assert {k: v["events_in"] for k, v in keys.items()} == {
        "device1": 3,
        "device2": 5,
        "device3": 4,
    }
    assert {k: v["watermark"] for k, v in keys.items()} == {
        "device1": seed.ticks(17),
        "device2": seed.ticks(21),
        "device3": seed.ticks(19),
    }
    assert keys["device1"]["dropped_by_reason"]["early"] == 1
    assert keys["device3"]["adjusted_by_reason"]["late"] == 1


# -- one rule each -------------------------------------------------------------------------------
def test_early_events_are_dropped_and_do_not_raise_the_watermark():
    # early window 5: t=20 at arrival 10 is 10 ahead -> dropped; t=15 at 10 is 5 ahead -> kept.
    s = EventScript()
    s.insert("a", point(0, {"t": 20, "k": 1}), arrival=10)
    s.insert("a", point(0, {"t": 15, "k": 2}), arrival=10)
    r = run(s, ordered(early_arrival_window=TICK * 5, late_arrival_tolerance=TICK * 100))
    assert trace(r) == [("drop:early", None, None), ("ok", 15, 15)]
    assert r.counts["a"]["dropped_by_reason"]["early"] == 1
    assert r.counts["a"]["events_in"] == 2 and r.counts["a"]["dropped"] == 1


def test_late_events_adjust_to_arrival_minus_tolerance_or_drop():
    # late 3: t=2 at arrival 10 is 8 behind -> 7 (ADJUST) or dropped (DROP); t=7 at 10 is 3
    # behind: not late. Max seen takes the dropped event's 2 too (it was not early).
    s = EventScript()
    s.insert("a", point(0, {"t": 2, "k": 1}), arrival=10)
    s.insert("a", point(0, {"t": 7, "k": 2}), arrival=10)
    adjust = run(s, ordered(late_arrival_tolerance=TICK * 3))
    assert trace(adjust) == [("adjust:late", 7, 2), ("ok", 7, 7)]
    drop = run(s, ordered(late_arrival_tolerance=TICK * 3, action=DROP))
    assert trace(drop) == [("drop:late", None, 2), ("ok", 7, 7)]
    assert ctis(drop) == [2, 7]
    assert drop.counts["a"]["dropped_by_reason"]["late"] == 1
    assert adjust.counts["a"]["adjusted_by_reason"]["late"] == 1


def test_out_of_order_events_adjust_to_the_watermark_or_drop():
    # tolerance 2: 10 -> watermark 8; 9 is not below; 5 is below 8 -> 8 or dropped; 12 -> 10.
    s = EventScript()
    for t in (10, 9, 5, 12):
        s.insert("a", point(0, {"t": t, "k": 0}), arrival=10)
    adjust = run(s, ordered(out_of_order_tolerance=TICK * 2, late_arrival_tolerance=TICK * 100))
    assert trace(adjust) == [
        ("ok", 10, 8),
        ("ok", 9, 8),
        ("adjust:out-of-order", 8, 8),
        ("ok", 12, 10),
    ]
    assert ctis(adjust) == [8, 10]  # one CTI per rise, right after the raising event
    drop = run(
        s, ordered(out_of_order_tolerance=TICK * 2, late_arrival_tolerance=TICK * 100, action=DROP)
    )
    assert [a for a, _, _ in trace(drop)] == ["ok", "ok", "drop:out-of-order", "ok"]
    assert drop.counts["a"]["dropped_by_reason"]["out-of-order"] == 1


def test_a_late_event_can_be_moved_twice():
    # watermark 20 (t=20, tolerance 0); t=1 at arrival 16, late 4 -> 12, still below 20 -> 20.
    s = EventScript()
    s.insert("a", point(0, {"t": 20, "k": 0}), arrival=16)
    s.insert("a", point(0, {"t": 1, "k": 0}), arrival=16)
    r = run(s, ordered(late_arrival_tolerance=TICK * 4, early_arrival_window=None))
    assert trace(r) == [("ok", 20, 20), ("adjust:late,out-of-order", 20, 20)]
    assert r.counts["a"]["adjusted_by_reason"] == {
        "cti-violation": 0,
        "late": 1,
        "out-of-order": 1,
    }
    assert r.counts["a"]["adjusted"] == 2  # adjustments: one event moved by two rules


def test_without_an_event_time_field_arrival_time_is_the_application_time():
    # The tolerances are disregarded: the watermark is the largest arrival.
    s = EventScript()
    s.insert("a", point(999, {"t": 1, "k": 0}), arrival=3)
    s.insert("a", point(999, {"t": 1, "k": 0}), arrival=3)
    s.insert("a", point(999, {"t": 1, "k": 0}), arrival=8)
    r = run(
        s,
        ordered(event_time=None, out_of_order_tolerance=TICK * 5, late_arrival_tolerance=TICK * 0),
    )
    assert trace(r) == [("ok", 3, 3), ("ok", 3, 3), ("ok", 8, 8)]
    assert r.output == [
        cti(3),
        point(3, {"t": 1, "k": 0}),
        point(3, {"t": 1, "k": 0}),
        cti(8),
    ]


def test_an_event_without_an_event_time_is_dropped():
    s = EventScript()
    s.insert("a", point(0, {"t": None, "k": 0}), arrival=3)
    s.insert("a", point(0, {"t": 3, "k": 0}), arrival=3)
    r = run(s, ordered())
    assert trace(r) == [("drop:no-event-time", None, None), ("ok", 3, 3)]
    assert r.counts["a"]["dropped_by_reason"]["no-event-time"] == 1


def test_the_input_cti_is_the_minimum_over_partitions_and_flush_on_stop_ends_it():
    s = EventScript()
    s.insert("a", point(0, {"t": 10, "k": 0}), arrival=10, partition="p")
    s.insert("a", point(0, {"t": 6, "k": 0}), arrival=10, partition="q")
    s.insert("a", point(0, {"t": 12, "k": 0}), arrival=12, partition="q")
    r = run(s, ordered(flush_on_stop=True))
    # p: 10; q: 6 -> input 6; q: 12 -> input min(10, 12) = 10; stop: +inf.
    assert ctis(r) == [6, 10, MAX_TIME]
    assert r.counts["a"]["ctis_generated"] == 3 + 2  # three watermark rises, two flushes


def test_explicit_ctis_still_apply_and_count_as_cti_violations():
    # The explicit CTI 20 is above the watermark 10: the point at 15 breaks it. Without advance
    # time settings the policy is the ordering action: ADJUST (StreamInsight's rule) drops a
    # violating point.
    s = EventScript()
    s.insert("a", point(0, {"t": 10, "k": 0}), arrival=10)
    s.cti("a", 20, arrival=10)
    s.insert("a", point(0, {"t": 15, "k": 0}), arrival=14)
    r = run(s, ordered())
    assert trace(r)[1] == ("ok", 15, 15)
    assert r.counts["a"]["dropped_by_reason"]["cti-violation"] == 1
    assert [e for e in r.ingress["a"] if not e.is_cti] == [point(10, {"t": 10, "k": 0})]


def test_substream_watermarks_are_per_key_and_the_input_cti_follows_arrival():
    s = EventScript()
    s.insert("a", point(0, {"t": 100, "k": 1}), arrival=100)
    s.insert("a", point(0, {"t": 50, "k": 2}), arrival=101)  # key 2 far behind, late 60: fine
    s.insert("a", point(0, {"t": 49, "k": 2}), arrival=101)  # below key 2's watermark 50
    r = run(s, ordered(over="k", late_arrival_tolerance=TICK * 60))
    assert trace(r) == [("ok", 100, 100), ("ok", 50, 50), ("adjust:out-of-order", 50, 50)]
    assert ctis(r) == [40, 41]  # arrival - 60 at each later arrival
    assert r.counts["a"]["keys"][2]["watermark"] == 50


def test_ordering_with_generation_settings_is_refused():
    s = EventScript()
    s.insert("a", point(0, {"t": 1, "k": 0}))
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1))
    with pytest.raises(QueryBuildError, match="ordering and generation"):
        run(s, ordered(), settings)


def test_an_ordered_input_can_import_ctis_and_be_imported():
    # b imports a's watermark CTIs; a is ordered.
    s = EventScript()
    s.insert("a", point(0, {"t": 5, "k": 0}), arrival=5)
    s.insert("b", point(7, {"t": 0, "k": 0}), arrival=6)
    r = run_reference(
        s,
        [
            Binding("a", None, ("t", "k"), ordered()),
            Binding("b", AdvanceTimeSettings(None, AdvanceTimeImportSettings("a")), ("t", "k")),
        ],
        Union((Input("a"), Input("b"))),
        POINT,
    )
    assert ctis(r, "b") == [5]
    assert r.counts["b"]["ctis_imported"] == 1
