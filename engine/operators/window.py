"""Tumbling and hopping windows with aggregates (semantics §5).

Windows lie on a grid: ``[k * hop, k * hop + size)`` (tumbling: ``hop == size``). An event counts
in every window its lifetime overlaps. A window is complete when the input CTI reaches its end;
then one result per non-empty window and group is emitted: the window's lifetime (StreamInsight's
ClipToWindowEnd, the default) or a point at the window end (PointAlignToWindowEnd, Flink's "time
that closed the window"). Empty windows produce nothing.

CTI rule (§5; the seeds: "Hopping windows pull back CTIs within a window to the beginning of the
window"): an input CTI ``c`` becomes the start of the earliest window still open, the smallest grid
start ``ws`` with ``ws + size > c``; for point results, that window's end ``ws + size``.

One epoch is one Spark plan: the events of the epoch join the held ones (END edges close their
START edges by a ranked join); each event is exploded into the windows it overlaps among those
completing in this epoch; ``groupBy(window, keys).agg(...)`` computes the results with the user's
aggregate Columns (built-ins or pandas UDAFs); a running count over the epoch's CTIs finds the CTI
that completes each window. State: the events that can still overlap an open window (their end
is after the earliest open window's start), so it is bounded by time, not by input size. An edge
still open when the CTI reaches +inf counts up to the last window starting at or before the latest
time the operator has seen (docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

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
    hold,
    keyed_rises,
    sql_names,
)
from engine.temporal import MAX_TIME, MIN_TIME

__all__ = ["WindowOutput", "WindowSpec", "WindowState", "window_aggregate"]


class WindowOutput(StrEnum):
    """What a window result looks like, and so where the window's CTI lands."""

    #: The window's lifetime ``[ws, ws + size)`` (StreamInsight's ClipToWindowEnd). Output CTI:
    #: the start of the earliest open window.
    WINDOW = "WINDOW"
    #: A point at the window end ``ws + size`` (PointAlignToWindowEnd). Output CTI: the end of
    #: the earliest open window.
    POINT_AT_END = "POINT_AT_END"


_OPEN, _WS = "__open", "__ws"


