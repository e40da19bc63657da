"""The physical plan (engine/physical.py): which fusion applies to which node of a bound query,
and that a traced run's plan has none that hides what the trace records. Planning runs on the
driver when the query is built: no Spark job, nothing is run here."""

from __future__ import annotations

import itertools

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
    AdvanceTimeImportSettings,
    AdvanceTimeSettings,
    EventShape,
    edge_start,
    physical,
    point,
    runtime,
)
from pyspark.sql import functions as F

_names = itertools.count()
EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))
SCHEMA = "k bigint, v bigint"


def _input(name: str, shape: EventShape, settings=EVERY) -> Stream:
    event = (edge_start if shape is EventShape.EDGE else point)(1, {"k": 1, "v": 2})
    script = EventScript().insert(name, event)
    config = MemoryInputConfig(script=script, schema=SCHEMA)
    return Stream.create(name, MemoryInputFactory(), config, shape, settings)


def _plans(app, stream: Stream) -> tuple[physical.PhysicalPlan, physical.PhysicalPlan]:
    sink = f"physical{next(_names)}"
    query = stream.to_query(
        app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
    )
    app.queries.pop(sink, None)
    rt = query._runtime
    return rt.physical, rt._traced_plan


def _lookup(app):
    # The lookup shape of B2: the reference "r" (edges, bound first) imports the data "d"'s
    # CTIs; a hopping window alone reads the join.
    r = _input(
        "r", EventShape.EDGE, AdvanceTimeSettings(import_settings=AdvanceTimeImportSettings("d"))
    )
    d = _input("d", EventShape.POINT)
    joined = d.join(r, on="k")
    return _plans(
        app, joined.hopping_window(TICK * 10, TICK * 5).group_by("k").aggregate(n=F.count("*"))
    )


def test_a_lookup_join_read_by_a_window_packs_its_data_side_and_hands_the_window_intervals(app):
    plan, _ = _lookup(app)
    # r imports d's CTIs, so d is ingested first whatever the binding order
    d, r = plan.scans
    assert (d.spec.name, r.spec.name) == ("d", "r")
    # d: no edges, read only by the join whose other side imports its CTIs -> packed
    assert d.packed and d.pushed is None and not d.edges_on_driver
    # r: edges of bigint payload, compared by the driver as by Spark -> matched there when few
    assert not r.packed and r.edges_on_driver
    join, window = plan.steps
    assert isinstance(join, physical.JoinStep) and isinstance(window, physical.WindowStep)
    # only the window reads the join: intervals where the pair's end is known, and the window's
    # grid (10 every 5) offered to the join; d is all points, r is not
    assert join.lifetimes_only and join.window is window.spec
    assert (window.spec.size, window.spec.hop) == (10, 5)
    assert join.points == (True, False)
    assert join.keyed_sides == (True, True)  # no join below either side
    # the join's output is read by a later operator (checkpointed); the root's by egress only
    assert join.checkpoint and not window.checkpoint
    assert plan.ingress_ahead


def test_a_traced_run_plans_no_fusion_that_hides_what_the_trace_records(app):
    _, traced = _lookup(app)
    d, r = traced.scans
    assert not d.packed and d.pushed is None
    assert r.edges_on_driver  # a driver-side match gives the same rows: the trace sees them
    join, window = traced.steps
    assert not join.lifetimes_only and join.window is None
    assert join.checkpoint and window.checkpoint  # the trace reads the root's output too
    assert not traced.ingress_ahead  # the trace records epochs one after another


def test_a_window_that_alone_reads_a_point_input_is_pushed_into_its_scan(app):
    plan, traced = _plans(
        app,
        _input("a", EventShape.POINT)
        .tumbling_window(TICK * 10)
        .group_by("k")
        .aggregate(n=F.count("*")),
    )
    [scan] = plan.scans
    assert scan.pushed is not None and not scan.packed
    [traced_scan] = traced.scans
    assert traced_scan.pushed is None


def test_only_the_root_window_hands_egress_its_output_as_egress_reads_it(app):
    # Egress releases an interval or a point at the first CTI above its start, by the CTIs'
    # values, and emits a CTI only when it rises: the root window's results need no position
    # and its CTIs no filter. A window that another operator reads places them and filters its
    # CTIs (what an event meets depends on its place among the CTIs), and so does the root
    # window of a traced run (the trace shows each operator's output as it is).
    inner = _input("a", EventShape.POINT).tumbling_window(TICK * 10).group_by("k")
    inner = inner.aggregate(n=F.count("*"))
    outer = inner.tumbling_window(TICK * 20).group_by("k").aggregate(m=F.sum("n"))
    plan, traced = _plans(app, outer)
    first, second = plan.steps
    assert isinstance(first, physical.WindowStep) and isinstance(second, physical.WindowStep)
    assert not first.spec.egress_only and second.spec.egress_only
    assert not any(step.spec.egress_only for step in traced.steps)
    # B2's window, whose partial aggregates the join computes, shares the join's spec
    lookup, _ = _lookup(app)
    join, window = lookup.steps
    assert join.window is window.spec and window.spec.egress_only
    # count and session windows alike
    a = _input("a", EventShape.POINT)
    sessions = a.session_window(TICK * 10).group_by("k").aggregate(n=F.count("*"))
    counted = sessions.count_window(2).aggregate(m=F.sum("n"))
    plan, traced = _plans(app, counted)
    session, count = plan.steps
    assert isinstance(session, physical.SessionWindowStep) and not session.egress_only
    assert isinstance(count, physical.CountWindowStep) and count.egress_only
    assert not any(step.egress_only for step in traced.steps)


def test_keyed_ctis_do_not_enter_a_join_from_a_side_with_a_join_below_it(app):
    a, b, c = (_input(n, EventShape.POINT) for n in "abc")
    inner = a.join(b, on="k").select("k", F.col("v").alias("w"))
    plan, _ = _plans(app, inner.join(c, on="k"))
    first, _, second = plan.steps
    assert isinstance(first, physical.JoinStep) and isinstance(second, physical.JoinStep)
    assert first.keyed_sides == (True, True)
    assert second.keyed_sides == (False, True)  # its left side has the first join below it
    # neither join is read by windows only (the select reads the first, egress the second)
    assert not first.lifetimes_only and not second.lifetimes_only


def test_the_runtime_has_an_executor_for_every_physical_operator(app):
    assert set(runtime._EXECUTORS) == set(physical._STEPS.values())


def test_only_an_input_whose_diagnostics_are_read_gets_its_ordering_decisions_as_rows(app):
    # §7's decisions reach the scan as rows of their own only for the diagnostic stream: an
    # input nobody reads diagnostics from plans none (engine.ordering.order_epoch)
    a, b = _input("a", EventShape.POINT), _input("b", EventShape.POINT)
    plain, _ = _plans(app, a.union(b))
    assert [s.diagnosed for s in plain.scans] == [False, False]
    a, b = _input("a", EventShape.POINT), _input("b", EventShape.POINT)
    read, traced = _plans(app, a.union(b.diagnostics().select("k", "v")))
    assert {s.spec.name: s.diagnosed for s in read.scans} == {"a": False, "b": True}
    assert {s.spec.name: s.diagnosed for s in traced.scans} == {"a": False, "b": True}
