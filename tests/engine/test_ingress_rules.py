"""Each ingress and egress rule (semantics §3, §6) on the Spark engine, on small hand-checked
timelines, each run in one epoch and cut into several: the output must be the same."""

from __future__ import annotations

from datetime import timedelta

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
    CtiViolationError,
    EventShape,
    QueryBuildError,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)

from tests.harness import In, spark_run

S = 1_000_000  # ticks per second
DROP, ADJUST = AdvanceTimePolicy.DROP, AdvanceTimePolicy.ADJUST
INF = cti(MAX_TIME)


def gen(frequency, delay=TICK * 0, flush=False, policy=DROP, imports=None) -> AdvanceTimeSettings:
    return AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(frequency, delay, flush),
        AdvanceTimeImportSettings(imports) if imports else None,
        policy,
    )


def run_cut(app, script, inputs, build=None, shape=EventShape.POINT, cuts=(2, 4)):
    """Run in one epoch and in epochs cut at ``cuts``; both outputs must be equal."""
    whole, metrics = spark_run(app, script, inputs, build, shape, 1)
    cut, _ = spark_run(app, script, inputs, build, shape, list(cuts))
    assert cut == whole, "output depends on the epoch cut"
    return whole, metrics


def test_time_span_generation_makes_a_cti_when_the_max_start_enters_a_new_period(app):
    # semantics §3.2: T = 10 s, delay 0, points at 1, 5, 12, 14, 25, 31 s -> CTIs at 12, 25, 31 s.
    script = EventScript()
    for t in (1, 5, 12, 14, 25, 31):
        script.insert("a", point(t * S, {"v": t}))
    out, _ = run_cut(app, script, {"a": In(settings=gen(timedelta(seconds=10)))})
    p = [point(t * S, {"v": t}) for t in (1, 5, 12, 14, 25)]
    assert out == [p[0], p[1], cti(12 * S), p[2], p[3], cti(25 * S), p[4], cti(31 * S)]


def test_an_explicit_cti_not_above_the_current_one_is_ignored_and_counted(app):
    # semantics §2: CTIs never decrease; a CTI equal to the current one (the second 5 s) and one
    # below it (3 s) change nothing and are counted as ignored.
    script = EventScript()
    script.insert("a", point(1 * S, {"v": 1}))
    script.cti("a", 5 * S)
    script.cti("a", 5 * S)
    script.insert("a", point(6 * S, {"v": 6}))
    script.cti("a", 3 * S)
    script.cti("a", 8 * S)
    out, metrics = run_cut(app, script, {"a": In()}, cuts=(2, 3, 5))
    assert out == [point(1 * S, {"v": 1}), cti(5 * S), point(6 * S, {"v": 6}), cti(8 * S)]
    assert (metrics["a"]["ctis_explicit"], metrics["a"]["ctis_ignored"]) == (4, 2)


def test_count_generation_uses_the_delay_and_never_counts_end_edges(app):
    # Every 2nd counted event makes a CTI at max start - 1 s. The END edge is not counted: were it
    # counted, the second CTI would come after START 30 at 29 s instead of after START 40 at 39 s.
    script = EventScript()
    a, b, c, d = ({"k": k} for k in "abcd")
    script.insert("e", edge_start(10 * S, a))
    script.insert("e", edge_start(20 * S, b))  # -> CTI 19 s
    script.insert("e", edge_end(10 * S, 25 * S, a))
    script.insert("e", edge_start(30 * S, c))
    script.insert("e", edge_start(40 * S, d))  # -> CTI 39 s
    settings = gen(2, timedelta(seconds=1), flush=True)
    out, m = run_cut(
        app, script, {"e": In(EventShape.EDGE, settings)}, shape=EventShape.EDGE, cuts=(1, 3)
    )
    assert out == [
        edge_start(10 * S, a),
        cti(19 * S),
        edge_end(10 * S, 25 * S, a),  # sorted by start: 10 s before 20 s and 30 s
        edge_start(20 * S, b),
        edge_start(30 * S, c),
        cti(39 * S),
        edge_start(40 * S, d),
        INF,
    ]
    assert m["e"]["ctis_generated"] == 3  # 19 s, 39 s and the flush


def test_count_generation_takes_the_max_start_of_earlier_epochs(app):
    # semantics §3.2: the generated CTI is the max start of every counted event so far minus the
    # delay. Every 2nd point, delay 0: after 50 s and 10 s the CTI is 50 s (not 10 s), after
    # 60 s and 55 s it is 60 s; the flush releases the rest. Cut after the first point, the
    # second epoch must still know that 50 s was seen.
    script = EventScript()
    for t in (50, 10, 60, 55):
        script.insert("a", point(t * S, {"v": t}))
    out, m = run_cut(app, script, {"a": In(settings=gen(2, flush=True))}, cuts=(1, 3))
    p = {t: point(t * S, {"v": t}) for t in (50, 10, 60, 55)}
    assert out == [p[10], cti(50 * S), p[50], p[55], cti(60 * S), p[60], INF]
    assert m["a"]["ctis_generated"] == 3  # 50 s, 60 s and the flush


