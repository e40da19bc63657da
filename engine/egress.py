"""Egress: release only committed events, in the consumer's shape, segment by segment (§6).

"The entire query will release its result only up to the most recent CTI." For each new output CTI
``c`` in order, the items it newly commits are released sorted by (start, START edges first, end,
payload), then ``c`` itself. What an item waits for depends on the consumer's shape:

* POINT: each event as a point at its start, once ``start < c``;
* INTERVAL: each event once ``start < c`` and its end is known (an edge: its END edge came first);
* EDGE: a START edge once ``start < c``, an END edge once ``end < c``.

Everything egress releases goes to the output adapter on the driver, so egress runs there: one
Spark job collects the epoch's release items and CTIs, and the driver finds each item's CTI by
binary search (the first CTI above its release time and, for an edge's interval, positioned after
its END edge) and sorts each segment. Items not yet released are the egress state, kept on the
driver (a checkpoint writes them as a DataFrame: :meth:`EgressState.to_frame`).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ctistream.engine.ctis import first_at_or_above, rising
from ctistream.engine.events import EdgeType, Event, EventKind, EventShape
from ctistream.engine.rows import CTI, EDGE, END, KEY, POS, START, Flow, sql_names
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DateType,
    NumericType,
    StringType,
    StructType,
    TimestampType,
)

__all__ = ["EgressState", "egress_epoch"]

_REL = "__rel_t"  # the item is released by the first CTI strictly above this time
_AFTER = "__after"  # and (INTERVAL consumer, edges) only by a CTI positioned after this
_TYP = "__typ"  # 0: a CTI, 1: a release item, 2: an empty END edge cancelling its opener


@dataclass
class EgressState:
    """Items waiting for a CTI, on the driver (start, end, edge, release time, END edge's
    position, then the payload), the schema they were collected with (JSON, for checkpoints),
    the last CTI delivered, and how many items were released so far: the number of the next
    one (output items are numbered from the query's first, semantics §9)."""

    pending: list[tuple] = field(default_factory=list)
    last_cti: int = MIN_TIME
    schema: str | None = None
    released: int = 0

    def to_frame(self, spark: SparkSession) -> EgressState:
        """This state with ``pending`` as a DataFrame (what a checkpoint can write)."""
        if self.schema is None:
            return self
        schema = StructType.fromJson(json.loads(self.schema))
        return replace(self, pending=spark.createDataFrame(self.pending, schema))  # type: ignore[arg-type]

    def from_frame(self) -> EgressState:
        """The inverse of :meth:`to_frame` (a restored checkpoint)."""
        if isinstance(self.pending, DataFrame):
            return replace(self, pending=[tuple(r) for r in self.pending.collect()])
        return self


def _items(flow: Flow, shape: EventShape, payload: list[str]) -> DataFrame:
    """The epoch's events as release items of the consumer's shape, and (POINT and EDGE
    consumers) the edges whose lifetime turned out empty, which cancel their pending opener."""
    ev = flow.events
    cols = sql_names(payload)
    no_pos = f"CAST(NULL AS {ev.schema[POS].dataType.simpleString()})"

    def items(*cases: tuple[str, str, str, str, str, str, int]) -> DataFrame:
        """The rows of ``ev`` that meet one of ``cases`` (``where``, then the item's start,
        end, edge, release time, position after, type), which exclude each other: one filter
        and one projection, each column the value of the case the row meets."""
        wheres = [c[0] for c in cases]

        def pick(i: int) -> str:
            values = [c[i] for c in cases]
            if len(set(values)) == 1:
                return values[0]
            whens = " ".join(f"WHEN {w} THEN {v}" for w, v in zip(wheres, values, strict=True))
            return f"CASE {whens} END"

        # SQL text: one py4j call per column, not one per column and operator
        return ev.filter(" OR ".join(f"({w})" for w in wheres)).selectExpr(
            f"{pick(1)} AS {START}",
            f"{pick(2)} AS {END}",
            f"CAST({pick(3)} AS STRING) AS {EDGE}",
            f"{pick(4)} AS {_REL}",
            f"{pick(5)} AS {_AFTER}",
            *cols,
            f"{pick(6)} AS {_TYP}",
        )

    s, e = START, END
    nonempty = f"{e} > {s}"
    not_end = f"NOT ({EDGE} <=> 'END')"
    cancel = (f"{EDGE} = 'END' AND NOT {nonempty}", s, e, "NULL", s, no_pos, 2)
    if shape is EventShape.INTERVAL:
        return items(
            (f"{EDGE} IS NULL", s, e, "NULL", s, no_pos, 1),
            (f"{EDGE} = 'END' AND {nonempty}", s, e, "NULL", s, POS, 1),
        )
    if shape is EventShape.POINT:  # (a diagnostic at +inf, never released, stays empty)
        point_end = f"CASE WHEN {s} < {MAX_TIME} THEN {s} + 1 ELSE {s} END"
        return items((not_end, s, point_end, "NULL", s, no_pos, 1), cancel)
    # EDGE: a point or an interval is both a START and an END edge
    starts = items((not_end, s, str(MAX_TIME), "'START'", s, no_pos, 1), cancel)
    ends = f"{EDGE} IS NULL OR ({EDGE} = 'END' AND {nonempty})"
    return starts.unionByName(items((ends, s, e, "'END'", e, no_pos, 1)))


def _cancel(items: list[tuple], cancels: Counter) -> list[tuple]:
    """Remove, per cancel, one item that opened the same (start, payload): a START edge for the
    EDGE consumer, a point for the POINT consumer. Such an item cannot have been released yet:
    that takes a CTI above its start, which the empty END edge would have violated."""
    kept = []
    for it in items:
        key = (it[0], it[5:])
        opener = it[2] == "START" or (it[2] is None and it[1] == it[0] + 1)
        if opener and cancels[key] > 0:
            cancels[key] -= 1
            continue
        kept.append(it)
    return kept


def _order(value: Any) -> Any:
    """A sort key for a payload value: nulls first, NaN above every number (Spark's order),
    structs and arrays field by field."""
    if value is None:
        return (0,)
    if isinstance(value, float) and math.isnan(value):
        return (2,)
    if isinstance(value, tuple | list):
        return (1, tuple(_order(v) for v in value))
    if isinstance(value, dict):
        return (1, tuple(sorted((_order(k), _order(v)) for k, v in value.items())))
    return (1, value)


def _segment_key(it: tuple) -> tuple:
    return (it[0], 0 if it[2] == "START" else 1, it[1], tuple(_order(v) for v in it[5:]))


def egress_epoch(
    flow: Flow, shape: EventShape, payload: list[str], state: EgressState
) -> tuple[list[Event], EgressState]:
    """Release what this epoch's CTIs commit. Returns the items to deliver, in order.

    With substreams (``flow.keyed``), a keyed CTI releases the items of its key like a CTI does,
    without a CTI item: output adapters get the stream's CTIs only."""
    items = _items(flow, shape, payload)
    marks = flow.ctis.selectExpr(f"{CTI} AS {_REL}", f"{POS} AS {_AFTER}", f"0 AS {_TYP}")
    key = flow.key if flow.keyed is not None and flow.key in payload else None
    if key is not None:
        marks = marks.unionByName(
            flow.keyed.select(
                F.col(CTI).alias(_REL),
                F.col(POS).alias(_AFTER),
                F.lit(3).alias(_TYP),
                F.col(KEY).alias(key),
            ),
            allowMissingColumns=True,
        )
    collected = items.unionByName(marks, allowMissingColumns=True)
    schema = StructType([f for f in items.schema.fields if f.name != _TYP])
    # rows as tuples: start, end, edge, release time, position after, payload..., type
    rows = _collect_rows(collected)
    k_at = 5 + payload.index(key) if key is not None else None

    # Release points in position order: the CTIs and (after a CTI at the same position) the
    # keyed CTIs, each with the positions and values of its timeline for the binary searches.
    # each CTI above every one before it (§5: a CTI is emitted only when it rises; the root
    # window hands on its CTIs unfiltered: engine.physical._egress_reads)
    cuts = rising(sorted((r[4], r[3]) for r in rows if r[-1] == 0), state.last_cti)
    timelines: dict[Any, tuple[list, list]] = {None: ([p for p, _ in cuts], [c for _, c in cuts])}
    points = [(p, 0, (), c, None) for p, c in cuts]
    if k_at is not None:
        keyed = sorted((r[4], _order(r[k_at]), r[3], r[k_at]) for r in rows if r[-1] == 3)
        for p, order, c, k in keyed:
            line = timelines.setdefault(("k", k), ([], []))
            line[0].append(p)
            line[1].append(c)
            points.append((p, 1, order, c, k))
    points.sort(key=lambda x: x[:3])
    index = {(x[1], x[4], x[0]): i for i, x in enumerate(points)}
    fresh = [r[:-1] for r in rows if r[-1] == 1]
    pending = state.pending + fresh
    cancels = Counter((r[0], r[5:-1]) for r in rows if r[-1] == 2)
    if cancels:
        pending = _cancel(pending, cancels)

    segments: list[list[tuple]] = [[] for _ in points]
    waiting = []
    for it in pending:
        # the first CTI above its release time, and (INTERVAL consumer, edges) positioned after
        # its END edge (a CTI at the END edge's own position comes after it); with substreams
        # the earlier of that and the first such keyed CTI of its key
        found = []
        lines = [(0, None)]
        if k_at is not None and it[k_at] is not None:
            lines.append((1, it[k_at]))
        for typ, k in lines:
            positions, values = timelines.get(None if typ == 0 else ("k", k), ([], []))
            j = first_at_or_above(values, it[3] + 1)  # (ints: above t is at or above t + 1)
            if it[4] is not None:
                j = max(j, bisect_left(positions, tuple(it[4])))
            if j < len(positions):
                found.append(index[(typ, k, positions[j])])
        if found:
            segments[min(found)].append(it)
        else:
            waiting.append(it)

    delivered: list[Event] = []
    last = state.last_cti
    for (_, typ, _, c, _), segment in zip(points, segments, strict=True):
        for it in sorted(segment, key=_segment_key):
            start, end, edge = it[0], it[1], it[2]
            values_ = {k: _py(v) for k, v in zip(payload, it[5:], strict=True)}
            delivered.append(
                Event(EventKind.INSERT, start, end, values_, EdgeType(edge) if edge else None)
            )
        if typ == 0:
            last = c
            delivered.append(Event(EventKind.CTI, c, c))
    return delivered, EgressState(waiting, last, schema.json(), state.released + len(delivered))


def _collect_rows(df: DataFrame) -> list[tuple]:
    """``df``'s rows as tuples, the position struct as a tuple. Collected as Arrow (converted
    on the executors, not pickled row by row) when every other column is of a type whose
    values Arrow hands back as collected rows do; else as rows."""
    position = df.columns.index(_AFTER)
    flat = all(
        i == position or isinstance(f.dataType, _FLAT) for i, f in enumerate(df.schema.fields)
    )
    if not flat:
        return [
            tuple(tuple(v) if i == position and v is not None else v for i, v in enumerate(r))
            for r in df.collect()
        ]
    table = df.toArrow()
    columns = [c.to_pylist() for c in table.columns]
    columns[position] = [None if p is None else tuple(p.values()) for p in columns[position]]
    return list(zip(*columns, strict=True))


#: types a collected Arrow column gives as the same Python values as a collected row: not
#: binary (bytes, not bytearray), intervals, local timestamps or nested types
_FLAT = (BooleanType, NumericType, StringType, DateType, TimestampType)


def _py(value: Any) -> Any:
    """Spark hands timestamps back as naive local datetimes (rows) or aware ones (Arrow); the
    API speaks aware UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return value
