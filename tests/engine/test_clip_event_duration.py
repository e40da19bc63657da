"""``clip_event_duration`` on Spark (semantics §5, StreamInsight's ClipEventDuration): each left
event's end cut at the first matching right start after its start, released by the older CTI of
both sides, bounded state, build-time errors. Expected timelines are worked out by hand in the
comments."""

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
from tests.reference import Binding, ClipEventDuration, Input, run_reference

NEVER = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
)  # explicit CTIs only (and +inf at the end)
SCHEMA = "k bigint, v double"


def run_both(app, script, inputs, shape, cuts):
    """The Spark output in one epoch and in ``cuts``, checked equal to each other and to the
    reference interpreter's."""
    build = lambda s: s["l"].clip_event_duration(s["r"], on="k")  # noqa: E731
    whole, _ = spark_run(app, script, inputs, build, shape, 1)
    cut, _ = spark_run(app, script, inputs, build, shape, cuts)
    bindings = [Binding(n, i.settings, ("k", "v")) for n, i in inputs.items()]
    plan = ClipEventDuration(Input("l"), Input("r"), ("k",))
    expected = run_reference(script, bindings, plan, shape)
    assert whole == expected.output
    assert cut == whole
    return whole


def _script_of_intervals() -> EventScript:
    script = EventScript()
    script.insert("l", interval(0, 10, {"k": 1, "v": 1.0}))  # end 10 not <= cR: START edge at 0
    script.insert("r", point(4, {"k": 1, "v": 2.0}))  # clips it to 4 (4 not <= cR yet)
    script.cti("r", 3)
    script.insert("l", interval(5, 8, {"k": 1, "v": 3.0}))  # 8 not <= cR 3: START edge at 5
    script.insert("r", point(5, {"k": 1, "v": 4.0}))  # at the start, not after it: no clip
    script.cti("r", 6)  # 4 <= cR 6: [0, 4) final -> END edge. (cL -inf: no output CTI)
    script.insert("r", point(6, {"k": 2, "v": 5.0}))  # another key: no clip
    script.insert("r", point(7, {"k": 1, "v": 6.0}))  # clips [5, 8) to 7, not final (cR 6)
    script.cti("l", 9)  # output CTI min(9, 6) = 6
    script.cti("r", 7)  # 7 <= cR 7: [5, 7) final -> END edge; output CTI min(9, 7) = 7
    # Stop: l flushes (output CTI stays 7), then r (+inf).
    return script


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        # INTERVAL consumer: an event once its start is below the output CTI and its end known.
        # At CTI 6 the end of [5, ...) is not final (a right event may still start at 6): the
        # CTI rule holds it back until cR reaches 7.
        (
            EventShape.INTERVAL,
            [
                interval(0, 4, {"k": 1, "v": 1.0}),
                cti(6),
                interval(5, 7, {"k": 1, "v": 3.0}),
                cti(7),
                cti(MAX_TIME),
            ],
        ),
        # EDGE consumer: START edges once their start is below the output CTI, END edges once
        # their end is (7 is not below 7: the END edge [5, 7) waits for +inf).
        (
            EventShape.EDGE,
            [
                edge_start(0, {"k": 1, "v": 1.0}),
                edge_end(0, 4, {"k": 1, "v": 1.0}),
                edge_start(5, {"k": 1, "v": 3.0}),
                cti(6),
                cti(7),
                edge_end(5, 7, {"k": 1, "v": 3.0}),
                cti(MAX_TIME),
            ],
        ),
    ],
)
def test_ends_are_cut_at_the_next_right_start_once_the_right_cti_passes_it(app, shape, expected):
    inputs = {"l": In(EventShape.INTERVAL, NEVER, SCHEMA), "r": In(EventShape.POINT, NEVER, SCHEMA)}
    assert run_both(app, _script_of_intervals(), inputs, shape, [3, 7]) == expected


