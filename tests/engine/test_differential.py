"""The Spark engine agrees exactly with the reference interpreter (semantics §4), for one epoch and
for any cut of the arrival sequence into epochs: events, CTIs, their order, and the counts."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
from ctistream.adapters.memory import EventScript
from ctistream.engine import (
    MAX_TIME,
    MIN_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    CtiViolationError,
    EventKind,
    EventShape,
    MalformedRecordError,
    WindowOutput,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine import ingress as ingress_module
from ctistream.engine import physical as physical_module
from ctistream.engine import runtime as runtime_module
from ctistream.engine.operators import join as join_operator
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from tests.harness import In, spark_run
from tests.reference import (
    AlterEventDuration,
    AlterEventLifetime,
    AntiJoin,
    Apply,
    Binding,
    ClipEventDuration,
    CountWindow,
    GroupApply,
    Input,
    Join,
    LeftOuterJoin,
    Select,
    SessionWindow,
    ShiftEventTime,
    Snapshot,
    TopK,
    ToPoint,
    Union,
    Where,
    Window,
    double_avg,
    double_stddev,
    double_sum,
    double_variance,
    run_reference,
)
from tests.strategies import (
    COLUMNS,
    ROW_WINDOWS,
    Case,
    cases,
    distinct_values,
    epoch_cuts,
    windowed,
)

SEARCHES = ["on the driver", "by a sort"]
#: the hand-written timelines' settings: a CTI generated every 10**6 events, i.e. only the
#: script's explicit CTIs
EXPLICIT = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
#: a CTI after every event (delay 0), flushed at the end, DROP: the lookup cases' data side
EVERY_EVENT = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, TICK * 0, True), policy=AdvanceTimePolicy.DROP
)
#: the lookup cases' reference side: a's CTIs imported, ADJUST
IMPORTS_A = AdvanceTimeSettings(
    import_settings=AdvanceTimeImportSettings("a"), policy=AdvanceTimePolicy.ADJUST
)
SHAPES = st.sampled_from([EventShape.POINT, EventShape.INTERVAL, EventShape.EDGE])
INTERVAL = EventShape.INTERVAL


def _bindings(case: Case) -> list[Binding]:
    return [Binding(n, case.settings[n], COLUMNS) for n in case.shapes]


def _inputs(case: Case) -> dict[str, In]:
    return {n: In(case.shapes[n], case.settings[n], case.schema) for n in case.shapes}


def _agree(app, case: Case, plan, build, shape: EventShape, *splits: int | list[int]) -> None:
    """Spark's output (and counts, or error) for each of ``splits`` (``run(epochs=...)``: a
    number of epochs or the cuts, [] being one epoch) equals the reference's, which knows no
    epochs. A test parametrized over cuts gives one split per case (its [] case runs the single
    epoch); a generated case gives its drawn cuts (the single epoch is every hand-worked test's
    first split, so a generated case spends its Spark runs on cuts)."""
    runs: list[int | list[int]] = []
    for split in splits:
        if (split or 1) not in runs:
            runs.append(split or 1)
    try:
        expected = run_reference(case.script, _bindings(case), plan, shape)
    except (CtiViolationError, MalformedRecordError) as exc:
        for epochs in runs:
            with pytest.raises(type(exc)) as got:
                spark_run(app, case.script, _inputs(case), build, shape, epochs)
            assert str(got.value) == str(exc)
        return
    for epochs in runs:
        output, metrics = spark_run(app, case.script, _inputs(case), build, shape, epochs)
        assert output == expected.output, f"epochs={epochs}"
        assert {n: {k: m[k] for k in expected.counts[n]} for n, m in metrics.items()} == (
            expected.counts
        ), f"epochs={epochs}"


@given(
    data=st.data(),
    case=cases(max_inputs=1),
    shape=SHAPES,
    op=st.sampled_from(["-", "where", "select"]),
)
def test_one_input_with_filter_or_projection_matches_the_reference(app, data, case, shape, op):
    cuts = data.draw(epoch_cuts(case.length))
    plan, build = Input("a"), None
    if op == "where":
        plan = Where(Input("a"), lambda p: p["v"] > 1)
        build = lambda s: s["a"].where(F.col("v") > 1)  # noqa: E731
    elif op == "select":
        plan = Select(Input("a"), lambda p: {"k": p["v"], "v": p["k"] * 2})
        build = lambda s: s["a"].select(F.col("v").alias("k"), (F.col("k") * 2).alias("v"))  # noqa: E731
    _agree(app, case, plan, build, shape, cuts)


#: where an input's END edges are matched (engine.ingress.DRIVER_EDGES): on the driver, in Spark,
#: or on the driver until an epoch and the edges still open hold more than 3 rows
EDGES_MATCHED = {"driver": ingress_module.DRIVER_EDGES, "spark": -1, "mixed": 3}


@pytest.mark.parametrize("matched", sorted(EDGES_MATCHED))
@given(data=st.data(), case=cases(max_inputs=3, max_items=24), shape=SHAPES)
def test_unions_of_inputs_with_imports_match_the_reference(app, matched, data, case, shape):
    cuts = data.draw(epoch_cuts(case.length))
    names = list(case.shapes)
    plan = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])

    def build(s):
        first, *rest = (s[n] for n in names)
        return first.union(*rest) if rest else first

    with _edges_matched(matched):
        _agree(app, case, plan, build, shape, cuts)


@contextmanager
def _edges_matched(where: str):
    """Match END edges as EDGES_MATCHED[where] says (a context manager, not monkeypatch: a
    function-scoped fixture would be shared by hypothesis's examples)."""
    before = ingress_module.DRIVER_EDGES
    ingress_module.DRIVER_EDGES = EDGES_MATCHED[where]
    try:
        yield
    finally:
        ingress_module.DRIVER_EDGES = before


# Unary operators as (reference node, Spark stream method) pairs.
UNARY = {
    "where": (lambda n: Where(n, lambda p: p["v"] > 1), lambda s: s.where(F.col("v") > 1)),
    "shift+5": (lambda n: ShiftEventTime(n, 5), lambda s: s.shift_event_time(TICK * 5)),
    "shift-7": (lambda n: ShiftEventTime(n, -7), lambda s: s.shift_event_time(-TICK * 7)),
    "duration4": (lambda n: AlterEventDuration(n, 4), lambda s: s.alter_event_duration(TICK * 4)),
    "to_point": (ToPoint, lambda s: s.to_point()),
    "snap10": (
        lambda n: AlterEventLifetime(n, lambda t: t - t % 10, 3),
        lambda s: s.alter_event_lifetime(lambda c: c - F.pmod(c, F.lit(10)), TICK * 3),
    ),
}
#: lifetime chains only: times 0..40 moved next to +-inf, where some starts cross and are
#: dropped and ends saturate (§5; windows near +-inf: cases(extremes=True) below)
NEAR_LIMITS = {
    **UNARY,
    "shift-to-max": (
        lambda n: ShiftEventTime(n, MAX_TIME - 30),
        lambda s: s.shift_event_time(TICK * (MAX_TIME - 30)),
    ),
    "shift-to-min": (
        lambda n: ShiftEventTime(n, MIN_TIME + 20),
        lambda s: s.shift_event_time(TICK * (MIN_TIME + 20)),
    ),
}


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=20, forever=True),
    shape=SHAPES,
    chain=st.lists(st.sampled_from(sorted(NEAR_LIMITS)), min_size=1, max_size=3),
)
def test_chains_of_lifetime_operators_match_the_reference(app, data, case, shape, chain):
    cuts = data.draw(epoch_cuts(case.length))
    names = list(case.shapes)
    plan = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])
    for op in chain:
        plan = NEAR_LIMITS[op][0](plan)

    def build(s):
        first, *rest = (s[n] for n in names)
        stream = first.union(*rest) if rest else first
        for op in chain:
            stream = NEAR_LIMITS[op][1](stream)
        return stream

    _agree(app, case, plan, build, shape, cuts)


GRIDS = [(10, 10), (10, 5), (6, 4), (4, 6)]  # (size, hop): tumbling, hopping, gapped


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=20, forever=True, extremes=True),
    shape=SHAPES,
    grid=st.sampled_from(GRIDS),
    keyed=st.booleans(),
    at_end=st.booleans(),
    pre=st.sampled_from(["-", "where", "shift-7"]),
)
def test_windows_with_aggregates_match_the_reference(
    app, data, case, shape, grid, keyed, at_end, pre
):
    cuts = data.draw(epoch_cuts(case.length))
    names = list(case.shapes)
    size, hop = grid
    keys = ("k",) if keyed else ()
    plan = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])
    if pre != "-":
        plan = UNARY[pre][0](plan)
    plan = Window(
        plan,
        size,
        hop,
        keys,
        (("n", len), ("s", lambda rows: sum(r["v"] for r in rows))),
        point_at_end=at_end,
    )

    def build(s):
        first, *rest = (s[n] for n in names)
        stream = first.union(*rest) if rest else first
        if pre != "-":
            stream = UNARY[pre][1](stream)
        output = WindowOutput.POINT_AT_END if at_end else WindowOutput.WINDOW
        windowed = stream.hopping_window(TICK * size, TICK * hop, output=output)
        if keys:
            windowed = windowed.group_by(*keys)
        return windowed.aggregate(n=F.count("*"), s=F.sum("v"))

    _agree(app, case, plan, build, shape, cuts)


