"""Substreams at query build (semantics §7, ``over=key``): every ``Stream`` knows its substream
key; operators that keep the key column keep it, one that would lose it fails where it is called,
unless ``merge_substreams()`` came first. Templates are checked when their inputs are bound.

Building does no Spark work; only the two end-to-end runs at the bottom run queries (the
``spark`` fixture is there for PySpark Columns, which need a session).
"""

from __future__ import annotations

import itertools

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import QueryBinder, QueryTemplate, Stream
from ctistream.engine import (
    MAX_TIME,
    TICK,
    EventOrderingSettings,
    EventShape,
    QueryBuildError,
    cti,
    interval,
)
from ctistream.engine import point as pt
from ctistream.engine.plan import MergeNode
from pyspark.sql import functions as F

SCHEMA = "k string, j string, t bigint, v double"
_names = itertools.count()


def _input(name: str = "a", over: str | None = "k", script: EventScript | None = None) -> Stream:
    ordering = EventOrderingSettings(event_time="t", over=over) if over else None
    config = MemoryInputConfig(script=script or EventScript(), schema=SCHEMA)
    return Stream.create(name, MemoryInputFactory(), config, EventShape.POINT, ordering=ordering)


def _assert_loss(error: pytest.ExceptionInfo, call: str, key: str, inputs: str, fix: str) -> None:
    text = str(error.value)
    assert text.startswith(call), text
    assert f"loses the substream key {key!r} of {inputs}" in text
    assert "expected" in text and "got" in text
    assert f"Fix: {fix}" in text
    assert ".merge_substreams()" in text


# -- where keys come from ------------------------------------------------------------------------
def test_an_input_split_by_over_has_that_key_and_others_have_none():
    assert _input(over="k").substream_key == "k"
    assert _input(over=None).substream_key is None
    assert _input(over=None).merge_substreams().substream_key is None
    # A template input has none until it is bound.
    assert Stream.input("a", SCHEMA).substream_key is None


# -- kept ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build",
    [
        lambda s: s.where(F.col("v") > 1),
        lambda s: s.where("v > 1"),
        lambda s: s.shift_event_time(TICK * 5),
        lambda s: s.alter_event_duration(TICK * 5),
        lambda s: s.alter_event_lifetime(lambda t: t - t % 10, TICK * 5),
        lambda s: s.to_point(),
        lambda s: s.select("k", "v"),
        lambda s: s.select("`k`"),
        lambda s: s.select("*"),
        lambda s: s.select(F.col("*")),
        lambda s: s.select(F.col("k"), (F.col("v") * 2).alias("v2")),
        lambda s: s.select(F.col("k").alias("k")),
        lambda s: s.select(F.expr("k"), "v"),
        lambda s: s.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*")),
        lambda s: (
            s.hopping_window(TICK * 10, TICK * 5).group_by("j", "k").aggregate(n=F.count("*"))
        ),
        lambda s: s.snapshot_window().group_by("k").aggregate(n=F.count("*")),
        lambda s: s.join(_input("ref", over=None), on="k"),
        lambda s: _input("ref", over=None).join(s, on=["j", "k"]),
        lambda s: s.anti_join(_input("ref", over=None), on="k"),
        lambda s: _input("ref", over=None).anti_join(s, on="k"),
        lambda s: s.where("v > 0").select("k", "t").to_point().shift_event_time(TICK),
    ],
    ids=[
        "where-column",
        "where-sql",
        "shift_event_time",
        "alter_event_duration",
        "alter_event_lifetime",
        "to_point",
        "select-name",
        "select-backticks",
        "select-star",
        "select-col-star",
        "select-col",
        "select-alias-same-name",
        "select-expr-name",
        "tumbling-group_by",
        "hopping-group_by",
        "snapshot-group_by",
        "join-with-reference",
        "reference-join-keyed",
        "anti_join-with-reference",
        "reference-anti_join-keyed",
        "chain",
    ],
)
def test_operators_that_keep_the_key_column_keep_the_key(spark, build):
    assert build(_input()).substream_key == "k"


def test_a_join_or_union_of_streams_with_the_same_key_keeps_it():
    a, b = _input("a"), _input("b")
    assert a.join(b, on="k").substream_key == "k"
    assert a.anti_join(b, on=["k", "j"]).substream_key == "k"
    assert a.union(b, _input("c")).substream_key == "k"
    # Streams with no key stay without one.
    plain = _input("p", over=None)
    assert plain.union(_input("q", over=None)).substream_key is None
    assert plain.join(_input("q", over=None), on="j").substream_key is None


