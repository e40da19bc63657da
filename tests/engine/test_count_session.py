"""Count windows and session windows (semantics §5), worked by hand: results, when the CTI rule
releases them, edges, state bounded by time, build-time errors, explain and restart. Each case
runs on Spark in one epoch and cut into several, and through the reference interpreter."""

from __future__ import annotations

import uuid
from datetime import timedelta

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
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.harness import In, killed, spark_run
from tests.reference import Binding, CountWindow, Input, SessionWindow, run_reference

#: only the script's explicit CTIs (a CTI every 10**6 events), +inf at the end
EXPLICIT = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
INF = cti(MAX_TIME)
CUTS = [1, [2, 5]]  # random cuts: the differential tests


def _both(
    app, script, build, plan, shape=EventShape.INTERVAL, in_shape=EventShape.POINT, cuts=CUTS
):
    """Spark's output for every cut in ``cuts`` (all equal) and the reference's (equal too)."""
    inputs = {"a": In(in_shape, EXPLICIT, "k string, v bigint")}
    outs = [spark_run(app, script, inputs, lambda s: build(s["a"]), shape, c)[0] for c in cuts]
    assert all(o == outs[0] for o in outs)
    expected = run_reference(script, [Binding("a", EXPLICIT, ("k", "v"))], plan, shape)
    assert outs[0] == expected.output
    return outs[0]


def _count(rows: list[dict]) -> int:
    return len(rows)


def _total(rows: list[dict]) -> int:
    return sum(r["v"] for r in rows)


# -- count windows --------------------------------------------------------------------------


def test_a_count_window_releases_each_window_once_the_cti_passes_its_last_start(app):
    script = EventScript()
    for t, k, v in ((1, "a", 1), (3, "a", 2), (3, "b", 5), (4, "a", 3), (7, "a", 4)):
        script.insert("a", point(t, {"k": k, "v": v}))
    script.cti("a", 4)
    script.insert("a", point(9, {"k": "b", "v": 6}))
    script.cti("a", 8)
    script.insert("a", point(10, {"k": "a", "v": 8}))
    # n = 2, grouped by k. Distinct starts: a: 1, 3, 4, 7, 10; b: 3, 9.
    # Windows (a): {1,3} ends 3, {3,4} ends 4, {4,7} ends 7, {7,10} ends 10; (b): {3,9} ends 9.
    # CTI 4 passes 3 only: a's {1,3} (v 1+2 = 3) as a point at 3; CTI 4 unchanged (§5: same as
    # input; a's window ending at 4 needs a CTI above 4).
    # CTI 8 passes 4 and 7: {3,4} (2+3 = 5) at 4, {4,7} (3+4 = 7) at 7; b's {3,9} waits (9 >= 8).
    # +inf: a's {7,10} (4+8 = 12) at 10, b's {3,9} (5+6 = 11) at 9.
    out = _both(
        app,
        script,
        lambda s: s.count_window(2).group_by("k").aggregate(n=F.count("*"), s=F.sum("v")),
        CountWindow(Input("a"), 2, ("k",), (("n", _count), ("s", _total))),
    )
    assert out == [
        interval(3, 4, {"k": "a", "n": 2, "s": 3}),
        cti(4),
        interval(4, 5, {"k": "a", "n": 2, "s": 5}),
        interval(7, 8, {"k": "a", "n": 2, "s": 7}),
        cti(8),
        interval(9, 10, {"k": "b", "n": 2, "s": 11}),
        interval(10, 11, {"k": "a", "n": 2, "s": 12}),
        INF,
    ]


@pytest.mark.parametrize("window", ["count", "session"])
def test_a_null_key_is_a_group_of_its_own(app, window):
    # k = None and k = "a" at the same times: 1, 3, 4; +inf at the end.
    # count_window(2): per group the windows {1,3} ends 3 and {3,4} ends 4, each a point at its
    # last start with n = 2, for both groups. session_window(5): per group one session [1, 10)
    # (4 + 1 + 5), n = 3. Groups sort with null first; over all events at once, n would double.
    script = EventScript()
    for t in (1, 3, 4):
        for k in (None, "a"):
            script.insert("a", point(t, {"k": k, "v": t}))
    if window == "count":
        build = lambda s: s.count_window(2).group_by("k").aggregate(n=F.count("*"))  # noqa: E731
        plan = CountWindow(Input("a"), 2, ("k",), (("n", _count),))
        expected = [interval(t, t + 1, {"k": k, "n": 2}) for t in (3, 4) for k in (None, "a")]
    else:
        build = lambda s: (  # noqa: E731
            s.session_window("5 microseconds").group_by("k").aggregate(n=F.count("*"))
        )
        plan = SessionWindow(Input("a"), 5, None, ("k",), (("n", _count),))
        expected = [interval(1, 10, {"k": k, "n": 3}) for k in (None, "a")]
    assert _both(app, script, build, plan) == [*expected, INF]