@pytest.mark.parametrize(
    ("cuts", "search", "anti"),
    [
        *[(cuts, None, False) for cuts in ([2, 4], list(range(1, 11)))],
        *[([1, 5, 8], search, True) for search in SEARCHES],
    ],
)
def test_join_pairs_waiting_across_epochs_match_the_reference(app, cuts, search, anti, monkeypatch):
    # Pairs of open edges that wait for their ends over several epochs (the random cases rarely
    # cut between a pair's forming and its edges' END edges): key 1 ends when both sides' ends
    # are known, key 2 when b's CTI passes a's end (the join forms a waiting pair again from its
    # held events every epoch: one epoch per row finds an END edge emitted twice). The
    # anti-join finds the first CTI at or above an end among the CTIs collected to the driver,
    # or (more CTIs than it takes) by one sort.
    if search == "by a sort":
        monkeypatch.setattr(join_operator, "SEARCH_ON_DRIVER", 0)
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 0}))
    script.insert("b", edge_start(2, {"k": 1, "v": 1}))
    script.insert("a", edge_start(1, {"k": 2, "v": 2}))
    script.insert("b", edge_start(3, {"k": 2, "v": 3}))
    script.insert("a", edge_end(0, 8, {"k": 1, "v": 0}))
    script.insert("a", edge_end(1, 9, {"k": 2, "v": 2}))
    script.insert("b", edge_end(2, 5, {"k": 1, "v": 1}))
    script.cti("b", 6)
    script.cti("b", 9)  # at a's end: key 2's pair ends at 9
    script.cti("a", 20)
    case = Case(script, dict.fromkeys("ab", EventShape.EDGE), dict.fromkeys("ab", EXPLICIT), 10)
    plan = (AntiJoin if anti else Join)(Input("a"), Input("b"), ("k",))

    def build(s):
        return s["a"].anti_join(s["b"], on="k") if anti else s["a"].join(s["b"], on="k")

    _agree(app, case, plan, build, EventShape.EDGE, cuts)


@pytest.mark.parametrize("matched", sorted(EDGES_MATCHED))
@pytest.mark.parametrize("cuts", [[], [2], [3]])
def test_an_end_edge_that_closes_no_start_edge_is_reported_like_the_reference(app, cuts, matched):
    # The first such END edge by position (offset 4, not 6), in whichever epoch it arrives; a
    # START edge that was dropped (a CTI violation) still counts as open for its END edge. The
    # one at offset 4 is late too (4 < CTI 5): matched like any other (§3.4), it closes nothing,
    # and the error shows it as it came (end 4, not the CTI).
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.cti("a", 5)
    script.insert("a", edge_start(3, {"k": 2, "v": 2}))  # dropped: before the CTI
    script.insert("a", edge_end(3, 9, {"k": 2, "v": 2}))  # closes it: counted as dropped
    script.insert("a", edge_end(2, 4, {"k": 1, "v": 1}))  # no START edge at 2
    script.insert("a", edge_end(0, 9, {"k": 1, "v": 1}))
    script.insert("a", edge_end(4, 9, {"k": 1, "v": 1}))  # no START edge either, later
    drop = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(10**6, TICK * 0, True), policy=AdvanceTimePolicy.DROP
    )
    case = Case(script, {"a": EventShape.EDGE}, {"a": drop}, 7)
    found = r"offset 4\): edge_end\(.*\(start 2 ticks, end 4 ticks\)"
    with pytest.raises(MalformedRecordError, match=found):
        run_reference(script, _bindings(case), Input("a"), EventShape.EDGE)
    with _edges_matched(matched):
        _agree(app, case, Input("a"), None, EventShape.EDGE, cuts)


@pytest.mark.parametrize("matched", sorted(EDGES_MATCHED))
def test_edge_matching_rules_hold_wherever_edges_are_matched(app, matched):
    # By hand (semantics §3): on "a" (ADJUST) two START edges of k=1 open with start 0, the
    # second adjusted to the CTI 2; END edges close them first in, first out: [0, 5), [2, 7)
    # (last in, first out would give [2, 5) and [0, 7)). The END edge (3, 4) of k=2 breaks the
    # CTI 6: its START edge is open, so it closes it at the CTI, [3, 6), counted as adjusted
    # (§3.4). On "b" (DROP) the START edge of k=4 breaks the CTI 5 and is dropped, and so is the
    # END edge closing it; the END edge (3, 4) of k=3 breaks the CTI 5 and closes its open START
    # edge at 5: [3, 5), adjusted although the policy is DROP.
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.cti("a", 2)
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.insert("b", edge_start(3, {"k": 3, "v": 3}))
    script.cti("b", 5)
    script.insert("b", edge_start(4, {"k": 4, "v": 4}))
    script.insert("a", edge_end(0, 5, {"k": 1, "v": 1}))
    script.insert("a", edge_start(3, {"k": 2, "v": 2}))
    script.insert("a", edge_end(0, 7, {"k": 1, "v": 1}))
    script.cti("a", 6)
    script.insert("b", edge_end(4, 8, {"k": 4, "v": 4}))
    script.insert("a", edge_end(3, 4, {"k": 2, "v": 2}))
    script.insert("b", edge_end(3, 4, {"k": 3, "v": 3}))
    script.cti("a", 10)
    script.cti("b", 10)
    gen = AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
    settings = {
        "a": AdvanceTimeSettings(gen, policy=AdvanceTimePolicy.ADJUST),
        "b": AdvanceTimeSettings(gen, policy=AdvanceTimePolicy.DROP),
    }
    case = Case(script, {"a": EventShape.EDGE, "b": EventShape.EDGE}, settings, 15)
    expected = run_reference(script, _bindings(case), Union((Input("a"), Input("b"))), INTERVAL)
    assert [e for e in expected.output if e.kind is EventKind.INSERT] == [
        interval(0, 5, {"k": 1, "v": 1}),
        interval(2, 7, {"k": 1, "v": 1}),
        interval(3, 5, {"k": 3, "v": 3}),
        interval(3, 6, {"k": 2, "v": 2}),
    ]
    counts = [(expected.counts[n]["dropped"], expected.counts[n]["adjusted"]) for n in "ab"]
    assert counts == [(0, 2), (2, 1)]
    with _edges_matched(matched):
        _agree(
            app,
            case,
            Union((Input("a"), Input("b"))),
            lambda s: s["a"].union(s["b"]),
            INTERVAL,
            1,
            [2, 8, 12],
        )


@pytest.mark.parametrize("matched", sorted(EDGES_MATCHED))
def test_late_end_edges_close_their_start_edges_at_the_cti_wherever_edges_are_matched(app, matched):
    # By hand (semantics §3.4, a late END edge never dropped while its START edge is open).
    # "a" (ADJUST): START(0, k1) on time; CTI 10; START(5, k2) adjusted to 10; END(0, 4, k1)
    # breaks CTI 10 and closes k1 at 10: [0, 10); END(5, 7, k2) breaks it too while the CTI is
    # still 10: [10, 10), empty, never released; START(12, k3) on time; CTI 20; END(12, 15, k3)
    # closes k3 at 20: [12, 20). Adjusted: the START edge of k2 and the three END edges.
    # "b" (DROP): START(1, k4); CTI 8; END(1, 3, k4) closes k4 at 8: [1, 8), adjusted although
    # the policy is DROP; START(2, k5) dropped; END(2, 3, k5) dropped with it.
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 1}))
    script.insert("b", edge_start(1, {"k": 4, "v": 4}))
    script.cti("a", 10)
    script.cti("b", 8)
    script.insert("a", edge_start(5, {"k": 2, "v": 2}))
    script.insert("b", edge_end(1, 3, {"k": 4, "v": 4}))
    script.insert("a", edge_end(0, 4, {"k": 1, "v": 1}))
    script.insert("b", edge_start(2, {"k": 5, "v": 5}))
    script.insert("a", edge_end(5, 7, {"k": 2, "v": 2}))
    script.insert("b", edge_end(2, 3, {"k": 5, "v": 5}))
    script.insert("a", edge_start(12, {"k": 3, "v": 3}))
    script.cti("a", 20)
    script.insert("a", edge_end(12, 15, {"k": 3, "v": 3}))
    script.cti("a", 30)
    script.cti("b", 30)
    gen = AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
    settings = {
        "a": AdvanceTimeSettings(gen, policy=AdvanceTimePolicy.ADJUST),
        "b": AdvanceTimeSettings(gen, policy=AdvanceTimePolicy.DROP),
    }
    case = Case(script, {"a": EventShape.EDGE, "b": EventShape.EDGE}, settings, 15)
    plan = Union((Input("a"), Input("b")))
    expected = run_reference(script, _bindings(case), plan, INTERVAL)
    assert [e for e in expected.output if e.kind is EventKind.INSERT] == [
        interval(0, 10, {"k": 1, "v": 1}),
        interval(1, 8, {"k": 4, "v": 4}),
        interval(12, 20, {"k": 3, "v": 3}),
    ]
    counts = [(expected.counts[n]["dropped"], expected.counts[n]["adjusted"]) for n in "ab"]
    assert counts == [(0, 4), (2, 1)]
    with _edges_matched(matched):
        # one epoch, and four: the END edges of k1, k2 and k4 in the epoch after their START
        # edges, k3's START edge carried across the epoch that holds CTI 20
        _agree(app, case, plan, lambda s: s["a"].union(s["b"]), INTERVAL, 1, [2, 7, 11])


