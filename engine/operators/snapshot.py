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

An open edge's end is +inf until its END edge arrives. State: the events that can still be active
in a snapshot not yet final (their end is after the last final endpoint).
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class SnapshotState:
    """Held events, the endpoint up to which snapshots are final, and the last CTI emitted."""

    held: DataFrame | None = None
    done: int = MIN_TIME
    emitted: int = MIN_TIME


def snapshot_aggregate(
    flow: Flow,
    keys: tuple[str, ...],
    aggregates: tuple[tuple[str, Column], ...],
    state: SnapshotState,
    cache: EpochCache,
    per_window: PerWindow | None = None,
) -> tuple[Flow, SnapshotState]:
    """``per_window``: rows per final snapshot instead of ``aggregates`` (windowed ``top_k`` and
    ``apply``, :mod:`engine.operators.window_rows`)."""
    payload = [c for c in flow.events.columns if c not in HEADER]
    edge = F.col(EDGE)
    new = flow.events.filter(~edge.eqNullSafe("END")).select(
        START, END, POS, edge.eqNullSafe("START").alias("__open"), *payload
    )
    events = new if state.held is None else state.held.unionByName(new)
    if flow.edges:
        events = close_edges(events, flow.events.filter(edge == "END"), payload)
    events = cache.keep(events.filter(F.col(END) > F.col(START)))

    # ``done`` is an endpoint too, of events that may no longer be held: the next snapshot
    # starts there (an edge held open across it is active in it)
    points = events.select(F.col(START).alias("__p")).union(events.select(F.col(END).alias("__p")))
    if state.done != MIN_TIME:
        points = points.union(
            flow.ctis.sparkSession.range(1).select(F.lit(state.done).alias("__p"))
        )
    endpoints = cache.keep(points.distinct())
    c_last = flow.ctis.agg(F.max(CTI)).first()[0]
    fresh = c_last is not None  # without a CTI in this epoch nothing becomes final
    c_last = c_last if fresh else MIN_TIME

    # Final snapshots: consecutive endpoints (p, q), p >= done, q <= the epoch's last CTI.
    after = Window.orderBy("__p")
    snaps = (
        endpoints.withColumn("__q", F.lead("__p").over(after))
        .filter(F.col("__q").isNotNull())
        .filter(
            (F.col("__p") >= F.lit(state.done))
            & ((F.col("__q") < F.lit(c_last)) | F.lit(c_last == MAX_TIME))
        )
        .filter(F.lit(fresh))
    )
    active = events.join(
        F.broadcast(snaps), (F.col(START) <= F.col("__p")) & (F.col(END) > F.col("__p"))
    )
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

    # Output CTIs: the largest endpoint strictly below each input CTI (a CTI sorts before an
    # endpoint of the same value); +inf stays +inf.
    both = endpoints.select(F.col("__p").alias("__t"), F.lit(1).alias("__typ")).unionByName(
        ctis.select(F.col(CTI).alias("__t"), F.lit(0).alias("__typ"), POS),
        allowMissingColumns=True,
    )
    running = Window.orderBy("__t", "__typ").rowsBetween(Window.unboundedPreceding, 0)
    floor = F.greatest(
        F.lit(state.done), F.max(F.when(F.col("__typ") == 1, F.col("__t"))).over(running)
    )
    # A CTI c is held back to that endpoint while an event has start < c <= end; else it is c.
    held_back = (
        F.broadcast(ctis)
        .join(events, (F.col(START) < F.col(CTI)) & (F.col(END) >= F.col(CTI)), "left_semi")
        .select(POS, F.lit(True).alias("__held"))
    )
    moved = (
        both.withColumn("__f", floor)
        .filter(F.col("__typ") == 0)
        .join(held_back, POS, "left")
        .select(
            POS,
            F.when(F.col("__t") == MAX_TIME, F.col("__t"))
            .when(F.col("__held"), F.col("__f"))
            .otherwise(F.col("__t"))
            .alias(CTI),
        )
    )
    out_ctis = cache.keep(rising_rows(moved, state.emitted))
    done = state.done
    last_cti = MIN_TIME
    if fresh:  # the largest endpoint below c_last, and whether an event holds c_last back
        found = (
            endpoints.filter(F.col("__p") < F.lit(c_last))
            .select(F.max("__p").alias("__p"), F.lit(0).cast("long").alias("__n"))
            .unionByName(
                events.filter((F.col(START) < c_last) & (F.col(END) >= c_last)).select(
                    F.lit(None).cast("long").alias("__p"), F.count("*").alias("__n")
                )
            )
            .collect()
        )
        below = max((r["__p"] for r in found if r["__p"] is not None), default=MIN_TIME)
        done = max(done, below)
        last_cti = done if sum(r["__n"] for r in found) and c_last != MAX_TIME else c_last
    held = None if c_last == MAX_TIME else hold(events.filter(F.col(END) > F.lit(done)))
    emitted = max(state.emitted, last_cti)
    return Flow(results, out_ctis, False), SnapshotState(held, done, emitted)
