"""The diagnostic stream (semantics §8): ``input.diagnostics()`` on the Spark engine.

One hand-worked script per reason (a CTI violation dropped, one adjusted, early, late, out of
order) and one with substreams: the engine's output must equal the expected items worked out
in the comments, and the reference interpreter's (``tests/reference/diagnostics.py``), in one
epoch and cut in three. Then: counts by reason equal ``query.metrics()``'s, the stream routed to
a JSON-lines file and to a Kafka topic, joined with and unioned with the data stream, windowed,
delivered once across a restart, and refused on a derived stream.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
from ctistream.adapters.kafka import KafkaOutputConfig, KafkaOutputFactory
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
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventOrderingSettings,
    EventShape,
    OrderingAction,
    QueryBuildError,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from tests.engine.test_ordering import COLUMNS, SCHEMA, ordered_cases
from tests.engine.test_versions import ADJUST as V_ADJUST
from tests.engine.test_versions import COLUMNS as V_COLUMNS
from tests.engine.test_versions import DROP as V_DROP
from tests.engine.test_versions import SCHEMA as V_SCHEMA
from tests.engine.test_versions import VERSIONS, version_scripts
from tests.engine.test_versions import row as vrow
from tests.harness import In, spark_run
from tests.reference import (
    Binding,
    Diagnostics,
    Input,
    Join,
    Select,
    Union,
    Where,
    run_reference,
)

_names = itertools.count()
BASE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return BASE + timedelta(seconds=seconds)


def S(seconds: int) -> int:
    """Ticks of ``at(seconds)``."""
    return int((at(seconds) - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))


def gen(policy: AdvanceTimePolicy) -> AdvanceTimeSettings:
    """A CTI at each event's start (frequency 1, delay 0), +inf at the end; ``policy``."""
    generation = AdvanceTimeGenerationSettings(1, timedelta(0), flush_on_stop=True)
    return AdvanceTimeSettings(generation=generation, policy=policy)


def ordered(action: OrderingAction, over: str | None = None) -> EventOrderingSettings:
    """§7 with late tolerance 10 s, out-of-order tolerance 2 s, early window 60 s."""
    return EventOrderingSettings(
        event_time="t",
        late_arrival_tolerance=timedelta(seconds=10),
        out_of_order_tolerance=timedelta(seconds=2),
        early_arrival_window=timedelta(seconds=60),
        action=action,
        over=over,
        flush_on_stop=True,
    )


def diag(c, action, reason, original, new=(None, None), offset=0, partition="0", **payload):
    """The expected diagnostic: a point at ``c`` (the CTI in force)."""
    return point(
        c,
        {
            "action": action,
            "reason": reason,
            "original_start": original[0],
            "original_end": original[1],
            "new_start": new[0],
            "new_end": new[1],
            "input": "in",
            "partition": partition,
            "offset": offset,
            **payload,
        },
    )


def _input(script, shape, settings=None, ordering=None, schema="v int"):
    return Stream.create(
        "in",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=schema),
        shape,
        settings,
        ordering=ordering,
    )


def _collect(app, stream, epochs=1):
    """Run ``stream`` to a memory sink; what it received and the query's metrics."""
    name = f"diag{next(_names)}"
    query = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    try:
        query.run(epochs=epochs)
        return MemoryOutputFactory.collected(name), query.metrics()
    finally:
        app.queries.pop(name, None)


# -- one script per reason, worked by hand ----------------------------------------------------
def cti_violation_drop():
    # CTI at each event's start. point(10) -> CTI 10; cti(20); point(5): 5 < 20 -> dropped,
    # the diagnostic at the CTI in force, 20, offset 2 (items 0, 1, 2); the flush at +inf
    # releases it.
    s = EventScript()
    s.insert("in", point(10, {"v": 1}))
    s.cti("in", 20)
    s.insert("in", point(5, {"v": 2}))
    s.end("in")
    expected = [
        cti(10),
        cti(20),
        diag(20, "dropped", "cti-violation", (5, 6), offset=2, v=2),
        cti(MAX_TIME),
    ]
    return s, EventShape.POINT, gen(AdvanceTimePolicy.DROP), None, "v int", expected


