"""Bounded work for every legal input, and snapshots that never stall a query (semantics §5, the
paragraph under the table and the snapshot row; docs/decisions.md "Windows", "Lifetime
arithmetic saturates", "Snapshot windows").

Each case is worked by hand in its comments, checked against the reference interpreter and run
on Spark in one epoch and in one epoch per item: the outputs are equal (``==``).
"""

from __future__ import annotations

from collections.abc import Callable

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
    MIN_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    Event,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.reference import (
    AlterEventDuration,
    AlterEventLifetime,
    Binding,
    Input,
    Join,
    Node,
    ShiftEventTime,
    Snapshot,
    Union,
    Window,
    run_reference,
)

#: only the script's explicit CTIs (one generated every 10**6 events), +inf at the end
EXPLICIT = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
#: the same without the +inf at the end: what a live query sees before it stops
LIVE = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, False))
SCHEMA = "k bigint, v bigint"
COLUMNS = ("k", "v")
INF = cti(MAX_TIME)
N = (("n", len),)


def _spark(app, script, inputs, build, shape, epochs) -> tuple[list[Event], dict]:
    """What the sink received, and the query's operator metrics."""
    streams = {
        name: Stream.create(
            name, MemoryInputFactory(), MemoryInputConfig(script=script, schema=SCHEMA), s, st
        )
        for name, (s, st) in inputs.items()
    }
    sink = f"bounded{id(script)}_{epochs}"
    query = build(streams).to_query(
        app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), shape
    )
    try:
        query.run(epochs=epochs)
        return MemoryOutputFactory.collected(sink), query.operator_metrics()
    finally:
        app.queries.pop(sink, None)


def _agree(
    app,
    script: EventScript,
    inputs: dict[str, tuple[EventShape, AdvanceTimeSettings]],
    plan: Node,
    build: Callable[[dict[str, Stream]], Stream],
    shape: EventShape,
    expected: list[Event],
    dropped: list[int] | None = None,
    cuts: list[int] | None = None,
) -> None:
    """The reference and Spark (1 epoch, and one epoch per two items or cut at ``cuts``) give
    ``expected``; with ``dropped``, the lifetime operators' drop counts, children first."""
    bindings = [Binding(n, st, COLUMNS) for n, (_, st) in inputs.items()]
    reference = run_reference(script, bindings, plan, shape)
    assert reference.output == expected, "reference"
    if dropped is not None:
        assert reference.lifetime_dropped == dropped, "reference"
    items = sum(len(script.items(n, p)) for n in inputs for p in script.partitions(n))
    for epochs in (1, cuts or list(range(1, items, 2))):  # one epoch, and one per two items
        output, operators = _spark(app, script, inputs, build, shape, epochs)
        assert output == expected, f"epochs={epochs}"
        if dropped is not None:
            counts = [m["dropped"] for name, m in operators.items() if name.endswith(":lifetime")]
            assert counts == dropped, f"epochs={epochs}"


def _w(ws: int, size: int, **payload) -> Event:
    return interval(ws, ws + size, payload)


# -- windows over lifetimes that end at +inf ----------------------------------------------------


def test_a_tumbling_window_counts_an_interval_to_inf_up_to_the_latest_finite_moment(app):
    # interval [0, +inf), CTIs 25 and +inf; tumbling 10, count (pushed into the input's scan).
    # CTI 25 completes [0, 10) and [10, 20) (ws + 10 <= 25): n = 1 each; output CTI = the start
    # of the earliest open window = 20. The latest finite moment seen is L = max(start 0, CTI
    # 25) = 25 (the end +inf is not finite), so at +inf the windows starting at or before 25
    # complete: [20, 30) only. Guards against: the scan tries to count it in 9.2e17 windows.
    script = EventScript()
    script.insert("a", interval(0, MAX_TIME, {"k": 1, "v": 1}))
    script.cti("a", 25)
    script.cti("a", MAX_TIME)
    expected = [_w(0, 10, n=1), _w(10, 10, n=1), cti(20), _w(20, 10, n=1), INF]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT)},
        Window(Input("a"), 10, 10, (), N),
        lambda s: s["a"].tumbling_window(TICK * 10).aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        expected,
    )


