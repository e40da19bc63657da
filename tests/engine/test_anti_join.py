"""The temporal anti-join on Spark (semantics §5): the parts of left lifetimes no matching right
event covers, released once the right side's CTI has passed them, the older CTI of both sides,
bounded state. Expected timelines are worked out by hand in the comments."""

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
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.harness import In, spark_run
from tests.reference import AntiJoin, Binding, Input, Window, run_reference

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))  # CTI at each start
NEVER = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
)  # explicit CTIs only


def run_both(app, script, inputs, shape, cuts):
    """The Spark output in one epoch and in ``cuts``, checked equal to each other and to the
    reference interpreter's."""
    build = lambda s: s["l"].anti_join(s["r"], on="k")  # noqa: E731
    whole, _ = spark_run(app, script, inputs, build, shape, 1)
    cut, _ = spark_run(app, script, inputs, build, shape, cuts)
    bindings = [Binding(n, i.settings, ("k",)) for n, i in inputs.items()]
    expected = run_reference(script, bindings, AntiJoin(Input("l"), Input("r"), ("k",)), shape)
    assert whole == expected.output
    assert cut == whole
    return whole


def test_uncovered_parts_leave_once_the_right_cti_passes_them(app):
    script = EventScript()
    script.insert("l", interval(0, 10, {"k": 1}))  # cL 0
    # cR 3: [0, 3) is uncovered and decided; its end 3 is not (a right event may start at 3)
    # -> START edge at 0. Output CTI min(0, 3) = 0.
    script.insert("r", interval(3, 5, {"k": 1}))
    # cR 7: [0, 3) ends (3 < 7) -> END edge; [5, 7) starts (5 < 7), end 7 not decided -> START.
    script.insert("r", interval(7, 20, {"k": 1}))
    # cL 12: another key, nothing covers it, but 12 is not below cR 7. Output CTI 7.
    script.insert("l", interval(12, 15, {"k": 2}))
    # cR 30: [5, 7) ends; [12, 15) is decided whole -> an interval. Output CTI 12.
    script.insert("r", point(30, {"k": 9}))
    # Stop: l flushes (output CTI 30 = cR), then r (+inf).
    inputs = {"l": In(EventShape.INTERVAL, EVERY), "r": In(EventShape.INTERVAL, EVERY)}
    k1, k2 = {"k": 1}, {"k": 2}
    assert run_both(app, script, inputs, EventShape.EDGE, [2, 4]) == [
        cti(0),
        edge_start(0, k1),
        edge_end(0, 3, k1),
        edge_start(5, k1),
        cti(7),
        edge_end(5, 7, k1),
        cti(12),
        edge_start(12, k2),
        edge_end(12, 15, k2),
        cti(30),
        cti(MAX_TIME),
    ]
    assert run_both(app, script, inputs, EventShape.INTERVAL, [3]) == [
        cti(0),
        interval(0, 3, k1),
        cti(7),
        interval(5, 7, k1),
        cti(12),
        interval(12, 15, k2),
        cti(30),
        cti(MAX_TIME),
    ]


def test_open_edges_on_both_sides(app):
    script = EventScript()
    script.insert("l", edge_start(0, {"k": 1}))  # left open from 0
    script.insert("r", edge_start(4, {"k": 1}))  # right open from 4: covers [4, +inf) for now
    script.cti("r", 2)  # 0 < cR, but the left CTI is -inf: the left edge might end at once
    script.cti("l", 3)  # 0 < cR 2 and 0 < cL 3: START edge at 0; end 4 >= cR. Output CTI 2
    script.cti("r", 6)  # 4 < cR 6, but 4 >= cL 3: the left may still end first. Output CTI 3
    script.cti("l", 9)  # 4 < 9: END edge [0, 4). Output CTI 6
    script.insert("r", edge_end(4, 8, {"k": 1}))  # right closes at 8: [8, ...) uncovered
    script.cti("r", 12)  # 8 < cR 12 and 8 < cL 9: START edge at 8. Output CTI 9
    script.insert("l", edge_end(0, 10, {"k": 1}))  # left ends at 10 <= cR 12: END [8, 10)
    # Stop: l flushes (output CTI 12), then r.
    inputs = {"l": In(EventShape.EDGE, NEVER), "r": In(EventShape.EDGE, NEVER)}
    k1 = {"k": 1}
    assert run_both(app, script, inputs, EventShape.EDGE, [3, 6]) == [
        edge_start(0, k1),
        cti(2),
        cti(3),
        edge_end(0, 4, k1),
        cti(6),
        edge_start(8, k1),
        cti(9),
        edge_end(8, 10, k1),
        cti(12),
        cti(MAX_TIME),
    ]


@pytest.mark.parametrize(("flush", "held"), [(False, 2), (True, 0)])
def test_state_keeps_only_what_can_still_change(app, flush, held):
    script = EventScript()
    for t in range(0, 40, 4):
        script.insert("l", interval(t, t + 3, {"k": t % 3}))
        script.insert("r", interval(t + 1, t + 2, {"k": t % 3}))
    script.insert("l", interval(50, 100, {"k": 0}))  # cL 50
    script.insert("r", point(60, {"k": 5}))  # cR 60
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, flush))
    left, right = (
        Stream.create(n, MemoryInputFactory(), MemoryInputConfig(script=script), shape, settings)
        for n, shape in (("l", EventShape.INTERVAL), ("r", EventShape.INTERVAL))
    )
    name = f"anti-state-{flush}"
    query = left.anti_join(right, on="k").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )
    query.run(epochs=3)
    # Without a flush: cL 50, cR 60. Left events ending at or before cR are done; [50, 100) is
    # not. Right events ending at or before min(cL, cR) = 50 cannot cover an undecided point;
    # the point at 60 can. After +inf: nothing.
    [state] = query.operator_metrics().values()
    assert state["state_rows"] == held
    out = MemoryOutputFactory.collected(name)
    # [t, t+3) minus [t+1, t+2): [t, t+1) and [t+2, t+3), for t = 0, 4, ..., 36.
    pieces = [interval(a, a + 1, {"k": t % 3}) for t in range(0, 40, 4) for a in (t, t + 2)]
    assert [e for e in out if not e.is_cti and e.start < 50] == pieces


def test_several_left_events_at_one_position_keep_their_own_identity(app):
    """Window results completed by one CTI arrive at one position; the anti-join (and join)
    must tell them apart (found by a random composition: they once shared an identity)."""
    script = EventScript()
    for e in (edge_start(13, {"k": 0}), edge_end(13, 17, {"k": 0}), edge_start(16, {"k": 0})):
        script.insert("a", e)
    script.cti("a", 30)
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, -TICK, False))
    inputs = {"a": In(EventShape.EDGE, settings, "k bigint")}

    def build(s):
        windows = s["a"].hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(v=F.count("*"))
        return windows.anti_join(s["a"], on="k")

    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, 1)
    plan = AntiJoin(Window(Input("a"), 10, 5, ("k",), (("v", len),)), Input("a"), ("k",))
    expected = run_reference(script, [Binding("a", settings, ("k",))], plan, EventShape.INTERVAL)
    assert out == expected.output
    # The input covers [13, +inf) for k = 0. Windows [5, 15), [10, 20), [15, 25) hold 1, 2, 2
    # events ([13, 17) and the open [16, ...)) and complete at CTI 30; their uncovered parts
    # are [5, 13) and [10, 13) (the third is covered whole).
    assert [e for e in out if not e.is_cti] == [
        interval(5, 13, {"k": 0, "v": 1}),
        interval(10, 13, {"k": 0, "v": 2}),
    ]
