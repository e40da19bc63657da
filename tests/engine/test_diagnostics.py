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
    Versions,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from hypothesis import given, settings
from pyspark.sql import functions as F

from tests.engine.test_ordering import COLUMNS, SCHEMA, ordered_cases
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
    # counting the diagnostics gives the metrics' numbers, reason by reason
    counts = Counter((e.payload["action"], e.payload["reason"]) for e in got if not e.is_cti)
    m = metrics["in"]
    by_reason = m.get("dropped_by_reason", {"cti-violation": m["dropped"]})
    adjusted = m.get("adjusted_by_reason", {"cti-violation": m["adjusted"]})
    assert {r: n for r, n in by_reason.items() if n} == {
        r: n for (a, r), n in counts.items() if a == "dropped"
    }
    assert {r: n for r, n in adjusted.items() if n} == {
        r: n for (a, r), n in counts.items() if a == "adjusted"
    }


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


@pytest.mark.parametrize(
    ("schema", "versions", "message"),
    [
        ("reason string, v int", None, r"payload has column\(s\) \['reason'\].*Fix: rename"),
        ("k int, v int", Versions(key="k"), r"bound with versions=.*Fix: read its drops"),
    ],
)
def test_an_input_the_diagnostics_cannot_report_is_refused_when_the_query_is_built(
    app, schema, versions, message
):
    script, _, settings, _, _, _ = cti_violation_drop()
    data = Stream.create(
        "in",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=schema),
        EventShape.POINT,
        settings,
        versions=versions,
    )
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
