"""Group and Apply on Spark (semantics §5): the hand-worked timelines of
``tests/reference/test_group_apply.py`` in one and several epochs, the state it keeps, the
build errors with their fix, and ``explain()``."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest
from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
from ctistream.adapters.kafka import KafkaInputFactory
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
    AdapterAdvanceTimeSettings,
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
from ctistream.engine.errors import QueryBuildError
from hypothesis import given
from pyspark.sql import functions as F

from tests.adapters import test_kafka as kf
from tests.adapters.test_files_query import iso, read_output
from tests.engine.test_ordering import COLUMNS as ORDERED_COLUMNS
from tests.engine.test_ordering import SCHEMA as ORDERED_SCHEMA
from tests.engine.test_ordering import ordered_cases
from tests.harness import In, killed, spark_run
from tests.reference import (
    Binding,
    GroupApply,
    Input,
    MergeSubstreams,
    SessionWindow,
    ShiftEventTime,
    Union,
    Window,
    run_reference,
)
from tests.reference import test_group_apply as hand

_names = itertools.count()

EVERY = hand.EVERY
#: an adapter's settings: a CTI at every event's start, later events dropped, +inf on stop
EVERY_EVENT = AdapterAdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
)


@pytest.mark.parametrize("epochs", [1, [2, 4]])
def test_a_window_per_group_gives_the_hand_worked_timeline(app, epochs):
    def build(s):
        return s["a"].group_apply(
            "k",
            lambda g: (
                g.where(F.col("v") > 1)
                .tumbling_window(TICK * 10)
                .aggregate(n=F.count("*"), s=F.sum("v"))
            ),
        )

    inputs = {"a": In(EventShape.POINT, EVERY)}
    out, _ = spark_run(app, hand.window_script(), inputs, build, EventShape.INTERVAL, epochs)
    assert out == hand.WINDOW_OUT


@pytest.mark.parametrize("epochs", [1, [3, 6]])
def test_a_join_against_another_stream_meets_all_of_its_events_in_every_group(app, epochs):
    def build(s):
        return s["a"].group_apply(
            "k",
            lambda g: g.join(s["r"], on="id").tumbling_window(TICK * 10).aggregate(n=F.count("*")),
        )

    inputs = {"a": In(EventShape.POINT, EVERY), "r": In(EventShape.INTERVAL, EVERY)}
    out, _ = spark_run(app, hand.join_script(), inputs, build, EventShape.INTERVAL, epochs)
    assert out == hand.JOIN_OUT


@pytest.mark.parametrize("epochs", [1, [2]])
def test_a_join_of_two_streams_of_the_group_pairs_events_of_the_same_group_only(app, epochs):
    def build(s):
        return s["a"].group_apply(
            "k", lambda g: g.where(F.col("v") < 3).join(g.where(F.col("v") >= 3), on="id")
        )

    inputs = {"a": In(EventShape.POINT, EVERY)}
    out, _ = spark_run(app, hand.self_join_script(), inputs, build, EventShape.POINT, epochs)
    assert out == hand.SELF_JOIN_OUT


def test_with_no_events_the_output_cti_is_fn_over_an_empty_input(app):
    def build(s):
        return s["a"].group_apply(
            "k", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"))
        )

    inputs = {"a": In(EventShape.POINT, EVERY, schema="k string, v bigint")}
    out, _ = spark_run(app, hand.ctis_only_script(), inputs, build, EventShape.POINT, [1])
    assert out == hand.CTIS_ONLY_OUT


@pytest.mark.parametrize("epochs", [1, [2, 4]])
def test_sessions_inside_group_apply_are_each_groups_own_and_the_cti_waits_for_the_oldest(
    app, epochs
):
    # Points (lifetime [t, t+1)) of groups x at 0, 2, 9 and y at 1, 8; a CTI at each start,
    # +inf at the stop. fn: session_window(3) with no group_by: per group its own sessions.
    #   x: 0 opens [0, reach 1+3=4); 2 < 4 joins (reach 3+3=6); 9 >= 6 opens [9, 13).
    #   y: 1 opens [1, 5); 8 >= 5 opens [8, 12).
    # CTI rule per group: min(c, start of the group's earliest open session); the output CTI is
    # the minimum over groups (an empty group gives c):
    #   c=0: x open from 0 -> 0.  c=1, c=2: x open from 0 -> 0 again (not emitted).
    #   c=8: x's [0, 6) and y's [1, 5) closed (end <= 8) and released; y open from 8 -> 8.
    #   c=9: x open from 9, y from 8 -> 8 (not emitted).  +inf: y's [8, 12) and x's [9, 13).
    # Over all events at once (no groups) 0, 1, 2 would make one session [0, 6) of 3 events.
    script = EventScript()
    for k, t in (("x", 0), ("y", 1), ("x", 2), ("y", 8), ("x", 9)):
        script.insert("a", point(t, {"k": k, "v": t}))
    hand_worked = [
        cti(0),
        interval(0, 6, {"k": "x", "n": 2}),
        interval(1, 5, {"k": "y", "n": 1}),
        cti(8),
        interval(8, 12, {"k": "y", "n": 1}),
        interval(9, 13, {"k": "x", "n": 1}),
        cti(MAX_TIME),
    ]
    plan = GroupApply(Input("a"), ("k",), lambda g: SessionWindow(g, 3, None, (), (("n", len),)))
    expected = run_reference(script, [Binding("a", EVERY, ("k", "v"))], plan, EventShape.INTERVAL)
    assert expected.output == hand_worked

    def build(s):
        return s["a"].group_apply(
            "k", lambda g: g.session_window(TICK * 3).aggregate(n=F.count("*"))
        )

    inputs = {"a": In(EventShape.POINT, EVERY, schema="k string, v bigint")}
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
    assert out == hand_worked


def test_sessions_inside_group_apply_take_an_open_edge_that_holds_its_groups_session(app):
    # Edges; CTIs only where the script says, and +inf at the stop. fn: session_window(3).
    #   x: an open START edge at 1 reaches +inf until its END edge at 12: reach 15, [1, 15).
    #   y: [2, 3) reaches 6; [6, 7) starts at 6 >= 6: a new session, [2, 6) and [6, 10).
    # CTI per group min(c, start of its earliest open session), the output CTI their minimum:
    #   c=5: x open from 1, y from 2 -> 1.
    #   c=10: y's [2, 6) and [6, 10) closed and released; x still open from 1 -> 1 (not
    #   emitted).  c=20: x's [1, 15) closed and released -> 20.  Then +inf.
    # The open edge holds only its own group's session: y's sessions end at 6 and 10. The
    # three results lie between the CTIs 1 and 20, in the output's order there (by start).
    script = EventScript()
    script.insert("a", edge_start(1, {"k": "x", "v": 1}))
    script.insert("a", edge_start(2, {"k": "y", "v": 2}))
    script.insert("a", edge_end(2, 3, {"k": "y", "v": 2}))
    script.cti("a", 5)
    script.insert("a", edge_start(6, {"k": "y", "v": 6}))
    script.insert("a", edge_end(6, 7, {"k": "y", "v": 6}))
    script.cti("a", 10)
    script.insert("a", edge_end(1, 12, {"k": "x", "v": 1}))
    script.cti("a", 20)
    hand_worked = [
        cti(1),
        interval(1, 15, {"k": "x", "n": 1}),
        interval(2, 6, {"k": "y", "n": 1}),
        interval(6, 10, {"k": "y", "n": 1}),
        cti(20),
        cti(MAX_TIME),
    ]
    explicit = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
    plan = GroupApply(Input("a"), ("k",), lambda g: SessionWindow(g, 3, None, (), (("n", len),)))
    binding = [Binding("a", explicit, ("k", "v"))]
    assert run_reference(script, binding, plan, EventShape.INTERVAL).output == hand_worked

    def build(s):
        return s["a"].group_apply(
            "k", lambda g: g.session_window(TICK * 3).aggregate(n=F.count("*"))
        )

    inputs = {"a": In(EventShape.EDGE, explicit, schema="k string, v bigint")}
    # an epoch after each CTI: the open edge is held across two epochs before its END edge
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, [4, 7])
    assert out == hand_worked


def _stream(name: str = "a", script: EventScript | None = None, **kwargs) -> Stream:
    if script is None:
        script = EventScript()
        script.insert(name, point(1, {"k": "a", "v": 1, "id": 1}))
    return Stream.create(
        name,
        MemoryInputFactory(),
        MemoryInputConfig(script=script, **kwargs),
        EventShape.POINT,
        EVERY,
    )


def _run_unflushed(app, last: int, fn, shape: EventShape, epochs: int) -> tuple[dict, list]:
    """Points 0, 2, .., ``last`` (k = t % 4: groups 0 and 2, v = t), a CTI at each start and
    none at the end (no flush), grouped by ``k`` into ``fn``, run in ``epochs``: the query's
    ``operator_metrics()`` and the events it delivered."""
    script = EventScript()
    for t in range(0, last + 1, 2):
        script.insert("a", point(t, {"k": t % 4, "v": t}))
    stream = Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=script),
        EventShape.POINT,
        AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, False)),
    )
    name = f"group-state-{next(_names)}"
    query = stream.group_apply("k", fn).to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), shape
    )
    try:
        query.run(epochs=epochs)
        events = [e for e in MemoryOutputFactory.collected(name) if not e.is_cti]
        return query.operator_metrics(), events
    finally:
        app.queries.pop(name, None)


def test_group_apply_keeps_only_its_groups_operator_state(app):
    # Points 0, 2, .., 98 (k = t % 4, v = t), a CTI at each start, no flush, in 5 epochs; per
    # group a tumbling window of 10. The last CTI is 98: windows up to [80, 90) are complete, and
    # [90, 100) is open with the groups k = 0 (92, 96) and k = 2 (90, 94, 98): the window holds
    # two rows of partial aggregates, one per group; the group and group_apply nodes hold none.
    state, out = _run_unflushed(
        app,
        98,
        lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"), s=F.sum("v")),
        EventShape.POINT,
        5,
    )
    assert list(state) == ["2:window"]
    assert state["2:window"]["state_rows"] == 2
    assert state["2:window"]["cti_ticks"] == 90
    # 9 complete windows, both groups in each: [0, 10) k=0 has 0, 4, 8; k=2 has 2, 6
    assert len(out) == 18
    assert [e.payload for e in out[:2]] == [{"k": 0, "n": 3, "s": 12}, {"k": 2, "n": 2, "s": 8}]


def test_a_window_over_intervals_keeps_a_groups_latest_time_only_while_it_is_after_the_cti(app):
    # Intervals [t, t + 1) for t = 0, 2, .., 18: k = 0 before 10, k = 2 from 10; a CTI at each
    # start, no flush, in 2 epochs; per group a tumbling window of 10 (intervals may end at +inf,
    # so each group's latest time is kept). The last CTI is 18. State: the open window [10, 20)
    # of k = 2 as one row of partial aggregates; k = 2's latest time 19 (> 18); k = 0's latest
    # time 9 is at or before the CTI, so it is dropped (at +inf the CTI bounds k = 0 alone).
    script = EventScript()
    for t in range(0, 19, 2):
        script.insert("a", interval(t, t + 1, {"k": 0 if t < 10 else 2, "v": t}))
    stream = Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=script),
        EventShape.INTERVAL,
        AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, False)),
    )
    name = f"group-latest-state-{next(_names)}"
    query = stream.group_apply(
        "k", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"))
    ).to_query(app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT)
    try:
        query.run(epochs=2)
        state = query.operator_metrics()
    finally:
        app.queries.pop(name, None)
    assert state["2:window"]["state_rows"] == 2  # a partial aggregate row and a latest time


def test_a_snapshot_per_group_holds_only_events_of_snapshots_not_yet_final(app):
    # Points 0, 2, .., 38 (k = t % 4: groups 0 and 2), a CTI at each start, no flush, in 3
    # epochs; per group a snapshot window. The last CTI is 38.
    #   Group 2 (2, 6, .., 38): endpoints .., 34, 35, 38, 39; the largest below 38 is 35, and
    #   snapshots up to [34, 35) are final; [38, 39) may still change: held.
    #   Group 0 (0, 4, .., 36): the largest endpoint below 38 is 37: [36, 37) is final and
    #   nothing is held.
    # One row of state; 19 results, one per point but 38, each n = 1 (a group's snapshots are
    # cut at its own endpoints: no point of the other group splits them).
    state, out = _run_unflushed(
        app,
        38,
        lambda g: g.snapshot_window().aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        3,
    )
    assert [v["state_rows"] for v in state.values()] == [1], state
    assert [(e.start, e.end, e.payload["k"], e.payload["n"]) for e in out] == [
        (t, t + 1, t % 4, 1) for t in range(0, 38, 2)
    ]


def test_explain_shows_group_apply_above_fns_operators_and_the_group(app):
    stream = _stream().group_apply(
        "k", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"))
    )
    lines = stream.explain().splitlines()
    assert lines[0].startswith("group_apply by k  key -  CTI: the oldest over groups of fn's")
    assert lines[1].startswith("  tumbling_window 10 microseconds aggregate n=count(*)  key -")
    assert lines[2].startswith("    the events of one group by k  key -  CTI: the input's")
    assert lines[3].startswith("      input 'a' (POINT)")
    assert len(lines) == 4


# -- build errors: what, where, expected, got, and the fix ----------------------------------------
CALL = "group_apply(keys=['k'], fn=<lambda>)"


def test_a_select_that_drops_a_key_is_refused_naming_the_key_and_the_select():
    with pytest.raises(QueryBuildError) as error:
        _stream().group_apply("k", lambda g: g.select("v"))
    assert str(error.value) == (
        f"{CALL}: select('v') inside fn drops the key column 'k': every result of group_apply "
        "carries its group's keys, and the operators after it group by them (group keys 'k'). "
        "Fix: add 'k' to the select (passed through under its own name)"
    )


def test_an_aggregate_named_as_a_key_is_refused(app):  # F.count needs the session
    with pytest.raises(QueryBuildError) as error:
        _stream().group_apply("k", lambda g: g.tumbling_window(TICK * 10).aggregate(k=F.count("*")))
    assert str(error.value) == (
        f"{CALL}: tumbling_window('10 microseconds').aggregate(k) inside fn names an aggregate "
        "'k', a key column: the result would lose the group's key (group keys 'k'). Fix: give "
        "the aggregate another name (e.g. k_value=...)"
    )


def test_keys_that_are_not_columns_are_refused_when_the_query_is_made(app):
    stream = _stream().group_apply(
        "kk", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"))
    )
    with pytest.raises(QueryBuildError) as error:
        stream.to_query(
            app, "nokey", MemoryOutputFactory(), MemoryOutputConfig(name="nokey"), EventShape.POINT
        )
    assert str(error.value) == (
        "group_apply(keys=['kk'], fn=<lambda>): no column 'kk' in the stream's payload; the "
        "columns available there are ['k', 'v', 'id']; the closest match is 'k'. Fix: name one "
        "of the available columns (did you mean 'k'?)"
    )


def test_fn_must_return_a_stream():
    with pytest.raises(QueryBuildError) as error:
        _stream().group_apply("k", lambda g: g.tumbling_window(TICK * 10))
    assert str(error.value) == (
        f"{CALL}: fn returned WindowedStream; expected a Stream made from the stream fn is "
        "given. Fix: return the sub-query's Stream (a windowed stream needs .aggregate(...))"
    )


def test_fn_must_return_a_stream_made_from_its_argument():
    other = _stream("b")
    with pytest.raises(QueryBuildError) as error:
        _stream().group_apply("k", lambda g: other.where(F.col("v") > 0))
    assert str(error.value) == (
        f"{CALL}: fn returned a stream not made from the stream it was given; expected the "
        "result of operators applied to its argument (fn(group) -> group.where(...)...). Fix: "
        "build fn's result from its argument"
    )


def test_a_join_with_the_group_on_the_right_is_refused():
    other = _stream("b")
    with pytest.raises(QueryBuildError, match=r"join\(on='id'\) inside fn has the group's stream"):
        _stream().group_apply("k", lambda g: other.join(g, on="id"))


def test_a_union_with_another_stream_is_refused():
    other = _stream("b")
    with pytest.raises(QueryBuildError, match="unions the group's stream with a stream not"):
        _stream().group_apply("k", lambda g: g.union(other))


@pytest.mark.parametrize("epochs", [1, [1, 3]])
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (hand.snapshot_script, hand.SNAPSHOT_OUT),
        (hand.snapshot_floors_script, hand.SNAPSHOT_FLOORS_OUT),
    ],
    ids=["one-group-holds-all", "each-groups-floor"],
)
def test_snapshots_inside_group_apply_are_cut_at_each_groups_own_endpoints(
    app, script, expected, epochs
):
    # The hand-worked timelines of tests/reference/test_group_apply.py: each group's snapshots
    # are cut at its own endpoints only, and the CTI is held back to the endpoint of the group
    # whose event spans it (the minimum over such groups), with open snapshots carried across
    # the epoch cuts.
    def build(s):
        return s["a"].group_apply("k", lambda g: g.snapshot_window().aggregate(n=F.count("*")))

    inputs = {"a": In(EventShape.INTERVAL, EVERY, schema="k string")}
    out, _ = spark_run(app, script(), inputs, build, EventShape.INTERVAL, epochs)
    assert out == expected


# -- substreams: the key kept ----------------------------------------------------------------------
@given(case=ordered_cases())
def test_group_apply_by_the_substream_key_matches_the_reference(app, case):
    # An input split by k (over='k', or not), grouped by k: fn's window needs no group_by (one
    # group lies on one key's timeline); the result keeps the key. The group's stream merges
    # the keyed CTIs (docs/decisions.md, "Group and Apply"), in both the reference and Spark.
    ordering, names, a_settings, b_settings, script, _, cuts = case
    bindings = [Binding("a", a_settings, ORDERED_COLUMNS, ordering)]
    if "b" in names:
        bindings.append(Binding("b", b_settings, ORDERED_COLUMNS))
    plan = GroupApply(
        Input("a"), ("k",), lambda g: Window(ShiftEventTime(g, 3), 10, 5, (), (("n", len),))
    )
    if "b" in names:  # b's windows by k, for the union's columns
        b_windows = Window(ShiftEventTime(Input("b"), 3), 10, 5, ("k",), (("n", len),))
        plan = Union((MergeSubstreams(plan), b_windows))
    expected = run_reference(script, bindings, plan, EventShape.POINT)

    def build(streams):
        out = streams["a"].group_apply(
            "k",
            lambda g: (
                g.shift_event_time(TICK * 3)
                .hopping_window(TICK * 10, TICK * 5)
                .aggregate(n=F.count("*"))
            ),
        )
        assert out.substream_key == ordering.over
        if "b" not in names:
            return out
        b_windows = (
            streams["b"]
            .shift_event_time(TICK * 3)
            .hopping_window(TICK * 10, TICK * 5)
            .group_by("k")
            .aggregate(n=F.count("*"))
        )
        return out.merge_substreams().union(b_windows)

    for epochs in (1, cuts or 1):
        streams = {
            "a": Stream.create(
                "a",
                MemoryInputFactory(),
                MemoryInputConfig(script=script, schema=ORDERED_SCHEMA),
                EventShape.POINT,
                a_settings,
                ordering=ordering,
            )
        }
        if "b" in names:
            streams["b"] = Stream.create(
                "b",
                MemoryInputFactory(),
                MemoryInputConfig(script=script, schema=ORDERED_SCHEMA),
                EventShape.POINT,
                b_settings,
            )
        sink = f"group-keyed{next(_names)}"
        query = build(streams).to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.POINT
        )
        try:
            query.run(epochs=epochs)
            assert MemoryOutputFactory.collected(sink) == expected.output, f"epochs={epochs}"
        finally:
            app.queries.pop(sink, None)


# -- checkpoint and restart (semantics §9) -------------------------------------------------------
_PER_ID = {
    # windows of 2 s per id: [0, 2) id 1 (1.0); [2, 4) id 1 (3.0), id 2 (2.0); [4, 6) id 1
    # (5.0), id 2 (4.0); [6, 8) id 2 (7.0); each a point at its window's start
    "window": (
        lambda g: g.tumbling_window("2 seconds").aggregate(n=F.count("*"), s=F.sum("v")),
        [(0, 1, 1.0), (2, 1, 3.0), (2, 2, 2.0), (4, 1, 5.0), (4, 2, 4.0), (6, 2, 7.0)],
    ),
    # snapshots per id, cut at that id's own points only: one per point (the other id's points
    # do not split them), a point at its start; the first run stops with id 1's snapshot at 3
    # held (the CTI is 3: not final), which the restart must finish from the checkpoint
    "snapshot": (
        lambda g: g.snapshot_window().aggregate(n=F.count("*"), s=F.sum("v")),
        [(1, 1, 1.0), (2, 2, 2.0), (3, 1, 3.0), (4, 2, 4.0), (5, 1, 5.0), (7, 2, 7.0)],
    ),
}


@pytest.mark.parametrize("fn", sorted(_PER_ID))
def test_a_group_apply_query_stopped_without_flush_resumes_delivering_nothing_twice(
    app, kafka_broker, tmp_path, fn
):
    # As tests/engine/test_restart.py: a live input read in one step, stopped without flush,
    # started again on its checkpoint with more records, then stopped with the flush; its output
    # equals a clean run's over all the records, every result once.
    per_group, expected = _PER_ID[fn]
    b = kafka_broker.bootstrap
    rows = [(1, 1, 1.0), (2, 2, 2.0), (3, 1, 3.0), (4, 2, 4.0), (5, 1, 5.0), (7, 2, 7.0)]
    records = [
        (0, {"ts": iso(t), "id": i, "v": v}, kf.ARRIVAL_MS + n, None)
        for n, (t, i, v) in enumerate(rows)
    ]

    def query(topic, out):
        live = Stream.create(
            "live",
            KafkaInputFactory(),
            kf.input_config(b, topic, time_field="ts", advance_time=EVERY_EVENT),
            EventShape.POINT,
        )
        per_id = live.group_apply("id", per_group)
        return per_id.to_query(
            app,
            f"group-resume-{next(_names)}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.POINT,
        )

    source = kafka_broker.create_topic()
    kf.produce(b, source, records[:3])
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"
    first = query(source, out)
    first.start(trigger=None, checkpoint=ckpt)
    first.step()
    first.stop(flush=False)
    kf.produce(b, source, records[3:])
    again = query(source, out)
    again.start(trigger=None, checkpoint=ckpt)
    again.step()
    again.stop()

    clean_source, clean_out = kafka_broker.create_topic(), tmp_path / "clean.jsonl"
    kf.produce(b, clean_source, records)
    clean = query(clean_source, clean_out)
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop()
    assert [(r[1], r[2]) for r in read_output(out) if r[0] == "INSERT"] == [
        (iso(t), {"id": i, "n": 1, "s": v}) for t, i, v in expected
    ]
    assert out.read_text() == clean_out.read_text()


@pytest.mark.parametrize("epochs", [1, [1, 3]])
def test_a_window_counts_an_open_edge_up_to_its_own_groups_latest_moment(app, epochs):
    # Edges, CTIs only where the script says, +inf at the stop. fn: tumbling_window(10) with n =
    # count(*), no group_by: per group its own windows.
    #   x: an open START edge at 2, never closed.  y: an open START edge at 5, never closed,
    #   and [6, 37) (its END edge comes after the CTI 12).
    # CTI 12 completes [0, 10): x 1 (its edge), y 2 (its edge and [6, 37)); output CTI 10.
    # At +inf (§5's bounded work) an event that ends at +inf counts up to the window holding
    # the latest finite moment its operator has seen: per group, the group's own events and
    # the CTIs. x: max(2, CTI 12) = 12, so [10, 20) only. y: max(5, 6, 37, 12) = 37, so
    # [10, 20), [20, 30), [30, 40), each with its edge and [6, 37). Over all groups at once
    # (37 for both), x would count in [20, 30) and [30, 40) as well.
    script = EventScript()
    script.insert("a", edge_start(2, {"k": "x", "v": 2}))
    script.insert("a", edge_start(5, {"k": "y", "v": 5}))
    script.insert("a", edge_start(6, {"k": "y", "v": 6}))
    script.cti("a", 12)
    script.insert("a", edge_end(6, 37, {"k": "y", "v": 6}))
    hand_worked = [
        interval(0, 10, {"k": "x", "n": 1}),
        interval(0, 10, {"k": "y", "n": 2}),
        cti(10),
        interval(10, 20, {"k": "x", "n": 1}),
        interval(10, 20, {"k": "y", "n": 2}),
        interval(20, 30, {"k": "y", "n": 2}),
        interval(30, 40, {"k": "y", "n": 2}),
        cti(MAX_TIME),
    ]
    explicit = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
    plan = GroupApply(Input("a"), ("k",), lambda g: Window(g, 10, 10, (), (("n", len),)))
    binding = [Binding("a", explicit, ("k", "v"))]
    assert run_reference(script, binding, plan, EventShape.INTERVAL).output == hand_worked

    def build(s):
        return s["a"].group_apply(
            "k", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"))
        )

    inputs = {"a": In(EventShape.EDGE, explicit, schema="k string, v bigint")}
    # cut after the CTI: y's [6, 37) ends, and the groups' latest moments travel, across epochs
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, epochs)
    assert out == hand_worked


def _edge(n: int, side: str, start: float, end: float | None, id_: int) -> tuple:
    value = {"ts": iso(start), "edge": side, "id": id_, "v": float(start)}
    if end is not None:
        value["te"] = iso(end)
    return (0, value, kf.ARRIVAL_MS + n, None)


def _windows(path) -> list[tuple]:
    """The INSERT rows of a JSON-lines output: (start, end, id, n)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["start"], r["end"], r["id"], r["n"]) for r in rows if r["kind"] == "INSERT"]


