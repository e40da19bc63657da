"""Temporal anti-join (semantics §5): the parts of each left lifetime that no right event with
equal keys covers (nulls never match); the payload is the left payload; the output CTI is the
minimum of both sides' latest CTIs.

When a part is final. With ``cL``/``cR`` the sides' latest CTIs, a point ``t`` of a left event is
*decided* when ``t < cR`` (later right events start, and right END edges end, at or after ``cR``,
so coverage below ``cR`` cannot change) and the left event is complete or ``t < cL`` (an open left
edge ends at or after ``cL``). An uncovered fragment ``[p, q)`` leaves once ``p`` is decided: as
an interval when its end is decided as well (``q`` decided, or ``q`` the left event's end and that
end ``<= cR``), otherwise as a START edge closed by an END edge once the end is decided. The rule
is applied after every position group, like the join's (``docs/decisions.md``).

Per epoch, one Spark plan: each side's events (held and new) get their END edges as in the join;
the uncovered fragments of each left event, from the point its earlier fragments have left, come
from a gaps-and-islands pass over the clipped right lifetimes (a running maximum of ends ordered by
start); the moment each fragment's start and end become decided is found by searching each side's
CTIs (``first CTI above a value``), exactly as the join finds when a pair's end is known. Since
being decided is monotone in the point, every left event has at most one fragment whose START edge
waits for its END edge. State: the left events not yet done (open, or ending after ``cR``), their
progress (``__from``, ``__started``), and the right events that can still cover an undecided
point (open, or ending after ``min(cL, cR)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctistream.engine.ctis import min_of_latest
from ctistream.engine.operators.join import (
    _AT,
    _CLOSED,
    _CLOSED_NOW,
    _ID,
    _OPEN,
    _first_cti_at_or_above,
    _side_events,
    collect_ctis,
)
from ctistream.engine.rows import (
    EDGE,
    END,
    HEADER,
    KIND,
    POS,
    START,
    EpochCache,
    Flow,
    Kind,
    hold,
)
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["AntiJoinState", "anti_join"]

_FROM, _STARTED = "__from", "__started"


@dataclass
class AntiJoinState:
    held: list[DataFrame | None] = field(default_factory=lambda: [None, None])
    progress: DataFrame | None = None  # __id, __from, __started of held left events
    latest: list[int] = field(default_factory=lambda: [MIN_TIME, MIN_TIME])
    emitted: int = MIN_TIME


def _all(*moments: Column) -> Column:
    """The latest of ``moments``, null if any is null (Spark's greatest skips nulls)."""
    missing = F.lit(False)
    for m in moments:
        missing = missing | m.isNull()
    return F.when(~missing, F.greatest(*moments))


def _after(value: Column) -> Column:
    """``value + 1`` for "a CTI strictly above value"; null at +inf (no CTI is above it)."""
    return F.when(value < F.lit(MAX_TIME), value + 1)


def _fragments(lefts: DataFrame, rights: DataFrame, on: tuple[str, ...]) -> DataFrame:
    """``__id, __p, __q``: the maximal parts of ``[__from, __e)`` of each left event outside the
    (known) lifetimes of the right events with equal keys."""
    L, R = lefts.alias("l"), rights.alias("r")
    cond = [F.col(f"l.{k}") == F.col(f"r.{k}") for k in on]
    cond += [F.col(f"r.{START}") < F.col("l.__e"), F.col("r.__b") > F.col(f"l.{_FROM}")]
    covers = L.join(R, cond).select(
        F.col(f"l.{_ID}").alias(_ID),
        F.col(f"l.{_FROM}").alias(_FROM),
        F.greatest(F.col(f"r.{START}"), F.col(f"l.{_FROM}")).alias("__a"),
        F.least(F.col("r.__b"), F.col("l.__e")).alias("__b"),
    )
    order = Window.partitionBy(_ID).orderBy("__a", "__b")
    reached = F.max("__b").over(order.rowsBetween(Window.unboundedPreceding, -1))
    inner = (
        covers.withColumn("__p", F.coalesce(reached, F.col(_FROM)))
        .filter(F.col("__a") > F.col("__p"))
        .select(_ID, "__p", F.col("__a").alias("__q"))
    )
    tails = (
        lefts.select(_ID, _FROM, "__e")
        .join(covers.groupBy(_ID).agg(F.max("__b").alias("__m")), _ID, "left")
        .select(_ID, F.coalesce("__m", _FROM).alias("__p"), F.col("__e").alias("__q"))
        .filter(F.col("__p") < F.col("__q"))
    )
    return inner.unionByName(tails)


def anti_join(
    left: Flow, right: Flow, on: tuple[str, ...], state: AntiJoinState, cache: EpochCache
) -> tuple[Flow, AntiJoinState]:
    pl = [c for c in left.events.columns if c not in HEADER]
    pr = [c for c in right.events.columns if c not in HEADER]
    ev_l = _side_events(left, 0, state.held[0], pl, cache)
    ev_r = _side_events(right, 1, state.held[1], pr, cache)

    lefts = ev_l if state.progress is None else ev_l.join(state.progress, _ID, "left")
    if state.progress is None:
        lefts = lefts.withColumn(_FROM, F.lit(None).cast("long")).withColumn(
            _STARTED, F.lit(None).cast("boolean")
        )
    lefts = cache.keep(
        lefts.withColumn(_FROM, F.coalesce(F.col(_FROM), F.col(START)))
        .withColumn(_STARTED, F.coalesce(F.col(_STARTED), F.lit(False)))
        .withColumn("__e", F.when(F.col(_OPEN), F.lit(MAX_TIME)).otherwise(F.col(END)))
    )
    rights = ev_r.filter(F.col(_OPEN) | (F.col(END) > F.col(START))).withColumn(
        "__b", F.when(F.col(_OPEN), F.lit(MAX_TIME)).otherwise(F.col(END))
    )
    active = lefts.filter(F.col(_FROM) < F.col("__e"))
    frags = _fragments(active, rights, on).join(active, _ID)

    # When each fragment's start and end became decided (null: not yet).
    c_l, c_r, before = left.ctis, right.ctis, state.latest
    tagged = cache.keep(
        c_l.withColumn("__g", F.lit(0)).unionByName(c_r.withColumn("__g", F.lit(1)))
    )
    found = collect_ctis(tagged, before)
    latest = found.latest
    frags = frags.withColumn("__p1", _after(F.col("__p"))).withColumn("__q1", _after(F.col("__q")))
    frags = frags.withColumn("__e_closed", F.when(~F.col(_OPEN), F.col(END)))
    for value, ctis, side, out in (
        ("__p1", c_r, 1, "__p_r"),
        ("__p1", c_l, 0, "__p_l"),
        ("__q1", c_r, 1, "__q_r"),
        ("__q1", c_l, 0, "__q_l"),
        ("__e_closed", c_r, 1, "__e_r"),
    ):
        frags = _first_cti_at_or_above(
            frags, value, ctis, side, before[side], out, found.found[side]
        )
    closed = F.col(_CLOSED)
    d_p = _all(F.col(_AT), F.col("__p_r"), F.least(closed, F.col("__p_l")))
    d_q_inside = _all(F.col("__q_r"), F.least(closed, F.col("__q_l")))
    d_q_at_end = F.when(F.col("__q") == F.col("__e_closed"), _all(closed, F.col("__e_r")))
    frags = frags.withColumn("__dp", d_p)
    frags = cache.keep(
        frags.withColumn("__dq", _all(F.least(d_q_inside, d_q_at_end), F.col("__dp"))).withColumn(
            "__cont", F.col(_STARTED) & (F.col("__p") == F.col(_FROM))
        )
    )

    def rows(df: DataFrame, edge: str | None, end: Column, moment: str) -> DataFrame:
        return df.select(
            F.lit(Kind.INSERT).alias(KIND),
            F.lit(edge).cast("string").alias(EDGE),
            F.col("__p").alias(START),
            end.alias(END),
            F.col(f"{moment}.pos").alias(POS),
            *pl,
        )

    dp, dq, cont = F.col("__dp"), F.col("__dq"), F.col("__cont")
    whole = dq.isNotNull() & ~cont & (dp.getField("pos") == dq.getField("pos"))
    opens = dp.isNotNull() & ~cont & ~whole
    ends = dq.isNotNull() & ~whole
    events = (
        rows(frags.filter(whole), None, F.col("__q"), "__dq")
        .unionByName(rows(frags.filter(opens), "START", F.lit(MAX_TIME), "__dp"))
        .unionByName(rows(frags.filter(ends), "END", F.col("__q"), "__dq"))
    )

    # CTIs: the minimum of both sides' latest.
    ctis = cache.keep(min_of_latest(tagged, "__g", state.latest, state.emitted))

    # Progress: a fragment waiting for its END edge, or everything below the decided horizon.
    cl, cr = F.lit(latest[0]), F.lit(latest[1])
    waiting = frags.filter(dp.isNotNull() & dq.isNull()).select(_ID, F.col("__p").alias("__w"))
    horizon = F.least(cr, F.when(F.col(_OPEN), cl).otherwise(F.col(END)))
    kept = lefts.filter(F.col(_OPEN) | ((F.col(END) > cr) & (F.col(END) > F.col(START))))
    kept = kept.join(waiting, _ID, "left")
    progress = kept.select(
        _ID,
        F.coalesce(F.col("__w"), F.greatest(F.col(_FROM), horizon)).alias(_FROM),
        F.col("__w").isNotNull().alias(_STARTED),
    ).transform(hold)
    held_left = hold(ev_l.join(progress.select(_ID), _ID, "left_semi").drop("__new", _CLOSED_NOW))
    held_right = hold(
        ev_r.filter(F.col(_OPEN) | (F.col(END) > F.least(cl, cr))).drop("__new", _CLOSED_NOW)
    )
    new_state = AntiJoinState(
        [held_left, held_right], progress, latest, max(state.emitted, min(latest))
    )
    return Flow(events, ctis, True), new_state  # undecided fragments leave as START edges
