"""Aggregates over doubles are repeatable (semantics §4): ``sum``, ``avg`` and the variance family
are computed exactly and rounded once (engine.exact, docs/decisions.md "Doubles"), so any cut of
the input into epochs gives the same bits, the reference interpreter's."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from ctistream.adapters.memory import EventScript
from ctistream.engine import (
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventKind,
    EventShape,
    QueryBuildError,
    QueryRunError,
    edge_end,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.harness import In, spark_run
from tests.reference import (
    Binding,
    Input,
    Join,
    Window,
    double_avg,
    double_stddev,
    double_sum,
    double_variance,
    run_reference,
)

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))  # a CTI at each start
SCHEMA = "k bigint, v double"


AGGREGATES = {  # (Spark Columns, made in a test: they need the session; the reference's)
    # partial aggregates, carried between epochs
    "partials": (
        lambda: {"s": F.sum("v"), "a": F.avg("v")},
        (("s", double_sum("v")), ("a", double_avg("v"))),
    ),
    # aggregates that do not merge: every value of a window summed at once
    "events": (
        lambda: {"a": F.mean("v"), "d": F.stddev("v"), "p": F.var_pop("v")},
        (("a", double_avg("v")), ("d", double_stddev("v")), ("p", double_variance("v", 0))),
    ),
}


@pytest.mark.parametrize(
    ("aggregates", "where", "shape"),
    [
        ("partials", "scan", EventShape.POINT),
        ("partials", "spark", EventShape.INTERVAL),
        ("events", "spark", EventShape.INTERVAL),
    ],
)
def test_doubles_aggregate_to_the_same_bits_in_1_4_and_9_epochs(app, aggregates, where, shape):
    # 80 events of two keys, values of magnitudes 1e-3 .. 1e3 and both signs: naive sums of a
    # window's values differ in their last bits with the order they are added in. Partial
    # aggregates are computed by the input's scan ("scan": the window reads the input) or by
    # Spark after a where ("spark"), and carried between epochs.
    rnd = random.Random(7)
    script = EventScript()
    for i in range(80):
        t = i // 2
        payload = {"k": i % 2, "v": rnd.uniform(-1, 1) * 10 ** rnd.randint(-3, 3)}
        event = interval(t, t + 7, payload) if shape is EventShape.INTERVAL else point(t, payload)
        script.insert("a", event)
    columns, reference = AGGREGATES[aggregates]
    plan = Window(Input("a"), 10, 5, ("k",), reference)
    expected = run_reference(script, [Binding("a", EVERY, ("k", "v"))], plan, EventShape.INTERVAL)
    assert sum(e.kind is EventKind.INSERT for e in expected.output) >= 16
    inputs = {"a": In(shape, EVERY, SCHEMA)}

    def build(s):
        stream = s["a"] if where == "scan" else s["a"].where(F.col("k") >= 0)
        return stream.hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(**columns())

    runs = [(1, False), (4, False), (9, False)]
    if where == "scan":  # a traced run aggregates in Spark, not in the scan
        runs.append((4, True))
    for epochs, trace in runs:
        out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs, trace)
        assert out == expected.output, f"epochs={epochs}, traced={trace}"


HAND = {
    "partials": lambda: {"s": F.sum("v"), "a": F.avg("v")},
    "events": lambda: {"s": F.sum("v"), "a": F.avg("v"), "d": F.stddev("v"), "p": F.var_pop("v")},
}


@pytest.mark.parametrize("aggregates", sorted(HAND))
@pytest.mark.parametrize("epochs", [1, [1, 2, 3, 4]])
def test_a_sum_that_cancels_is_exact_and_an_average_does_not_overflow(app, aggregates, epochs):
    # Key 0 holds 1e16, 1.0, -1e16 (in this arrival order). Left to right: 1e16 + 1.0 is
    # 10000000000000001, not a double (the doubles there are 2 apart); the tie rounds to the even
    # 1e16; 1e16 - 1e16 = 0.0. The exact sum is 1.0, a double: sum = 1.0. avg: the double
    # nearest 1/3, 0.3333333333333333. Deviations from the mean 1/3: 1e16 - 1/3, 2/3,
    # -1e16 - 1/3; their squares add to 2e32 + 2/9 + 4/9 = 2e32 + 2/3. stddev (sample): the
    # double nearest sqrt((2e32 + 2/3) / 2) = sqrt(1e32 + 1/3) = 1e16 + 1.7e-17, i.e. 1e16.
    # var_pop: the double nearest (2e32 + 2/3) / 3 = (6e32 + 2) / 9.
    # Key 1 holds 1.7e308 twice: the sum 3.4e308 lies beyond the largest double (1.797e308):
    # sum = inf; avg = 3.4e308 / 2 = 1.7e308 exactly (a sum in doubles first gives inf / 2 = inf);
    # stddev and var_pop: 0.0.
    script = EventScript()
    for t, k, v in ((1, 0, 1e16), (2, 0, 1.0), (3, 0, -1e16), (4, 1, 1.7e308), (5, 1, 1.7e308)):
        script.insert("a", point(t, {"k": k, "v": v}))
    script.cti("a", 10)
    inputs = {"a": In(EventShape.POINT, EVERY, SCHEMA)}

    def build(s):
        return s["a"].tumbling_window(TICK * 10).group_by("k").aggregate(**HAND[aggregates]())

    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
    by_hand = {
        0: {"s": 1.0, "a": 0.3333333333333333, "d": 1e16, "p": float(Fraction(6 * 10**32 + 2, 9))},
        1: {"s": math.inf, "a": 1.7e308, "d": 0.0, "p": 0.0},
    }
    got = [e.payload for e in out if e.kind is EventKind.INSERT]
    assert got == [{"k": k, **{n: by_hand[k][n] for n in HAND[aggregates]()}} for k in (0, 1)]


BIG = 2**62 + 1
INTEGER_SUMS = {  # how each operator adds a window's values, and the shape of its input
    # partial aggregates made by the input's scan, merged in Spark
    "scan": (EventShape.POINT, lambda a: a.tumbling_window(TICK * 10)),
    # partial aggregates made and merged in Spark (intervals are not aggregated in the scan)
    "partials": (EventShape.INTERVAL, lambda a: a.tumbling_window(TICK * 10)),
    # all of a window's values at once (collect_list does not merge)
    "events": (EventShape.INTERVAL, lambda a: a.tumbling_window(TICK * 10)),
    "count window": (EventShape.INTERVAL, lambda a: a.count_window(3)),
    "session": (EventShape.INTERVAL, lambda a: a.session_window(TICK * 5)),
}


@pytest.mark.parametrize("operator", sorted(INTEGER_SUMS))
@pytest.mark.parametrize("epochs", [1, [2]])
def test_an_integer_sum_is_the_same_for_every_cut_when_its_total_fits(app, operator, epochs):
    # Key 0 holds 2**62 + 1, 2**62 + 1, -2**62 (arrivals 1, 2, 3; points or [t, t + 2)). The
    # total is 2**62 + 2, within bigint (at most 2**63 - 1), so sum = 2**62 + 2: one tumbling
    # window [0, 10), one count window of the 3 start times, one session [1, 10) (each event
    # within 5 ticks of the one before). Added in arrival order, the first two make 2**63 + 2,
    # beyond bigint: in 1 epoch Spark's own sum fails there (ANSI mode); cut before arrival 2,
    # the last two are added first (2**62 + 1 - 2**62 = 1) and nothing overflows. Summed as
    # decimals (engine.exact), both cuts give the total.
    shape, window = INTEGER_SUMS[operator]
    script = EventScript()
    for t, v in ((1, BIG), (2, BIG), (3, -(2**62))):
        payload = {"k": 0, "v": v}
        event = point(t, payload) if shape is EventShape.POINT else interval(t, t + 2, payload)
        script.insert("a", event)
    script.cti("a", 20)
    inputs = {"a": In(shape, EVERY, "k bigint, v bigint")}
    aggregates = {"s": F.sum("v")}
    if operator == "events":
        aggregates["n"] = F.collect_list("v")

    def build(s):
        return window(s["a"]).group_by("k").aggregate(**aggregates)

    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
    assert [e.payload["s"] for e in out if e.kind is EventKind.INSERT] == [2**62 + 2]


@pytest.mark.parametrize("epochs", [1, [2]])
def test_an_integer_sum_whose_total_leaves_bigint_fails_for_every_cut(app, epochs):
    # Snapshots of [1, 3), [2, 4), [3, 5): [2, 3) holds the two values 2**62 + 1, whose sum
    # 2**63 + 2 is beyond bigint: the result fails for every cut, naming the aggregate
    script = EventScript()
    for t, v in ((1, BIG), (2, BIG), (3, -(2**62))):
        script.insert("a", interval(t, t + 2, {"k": 0, "v": v}))
    script.cti("a", 20)
    inputs = {"a": In(EventShape.INTERVAL, EVERY, "k bigint, v bigint")}

    def build(s):
        return s["a"].snapshot_window().group_by("k").aggregate(s=F.sum("v"))

    with pytest.raises(QueryRunError) as got:
        spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
    message = str(got.value)
    assert f"snapshot_window().aggregate(s=...): a sum of integers is {2**63 + 2}" in message
    assert "outside bigint" in message and "Fix: sum the values as decimals" in message


@pytest.mark.parametrize("operator", ["scan", "events"])
def test_without_ansi_mode_an_integer_sum_wraps_around_as_sparks_own(app, spark, operator):
    # Without ANSI mode Spark's bigint sum wraps around: (2**62 + 1) * 2 = 2**63 + 2 is
    # -2**63 + 2. That does not depend on the order, so it is left as Spark has it.
    shape, window = INTEGER_SUMS[operator]
    script = EventScript()
    for t in (1, 2):
        payload = {"k": 0, "v": BIG}
        script.insert(
            "a", point(t, payload) if shape is EventShape.POINT else interval(t, t + 2, payload)
        )
    script.cti("a", 20)
    inputs = {"a": In(shape, EVERY, "k bigint, v bigint")}
    aggregates = {"s": F.sum("v")}
    if operator == "events":
        aggregates["n"] = F.collect_list("v")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        native = spark.createDataFrame([(BIG,), (BIG,)], "v bigint").agg(F.sum("v")).first()[0]
        assert native == -(2**63) + 2
        for epochs in (1, [2]):
            out, _ = spark_run(
                app,
                script,
                inputs,
                lambda s: window(s["a"]).group_by("k").aggregate(**aggregates),
                EventShape.INTERVAL,
                epochs,
            )
            assert [e.payload["s"] for e in out if e.kind is EventKind.INSERT] == [native]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")


def test_an_expansion_keeps_the_exact_sum_of_values_and_of_expansions_merged():
    from ctistream.engine.exact import expansion, rounded_mean, rounded_moment, rounded_sum

    # 1e16 + 1.0 - 1e16 is exactly 1.0 (see above); 1e308 + 1e308 - 1e308 is 1e308 although a
    # running sum in doubles overflows on the way (math.fsum raises there: summed in rationals).
    assert expansion([1e16, 1.0, -1e16]) == [1.0]
    assert expansion([1e308, 1e308, -1e308]) == [1e308]
    # 0.1 + 0.2 needs two doubles: 0.30000000000000004 and the remainder -2.7755575615628914e-17
    # (0.1 + 0.2 = 0.3000000000000000166533453693773481063544750213623046875 exactly)
    both = expansion([0.1, 0.2])
    assert both == [0.30000000000000004, -2.7755575615628914e-17]
    assert Fraction(both[0]) + Fraction(both[1]) == Fraction(0.1) + Fraction(0.2)
    # merged in any grouping, the same rounded results
    assert rounded_sum(expansion([*expansion([0.1]), *expansion([0.2, 0.3])])) == 0.6
    assert rounded_sum(expansion([*expansion([0.1, 0.2]), *expansion([0.3])])) == 0.6
    assert 0.1 + 0.2 + 0.3 == 0.6000000000000001  # the naive sum, left to right
    assert rounded_mean([0.6], 3) == 0.19999999999999998  # the double nearest 0.6 / 3
    assert (expansion([]), rounded_sum([]), rounded_mean([], 0)) == ([], None, None)
    assert expansion([-0.0]) == [0.0] and rounded_sum([0.0]) == 0.0
    assert math.isnan(rounded_sum(expansion([math.inf, 1.0, -math.inf])))
    assert rounded_sum(expansion([math.inf, 1.0])) == math.inf
    # sqrt(2) rounded once: stddev_pop of -1, 1 is sqrt(1) = 1; of 0, 2, 4 (sample) sqrt(4) = 2
    assert rounded_moment([-1.0, 1.0], 0, True) == 1.0
    assert rounded_moment([0.0, 2.0, 4.0], 1, True) == 2.0
    assert rounded_moment([0.0, 1.0], 1, True) == math.sqrt(0.5)  # 0.5 is exact: sqrt rounds once
    assert rounded_moment([5.0], 1, True) is None and rounded_moment([5.0], 0, False) == 0.0


@pytest.mark.parametrize(
    ("column", "what"),
    [
        (lambda: F.avg("v") / F.count("*"), "avg(...), inside an expression, adds"),
        (lambda: F.sum_distinct("v"), "sum(DISTINCT ...) adds"),
        (lambda: F.skewness("v"), "skewness(...) adds"),
        # 1e308 * 10 * 1e-308 is inf in that order, 10 with the last two first
        (lambda: F.product("v"), "product(...) multiplies"),
    ],
)
def test_an_aggregate_of_doubles_that_would_depend_on_the_order_is_refused(app, column, what):
    script = EventScript()
    script.insert("a", point(1, {"k": 0, "v": 0.5}))
    inputs = {"a": In(EventShape.POINT, EVERY, SCHEMA)}

    def build(s):
        return s["a"].tumbling_window(TICK * 10).aggregate(x=column())

    with pytest.raises(QueryBuildError) as got:
        spark_run(app, script, inputs, build, EventShape.INTERVAL)
    message = str(got.value)
    assert message.startswith(
        f"tumbling_window('10 microseconds').aggregate(x=...): {what} floating-point"
    )
    assert "semantics §4" in message and "Fix: aggregate the sum or average alone" in message
    assert "__" not in message  # no internal column


def test_an_expression_over_an_integer_sum_is_accepted(app):
    script = EventScript()
    script.insert("a", point(1, {"k": 3, "v": 0.5}))
    script.insert("a", point(2, {"k": 4, "v": 0.25}))
    inputs = {"a": In(EventShape.POINT, EVERY, SCHEMA)}

    def build(s):
        return s["a"].tumbling_window(TICK * 10).aggregate(x=F.sum("k") * 2, m=F.max("v"))

    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL)
    assert [e.payload for e in out if e.kind is EventKind.INSERT] == [{"x": 14, "m": 0.5}]


@pytest.mark.parametrize("pushed", [False, True])
def test_a_window_over_a_join_sums_doubles_exactly_in_any_epochs(app, pushed):
    # The join hands the window its pairs' partial aggregates (``pushed``: aggregates of
    # columns) or its pairs (an expression); the values cancel only when summed exactly:
    # key 1's window [0, 10) holds v = 1e16, 1.0, -1e16 (sum 1.0, left to right 0.0).
    explicit = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "w": 0.1}))
    script.insert("a", interval(1, 4, {"k": 1, "v": 1e16}))
    script.insert("a", interval(2, 5, {"k": 1, "v": 1.0}))
    script.cti("b", 3)
    script.insert("a", interval(3, 6, {"k": 1, "v": -1e16}))
    script.insert("b", edge_end(0, 12, {"k": 1, "w": 0.1}))
    script.insert("a", interval(11, 13, {"k": 1, "v": 0.2}))
    script.insert("a", interval(12, 14, {"k": 1, "v": 0.3}))
    script.cti("a", 30)
    script.cti("b", 30)
    bindings = [Binding("a", explicit, ("k", "v")), Binding("b", explicit, ("k", "w"))]
    # The pairs: a's [1, 4), [2, 5), [3, 6) with b's [0, 12) in window [0, 10); [11, 13) gives
    # [11, 12) in [10, 20); [12, 14) meets nothing.
    if pushed:  # sum(v): 1e16 + 1.0 - 1e16 = 1.0 exactly (0.0 left to right); then 0.2
        reference = (("s", double_sum("v")), ("a", double_avg("w")))
        by_hand = [{"k": 1, "s": 1.0, "a": 0.1}, {"k": 1, "s": 0.2, "a": 0.1}]
    else:
        # sum(v + w): each pair's v + w is one double: 1e16 + 0.1 = 1e16 (the doubles there are 2
        # apart), 1.0 + 0.1 = 1.1, -1e16 + 0.1 = -1e16; their exact sum is 1.1 (left to right:
        # 1e16 + 1.1 rounds to 1e16 + 2, minus 1e16 gives 2.0); then 0.2 + 0.1 =
        # 0.30000000000000004
        reference = (("s", lambda rows: double_sum("x")([{"x": r["v"] + r["w"]} for r in rows])),)
        by_hand = [{"k": 1, "s": 1.1}, {"k": 1, "s": 0.30000000000000004}]
    plan = Window(Join(Input("a"), Input("b"), ("k",)), 10, 10, ("k",), reference)
    expected = run_reference(script, bindings, plan, EventShape.INTERVAL).output
    assert [e.payload for e in expected if e.kind is EventKind.INSERT] == by_hand
    inputs = {
        "a": In(EventShape.INTERVAL, explicit, SCHEMA),
        "b": In(EventShape.EDGE, explicit, "k bigint, w double"),
    }

    def build(s):
        joined = s["a"].join(s["b"], on="k").tumbling_window(TICK * 10).group_by("k")
        if pushed:
            return joined.aggregate(s=F.sum("v"), a=F.avg("w"))
        return joined.aggregate(s=F.sum(F.col("v") + F.col("w")))

    for epochs in (1, [3], [2, 5, 8]):
        out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
        assert out == expected, f"epochs={epochs}"
