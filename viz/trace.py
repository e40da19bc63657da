"""Tracing a run for its timeline (``query.run(trace=True)``, then ``query.timeline()``).

Tracing is opt-in: without a :class:`Trace` the runtime and ingress call nothing here and do no
extra Spark work. A :class:`Trace` is the run's observer (:class:`engine.observer.RunObserver`,
whose docstring says who calls each hook and when): it records what each hook is handed, on the
driver, and at :meth:`Trace.end_epoch` collects what the epoch's hooks gathered in **one small
Spark job** and keeps it on the driver. An epoch that fails and is re-run forgets what the failed
attempt recorded (:meth:`Trace.begin_epoch`). The recorder needs only Spark; drawing the PNG
needs matplotlib (:mod:`ctistream.viz.timeline`).

What is recorded (:class:`TraceItem`), per *series*:

* ``item``, per input: every item it received (event, explicit CTI, end of input) with its
  original event time, arrival, and what ingress did with it: ``action`` ``kept``, ``dropped``,
  ``adjusted`` (``adjusted`` then holds the new start, or for an END edge the new end) or
  ``ignored`` (an explicit CTI not above the CTI in force), and a ``reason``
  (``cti-violation``; ``start-dropped`` for an END edge whose START edge was dropped). Both
  fields are open strings: a stage before ingress records its own reasons with
  :meth:`Trace.add_input_items`. The arrival-time policies (§7) do: an event they dropped is an
  item of its own (reason ``early``, ``late``, ``out-of-order`` or ``no-event-time``, at its
  original event time; none for ``no-event-time``), and an event they moved is the one item
  ingress records, at its original event time, ``adjusted`` to the time it left §7 with (or to
  §3's, if §3 moved it again), reasons in the order the rules acted (``late``,
  ``out-of-order``, then ``cti-violation``);
* ``input-cti``, per input: every CTI the input emitted (after partitions and imports);
* ``operator-cti``, per stateful operator (labelled ``"<n>:<kind>"`` as in
  ``query.operator_metrics()``): every CTI it emitted;
* ``output-cti``: the query's output CTIs;
* ``output-event``: the query's output events (before egress turns them into the consumer's
  shape), each at the arrival position the root operator emitted it at, with its start, end
  and edge, and its substream key (``key``) when the output has substreams;
* ``input-keyed-cti`` and ``operator-keyed-cti``, per input and per stateful operator of a
  stream with substreams: every keyed CTI it emitted, with its key (``key``, as a string). A
  key's CTI is the larger of the stream's latest CTI and its latest keyed CTI
  (docs/decisions.md, "Per-key CTIs"); the timeline draws it per key.

The items of an input with substreams (``over=``) carry their key too (``key``), and every
edge (an input's or the output's) a ``match``: a hash of what pairs an END edge with its START
edge (the input's partition, the original start and the payload; the output's start and
payload), so the timeline draws an edge's lifetime from its START edge to its END edge.

A CTI's arrival is the arrival stamp of the position it sits at; the CTI that flushes an input
when a bounded run stops has no arrival (``MAX_TIME``, drawn as "stop").

**Cap.** Each series keeps at most ``cap`` items. Beyond that it keeps a deterministic sample:
the items whose hash (of series, arrival position and key; of an edge, its ``match`` instead of
its position, so both edges of an event are kept or left out together) is a multiple of
``2**level``, raising the level as the series grows. The hash does not depend on how the run
is cut into epochs, the level is chosen in Spark from the epoch's count before anything is
collected, so the driver never receives much more than ``cap`` items per series per epoch.
:meth:`Trace.sampled` says which series were sampled, and the timeline says so on the picture.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctistream.engine.diagnostics import end_edge_fates
from ctistream.engine.observer import RunObserver
from ctistream.engine.plan import walk
from ctistream.engine.rows import CTI, EDGE, END, KEY, KIND, POS, START, Flow, payload_columns
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StructType

if TYPE_CHECKING:
    from ctistream.engine.ingress import InputSpec
    from ctistream.engine.plan import Node
    from ctistream.engine.runtime import Runtime

__all__ = [
    "INPUT_CTI",
    "INPUT_KEYED_CTI",
    "ITEM",
    "OPERATOR_CTI",
    "OPERATOR_KEYED_CTI",
    "OUTPUT_CTI",
    "OUTPUT_EVENT",
    "Trace",
    "TraceItem",
]

#: Series roles.
ITEM, INPUT_CTI, OPERATOR_CTI, OUTPUT_CTI = "item", "input-cti", "operator-cti", "output-cti"
OUTPUT_EVENT = "output-event"
INPUT_KEYED_CTI, OPERATOR_KEYED_CTI = "input-keyed-cti", "operator-keyed-cti"

_HASH_SPACE = 1 << 40


@dataclass(frozen=True, slots=True)
class TraceItem:
    """One recorded item or CTI (driver). Times are int ticks.

    ``start`` is the original start of an event (an END edge's too: its end is ``end``) or the
    value of a CTI; ``arrival`` the arrival stamp of its position (``MAX_TIME``: at stop);
    ``position`` the full arrival position ``(arrival, input, offset, partition, sub)``;
    ``kind`` ``INSERT``, ``CTI`` or ``EOI`` (end of input); ``edge`` None, ``START`` or ``END``;
    ``cti`` (items of an input) the CTI in force in the item's partition when it arrived;
    ``key`` (keyed CTIs, and events of a stream with substreams) the substream key value, as
    a string; ``match`` (edges) the hash that pairs an END edge with its START edge.
    """

    role: str
    name: str
    position: tuple
    kind: str
    edge: str | None
    start: int | None
    end: int | None
    action: str
    reason: str | None = None
    adjusted: int | None = None
    cti: int | None = None
    key: str | None = None
    match: int | None = None

    @property
    def arrival(self) -> int:
        return self.position[0]

    @property
    def partition(self) -> int:
        return self.position[3]

    @property
    def time(self) -> int | None:
        """Where the item sits in event time: an END edge at its end, all else at its start."""
        return self.end if self.edge == "END" else self.start


@dataclass
class _Series:
    role: str
    name: str
    seen: int = 0
    level: int = 0
    rows: list[tuple[int, TraceItem]] = field(default_factory=list)

    def thin(self, level: int, cap: int) -> None:
        """Keep the rows whose hash is a multiple of ``2**level``; raise the level until at most
        ``cap`` rows are left."""
        self.level = max(self.level, level)
        while True:
            m = 1 << self.level
            self.rows = [r for r in self.rows if r[0] % m == 0]
            if len(self.rows) <= cap:
                return
            self.level += 1


def _key_of(column: str | None) -> Column:
    """The substream key of an event (``column``'s value as a string), or null."""
    key = F.col(column) if column is not None else F.lit(None)
    return key.cast("string").alias("key")


def _match(df: DataFrame, ident: list[str], payload: list[str]) -> Column:
    """An edge's pairing hash (null for other events): ``ident`` and the payload columns that
    hash (a map, or a struct or array holding one, cannot; pairs then match on the rest)."""

    def hashable(t: Any) -> bool:
        if isinstance(t, MapType):
            return False
        if isinstance(t, StructType):
            return all(hashable(f.dataType) for f in t.fields)
        return hashable(t.elementType) if isinstance(t, ArrayType) else True

    cols = ident + [p for p in payload if hashable(df.schema[p].dataType)]
    return F.when(F.col(EDGE).isNotNull(), F.xxhash64(*cols)).cast("long").alias("match")


def _level(have: int, count: int, cap: int) -> int:
    """The smallest sampling level that expects at most ``cap`` of ``have + count`` items."""
    total = have + count
    return 0 if total <= cap else max(0, math.ceil(math.log2(total / cap)))


class Trace(RunObserver):
    """What one run recorded for its timeline (driver). Pass one to ``query.run(trace=...)``
    (``trace=True`` makes one with the default cap); read it with ``query.trace``. The run calls
    its hooks (:class:`engine.observer.RunObserver`)."""

    def __init__(self, cap: int = 20_000) -> None:
        if cap < 1:
            raise ValueError(f"trace cap must be >= 1 items per series; got {cap}")
        self.cap = cap
        self.query = ""
        self.inputs: list[str] = []
        self.cuts: list[int] = []
        self._labels: dict[int, str] = {}
        self._series: dict[tuple[str, str], _Series] = {}
        self._pending: list[DataFrame] = []
        self._moved: dict[str, DataFrame] = {}  # per input, the events §7 moved in this epoch

    # -- hooks (engine.observer.RunObserver: called by the run, on the driver) ---------------
    def start(self, runtime: Runtime) -> None:
        """A run of ``runtime`` starts: forget any earlier run."""
        self.query = runtime.name
        self.inputs = [b.spec.name for b in runtime.inputs]
        self._labels = {
            id(node): f"{i}:{type(node).__name__.removesuffix('Node').lower()}"
            for i, node in enumerate(walk(runtime.root))
        }
        self.cuts = []
        self._series = {}
        self._pending = []
        self._moved = {}

    def begin_epoch(self, lo: int | None, hi: int | None) -> None:
        """An epoch over arrivals ``[lo, hi)`` starts (again, if its first attempt failed)."""
        self._pending = []
        self._moved = {}
        if lo is not None and lo not in self.cuts:
            self.cuts.append(lo)

    def ordering(self, spec: InputSpec, decisions: DataFrame) -> None:
        """Record one epoch of an input's arrival-time policies (§7), before its ingress.

        ``decisions``: one row per event of the epoch with ``__pos``, ``event_time`` and
        ``action`` (``ok``, ``drop:<reason>``, ``adjust:<reason>[,<reason>]``), as
        :func:`engine.ordering.order_epoch` hands it. The dropped events become items now; the
        moved ones are kept until :meth:`ingress` records them with their original time.
        """
        c = F.col
        action = c("action")
        reason = F.substring_index(action, ":", -1)
        dropped = decisions.filter(action.startswith("drop:"))
        self.add_input_items(
            spec.name,
            dropped.select(
                POS,
                F.lit("INSERT").alias(KIND),
                F.lit(None).cast("string").alias(EDGE),
                c("event_time").alias(START),
                F.when(action != "drop:no-event-time", c("event_time") + 1).alias(END),
                F.lit("dropped").alias("action"),
                reason.alias("reason"),
                F.lit(None).cast("long").alias("adjusted"),
                c("key").cast("string").alias("key"),
            ),
        )
        self._moved[spec.name] = decisions.filter(action.startswith("adjust:")).select(
            c(POS).alias("__mpos"), c("event_time").alias("__mt"), reason.alias("__mreason")
        )

    def ingress(self, spec: InputSpec, a: DataFrame, events: DataFrame, ctis: DataFrame) -> None:
        """Record one epoch of an input's ingress.

        ``a``: ingress's items of the epoch with ``__kind``, ``__edge``, ``__start``, ``__end``,
        ``__pos``, ``__cb`` (the CTI in force before the item), ``__viol``, ``__drop`` and
        ``__adj``; ``events``/``ctis``: what the input emits (an END edge missing from
        ``events`` was dropped with its START edge; one that broke the CTI and is there was
        adjusted: it ends at the CTI). An event §7 moved
        (:meth:`ordering`) is recorded at its original time, as adjusted.
        """
        c = F.col
        rows = a.filter(c(KIND).isin("INSERT", "CTI", "EOI"))
        dropped, adjusted, reason = c("__drop"), c("__adj"), F.when(c("__viol"), "cti-violation")
        if spec.edges:
            rows, cascade, late = end_edge_fates(rows, events)
            dropped, adjusted = dropped | cascade, adjusted | late
            reason = F.when(cascade, "start-dropped").when(c("__viol"), "cti-violation")
        start, end, new = c(START), c(END), F.when(adjusted, c("__cb"))
        moved = self._moved.pop(spec.name, None)
        if moved is not None:  # §7 moved it before ingress: from its original time
            rows = rows.join(moved, c(POS) == c("__mpos"), "left")
            was = c("__mt").isNotNull()
            reason = F.when(was, F.concat_ws(",", c("__mreason"), reason)).otherwise(reason)
            new = new.when(was & ~dropped, c(START))
            start = F.when(was, c("__mt")).otherwise(c(START))
            end = F.when(was, c("__mt") + (c(END) - c(START))).otherwise(c(END))
            adjusted = adjusted | was
        action = (
            F.when(dropped, "dropped")
            .when(adjusted, "adjusted")
            .when((c(KIND) == "CTI") & (c(START) <= c("__cb")), "ignored")
            .otherwise("kept")
        )
        self.add_input_items(
            spec.name,
            rows.select(
                POS,
                KIND,
                EDGE,
                start.alias(START),
                end.alias(END),
                action.alias("action"),
                reason.alias("reason"),
                new.alias("adjusted"),
                c("__cb").alias("cti"),
                _key_of(spec.ordering.over if spec.ordering is not None else None),
                _match(rows, ["__p", START], spec.payload),
            ),
        )
        self._add_ctis(INPUT_CTI, spec.name, ctis)

    def add_input_items(self, name: str, items: DataFrame) -> None:
        """Record items of input ``name``: ``__pos``, ``__kind``, ``__edge``, ``__start``,
        ``__end``, ``action``, ``reason``, ``adjusted`` and optionally ``cti``, ``key`` (the
        substream key) and ``match`` (an edge's pairing hash). For stages of an input's
        pipeline that drop or move events with their own reasons."""
        self._add_items(ITEM, name, items)

    def _add_items(self, role: str, name: str, items: DataFrame) -> None:
        for col, typ in (("cti", "long"), ("key", "string"), ("match", "long")):
            if col not in items.columns:
                items = items.withColumn(col, F.lit(None).cast(typ))
        self._pending.append(
            items.select(
                F.lit(role).alias("role"),
                F.lit(name).alias("name"),
                POS,
                F.col(KIND).alias("kind"),
                F.col(EDGE).alias("edge"),
                F.col(START).alias("start"),
                F.col(END).alias("end"),
                F.col("action").cast("string"),
                F.col("reason").cast("string"),
                F.col("adjusted").cast("long"),
                F.col("cti").cast("long"),
                F.col("key").cast("string"),
                F.col("match").cast("long"),
            )
        )

    def input_flow(self, spec: InputSpec, flow: Flow) -> None:
        """Record the keyed CTIs input ``spec`` emitted in this epoch (``flow``: what its
        ingress returned, right after :meth:`ingress`); nothing for an input without
        substreams."""
        if flow.keyed is not None:
            self._add_ctis(INPUT_KEYED_CTI, spec.name, flow.keyed)

    def operator(self, node: Node, flow: Flow) -> None:
        """Record the CTIs (and keyed CTIs) a stateful operator emitted in this epoch."""
        label = self._labels.get(id(node), type(node).__name__)
        self._add_ctis(OPERATOR_CTI, label, flow.ctis)
        if flow.keyed is not None:
            self._add_ctis(OPERATOR_KEYED_CTI, label, flow.keyed)

    def end_epoch(self, root: Flow) -> None:
        """The epoch succeeded: record the query's output events and CTIs and collect everything
        recorded in this epoch (one Spark job), sampled to the cap."""
        self._add_ctis(OUTPUT_CTI, self.query, root.ctis)
        ev = root.events
        self._add_items(
            OUTPUT_EVENT,
            self.query,
            ev.filter(F.col(KIND) == "INSERT").select(
                POS,
                KIND,
                EDGE,
                START,
                END,
                F.lit("kept").alias("action"),
                F.lit(None).cast("string").alias("reason"),
                F.lit(None).cast("long").alias("adjusted"),
                _key_of(root.key if root.keyed is not None and root.key in ev.columns else None),
                _match(ev, [START], payload_columns(ev)),
            ),
        )
        pending, self._pending = self._pending, []
        df = pending[0]
        for p in pending[1:]:
            df = df.unionByName(p)
        key = F.concat_ws("\u001f", "role", "name")
        have = {f"{r}\u001f{n}": s for (r, n), s in self._series.items()}
        df = df.withColumn("__key", key).withColumn(
            "__cnt", F.count(F.lit(1)).over(Window.partitionBy("__key"))
        )
        if have:
            held = F.create_map(*[x for k, s in have.items() for x in (F.lit(k), F.lit(s.seen))])
            lvl = F.create_map(*[x for k, s in have.items() for x in (F.lit(k), F.lit(s.level))])
            seen, level = F.coalesce(held[key], F.lit(0)), F.coalesce(lvl[key], F.lit(0))
        else:
            seen, level = F.lit(0), F.lit(0)
        needed = F.ceil(F.log2((seen + F.col("__cnt")) / F.lit(self.cap))).cast("int")
        df = df.withColumn("__lvl", F.greatest(level, needed, F.lit(0))).withColumn(
            # a null key adds nothing to the hash: CTIs and items hash as (role, name, position);
            # an edge by its match instead of its position, so both its edges go together
            "__h",
            F.pmod(
                F.xxhash64(
                    "role", "name", F.when(F.col("match").isNull(), F.col(POS)), "key", "match"
                ),
                F.lit(_HASH_SPACE),
            ),
        )
        sample = df.filter(F.pmod(F.col("__h"), F.expr("shiftleft(1L, __lvl)")) == 0).drop(
            "__key", "__cnt"
        )
        counts = df.groupBy("role", "name").agg(F.count(F.lit(1)).alias("__cnt"))
        rows = sample.unionByName(counts, allowMissingColumns=True).collect()
        self._merge(rows)

    def _add_ctis(self, role: str, name: str, ctis: DataFrame) -> None:
        """CTIs (``__pos``, ``__c``) or keyed CTIs (also ``__kk``) of one series."""
        key = F.col(KEY) if KEY in ctis.columns else F.lit(None)
        self._pending.append(
            ctis.select(
                F.lit(role).alias("role"),
                F.lit(name).alias("name"),
                POS,
                F.lit("CTI").alias("kind"),
                F.lit(None).cast("string").alias("edge"),
                F.col(CTI).alias("start"),
                F.lit(None).cast("long").alias("end"),
                F.lit("kept").alias("action"),
                F.lit(None).cast("string").alias("reason"),
                F.lit(None).cast("long").alias("adjusted"),
                F.lit(None).cast("long").alias("cti"),
                key.cast("string").alias("key"),
                F.lit(None).cast("long").alias("match"),
            )
        )

    def _merge(self, rows: Iterable[Any]) -> None:
        counts: dict[tuple[str, str], int] = {}
        levels: dict[tuple[str, str], int] = {}
        new: dict[tuple[str, str], list[tuple[int, TraceItem]]] = {}
        for r in rows:
            k = (r["role"], r["name"])
            if r["__cnt"] is not None:
                counts[k] = r["__cnt"]
                continue
            levels[k] = max(levels.get(k, 0), r["__lvl"])
            item = TraceItem(
                r["role"],
                r["name"],
                tuple(r[POS]),
                r["kind"],
                r["edge"],
                r["start"],
                r["end"],
                r["action"],
                r["reason"],
                r["adjusted"],
                r["cti"],
                r["key"],
                r["match"],
            )
            new.setdefault(k, []).append((r["__h"], item))
        for k, n in counts.items():
            s = self._series.setdefault(k, _Series(*k))
            level = max(levels.get(k, 0), _level(s.seen, n, self.cap))
            s.seen += n
            s.rows.extend(new.get(k, []))
            s.rows.sort(key=lambda r: (r[1].position, r[1].key or ""))
            s.thin(level, self.cap)

    # -- reading -------------------------------------------------------------------------------
    def _get(self, role: str, name: str) -> list[TraceItem]:
        s = self._series.get((role, name))
        return [item for _, item in s.rows] if s else []

    def items(self, input_name: str) -> list[TraceItem]:
        """The items input ``input_name`` received, in arrival order."""
        return self._get(ITEM, input_name)

    def input_ctis(self, input_name: str) -> list[TraceItem]:
        """The CTIs input ``input_name`` emitted, in order."""
        return self._get(INPUT_CTI, input_name)

    def input_keyed_ctis(self, input_name: str) -> list[TraceItem]:
        """The keyed CTIs input ``input_name`` emitted (each with its ``key``), in order; empty
        for an input without substreams."""
        return self._get(INPUT_KEYED_CTI, input_name)

    @property
    def operators(self) -> list[str]:
        """Labels (``"<n>:<kind>"``) of the stateful operators that recorded CTIs or keyed CTIs,
        in plan order."""
        names = {n for (r, n) in self._series if r in (OPERATOR_CTI, OPERATOR_KEYED_CTI)}
        return sorted(names, key=lambda n: (int(n.split(":", 1)[0]) if n[0].isdigit() else 0, n))

    def operator_ctis(self, label: str) -> list[TraceItem]:
        """The CTIs operator ``label`` emitted, in order."""
        return self._get(OPERATOR_CTI, label)

    def operator_keyed_ctis(self, label: str) -> list[TraceItem]:
        """The keyed CTIs operator ``label`` emitted (each with its ``key``), in order."""
        return self._get(OPERATOR_KEYED_CTI, label)

    def output_events(self) -> list[TraceItem]:
        """The query's output events, in the order of the positions they were emitted at."""
        return self._get(OUTPUT_EVENT, self.query)

    def output_ctis(self) -> list[TraceItem]:
        """The query's output CTIs, in order."""
        return self._get(OUTPUT_CTI, self.query)

    def sampled(self) -> dict[tuple[str, str], tuple[int, int]]:
        """The series beyond the cap: ``(role, name) -> (items kept, items seen)``."""
        return {k: (len(s.rows), s.seen) for k, s in self._series.items() if len(s.rows) < s.seen}

    def __repr__(self) -> str:
        sizes = {f"{r}:{n}": len(s.rows) for (r, n), s in self._series.items()}
        return f"Trace(query={self.query!r}, cap={self.cap}, series={sizes})"
