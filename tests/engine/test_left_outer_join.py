"""The temporal left outer join on Spark (semantics §5): the join's pairs, plus the anti-join's
fragments of left lifetimes with the right columns null, released by the older CTI of both
sides, bounded state, build-time errors, restart. Expected timelines are worked out by hand in
the comments."""

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
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventShape,
    QueryBuildError,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)

from tests.harness import In, spark_run
from tests.reference import Binding, Input, LeftOuterJoin, run_reference

NEVER = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
)  # explicit CTIs only (and +inf at the end)
SCHEMA = "k bigint, v double"


def run_both(app, script, inputs, shape, cuts):
    """The Spark output in one epoch and in ``cuts``, checked equal to each other and to the
    reference interpreter's."""
    build = lambda s: s["l"].left_outer_join(s["r"], on="k")  # noqa: E731
    whole, _ = spark_run(app, script, inputs, build, shape, 1)
    cut, _ = spark_run(app, script, inputs, build, shape, cuts)
    bindings = [Binding(n, i.settings, ("k", "v")) for n, i in inputs.items()]
    plan = LeftOuterJoin(Input("l"), Input("r"), ("k",), ("k", "v"))
    expected = run_reference(script, bindings, plan, shape)
    assert whole == expected.output
    assert cut == whole
    return whole


def _unmatched(k: int, v: float) -> dict:
    return {"k": k, "v": v, "right_k": None, "right_v": None}


def test_pairs_and_unmatched_parts_leave_by_the_older_cti(app):
    script = EventScript()
    script.insert("l", interval(0, 10, {"k": 1, "v": 1.0}))
    # The pair [3, 6) forms at once, an interval (both ends known). Its right v is a double that
    # no decimal rounds to: it passes through bit for bit.
    script.insert("r", interval(3, 6, {"k": 1, "v": 0.30000000000000004}))
    # cR 8, cL -inf: the anti-join's parts of [0, 10) outside [3, 6): [0, 3) is decided (0 and 3
    # below cR, the left complete) -> an interval; [6, 10) starts below cR, but its end 10 is
    # not <= cR -> a START edge at 6. Output CTI min(-inf, 8): none.
    script.cti("r", 8)
    script.cti("l", 5)  # output CTI min(5, 8) = 5
    script.cti("r", 12)  # 10 <= cR 12: END edge [6, 10); output CTI min(5, 12) = 5: unchanged
    script.cti("l", 20)  # output CTI min(20, 12) = 12: the CTI rule releases [6, 10) only now
    # Stop: l flushes (output CTI stays 12), then r (+inf).
    inputs = {
        "l": In(EventShape.INTERVAL, NEVER, SCHEMA),
        "r": In(EventShape.INTERVAL, NEVER, SCHEMA),
    }
    pair = {"k": 1, "v": 1.0, "right_k": 1, "right_v": 0.30000000000000004}
    # INTERVAL consumer: an event once its start is below the output CTI and its end is known.
    assert run_both(app, script, inputs, EventShape.INTERVAL, [2, 4]) == [
        interval(0, 3, _unmatched(1, 1.0)),
        interval(3, 6, pair),
        cti(5),
        interval(6, 10, _unmatched(1, 1.0)),
        cti(12),
        cti(MAX_TIME),
    ]


def test_an_open_left_edge_flows_through_as_edges(app):
    script = EventScript()
    script.insert("l", edge_start(0, {"k": 1, "v": 1.0}))  # left open from 0
    # The pair [4, ...) forms: the left end is unknown -> a START edge at 4.
    script.insert("r", interval(4, 6, {"k": 1, "v": 2.0}))
    script.cti("r", 3)  # [0, 4) uncovered, 0 < cR 3, but cL is -inf: the left may end at once
    script.cti("l", 2)  # 0 < cL 2: START edge at 0 (its end 4 is not below cR 3). Output CTI 2
    # cL 7 >= the right end 6: the pair ends at 6 (END edge). [0, 4)'s end 4 is not below cR 3.
    # Output CTI min(7, 3) = 3.
    script.cti("l", 7)
    # 4 < cR 9 and 4 < cL 7: END edge [0, 4); [6, ...) starts (6 < 9, 6 < 7): START edge at 6.
    # Output CTI min(7, 9) = 7.
    script.cti("r", 9)
    script.insert("l", edge_end(0, 8, {"k": 1, "v": 1.0}))  # left ends at 8 <= cR 9: END [6, 8)
    # Stop: l flushes (output CTI min(+inf, 9) = 9), then r.
    inputs = {"l": In(EventShape.EDGE, NEVER, SCHEMA), "r": In(EventShape.INTERVAL, NEVER, SCHEMA)}
    n, p = _unmatched(1, 1.0), {"k": 1, "v": 1.0, "right_k": 1, "right_v": 2.0}
    # EDGE consumer: a START edge once its start is below the output CTI, an END edge once its
    # end is; each segment by (start, START edges first, end).
    assert run_both(app, script, inputs, EventShape.EDGE, [3, 6]) == [
        edge_start(0, n),
        cti(2),
        cti(3),
        edge_end(0, 4, n),
        edge_start(4, p),
        edge_end(4, 6, p),
        edge_start(6, n),
        cti(7),
        edge_end(6, 8, n),
        cti(9),
        cti(MAX_TIME),
    ]


