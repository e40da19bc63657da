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
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.reference import Binding, Diagnostics, run_reference

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


CASES = [cti_violation_drop, cti_violation_adjust, early, late, out_of_order, per_key]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_each_dropped_or_adjusted_item_is_one_point_at_the_cti_in_force(app, case):
    script, shape, settings, ordering, schema, expected = case()
    stream = _input(script, shape, settings, ordering, schema)
    columns = tuple(f.name for f in stream.schema.fields)
    reference = run_reference(
        script, [Binding("in", settings, columns, ordering)], Diagnostics("in"), EventShape.POINT
    )
    assert reference.output == expected
    for epochs in (1, 3):
        got, metrics = _collect(app, stream.diagnostics(), epochs)
        assert got == expected, f"epochs={epochs}"
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