@dataclass(frozen=True)
class WindowSpec:
    size: int
    hop: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]
    point_at_end: bool = False

    def pulled(self, c: int) -> int:
        """The output CTI for input CTI ``c``."""
        if c in (MIN_TIME, MAX_TIME):
            return c
        first_open = ((c - self.size) // self.hop) * self.hop + self.hop
        return first_open + self.size if self.point_at_end else first_open

    def pulled_sql(self, c: str) -> str:
        """:meth:`pulled` of column ``c``, as SQL text."""
        x = f"({c} - {self.size})"
        first_open = f"{x} - pmod({x}, {self.hop}) + {self.hop}"
        value = f"{first_open} + {self.size}" if self.point_at_end else first_open
        return f"CASE WHEN {c} IN ({MIN_TIME}, {MAX_TIME}) THEN {c} ELSE {value} END"


@dataclass
class WindowState:
    """Held events, the input CTI up to which windows are complete, the latest time seen, the
    last CTI emitted, and with substreams the keyed CTIs seen."""

    held: DataFrame | None = None
    last: int = MIN_TIME
    latest: int = MIN_TIME
    emitted: int = MIN_TIME
    #: substreams: per key (``__kk``) the largest keyed input CTI (``__c``)
    key_last: DataFrame | None = None


def close_edges(events: DataFrame, ends: DataFrame, payload: list[str]) -> DataFrame:
    """Give each END edge's end to the oldest open identical START edge (FIFO by position)."""
    key = [START, *payload]
    opened = events.withColumn(
        "__r",
        F.when(F.col(_OPEN), F.row_number().over(Window.partitionBy(_OPEN, *key).orderBy(POS))),
    )
    ends = ends.withColumn("__r", F.row_number().over(Window.partitionBy(*key).orderBy(POS)))
    o, e = opened.alias("o"), ends.alias("e")
    on = [F.col(f"o.{k}").eqNullSafe(F.col(f"e.{k}")) for k in [*key, "__r"]]
    joined = o.join(e.select(*key, "__r", F.col(END).alias("__new_end")).alias("e"), on, "left")
    closed = F.col("e.__new_end").isNotNull()
    return joined.select(
        *[F.col(f"o.{c}") for c in events.columns if c not in (END, _OPEN)],
        F.when(closed, F.col("e.__new_end")).otherwise(F.col(f"o.{END}")).alias(END),
        (F.col(f"o.{_OPEN}") & ~closed).alias(_OPEN),
    )


def window_aggregate(
    flow: Flow, spec: WindowSpec, state: WindowState, cache: EpochCache
) -> tuple[Flow, WindowState]:
    # Per-epoch expressions are SQL text: one py4j call each, not one per column and operator.
    payload = [c for c in flow.events.columns if c not in HEADER]
    cols = sql_names(payload)
    new = flow.events.filter(f"NOT ({EDGE} <=> 'END')").selectExpr(
        START, END, POS, f"{EDGE} <=> 'START' AS {_OPEN}", *cols
    )
    events = new if state.held is None else state.held.unionByName(new)
    if flow.edges:
        events = close_edges(events, flow.events.filter(f"{EDGE} = 'END'"), payload)
    # Substreams: a keyed CTI completes the windows of the groups with its key (docs/decisions.md)
    key = flow.key if flow.keyed is not None and flow.key in spec.keys else None
    keyed = cache.keep(flow.keyed) if key is not None else None
    key_last = None  # per key, the largest keyed input CTI up to this epoch
    if keyed is not None:
        seen = keyed.select(KEY, CTI)
        if state.key_last is not None:
            seen = state.key_last.unionByName(seen)
        key_last = checkpoint(seen.groupBy(KEY).agg(F.max(CTI).alias(CTI)))
        last_before = (
            state.key_last.select(KEY, F.col(CTI).alias("__lk")) if state.key_last else None
        )
        events = events.join(
            key_last.select(F.col(KEY).alias(key), F.col(CTI).alias("__hk")), key, "left"
        )
        if last_before is not None:
            events = events.join(last_before.withColumnRenamed(KEY, key), key, "left")
        else:
            events = events.withColumn("__lk", F.lit(None).cast("long"))
    events = cache.keep(events)

    # One small job: the epoch's last and last finite input CTI, and the latest time seen.
    none = "CAST(NULL AS BIGINT)"
    found = (
        flow.ctis.selectExpr(
            f"max({CTI}) AS c",
            f"max(CASE WHEN {CTI} < {MAX_TIME} THEN {CTI} END) AS f",
            none + " AS m",
        )
        .unionByName(
            events.selectExpr(
                none + " AS c",
                none + " AS f",
                f"max(CASE WHEN {_OPEN} THEN {START} ELSE greatest({START}, {END} - 1) END) AS m",
            )
        )
        .collect()
    )
    stats = {k: max((r[k] for r in found if r[k] is not None), default=None) for k in "cfm"}
    latest = max(state.latest, stats["m"] if stats["m"] is not None else MIN_TIME)
    c_last = stats["c"] if stats["c"] is not None else state.last

    # Windows completing now, per event: ws + size > lo (completed before), and ws + size <= hi
    # or, once the CTI is +inf, ws <= the latest time seen (or the last finite CTI's windows, if
    # later). lo, hi: the input CTI before and after the epoch; with substreams, each the larger
    # of it and the event's key's keyed CTI.
    size, hop = spec.size, spec.hop
    lo, hi = str(state.last), str(c_last)
    if keyed is not None:
        lo, hi = f"greatest({lo}, __lk)", f"greatest({hi}, __hk)"
    if c_last == MAX_TIME:
        finite_c = stats["f"] if stats["f"] is not None else state.last
        bound = str(latest if finite_c == MIN_TIME else max(latest, finite_c - size))
    else:
        bound = f"CASE WHEN {hi} > {lo} THEN {hi} - {size} END"
    lower = f"CASE WHEN {lo} = {MIN_TIME} THEN {START} - {size} + 1 "
    lower += f"ELSE greatest({START} - {size} + 1, {lo} - {size} + 1) END"
    first = f"(({lower}) + pmod(-({lower}), {hop}))"  # the first grid start >= lower
    last_ws = f"least({END} - 1, {bound})"
    live = f"{END} > {START} AND {hi} > {lo} AND {first} <= {last_ws}"
    exploded = events.filter(live).withColumn(
        _WS, F.expr(f"explode(sequence({first}, {last_ws}, CAST({hop} AS BIGINT)))")
    )
    ctis = cache.keep(flow.ctis)
    results = _result_rows(exploded, spec, ctis, keyed, key)

    pulled = spec.pulled(c_last) if c_last != MIN_TIME else MIN_TIME
    before = f"max({CTI}) OVER (ORDER BY {POS} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    out_ctis = cache.keep(
        ctis.selectExpr(POS, f"{spec.pulled_sql(CTI)} AS {CTI}")
        .withColumn("__prev", F.expr(f"greatest({state.emitted}, {before})"))
        .filter(f"{CTI} > __prev")
        .drop("__prev")
    )
    open_start = pulled - size if spec.point_at_end and pulled != MIN_TIME else pulled
    held = None
    if c_last != MAX_TIME:
        held = events.filter(f"{END} > {open_start}").selectExpr(START, END, POS, _OPEN, *cols)
        held = hold(held)
    new_state = WindowState(held, c_last, latest, max(state.emitted, pulled), key_last)
    out = Flow(results, out_ctis, False)
    if keyed is None:
        return out, new_state
    candidates = keyed.selectExpr(POS, KEY, f"{spec.pulled_sql(CTI)} AS {CTI}")
    # the largest pulled candidate per key is the pulled largest keyed CTI (pulling is monotone)
    seen = None
    if state.key_last is not None:
        seen = state.key_last.selectExpr(KEY, f"{spec.pulled_sql(CTI)} AS {CTI}")
    out_keyed, _ = keyed_rises(candidates, out_ctis, state.emitted, seen)
    return replace(out, keyed=cache.keep(out_keyed), key=key), new_state