# -- lost: an error at the operator's call, saying what, expected, got and the fix ------------
@pytest.mark.parametrize(
    ("build", "call", "fix"),
    [
        (lambda s: s.select("v"), "select('v')", "add 'k' to the select"),
        (
            lambda s: s.select(F.col("k").alias("device"), "v"),
            "select(Column<'k AS device'>, 'v')",
            "add 'k' to the select",
        ),
        (
            lambda s: s.select(F.upper("k").alias("k")),
            "select(Column<'upper(k) AS k'>)",
            "add 'k' to the select",
        ),
        (
            lambda s: s.tumbling_window(TICK * 10).aggregate(n=F.count("*")),
            "tumbling_window('10 microseconds').aggregate(n)",
            ".group_by('k')",
        ),
        (
            lambda s: s.hopping_window(TICK * 10, TICK * 5).group_by("j").aggregate(n=F.count("*")),
            "hopping_window('10 microseconds', '5 microseconds').group_by('j').aggregate(n)",
            ".group_by('j', 'k')",
        ),
        (
            lambda s: s.snapshot_window().group_by("j").aggregate(n=F.count("*"), s=F.sum("v")),
            "snapshot_window().group_by('j').aggregate(n, s)",
            ".group_by('j', 'k')",
        ),
        (
            lambda s: s.join(_input("ref", over=None), on="j"),
            "join(on=['j'])",
            "join on=['j', 'k']",
        ),
        (
            lambda s: _input("ref", over=None).anti_join(s, on="j"),
            "anti_join(on=['j'])",
            "anti_join on=['j', 'k']",
        ),
        (
            lambda s: s.union(_input("b", over=None)),
            "union() of 2 streams",
            "split every input by 'k'",
        ),
    ],
    ids=[
        "select-drops",
        "select-renames",
        "select-expression-same-name",
        "window-no-group_by",
        "hopping-group_by-other",
        "snapshot-group_by-other",
        "join-not-on-key",
        "keyed-right-of-anti_join",
        "union-with-unkeyed",
    ],
)
def test_an_operator_that_loses_the_key_fails_where_it_is_called(spark, build, call, fix):
    keyed = _input("a")
    with pytest.raises(QueryBuildError) as error:
        build(keyed)
    _assert_loss(error, call, "k", "input 'a' (over='k')", fix)
    # The same operator after an explicit merge builds, with no key.
    assert build(keyed.merge_substreams()).substream_key is None


def test_the_error_names_the_side_and_the_operator_called_not_an_earlier_one(spark):
    a = _input("a")
    kept = a.where("v > 0").shift_event_time(TICK * 3).select("k", "v")  # nothing lost yet
    windowed = kept.tumbling_window(TICK * 10).group_by("v")  # nor here: the window is not made yet
    with pytest.raises(
        QueryBuildError, match=r"^tumbling_window\('10 microseconds'\)\.group_by\('v'\)"
    ):
        windowed.aggregate(total=F.sum("v"))
    with pytest.raises(QueryBuildError) as error:
        _input("ref", over=None).join(a, on="j")
    assert "expected the right side's key 'k' among the join keys; got on=['j']" in str(error.value)
    assert "call .merge_substreams() on the right stream before join()" in str(error.value)


def test_two_different_keys_cannot_meet_in_a_join_or_union():
    a, b = _input("a", over="k"), _input("b", over="j")
    with pytest.raises(QueryBuildError) as error:
        a.join(b, on=["k", "j"])
    text = str(error.value)
    assert "substream key 'k' of input 'a'" in text and "substream key 'j' of input 'b'" in text
    assert "Fix: call .merge_substreams() on one side" in text
    assert a.join(b.merge_substreams(), on="k").substream_key == "k"
    with pytest.raises(QueryBuildError, match=r"different substream keys \(by input: \['k', 'j'\]"):
        a.union(b)
    assert a.merge_substreams().union(b.merge_substreams()).substream_key is None


def test_merge_substreams_adds_a_merge_over_the_plan_and_drops_the_key():
    a = _input("a")
    merged = a.merge_substreams()
    assert isinstance(merged.node, MergeNode) and merged.node.child is a.node
    assert merged.substream_key is None
    # A key given up cannot come back: a union of merged streams has none either.
    assert merged.union(_input("b", over=None)).substream_key is None


# -- templates: checked again when create_query binds the inputs ---------------------------------
def _bind(app, template: QueryTemplate, over: str | None):
    name = f"sub{next(_names)}"
    binder = (
        QueryBinder(template)
        .bind_producer(
            "in",
            MemoryInputFactory(),
            MemoryInputConfig(script=EventScript(), schema=SCHEMA),
            EventShape.POINT,
            ordering=EventOrderingSettings(event_time="t", over=over),
        )
        .add_consumer(
            "out", MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
        )
    )
    return name, binder


