"""Ingress: explicit, generated and imported CTIs, violation policies, partitions (semantics §3).

One epoch of one input is one Spark plan: one Arrow function per source partition
(:func:`_sequencer`) scans the input's items of the epoch in arrival order, where they were read
(the source hands each partition in that order), or, when the imported CTIs or the stop flush are
broadcast to every partition, after sorting them by arrival position within each partition. It
computes what the spec describes item by item with running counts and maxima in numpy:

* ``cnt``/``ms``: running count and running max start of the *counted* events (points, intervals,
  START edges, with their original start, dropped or not);
* a generation candidate ``ms - delay`` after the N-th counted event, or after a counted event
  that moves ``floor(ms / T)`` forward;
* ``cb``: the partition's effective CTI before each item = running max of every CTI value seen
  (explicit, generated, imported, flush) and ``ca`` the same after it;
* the violation check and DROP / ADJUST against ``cb``.

Then, in Spark: END edges matched to their START edges (FIFO per original start and payload,
:mod:`engine.edges`; a late END edge, ``end < __cb``, closes its START edge at ``__cb``: semantics
§3.4), or, for an input of versions (:class:`Versions`), each key's open version closed by the
key's next row (:func:`_close_versions`); and the input's CTI = min over partitions
(:func:`engine.ctis.min_of_latest`).

Per-partition state (count, max start, period, CTI, and the last item taken: where a bounded run's
next read starts) is carried between epochs on the driver: a handful of numbers per partition,
handed to the scan. Open START edges are carried as a DataFrame.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from ctistream.engine._spark import settle_worker, utc_labelled
from ctistream.engine.ctis import keyed_rises, latest_of, min_of_latest, risen
from ctistream.engine.diagnostics import diagnostic_rows
from ctistream.engine.edges import RANK, fifo_pairs, fifo_ranked
from ctistream.engine.errors import CtiViolationError, MalformedRecordError, QueryBuildError
from ctistream.engine.events import EdgeType, Event, EventKind
from ctistream.engine.observer import RunObserver
from ctistream.engine.operators.window import PushedWindow, _bytewise, merge_pushed, pushed_partials
from ctistream.engine.packed import ARROW, PACKED_TYPE, unpacked
from ctistream.engine.packed import pack as pack_events
from ctistream.engine.rows import (
    CTI,
    EDGE,
    END,
    KEY,
    KIND,
    POS,
    POS_TYPE,
    START,
    EpochCache,
    Flow,
    Kind,
    checkpoint,
    local_frame,
    pos_literal,
    sql_names,
)
from ctistream.engine.settings import AdvanceTimePolicy, AdvanceTimeSettings, Versions
from ctistream.engine.source import SourceRead
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, format_ticks
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    from ctistream.engine.physical import InputScan

__all__ = [
    "EpochRows",
    "IngressState",
    "InputSpec",
    "PartitionState",
    "check_versions",
    "driver_compares",
    "ingress_epoch",
]

_P = "__p"  # the source partition whose sequence a row belongs to
_SRC = "__src"  # for broadcast rows: "import" or "flush"


@dataclass
class InputSpec:
    """An input as the runtime sees it (driver only)."""

    name: str
    index: int
    partitions: list[str]
    settings: AdvanceTimeSettings | None
    payload: list[str]
    edges: bool = False
    #: POINT shape: every event ends one tick after its start (never at +inf: Flow.unbounded)
    points: bool = False
    #: EventOrderingSettings (§7): engine.ordering runs before this ingress and sends its
    #: watermarks as ``WM`` rows, taken like generated CTIs
    ordering: Any = None
    #: Versions: the input's POINT rows are versions of keys, made START and END edges here
    versions: Versions | None = None

    @property
    def flush_on_stop(self) -> bool:
        if self.ordering is not None:
            return bool(self.ordering.flush_on_stop)
        gen = self.settings.generation if self.settings else None
        return bool(gen and gen.flush_on_stop)

    @property
    def policy(self) -> AdvanceTimePolicy | None:
        """The violation policy; an ordered input without settings follows its action."""
        if self.settings is not None:
            return self.settings.policy
        if self.ordering is not None:
            return AdvanceTimePolicy(self.ordering.action.value)
        return None


@dataclass
class PartitionState:
    """What one source partition carries from one epoch to the next."""

    count: int = 0
    max_start: int | None = None
    period: int | None = None
    cti: int = MIN_TIME
    #: the (arrival, offset) of the last item taken, whether it was the partition's end, and
    #: the offset a bounded run's next epoch reads from (:class:`engine.source.SourceRead`)
    last: tuple[int, int] | None = None
    ended: bool = False
    next: int = 0


@dataclass
class IngressState:
    """What one input carries from one epoch to the next."""

    partitions: list[PartitionState]
    emitted: int = MIN_TIME
    open_edges: DataFrame | None = None
    counts: Counter = field(default_factory=Counter)
    #: how many rows ``open_edges`` holds, where the driver knows it (it matched them)
    open_rows: int | None = 0
    #: substreams (``over``): per (key, partition) the largest watermark (inputs with several
    #: partitions), and per key the largest keyed CTI candidate (:func:`engine.ctis.keyed_rises`)
    key_watermarks: DataFrame | None = None
    key_seen: DataFrame | None = None
    #: the latest arrival stamp the input has taken (a started query raises later stamps to it)
    arrival: int | None = None


class _StopEpoch(Exception):
    """An input found bad input in this epoch: the runtime re-runs the epoch up to ``pos`` and
    then raises ``error``, so nothing before the bad item is lost."""

    def __init__(self, pos: tuple, error: Exception) -> None:
        super().__init__(str(error))
        self.pos = pos
        self.error = error


@dataclass(frozen=True)
class EpochRows:
    """One input's items of one epoch, as the runtime hands them to :func:`ingress_epoch`.

    ``raw``: the items (``__kind`` INSERT / CTI / EOI, ``__edge``, ``__start``, ``__end``,
    ``__pos``, ``__part``, payload). ``imports``: CTIs of the imported input in this epoch
    (``__pos``, ``__c``). ``flush_at_stop``: the query stops after this epoch and the input
    flushes on stop. ``in_order``: each of ``raw``'s Spark partitions holds one source
    partition's rows in position order (as the input was read). ``read``: how ``raw`` was read;
    given with ``in_order``, the scan runs in the read's own Python task."""

    raw: DataFrame
    imports: DataFrame | None = None
    flush_at_stop: bool = False
    in_order: bool = False
    read: SourceRead | None = None