def test_delay_of_minus_one_tick_commits_every_point_at_once(app):
    # The seeds' liveliness case: frequency 1, delay -1 tick.
    script = EventScript()
    for t in (1, 2, 3):
        script.insert("a", point(t * S, {"v": t}))
    out, _ = run_cut(app, script, {"a": In(settings=gen(1, -TICK))})
    assert out == [
        point(1 * S, {"v": 1}),
        cti(1 * S + 1),
        point(2 * S, {"v": 2}),
        cti(2 * S + 1),
        point(3 * S, {"v": 3}),
        cti(3 * S + 1),
    ]
    # With delay 0 the last point waits: its start is not strictly before the CTI at its start.
    zero, _ = run_cut(app, script, {"a": In(settings=gen(1, TICK * 0))})
    assert zero[-2:] == [point(2 * S, {"v": 2}), cti(3 * S)]


def _violations() -> EventScript:
    script = EventScript()
    script.cti("a", 10)
    script.insert("a", point(5, {"n": 1}))  # entirely before the CTI
    script.insert("a", interval(5, 15, {"n": 2}))  # overlaps it
    script.insert("a", interval(2, 8, {"n": 3}))  # entirely before it
    script.insert("a", point(12, {"n": 4}))  # fine
    script.cti("a", 100)
    return script


def test_drop_drops_every_event_that_breaks_the_cti(app):
    never = 10**6  # a count never reached: only the explicit CTIs apply
    out, m = run_cut(
        app,
        _violations(),
        {"a": In(EventShape.INTERVAL, gen(never, policy=DROP))},
        shape=EventShape.INTERVAL,
    )
    assert out == [cti(10), point(12, {"n": 4}), cti(100)]
    assert (m["a"]["dropped"], m["a"]["adjusted"]) == (3, 0)


def test_adjust_moves_overlapping_events_to_the_cti_and_drops_the_rest(app):
    out, m = run_cut(
        app,
        _violations(),
        {"a": In(EventShape.INTERVAL, gen(10**6, policy=ADJUST))},
        shape=EventShape.INTERVAL,
    )
    assert out == [cti(10), interval(10, 15, {"n": 2}), point(12, {"n": 4}), cti(100)]
    assert (m["a"]["dropped"], m["a"]["adjusted"]) == (2, 1)


def test_adjusted_start_edge_is_closed_by_its_end_edge(app):
    script = EventScript()
    script.cti("a", 10)
    script.insert("a", edge_start(4, {"n": 1}))  # adjusted to [10, +inf)
    script.insert("a", edge_end(4, 30, {"n": 1}))  # closes it to [10, 30)
    script.cti("a", 50)
    out, _ = run_cut(
        app,
        script,
        {"a": In(EventShape.EDGE, gen(10**6, policy=ADJUST))},
        shape=EventShape.INTERVAL,
        cuts=(1, 2),
    )
    assert out == [cti(10), interval(10, 30, {"n": 1}), cti(50)]


def test_a_violation_without_policy_fails_and_keeps_everything_before_it(app):
    script = EventScript()
    script.insert("a", point(1, {"n": 1}))
    script.cti("a", 5)
    script.insert("a", point(6, {"n": 2}))
    script.cti("a", 10)
    script.insert("a", point(3, {"n": 3}))  # breaks the CTI at 10
    script.cti("a", 20)
    for epochs in (1, [2, 4]):
        sink = f"violation{epochs!r}"
        stream = Stream.create(
            "a", MemoryInputFactory(), MemoryInputConfig(script=script), EventShape.POINT
        )
        query = stream.to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.POINT
        )
        with pytest.raises(CtiViolationError, match=r"input 'a' \(partition '0', offset 4\)") as e:
            query.run(epochs=epochs)
        # the event as its repr shows it: times in ISO (3 ticks after the epoch)
        assert "point(1970-01-01T00:00:00.000003+00:00, {'n': 3})" in str(e.value)
        assert "Fix:" in str(e.value)
        assert MemoryOutputFactory.collected(sink) == [
            point(1, {"n": 1}),
            cti(5),
            point(6, {"n": 2}),
            cti(10),
        ]


