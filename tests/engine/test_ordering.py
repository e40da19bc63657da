"""Arrival-time policies (semantics §7) on the Spark engine.

* The seed's illustrated example (``tests/ordering_seed.py``, expected values from the seed), event
  by event through the engine's §7 stage in its three settings, in one epoch and cut in three;
  then end to end through a query, output and metrics checked by hand.
* Query-build errors, and one rule each for what the example does not show.
* A differential property: the engine agrees with the reference interpreter on generated ordered
  inputs, in one epoch and cut at random arrival stamps.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

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
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventOrderingSettings,
    EventShape,
    OrderingAction,
    QueryBuildError,
    cti,
    point,
)
from ctistream.engine.ordering import OrderingState, order_epoch
from ctistream.engine.rows import EpochCache
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from pyspark.sql import functions as F

from tests import ordering_seed as seed
from tests.reference import (
    Binding,
    Input,
    Join,
    MergeSubstreams,
    ShiftEventTime,
    Union,
    Window,
    run_reference,
)

_names = itertools.count()
M = seed.ticks


def _query(app, script, ordering, shape=EventShape.POINT, schema=seed.SCHEMA, settings=None):
    name = f"ord{next(_names)}"
    stream = Stream.create(
        "in",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=schema),
        shape,
        settings,
        ordering=ordering,
    )
    query = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    return name, query


def _run(app, script, ordering, epochs=1, **kwargs):
    name, query = _query(app, script, ordering, **kwargs)
    try:
        query.run(epochs=epochs)
        return MemoryOutputFactory.collected(name), query.metrics()
    finally:
        app.queries.pop(name, None)


# -- the seed's illustrated example, event by event ---------------------------------------------
def seed_script(end: bool = False) -> EventScript:
    script = EventScript()
    for i, (_, arrival, _) in enumerate(seed.EVENTS):
        # The adapter's own start is not used: the event time comes from the payload.
        script.insert("in", point(0, seed.payload(i)), arrival=seed.at(arrival))
    if end:
        script.end("in", arrival=seed.at(30))
    return script


def stage_traces(app, ordering, *cuts) -> list[list[dict]]:
    """Run the engine's §7 stage over the seed's events epoch by epoch, as the runtime does,
    carrying its state, once per cut (arrival minutes); return its decision for every event."""
    name, query = _query(app, seed_script(), ordering)
    traces = []
    try:
        raw = query._runtime._read_all()[0]
        for cut in cuts:
            state, trace = OrderingState.initial(1), []
            bounds = [M(c) for c in cut]
            for lo, hi in zip([None, *bounds], [*bounds, None], strict=True):
                part = raw
                if lo is not None:
                    part = part.filter(F.col("__arr") >= lo)
                if hi is not None:
                    part = part.filter(F.col("__arr") < hi)
                cache = EpochCache()
                try:
                    _, state = order_epoch(ordering, part, state, cache, trace)
                finally:
                    cache.release()
            traces.append(trace)
        return traces
    finally:
        app.queries.pop(name, None)


@pytest.mark.parametrize(
    ("early", "over", "expected"),
    [
        (True, None, seed.WITH_EARLY),
        (False, None, seed.WITHOUT_EARLY),
        (True, "device_id", seed.SUBSTREAMS),
    ],
    ids=["with-early-policy", "without-early-policy", "substreams"],
)
def test_the_seeds_illustrated_example_event_by_event(app, early, over, expected):
    # In one epoch, and in three (cut before the arrivals 12:13 and 12:19).
    for trace in stage_traces(app, seed.settings(early, over), (), (13, 19)):
        assert [t["event_time"] for t in trace] == [M(e) for e, _, _ in seed.EVENTS]
        assert [t["arrival"] for t in trace] == [M(a) for _, a, _ in seed.EVENTS]
        got = [(t["action"], t["start"], t["watermark"]) for t in trace]
        want = [(a, None if s is None else M(s), M(w)) for a, s, w in expected]
        assert got == want
        if over is None:
            # The watermark is a CTI right after each event that raises it.
            rises = [w for i, (_, _, w) in enumerate(expected) if i == 0 or w > expected[i - 1][2]]
            assert [t["cti"] for t in trace if t["cti"] is not None] == [M(w) for w in rises]
        else:
            assert [t["key"] for t in trace] == [d for _, _, d in seed.EVENTS]
            assert [t["cti"] for t in trace] == [M(c) for c in seed.SUBSTREAM_INPUT_CTI]


def _p(i: int, start: int):
    return point(M(start), seed.payload(i))


# With the early policy, end of input flushing: CTIs at the watermark rises 5, 6, 17, 18, 21
# (WITH_EARLY), each releasing the events with an application time before it, sorted by (start,
# payload); the event-time field keeps its original value (e6 leaves at 17 with event_time 12:12).
SEED_OUTPUT = [
    cti(M(5)),
    cti(M(6)),
    _p(0, 7),
    _p(1, 8),  # device2 before device3 at 12:08
    _p(3, 8),
    cti(M(17)),
    _p(6, 17),  # device2 (12:17) before device3 (adjusted from 12:12)
    _p(5, 17),
    cti(M(18)),
    _p(8, 18),  # adjusted from 12:16
    _p(4, 19),
    _p(7, 20),
    cti(M(21)),
    _p(10, 22),
    _p(11, 22),  # late, adjusted from 12:21
    _p(9, 23),
    cti(MAX_TIME),
]

# Substreams: the input's CTI is arrival - 5 minutes at each event (SUBSTREAM_INPUT_CTI); a
# device's own CTI (per-key CTIs, docs/decisions.md) releases its points earlier when its
# watermark is ahead of the input's CTI.
SEED_SUBSTREAM_OUTPUT = [
    cti(M(2)),
    cti(M(3)),
    cti(M(6)),
    _p(0, 7),
    cti(M(8)),
    _p(1, 8),
    _p(3, 8),
    cti(M(11)),
    cti(M(12)),
    _p(5, 12),  # device3 kept its own time: its watermark was 10
    cti(M(13)),
    cti(M(14)),
    _p(6, 17),  # device2's own CTI (its watermark, 12:18) passes it at arrival 12:19
    cti(M(16)),
    _p(8, 16),
    cti(M(17)),
    _p(7, 20),  # device2's own CTI (12:21) at arrival 12:22, before the input's reaches 12:19
    cti(M(19)),
    _p(4, 19),
    cti(M(22)),
    _p(10, 22),
    _p(11, 22),
    _p(9, 23),
    cti(MAX_TIME),
]


@pytest.mark.parametrize(
    ("over", "expected"),
    [(None, SEED_OUTPUT), ("device_id", SEED_SUBSTREAM_OUTPUT)],
    ids=["one-watermark", "substreams"],
)
def test_the_seeds_example_end_to_end_with_metrics(app, over, expected):
    ordering = seed.settings(True, over, flush=True)
    out, metrics = _run(app, seed_script(end=True), ordering)
    assert out == expected
    cut, _ = _run(app, seed_script(end=True), ordering, epochs=[M(13), M(21)])
    assert cut == expected
    m = metrics["in"]
    assert m["events_in"] == 12
    assert m["dropped_by_reason"] == {
        "cti-violation": 0,
        "early": 1,
        "late": 0,
        "out-of-order": 0,
        "no-event-time": 0,
    }
    late_ooo = (1, 2) if over is None else (1, 0)
    assert (m["adjusted_by_reason"]["late"], m["adjusted_by_reason"]["out-of-order"]) == late_ooo
    assert (m["dropped"], m["adjusted"]) == (1, sum(late_ooo))
    assert (m["cti"], m["cti_ticks"]) == ("+inf", MAX_TIME)  # flushed
    assert m["watermark_delay"] is None
    if over is None:
        assert m["ctis_generated"] == 6  # five watermark rises and the flush
        assert "keys" not in m
        return
    assert m["ctis_generated"] == 13
    keys = m["keys"]
    assert {k: (v["events_in"], v["watermark_ticks"]) for k, v in keys.items()} == {
        "device1": (3, M(17)),
        "device2": (5, M(21)),
        "device3": (4, M(19)),
    }
    assert keys["device1"]["dropped_by_reason"]["early"] == 1
    assert keys["device3"]["adjusted_by_reason"] == {"late": 1, "out-of-order": 0}
    delay = keys["device2"]["watermark_delay"]
    assert abs(delay - (datetime.now(UTC) - seed.at(21))) < timedelta(minutes=5)


# -- query-build errors -------------------------------------------------------------------------
def _script_t() -> EventScript:
    s = EventScript()
    s.insert("in", point(0, {"t": 1, "k": "x"}), arrival=1)
    return s


@pytest.mark.parametrize(
    ("ordering", "kwargs", "message"),
    [
        (EventOrderingSettings(event_time="t"), {"shape": EventShape.INTERVAL}, "point events"),
        (
            EventOrderingSettings(event_time="t"),
            {"settings": AdvanceTimeSettings.increasing_start_time()},
            "both EventOrderingSettings and AdvanceTimeSettings with generation",
        ),
        (EventOrderingSettings(event_time="ts"), {}, r"event_time='ts'\): no column 'ts'"),
        (EventOrderingSettings(event_time="k"), {}, "'k' is string; expected timestamp"),
        (EventOrderingSettings(event_time="t", over="dev"), {}, r"over='dev'\): no column 'dev'"),
    ],
)
def test_what_ordering_cannot_do_fails_when_the_query_is_built(app, ordering, kwargs, message):
    with pytest.raises(QueryBuildError, match=message):
        _query(app, _script_t(), ordering, schema="t bigint, k string", **kwargs)


def test_a_template_input_takes_ordering_from_the_binder(app):
    from ctistream.bindings import QueryBinder, QueryTemplate

    template = QueryTemplate("t", Stream.input("in", "t bigint, k string"))

    def binder(shape):
        return (
            QueryBinder(template)
            .bind_producer(
                "in",
                MemoryInputFactory(),
                MemoryInputConfig(script=_script_t()),
                shape,
                ordering=EventOrderingSettings(event_time="t", over="k"),
            )
            .add_consumer("out", MemoryOutputFactory(), MemoryOutputConfig(name="t"), shape)
        )

    name = f"ord{next(_names)}"
    query = app.create_query(name, binder(EventShape.POINT))
    try:
        [bound] = query._runtime.inputs
        assert bound.spec.ordering == EventOrderingSettings(event_time="t", over="k")
    finally:
        app.queries.pop(name, None)
    with pytest.raises(QueryBuildError, match="point events"):
        app.create_query(f"ord{next(_names)}", binder(EventShape.INTERVAL))


def test_bad_ordering_settings_say_what_was_expected_and_how_to_fix():
    with pytest.raises(ValidationError, match=r"zero or positive; got .*-1000000 ticks.*Fix"):
        EventOrderingSettings(late_arrival_tolerance=timedelta(seconds=-1))
    with pytest.raises(ValidationError, match=r"needs an event-time column.*Fix"):
        EventOrderingSettings(event_time=None, over="device_id")
    with pytest.raises(ValidationError, match=r"DROP or OrderingAction\.ADJUST; got .MOVE."):
        EventOrderingSettings(action="MOVE")
    with pytest.raises(TypeError, match="ordering must be EventOrderingSettings"):
        Stream.create("x", MemoryInputFactory(), None, EventShape.POINT, ordering={"a": 1})
    s = EventOrderingSettings(out_of_order_tolerance=TICK * 3, early_arrival_window=None)
    assert (s.out_of_order_ticks, s.early_ticks, s.late_ticks) == (3, None, 5_000_000)
    assert s.event_time == "event_time" and s.action is OrderingAction.ADJUST
    with pytest.raises(ValidationError):
        s.over = "k"  # frozen


# -- rules the example does not show ------------------------------------------------------------
def test_arrival_time_as_application_time_over_two_partitions(app):
    # event_time=None: each event's time is its arrival; the input's CTI is the smaller of the
    # partitions' largest arrivals. p: 10, 20; q: 15 -> CTIs 10 (once q has 15), 15 (after p's 20).
    s = EventScript()
    s.insert("in", point(999, {"k": "a"}), arrival=10, partition="p")
    s.insert("in", point(999, {"k": "b"}), arrival=15, partition="q")
    s.insert("in", point(999, {"k": "c"}), arrival=20, partition="p")
    out, m = _run(app, s, EventOrderingSettings(event_time=None), schema="k string")
    assert out == [cti(10), point(10, {"k": "a"}), cti(15)]
    assert m["in"]["ctis_generated"] == 3  # 10 (p), 15 (q), 20 (p)


def test_drop_action_and_explicit_ctis_and_the_query_watermark_delay(app):
    # late 3, DROP: t=2 arriving at 10 is dropped as late (yet raises the watermark to 2); t=9
    # kept (watermark 9); the explicit CTI 12 then drops t=11 as a CTI violation (a point before
    # the CTI is dropped under either policy); t=13 kept -> watermark 13.
    s = EventScript()
    for t, arrival in ((2, 10), (9, 10)):
        s.insert("in", point(0, {"t": t}), arrival=arrival)
    s.cti("in", 12, arrival=11)
    s.insert("in", point(0, {"t": 11}), arrival=12)
    s.insert("in", point(0, {"t": 13}), arrival=13)
    ordering = EventOrderingSettings(
        event_time="t", late_arrival_tolerance=TICK * 3, action=OrderingAction.DROP
    )
    name, query = _query(app, s, ordering, schema="t bigint")
    try:
        query.run()
        out = MemoryOutputFactory.collected(name)
        m = query.metrics()["in"]
        assert out == [cti(2), cti(9), point(9, {"t": 9}), cti(12), cti(13)]
        assert m["dropped_by_reason"]["late"] == 1
        assert m["dropped_by_reason"]["cti-violation"] == 1
        assert (m["events_in"], m["dropped"], m["ctis_explicit"]) == (4, 2, 1)
        expected = datetime.now(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
        assert abs(query.watermark_delay() - expected) < timedelta(minutes=5)
        assert abs(m["watermark_delay"] - expected) < timedelta(minutes=5)
    finally:
        app.queries.pop(name, None)


# -- the engine agrees with the reference -------------------------------------------------------
COLUMNS = ("k", "v", "et")
SCHEMA = "k bigint, v bigint, et bigint"


@st.composite
def ordered_cases(draw):
    """An ordered input ``a`` (1-2 partitions, explicit arrivals, event times around them, some
    explicit CTIs, maybe an end) and maybe a StreamInsight input ``b`` that imports a's CTIs or
    that ``a`` imports from; a plan over them."""
    over = draw(st.sampled_from([None, "k"]))
    by_arrival = over is None and draw(st.integers(0, 4)) == 0
    ordering = EventOrderingSettings(
        event_time=None if by_arrival else "et",
        out_of_order_tolerance=TICK * draw(st.integers(0, 4)),
        late_arrival_tolerance=TICK * draw(st.integers(0, 8)),
        early_arrival_window=draw(st.one_of(st.none(), st.integers(0, 6).map(TICK.__mul__))),
        action=draw(st.sampled_from(list(OrderingAction))),
        over=over,
        flush_on_stop=draw(st.booleans()),
    )
    other = draw(st.sampled_from(["-", "b imports a", "a imports b"]))
    policy = draw(st.sampled_from(list(AdvanceTimePolicy)))
    a_settings, b_settings = None, None
    if other == "b imports a":
        b_settings = AdvanceTimeSettings(None, AdvanceTimeImportSettings("a"), policy)
    elif other == "a imports b":
        a_settings = AdvanceTimeSettings(None, AdvanceTimeImportSettings("b"), policy)
        b_settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(2, TICK, True), None, policy)
    names = ["a"] if other == "-" else ["a", "b"]
    parts = [str(p) for p in range(draw(st.integers(1, 2)))]
    script = EventScript()
    script.declare("a", *parts)
    arrival, ended, stamps = 0, set(), []
    for _ in range(draw(st.integers(1, 16))):
        live = [n for n in names if n not in ended]
        if not live:
            break
        arrival += draw(st.integers(0, 3))
        name = draw(st.sampled_from(live))
        what = draw(st.sampled_from(["event"] * 5 + ["cti", "end"]))
        stamps.append(arrival)
        if what == "end" and draw(st.booleans()):
            script.end(name, arrival=arrival)
            ended.add(name)
            continue
        part = draw(st.sampled_from(parts)) if name == "a" else "0"
        if what == "cti":
            script.cti(name, arrival + draw(st.integers(-10, 4)), arrival=arrival, partition=part)
            continue
        et = None if draw(st.integers(0, 11)) == 0 else arrival + draw(st.integers(-12, 9))
        payload = {"k": draw(st.integers(0, 2)), "v": draw(st.integers(0, 3)), "et": et}
        start = draw(st.integers(0, 40)) if name == "a" else arrival + draw(st.integers(-3, 3))
        script.insert(name, point(start, payload), arrival=arrival, partition=part)
    plan_kind = draw(st.sampled_from(["input", "union", "window", "shifted-window", "join"]))
    distinct = sorted(set(stamps))
    cuts = []
    if len(distinct) > 1:
        cuts = sorted(draw(st.sets(st.sampled_from(distinct[1:]), min_size=1, max_size=2)))
    return ordering, names, a_settings, b_settings, script, plan_kind, cuts


def _compare_counts(metrics: dict, expected: dict) -> None:
    for name, want in expected.items():
        got = metrics[name]
        for key, value in want.items():
            if key == "keys":
                fields = ("events_in", "dropped_by_reason", "adjusted_by_reason")
                got_keys = {
                    k: {**{f: v[f] for f in fields}, "watermark": v["watermark_ticks"]}
                    for k, v in got["keys"].items()
                }
                assert got_keys == value, name
            else:
                assert got[key] == value, (name, key)


@given(case=ordered_cases())
def test_ordered_inputs_match_the_reference(app, case):
    ordering, names, a_settings, b_settings, script, plan_kind, cuts = case
    bindings = [Binding("a", a_settings, COLUMNS, ordering)]
    if "b" in names:
        bindings.append(Binding("b", b_settings, COLUMNS))
    # "a" may be split into substreams (per-key CTIs) and "b" not: their union merges them on
    # purpose; alone, "a" keeps its keyed CTIs through the shift and the window to egress.
    plan = Input("a")
    other = "b" if "b" in names else "a"
    if plan_kind == "join":  # the lookup case: keyed a joined on its key (with b, or itself)
        plan = Join(Input("a"), Input(other), ("k",))
    elif "b" in names:
        plan = Union((MergeSubstreams(Input("a")), Input("b")))
    if plan_kind == "shifted-window":
        plan = ShiftEventTime(plan, 3)
    if plan_kind in ("window", "shifted-window"):
        plan = Window(plan, 10, 5, ("k",), (("n", len),))
    expected = run_reference(script, bindings, plan, EventShape.POINT)

    def build(streams):
        stream = streams["a"]
        if plan_kind == "join":
            return stream.join(streams[other], on="k")
        if "b" in names:
            stream = stream.merge_substreams().union(streams["b"])
        if plan_kind == "shifted-window":
            stream = stream.shift_event_time(TICK * 3)
        if plan_kind in ("window", "shifted-window"):
            return (
                stream.hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(n=F.count("*"))
            )
        return stream

    for epochs in (1, cuts or 1):
        streams = {
            "a": Stream.create(
                "a",
                MemoryInputFactory(),
                MemoryInputConfig(script=script, schema=SCHEMA),
                EventShape.POINT,
                a_settings,
                ordering=ordering,
            )
        }
        if "b" in names:
            streams["b"] = Stream.create(
                "b",
                MemoryInputFactory(),
                MemoryInputConfig(script=script, schema=SCHEMA),
                EventShape.POINT,
                b_settings,
            )
        sink = f"ordd{next(_names)}"
        query = build(streams).to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.POINT
        )
        try:
            query.run(epochs=epochs)
            assert MemoryOutputFactory.collected(sink) == expected.output, f"epochs={epochs}"
            _compare_counts(query.metrics(), expected.counts)
        finally:
            app.queries.pop(sink, None)
