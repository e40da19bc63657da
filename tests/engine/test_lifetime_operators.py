"""Lifetime operators move events and CTIs together (semantics §5), on Spark, in 1 and 3 epochs."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from adapters.memory import EventScript, MemoryInputConfig, MemoryInputFactory
from bindings import Stream
from engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from tests.harness import In, spark_run

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, 0, True))


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
    out = run_cut(app, _intervals(), lambda s: s.shift_event_time(-5))
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
    out = run_cut(app, _intervals(), lambda s: s.alter_event_duration(2))
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
    snap = lambda s: s.alter_event_lifetime(lambda t: t - F.pmod(t, F.lit(10)), 5)  # noqa: E731
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
        app, script, lambda s: s.shift_event_time(100), EventShape.EDGE, EventShape.EDGE
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
        app, script, lambda s: s.alter_event_duration(3), EventShape.INTERVAL, EventShape.EDGE
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
        stream.alter_event_duration(0)
    with pytest.raises(TypeError, match="start_fn"):
        stream.alter_event_lifetime(5, 1)