def ingress_epoch(
    spark: SparkSession,
    scan: InputScan,
    epoch: EpochRows,
    state: IngressState,
    cache: EpochCache,
    trace: RunObserver | None = None,
) -> tuple[Flow, IngressState]:
    """Run one epoch of input ``scan``'s ingress over its items of the epoch, ``epoch``.

    ``scan`` holds the input's choices (:class:`engine.physical.InputScan`): with ``pushed``
    (the window that alone reads this input) the scan computes its partial aggregates and hands
    Spark those (:attr:`Flow.partials`) instead of the events; with ``packed`` it hands Spark its
    events packed (:mod:`engine.packed`, :attr:`Flow.packed`; the input has no edges); with
    ``edges_on_driver`` an epoch of few edges matches them on the driver. Returns the input's
    events and CTIs and the state after the epoch.
    """
    spec, pushed, packed = scan.spec, scan.pushed, scan.packed
    raw, imports, read = epoch.raw, epoch.imports, epoch.read
    flush_at_stop, in_order = epoch.flush_at_stop, epoch.in_order
    policy = spec.policy
    payload = spec.payload
    n_parts = len(spec.partitions)

    quoted = sql_names(payload)
    own = raw.selectExpr(
        KIND, EDGE, START, END, POS, f"__part AS {_P}", f"CAST(NULL AS STRING) AS {_SRC}", *quoted
    )
    broadcast: list[DataFrame] = []
    if imports is not None:
        broadcast.append(
            imports.select(
                F.lit(Kind.BCAST).alias(KIND),
                F.col(CTI).alias(START),
                POS,
                F.lit("import").alias(_SRC),
            )
        )
    if flush_at_stop:
        broadcast.append(
            spark.range(1).select(
                F.lit(Kind.BCAST).alias(KIND),
                F.lit(MAX_TIME).alias(START),
                _stop_pos(spec.index),
                F.lit("flush").alias(_SRC),
            )
        )
    seq = own
    if broadcast:
        every_partition = F.explode(F.sequence(F.lit(0), F.lit(n_parts - 1))).alias(_P)
        for b in broadcast:
            seq = seq.unionByName(b.select("*", every_partition), allowMissingColumns=True)

    # The sequential part of §3, item by item within each source partition, runs as one Arrow
    # function per partition over its rows in arrival order (running counts and maxima in numpy);
    # the partitions' state before the epoch travels with the function. Where the rows already
    # come that way and nothing is broadcast to the partitions, it runs where they were read.
    rules = _ScanRules.of(scan)
    step = _sequencer([(s.count, s.max_start, s.period, s.cti) for s in state.partitions], rules)
    if in_order and not broadcast and read is not None:
        names = seq.schema.fieldNames()
        a = read.map(
            spark,
            lambda raws: step(_own(b, names) for b in raws),
            _sequenced_schema(seq.schema, rules),
        )
    elif in_order and not broadcast:
        a = seq.mapInArrow(step, _sequenced_schema(seq.schema, rules))
    else:
        ordered = seq.repartition(_P).sortWithinPartitions(_P, POS)

        def grouped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return map(utc_labelled, step(batches))  # a grouped function's timestamps: UTC

        a = ordered.groupBy(_P).applyInArrow(grouped, _sequenced_schema(ordered.schema, rules))
    a = cache.keep(a)

    new_state, first_violation, first_bad = _collect_state(a, state)
    if first_bad is not None and (
        policy is not None or first_violation is None or first_bad < first_violation
    ):
        raise _StopEpoch(first_bad, _malformed_error(raw, first_bad))
    violation = None
    if policy is None and first_violation is not None:
        violation = _StopEpoch(first_violation, _violation_error(a, spec, first_violation))

    # pushed or packed: the scan handed Spark no events as rows, only the rows that raise the
    # CTI or break it
    taken = "false" if pushed is not None or packed else f"{KIND} = '{Kind.INSERT}' AND NOT __drop"
    events = a.filter(f"{taken} AND NOT ({EDGE} <=> 'END')").selectExpr(
        KIND, EDGE, f"CASE WHEN __adj THEN __cb ELSE {START} END AS {START}", END, POS, *quoted
    )
    packs = None
    if packed:
        packs = a.filter(f"{KIND} = '{Kind.PACKED}'").select(ARROW)
        events = unpacked(packs, events.schema)
    partials = None
    if pushed is not None:
        partials = a.filter(f"{KIND} = '{Kind.PARTIAL}'").select(
            *pushed.keys, *pushed.fields.fieldNames()
        )
    # an event row per inserted item at most (an END edge's row closes its START edge's)
    rows = new_state.counts["events_in"] - state.counts["events_in"]
    version_ends: Callable[[], DataFrame] | None = None
    if spec.edges:
        try:
            if spec.versions is not None:
                closed, new_state.open_edges, counts, version_ends = _close_versions(
                    a, spec, state.open_edges, cache
                )
                new_state.open_rows = None
            elif scan.edges_on_driver and _few_edges(state.open_rows, rows):
                closed, new_state.open_edges, counts, new_state.open_rows = _edges_on_driver(
                    a, spec, state.open_edges
                )
            else:
                closed, new_state.open_edges, counts = _match_edges(
                    a, spec, state.open_edges, cache
                )
                new_state.open_rows = None
        except _StopEpoch as malformed:
            # Whichever bad item comes first stops the epoch (matching is sound up to it).
            if violation is None or malformed.pos < violation.pos:
                raise
            raise violation from None
        new_state.counts.update(counts)
        events = events.unionByName(closed)
    if violation is not None:
        raise violation
    change = a.filter("__ca > __cb").selectExpr(_P, POS, f"__ca AS {CTI}")
    ctis = cache.keep(min_of_latest(change, _P, [s.cti for s in state.partitions], state.emitted))
    new_state.emitted = max(state.emitted, min(s.cti for s in new_state.partitions))
    if trace is not None:  # opt-in: the run's observer (engine.observer), e.g. the timeline
        trace.ingress(spec, a, events, ctis)
    # the epoch's CTIs rise above the input's CTI before it, the last to its CTI after it
    latest = risen(new_state.emitted, state.emitted)
    over = spec.ordering.over if spec.ordering is not None else None

    # made only when stream.diagnostics() reads them: building the plan costs every epoch
    def diagnostics() -> DataFrame:
        return diagnostic_rows(a, events, spec, version_ends() if version_ends else None)

    if over is None:
        flow = Flow(
            events,
            ctis,
            spec.edges,
            latest=latest,
            partials=partials,
            packed=packs,
            rows=rows,
            unbounded=not spec.points,
            diagnostics=diagnostics,
        )
        return flow, new_state
    candidates = cache.keep(_key_candidates(a, change, spec, state, new_state))
    keyed, seen = keyed_rises(candidates, ctis, state.emitted, state.key_seen)
    new_state.key_seen = checkpoint(seen)
    flow = Flow(
        events,
        ctis,
        spec.edges,
        cache.keep(keyed),
        over,
        latest,
        rows=rows,
        unbounded=not spec.points,
        diagnostics=diagnostics,
    )
    return flow, new_state


def check_versions(name: str, versions: Versions, schema: StructType) -> None:
    """Raise QueryBuildError unless ``versions``' key columns are payload columns of ``schema``
    and its ``deleted`` column is a boolean one (driver, when the query is built)."""
    types = {f.name: f.dataType for f in schema.fields}
    missing = [k for k in (*versions.key, versions.deleted) if k is not None and k not in types]
    if missing:
        raise QueryBuildError(
            f"input {name!r}: versions= names column(s) {missing} that the input does not have; "
            f"expected payload columns, got {sorted(types)}. Fix: name the key and deleted "
            "columns as the adapter's payload has them (or give Stream.create a schema=)"
        )
    if versions.deleted is not None and not isinstance(types[versions.deleted], BooleanType):
        raise QueryBuildError(
            f"input {name!r}: versions' deleted column {versions.deleted!r} is "
            f"{types[versions.deleted].simpleString()}; expected boolean (true marks a delete). "
            f"Fix: declare it boolean in the schema, e.g. schema='..., {versions.deleted} boolean'"
        )


