"""The CTI rules that cross operators, each stated once, in Python over the driver's values and
next to it as the Spark form every epoch's plan uses (tests/engine/test_cti_rules.py checks
that the two agree).

* emit when it rises (semantics §2, §5: "An output CTI is emitted only when it increases"):
  :func:`risen`, :func:`rising` and :func:`rising_rows`;
* min of latest (§3.5, an input's partitions; §5, union, join, anti-join), keyed or not:
  :func:`min_of_latest_on_driver`, :func:`min_of_latest`, :func:`keyed_min_of_latest` (with
  :func:`keyed_rises`, the keyed CTIs' rise rule);
* the first CTI at or above a time (§2: a CTI ``c`` commits everything strictly before ``c``, so
  what is final at time ``t`` is final at the first CTI ``>= t``): :func:`first_at_or_above` and
  :func:`first_at_or_above_rows`.

Rows are laid out as :mod:`engine.rows` describes: CTIs are ``__pos``, ``__c``, strictly
increasing in both.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np
from ctistream.engine.rows import CTI, KEY, POS, checkpoint, sql_names
from ctistream.engine.temporal import MIN_TIME
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.window import WindowSpec

__all__ = [
    "first_at_or_above",
    "first_at_or_above_rows",
    "keyed_min_of_latest",
    "keyed_rises",
    "latest_of",
    "min_of_latest",
    "min_of_latest_on_driver",
    "risen",
    "rising",
    "rising_rows",
]

_T = TypeVar("_T")


# -- emit when it rises ---------------------------------------------------------------------------


def risen(c: int, emitted: int) -> int:
    """The CTI an operator emits when its CTI becomes ``c`` after it emitted ``emitted``:
    ``c`` if it rises above ``emitted``, else ``MIN_TIME`` (nothing; semantics §5, "An output
    CTI is emitted only when it increases"). On the driver: an epoch's :attr:`Flow.latest`."""
    return c if c > emitted else MIN_TIME


def rising(ctis: Iterable[tuple[_T, int]], emitted: int) -> list[tuple[_T, int]]:
    """The ``(position, CTI)`` pairs, in position order, that an operator emits: each CTI above
    ``emitted`` (the last emitted before them) and above every earlier one (semantics §5: "An
    output CTI is emitted only when it increases"). The driver's form of :func:`rising_rows`."""
    high, out = emitted, []
    for pos, c in ctis:
        if c > high:
            out.append((pos, c))
        high = max(high, c)
    return out


def rising_rows(ctis: DataFrame, emitted: int) -> DataFrame:
    """:func:`rising` in Spark: the rows of ``ctis`` (``__pos``, ``__c``, any order) whose CTI is
    above ``emitted`` and above every CTI at an earlier position."""
    before = Window.orderBy(POS).rowsBetween(Window.unboundedPreceding, -1)
    return (
        ctis.withColumn("__prev", F.greatest(F.lit(emitted), F.max(CTI).over(before)))
        .filter(F.col(CTI) > F.col("__prev"))
        .drop("__prev")
    )


# -- min of latest --------------------------------------------------------------------------------


def latest_of(which: Column, value: Column, initial: int, frame: WindowSpec) -> Column:
    """One source's latest CTI, for the min of latest: the last ``value`` of the rows where
    ``which`` holds (the source's rows) in the running ``frame``, or ``initial`` (its CTI before
    the epoch) before its first row."""
    return F.coalesce(F.last(F.when(which, value), ignorenulls=True).over(frame), F.lit(initial))


def min_of_latest(rows: DataFrame, group: str, initial: list[int], emitted: int) -> DataFrame:
    """Merge CTI sources: the minimum over groups of each group's latest CTI (semantics §3.5,
    an input's partitions; §5, union, join, anti-join: "min over inputs of their latest CTI").

    ``rows`` has ``group`` (0..n-1), ``__pos`` and ``__c`` (each group's CTI rising at that
    position); ``initial[g]`` is group g's CTI before this epoch and ``emitted`` the merged CTI
    already emitted. Returns ``__pos, __c`` where the merged CTI increases; when several groups
    rise at the same position, only the value after all of them (then :func:`rising_rows`).
    :func:`min_of_latest_on_driver` is the same rule over rows the driver holds.
    """
    n = len(initial)
    if n == 1:
        if initial[0] >= emitted:  # every row rises above initial[0]
            # (and no literal that changes every epoch, which Spark would compile again)
            return rows.selectExpr(POS, CTI)  # names as SQL text: no call per column
        return rows.filter(F.col(CTI) > F.lit(emitted)).selectExpr(POS, CTI)
    order = Window.orderBy(POS, group)
    running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    latest = [latest_of(F.col(group) == g, F.col(CTI), initial[g], running) for g in range(n)]
    merged = rows.withColumn("__m", F.least(*latest)).withColumn("__next", F.lead(POS).over(order))
    last_of_pos = merged.filter(F.col("__next").isNull() | (F.col("__next") != F.col(POS)))
    return rising_rows(last_of_pos.select(POS, F.col("__m").alias(CTI)), emitted)


def min_of_latest_on_driver(
    rows: Iterable[tuple[tuple, int, int]], initial: list[int], emitted: int
) -> list[tuple[tuple, int]]:
    """:func:`min_of_latest` over rows the driver holds, ``(position, group, CTI)`` in any
    order: ``(position, CTI)`` where the merged CTI increases."""
    ordered = sorted(rows, key=lambda r: (r[0], r[1]))
    latest, merged = list(initial), []
    for i, (pos, g, c) in enumerate(ordered):
        latest[g] = c
        if i + 1 < len(ordered) and ordered[i + 1][0] == pos:
            continue  # several groups rise at one position: only the value after all of them
        merged.append((pos, min(latest)))
    return rising(merged, emitted)


def keyed_rises(
    candidates: DataFrame, ctis: DataFrame, emitted: int, seen: DataFrame | None
) -> tuple[DataFrame, DataFrame]:
    """The keyed CTIs a stream emits from its candidates of one epoch.

    ``candidates`` (``__pos``, ``__kk``, ``__c``) rise or stay per key in position order. One is
    emitted when it is above the stream's CTI at its position (``ctis`` of the epoch, one at the
    same position counting as before it; ``emitted`` the CTI before the epoch) and above every
    earlier candidate of its key (``seen``: per key, the largest of earlier epochs). The earlier
    candidates stand in for the earlier emitted keyed CTIs: a candidate above the last emitted
    one but not emitted was below the stream's CTI, which only rises. Returns the rows and the
    new ``seen`` (lazy: checkpoint it to keep it).
    """
    key_type = candidates.schema[KEY].dataType
    both = ctis.select(POS, F.lit(None).cast(key_type).alias(KEY), CTI, F.lit(0).alias("__typ"))
    both = both.unionByName(candidates.select(POS, KEY, CTI, F.lit(1).alias("__typ")))
    upto = Window.orderBy(POS, "__typ").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    stream_cti = F.max(F.when(F.col("__typ") == 0, F.col(CTI))).over(upto)
    rows = both.withColumn("__g", F.greatest(F.lit(emitted), stream_cti))
    rows = rows.filter(F.col("__typ") == 1)
    if seen is not None:
        rows = rows.join(seen.withColumnRenamed(CTI, "__s"), KEY, "left")
    else:
        rows = rows.withColumn("__s", F.lit(None).cast("long"))
    before = Window.partitionBy(KEY).orderBy(POS).rowsBetween(Window.unboundedPreceding, -1)
    bar = F.greatest(F.col("__g"), F.col("__s"), F.max(CTI).over(before))
    out = rows.withColumn("__bar", bar).filter(F.col(CTI) > F.col("__bar")).select(POS, KEY, CTI)
    fresh = candidates.select(KEY, CTI)
    if seen is not None:
        fresh = seen.unionByName(fresh)
    return out, fresh.groupBy(KEY).agg(F.max(CTI).alias(CTI))


def keyed_min_of_latest(
    tagged: DataFrame,
    keyed: list[DataFrame | None],
    initial: list[int],
    ctis: DataFrame,
    emitted: int,
    state: DataFrame | None,
) -> tuple[DataFrame, DataFrame]:
    """The keyed CTIs of an operator with several inputs (union, join) from its inputs' CTIs.

    ``tagged``: the inputs' CTIs of the epoch (``group`` ``__g`` = input index, ``__pos``,
    ``__c``), ``initial[g]`` input g's latest CTI before the epoch; ``keyed[g]``: input g's keyed
    CTIs, None for an input without substreams. At each keyed CTI of any input, a candidate for
    its key ``k``: the minimum over inputs of ``k``'s CTI there (the larger of the input's
    latest CTI and latest keyed CTI of ``k``; an input without substreams: its latest CTI). Rows
    at one position count together. Candidates go through :func:`keyed_rises` against the
    operator's own ``ctis`` (``emitted`` before the epoch). ``state``: per key (``__kk``) each
    input's largest keyed CTI ``__k<g>`` and the largest candidate ``__c`` of earlier epochs.
    Returns the keyed CTIs and the new state (checkpointed: a small job).
    """
    n = len(initial)
    key_type = next(k for k in keyed if k is not None).schema[KEY].dataType
    rows = tagged.select(
        "__g", POS, CTI, F.lit(None).cast(key_type).alias(KEY), F.lit(0).alias("__t")
    )
    for g, k in enumerate(keyed):
        if k is not None:
            rows = rows.unionByName(
                k.select(F.lit(g).alias("__g"), POS, CTI, KEY, F.lit(1).alias("__t"))
            )
    # RANGE frames: rows at one position (and of one kind) see each other
    upto = Window.orderBy(POS, "__t").rangeBetween(Window.unboundedPreceding, Window.currentRow)
    for g in range(n):
        own = (F.col("__g") == g) & (F.col("__t") == 0)
        rows = rows.withColumn(f"__l{g}", latest_of(own, F.col(CTI), initial[g], upto))
    rows = rows.filter(F.col("__t") == 1)
    if state is not None:
        rows = rows.join(state.withColumnRenamed(CTI, "__seen"), KEY, "left")
    by_key = Window.partitionBy(KEY).orderBy(POS).rangeBetween(Window.unboundedPreceding, 0)
    own = []
    for g in range(n):
        if keyed[g] is None:
            own.append(F.col(f"__l{g}"))
            continue
        mine = F.max(F.when(F.col("__g") == g, F.col(CTI))).over(by_key)
        if state is not None:
            mine = F.greatest(mine, F.col(f"__k{g}"))
        own.append(F.greatest(F.col(f"__l{g}"), mine))
    candidates = rows.select(POS, KEY, F.least(*own).alias(CTI)).dropDuplicates([POS, KEY])
    seen = state.select(KEY, CTI) if state is not None else None
    out, _ = keyed_rises(candidates, ctis, emitted, seen)
    per_input = [F.max(F.when(F.col("__g") == g, F.col("__kc"))).alias(f"__k{g}") for g in range(n)]
    fresh = None
    for g, k in enumerate(keyed):
        if k is not None:
            part = k.select(KEY, F.lit(g).alias("__g"), F.col(CTI).alias("__kc"))
            fresh = part if fresh is None else fresh.unionByName(part)
    assert fresh is not None
    new = (
        fresh.groupBy(KEY)
        .agg(*per_input)
        .join(candidates.groupBy(KEY).agg(F.max(CTI).alias(CTI)), KEY, "full")
    )
    if state is not None:
        new = (
            state.unionByName(new)
            .groupBy(KEY)
            .agg(*[F.max(f"__k{g}").alias(f"__k{g}") for g in range(n)], F.max(CTI).alias(CTI))
        )
    return out, checkpoint(new)


# -- the first CTI at or above a time -------------------------------------------------------------


def first_at_or_above(values: Any, times: Any) -> Any:
    """Per time of ``times``, the index in ``values`` (CTIs in increasing order) of the first CTI
    at or above it, ``len(values)`` where none is (semantics §2: what is final at ``t`` is final
    at the first CTI ``>= t``): ``values`` a numpy array and ``times`` an array (in Arrow and
    pandas functions on executors), or one ``int`` time in a list (on the driver).
    :func:`first_at_or_above_rows` is the same rule in Spark."""
    if isinstance(times, int):
        return bisect_left(values, times)
    return np.searchsorted(values, times, side="left")


def first_at_or_above_rows(
    rows: DataFrame, ctis: DataFrame, key: str | None, name: str
) -> DataFrame:
    """:func:`first_at_or_above` in Spark: ``rows`` with column ``name``, the position of the
    first CTI (of ``ctis``, per ``key`` value if given) with value >= the row's ``__t``, or null.
    CTIs rise with their positions, so that is the nearest CTI after the row in (value, CTIs
    after rows) order, found as the last one so far in the reverse order: a running frame
    (linear) in the same sort, no join."""
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
