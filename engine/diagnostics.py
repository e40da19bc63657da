"""The diagnostic stream of an input (semantics §8): what its ingress dropped or adjusted.

``stream.diagnostics()`` on an input gives a stream with one point event per item the input's
ingress dropped or adjusted, and one per rule that moved it (an event the late and then the
out-of-order rule of §7 moved is two diagnostics, as it is two adjustments in the metrics): so
a count of the diagnostics by ``action`` and ``reason`` is the input's ``dropped_by_reason`` /
``adjusted_by_reason`` in ``query.metrics()``. Each diagnostic is a point at the CTI in force in
the item's source partition when the item arrived (``__cb`` of the ingress scan), so it breaks
no CTI of the input; the stream's CTIs are the input's (docs/decisions.md, "Diagnostic stream").

Its payload is :data:`DIAGNOSTIC_FIELDS`, then the item's own payload columns. §3's violations
are read off the ingress scan's rows (``__viol``, ``__drop``, ``__adj``, ``__cb``); §7's
decisions reach the scan as ``DIAG`` rows (:func:`engine.ordering.order_epoch`), which take no
part in §3 but get the CTI in force at their place. An input of versions is reported as the
edges its ingress makes (semantics §1, §3.4): its versions off the scan's rows, the END edges
its rows made to close their keys' versions from :func:`engine.ingress._close_versions`, each
with the closed version's payload and the closing row's offset. Everything here is Spark plans
over the scan's cached output: no Python per item, no extra job unless the stream is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctistream.engine.errors import QueryBuildError
from ctistream.engine.rows import EDGE, END, KIND, POS, START, Flow, Kind
from ctistream.engine.temporal import MAX_TIME
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

if TYPE_CHECKING:
    from ctistream.engine.ingress import InputSpec

__all__ = [
    "DIAGNOSTIC_FIELDS",
    "check_diagnostics",
    "diagnostic_rows",
    "diagnostic_schema",
    "diagnostics_flow",
    "end_edge_fates",
]

#: the diagnostic columns, before the item's own payload: ``action`` (``dropped`` /
#: ``adjusted``), ``reason`` (``cti-violation``, ``early``, ``late``, ``out-of-order``,
#: ``no-event-time``), the item's original lifetime in ticks, its new start (an adjusted event)
#: or new end (an adjusted END edge), else null, and where it came from
DIAGNOSTIC_FIELDS = StructType(
    [
        StructField("action", StringType(), False),
        StructField("reason", StringType(), False),
        StructField("original_start", LongType(), True),
        StructField("original_end", LongType(), True),
        StructField("new_start", LongType(), True),
        StructField("new_end", LongType(), True),
        StructField("input", StringType(), False),
        StructField("partition", StringType(), False),
        StructField("offset", LongType(), False),
    ]
)


def diagnostic_schema(payload: StructType) -> StructType:
    """The diagnostic stream's payload: :data:`DIAGNOSTIC_FIELDS`, then ``payload``'s columns."""
    return StructType([*DIAGNOSTIC_FIELDS.fields, *payload.fields])


def check_diagnostics(name: str, payload: list[str]) -> None:
    """Raise QueryBuildError where input ``name`` cannot give a diagnostic stream (driver, when
    the query is built): a payload column with a diagnostic column's name."""
    clash = [c for c in DIAGNOSTIC_FIELDS.fieldNames() if c in payload]
    if clash:
        raise QueryBuildError(
            f"diagnostics() of input {name!r}: its payload has column(s) {clash}, which the "
            f"diagnostic stream uses for itself ({DIAGNOSTIC_FIELDS.fieldNames()}); expected "
            "none of those names. Fix: rename the column in the adapter's schema (schema=)"
        )


def end_edge_fates(rows: DataFrame, events: DataFrame) -> tuple[DataFrame, Column, Column]:
    """What ingress did with each END edge of ``rows`` (the ingress scan's rows, with
    ``__viol``), seen from ``events`` (what the input emits), semantics §3.4: ``rows`` with
    that known, and two conditions over it: ``gone``, an END edge missing from ``events``,
    which went with its dropped START edge (whether it broke the CTI or not); ``cut``, one
    there that broke the CTI, which ended its START edge at the CTI instead."""
    c = F.col
    is_end = (c(KIND) == Kind.INSERT) & c(EDGE).eqNullSafe("END")
    closed = events.filter(c(EDGE).eqNullSafe("END")).select(
        c(POS).alias("__kpos"), F.lit(True).alias("__k")
    )
    rows = rows.join(closed, c(POS) == c("__kpos"), "left")
    return rows, is_end & c("__k").isNull(), is_end & c("__viol") & c("__k").isNotNull()