def test_a_template_that_loses_a_key_given_at_binding_fails_in_create_query(app):
    readings = Stream.input("in", SCHEMA)
    template = QueryTemplate(
        "per-j", readings.tumbling_window(TICK * 10).group_by("j").aggregate(n=F.count("*"))
    )
    assert template.stream.substream_key is None  # unknown until bound
    name, binder = _bind(app, template, over="k")
    with pytest.raises(QueryBuildError) as error:
        app.create_query(name, binder)
    text = str(error.value)
    assert "1 binding problem(s)" in text
    assert "bind_producer('in', ..., ordering=EventOrderingSettings(over='k'))" in text
    assert (
        "in template 'per-j', tumbling_window('10 microseconds').group_by('j').aggregate(n) loses"
        in text
    )
    assert "substream key 'k' of input 'in'" in text
    assert "Fix: .group_by('j', 'k')" in text and "or bind without over=" in text
    assert name not in app.queries
    # Bound without a key, or by a key the template keeps, the same template makes a query.
    for over in (None, "j"):
        name, binder = _bind(app, template, over=over)
        try:
            app.create_query(name, binder)
        finally:
            app.queries.pop(name, None)


def test_a_merge_in_a_template_is_honoured_when_bound(app):
    merged = Stream.input("in", SCHEMA).merge_substreams()
    template = QueryTemplate("merged", merged.tumbling_window(TICK * 10).aggregate(n=F.count("*")))
    name, binder = _bind(app, template, over="k")
    try:
        app.create_query(name, binder)
    finally:
        app.queries.pop(name, None)


def test_a_keyed_input_bound_in_the_template_fails_when_the_template_is_written(spark):
    keyed = _input("a")
    with pytest.raises(QueryBuildError, match=r"^select\('v'\) loses the substream key 'k'"):
        QueryTemplate("t", keyed.select("v"))


# -- end to end: a keyed window, and the same input merged ----------------------------------------
def _script() -> EventScript:
    """Events (t, arrival, k, v) with late tolerance 10: nothing late, early or out of order in
    its key. The input's CTI is arrival - 10 at each event: 0, 1, 2, 3, 4, then +inf at the end
    (flush on stop)."""
    script = EventScript()
    for t, arrival, k, v in (
        (1, 10, "a", 1.0),
        (3, 11, "b", 2.0),
        (12, 12, "a", 3.0),
        (5, 13, "b", 4.0),
        (14, 14, "b", 5.0),
    ):
        script.insert("in", pt(0, {"k": k, "j": "x", "t": t, "v": v}), arrival=arrival)
    return script.end("in", arrival=20)


def _run(app, build, script: EventScript | None = None, late: int = 10) -> list:
    ordering = EventOrderingSettings(
        event_time="t",
        late_arrival_tolerance=TICK * late,
        early_arrival_window=None,
        over="k",
        flush_on_stop=True,
    )
    stream = Stream.create(
        "in",
        MemoryInputFactory(),
        MemoryInputConfig(script=script or _script(), schema=SCHEMA),
        EventShape.POINT,
        ordering=ordering,
    )
    name = f"sub{next(_names)}"
    query = build(stream).to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )
    try:
        query.run()
        return MemoryOutputFactory.collected(name)
    finally:
        app.queries.pop(name, None)


def test_a_keyed_window_grouped_by_the_key_runs(app):
    def build(s: Stream) -> Stream:
        out = s.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*"), total=F.sum("v"))
        assert out.substream_key == "k"
        return out

    # [0,10): a {1}, b {3, 5}; [10,20): a {12}, b {14}. Input CTI 0 -> output CTI 0 (the
    # earliest open window starts at 0), nothing released until the flush at +inf.
    assert _run(app, build) == [
        cti(0),
        interval(0, 10, {"k": "a", "n": 1, "total": 1.0}),
        interval(0, 10, {"k": "b", "n": 2, "total": 6.0}),
        interval(10, 20, {"k": "a", "n": 1, "total": 3.0}),
        interval(10, 20, {"k": "b", "n": 1, "total": 5.0}),
        cti(MAX_TIME),
    ]


def test_a_merged_stream_drops_the_key_and_runs(app):
    def build(s: Stream) -> Stream:
        out = (
            s.merge_substreams()
            .select("t", "v")
            .tumbling_window(TICK * 10)
            .aggregate(n=F.count("*"), total=F.sum("v"))
        )
        assert out.substream_key is None
        return out

    # All keys together: [0,10): 1, 3, 5 -> 3 events, 7.0; [10,20): 12, 14 -> 2 events, 8.0.
    assert _run(app, build) == [
        cti(0),
        interval(0, 10, {"n": 3, "total": 7.0}),
        interval(10, 20, {"n": 2, "total": 8.0}),
        cti(MAX_TIME),
    ]