def test_a_grouped_tumbling_window_takes_a_finite_end_as_the_latest_moment(app):
    # k=1: [0, +inf); CTI 25; k=2: [30, 40); CTI +inf. Tumbling 10 per k.
    # CTI 25: k=1 in [0, 10), [10, 20); output CTI 20. L = max(0, 25, 30, 40) = 40: the end 40
    # counts as itself (not 39), so at +inf k=1 counts in [20, 30), [30, 40) and [40, 50) (the
    # window that contains 40); k=2 in [30, 40). L is the operator's, not the group's.
    script = EventScript()
    script.insert("a", interval(0, MAX_TIME, {"k": 1, "v": 1}))
    script.cti("a", 25)
    script.insert("a", interval(30, 40, {"k": 2, "v": 1}))
    script.cti("a", MAX_TIME)
    expected = [
        _w(0, 10, k=1, n=1),
        _w(10, 10, k=1, n=1),
        cti(20),
        _w(20, 10, k=1, n=1),
        _w(30, 10, k=1, n=1),
        _w(30, 10, k=2, n=1),
        _w(40, 10, k=1, n=1),
        INF,
    ]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT)},
        Window(Input("a"), 10, 10, ("k",), N),
        lambda s: s["a"].tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        expected,
    )


def test_a_grouped_tumbling_window_counts_an_edge_never_closed_up_to_the_last_cti(app):
    # k=1: START edge at 0, never closed; k=2: [5, 12) (START edge closed at 12); CTI 25, +inf.
    # CTI 25: k=1 in [0, 10), [10, 20); k=2 in [0, 10), [10, 20); output CTI 20.
    # L = max(0, 5, 12, CTI 25) = 25: at +inf k=1 counts in [20, 30) too (the last finite CTI
    # counts; the rule before took max(latest start/end - 1, CTI - size) = 15: no [20, 30)).
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.insert("a", edge_start(5, {"k": 2, "v": 1}))
    script.insert("a", edge_end(5, 12, {"k": 2, "v": 1}))
    script.cti("a", 25)
    script.cti("a", MAX_TIME)
    expected = [
        _w(0, 10, k=1, n=1),
        _w(0, 10, k=2, n=1),
        _w(10, 10, k=1, n=1),
        _w(10, 10, k=2, n=1),
        cti(20),
        _w(20, 10, k=1, n=1),
        INF,
    ]
    _agree(
        app,
        script,
        {"a": (EventShape.EDGE, EXPLICIT)},
        Window(Input("a"), 10, 10, ("k",), N),
        lambda s: s["a"].tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        expected,
    )


def test_a_hopping_window_counts_an_interval_to_inf_up_to_the_latest_finite_moment(app):
    # [0, +inf); CTIs 25, +inf; size 10, hop 5: windows [5j, 5j + 10). The event overlaps every
    # window with ws >= -5. CTI 25 completes ws + 10 <= 25: ws = -5, 0, 5, 10, 15; output CTI
    # = the smallest ws with ws + 10 > 25 = 20. L = 25: at +inf every window starting at or
    # before 25 completes: ws = 20, 25.
    script = EventScript()
    script.insert("a", interval(0, MAX_TIME, {"k": 1, "v": 1}))
    script.cti("a", 25)
    script.cti("a", MAX_TIME)
    first = [_w(ws, 10, n=1) for ws in (-5, 0, 5, 10, 15)]
    expected = [*first, cti(20), _w(20, 10, n=1), _w(25, 10, n=1), INF]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT)},
        Window(Input("a"), 10, 5, (), N),
        lambda s: s["a"].hopping_window(TICK * 10, TICK * 5).aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        expected,
    )