def cti_violation_adjust():
    # interval(15, 30) after cti(20) overlaps 20: ADJUST moves its start to 20 (new_start 20);
    # point(5) lies wholly before 20: dropped even under ADJUST. Both at 20, sorted by payload
    # ('adjusted' < 'dropped').
    s = EventScript()
    s.insert("in", point(10, {"v": 1}))
    s.cti("in", 20)
    s.insert("in", interval(15, 30, {"v": 3}))
    s.insert("in", point(5, {"v": 2}))
    s.end("in")
    expected = [
        cti(10),
        cti(20),
        diag(20, "adjusted", "cti-violation", (15, 30), (20, None), offset=2, v=3),
        diag(20, "dropped", "cti-violation", (5, 6), offset=3, v=2),
        cti(MAX_TIME),
    ]
    return s, EventShape.INTERVAL, gen(AdvanceTimePolicy.ADJUST), None, "v int", expected


def edges():
    # DROP, a CTI at each START edge's start. START 10 (v=1) -> CTI 10; cti(20); START 5 (v=2)
    # breaks 20: dropped; its END edge (5, 30) goes with it: dropped too; the END edge (10, 15)
    # of the open v=1 breaks 20 but is never dropped: it closes its edge at 20 (new_end 20).
    # All three at 20: adjusted first, then the drops by original end (30 < +inf).
    s = EventScript()
    s.insert("in", edge_start(10, {"v": 1}))
    s.cti("in", 20)
    s.insert("in", edge_start(5, {"v": 2}))
    s.insert("in", edge_end(5, 30, {"v": 2}))
    s.insert("in", edge_end(10, 15, {"v": 1}))
    s.end("in")
    expected = [
        cti(10),
        cti(20),
        diag(20, "adjusted", "cti-violation", (10, 15), (None, 20), offset=4, v=1),
        diag(20, "dropped", "cti-violation", (5, 30), offset=3, v=2),
        diag(20, "dropped", "cti-violation", (5, MAX_TIME), offset=2, v=2),
        cti(MAX_TIME),
    ]
    return s, EventShape.EDGE, gen(AdvanceTimePolicy.DROP), None, "v int", expected


def early():
    # e0: t 10 s arriving at 10 s: kept; watermark 10 - 2 = 8 s, the CTI. e1: t 100 s arriving
    # at 11 s is 89 s ahead (> 60 s): dropped as early, at the CTI in force, 8 s.
    s = EventScript()
    s.insert("in", point(0, {"v": 0, "t": at(10)}), arrival=at(10))
    s.insert("in", point(0, {"v": 1, "t": at(100)}), arrival=at(11))
    s.end("in", arrival=at(12))
    expected = [
        cti(S(8)),
        diag(S(8), "dropped", "early", (S(100), S(100) + 1), offset=1, v=1, t=at(100)),
        cti(MAX_TIME),
    ]
    return s, EventShape.POINT, None, ordered(OrderingAction.DROP), "v int, t timestamp", expected


def late():
    # e0: t 30 s at 30 s: CTI 28 s. e1: t 1 s arriving at 32 s is 31 s behind (> 10 s): late,
    # moved to 32 - 10 = 22 s; 22 s is below the watermark 28 s: out of order, moved to 28 s.
    # Two adjustments, two diagnostics at the CTI in force, 28 s; §3 then finds 28 >= 28: fine.
    s = EventScript()
    s.insert("in", point(0, {"v": 0, "t": at(30)}), arrival=at(30))
    s.insert("in", point(0, {"v": 1, "t": at(1)}), arrival=at(32))
    s.end("in", arrival=at(33))
    original = (S(1), S(1) + 1)
    expected = [
        cti(S(28)),
        diag(S(28), "adjusted", "late", original, (S(22), None), offset=1, v=1, t=at(1)),
        diag(S(28), "adjusted", "out-of-order", original, (S(28), None), offset=1, v=1, t=at(1)),
        cti(MAX_TIME),
    ]
    return s, EventShape.POINT, None, ordered(OrderingAction.ADJUST), "v int, t timestamp", expected


