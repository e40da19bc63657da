"""The query-binder model: a template over unbound inputs, bound many times to different adapters;
every binding problem reported when the query is created. Two query runs in all."""

from __future__ import annotations

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, Query, QueryBinder, QueryTemplate, Stream
from ctistream.engine import (
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    QueryBuildError,
    Versions,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.plan import InputNode, SelectNode, WhereNode, substitute, walk
from pyspark.sql import functions as F

from tests.adapters.test_push import ListConfig, ListFactory


class Readings(ListFactory):
    """The push adapter of tests/adapters/test_push.py, leaving the schema to the binding."""

    def payload_schema(self, config, shape):
        return None


def _template(name: str) -> QueryTemplate:
    readings = Stream.input("readings", "sensor bigint, v double")
    return QueryTemplate(
        name,
        readings.where(F.col("v") >= 2)
        .tumbling_window(TICK * 10)
        .aggregate(n=F.count("*"), total=F.sum("v")),
        "readings of at least 2, per 10 ticks",
    )


def _out(name: str):
    return MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL


def test_two_queries_from_one_template_with_different_bindings(app, tmp_path):
    template = app.create_query_template("per10", _template("per10").stream)
    assert template.inputs == {"readings": "sensor bigint, v double"}
    assert app.query_templates["per10"] is template

    # Site A: a scripted memory source with explicit CTIs; schema inferred, agreeing.
    script = EventScript()
    for t, v in ((1, 1.0), (3, 2.0), (8, 4.0), (12, 5.0)):
        script.insert("site-a", point(t, {"sensor": 1, "v": v}))
    script.cti("site-a", 20).end("site-a")
    a = (
        QueryBinder(template)
        .bind_producer(
            "readings",
            MemoryInputFactory(),
            MemoryInputConfig(script=script, stream="site-a"),
            EventShape.POINT,
        )
        .add_consumer("out", *_out("binder-a"))
    )
    # Site B: a push adapter that declares no schema (the template's is used), with
    # binding-level CTI generation: a CTI at every event's start, flushed at the end.
    rows = tuple(("event", t, {"sensor": 2, "v": v}) for t, v in ((5, 3.0), (6, 0.5), (25, 7.0)))
    b = (
        QueryBinder(template)
        .bind_producer(
            "readings",
            Readings(),
            ListConfig(rows=rows, trace=str(tmp_path / "trace")),
            EventShape.POINT,
            AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True)),
        )
        .add_consumer("out", *_out("binder-b"))
    )
    assert a.producers == ["readings"] and a.consumers == ["out"]
    query_a = app.create_query("per10-a", a, "site A")
    query_b = app.create_query("per10-b", b)
    assert isinstance(query_a, Query) and query_a.description == "site A"
    assert app.queries["per10-a"] is query_a and app.queries["per10-b"] is query_b

    query_a.run()
    query_b.run()
    # A: v=1 is filtered out; [0,10): 2 + 4; [10,20): 5; both complete at CTI 20, which stays 20
    # (the earliest open window starts there).
    assert MemoryOutputFactory.collected("binder-a") == [
        interval(0, 10, {"n": 2, "total": 6.0}),
        interval(10, 20, {"n": 1, "total": 5.0}),
        cti(20),
    ]
    # B: v=0.5 is filtered out; CTIs 5, 6 -> 0 (window [0,10) open); CTI 25 -> 20 completes
    # [0,10); the flush at +inf completes [20,30).
    assert MemoryOutputFactory.collected("binder-b") == [
        cti(0),
        interval(0, 10, {"n": 1, "total": 3.0}),
        cti(20),
        interval(20, 30, {"n": 1, "total": 7.0}),
        cti(MAX_TIME),
    ]
    # The template itself is untouched: its input is still unbound.
    assert [n.bound for n in walk(template.root) if isinstance(n, InputNode)] == [False]


# -- binding problems, all found by create_query ---------------------------------------------


def _script() -> EventScript:
    script = EventScript()
    script.insert("readings", point(1, {"sensor": 1, "v": 2.0}))
    script.insert("limits", point(1, {"sensor": 1, "limit": 3.0}))
    return script


def _two_inputs() -> QueryTemplate:
    readings = Stream.input("readings", "sensor bigint, v double")
    limits = Stream.input("limits", "sensor bigint, limit double")
    return QueryTemplate("checked", readings.join(limits, on="sensor"))