def test_a_grouped_hopping_window_counts_an_edge_never_closed_up_to_the_last_cti(app):
    # k=1: START edge at 0, never closed; k=2: [3, 7); CTIs 25, +inf; size 10, hop 5.
    # CTI 25: k=1 in ws = -5, 0, 5, 10, 15; k=2 ([3, 7)) in ws = -5, 0, 5; output CTI 20.
    # L = max(0, 3, 7, 25) = 25: at +inf k=1 in ws = 20, 25 (the rule before: none).
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.insert("a", edge_start(3, {"k": 2, "v": 1}))
    script.insert("a", edge_end(3, 7, {"k": 2, "v": 1}))
    script.cti("a", 25)
    script.cti("a", MAX_TIME)
    first = [_w(ws, 10, k=k, n=1) for ws in (-5, 0, 5) for k in (1, 2)]
    first += [_w(ws, 10, k=1, n=1) for ws in (10, 15)]
    expected = [*first, cti(20), _w(20, 10, k=1, n=1), _w(25, 10, k=1, n=1), INF]
    _agree(
        app,
        script,
        {"a": (EventShape.EDGE, EXPLICIT)},
        Window(Input("a"), 10, 5, ("k",), N),
        lambda s: (
            s["a"].hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(n=F.count("*"))
        ),
        EventShape.INTERVAL,
        expected,
    )


def test_a_window_over_a_join_counts_a_pair_to_inf_up_to_the_latest_finite_moment(app):
    # a: [0, +inf) k=1; b: [0, +inf) k=1; CTIs 25 then +inf on both. The pair is [0, +inf)
    # (pushed by the join to its window). The join's CTI is min(a, b): 25 after b's 25, +inf
    # after b's +inf. Tumbling 10 per k: [0, 10), [10, 20) at 25, output CTI 20; L = 25, so
    # [20, 30) at +inf.
    script = EventScript()
    script.insert("a", interval(0, MAX_TIME, {"k": 1, "v": 1}))
    script.insert("b", interval(0, MAX_TIME, {"k": 1, "v": 2}))
    script.cti("a", 25)
    script.cti("b", 25)
    script.cti("a", MAX_TIME)
    script.cti("b", MAX_TIME)
    expected = [_w(0, 10, k=1, n=1), _w(10, 10, k=1, n=1), cti(20), _w(20, 10, k=1, n=1), INF]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT), "b": (EventShape.INTERVAL, EXPLICIT)},
        Window(Join(Input("a"), Input("b"), ("k",)), 10, 10, ("k",), N),
        lambda s: (
            s["a"]
            .join(s["b"], on="k")
            .tumbling_window(TICK * 10)
            .group_by("k")
            .aggregate(n=F.count("*"))
        ),
        EventShape.INTERVAL,
        expected,
    )


def test_a_duration_that_saturates_at_inf_counts_up_to_the_latest_finite_moment(app):
    # [0, 5) with duration +inf ticks: end = 0 + 2**63 - 1 saturates at +inf, so [0, +inf):
    # then as the first case: [0, 10), [10, 20) at CTI 25, output CTI 20, [20, 30) at +inf.
    script = EventScript()
    script.insert("a", interval(0, 5, {"k": 1, "v": 1}))
    script.cti("a", 25)
    script.cti("a", MAX_TIME)
    expected = [_w(0, 10, n=1), _w(10, 10, n=1), cti(20), _w(20, 10, n=1), INF]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT)},
        Window(AlterEventDuration(Input("a"), MAX_TIME), 10, 10, (), N),
        lambda s: (
            s["a"]
            .alter_event_duration(TICK * MAX_TIME)
            .tumbling_window(TICK * 10)
            .aggregate(n=F.count("*"))
        ),
        EventShape.INTERVAL,
        expected,
    )


# -- shifts that would cross +-inf -------------------------------------------------------------


