"""The CTI rules that cross operators (engine.ctis, engine.edges, the window grid of
engine.operators.window.WindowSpec) agree in their two forms: Python over the driver's values
(also what the Arrow and pandas functions on executors run) and the Spark form each epoch's plan
uses. Each case is worked by hand in its comments, at the ends of the timeline (±inf are
MIN_TIME / MAX_TIME), with equal values and with nothing to work on."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ctistream.engine.ctis import (
    first_at_or_above,
    first_at_or_above_rows,
    min_of_latest,
    min_of_latest_on_driver,
    risen,
    rising,
    rising_rows,
)
from ctistream.engine.edges import fifo_pairs, fifo_ranked
from ctistream.engine.operators.window import WindowSpec
from ctistream.engine.rows import CTI, POS, POS_TYPE, local_ctis
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

INF, NEG = MAX_TIME, MIN_TIME


def at(i: int) -> tuple:
    """The arrival position number ``i`` (arrival i, first input, offset i)."""
    return (i, 0, i, 0, 0)


def spark_pairs(df) -> list[tuple]:
    return [(tuple(r[POS]), r[CTI]) for r in df.orderBy(POS).collect()]


# -- emit when it rises (semantics §5: "An output CTI is emitted only when it increases") --------


def test_risen_is_the_cti_only_when_it_rises():
    assert risen(6, 5) == 6
    assert risen(5, 5) == NEG  # equal: nothing
    assert risen(4, 5) == NEG
    assert risen(INF, NEG) == INF
    assert risen(NEG, NEG) == NEG  # -inf never rises


# CTIs in position order; each is emitted when above the one emitted before the epoch and above
# every earlier one of the epoch.
CTIS = [(at(1), NEG), (at(2), 5), (at(3), 5), (at(4), 3), (at(5), 7), (at(6), INF)]


@pytest.mark.parametrize(
    ("emitted", "expected"),
    [
        # -inf is not above -inf; 5 rises; the second 5 and 3 do not; 7 and +inf rise
        (NEG, [(at(2), 5), (at(5), 7), (at(6), INF)]),
        # 5 was emitted: equal is not a rise
        (5, [(at(5), 7), (at(6), INF)]),
        # after +inf nothing rises
        (INF, []),
    ],
)
def test_rising_on_the_driver_and_in_spark_agree(spark, emitted, expected):
    assert rising(CTIS, emitted) == expected
    assert spark_pairs(rising_rows(local_ctis(spark, CTIS), emitted)) == expected


def test_rising_of_no_ctis_is_none(spark):
    assert rising([], NEG) == []
    assert spark_pairs(rising_rows(local_ctis(spark, []), NEG)) == []


# -- min of latest (semantics §3.5, §5) ------------------------------------------------------------

# (position, group, CTI) of two groups, each rising; both start at -inf.
MERGED = [
    (at(1), 0, 5),  # latest [5, -inf]: min -inf, nothing
    (at(2), 1, 3),  # [5, 3]: 3 rises
    (at(3), 1, 6),  # [5, 6]: 5 rises
    (at(4), 0, 7),  # [7, 6] would be 6, but group 1 rises at the same position ...
    (at(4), 1, 8),  # ... so only [7, 8]: 7
    (at(5), 1, INF),  # [7, +inf]: 7, no rise
    (at(6), 0, INF),  # [+inf, +inf]: +inf
]


@pytest.mark.parametrize(
    ("emitted", "expected"),
    [
        (NEG, [(at(2), 3), (at(3), 5), (at(4), 7), (at(6), INF)]),
        (5, [(at(4), 7), (at(6), INF)]),  # 5 already emitted: 3 and 5 are not rises
        (INF, []),
    ],
)
def test_min_of_latest_on_the_driver_and_in_spark_agree(spark, emitted, expected):
    schema = StructType(
        [
            StructField(POS, POS_TYPE, False),
            StructField("__g", IntegerType(), False),
            StructField(CTI, LongType(), False),
        ]
    )
    rows = spark.createDataFrame(MERGED, schema)
    assert min_of_latest_on_driver(MERGED, [NEG, NEG], emitted) == expected
    assert spark_pairs(min_of_latest(rows, "__g", [NEG, NEG], emitted)) == expected


def test_min_of_latest_of_one_source_and_of_nothing(spark):
    schema = StructType(
        [
            StructField(POS, POS_TYPE, False),
            StructField("__g", IntegerType(), False),
            StructField(CTI, LongType(), False),
        ]
    )
    one = [(at(1), 0, 4), (at(2), 0, 6)]
    # one source at 3, 5 emitted: 4 is below what was emitted, 6 rises
    assert min_of_latest_on_driver(one, [3], 5) == [(at(2), 6)]
    assert spark_pairs(min_of_latest(spark.createDataFrame(one, schema), "__g", [3], 5)) == [
        (at(2), 6)
    ]
    empty = spark.createDataFrame([], schema)
    assert min_of_latest_on_driver([], [NEG, 5], NEG) == []
    assert spark_pairs(min_of_latest(empty, "__g", [NEG, 5], NEG)) == []


# -- the first CTI at or above a time (semantics §2) -----------------------------------------------

TIMES = [NEG, NEG + 1, 4, 5, 6, 10, 11, INF - 1, INF]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # CTIs -inf, 5, 10, +inf: -inf is at or above -inf; 5 for (-inf, 5]; 10 for (5, 10];
        # +inf for the rest, +inf itself included
        ([NEG, 5, 10, INF], [0, 1, 1, 1, 2, 2, 3, 3, 3]),
        # without +inf, a time above 10 has none (the index past the end)
        ([5, 10], [0, 0, 0, 0, 1, 1, 2, 2, 2]),
        ([], [0] * len(TIMES)),  # no CTI: none
    ],
)
def test_first_at_or_above_on_the_driver_and_in_spark_agree(spark, values, expected):
    found = first_at_or_above(np.array(values, dtype=np.int64), np.array(TIMES, dtype=np.int64))
    assert found.tolist() == expected
    assert [first_at_or_above(values, t) for t in TIMES] == expected  # a list and one int
    ctis = local_ctis(spark, [(at(10 + i), v) for i, v in enumerate(values)])
    rows = spark.createDataFrame([(i, t) for i, t in enumerate(TIMES)], "i int, __t long")
    placed = first_at_or_above_rows(rows, ctis, None, "__cpos").orderBy("i").collect()
    want = [at(10 + j) if j < len(values) else None for j in expected]
    assert [r["__cpos"] and tuple(r["__cpos"]) for r in placed] == want


def test_first_at_or_above_per_key_in_spark(spark):
    # keyed CTIs: "a" at 5 then 10, "b" at 7; a row looks only at its key's CTIs
    schema = StructType(
        [
            StructField("k", IntegerType()),
            StructField(CTI, LongType()),
            StructField(POS, POS_TYPE),
        ]
    )
    keyed = spark.createDataFrame([(1, 5, at(1)), (1, 10, at(2)), (2, 7, at(3))], schema)
    rows = spark.createDataFrame(
        [(0, 1, 6), (1, 2, 6), (2, 2, 8), (3, 1, 5)], "i int, k int, __t long"
    )
    placed = first_at_or_above_rows(rows, keyed, "k", "__kpos").orderBy("i").collect()
    # key 1 at 6: 10; key 2 at 6: 7; key 2 at 8: none; key 1 at 5: 5 (equal counts)
    assert [r["__kpos"] and tuple(r["__kpos"]) for r in placed] == [at(2), at(3), None, at(1)]


# -- FIFO END-edge matching (semantics §1, §3.4) ---------------------------------------------------

# (name, start, payload, position): START edges, then END edges, given out of order. A payload
# of null matches null and NaN matches NaN (Spark's null-safe equality, engine.rows.same_value).
OPENS = [
    ("B", 5, 1.0, 2),
    ("A", 5, 1.0, 1),
    ("C", 5, None, 3),
    ("D", 5, math.nan, 4),
    ("E", 6, 1.0, 5),
]
ENDS = [
    ("x", 5, 1.0, 6),
    ("v", 5, 1.0, 10),
    ("y", 5, None, 7),
    ("z", 5, 1.0, 8),
    ("w", 5, math.nan, 9),
    ("u", 7, 1.0, 11),
]
# (5, 1.0): x, z, v by position close A, B (by position), then none; (5, null): y closes C;
# (5, NaN): w closes D; (7, 1.0): u closes none; E stays open
PAIRS = {("A", "x"), ("B", "z"), (None, "v"), ("C", "y"), ("D", "w"), (None, "u")}


def test_fifo_pairs_on_the_driver():
    pairs = fifo_pairs(
        [((s, p), pos, name) for name, s, p, pos in OPENS],
        [((s, p), pos, name) for name, s, p, pos in ENDS],
    )
    # key by key in the order of each key's first END edge, then by position
    assert pairs == [("A", "x"), ("B", "z"), (None, "v"), ("C", "y"), ("D", "w"), (None, "u")]


def test_fifo_ranked_in_spark_agrees(spark):
    schema = "name string, s long, p double, pos long"
    opens = spark.createDataFrame(OPENS, schema)
    ends = spark.createDataFrame(ENDS, schema)
    o, e, on = fifo_ranked(opens, ends, ["s", "p"], "pos", "pos")
    got = {
        (r["o"], r["e"])
        for r in e.join(o, on, "left")
        .select(F.col("o.name").alias("o"), F.col("e.name").alias("e"))
        .collect()
    }
    assert got == PAIRS


def test_fifo_ranked_only_ranks_the_open_rows(spark):
    # a closed event (open false) with the same start and payload is no START edge to close
    schema = "name string, s long, p double, pos long, open boolean"
    events = spark.createDataFrame([("K", 5, 1.0, 1, False), ("A", 5, 1.0, 2, True)], schema)
    ends = spark.createDataFrame([("x", 5, 1.0, 3)], "name string, s long, p double, pos long")
    o, e, on = fifo_ranked(events, ends, ["s", "p"], "pos", "pos", only="open")
    got = {
        (r["o"], r["e"])
        for r in o.join(e, on, "left")
        .select(F.col("o.name").alias("o"), F.col("e.name").alias("e"))
        .collect()
    }
    assert got == {("K", None), ("A", "x")}
    assert fifo_pairs([((5, 1.0), 2, "A")], [((5, 1.0), 3, "x")]) == [("A", "x")]
    assert fifo_pairs([], []) == []


# -- the window grid and pull-back (semantics §5) --------------------------------------------------

GRID_TIMES = [
    NEG,
    NEG + 1,
    -11,
    -10,
    -1,
    0,
    1,
    9,
    10,
    11,
    INF - 13,
    INF - 12,
    INF - 2,
    INF - 1,
    INF,
]
SPECS = [(10, 10), (10, 3), (1, 1), (7, 5), (3, 10)]


def test_window_grid_in_python_numpy_and_spark_agree(spark):
    specs = [WindowSpec(size, hop, (), (), end) for size, hop in SPECS for end in (False, True)]
    rows = spark.createDataFrame([(i, t) for i, t in enumerate(GRID_TIMES)], "i int, t long")
    sql = []
    for n, spec in enumerate(specs):  # one Spark job for every spec
        sql += [f"{spec.first_sql('t')} AS f{n}", f"{spec.pulled_sql('t')} AS p{n}"]
        sql += [f"{spec.last_before_sql('t')} AS l{n}"]
    got = rows.selectExpr("i", *sql).orderBy("i").collect()
    times = np.array(GRID_TIMES, dtype=np.int64)
    for n, spec in enumerate(specs):
        first = [spec.first_open(t) for t in GRID_TIMES]
        last = [int(spec.last_before(t)) for t in GRID_TIMES]
        ws, inside = spec.first_after(times)
        assert [int(w) if ok else None for w, ok in zip(ws, inside, strict=True)] == first
        assert spec.last_before(times).tolist() == last
        assert [r[f"f{n}"] for r in got] == first, spec
        assert [r[f"p{n}"] for r in got] == [spec.pulled(t) for t in GRID_TIMES], spec
        assert [r[f"l{n}"] for r in got] == last, spec


def test_window_grid_by_hand():
    spec = WindowSpec(10, 3, (), ())
    # windows [3k, 3k + 10): the earliest still open at 10 is the smallest 3k > 0, 3
    assert spec.first_open(10) == 3
    assert spec.first_open(0) == -9  # 3k > -10
    assert spec.first_open(-10) == -18  # 3k > -20
    assert spec.pulled(10) == 3
    assert WindowSpec(10, 3, (), (), point_at_end=True).pulled(10) == 13  # its end
    # ±inf stay; past the last window (ws + size < +inf) none is open: c itself
    assert spec.pulled(INF) == INF and spec.pulled(NEG) == NEG
    assert spec.first_open(INF - 1) is None and spec.pulled(INF - 1) == INF - 1
    # a window overlaps a lifetime ending at 10 when it starts at or before its last tick, 9
    assert int(spec.last_before(10)) == 9
    assert spec.first_ws == -(2**63) + 2  # the smallest multiple of 3 above -inf
