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
session closes, one ending at +inf too. State: the events of the sessions still open.

Both use global CTIs only: keyed CTIs are merged (dropped) as for snapshot windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import pandas as pd
from ctistream.engine.ctis import rising_rows
from ctistream.engine.operators.window import (
    close_edges,
    exact_aggregates,
    place_results,
    repeatable,
)
from ctistream.engine.rows import CTI, EDGE, END, HEADER, POS, START, EpochCache, Flow, hold
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = [
    "CountState",
    "SessionState",
    "count_aggregate",
    "session_aggregate",
]

_OPEN = "__open"


@dataclass
class CountState:
    """The events a count window holds and the last CTI it emitted (= the input's latest)."""

    held: DataFrame | None = None
    emitted: int = MIN_TIME


@dataclass
class SessionState:
    """The events of the sessions still open and the last CTI the window emitted."""

    held: DataFrame | None = None
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


def _same_group(keys: tuple[str, ...], left: str, right: str) -> Column:
    """Equal group keys (null is a group of its own, as in ``groupBy``)."""
    return reduce(
        lambda a, b: a & b,
        (F.col(f"{left}.{k}").eqNullSafe(F.col(f"{right}.{k}")) for k in keys),
        F.lit(True),
    )


def count_aggregate(
    flow: Flow,
    n: int,
    keys: tuple[str, ...],
    aggregates: tuple[tuple[str, Column], ...],
    state: CountState,
    cache: EpochCache,
    call: str = "count_window()",
) -> tuple[Flow, CountState]:
    events, payload = _events(flow, state.held, cache)
    c_last = flow.ctis.agg(F.max(CTI)).first()[0]
    c_last = MIN_TIME if c_last is None else c_last

    # Distinct start times per group, numbered; window j ends at d_j and starts at d_(j-n+1).
    # The held starts below the last CTI are the last n - 1 ones, so every window found here
    # ends at or after that CTI: none was emitted before.
    by_group = Window.partitionBy(*keys).orderBy(START)
    starts = cache.keep(events.select(*keys, START).distinct())
    windows = (
        starts.withColumn("__first", F.lag(START, n - 1).over(by_group))
        .filter(F.col("__first").isNotNull() & (F.col(START) < F.lit(c_last)))
        .select(*keys, "__first", F.col(START).alias("__d"))
    )
    inside = events.alias("e").join(
        F.broadcast(windows.alias("w")),
        _same_group(keys, "e", "w")
        & (F.col(f"e.{START}") >= F.col("w.__first"))
        & (F.col(f"e.{START}") <= F.col("w.__d")),
    )
    inside = inside.select(
        *(F.col(f"w.{k}").alias(k) for k in keys),
        "w.__d",
        *(F.col(f"e.{c}").alias(c) for c in payload if c not in keys),
    )
    exact = exact_aggregates(aggregates, events, call)
    grouped = inside.groupBy("__d", *keys).agg(
        *[c.alias(name) for name, c in repeatable(aggregates, exact)]
    )
    ctis = cache.keep(flow.ctis)
    names = [*keys, *(name for name, _ in aggregates)]
    # complete once the CTI passes d: at the first CTI >= d + 1; a point at d
    results = place_results(grouped, "__d + 1", "__d", "__d + 1", names, ctis)
    out_ctis = rising_rows(ctis, state.emitted)

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
            _same_group(keys, "e", "k") & (F.col(f"e.{START}") == F.col(f"k.{START}")),
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
    starts: list[int], ends: list[int], timeout: int, max_duration: int | None
) -> list[tuple[int, int]]:
    """The sessions ``(first start, end)`` of one group's events, given in start order (§5):
    an event joins the open session when its start is before the session's reach (``max end +
    timeout``, +inf for an open edge) and before its ``max_duration`` end, else opens a new one.
    Runs on the executors, per group (:func:`session_aggregate`)."""
    out: list[tuple[int, int]] = []
    first = reach = cap = MIN_TIME
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if i and s < reach and s < cap:
            reach = max(reach, min(e + timeout, MAX_TIME))
            continue
        if i:
            out.append((first, min(reach, cap)))
        first, reach, cap = s, min(e + timeout, MAX_TIME), _grid_cap(s, max_duration)
    if starts:
        out.append((first, min(reach, cap)))
    return out