def test_a_shift_past_max_time_saturates_and_drops_the_events_that_land_at_inf(app):
    # shift +10. CTI MAX-30 -> MAX-20. [MAX-15, MAX-2) -> [MAX-5, +inf): kept (its end
    # saturates). point MAX-5 -> start MAX+5 saturates at +inf: dropped, counted (1). point
    # MAX-20 -> [MAX-10, MAX-9). CTI MAX-3 -> MAX+7 saturates: the CTI +inf, which releases
    # both kept events (sorted by start). Guards against: Spark's ARITHMETIC_OVERFLOW.
    script = EventScript()
    script.cti("a", MAX_TIME - 30)
    script.insert("a", interval(MAX_TIME - 15, MAX_TIME - 2, {"k": 1, "v": 1}))
    script.insert("a", point(MAX_TIME - 5, {"k": 1, "v": 2}))
    script.insert("a", point(MAX_TIME - 20, {"k": 1, "v": 3}))
    script.cti("a", MAX_TIME - 3)
    expected = [
        cti(MAX_TIME - 20),
        interval(MAX_TIME - 10, MAX_TIME - 9, {"k": 1, "v": 3}),
        interval(MAX_TIME - 5, MAX_TIME, {"k": 1, "v": 1}),
        INF,
    ]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT)},
        ShiftEventTime(Input("a"), 10),
        lambda s: s["a"].shift_event_time(TICK * 10),
        EventShape.INTERVAL,
        expected,
        dropped=[1],
    )


def test_a_shifted_start_edge_that_lands_at_inf_is_dropped_with_its_end_edge(app):
    # shift +10. START edge at MAX-20 -> MAX-10, closed at MAX-12 -> MAX-2. START edge at MAX-5
    # -> +inf: dropped, counted once; its END edge (start MAX-5, end MAX-1) lands at the same
    # start and is dropped uncounted. EDGE consumer at the stop's CTI +inf.
    script = EventScript()
    script.insert("a", edge_start(MAX_TIME - 20, {"k": 1, "v": 1}))
    script.insert("a", edge_start(MAX_TIME - 5, {"k": 1, "v": 2}))
    script.insert("a", edge_end(MAX_TIME - 5, MAX_TIME - 1, {"k": 1, "v": 2}))
    script.insert("a", edge_end(MAX_TIME - 20, MAX_TIME - 12, {"k": 1, "v": 1}))
    expected = [
        edge_start(MAX_TIME - 10, {"k": 1, "v": 1}),
        edge_end(MAX_TIME - 10, MAX_TIME - 2, {"k": 1, "v": 1}),
        INF,
    ]
    _agree(
        app,
        script,
        {"a": (EventShape.EDGE, EXPLICIT)},
        ShiftEventTime(Input("a"), 10),
        lambda s: s["a"].shift_event_time(TICK * 10),
        EventShape.EDGE,
        expected,
        dropped=[1],
    )


def test_a_shift_past_min_time_drops_the_events_that_land_at_minus_inf(app):
    # shift -10. CTI MIN+5 -> MIN-5 saturates at -inf: not emitted (not above -inf). point
    # MIN+5 -> start -inf: dropped. point MIN+20 -> [MIN+10, MIN+11). [MIN+8, MIN+30) -> start
    # MIN-2 saturates at -inf: dropped (2 in all). The stop's +inf releases the one kept.
    # Guards against: point(-9223372036854775808) is delivered.
    script = EventScript()
    script.cti("a", MIN_TIME + 5)
    script.insert("a", point(MIN_TIME + 5, {"k": 1, "v": 1}))
    script.insert("a", point(MIN_TIME + 20, {"k": 1, "v": 2}))
    script.insert("a", interval(MIN_TIME + 8, MIN_TIME + 30, {"k": 1, "v": 3}))
    expected = [interval(MIN_TIME + 10, MIN_TIME + 11, {"k": 1, "v": 2}), INF]
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, EXPLICIT)},
        ShiftEventTime(Input("a"), -10),
        lambda s: s["a"].shift_event_time(-TICK * 10),
        EventShape.INTERVAL,
        expected,
        dropped=[2],
    )


