"""Lifetime operators move events and CTIs together (semantics §5), on Spark, in 1 and 3 epochs."""

from __future__ import annotations

import pytest
from ctistream.adapters.memory import EventScript, MemoryInputConfig, MemoryInputFactory
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.harness import In, spark_run
from tests.reference import (
    AlterEventDuration,
    AlterEventLifetime,
    Binding,
    Input,
    Join,
    ToPoint,
    Union,
    Window,
    run_reference,
)

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))


def run_cut(app, script, build, shape=EventShape.INTERVAL, in_shape=EventShape.INTERVAL):
    inputs = {"a": In(in_shape, EVERY)}
    whole, _ = spark_run(app, script, inputs, lambda s: build(s["a"]), shape, 1)
    cut, _ = spark_run(app, script, inputs, lambda s: build(s["a"]), shape, [1, 2])
    assert cut == whole
    return whole


def _intervals() -> EventScript:
    script = EventScript()
    script.insert("a", interval(10, 14, {"n": 1}))  # -> CTI 10
    script.insert("a", point(17, {"n": 2}))  # -> CTI 17
    script.insert("a", interval(23, 40, {"n": 3}))  # -> CTI 23, then +inf at stop
    return script


def test_shift_event_time_moves_events_and_ctis_by_the_same_delta(app):
    out = run_cut(app, _intervals(), lambda s: s.shift_event_time(-TICK * 5))
    assert out == [
        cti(5),
        interval(5, 9, {"n": 1}),
        cti(12),
        point(12, {"n": 2}),
        cti(18),
        interval(18, 35, {"n": 3}),
        cti(2**63 - 1),
    ]


def test_alter_event_duration_and_to_point_keep_the_ctis(app):
    out = run_cut(app, _intervals(), lambda s: s.alter_event_duration(TICK * 2))
    assert out == [
        cti(10),
        interval(10, 12, {"n": 1}),
        cti(17),
        interval(17, 19, {"n": 2}),
        cti(23),
        interval(23, 25, {"n": 3}),
        cti(2**63 - 1),
    ]
    points = run_cut(app, _intervals(), lambda s: s.to_point())
    assert [e for e in points if not e.is_cti] == [
        point(t, {"n": n}) for t, n in ((10, 1), (17, 2), (23, 3))
    ]


def test_alter_event_lifetime_applies_the_start_function_to_ctis_too(app):
    # Snap starts to multiples of 10: CTIs 10, 17, 23 become 10, 10 (not emitted again), 20.
    snap = lambda s: s.alter_event_lifetime(lambda t: t - F.pmod(t, F.lit(10)), TICK * 5)  # noqa: E731
    out = run_cut(app, _intervals(), snap)
    assert out == [
        cti(10),
        interval(10, 15, {"n": 1}),
        interval(10, 15, {"n": 2}),
        cti(20),
        interval(20, 25, {"n": 3}),
        cti(2**63 - 1),
    ]


def test_a_shifted_edge_stays_an_edge_and_a_start_edge_with_a_duration_becomes_an_interval(app):
    script = EventScript()
    script.insert("a", edge_start(10, {"n": 1}))
    script.insert("a", edge_start(20, {"n": 2}))
    script.insert("a", edge_end(10, 30, {"n": 1}))
    shifted = run_cut(
        app, script, lambda s: s.shift_event_time(TICK * 100), EventShape.EDGE, EventShape.EDGE
    )
    assert shifted == [
        cti(110),
        edge_start(110, {"n": 1}),
        cti(120),
        edge_end(110, 130, {"n": 1}),
        edge_start(120, {"n": 2}),
        cti(2**63 - 1),
    ]
    sized = run_cut(
        app,
        script,
        lambda s: s.alter_event_duration(TICK * 3),
        EventShape.INTERVAL,
        EventShape.EDGE,
    )
    assert sized == [
        cti(10),
        interval(10, 13, {"n": 1}),
        cti(20),
        interval(20, 23, {"n": 2}),
        cti(2**63 - 1),
    ]


def test_durations_must_be_positive():
    config = MemoryInputConfig(script=EventScript())
    stream = Stream.create("a", MemoryInputFactory(), config, EventShape.POINT)
    with pytest.raises(ValueError, match="at least 1 tick"):
        stream.alter_event_duration(TICK * 0)
    with pytest.raises(TypeError, match="start_fn"):
        stream.alter_event_lifetime(5, TICK)


# -- empty lifetimes stay empty (semantics §3.4, docs/decisions.md "Empty lifetimes") ---------
ADJUST_EXPLICIT = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(10**6, TICK * 0, True), None, AdvanceTimePolicy.ADJUST
)


