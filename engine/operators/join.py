"""Temporal equi-join (semantics §5).

Pairs with equal keys (nulls never match) whose lifetimes overlap; the output lifetime is the
intersection; the payload holds the left columns, then the right ones (a right name that clashes
gets a ``right_`` prefix). CTI rule (the seeds: "Join operators ... release their results up to
the older CTI from either side"): the minimum of both sides' latest CTIs.

Edges make the intersection's end unknown for a while. A pair forms when the later of its two
events arrives, if their lifetimes overlap as then known (an open edge reaches +inf). Complete on
both sides, it is an interval; otherwise it leaves as a START edge, and its END edge follows at the
first moment the end is determined: both sides complete (end = the smaller end), or one side
complete with end ``e`` and the other side's CTI at or past ``e`` (the other cannot end before it,
so end = ``e``). An end at or before the start makes the pair empty; egress never releases it.

Moments order the rows of both sides: (position, side, events / END edges / CTI). Per epoch, each
side's events (held and new) get their END edges by a ranked join in Spark, both sides' CTIs of
the epoch are collected to the driver, and one Arrow function per key (``cogroup``) pairs the
key's events: a pair with a new event forms now and leaves as an interval or a START edge (with
its END edge if its end becomes known in the epoch); a pair of two held events formed in an
earlier epoch, and leaves now only as the END edge of a pair whose end becomes known now. Read
only by a window, a pair whose end is known in the epoch it forms in leaves as one interval
where it forms. State: per side, the events that can still meet a future event (open edges,
and events ending after the other side's CTI): both events of a pair whose end is still
unknown are among them. It shrinks as the CTIs advance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from ctistream.engine._spark import ansi_mode, case_sensitive
from ctistream.engine.ctis import (
    first_at_or_above,
    first_at_or_above_rows,
    keyed_min_of_latest,
    min_of_latest,
    min_of_latest_on_driver,
    risen,
)
from ctistream.engine.edges import fifo_pairs, fifo_ranked
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.operators.window import (
    _LATEST,
    _WS,
    PushedWindow,
    _bytewise,
    merge_pushed,
    push_window,
    pushed_partials,
)
from ctistream.engine.packed import ARROW, PACKED_TYPE, chunk_sizes, packed_frame, unpacked
from ctistream.engine.rows import (
    CTI,
    EDGE,
    END,
    HEADER,
    KIND,
    POS,
    POS_TYPE,
    START,
    EpochCache,
    Flow,
    Kind,
    checkpoint,
    counted_checkpoint,
    few_partitions,
    hold,
    keyed_inputs,
    local_ctis,
    pos_literal,
    sql_names,
    with_rows,
)
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    from ctistream.engine.physical import JoinStep

__all__ = ["JoinState", "join", "output_columns"]

_AT, _ID, _OPEN, _CLOSED = "__at", "__id", "__open", "__closed"  # moment, identity, end known at
_CLOSED_NOW = "__closed_now"  # an END edge of this epoch closed the event
#: a pair's sides' ends as known, and when they became known (null: still open)
_SIDE_ENDS = ("__l_end", "__l_c", "__r_end", "__r_c")


@dataclass
class JoinState:
    held: list[DataFrame | None] = field(default_factory=lambda: [None, None])
    latest: list[int] = field(default_factory=lambda: [MIN_TIME, MIN_TIME])
    emitted: int = MIN_TIME
    #: substreams: per key the sides' largest keyed CTIs (:func:`engine.ctis.keyed_min_of_latest`)
    keys: DataFrame | None = None
    #: per side, how many events ``held`` holds, where the driver knows it
    held_rows: list[int | None] = field(default_factory=lambda: [None, None])
    #: the side whose held events are packed (:mod:`engine.packed`, a lookup join's fast side:
    #: one value per chunk, as its pairing function handed them back), if one is
    packed: int | None = None


def output_columns(left: list[str], right: list[str]) -> list[str]:
    """The join's payload names: ``left``'s, then ``right``'s, a clashing one ``right_``-prefixed.
    Raises :class:`QueryBuildError` when a prefixed name is taken too."""
    names = [*left, *(f"right_{c}" if c in left else c for c in right)]
    taken = sorted({n for n in names if names.count(n) > 1})
    if taken:
        raise QueryBuildError(
            f"join: the output would have two columns named {taken[0]!r} (left columns "
            f"{left}, right columns {right}; a right column whose name the left side has gets "
            f"a 'right_' prefix). Expected distinct names. Fix: rename a column with select() "
            "on one side before the join"
        )
    return names


def _moment(pos: Column, side: int, order: int) -> Column:
    return F.struct(pos.alias("pos"), F.lit(side).alias("side"), F.lit(order).alias("k"))


_INT_MIN = -(2**31)


def _beginning() -> Column:
    """A moment before every other: "the other side's CTI was there before this epoch"."""
    return F.struct(
        pos_literal(MIN_TIME, _INT_MIN, MIN_TIME, _INT_MIN, _INT_MIN).alias("pos"),
        F.lit(_INT_MIN).alias("side"),
        F.lit(_INT_MIN).alias("k"),
    )


def _side_events(
    flow: Flow,
    side: int,
    held: DataFrame | None,
    payload: list[str],
    cache: EpochCache,
    identity: bool = True,
) -> DataFrame:
    """Held and new events of one side, each with its end as known by the end of the epoch, the
    moment that end became known (``__closed``; null while open) and whether an END edge of
    this epoch closed it (``__closed_now``). ``identity``: each event gets a unique ``__id``."""
    edge = F.col(EDGE)
    arrival = _moment(F.col(POS), side, 0)
    new = flow.events.filter(~edge.eqNullSafe("END")).select(
        START,
        END,
        arrival.alias(_AT),
        edge.eqNullSafe("START").alias(_OPEN),
        F.when(edge.isNull(), arrival).alias(_CLOSED),
        F.lit(True).alias("__new"),
        *payload,
    )
    if identity:  # unique per moment: several events can arrive at one position (a shuffle)
        n = F.row_number().over(Window.partitionBy(_AT).orderBy(START, *payload))
        new = new.withColumn(_ID, F.struct(F.col(_AT).alias("at"), n.alias("n")))
    events = new if held is None else held.withColumn("__new", F.lit(False)).unionByName(new)
    if not flow.edges:  # no END edge can come: nothing is open, nothing to close
        # not kept: selections over the input's rows (kept upstream) and the held ones
        return events.withColumn(_CLOSED_NOW, F.lit(False))

    key = [START, *payload]
    ends = flow.events.filter(edge == "END").select(
        *key, F.col(END).alias("__e_end"), F.col(POS).alias("__e_pos")
    )
    o, e, on = fifo_ranked(events, ends, key, _AT, "__e_pos", only=_OPEN)
    joined = o.join(e, on, "left")
    closed = F.col("e.__e_end").isNotNull()
    keep = [c for c in events.columns if c not in (END, _OPEN, _CLOSED)]
    return cache.keep(
        joined.select(
            *[F.col(f"o.{c}") for c in keep],
            F.when(closed, F.col("e.__e_end")).otherwise(F.col(f"o.{END}")).alias(END),
            (F.col(f"o.{_OPEN}") & ~closed).alias(_OPEN),
            F.when(closed, _moment(F.col("e.__e_pos"), side, 1))
            .otherwise(F.col(f"o.{_CLOSED}"))
            .alias(_CLOSED),
            closed.alias(_CLOSED_NOW),
        )
    )


#: Up to this many CTIs of a side in one epoch, searches for "the first CTI at or above a value"
#: run against the CTIs collected to the driver (a binary search per row, no shuffle); above it,
#: in one sort of the rows and the CTIs (a single partition)
SEARCH_ON_DRIVER = 20_000


@dataclass(frozen=True)
class EpochCtis:
    """The CTIs of both sides in one epoch: each side's latest, and its CTIs in value order as
    ``(value, position)`` (None for a side with more than :data:`SEARCH_ON_DRIVER`)."""

    latest: list[int]
    found: list[list[tuple[int, tuple]] | None]


def collect_ctis(
    tagged: DataFrame, before: list[int], search: bool = True, limit: int | None = SEARCH_ON_DRIVER
) -> EpochCtis:
    """One small job over ``tagged`` (``__g`` side, CTI, position): see :class:`EpochCtis`.
    ``search=False``: only the latest CTIs (nothing will be searched); ``limit=None``: every
    CTI, however many."""
    latest, found = list(before), [[], []]
    item = F.struct(F.col(CTI).alias("c"), F.col(POS).alias("p"))
    head = F.sort_array(F.collect_list(item))
    if limit is not None:
        head = F.slice(head, 1, limit + 1)
    if not search:
        head = F.array()
    for row in tagged.groupBy("__g").agg(F.max(CTI).alias("m"), head.alias("h")).collect():
        g = row["__g"]
        latest[g] = max(latest[g], row["m"])
        many = limit is not None and len(row["h"]) > limit
        found[g] = None if many else [(c, tuple(p)) for c, p in row["h"]]
    return EpochCtis(latest, found)


# (pandas UDF results are nullable)
_FOUND = StructType(
    [StructField(f.name, f.dataType) for f in [StructField("ok", BooleanType()), *POS_TYPE.fields]]
)


def _search_udf(found: list[tuple[int, tuple]]):
    values = np.array([c for c, _ in found], dtype=np.int64)
    fields = [
        np.array([p[i] for _, p in found], dtype=np.int64 if f.dataType == LongType() else np.int32)
        for i, f in enumerate(POS_TYPE.fields)
    ]

    @pandas_udf(_FOUND)  # type: ignore[call-overload]
    def search(v: pd.Series) -> pd.DataFrame:
        i = first_at_or_above(values, v.to_numpy())
        j = np.minimum(i, len(values) - 1)
        out = {f.name: a[j] for f, a in zip(POS_TYPE.fields, fields, strict=True)}
        return pd.DataFrame({"ok": i < len(values), **out})

    return search


def _first_cti_at_or_above(
    rows: DataFrame,
    value: str,
    ctis: DataFrame,
    side: int,
    before: int,
    out: str,
    found: list[tuple[int, tuple]] | None = None,
) -> DataFrame:
    """For each row, the moment of the first CTI of ``side`` with value >= ``rows[value]``:
    the very beginning if the CTI before the epoch already was, null if none in the epoch.
    ``found``: the side's CTIs of the epoch as collected (:func:`collect_ctis`), if they were."""
    moment = F.when(F.col(value).isNull(), F.lit(None)).when(
        F.col(value) <= F.lit(before), _beginning()
    )
    if found is not None:
        if not found:
            return rows.withColumn(out, moment)
        search = _search_udf(found)(F.coalesce(F.col(value), F.lit(MIN_TIME)))
        at = F.struct(*[F.col(f"__f.{f.name}") for f in POS_TYPE.fields])
        return (
            rows.withColumn("__f", search)
            .withColumn(out, moment.when(F.col("__f.ok"), _moment(at, side, 2)))
            .drop("__f")
        )
    placed = first_at_or_above_rows(rows.withColumn("__t", F.col(value)), ctis, None, "__fp")
    found_m = F.when(F.col("__fp").isNotNull(), _moment(F.col("__fp"), side, 2))
    return placed.withColumn(out, moment.otherwise(found_m)).drop("__t", "__fp")


