"""Tumbling and hopping windows on Spark (semantics §5): results, the CTI pulled back to the
earliest open window, both output policies, and state bounded by the open windows."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf

from adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from bindings import Stream
from engine import (
    MAX_TIME,
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
from tests.harness import In, spark_run

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, 0, True))  # CTI at each start
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
        app, _points(), lambda s: s.tumbling_window(10).group_by("k").aggregate(n=F.count("*"))
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
        app, script, lambda s: s.tumbling_window(10).group_by("k").aggregate(n=F.count("*"))
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
        lambda s: s.tumbling_window(10, output=WindowOutput.POINT_AT_END).aggregate(s=F.sum("v")),
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
        lambda s: s.hopping_window(6, 3).aggregate(n=F.count("*"), s=F.sum("v")),
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
        lambda s: s.tumbling_window(10).aggregate(s=F.sum("v")),
        in_shape=EventShape.EDGE,
    )
    assert [e for e in out if not e.is_cti] == [
        interval(0, 10, {"s": 1}),
        interval(10, 20, {"s": 1}),
        interval(20, 30, {"s": 6}),  # at +inf: windows up to the latest time seen (26)
    ]


def test_window_state_holds_only_events_of_open_windows(app):
    script = EventScript()
    for t in range(0, 100, 2):
        script.insert("a", point(t, {"v": t}))
    stream = Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=script),
        EventShape.POINT,
        AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, 0, False)),
    )
    query = (
        stream.tumbling_window(10)
        .aggregate(n=F.count("*"))
        .to_query(
            app, "state", MemoryOutputFactory(), MemoryOutputConfig(name="state"), EventShape.POINT
        )
    )
    query.run(epochs=5)
    # The last CTI is 98: windows up to [80, 90) are complete; [90, 100) is open and holds the
    # points 90..98. Without the flush nothing else is held, whatever the input size, and in no
    # more partitions than a shuffle makes (kept as the old state plus each epoch's rows, it
    # would gain partitions every epoch).
    [window] = query.operator_metrics().values()
    shuffle = int(app.spark.conf.get("spark.sql.shuffle.partitions"))
    assert window.pop("state_partitions") <= shuffle
    assert window == {"state_rows": 5, "cti": 90}
    assert len([e for e in MemoryOutputFactory.collected("state") if not e.is_cti]) == 9


def test_a_pandas_udaf_is_a_window_aggregate_like_any_other(app):
    @pandas_udf("double")
    def spread(v: pd.Series) -> float:
        return float(v.max() - v.min())

    out = run_cut(
        app, _points(), lambda s: s.tumbling_window(10).aggregate(spread=spread(F.col("v")))
    )
    # [0, 10): 1 and 5; [10, 20): 12 and 14; [20, 30): 25.
    assert [e.payload["spread"] for e in out if not e.is_cti] == [4.0, 2.0, 0.0]


def test_snapshot_windows_aggregate_between_consecutive_endpoints(app):
    script = EventScript()
    script.insert("a", interval(0, 10, {"v": 1}))
    script.insert("a", interval(5, 15, {"v": 2}))
    script.cti("a", 20)
    explicit = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, 0, True))
    inputs = {"a": In(EventShape.INTERVAL, explicit)}
    build = lambda s: s["a"].snapshot_window().aggregate(n=F.count("*"), s=F.sum("v"))  # noqa: E731
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, [1, 2])
    # Endpoints 0, 5, 10, 15; at CTI 20 every snapshot is final; the output CTI is the start of
    # the snapshot that contains 20, i.e. the last endpoint, 15.
    assert out == [
        interval(0, 5, {"n": 1, "s": 1}),
        interval(5, 10, {"n": 2, "s": 3}),
        interval(10, 15, {"n": 1, "s": 2}),
        cti(15),
        INF,
    ]