def test_a_start_edge_that_lands_at_inf_is_dropped_and_never_held_while_empty_ones_are_cancelled(
    app,
):
    # alter_event_lifetime(f, 5), f(t) = +inf from 1000 on, t below (non-decreasing), ADJUST,
    # explicit CTIs; the START edges are held until a CTI passes their start ("Empty
    # lifetimes"). CTI 100 -> 100. n1's START edge at 50 is adjusted to 100: held. n4's at 1000
    # lands at +inf: dropped, counted (1), never held. n1's late END edge (70 < 100) closes it
    # at 100: [100, 100), empty: cancels the held n1. n2's START edge at 60 -> 100: held. n4's
    # END edge lands at +inf too: dropped uncounted. CTI 150 passes 100: n2 leaves as [100, 105)
    # at that CTI's position; output CTI 150. The stop's +inf: nothing held is left to release.
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, {"k": 1, "v": 1}))
    script.insert("a", edge_start(1000, {"k": 4, "v": 4}))
    script.insert("a", edge_end(50, 70, {"k": 1, "v": 1}))
    script.insert("a", edge_start(60, {"k": 2, "v": 2}))
    script.insert("a", edge_end(1000, 1010, {"k": 4, "v": 4}))
    script.cti("a", 150)
    expected = [cti(100), interval(100, 105, {"k": 2, "v": 2}), cti(150), INF]
    adjust = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(10**6, TICK * 0, True), None, AdvanceTimePolicy.ADJUST
    )
    _agree(
        app,
        script,
        {"a": (EventShape.EDGE, adjust)},
        AlterEventLifetime(Input("a"), lambda t: MAX_TIME if t >= 1000 else t, 5),
        lambda s: s["a"].alter_event_lifetime(
            lambda c: F.when(c >= 1000, F.lit(MAX_TIME)).otherwise(c), TICK * 5
        ),
        EventShape.INTERVAL,
        expected,
        dropped=[1],
    )


def test_a_start_fn_that_overflows_int64_is_refused_naming_the_operator(app):
    # alter_event_lifetime(s -> s + 10**18, 5). point 0 -> [10**18, 10**18 + 5); CTI 10 ->
    # 10**18 + 10 releases it. point MAX - 10**17: s + 10**18 is beyond int64 (about 9.2e18):
    # Spark's bigint arithmetic in the user's expression cannot saturate, so the run fails with
    # an OverflowError naming the operator and the fix, in the reference and in Spark (1 epoch,
    # one per item: the epochs before the point deliver what the reference does before it).
    # Guards against: Spark's ARITHMETIC_OVERFLOW, and the reference saturates.
    script = EventScript()
    script.insert("a", point(0, {"k": 1, "v": 1}))
    script.cti("a", 10)
    script.insert("a", point(MAX_TIME - 10**17, {"k": 1, "v": 2}))
    inputs = {"a": (EventShape.POINT, EXPLICIT)}
    plan = AlterEventLifetime(Input("a"), lambda t: t + 10**18, 5)
    refused = r"alter_event_lifetime\(start_fn, duration='5 microseconds'\)"
    with pytest.raises(OverflowError, match=refused):
        run_reference(script, [Binding("a", EXPLICIT, COLUMNS)], plan, EventShape.INTERVAL)
    for epochs in (1, [1, 2]):
        sink = f"overflow{epochs!r}"
        stream = Stream.create(
            "a", MemoryInputFactory(), MemoryInputConfig(script=script, schema=SCHEMA), *inputs["a"]
        )
        query = stream.alter_event_lifetime(lambda s: s + F.lit(10**18), TICK * 5).to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
        )
        try:
            with pytest.raises(OverflowError) as failed:
                query.run(epochs=epochs)
        finally:
            app.queries.pop(sink, None)
        message = str(failed.value)
        assert message.startswith(
            "alter_event_lifetime(start_fn, duration='5 microseconds'): start_fn "
        )
        assert f"between 0 and {MAX_TIME - 10**17} ticks" in message or epochs != 1, message
        assert "Fix: " in message, message
        before = [interval(10**18, 10**18 + 5, {"k": 1, "v": 1}), cti(10**18 + 10)]
        assert MemoryOutputFactory.collected(sink) == (before if epochs != 1 else [])