#: pairs formed per chunk of the cross product of one key's events (bounds the function's memory)
_CHUNK = 1 << 20
#: a moment as numpy columns: its position's (arr, inp, off, part, sub), side, order
_BEGIN = np.array(
    [MIN_TIME, _INT_MIN, MIN_TIME, _INT_MIN, _INT_MIN, _INT_MIN, _INT_MIN], dtype=np.int64
)


@dataclass(frozen=True)
class _Pairing:
    """What the executors need to pair the events (:func:`_pair_rows`): the payloads, the keys,
    whether ends can be unknown (``edges``) and whether the output is read for lifetimes only
    (``intervals``), each side's latest CTI before and after the epoch, and each side's CTIs of
    the epoch in value order (values, and positions as an ``(n, 5)`` array)."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    #: the key columns' names on each side, and the Arrow type both compare in
    keys: tuple[tuple[str, str], ...]
    key_types: tuple[Any, ...]
    edges: bool
    intervals: bool
    before: tuple[int, int]
    latest: tuple[int, int]
    values: tuple[np.ndarray, np.ndarray]
    positions: tuple[np.ndarray, np.ndarray]
    schema: Any  # the output's Arrow schema
    #: the window that alone reads the join, whose partial aggregates the join computes
    pushed: PushedWindow | None = None
    #: with ``intervals``: a pair whose end is unknown leaves nothing until its end is known,
    #: then one interval (:func:`join`, ``points``)
    defer: bool = False


def _le(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise ``a <= b`` of moments (lexicographic over their seven columns; a later column
    is compared only where the earlier ones tie)."""
    out = a[:, 0] < b[:, 0]
    tie = np.flatnonzero(a[:, 0] == b[:, 0])
    for j in range(1, 7):
        if not len(tie):
            break
        x, y = a[tie, j], b[tie, j]
        out[tie[x < y]] = True
        tie = tie[x == y]
    out[tie] = True
    return out


