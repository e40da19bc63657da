"""``clip_event_duration`` (semantics §5, StreamInsight's ClipEventDuration): each left event's
end is cut to the start of the first right event with equal keys (nulls never match) that
starts strictly after the left start and before the left end; the payload is the left payload;
the output CTI is the minimum of both sides' latest CTIs.

When an end is final (docs/decisions.md, "Operators"). A right event counts by its start
alone. With ``cL``/``cR`` the sides' latest CTIs, a left event's candidate end is the smaller of
its end (when known) and the smallest matching right start above its start received so far; it
only decreases. It is final once it is at most ``cR`` (later right events start at or after
``cR``) and the left end is known, or the candidate is a right start at most ``cL`` (an open left
edge ends at or after ``cL``). A left event leaves where it arrives: an interval when its end is
final there, else a START edge, and its END edge where the end becomes final. The rule is
applied after every position group, as the join's and the anti-join's.

Per epoch, one Spark plan: each left event (held and new, its END edge matched as in the join)
meets the matching right starts above its start (held and new: a join and a minimum per left
event, with the moment that start arrived); the moment the end becomes final is the latest of
the moments its conditions became true (each is monotone), the earliest of the two ways: the
candidate reached its final value, ``cR`` reached it (the first right CTI at or above it,
searched as the anti-join does) and the end became known, or ``cL`` reached it. State: the left
events whose end is not final and the smallest right start each has met (``__clip``), and the
right starts above ``cL`` (only they can clip a later left event, which starts at or after
``cL``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctistream.engine.ctis import min_of_latest
from ctistream.engine.operators import join as join_module
from ctistream.engine.operators.anti_join import _all
from ctistream.engine.operators.join import (
    _AT,
    _CLOSED,
    _CLOSED_NOW,
    _ID,
    _OPEN,
    _first_cti_at_or_above,
    _moment,
    _side_events,
    collect_ctis,
)
from ctistream.engine.rows import EDGE, END, HEADER, KIND, POS, START, EpochCache, Flow, Kind, hold
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["ClipState", "clip_event_duration"]

_CLIP = "__clip"  # struct(r: the smallest matching right start above the left start, at: when)


@dataclass
class ClipState:
    #: the left events whose end is not final, and the right starts above the left CTI
    held: list[DataFrame | None] = field(default_factory=lambda: [None, None])
    progress: DataFrame | None = None  # __id, __clip of the held left events
    latest: list[int] = field(default_factory=lambda: [MIN_TIME, MIN_TIME])
    emitted: int = MIN_TIME


def _rights(right: Flow, held: DataFrame | None, on: tuple[str, ...]) -> DataFrame:
    """The right starts (held and new): ``start``, the moment it arrived and the keys."""
    new = right.events.filter(~F.col(EDGE).eqNullSafe("END")).select(
        START, _moment(F.col(POS), 1, 0).alias(_AT), *on
    )
    return new if held is None else held.unionByName(new)


def clip_event_duration(
    left: Flow, right: Flow, on: tuple[str, ...], state: ClipState, cache: EpochCache
) -> tuple[Flow, ClipState]:
    pl = [c for c in left.events.columns if c not in HEADER]
    ev_l = _side_events(left, 0, state.held[0], pl, cache)
    rights = cache.keep(_rights(right, state.held[1], on))

    # The smallest matching right start above each left start (and when it arrived), with the
    # one met in earlier epochs.
    # (new column identities: both sides may come from one plan, a stream clipped by itself)
    L, R = ev_l.alias("l"), rights.toDF(*rights.columns).alias("r")
    cond = [F.col(f"l.{k}") == F.col(f"r.{k}") for k in on]
    cond.append(F.col(f"r.{START}") > F.col(f"l.{START}"))
    met = (
        L.join(R, cond)
        .groupBy(F.col(f"l.{_ID}").alias(_ID))
        .agg(F.min(F.struct(F.col(f"r.{START}").alias("r"), F.col(f"r.{_AT}").alias("at"))))
        .toDF(_ID, "__met")
    )
    lefts = ev_l.join(met, _ID, "left")
    if state.progress is not None:
        lefts = lefts.join(state.progress, _ID, "left")
    else:
        lefts = lefts.withColumn(_CLIP, F.lit(None).cast(met.schema["__met"].dataType))
    clip = F.least(F.col(_CLIP), F.col("__met"))  # (least skips nulls)
    lefts = lefts.withColumn(_CLIP, clip).drop("__met")
    closed = ~F.col(_OPEN)
    r0 = F.col(f"{_CLIP}.r")
    lefts = lefts.withColumn("__v", F.least(F.when(closed, F.col(END)), r0))

    c_l, c_r, before = left.ctis, right.ctis, state.latest
    tagged = cache.keep(
        c_l.withColumn("__g", F.lit(0)).unionByName(c_r.withColumn("__g", F.lit(1)))
    )
    # (the module's limit as it is now: a test lowers it to take the sorting search)
    found = collect_ctis(tagged, before, limit=join_module.SEARCH_ON_DRIVER)
    latest = found.latest
    for ctis, side, out in ((c_r, 1, "__v_r"), (c_l, 0, "__v_l")):
        lefts = _first_cti_at_or_above(
            lefts, "__v", ctis, side, before[side], out, found.found[side]
        )
    v = F.col("__v")
    # when the candidate reached its final value: the end became known, or that start arrived
    reached = F.greatest(
        F.col(_AT),
        F.least(
            F.when(closed & (F.col(END) == v), F.col(_CLOSED)),
            F.when(r0 == v, F.col(f"{_CLIP}.at")),
        ),
    )
    by_end = F.when(closed, _all(reached, F.col(_CLOSED), F.col("__v_r")))
    by_start = F.when(r0 == v, _all(reached, F.col("__v_r"), F.col("__v_l")))
    lefts = cache.keep(lefts.withColumn("__final", F.least(by_end, by_start)))

    def rows(df: DataFrame, edge: str | None, end: Column, moment: str) -> DataFrame:
        return df.select(
            F.lit(Kind.INSERT).alias(KIND),
            F.lit(edge).cast("string").alias(EDGE),
            F.col(START),
            end.alias(END),
            F.col(f"{moment}.pos").alias(POS),
            *pl,
        )

    final, new = F.col("__final"), F.col("__new")
    whole = new & final.isNotNull() & (final.getField("pos") == F.col(f"{_AT}.pos"))
    events = (
        rows(lefts.filter(whole), None, v, "__final")
        .unionByName(rows(lefts.filter(new & ~whole), "START", F.lit(MAX_TIME), _AT))
        .unionByName(rows(lefts.filter(final.isNotNull() & ~whole), "END", v, "__final"))
    )

    ctis = cache.keep(min_of_latest(tagged, "__g", state.latest, state.emitted))

    waiting = lefts.filter(final.isNull())
    progress = waiting.select(_ID, _CLIP).transform(hold)
    held_left = hold(ev_l.join(progress.select(_ID), _ID, "left_semi").drop("__new", _CLOSED_NOW))
    held_right = hold(rights.filter(F.col(START) > F.lit(latest[0])))
    new_state = ClipState(
        [held_left, held_right], progress, latest, max(state.emitted, min(latest))
    )
    return Flow(events, ctis, True), new_state  # ends not yet final leave as START edges
