"""Arrival-time policies (semantics §7): a stage that runs on an input's raw rows before §3.

For an input bound with :class:`~engine.settings.EventOrderingSettings` the runtime hands each
epoch's raw rows (:data:`engine.source.RAW_HEADER`, the payload, ``__pos``) to
:func:`order_epoch`, which returns rows of the same layout for :func:`engine.ingress.ingress_epoch`:

* each event gets its application time: the event-time column (or the arrival stamp ``__arr``
  with ``event_time=None``), moved by ADJUST; events dropped by a rule are removed (and counted by
  reason);
* a ``WM`` row (a generated CTI of the event's source partition, value in ``__start``) sits right
  after each event that raises the partition's CTI candidate: position of the event, sub-position
  1. Ingress takes it like a generation candidate: it raises the partition's effective CTI, and
  the input's CTI is the minimum over partitions as ever (§3.5);
* with ``over``, a ``KWM`` row (sub-position 2) after each event that raises its substream's
  watermark (value in ``__start``), from which ingress makes the key's CTI.

Per event, in arrival order, per source partition (and per key with ``over``), window functions
compute what §7 says item by item:

* ``__mb``: the largest event time seen before the event (original times of the events not
  dropped as early), from a running max over earlier rows and the state carried in;
* the early check, the late check (against ``__arr``), then the out-of-order check against the
  watermark ``__mb - tolerance``;
* the CTI candidate: without ``over`` the new watermark when the event raised it; with ``over``
  ``arrival - late_arrival_tolerance`` when the event's arrival is above every earlier arrival of
  its partition (the one bound every key, even one not seen yet, obeys: see docs/decisions.md).

State between epochs: per partition the largest event time seen and the largest arrival (driver),
and with ``over`` per (partition, key) the largest event time seen and the key's counts (a small
DataFrame, joined into the next epoch as a first row per key). No Python runs per event.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ctistream.engine.errors import QueryBuildError, unknown_column
from ctistream.engine.events import EventShape
from ctistream.engine.rows import (
    EDGE,
    END,
    KIND,
    POS,
    START,
    EpochCache,
    Kind,
    checkpoint,
    pos_literal,
    saturating_sub,
)
from ctistream.engine.settings import AdvanceTimeSettings, EventOrderingSettings, OrderingAction
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, iso_time, to_ticks
from ctistream.engine.temporal import saturating_sub as minus
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StructType,
    TimestampType,
)

__all__ = [
    "ADJUST_REASONS",
    "DROP_REASONS",
    "OrderingState",
    "check_ordering",
    "complete_metrics",
    "order_epoch",
    "watermark_delay",
]

#: Why an event was dropped / moved. ``cti-violation`` is §3's (explicit or imported CTIs).
DROP_REASONS = ("cti-violation", "early", "late", "out-of-order", "no-event-time")
ADJUST_REASONS = ("cti-violation", "late", "out-of-order")

_P = "__part"
_STATE = "__state"  # a row carrying a key's state into the epoch (``over`` only)

# Per-key counts kept in the key state, and the condition each counts on a decided event row.
_KEY_COUNTS = {
    "__k_in": "events_in",
    "__k_d_early": "dropped:early",
    "__k_d_late": "dropped:late",
    "__k_d_ooo": "dropped:out-of-order",
    "__k_d_time": "dropped:no-event-time",
    "__k_a_late": "adjusted:late",
    "__k_a_ooo": "adjusted:out-of-order",
}


@dataclass
class OrderingState:
    """What one ordered input carries from one epoch to the next."""

    #: per partition: the largest event time seen (not early), without ``over``
    max_seen: list[int | None]
    #: per partition: the largest arrival of an event
    max_arrival: list[int | None]
    #: with ``over``: per (partition, key) ``__m`` (largest event time seen) and the counts
    keys: DataFrame | None = None
    #: the input's §7 counts: ``dropped:<reason>``, ``adjusted:<reason>``
    counts: Counter = field(default_factory=Counter)

    @classmethod
    def initial(cls, partitions: int) -> OrderingState:
        return cls([None] * partitions, [None] * partitions)


def check_ordering(
    name: str,
    ordering: EventOrderingSettings,
    shape: EventShape,
    settings: AdvanceTimeSettings | None,
    schema: StructType,
) -> None:
    """Refuse, when the query is built, what ordering cannot do."""
    if shape is not EventShape.POINT:
        raise QueryBuildError(
            f"input {name!r}: EventOrderingSettings apply to point events; got an input bound as "
            f"{shape.value}. An event time places a point: its time is moved, dropped or kept. "
            "Fix: bind the input as EventShape.POINT (then alter_event_duration for intervals), "
            "or use AdvanceTimeSettings for interval and edge inputs"
        )
    if settings is not None and settings.generation is not None:
        raise QueryBuildError(
            f"input {name!r} has both EventOrderingSettings and AdvanceTimeSettings with "
            "generation; expected one source of generated CTIs: the ordering's watermark is this "
            "input's generated CTI. Fix: drop the generation settings (advance time settings with "
            "import_settings only are fine), or drop ordering"
        )
    fields = {f.name: f.dataType for f in schema.fields}
    column = ordering.event_time
    if column is not None:
        kind = fields.get(column)
        if kind is None:
            raise unknown_column(
                f"input {name!r}: EventOrderingSettings(event_time={column!r})",
                column,
                list(fields),
                "the input's payload (or give event_time=None to use arrival time)",
            )
        if not isinstance(kind, TimestampType | LongType | IntegerType | ShortType | ByteType):
            raise QueryBuildError(
                f"input {name!r}: event_time column {column!r} is {kind.simpleString()}; expected "
                "timestamp or an integer of ticks (1 tick = 1 µs since the epoch, UTC). Fix: "
                "give the input a schema with that column as timestamp or bigint"
            )
    if ordering.over is not None:
        kind = fields.get(ordering.over)
        if kind is None:
            raise unknown_column(
                f"input {name!r}: EventOrderingSettings(over={ordering.over!r})",
                ordering.over,
                list(fields),
                "the input's payload",
            )
        if isinstance(kind, MapType):
            raise QueryBuildError(
                f"input {name!r}: over column {ordering.over!r} is a map; expected a column "
                "that can be grouped on (string, number, ...). Fix: key substreams by a scalar"
            )


def _event_time(raw: DataFrame, column: str) -> Column:
    if isinstance(raw.schema[column].dataType, TimestampType):
        return F.unix_micros(F.col(column))
    return F.col(column).cast("long")


def _per_partition(values: list[int | None]) -> Column:
    """The value of the row's partition from a driver-side list (null where None)."""
    return F.element_at(F.array(*[F.lit(v).cast("long") for v in values]), F.col(_P) + 1)