@pytest.mark.parametrize("matched", sorted(EDGES_MATCHED))
def test_a_late_reference_update_ends_the_old_value_at_the_cti_in_a_lookup_join(app, matched):
    # The lookup shape with a late update written as it happened: limit 50 ends at 2 and 60
    # starts at 2, but both arrive when the imported CTI is 4 (a: a CTI after every point).
    # The END edge closes 50 at 4, [0, 4) (§3.4: dropping it would keep 50 valid forever and
    # readings 4, 5, 6 would join both limits); ADJUST starts 60 at 4. Reading 4 formed a pair
    # with the open 50 before the update, [4, 5) ∩ [0, 4) = [4, 4): empty, never released. So
    # each reading joins one limit: 50 for 1, 2, 3; 60 for 4, 5, 6.
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 50}))
    for t in (1, 2, 3, 4):
        script.insert("a", point(t, {"k": 1, "v": t}))
    script.insert("b", edge_end(0, 2, {"k": 1, "v": 50}))
    script.insert("b", edge_start(2, {"k": 1, "v": 60}))
    for t in (5, 6):
        script.insert("a", point(t, {"k": 1, "v": t}))
    shapes = {"a": EventShape.POINT, "b": EventShape.EDGE}
    case = Case(script, shapes, {"a": EVERY_EVENT, "b": IMPORTS_A}, 9)
    plan = Join(Input("a"), Input("b"), ("k",))
    expected = run_reference(script, _bindings(case), plan, EventShape.POINT)
    joined = [(e.start, e.payload["right_v"]) for e in expected.output if not e.is_cti]
    assert joined == [(1, 50), (2, 50), (3, 50), (4, 60), (5, 60), (6, 60)]
    assert (expected.counts["b"]["adjusted"], expected.counts["b"]["dropped"]) == (2, 0)
    with _edges_matched(matched):
        # the update in the epoch after its START edge, and the pair of reading 4 too
        _agree(app, case, plan, lambda s: s["a"].join(s["b"], on="k"), EventShape.POINT, 1, [3, 6])


@pytest.mark.parametrize("matched", sorted(EDGES_MATCHED))
def test_edges_with_string_and_double_payloads_close_like_the_reference(app, matched):
    # identical edges open together close first in, first out; payloads that differ only in
    # their string or double never close each other
    script = EventScript()
    script.insert("a", edge_start(0, {"k": "x", "v": 1.5}))
    script.insert("a", edge_start(0, {"k": "x", "v": 1.5}))
    script.insert("a", edge_start(0, {"k": "X", "v": 1.5}))
    script.insert("a", edge_start(0, {"k": "x", "v": 2.5}))
    script.cti("a", 1)
    script.insert("a", edge_end(0, 4, {"k": "x", "v": 1.5}))
    script.insert("a", edge_end(0, 6, {"k": "X", "v": 1.5}))
    script.insert("a", edge_end(0, 3, {"k": "x", "v": 1.5}))
    script.cti("a", 8)
    binding = Binding("a", EXPLICIT, COLUMNS)
    expected = run_reference(script, [binding], Input("a"), EventShape.INTERVAL)
    inputs = {"a": In(EventShape.EDGE, EXPLICIT, "k string, v double")}
    with _edges_matched(matched):
        for epochs in (1, [2, 5], [6]):
            output, _ = spark_run(app, script, inputs, None, EventShape.INTERVAL, epochs)
            assert output == expected.output, f"epochs={epochs}"
    assert len([e for e in expected.output if e.kind is EventKind.INSERT]) == 3


@pytest.mark.parametrize("pushed", [False, True])
@pytest.mark.parametrize("cuts", [[], [2, 5], [4, 8, 12]])
def test_a_window_over_a_join_matches_the_reference(app, cuts, pushed, monkeypatch):
    # The lookup shape: intervals joined with open reference edges. A pair's end becomes known
    # when the reference's CTI passes it, in the epoch the pair forms in (the join then gives
    # the window one interval) or a later one (a START edge, then an END edge); ends fall on
    # window starts, so an end off by one changes a window. ``pushed``: aggregates of columns
    # (not of an expression), so the join hands the window its intervals as partial aggregates
    # (engine.operators.join), and the window merges them with its edges'.
    made = []
    real = join_operator.push_window
    monkeypatch.setattr(join_operator, "push_window", lambda *a: made.append(real(*a)) or made[-1])
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 10}))
    script.insert("b", edge_start(0, {"k": 2, "v": 20}))
    script.insert("a", interval(1, 5, {"k": 1, "v": 1}))
    script.insert("a", interval(2, 10, {"k": 2, "v": 2}))
    script.cti("b", 5)  # [1, 5) is known; [2, 10) waits
    script.insert("a", interval(6, 15, {"k": 1, "v": 3}))
    script.cti("a", 6)
    script.insert("b", edge_end(0, 11, {"k": 2, "v": 20}))  # both known: [2, 10)
    script.insert("b", edge_start(11, {"k": 2, "v": 21}))
    script.insert("a", interval(12, 20, {"k": 2, "v": 4}))
    script.cti("b", 12)
    script.cti("a", 12)
    script.cti("b", 15)  # [6, 15) is known
    script.insert("a", interval(16, 25, {"k": 1, "v": 5}))
    script.cti("b", 30)
    script.cti("a", 30)
    shapes = {"a": EventShape.INTERVAL, "b": EventShape.EDGE}
    case = Case(script, shapes, dict.fromkeys("ab", EXPLICIT), 19)
    total = (("n", len), ("s", lambda rows: sum(r["v"] + r["right_v"] for r in rows)))
    aggregates = {"n": F.count("*"), "s": F.sum(F.col("v") + F.col("right_v"))}
    if pushed:
        total = (
            ("n", len),
            ("s", lambda rows: sum(r["v"] for r in rows)),
            ("m", lambda rows: max(r["right_v"] for r in rows)),
        )
        aggregates = {"n": F.count("*"), "s": F.sum("v"), "m": F.max("right_v")}
    plan = Window(Join(Input("a"), Input("b"), ("k",)), 10, 5, ("k",), total)
    expected = run_reference(case.script, _bindings(case), plan, EventShape.INTERVAL)
    assert len(expected.output) > 6, "the scenario must produce windows"

    def build(s):
        joined = s["a"].join(s["b"], on="k")
        return joined.hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(**aggregates)

    _agree(app, case, plan, build, EventShape.INTERVAL, cuts)
    assert made and all((m is not None) == pushed for m in made)


def _lookup_case(short: bool = False) -> Case:
    """The seeds' lookup: points (CTIs by count 2, delay 1, DROP) joined with a reference
    stream of edges that imports their CTIs (ADJUST). Hand-checked CTIs of ``a``: 1 after
    arrival 3, 4 after 5, 7 after 11, 11 after 14, 15 after 17, 20 after 19 (two later with
    ``short``: the reference's first two edges end at 2, so that an epoch may end with the
    reference holding none of its events)."""
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 10}))
    script.insert("b", edge_start(0, {"k": 2, "v": 20}))
    script.insert("a", point(1, {"k": 1, "v": 1}))
    script.insert("a", point(2, {"k": 2, "v": 2}))  # CTI 1
    if short:
        script.insert("b", edge_end(0, 2, {"k": 1, "v": 10}))
        script.insert("b", edge_end(0, 2, {"k": 2, "v": 20}))
    script.insert("a", point(3, {"k": 1, "v": 3}))
    script.insert("a", point(5, {"k": 2, "v": 4}))  # CTI 4
    if not short:
        script.insert("b", edge_end(0, 6, {"k": 2, "v": 20}))
    script.insert("b", edge_start(6, {"k": 2, "v": 21}))
    script.insert("a", point(4, {"k": 2, "v": 5}))
    script.insert("a", point(2, {"k": 1, "v": 6}))  # below the CTI: dropped (counted)
    script.insert("a", point(7, {"k": 2, "v": 7}))
    script.insert("a", point(8, {"k": 1, "v": 8}))  # CTI 7
    script.insert("b", edge_start(3, {"k": 3, "v": 30}))  # below the imported CTI: at 7
    script.insert("a", point(9, {"k": 3, "v": 9}))
    script.insert("a", point(12, {"k": 2, "v": 10}))  # CTI 11
    if not short:
        script.insert("b", edge_end(0, 15, {"k": 1, "v": 10}))
    script.insert("a", point(14, {"k": 1, "v": 11}))
    script.insert("a", point(16, {"k": 1, "v": 12}))  # CTI 15
    script.insert("a", point(20, {"k": 2, "v": 13}))
    script.insert("a", point(21, {"k": 3, "v": 14}))  # CTI 20
    by_count = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(2, TICK, True), policy=AdvanceTimePolicy.DROP
    )
    shapes = {"a": EventShape.POINT, "b": EventShape.EDGE}
    return Case(script, shapes, {"a": by_count, "b": IMPORTS_A}, 20)