def test_a_count_window_counts_start_times_not_events_and_never_completes_a_short_tail(app):
    script = EventScript()
    for t, v in ((2, 1), (2, 10), (5, 100), (6, 1000)):
        script.insert("a", point(t, {"k": "x", "v": v}))
    # n = 3, ungrouped: starts 2, 5, 6 (2 twice). One window {2,5,6}: all four events,
    # v = 1111, a point at 6, released at +inf. {5,6} has two starts only: never, even at +inf.
    out = _both(
        app,
        script,
        lambda s: s.count_window(3).aggregate(n=F.count("*"), s=F.sum("v")),
        CountWindow(Input("a"), 3, (), (("n", _count), ("s", _total))),
    )
    assert out == [interval(6, 7, {"n": 4, "s": 1111}), INF]


def test_a_count_window_counts_an_open_start_edge_at_its_start(app):
    script = EventScript()
    script.insert("a", edge_start(1, {"k": "x", "v": 1}))
    script.insert("a", edge_start(4, {"k": "x", "v": 2}))
    script.cti("a", 5)
    script.insert("a", edge_end(1, 20, {"k": "x", "v": 1}))
    # n = 2: starts 1 and 4 are known while both edges are open (a count window reads starts
    # only), so CTI 5 passes 4 and releases {1,4} (v 3) as a point at 4; the END edge changes
    # nothing; the START edge at 4 never ends, and nothing waits for it.
    out = _both(
        app,
        script,
        lambda s: s.count_window(2).aggregate(s=F.sum("v")),
        CountWindow(Input("a"), 2, (), (("s", _total),)),
        in_shape=EventShape.EDGE,
    )
    assert out == [interval(4, 5, {"s": 3}), cti(5), INF]


# -- session windows ------------------------------------------------------------------------


def test_sessions_close_at_their_reach_and_the_cti_waits_for_the_earliest_open_one(app):
    script = EventScript()
    for t, k in ((1, "a"), (3, "a"), (4, "b"), (12, "a")):
        script.insert("a", point(t, {"k": k, "v": t}))
    script.cti("a", 9)
    script.cti("a", 10)
    script.insert("a", point(20, {"k": "b", "v": 20}))
    script.cti("a", 15)
    # timeout 5, grouped by k. a: point 1 reaches 2 + 5 = 7; 3 < 7 joins, reach 4 + 5 = 9;
    # 12 >= 9 opens a new one (reach 18). b: 4 reaches 10; 20 >= 10: a new one (reach 26).
    # CTI 9: a's [1, 9) is closed (9 <= 9): released (v 1 + 3 = 4); b's [4, 10) is open, so the
    # CTI is min(9, 4) = 4. CTI 10: b's [4, 10) closes (v 4); a's [12, 18) is open, but 12 > 10:
    # the CTI is 10. CTI 15: a's [12, 18) is open: min(15, 12) = 12.
    # +inf: a's [12, 18) (v 12) and b's [20, 26) (v 20).
    out = _both(
        app,
        script,
        lambda s: s.session_window("5 microseconds").group_by("k").aggregate(s=F.sum("v")),
        SessionWindow(Input("a"), 5, None, ("k",), (("s", _total),)),
    )
    assert out == [
        interval(1, 9, {"k": "a", "s": 4}),
        cti(4),
        interval(4, 10, {"k": "b", "s": 4}),
        cti(10),
        cti(12),
        interval(12, 18, {"k": "a", "s": 12}),
        interval(20, 26, {"k": "b", "s": 20}),
        INF,
    ]