def out_of_order():
    # e0: t 10 s at 10 s: CTI 8 s. e1: t 7 s at 11 s: 4 s behind (not late), below the
    # watermark 8 s: out of order, dropped; at the CTI in force, 8 s.
    s = EventScript()
    s.insert("in", point(0, {"v": 0, "t": at(10)}), arrival=at(10))
    s.insert("in", point(0, {"v": 1, "t": at(7)}), arrival=at(11))
    s.end("in", arrival=at(12))
    expected = [
        cti(S(8)),
        diag(S(8), "dropped", "out-of-order", (S(7), S(7) + 1), offset=1, v=1, t=at(7)),
        cti(MAX_TIME),
    ]
    return s, EventShape.POINT, None, ordered(OrderingAction.DROP), "v int, t timestamp", expected


def per_key():
    # over=k: each key its own watermark; the input's CTI is arrival - 10 s after each event
    # whose arrival rises (0 s, 1 s, 2 s). k=1 at 10 s (watermark 8 s), k=2 at 20 s; then k=1
    # at 5 s (arriving at 12 s, 7 s behind: not late) is below key 1's watermark 8 s: dropped
    # out of order, though key 2's watermark (18 s) says nothing of key 1. The CTI in force is
    # 1 s; the diagnostic carries its key, and the CTI at 2 s releases it.
    s = EventScript()
    s.insert("in", point(0, {"k": 1, "t": at(10)}), arrival=at(10))
    s.insert("in", point(0, {"k": 2, "t": at(20)}), arrival=at(11))
    s.insert("in", point(0, {"k": 1, "t": at(5)}), arrival=at(12))
    s.end("in", arrival=at(13))
    expected = [
        cti(S(0)),
        cti(S(1)),
        diag(S(1), "dropped", "out-of-order", (S(5), S(5) + 1), offset=2, k=1, t=at(5)),
        cti(S(2)),
        cti(MAX_TIME),
    ]
    ordering = ordered(OrderingAction.DROP, over="k")
    return s, EventShape.POINT, None, ordering, "k int, t timestamp", expected


CASES = [cti_violation_drop, cti_violation_adjust, edges, early, late, out_of_order, per_key]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_each_dropped_or_adjusted_item_is_one_point_at_the_cti_in_force(app, case):
    script, shape, settings, ordering, schema, expected = case()
    stream = _input(script, shape, settings, ordering, schema)
    columns = tuple(f.name for f in stream.schema.fields)
    reference = run_reference(
        script, [Binding("in", settings, columns, ordering)], Diagnostics("in"), EventShape.POINT
    )
    assert reference.output == expected
    # cut in three (one epoch: the tests below); the cut carries §3's and §7's state
    got, metrics = _collect(app, stream.diagnostics(), epochs=3)
    assert got == expected
    _assert_counts_are_the_metrics(got, metrics["in"])


def _assert_counts_are_the_metrics(got, m):
    """Counting the diagnostics ``got`` gives the input's metrics ``m``, reason by reason."""
    counts = Counter((e.payload["action"], e.payload["reason"]) for e in got if not e.is_cti)
    by_reason = m.get("dropped_by_reason", {"cti-violation": m["dropped"]})
    adjusted = m.get("adjusted_by_reason", {"cti-violation": m["adjusted"]})
    assert {r: n for r, n in by_reason.items() if n} == {
        r: n for (a, r), n in counts.items() if a == "dropped"
    }
    assert {r: n for r, n in adjusted.items() if n} == {
        r: n for (a, r), n in counts.items() if a == "adjusted"
    }


