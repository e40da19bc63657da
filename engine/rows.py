"""The engine's row layout and the CTI-merge helper shared by every operator that has several
CTI sources (partitions of an input, inputs of a union, sides of a join).

A stream inside one epoch is a pair of DataFrames (:class:`Flow`):

* ``events``: ``__kind``, ``__edge`` (null, ``START`` or ``END``), ``__start``, ``__end`` (int64
  ticks), ``__pos`` (the arrival position, a struct ordered field by field), then payload columns;
* ``ctis``: ``__pos`` and ``__c`` (the CTI value), strictly increasing in both.

CTIs travel as rows, so explicit, imported, generated and pulled-back CTIs all go through the same
Spark plans as events (architecture.md: "CTIs are rows").
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from engine.temporal import MAX_TIME, MIN_TIME

__all__ = [
    "CTI",
    "EDGE",
    "END",
    "HEADER",
    "KIND",
    "POS",
    "POS_TYPE",
    "START",
    "EpochCache",
    "Flow",
    "min_of_latest",
    "payload_columns",
    "pos_literal",
    "saturating_sub",
]

KIND, EDGE, START, END, POS, CTI = "__kind", "__edge", "__start", "__end", "__pos", "__c"
HEADER = (KIND, EDGE, START, END, POS)

#: (arrival, input binding index, offset, partition index, sub-position)
POS_TYPE = StructType(
    [
        StructField("arr", LongType(), False),
        StructField("inp", IntegerType(), False),
        StructField("off", LongType(), False),
        StructField("part", IntegerType(), False),
        StructField("sub", IntegerType(), False),
    ]
)


class EpochCache:
    """DataFrames persisted for the length of one epoch, released together at its end."""

    def __init__(self) -> None:
        self._kept: list[DataFrame] = []

    def keep(self, df: DataFrame) -> DataFrame:
        self._kept.append(df.persist())
        return df

    def release(self) -> None:
        for df in self._kept:
            df.unpersist()
        self._kept.clear()


@dataclass(frozen=True)
class Flow:
    """One operator's output for one epoch: its events and its CTIs. ``edges``: whether the
    events can hold edges (False lets operators skip matching END edges)."""

    events: DataFrame
    ctis: DataFrame
    edges: bool = True


def payload_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if not c.startswith("__")]


def pos_literal(arr: int, inp: int, off: int, part: int = 0, sub: int = 0) -> Column:
    return F.struct(
        F.lit(arr).cast("long").alias("arr"),
        F.lit(inp).cast("int").alias("inp"),
        F.lit(off).cast("long").alias("off"),
        F.lit(part).cast("int").alias("part"),
        F.lit(sub).cast("int").alias("sub"),
    )


def saturating_sub(col: Column, d: int) -> Column:
    """``col - d`` clamped to int64, with ``±inf`` kept (no ANSI overflow)."""
    if d == 0:
        return col
    if d > 0:
        shifted = F.when(col < F.lit(MIN_TIME + d), F.lit(MIN_TIME)).otherwise(col - F.lit(d))
    else:
        shifted = F.when(col > F.lit(MAX_TIME + d), F.lit(MAX_TIME)).otherwise(col - F.lit(d))
    return F.when(col.isin(MIN_TIME, MAX_TIME), col).otherwise(shifted)


def min_of_latest(rows: DataFrame, group: str, initial: list[int], emitted: int) -> DataFrame:
    """Merge CTI sources: the minimum over groups of each group's latest CTI.

    ``rows`` has ``group`` (0..n-1), ``__pos`` and ``__c`` (each group's CTI rising at that
    position); ``initial[g]`` is group g's CTI before this epoch and ``emitted`` the merged CTI
    already emitted. Returns ``__pos, __c`` where the merged CTI increases; when several groups
    rise at the same position, only the value after all of them.
    """
    n = len(initial)
    if n == 1:
        return rows.filter(F.col(CTI) > F.lit(emitted)).select(POS, CTI)
    order = Window.orderBy(POS, group)
    running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    latest = [
        F.coalesce(
            F.last(F.when(F.col(group) == g, F.col(CTI)), ignorenulls=True).over(running),
            F.lit(initial[g]),
        )
        for g in range(n)
    ]
    merged = rows.withColumn("__m", F.least(*latest)).withColumn("__next", F.lead(POS).over(order))
    last_of_pos = merged.filter(F.col("__next").isNull() | (F.col("__next") != F.col(POS)))
    before = Window.orderBy(POS).rowsBetween(Window.unboundedPreceding, -1)
    prev = F.greatest(F.lit(emitted), F.max("__m").over(before))
    return (
        last_of_pos.withColumn("__prev", prev)
        .filter(F.col("__m") > F.col("__prev"))
        .select(POS, F.col("__m").alias(CTI))
    )