# -- per-key CTIs: a key's windows close by its own watermark ------------------------------------
def _fast_and_slow() -> EventScript:
    """Late tolerance 100, so the input's CTI (arrival - 100) lags; out-of-order tolerance 0, so
    each key's watermark is its largest event time. (t, arrival, k): (1, 10, a), (25, 11, a),
    (2, 12, b), (6, 105, b); nothing late, early or out of order in its key."""
    script = EventScript()
    for t, arrival, k in ((1, 10, "a"), (25, 11, "a"), (2, 12, "b"), (6, 105, "b")):
        script.insert("in", pt(0, {"k": k, "j": "x", "t": t, "v": 1.0}), arrival=arrival)
    return script.end("in", arrival=200)


def _count_per_window(s: Stream) -> Stream:
    return s.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*"))


def test_a_keys_window_is_released_by_its_own_watermark_before_the_input_cti(app):
    # Input CTI (arrival - 100): -90, -89, -88, 5; the window pulls them back to -90, -90, -90,
    # 0. Key a's watermark reaches 25 at arrival 11: a's CTI is max(-89, 25) = 25, which
    # completes a's [0, 10) there (pulled back: a's CTI 20 after the window), before the input's
    # CTI reaches 0 at arrival 105. b's watermark (2, then 6) completes nothing; the flush at
    # +inf releases b's [0, 10) (t 2 and 6) and a's [20, 30). Keyed CTIs are not delivered.
    assert _run(app, _count_per_window, _fast_and_slow(), late=100) == [
        cti(-90),
        interval(0, 10, {"k": "a", "n": 1}),
        cti(0),
        interval(0, 10, {"k": "b", "n": 2}),
        interval(20, 30, {"k": "a", "n": 1}),
        cti(MAX_TIME),
    ]


def test_merged_substreams_wait_for_the_input_cti(app):
    def build(s: Stream) -> Stream:
        return _count_per_window(s.merge_substreams())

    # The same query with the keyed CTIs dropped: a's [0, 10) waits for the flush.
    assert _run(app, build, _fast_and_slow(), late=100) == [
        cti(-90),
        cti(0),
        interval(0, 10, {"k": "a", "n": 1}),
        interval(0, 10, {"k": "b", "n": 2}),
        interval(20, 30, {"k": "a", "n": 1}),
        cti(MAX_TIME),
    ]


def _pt(t: int, k: str, right: bool = False) -> dict:
    """The payload of _fast_and_slow's event at ``t`` (joined with itself: both halves)."""
    one = {"k": k, "j": "x", "t": t, "v": 1.0}
    return {**one, **{f"right_{c}": v for c, v in one.items()}} if right else one


# The input's CTIs (arrival - 100) are delivered as they are here (no window pulls them back):
# -90, -89, -88 at arrivals 10, 11, 12 and 5 at 105. Key a's CTI is 25 at arrival 11 (right after
# the input's -89), b's 2 at 12 and 6 at 105 (after the input's 5).
def test_a_self_join_on_the_key_releases_a_keys_pairs_by_its_own_cti(app):
    def build(s: Stream) -> Stream:
        out = s.join(s, on="k")
        assert out.substream_key == "k"
        return out

    # Points meet only themselves. a@1 leaves at a's CTI 25 (arrival 11), before the input's
    # -88; b@2 waits for the input's 5 (b's own 2 does not pass 2); the rest for the flush.
    pair = {t: interval(t, t + 1, _pt(t, k, right=True)) for t, k in _KEYS.items()}
    assert _run(app, build, _fast_and_slow(), late=100) == [
        cti(-90),
        cti(-89),
        pair[1],
        cti(-88),
        pair[2],
        cti(5),
        pair[6],
        pair[25],
        cti(MAX_TIME),
    ]
    merged = _run(app, lambda s: s.merge_substreams().join(s, on="k"), _fast_and_slow(), late=100)
    assert merged[2:5] == [cti(-88), pair[1], pair[2]]  # without a's own CTI a@1 waits


def test_a_union_of_keyed_streams_releases_a_keys_events_by_its_own_cti(app):
    # Each event twice; a's CTI in the union is min(25, 25) at arrival 11.
    point = {t: interval(t, t + 1, _pt(t, k)) for t, k in _KEYS.items()}
    assert _run(app, lambda s: s.union(s), _fast_and_slow(), late=100) == [
        cti(-90),
        cti(-89),
        point[1],
        point[1],
        cti(-88),
        point[2],
        point[2],
        cti(5),
        point[6],
        point[6],
        point[25],
        point[25],
        cti(MAX_TIME),
    ]


_KEYS = {1: "a", 25: "a", 2: "b", 6: "b"}