# -- an input of versions (docs/decisions.md "Versions"): the edges its ingress makes ---------
# Rows (k, v, gone) at their valid-from time; explicit CTIs only, flushed at the end. A row
# closes its key's open version with an END edge (the old payload, original start, ending at
# the row's time) and, unless a delete, opens a START edge [t, +inf). Each dropped or adjusted
# edge is one diagnostic at the CTI in force before the row, with the row's offset and the
# edge's own payload (an END edge's is the version it closes: docs/decisions.md "Diagnostic
# stream").
def versions_drop():
    # 3: v60 of k1 at 15 breaks CTI 20: it closes k1's v50 at 20 (never dropped while v50 is
    #    open: §3.4, adjusted, END edge (10, 15) -> new_end 20, v50's payload) and is dropped
    #    (START edge (15, +inf), its own payload); both at 20, offset 3.
    # 4: the delete of k2 at 16 breaks 20: it closes v7 at 20 (adjusted, (12, 16) -> end 20).
    # 5: the delete of k1 at 30 closes the dropped v60: its END edge (15, 30) is dropped with
    #    it, at the CTI in force 20, v60's payload, offset 5.
    # 6: a delete of k3, which has no open version: deletes_ignored, not a drop: no diagnostic.
    # All at 20, released by cti(40): adjusted before dropped, then by original start and end.
    # Cut before items 3 and 5: v50 and v7 reach their closing rows from the epoch before, and
    # so does the dropped v60.
    s = EventScript()
    s.insert("in", point(10, vrow(1, 50)))
    s.insert("in", point(12, vrow(2, 7)))
    s.cti("in", 20)
    s.insert("in", point(15, vrow(1, 60)))
    s.insert("in", point(16, vrow(2, 0, gone=True)))
    s.insert("in", point(30, vrow(1, 0, gone=True)))
    s.insert("in", point(35, vrow(3, 0, gone=True)))
    s.cti("in", 40)
    expected = [
        cti(20),
        diag(20, "adjusted", "cti-violation", (10, 15), (None, 20), offset=3, **vrow(1, 50)),
        diag(20, "adjusted", "cti-violation", (12, 16), (None, 20), offset=4, **vrow(2, 7)),
        diag(20, "dropped", "cti-violation", (15, 30), offset=5, **vrow(1, 60)),
        diag(20, "dropped", "cti-violation", (15, MAX_TIME), offset=3, **vrow(1, 60)),
        cti(40),
        cti(MAX_TIME),
    ]
    # dropped: v60 and its END edge; adjusted: v50's and v7's END edges; one ignored delete
    counts = {"dropped": 2, "adjusted": 2, "deletes_ignored": 1}
    return s, V_DROP, [3, 5], expected, counts


def versions_adjust():
    # 2: v60 of k1 at 15 breaks CTI 20: it closes v50 at 20 (adjusted END edge (10, 15), new_end
    #    20) and ADJUST starts it at 20 (adjusted START edge (15, +inf), new_start 20); offset 2.
    # 3: the delete of k1 at 25 (not late) closes v60 at 25: nothing to report.
    # 5: the delete of k1 at 28 breaks CTI 30, but k1 has no open version: deletes_ignored only.
    # 6: v1 of k2 at 22 breaks 30, no version to close: starts at 30 (new_start 30), offset 6.
    # The two at 20 are released by cti(30) (by original start), the one at 30 by the flush.
    # Cut before items 2 and 5: v50 reaches its closing row from the epoch before.
    s = EventScript()
    s.insert("in", point(10, vrow(1, 50)))
    s.cti("in", 20)
    s.insert("in", point(15, vrow(1, 60)))
    s.insert("in", point(25, vrow(1, 0, gone=True)))
    s.cti("in", 30)
    s.insert("in", point(28, vrow(1, 0, gone=True)))
    s.insert("in", point(22, vrow(2, 1)))
    expected = [
        cti(20),
        diag(20, "adjusted", "cti-violation", (10, 15), (None, 20), offset=2, **vrow(1, 50)),
        diag(20, "adjusted", "cti-violation", (15, MAX_TIME), (20, None), offset=2, **vrow(1, 60)),
        cti(30),
        diag(30, "adjusted", "cti-violation", (22, MAX_TIME), (30, None), offset=6, **vrow(2, 1)),
        cti(MAX_TIME),
    ]
    counts = {"dropped": 0, "adjusted": 3, "deletes_ignored": 1}
    return s, V_ADJUST, [2, 5], expected, counts


@pytest.mark.parametrize("case", [versions_drop, versions_adjust], ids=lambda c: c.__name__)
def test_an_input_of_versions_reports_each_version_and_end_edge_it_dropped_or_adjusted(app, case):
    script, settings, cuts, expected, counts = case()
    binding = Binding("in", settings, V_COLUMNS, versions=VERSIONS)
    reference = run_reference(script, [binding], Diagnostics("in"), EventShape.POINT)
    assert reference.output == expected
    assert {k: reference.counts["in"][k] for k in counts} == counts
    # cut in three epochs, where the case says (the generated test below cuts anywhere)
    inputs = {"in": In(EventShape.POINT, settings, V_SCHEMA, VERSIONS)}
    build = lambda s: s["in"].diagnostics()  # noqa: E731
    got, metrics = spark_run(app, script, inputs, build, EventShape.POINT, cuts)
    assert got == expected
    assert {k: metrics["in"][k] for k in counts} == counts
    _assert_counts_are_the_metrics(got, metrics["in"])


