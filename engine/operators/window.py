"""Tumbling and hopping windows with aggregates (semantics §5).

Windows lie on a grid: ``[k * hop, k * hop + size)`` (tumbling: ``hop == size``). An event counts
in every window its lifetime overlaps. A window is complete when the input CTI reaches its end;
then one result per non-empty window and group is emitted: the window's lifetime (StreamInsight's
ClipToWindowEnd, the default) or a point at the window end (PointAlignToWindowEnd, Flink's "time
that closed the window"). Empty windows produce nothing.

A window lies between finite moments, ``-inf < ws`` and ``ws + size < +inf`` (§1: ±inf are the
ends of int64); the grid's windows beyond do not exist (docs/decisions.md), and the grid is
computed in int64 without overflow, one rule read as numpy and as SQL
(:meth:`WindowSpec.first_after`, :meth:`WindowSpec.first_sql`).

CTI rule (§5; the seeds: "Hopping windows pull back CTIs within a window to the beginning of the
window"): an input CTI ``c`` becomes the start of the earliest window still open, the smallest grid
start ``ws`` with ``ws + size > c``; for point results, that window's end ``ws + size``; ``c``
itself when no window is open.

One epoch is one Spark plan: the events of the epoch join the held ones (END edges close their
START edges by a ranked join); each event is exploded into the windows it overlaps among those
completing in this epoch; ``groupBy(window, keys).agg(...)`` computes the results with the user's
aggregate Columns (built-ins or pandas UDAFs); a running count over the epoch's CTIs finds the CTI
that completes each window. An event that ends at +inf (an edge still open, an interval to +inf)
counts, once the CTI reaches +inf, up to the last window starting at or before the latest finite
moment the operator has seen (§5's bounded work; docs/decisions.md).

State, bounded by time, not by input size:

* when every aggregate is a built-in that merges (``count``, ``sum``, ``min``, ``max``, ``avg`` /
  ``mean`` of one argument, not DISTINCT) and the stream has no substreams: one row of partial
  aggregates per open window and group, and the events that end at +inf (START edges still
  open, intervals to +inf). An event whose finite end is known goes into every open window it
  overlaps in the epoch it arrives (or closes) in; one that ends at +inf goes into the windows
  that complete while it does. Sums of doubles (and averages' sums) are kept exact, as
  expansions, and rounded once in the result (semantics §4, engine.exact);
* otherwise (pandas UDAFs, other aggregates, expressions over aggregates, substreams): the events
  that can still overlap an open window (their end is after the earliest open window's start).

A window of partial aggregates that alone reads a POINT input gets the epoch's partial
aggregates from the input's scan (:class:`PushedWindow`, computed in Arrow where the input is
read) instead of its events, for the aggregates Arrow computes as Spark does (:func:`push_window`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ctistream.engine._model import Choice
from ctistream.engine._spark import ansi_mode
from ctistream.engine.ctis import first_at_or_above_rows, keyed_rises, risen, rising_rows
from ctistream.engine.edges import fifo_ranked
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.exact import (
    INTEGER_SUM,
    MOMENTS,
    compress_column,
    compress_lists,
    integer_total,
    mean_column,
    moment_column,
    sum_column,
)
from ctistream.engine.reuse import once
from ctistream.engine.rows import (
    CTI,
    EDGE,
    END,
    HEADER,
    KEY,
    KIND,
    POS,
    POS_TYPE,
    START,
    EpochCache,
    Flow,
    Kind,
    checkpoint,
    counted_checkpoint,
    hold,
    same_group,
    sql_names,
    with_rows,
)
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, duration_text
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

__all__ = [
    "PushedWindow",
    "WindowOutput",
    "WindowSpec",
    "WindowState",
    "push_window",
    "pushed_partials",
    "window_aggregate",
]


class WindowOutput(Choice):
    """What a window result looks like, and so where the window's CTI lands."""

    #: The window's lifetime ``[ws, ws + size)`` (StreamInsight's ClipToWindowEnd). Output CTI:
    #: the start of the earliest open window.
    WINDOW = "WINDOW"
    #: A point at the window end ``ws + size`` (PointAlignToWindowEnd). Output CTI: the end of
    #: the earliest open window.
    POINT_AT_END = "POINT_AT_END"


_OPEN, _WS = "__open", "__ws"
#: with a join's pushed partial aggregates: the latest time of the events counted in each row;
#: per group, its latest time (WindowState.group_latest)
_LATEST = "__latest"
#: an event's end where it is finite, else null: with its start, the latest time it shows (§5)
_FINITE_END = f"CASE WHEN {END} < {MAX_TIME} THEN {END} END"


