"""Group and Apply on Spark (semantics §5): the hand-worked timelines of
``tests/reference/test_group_apply.py`` in one and several epochs, the state it keeps, the
build errors with their fix, and ``explain()``."""

from __future__ import annotations

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
    AdvanceTimeSettings,
    EventShape,
    point,
)
from ctistream.engine.errors import QueryBuildError
from pyspark.sql import functions as F

from tests.harness import In, spark_run
from tests.reference import test_group_apply as hand

EVERY = hand.EVERY


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


def test_with_no_events_the_output_cti_is_fn_over_an_empty_input(app):
    def build(s):
        return s["a"].group_apply(
            "k", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"))
        )

    inputs = {"a": In(EventShape.POINT, EVERY, schema="k string, v bigint")}
    out, _ = spark_run(app, hand.ctis_only_script(), inputs, build, EventShape.POINT, [1])
    assert out == hand.CTIS_ONLY_OUT


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


def test_group_apply_keeps_only_its_groups_operator_state(app):
    # Points 0, 2, .., 98 (k = t % 4, v = t), a CTI at each start, no flush, in 5 epochs; per
    # group a tumbling window of 10. The last CTI is 98: windows up to [80, 90) are complete, and
    # [90, 100) is open with the groups k = 0 (92, 96) and k = 2 (90, 94, 98): the window holds
    # two rows of partial aggregates, one per group; the group and group_apply nodes hold none.
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
    name = "group-state"
    query = stream.group_apply(
        "k", lambda g: g.tumbling_window(TICK * 10).aggregate(n=F.count("*"), s=F.sum("v"))
    ).to_query(app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT)
    try:
        query.run(epochs=5)
        state = query.operator_metrics()
        assert list(state) == ["2:window"]
        assert state["2:window"]["state_rows"] == 2
        assert state["2:window"]["cti_ticks"] == 90
        out = [e for e in MemoryOutputFactory.collected(name) if not e.is_cti]
        # 9 complete windows, both groups in each: [0, 10) k=0 has 0, 4, 8; k=2 has 2, 6
        assert len(out) == 18
        assert [e.payload for e in out[:2]] == [{"k": 0, "n": 3, "s": 12}, {"k": 2, "n": 2, "s": 8}]
    finally:
        app.queries.pop(name, None)


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


def test_an_aggregate_named_as_a_key_is_refused():
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


def test_a_snapshot_inside_group_apply_is_refused_with_the_fix():
    with pytest.raises(QueryBuildError, match="snapshot_window.*is not supported inside"):
        _stream().group_apply("k", lambda g: g.snapshot_window().aggregate(n=F.count("*")))