def _memory(stream: str | None = None) -> tuple:
    return MemoryInputFactory(), MemoryInputConfig(script=_script(), stream=stream)


def test_an_unknown_input_name_lists_the_templates_inputs(app):
    binder = (
        QueryBinder(_two_inputs())
        .bind_producer("reading", *_memory("readings"), EventShape.POINT)
        .bind_producer("limits", *_memory(), EventShape.POINT)
        .add_consumer("out", *_out("x"))
    )
    with pytest.raises(QueryBuildError) as info:
        app.create_query("unknown", binder)
    message = str(info.value)
    assert "cannot create query 'unknown' from template 'checked': 2 binding problem(s)" in message
    assert (
        "bind_producer('reading', MemoryInputFactory(), ...): template 'checked' has no input "
        "'reading'; expected one of its unbound inputs ['limits', 'readings']. Fix:" in message
    )
    assert "template input 'readings' (declared 'sensor bigint, v double') is not bound" in message
    assert "Fix: binder.bind_producer('readings', factory, config, shape)" in message
    assert "unknown" not in app.queries


class PointsOnly(MemoryInputFactory):
    supported_shapes = frozenset({EventShape.POINT})


def test_a_shape_the_factory_cannot_make(app):
    binder = (
        QueryBinder(_two_inputs())
        .bind_producer("readings", *_memory(), EventShape.POINT)
        .bind_producer("limits", PointsOnly(), MemoryInputConfig(script=_script()), EventShape.EDGE)
        .add_consumer("out", *_out("x"))
    )
    with pytest.raises(
        QueryBuildError,
        match=r"bind_producer\('limits', PointsOnly\(\), \.\.\.\): PointsOnly cannot make EDGE "
        r"adapters; expected one of \['POINT'\]\. Fix:",
    ):
        app.create_query("shape", binder)


def test_a_missing_consumer_and_two_consumers(app):
    def bound() -> QueryBinder:
        return (
            QueryBinder(_two_inputs())
            .bind_producer("readings", *_memory(), EventShape.POINT)
            .bind_producer("limits", *_memory(), EventShape.POINT)
        )

    with pytest.raises(QueryBuildError, match=r"no consumer: expected exactly one.*Fix: binder"):
        app.create_query("none", bound())
    two = bound().add_consumer("a", *_out("a")).add_consumer("b", *_out("b"))
    with pytest.raises(QueryBuildError, match=r"2 consumers \['a', 'b'\]: expected exactly one"):
        app.create_query("two", two)


def test_importing_ctis_from_an_input_that_is_not_bound(app):
    imports = AdvanceTimeSettings(
        None, AdvanceTimeImportSettings("readings"), AdvanceTimePolicy.ADJUST
    )
    binder = (
        QueryBinder(_two_inputs())
        .bind_producer("limits", *_memory(), EventShape.POINT, imports)
        .add_consumer("out", *_out("x"))
    )
    with pytest.raises(
        QueryBuildError,
        match=r"bind_producer\('limits', \.\.\.\): imports CTIs from 'readings', a template input "
        r"that this binder does not bind.*Fix: bind_producer\('readings', \.\.\.\)",
    ):
        app.create_query("import", binder)
    elsewhere = AdvanceTimeSettings(None, AdvanceTimeImportSettings("data"))
    binder = (
        QueryBinder(_two_inputs())
        .bind_producer("readings", *_memory(), EventShape.POINT)
        .bind_producer("limits", *_memory(), EventShape.POINT, elsewhere)
        .add_consumer("out", *_out("x"))
    )
    with pytest.raises(
        QueryBuildError, match=r"from 'data', which is not an input of template 'checked'"
    ):
        app.create_query("import2", binder)


def test_a_bound_schema_that_disagrees_with_the_templates(app):
    script = EventScript().insert("readings", point(1, {"sensor": 1, "v": 2}))  # v: bigint
    binder = (
        QueryBinder(_template("typed"))
        .bind_producer(
            "readings", MemoryInputFactory(), MemoryInputConfig(script=script), EventShape.POINT
        )
        .add_consumer("out", *_out("x"))
    )
    with pytest.raises(
        QueryBuildError,
        match=r"input 'readings' of template 'typed' is declared as 'sensor bigint, v double', "
        r"but MemoryInputFactory makes adapters with payload .*column `v`: expected double, got "
        r"bigint\. Fix:",
    ):
        app.create_query("typed", binder)


