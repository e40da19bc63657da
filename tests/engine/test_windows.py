"""Tumbling and hopping windows on Spark (semantics §5): results, the CTI pulled back to the
earliest open window, both output policies, and state bounded by the open windows."""

from __future__ import annotations

import pandas as pd
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventShape,
    WindowOutput,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf

from tests.harness import In, spark_run

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))  # CTI at each start
INF = cti(MAX_TIME)


def _points() -> EventScript:
    script = EventScript()
    for t, k in ((1, "a"), (5, "b"), (12, "a"), (14, "a"), (25, "b")):
        script.insert("a", point(t, {"k": k, "v": t}))
    return script


def run_cut(app, script, build, shape=EventShape.INTERVAL, in_shape=EventShape.POINT):
    inputs = {"a": In(in_shape, EVERY)}
    whole, _ = spark_run(app, script, inputs, lambda s: build(s["a"]), shape, 1)
    cut, _ = spark_run(app, script, inputs, lambda s: build(s["a"]), shape, [2, 4])
    assert cut == whole
    return whole


def test_a_tumbling_count_per_key_is_released_when_its_window_completes(app):
    out = run_cut(
        app,
        _points(),
        lambda s: s.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*")),
    )
    # Input CTIs 1, 5, 12, 14, 25, +inf pull back to the start of the earliest open window:
    # 0, 0, 10, 10, 20, +inf. [0, 10) completes at CTI 12, [10, 20) at 25, [20, 30) at +inf.
    assert out == [
        cti(0),
        interval(0, 10, {"k": "a", "n": 1}),
        interval(0, 10, {"k": "b", "n": 1}),
        cti(10),
        interval(10, 20, {"k": "a", "n": 2}),
        cti(20),
        interval(20, 30, {"k": "b", "n": 1}),
        INF,
    ]


def test_a_cti_equal_to_a_window_end_completes_that_window(app):
    script = EventScript()
    for t, k in ((1, "a"), (5, "b"), (10, "a"), (20, "b")):
        script.insert("a", point(t, {"k": k, "v": t}))
    out = run_cut(
        app, script, lambda s: s.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*"))
    )
    # CTIs 1, 5, 10, 20, +inf pull back to 0, 0, 10, 20, +inf. The CTI at 10 reaches the end of
    # [0, 10), so that window's results come out with it, before it, not with the CTI at 20.
    assert out == [
        cti(0),
        interval(0, 10, {"k": "a", "n": 1}),
        interval(0, 10, {"k": "b", "n": 1}),
        cti(10),
        interval(10, 20, {"k": "a", "n": 1}),
        cti(20),
        interval(20, 30, {"k": "b", "n": 1}),
        INF,
    ]


def test_point_at_window_end_moves_results_and_ctis_to_window_ends(app):
    out = run_cut(
        app,
        _points(),
        lambda s: s.tumbling_window(TICK * 10, output=WindowOutput.POINT_AT_END).aggregate(
            s=F.sum("v")
        ),
        shape=EventShape.POINT,
    )
    assert out == [
        cti(10),
        point(10, {"s": 6}),
        cti(20),
        point(20, {"s": 26}),
        cti(30),
        point(30, {"s": 25}),
        INF,
    ]


def test_a_hopping_window_counts_an_event_in_every_window_it_overlaps(app):
    script = EventScript()
    script.insert("a", interval(3, 9, {"v": 1}))  # overlaps [0, 6), [3, 9), [6, 12)
    script.insert("a", point(7, {"v": 2}))  # in [3, 9), [6, 12)
    out = run_cut(
        app,
        script,
        lambda s: s.hopping_window(TICK * 6, TICK * 3).aggregate(n=F.count("*"), s=F.sum("v")),
        in_shape=EventShape.INTERVAL,
    )
    assert [e for e in out if not e.is_cti] == [
        interval(0, 6, {"n": 1, "s": 1}),
        interval(3, 9, {"n": 2, "s": 3}),
        interval(6, 12, {"n": 2, "s": 3}),
    ]
    # CTI 3 -> earliest open window [0, 6): 0; CTI 7 -> [3, 9): 3.
    assert [e.start for e in out if e.is_cti] == [0, 3, MAX_TIME]


def test_an_open_edge_counts_in_every_window_until_its_end_edge(app):
    script = EventScript()
    script.insert("a", edge_start(2, {"v": 1}))  # -> CTI 2
    script.insert("a", edge_start(25, {"v": 5}))  # -> CTI 25: [0,10), [10,20) complete
    script.insert("a", edge_end(2, 27, {"v": 1}))  # the first edge lived [2, 27)
    out = run_cut(
        app,
        script,
        lambda s: s.tumbling_window(TICK * 10).aggregate(s=F.sum("v")),
        in_shape=EventShape.EDGE,
    )
    assert [e for e in out if not e.is_cti] == [
        interval(0, 10, {"s": 1}),
        interval(10, 20, {"s": 1}),
        interval(20, 30, {"s": 6}),  # at +inf: windows up to the latest time seen (26)
    ]


def _state_after(app, name: str, aggregate) -> tuple[dict, list]:
    """Points 0, 2, .., 98 (v = t), a CTI at each, tumbling windows of 10, in 5 epochs without
    the flush: the window operator's state after the run, and the results."""
    script = EventScript()
    for t in range(0, 100, 2):
        script.insert("a", point(t, {"k": t % 4, "v": t}))
    stream = Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=script),
        EventShape.POINT,
        AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, False)),
    )
    query = aggregate(stream.tumbling_window(TICK * 10).group_by("k")).to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    query.run(epochs=5)
    [window] = query.operator_metrics().values()
    shuffle = int(app.spark.conf.get("spark.sql.shuffle.partitions"))
    # in no more partitions than a shuffle makes (kept as the old state plus each epoch's rows,
    # it would gain partitions every epoch)
    assert window.pop("state_partitions") <= shuffle
    return window, [e for e in MemoryOutputFactory.collected(name) if not e.is_cti]