def _own(raw: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    """A raw batch as the scan takes an input's own rows (``own`` in :func:`ingress_epoch`)."""
    columns = {_P: raw.column("__part"), _SRC: pa.nulls(raw.num_rows, pa.string())}
    return pa.RecordBatch.from_arrays(
        [columns[k] if k in columns else raw.column(k) for k in names], names=names
    )


def _key_candidates(
    a: DataFrame, change: DataFrame, spec: InputSpec, state: IngressState, new: IngressState
) -> DataFrame:
    """Substreams: a CTI candidate for key ``k`` at each ``KWM`` row (an event of ``k`` raised
    its watermark ``wm(p, k)`` in partition ``p``): the minimum over the input's partitions ``q``
    of ``max(cti_q, wm(q, k))``, with ``cti_q`` partition q's CTI at that position and
    ``wm(q, k)`` -inf where q has not seen ``k``. Every later event of ``k`` in ``q`` starts at or
    above both (§7 moves or drops the ones below the watermark, §3 those below the CTI)."""
    over = spec.ordering.over
    marks = a.filter(F.col(KIND) == Kind.KWM)
    n = len(spec.partitions)
    if n == 1:
        return marks.select(
            POS, F.col(over).alias(KEY), F.greatest(F.col("__ca"), F.col(START)).alias(CTI)
        )
    marks = marks.select(_P, POS, F.col(over).alias(KEY), F.col(START).alias("__w"))
    rows = change.select(_P, POS, F.col(CTI).alias("__cq"), F.lit(0).alias("__typ"))
    rows = rows.unionByName(marks.withColumn("__typ", F.lit(1)), allowMissingColumns=True)
    running = Window.orderBy(POS, "__typ").rowsBetween(Window.unboundedPreceding, 0)
    for q, part in enumerate(state.partitions):
        rows = rows.withColumn(
            f"__c{q}", latest_of(F.col(_P) == q, F.col("__cq"), part.cti, running)
        )
    rows = rows.filter(F.col("__typ") == 1)
    if state.key_watermarks is not None:
        carried = state.key_watermarks.groupBy(KEY).pivot(_P, list(range(n))).agg(F.max("__w"))
        rows = rows.join(carried.toDF(KEY, *[f"__s{q}" for q in range(n)]), KEY, "left")
    by_key = Window.partitionBy(KEY).orderBy(POS).rowsBetween(Window.unboundedPreceding, 0)
    per_part = []
    for q in range(n):
        wm = F.last(F.when(F.col(_P) == q, F.col("__w")), ignorenulls=True).over(by_key)
        if state.key_watermarks is not None:
            wm = F.greatest(wm, F.col(f"__s{q}"))
        per_part.append(F.greatest(F.col(f"__c{q}"), wm))
    seen = marks.select(KEY, _P, "__w")
    if state.key_watermarks is not None:
        seen = state.key_watermarks.unionByName(seen)
    new.key_watermarks = checkpoint(seen.groupBy(KEY, _P).agg(F.max("__w").alias("__w")))
    return rows.select(POS, KEY, F.least(*per_part).alias(CTI))


def _stop_pos(index: int) -> F.Column:
    return pos_literal(MAX_TIME, index, MAX_TIME).alias(POS)


def _collect_state(
    a: DataFrame, state: IngressState
) -> tuple[IngressState, tuple | None, tuple | None]:
    """One small job over the scan's own summary rows (``STATE``, one per source partition that
    had items this epoch): per partition, the state after the epoch and the epoch's counts; and
    the positions of the epoch's first CTI violation and of its first malformed record."""
    rows = a.filter(f"{KIND} = '{Kind.STATE}'").collect()
    parts = [replace(s) for s in state.partitions]
    counts = Counter(state.counts)
    first: tuple | None = None
    bad: tuple | None = None
    arrival = state.arrival
    for r in rows:
        s = parts[r[_P]]
        summary = r[_SUM]
        s.count = summary["count"]
        if summary["max_start"] is not None:
            s.max_start = summary["max_start"]
        if summary["period"] is not None:
            s.period = summary["period"]
        s.cti = max(s.cti, r["__ca"])
        for k in _COUNTS:
            counts[k] += summary[k]
        v = summary["first_violation"]
        if v is not None and (first is None or tuple(v) < first):
            first = tuple(v)
        b = summary["first_bad"]
        if b is not None and (bad is None or tuple(b) < bad):
            bad = tuple(b)
        if summary["arrival"] is not None:
            last = summary["arrival"]
            arrival = last if arrival is None else max(arrival, last)
            s.last = (last, summary["offset"])
            s.ended = bool(summary["ended"])
        if summary["next"] is not None:
            s.next = summary["next"]
    new = IngressState(
        parts,
        state.emitted,
        state.open_edges,
        counts,
        open_rows=state.open_rows,
        arrival=arrival,
    )
    return new, first, bad


def _row_event(r, payload: list[str]) -> Event:
    edge = EdgeType(r[EDGE]) if r[EDGE] else None
    return Event(EventKind.INSERT, r[START], r[END], {k: r[k] for k in payload}, edge)


def _malformed_error(raw: DataFrame, pos: tuple) -> MalformedRecordError:
    """The error the source adapter wrote into the malformed record's row."""
    message = raw.filter(F.col(POS) == pos_literal(*pos)).select("__error").first()[0]
    return MalformedRecordError(message)


def _violation_error(a: DataFrame, spec: InputSpec, pos: tuple) -> CtiViolationError:
    r = a.filter(F.col(POS) == pos_literal(*pos)).first()
    event = _row_event(r, spec.payload)
    if spec.versions is not None:  # as the row came: a point at its time
        event = Event(EventKind.INSERT, r[START], r[START] + 1, event.payload)
    return CtiViolationError(
        spec.name, spec.partitions[r[_P]], r[POS]["off"], event.describe(), format_ticks(r["__cb"])
    )


def _match_edges(
    a: DataFrame, spec: InputSpec, open_edges: DataFrame | None, cache: EpochCache
) -> tuple[DataFrame, DataFrame, Counter]:
    """Close END edges on their START edges: per partition, original start and payload, FIFO.

    Returns the closed END edge rows (start = the START edge's adjusted start), the START edges
    still open, and the END edges' counts: ``dropped`` those whose START edge was dropped,
    ``adjusted`` those that broke the CTI and closed their START edge at it (semantics §3.4).
    """
    payload = spec.payload
    key = [_P, "__os", *payload]
    starts = _starts(a, payload)
    if open_edges is not None:
        starts = open_edges.unionByName(starts)
    ends = _ends(a, payload)

    s, e, on = fifo_ranked(starts, ends, key, "__spos", POS)
    # one job: the first END edge without an earlier START edge, and how many closed a START
    # edge that was dropped
    j = cache.keep(e.join(s, on, "left"))
    first_bad = F.struct(
        F.col(f"e.{POS}").alias(POS),
        F.col(f"e.{_P}").alias(_P),
        *[F.col(f"e.{k}").alias(k) for k in ["__os", END, *payload]],
    )
    unmatched = F.col("o.__spos").isNull() | (F.col("o.__spos") > F.col(f"e.{POS}"))
    found = j.agg(
        F.min_by(first_bad, F.when(unmatched, F.col(f"e.{POS}"))).alias("bad"),
        F.count(F.when(F.col("o.__sdrop"), 1)).alias("dropped"),
        F.count(F.when(~F.col("o.__sdrop") & F.col("e.__late"), 1)).alias("adjusted"),
    ).first()
    bad = found["bad"]
    counts = Counter(dropped=found["dropped"], adjusted=found["adjusted"])
    if bad is not None:
        raise _unmatched_end(spec, tuple(bad[POS]), bad[_P], bad["__os"], bad[END], bad)
    matched = j.select(
        F.lit(Kind.INSERT).alias(KIND),
        F.lit("END").alias(EDGE),
        F.col("o.__as").alias(START),
        F.col("e.__ce").alias(END),
        F.col(f"e.{POS}").alias(POS),
        F.col("o.__sdrop").alias("__sdrop"),
        *[F.col(f"e.{k}").alias(k) for k in payload],
    )
    closed = matched.filter(~F.col("__sdrop")).drop("__sdrop")
    used = j.select(*[F.col(f"o.{k}").alias(k) for k in [*key, RANK]])
    still_open = checkpoint(
        s.join(
            used.alias("u"),
            [F.col(f"o.{k}").eqNullSafe(F.col(f"u.{k}")) for k in [*key, RANK]],
            "left_anti",
        ).drop(RANK)
    )
    return closed, still_open, counts


def _close_versions(
    a: DataFrame, spec: InputSpec, open_edges: DataFrame | None, cache: EpochCache
) -> tuple[DataFrame, DataFrame, Counter, Callable[[], DataFrame]]:
    """Close each key's open version (semantics §1, :class:`Versions`), in Spark.

    Per (source partition, key), in position order over the open version left by the epochs
    before (at most one per key: the open-edge state :func:`_match_edges` keeps too) and the
    epoch's versions (START edges) and deletes (END edges, :func:`_version_edges`), every row
    whose predecessor is a version closes it: an END edge with the predecessor's adjusted start
    and payload, ending at the row's time or, when that breaks the CTI ``c`` in force, at ``c``
    (§3.4; counted as adjusted). If the predecessor was dropped, so is its END edge (counted).
    A delete whose predecessor is none or a delete has nothing to close: ignored, counted
    (``deletes_ignored``). A row whose time is before its predecessor version's original time
    is malformed. Returns the END edges, the versions still open (the last row of a key when it
    is a version), the counts, and a maker of the END edges dropped or adjusted, for the
    diagnostic stream (:func:`engine.diagnostics.diagnostic_rows`: rows as the scan's, made when
    it is read): the original lifetime ``[version's original start, row's time)``, the closed
    version's payload, the closing row's position, partition and CTI in force, and ``__drop``
    if the version was dropped.
    """
    payload = spec.payload
    assert spec.versions is not None
    keys = list(spec.versions.key)
    rows = a.filter(F.col(KIND) == Kind.INSERT).select(
        _P,
        F.col(START).alias("__os"),
        F.when(F.col("__adj"), F.col("__cb")).otherwise(F.col(START)).alias("__as"),
        F.col("__drop").alias("__sdrop"),
        F.col(POS).alias("__spos"),
        (F.col(EDGE) == "END").alias("__del"),
        F.greatest(F.col(START), F.col("__cb")).alias("__ce"),  # where it closes its key's
        F.col("__viol").alias("__late"),
        "__cb",
        F.lit(True).alias("__new"),
        *payload,
    )
    if open_edges is not None:
        carried = open_edges.select(
            "*",
            F.lit(False).alias("__del"),
            F.lit(None).cast(LongType()).alias("__ce"),
            F.lit(False).alias("__late"),
            F.lit(None).cast(LongType()).alias("__cb"),
            F.lit(False).alias("__new"),
        )
        rows = carried.unionByName(rows)
    by_key = Window.partitionBy(_P, *keys).orderBy("__spos")
    before = F.struct("__os", "__as", "__sdrop", "__del", F.struct(*payload).alias("p"))
    j = cache.keep(
        rows.select(
            "*",
            F.lag(before).over(by_key).alias("__prev"),
            F.lead("__spos").over(by_key).isNull().alias("__last"),
        )
    )
    prev = F.col("__prev")
    closes = F.col("__new") & prev.isNotNull() & ~prev["__del"]
    bad = closes & (F.col("__os") < prev["__os"])
    row = F.struct(
        F.col("__spos").alias(POS),
        _P,
        "__os",
        "__del",
        prev["__os"].alias("__before"),
        F.struct(*keys).alias("__key"),
    )
    found = j.agg(
        F.min_by(row, F.when(bad, F.col("__spos"))).alias("bad"),
        F.count(F.when(closes & prev["__sdrop"], 1)).alias("cascade"),
        F.count(F.when(F.col("__new") & F.col("__del") & ~closes, 1)).alias("unknown"),
        F.count(F.when(closes & ~prev["__sdrop"] & F.col("__late"), 1)).alias("adjusted"),
    ).first()
    if found["bad"] is not None:
        b = found["bad"]
        key = b["__key"].asDict()
        raise _version_before(spec, tuple(b[POS]), b[_P], key, b["__os"], b["__before"], b["__del"])
    counts = Counter(
        dropped=found["cascade"], adjusted=found["adjusted"], deletes_ignored=found["unknown"]
    )
    closed = j.filter(closes & ~prev["__sdrop"]).select(
        F.lit(Kind.INSERT).alias(KIND),
        F.lit("END").alias(EDGE),
        prev["__as"].alias(START),
        F.col("__ce").alias(END),
        F.col("__spos").alias(POS),
        *[prev["p"][k].alias(k) for k in payload],
    )
    still_open = j.filter(~F.col("__del") & F.col("__last")).select(
        _P, "__os", "__as", "__sdrop", "__spos", *payload
    )

    def ends() -> DataFrame:
        # the ones the counts above count: cascade (dropped) and adjusted
        return j.filter(closes & (prev["__sdrop"] | F.col("__late"))).select(
            F.lit(Kind.INSERT).alias(KIND),
            F.lit("END").alias(EDGE),
            prev["__os"].alias(START),
            F.col("__os").alias(END),
            F.col("__spos").alias(POS),
            _P,
            "__cb",
            F.col("__late").alias("__viol"),
            prev["__sdrop"].alias("__drop"),
            *[prev["p"][k].alias(k) for k in payload],
        )

    return closed, checkpoint(still_open), counts, ends


def _version_before(
    spec: InputSpec, pos: tuple, part: int, key: dict, start: int, before: int, delete: bool
) -> _StopEpoch:
    """The error for a version (or delete) whose time is before its key's open version's."""
    what = "delete" if delete else "version"
    return _StopEpoch(
        pos,
        MalformedRecordError(
            f"{what} on input {spec.name!r} (partition {spec.partitions[part]!r}, offset "
            f"{pos[_OFF]}) for key {key} is at {format_ticks(start)}, before the key's open "
            f"version (valid from {format_ticks(before)}); expected each key's versions in "
            "valid-from order within a partition. Fix: send a key's versions in the order "
            "they became valid (a correction of the past is a new version from now on)"
        ),
    )


_OFF = POS_TYPE.names.index("off")  # a position tuple's offset in its source partition


def _unmatched_end(
    spec: InputSpec, pos: tuple, part: int, start: int, end: int, payload: Any
) -> _StopEpoch:
    """The error for an END edge that closes no open START edge (``payload``: by column name)."""
    values = {k: payload[k] for k in spec.payload}
    event = Event(EventKind.INSERT, start, end, values, EdgeType.END)
    return _StopEpoch(
        pos,
        MalformedRecordError(
            f"END edge with no open START edge on input {spec.name!r} (partition "
            f"{spec.partitions[part]!r}, offset {pos[_OFF]}): {event.describe()}; expected a START "
            "edge with the same start and payload earlier in the same partition. Fix: send the "
            "START edge first, or bind the input with a POINT or INTERVAL shape"
        ),
    )


#: an input with edges matches them on the driver (:func:`_edges_on_driver`) when the epoch's
#: items and the START edges left open before it are at most this many; else in Spark. The
#: driver's matching (:func:`_fifo_pairs`) took 22 ms for 10,000 edges and 0.6 s for 100,000;
#: Spark's, about 0.3 s of jobs an epoch whatever the size
DRIVER_EDGES = 20_000

#: payload types whose values the driver compares as Spark's null-safe equality does
_DRIVER_TYPES = (
    IntegralType,
    FloatType,
    DoubleType,
    DecimalType,
    BooleanType,
    DateType,
    BinaryType,
)


def driver_compares(types: list[Any]) -> bool:
    """Whether the driver's FIFO matching (:func:`_fifo_pairs`) compares payload values of these
    types as Spark's null-safe equality does (numbers, bytewise strings, booleans, dates,
    binary): where :class:`engine.physical.InputScan` may match END edges on the driver."""
    return all(
        isinstance(t, _DRIVER_TYPES) or (isinstance(t, StringType) and _bytewise(t)) for t in types
    )


def _few_edges(open_rows: int | None, rows: int) -> bool:
    return open_rows is not None and open_rows + rows <= DRIVER_EDGES


def _edges_on_driver(
    a: DataFrame, spec: InputSpec, open_edges: DataFrame | None
) -> tuple[DataFrame, DataFrame, Counter, int]:
    """:func:`_match_edges` for an epoch of few edges: the START edges (open before the epoch
    and new) and the END edges collected in one job and matched on the driver (per partition,
    original start and payload, FIFO); the closed END edges and the START edges still open are
    frames made from the driver's rows. Returns them, the END edges' counts (as
    :func:`_match_edges`), and how many START edges are still open."""
    import pyarrow.compute as pc

    payload = spec.payload
    starts = _starts(a, payload)
    if open_edges is not None:
        starts = open_edges.unionByName(starts)
    both = starts.unionByName(_ends(a, payload), allowMissingColumns=True)
    table = pa.Table.from_batches(both._collect_as_arrow(empty_list_if_zero_records=False))
    pairs, still, bad = _fifo_pairs(table, payload)
    if bad is not None:
        r = table.slice(bad[1], 1).to_pylist()[0]
        raise _unmatched_end(spec, bad[0], r[_P], r["__os"], r[END], r)
    dropping = table.column("__sdrop").to_pylist()
    kept = [(i, j) for i, j in pairs if not dropping[j]]
    spark = a.sparkSession
    e_rows = pa.array([i for i, _ in kept], pa.int64())
    s_rows = pa.array([j for _, j in kept], pa.int64())
    closed = pa.table(
        {
            KIND: pa.array([Kind.INSERT] * len(kept), pa.string()),
            EDGE: pa.array(["END"] * len(kept), pa.string()),
            START: pc.take(table.column("__as"), s_rows),
            END: pc.take(table.column("__ce"), e_rows),
            POS: pc.take(table.column(POS), e_rows),
            **{c: pc.take(table.column(c), e_rows) for c in payload},
        }
    )
    fields = {f.name: f for f in a.schema.fields}
    closed_schema = StructType(
        [
            StructField(KIND, StringType()),
            StructField(EDGE, StringType()),
            StructField(START, LongType()),
            StructField(END, LongType()),
            fields[POS],
            *(fields[c] for c in payload),
        ]
    )
    still_open = table.take(pa.array(still, pa.int64())).select(starts.columns)
    late = table.column("__late").to_pylist()
    counts = Counter(dropped=len(pairs) - len(kept), adjusted=sum(bool(late[i]) for i, _ in kept))
    return (
        local_frame(spark, closed, closed_schema),
        local_frame(spark, still_open, starts.schema),
        counts,
        len(still),
    )


def _fifo_pairs(table: pa.Table, payload: list[str]) -> tuple[list, list[int], tuple | None]:
    """Match END edges to START edges (rows of ``table``, an END edge's with a ``POS``): in
    each (partition, original start, payload), the n-th END edge by position closes the n-th
    START edge, which must come before it. Returns the (END edge, START edge) pairs, the START
    edges left open, and the (position, row) of the first END edge that closes none."""
    keys = list(zip(*(table.column(c).to_pylist() for c in [_P, "__os", *payload]), strict=True))
    spos = [s and tuple(s.values()) for s in table.column("__spos").to_pylist()]
    epos = [e and tuple(e.values()) for e in table.column(POS).to_pylist()]
    opened = [
        (k, s, i) for i, (k, s, e) in enumerate(zip(keys, spos, epos, strict=True)) if e is None
    ]
    closing = [(k, e, i) for i, (k, e) in enumerate(zip(keys, epos, strict=True)) if e is not None]
    bad: tuple[tuple, int] | None = None
    pairs: list[tuple[int, int]] = []
    for j, i in fifo_pairs(opened, closing):  # (START edge, END edge) row indices
        if j is None or spos[j] > epos[i]:  # no START edge before it
            bad = min(bad, (epos[i], i)) if bad is not None else (epos[i], i)
            continue
        pairs.append((i, j))
    used = {j for _, j in pairs}
    still = [j for j, e in enumerate(epos) if e is None and j not in used]
    return pairs, still, bad


def _ends(a: DataFrame, payload: list[str]) -> DataFrame:
    """The epoch's END edges as :func:`_match_edges` matches them. One that breaks the CTI ``c``
    in force (``__late``) is matched like the others and ends at ``c`` (semantics §3.4: it closes
    its open START edge there, counted as adjusted; it is never dropped while that edge is open).
    """
    # SQL text: one py4j call per column, not one per column and operator
    return a.filter(f"{KIND} = '{Kind.INSERT}' AND {EDGE} = 'END'").selectExpr(
        _P,
        f"{START} AS __os",
        END,  # as it came, for errors
        f"greatest({END}, __cb) AS __ce",  # the end it closes its edge at
        "__viol AS __late",
        POS,
        *sql_names(payload),
    )


def _starts(a: DataFrame, payload: list[str]) -> DataFrame:
    """The epoch's START edges as :func:`_match_edges` matches them."""
    return a.filter(f"{KIND} = '{Kind.INSERT}' AND {EDGE} = 'START'").selectExpr(
        _P,
        f"{START} AS __os",
        f"CASE WHEN __adj THEN __cb ELSE {START} END AS __as",
        "__drop AS __sdrop",
        f"{POS} AS __spos",
        *sql_names(payload),
    )


#: the columns the sequencer adds to each row
_SEQUENCED = [
    ("__cb", "long"),
    ("__ca", "long"),
    ("__viol", "boolean"),
    ("__adj", "boolean"),
    ("__drop", "boolean"),
]


_SUM = "__sum"  # the scan's summary of a partition's epoch, on its STATE row only
#: the partition's running values after the epoch, first in a summary (``max_start`` and
#: ``period`` null until it has counted an event); its CTI is the STATE row's ``__ca``
_CARRIED = ["count", "max_start", "period"]
#: the counts of a summary, after the carried values (``first_violation``, ``first_bad`` and
#: :data:`_LAST` follow them)
_COUNTS = [
    "events_in",
    "ctis_explicit",
    "ctis_ignored",
    "ctis_generated",
    "ctis_imported",
    "dropped",
    "adjusted",
]


#: the arrival and offset of the partition's last own item of the epoch (null if it had none),
#: 1 if that item was its end (EOI), else 0, and the offset the next read starts from (null if
#: the epoch read nothing)
_LAST = ["arrival", "offset", "ended", "next"]


@dataclass(frozen=True)
class _ScanRules:
    """What an input's per-partition scan (:func:`_sequencer`) applies and hands on: the
    input's CTI generation and policy, and the scan's choices in the physical plan. Made on
    the driver (:meth:`of`) and shipped with the scan's function to the executors."""

    #: CTI generation: None without, else the count (``by_count``) or the period in ticks
    frequency: int | None = None
    by_count: bool = False
    delay: int = 0
    flush_on_stop: bool = False
    #: the policy for an item that breaks the CTI: ADJUST (else DROP)
    adjust: bool = False
    #: an input bound with ``versions=``: each event row is first made the edge it stands for
    versions: Versions | None = None
    #: :attr:`engine.physical.InputScan.pushed`: the window whose partial aggregates it makes
    pushed: PushedWindow | None = None
    #: with :attr:`engine.physical.InputScan.packed`, the payload's names: it packs the events
    pack: tuple[str, ...] | None = None

    @classmethod
    def of(cls, scan: InputScan) -> _ScanRules:
        spec = scan.spec
        gen = spec.settings.generation if spec.settings else None
        return cls(
            gen.frequency_ticks if gen is not None else None,
            bool(gen is not None and gen.by_count),
            gen.delay_ticks if gen is not None else 0,
            spec.flush_on_stop,
            spec.policy is AdvanceTimePolicy.ADJUST,
            spec.versions,
            scan.pushed,
            tuple(spec.payload) if scan.packed else None,
        )


def _sequenced_schema(schema: StructType, rules: _ScanRules) -> StructType:
    """The scan's output: its input's columns but ``__src``, then the sequenced ones and the
    summary, then the pushed window's start and partial columns, or the packed
    events' column. Every column may be null: a STATE row has no payload and no position, a
    PARTIAL row only its keys and partials, a PACKED row only its packed events."""
    pos = schema[POS].dataType
    summary = StructType([StructField(k, LongType()) for k in [*_CARRIED, *_COUNTS]])
    summary = summary.add("first_violation", pos).add("first_bad", pos)
    for name in _LAST:
        summary = summary.add(name, LongType())
    out = StructType([StructField(f.name, f.dataType) for f in schema.fields if f.name != _SRC])
    for name, typ in _SEQUENCED:
        out = out.add(name, typ)
    out = out.add(_SUM, summary)
    for f in rules.pushed.fields.fields if rules.pushed is not None else []:
        out = out.add(f.name, f.dataType)
    if rules.pack is not None:
        out = out.add(ARROW, PACKED_TYPE)
    return out


def _sequencer(
    states: list[tuple[int, int | None, int | None, int]], rules: _ScanRules
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The per-partition scan of §3 over one source partition's rows in arrival order, by
    ``rules``.

    ``states[p]``: partition p's (count, max start, period, CTI) before the epoch. It keeps the
    running count and max start of counted events (points, intervals, START edges, dropped or
    not) and the period of that max start; a CTI is generated after the N-th counted event, or
    after one that moves the period forward. For each row it adds ``__cb``, the partition's CTI
    before it (running max of explicit, imported, flushed, watermark and generated CTI values),
    ``__ca`` after it, ``__viol`` whether it breaks ``__cb``, and the policy's
    ``__adj``/``__drop``. After the partition's last row, one ``STATE`` row: the partition's CTI
    after the epoch in ``__ca``, and in ``__sum`` its count, max start and period after the
    epoch, the epoch's counts, its first violation and malformed record, the arrival and offset
    of its last own item and whether that was its end. Only what later plans read leaves the
    scan: every column costs its conversion to Arrow and back and its place in the cached
    output. With ``pushed``, the events taken go into the window's partial aggregates
    (:func:`engine.operators.window.pushed_partials`) instead: the scan hands on only the rows
    that raise or break the CTI, then one PARTIAL row per window and group, before STATE. With
    ``pack`` (the payload's names), the events taken are packed (:mod:`engine.packed`: start
    as adjusted, end, position, payload) and handed on as PACKED rows, the rest as with
    ``pushed``. With ``versions``, each event row is first made the edge it stands for
    (:func:`_version_edges`)."""
    frequency, by_count, delay = rules.frequency, rules.by_count, rules.delay
    flush_on_stop, adjust, versions = rules.flush_on_stop, rules.adjust, rules.versions
    pushed, pack = rules.pushed, rules.pack
    extra = _pushed_arrow(pushed)
    if pack is not None:
        extra = [pa.field(ARROW, pa.binary())]

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow.compute as pc

        settle_worker()

        carried: dict | None = None
        for b in batches:
            n = b.num_rows
            if n == 0:
                continue
            part = pc.min_max(b.column(_P)).as_py()
            if carried is None:
                count, max_start, period, cti = states[part["min"]]
                carried = {"count": count, "ms": max_start, "per": period, "cti": cti, "pos": None}
                carried["part"] = part["min"]
                totals = dict.fromkeys(_COUNTS, 0)
                firsts: dict[str, Any] = {"first_violation": None, "first_bad": None}
                last: list[Any] = [None, None, 0, None]
                partials: list[pa.Table] = []  # pushed: each batch's partial aggregates
                taken_events: list[pa.RecordBatch] = []  # pack: each batch's events
            if part["min"] != carried["part"] or part["max"] != carried["part"]:
                raise RuntimeError(
                    f"ingress scan: rows of source partitions {part} in the scan of partition "
                    f"{carried['part']}; expected one partition's rows only (engine bug)"
                )
            kept = [i for i, name in enumerate(b.schema.names) if name != _SRC]
            schema = pa.schema([b.schema.field(i) for i in kept])
            stop = _flags(pc.equal(b.column(KIND), Kind.STOP))
            if stop.any():  # where the read stopped (engine.source.raw_batches): not an item
                last[3] = int(b.column(POS).field("off")[int(np.argmax(stop))].as_py())
                b = b.filter(pa.array(~stop))
                n = b.num_rows
                if n == 0:
                    continue
            if versions is not None:
                b = _version_edges(b, versions.deleted)
            pos = b.column(POS)
            carried["pos"] = _check_order(pos, carried["pos"])
            kind = b.column(KIND)
            is_end = _flags(pc.equal(b.column(EDGE), "END"))
            insert, explicit, bcast, wm, eoi = (
                _flags(pc.equal(kind, k))
                for k in (Kind.INSERT, Kind.CTI, Kind.BCAST, Kind.WM, Kind.EOI)
            )
            diag = _flags(pc.equal(kind, Kind.DIAG))  # §7's decisions: no item of §3
            start = pc.fill_null(b.column(START), 0).to_numpy(zero_copy_only=False)
            end = pc.fill_null(b.column(END), 0).to_numpy(zero_copy_only=False)
            gen = np.zeros(n, dtype=bool)
            if frequency is not None:
                counted = insert & ~is_end
                cnt = carried["count"] + np.cumsum(counted, dtype=np.int64)
                seen = np.cumsum(counted) > 0
                if carried["ms"] is not None:
                    seen[:] = True
                ms = np.maximum.accumulate(np.where(counted, start, np.iinfo(np.int64).min))
                if carried["ms"] is not None:
                    ms = np.maximum(ms, carried["ms"])
                if by_count:
                    gen = counted & (cnt % frequency == 0)
                else:
                    per = np.floor_divide(ms, frequency)
                    prev = np.empty(n, dtype=np.int64)
                    prev_ok = np.empty(n, dtype=bool)
                    prev[1:], prev_ok[1:] = per[:-1], seen[:-1]
                    first = carried["per"]
                    prev[0], prev_ok[0] = (first, True) if first is not None else (0, False)
                    gen = counted & prev_ok & seen & (per > prev)
                    if seen[-1]:
                        carried["per"] = int(per[-1])
                carried["count"] = int(cnt[-1])
                if seen[-1]:
                    carried["ms"] = int(ms[-1])

            # each item's CTI value, lowest where it has none (given > flush > generated)
            contrib = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
            if gen.any():
                contrib = np.where(gen, _saturating_sub(ms, delay), contrib)
            if flush_on_stop:
                contrib = np.where(eoi, MAX_TIME, contrib)
            contrib = np.where(explicit | bcast | wm, start, contrib)
            running = np.maximum.accumulate(contrib)
            ca = np.maximum(running, carried["cti"])
            cb = np.empty(n, dtype=np.int64)
            cb[0] = carried["cti"]
            cb[1:] = ca[:-1]
            carried["cti"] = int(ca[-1])

            viol = insert & np.where(is_end, end < cb, start < cb)
            adj = viol & ~is_end & (end > cb) if adjust else np.zeros(n, dtype=bool)

            # the partition's summary of the epoch, sent on its STATE row after the last batch
            src = b.column(_SRC)
            flushed = bcast & _flags(pc.equal(src, "flush"))
            if flush_on_stop:
                flushed |= eoi
            raised = gen | flushed | wm
            imported = bcast & _flags(pc.equal(src, "import"))
            for k, mask in (
                ("events_in", insert),
                ("ctis_explicit", explicit),
                ("ctis_ignored", explicit & (start <= cb)),
                ("ctis_generated", raised & (ca > cb)),
                ("ctis_imported", imported if carried["part"] == 0 else None),
                # END edges are counted when matched (_match_edges, _edges_on_driver)
                ("dropped", viol & ~adj & ~is_end),
                ("adjusted", adj),
            ):
                if mask is not None:
                    totals[k] += int(np.count_nonzero(mask))
            for k, mask in (
                ("first_violation", viol),
                ("first_bad", _flags(pc.equal(kind, Kind.BAD))),
            ):
                if firsts[k] is None and mask.any():
                    firsts[k] = pos.take([int(np.argmax(mask))])
            if not (bcast | diag).all():  # the partition's last own item (positions increase)
                i = int(np.flatnonzero(~(bcast | diag))[-1])
                last[:3] = [int(pos.field(k)[i].as_py()) for k in ("arr", "off")] + [int(eoi[i])]
            columns = {
                "__cb": pa.array(cb),
                "__ca": pa.array(ca),
                "__viol": pa.array(viol),
                "__adj": pa.array(adj),
                "__drop": pa.array(viol & ~adj & ~is_end),
                _SUM: pa.nulls(n, _summary_type(pos.type)),
            }
            columns.update({f.name: pa.nulls(n, f.type) for f in extra})
            out = pa.RecordBatch.from_arrays(
                [*(b.column(i) for i in kept), *columns.values()], names=[*schema.names, *columns]
            )
            if pushed is None and pack is None:
                yield out
                continue
            taken = insert & ~(viol & ~adj) & ~is_end  # the events the window counts
            if taken.any() and pack is not None:
                starts = pa.array(np.where(adj, cb, start))
                events = pa.RecordBatch.from_arrays(
                    [starts, b.column(END), pos, *(b.column(c) for c in pack)],
                    names=[START, END, POS, *pack],
                )
                taken_events.append(events if taken.all() else events.filter(pa.array(taken)))
            elif taken.any():
                used = b.select(_pushed_columns(pushed))
                if not taken.all():
                    used = used.filter(pa.array(taken))
                starts = np.where(adj, cb, start)[taken]
                partials.append(pushed_partials(pushed, starts, end[taken], used))
            handed = viol | (ca > cb) | diag
            if handed.any():
                yield out.filter(pa.array(handed))
        if carried is None:
            return
        if partials:
            yield _partial_rows(pushed, partials, schema, extra, carried["part"])
        if taken_events:
            yield _packed_rows(
                pack_events(pa.Table.from_batches(taken_events)), schema, extra, carried["part"]
            )
        if last[3] is None and last[1] is not None:
            last[3] = last[1] + 1
        row = {f.name: pa.nulls(1, f.type) for f in schema}
        row[KIND] = pa.array([Kind.STATE], schema.field(KIND).type)
        row[_P] = pa.array([carried["part"]], schema.field(_P).type)
        pos_type = schema.field(POS).type
        summary = [
            *(pa.array([carried[k]], pa.int64()) for k in ("count", "ms", "per")),
            *(pa.array([totals[k]], pa.int64()) for k in _COUNTS),
            *(firsts[k] if firsts[k] is not None else pa.nulls(1, pos_type) for k in firsts),
            *(pa.array([v], pa.int64()) for v in last),
        ]
        sequenced = {
            "__cb": pa.array([carried["cti"]], pa.int64()),
            "__ca": pa.array([carried["cti"]], pa.int64()),
            "__viol": pa.array([False]),
            "__adj": pa.array([False]),
            "__drop": pa.array([False]),
            _SUM: pa.StructArray.from_arrays(summary, fields=list(_summary_type(pos_type))),
        }
        sequenced.update({f.name: pa.nulls(1, f.type) for f in extra})
        yield pa.RecordBatch.from_arrays(
            [*row.values(), *sequenced.values()], names=[*row, *sequenced]
        )

    return scan


def _version_edges(b: pa.RecordBatch, deleted: str | None) -> pa.RecordBatch:
    """The rows of a versioned input as the edges they stand for (semantics §1, Versions): a
    version (an event row whose ``deleted`` is not true) is a START edge at its valid-from time;
    a delete is an END edge whose end is its time (its start is matched by key, not by time:
    :func:`_close_versions`). So generation counts versions and never deletes, and a version or
    a delete below the CTI in force breaks it as a START or an END edge does (§3)."""
    import pyarrow.compute as pc

    insert = pc.fill_null(pc.equal(b.column(KIND), Kind.INSERT), False)
    gone = pa.nulls(b.num_rows, pa.bool_()).fill_null(False)
    if deleted is not None:
        gone = pc.and_(insert, pc.fill_null(b.column(deleted), False))
    edge = pc.if_else(insert, pc.if_else(gone, "END", "START"), b.column(EDGE))
    end = pc.if_else(gone, b.column(START), pc.if_else(insert, MAX_TIME, b.column(END)))
    columns = {EDGE: edge.cast(b.schema.field(EDGE).type), END: end.cast(b.schema.field(END).type)}
    return pa.RecordBatch.from_arrays(
        [columns.get(k, b.column(k)) for k in b.schema.names], schema=b.schema
    )


def _pushed_arrow(pushed: PushedWindow | None) -> list[pa.Field]:
    """The Arrow fields of ``pushed``'s window start and partial columns (none without it)."""
    if pushed is None:
        return []
    from pyspark.sql.pandas.types import to_arrow_type

    # timestamps are instants: the zone only labels them
    fields = pushed.fields.fields
    return [pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC")) for f in fields]


def _pushed_columns(pushed: PushedWindow) -> list[str]:
    """The payload columns ``pushed`` reads: its keys and its aggregates' arguments."""
    args = [c[2] for c in pushed.columns if c[2] is not None]
    return list(dict.fromkeys([*pushed.keys, *args]))


def _partial_rows(
    pushed: PushedWindow | None,
    partials: list[pa.Table],
    schema: pa.Schema,
    extra: list[pa.Field],
    part: int,
) -> pa.RecordBatch:
    """A partition's PARTIAL rows: one per window and group, its keys in their payload columns,
    the window start and partial columns after the summary; every other column null."""
    assert pushed is not None
    keyed = pa.schema([pa.field(k, schema.field(k).type) for k in pushed.keys])
    merged = merge_pushed(pushed, partials, pa.schema([extra[0], *keyed, *extra[1:]]))
    n = merged.num_rows
    row = {f.name: pa.nulls(n, f.type) for f in schema}
    arrow = {"long": pa.int64(), "boolean": pa.bool_()}
    row.update({name: pa.nulls(n, arrow[typ]) for name, typ in _SEQUENCED})
    row[_SUM] = pa.nulls(n, _summary_type(schema.field(POS).type))
    row[KIND] = pa.array([Kind.PARTIAL] * n, schema.field(KIND).type)
    row[_P] = pa.array([part] * n, schema.field(_P).type)
    for name in merged.column_names:
        row[name] = merged.column(name).combine_chunks()
    return pa.RecordBatch.from_arrays(list(row.values()), names=list(row))


def _packed_rows(
    values: list[bytes], schema: pa.Schema, extra: list[pa.Field], part: int
) -> pa.RecordBatch:
    """A partition's PACKED rows: one per packed chunk of its events, every other column null."""
    n = len(values)
    row = {f.name: pa.nulls(n, f.type) for f in schema}
    arrow = {"long": pa.int64(), "boolean": pa.bool_()}
    row.update({name: pa.nulls(n, arrow[typ]) for name, typ in _SEQUENCED})
    row[_SUM] = pa.nulls(n, _summary_type(schema.field(POS).type))
    row[KIND] = pa.array([Kind.PACKED] * n, schema.field(KIND).type)
    row[_P] = pa.array([part] * n, schema.field(_P).type)
    row[ARROW] = pa.array(values, extra[0].type)
    return pa.RecordBatch.from_arrays(list(row.values()), names=list(row))


def _summary_type(pos: pa.DataType) -> pa.DataType:
    """The Arrow type of :data:`_SUM` (see :func:`_sequenced_schema`)."""
    fields = [(k, pa.int64()) for k in [*_CARRIED, *_COUNTS]]
    return pa.struct(
        [*fields, ("first_violation", pos), ("first_bad", pos), *((k, pa.int64()) for k in _LAST)]
    )


def _flags(mask: Any) -> Any:
    """A boolean Arrow array as numpy, null as False."""
    import pyarrow.compute as pc

    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _saturating_sub(values: Any, d: int) -> Any:
    """numpy :func:`engine.rows.saturating_sub`: ``values - d`` clamped, ``±inf`` kept."""
    import numpy as np

    if d == 0:
        return values
    if d > 0:
        shifted = np.where(values < MIN_TIME + d, MIN_TIME, values - d)
    else:
        shifted = np.where(values > MAX_TIME + d, MAX_TIME, values - d)
    return np.where((values == MIN_TIME) | (values == MAX_TIME), values, shifted)


def _check_order(pos: Any, before: tuple | None) -> tuple:
    """Raise if the rows are not in ``__pos`` order (after ``before``, the previous batch's
    last); return the last position. Spark sorts each partition's rows before the scan."""
    import numpy as np

    fields = [pos.field(i).to_numpy(zero_copy_only=False) for i in range(pos.type.num_fields)]
    last = tuple(int(f[-1]) for f in fields)
    if before is not None:
        fields = [np.concatenate([[v], f]) for v, f in zip(before, fields, strict=True)]
    decided = np.zeros(len(fields[0]) - 1, dtype=bool)
    for f in fields:
        back = (f[1:] < f[:-1]) & ~decided
        if back.any():
            i = int(np.argmax(back))
            got = [tuple(int(g[j]) for g in fields) for j in (i, i + 1)]
            raise AssertionError(
                f"ingress scan: a source partition's rows came out of position order ({got[1]} "
                f"after {got[0]}, as (arr, inp, off, part, sub)); expected them sorted by "
                "position. This is an engine bug (Spark's plan changed): please report it"
            )
        decided |= f[1:] > f[:-1]
    return last