def test_an_unbound_input_cannot_run_without_a_binder(app):
    stream = Stream.input("readings", "v double").where("v > 0")
    with pytest.raises(
        QueryBuildError, match=r"input 'readings' is an unbound template input.*Fix: make a"
    ):
        stream.to_query(app, "unbound", *_out("x"))


def test_template_and_binder_argument_checks(app: Application):
    with pytest.raises(QueryBuildError, match="two different inputs named 'a'"):
        QueryTemplate("t", Stream.input("a", "v double").union(Stream.input("a", "v double")))
    with pytest.raises(TypeError, match="QueryBinder takes a QueryTemplate"):
        QueryBinder(Stream.input("a", "v double"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="InputAdapterFactory instance"):
        QueryBinder(_template("t")).bind_producer(
            "readings",
            MemoryInputFactory,  # type: ignore[arg-type]
            None,
            EventShape.POINT,
        )
    with pytest.raises(TypeError, match="create_query takes a QueryBinder"):
        app.create_query("q", _template("t"))  # type: ignore[arg-type]
    app.create_query_template("once", Stream.input("a", "v double"))
    with pytest.raises(QueryBuildError, match="already has a query template named 'once'"):
        app.create_query_template("once", Stream.input("a", "v double"))


def test_substitute_copies_only_what_is_above_a_replaced_node_and_keeps_sharing():
    unbound = Stream.input("a", "v double")
    other = Stream.input("b", "v double")
    kept = other.select("v")
    shared = unbound.where("v > 0")
    root = shared.union(shared.select("v"), kept).node
    bound = Stream.create("a", MemoryInputFactory(), None, EventShape.POINT).node
    copy = substitute(root, {unbound.node: bound})
    nodes = list(walk(copy))
    assert bound in nodes and unbound.node not in nodes
    assert kept.node in nodes  # nothing to replace below it: shared, not copied
    wheres = [n for n in nodes if isinstance(n, WhereNode)]
    assert len(wheres) == 1 and wheres[0] is not shared.node  # copied once, used twice
    selects = [n for n in nodes if isinstance(n, SelectNode) and n.child is wheres[0]]
    assert len(selects) == 1
    assert next(iter(walk(root))) is unbound.node  # the original is untouched


def test_a_template_input_bound_as_versions_gets_its_edges_made(app):
    # The template passes the limits through; the binding says its rows are versions of a
    # sensor's limit. Rows (valid from, sensor, limit): (1, 7, 5.0), (4, 7, 6.0), then CTI 10.
    # Sensor 7's second version closes the first at 4, so CTI 10 commits, sorted by (start,
    # end) with a START edge before the END edges of its start: START 5.0 at 1, its END at 4,
    # START 6.0 at 4 (open: its END edge never comes). No settings: explicit CTIs only, and the
    # end of input flushes nothing (no flush_on_stop), so no +inf CTI.
    limits = Stream.input("limits", "sensor bigint, limit double")
    template = app.create_query_template("limits-as-versions", limits.select("sensor", "limit"))
    script = EventScript()
    script.insert("lim", point(1, {"sensor": 7, "limit": 5.0}))
    script.insert("lim", point(4, {"sensor": 7, "limit": 6.0}))
    script.cti("lim", 10).end("lim")
    binder = (
        QueryBinder(template)
        .bind_producer(
            "limits",
            MemoryInputFactory(),
            MemoryInputConfig(script=script, stream="lim"),
            EventShape.POINT,
            versions=Versions(key="sensor"),
        )
        .add_consumer(
            "out",
            MemoryOutputFactory(),
            MemoryOutputConfig(name="binder-versions"),
            EventShape.EDGE,
        )
    )
    app.create_query("limits-as-versions", binder).run()
    five, six = {"sensor": 7, "limit": 5.0}, {"sensor": 7, "limit": 6.0}
    assert MemoryOutputFactory.collected("binder-versions") == [
        edge_start(1, five),
        edge_end(1, 4, five),
        edge_start(4, six),
        cti(10),
    ]