def test_a_start_fn_that_maps_a_later_cti_lower_is_refused_naming_the_operator(app):
    # start_fn(s) = 100 - s, decreasing (§5 wants it non-decreasing): CTI 3 -> 97, CTI 8 -> 92,
    # below 97. The output CTI would fall, and point(5) -> [95, 96) would come before or after
    # CTI 97 with the cut: refused at the epoch that maps CTI 8, in one epoch or in three.
    script = EventScript()
    script.insert("a", point(1, {"k": 1, "v": 1}))
    script.cti("a", 3)
    script.insert("a", point(5, {"k": 1, "v": 2}))
    script.cti("a", 8)
    plan = AlterEventLifetime(Input("a"), lambda t: 100 - t, 1)
    with pytest.raises(ValueError, match=r"maps the CTI at 8 ticks to 92, below 97"):
        run_reference(script, [Binding("a", EXPLICIT, COLUMNS)], plan, EventShape.INTERVAL)
    for epochs in (1, [1, 2, 3]):
        sink = f"falls{epochs!r}"
        stream = Stream.create(
            "a",
            MemoryInputFactory(),
            MemoryInputConfig(script=script, schema=SCHEMA),
            EventShape.POINT,
            EXPLICIT,
        )
        query = stream.alter_event_lifetime(lambda s: F.lit(100) - s, TICK).to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
        )
        try:
            with pytest.raises(ValueError) as failed:
                query.run(epochs=epochs)
        finally:
            app.queries.pop(sink, None)
        message = str(failed.value)
        assert message.startswith("alter_event_lifetime(start_fn, duration='1 microsecond'): ")
        assert "maps the CTI at 8 ticks to 92, below 97" in message
        assert "expected a non-decreasing start_fn" in message and "Fix: " in message


# -- windows at the ends of the timeline -------------------------------------------------------
# A window lies between finite moments: -inf < ws and ws + size < +inf (docs/decisions.md,
# "Windows"); the grid's windows beyond do not exist, so events there count in no window, and a
# CTI after which no window is open passes as it is. MIN = -2**63 is 2 mod 10 and 2 mod 5;
# MAX = 2**63 - 1 is 7 mod 10 and 2 mod 5.


def _near_ends_script(shape: EventShape) -> EventScript:
    """CTI -inf (ignored), CTI MIN+1, points at MIN+1 .. MIN+9, CTI MIN+20, points at MAX-18 ..
    MAX-1, CTI MAX-7 (the stop adds +inf); ``k``, ``v`` as in the tests' comments."""
    script = EventScript()

    def at(t: int, k: int, v: int) -> None:
        payload = {"k": k, "v": v}
        script.insert(
            "a", point(t, payload) if shape is EventShape.POINT else interval(t, t + 1, payload)
        )

    script.cti("a", MIN_TIME)
    script.cti("a", MIN_TIME + 1)
    for t, k, v in (
        (MIN_TIME + 1, 1, 1),
        (MIN_TIME + 8, 1, 2),
        (MIN_TIME + 9, 2, 3),
    ):
        at(t, k, v)
    script.cti("a", MIN_TIME + 20)
    for t, k, v in ((MAX_TIME - 18, 1, 4), (MAX_TIME - 17, 1, 5), (MAX_TIME - 8, 2, 6)):
        at(t, k, v)
    for t, k, v in ((MAX_TIME - 7, 1, 7), (MAX_TIME - 1, 2, 8)):
        at(t, k, v)
    script.cti("a", MAX_TIME - 7)
    return script


#: how the window gets its events: partial aggregates from a POINT input's scan (PushedWindow),
#: partial aggregates in Spark (an INTERVAL input: no push), or the events kept (an aggregate
#: that does not merge: count_distinct)
PATHS = {
    "pushed": (EventShape.POINT, lambda: F.count("*"), len),
    "partials": (EventShape.INTERVAL, lambda: F.count("*"), len),
    "events": (
        EventShape.INTERVAL,
        lambda: F.count_distinct("v"),
        lambda rows: len({r["v"] for r in rows}),
    ),
}


#: epochs of the scripts near the ends: after CTI MIN+1, after CTI MIN+20, before CTI MAX-7
CUTS = [2, 6, 11]


def _sum_v(rows: list[dict]) -> int:
    return sum(r["v"] for r in rows)