@pytest.mark.parametrize(
    "cuts, short, mode, after",
    [
        # every way of pairing, in one epoch, cut, and with a short reference side, the join
        # read by a window or not (each way of pairing and each cut both); "mixed", which
        # changes its way from epoch to epoch, at more cuts
        *[
            (c, s, m, ("-", "window")[(i + j) % 2])
            for i, (c, s) in enumerate((([], False), ([2, 6, 12], False), ([6, 9, 15], True)))
            for j, m in enumerate(("collected", "cogroup", "mixed"))
        ],
        ([3, 9], False, "mixed", "-"),
        ([5, 11, 16, 19], False, "mixed", "window"),
    ],
)
def test_a_lookup_join_pairs_packed_events_as_the_reference_does(
    app, cuts, short, mode, after, monkeypatch
):
    # The data side's scan packs its events (engine.packed) and the join pairs them with the
    # reference side collected whole; "cogroup": the reference side is over the limit, so the
    # join unpacks the events and pairs them by cogroup; "mixed": a limit of 3 events, which
    # the reference side passes in some epochs only (after one over it, the join does not know
    # how many it holds and collects with the limit). The data side's held events (points the
    # reference's CTI has not passed) come back from the pairing function.
    case = _lookup_case(short)
    calls = []
    real = join_operator._lookup_pairs
    monkeypatch.setattr(join_operator, "_lookup_pairs", lambda *a: calls.append(1) or real(*a))
    limits = {"collected": join_operator.LOOKUP_ROWS, "cogroup": -1, "mixed": 3}
    monkeypatch.setattr(join_operator, "LOOKUP_ROWS", limits[mode])
    plan = Join(Input("a"), Input("b"), ("k",))
    shape = EventShape.EDGE
    if after == "window":
        total = (("n", len), ("s", lambda rows: sum(r["v"] + r["right_v"] for r in rows)))
        plan = Window(plan, 6, 3, ("k",), total)
        shape = EventShape.INTERVAL
    expected = run_reference(case.script, _bindings(case), plan, shape)
    assert sum(e.kind is EventKind.INSERT for e in expected.output) >= 8, "pairs must form"

    def build(s):
        joined = s["a"].join(s["b"], on="k")
        if after == "window":
            return (
                joined.hopping_window(TICK * 6, TICK * 3)
                .group_by("k")
                .aggregate(n=F.count("*"), s=F.sum(F.col("v") + F.col("right_v")))
            )
        return joined

    _agree(app, case, plan, build, shape, cuts)
    if mode != "mixed":
        assert bool(calls) == (mode == "collected")


@pytest.mark.parametrize("shape", [EventShape.INTERVAL, EventShape.POINT])
def test_a_lookup_join_over_its_limit_without_edges_still_emits_its_ctis(app, shape, monkeypatch):
    # A reference side without edges (intervals or points) over LOOKUP_ROWS: the join pairs by
    # cogroup, and merges both sides' CTIs on the driver as a lookup join does; it collected
    # only their latest (nothing to search without edges), so it emitted no CTI and the query
    # delivered nothing at all. Worked by hand: a's point at 2 raises a's CTI to 2 (every
    # event, delay 0), which b imports; the join's CTI is min(2, 2) = 2, then +inf at the end
    # (a flushes). The point meets both of b's events (both hold 2): two pairs [2, 3),
    # released by the CTI above 2, ordered by their payload.
    script = EventScript()
    first, second = (
        (interval(0, 10, {"k": 1, "v": 10}), interval(1, 11, {"k": 1, "v": 11}))
        if shape is EventShape.INTERVAL
        else (point(2, {"k": 1, "v": 10}), point(2, {"k": 1, "v": 11}))
    )
    script.insert("b", first)
    script.insert("b", second)
    script.insert("a", point(2, {"k": 1, "v": 1}))
    imports = AdvanceTimeSettings(
        import_settings=AdvanceTimeImportSettings("a"), policy=AdvanceTimePolicy.DROP
    )
    case = Case(script, {"a": EventShape.POINT, "b": shape}, {"a": EVERY_EVENT, "b": imports}, 3)
    monkeypatch.setattr(join_operator, "LOOKUP_ROWS", 1)  # b's 2 events are over it
    plan = Join(Input("a"), Input("b"), ("k",))
    pair = {"k": 1, "v": 1, "right_k": 1}
    assert run_reference(case.script, _bindings(case), plan, EventShape.POINT).output == [
        cti(2),
        point(2, {**pair, "right_v": 10}),
        point(2, {**pair, "right_v": 11}),
        cti(MAX_TIME),
    ]
    build = lambda s: s["a"].join(s["b"], on="k")  # noqa: E731
    _agree(app, case, plan, build, EventShape.POINT, [], [2])


def test_a_lookup_join_that_changes_its_way_of_pairing_twice_matches_the_reference(
    app, spark, monkeypatch
):
    # LOOKUP_ROWS 1, one shuffle partition. Epoch 0: the reference b has 3 events, over the
    # limit: the join pairs by cogroup and keeps a's events that can still meet one as rows.
    # Epoch 1: b holds one event: the packed path, which packs a's held rows beside the scan's
    # packed events and hands both back packed. Epoch 2: b has 2 new events: cogroup again,
    # which unpacks both kinds of values in one task. Their __pos structs differed in the
    # nullability of their fields, and the epoch failed ("Tried to write record batch with
    # different schema"), for this cut only.
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 15}))
    script.insert("b", edge_start(0, {"k": 2, "v": 25}))
    script.insert("b", edge_end(0, 1, {"k": 2, "v": 25}))
    script.insert("a", interval(1, 100, {"k": 1, "v": 50}))  # CTI 1
    script.insert("a", interval(1, 100, {"k": 1, "v": 75}))
    script.insert("a", interval(1, 100, {"k": 2, "v": 87}))
    script.insert("a", interval(2, 100, {"k": 1, "v": 25}))  # CTI 2
    script.insert("a", interval(2, 100, {"k": 1, "v": 37}))
    script.insert("b", edge_start(3, {"k": 3, "v": 35}))
    script.insert("b", edge_start(3, {"k": 4, "v": 45}))
    shapes = {"a": EventShape.INTERVAL, "b": EventShape.EDGE}
    case = Case(script, shapes, {"a": EVERY_EVENT, "b": IMPORTS_A}, 10)
    monkeypatch.setattr(join_operator, "LOOKUP_ROWS", 1)
    ways = []
    real = join_operator._lookup_pairs
    monkeypatch.setattr(join_operator, "_lookup_pairs", lambda *a: ways.append(1) or real(*a))
    plan = Join(Input("a"), Input("b"), ("k",))
    build = lambda s: s["a"].join(s["b"], on="k")  # noqa: E731
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        _agree(app, case, plan, build, EventShape.INTERVAL, [], [6, 8])
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert ways == [1]  # the cut run paired by the packed path once: its epoch 1


@pytest.mark.parametrize("pushed", [False, True])
@pytest.mark.parametrize("cuts", [[], [4, 9], [3, 7, 10, 13]])
def test_a_window_over_a_join_of_points_gets_each_pair_once_its_end_is_known(
    app, cuts, pushed, monkeypatch
):
    # Points joined with open reference edges, read only by a window: a pair whose end is not
    # known yet (the reference's CTI has not passed the point) leaves nothing; it leaves as one
    # interval in the epoch its end becomes known (by the reference's CTI, or by an END edge
    # closing the reference event), so the join's output has no edges at all. Windows end on
    # the points' ends (s + 1), so a pair counted late or twice changes a window.
    made = []
    real = runtime_module.join
    monkeypatch.setattr(
        runtime_module, "join", lambda *a, **k: made.append(real(*a, **k)) or made[-1]
    )
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 10}))
    script.insert("b", edge_start(0, {"k": 2, "v": 20}))
    script.insert("a", point(3, {"k": 1, "v": 1}))  # waits for b's CTI to pass 4
    script.insert("a", point(4, {"k": 2, "v": 2}))  # waits: its end is known by the END edge
    script.cti("b", 2)
    script.insert("a", point(5, {"k": 1, "v": 3}))
    script.cti("a", 5)
    script.insert("b", edge_end(0, 5, {"k": 2, "v": 20}))
    script.insert("b", edge_start(5, {"k": 2, "v": 21}))
    script.cti("b", 4)  # [3, 4) is known
    script.insert("a", point(9, {"k": 2, "v": 4}))
    script.insert("a", point(10, {"k": 1, "v": 5}))
    script.cti("a", 10)
    script.cti("b", 10)  # [5, 6) and [9, 10) are known, [10, 11) waits
    script.insert("a", point(14, {"k": 2, "v": 6}))
    script.cti("b", 30)
    script.cti("a", 30)
    shapes = {"a": EventShape.POINT, "b": EventShape.EDGE}
    case = Case(script, shapes, dict.fromkeys("ab", EXPLICIT), 20)
    total = (("n", len), ("s", lambda rows: sum(r["v"] + r["right_v"] for r in rows)))
    aggregates = {"n": F.count("*"), "s": F.sum(F.col("v") + F.col("right_v"))}
    if pushed:
        total = (("n", len), ("s", lambda rows: sum(r["v"] for r in rows)))
        aggregates = {"n": F.count("*"), "s": F.sum("v")}
    plan = Window(Join(Input("a"), Input("b"), ("k",)), 10, 5, ("k",), total)
    expected = run_reference(case.script, _bindings(case), plan, EventShape.INTERVAL)
    assert len(expected.output) > 6, "the scenario must produce windows"

    def build(s):
        joined = s["a"].join(s["b"], on="k")
        return joined.hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(**aggregates)

    _agree(app, case, plan, build, EventShape.INTERVAL, cuts)
    assert made and not any(flow.edges for flow, _ in made)  # no pair left as an edge