def test_a_session_passes_every_payload_type_through_as_it_is(app):
    # The session of each event is found by an Arrow function that hands the payload back as it
    # came: a long with a null stays a long above 2**53 (pandas would make it a double), and a
    # timestamp, a decimal and an array keep their values. k = a: points at 1 and 3, timeout 5:
    # one session [1, 3 + 1 + 5) = [1, 9), released at the end (+inf).
    from datetime import UTC, datetime
    from decimal import Decimal

    big = 2**62 + 1
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    script = EventScript()
    for t, b, d, arr in ((1, big, Decimal("12345678901234567.89"), [1, 2]), (3, None, None, [3])):
        script.insert("a", point(t, {"k": "a", "big": b, "ts": when, "d": d, "arr": arr}))
    schema = "k string, big bigint, ts timestamp, d decimal(20, 2), arr array<int>"
    inputs = {"a": In(EventShape.POINT, EXPLICIT, schema)}

    def build(s):
        sessions = s["a"].session_window("5 microseconds").group_by("k")
        return sessions.aggregate(
            big=F.max("big"), ts=F.max("ts"), d=F.sum("d"), arr=F.max("arr"), n=F.count("*")
        )

    for cuts in CUTS:
        out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, cuts)
        assert out == [
            interval(
                1,
                9,
                {
                    "k": "a",
                    "big": big,
                    "ts": when,
                    "d": Decimal("12345678901234567.89"),
                    "arr": [3],
                    "n": 2,
                },
            ),
            INF,
        ]


def test_sessions_hand_timestamps_back_in_any_session_time_zone(app):
    # Spark hands an Arrow function timestamps in the session's time zone and wants them back
    # labelled UTC; the sessionizing function relabels them (the same instants). Two rows of one
    # group, 1 and 3 (reach 9): one session [1, 9).
    from ctistream.engine.operators.count_session import _sessionized

    spark = app.spark
    rows = spark.sql(
        "SELECT 'a' AS k, CAST(t AS BIGINT) AS __start, CAST(9 AS BIGINT) AS __reach, "
        "false AS __open, TIMESTAMP'2026-01-02 03:04:05' AS ts, "
        "named_struct('at', TIMESTAMP'2026-01-02 03:04:05') AS nested FROM VALUES (1), (3) AS v(t)"
    )
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Berlin")
    try:
        got = _sessionized(rows, ("k",), None).orderBy("__start").collect()
        expected = rows.orderBy("__start").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert [(r["__sf"], r["__se"], r["ts"], r["nested"]) for r in got] == [
        (1, 9, e["ts"], e["nested"]) for e in expected
    ]


def test_a_session_reaches_from_the_largest_end_of_its_intervals(app):
    script = EventScript()
    script.insert("a", interval(0, 10, {"k": "x", "v": 1}))
    script.insert("a", point(2, {"k": "x", "v": 2}))
    script.insert("a", point(13, {"k": "x", "v": 4}))
    script.insert("a", point(20, {"k": "x", "v": 8}))
    # timeout 4: [0, 10) reaches 14; 2 joins (reach stays 14, 3 + 4 = 7 is less); 13 < 14 joins,
    # reach 14 + 4 = 18; 20 >= 18 opens a new one, reaching 25. Results at +inf.
    out = _both(
        app,
        script,
        lambda s: s.session_window(TICK * 4).aggregate(s=F.sum("v")),
        SessionWindow(Input("a"), 4, None, (), (("s", _total),)),
        in_shape=EventShape.INTERVAL,
    )
    assert out == [interval(0, 18, {"s": 7}), interval(20, 25, {"s": 8}), INF]


def test_max_duration_ends_a_session_on_its_grid(app):
    script = EventScript()
    for t in (3, 7, 11, 15, 19, 30):
        script.insert("a", point(t, {"k": "x", "v": t}))
    script.cti("a", 25)
    # timeout 5, max_duration 10 (grid 0, 10, 20, ...). The session from 3 could end at the
    # first multiple m of 10 with m - 3 >= 10: m = 20 (10 - 3 = 7 is too short). 7, 11, 15
    # and 19 each start before the reach (a point at t reaches t + 1 + 5: 9, 13, 17, 21) and
    # before 20: they join; reach 25, so the session ends at min(25, 20) = 20. 30 opens one of
    # its own: [30, 36). CTI 25: [3, 20) is closed (v 3+7+11+15+19 = 55); the open session
    # starts at 30, after 25, so the CTI is min(25, 30) = 25.
    out = _both(
        app,
        script,
        lambda s: s.session_window(TICK * 5, TICK * 10).aggregate(s=F.sum("v")),
        SessionWindow(Input("a"), 5, 10, (), (("s", _total),)),
    )
    assert out == [interval(3, 20, {"s": 55}), cti(25), interval(30, 36, {"s": 30}), INF]