@pytest.mark.parametrize("path", ["pushed", "events"])
def test_a_grouped_tumbling_window_near_both_ends_of_the_timeline(app, path):
    # tumbling 10 per k, n = count, s = sum(v). Grid starts: MIN+8 is the first above -inf (the
    # grid start MIN-2 is below it); [MAX-17, MAX-7) is the last window ending below +inf.
    # CTI MIN+1: the earliest open window would start at MIN-2, below -inf: the first that
    # exists is MIN+8: output CTI MIN+8 (never a CTI below -inf).
    # point MIN+1 (k1 v1) lies in [MIN-2, MIN+8) only: no window, not counted.
    # MIN+8 (k1 v2), MIN+9 (k2 v3): [MIN+8, MIN+18). CTI MIN+20 completes it; output CTI MIN+18.
    # MAX-18 (k1 v4): [MAX-27, MAX-17). MAX-17 (k1 v5), MAX-8 (k2 v6): [MAX-17, MAX-7).
    # MAX-7 (k1 v7), MAX-1 (k2 v8): [MAX-7, MAX+3) does not exist: not counted.
    # CTI MAX-7 completes [MAX-27, MAX-17) and [MAX-17, MAX-7); no window is open after it:
    # output CTI MAX-7 itself. The stop's +inf (L = MAX-1) completes nothing more.
    shape, count, n = PATHS[path]
    expected = [
        cti(MIN_TIME + 8),
        _w(MIN_TIME + 8, 10, k=1, n=1, s=2),
        _w(MIN_TIME + 8, 10, k=2, n=1, s=3),
        cti(MIN_TIME + 18),
        _w(MAX_TIME - 27, 10, k=1, n=1, s=4),
        _w(MAX_TIME - 17, 10, k=1, n=1, s=5),
        _w(MAX_TIME - 17, 10, k=2, n=1, s=6),
        cti(MAX_TIME - 7),
        INF,
    ]
    _agree(
        app,
        _near_ends_script(shape),
        {"a": (shape, EXPLICIT)},
        Window(Input("a"), 10, 10, ("k",), (("n", n), ("s", _sum_v))),
        lambda s: (
            s["a"].tumbling_window(TICK * 10).group_by("k").aggregate(n=count(), s=F.sum("v"))
        ),
        EventShape.INTERVAL,
        expected,
        cuts=CUTS,
    )


@pytest.mark.parametrize("path", ["pushed", "partials"])
def test_a_grouped_hopping_window_near_both_ends_of_the_timeline(app, path):
    # size 10, hop 5 per k. Grid starts: ... MIN-7, MIN-2 (below -inf), MIN+3 (the first),
    # MIN+8, ...; ... MAX-17, MAX-12 (the last: [MAX-12, MAX-2)), MAX-7 (would end at MAX+3).
    # CTI MIN+1: the earliest open window would be MIN-7: output CTI MIN+3, the first start.
    # point MIN+1: in MIN-7 and MIN-2 only: not counted. MIN+8 (k1 v2), MIN+9 (k2 v3):
    # MIN+3 and MIN+8. CTI MIN+20 completes ws <= MIN+10: MIN+3, MIN+8; output CTI MIN+13.
    # MAX-18 (k1 v4): MAX-27, MAX-22. MAX-17 (k1 v5): MAX-22, MAX-17. MAX-8 (k2 v6): MAX-17,
    # MAX-12. MAX-7 (k1 v7): MAX-12 (MAX-7 does not exist). MAX-1 (k2 v8): MAX-7, MAX-2: none.
    # CTI MAX-7 completes ws <= MAX-17: MAX-27 k1 {v4}; MAX-22 k1 {v4, v5}; MAX-17 k1 {v5} and
    # k2 {v6}; output CTI MAX-12. The stop's +inf (L = MAX-1) completes MAX-12: k1 {v7}, k2 {v6}.
    shape, count, n = PATHS[path]
    expected = [
        cti(MIN_TIME + 3),
        _w(MIN_TIME + 3, 10, k=1, n=1, s=2),
        _w(MIN_TIME + 3, 10, k=2, n=1, s=3),
        _w(MIN_TIME + 8, 10, k=1, n=1, s=2),
        _w(MIN_TIME + 8, 10, k=2, n=1, s=3),
        cti(MIN_TIME + 13),
        _w(MAX_TIME - 27, 10, k=1, n=1, s=4),
        _w(MAX_TIME - 22, 10, k=1, n=2, s=9),
        _w(MAX_TIME - 17, 10, k=1, n=1, s=5),
        _w(MAX_TIME - 17, 10, k=2, n=1, s=6),
        cti(MAX_TIME - 12),
        _w(MAX_TIME - 12, 10, k=1, n=1, s=7),
        _w(MAX_TIME - 12, 10, k=2, n=1, s=6),
        INF,
    ]
    _agree(
        app,
        _near_ends_script(shape),
        {"a": (shape, EXPLICIT)},
        Window(Input("a"), 10, 5, ("k",), (("n", n), ("s", _sum_v))),
        lambda s: (
            s["a"]
            .hopping_window(TICK * 10, TICK * 5)
            .group_by("k")
            .aggregate(n=count(), s=F.sum("v"))
        ),
        EventShape.INTERVAL,
        expected,
        cuts=CUTS,
    )