@pytest.mark.parametrize("empty", [False, True])
@pytest.mark.parametrize("cuts", [[], [3, 5]])
def test_a_pair_open_at_infinity_counts_up_to_the_latest_pushed_interval(
    app, cuts, empty, monkeypatch
):
    # Two edges that never close pair into an edge that stays open when the CTIs reach +inf:
    # the window counts it up to the latest time it has seen, here that of a pair that the join
    # handed the window as partial aggregates (their latest time with them): [30, 35), or
    # (``empty``) [30, 25), an empty pair in no window, whose time counts all the same.
    made = []
    real = join_operator.push_window
    monkeypatch.setattr(join_operator, "push_window", lambda *a: made.append(real(*a)) or made[-1])
    end = 25 if empty else 35
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 10}))
    script.insert("a", edge_start(2, {"k": 1, "v": 1}))
    script.insert("b", edge_start(28, {"k": 2, "v": 20}))
    script.insert("a", edge_start(30 if not empty else 20, {"k": 2, "v": 2}))
    script.insert("a", edge_end(30 if not empty else 20, end, {"k": 2, "v": 2}))
    script.insert("b", edge_end(28, 40, {"k": 2, "v": 20}))  # then the CTIs go to +inf
    shapes = {"a": EventShape.EDGE, "b": EventShape.EDGE}
    case = Case(script, shapes, dict.fromkeys("ab", EXPLICIT), 6)
    plan = Window(Join(Input("a"), Input("b"), ("k",)), 10, 10, ("k",), (("n", len),))
    expected = run_reference(case.script, _bindings(case), plan, EventShape.INTERVAL)
    last = (20, 30) if empty else (30, 40)
    assert (*last, {"k": 1, "n": 1}) in [(e.start, e.end, e.payload) for e in expected.output]

    def build(s):
        joined = s["a"].join(s["b"], on="k")
        return joined.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*"))

    _agree(app, case, plan, build, EventShape.INTERVAL, cuts)
    assert made and all(m is not None for m in made)


@pytest.mark.parametrize("cuts", [[], [1, 4, 7]])
def test_a_window_over_a_join_without_edges_gets_its_partials_from_the_join(app, cuts, monkeypatch):
    # Neither side has edges: every pair is an interval, so the window gets partial aggregates
    # only (no events), and merges them with the open windows it holds from epoch to epoch.
    made = []
    real = join_operator.push_window
    monkeypatch.setattr(join_operator, "push_window", lambda *a: made.append(real(*a)) or made[-1])
    script = EventScript()
    script.insert("b", interval(0, 40, {"k": 1, "v": 10}))
    script.insert("b", interval(0, 40, {"k": 2, "v": 20}))
    for i, t in enumerate([1, 3, 8, 12, 14, 19, 23, 31]):
        script.insert("a", point(t, {"k": 1 + i % 2, "v": i}))
    shapes = {"a": EventShape.POINT, "b": EventShape.INTERVAL}
    every = AdvanceTimeSettings(AdvanceTimeGenerationSettings(2, TICK * 0, True))
    case = Case(script, shapes, dict.fromkeys("ab", every), 10)
    total = (("n", len), ("s", lambda rows: sum(r["v"] for r in rows)))
    plan = Window(Join(Input("a"), Input("b"), ("k",)), 10, 5, ("k",), total)
    expected = run_reference(case.script, _bindings(case), plan, EventShape.INTERVAL)
    assert len(expected.output) > 6, "the scenario must produce windows"

    def build(s):
        joined = s["a"].join(s["b"], on="k")
        return (
            joined.hopping_window(TICK * 10, TICK * 5)
            .group_by("k")
            .aggregate(n=F.count("*"), s=F.sum("v"))
        )

    _agree(app, case, plan, build, EventShape.INTERVAL, cuts)
    assert made and all(m is not None for m in made)


@pytest.mark.parametrize("shape", [EventShape.POINT, EventShape.INTERVAL])
@pytest.mark.parametrize("cuts", [[], [2, 6], [1, 5, 9]])
def test_a_window_aggregated_in_its_inputs_scan_matches_the_reference(
    app, cuts, shape, monkeypatch
):
    # A window that alone reads a POINT input gets its partial aggregates from the input's scan
    # (engine.operators.window.PushedWindow): two partitions whose partials meet in Spark, late
    # events dropped, events in several hopping windows, windows that complete in a later epoch
    # than their events arrive in. Intervals (adjusted here) may end at +inf, so they are not
    # counted in the scan (docs/decisions.md, "Windows"): the same scenario runs in Spark.
    pushed = []
    real = physical_module.push_window
    monkeypatch.setattr(
        physical_module, "push_window", lambda *a: pushed.append(real(*a)) or pushed[-1]
    )
    script = EventScript()
    times = [3, 1, 7, 12, 4, 15, 9, 21, 18, 14, 26, 24, 31]
    for i, t in enumerate(times):
        payload = {"k": i % 2, "v": i}
        event = point(t, payload) if shape is EventShape.POINT else interval(t, t + 4, payload)
        script.insert("a", event, partition=f"p{i % 2}")
        if i in (4, 8):
            script.cti("a", t - 2, partition="p0").cti("a", t - 2, partition="p1")
    adjust = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(3, TICK * 2, True), policy=AdvanceTimePolicy.ADJUST
    )
    case = Case(script, {"a": shape}, {"a": adjust}, 15)
    total = (("n", len), ("s", lambda rows: sum(r["v"] for r in rows)))
    plan = Window(Input("a"), 10, 5, ("k",), total)
    expected = run_reference(case.script, _bindings(case), plan, EventShape.INTERVAL)
    assert len(expected.output) > 6, "the scenario must produce windows"
    assert expected.counts["a"]["dropped"] + expected.counts["a"]["adjusted"] > 0

    def build(s):
        windows = s["a"].hopping_window(TICK * 10, TICK * 5).group_by("k")
        return windows.aggregate(n=F.count("*"), s=F.sum("v"))

    _agree(app, case, plan, build, EventShape.INTERVAL, cuts)
    assert bool(pushed) == (shape is EventShape.POINT) and all(p is not None for p in pushed)


@pytest.mark.parametrize("cuts", [[], [4], [2, 7]])
def test_a_join_read_by_a_window_and_by_another_join_keeps_its_edges(app, cuts):
    # A join read by a window and by another operator (a projection into a second join): the
    # join is computed once per epoch for both, and gives the window intervals only where
    # windows are its sole readers (docs/decisions.md). Egress releases by lifetimes and CTIs,
    # so the outputs cannot tell the two forms apart; this pins the shared join over cuts.
    script = EventScript()
    script.insert("b", edge_start(0, {"k": 1, "v": 10}))
    script.insert("a", interval(1, 5, {"k": 1, "v": 1}))
    script.insert("a", interval(2, 12, {"k": 1, "v": 2}))
    script.cti("a", 3)
    script.cti("b", 3)  # the join's CTI passes both starts: the START edges are released
    script.cti("b", 5)  # [1, 5) known now, after it formed
    script.cti("a", 11)
    script.cti("b", 12)  # [2, 12) known
    script.insert("b", edge_end(0, 30, {"k": 1, "v": 10}))
    script.cti("a", 40)
    script.cti("b", 40)
    shapes = {"a": EventShape.INTERVAL, "b": EventShape.EDGE}
    case = Case(script, shapes, dict.fromkeys("ab", EXPLICIT), 12)
    count = (("n", len),)
    joined = Join(Input("a"), Input("b"), ("k",))
    pairs = Select(joined, lambda p: {"k": p["k"], "v": p["v"], "w": p["right_v"]})
    plan = Join(pairs, Window(joined, 10, 10, ("k",), count), ("k",))
    expected = run_reference(case.script, _bindings(case), plan, EventShape.EDGE)
    assert any(e.edge is not None for e in expected.output), "the scenario must have edges"

    def build(s):
        j = s["a"].join(s["b"], on="k")
        counts = j.tumbling_window(TICK * 10).group_by("k").aggregate(n=F.count("*"))
        return j.select("k", "v", F.col("right_v").alias("w")).join(counts, on="k")

    _agree(app, case, plan, build, EventShape.EDGE, cuts)