@dataclass(frozen=True)
class WindowSpec:
    size: int
    hop: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]
    point_at_end: bool = False
    #: rows per complete window instead of aggregates (windowed ``top_k`` and ``apply``:
    #: :class:`engine.operators.window_rows.PerWindow`), or None
    per_window: Any = None
    #: the leading keys whose groups each have their own latest finite moment
    #: (:attr:`engine.plan.WindowNode.latest_by`), or ()
    latest_by: tuple[str, ...] = ()
    #: whether egress alone reads the window's output (the query's root, untraced:
    #: engine.physical._egress_reads): it releases an interval or a point by its start and the
    #: CTIs' values, and emits a CTI only when it rises, so the results are not placed at the
    #: CTIs that complete them (:func:`place_results`) and the CTIs are not filtered to those
    #: that rise (:func:`engine.ctis.rising_rows`)
    egress_only: bool = False

    @property
    def first_ws(self) -> int:
        """The first window start on the grid: the smallest ``ws > -inf`` (docs/decisions.md: a
        window lies between finite moments, ``-inf < ws`` and ``ws + size < +inf``)."""
        return -((-(MIN_TIME + 1)) // self.hop) * self.hop

    @property
    def last_ws(self) -> int:
        """The last window start on the grid: the largest with ``ws + size < +inf``."""
        return ((MAX_TIME - 1 - self.size) // self.hop) * self.hop

    def first_after(self, t: Any) -> tuple[Any, Any]:
        """The grid's first window that ends after ``t`` (semantics §5: an event counts in every
        window its lifetime overlaps; the pulled-back CTI is the smallest grid start ``ws`` with
        ``ws + size > c``), for ``t`` an ``int`` or a numpy int64 array: the smallest grid
        start ``ws >= first_ws`` with ``ws + size > t``, and whether it is at most
        :attr:`last_ws` (where it is not, ``ws`` is meaningless). On the driver and in the Arrow
        function of :func:`pushed_partials`; :meth:`first_sql` reads the same rule as SQL."""
        return self._first_after(t, _NUMPY)

    def first_sql(self, t: str) -> str:
        """SQL: :meth:`first_after` of the bigint SQL expression ``t``, NULL where it is above
        :attr:`last_ws`."""
        return str(self._first_after(_Sql(t), _SQL)[0])

    def _first_after(self, t: Any, ops: Any) -> tuple[Any, Any]:
        """The rule of :meth:`first_after`, once, in ``ops``' arithmetic (numpy or SQL text).
        Worked in int64 without overflow for every ``t``: ``x = max(t, first_ws + size - 1) -
        size + 1`` lies in ``[first_ws, +inf - size + 1]``, and the grid start at or above it
        is computed only where ``x <= last_ws``."""
        hop = self.hop
        x = ops.maximum(t, self.first_ws + self.size - 1) - (self.size - 1)
        inside = x <= self.last_ws
        return ops.guarded(
            inside, x, self.first_ws, lambda x: x + ops.mod(hop - ops.mod(x, hop), hop)
        )

    def last_before(self, end: Any) -> Any:
        """The bound on the starts of the windows a lifetime ending at ``end`` overlaps: its last
        tick ``end - 1`` (a window overlaps it when ``ws <= end - 1``), at most
        :attr:`last_ws`; ``int`` or numpy int64 array. :meth:`last_before_sql` reads the same
        rule as SQL."""
        return self._last_before(end, _NUMPY)

    def last_before_sql(self, end: str) -> str:
        """SQL: :meth:`last_before` of the bigint SQL expression ``end``."""
        return str(self._last_before(_Sql(end), _SQL))

    def _last_before(self, end: Any, ops: Any) -> Any:
        return ops.minimum(ops.maximum(end, MIN_TIME + 1) - 1, self.last_ws)

    def first_open(self, c: int) -> int | None:
        """The start of the earliest window still open at input CTI ``c``: the smallest grid
        start ``ws`` with ``ws + size > c``; None when no window is open (every window ends at
        or before ``c``)."""
        ws, inside = self.first_after(c)
        return int(ws) if inside else None

    def pulled(self, c: int) -> int:
        """The output CTI for input CTI ``c``: the start (end, for points) of the earliest open
        window; ``c`` itself when no window is open (none can have a result after it)."""
        ws = self.first_open(c) if c not in (MIN_TIME, MAX_TIME) else None
        if ws is None:
            return c
        return ws + self.size if self.point_at_end else ws

    def pulled_sql(self, c: str) -> str:
        """:meth:`pulled` of column ``c``, as SQL text."""
        ws = self.first_sql(c)
        value = f"{ws} + {self.size}" if self.point_at_end else ws
        return f"CASE WHEN {c} IN ({MIN_TIME}, {MAX_TIME}) THEN {c} ELSE coalesce({value}, {c}) END"


class _Sql:
    """A bigint SQL expression (its text) that the grid's rules compute with as with numpy
    values: ``+``, ``-``, ``<=`` make the SQL of the operation."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __add__(self, other: object) -> _Sql:
        return _Sql(f"({self} + {other})")

    def __sub__(self, other: object) -> _Sql:
        return _Sql(f"({self} - {other})")

    def __rsub__(self, other: object) -> _Sql:
        return _Sql(f"({other} - {self})")

    def __le__(self, other: object) -> _Sql:
        return _Sql(f"({self} <= {other})")


class _SqlOps:
    """The grid's operations as Spark SQL (:class:`_Sql`)."""

    @staticmethod
    def maximum(a: object, b: object) -> _Sql:
        return _Sql(f"greatest({a}, {b})")

    @staticmethod
    def minimum(a: object, b: object) -> _Sql:
        return _Sql(f"least({a}, {b})")

    @staticmethod
    def mod(a: object, b: int) -> _Sql:
        return _Sql(f"pmod({a}, {b})")  # floored, as numpy's mod, for b > 0

    @staticmethod
    def guarded(inside: _Sql, x: _Sql, fallback: int, value: Callable) -> tuple[_Sql, _Sql]:
        """``value(x)`` where ``inside`` holds, else NULL (never computed there)."""
        del fallback
        return _Sql(f"(CASE WHEN {inside} THEN {value(x)} END)"), inside


class _NumpyOps:
    """The grid's operations over ``int`` and numpy int64 values."""

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        import numpy as np

        return np.maximum(a, b)

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        import numpy as np

        return np.minimum(a, b)

    @staticmethod
    def mod(a: Any, b: int) -> Any:
        import numpy as np

        return np.mod(a, b)

    @staticmethod
    def guarded(inside: Any, x: Any, fallback: int, value: Callable) -> tuple[Any, Any]:
        """``value(x)``, computed at ``fallback`` where ``inside`` does not hold (no overflow),
        and ``inside``."""
        import numpy as np

        return value(np.where(inside, x, fallback)), inside


_SQL, _NUMPY = _SqlOps(), _NumpyOps()


@dataclass
class WindowState:
    """Held events, the input CTI up to which windows are complete, the latest time seen, the
    last CTI emitted, and with substreams the keyed CTIs seen."""

    held: DataFrame | None = None
    #: partial aggregates of the open windows (``__ws``, keys, partial columns), when kept
    partials: DataFrame | None = None
    #: whether this operator keeps partial aggregates (decided at its first epoch)
    partial: bool | None = None
    last: int = MIN_TIME
    #: the latest time seen (not kept where no open edge can need it, see :func:`_known_stats`)
    latest: int = MIN_TIME
    emitted: int = MIN_TIME
    #: substreams: per key (``__kk``) the largest keyed input CTI (``__c``)
    key_last: DataFrame | None = None
    #: the aggregates computed exactly (:func:`exact_aggregates`; decided at the first epoch)
    exact: Exact | None = None
    #: with :attr:`WindowSpec.latest_by`: per group (those keys) its latest time (``__latest``),
    #: for the groups whose latest time is after the last CTI
    group_latest: DataFrame | None = None


def close_edges(events: DataFrame, ends: DataFrame, payload: list[str]) -> DataFrame:
    """Give each END edge's end to the oldest open identical START edge (FIFO by position,
    :func:`engine.edges.fifo_ranked`). Only the open edges are ranked and joined: the other
    events pass by."""
    key = [START, *payload]
    ends = ends.select(*key, POS, F.col(END).alias("__new_end"))
    o, e, on = fifo_ranked(events.filter(F.col(_OPEN)), ends, key, POS, POS)
    joined = o.join(e, on, "left")
    closed = F.col("e.__new_end").isNotNull()
    return events.filter(~F.col(_OPEN)).unionByName(
        joined.select(
            *[F.col(f"o.{c}") for c in events.columns if c not in (END, _OPEN)],
            F.when(closed, F.col("e.__new_end")).otherwise(F.col(f"o.{END}")).alias(END),
            (F.col(f"o.{_OPEN}") & ~closed).alias(_OPEN),
        )
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
    exact = state.exact
    if exact is None:  # decided once, at the operator's first epoch
        exact = exact_aggregates(spec.aggregates, new, _where(spec))
    # the same Columns every epoch: built once per query (engine.reuse)
    merges = None
    if spec.per_window is None:
        merges = once(spec, exact, lambda: merges_of(spec.aggregates, exact))
    merging = state.partial
    if merging is None:  # decided once, at the operator's first epoch
        merging = keyed is None and merges is not None and not sums_decimals(new, merges[1])
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
    # the epoch's partial aggregates computed where the events were made: by the input's scan
    # (its events then empty), or by a join (its events then its edges only)
    pushed = flow.partials
    if pushed is not None and not merging:  # pragma: no cover - push_window's rules are these
        raise AssertionError("window: partial aggregates pushed to a window that keeps events")
    events_too = pushed is None or flow.edges or flow.unbounded
    known = _known_stats(flow, merging)
    if events_too and (known is None or flow.edges or not merging):  # events read twice
        # a lazy checkpoint, not a cached plan: see engine.operators.join (a union's branch
        # over held state does not find a cached plan; _stats reads events in one)
        events = checkpoint(events, eager=False)

    if known is not None:
        stats = known
    else:
        stats = _stats(flow, events if events_too else None, pushed if flow.unbounded else None)
    latest = max(state.latest, stats["m"] if stats["m"] is not None else MIN_TIME)
    c_last = stats["c"] if stats["c"] is not None else state.last
    group_latest = None
    if spec.latest_by:  # per group: its own latest time (the join pushes none per group)
        assert events_too, "window: a join pushed partial aggregates to a window per group"
        group_latest = _group_latest(events, spec.latest_by, state.group_latest)

    # Windows completing now, per event: ws + size > lo (completed before), and ws + size <= hi
    # or, once the CTI is +inf, ws <= L, the latest finite moment seen (its events' starts and
    # finite ends, its finite CTIs: §5's bounded work). lo, hi: the input CTI before and after
    # the epoch; with substreams, each the larger of it and the event's key's keyed CTI. Kept as
    # partial aggregates, an event whose end is known and finite goes into every window it
    # overlaps that is still open (ws + size > lo) at once; one that ends at +inf (an open edge,
    # an interval to +inf) only into the windows completing now, and stays held.
    # Bigint without overflow near +-inf (§1; docs/decisions.md: windows lie between finite
    # moments): first from WindowSpec.first_sql, the ends kept below +inf by last_ws.
    size, hop = spec.size, spec.hop
    lo, hi = str(state.last), str(c_last)
    if keyed is not None:
        lo, hi = f"greatest({lo}, __lk)", f"greatest({hi}, __hk)"
    if c_last == MAX_TIME:
        finite_c = stats["f"] if stats["f"] is not None else state.last
        bound = str(min(max(latest, finite_c), spec.last_ws))
        if group_latest is not None:  # each event's group's own latest time
            events = _with_group_latest(events, group_latest, spec.latest_by)
            # (greatest skips a null: a group without a row has the finite CTI alone)
            bound = f"least(greatest({_LATEST}, {finite_c}), {spec.last_ws})"
        completes = f"{hi} > {lo}"
    else:  # windows end at or before hi: none while hi < first_ws + size
        enough = f"{hi} >= {spec.first_ws + size}"
        bound = f"CASE WHEN {enough} THEN least({hi} - {size}, {spec.last_ws}) END"
        completes = f"{hi} > {lo} AND {enough}"
    first = spec.first_sql(f"greatest({START}, {lo})")
    end_ws = spec.last_before_sql(END)
    opened = f"({_OPEN} OR {END} = {MAX_TIME})" if flow.unbounded else _OPEN
    if merging:
        last_ws = f"CASE WHEN {opened} THEN least({end_ws}, {bound}) ELSE {end_ws} END"
        live = f"{END} > {START} AND (NOT {opened} OR ({completes})) AND {first} <= {last_ws}"
    else:
        last_ws = f"least({end_ws}, {bound})"
        live = f"{END} > {START} AND {completes} AND {first} <= {last_ws}"
    ctis = cache.keep(flow.ctis)
    partials = None
    if not events_too:  # the scan (or a join of sides without edges) counted the events
        assert merges is not None and pushed is not None
        grouped, partials = _merge_partials(
            _counted(pushed), spec, merges[0], state.partials, c_last, True
        )
    else:
        exploded = events.filter(live).withColumn(
            _WS, F.expr(f"explode(sequence({first}, {last_ws}, CAST({hop} AS BIGINT)))")
        )
        if merging:
            assert merges is not None
            new_partials = exploded.groupBy(_WS, *spec.keys).agg(
                *(col.alias(name) for m in merges[0] for name, col in m.partial)
            )
            if pushed is not None:  # a join's intervals, counted where they formed
                new_partials = new_partials.unionByName(_counted(pushed))
            grouped, partials = _merge_partials(
                new_partials, spec, merges[0], state.partials, c_last, pushed is not None
            )
        elif spec.per_window is not None:  # windowed top_k or apply: rows per window
            lifetime = (_WS, f"{_WS} + {size}")
            grouped = spec.per_window.rows(exploded, [_WS], spec.keys, payload, lifetime)
        else:
            grouped = exploded.groupBy(_WS, *spec.keys).agg(
                *(col.alias(name) for name, col in repeatable(spec.aggregates, exact))
            )
    results = _result_rows(grouped, spec, ctis, keyed, key, payload)

    pulled = spec.pulled(c_last) if c_last != MIN_TIME else MIN_TIME
    out_ctis = ctis.selectExpr(POS, f"{spec.pulled_sql(CTI)} AS {CTI}")
    if not spec.egress_only or keyed is not None:
        out_ctis = cache.keep(rising_rows(out_ctis, state.emitted))
    held = None
    if c_last != MAX_TIME and (flow.edges or flow.unbounded or not merging):
        # kept as partial aggregates, only the events that end at +inf (START edges still
        # open); else every event that may overlap an open window (none when none is open)
        open_start = spec.first_open(c_last) if c_last != MIN_TIME else MIN_TIME
        keep = opened if merging else f"{END} > {open_start}" if open_start is not None else "false"
        held = hold(events.filter(keep).selectExpr(START, END, POS, _OPEN, *cols))
    if group_latest is not None:
        # kept: only the groups whose latest time is after the last CTI. At +inf an event is
        # bounded by the larger of its group's time and the last finite CTI, which is at least
        # this one: a group without a row (null) is bounded by that CTI alone, as its time.
        kept = c_last != MAX_TIME
        group_latest = hold(group_latest.filter(f"{_LATEST} > {c_last}")) if kept else None
    new_state = WindowState(
        held,
        partials,
        merging,
        c_last,
        latest,
        max(state.emitted, pulled),
        key_last,
        exact,
        group_latest,
    )
    rose = risen(pulled, state.emitted)
    out = Flow(results, out_ctis, False, latest=rose, unbounded=False)
    if keyed is None:
        return out, new_state
    candidates = keyed.selectExpr(POS, KEY, f"{spec.pulled_sql(CTI)} AS {CTI}")
    # the largest pulled candidate per key is the pulled largest keyed CTI (pulling is monotone)
    seen = None
    if state.key_last is not None:
        seen = state.key_last.selectExpr(KEY, f"{spec.pulled_sql(CTI)} AS {CTI}")
    out_keyed, _ = keyed_rises(candidates, out_ctis, state.emitted, seen)
    return replace(out, keyed=cache.keep(out_keyed), key=key), new_state


def _counted(pushed: DataFrame) -> DataFrame:
    """Pushed partial aggregates without a join's latest times (a row whose pairs fall in no
    window carries only its latest time: no window start)."""
    return pushed.filter(f"{_WS} IS NOT NULL").drop(_LATEST)


def _group_latest(events: DataFrame, keys: tuple[str, ...], before: DataFrame | None) -> DataFrame:
    """Per group of ``keys``, the latest time of its events so far (``__latest``: the largest
    start or finite end; :func:`_stats`' ``m`` per group), with the groups kept ``before``:
    one row per group."""
    names = sql_names(keys)
    now = events.selectExpr(*names, f"greatest({START}, {_FINITE_END}) AS {_LATEST}")
    if before is not None:
        now = before.unionByName(now)
    return now.groupBy(*names).agg(F.max(_LATEST).alias(_LATEST))


def _with_group_latest(
    events: DataFrame, group_latest: DataFrame, keys: tuple[str, ...]
) -> DataFrame:
    """``events`` with their group's latest time (``__latest``)."""
    return (
        events.alias("e")
        .join(group_latest.alias("g"), same_group(keys, "e", "g"), "left")
        .select("e.*", f"g.{_LATEST}")
    )


def _known_stats(flow: Flow, merging: bool) -> dict[str, int | None] | None:
    """:func:`_stats` without a job, where the driver knows them: the flow's CTIs are known
    (:attr:`Flow.latest`) and below +inf, and no event can end at +inf, so none has windows
    that the latest time bounds (partial aggregates of a stream without edges, not
    :attr:`Flow.unbounded`); else None."""
    c = flow.latest
    if c is None or c == MAX_TIME or not merging or flow.edges or flow.unbounded:
        return None
    known = c if c != MIN_TIME else None
    return {"c": known, "f": known, "m": None}


def _stats(
    flow: Flow, events: DataFrame | None, pushed: DataFrame | None = None
) -> dict[str, int | None]:
    """The epoch's last (``c``) and last finite (``f``) input CTI, and the latest time of its
    events (``m``: its largest start or finite end; with ``f``, where the windows of an event
    that ends at +inf end once the CTI is +inf; None without
    ``events``; ``pushed``: partial aggregates with the latest time of theirs, ``__latest``),
    None where there is none: one small job."""
    none = "CAST(NULL AS BIGINT)"
    found = flow.ctis.selectExpr(
        f"max({CTI}) AS c",
        f"max(CASE WHEN {CTI} < {MAX_TIME} THEN {CTI} END) AS f",
        none + " AS m",
    )
    if events is not None:
        found = found.unionByName(
            events.selectExpr(
                none + " AS c",
                none + " AS f",
                f"max(greatest({START}, {_FINITE_END})) AS m",
            )
        )
    if pushed is not None:
        found = found.unionByName(
            pushed.selectExpr(none + " AS c", none + " AS f", f"max({_LATEST}) AS m")
        )
    found = found.collect()
    return {k: max((r[k] for r in found if r[k] is not None), default=None) for k in "cfm"}


@dataclass(frozen=True)
class _Merge:
    """How one aggregate is kept between epochs: its partial columns (name, Column), how each
    merges with earlier ones (SQL over the partial column), and its result (SQL)."""

    partial: tuple[tuple[str, Column], ...]
    merge: tuple[str, ...]
    final: str | Column
    #: the partial columns that are expansions of an exact sum (engine.exact)
    expansions: tuple[str, ...] = ()


_SAME = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}


def merges_of(
    aggregates: tuple[tuple[str, Column], ...], exact: Exact | None = None
) -> tuple[list[_Merge], list[Column]] | None:
    """``aggregates`` as partial aggregates that merge, and the arguments of their sums
    and averages; None if one of them does not merge: only ``count``, ``sum``, ``min``, ``max``,
    ``avg`` / ``mean`` of one argument, without DISTINCT, as plain (classic PySpark) Columns.
    The sums of doubles that ``exact`` lists are expansions (engine.exact, semantics §4): they
    merge by concatenation and round once in the result; its sums of integers are decimals."""
    exact = exact or Exact()
    out: list[_Merge] = []
    summed: list[Column] = []
    for i, (name, col) in enumerate(aggregates):
        call = _call(col)
        if call is None:
            return None
        fn, arg = call
        p = f"__a{i}"
        if fn == "sum" and i in exact.integers:
            partial = ((p, F.sum(arg.cast(INTEGER_SUM))),)
            out.append(_Merge(partial, (f"sum({p})",), integer_total(F.col(p), exact.at(name))))
            summed.append(arg)
        elif fn == "sum" and i in exact.doubles:
            values = F.collect_list(arg.cast("double"))
            final = sum_column(F.col(p))
            out.append(_Merge(((p, values),), (f"flatten(collect_list({p}))",), final, (p,)))
            summed.append(arg)
        elif fn in ("avg", "mean") and i in exact.doubles:
            s, n = f"{p}s", f"{p}n"
            partial = ((s, F.collect_list(arg.cast("double"))), (n, F.count(arg)))
            merge = (f"flatten(collect_list({s}))", f"sum({n})")
            out.append(_Merge(partial, merge, mean_column(F.col(s), F.col(n)), (s,)))
            summed.append(arg)
        elif fn in _SAME:
            out.append(_Merge(((p, col),), (f"{_SAME[fn]}({p})",), p))
            if fn == "sum":
                summed.append(arg)
        elif fn in ("avg", "mean"):
            s, n = f"{p}s", f"{p}n"
            partial = ((s, F.sum(arg.cast("double"))), (n, F.count(arg)))
            final = f"CASE WHEN {n} = 0 THEN NULL ELSE {s} / {n} END"
            out.append(_Merge(partial, (f"sum({s})", f"sum({n})"), final))
            summed.append(arg)
        else:
            return None
    return out, summed


def sums_decimals(events: DataFrame, summed: list[Column]) -> bool:
    """Whether a sum or average is over decimals: a sum of decimals widens its type each time
    it merges, and ``avg`` of decimals is a decimal, not a sum over a count in doubles."""
    if not summed:
        return False
    try:
        types = [f.dataType for f in events.select(*summed).schema.fields]
    except Exception:  # unresolvable here: the aggregate itself will say why
        return True
    return any(isinstance(t, DecimalType) for t in types)


#: aggregates over doubles whose result depends on the order Spark adds the values in and that
#: are not computed exactly: refused (:func:`exact_aggregates`)
_ORDERED = frozenset(
    {"try_sum", "try_avg", "product", "skewness", "kurtosis", "covar_samp", "covar_pop", "corr"}
    | {f"regr_{n}" for n in ("avgx", "avgy", "slope", "intercept", "r2", "sxx", "sxy", "syy")}
)


def _where(spec: WindowSpec) -> str:
    size, hop = duration_text(spec.size), duration_text(spec.hop)
    if spec.hop == spec.size:
        return f"tumbling_window({size!r})"
    return f"hopping_window({size!r}, {hop!r})"


@dataclass(frozen=True)
class Exact:
    """Which aggregates of an operator are computed exactly (engine.exact, semantics §4), by
    position: made by :func:`exact_aggregates`."""

    #: ``sum`` of doubles, ``avg`` / ``mean`` of numbers other than decimals, the variance family
    doubles: tuple[int, ...] = ()
    #: ``sum`` of integers (in ANSI mode)
    integers: tuple[int, ...] = ()
    #: the operator's call, for errors (e.g. "tumbling_window('10 ticks')")
    where: str = ""

    def __post_init__(self) -> None:  # restored from a checkpoint, the positions are lists
        object.__setattr__(self, "doubles", tuple(self.doubles))
        object.__setattr__(self, "integers", tuple(self.integers))

    def at(self, name: str) -> str:
        """Where the aggregate ``name`` is, for errors."""
        return f"{self.where}.aggregate({name}=...)"


def exact_aggregates(
    aggregates: tuple[tuple[str, Column], ...], frame: DataFrame, where: str
) -> Exact:
    """Which of ``aggregates`` are computed exactly (engine.exact, semantics §4), each an
    aggregate Column of its own over ``frame``'s columns: ``sum`` of doubles or floats, ``avg`` /
    ``mean`` of numbers other than decimals and the variance family (``var_samp``, ``stddev``,
    ...) of numbers; and in ANSI mode ``sum`` of integers. An aggregate over doubles whose result
    would depend on the order of the values and that is not one of these (inside an expression,
    DISTINCT, ``skewness``, ``corr``, ...) raises :class:`QueryBuildError`, before any result."""
    calls = [(i, name, _calls(col)) for i, (name, col) in enumerate(aggregates)]
    args = [a for _, _, found in calls for _, found_args, _, _ in found for a in found_args]
    if not args:
        return Exact(where=where)
    try:
        types = [f.dataType for f in frame.select(*args).schema.fields]
    except Exception:  # unresolvable here: the aggregate itself will say why
        return Exact(where=where)
    doubles: list[int] = []
    integers: list[int] = []
    for i, name, found in calls:
        for fn, fn_args, distinct, whole in found:
            arg_types, types = types[: len(fn_args)], types[len(fn_args) :]
            if fn == "sum" and whole and not distinct and isinstance(arg_types[0], IntegralType):
                integers.append(i)
                continue
            if fn in ("sum", "try_sum"):
                floating = any(isinstance(t, FloatType | DoubleType) for t in arg_types)
            elif fn in ("avg", "mean", "try_avg"):
                floating = any(
                    isinstance(t, NumericType) and not isinstance(t, DecimalType) for t in arg_types
                )
            else:
                floating = any(isinstance(t, NumericType) for t in arg_types)
            if not floating:
                continue
            if whole and not distinct and fn in ("sum", "avg", "mean", *MOMENTS):
                doubles.append(i)
                continue
            how = "DISTINCT " if distinct else ""
            inside = "" if whole else ", inside an expression,"
            raise QueryBuildError(
                f"{where}.aggregate({name}=...): {fn}({how}...){inside} "
                f"{'multiplies' if fn == 'product' else 'adds'} floating-point "
                "values in the order Spark happens to process them, so its last bits would "
                "change with the epochs the input is cut into or with Spark's partitioning "
                "(semantics §4 promises byte-identical results). Expected sum, avg / mean or "
                "the variance / stddev family over doubles as an aggregate of its own (these "
                "are computed exactly, then rounded once). Fix: aggregate the sum or average "
                f"alone (e.g. {name}_sum=F.sum(...)) and compute the expression with .select() "
                "afterwards, or cast the values to a decimal, or use a pandas UDAF whose result "
                "does not depend on the order of its values (e.g. math.fsum)"
            )
    if integers and not ansi_mode(frame.sparkSession):
        integers = []  # Spark's sums wrap around: the same for every order (engine.exact)
    return Exact(tuple(doubles), tuple(integers), where)


def repeatable(
    aggregates: tuple[tuple[str, Column], ...], exact: Exact
) -> list[tuple[str, Column]]:
    """``aggregates`` with those ``exact`` lists (:func:`exact_aggregates`) computed exactly over
    all values of a group at once (engine.exact)."""
    out = []
    for i, (name, col) in enumerate(aggregates):
        call = _call(col) if i in exact.doubles or i in exact.integers else None
        if call is not None and i in exact.integers:
            col = integer_total(F.sum(call[1].cast(INTEGER_SUM)), exact.at(name))
        elif call is not None:
            fn, arg = call
            values = F.collect_list(arg.cast("double"))
            if fn == "sum":
                col = sum_column(values)
            elif fn in ("avg", "mean"):
                col = mean_column(values, F.count(arg))
            else:
                col = moment_column(fn, values)
        out.append((name, col))
    return out


def _calls(col: Column) -> list[tuple[str, list[Column], bool, bool]]:
    """Every call in ``col`` to a function that sums floating-point values (``sum``, ``avg``,
    the variance family and :data:`_ORDERED`), as (name, arguments, DISTINCT, whether it is
    the whole Column)."""
    from pyspark import SparkContext
    from pyspark.sql.classic.column import Column as ClassicColumn

    jc = getattr(col, "_jc", None)
    if jc is None:
        return []
    names = {"sum", "avg", "mean", *MOMENTS, *_ORDERED}
    jvm = SparkContext._jvm
    found: list[tuple[str, list[Column], bool, bool]] = []

    def visit(node: Any, whole: bool) -> None:
        try:
            kind = node.getClass().getSimpleName()
            fn = str(node.functionName()).lower() if kind == "UnresolvedFunction" else None
        except Exception:  # not a node this operator can read
            return
        if fn in names:
            args = node.arguments()
            cols = [
                ClassicColumn(getattr(jvm, "org.apache.spark.sql.Column")(args.apply(j)))
                for j in range(args.size())
            ]
            found.append((fn, cols, bool(node.isDistinct()), whole))
        try:
            children = node.children()
            below = [children.apply(j) for j in range(children.size())]
        except Exception:  # a node without children
            below = []
        for child in below:
            visit(child, False)

    visit(jc.node(), True)
    return found


def _call(col: Column) -> tuple[str, Column] | None:
    """``(function name, its one argument)`` of an aggregate call Column like ``F.sum("v")``;
    None for anything else (an expression over aggregates, DISTINCT, a UDF, SQL text)."""
    from pyspark import SparkContext
    from pyspark.sql.classic.column import Column as ClassicColumn

    jc = getattr(col, "_jc", None)
    if jc is None:
        return None
    try:
        node = jc.node()
        if node.getClass().getSimpleName() != "UnresolvedFunction":
            return None
        if node.isDistinct() or node.isUserDefinedFunction() or node.arguments().size() != 1:
            return None
        jvm = SparkContext._jvm
        arg = ClassicColumn(getattr(jvm, "org.apache.spark.sql.Column")(node.arguments().apply(0)))
        return str(node.functionName()).lower(), arg
    except Exception:  # not a call this operator can take apart: keep events
        return None


def _merge_partials(
    new: DataFrame,
    spec: WindowSpec,
    merges: list[_Merge],
    held: DataFrame | None,
    c_last: int,
    repeated: bool,
) -> tuple[DataFrame, DataFrame | None]:
    """The epoch's partial aggregates (``new``: ``__ws``, keys, partial columns; ``repeated``:
    a window and group may have several rows) merged with the held ones: the results of the
    windows that complete now (``__ws``, keys, aggregates) and the partial aggregates of the
    windows still open (None once the CTI is +inf: every window completes)."""
    keys = sql_names(list(spec.keys))
    merged = new
    if held is not None or repeated:
        again = [
            F.expr(f"{sql} AS {name}")
            for m in merges
            for sql, (name, _) in zip(m.merge, m.partial, strict=True)
        ]
        both = new if held is None else held.unionByName(new)
        merged = both.groupBy(_WS, *spec.keys).agg(*again)
    # A lazy checkpoint: the job that reads the results (egress, as a rule) computes it, and the
    # open windows' state is a selection over it, without a job of its own (the epoch computes
    # it at its end if no job read it: engine.rows.Checkpoints.release_all_but)
    expansions = {p for m in merges for p in m.expansions}
    if expansions:  # short again: one row of partials per window and group stays small
        merged = merged.select(
            *(compress_column(F.col(c)).alias(c) if c in expansions else c for c in merged.columns)
        )
    done = "true" if c_last == MAX_TIME else f"{_WS} + {spec.size} <= {c_last}"
    # the open windows' rows counted by the job that computes the checkpoint (state_rows)
    merged, open_rows = counted_checkpoint(
        merged, [] if c_last == MAX_TIME else [f"count_if(NOT ({done}))"]
    )
    finals = [
        (F.expr(m.final) if isinstance(m.final, str) else m.final).alias(name)
        for m, (name, _) in zip(merges, spec.aggregates, strict=True)
    ]
    complete = merged.filter(done).select(_WS, *(F.col(k) for k in keys), *finals)
    still_open = None
    if c_last != MAX_TIME:
        still_open = with_rows(merged.filter(f"NOT ({done})"), open_rows[0])
    return complete, still_open


def _result_rows(
    grouped: DataFrame,
    spec: WindowSpec,
    ctis: DataFrame,
    keyed: DataFrame | None,
    key: str | None,
    payload: list[str],
) -> DataFrame:
    """Place each result (``__ws``, keys, aggregates; or ``spec.per_window``'s columns) at the
    CTI that completes its window (with substreams, the first CTI or keyed CTI of its key that
    does)."""
    done_at = f"{_WS} + {spec.size}"
    start = done_at if spec.point_at_end else _WS
    end = f"{done_at} + 1" if spec.point_at_end else done_at
    names = [*spec.keys, *(name for name, _ in spec.aggregates)]
    if spec.per_window is not None:
        names = spec.per_window.names(payload, spec.keys)
    placed = not spec.egress_only or keyed is not None
    return place_results(grouped, done_at, start, end, names, ctis if placed else None, keyed, key)


def place_results(
    grouped: DataFrame,
    done_at: str,
    start: str,
    end: str,
    names: list[str],
    ctis: DataFrame | None,
    keyed: DataFrame | None = None,
    key: str | None = None,
) -> DataFrame:
    """Result rows ``[start, end)``, each at the position of the first CTI with value >=
    ``done_at`` (all three SQL text over ``grouped``): the CTI that completes it. With
    ``keyed`` CTIs, the earlier of that one and the first keyed CTI of the result's ``key`` value
    with value >= ``done_at``. ``ctis`` None: results completed by this epoch's CTIs that no
    reader places (egress releases an interval or a point by its start and the values of the
    CTIs alone, semantics §6), without a position."""
    if ctis is None:
        return grouped.selectExpr(
            f"'{Kind.INSERT}' AS {KIND}",
            f"CAST(NULL AS STRING) AS {EDGE}",
            f"{start} AS {START}",
            f"{end} AS {END}",
            f"CAST(NULL AS {POS_TYPE.simpleString()}) AS {POS}",
            *sql_names(names),
        )
    grouped = grouped.selectExpr("*", f"{done_at} AS __t")
    placed = first_at_or_above_rows(grouped, ctis, None, "__cpos")
    at = "__cpos"
    if keyed is not None:
        placed = first_at_or_above_rows(placed, keyed.withColumnRenamed(KEY, key), key, "__kpos")
        at = "least(__cpos, __kpos)"
    return placed.filter(f"{at} IS NOT NULL").selectExpr(
        f"'{Kind.INSERT}' AS {KIND}",
        f"CAST(NULL AS STRING) AS {EDGE}",
        f"{start} AS {START}",
        f"{end} AS {END}",
        f"{at} AS {POS}",
        *sql_names(names),
    )


# -- partial aggregates computed where the input is scanned ---------------------------------------

#: Arrow's aggregation of a partial column in one batch, and how partials of batches merge
_ARROW = {**_SAME, "count_all": "sum", "exact": "list"}
#: Arrow's aggregation of a partial column's argument in one batch, where it is not the same name
_BATCH = {"count_all": "count", "exact": "list"}
_MIN_MAX_TYPES = (IntegralType, DateType, TimestampType, TimestampNTZType, StringType)
_KEY_TYPES = (IntegralType, DateType, TimestampType, TimestampNTZType, StringType, BooleanType)


@dataclass(frozen=True)
class PushedWindow:
    """A window whose partial aggregates its input's ingress scan computes (engine.ingress), in
    Arrow where the input is read, instead of handing Spark one row per event: the window reads
    one row per (window, group) and partition. Made by :func:`push_window`."""

    size: int
    hop: int
    #: the grouping keys, as the input's payload columns
    keys: tuple[str, ...]
    #: per partial column: (name, Arrow aggregation, argument payload column or None, the type
    #: the argument is cast to first: "double", :data:`engine.exact.INTEGER_SUM` or None)
    columns: tuple[tuple[str, str, str | None, str | None], ...]
    #: the partial rows' columns after the keys (``__ws``, partial columns) as Spark types
    fields: StructType


def push_window(
    spec: WindowSpec, payload: StructType, case_sensitive: bool, ansi: bool
) -> PushedWindow | None:
    """``spec`` as a :class:`PushedWindow` over an input with ``payload`` columns, its integer
    sums added as decimals in ANSI mode (``ansi``; engine.exact), or None where
    its partial aggregates need Spark: an aggregate that does not merge (see :func:`merges_of`)
    or whose argument is not one payload column (``count(*)`` excepted), a sum over decimals,
    ``min``/``max`` of floating point (Spark orders NaN above every number, Arrow skips it),
    grouping keys of floating point or nested types (Spark makes -0.0 and 0.0 one group), and
    strings with a collation as keys or under ``min``/``max`` (Arrow compares bytes)."""
    if merges_of(spec.aggregates) is None or spec.hop <= 0 or spec.size <= 0:
        return None
    types = {f.name: f.dataType for f in payload.fields}

    def column(name: str) -> str | None:
        if name in types:
            return name
        same = [n for n in types if not case_sensitive and n.lower() == name.lower()]
        return same[0] if len(same) == 1 else None

    keys = [column(k) for k in spec.keys]
    if any(
        k is None or not isinstance(types[k], _KEY_TYPES) or not _bytewise(types[k]) for k in keys
    ):
        return None
    columns: list[tuple[str, str, str | None, str | None]] = []
    fields = StructType([StructField(_WS, LongType())])
    for i, (_, col) in enumerate(spec.aggregates):
        call = _call(col)
        assert call is not None  # merges_of took it
        fn, arg = call
        node = arg._jc.node()
        kind = node.getClass().getSimpleName()
        name = None
        if kind == "UnresolvedAttribute" and node.nameParts().size() == 1:
            name = column(str(node.nameParts().apply(0)))
        p = f"__a{i}"
        if fn == "count" and name is None:
            if kind == "UnresolvedStar" or (kind == "Literal" and node.value() is not None):
                columns.append((p, "count_all", None, None))
                fields.add(p, LongType())
                continue
            return None
        if name is None:
            return None
        typ = types[name]
        numeric = isinstance(typ, NumericType) and not isinstance(typ, DecimalType)
        if fn == "count":
            columns.append((p, "count", name, None))
            fields.add(p, LongType())
        elif fn == "sum" and isinstance(typ, IntegralType):  # as merges_of sums them
            columns.append((p, "sum", name, INTEGER_SUM if ansi else None))
            fields.add(p, DecimalType(38, 0) if ansi else LongType())
        elif fn == "sum" and numeric:  # over doubles: exact (engine.exact)
            columns.append((p, "exact", name, "double"))
            fields.add(p, ArrayType(DoubleType()))
        elif fn in ("min", "max") and isinstance(typ, _MIN_MAX_TYPES) and _bytewise(typ):
            columns.append((p, fn, name, None))
            fields.add(p, typ)
        elif fn in ("avg", "mean") and numeric:
            columns += [(f"{p}s", "exact", name, "double"), (f"{p}n", "count", name, None)]
            fields.add(f"{p}s", ArrayType(DoubleType())).add(f"{p}n", LongType())
        else:
            return None
    return PushedWindow(spec.size, spec.hop, tuple(keys), tuple(columns), fields)  # type: ignore[arg-type]


def _bytewise(typ: Any) -> bool:
    """Whether Spark compares values of ``typ`` as Arrow does: not a string with a collation
    other than the default (byte order)."""
    return not isinstance(typ, StringType) or getattr(typ, "collation", "UTF8_BINARY") in (
        "UTF8_BINARY",
        None,
    )


def pushed_partials(pushed: PushedWindow, start: Any, end: Any, batch: Any) -> Any:
    """Executor side of :class:`PushedWindow`: the partial aggregates (``__ws``, keys, partial
    columns) of the events of ``batch``
    (a ``pyarrow.RecordBatch`` with the keys and arguments) with lifetimes ``[start, end)``
    (numpy int64), each counted in every window it overlaps, as :func:`window_aggregate` counts
    an event whose end is known."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    size, hop = pushed.size, pushed.hop
    spec = WindowSpec(size, hop, (), ())
    first, inside = spec.first_after(start)
    last = spec.last_before(end)
    counts = (np.maximum(last, first) - first) // hop + 1  # (no wrap where first > last)
    many = np.where(inside & (end > start) & (first <= last), counts, 0)
    if len(many) and many.min() == 1 and many.max() == 1:  # e.g. points in tumbling windows
        ws, rows = first, None
    else:
        rows = pa.array(np.repeat(np.arange(len(many)), many))
        offsets = np.arange(len(rows)) - np.repeat(np.cumsum(many) - many, many)
        ws = first[rows.to_numpy()] + offsets * hop
    data = {_WS: pa.array(ws, pa.int64())}

    def column(name: str) -> Any:
        values = batch.column(name)
        return values if rows is None else values.take(rows)

    for k in pushed.keys:
        data[k] = column(k)
    # every aggregation reads a column of its own: Arrow names its output "<column>_<function>"
    aggregations: list[tuple] = []
    for p, fn, arg, cast in pushed.columns:
        source = column(arg) if arg is not None else data[_WS]
        if cast == "double":  # as Spark's CAST(long AS DOUBLE): rounded, not refused (Arrow's
            source = source.cast(pa.float64(), safe=False)  # safe cast refuses beyond 2**53)
        elif cast is not None:  # integers summed without overflow (engine.exact)
            source = source.cast(pa.decimal128(38, 0))
        data[f"{p}__in"] = source
        if fn == "count_all":
            aggregations.append((f"{p}__in", "count", pc.CountOptions(mode="all")))
        else:
            aggregations.append((f"{p}__in", _BATCH.get(fn, fn)))
    out = pa.table(data).group_by([_WS, *pushed.keys], use_threads=False).aggregate(aggregations)
    names = {f"{p}__in_{_BATCH.get(fn, fn)}": p for p, fn, *_ in pushed.columns}
    return _compressed(pushed, out.rename_columns([names.get(n, n) for n in out.column_names]))


def _compressed(pushed: PushedWindow, table: Any) -> Any:
    """``table`` with its exact sums' lists of values as short expansions (engine.exact)."""
    for p, fn, *_ in pushed.columns:
        if fn == "exact":
            at = table.column_names.index(p)
            table = table.set_column(at, p, compress_lists(table.column(p)))
    return table


def merge_pushed(pushed: PushedWindow, tables: list[Any], arrow_schema: Any) -> Any:
    """One partition's partial aggregates of several batches (:func:`pushed_partials`) merged
    into one row per window and group, as ``arrow_schema`` (``__ws``, keys, partial columns)."""
    import pyarrow as pa

    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(tables) > 1:
        aggregations = [(p, _ARROW[fn]) for p, fn, *_ in pushed.columns]
        table = table.group_by([_WS, *pushed.keys], use_threads=False).aggregate(aggregations)
        names = {f"{p}_{_ARROW[fn]}": p for p, fn, *_ in pushed.columns}
        table = _compressed(
            pushed, table.rename_columns([names.get(n, n) for n in table.column_names])
        )
    return pa.Table.from_arrays(
        [table.column(f.name).cast(f.type) for f in arrow_schema], schema=arrow_schema
    )
