"""Operators that change event lifetimes, and move CTIs with them (semantics §5).

``shift_event_time(d)``: ``[start + d, end + d)``, CTI ``c + d``. ``alter_event_duration(d)`` and
``to_point()``: ``end = start + d`` (1 tick), CTI unchanged. ``alter_event_lifetime(f, d)``:
``start = f(start)``, ``end = start + d``, CTI ``f(c)`` for a non-decreasing ``f``. The seeds:
"ShiftEventTime() and AlterEventLifeTime() methods both change the start time of events, and the
same transformation will be applied to CTIs."

Edges: a shift keeps an edge an edge (its END edge is shifted too). Operators that set the end
from the start turn a START edge into a complete interval once its lifetime is known not to be
empty, and drop its END edge. A START edge at ``s`` can still be closed at ``s`` (an empty
lifetime: semantics §3.4 when its start was adjusted to the CTI, or a join's pair that ends
where it starts) while its stream's CTI is at or below ``s``; once a CTI passes ``s`` every END
edge ends after ``s`` (§2). So such an operator holds each START edge until the first CTI above
its start (global, or keyed of its key) and emits the interval at that CTI's position, before
it; an END edge at or before its start cancels the oldest held identical START edge, which then
never leaves (docs/decisions.md, "Empty lifetimes"). CTIs at ``±inf`` stay there; an output CTI
is emitted only when it rises. Keyed CTIs (substreams) move the same way, each emitted when its
key's CTI rises.

Bounded work (§5, the paragraph under the table): the arithmetic saturates at ``±inf``, never an
overflow; an event whose start lands at ``±inf`` is dropped and counted when it arrives
(:attr:`LifetimeState.dropped`, in ``query.operator_metrics()``; docs/decisions.md), so a
START edge that lands there is never held; its END edge lands there too and is dropped uncounted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ctistream.engine.ctis import first_at_or_above_rows, keyed_rises, rising_rows
from ctistream.engine.operators.window import _OPEN, close_edges
from ctistream.engine.rows import (
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
    Kind,
    checkpoint,
    hold,
    saturating_sub,
    sql_names,
)
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, duration_text
from pyspark.errors import ArithmeticException
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["LifetimeState", "alter_lifetime"]


@dataclass
class LifetimeState:
    """The last CTI the operator emitted; with substreams, per key the largest keyed CTI
    candidate (:func:`engine.ctis.keyed_rises`); with a duration, the START edges held until a
    CTI passes their start (``__start``, ``__end``, ``__pos``, ``__open``, payload: as they came,
    before the move); the events dropped so far because their start landed at ``±inf`` (points,
    intervals and START edges; §5). A snapshot written without ``held`` or ``dropped`` loads
    with their defaults."""

    emitted: int = MIN_TIME
    key_seen: DataFrame | None = None
    held: DataFrame | None = None
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
    found = None  # the epoch's drops, counted in the job that finds the last CTI
    if shift != 0 or start_fn is not None:  # a start can land at +-inf: drop and count (§5)
        landed = move(F.col(START)).isin(MIN_TIME, MAX_TIME)
        counted = F.count(F.when(landed & ~F.col(EDGE).eqNullSafe("END"), 1))
        found = events.select(F.lit(None).cast("long").alias("c"), counted.alias("d"))
        events = events.filter(~landed)  # before holding: a dropped START edge is never held
    held = None
    if duration is not None and flow.edges:
        released, held = _settled(flow, events, payload, state.held, cache)
        events = events.filter(F.col(EDGE).isNull()).unionByName(released)
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
    ctis = cache.keep(rising_rows(moved, state.emitted))
    last = ctis.select(F.max(CTI).alias("c"), F.lit(0).cast("long").alias("d"))
    if found is not None:
        last = last.unionByName(found)
    if start_fn is not None:  # the CTIs it maps below one mapped before (§5: non-decreasing)
        last = last.unionByName(_falls(flow.ctis, move, state.emitted), allowMissingColumns=True)
    try:  # one small job; it reads start_fn of every start and CTI of the epoch
        rows = last.collect()
    except ArithmeticException as e:
        if start_fn is None:
            raise
        raise _overflow(flow, duration) from e
    fall = next((r for r in rows if r["fo"] is not None), None) if start_fn is not None else None
    if fall is not None:
        raise ValueError(
            f"alter_event_lifetime(start_fn, duration={duration_text(duration or 0)!r}): "
            f"start_fn maps the CTI at {fall['fi']} ticks to {fall['fo']}, below {fall['fw']}, "
            "where it mapped an earlier CTI; expected a non-decreasing start_fn (semantics §5: "
            "the output CTI is start_fn(c), and CTIs only rise; an event moved below a CTI "
            "already delivered would come out in another order for another cut of the input "
            "into epochs). Fix: make start_fn non-decreasing in its argument (e.g. s + d, or "
            "s - s % d), or use shift_event_time(d)"
        )
    new_state = LifetimeState(
        max(state.emitted, max((r["c"] for r in rows if r["c"] is not None), default=MIN_TIME)),
        held=held,
        dropped=state.dropped + sum(r["d"] for r in rows),
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


def _falls(ctis: DataFrame, move: Callable[[Column], Column], emitted: int) -> DataFrame:
    """The first of ``ctis`` (by input CTI) that ``move`` maps below the largest value it mapped
    an earlier one to (``emitted``: the largest of earlier epochs): its input CTI ``fi``, its
    value ``fo`` and the one before ``fw``; no row when there is none."""
    before = Window.orderBy("fi").rowsBetween(Window.unboundedPreceding, -1)
    mapped = ctis.select(F.col(CTI).alias("fi"), move(F.col(CTI)).alias("fo"))
    was = F.greatest(F.max("fo").over(before), F.lit(emitted))  # greatest skips a null
    return mapped.select("*", was.alias("fw")).filter("fo < fw").orderBy("fi").limit(1)


def _overflow(flow: Flow, duration: int | None) -> OverflowError:
    """The error for a ``start_fn`` whose value leaves int64 (Spark's bigint arithmetic raises
    there: a user's expression cannot be made to saturate, so it is refused, naming the
    operator and the epoch's starts and CTIs; docs/decisions.md)."""
    seen = (
        flow.events.select(F.col(START).alias("t"))
        .unionByName(flow.ctis.select(F.col(CTI).alias("t")))
        .filter(~F.col("t").isin(MIN_TIME, MAX_TIME))
        .agg(F.min("t").alias("lo"), F.max("t").alias("hi"))
        .first()
    )
    span = (
        f" between {seen['lo']} and {seen['hi']} ticks" if seen and seen["lo"] is not None else ""
    )
    return OverflowError(
        f"alter_event_lifetime(start_fn, duration={duration_text(duration or 0)!r}): start_fn "
        "overflowed bigint "
        f"for a start or CTI{span} (Spark's ARITHMETIC_OVERFLOW); expected start_fn to map every "
        f"time to int64 ticks [{MIN_TIME}, {MAX_TIME}] (semantics §1; +inf is the largest). "
        "Fix: keep start_fn's arithmetic within bigint, e.g. "
        "F.when(s > F.lit(MAX_TIME - d), F.lit(MAX_TIME)).otherwise(s + d) for s + d (an event "
        "whose start lands at +inf is dropped and counted, semantics §5), or use "
        "shift_event_time(d), which saturates"
    )


def _settled(
    flow: Flow, events: DataFrame, payload: list[str], held: DataFrame | None, cache: EpochCache
) -> tuple[DataFrame, DataFrame]:
    """The START edges known not to be empty by a CTI of this epoch, as START edge rows at that
    CTI's position (the first CTI above the start, global or keyed of the edge's key), and the
    START edges still held after the epoch. A START edge arrives while its stream's CTI is at or
    below its start (§2), so that CTI comes after it. An END edge at or before its start
    cancels the oldest held identical START edge (:func:`engine.operators.window.close_edges`);
    the other END edges change nothing here. ``events``: the epoch's events of ``flow`` that
    were not dropped (their start landed at ``±inf``)."""
    cols = sql_names(payload)
    new = events.filter(f"{EDGE} = 'START'").selectExpr(START, END, POS, f"true AS {_OPEN}", *cols)
    edges = new if held is None else held.unionByName(new)
    empty = events.filter(f"{EDGE} = 'END' AND {END} <= {START}")
    edges = close_edges(edges, empty, payload).filter(_OPEN).selectExpr("*", f"{START} + 1 AS __t")
    placed = first_at_or_above_rows(edges, cache.keep(flow.ctis), None, "__cpos")
    at = "__cpos"
    if flow.keyed is not None and flow.key is not None:
        keyed = flow.keyed.withColumnRenamed(KEY, flow.key)
        placed = first_at_or_above_rows(placed, keyed, flow.key, "__kpos")
        at = "least(__cpos, __kpos)"  # least skips a null
    placed = cache.keep(placed.withColumn("__at", F.expr(at)))
    released = placed.filter("__at IS NOT NULL").selectExpr(
        f"'{Kind.INSERT}' AS {KIND}", f"'START' AS {EDGE}", START, END, f"__at AS {POS}", *cols
    )
    still = hold(placed.filter("__at IS NULL").selectExpr(START, END, POS, _OPEN, *cols))
    return released, still