@pytest.mark.parametrize("cuts", [[], [1, 4, 7]])
def test_payload_names_that_sql_must_quote_match_the_reference(app, cuts):
    # Per-epoch plans are SQL text (docs/decisions.md): a reserved word and a name with a space
    # go through ingress, END-edge matching, a filter, a keyed hopping window and EDGE egress.
    columns = ("order", "unit price")
    script = EventScript()
    script.insert("a", edge_start(0, {"order": 1, "unit price": 10}))
    script.insert("a", edge_start(2, {"order": 2, "unit price": 7}))
    script.insert("a", edge_end(0, 6, {"order": 1, "unit price": 10}))
    script.cti("a", 4)
    script.insert("a", edge_start(5, {"order": 1, "unit price": 3}))
    script.insert("a", edge_end(2, 12, {"order": 2, "unit price": 7}))
    script.insert("a", edge_start(9, {"order": 3, "unit price": 0}))
    script.cti("a", 15)
    script.insert("a", edge_end(5, 16, {"order": 1, "unit price": 3}))
    script.cti("a", 30)
    plan = Window(
        Where(Input("a"), lambda r: r["unit price"] > 0),
        10,
        5,
        ("order",),
        (("total", lambda rows: sum(r["unit price"] for r in rows)),),
    )
    expected = run_reference(script, [Binding("a", EXPLICIT, columns)], plan, EventShape.EDGE)
    assert expected.output, "the scenario must produce windows"

    def build(s):
        priced = s["a"].where(F.col("unit price") > 0)
        return (
            priced.hopping_window(TICK * 10, TICK * 5)
            .group_by("order")
            .aggregate(total=F.sum(F.col("unit price")))
        )

    inputs = {"a": In(EventShape.EDGE, EXPLICIT, "`order` bigint, `unit price` bigint")}
    output, _ = spark_run(app, script, inputs, build, EventShape.EDGE, cuts or 1)
    assert output == expected.output


@given(
    data=st.data(),
    case=cases(min_inputs=2, max_inputs=2, max_items=22),
    shape=SHAPES,
    anti=st.booleans(),
    after=st.sampled_from(["-", "window", "where"]),
)
def test_joins_match_the_reference(app, data, case, shape, anti, after):
    cuts = data.draw(epoch_cuts(case.length))
    plan = (AntiJoin if anti else Join)(Input("a"), Input("b"), ("k",))
    if after == "window":
        plan = Window(plan, 10, 5, ("k",), (("n", len),))
    elif after == "where":
        plan = Where(plan, lambda p: p["v"] >= p.get("right_v", 2))

    def build(s):
        joined = s["a"].anti_join(s["b"], on="k") if anti else s["a"].join(s["b"], on="k")
        if after == "window":
            return (
                joined.hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(n=F.count("*"))
            )
        if after == "where":
            return joined.where(F.col("v") >= (F.lit(2) if anti else F.col("right_v")))
        return joined

    _agree(app, case, plan, build, shape, cuts)


@given(
    data=st.data(),
    case=cases(min_inputs=2, max_inputs=2, max_items=22, doubles=True),
    shape=SHAPES,
)
def test_left_outer_joins_match_the_reference(app, data, case, shape):
    # Double payloads pass through both parts (pairs and unmatched fragments) bit for bit.
    cuts = data.draw(epoch_cuts(case.length))
    plan = LeftOuterJoin(Input("a"), Input("b"), ("k",), COLUMNS)

    def build(s):
        return s["a"].left_outer_join(s["b"], on="k")

    _agree(app, case, plan, build, shape, cuts)


@pytest.mark.parametrize("cuts", [[1, 5, 8]])
def test_left_outer_pairs_and_fragments_waiting_across_epochs_match_the_reference(app, cuts):
    # Open edges on both sides that wait over several epochs: key 1's pair ends when both ends
    # are known and its unmatched parts [0, 2) and [5, 8) wait for b's CTIs; key 2's pair ends
    # when b's CTI passes a's end, its part [1, 3) leaves once b's CTI passes 3.
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 0}))
    script.insert("b", edge_start(2, {"k": 1, "v": 1}))
    script.insert("a", edge_start(1, {"k": 2, "v": 2}))
    script.insert("b", edge_start(3, {"k": 2, "v": 3}))
    script.insert("a", edge_end(0, 8, {"k": 1, "v": 0}))
    script.insert("a", edge_end(1, 9, {"k": 2, "v": 2}))
    script.insert("b", edge_end(2, 5, {"k": 1, "v": 1}))
    script.cti("b", 6)
    script.cti("b", 9)
    script.cti("a", 20)
    case = Case(script, dict.fromkeys("ab", EventShape.EDGE), dict.fromkeys("ab", EXPLICIT), 10)
    plan = LeftOuterJoin(Input("a"), Input("b"), ("k",), COLUMNS)

    def build(s):
        return s["a"].left_outer_join(s["b"], on="k")

    _agree(app, case, plan, build, EventShape.EDGE, cuts)


@given(
    data=st.data(),
    case=cases(min_inputs=2, max_inputs=2, max_items=22, doubles=True),
    shape=SHAPES,
)
def test_clips_match_the_reference(app, data, case, shape):
    cuts = data.draw(epoch_cuts(case.length))
    plan = ClipEventDuration(Input("a"), Input("b"), ("k",))

    def build(s):
        return s["a"].clip_event_duration(s["b"], on="k")

    _agree(app, case, plan, build, shape, cuts)


@pytest.mark.parametrize(
    ("cuts", "search"),
    [([1, 5, 8], SEARCHES[0]), ([1, 5, 8], SEARCHES[1]), (list(range(1, 11)), SEARCHES[0])],
)
def test_clipped_open_edges_waiting_across_epochs_match_the_reference(
    app, cuts, search, monkeypatch
):
    # Open edges on both sides whose ends become final epochs later: key 1's [0, ...) is cut at
    # b's start 2, key 2's [1, ...) at b's start 3; a's CTI comes last, so both become final
    # only when their END edges are known and b's CTI 6 passes the cut. The first CTI at or
    # above a cut is found among the CTIs collected to the driver, or by one sort.
    if search == "by a sort":
        monkeypatch.setattr(join_operator, "SEARCH_ON_DRIVER", 0)
    script = EventScript()
    script.insert("a", edge_start(0, {"k": 1, "v": 0}))
    script.insert("b", edge_start(2, {"k": 1, "v": 1}))
    script.insert("a", edge_start(1, {"k": 2, "v": 2}))
    script.insert("b", edge_start(3, {"k": 2, "v": 3}))
    script.insert("a", edge_end(0, 8, {"k": 1, "v": 0}))
    script.insert("a", edge_end(1, 9, {"k": 2, "v": 2}))
    script.insert("b", edge_end(2, 5, {"k": 1, "v": 1}))
    script.cti("b", 6)
    script.cti("b", 9)
    script.cti("a", 20)
    case = Case(script, dict.fromkeys("ab", EventShape.EDGE), dict.fromkeys("ab", EXPLICIT), 10)
    plan = ClipEventDuration(Input("a"), Input("b"), ("k",))

    def build(s):
        return s["a"].clip_event_duration(s["b"], on="k")

    _agree(app, case, plan, build, EventShape.EDGE, cuts)


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=18, forever=True),
    shape=SHAPES,
    keyed=st.booleans(),
    pre=st.sampled_from(["-", "where", "shift-7"]),
)
def test_snapshot_windows_match_the_reference(app, data, case, shape, keyed, pre):
    cuts = data.draw(epoch_cuts(case.length))
    names = list(case.shapes)
    keys = ("k",) if keyed else ()
    plan = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])
    if pre != "-":
        plan = UNARY[pre][0](plan)
    plan = Snapshot(plan, keys, (("n", len), ("s", lambda rows: sum(r["v"] for r in rows))))

    def build(s):
        first, *rest = (s[n] for n in names)
        stream = first.union(*rest) if rest else first
        if pre != "-":
            stream = UNARY[pre][1](stream)
        windowed = stream.snapshot_window()
        if keys:
            windowed = windowed.group_by(*keys)
        return windowed.aggregate(n=F.count("*"), s=F.sum("v"))

    _agree(app, case, plan, build, shape, cuts)


#: count and session windows (semantics §5): the reference's node and the Spark call, by name
COUNT_SESSION = {
    "count2": (lambda n, k, a: CountWindow(n, 2, k, a), lambda s: s.count_window(2)),
    "count3": (lambda n, k, a: CountWindow(n, 3, k, a), lambda s: s.count_window(3)),
    "session3": (
        lambda n, k, a: SessionWindow(n, 3, None, k, a),
        lambda s: s.session_window(TICK * 3),
    ),
    "session4-max10": (
        lambda n, k, a: SessionWindow(n, 4, 10, k, a),
        lambda s: s.session_window(TICK * 4, TICK * 10),
    ),
}


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=18, forever=True, extremes=True),
    shape=SHAPES,
    window=st.sampled_from(sorted(COUNT_SESSION)),
    keyed=st.booleans(),
    pre=st.sampled_from(["-", "where", "shift-7"]),
)
def test_count_and_session_windows_match_the_reference(app, data, case, shape, window, keyed, pre):
    cuts = data.draw(epoch_cuts(case.length))
    names = list(case.shapes)
    keys = ("k",) if keyed else ()
    plan = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])
    if pre != "-":
        plan = UNARY[pre][0](plan)
    node, call = COUNT_SESSION[window]
    plan = node(plan, keys, (("n", len), ("s", lambda rows: sum(r["v"] for r in rows))))

    def build(s):
        first, *rest = (s[n] for n in names)
        stream = first.union(*rest) if rest else first
        if pre != "-":
            stream = UNARY[pre][1](stream)
        windowed = call(stream)
        if keys:
            windowed = windowed.group_by(*keys)
        return windowed.aggregate(n=F.count("*"), s=F.sum("v"))

    _agree(app, case, plan, build, shape, cuts)


