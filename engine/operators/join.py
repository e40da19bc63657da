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

Moments order the rows of both sides: (position, side, events / END edges / CTI). Per epoch, one
Spark plan: each side's events (held and new) get their END edges by a ranked join; new pairs come
from an equi-join on the keys with the overlap test at the forming moment; every pair whose end is
not yet known finds the moment it becomes known by searching the other side's CTIs of the epoch
(collected to the driver and searched per pair by a pandas UDF; many: one sort of CTIs and pairs
by value). Read only by a window, a pair whose end is known in the epoch it forms in leaves as
one interval, and a new pair only asks whether its end is known, not where (no search). State:
per side, the events that can still meet a future event (open edges, and events ending after the
other side's CTI), and the pairs whose END edge is still to come. Both shrink as the CTIs
advance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from engine.errors import QueryBuildError
from engine.rows import (
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
    checkpoint,
    hold,
    keyed_inputs,
    keyed_min_of_latest,
    min_of_latest,
    pos_literal,
)
from engine.temporal import MAX_TIME, MIN_TIME

__all__ = ["JoinState", "join", "output_columns"]

_AT, _ID, _OPEN, _CLOSED = "__at", "__id", "__open", "__closed"  # moment, identity, end known at
_CLOSED_NOW = "__closed_now"  # an END edge of this epoch closed the event
#: a pair's sides' ends as known, and when they became known (null: still open)
_SIDE_ENDS = ("__l_end", "__l_c", "__r_end", "__r_c")


@dataclass
class JoinState:
    held: list[DataFrame | None] = field(default_factory=lambda: [None, None])
    pairs: DataFrame | None = None
    latest: list[int] = field(default_factory=lambda: [MIN_TIME, MIN_TIME])
    emitted: int = MIN_TIME
    #: substreams: per key the sides' largest keyed CTIs (:func:`engine.rows.keyed_min_of_latest`)
    keys: DataFrame | None = None


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
    this epoch closed it (``__closed_now``). ``identity``: each event gets a unique ``__id``
    (else only its moment, which events arriving at one position share)."""
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
    # Unique per moment: several events can arrive at one position (a window's results).
    n = F.lit(1)
    if identity:  # a shuffle and a sort of the epoch's events
        n = F.row_number().over(Window.partitionBy(_AT).orderBy(START, *payload))
    new = new.withColumn(_ID, F.struct(F.col(_AT).alias("at"), n.alias("n")))
    events = new if held is None else held.withColumn("__new", F.lit(False)).unionByName(new)
    if not flow.edges:  # no END edge can come: nothing is open, nothing to close
        # not kept: selections over the input's rows (kept upstream) and the held ones
        return events.withColumn(_CLOSED_NOW, F.lit(False))

    ends = flow.events.filter(edge == "END").select(START, END, POS, *payload)
    key = [START, *payload]
    opened = events.withColumn(
        "__r",
        F.when(F.col(_OPEN), F.row_number().over(Window.partitionBy(_OPEN, *key).orderBy(_AT))),
    )
    ends = ends.withColumn("__r", F.row_number().over(Window.partitionBy(*key).orderBy(POS)))
    o, e = opened.alias("o"), ends.alias("e")
    on = [F.col(f"o.{k}").eqNullSafe(F.col(f"e.{k}")) for k in [*key, "__r"]]
    joined = o.join(
        e.select(*key, "__r", F.col(END).alias("__e_end"), F.col(POS).alias("__e_pos")).alias("e"),
        on,
        "left",
    )
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


def collect_ctis(tagged: DataFrame, before: list[int], search: bool = True) -> EpochCtis:
    """One small job over ``tagged`` (``__g`` side, CTI, position): see :class:`EpochCtis`.
    ``search=False``: only the latest CTIs (nothing will be searched)."""
    latest, found = list(before), [[], []]
    item = F.struct(F.col(CTI).alias("c"), F.col(POS).alias("p"))
    head = F.slice(F.sort_array(F.collect_list(item)), 1, SEARCH_ON_DRIVER + 1)
    if not search:
        head = F.array()
    for row in tagged.groupBy("__g").agg(F.max(CTI).alias("m"), head.alias("h")).collect():
        g = row["__g"]
        latest[g] = max(latest[g], row["m"])
        found[g] = (
            [(c, tuple(p)) for c, p in row["h"]] if len(row["h"]) <= SEARCH_ON_DRIVER else None
        )
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
    def first_at_or_above(v: pd.Series) -> pd.DataFrame:
        i = np.searchsorted(values, v.to_numpy(), side="left")
        j = np.minimum(i, len(values) - 1)
        out = {f.name: a[j] for f, a in zip(POS_TYPE.fields, fields, strict=True)}
        return pd.DataFrame({"ok": i < len(values), **out})

    return first_at_or_above


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
    both = (
        rows.withColumn("__t", F.col(value))
        .withColumn("__typ", F.lit(0))
        .unionByName(
            ctis.select(
                F.col(CTI).alias("__t"),
                F.lit(1).alias("__typ"),
                _moment(F.col(POS), side, 2).alias("__m"),
            ),
            allowMissingColumns=True,
        )
    )
    # The first CTI at or after each row in (value, CTIs after values) order, found as the last
    # one so far in the reverse order: a running frame, linear (a frame to the end is not).
    after = Window.orderBy(F.desc("__t"), F.desc("__typ")).rowsBetween(
        Window.unboundedPreceding, Window.currentRow
    )
    found_m = F.last(F.when(F.col("__typ") == 1, F.col("__m")), ignorenulls=True).over(after)
    return (
        both.withColumn(out, moment.otherwise(found_m))
        .filter(F.col("__typ") == 0)
        .drop("__t", "__typ", "__m")
    )


_END_AND_WHEN = ((END, "_end"), (_CLOSED, "_c"))


def _refreshed(pairs: DataFrame, ev: list[DataFrame], edges: tuple[bool, bool]) -> DataFrame:
    """Held pairs with the ends of their sides' events that END edges of this epoch closed (a
    side's end, once known, never changes; a side without edges has none to learn)."""
    for i, (s, idc) in enumerate((("l", "__lid"), ("r", "__rid"))):
        if not edges[i]:
            continue
        closed = (
            ev[i]
            .filter(F.col(_CLOSED_NOW))
            .select(
                F.col(_ID).alias(idc),
                *[F.col(c).alias(f"__new{x}") for c, x in _END_AND_WHEN],
            )
        )
        pairs = pairs.join(closed, idc, "left").select(
            *[c for c in pairs.columns if c not in (f"__{s}_end", f"__{s}_c")],
            *[
                F.coalesce(F.col(f"__new{x}"), F.col(f"__{s}{x}")).alias(f"__{s}{x}")
                for _, x in _END_AND_WHEN
            ],
        )
    return pairs


def join(
    left: Flow,
    right: Flow,
    on: tuple[str, ...],
    state: JoinState,
    cache: EpochCache,
    keyed_sides: tuple[bool, bool] = (True, True),
    intervals: bool = False,
) -> tuple[Flow, JoinState]:
    """``keyed_sides``: whether each side's keyed CTIs may be used (docs/decisions.md,
    "Per-key CTIs": not from a side with a join below it, whose pairs end by that side's CTI).
    ``intervals``: the output is read only for its events' lifetimes (by a window), so a pair
    whose end becomes known in the epoch it forms in leaves as one interval where it forms, not
    as a START edge there and an END edge where its end became known (docs/decisions.md)."""
    pl = [c for c in left.events.columns if c not in HEADER]
    pr = [c for c in right.events.columns if c not in HEADER]
    names = output_columns(pl, pr)
    # an event's identity serves only to give held pairs the end an END edge brings
    ev = [
        _side_events(left, 0, state.held[0], pl, cache, left.edges),
        _side_events(right, 1, state.held[1], pr, cache, right.edges),
    ]

    # New pairs: at least one side new; formed at the later arrival; overlap as then known.
    L, R = ev[0].alias("l"), ev[1].alias("r")
    keys = [F.col(f"l.{k}") == F.col(f"r.{k}") for k in on]
    f = F.greatest(F.col(f"l.{_AT}"), F.col(f"r.{_AT}"))

    def known_end(s: str) -> Column:
        return F.when(F.col(f"{s}.{_CLOSED}") <= f, F.col(f"{s}.{END}")).otherwise(F.lit(MAX_TIME))

    nonempty = (known_end("l") > F.col(f"l.{START}")) & (known_end("r") > F.col(f"r.{START}"))
    overlap = (F.col(f"l.{START}") < known_end("r")) & (F.col(f"r.{START}") < known_end("l"))
    cond = [*keys, F.col("l.__new") | F.col("r.__new")]
    pairs_new = (
        L.join(R, cond)
        .filter(nonempty & overlap)
        .select(
            f.alias(_AT),
            F.greatest(F.col(f"l.{START}"), F.col(f"r.{START}")).alias(START),
            F.col(f"l.{_ID}").alias("__lid"),
            F.col(f"r.{_ID}").alias("__rid"),
            F.coalesce(F.col(f"l.{_CLOSED}") <= f, F.lit(False)).alias("__lk"),
            F.coalesce(F.col(f"r.{_CLOSED}") <= f, F.lit(False)).alias("__rk"),
            F.least(F.col(f"l.{END}"), F.col(f"r.{END}")).alias("__min_end"),
            *[F.col(f"{s}.{c}").alias(f"__{s}{x}") for s in "lr" for c, x in _END_AND_WHEN],
            *[F.col(f"l.{c}").alias(c) for c in pl],
            *[F.col(f"r.{c}").alias(n) for c, n in zip(pr, names[len(pl) :], strict=True)],
        )
    )
    # When each pair's end is known (``__det``; null: not in this epoch), with its sides' ends
    # as known by the end of the epoch: a new pair has them from its events; a held one learns
    # those that END edges of this epoch closed. A side's end is known at once when the other
    # side's CTI is at or past it: the first such CTI is searched for.
    c_l, c_r = left.ctis, right.ctis
    tagged = cache.keep(
        c_l.withColumn("__g", F.lit(0)).unionByName(c_r.withColumn("__g", F.lit(1)))
    )
    # without edges on either side every pair is complete when it forms: nothing to search
    edges = left.edges or right.edges
    found = collect_ctis(tagged, state.latest, search=edges)
    latest = found.latest

    def when_known(pairs: DataFrame, where: bool = True) -> DataFrame:
        """``pairs`` with ``__det``; ``where=False``: only whether it is known in this epoch
        (then ``__det`` is the pair's own moment): a side's end is known by the other side's
        CTI in this epoch if that side's latest CTI reached it, no search needed."""
        if not edges:
            return pairs.withColumn("__det", F.when(F.lit(False), F.col(_AT)))
        if not where:
            l_c, r_c = F.col("__l_c").isNotNull(), F.col("__r_c").isNotNull()
            known = (
                (l_c & r_c)
                | (l_c & (F.col("__l_end") <= F.lit(latest[1])))
                | (r_c & (F.col("__r_end") <= F.lit(latest[0])))
            )
            return pairs.withColumn("__det", F.when(known, F.col(_AT)))
        for x, other, c in (("l", 1, c_r), ("r", 0, c_l)):  # a side's end, the other's CTIs
            known = F.when(F.col(f"__{x}_c").isNotNull(), F.col(f"__{x}_end"))
            pairs = _first_cti_at_or_above(
                pairs.withColumn(f"__{x}_e", known),
                f"__{x}_e",
                c,
                other,
                state.latest[other],
                f"__t_{x}",
                found.found[other],
            )
        both_known = F.when(
            F.col("__l_c").isNotNull() & F.col("__r_c").isNotNull(),
            F.greatest(_AT, "__l_c", "__r_c"),
        )
        via_left = F.when(F.col("__t_l").isNotNull(), F.greatest(_AT, "__l_c", "__t_l"))
        via_right = F.when(F.col("__t_r").isNotNull(), F.greatest(_AT, "__r_c", "__t_r"))
        return pairs.withColumn("__det", F.least(both_known, via_left, via_right)).drop(
            "__l_e", "__r_e", "__t_l", "__t_r"
        )

    # Lazy checkpoints, not cached plans: a union of two branches over the same cached plan
    # gets new attribute ids in its second branch (Spark's relation deduplication), and below
    # held state (checkpoints) Spark then no longer finds the cached plan and computes it again
    # read only by a window, a new pair whose end is known in this epoch leaves as an interval
    # where it forms: when its end became known does not matter (below)
    pairs_new = checkpoint(when_known(pairs_new, where=not intervals), eager=False)

    def rows(df: DataFrame, edge: str | None, end: Column, at: str) -> DataFrame:
        return df.select(
            F.lit("INSERT").alias(KIND),
            F.lit(edge).cast("string").alias(EDGE),
            START,
            end.alias(END),
            F.col(f"{at}.pos").alias(POS),
            *names,
        )

    ends_known = F.least(
        F.when(F.col("__l_c").isNotNull(), F.col("__l_end")).otherwise(F.lit(MAX_TIME)),
        F.when(F.col("__r_c").isNotNull(), F.col("__r_end")).otherwise(F.lit(MAX_TIME)),
    )
    det = F.col("__det").isNotNull()
    whole = F.col("__lk") & F.col("__rk")
    events_out = rows(pairs_new.filter(whole), None, F.col("__min_end"), _AT)
    opened = pairs_new.filter(~whole)
    if intervals:  # a new pair whose end is known in this epoch: one interval, when it formed
        events_out = events_out.unionByName(rows(opened.filter(det), None, ends_known, _AT))
        events_out = events_out.unionByName(
            rows(opened.filter(~det), "START", F.lit(MAX_TIME), _AT)
        )
    else:
        events_out = events_out.unionByName(rows(opened, "START", F.lit(MAX_TIME), _AT))
        events_out = events_out.unionByName(rows(opened.filter(det), "END", ends_known, "__det"))
    waiting = [_AT, START, "__lid", "__rid", *_SIDE_ENDS, *names]
    still = opened.filter(~det).select(*waiting)
    if state.pairs is not None:
        held_pairs = _refreshed(state.pairs, ev, (left.edges, right.edges))
        held_pairs = checkpoint(when_known(held_pairs), eager=False)
        events_out = events_out.unionByName(
            rows(held_pairs.filter(det), "END", ends_known, "__det")
        )
        still = held_pairs.filter(~det).select(*waiting).unionByName(still)

    # CTIs: the minimum of both sides' latest.
    ctis = cache.keep(min_of_latest(tagged, "__g", state.latest, state.emitted))

    # Keep what can still meet a future event of the other side, and the pending pairs.
    held: list[DataFrame | None] = [
        ev[i]
        .filter(F.col(_OPEN) | (F.col(END) > F.lit(latest[1 - i])))
        .drop("__new", _CLOSED_NOW)
        .transform(hold)
        for i in (0, 1)
    ]
    new_state = JoinState(held, hold(still), latest, max(state.emitted, min(latest)))
    rose = min(latest) if min(latest) > state.emitted else MIN_TIME
    out = Flow(events_out, ctis, edges, latest=rose)
    key = keyed_inputs([left, right], list(keyed_sides), on)
    if key is None:
        return out, new_state
    pairs = zip((left, right), keyed_sides, strict=True)
    sides = [f.keyed if f.key == key and ok else None for f, ok in pairs]
    keyed, new_state.keys = keyed_min_of_latest(
        tagged, sides, state.latest, ctis, state.emitted, state.keys
    )
    return replace(out, keyed=cache.keep(keyed), key=key), new_state