def test_max_duration_makes_an_event_at_the_grid_point_open_a_new_session(app):
    script = EventScript()
    for t in (12, 18, 30, 33):
        script.insert("a", point(t, {"k": "x", "v": 1}))
    # timeout 20, max_duration 10: from 12 the cap is 30 (20 - 12 = 8 < 10); 18 joins (reach
    # 39); 30 is at the cap: a new session [30, ...), whose cap is 40; 33 joins (reach 54), so it
    # ends at min(54, 40) = 40.
    out = _both(
        app,
        script,
        lambda s: s.session_window(TICK * 20, TICK * 10).aggregate(n=F.count("*")),
        SessionWindow(Input("a"), 20, 10, (), (("n", _count),)),
    )
    assert out == [interval(12, 30, {"n": 2}), interval(30, 40, {"n": 2}), INF]


def test_an_open_edge_holds_its_session_open_until_its_end_edge(app):
    script = EventScript()
    script.insert("a", edge_start(2, {"k": "x", "v": 1}))
    script.cti("a", 50)
    script.insert("a", edge_end(2, 60, {"k": "x", "v": 1}))
    script.cti("a", 70)
    # timeout 3: the open edge reaches +inf, so at CTI 50 its session is open: the CTI is
    # min(50, 2) = 2. The END edge ends it at 60: reach 63; CTI 70 closes [2, 63).
    out = _both(
        app,
        script,
        lambda s: s.session_window(TICK * 3).aggregate(n=F.count("*")),
        SessionWindow(Input("a"), 3, None, (), (("n", _count),)),
        in_shape=EventShape.EDGE,
    )
    assert out == [cti(2), interval(2, 63, {"n": 1}), cti(70), INF]


def test_a_session_kept_as_partial_aggregates_grows_past_an_open_edge(app):
    script = EventScript()
    row = {"k": "x", "v": 1}
    for t in (1, 3):  # [t, t + 1) as an edge pair
        script.insert("a", edge_start(t, row))
        script.insert("a", edge_end(t, t + 1, row))
    script.cti("a", 4)
    script.insert("a", edge_start(5, row))
    script.cti("a", 7)
    script.insert("a", edge_start(9, row))
    script.insert("a", edge_end(9, 10, row))
    script.cti("a", 10)
    script.insert("a", edge_end(5, 10, row))
    script.cti("a", 11)
    script.cti("a", 20)
    # timeout 2, events [t, t + 1) (edge pairs). 1 reaches 2 + 2 = 4; 3 < 4 joins, reach 6.
    # CTI 4: the session [1, 6) is open, the CTI min(4, 1) = 1; its events 1 and 3 start
    # before 4: kept as one row of partial aggregates from here on. The open edge at 5 < 6
    # joins and reaches +inf (CTI 7: still 1); 9 joins through it and, coming after the open
    # edge, stays an event (CTI 10). Its END edge at 10 reaches 12, and 9 < 12 stays in: the
    # session is [1, 12) with 4 events; CTI 11 < 12 leaves it open, CTI 20 closes it. Cut
    # after every CTI, each epoch carries the partial aggregates to the next.
    out = _both(
        app,
        script,
        lambda s: s.session_window(TICK * 2).aggregate(n=F.count("*")),
        SessionWindow(Input("a"), 2, None, (), (("n", _count),)),
        in_shape=EventShape.EDGE,
        cuts=[[5, 7, 10, 12]],
    )
    assert out == [cti(1), interval(1, 12, {"n": 4}), cti(20), INF]


# -- state bounded by time --------------------------------------------------------------------