# -- like any stream: joined, unioned, windowed --------------------------------------------------
def test_the_diagnostics_join_and_union_with_the_data_stream_like_any_stream(app):
    script, shape, settings, _, schema, _ = cti_violation_adjust()
    columns = ("v",)
    binding = [Binding("in", settings, columns)]

    def both(build, reference_plan, epochs):
        expected = run_reference(script, binding, reference_plan, EventShape.INTERVAL).output
        data = _input(script, shape, settings, schema=schema)
        name = f"diag{next(_names)}"
        query = build(data).to_query(
            app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
        )
        try:
            query.run(epochs=epochs)
            assert MemoryOutputFactory.collected(name) == expected
        finally:
            app.queries.pop(name, None)
        return expected

    # join on v: the adjusted interval v=3, [20, 30) after ingress, meets its own diagnostic,
    # the point [20, 21): one pair, the intersection [20, 21), the data's v as right_v; the
    # dropped v=2 never reached the data stream, so its diagnostic meets nothing
    joined = both(
        lambda d: d.diagnostics().select("action", "v").join(d, on="v"),
        Join(
            Select(Diagnostics("in"), lambda p: {"action": p["action"], "v": p["v"]}),
            Input("in"),
            ("v",),
        ),
        epochs=2,
    )
    pairs = [e for e in joined if not e.is_cti]
    assert pairs == [interval(20, 21, {"action": "adjusted", "v": 3, "right_v": 3})]

    # union: the data events and the diagnostics, as (v, what) rows
    def union(d):
        kept = d.select("v", F.lit("kept").alias("what"))
        return kept.union(d.diagnostics().select("v", F.col("action").alias("what")))

    plan = Union(
        (
            Select(Input("in"), lambda p: {"v": p["v"], "what": "kept"}),
            Select(Diagnostics("in"), lambda p: {"v": p["v"], "what": p["action"]}),
        )
    )
    merged = both(union, plan, epochs=1)
    # kept: point 10 (v=1) and [20, 30) (v=3); diagnostics at 20: v=3 adjusted, v=2 dropped
    assert [e for e in merged if not e.is_cti] == [
        interval(10, 11, {"v": 1, "what": "kept"}),
        interval(20, 21, {"v": 2, "what": "dropped"}),
        interval(20, 21, {"v": 3, "what": "adjusted"}),
        interval(20, 30, {"v": 3, "what": "kept"}),
    ]


def test_a_window_counts_the_diagnostics_by_reason_as_the_metrics_do(app):
    # the late case: one event moved by two rules; a tumbling hour over the diagnostics at 28 s
    # holds both: late 1, out-of-order 1, as adjusted_by_reason says
    script, shape, _, ordering, schema, _ = late()
    stream = _input(script, shape, None, ordering, schema)
    counted = stream.diagnostics().tumbling_window("1 hour").group_by("reason")
    got, metrics = _collect(app, counted.aggregate(n=F.count("*")), epochs=1)
    counts = {e.payload["reason"]: e.payload["n"] for e in got if not e.is_cti}
    assert counts == {"late": 1, "out-of-order": 1}
    assert {r: n for r, n in metrics["in"]["adjusted_by_reason"].items() if n} == counts


@pytest.mark.parametrize("epochs", [1, [2]])
def test_an_item_dropped_after_the_cti_at_inf_is_counted_and_breaks_no_consumer(app, epochs):
    # point(1), the CTI at +inf, point(5): 5 < +inf, dropped. Its diagnostic is at the CTI in
    # force, +inf, where nothing is ever released (no CTI comes after +inf): the POINT consumer
    # gets only the CTI at +inf, without an overflow at +inf + 1, and the metrics count the drop.
    script = EventScript()
    script.insert("in", point(1, {"v": 1}))
    script.cti("in", MAX_TIME)
    script.insert("in", point(5, {"v": 2}))
    drop = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(10**6, timedelta(0), False), policy=AdvanceTimePolicy.DROP
    )
    got, metrics = _collect(app, _input(script, EventShape.POINT, drop).diagnostics(), epochs)
    assert got == [cti(MAX_TIME)]
    assert metrics["in"]["dropped"] == 1