def test_window_state_is_one_partial_aggregate_per_open_window_and_group(app):
    # The last CTI is 98: windows up to [80, 90) are complete; [90, 100) is open, with the
    # points 90 .. 98 in groups k = 0 (92, 96) and k = 2 (90, 94, 98): two rows of partial
    # aggregates, whatever the input size.
    state, out = _state_after(
        app, "partial", lambda w: w.aggregate(n=F.count("*"), s=F.sum("v"), m=F.avg("v"))
    )
    assert state == {"state_rows": 2, "cti": "1970-01-01T00:00:00.000090+00:00", "cti_ticks": 90}
    # 9 complete windows, each with both groups: [0, 10) k=0 has 0, 4, 8; k=2 has 2, 6
    assert len(out) == 18
    assert out[0].start == 0 and out[0].payload == {"k": 0, "n": 3, "s": 12, "m": 4.0}
    assert out[1].payload == {"k": 2, "n": 2, "s": 8, "m": 4.0}


def test_window_state_is_the_events_of_open_windows_for_aggregates_that_do_not_merge(app):
    @pandas_udf("double")
    def spread(v: pd.Series) -> float:
        return float(v.max() - v.min())

    # A pandas UDAF cannot merge partial results: the operator keeps the 5 points of [90, 100).
    state, out = _state_after(app, "events", lambda w: w.aggregate(spread=spread(F.col("v"))))
    assert state == {"state_rows": 5, "cti": "1970-01-01T00:00:00.000090+00:00", "cti_ticks": 90}
    assert len(out) == 18
    assert [e.payload["spread"] for e in out[:2]] == [8.0, 4.0]


def test_partial_aggregates_merge_over_epochs_with_edges_and_intervals(app):
    """Hopping windows of 10 every 5 over edges, one of them open while windows complete and
    closed epochs later: min, max, avg, sum and count kept as partial aggregates equal the
    hand-computed results for every cut."""
    script = EventScript()
    script.insert("a", edge_start(1, {"v": 4}))  # open until the end: [1, 17)
    script.insert("a", edge_start(3, {"v": 10}))
    script.cti("a", 6)
    script.insert("a", edge_start(8, {"v": 1}))
    script.insert("a", edge_end(8, 9, {"v": 1}))
    script.insert("a", edge_end(3, 12, {"v": 10}))
    script.cti("a", 14)
    script.insert("a", edge_end(1, 17, {"v": 4}))
    script.insert("a", edge_start(18, {"v": 7}))
    script.insert("a", edge_end(18, 19, {"v": 7}))
    script.cti("a", 30)
    explicit = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
    inputs = {"a": In(EventShape.EDGE, explicit)}

    def build(s):
        return (
            s["a"]
            .hopping_window(TICK * 10, TICK * 5)
            .aggregate(lo=F.min("v"), hi=F.max("v"), m=F.mean("v"), s=F.sum("v"), n=F.count("v"))
        )

    # Windows [-5, 5): [1, 17) (4), [3, 12) (10); [0, 10): both and [8, 9) (1); [5, 15): the
    # same; [10, 20): [1, 17), [3, 12), [18, 19) (7); [15, 25): [1, 17), [18, 19). CTI 6
    # completes [-5, 5) (pulled back to 0, the earliest open window), 14 completes [0, 10)
    # (pulled to 5), 30 the rest (pulled to 25); the flush at the stop adds +inf.
    def w(ws, vs):
        return interval(
            ws,
            ws + 10,
            {"lo": min(vs), "hi": max(vs), "m": sum(vs) / len(vs), "s": sum(vs), "n": len(vs)},
        )

    expected = [
        w(-5, [4, 10]),
        cti(0),
        w(0, [4, 10, 1]),
        cti(5),
        w(5, [4, 10, 1]),
        w(10, [4, 10, 7]),
        w(15, [4, 7]),
        cti(25),
        INF,
    ]
    for cuts in (1, [2], [3, 5], [1, 2, 4, 6, 8, 9]):
        out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, cuts)
        assert out == expected, f"cuts={cuts}"


def test_a_pandas_udaf_is_a_window_aggregate_like_any_other(app):
    @pandas_udf("double")
    def spread(v: pd.Series) -> float:
        return float(v.max() - v.min())

    out = run_cut(
        app, _points(), lambda s: s.tumbling_window(TICK * 10).aggregate(spread=spread(F.col("v")))
    )
    # [0, 10): 1 and 5; [10, 20): 12 and 14; [20, 30): 25.
    assert [e.payload["spread"] for e in out if not e.is_cti] == [4.0, 2.0, 0.0]


def test_snapshot_windows_aggregate_between_consecutive_endpoints(app):
    script = EventScript()
    script.insert("a", interval(0, 10, {"v": 1}))
    script.insert("a", interval(5, 15, {"v": 2}))
    script.cti("a", 20)
    explicit = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
    inputs = {"a": In(EventShape.INTERVAL, explicit)}
    build = lambda s: s["a"].snapshot_window().aggregate(n=F.count("*"), s=F.sum("v"))  # noqa: E731
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, [1, 2])
    # Endpoints 0, 5, 10, 15; at CTI 20 every snapshot is final; no event's lifetime holds 20,
    # so the output CTI is 20 itself (§5: an empty stretch holds nothing back).
    assert out == [
        interval(0, 5, {"n": 1, "s": 1}),
        interval(5, 10, {"n": 2, "s": 3}),
        interval(10, 15, {"n": 1, "s": 2}),
        cti(20),
        INF,
    ]
