"""Egress: release only committed events, in the consumer's shape, segment by segment (§6).

"The entire query will release its result only up to the most recent CTI." For each new output CTI
``c`` in order, the items it newly commits are released sorted by (start, START edges first, end,
payload), then ``c`` itself. What an item waits for depends on the consumer's shape:

* POINT: each event as a point at its start, once ``start < c``;
* INTERVAL: each event once ``start < c`` and its end is known (an edge: its END edge came first);
* EDGE: a START edge once ``start < c``, an END edge once ``end < c``.

The release CTI of an item is found without a loop: among the epoch's CTIs (increasing), count
those with value <= the item's release time, and, for an edge's interval, those before its END
edge; the item goes out with the next one. Items not yet released are the egress state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from engine.events import EdgeType, Event, EventKind, EventShape
from engine.rows import CTI, EDGE, END, POS, START, EpochCache, Flow
from engine.temporal import MAX_TIME, MIN_TIME

__all__ = ["EgressState", "egress_epoch"]

_REL = "__rel_t"  # the item is released by the first CTI strictly above this time
_AFTER = "__after"  # and (INTERVAL consumer, edges) only by a CTI positioned after this


@dataclass
class EgressState:
    """Items waiting for a CTI, and the last CTI delivered."""

    pending: DataFrame | None = None
    last_cti: int = MIN_TIME


def _items(flow: Flow, shape: EventShape, payload: list[str]) -> tuple[DataFrame, DataFrame | None]:
    """The epoch's events as release items of the consumer's shape, and (EDGE consumer) the
    edges whose lifetime turned out empty, which cancel their pending START edge."""
    ev = flow.events
    edge = F.col(EDGE)
    no_pos = F.lit(None).cast(ev.schema[POS].dataType)

    def item(df: DataFrame, start, end, out_edge, rel, after=no_pos) -> DataFrame:
        return df.select(
            start.alias(START),
            end.alias(END),
            F.lit(out_edge).cast("string").alias(EDGE),
            rel.alias(_REL),
            after.alias(_AFTER),
            *payload,
        )

    s, e = F.col(START), F.col(END)
    nonempty = e > s
    cancels = ev.filter((edge == "END") & ~nonempty).select(START, *payload)
    if shape is EventShape.POINT:
        return item(ev.filter(~edge.eqNullSafe("END")), s, s + 1, None, s), cancels
    if shape is EventShape.INTERVAL:
        whole = item(ev.filter(edge.isNull()), s, e, None, s)
        closed = item(ev.filter((edge == "END") & nonempty), s, e, None, s, F.col(POS))
        return whole.unionByName(closed), None
    starts = item(ev.filter(~edge.eqNullSafe("END")), s, F.lit(MAX_TIME), "START", s)
    ends = item(ev.filter(edge.isNull() | ((edge == "END") & nonempty)), s, e, "END", e)
    return starts.unionByName(ends), cancels


def _cancel(pending: DataFrame, cancels: DataFrame, payload: list[str]) -> DataFrame:
    """Remove, per cancel, one pending item that opened the same (start, payload): a START edge
    for the EDGE consumer, a point for the POINT consumer. Such an item cannot have been released
    yet: that takes a CTI above its start, which the empty END edge would have violated."""
    key = [START, *payload]
    opener = F.col(EDGE).eqNullSafe("START") | (
        F.col(EDGE).isNull() & (F.col(END) == F.col(START) + 1)
    )
    ranked = pending.withColumn(
        "__r",
        F.when(opener, F.row_number().over(Window.partitionBy(opener, *key).orderBy(_REL))),
    )
    n = cancels.groupBy(*key).agg(F.count("*").alias("__n"))
    p, c = ranked.alias("p"), n.alias("c")
    on = [F.col(f"p.{k}").eqNullSafe(F.col(f"c.{k}")) for k in key]
    joined = p.join(c, on, "left")
    keep = F.col("p.__r").isNull() | F.col("c.__n").isNull() | (F.col("p.__r") > F.col("c.__n"))
    return joined.filter(keep).select("p.*").drop("__r")


def egress_epoch(
    flow: Flow, shape: EventShape, payload: list[str], state: EgressState, cache: EpochCache
) -> tuple[list[Event], EgressState]:
    """Release what this epoch's CTIs commit. Returns the items to deliver, in order."""
    items, cancels = _items(flow, shape, payload)
    if state.pending is not None:
        items = state.pending.unionByName(items)
    if cancels is not None:
        items = _cancel(items, cancels, payload)

    ctis = cache.keep(flow.ctis.withColumn("__k", F.row_number().over(Window.orderBy(POS))))
    # Per item: how many of the epoch's CTIs are at or below its release time, and (INTERVAL
    # consumer, edges) how many come before its END edge; it goes out with the next CTI.
    both = items.withColumn("__typ", F.lit(1)).unionByName(
        ctis.select(F.col(CTI).alias(_REL), F.col(POS).alias(_AFTER), F.lit(0).alias("__typ")),
        allowMissingColumns=True,
    )
    is_cti = F.when(F.col("__typ") == 0, 1).otherwise(0)
    by_time = Window.orderBy(_REL, "__typ").rowsBetween(Window.unboundedPreceding, 0)
    ranked = both.withColumn("__a", F.sum(is_cti).over(by_time)).withColumn(
        "__n", F.sum(is_cti).over(Window.partitionBy(F.lit(0)))
    )
    if shape is EventShape.INTERVAL:
        # A CTI at the END edge's own position comes after it (operators emit rows before the
        # CTI of the same position).
        by_pos = Window.orderBy(_AFTER, F.col("__typ").desc()).rowsBetween(
            Window.unboundedPreceding, 0
        )
        after = F.when(F.col(_AFTER).isNull(), 0).otherwise(F.sum(is_cti).over(by_pos))
        ranked = ranked.withColumn("__b", after)
    else:
        ranked = ranked.withColumn("__b", F.lit(0))
    ranked = cache.keep(
        ranked.filter(F.col("__typ") == 1)
        .withColumn("__k", F.greatest("__a", "__b") + 1)
        .drop("__a", "__b", "__typ")
    )
    released = ranked.filter(F.col("__k") <= F.col("__n"))
    pending = ranked.filter(F.col("__k") > F.col("__n")).drop("__k", "__n").localCheckpoint()
    edge_rank = F.when(F.col(EDGE) == "START", 0).otherwise(1)
    out = released.select(
        "__k", F.lit(0).alias("__o"), START, edge_rank.alias("__er"), END, EDGE, *payload
    ).unionByName(
        ctis.select("__k", F.lit(1).alias("__o"), F.col(CTI).alias(START), F.col(CTI).alias(END)),
        allowMissingColumns=True,
    )
    rows = out.orderBy("__k", "__o", START, "__er", END, *payload).collect()

    delivered: list[Event] = []
    last = state.last_cti
    for r in rows:
        if r["__o"] == 1:
            last = r[START]
            delivered.append(Event(EventKind.CTI, last, last))
            continue
        edge = EdgeType(r[EDGE]) if r[EDGE] else None
        delivered.append(
            Event(EventKind.INSERT, r[START], r[END], {k: _py(r[k]) for k in payload}, edge)
        )
    return delivered, EgressState(pending, last)


def _py(value: Any) -> Any:
    """Spark hands timestamps back as naive local datetimes; the API speaks aware UTC."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(UTC)
    return value
