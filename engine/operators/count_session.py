"""Count windows and session windows with aggregates (semantics §5).

**Count window** ``count_window(n)`` (StreamInsight's count-by-start-time window): per group, the
distinct start times ``d1 < d2 < ...`` of the input define windows; window ``i`` holds every
event whose start is in ``{d_i .. d_(i+n-1)}``; one result per complete window, a point at
``d_(i+n-1)``; a window is complete once the CTI passes ``d_(i+n-1)``; a trailing window with
fewer than ``n`` start times never completes, even at +inf.
CTI rule (§5): "same as input" (an incomplete window ends at a start time ``>= c``). Only the
start of an event matters, so an open START edge counts at its start at once (its END edge
changes nothing, unless it makes the lifetime empty: docs/decisions.md, "Empty lifetimes").
State: per group the events of the last ``n - 1`` distinct start times below the latest CTI
(the windows still to complete need them) and every event at or after it.

**Session window** ``session_window(timeout, max_duration)`` (ASA SessionWindow, Trill
Sessionize): per group, events in start order form sessions: an event joins the open session
when its start is before the session's reach (``max end seen + timeout``), else it opens a new
one; a session's lifetime is ``[first start, reach)``; with ``max_duration`` ``D``, a session
still open at a multiple ``m`` of ``D`` (grid from 0) with ``m - first start >= D`` ends at
``m``, and events starting at or after ``m`` open a new one; one result per session, once it is
closed (its end ``<= c``).
CTI rule (§5): ``min(c, start of the earliest session still open)``. An open START edge reaches
+inf until its END edge comes, so it holds its session (and the CTI) open; at the CTI +inf every
session closes, one ending at +inf too. State: the sessions still open, each as a summary row
of partial aggregates for its events that start before the latest CTI (up to its first open
START edge) where the aggregates merge, and its other events (:class:`SessionState`).

Both use global CTIs only: keyed CTIs are merged (dropped) as for snapshot windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctistream.engine._spark import utc_labelled
from ctistream.engine.ctis import rising_rows
from ctistream.engine.exact import compress_column
from ctistream.engine.operators.window import (
    close_edges,
    exact_aggregates,
    merges_of,
    place_results,
    repeatable,
    sums_decimals,
)
from ctistream.engine.rows import (
    CTI,
    EDGE,
    END,
    HEADER,
    POS,
    START,
    EpochCache,
    Flow,
    hold,
    same_group,
    sql_names,
)
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

if TYPE_CHECKING:
    from ctistream.engine.physical import CountWindowStep, SessionWindowStep

__all__ = [
    "CountState",
    "SessionState",
    "count_aggregate",
    "session_aggregate",
]

_OPEN = "__open"
_SF, _SE, _CUT, _REACH = "__sf", "__se", "__cut", "__reach"
#: a row of a session's summary, not an event (session_window)
_SUM = "__summary"


@dataclass
class CountState:
    """The events a count window holds and the last CTI it emitted (= the input's latest)."""

    held: DataFrame | None = None
    emitted: int = MIN_TIME


@dataclass
class SessionState:
    """What a session window keeps of its open sessions, and the last CTI it emitted.

    ``partials``: per group at most one summary row, for the open session that the last CTI is
    inside, where the aggregates merge (:func:`engine.operators.window.merges_of`): the partial
    aggregates and the reach (largest ``end + timeout``) of the session's events that start
    before that CTI and before the session's first open START edge. ``held``: every other
    event of an open session."""

    held: DataFrame | None = None
    partials: DataFrame | None = None
    emitted: int = MIN_TIME


def _events(flow: Flow, held: DataFrame | None, cache: EpochCache) -> tuple[DataFrame, list[str]]:
    """The held events and the epoch's, END edges given to their START edges; empty lifetimes
    (an edge closed at its adjusted start) left out (docs/decisions.md, "Empty lifetimes")."""
    payload = [c for c in flow.events.columns if c not in HEADER]
    edge = F.col(EDGE)
    new = flow.events.filter(~edge.eqNullSafe("END")).select(
        START, END, POS, edge.eqNullSafe("START").alias(_OPEN), *payload
    )
    events = new if held is None else held.unionByName(new)
    if flow.edges:
        events = close_edges(events, flow.events.filter(edge == "END"), payload)
    return cache.keep(events.filter(F.col(END) > F.col(START))), payload


def count_aggregate(
    flow: Flow, step: CountWindowStep, state: CountState, cache: EpochCache
) -> tuple[Flow, CountState]:
    """Count windows (semantics §5) as physical node ``step`` says: its node's ``n``, keys and
    aggregates; ``egress_only``: egress alone reads the output, so the results are not placed
    at their CTIs nor the CTIs filtered to those that rise (engine.physical._egress_reads)."""
    node = step.node
    n, keys, aggregates, call = node.n, node.keys, node.aggregates, node.call
    events, payload = _events(flow, state.held, cache)
    c_last = flow.last_cti()

    # Distinct start times per group, numbered 1, 2, ...; window j ends at d_j and starts at
    # d_(j-n+1), so the start d_i is in the windows i .. i+n-1 that exist (j >= n). Those that
    # complete now end below the last CTI: j <= the number of starts below it. The held
    # starts below the last CTI are the last n - 1 ones, so every window found here ends at or
    # after that CTI: none was emitted before. Each start lists its windows completing now
    # (as many as the results it is in), each event meets its start's list, and each window
    # its end, by equi-joins on the group: no range join, no broadcast.
    by_group = Window.partitionBy(*keys)
    starts = cache.keep(events.select(*keys, START).distinct())
    numbered = starts.select(
        *keys,
        START,
        F.row_number().over(by_group.orderBy(START)).alias("__j"),
        F.sum(F.when(F.col(START) < F.lit(c_last), F.lit(1)).otherwise(F.lit(0)))
        .over(by_group)
        .alias("__below"),
    )
    lo, hi = f"greatest(__j, {n})", f"least(__j + {n - 1}, __below)"
    quoted = sql_names(keys)
    # (renamed apart: all three frames come from the epoch's events, a self-join for Spark)
    windows_of = numbered.selectExpr(
        *(f"{q} AS __wk{i}" for i, q in enumerate(quoted)),
        f"{START} AS __ws",
        f"explode(CASE WHEN {lo} <= {hi} THEN sequence({lo}, {hi}) END) AS __w",
    )
    ends = numbered.selectExpr(
        *(f"{q} AS __dk{i}" for i, q in enumerate(quoted)), "__j AS __dw", f"{START} AS __d"
    )
    same_start = F.col(START) == F.col("__ws")
    same_end = F.col("__w") == F.col("__dw")
    for i, q in enumerate(quoted):
        same_start = same_start & F.col(q).eqNullSafe(F.col(f"__wk{i}"))
        same_end = same_end & F.col(f"__wk{i}").eqNullSafe(F.col(f"__dk{i}"))
    inside = events.join(windows_of, same_start).join(ends, same_end)
    inside = inside.select(*quoted, "__d", *sql_names(c for c in payload if c not in keys))
    exact = exact_aggregates(aggregates, events, call)
    grouped = inside.groupBy("__d", *keys).agg(
        *[c.alias(name) for name, c in repeatable(aggregates, exact)]
    )
    ctis = cache.keep(flow.ctis)
    names = [*keys, *(name for name, _ in aggregates)]
    # complete once the CTI passes d: at the first CTI >= d + 1; a point at d
    placed = None if step.egress_only else ctis
    results = place_results(grouped, "__d + 1", "__d", "__d + 1", names, placed)
    out_ctis = ctis if step.egress_only else rising_rows(ctis, state.emitted)

    held = None
    if c_last != MAX_TIME:  # at +inf no window can complete any more
        latest_first = Window.partitionBy(*keys).orderBy(F.col(START).desc())
        kept = (
            starts.filter(F.col(START) < F.lit(c_last))
            .withColumn("__r", F.row_number().over(latest_first))
            .filter(F.col("__r") < n)
        )
        recent = events.alias("e").join(
            kept.alias("k"),
            same_group(keys, "e", "k") & (F.col(f"e.{START}") == F.col(f"k.{START}")),
            "left_semi",
        )
        held = hold(recent.unionByName(events.filter(F.col(START) >= F.lit(c_last))))
    emitted = max(state.emitted, c_last)
    return Flow(results, out_ctis, False, unbounded=False), CountState(held, emitted)


def _grid_cap(first: int, max_duration: int | None) -> int:
    """Where ``max_duration`` ``D`` ends a session that starts at ``first``: the smallest
    multiple ``m`` of ``D`` (grid from 0) with ``m - first >= D``; +inf without ``D`` or beyond
    int64."""
    if max_duration is None:
        return MAX_TIME
    m = -(-(first + max_duration) // max_duration) * max_duration
    return min(m, MAX_TIME)


def sessions_of(
    starts: list[int], reaches: list[int], opened: list[bool], max_duration: int | None
) -> list[tuple[int, int, int]]:
    """The sessions of one group's rows, given in start order (§5), as ``(first start, end,
    first start of an open START edge in it or +inf)``: a row joins the open session when its
    start is before the session's reach (the largest ``end + timeout`` so far, ``reaches``:
    +inf for an open edge) and before its ``max_duration`` end, else opens a new one. A row is
    an event or a summary of the first events of a session (:class:`SessionState`). Runs on
    the executors, per group (:func:`session_aggregate`)."""
    out: list[tuple[int, int, int]] = []
    first = reach = cap = cut = MIN_TIME
    for i, (s, r, o) in enumerate(zip(starts, reaches, opened, strict=True)):
        if not i or s >= reach or s >= cap:
            if i:
                out.append((first, min(reach, cap), cut))
            first, reach, cap, cut = s, r, _grid_cap(s, max_duration), MAX_TIME
        reach = max(reach, r)
        if o:
            cut = min(cut, s)
    if starts:
        out.append((first, min(reach, cap), cut))
    return out


def _sessionized(rows: DataFrame, keys: tuple[str, ...], max_duration: int | None) -> DataFrame:
    """``rows`` (events and summaries: ``__start``, ``__reach``, ``__open``) with each one's
    session (:func:`sessions_of`, per group of ``keys``, on the executors): its first start
    ``__sf``, end ``__se`` and first open START edge ``__cut``. Arrow in and out: every other
    column passes through as it is. A session's rows are consecutive in start order, and rows
    of one start are in one session (a row reaches past its start), so the session of a row is
    the last one that starts at or before it. Timestamps come back labelled UTC
    (:func:`engine._spark.utc_labelled`)."""
    schema = StructType(
        [*rows.schema.fields, *(StructField(c, LongType()) for c in (_SF, _SE, _CUT))]
    )

    def sessionize(table: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        # Arrow's sort is stable
        table = table.take(pc.sort_indices(table, sort_keys=[(START, "ascending")]))
        starts = table.column(START).to_numpy()
        opened = pc.fill_null(table.column(_OPEN), False)
        found = sessions_of(
            starts.tolist(),
            table.column(_REACH).to_pylist(),
            opened.to_pylist(),
            max_duration,
        )
        which = np.searchsorted(np.array([f for f, _, _ in found]), starts, "right") - 1
        for n, c in enumerate((_SF, _SE, _CUT)):
            table = table.append_column(c, pa.array(np.array([x[n] for x in found])[which]))
        return utc_labelled(table)

    return rows.groupBy(*sql_names(keys)).applyInArrow(sessionize, schema)


def session_aggregate(
    flow: Flow, step: SessionWindowStep, state: SessionState, cache: EpochCache
) -> tuple[Flow, SessionState]:
    """Session windows (semantics §5) as physical node ``step`` says: its node's timeout,
    maximum duration, keys and aggregates; ``egress_only`` as for :func:`count_aggregate`."""
    node = step.node
    timeout, max_duration, keys = node.timeout, node.max_duration, node.keys
    aggregates, call = node.aggregates, node.call
    events, payload = _events(flow, state.held, cache)
    c_last = flow.last_cti()
    exact = exact_aggregates(aggregates, events, call)
    found = merges_of(aggregates, exact)
    merges = found[0] if found is not None and not sums_decimals(events, found[1]) else None
    # whether the aggregates merge depends on the query alone, so summaries are never dropped
    assert merges is not None or state.partials is None, (
        "partials held for aggregates that do not merge"
    )
    summaries = state.partials
    names = [*keys, *(name for name, _ in aggregates)]
    quoted = sql_names(keys)

    # Sessions per group, from the open sessions held (summaries and events) and the epoch's
    # events: a session that ends at or before a CTI c of the epoch is made of events before c's
    # position (later ones start at or after c), so forming them over all of the epoch's events
    # gives each the same. A summary is a row at its first start that reaches as far as its
    # events did. Each row comes back with its session: first start, end, and first open START
    # edge (:func:`_sessionized`).
    reach = f"least({END}, {MAX_TIME - timeout}) + {timeout}"  # end + timeout, +inf at most
    rows = events.selectExpr("*", f"{reach} AS {_REACH}", f"false AS {_SUM}")
    if summaries is not None:
        rows = rows.unionByName(
            summaries.selectExpr(
                "*", f"{_SF} AS {START}", f"false AS {_OPEN}", f"true AS {_SUM}"
            ).drop(_SF),
            allowMissingColumns=True,
        )
    assigned = cache.keep(_sessionized(rows, keys, max_duration))
    inside = assigned.filter(f"NOT {_SUM}").select(
        *quoted,
        _SF,
        _SE,
        _CUT,
        START,
        END,
        POS,
        _OPEN,
        *sql_names(c for c in payload if c not in keys),
    )
    # A session is closed once its end is at or before the last CTI. Of a session still open,
    # the events that start before that CTI and before the session's first open START edge are
    # summarized (with partial aggregates that merge): later events start at or after the CTI
    # and an open edge's end can only shorten its own reach, so these events stay together,
    # first in their session, and reach as far as they do now.
    done = "true" if c_last == MAX_TIME else f"{_SE} <= {c_last}"
    summed = f"({done}) OR {START} < least({c_last}, {_CUT})" if merges is not None else done
    by_session = [*quoted, _SF, _SE]
    if merges is not None:
        partials = [name for m in merges for name, _ in m.partial]
        merged = (
            inside.filter(summed)
            .groupBy(*by_session)
            .agg(
                *(col.alias(name) for m in merges for name, col in m.partial),
                F.max(F.expr(reach)).alias(_REACH),
            )
        )
        if summaries is not None:  # each summary with its partials, in its session now
            carried = assigned.filter(_SUM).select(*quoted, _SF, _SE, *partials, _REACH)
            again = [
                F.expr(f"{sql} AS {name}")
                for m in merges
                for sql, (name, _) in zip(m.merge, m.partial, strict=True)
            ]
            merged = (
                merged.unionByName(carried)
                .groupBy(*by_session)
                .agg(*again, F.max(_REACH).alias(_REACH))
            )
        merged = cache.keep(merged)
        finals = [
            (F.expr(m.final) if isinstance(m.final, str) else m.final).alias(name)
            for m, (name, _) in zip(merges, aggregates, strict=True)
        ]
        grouped = merged.filter(done).select(*by_session, *finals)
    else:
        grouped = (
            inside.filter(done)
            .groupBy(*by_session)
            .agg(*[c.alias(name) for name, c in repeatable(aggregates, exact)])
        )
    ctis = cache.keep(flow.ctis)
    results = place_results(grouped, _SE, _SF, _SE, names, None if step.egress_only else ctis)

    # Output CTIs: min(c, start of the earliest session still open at c).
    firsts = assigned.filter(f"{START} = {_SF}").select(_SF, _SE)  # a row or more a session
    open_at = (
        F.broadcast(ctis)
        .join(firsts, (F.col(_SF) < F.col(CTI)) & (F.col(_SE) > F.col(CTI)), "left")
        .groupBy(POS, CTI)
        .agg(F.min(_SF).alias("__m"))
        .select(POS, F.least(F.col(CTI), F.coalesce("__m", F.col(CTI))).alias(CTI))
    )
    moved = cache.keep(open_at)
    out_ctis = moved if step.egress_only else rising_rows(moved, state.emitted)
    top = moved.agg(F.max(CTI)).first()[0]
    emitted = state.emitted if top is None else max(state.emitted, top)

    held = kept = None
    if c_last != MAX_TIME:  # the open sessions: their events not summarized, and the summaries
        held = hold(
            inside.filter(f"NOT ({summed})").selectExpr(START, END, POS, _OPEN, *sql_names(payload))
        )
        if merges is not None:
            expansions = {p for m in merges for p in m.expansions}
            kept = hold(
                merged.filter(f"NOT ({done})").select(
                    *quoted,
                    _SF,
                    _REACH,
                    *(
                        compress_column(F.col(p)).alias(p) if p in expansions else p
                        for p in partials
                    ),
                )
            )
    return Flow(results, out_ctis, False), SessionState(held, kept, emitted)