def _result_rows(
    exploded: DataFrame,
    spec: WindowSpec,
    ctis: DataFrame,
    keyed: DataFrame | None,
    key: str | None,
) -> DataFrame:
    """Aggregate per (window, keys) and place each result at the CTI that completes its window
    (with substreams, the first CTI or keyed CTI of its key that does)."""
    aggs = [col.alias(name) for name, col in spec.aggregates]
    grouped = exploded.groupBy(_WS, *spec.keys).agg(*aggs)
    done_at = f"{_WS} + {spec.size}"
    start = done_at if spec.point_at_end else _WS
    end = f"{done_at} + 1" if spec.point_at_end else done_at
    names = [*spec.keys, *(name for name, _ in spec.aggregates)]
    return place_results(grouped, done_at, start, end, names, ctis, keyed, key)


def place_results(
    grouped: DataFrame,
    done_at: str,
    start: str,
    end: str,
    names: list[str],
    ctis: DataFrame,
    keyed: DataFrame | None = None,
    key: str | None = None,
) -> DataFrame:
    """Result rows ``[start, end)``, each at the position of the first CTI with value >=
    ``done_at`` (all three SQL text over ``grouped``): the CTI that completes it. With
    ``keyed`` CTIs, the earlier of that one and the first keyed CTI of the result's ``key`` value
    with value >= ``done_at``."""
    grouped = grouped.selectExpr("*", f"{done_at} AS __t")
    placed = _first_at_or_above(grouped, ctis, None, "__cpos")
    at = "__cpos"
    if keyed is not None:
        placed = _first_at_or_above(placed, keyed.withColumnRenamed(KEY, key), key, "__kpos")
        at = "least(__cpos, __kpos)"
    return placed.filter(f"{at} IS NOT NULL").selectExpr(
        f"'INSERT' AS {KIND}",
        f"CAST(NULL AS STRING) AS {EDGE}",
        f"{start} AS {START}",
        f"{end} AS {END}",
        f"{at} AS {POS}",
        *sql_names(names),
    )


def _first_at_or_above(rows: DataFrame, ctis: DataFrame, key: str | None, name: str) -> DataFrame:
    """``rows`` with column ``name``: the position of the first CTI (of ``ctis``, per ``key``
    value if given) with value >= the row's ``__t``, or null. CTIs rise with their positions, so
    that is the nearest CTI after the row in (value, CTIs after rows) order, found as the last
    one so far in the reverse order: a running frame (linear) in the same sort, no join."""
    part = sql_names([key]) if key is not None else []
    both = rows.selectExpr("*", "0 AS __typ").unionByName(
        ctis.selectExpr(*part, f"{CTI} AS __t", "1 AS __typ", f"{POS} AS __cp"),
        allowMissingColumns=True,
    )
    by = f"PARTITION BY {part[0]} " if part else ""
    after = f"{by}ORDER BY __t DESC, __typ DESC, __cp DESC"
    after += " ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    found = F.expr(f"last(CASE WHEN __typ = 1 THEN __cp END, true) OVER ({after})")
    return both.withColumn(name, found).filter("__typ = 0").drop("__typ", "__cp")