def test_each_groups_latest_moment_comes_back_from_the_checkpoint(app, kafka_broker, tmp_path):
    # group_apply("id", tumbling_window(10 s) n = count(*)) over Kafka edges, a CTI at each
    # start, +inf at the stop. The query crashes after its first epoch and starts again on its
    # checkpoint; its output equals the hand-worked list and a run that never stopped.
    #   epoch 0: id 1: an open edge at 0 s, and [2 s, 45 s): CTIs 0, 2 (nothing complete).
    #   epoch 1: id 2: an open edge at 5 s, and [6 s, 12 s): CTIs 5, 6. Then +inf.
    # At +inf each group counts its open edge up to its own latest finite moment:
    #   id 1: 45 s, the end of [2, 45) (seen in epoch 0 only, so it must come back from the
    #   checkpoint): [0, 10) .. [40, 50), each with both events: n = 2.
    #   id 2: max(6 s, 12 s, CTI 6 s) = 12 s: [0, 10) and [10, 20), n = 2.
    # Lost at the restart, id 1 would stop at [0, 10) (its open edge at 0 and the CTI 6); one
    # latest moment for all groups would give id 2 [20, 30) .. [40, 50) with n = 1.
    b = kafka_broker.bootstrap
    epochs = [
        [_edge(0, "START", 0, None, 1), _edge(1, "START", 2, None, 1), _edge(2, "END", 2, 45, 1)],
        [_edge(3, "START", 5, None, 2), _edge(4, "START", 6, None, 2), _edge(5, "END", 6, 12, 2)],
    ]

    def query(topic, out):
        edges = Stream.create(
            "live",
            KafkaInputFactory(),
            kf.input_config(
                b,
                topic,
                time_field="ts",
                end_field="te",
                edge_field="edge",
                advance_time=EVERY_EVENT,
            ),
            EventShape.EDGE,
        )
        windows = edges.group_apply(
            "id", lambda g: g.tumbling_window(timedelta(seconds=10)).aggregate(n=F.count("*"))
        )
        return windows.to_query(
            app,
            f"group-latest-{next(_names)}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.INTERVAL,
        )

    source = kafka_broker.create_topic()
    kf.produce(b, source, epochs[0])
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"
    first = query(source, out)
    first.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    first.step()  # epoch 0, its state written
    killed(first)  # the next start restores epoch 0's state
    kf.produce(b, source, epochs[1])
    again = query(source, out)
    again.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    again.step()
    again.stop()

    clean_source, clean_out = kafka_broker.create_topic(), tmp_path / "clean.jsonl"
    kf.produce(b, clean_source, epochs[0] + epochs[1])
    clean = query(clean_source, clean_out)
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop()
    windows = [(0, 1), (0, 2), (10, 1), (10, 2), (20, 1), (30, 1), (40, 1)]
    assert _windows(out) == [(iso(ws), iso(ws + 10), i, 2) for ws, i in windows]
    assert out.read_text() == clean_out.read_text()