def test_an_open_left_edge_is_clipped_before_its_end_edge_is_known(app):
    a, b = {"k": 1, "v": 1.0}, {"k": 1, "v": 7.0}
    script = EventScript()
    script.insert("l", edge_start(0, a))  # open, nothing clips it yet: START edge at 0
    script.insert("r", point(3, {"k": 1, "v": 2.0}))  # candidate end 3
    script.cti("r", 4)  # 3 <= cR 4, but the left may still end before 3 (cL -inf)
    script.cti("l", 2)  # cL 2: it still may (an END edge may end at 2). Output CTI 2
    script.cti("l", 3)  # cL 3: it ends at 3 or later, so [0, 3) is final -> END edge. CTI 3
    script.insert("l", edge_end(0, 9, a))  # its END edge changes nothing now
    script.insert("l", edge_start(5, b))  # the right start 3 is before 5: START edge at 5
    script.cti("r", 8)  # output CTI stays min(3, 8) = 3
    script.insert("l", edge_end(5, 6, b))  # end 6 <= cR 8, no right start in (5, 6): END [5, 6)
    # Stop: l flushes (output CTI min(+inf, 8) = 8), then r.
    inputs = {"l": In(EventShape.EDGE, NEVER, SCHEMA), "r": In(EventShape.POINT, NEVER, SCHEMA)}
    assert run_both(app, script, inputs, EventShape.EDGE, [4, 7]) == [
        edge_start(0, a),
        cti(2),
        cti(3),
        edge_end(0, 3, a),
        edge_start(5, b),
        edge_end(5, 6, b),
        cti(8),
        cti(MAX_TIME),
    ]


@pytest.mark.parametrize(("flush", "held"), [(False, 2), (True, 0)])
def test_state_keeps_only_what_can_still_change(app, flush, held):
    script = EventScript()
    for t in range(0, 40, 4):
        script.insert("l", interval(t, t + 3, {"k": t % 3, "v": 0.0}))
        script.insert("r", point(t + 1, {"k": t % 3, "v": 1.0}))
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
        for n, shape in (("l", EventShape.INTERVAL), ("r", EventShape.POINT))
    )
    name = f"clip-state-{flush}"
    query = left.clip_event_duration(right, on="k").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )
    query.run(epochs=3)
    # Without a flush: cL 50, cR 60. Every [t, t+3) was cut at t+1 <= cR: final, gone. [50, 100)
    # (nothing of key 0 starts after 50) ends at 100, not <= cR: held. Of the right starts only
    # those after cL 50 can clip a later left event: the point at 60. After +inf: nothing.
    [state] = query.operator_metrics().values()
    assert state["state_rows"] == held
    out = MemoryOutputFactory.collected(name)
    assert [e for e in out if not e.is_cti and e.start < 50] == [
        interval(t, t + 1, {"k": t % 3, "v": 0.0}) for t in range(0, 40, 4)
    ]


def _two_inputs(schema_r: str = SCHEMA) -> tuple[Stream, Stream]:
    script = EventScript()
    return tuple(
        Stream.create(n, MemoryInputFactory(), MemoryInputConfig(script=script, schema=s), shape)
        for n, s, shape in (("l", SCHEMA, EventShape.INTERVAL), ("r", schema_r, EventShape.POINT))
    )


def test_a_key_one_side_lacks_is_refused_when_the_query_is_built(app):
    left, right = _two_inputs("id bigint, v double")
    clipped = left.clip_event_duration(right, on="k")
    with pytest.raises(QueryBuildError) as refused:
        clipped.to_query(
            app, "clip-bad", MemoryOutputFactory(), MemoryOutputConfig(name="x"), EventShape.POINT
        )
    text = str(refused.value)
    # in the user's words: the call, the column, where, the columns there, and the fix
    assert "clip_event_duration(on='k')" in text and "'k'" in text
    assert "right stream" in text and "id" in text and "Fix:" in text
    assert "__" not in text


def test_the_payload_is_the_left_one_and_explain_shows_the_operator(app):
    left, right = _two_inputs()
    clipped = left.clip_event_duration(right, on="k")
    assert clipped.schema.simpleString() == "struct<k:bigint,v:double>"
    assert clipped.explain().splitlines()[0] == (
        "clip_event_duration on k  key -  CTI: the older of the two sides' latest CTIs (§5)"
    )