# -- bound to real outputs ---------------------------------------------------------------------
def test_the_diagnostics_go_to_a_json_lines_file(app, tmp_path):
    script, shape, settings, _, schema, _ = cti_violation_drop()
    out = tmp_path / "late.jsonl"
    diagnostics = _input(script, shape, settings, schema=schema).diagnostics()
    diagnostics.to_query(
        app,
        f"diag{next(_names)}",
        FileOutputFactory(),
        FileOutputConfig(path=str(out)),
        EventShape.POINT,
    ).run()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # the CTIs 10 and 20, the dropped point 5 (at the CTI 20), the flush
    events = [r for r in rows if r["kind"] == "INSERT"]
    assert [r["kind"] for r in rows] == ["CTI", "CTI", "INSERT", "CTI"]
    assert len(events) == 1
    assert {k: events[0][k] for k in ("action", "reason", "original_start", "offset", "v")} == {
        "action": "dropped",
        "reason": "cti-violation",
        "original_start": 5,
        "offset": 2,
        "v": 2,
    }


def test_the_diagnostics_go_to_a_kafka_topic(app, kafka_broker):
    from tests.adapters.test_kafka import raw_records

    script, shape, _, ordering, schema, expected = out_of_order()
    topic = kafka_broker.create_topic()
    diagnostics = _input(script, shape, None, ordering, schema).diagnostics()
    config = KafkaOutputConfig(bootstrap_servers=kafka_broker.bootstrap, topic=topic)
    diagnostics.to_query(
        app, f"diag{next(_names)}", KafkaOutputFactory(), config, EventShape.POINT
    ).run()
    values = [json.loads(r.value) for r in raw_records(kafka_broker.bootstrap, topic)]
    events = [v for v in values if v.get("action") is not None]
    # one record per diagnostic: the event at 7 s dropped out of order (expected[1])
    assert len(events) == 1
    assert {k: events[0][k] for k in ("action", "reason", "original_start", "v")} == {
        k: expected[1].payload[k] for k in ("action", "reason", "original_start", "v")
    }