def test_the_input_cti_is_the_minimum_over_its_partitions(app):
    script = EventScript()
    script.insert("a", point(10, {"v": 1}), partition="p0")  # p0 at 10, p1 none: input at -inf
    script.insert("a", point(5, {"v": 2}), partition="p1")  # p1 at 5: input at 5
    script.insert("a", point(20, {"v": 3}), partition="p1")  # p1 at 20: input at 10
    out, m = run_cut(app, script, {"a": In(settings=gen(1))}, cuts=(1,))
    assert out == [cti(5), point(5, {"v": 2}), cti(10)]
    assert m["a"]["cti_ticks"] == 10

    script.declare("a", "p2")  # a declared partition with nothing holds the input at -inf
    held, _ = run_cut(app, script, {"a": In(settings=gen(1))}, cuts=(1,))
    assert held == []


def _lookup_script() -> EventScript:
    script = EventScript()
    script.insert("ref", edge_start(0, {"k": 1, "v": 100}))
    for t in (1, 2, 3):
        script.insert("data", point(t * S, {"k": 1, "v": t}))
    script.insert("ref", edge_start(2 * S, {"k": 2, "v": 200}))  # late: data is at 3 s
    script.insert("data", point(4 * S, {"k": 2, "v": 4}))
    return script


def test_a_slow_reference_stream_without_ctis_stalls_the_union(app):
    inputs = {
        "data": In(EventShape.POINT, gen(1)),
        "ref": In(EventShape.EDGE, gen(10**6, policy=ADJUST)),
    }
    out, _ = run_cut(app, _lookup_script(), inputs, lambda s: s["data"].union(s["ref"]))
    assert out == []  # the reference stream has no CTI: the union releases nothing


def test_a_reference_stream_that_imports_the_data_streams_ctis_follows_it(app):
    inputs = {
        "data": In(EventShape.POINT, gen(1)),
        "ref": In(
            EventShape.EDGE,
            AdvanceTimeSettings(None, AdvanceTimeImportSettings("data"), ADJUST),
        ),
    }
    out, m = run_cut(app, _lookup_script(), inputs, lambda s: s["data"].union(s["ref"]))
    assert out == [
        point(0, {"k": 1, "v": 100}),
        cti(1 * S),
        point(1 * S, {"k": 1, "v": 1}),
        cti(2 * S),
        point(2 * S, {"k": 1, "v": 2}),
        cti(3 * S),
        point(3 * S, {"k": 1, "v": 3}),
        point(3 * S, {"k": 2, "v": 200}),  # the late update takes effect from the CTI on
        cti(4 * S),
    ]
    assert m["ref"]["adjusted"] == 1 and m["ref"]["ctis_imported"] == 4


def test_consumers_get_the_shape_they_ask_for(app):
    script = EventScript()
    script.insert("e", edge_start(10, {"k": "a"}))  # -> CTI 10
    script.insert("e", edge_start(20, {"k": "b"}))  # -> CTI 20
    script.insert("e", edge_end(10, 30, {"k": "a"}))
    script.insert("e", edge_start(40, {"k": "c"}))  # -> CTI 40
    inputs = {"e": In(EventShape.EDGE, gen(1, flush=True))}
    intervals, _ = run_cut(app, script, inputs, shape=EventShape.INTERVAL, cuts=(1, 3))
    # An open edge waits for its END edge; b and c never close.
    assert intervals == [cti(10), cti(20), interval(10, 30, {"k": "a"}), cti(40), INF]
    points, _ = run_cut(app, script, inputs, shape=EventShape.POINT, cuts=(1, 3))
    assert points == [
        cti(10),
        point(10, {"k": "a"}),
        cti(20),
        point(20, {"k": "b"}),
        cti(40),
        point(40, {"k": "c"}),
        INF,
    ]


def test_binding_errors_are_caught_when_the_query_is_created(app):
    script = EventScript().insert("a", point(1, {"v": 1}))
    bad_import = AdvanceTimeSettings(None, AdvanceTimeImportSettings("nope"), DROP)
    with pytest.raises(QueryBuildError, match=r"imports CTIs from 'nope'.*inputs are \['a'\]"):
        spark_run(app, script, {"a": In(settings=bad_import)})
    with pytest.raises(ValueError, match=r"bound as INTERVAL.*Fix"):
        spark_run(app, EventScript().insert("a", edge_start(1)), {"a": In(EventShape.INTERVAL)})
    cycle = {
        "a": In(settings=AdvanceTimeSettings(None, AdvanceTimeImportSettings("b"), DROP)),
        "b": In(settings=AdvanceTimeSettings(None, AdvanceTimeImportSettings("a"), DROP)),
    }
    with pytest.raises(QueryBuildError, match="cycle"):
        spark_run(app, script, cycle, lambda s: s["a"].union(s["b"]))
