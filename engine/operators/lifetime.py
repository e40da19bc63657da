"""Operators that change event lifetimes, and move CTIs with them (semantics §5).

``shift_event_time(d)``: ``[start + d, end + d)``, CTI ``c + d``. ``alter_event_duration(d)`` and
``to_point()``: ``end = start + d`` (1 tick), CTI unchanged. ``alter_event_lifetime(f, d)``:
``start = f(start)``, ``end = start + d``, CTI ``f(c)`` for a non-decreasing ``f``. The seeds:
"ShiftEventTime() and AlterEventLifeTime() methods both change the start time of events, and the
same transformation will be applied to CTIs."

Edges: a shift keeps an edge an edge (its END edge is shifted too). Operators that set the end
from the start turn a START edge into a complete interval at once; its END edge is then
irrelevant and dropped. CTIs at ``±inf`` stay there; an output CTI is emitted only when it rises.
Keyed CTIs (substreams) move the same way, each emitted when its key's CTI rises.

Bounded work (§5, the paragraph under the table): the arithmetic saturates at ``±inf``, never an
overflow; an event whose start lands at ``±inf`` is dropped and counted
(:attr:`LifetimeState.dropped`, in ``query.operator_metrics()``; docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from engine.rows import (
    CTI,
    EDGE,
    END,
    HEADER,
    KEY,
    KIND,
    POS,
    START,
    EpochCache,
    Flow,
    checkpoint,
    keyed_rises,
    saturating_sub,
)
from engine.temporal import MAX_TIME, MIN_TIME

__all__ = ["LifetimeState", "alter_lifetime"]


@dataclass
class LifetimeState:
    """The last CTI the operator emitted; with substreams, per key the largest keyed CTI
    candidate (:func:`engine.rows.keyed_rises`); the events dropped so far because their start
    landed at ``±inf`` (points, intervals and START edges; §5)."""

    emitted: int = MIN_TIME
    key_seen: DataFrame | None = None
    dropped: int = 0


def alter_lifetime(
    flow: Flow,
    *,
    shift: int = 0,
    start_fn: Callable[[Column], Column] | None = None,
    duration: int | None = None,
    state: LifetimeState,
    cache: EpochCache,
) -> tuple[Flow, LifetimeState]:
    """``start' = start_fn(start + shift)`` (or ``start + shift``); ``end' = start' + duration``
    when a duration is given (edges become intervals), else ``end + shift`` (edges stay edges).
    The same map moves the CTIs."""

    def move(col: Column) -> Column:
        shifted = saturating_sub(col, -shift)
        if start_fn is None:
            return shifted
        return F.when(col.isin(MIN_TIME, MAX_TIME), col).otherwise(start_fn(shifted))

    payload = [c for c in flow.events.columns if c not in HEADER]
    events = flow.events
    if duration is None:
        events = events.select(
            KIND,
            EDGE,
            move(F.col(START)).alias(START),
            saturating_sub(F.col(END), -shift).alias(END),
            POS,
            *payload,
        )
    else:
        new_start = move(F.col(START))
        events = events.filter(~F.col(EDGE).eqNullSafe("END")).select(
            KIND,
            F.lit(None).cast("string").alias(EDGE),
            new_start.alias(START),
            saturating_sub(new_start, -duration).alias(END),
            POS,
            *payload,
        )
    moved = flow.ctis.select(POS, move(F.col(CTI)).alias(CTI))
    before = Window.orderBy(POS).rowsBetween(Window.unboundedPreceding, -1)
    ctis = cache.keep(
        moved.withColumn("__prev", F.greatest(F.lit(state.emitted), F.max(CTI).over(before)))
        .filter(F.col(CTI) > F.col("__prev"))
        .drop("__prev")
    )
    found = ctis.select(F.max(CTI).alias("c"), F.lit(0).cast("long").alias("d"))
    if shift != 0 or start_fn is not None:  # a start can land at +-inf: drop and count (§5)
        landed = F.col(START).isin(MIN_TIME, MAX_TIME)
        counted = F.count(F.when(landed & ~F.col(EDGE).eqNullSafe("END"), 1))
        found = found.unionByName(
            events.select(F.lit(None).cast("long").alias("c"), counted.alias("d"))
        )
        events = events.filter(~landed)
    rows = found.collect()  # one small job
    last = max((r["c"] for r in rows if r["c"] is not None), default=MIN_TIME)
    new_state = LifetimeState(
        max(state.emitted, last), dropped=state.dropped + sum(r["d"] for r in rows)
    )
    # an end can saturate at +inf: shifted forward, or set from the start by a duration (to_point's
    # one tick is taken as finite, docs/decisions.md)
    unbounded = flow.unbounded or (shift > 0 if duration is None else duration > 1)
    out = Flow(events, ctis, flow.edges and duration is None, unbounded=unbounded)
    if flow.keyed is None:
        return out, new_state
    candidates = flow.keyed.select(POS, KEY, move(F.col(CTI)).alias(CTI))
    keyed, seen = keyed_rises(candidates, ctis, state.emitted, state.key_seen)
    new_state.key_seen = checkpoint(seen)
    return replace(out, keyed=cache.keep(keyed), key=flow.key), new_state