def _state_after(app, name: str, windowed, aggregate=None, times=range(0, 100, 2)) -> dict:
    """Points at ``times`` (k = t % 4), a CTI at each start, in 5 epochs without the flush,
    counted per ``k`` (or ``aggregate``): the operator's state after the run."""
    script = EventScript()
    for t in times:
        script.insert("a", point(t, {"k": t % 4, "v": t}))
    stream = Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=script),
        EventShape.POINT,
        AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, False)),
    )
    query = (
        windowed(stream)
        .group_by("k")
        .aggregate(n=aggregate if aggregate is not None else F.count("*"))
        .to_query(app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT)
    )
    query.run(epochs=5)
    [op] = query.operator_metrics().values()
    op.pop("state_partitions")
    return op


def test_a_count_window_holds_the_last_n_minus_1_start_times_per_group(app):
    # The last CTI is 98 (at the point 98): starts below it are known; each group keeps its
    # last 2 (n - 1) start times below 98 (k = 0: 92, 96; k = 2: 94, 90) and the point at 98:
    # 5 events of 50.
    state = _state_after(app, "count-state", lambda s: s.count_window(3))
    assert state["state_rows"] == 5
    assert state["cti_ticks"] == 98


def test_a_session_window_holds_only_its_open_sessions(app):
    # timeout 3: points 4 apart in a group (k = 0: 0, 4, 8, ...; k = 2: 2, 6, ...) each make a
    # session [t, t + 4). At the last CTI 98 the open ones are k = 2's [98, 102) and k = 0's
    # [96, 100) (100 > 98). k = 0's point 96 starts before the CTI: its session is kept as one
    # row of partial aggregates (the count merges); k = 2's point 98 does not: kept as an
    # event. 2 rows. Output CTI min(98, 96) = 96.
    state = _state_after(app, "session-state", lambda s: s.session_window(TICK * 3))
    assert state["state_rows"] == 2
    assert state["cti_ticks"] == 96


@pytest.mark.parametrize(
    ("aggregate", "rows"),
    [
        # The count merges: of each k's open session, the points that start before the last
        # CTI 99 (0 .. 98) are one row of partial aggregates (4 rows, one per k); the point 99
        # (k = 3) starts at the CTI and stays an event: 5 rows.
        (lambda: F.count("*"), 5),
        # collect_list does not merge: all 100 events of the 4 open sessions are held.
        (lambda: F.collect_list("v"), 100),
    ],
    ids=["merges", "does-not-merge"],
)
def test_a_long_open_session_is_held_as_one_row_of_partial_aggregates(app, aggregate, rows):
    # Points 0 .. 99, k = t % 4, a CTI at each start (the last one 99). Each k has a point every
    # 4 ticks; with timeout 5 each point reaches 5 past its start, so each k's points form one
    # session that is still open at 99 (k = 0's reaches 96 + 5 = 101 > 99). Run in 5 epochs,
    # without the flush.
    state = _state_after(
        app,
        f"long-session-{rows}",
        lambda s: s.session_window(TICK * 5),
        aggregate(),
        range(100),
    )
    assert state["cti_ticks"] == 0  # min(99, start of the earliest open session: k = 0's 0)
    assert state["state_rows"] == rows


# -- build-time errors and explain ------------------------------------------------------------


def _input() -> Stream:
    return Stream.create(
        "a", MemoryInputFactory(), MemoryInputConfig(script=EventScript()), EventShape.POINT
    )


@pytest.mark.parametrize(
    ("n", "error", "text"),
    [
        (
            0,
            ValueError,
            "count_window(n=0): n is the number of distinct start times per window, "
            "at least 1; got 0. Fix: pass n >= 1, e.g. count_window(5)",
        ),
        (
            2.0,
            TypeError,
            "count_window(n=2.0): n is the number of distinct start times per "
            "window, an int; got a float. Fix: pass a whole number, e.g. count_window(5)",
        ),
        (True, TypeError, "got a bool"),
    ],
)
def test_count_window_refuses_n_that_is_not_a_positive_int(n, error, text):
    with pytest.raises(error) as got:
        _input().count_window(n)
    assert text in str(got.value)