#: aggregates over doubles (semantics §4): the reference's exact definitions and Spark's Columns
#: (made in the test: they need the session); "sum, avg" merge as partial aggregates, "stddev"
#: does not
DOUBLE_AGGREGATES = {
    "sum, avg": (
        (("s", double_sum("v")), ("a", double_avg("v"))),
        lambda: {"s": F.sum("v"), "a": F.avg("v")},
    ),
    "stddev": (
        (("s", double_sum("v")), ("d", double_stddev("v")), ("p", double_variance("v", 0))),
        lambda: {"s": F.sum("v"), "d": F.stddev("v"), "p": F.var_pop("v")},
    ),
}


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=20, doubles=True),
    shape=SHAPES,
    window=st.sampled_from(["tumbling", "hopping", "snapshot", "count2", "session3"]),
    aggregates=st.sampled_from(sorted(DOUBLE_AGGREGATES)),
    keyed=st.booleans(),
    pre=st.sampled_from(["-", "where"]),
)
def test_aggregates_of_doubles_match_the_reference_bit_for_bit(
    app, data, case, shape, window, aggregates, keyed, pre
):
    # Double payloads of magnitudes far apart, both signs, decimal fractions: naive sums depend
    # on the order of the values; the reference's are exact, then rounded once (== compares bits)
    cuts = data.draw(epoch_cuts(case.length))
    names = list(case.shapes)
    keys = ("k",) if keyed else ()
    reference, columns = DOUBLE_AGGREGATES[aggregates]
    plan = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])
    if pre != "-":
        plan = UNARY[pre][0](plan)
    size, hop = (10, 10) if window == "tumbling" else (10, 4)
    if window == "snapshot":
        plan = Snapshot(plan, keys, reference)
    elif window in COUNT_SESSION:
        plan = COUNT_SESSION[window][0](plan, keys, reference)
    else:
        plan = Window(plan, size, hop, keys, reference)

    def build(s):
        first, *rest = (s[n] for n in names)
        stream = first.union(*rest) if rest else first
        if pre != "-":
            stream = UNARY[pre][1](stream)
        if window == "snapshot":
            windowed = stream.snapshot_window()
        elif window in COUNT_SESSION:
            windowed = COUNT_SESSION[window][1](stream)
        else:
            windowed = stream.hopping_window(TICK * size, TICK * hop)
        if keys:
            windowed = windowed.group_by(*keys)
        return windowed.aggregate(**columns())

    _agree(app, case, plan, build, shape, cuts)


# Random compositions: every plan's payload is (k, v), so any operator can follow any other.
@st.composite
def compositions(draw, names: tuple[str, ...], budget: int):
    """``(reference plan, Spark builder, operators used)`` with at most ``budget`` operators."""
    if budget == 0 or draw(st.integers(0, 4)) == 0:
        name = draw(st.sampled_from(names))
        return Input(name), (lambda s: s[name]), 0
    ops = ["unary", "window", "snapshot", "union", "join", "anti_join", "left_outer_join", "clip"]
    op = draw(st.sampled_from([*ops, "count", "session", "group", "top_k", "apply"]))
    if op == "group":
        cp, cb, cn = draw(compositions(names, budget - 1))
        ref_fn, spark_fn, fn_used = draw(group_fns(names, budget - 1 - cn))
        plan = GroupApply(cp, ("k",), ref_fn)
        return plan, (lambda s: cb(s).group_apply("k", lambda g: spark_fn(s, g))), cn + fn_used + 1
    if op in ("union", "join", "anti_join", "left_outer_join", "clip"):
        lp, lb, ln = draw(compositions(names, budget - 1))
        rp, rb, rn = draw(compositions(names, budget - 1 - ln))
        used = 1 + ln + rn
        if op == "union":
            return Union((lp, rp)), (lambda s: lb(s).union(rb(s))), used
        if op == "anti_join":
            return AntiJoin(lp, rp, ("k",)), (lambda s: lb(s).anti_join(rb(s), on="k")), used
        if op == "clip":
            plan = ClipEventDuration(lp, rp, ("k",))
            return plan, (lambda s: lb(s).clip_event_duration(rb(s), on="k")), used
        if op == "left_outer_join":  # v: the right v, or -1 where no right event matched
            plan = Select(LeftOuterJoin(lp, rp, ("k",), COLUMNS), _right_v_or_minus_one)
            v = F.coalesce(F.col("right_v"), F.lit(-1)).alias("v")
            return plan, (lambda s: lb(s).left_outer_join(rb(s), on="k").select("k", v)), used
        plan = Select(Join(lp, rp, ("k",)), lambda p: {"k": p["k"], "v": p["v"] + p["right_v"]})
        v = (F.col("v") + F.col("right_v")).alias("v")
        return plan, (lambda s: lb(s).join(rb(s), on="k").select("k", v)), used
    cp, cb, cn = draw(compositions(names, budget - 1))
    if op == "unary":
        ref, spark = UNARY[draw(st.sampled_from(sorted(UNARY)))]
        return ref(cp), (lambda s: spark(cb(s))), cn + 1
    if op == "window":
        size, hop = draw(st.sampled_from([(10, 5), (8, 8)]))
        plan = Window(cp, size, hop, ("k",), (("v", len),))
        build = lambda s: (  # noqa: E731
            cb(s).hopping_window(TICK * size, TICK * hop).group_by("k").aggregate(v=F.count("*"))
        )
        return plan, build, cn + 1
    if op in ("count", "session"):
        name = draw(st.sampled_from(sorted(w for w in COUNT_SESSION if w.startswith(op))))
        node, call = COUNT_SESSION[name]
        plan = node(cp, ("k",), (("v", len),))
        build = lambda s: call(cb(s)).group_by("k").aggregate(v=F.count("*"))  # noqa: E731
        return plan, build, cn + 1
    if op in ("top_k", "apply"):  # payload (k, v) again: v + rank, or apply's v by k
        size, hop = draw(st.sampled_from(ROW_WINDOWS))
        if op == "apply":
            plan = Apply(cp, size, hop, ("k",), distinct_values, ("v",))
            build = lambda s: (  # noqa: E731
                windowed(cb(s), size, hop).group_by("k").apply(distinct_values, "v bigint")
            )
            return plan, build, cn + 1
        top = TopK(cp, size, hop, ("k",), 2, (("v", False, False),))
        plan = Select(top, lambda p: {"k": p["k"], "v": p["v"] + p["rank"]})
        v = (F.col("v") + F.col("rank")).alias("v")
        build = lambda s: (  # noqa: E731
            windowed(cb(s), size, hop).group_by("k").top_k(2, F.col("v").desc()).select("k", v)
        )
        return plan, build, cn + 1
    plan = Snapshot(cp, ("k",), (("v", len),))
    build = lambda s: cb(s).snapshot_window().group_by("k").aggregate(v=F.count("*"))  # noqa: E731
    return plan, build, cn + 1


@st.composite
def group_fns(draw, names: tuple[str, ...], budget: int):
    """``(reference fn, Spark fn, operators used)``: a sub-query of ``group_apply`` over the
    group's stream, payload ``(k, v)``, of at most ``budget`` operators: the unary operators,
    windows of every kind (grouped by ``k``, the group key, or not: the key is in every result),
    unions of the group's own streams, joins, anti-joins, left outer joins and clips on ``k``
    with the group's stream on the left and, on the right, the group's stream or another
    composition. A snapshot reads the events as they are; every other window as they are
    (edges and intervals may end at +inf) or given a duration of 4."""
    if budget == 0 or draw(st.integers(0, 3)) == 0:
        return (lambda g: g), (lambda s, g: g), 0
    binary = ["union", "join", "anti_join", "left_outer_join", "clip"]
    windows = ["window", "snapshot", "count", "session", "top_k", "apply"]
    op = draw(st.sampled_from(["unary", *windows, *binary]))
    if op in binary:
        lf, lb, ln = draw(group_fns(names, budget - 1))
        if op == "union" or draw(st.booleans()):
            rf, rb, rn = draw(group_fns(names, budget - 1 - ln))
        else:  # another stream: each group's events meet all of its events
            rp, rbo, rn = draw(compositions(names, budget - 1 - ln))
            rf, rb = (lambda g: rp), (lambda s, g: rbo(s))
        used = 1 + ln + rn
        if op == "union":
            return (
                (lambda g: Union((lf(g), rf(g)))),
                (lambda s, g: lb(s, g).union(rb(s, g))),
                used,
            )
        if op == "anti_join":
            return (
                (lambda g: AntiJoin(lf(g), rf(g), ("k",))),
                (lambda s, g: lb(s, g).anti_join(rb(s, g), on="k")),
                used,
            )
        if op == "clip":
            return (
                (lambda g: ClipEventDuration(lf(g), rf(g), ("k",))),
                (lambda s, g: lb(s, g).clip_event_duration(rb(s, g), on="k")),
                used,
            )
        if op == "left_outer_join":  # v: the right v, or -1 where no right event matched
            outer_v = F.coalesce(F.col("right_v"), F.lit(-1)).alias("v")
            return (
                (
                    lambda g: Select(
                        LeftOuterJoin(lf(g), rf(g), ("k",), COLUMNS), _right_v_or_minus_one
                    )
                ),
                (lambda s, g: lb(s, g).left_outer_join(rb(s, g), on="k").select("k", outer_v)),
                used,
            )
        v = (F.col("v") + F.col("right_v")).alias("v")
        return (
            (
                lambda g: Select(
                    Join(lf(g), rf(g), ("k",)), lambda p: {"k": p["k"], "v": p["v"] + p["right_v"]}
                )
            ),
            (lambda s, g: lb(s, g).join(rb(s, g), on="k").select("k", v)),
            used,
        )
    cf, cb, cn = draw(group_fns(names, budget - 1))
    if op == "unary":
        ref, spark = UNARY[draw(st.sampled_from(sorted(UNARY)))]
        return (lambda g: ref(cf(g))), (lambda s, g: spark(cb(s, g))), cn + 1
    # Spark's window is grouped by the group key or not (the rewrite adds it); the reference's
    # always is: within a group ``k`` is one value, so grouping by it only keeps it in the payload
    keys = draw(st.sampled_from([(), ("k",)]))
    if op == "snapshot":  # cut at the group's own endpoints
        return (
            (lambda g: Snapshot(cf(g), ("k",), (("v", len),))),
            (lambda s, g: _by(cb(s, g).snapshot_window(), keys).aggregate(v=F.count("*"))),
            cn + 1,
        )
    if op != "window":
        return (*_group_window(draw, op, cf, cb, keys), cn + 1)
    size, hop = draw(st.sampled_from([(10, 5), (8, 8)]))
    ref_events, events = _as_they_are_or_of_4(draw, cf, cb)

    def ref_window(g):
        return Window(ref_events(g), size, hop, ("k",), (("v", len),))

    def spark_window(s, g):
        windowed = events(s, g).hopping_window(TICK * size, TICK * hop)
        return (windowed.group_by(*keys) if keys else windowed).aggregate(v=F.count("*"))

    return ref_window, spark_window, cn + 1