def _greatest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(_le(a, b)[:, None], b, a)


class _Side:
    """One side's events (the rows of :func:`_side_events`, as :func:`join` sends them) as numpy
    arrays: a side without edges sends no ``__closed`` (its events' ends are known when they
    arrive) and every side sends its events' arrival positions (``__p``), not their moments."""

    def __init__(self, t: Any, side: int) -> None:
        import pyarrow.compute as pc

        self.start = t.column(START).to_numpy()
        self.end = t.column(END).to_numpy()
        self.new = t.column("__new").to_numpy(zero_copy_only=False)
        n = t.num_rows
        self.at = np.zeros((n, 7), dtype=np.int64)
        pos = t.column("__p")
        for j in range(5):
            self.at[:, j] = pc.struct_field(pos, [j]).to_numpy(zero_copy_only=False)
        self.at[:, 5] = side
        if _CLOSED in t.column_names:
            self.closed, self.known = _moments(t.column(_CLOSED))
            now = pc.fill_null(t.column(_CLOSED_NOW), False).to_numpy(zero_copy_only=False)
        else:
            self.closed, self.known, now = self.at, np.ones(n, dtype=bool), np.zeros(n, bool)
        #: every event's end known when it arrived (no edges)
        self.complete = _CLOSED not in t.column_names
        #: the end was known before this epoch
        self.known_before = self.known & ~self.new & ~now