@pytest.mark.parametrize(
    ("args", "error", "text"),
    [
        (
            (30,),
            TypeError,
            "session_window(): timeout must be a duration; got the bare number 30, which names "
            "no unit. Expected a timedelta or a Spark-style interval string. Fix: "
            'timeout=timedelta(seconds=30) or timeout="30 seconds"',
        ),
        (
            ("30 seconds", 60),
            TypeError,
            "session_window(): max_duration must be a duration; got the bare number 60",
        ),
        (
            (timedelta(0),),
            ValueError,
            "session_window(): timeout must be at least 1 tick (1 µs); got "
            "datetime.timedelta(0) (0 ticks). Fix: pass a positive duration",
        ),
        (
            ("30 seconds", "-1 minute"),
            ValueError,
            "session_window(): max_duration must be at least 1 tick (1 µs); got '-1 minute'",
        ),
    ],
)
def test_session_window_refuses_a_timeout_or_max_duration_that_is_not_a_positive_duration(
    args, error, text
):
    with pytest.raises(error) as got:
        _input().session_window(*args)
    assert text in str(got.value)


def test_explain_shows_count_and_session_windows(app):
    stream = _input()
    counted = stream.count_window(3).group_by("k").aggregate(n=F.count("*"))
    assert counted.explain().splitlines()[0] == (
        "count_window 3 group_by k aggregate n=count(*)  key -  CTI: the input's, unchanged (§5)"
    )
    sessions = stream.session_window("30 seconds", "5 minutes").aggregate(n=F.count("*"))
    assert (
        sessions.explain()
        .splitlines()[0]
        .startswith(
            "session_window timeout 30 seconds max_duration 5 minutes aggregate n=count(*)  key -  "
            "CTI: the older of the input's CTI and the start of the earliest session still open"
        )
    )


# -- restart ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "sums"),
    [
        # count_window(2) per id: id 0 starts 1, 4, 10, 20, 30 s: windows {1,4} {4,10} {10,20}
        # {20,30} (v 5, 14, 30, 50); id 1 starts 2, 9, 12, 21: {2,9} {9,12} {12,21} (11, 21, 33)
        ("count", [5.0, 11.0, 14.0, 21.0, 30.0, 33.0, 50.0]),
        # session_window(5 s) per id (a point at t reaches t + 1 µs + 5 s): id 0: {1, 4} (v 5),
        # {10}, {20}, {30}; id 1: {2}, {9, 12} (v 21), {21}
        ("session", [2.0, 5.0, 10.0, 20.0, 21.0, 21.0, 30.0]),
    ],
)
def test_count_and_session_windows_resume_from_their_checkpointed_state(
    app, kafka_broker, tmp_path, window, sums
):
    # The query crashes after its first epoch (its state snapshot written) and starts again on
    # its checkpoint: the open windows and sessions come back from the snapshot, and the output
    # equals a run that never stopped.
    from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
    from ctistream.adapters.kafka import KafkaInputFactory
    from ctistream.engine import AdapterAdvanceTimeSettings, AdvanceTimePolicy

    from tests.adapters import test_kafka as kf
    from tests.adapters.test_files_query import iso, read_output

    every_event = AdapterAdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
    )
    b = kafka_broker.bootstrap
    seconds = [1, 2, 4, 9, 10, 12, 20, 21, 30]
    records = [
        (0, {"ts": iso(s), "id": n % 2, "v": float(s)}, kf.ARRIVAL_MS + n, None)
        for n, s in enumerate(seconds)
    ]

    def query(topic, out):
        stream = Stream.create(
            "live",
            KafkaInputFactory(),
            kf.input_config(b, topic, time_field="ts", advance_time=every_event),
            EventShape.POINT,
        )
        if window == "count":
            windowed = stream.count_window(2)
        else:
            windowed = stream.session_window("5 seconds")
        result = windowed.group_by("id").aggregate(n=F.count("*"), s=F.sum("v"))
        return result.to_query(
            app,
            f"{window}-{uuid.uuid4().hex[:6]}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.INTERVAL,
        )

    source = kafka_broker.create_topic()
    kf.produce(b, source, records[:5])
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"
    first = query(source, out)
    first.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    first.step()  # epoch 0, its state written
    killed(first)
    kf.produce(b, source, records[5:])
    again = query(source, out)
    again.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    again.step()
    again.stop()

    clean_source, clean_out = kafka_broker.create_topic(), tmp_path / "clean.jsonl"
    kf.produce(b, clean_source, records)
    clean = query(clean_source, clean_out)
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop()
    got = read_output(out)
    assert sorted(r[2]["s"] for r in got if r[0] == "INSERT") == sums
    assert got[-1] == ("CTI", "+inf", {})
    assert out.read_text() == clean_out.read_text()
