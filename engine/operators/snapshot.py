"""Snapshot windows with aggregates (semantics §5).

A snapshot is the span ``[p, q)`` between two consecutive event endpoints (starts and ends) of the
input; one result per snapshot and group aggregates the events active in it. A snapshot is final
once the input CTI is above its end ``q``: every endpoint below the CTI is known (no later event
starts, and no END edge ends, before it), while one at the CTI itself may still arrive. At the
CTI +inf every snapshot is final, the last ``[p, +inf)`` too (§5's bounded work).

CTI rule (§5: "the start of the snapshot that contains c when some event's lifetime contains c;
otherwise c itself", so a snapshot never stalls a query): ``P``, the largest endpoint below the
input CTI ``c``, when some event received has ``start < c <= end``; otherwise ``c``
(docs/decisions.md: why ``start < c`` and ``c <= end``).

Inside ``group_apply`` a snapshot is cut per group (``cut_by``, the group keys): the endpoints
are each group's own, and the CTI is the minimum over the groups whose events span ``c`` of
each one's ``P`` (the literal rule's minimum over groups; a group no event spans gives ``c``).
Outside, ``cut_by`` is empty: one group, all events' endpoints.

An open edge's end is +inf until its END edge arrives. State: the events that can still be active
in a snapshot not yet final (their end is after their group's last final endpoint, ``__done``,
which each held event carries: the next snapshot of its group starts there).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from ctistream.engine.ctis import rising_rows
from ctistream.engine.operators.window import (
    close_edges,
    exact_aggregates,
    place_results,
    repeatable,
)
from ctistream.engine.operators.window_rows import PerWindow
from ctistream.engine.rows import CTI, EDGE, END, HEADER, POS, START, EpochCache, Flow, hold
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["SnapshotState", "snapshot_aggregate"]

_DONE = "__done"  # a held event's group's last final endpoint (null: none yet)


@dataclass
class SnapshotState:
    """Held events (each with its group's last final endpoint) and the last CTI emitted."""

    held: DataFrame | None = None
    emitted: int = MIN_TIME


def snapshot_aggregate(
    flow: Flow,
    keys: tuple[str, ...],
    aggregates: tuple[tuple[str, Column], ...],
    state: SnapshotState,
    cache: EpochCache,
    per_window: PerWindow | None = None,
    cut_by: tuple[str, ...] = (),
) -> tuple[Flow, SnapshotState]:
    """``per_window``: rows per final snapshot instead of ``aggregates`` (windowed ``top_k`` and
    ``apply``, :mod:`engine.operators.window_rows`); ``cut_by``: the columns whose groups are
    cut at their own endpoints (module docstring)."""
    payload = [c for c in flow.events.columns if c not in HEADER]
    parts = [F.col(f"`{k}`") for k in cut_by]
    group = Window.partitionBy(*parts)
    edge = F.col(EDGE)
    new = flow.events.filter(~edge.eqNullSafe("END")).select(
        START, END, POS, edge.eqNullSafe("START").alias("__open"), *payload
    )
    new = new.withColumn(_DONE, F.lit(None).cast("long"))
    events = new if state.held is None else state.held.unionByName(new)
    if flow.edges:
        events = close_edges(events, flow.events.filter(edge == "END"), payload)
    events = cache.keep(events.filter(F.col(END) > F.col(START)))

    # A group's ``__done`` is an endpoint too, of events that may no longer be held: its next
    # snapshot starts there (an edge held open across it is active in it).
    def points(at: str) -> DataFrame:
        return events.select(*parts, F.col(at).alias("__p"), _DONE)

    endpoints = cache.keep(
        points(START)
        .union(points(END))
        .union(points(_DONE).filter(F.col("__p").isNotNull()))
        .groupBy(*parts, "__p")
        .agg(F.max(_DONE).alias("__d"))
        .select(*parts, "__p", F.max("__d").over(group).alias(_DONE))
    )
    c_last = flow.last_cti()
    fresh = c_last != MIN_TIME  # without a CTI in this epoch nothing becomes final

    # Final snapshots: consecutive endpoints (p, q) of a group, p >= its done, q below the
    # epoch's last CTI.
    cut = [f"__cut{i}" for i in range(len(cut_by))]  # the group's columns, renamed for joins
    as_cut = [p.alias(c) for p, c in zip(parts, cut, strict=True)]
    same = [p.eqNullSafe(F.col(c)) for p, c in zip(parts, cut, strict=True)]
    snaps = (
        endpoints.withColumn("__q", F.lead("__p").over(group.orderBy("__p")))
        .filter(F.col("__q").isNotNull())
        .filter(
            (F.col("__p") >= F.coalesce(F.col(_DONE), F.lit(MIN_TIME)))
            & ((F.col("__q") < F.lit(c_last)) | F.lit(c_last == MAX_TIME))
        )
        .filter(F.lit(fresh))
        .select(*as_cut, "__p", "__q")
    )
    active = events.join(
        F.broadcast(snaps),
        reduce(Column.__and__, same, (F.col(START) <= F.col("__p")) & (F.col(END) > F.col("__p"))),
    ).drop(*cut)
    # doubles summed exactly (semantics §4): the same bits however the events were cut
    if per_window is not None:
        grouped = per_window.rows(active, ["__p", "__q"], keys, payload, ("__p", "__q"))
        names = per_window.names(payload, keys)
    else:
        exact = exact_aggregates(aggregates, new, "snapshot_window()")
        grouped = active.groupBy("__p", "__q", *keys).agg(
            *[c.alias(n) for n, c in repeatable(aggregates, exact)]
        )
        names = [*keys, *(n for n, _ in aggregates)]
    ctis = cache.keep(flow.ctis)
    # Final at the first CTI above its end (the last snapshot, ending at +inf, at the CTI +inf).
    done_at = f"least(__q, {MAX_TIME - 1}) + 1"
    results = place_results(grouped, done_at, "__p", "__q", names, ctis)

    # Output CTIs: a CTI c that an event spans (start < c <= end) is held back to the largest
    # endpoint of that event's group strictly below c (the minimum over such groups); else c;
    # +inf stays +inf.
    spanned = F.broadcast(
        F.broadcast(ctis.select(F.col(POS).alias("__cpos"), CTI))
        .join(events, (F.col(START) < F.col(CTI)) & (F.col(END) >= F.col(CTI)))
        .select(F.col("__cpos").alias(POS), CTI, *as_cut)
        .distinct()
    )  # a row per CTI and group that an event spans: few
    floors = (
        spanned.join(endpoints, reduce(Column.__and__, same, F.col("__p") < F.col(CTI)))
        .groupBy(POS, *cut)
        .agg(F.max("__p").alias("__f"))
        .groupBy(POS)
        .agg(F.min("__f").alias("__f"))
    )
    moved = ctis.join(floors, POS, "left").select(
        POS,
        F.when(F.col(CTI) == MAX_TIME, F.col(CTI))
        .when(F.col("__f").isNotNull(), F.col("__f"))
        .otherwise(F.col(CTI))
        .alias(CTI),
    )
    out_ctis = cache.keep(rising_rows(moved, state.emitted))
    # CTIs only rise through this operator (an event spanning a later CTI starts at or after
    # an earlier one, or spans it too), so the last one emitted is the largest
    emitted = out_ctis.agg(F.max(CTI)).first()[0] if fresh else None
    emitted = state.emitted if emitted is None else max(state.emitted, emitted)
    if c_last == MAX_TIME:
        held = None
    elif fresh:  # each group's largest endpoint below c_last becomes its done
        below = [F.when(F.col(t) < F.lit(c_last), F.col(t)) for t in (START, END)]
        done = F.max(F.greatest(F.col(_DONE), *below)).over(group)
        held = hold(
            events.withColumn(_DONE, done).filter(
                F.col(_DONE).isNull() | (F.col(END) > F.col(_DONE))
            )
        )
    else:
        held = hold(events)
    return Flow(results, out_ctis, False), SnapshotState(held, emitted)