# -- restart -----------------------------------------------------------------------------------
def test_each_diagnostic_is_delivered_once_across_a_restart_on_the_checkpoint(app, tmp_path):
    from ctistream.adapters.files import FileInputConfig, FileInputFactory

    from tests.adapters.test_files_query import iso, write_jsonl

    source, out, ckpt = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ckpt"
    first = [{"ts": iso(1), "v": 1}, {"ts": iso(3), "v": 3}, {"ts": iso(2), "v": 2}]
    write_jsonl(source, first)

    def query():
        stream = Stream.create(
            "in",
            FileInputFactory(),
            FileInputConfig(path=str(source), time_column="ts", schema="v int"),
            EventShape.POINT,
            AdvanceTimeSettings(
                generation=AdvanceTimeGenerationSettings(1, timedelta(0)),
                policy=AdvanceTimePolicy.DROP,
            ),
        )
        return stream.diagnostics().to_query(
            app,
            f"diag{next(_names)}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.POINT,
        )

    # CTIs at 1 s and 3 s; the point at 2 s breaks 3 s: dropped (offset 2), its diagnostic at
    # 3 s waits for a CTI above 3 s
    q = query()
    q.start(trigger=None, checkpoint=ckpt)
    q.step()
    q.stop(flush=False)
    # started again on the checkpoint, with more rows: the CTI at 4 s releases the first
    # diagnostic; 0.5 s breaks 4 s (offset 4), released by the CTI at 5 s; each once
    more = [{"ts": iso(4), "v": 4}, {"ts": iso(0.5), "v": 0}, {"ts": iso(5), "v": 5}]
    write_jsonl(source, [*first, *more])
    again = query()
    again.start(trigger=None, checkpoint=ckpt)
    again.step()
    again.stop(flush=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    events = [(r["v"], r["offset"], r["start"]) for r in rows if r["kind"] == "INSERT"]
    assert events == [(2, 2, iso(3)), (0, 4, iso(4))]
    # a file is a partition, named by its absolute path; the offset is the record's index
    assert {r["partition"] for r in rows if r["kind"] == "INSERT"} == {str(source.resolve())}


# -- refused where it has no meaning -------------------------------------------------------------
def test_diagnostics_of_a_derived_stream_is_refused_with_the_fix(app):
    script, shape, settings, _, schema, _ = cti_violation_drop()
    data = _input(script, shape, settings, schema=schema)
    with pytest.raises(QueryBuildError) as error:
        data.where(F.col("v") > 1).diagnostics()
    message = str(error.value)
    assert "expected an input stream" in message and "'in'" in message and "Fix:" in message


def test_an_input_whose_payload_has_a_diagnostic_column_is_refused_when_the_query_is_built(app):
    script, _, settings, _, _, _ = cti_violation_drop()
    data = _input(script, EventShape.POINT, settings, schema="reason string, v int")
    message = r"payload has column\(s\) \['reason'\].*Fix: rename"
    with pytest.raises(QueryBuildError, match=message):
        data.diagnostics().to_query(
            app,
            f"diag{next(_names)}",
            MemoryOutputFactory(),
            MemoryOutputConfig(name="x"),
            EventShape.POINT,
        )


def test_explain_shows_the_diagnostics_over_its_input(app):
    script, shape, settings, _, schema, _ = cti_violation_drop()
    lines = _input(script, shape, settings, schema=schema).diagnostics().explain().splitlines()
    assert lines[0].startswith("diagnostics of input 'in'")
    assert "CTI: the input's CTI (§8)" in lines[0]
    assert lines[1].startswith("  input 'in' (POINT)")


# -- the engine agrees with the reference on generated inputs -------------------------------------
# a third of the profile's examples (one under ``ci``): the generator is test_ordering's, whose
# own property runs the same inputs through the data stream
@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(case=ordered_cases())
def test_generated_diagnostics_match_the_reference_for_any_epoch_cut(app, case):
    # the ordered inputs of tests/engine/test_ordering.py (§7 and §3 drops and moves, 1-2
    # partitions, imports, substreams): the diagnostics of the last bound input ("b" when it
    # is there: §3 only, under an imported CTI; else "a": §7 and §3), cut at random stamps
    ordering, names, a_settings, b_settings, script, _, cuts = case
    bindings = [Binding("a", a_settings, COLUMNS, ordering)]
    if "b" in names:
        bindings.append(Binding("b", b_settings, COLUMNS))
    which = names[-1]
    plan = Diagnostics(which)
    if which == "b":  # a is bound too (b imports its CTIs, or a b's): a union reads both
        plan = Union((plan, Where(Diagnostics("a"), lambda p: False)))
    expected = run_reference(script, bindings, plan, EventShape.POINT).output
    # one run, cut where the case says (the hand-worked tests above run whole and cut)
    for epochs in [cuts or 1]:
        streams = {
            "a": Stream.create(
                "a",
                MemoryInputFactory(),
                MemoryInputConfig(script=script, schema=SCHEMA),
                EventShape.POINT,
                a_settings,
                ordering=ordering,
            )
        }
        if "b" in names:
            streams["b"] = Stream.create(
                "b",
                MemoryInputFactory(),
                MemoryInputConfig(script=script, schema=SCHEMA),
                EventShape.POINT,
                b_settings,
            )
        diagnostics = streams[which].diagnostics()
        if which == "b":
            diagnostics = diagnostics.union(streams["a"].diagnostics().where(F.lit(False)))
        got, _ = _collect(app, diagnostics, epochs)
        assert got == expected, f"epochs={epochs}"


# the random versions of tests/engine/test_versions.py (two partitions, keys, deletes, late
# rows, explicit CTIs): their diagnostics, as many examples as above
@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(
    data=st.data(),
    scripts=version_scripts(),
    bound=st.sampled_from([V_ADJUST, V_DROP]),
)
def test_generated_diagnostics_of_versions_match_the_reference_for_any_epoch_cut(
    app, data, scripts, bound
):
    script, n = scripts
    cuts = sorted(data.draw(st.sets(st.integers(1, n), min_size=1, max_size=3)))
    binding = Binding("ref", bound, V_COLUMNS, versions=VERSIONS)
    expected = run_reference(script, [binding], Diagnostics("ref"), EventShape.POINT).output
    inputs = {"ref": In(EventShape.POINT, bound, V_SCHEMA, VERSIONS)}
    build = lambda s: s["ref"].diagnostics()  # noqa: E731
    got, metrics = spark_run(app, script, inputs, build, EventShape.POINT, cuts)
    assert got == expected, f"epochs={cuts}"
    _assert_counts_are_the_metrics(got, metrics["ref"])
