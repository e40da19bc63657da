"""The engine's row layout: the wire schema of the frames an epoch passes between operators.
The CTI rules that cross operators live in :mod:`engine.ctis`.

A stream inside one epoch is a pair of DataFrames (:class:`Flow`):

* ``events``: ``__kind`` (a :class:`Kind`), ``__edge`` (null, ``START`` or ``END``), ``__start``,
  ``__end`` (int64 ticks), ``__pos`` (the arrival position, a struct ordered field by field),
  then payload columns;
* ``ctis``: ``__pos`` and ``__c`` (the CTI value), strictly increasing in both.

CTIs travel as rows, so explicit, imported, generated and pulled-back CTIs all go through the same
Spark plans as events (architecture.md: "CTIs are rows").
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from py4j.protocol import Py4JError
from pyspark import SparkContext, StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

__all__ = [
    "CTI",
    "EDGE",
    "END",
    "HEADER",
    "KEY",
    "KIND",
    "POS",
    "POS_TYPE",
    "START",
    "Checkpoints",
    "EpochCache",
    "Flow",
    "Kind",
    "checkpoint",
    "counted_checkpoint",
    "frames",
    "keyed_inputs",
    "leaf_rdds",
    "local_ctis",
    "payload_columns",
    "pos_literal",
    "release",
    "same_group",
    "saturating_sub",
    "sql_names",
    "state_rows",
    "with_rows",
]

KIND, EDGE, START, END, POS, CTI = "__kind", "__edge", "__start", "__end", "__pos", "__c"
KEY = "__kk"  # a keyed CTI's substream key value
HEADER = (KIND, EDGE, START, END, POS)


class Kind(StrEnum):
    """What a row of the engine's frames is: its ``__kind`` tag, every one the engine writes or
    reads. A string on the wire (``__kind`` is a string column in the raw rows, the Arrow
    batches of the scan and the held state), so SQL text reads ``f"{KIND} = '{Kind.INSERT}'"``.
    The first five come from the source (:mod:`engine.source`) and the ingress; the last four
    carry side data that shares the event frame of one scan or join."""

    #: an event (semantics §1)
    INSERT = "INSERT"
    #: an explicit CTI (§2)
    CTI = "CTI"
    #: the end of a source partition's input (§3.2, flush_on_stop)
    EOI = "EOI"
    #: where a read stopped before a partition's end: not an item, the next read starts there
    STOP = "STOP"
    #: a malformed record, which the driver raises once every item before it is taken
    BAD = "BAD"
    #: a CTI every partition of an input takes: an imported one (§3.3) or the flush at stop
    BCAST = "BCAST"
    #: an arrival-time watermark (§7), and a keyed one (per substream key)
    WM = "WM"
    KWM = "KWM"
    #: side data: a partition's scan state, partial aggregates (engine.operators.window
    #: PushedWindow), packed events (engine.packed), a join's held events
    STATE = "STATE"
    PARTIAL = "PARTIAL"
    PACKED = "PACKED"
    HELD = "HELD"
    #: what §7 did to an event it dropped or moved (``__edge``: ``dropped:<reason>`` or
    #: ``adjusted:<reason>``), for the diagnostic stream (engine.diagnostics): no item of §3
    DIAG = "DIAG"


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

    def adopt(self, other: EpochCache) -> None:
        """Take ``other``'s frames: they are released with this cache's."""
        self._kept.extend(other._kept)
        other._kept.clear()


@dataclass(frozen=True)
class Flow:
    """One operator's output for one epoch: its events and its CTIs. ``edges``: whether the
    events can hold edges (False lets operators skip matching END edges).

    ``keyed``: the keyed CTIs of a stream with substreams (``__pos``, ``__kk`` the key value,
    ``__c``): "no more events whose ``key`` column equals ``__kk`` start before ``__c``", or None.
    A key's CTI is the larger of the stream's latest CTI and its latest keyed one; a keyed CTI at
    the same position as a CTI comes after it (docs/decisions.md, "Per-key CTIs").

    ``latest``: the largest of ``ctis`` as the driver knows it without a Spark job (``MIN_TIME``:
    the epoch has no CTI), or None when only a job over ``ctis`` can tell.

    ``partials``: the epoch's partial aggregates (``__ws``, keys, partial columns) for the window
    that alone reads this flow (:class:`engine.operators.window.PushedWindow`), computed by an
    input's scan (its events then empty) or by a join (its events then its edges only, and each
    row also the latest time of the pairs counted in it, ``__latest``); else None.

    ``packed``: an input's events packed by its scan (:mod:`engine.packed`), for the lookup
    join that alone reads it; ``events`` then unpacks them, for a plan that needs rows.

    ``rows``: at most this many rows in ``events`` (an input's items of the epoch, and a filter
    or projection of them), or None when only a job over ``events`` can tell.

    ``unbounded``: whether an event may end at +inf (an open edge, an interval to +inf, a shift
    or a duration that saturated; §5's bounded work): a window keeps such events until the CTI
    reaches +inf (docs/decisions.md, "Windows"). False only where every event has a finite end
    (POINT inputs, window results, a join with such a side); a point at the very last tick is
    taken as finite there."""

    events: DataFrame
    ctis: DataFrame
    edges: bool = True
    keyed: DataFrame | None = None
    key: str | None = None
    latest: int | None = None
    partials: DataFrame | None = None
    packed: DataFrame | None = None
    rows: int | None = None
    unbounded: bool = True
    #: an input's diagnostics of the epoch (engine.diagnostics.diagnostic_rows), made when
    #: called, else None
    diagnostics: Callable[[], DataFrame] | None = None

    def last_cti(self) -> int:
        """The largest of :attr:`ctis` (``MIN_TIME``: the epoch has no CTI): :attr:`latest`
        where the driver knows it, else one small Spark job."""
        if self.latest is not None:
            return self.latest
        found = self.ctis.agg(F.max(CTI)).first()[0]
        return MIN_TIME if found is None else found

    def merged(self) -> Flow:
        """The same stream with its substreams merged: its CTIs only."""
        return Flow(
            self.events, self.ctis, self.edges, latest=self.latest, unbounded=self.unbounded
        )


#: the local checkpoints made while a :meth:`Checkpoints.recording` block runs (in this context)
_made: ContextVar[list[DataFrame] | None] = ContextVar("ctistream_checkpoints", default=None)


def checkpoint(df: DataFrame, eager: bool = True, level: StorageLevel | None = None) -> DataFrame:
    """``df.localCheckpoint(...)``: its rows computed once and kept by Spark's block manager,
    its lineage cut. Inside :meth:`Checkpoints.recording` the checkpoint is recorded, so it is
    released as soon as no state refers to it. A frame made from the driver's rows
    (:func:`local_ctis`) has no lineage to cut: it is its own checkpoint."""
    if df in _local:
        return df
    if level is None:
        out = df.localCheckpoint(eager=eager)
    else:
        out = df.localCheckpoint(eager=eager, storageLevel=level)
    made = _made.get()
    if made is not None:
        made.append(out)
    return out


#: numbers the metrics :func:`counted_checkpoint` observes (a metric's name is unique in a plan)
_observed = itertools.count()


@dataclass(frozen=True)
class _Counter:
    """Where the job that computes a checkpoint counts rows: aggregate ``index`` of the metrics
    a ``CollectMetrics`` node collects, in its accumulator ``acc`` (a JVM object)."""

    acc: Any
    index: int


#: state frames -> their rows: the number, or the counter the job that computes them fills
_rows: weakref.WeakKeyDictionary[DataFrame, int | _Counter] = weakref.WeakKeyDictionary()


def counted_checkpoint(df: DataFrame, rows: Sequence[str]) -> tuple[DataFrame, list[Any]]:
    """A lazy local checkpoint of ``df`` (:func:`checkpoint`) and, per SQL aggregate in ``rows``
    (``count(1)``, ``count_if(<condition>)``: how many rows of state a selection of the
    checkpoint holds), a counter of its value over ``df``'s rows for :func:`with_rows`, or None
    where Spark's plan has no place to read it from.

    The aggregates are ``df.observe``'d: Spark's ``CollectMetrics`` node adds up each
    partition's rows in an accumulator as a task computes it, so whichever job computes the
    checkpoint (the one that first reads it, or the epoch's job at its end: :func:`hold`)
    counts them, and counting runs no job of its own. A partition is computed once: its blocks
    stay until the checkpoint is released. The accumulator keeps the last attempt of each task
    (a stage run again is not counted twice), over every job that computed some of its
    partitions (``lastAttemptValueForAllRDDs``: a job that read a few partitions, e.g. a
    ``limit``, and the one that computed the rest)."""
    if not rows:
        return checkpoint(df, eager=False), []
    name = f"ctistream_rows_{next(_observed)}"
    observed = df.observe(name, *(F.expr(r) for r in rows))
    out = checkpoint(observed, eager=False)
    acc = _accumulator(observed)
    return out, [None if acc is None else _Counter(acc, i) for i in range(len(rows))]


def _accumulator(observed: DataFrame) -> Any:
    """The accumulator of the ``CollectMetrics`` node near the top of ``observed``'s executed
    plan, or None. Above it there may be adaptive execution's nodes, and a projection (of the
    subexpressions the metric shares with the frame) or other nodes with the node below them
    first."""
    try:
        node = observed._jdf.queryExecution().executedPlan()
        for _ in range(_DEPTH):
            name = node.nodeName()
            if name == "CollectMetrics":
                sc = SparkContext._active_spark_context
                assert sc is not None and sc._jvm is not None
                context = getattr(sc._jvm, "org.apache.spark.util.AccumulatorContext")
                return context.get(node.accumulatorId()).get()  # registered while the plan lives
            if name == "AdaptiveSparkPlan":
                node = node.executedPlan()
            elif name.endswith("QueryStage"):  # adaptive execution's stage of the final plan
                node = node.plan()
            else:
                node = node.children().apply(0)
    except Py4JError:  # a plan of another shape: the rows are not known (state_rows None)
        return None
    return None


#: how deep :func:`_accumulator` looks for the node
_DEPTH = 6


def with_rows(df: DataFrame, rows: int | _Counter | None) -> DataFrame:
    """``df``, state whose rows are ``rows``: known on the driver, or a counter from
    :func:`counted_checkpoint` (None: not known)."""
    if rows is not None:
        _rows[df] = rows
    return df


def state_rows(df: DataFrame) -> int | None:
    """How many rows state frame ``df`` holds (:func:`with_rows`, :func:`hold`), without a Spark
    job: known on the driver or counted by the job that computed it, read once that job ran
    (after the epoch that made ``df``: it computes all its state); None where not known."""
    found = _rows.get(df)
    if not isinstance(found, _Counter):
        return found
    try:
        value = found.acc.lastAttemptValueForAllRDDs()
    except Py4JError:  # under a legacy setting, an accumulator that adds every attempt
        n = int(found.acc.value().getLong(found.index))
    else:
        if not value.isDefined():  # Spark could not tell the last attempts apart
            return None
        n = int(value.get().getLong(found.index))
    _rows[df] = n  # read once: the accumulator is no longer needed
    return n


@contextmanager
def made_checkpoints() -> Iterator[list[DataFrame]]:
    """The local checkpoints made in this block (in this context), to be recorded later by an
    epoch that takes them (:func:`adopt_checkpoints`) or released (:func:`release_checkpoints`)."""
    made: list[DataFrame] = []
    token = _made.set(made)
    try:
        yield made
    finally:
        _made.reset(token)


def adopt_checkpoints(made: list[DataFrame]) -> None:
    """Record ``made`` (see :func:`made_checkpoints`) as made in the current recording."""
    current = _made.get()
    if current is not None:
        current.extend(made)


def release_checkpoints(made: list[DataFrame]) -> None:
    for df in made:
        df._jdf.queryExecution().analyzed().rdd().unpersist(False)


class Checkpoints:
    """The local checkpoints of one query, released once nothing kept refers to them.

    ``unpersist()`` on a DataFrame made by ``localCheckpoint()`` leaves its blocks in place;
    Spark frees them only when the JVM's garbage collector has collected the checkpointed RDD,
    which may take many epochs, while the blocks fill the memory store and the heap grows with
    the number of epochs. So every checkpoint an epoch makes is recorded, and after the epoch
    (committed or not) every recorded checkpoint that the query's state does not read from is
    unpersisted at once. A checkpoint read by a lazy state DataFrame stays."""

    def __init__(self) -> None:
        self._known: dict[int, Any] = {}  # RDD id -> the JVM RDD (kept until released)

    @contextmanager
    def recording(self) -> Iterator[None]:
        made: list[DataFrame] = []
        token = _made.set(made)
        try:
            yield
        finally:
            _made.reset(token)
            for df in made:
                rdd = df._jdf.queryExecution().analyzed().rdd()
                self._known[rdd.id()] = rdd

    def release_all_but(self, *kept: Any, compute: bool = False) -> None:
        """Unpersist every recorded checkpoint that no DataFrame in ``kept`` (see
        :func:`frames`) reads from. ``compute``: first compute, in one job, the recorded lazy
        checkpoints that ``kept`` reads and no job has computed yet (:func:`hold` makes state
        that way), while what they are computed from is still there."""
        live = {r.id(): r for df in frames(kept) for r in leaf_rdds(df)}
        if compute:
            _compute_together(
                [r for i, r in live.items() if i in self._known and not r.isCheckpointed()]
            )
        for i, rdd in self._known.items():
            if i not in live:
                rdd.unpersist(False)
        self._known = live


def _compute_together(rdds: list[Any]) -> None:
    """Compute the JVM RDDs ``rdds`` (lazy local checkpoints) in one job: a count of their
    union keeps each one's partitions as they are computed. A checkpoint whose partitions a
    job already computed (it read the checkpoint, below another checkpoint it ended at) only
    needs its lineage cut: done on the driver, without a job."""
    sc = SparkContext._active_spark_context
    assert sc is not None and sc._gateway is not None and sc._jvm is not None
    if rdds:
        cached = {i.id(): i for i in sc._jsc.sc().getRDDStorageInfo()}
        rdds = [r for r in rdds if not _cut_if_computed(r, cached.get(r.id()))]
    if not rdds:
        return
    together = sc._gateway.new_array(
        getattr(sc._jvm, "org.apache.spark.api.java.JavaRDD"), len(rdds)
    )
    for k, rdd in enumerate(rdds):
        together[k] = rdd.toJavaRDD()
    sc._jsc.union(together).count()


def _cut_if_computed(rdd: Any, info: Any) -> bool:
    """Finish local checkpoint ``rdd`` if every partition of it is cached (``info``: its
    ``RDDInfo``; Spark's local checkpointing then runs no job, it only cuts the lineage).
    Whether it did."""
    if info is None or info.numCachedPartitions() < rdd.getNumPartitions():
        return False
    rdd.doCheckpoint()
    return bool(rdd.isCheckpointed())


def leaf_rdds(df: DataFrame) -> list[Any]:
    """The JVM RDDs that ``df``'s plan reads (a local checkpoint is one, for example)."""
    leaves = df._jdf.queryExecution().analyzed().collectLeaves()
    # by index: iterating a JVM collection ends in an exception that PySpark's error handling
    # classifies in about 80 py4j calls
    picked = (leaves.apply(i) for i in range(leaves.size()))
    return [leaf.rdd() for leaf in picked if leaf.nodeName() == "LogicalRDD"]


def release(value: Any) -> None:
    """Unpersist the DataFrames in ``value`` (see :func:`frames`) and the RDDs they read from
    (their local checkpoints: ``unpersist()`` on the DataFrames leaves those in place)."""
    for df in frames(value):
        df.unpersist()
        for rdd in leaf_rdds(df):
            rdd.unpersist(False)


def frames(value: Any) -> Iterator[DataFrame]:
    """The DataFrames in ``value``: a DataFrame, or dataclasses, dicts, lists and tuples of
    them (operator and ingress state)."""
    if isinstance(value, DataFrame):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from frames(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from frames(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from frames(v)


def payload_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if not c.startswith("__")]


def same_group(keys: Iterable[str], left: str, right: str) -> Column:
    """A join condition: equal group ``keys`` of the aliases ``left`` and ``right`` (null is a
    group of its own, as in ``groupBy``)."""
    same = F.lit(True)
    for k in sql_names(keys):
        same = same & F.col(f"{left}.{k}").eqNullSafe(F.col(f"{right}.{k}"))
    return same


def sql_names(names: Iterable[str]) -> list[str]:
    """Column names quoted for SQL text (``selectExpr``, ``expr``): plan building per epoch uses
    SQL text where a Column expression would cost a py4j call per column and operator."""
    return ["`" + n.replace("`", "``") + "`" for n in names]


def hold(df: DataFrame) -> DataFrame:
    """Keep ``df`` as operator state for the next epoch (a local checkpoint, which cuts its
    lineage), in at most ``spark.sql.shuffle.partitions`` partitions: state that is the union of
    the previous state and the epoch's new rows would otherwise gain partitions every epoch,
    and every later epoch would run a task per partition. Lazy: the epoch computes all its
    state in one job at its end (:meth:`Checkpoints.release_all_but` with ``compute``), not a
    job per operator. That job, or one that read it before, counts its rows
    (:func:`state_rows`)."""
    out, [rows] = counted_checkpoint(few_partitions(df), ["count(1)"])
    return with_rows(out, rows)


def few_partitions(df: DataFrame) -> DataFrame:
    """``df`` in at most ``spark.sql.shuffle.partitions`` partitions (no shuffle): for state
    that is read again next epoch, so that its partitions do not add up epoch after epoch."""
    n = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return df.coalesce(n)


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


#: frames made from the driver's rows (:func:`local_ctis`): each is its own checkpoint
_local: weakref.WeakSet[DataFrame] = weakref.WeakSet()


def local_frame(spark: Any, data: Any, schema: StructType) -> DataFrame:
    """Rows the driver made (tuples, or an Arrow table) as a frame with no plan above them: its
    own checkpoint (:func:`checkpoint`)."""
    if isinstance(data, list):
        df = spark.createDataFrame(data, schema=schema, verifySchema=False)
    elif data.num_rows == 0:  # Spark cannot take an Arrow table of no chunks
        df = spark.createDataFrame([], schema=schema)
    else:
        df = spark.createDataFrame(data, schema=schema)
    _local.add(df)
    return df


def local_ctis(spark: Any, ctis: list[tuple[tuple, int]]) -> DataFrame:
    """CTI rows (``__pos``, ``__c``) that the driver computed, as a frame with no plan above
    them."""
    schema = StructType([StructField(POS, POS_TYPE, False), StructField(CTI, LongType(), False)])
    return local_frame(spark, ctis, schema)


def same_value(v: Any) -> Any:
    """A value as Spark's null-safe equality compares it, for a driver's dictionary key (NaN
    equal to NaN; Python's ``==`` and ``hash`` already make 0.0 and -0.0 one)."""
    return ("NaN",) if isinstance(v, float) and v != v else v


def keyed_inputs(flows: list[Flow], usable: list[bool], on: tuple[str, ...] | None) -> str | None:
    """The substream key an operator over ``flows`` keeps per-key CTIs of, or None: the key of
    the inputs with keyed CTIs that may use them (``usable``; a join's sides also need the key
    in ``on``). Inputs without substreams count with their CTI, valid for every key."""
    keys = {
        f.key
        for f, ok in zip(flows, usable, strict=True)
        if ok and f.keyed is not None and (on is None or f.key in on)
    }
    return keys.pop() if len(keys) == 1 else None