def _moments(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """Moments (struct of position, side, order; nullable) as an ``(n, 7)`` array, and which are
    not null."""
    import pyarrow.compute as pc

    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    pos = pc.struct_field(column, [0])
    parts = [pc.struct_field(pos, [j]) for j in range(5)]
    parts += [pc.struct_field(column, [1]), pc.struct_field(column, [2])]
    out = np.empty((len(valid), 7), dtype=np.int64)
    for j, part in enumerate(parts):
        out[:, j] = pc.fill_null(part, 0).to_numpy(zero_copy_only=False)
    return out, valid


def _key_codes(p: _Pairing, lt: Any, rt: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per row of each side, a code equal where the join keys are equal (as Spark compares
    them: floating point -0.0 equals 0.0 and NaN equals NaN), -1 where a key is null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    nl = lt.num_rows
    codes, null = [], np.zeros(nl + rt.num_rows, dtype=bool)
    for (lk, rk), typ in zip(p.keys, p.key_types, strict=True):
        # (unsafe: a bigint beyond 2**53 rounds to a double, as Spark's cast does)
        sides = [t.column(c).cast(typ, safe=False) for t, c in ((lt, lk), (rt, rk))]
        both = pa.chunked_array([*sides[0].chunks, *sides[1].chunks])
        null |= both.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_floating(typ):  # one zero and one NaN, as Spark's join normalizes them
            x = both.to_numpy(zero_copy_only=False).astype(np.float64)
            x = np.where(x == 0, 0.0, np.where(np.isnan(x), np.nan, x))
            codes.append(np.unique(x.view(np.int64), return_inverse=True)[1])
            continue
        try:
            codes.append(
                pc.dictionary_encode(both.combine_chunks()).indices.fill_null(-1).to_numpy()
            )
        except pa.ArrowNotImplementedError:  # nested types: by their Python values
            seen: dict = {}
            codes.append(
                np.array([seen.setdefault(_hashable(v), len(seen)) for v in both.to_pylist()])
            )
    code = (
        codes[0]
        if len(codes) == 1
        else np.unique(np.stack(codes, 1), axis=0, return_inverse=True)[1]
    )
    code = np.where(null, -1, np.asarray(code, dtype=np.int64).reshape(-1))
    return code[:nl], code[nl:]


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    return v


def _first_cti(p: _Pairing, side: int, values: np.ndarray, valid: np.ndarray):
    """Per row, the moment of ``side``'s first CTI at or above ``values`` (where ``valid``): the
    very beginning if the CTI before the epoch already was (then also ``old``); ``found``: one
    was (else none in the epoch yet)."""
    ctis = p.values[side]
    old = valid & (values <= p.before[side])
    i = first_at_or_above(ctis, values)
    found = valid & ~old & (i < len(ctis))
    out = np.empty((len(values), 7), dtype=np.int64)
    out[:, :5] = p.positions[side][np.minimum(i, len(ctis) - 1)] if len(ctis) else 0
    out[:, 5], out[:, 6] = side, 2
    out[old] = _BEGIN
    return out, found | old, old


def _determined(p: _Pairing, at: np.ndarray, at_old: np.ndarray, ls: dict, rs: dict):
    """When each pair's end became known (the least of: both sides' ends known; one side's end
    known and the other side's CTI at or past it), whether it is (in this epoch or before),
    and whether it already was before this epoch (every moment it took was)."""
    both = ls["known"] & rs["known"]
    det = _greatest(at, _greatest(ls["closed"], rs["closed"]))
    old = both & at_old & ls["known_before"] & rs["known_before"]
    valid = both.copy()
    for x, other in ((ls, 1), (rs, 0)):
        t, found, t_old = _first_cti(p, other, x["end"], x["known"])
        m = _greatest(at, _greatest(x["closed"], t))
        take = found & (~valid | _le(m, det))
        det = np.where(take[:, None], m, det)
        valid |= found
        old |= found & at_old & x["known_before"] & t_old
    return det, valid, old


def _pair_rows(p: _Pairing, lt: Any, rt: Any) -> Any:
    """Executor side of the join, for the keys of one bucket (``lt``, ``rt``: both sides' held
    and new events): the epoch's output rows. Pairs with a new event form now; pairs of held
    events formed in an earlier epoch and leave here only as the END edge of a pair whose end
    becomes known now."""
    import pyarrow as pa

    if not lt.num_rows or not rt.num_rows:
        return p.schema.empty_table()
    cl, cr = _key_codes(p, lt, rt)
    L, R = _Side(lt, 0), _Side(rt, 1)
    everything = np.arange(len(cr))
    if p.edges:  # every pair of equal keys: pairs of held events may end now
        pairs = [(np.arange(len(cl)), everything)]
    else:  # only pairs with a new event: the others formed and left complete earlier
        pairs = [(np.flatnonzero(L.new), everything), (np.flatnonzero(~L.new), everything[R.new])]
    parts = [
        _chunk_rows(p, L, R, li, ri)
        for lefts, rights in pairs
        for li, ri in _equal(cl, cr, lefts, rights)
    ]
    if not parts:
        return p.schema.empty_table()
    li, ri, edge, start, end, pos = (np.concatenate(c) for c in zip(*parts, strict=True))
    if not len(li) and p.pushed is None:
        return p.schema.empty_table()
    pos_type = p.schema.field(POS).type
    position = pa.StructArray.from_arrays(
        [pa.array(pos[:, j]).cast(f.type) for j, f in enumerate(pos_type)], fields=list(pos_type)
    )
    edges = pa.DictionaryArray.from_arrays(
        pa.array(edge, pa.int8(), mask=edge == 0), pa.array(["", "START", "END"], pa.string())
    )
    li_, ri_ = pa.array(li), pa.array(ri)
    arrays = [pa.repeat(pa.scalar(Kind.INSERT), len(li)), edges, pa.array(start), pa.array(end)]
    arrays += [position, *(lt.column(c).take(li_) for c in p.left)]
    arrays += [rt.column(c).take(ri_) for c in p.right]
    fields = list(p.schema)[: len(arrays)]
    rows = pa.Table.from_arrays(
        [a.cast(f.type) for a, f in zip(arrays, fields, strict=True)], schema=pa.schema(fields)
    )
    if p.pushed is None:
        return rows
    return _with_partials(p, rows, edge, start, end)


def _with_partials(p: _Pairing, rows: Any, edge: np.ndarray, start: Any, end: Any) -> Any:
    """The edges of ``rows`` as they are, its intervals as PARTIAL rows of the window that reads
    the join (:class:`PushedWindow`): per window and group its keys (in their payload columns),
    window start and partial aggregates, and the latest time of its events (``__latest``; a
    bucket whose intervals fall in no window hands on one row with that time only)."""
    import pyarrow as pa

    pushed = p.pushed
    # a pair that ends at +inf counts only as its windows complete (§5's bounded work): an event
    interval = (edge == 0) & (end < MAX_TIME)
    counted = pushed_partials(pushed, start[interval], end[interval], rows.filter(interval))
    names = [_WS, *pushed.keys, *pushed.fields.fieldNames()[1:]]
    merged = merge_pushed(pushed, [counted], pa.schema([p.schema.field(n) for n in names]))
    latest = None
    if interval.any():  # (empty pairs too: the window's latest time counts every event)
        latest = int(np.maximum(start[interval], end[interval]).max())
        if not merged.num_rows:  # in no window: one row with the latest time only
            merged = pa.table({n: pa.nulls(1, merged.schema.field(n).type) for n in names})
    n = merged.num_rows
    partial = {f.name: pa.nulls(n, f.type) for f in p.schema}
    partial[KIND] = pa.repeat(pa.scalar(Kind.PARTIAL), n).cast(p.schema.field(KIND).type)
    partial[_LATEST] = pa.repeat(pa.scalar(latest, pa.int64()), n)
    partial.update({c: merged.column(c) for c in names})
    edges = rows.filter(~interval)
    edges = {
        f.name: edges.column(f.name)
        if f.name in rows.column_names
        else pa.nulls(edges.num_rows, f.type)
        for f in p.schema
    }
    return pa.concat_tables([pa.table(edges, schema=p.schema), pa.table(partial, schema=p.schema)])


def _equal(cl: np.ndarray, cr: np.ndarray, lefts: np.ndarray, rights: np.ndarray):
    """The pairs ``(left row, right row)`` of ``lefts`` and ``rights`` (row numbers) with equal
    key codes (not null: -1), in chunks of about :data:`_CHUNK` pairs."""
    # the right rows of each left row's key: a range of ``rights`` in key order
    order = rights[np.argsort(cr[rights], kind="stable")]
    codes = cr[order]
    lo = np.searchsorted(codes, cl[lefts], side="left")
    many = np.where(cl[lefts] >= 0, np.searchsorted(codes, cl[lefts], side="right") - lo, 0)
    total = np.cumsum(many)
    first = 0
    while first < len(many):
        done = total[first - 1] if first else 0
        last = max(first + 1, int(np.searchsorted(total, done + _CHUNK, side="right")))
        k = many[first:last]
        offsets = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        yield np.repeat(lefts[first:last], k), order[np.repeat(lo[first:last], k) + offsets]
        first = last


def _chunk_rows(p: _Pairing, L: _Side, R: _Side, li: np.ndarray, ri: np.ndarray):
    """The output rows of the candidate pairs ``(li, ri)``: (left row, right row, edge code 0
    none / 1 START / 2 END, start, end, position as an ``(n, 5)`` array)."""
    f = _greatest(L.at[li], R.at[ri])  # the pair forms when the later of its events arrives
    # each side's end as known then (an end known on arrival is known by the pair's forming)
    kl = L.known[li] if L.complete else L.known[li] & _le(L.closed[li], f)
    kr = R.known[ri] if R.complete else R.known[ri] & _le(R.closed[ri], f)
    el = np.where(kl, L.end[li], MAX_TIME)
    er = np.where(kr, R.end[ri], MAX_TIME)
    sl, sr = L.start[li], R.start[ri]
    fresh = L.new[li] | R.new[ri]
    keep = (el > sl) & (er > sr) & (sl < er) & (sr < el)
    li, ri, f, kl, kr, fresh = li[keep], ri[keep], f[keep], kl[keep], kr[keep], fresh[keep]
    start = np.maximum(L.start[li], R.start[ri])
    sides = [
        {
            "end": s.end[i],
            "closed": s.closed[i],
            "known": s.known[i],
            "known_before": s.known_before[i],
        }
        for s, i in ((L, li), (R, ri))
    ]
    ls, rs = sides
    ends_known = np.minimum(
        np.where(ls["known"], ls["end"], MAX_TIME), np.where(rs["known"], rs["end"], MAX_TIME)
    )
    whole = fresh & kl & kr
    opened = fresh & ~whole
    out = [(whole, 0, np.minimum(ls["end"], rs["end"]), f)]
    if p.intervals:  # read only by a window: a new pair whose end is known now is one interval
        known = (ls["known"] & rs["known"]) | (ls["known"] & (ls["end"] <= p.latest[1]))
        known |= rs["known"] & (rs["end"] <= p.latest[0])
        out.append((opened & known, 0, ends_known, f))
        if not p.defer:
            out.append((opened & ~known, 1, np.full(len(li), MAX_TIME), f))
        asked = ~fresh
    else:
        out.append((opened, 1, np.full(len(li), MAX_TIME), f))
        asked = ~whole
    if p.edges and asked.any():
        det, found, old = _determined(p, f, ~fresh, ls, rs)
        out.append((asked & found & ~old, 0 if p.defer else 2, ends_known, det))
    rows = [
        (li[m], ri[m], np.full(int(m.sum()), code), start[m], e[m], at[m, :5])
        for m, code, e, at in out
    ]
    return tuple(np.concatenate(c) for c in zip(*rows, strict=True))


def join(
    left: Flow, right: Flow, step: JoinStep, state: JoinState, cache: EpochCache
) -> tuple[Flow, JoinState]:
    """The temporal equi-join of ``left`` and ``right`` on ``step.node.on`` (semantics §5), with
    the choices of its physical node ``step`` (:class:`engine.physical.JoinStep`).

    ``keyed_sides``: whether each side's keyed CTIs may be used (docs/decisions.md,
    "Per-key CTIs": not from a side with a join below it, whose pairs end by that side's CTI).
    ``lifetimes_only``: the output is read only for its events' lifetimes (by a window), so a
    pair whose end becomes known in the epoch it forms in leaves as one interval where it forms,
    not as a START edge there and an END edge where its end became known (docs/decisions.md).
    ``window``: with ``lifetimes_only``, the window that alone reads the output: where
    :func:`push_window` takes its aggregates over the output's columns and the output has no
    substreams, the join hands it those intervals as partial aggregates (``Flow.partials``).
    ``points``: whether every event of each side is a point. With ``lifetimes_only``, one side of
    points and no substreams, a pair whose end is not known yet leaves nothing; it leaves as
    one interval in the epoch its end becomes known, so the output has no edges. Such a pair
    is a point ``[s, s + 1)``: every window it overlaps ends at ``s + 1`` or later, which the
    join's CTI (at most the other side's) passes only once the other side's CTI has passed
    ``s + 1``, which makes the pair's end known: no window completes without it."""
    from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type

    on, keyed_sides, intervals = step.node.on, step.keyed_sides, step.lifetimes_only
    window, points = step.window, step.points
    pl = [c for c in left.events.columns if c not in HEADER]
    pr = [c for c in right.events.columns if c not in HEADER]
    names = output_columns(pl, pr)
    flows = (left, right)
    schemas = [f.events.schema for f in flows]
    made: dict[int, DataFrame] = {}

    def ev(i: int) -> DataFrame:
        """Side ``i``'s held and new events (:func:`_side_events`), made when first asked for: a
        lookup join's pairing function and driver read neither side's this way."""
        if i not in made:
            held = state.held[i]
            if held is not None and state.packed == i:
                held = _unpacked_held(held, i, schemas[i], (pl, pr)[i])
            made[i] = _side_events(flows[i], i, held, (pl, pr)[i], cache, identity=False)
        return made[i]

    def sent(i: int) -> DataFrame:
        """Side ``i``'s events as the pairing function takes them (see _Side)."""
        cols = [START, END, F.col(f"{_AT}.pos").alias("__p"), "__new"]
        if flows[i].edges:
            cols += [_CLOSED, _CLOSED_NOW]
        return ev(i).select(*cols, *(pl, pr)[i])

    c_l, c_r = left.ctis, right.ctis
    tagged = cache.keep(
        c_l.withColumn("__g", F.lit(0)).unionByName(c_r.withColumn("__g", F.lit(1)))
    )
    # without edges on either side every pair is complete when it forms: nothing to search
    edges = left.edges or right.edges
    big = _packed_side(left, right)
    small = small_held = None
    # a lookup join collects its other side whole when it has at most LOOKUP_ROWS events (held
    # and new), known in advance where the driver knows both counts, else found by the collect
    limit: int | None = LOOKUP_ROWS
    fits = None
    if big is not None:
        held_rows = state.held_rows[1 - big] if state.held[1 - big] is not None else 0
        new_rows = (left, right)[1 - big].rows
        if held_rows is not None and new_rows is not None:
            fits = held_rows + new_rows <= LOOKUP_ROWS
            limit = None
    if big is None or fits is False:
        # a lookup join merges both sides' CTIs on the driver: every one, edges or not
        found = collect_ctis(tagged, state.latest, search=edges or big is not None, limit=None)
    elif not (left, right)[1 - big].edges:  # its events and both sides' CTIs in one job
        small, found = _collected(sent(1 - big), tagged, state.latest, limit)
    else:  # the same, its END edges matched on the driver
        j = 1 - big
        small, found, small_held = _collected_closing(
            (left, right)[j], j, state.held[j], pl if j == 0 else pr, tagged, state, limit
        )
    latest = found.latest

    out_schema = StructType(
        [
            StructField(KIND, StringType()),
            StructField(EDGE, StringType()),
            StructField(START, LongType()),
            StructField(END, LongType()),
            StructField(POS, POS_TYPE),
            *[StructField(n, schemas[0][c].dataType) for c, n in zip(pl, names, strict=False)],
            *[
                StructField(n, schemas[1][c].dataType)
                for c, n in zip(pr, names[len(pl) :], strict=True)
            ],
        ]
    )
    key = keyed_inputs([left, right], list(keyed_sides), on)
    defer = intervals and key is None and any(points)
    pushed = None
    if window is not None and intervals and key is None:
        spark = left.events.sparkSession
        payload = StructType(out_schema.fields[len(HEADER) :])
        pushed = push_window(window, payload, case_sensitive(spark), ansi_mode(spark))
    if pushed is not None:
        for f in pushed.fields.fields:
            out_schema.add(f)
        out_schema.add(_LATEST, LongType())
    keys = [(_field(schemas[0], k).name, _field(schemas[1], k).name) for k in on]
    key_types = _key_types([f.events for f in flows], keys)
    ctis_in_order = [sorted(f or []) for f in found.found]
    pairing = _Pairing(
        tuple(pl),
        tuple(pr),
        tuple(keys),
        tuple(to_arrow_type(t, timezone="UTC") for t in key_types),
        edges,
        intervals,
        (state.latest[0], state.latest[1]),
        (latest[0], latest[1]),
        tuple(np.array([c for c, _ in s], dtype=np.int64) for s in ctis_in_order),
        tuple(np.array([p for _, p in s], dtype=np.int64).reshape(-1, 5) for s in ctis_in_order),
        to_arrow_schema(out_schema, timezone="UTC"),
        pushed,
        defer,
    )
    handed = None
    if big is not None and small is not None:
        payload = pl if big == 0 else pr
        held_big = state.held[big]
        if held_big is not None and state.packed != big:  # held as rows: packed here
            rows = held_big.select(START, END, F.col(f"{_AT}.pos").alias(POS), *payload)
            held_big = packed_frame(rows, rows.columns)
        pairs = _lookup_pairs(pairing, big, small, (left, right)[big].packed, held_big, out_schema)
        # the events handed back counted by the job that computes the pairs (state_rows): a
        # HELD row's __start is how many it packs
        is_held = f"{KIND} = '{Kind.HELD}'"
        events_out, [handed_rows] = counted_checkpoint(
            pairs, [f"coalesce(sum(CASE WHEN {is_held} THEN {START} END), 0)"]
        )
        handed = with_rows(events_out.filter(is_held).select(ARROW), handed_rows)
        events_out = events_out.filter(f"{KIND} <> '{Kind.HELD}'").drop(ARROW)
    else:
        events_out = checkpoint(
            _cogrouped(pairing, [sent(0), sent(1)], keys, key_types, out_schema), eager=False
        )
    partials = None
    if pushed is not None:
        names_sql = sql_names([*HEADER, *names])
        partial_names = [*pushed.keys, *pushed.fields.fieldNames(), _LATEST]
        partials = events_out.filter(f"{KIND} = '{Kind.PARTIAL}'").selectExpr(
            *sql_names(partial_names)
        )
        events_out = events_out.filter(f"{KIND} <> '{Kind.PARTIAL}'").selectExpr(*names_sql)

    # CTIs: the minimum of both sides' latest (from the CTIs collected, where they were).
    if big is None:
        ctis = cache.keep(min_of_latest(tagged, "__g", state.latest, state.emitted))
    else:
        every = found.found  # a lookup join collects every CTI of both sides
        rows = [(p, g, c) for g in (0, 1) for c, p in every[g]]  # type: ignore[union-attr]
        merged = min_of_latest_on_driver(rows, state.latest, state.emitted)
        ctis = local_ctis(tagged.sparkSession, merged)

    # Keep what can still meet a future event of the other side (a pair whose end is still to
    # be learnt has both its events held: it forms again from them in the next epoch).
    held: list[DataFrame | None] = []
    counted: list[int | None] = [None, None]
    for i in (0, 1):
        if handed is not None and i == big:
            # handed back packed by the pairing function: a selection over its output's
            # checkpoint, which the job that reads the pairs (egress, as a rule) computes, so
            # the epoch runs no job of its own for it (its partitions stay few: _lookup_pairs)
            held.append(handed)
        elif small_held is not None and i != big:  # collected on the driver
            kept = _still_held(small_held, latest[big])
            counted[i] = kept.num_rows
            schema = _held_schema(schemas[i], (pl, pr)[i])
            held.append(with_rows(_held_of_table(tagged.sparkSession, kept, schema), kept.num_rows))
        else:
            keep = F.col(_OPEN) | (F.col(END) > F.lit(latest[1 - i]))
            held.append(ev(i).filter(keep).drop("__new", _CLOSED_NOW).transform(hold))
            if small is not None and i != big:  # no edges: those ending after the CTI
                counted[i] = _still_held(small, latest[big]).num_rows
    new_state = JoinState(
        held,
        latest,
        max(state.emitted, min(latest)),
        held_rows=counted,
        packed=big if handed is not None else None,
    )
    rose = risen(min(latest), state.emitted)
    # a pair's lifetime is the intersection of its events': finite where either side's is
    unbounded = left.unbounded and right.unbounded
    out = Flow(
        events_out, ctis, edges and not defer, latest=rose, partials=partials, unbounded=unbounded
    )
    if key is None:
        return out, new_state
    pairs = zip((left, right), keyed_sides, strict=True)
    sides = [f.keyed if f.key == key and ok else None for f, ok in pairs]
    keyed, new_state.keys = keyed_min_of_latest(
        tagged, sides, state.latest, ctis, state.emitted, state.keys
    )
    return replace(out, keyed=cache.keep(keyed), key=key), new_state


#: A lookup join pairs its fast side's packed events with its other side collected whole when
#: that side has at most this many events (held and new) in the epoch; above it, by ``cogroup``
LOOKUP_ROWS = 100_000


def _packed_side(left: Flow, right: Flow) -> int | None:
    """The side whose events came packed (:mod:`engine.packed`), if only one did."""
    packed = [f.packed is not None for f in (left, right)]
    return packed.index(True) if packed.count(True) == 1 else None


def _collected(
    side: DataFrame, tagged: DataFrame, before: list[int], limit: int | None
) -> tuple[Any, EpochCtis]:
    """One job: ``side``'s rows as one Arrow table on the driver (None above ``limit`` rows;
    ``limit=None``: every row, known to be few), and both sides' CTIs of the epoch (``tagged``,
    as :func:`collect_ctis` takes them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # one partition before the limit: a limit over several runs a job per partition it scans
    # (and a limit in a union is compiled again for every plan: none where the size is known)
    rows = side if limit is None else side.coalesce(1).limit(limit + 1)
    ctis = tagged.select(F.col("__g"), F.col(CTI).alias("__c"), F.col(POS).alias("__cp"))
    both = rows.unionByName(ctis, allowMissingColumns=True)
    table = pa.Table.from_batches(both._collect_as_arrow(empty_list_if_zero_records=False))
    is_cti = pc.is_valid(table.column("__g"))
    found = table.filter(is_cti).select(["__g", "__c", "__cp"]).to_pylist()
    latest, values = list(before), [[], []]
    for r in found:
        g = r["__g"]
        latest[g] = max(latest[g], r["__c"])
        values[g].append((r["__c"], tuple(r["__cp"].values())))
    events = table.filter(pc.invert(is_cti)).drop_columns(["__g", "__c", "__cp"])
    small = None if limit is not None and events.num_rows > limit else events
    return small, EpochCtis(latest, [sorted(v) for v in values])


def _collected_closing(
    flow: Flow,
    side: int,
    held: DataFrame | None,
    payload: list[str],
    tagged: DataFrame,
    state: JoinState,
    limit: int | None,
) -> tuple[Any, EpochCtis, Any]:
    """:func:`_collected` for a side with edges, from its held events and the epoch's events as
    they are (one job, no END-edge matching in Spark): each END edge closes the earliest open
    START edge with its start and payload, as :func:`_side_events` matches them, here on the
    driver. Returns the side's events as :func:`_cogrouped` sends them (None above ``limit``),
    both sides' CTIs, and the side's events with every column (for :func:`_held_of_table`)."""
    import pyarrow as pa

    # SQL text, one projection each: one py4j call per column, not one per column and operator
    cols = sql_names(payload)
    rows = flow.events.selectExpr(EDGE, START, END, f"{POS} AS __np", *cols, "1 AS __src")
    if held is not None:
        rows = held.selectExpr(START, END, _AT, _OPEN, _CLOSED, *cols, "0 AS __src").unionByName(
            rows, allowMissingColumns=True
        )
    table, found = _collected(rows, tagged, state.latest, limit)
    if table is None:
        return None, found, None
    events, ends = [], []
    for r in table.to_pylist():
        if r["__src"] == 0:
            events.append(r | {"__new": False, _CLOSED_NOW: False})
        elif r[EDGE] == "END":
            ends.append(((r[START], *(r[c] for c in payload)), tuple(r["__np"].values()), r))
        else:
            at = {"pos": r["__np"], "side": side, "k": 0}
            opened = r[EDGE] == "START"
            events.append(
                {START: r[START], END: r[END], _AT: at, _OPEN: opened}
                | {_CLOSED: None if opened else at, "__new": True, _CLOSED_NOW: False}
                | {c: r[c] for c in payload}
            )
    opens = (((e[START], *(e[c] for c in payload)), _moment_key(e[_AT]), e) for e in events)
    for e, end in fifo_pairs((o for o in opens if o[2][_OPEN]), ends):
        if e is not None:  # an END edge may close none
            e[END], e[_OPEN], e[_CLOSED_NOW] = end[END], False, True
            e[_CLOSED] = {"pos": end["__np"], "side": side, "k": 1}
    pos = table.schema.field("__np").type
    moment = pa.struct([("pos", pos), ("side", pa.int32()), ("k", pa.int32())])
    types = {START: pa.int64(), END: pa.int64(), _AT: moment, _OPEN: pa.bool_()}
    types |= {_CLOSED: moment, "__new": pa.bool_(), _CLOSED_NOW: pa.bool_()}
    types |= {c: table.schema.field(c).type for c in payload}
    every = pa.table({c: pa.array([e[c] for e in events], t) for c, t in types.items()})
    sent = every.select([START, END]).append_column(
        "__p", every.column(_AT).combine_chunks().field("pos")
    )
    for c in ("__new", _CLOSED, _CLOSED_NOW, *payload):
        sent = sent.append_column(c, every.column(c))
    return sent, found, every


def _moment_key(m: dict) -> tuple:
    return (tuple(m["pos"].values()), m["side"], m["k"])


def _held_schema(events: StructType, payload: list[str]) -> StructType:
    """The schema of a side's held events (:func:`_side_events`'s, less two columns)."""
    moment = StructType(
        [
            StructField("pos", POS_TYPE, False),
            StructField("side", IntegerType(), False),
            StructField("k", IntegerType(), False),
        ]
    )
    fields = [StructField(START, LongType()), StructField(END, LongType())]
    fields += [StructField(_AT, moment), StructField(_OPEN, BooleanType())]
    fields += [StructField(_CLOSED, moment)]
    return StructType([*fields, *(events[c] for c in payload)])


def _still_held(events: Any, other_latest: int) -> Any:
    """The events (an Arrow table) still held after the other side's CTI ``other_latest``: open,
    or ending after it (:func:`_side_events`'s rule)."""
    import pyarrow.compute as pc

    later = pc.greater(events.column(END), other_latest)
    return events.filter(
        pc.or_(events.column(_OPEN), later) if _OPEN in events.column_names else later
    )


def _held_of_table(spark: Any, kept: Any, schema: StructType) -> DataFrame:
    """A side's held state from its events collected on the driver (:func:`_collected_closing`)
    and still held (:func:`_still_held`), as :func:`_side_events` holds them."""
    # the driver's rows themselves: no lineage to cut, nothing to compute at the epoch's end
    if kept.num_rows == 0:  # Spark cannot take an Arrow table of no chunks
        return spark.createDataFrame([], schema=schema)
    return spark.createDataFrame(kept.select(schema.fieldNames()), schema=schema)


def _cogrouped(
    p: _Pairing, sent: list[DataFrame], keys: list, key_types: list, out_schema: StructType
) -> DataFrame:
    """Both sides' events (``sent``; what they send: see _Side), in buckets by a hash of their
    keys, paired by one Arrow function call per bucket, not per key: eight buckets a partition,
    so that one call holds an eighth of a partition's rows (B2 runs as fast as with one a
    partition). The right side's columns get new names where both sides come from one plan
    (e.g. a stream joined with a window over it)."""
    spark = sent[0].sparkSession
    buckets = 8 * max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    grouped = []
    for i, side in enumerate(sent):
        if i == 1:
            side = side.toDF(*side.columns)
        bucket = F.pmod(F.xxhash64(*_normalized(keys, key_types, i)), F.lit(buckets))
        grouped.append(side.groupBy(bucket.alias("__b")))
    pair = grouped[0].cogroup(grouped[1])
    return pair.applyInArrow(lambda lt, rt: _pair_rows(p, lt, rt), out_schema)


def _lookup_pairs(
    p: _Pairing,
    big: int,
    small: Any,
    packed: DataFrame,
    held: DataFrame | None,
    out_schema: StructType,
) -> DataFrame:
    """A lookup join's pairs: one Arrow function over the packed events of side ``big`` (this
    epoch's from its scan, and its held ones, ``held``: packed too) pairs each chunk with side
    ``small``'s events, collected whole (an Arrow table: held and new, as :func:`_cogrouped`
    sends them). Besides the output rows (``out_schema`` and a null :data:`ARROW`) it hands
    back, packed as ``HELD`` rows, the events of side ``big`` that can still meet a future event
    (ending after the other side's latest CTI), each row's ``__start`` the number it packs: no
    edges come packed."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from ctistream.engine.packed import pack, unpack

    chunks = packed.select(ARROW, F.lit(True).alias("__new"))
    if held is not None:
        # a union adds up its inputs' partitions: kept few, as the held chunks come from here
        chunks = few_partitions(chunks.unionByName(held.select(ARROW, F.lit(False).alias("__new"))))
    schema = p.schema.append(pa.field(ARROW, pa.binary()))
    after = p.latest[1 - big]

    def pairs(batches):
        for b in batches:
            for value, new in zip(b.column(ARROW), b.column("__new"), strict=True):
                t = unpack(value)
                n = t.num_rows
                side = t.rename_columns(["__p" if c == POS else c for c in t.column_names])
                side = side.append_column("__new", pa.repeat(pa.scalar(new.as_py()), n))
                lt, rt = (side, small) if big == 0 else (small, side)
                out = _pair_rows(p, lt, rt)
                out = out.append_column(ARROW, pa.nulls(out.num_rows, pa.binary()))
                yield from out.to_batches()
                still = t.filter(pc.greater(t.column(END), after))
                kept = pack(still)
                if kept:
                    row = {f.name: pa.nulls(len(kept), f.type) for f in schema}
                    row[KIND] = pa.array([Kind.HELD] * len(kept), schema.field(KIND).type)
                    # how many events each value packs, counted as state rows
                    sizes = chunk_sizes(still.num_rows)
                    row[START] = pa.array(sizes, schema.field(START).type)
                    row[ARROW] = pa.array(kept, pa.binary())
                    yield pa.RecordBatch.from_arrays(list(row.values()), schema=schema)

    return chunks.mapInArrow(pairs, StructType([*out_schema, StructField(ARROW, PACKED_TYPE)]))


def _unpacked_held(held: DataFrame, side: int, events: StructType, payload: list[str]) -> DataFrame:
    """Packed held events of side ``side`` (:attr:`JoinState.packed`) as :func:`_side_events`
    holds them: events without edges, each one's end known when it arrived."""
    rows = unpacked(held, events)
    arrival = _moment(F.col(POS), side, 0)
    return rows.select(
        START,
        END,
        arrival.alias(_AT),
        F.lit(False).alias(_OPEN),
        arrival.alias(_CLOSED),
        *payload,
    )


def _key_types(ev: list[DataFrame], keys: list[tuple[str, str]]) -> list[Any]:
    """The Spark type each key compares in: its type, or for two numeric types the wider one
    (a union's, as Spark's comparison widens them). Raises :class:`QueryBuildError` for other
    types that differ, and for strings with a collation (compared here byte by byte)."""
    out = []
    for lk, rk in keys:
        a, b = ev[0].schema[lk].dataType, ev[1].schema[rk].dataType
        if a == b and _bytewise(a):
            out.append(a)
        elif isinstance(a, NumericType) and isinstance(b, NumericType):
            out.append(ev[0].select(lk).union(ev[1].select(rk)).schema[0].dataType)
        else:
            raise QueryBuildError(
                f"join: key {lk!r} is {a.simpleString()} on the left and {rk!r} is "
                f"{b.simpleString()} on the right; expected one type on both sides (two numeric "
                "types are compared in the wider one), and strings without a collation. Fix: "
                f"cast one side's key with select(), e.g. F.col({rk!r}).cast("
                f"{a.simpleString() if _bytewise(a) else 'string'!r})"
            )
    return out


def _normalized(keys: list[tuple[str, str]], types: list[Any], side: int) -> list[Column]:
    """One side's keys as hashed into buckets: cast to the type both compare in, floating point
    zeros and NaNs made one value (Spark's join makes them equal)."""
    out = []
    for names, typ in zip(keys, types, strict=True):
        c = F.col(names[side]).cast(typ)
        if isinstance(typ, FloatType | DoubleType):
            c = F.when(F.isnan(c), F.lit(float("nan"))).when(c == 0, F.lit(0.0)).otherwise(c)
        out.append(c)
    return out


def _field(schema: StructType, name: str) -> StructField:
    same = [f for f in schema.fields if f.name == name]
    return (same or [f for f in schema.fields if f.name.lower() == name.lower()])[0]
