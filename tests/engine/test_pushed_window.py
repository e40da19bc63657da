"""A window that alone reads an input gets its partial aggregates from the input's scan
(engine.operators.window.PushedWindow): the same results as the window computing them in Spark,
which the differential tests check against the reference interpreter."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, date, datetime

import pandas as pd
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
    EventKind,
    EventShape,
    cti,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import DoubleType

from tests.engine.test_differential import EXPLICIT

_names = itertools.count()
SCHEMA = "k bigint, v bigint, s string, x double"


def _input(script, shape=EventShape.POINT, settings=EXPLICIT, schema=SCHEMA) -> Stream:
    config = MemoryInputConfig(script=script, schema=schema)
    return Stream.create("a", MemoryInputFactory(), config, shape, settings)


def _query(app, stream: Stream):
    sink = f"pushed{next(_names)}"
    query = stream.to_query(
        app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
    )
    return query, sink


def _run(app, stream: Stream, epochs, trace: bool = False):
    query, sink = _query(app, stream)
    try:
        query.run(epochs=epochs, trace=trace)
        pushed = any(s.pushed is not None for s in query._runtime.physical.scans)
        return MemoryOutputFactory.collected(sink), pushed, query.metrics()["a"]
    finally:
        app.queries.pop(sink, None)


def test_a_tumbling_window_aggregated_in_the_scan_gives_the_hand_checked_results(app):
    # two partitions (their partial aggregates meet in Spark), a null argument, a late event
    # dropped, strings and integers
    script = EventScript()
    rows = [
        ("p0", 1, 1, 5, "b"),
        ("p1", 2, 1, 7, "a"),
        ("p0", 3, 2, None, "c"),
        ("p1", 12, 1, 1, "z"),
        ("p0", 14, 2, 4, "d"),
    ]
    for part, t, k, v, s in rows:
        script.insert("a", point(t, {"k": k, "v": v, "s": s, "x": 0.5}), partition=part)
        if t == 3:
            script.cti("a", 3, partition="p0").cti("a", 3, partition="p1")
    script.insert("a", point(2, {"k": 1, "v": 100, "s": "!", "x": 0.5}), partition="p1")
    script.cti("a", 30, partition="p0").cti("a", 30, partition="p1")
    settings = AdvanceTimeSettings(EXPLICIT.generation, policy=AdvanceTimePolicy.DROP)
    out = (
        _input(script, settings=settings)
        .tumbling_window(TICK * 10)
        .group_by("k")
        .aggregate(
            n=F.count("*"),
            nv=F.count("v"),
            sv=F.sum("v"),
            av=F.avg("v"),
            lo=F.min("s"),
            hi=F.max("v"),
        )
    )
    got, pushed, _ = _run(app, out, [5])
    assert pushed
    assert sorted(
        (
            e.start,
            e.end,
            e.payload["k"],
            *(e.payload[c] for c in ["n", "nv", "sv", "av", "lo", "hi"]),
        )
        for e in got
        if e.kind is EventKind.INSERT
    ) == [
        (0, 10, 1, 2, 2, 12, 6.0, "a", 7),
        (0, 10, 2, 1, 0, None, None, "c", None),
        (10, 20, 1, 1, 1, 1, 1.0, "z", 1),
        (10, 20, 2, 1, 1, 4, 4.0, "d", 4),
    ]


WIDE = "k bigint, v bigint, s string, x double, b bigint, t timestamp, d date"


@pytest.mark.parametrize(
    ("policy", "shape", "grid"),
    [
        (AdvanceTimePolicy.DROP, EventShape.POINT, (10, 4)),
        (AdvanceTimePolicy.ADJUST, EventShape.POINT, (10, 10)),
        (AdvanceTimePolicy.DROP, EventShape.POINT, (4, 6)),  # gapped: hop > size
        # an interval may end at +inf, counted only as windows complete: not in the scan
        (AdvanceTimePolicy.ADJUST, EventShape.INTERVAL, (10, 4)),
    ],
)
def test_partial_aggregates_from_the_scan_equal_those_computed_in_spark(app, policy, shape, grid):
    rng = random.Random(7)
    script = EventScript()
    for i in range(80):
        t = i * 3 + rng.randint(-24, 2) - 50  # negative times too
        v = None if i % 11 == 0 else i - 30
        payload = {
            "k": i % 3 if i % 13 else None,
            "v": v,
            "s": f"s{i % 5}",
            "x": 1.0,
            "b": 2**53 + 2 * i + 1,  # doubles cannot hold these: avg rounds them as Spark does
            "t": datetime(2026, 1, 1 + i % 7, tzinfo=UTC),
            "d": date(2026, 2, 1 + i % 9),
        }
        event = (
            point(t, payload)
            if shape is EventShape.POINT
            else interval(t, t + rng.randint(1, 25), payload)
        )
        script.insert("a", event, partition=f"p{i % 2}")
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(2, TICK), policy=policy)
    aggregates = {
        "n": F.count("*"),
        "c": F.count("v"),
        "sv": F.sum("v"),
        "av": F.mean("v"),
        "lo": F.min("V"),  # resolved as Spark resolves it: case-insensitively
        "hi": F.max("s"),
        "sx": F.sum("x"),
        "ab": F.avg("b"),
        "sb": F.sum("b"),
        "ft": F.min("t"),
        "ld": F.max("d"),
    }

    def build():
        windows = _input(script, shape, settings, WIDE).hopping_window(*(TICK * n for n in grid))
        return windows.group_by("k").aggregate(**aggregates)

    in_scan, pushed, metrics = _run(app, build(), [25, 50, 70])
    in_spark, _, _ = _run(app, build(), [25, 50, 70], trace=True)  # a traced run is not pushed
    assert pushed == (shape is EventShape.POINT) and in_scan
    # points that break a CTI are dropped under ADJUST too: their end is not after it
    adjusting = policy is AdvanceTimePolicy.ADJUST and shape is EventShape.INTERVAL
    assert metrics["adjusted" if adjusting else "dropped"] >= 5
    assert in_scan == in_spark


@pandas_udf(DoubleType())
def _median(v: pd.Series) -> float:
    return float(v.median())


@pytest.mark.parametrize(
    ("case", "pushed"),
    [
        ("count", True),
        ("edges", False),
        ("read twice", False),
        ("max of double", False),
        ("expression", False),
        ("pandas UDAF", False),
        ("double key", False),
        ("after a filter", False),
        ("min of a collated string", False),  # Spark orders it by its collation, Arrow by bytes
    ],
)
def test_which_windows_are_aggregated_in_the_scan(app, case, pushed):
    script = EventScript()
    payload = {"k": 1, "v": 2, "s": "a", "x": 0.5}
    shape = EventShape.EDGE if case == "edges" else EventShape.POINT
    script.insert("a", edge_start(1, payload) if case == "edges" else point(1, payload))
    script.cti("a", 20)
    collated = "k bigint, v bigint, s string collate UTF8_LCASE, x double"
    s = _input(script, shape, schema=collated if "collated" in case else SCHEMA)
    window = s.tumbling_window(TICK * 10)
    by_k = window.group_by("x" if case == "double key" else "k")
    aggregate = {
        "max of double": F.max("x"),
        "expression": F.sum(F.col("v") + 1),
        "pandas UDAF": _median("x"),
        "min of a collated string": F.min("s"),
    }.get(case, F.count("*"))
    out = by_k.aggregate(a=aggregate)
    if case == "read twice":
        again = s.alter_event_duration(TICK * 10).select("k", F.lit(0).cast("bigint").alias("a"))
        out = out.union(again)
    if case == "after a filter":
        out = (
            s.where(F.col("v") > 0).tumbling_window(TICK * 10).group_by("k").aggregate(a=aggregate)
        )
    query, sink = _query(app, out)
    try:
        assert any(s.pushed is not None for s in query._runtime.physical.scans) is pushed
    finally:
        app.queries.pop(sink, None)


def test_an_integer_sum_that_leaves_bigint_fails_where_the_window_is_released(app):
    # (2**62 + 1) * 2 = 2**63 + 2, one more than bigint holds: the scan adds integers as
    # decimals (engine.exact), and the window's result fails as a traced run's (Spark's) does
    script = EventScript()
    for t in (1, 2):
        script.insert("a", point(t, {"k": 1, "v": 2**62 + 1, "s": "a", "x": 0.5}))
    script.cti("a", 20)
    for trace in (False, True):
        with pytest.raises(Exception) as got:
            _run(app, _input(script).tumbling_window(TICK * 10).aggregate(s=F.sum("v")), 1, trace)
        # what, where, got, expected and the fix
        for part in ("tumbling_window('10 microseconds').aggregate(s=...)", str(2**63 + 2)):
            assert part in str(got.value)
        assert "Expected sums within bigint" in str(got.value) and "Fix: " in str(got.value)


def test_windows_at_the_ends_of_the_time_range_are_counted_in_the_scan_as_in_spark(app):
    # Tumbling 10: -inf = -2**63 is 2 mod 10, so the grid window of MIN+3 is [MIN-2, MIN+8),
    # which starts below -inf and does not exist (docs/decisions.md, "Windows"): not counted.
    # MIN+8 is in the first window [MIN+8, MIN+18); CTI 20 completes it, output CTI 20 (the
    # earliest open window starts at 20). With and without tracing (the traced run computes
    # the windows in Spark SQL, the untraced one in the scan).
    low = -(2**63)
    script = EventScript()
    script.insert("a", point(low + 3, {"k": 1, "v": 2, "s": "a", "x": 0.5}))
    script.insert("a", point(low + 8, {"k": 1, "v": 2, "s": "a", "x": 0.5}))
    script.cti("a", 20)
    expected = [interval(low + 8, low + 18, {"n": 1}), cti(20), cti(2**63 - 1)]
    for trace in (False, True):
        out, pushed, _ = _run(
            app, _input(script).tumbling_window(TICK * 10).aggregate(n=F.count("*")), 1, trace
        )
        assert pushed
        assert out == expected, f"trace={trace}"