def session_aggregate(
    flow: Flow,
    timeout: int,
    max_duration: int | None,
    keys: tuple[str, ...],
    aggregates: tuple[tuple[str, Column], ...],
    state: SessionState,
    cache: EpochCache,
    call: str = "session_window()",
) -> tuple[Flow, SessionState]:
    events, payload = _events(flow, state.held, cache)
    c_last = flow.ctis.agg(F.max(CTI)).first()[0]
    c_last = MIN_TIME if c_last is None else c_last

    # Sessions per group, from the events held (open sessions) and the epoch's: a session that
    # ends at or before a CTI c of the epoch is made of events before c's position (later ones
    # start at or after c), so forming them over all of the epoch's events gives each the same.
    fields = {f.name: f for f in events.schema.fields}
    key_ddl = ", ".join(f"`{k}` {fields[k].dataType.simpleString()}" for k in keys)
    schema = f"{key_ddl + ', ' if keys else ''}__sf long, __se long, __sn long"

    def sessionize(pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = pdf.sort_values(START, kind="stable")
        found = sessions_of(pdf[START].tolist(), pdf[END].tolist(), timeout, max_duration)
        rows = {k: [pdf[k].iloc[0]] * len(found) for k in keys}
        rows["__sf"] = [f for f, _ in found]
        rows["__se"] = [e for _, e in found]
        rows["__sn"] = [f for f, _ in found[1:]] + [MAX_TIME]
        return pd.DataFrame(rows, columns=[*keys, "__sf", "__se", "__sn"])

    sessions = cache.keep(
        events.select(*keys, START, END).groupBy(*keys).applyInPandas(sessionize, schema)
    )
    closed = sessions.filter(F.lit(c_last == MAX_TIME) | (F.col("__se") <= F.lit(c_last)))
    inside = events.alias("e").join(
        F.broadcast(closed.alias("s")),
        _same_group(keys, "e", "s")
        & (F.col(f"e.{START}") >= F.col("s.__sf"))
        & (F.col(f"e.{START}") < F.col("s.__sn")),
    )
    inside = inside.select(
        *(F.col(f"s.{k}").alias(k) for k in keys),
        "s.__sf",
        "s.__se",
        *(F.col(f"e.{c}").alias(c) for c in payload if c not in keys),
    )
    exact = exact_aggregates(aggregates, events, call)
    grouped = inside.groupBy("__sf", "__se", *keys).agg(
        *[c.alias(name) for name, c in repeatable(aggregates, exact)]
    )
    ctis = cache.keep(flow.ctis)
    names = [*keys, *(name for name, _ in aggregates)]
    results = place_results(grouped, "__se", "__sf", "__se", names, ctis)

    # Output CTIs: min(c, start of the earliest session still open at c).
    open_at = (
        F.broadcast(ctis)
        .join(sessions, (F.col("__sf") < F.col(CTI)) & (F.col("__se") > F.col(CTI)), "left")
        .groupBy(POS, CTI)
        .agg(F.min("__sf").alias("__m"))
        .select(POS, F.least(F.col(CTI), F.coalesce("__m", F.col(CTI))).alias(CTI))
    )
    moved = cache.keep(open_at)
    out_ctis = rising_rows(moved, state.emitted)
    top = moved.agg(F.max(CTI)).first()[0]
    emitted = state.emitted if top is None else max(state.emitted, top)

    held = None
    if c_last != MAX_TIME:  # the events of the sessions still open
        still_open = sessions.filter(F.col("__se") > F.lit(c_last))
        held = hold(
            events.alias("e").join(
                still_open.alias("s"),
                _same_group(keys, "e", "s")
                & (F.col(f"e.{START}") >= F.col("s.__sf"))
                & (F.col(f"e.{START}") < F.col("s.__sn")),
                "left_semi",
            )
        )
    return Flow(results, out_ctis, False), SessionState(held, emitted)