def _decided(raw: DataFrame, ordering: EventOrderingSettings, state: OrderingState) -> DataFrame:
    """Every event of the epoch with what §7 decides for it (and, with ``over``, one state row
    per key seen before, ``__state`` true)."""
    c = F.col
    by_arrival = ordering.event_time is None
    # With arrival time as application time the tolerances and the window are disregarded.
    tolerance = 0 if by_arrival else ordering.out_of_order_ticks
    late = None if by_arrival else ordering.late_ticks
    early = None if by_arrival else ordering.early_ticks
    drop = ordering.action is OrderingAction.DROP
    arr = c("__arr")
    over = ordering.over
    group = [_P] if over is None else [_P, over]

    ev = raw.filter(c(KIND) == Kind.INSERT)
    t = arr if by_arrival else _event_time(raw, ordering.event_time)
    ev = ev.withColumn("__t", t).withColumn(_STATE, F.lit(False))
    if over is not None and state.keys is not None:
        carried = state.keys.select(
            F.lit(Kind.STATE).alias(KIND),
            _P,
            over,
            c("__m").alias("__t"),
            pos_literal(MIN_TIME, 0, MIN_TIME).alias(POS),
            F.lit(True).alias(_STATE),
            *_KEY_COUNTS,
        )
        ev = ev.unionByName(carried, allowMissingColumns=True)

    before = Window.partitionBy(*group).orderBy(POS).rowsBetween(Window.unboundedPreceding, -1)
    ok = ~c(_STATE) & c("__t").isNotNull() & ~c("__t").isin(MIN_TIME, MAX_TIME)
    is_early = F.lit(False) if early is None else ok & (c("__t") > saturating_sub(arr, -early))
    # Max event time seen takes the original time of every event not dropped as early.
    seen = F.when(c(_STATE), c("__t")).when(ok & ~is_early, c("__t"))
    d = ev.withColumn("__ok", ok).withColumn("__early", is_early).withColumn("__seen", seen)
    mb = F.max("__seen").over(before)
    if over is None:
        mb = F.greatest(_per_partition(state.max_seen), mb)
    d = d.withColumn("__mb", mb).withColumn("__ma", F.greatest(c("__mb"), c("__seen")))
    d = d.withColumn("__wb", saturating_sub(c("__mb"), tolerance))  # the watermark before

    go = c("__ok") & ~c("__early")
    if late is None:
        is_late, t1 = F.lit(False), c("__t")
    else:
        is_late = go & (c("__t") < saturating_sub(arr, late))
        moved = F.lit(None).cast("long") if drop else saturating_sub(arr, late)
        t1 = F.when(is_late, moved).otherwise(c("__t"))
    d = d.withColumn("__late", is_late).withColumn("__t1", F.when(go, t1))
    is_ooo = c("__t1").isNotNull() & c("__wb").isNotNull() & (c("__t1") < c("__wb"))
    moved = F.lit(None).cast("long") if drop else c("__wb")
    d = d.withColumn("__ooo", is_ooo).withColumn("__as", F.when(is_ooo, moved).otherwise(c("__t1")))
    d = d.withColumn("__w", saturating_sub(c("__ma"), tolerance))  # the watermark after

    if over is None:
        raised = c("__ma").isNotNull() & (c("__mb").isNull() | (c("__ma") > c("__mb")))
        d = d.withColumn("__wm", F.when(~c(_STATE) & raised, c("__w")))
    else:
        in_part = Window.partitionBy(_P).orderBy(POS).rowsBetween(Window.unboundedPreceding, -1)
        prev = F.greatest(
            _per_partition(state.max_arrival), F.max(F.when(~c(_STATE), arr)).over(in_part)
        )
        rises = ~c(_STATE) & (prev.isNull() | (arr > prev))
        d = d.withColumn("__wm", F.when(rises, saturating_sub(arr, ordering.late_ticks)))

    late_d, ooo_d = (c("__late"), c("__ooo")) if drop else (F.lit(False), F.lit(False))
    late_a, ooo_a = (F.lit(False), F.lit(False)) if drop else (c("__late"), c("__ooo"))
    flags = {
        "events_in": F.lit(True),
        "dropped:early": c("__early"),
        "dropped:late": late_d,
        "dropped:out-of-order": ooo_d,
        "dropped:no-event-time": ~c("__ok"),
        "adjusted:late": late_a,
        "adjusted:out-of-order": ooo_a,
    }
    for col, what in _KEY_COUNTS.items():
        one = F.when(flags[what], F.lit(1)).otherwise(F.lit(0)).cast("long")
        carried_n = F.when(c(_STATE), c(col)).otherwise(one) if col in d.columns else one
        d = d.withColumn(col, carried_n)
    action = (
        F.when(~c("__ok"), "drop:no-event-time")
        .when(c("__early"), "drop:early")
        .when(late_d, "drop:late")
        .when(ooo_d, "drop:out-of-order")
        .when(late_a & ooo_a, "adjust:late,out-of-order")
        .when(late_a, "adjust:late")
        .when(ooo_a, "adjust:out-of-order")
        .otherwise("ok")
    )
    return d.withColumn("__action", action)