def _late_updates() -> EventScript:
    """ADJUST, explicit CTIs (a count never reached), flushed at the end. By hand: n1 is
    adjusted to [100, +inf) and its late END edge (70 < CTI 100) closes it at the CTI 100 still
    in force: [100, 100), empty. n2 is adjusted to [100, +inf) too, but its late END edge comes
    after CTI 150: [100, 150). n3 starts on time and never closes."""
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, {"n": 1}))
    script.insert("a", edge_start(60, {"n": 2}))
    script.insert("a", edge_end(50, 70, {"n": 1}))
    script.cti("a", 150)
    script.insert("a", edge_end(60, 80, {"n": 2}))
    script.insert("a", edge_start(160, {"n": 3}))
    script.cti("a", 200)
    return script


def _agree_cut(app, script, build, plan, expected, shape=EventShape.INTERVAL, cuts=(2, 4)):
    """The reference and Spark in one epoch and cut at ``cuts``: all equal to ``expected``."""
    binding = Binding("a", ADJUST_EXPLICIT, ("n",))
    assert run_reference(script, [binding], plan, shape).output == expected
    inputs = {"a": In(EventShape.EDGE, ADJUST_EXPLICIT)}
    for epochs in (1, list(cuts)):
        assert spark_run(app, script, inputs, lambda s: build(s["a"]), shape, epochs)[0] == (
            expected
        ), f"epochs={epochs}"


def test_operators_that_set_the_end_never_bring_back_an_empty_lifetime(app):
    # to_point, alter_event_duration(5) and alter_event_lifetime(+1000, 3) of _late_updates: n1
    # (empty) never leaves; n2 leaves once CTI 150 passes its start 100 (it could have been
    # closed at 100 until then), n3 once CTI 200 passes 160. The union's CTI is the smallest of
    # the three: 100, 150, 200, then +inf (the lifetime branch's CTIs are 1000 later), which
    # releases the shifted intervals.
    def build(a):
        shifted = a.alter_event_lifetime(_k, TICK * 3)
        return a.to_point().union(a.alter_event_duration(TICK * 5), shifted)

    src = Input("a")
    plan = Union((ToPoint(src), AlterEventDuration(src, 5), AlterEventLifetime(src, _k, 3)))
    n2, n3 = {"n": 2}, {"n": 3}
    expected = [
        cti(100),
        point(100, n2),
        interval(100, 105, n2),
        cti(150),
        point(160, n3),
        interval(160, 165, n3),
        cti(200),
        interval(1100, 1103, n2),
        interval(1160, 1163, n3),
        cti(MAX_TIME),
    ]
    _agree_cut(app, _late_updates(), build, plan, expected, cuts=(3, 5))


def _k(t: int) -> int:
    return t + 1000


def test_a_window_never_counts_an_empty_lifetime_made_a_point(app):
    # Tumbling windows of 50 over to_point(): [100, 150) holds n2's point at 100 only (n1's
    # lifetime is empty), complete at CTI 150; [150, 200) holds n3's point at 160, complete at
    # CTI 200. Output CTIs: the start of the earliest open window, 100, 150, 200, then +inf.
    def build(a):
        return a.to_point().tumbling_window(TICK * 50).aggregate(c=F.count("*"))

    plan = Window(ToPoint(Input("a")), 50, 50, (), (("c", len),))
    expected = [
        cti(100),
        interval(100, 150, {"c": 1}),
        cti(150),
        interval(150, 200, {"c": 1}),
        cti(200),
        cti(MAX_TIME),
    ]
    _agree_cut(app, _late_updates(), build, plan, expected, cuts=(2, 4))


def test_to_point_never_brings_back_a_join_pair_that_ends_where_it_starts(app):
    # Key 1: the left edge opens at 0, the right one at 10: a pair [10, +inf) forms; the left
    # END edge ends at 8, so the pair is [10, 8): empty. Key 2: the pair forms at 5 and the left
    # END edge ends at 12; the right edge stays open, so the pair's end is 12 once the right
    # CTI reaches 12: [5, 12), to_point: a point at 5, released at the output CTI 20.
    script = EventScript()
    script.insert("l", edge_start(0, {"k": 1, "v": 1}))
    script.insert("r", edge_start(10, {"k": 1, "w": 1}))
    script.insert("l", edge_start(0, {"k": 2, "v": 2}))
    script.insert("r", edge_start(5, {"k": 2, "w": 2}))
    script.insert("l", edge_end(0, 8, {"k": 1, "v": 1}))
    script.insert("l", edge_end(0, 12, {"k": 2, "v": 2}))
    script.cti("l", 20)
    script.cti("r", 20)
    bindings = [Binding("l", None, ("k", "v")), Binding("r", None, ("k", "w"))]
    plan = ToPoint(Join(Input("l"), Input("r"), ("k",)))
    expected = [point(5, {"k": 2, "v": 2, "right_k": 2, "w": 2}), cti(20)]
    assert run_reference(script, bindings, plan, EventShape.INTERVAL).output == expected
    inputs = {
        "l": In(EventShape.EDGE, None, "k long, v long"),
        "r": In(EventShape.EDGE, None, "k long, w long"),
    }
    build = lambda s: s["l"].join(s["r"], on="k").to_point()  # noqa: E731
    for epochs in (1, [2, 5]):
        out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
        assert out == expected, f"epochs={epochs}"