# -- snapshots ---------------------------------------------------------------------------------


def test_a_snapshot_with_nothing_live_at_its_cti_does_not_stall_a_union(app):
    # a: [0, 10), CTI 200; b: point 150, CTI 200; no +inf at the end (a live query).
    # a's CTI 200: the snapshot [0, 10) is final (10 < 200): (k=1, v=1). No event has
    # start < 200 <= end, so the snapshot's output CTI is 200 itself. The union's CTI is
    # min(200, b's) = 200 after b's CTI: it releases [0, 10) and b's point at 150.
    # Guards against: the snapshot's CTI stays at 10 (its last endpoint) and b's point never leaves.
    script = EventScript()
    script.insert("a", interval(0, 10, {"k": 1, "v": 1}))
    script.cti("a", 200)
    script.insert("b", point(150, {"k": 2, "v": 2}))
    script.cti("b", 200)
    expected = [point(0, {"k": 1, "v": 1}), point(150, {"k": 2, "v": 2}), cti(200)]
    aggregates = (("k", lambda rows: max(r["k"] for r in rows)), ("v", lambda r: len(r)))
    _agree(
        app,
        script,
        {"a": (EventShape.INTERVAL, LIVE), "b": (EventShape.POINT, LIVE)},
        Union((Snapshot(Input("a"), (), aggregates), Input("b"))),
        lambda s: s["a"].snapshot_window().aggregate(k=F.max("k"), v=F.count("*")).union(s["b"]),
        EventShape.POINT,
        expected,
    )


def test_a_snapshot_counts_an_edge_never_closed_in_its_last_snapshot_at_inf(app):
    # START edge at 0 never closed (v=1); [5, 12) (v=2); CTI 25; [30, 40); CTI 50; +inf.
    # CTI 25: endpoints 0, 5, 12, +inf: [0, 5) (n=1) and [5, 12) (n=2) are final; the edge
    # holds 25 back (0 < 25 <= +inf): output CTI = the largest endpoint below 25 = 12.
    # CTI 50: endpoints 0, 5, 12, 30, 40, +inf: [12, 30) (n=1: the edge; [5, 12) has left the
    # state by then, its endpoint 12 has not) and [30, 40) (n=2); output CTI 40.
    # +inf: every snapshot is final, the last [40, +inf) too (n=1: the edge counts up to the
    # snapshot that contains the latest finite moment 50). Guards against: no [40, +inf), and
    # [12, 30) lost when an epoch ends between the CTIs 25 and 50.
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.insert("a", edge_start(5, {"k": 1, "v": 2}))
    script.insert("a", edge_end(5, 12, {"k": 1, "v": 2}))
    script.cti("a", 25)
    script.insert("a", edge_start(30, {"k": 1, "v": 3}))
    script.insert("a", edge_end(30, 40, {"k": 1, "v": 3}))
    script.cti("a", 50)
    script.cti("a", MAX_TIME)
    expected = [
        interval(0, 5, {"n": 1}),
        interval(5, 12, {"n": 2}),
        cti(12),
        interval(12, 30, {"n": 1}),
        interval(30, 40, {"n": 2}),
        cti(40),
        interval(40, MAX_TIME, {"n": 1}),
        INF,
    ]
    _agree(
        app,
        script,
        {"a": (EventShape.EDGE, EXPLICIT)},
        Snapshot(Input("a"), (), N),
        lambda s: s["a"].snapshot_window().aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        expected,
    )