@pytest.mark.parametrize(("flush", "held"), [(False, 4), (True, 0)])
def test_state_keeps_only_what_can_still_change(app, flush, held):
    script = EventScript()
    for t in range(0, 40, 4):
        script.insert("l", interval(t, t + 3, {"k": t % 3, "v": 0.0}))
        script.insert("r", interval(t + 1, t + 2, {"k": t % 3, "v": 1.0}))
    script.insert("l", interval(50, 100, {"k": 0, "v": 0.0}))  # cL 50
    script.insert("r", point(60, {"k": 5, "v": 1.0}))  # cR 60
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, flush))
    left, right = (
        Stream.create(
            n,
            MemoryInputFactory(),
            MemoryInputConfig(script=script, schema=SCHEMA),
            shape,
            settings,
        )
        for n, shape in (("l", EventShape.INTERVAL), ("r", EventShape.INTERVAL))
    )
    name = f"outer-state-{flush}"
    query = left.left_outer_join(right, on="k").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )
    query.run(epochs=3)
    # Without a flush: cL 50, cR 60. The join holds what can still meet a future event: left
    # events ending after cR 60 ([50, 100)), right ones ending after cL 50 (the point at 60): 2.
    # The anti-join holds the left events not done ([50, 100): its end is not <= cR) and the
    # right events ending after min(cL, cR) = 50 (the point at 60): 2. After +inf: nothing.
    [state] = query.operator_metrics().values()
    assert state["state_rows"] == held
    # the last progress record counts the same (the join's and the anti-join's held events),
    # without a job of its own
    [record] = query.last_progress["operators"].values()
    assert record["state_rows"] == held
    out = MemoryOutputFactory.collected(name)
    # [t, t+3) meets [t+1, t+2): the pair [t+1, t+2), the unmatched [t, t+1) and [t+2, t+3).
    early = [e for e in out if not e.is_cti and e.start < 50]
    pairs = [(t + 1, t + 2, "pair") for t in range(0, 40, 4)]
    alone = [(a, a + 1, "alone") for t in range(0, 40, 4) for a in (t, t + 2)]
    assert [
        (e.start, e.end, "alone" if e.payload["right_v"] is None else "pair") for e in early
    ] == (sorted(pairs + alone))


def _two_inputs(schema_r: str = SCHEMA) -> tuple[Stream, Stream]:
    script = EventScript()
    return tuple(
        Stream.create(n, MemoryInputFactory(), MemoryInputConfig(script=script, schema=s), shape)
        for n, s, shape in (("l", SCHEMA, EventShape.POINT), ("r", schema_r, EventShape.EDGE))
    )


def test_a_key_one_side_lacks_is_refused_when_the_query_is_built(app):
    left, right = _two_inputs("id bigint, v double")
    joined = left.left_outer_join(right, on="k")
    with pytest.raises(QueryBuildError) as refused:
        joined.to_query(
            app, "outer-bad", MemoryOutputFactory(), MemoryOutputConfig(name="x"), EventShape.POINT
        )
    text = str(refused.value)
    # in the user's words: the call, the column, where, the columns there, and the fix
    assert "left_outer_join(on='k')" in text and "'k'" in text
    assert "right stream" in text and "id" in text and "Fix:" in text
    assert "__" not in text


def test_the_payload_is_the_join_s_with_nullable_right_columns_and_explain_shows_it(app):
    left, right = _two_inputs()
    joined = left.left_outer_join(right, on="k")
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in joined.schema.fields][2:] == [
        ("right_k", "bigint", True),
        ("right_v", "double", True),
    ]
    assert joined.explain().splitlines()[0] == (
        "left_outer_join on k  key -  CTI: the older of the two sides' latest CTIs (§5)"
    )