def order_epoch(
    ordering: EventOrderingSettings,
    raw: DataFrame,
    state: OrderingState,
    cache: EpochCache,
    trace: list | None = None,
    decided: Callable[[DataFrame], None] | None = None,
    diagnosed: bool = False,
) -> tuple[DataFrame, OrderingState]:
    """Apply §7 to one epoch of an input's raw rows; return rows for §3 and the new state.

    ``diagnosed``: the input's diagnostic stream is read (engine.physical.InputScan): the rows
    also hold a ``DIAG`` row per decision that dropped or moved an event (:func:`_diagnosed`).

    ``trace``: if a list, every event's decision is appended to it, in arrival order, as a dict
    (``pos``, ``partition``, ``key``, ``event_time``, ``arrival``, ``action``, ``start``,
    ``watermark``, ``cti``): one more Spark job, for tests and debugging.
    ``decided``: called with the same decisions as a lazy DataFrame (:func:`_decisions`; no
    Spark job), for a traced run's timeline (:meth:`engine.observer.RunObserver.ordering`).
    """
    c = F.col
    over = ordering.over
    d = cache.keep(_decided(raw, ordering, state))
    events = d.filter(~c(_STATE))

    kept = events.filter(c("__as").isNotNull())
    kept = kept.withColumn(START, c("__as")).withColumn(END, c("__as") + 1).select(*raw.columns)
    marks = _marks(events, c("__wm").isNotNull(), Kind.WM, c("__wm"), 1)
    rows = raw.filter(c(KIND) != Kind.INSERT).unionByName(kept).unionByName(marks, True)
    if diagnosed:
        rows = rows.unionByName(_diagnosed(events, raw.columns), True)
    if over is not None:
        # A KWM row after each event that raises its substream's watermark (sub-position 2, after
        # the partition's WM row): ingress makes the key's CTI from it (engine.ingress).
        rose = c("__ma").isNotNull() & (c("__mb").isNull() | (c("__ma") > c("__mb")))
        key_marks = _marks(events, rose & c(over).isNotNull(), Kind.KWM, c("__w"), 2, over)
        rows = rows.unionByName(key_marks, True)

    per_part = events.groupBy(_P).agg(
        F.max("__seen").alias("m"),
        F.max("__arr").alias("a"),
        *[F.sum(col).alias(col) for col in _KEY_COUNTS],
    )
    new = OrderingState(list(state.max_seen), list(state.max_arrival), state.keys)
    new.counts = Counter(state.counts)
    for r in per_part.collect():
        p = r[_P]
        if r["m"] is not None:
            new.max_seen[p] = r["m"] if new.max_seen[p] is None else max(new.max_seen[p], r["m"])
        if r["a"] is not None:
            old = new.max_arrival[p]
            new.max_arrival[p] = r["a"] if old is None else max(old, r["a"])
        for col, what in _KEY_COUNTS.items():
            if what != "events_in":
                new.counts[what] += r[col]
    if over is not None:
        new.keys = checkpoint(
            d.groupBy(_P, over).agg(
                F.max("__seen").alias("__m"), *[F.sum(col).alias(col) for col in _KEY_COUNTS]
            )
        )
    if decided is not None:
        decided(_decisions(events, over))
    if trace is not None:
        for r in _decisions(events, over).orderBy(POS).collect():
            d = r.asDict()
            trace.append({"pos": tuple(d.pop(POS)), **d})
    return rows, new