def _as_they_are_or_of_4(draw, cf, cb) -> tuple:
    """``cf``/``cb``'s events as they are (edges and intervals may end at +inf) or given a
    duration of 4, drawn."""
    if draw(st.booleans()):
        return cf, cb
    return (lambda g: AlterEventDuration(cf(g), 4)), (
        lambda s, g: cb(s, g).alter_event_duration(TICK * 4)
    )


def _group_window(draw, op: str, cf, cb, keys: tuple[str, ...]) -> tuple:
    """``(reference fn, Spark fn)``: a count or session window, or a windowed top-k or apply
    (tumbling, hopping or snapshot), over ``cf``/``cb``'s events as they are or given a
    duration of 4 (a snapshot: as they are), grouped by ``keys``; the payload stays
    ``(k, v)``."""
    if op in ("count", "session"):
        node, call = COUNT_SESSION[
            draw(st.sampled_from(sorted(w for w in COUNT_SESSION if w.startswith(op))))
        ]
        ref_events, events = _as_they_are_or_of_4(draw, cf, cb)
        return (
            (lambda g: node(ref_events(g), ("k",), (("v", len),))),
            (lambda s, g: _by(call(events(s, g)), keys).aggregate(v=F.count("*"))),
        )
    size, hop = draw(st.sampled_from(ROW_WINDOWS))
    ref_in, events = (cf, cb) if size == 0 else _as_they_are_or_of_4(draw, cf, cb)

    def cut(s, g):
        return _by(windowed(events(s, g), size, hop), keys)

    if op == "apply":
        return (
            (lambda g: Apply(ref_in(g), size, hop, ("k",), distinct_values, ("v",))),
            (lambda s, g: cut(s, g).apply(distinct_values, "v bigint")),
        )
    v = (F.col("v") + F.col("rank")).alias("v")
    return (
        (
            lambda g: Select(
                TopK(ref_in(g), size, hop, keys, 2, (("v", False, False),)),
                lambda p: {"k": p["k"], "v": p["v"] + p["rank"]},
            )
        ),
        (lambda s, g: cut(s, g).top_k(2, F.col("v").desc()).select("k", v)),
    )


def _by(windowed_stream, keys: tuple[str, ...]):
    return windowed_stream.group_by(*keys) if keys else windowed_stream


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=18),
    shape=SHAPES,
)
def test_group_apply_matches_the_reference(app, data, case, shape):
    """group_apply by ``k`` over one input (or the union of two) with a random sub-query: each
    group's results and the CTI (the oldest over the groups, the group without events too)."""
    cuts = data.draw(epoch_cuts(case.length))
    names = tuple(case.shapes)
    ref_fn, spark_fn, _ = data.draw(group_fns(names, data.draw(st.integers(1, 3))))
    plan = GroupApply(Input(names[0]), ("k",), ref_fn)
    rest = names[1:]
    if rest:
        plan = Union((plan, *(Input(n) for n in rest)))

    def build(s):
        out = s[names[0]].group_apply("k", lambda g: spark_fn(s, g))
        return out.union(*(s[n] for n in rest)) if rest else out

    _agree(app, case, plan, build, shape, cuts)


@given(
    data=st.data(),
    case=cases(max_inputs=2, max_items=18, forever=True, flushed=True),
    shape=SHAPES,
    op=st.sampled_from(["aggregate", "apply"]),
    grid=st.sampled_from([(10, 10), (10, 5)]),
)
def test_windows_per_group_count_events_to_inf_up_to_their_groups_latest_moment(
    app, data, case, shape, op, grid
):
    """group_apply by ``k`` of a tumbling or hopping window (an aggregate or an apply) over the
    inputs' events as they are: at the CTI +inf an event that ends at +inf counts up to the
    latest finite moment of its own group (§5's bounded work, per group), not of all groups."""
    cuts = data.draw(epoch_cuts(case.length))
    names = tuple(case.shapes)
    size, hop = grid
    events = Union(tuple(Input(n) for n in names)) if len(names) > 1 else Input(names[0])
    if op == "apply":
        plan = GroupApply(
            events, ("k",), lambda g: Apply(g, size, hop, ("k",), distinct_values, ("v",))
        )
    else:
        plan = GroupApply(events, ("k",), lambda g: Window(g, size, hop, ("k",), (("v", len),)))

    def fn(g):
        windowed = g.hopping_window(TICK * size, TICK * hop)
        if op == "apply":
            return windowed.apply(distinct_values, "v bigint")
        return windowed.aggregate(v=F.count("*"))

    def build(s):
        first, *rest = (s[n] for n in names)
        return (first.union(*rest) if rest else first).group_apply("k", fn)

    _agree(app, case, plan, build, shape, cuts)


def _right_v_or_minus_one(p: dict) -> dict:
    return {"k": p["k"], "v": -1 if p["right_v"] is None else p["right_v"]}


def _leaves(plan) -> set[str]:
    if isinstance(plan, Input):
        return {plan.name}
    children = getattr(plan, "children", None) or tuple(
        getattr(plan, f) for f in ("child", "left", "right") if hasattr(plan, f)
    )
    return set().union(*(_leaves(c) for c in children))


@settings(max_examples=int(os.environ.get("CTISTREAM_COMPOSITIONS", "2")))
@given(data=st.data(), case=cases(max_inputs=3, max_items=14), shape=SHAPES)
def test_random_compositions_of_operators_match_the_reference(app, data, case, shape):
    """1-4 operators of every kind over 1-3 inputs; inputs the plan leaves out join it through a
    union at the top, so every bound input (and every CTI import) is in the query."""
    cuts = data.draw(epoch_cuts(case.length))
    names = tuple(case.shapes)
    plan, build, _ = data.draw(compositions(names, data.draw(st.integers(1, 4))))
    rest = [n for n in names if n not in _leaves(plan)]
    if rest:
        plan = Union((plan, *(Input(n) for n in rest)))
        inner = build
        build = lambda s: inner(s).union(*(s[n] for n in rest))  # noqa: E731
    _agree(app, case, plan, build, shape, cuts)


@given(
    data=st.data(),
    case=cases(max_inputs=1, max_items=16, forever=True, doubles=True),
    shape=SHAPES,
    window=st.sampled_from(ROW_WINDOWS),
    keyed=st.booleans(),
    op=st.sampled_from(["top_k", "apply"]),
)
def test_windowed_top_k_and_apply_match_the_reference(app, data, case, shape, window, keyed, op):
    """Windowed top_k (the 2 largest v, doubles included: ties on v broken by start, end,
    payload) and apply over tumbling, hopping and snapshot windows, grouped or not, over inputs
    of every shape (intervals to +inf, edges open until the end), in one epoch and random cuts."""
    cuts = data.draw(epoch_cuts(case.length))
    size, hop = window
    keys = ("k",) if keyed else ()
    if op == "top_k":
        plan = TopK(Input("a"), size, hop, keys, 2, (("v", False, False),))
    else:
        plan = Apply(Input("a"), size, hop, keys, _n_and_sum, ("n", "s"))

    def build(s):
        w = windowed(s["a"], size, hop)
        w = w.group_by(*keys) if keys else w
        if op == "top_k":
            return w.top_k(2, F.col("v").desc())
        return w.apply(_n_and_sum, "n bigint, s double")

    _agree(app, case, plan, build, shape, cuts)


def _n_and_sum(events):
    """apply's function over doubles: the count and math.fsum of v (exact, so any order of the
    events gives the same bits), and one row per open event with its v."""
    import math

    import pandas as pd

    n = [len(events), *([-1] * int(events["end"].isna().sum()))]
    s = [math.fsum(events["v"]), *events.loc[events["end"].isna(), "v"]]
    return pd.DataFrame({"n": n, "s": [float(x) for x in s]})