def diagnostic_rows(
    a: DataFrame, events: DataFrame, spec: InputSpec, version_ends: DataFrame | None = None
) -> DataFrame:
    """The epoch's diagnostics of input ``spec`` as event rows (``__kind``, ``__edge``,
    ``__start``, ``__end``, ``__pos``, then :func:`diagnostic_schema`'s columns), from the
    ingress scan's rows ``a`` and the events ingress emits, ``events`` (lazy); for an input of
    versions, from ``a`` and ``version_ends``, the END edges its ingress dropped or adjusted
    when a row closed its key's version (:func:`engine.ingress._close_versions`).

    * an event, or a START edge (a version), that broke the CTI ``c`` in force (§3.4):
      ``dropped``, or ``adjusted`` with ``new_start = c``;
    * an END edge that broke it while its START edge was open: ``adjusted``, ``new_end = c``;
      one whose START edge was dropped: ``dropped`` (it is absent from ``events``);
    * a ``DIAG`` row (§7's decision, :func:`engine.ordering.order_epoch`): as it says, with
      the event time as the original start and the time it moved to as ``new_start``.
    """
    c = F.col
    insert = c(KIND) == Kind.INSERT
    is_end = c(EDGE).eqNullSafe("END")
    if version_ends is not None:
        # a delete is an END edge of the version it closes (if any): reported there, never as
        # itself (with nothing to close it counts as an ignored delete, not a drop)
        scanned = [KIND, EDGE, START, END, POS, "__p", "__cb", "__viol", "__drop", *spec.payload]
        opened = a.filter(insert & c("__viol") & ~is_end).select(*[f"`{k}`" for k in scanned])
        violated = opened.unionByName(version_ends)
        dropped = c("__drop")
    elif spec.edges:  # an END edge gone with its dropped START edge is dropped too
        rows, gone, _ = end_edge_fates(a.filter(insert & (c("__viol") | is_end)), events)
        violated = rows.filter(c("__viol") | gone)
        dropped = c("__drop") | gone
    else:
        violated = a.filter(insert & c("__viol"))
        dropped = c("__drop")
    third = violated.select(
        "*",
        F.when(dropped, "dropped").otherwise("adjusted").alias("action"),
        F.lit("cti-violation").alias("reason"),
        c(START).alias("original_start"),
        c(END).alias("original_end"),
        F.when(~dropped & ~is_end, c("__cb")).alias("new_start"),
        F.when(~dropped & is_end, c("__cb")).alias("new_end"),
    )
    decided = a.filter(c(KIND) == Kind.DIAG).select(
        "*",
        F.split(c(EDGE), ":")[0].alias("action"),
        F.split(c(EDGE), ":")[1].alias("reason"),
        c(START).alias("original_start"),
        F.when(_finite(c(START)), c(START) + 1).alias("original_end"),
        c(END).alias("new_start"),
        F.lit(None).cast(LongType()).alias("new_end"),
    )
    names = F.array(*[F.lit(p) for p in spec.partitions])
    columns = [
        F.lit(Kind.INSERT).alias(KIND),
        F.lit(None).cast(StringType()).alias(EDGE),
        c("__cb").alias(START),
        F.when(c("__cb") < MAX_TIME, c("__cb") + 1).otherwise(c("__cb")).alias(END),
        POS,
        "action",
        "reason",
        "original_start",
        "original_end",
        "new_start",
        "new_end",
        F.lit(spec.name).alias("input"),
        F.element_at(names, c("__p") + 1).alias("partition"),
        c(f"{POS}.off").alias("offset"),
        *[F.col(f"`{k}`") for k in spec.payload],
    ]
    return third.select(*columns).unionByName(decided.select(*columns))


def _finite(t: Column) -> Column:
    return t.isNotNull() & (t > F.lit(-MAX_TIME - 1)) & (t < F.lit(MAX_TIME))


def diagnostics_flow(step: Any, inputs: list[Flow], _: Any, cache: Any) -> tuple[Flow, None]:
    """The runtime's executor of ``input.diagnostics()`` (engine.physical.DiagnosticsStep):
    the input's diagnostic rows as events, under the input's CTIs (its global ones: the
    diagnostics of an input with substreams are one timeline, docs/decisions.md)."""
    flow = inputs[0]
    assert flow.diagnostics is not None, "an input's flow carries its diagnostics"
    events = flow.diagnostics()
    return Flow(events, flow.ctis, False, latest=flow.latest, unbounded=False), None