def _marks(
    events: DataFrame, when: Column, kind: str, value: Column, sub: int, *extra: str
) -> DataFrame:
    """A ``kind`` row with ``value`` right after each event where ``when`` holds: the event's
    position with sub-position ``sub``."""
    c = F.col
    after = F.struct(
        *[c(f"{POS}.{n}").alias(n) for n in ("arr", "inp", "off", "part")],
        F.lit(sub).cast("int").alias("sub"),
    )
    return events.filter(when).select(
        F.lit(kind).alias(KIND),
        value.alias(START),
        "__arr",
        "__inp",
        "__off",
        _P,
        after.alias(POS),
        *extra,
    )


def _diagnosed(events: DataFrame, columns: list[str]) -> DataFrame:
    """A ``DIAG`` row per event §7 dropped and per rule that moved one, for the diagnostic
    stream (:mod:`engine.diagnostics`): ``__edge`` ``dropped:<reason>`` / ``adjusted:<reason>``,
    ``__start`` the event time, ``__end`` where the rule moved it (null when dropped), at the
    event's position with sub-position -2 (the late rule) or -1 (the other rules): before the
    event, so the ingress scan gives it the CTI in force when the event arrived."""
    c = F.col
    action = c("__action")
    both = action == "adjust:late,out-of-order"
    rules = [
        (action.startswith("drop:"), F.regexp_replace(action, "^drop:", "dropped:"), None, -1),
        ((action == "adjust:late") | both, F.lit("adjusted:late"), c("__t1"), -2),
        ((action == "adjust:out-of-order") | both, F.lit("adjusted:out-of-order"), c("__as"), -1),
    ]
    out = None
    for when, what, new, sub in rules:
        at = F.struct(
            *[c(f"{POS}.{n}").alias(n) for n in ("arr", "inp", "off", "part")],
            F.lit(sub).cast("int").alias("sub"),
        )
        given = {
            KIND: F.lit(Kind.DIAG),
            EDGE: what,
            START: c("__t"),
            END: F.lit(None).cast(LongType()) if new is None else new,
            POS: at,
        }
        made = events.filter(when).select(*[given.get(k, c(f"`{k}`")).alias(k) for k in columns])
        out = made if out is None else out.unionByName(made)
    assert out is not None
    return out


def _decisions(events: DataFrame, over: str | None) -> DataFrame:
    """What §7 decided for each event of the epoch (lazy): ``__pos``, ``partition``, ``key``
    (the ``over`` value, or null), ``event_time`` (null when the event has none), ``arrival``,
    ``action`` (``ok``, ``drop:<reason>``, ``adjust:<reason>[,<reason>]``), ``start`` (the
    application time it leaves with; null when dropped), ``watermark`` (its substream's, after
    it) and ``cti`` (the CTI candidate right after it, or null)."""
    c = F.col
    key = c(over) if over is not None else F.lit(None)
    return events.select(
        POS,
        c(_P).alias("partition"),
        key.alias("key"),
        c("__t").alias("event_time"),
        c("__arr").alias("arrival"),
        c("__action").alias("action"),
        c("__as").alias("start"),
        c("__w").alias("watermark"),
        c("__wm").alias("cti"),
    )


def watermark_delay(cti: int, now: datetime | None = None) -> timedelta | None:
    """Wall clock minus a CTI (§8), or None while the CTI is not a time (``-inf``/``+inf``)."""
    if cti in (MIN_TIME, MAX_TIME):
        return None
    clock = to_ticks(now or datetime.now(UTC))
    return timedelta(microseconds=clock - cti)


def complete_metrics(
    m: dict[str, Any],
    ordering: EventOrderingSettings | None,
    state: OrderingState | None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Finish one input's metrics (§8): ``m`` holds §3's counts (``dropped``/``adjusted`` are CTI
    violations there, ``events_in`` the events that reached §3) and the input's ``cti_ticks``,
    which is shown beside it as ``cti`` (ISO time, ``-inf``, ``+inf``).

    Adds ``dropped_by_reason`` / ``adjusted_by_reason`` (totals become their sums: ``adjusted``
    counts adjustments, so an event moved by the late and the out-of-order rule counts twice),
    ``watermark_delay`` and, with ``over``, ``keys``: per key its ``events_in``, counts by reason
    (§7's reasons; CTI violations are counted per input only), ``watermark`` (the smallest of
    its partitions' watermarks, ISO; ``watermark_ticks`` in ticks) and ``watermark_delay``.
    Reading the keys runs a Spark job.
    """
    counts = state.counts if state is not None else Counter()
    dropped = {"cti-violation": m.get("dropped", 0)}
    dropped |= {r: counts[f"dropped:{r}"] for r in DROP_REASONS[1:]}
    adjusted = {"cti-violation": m.get("adjusted", 0)}
    adjusted |= {r: counts[f"adjusted:{r}"] for r in ADJUST_REASONS[1:]}
    # §3 saw only the events §7 kept.
    m["events_in"] = m.get("events_in", 0) + sum(dropped.values()) - dropped["cti-violation"]
    m["dropped"], m["adjusted"] = sum(dropped.values()), sum(adjusted.values())
    m["dropped_by_reason"], m["adjusted_by_reason"] = dropped, adjusted
    cti = m.pop("cti_ticks", MIN_TIME)
    m["cti"], m["cti_ticks"] = iso_time(cti), cti
    m["watermark_delay"] = watermark_delay(cti, now)
    if ordering is None or ordering.over is None or state is None:
        return m
    keys: dict[Any, dict[str, Any]] = {}
    if state.keys is not None:
        tolerance = ordering.out_of_order_ticks
        per_key = state.keys.groupBy(ordering.over).agg(
            F.min("__m").alias("__m"), *[F.sum(col).alias(col) for col in _KEY_COUNTS]
        )
        for r in per_key.collect():
            w = None if r["__m"] is None else minus(r["__m"], tolerance)
            keys[r[ordering.over]] = {
                "events_in": r["__k_in"],
                "dropped_by_reason": {
                    x: r[col]
                    for col, what in _KEY_COUNTS.items()
                    if what.startswith("dropped:")
                    for x in [what.removeprefix("dropped:")]
                },
                "adjusted_by_reason": {
                    x: r[col]
                    for col, what in _KEY_COUNTS.items()
                    if what.startswith("adjusted:")
                    for x in [what.removeprefix("adjusted:")]
                },
                "watermark": None if w is None else iso_time(w),
                "watermark_ticks": w,
                "watermark_delay": None if w is None else watermark_delay(w, now),
            }
    m["keys"] = keys
    return m
