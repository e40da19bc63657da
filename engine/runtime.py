"""Epochs: the runtime that runs a query's plan on Spark, epoch after epoch (driver).

A query is bound first (:mod:`engine.binding`: adapters, settings, schemas, import order,
build-time checks), then planned (:mod:`engine.physical`: which fusion applies where), and
run here: the runtime executes the physical nodes, each by its executor (``_EXECUTORS``),
commits their state, runs the next epoch's ingress ahead and delivers the output.

A run cuts the arrival sequence of all inputs into epochs (contiguous ranges of arrival stamps).
Each epoch is one pass over the plan: ingress per input (in import order), operators, egress;
state goes from one epoch to the next. A bounded run reads each epoch's items of an input on the
executors, from where the epoch before stopped, in the Python task that runs ingress's scan over
them; the next epoch's ingress runs in a thread while this epoch's operators run (``_Ahead``).
Output is the same for any cut (semantics §4).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from ctistream.engine._spark import collect_driver_garbage, engine_work
from ctistream.engine.binding import BoundInput, bind
from ctistream.engine.contracts import OutputAdapter
from ctistream.engine.diagnostics import diagnostics_flow
from ctistream.engine.egress import EgressState, egress_epoch
from ctistream.engine.errors import (
    EngineError,
    HeldEventsWarning,
    QueryRunError,
    engine_failure,
    spark_message,
    task_error,
)
from ctistream.engine.events import EventShape
from ctistream.engine.ingress import (
    EpochRows,
    IngressState,
    InputSpec,
    PartitionState,
    _StopEpoch,
    ingress_epoch,
)
from ctistream.engine.observer import RunObserver
from ctistream.engine.operators import (
    LifetimeState,
    UnionState,
    alter_lifetime,
    select,
    union,
    where,
)
from ctistream.engine.operators.anti_join import AntiJoinState, anti_join
from ctistream.engine.operators.clip import ClipState, clip_event_duration
from ctistream.engine.operators.count_session import (
    CountState,
    SessionState,
    count_aggregate,
    session_aggregate,
)
from ctistream.engine.operators.group_apply import group_input, pass_through
from ctistream.engine.operators.join import JoinState, join
from ctistream.engine.operators.outer_join import LeftOuterJoinState, left_outer_join
from ctistream.engine.operators.snapshot import SnapshotState, snapshot_aggregate
from ctistream.engine.operators.window import (
    WindowSpec,
    WindowState,
    window_aggregate,
)
from ctistream.engine.ordering import (
    OrderingState,
    complete_metrics,
    order_epoch,
    watermark_delay,
)
from ctistream.engine.packed import count_rows
from ctistream.engine.physical import (
    AntiJoinStep,
    ClipStep,
    CountWindowStep,
    DiagnosticsStep,
    GroupApplyStep,
    GroupStep,
    JoinStep,
    LeftOuterJoinStep,
    LifetimeStep,
    MergeStep,
    PhysicalPlan,
    SelectStep,
    SessionWindowStep,
    SnapshotStep,
    Step,
    UnionStep,
    WhereStep,
    WindowRowsStep,
    WindowStep,
    plan,
)
from ctistream.engine.plan import (
    InputNode,
    Node,
    walk,
)
from ctistream.engine.progress import Progress, operator_name, state_frames
from ctistream.engine.rows import (
    POS,
    Checkpoints,
    EpochCache,
    Flow,
    adopt_checkpoints,
    checkpoint,
    made_checkpoints,
    payload_columns,
    pos_literal,
    release,
    release_checkpoints,
)
from ctistream.engine.source import SourceRead, read_input
from ctistream.engine.temporal import MIN_TIME, format_ticks, iso_time, to_ticks
from py4j.protocol import Py4JJavaError
from pyspark import InheritableThread, StorageLevel
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = ["EPOCH_ITEMS", "BoundInput", "Runtime"]

#: A bounded run's epochs by default (``run(epochs=None)``) hold at most about this many input
#: items (every input's events, CTIs and ends together): the driver holds an epoch's output
#: (about 1 KB an event as :class:`~engine.events.Event` objects) until it is delivered, and
#: more epochs cost more fixed time (0.2-1 s each). Any cut gives the same output (semantics §4).
EPOCH_ITEMS = 250_000

#: One record per epoch; ``record.ctistream`` holds the fields (query, epoch, seconds, items,
#: output_cti) for structured handlers.
log = logging.getLogger("ctistream.runtime")


@dataclass
class Runtime:
    """Runs one query: a plan, its bound inputs, one output (driver)."""

    spark: SparkSession
    name: str
    root: Node
    output: OutputAdapter
    output_shape: EventShape
    inputs: list[BoundInput] = field(init=False)
    _ingress: dict[int, IngressState] = field(init=False, default_factory=dict)
    _ordering: dict[int, OrderingState] = field(init=False, default_factory=dict)
    _trace: RunObserver | None = field(init=False, default=None)  # of a traced run
    _ahead: _Ahead | None = field(init=False, default=None)  # the next epoch's ingress, running
    _building: Node | None = field(init=False, default=None)  # the operator being built
    #: print a line per epoch to stderr: None (off), 0 (count unknown) or the number of epochs
    progress: int | None = field(init=False, default=None)
    #: the query's progress records (engine.progress), one per epoch that succeeded
    records: Progress = field(init=False, default_factory=Progress)

    def __post_init__(self) -> None:
        binding = bind(self.spark, self.name, self.root, self.output)
        self.inputs = binding.inputs
        #: how the query runs (engine.physical): untraced, and for a traced run
        self.physical = plan(self.spark, self.root, binding)
        self._traced_plan = plan(self.spark, self.root, binding, traced=True)
        self._held = Checkpoints()
        # held while state DataFrames are read from another thread (operator_metrics) and
        # while an epoch releases the checkpoints its old state read
        self._release_lock = threading.Lock()

    @property
    def _plan(self) -> PhysicalPlan:
        """The physical plan this run follows: a traced run's has no fusion that hides what
        the trace records (engine.physical)."""
        return self._traced_plan if self._trace is not None else self.physical

    # -- running ------------------------------------------------------------------------------
    def _read_all(
        self,
        ranges: dict[int, Any] | None = None,
        floor: int | None = None,
        inputs: Sequence[BoundInput] | None = None,
        until: int | None = None,
    ) -> dict[int, DataFrame]:
        """Every input's raw rows (``ranges``: per input, the offsets to read per partition, as
        :func:`engine.source.read_input`), cached. ``floor``: arrival stamps below it are raised
        to it (a started query's epochs, see :mod:`engine.streaming`). ``inputs``: only these
        (default: all). ``until``: each partition's read stops before its first item stamped
        at or after it (a started query's cut)."""
        raws = {}
        for b in self.inputs if inputs is None else inputs:
            df = read_input(
                self.spark,
                b.adapter,
                b.spec.index,
                b.spec.partitions,
                b.schema,
                None if ranges is None else ranges[b.spec.index],
                b.spec.name,
                floor,
                until,
            )
            # read when first used (by the first job over it), once per run. A bounded run's
            # whole input (of an input with §7 ordering, see run()) waits on disk, not in
            # memory, in Spark's columnar cache: its batches carry min/max statistics, so an
            # epoch's arrival filter skips the batches of other epochs instead of reading every
            # row of the input again
            if ranges is None:
                raws[b.spec.index] = df.persist(StorageLevel.DISK_ONLY)
            else:
                raws[b.spec.index] = checkpoint(df, eager=False, level=StorageLevel.MEMORY_AND_DISK)
        return raws

    def _cuts(self, raws: dict[int, DataFrame], epochs: int | Sequence[Any] | None) -> list[int]:
        """The arrival stamps where epochs start; ``epochs`` cuts the arrivals of the inputs
        (``raws`` where cached, else read once more) in that many quantiles; None: by size, in
        as many as keep each epoch at most about :data:`EPOCH_ITEMS` items."""
        if epochs is None:
            return self._cuts_by_size(raws)
        many = isinstance(epochs, Iterable) and not isinstance(epochs, str | bytes)
        if isinstance(epochs, bool) or not (isinstance(epochs, int) or many):
            raise TypeError(
                "run(epochs=...) takes how many epochs (a whole number, at least 1), the arrival "
                "moments to cut at (a list of aware datetimes or ticks), or None (by size); got "
                f"a {type(epochs).__name__} ({epochs!r}). Fix: e.g. run(epochs=4)"
            )
        if not isinstance(epochs, int):
            return sorted({to_ticks(c, what="epoch cut") for c in epochs})
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1; got {epochs}")
        if epochs == 1:
            return []
        arrivals = self._arrivals(raws)
        qs = arrivals.approxQuantile("__arr", [i / epochs for i in range(1, epochs)], 0.0)
        return sorted({int(q) for q in qs})

    def _cuts_by_size(self, raws: dict[int, DataFrame]) -> list[int]:
        """``run(epochs=None)``'s cuts. Inputs whose adapters bound their size on the driver
        (:meth:`~engine.contracts.InputAdapter.size_hint`) to :data:`EPOCH_ITEMS` together run as
        one epoch without a Spark job; else the inputs' arrival stamps are read once (kept, as
        one column, for two jobs: their count, then approximate quantiles). Any cut gives the
        same output (semantics §4), so the quantiles need not be exact: with ``k`` epochs a rank
        error of ``n / 4k`` leaves each epoch within half an epoch of ``n / k`` items."""
        hints = [b.adapter.size_hint() for b in self.inputs]
        known = [h for h in hints if h is not None]
        if len(known) == len(hints) and sum(known) <= EPOCH_ITEMS:
            return []
        arrivals = self._arrivals(raws).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n = arrivals.count()
            epochs = -(-n // EPOCH_ITEMS)
            if epochs <= 1:
                return []
            fractions = [i / epochs for i in range(1, epochs)]
            qs = arrivals.approxQuantile("__arr", fractions, 1 / (4 * epochs))
        finally:
            arrivals.unpersist()
        return sorted({int(q) for q in qs})

    def _arrivals(self, raws: dict[int, DataFrame]) -> DataFrame:
        """The arrival stamps (``__arr``) of every input's items: from ``raws`` where cached,
        else read once more, without dead letters (the epochs write them)."""
        arrivals = None
        for b in self.inputs:
            raw = raws.get(b.spec.index)
            if raw is None:
                spec, adapter = b.spec, b.adapter.without_side_effects()
                raw = read_input(
                    self.spark, adapter, spec.index, spec.partitions, b.schema, None, spec.name
                )
            a = raw.select("__arr")
            arrivals = a if arrivals is None else arrivals.unionByName(a)
        assert arrivals is not None
        return arrivals

    def run(
        self,
        epochs: int | Sequence[Any] | None = None,
        stop: bool = True,
        trace: RunObserver | None = None,
    ) -> None:
        """Run bounded inputs to their end in epochs (semantics §4), then stop (flushing the
        inputs that flush on stop when ``stop``). ``epochs``: how many (cut at quantiles of the
        arrival stamps), the arrival stamps to cut at, or None: by size, epochs of at most about
        :data:`EPOCH_ITEMS` input items, so that what the driver holds per epoch does not grow
        with the input. ``trace``: a :class:`engine.observer.RunObserver` to call as the run
        goes (``ctistream.viz.Trace`` records the timeline), or None (no tracing, no cost)."""
        self._trace = trace
        if trace is not None:
            trace.start(self)
        # Inputs are read epoch by epoch, each epoch from where the last one stopped up to its
        # cut, in the Python task of ingress's scan. An input with §7 ordering is read whole
        # once and kept (its ingress does not see every item read, so it cannot tell where
        # the next epoch starts), and so is one that cannot seek (each read replays it)
        whole = [b for b in self.inputs if b.spec.ordering is not None or not b.adapter.seekable]
        raws = self._read_all(inputs=whole)
        with self.spark_errors(None):  # the cut reads the inputs (or their arrival stamps)
            cuts = self._cuts(raws, epochs)
        bounds = list(zip([None, *cuts], [*cuts, None], strict=True))
        if self.progress is not None:
            self.progress = len(bounds)
        self.reset_state()
        delivered = self.output.progress()
        try:
            for k, (lo, hi) in enumerate(bounds):
                last = k == len(bounds) - 1
                self.records.begin(self)
                with self.records.phase("read"):
                    reads = {b.spec.index: self._source_read(b, hi) for b in self.inputs}
                upcoming = None
                if not last and self._plan.ingress_ahead:  # runs while this epoch's operators do
                    after = k + 1 == len(bounds) - 1
                    upcoming = _Upcoming(raws, *bounds[k + 1], stop and after)
                self.run_epoch(k, reads | raws, lo, hi, stop and last, delivered, upcoming=upcoming)
                self.records.finish(self)
            self.check_delivered(delivered)
            if stop:
                self.warn_held(stacklevel=3)
        finally:
            self._trace = None  # only this run is traced (not a later start())
            self._drop_ahead()
            self.output.close()
            release(raws)

    def _source_read(
        self, b: BoundInput, until: int | None, ingress: dict[int, IngressState] | None = None
    ) -> SourceRead:
        """Input ``b`` from where its last epoch stopped (everything before the first epoch) up
        to the first item stamped ``until`` or later. ``ingress``: the states to read on from
        (default: the committed ones)."""
        parts = (self._ingress if ingress is None else ingress)[b.spec.index].partitions
        ranges = [None if s.ended else (s.next, None) for s in parts]
        return SourceRead(
            b.adapter,
            b.spec.index,
            b.spec.partitions,
            b.schema,
            ranges,
            b.spec.name,
            until=until,
            last=[s.last for s in parts],
        )

    def reset_state(self) -> None:
        """The state before the first epoch."""
        self._ingress = {
            b.spec.index: IngressState([PartitionState() for _ in b.spec.partitions])
            for b in self.inputs
        }
        self._ordering = {
            b.spec.index: OrderingState.initial(len(b.spec.partitions))
            for b in self.inputs
            if b.spec.ordering is not None
        }
        self._ops: dict[int, Any] = {}
        self._egress = EgressState()
        self._drop_ahead()

    def run_epoch(
        self,
        k: int,
        raws: dict[int, DataFrame | SourceRead],
        lo: int | None,
        hi: int | None,
        stopping: bool,
        delivered: int | None,
        as_read: Collection[int] | None = None,
        upcoming: _Upcoming | None = None,
    ) -> None:
        """Run epoch ``k`` (items with arrival in [lo, hi)) and deliver what the output does
        not hold of it (``delivered``: how many of the query's output items it holds,
        :meth:`OutputAdapter.progress`).
        ``raws``: per input, its raw rows (filtered to the epoch here), or the read of the
        epoch's rows. ``as_read``: the inputs whose raw rows are as read (None: all); the others
        had rows added. ``upcoming``: the next epoch of a bounded run, whose ingress then runs
        while this epoch's operators do. Bad input found in it (a malformed record, a CTI
        violation without a policy, an END edge without a START) delivers everything before
        the first bad item and then raises: the epoch is not done, and a restart that replays
        it delivers the rest (semantics §9)."""
        t0 = time.perf_counter()
        first = self._egress.released  # the number of the epoch's first output item
        stopped: _StopEpoch | None = None
        limit = None
        while True:
            try:
                with self.spark_errors(k):
                    items = self._epoch(
                        raws,
                        lo,
                        hi,
                        stopping and stopped is None,
                        limit,
                        as_read,
                        upcoming if stopped is None else None,
                    )
                break
            except _StopEpoch as found:
                # Run again up to it: an input after the one that found it may hold an earlier
                # bad item, found by this next run (each run stops strictly earlier).
                stopped, limit = found, found.pos
        undelivered = _undelivered(first, items, delivered)
        if undelivered is not None:
            with self.records.phase("egress"):
                self.output.deliver(k, undelivered[1], undelivered[0])
        if stopped is not None:
            raise stopped.error from None
        seconds = time.perf_counter() - t0
        cti = self._egress.last_cti
        fields = {"query": self.name, "epoch": k, "seconds": round(seconds, 3)}
        fields |= {"items": len(items), "output_cti": cti}
        log.info(
            "query %s: epoch %d in %.2f s, %d items delivered, output CTI %s",
            self.name,
            k,
            seconds,
            len(items),
            format_ticks(cti),
            extra={"ctistream": fields},
        )
        collect_driver_garbage()
        self.records.ran(k, items, 0 if undelivered is None else len(undelivered[1]))

    def check_delivered(self, delivered: int | None) -> None:
        """After the epochs that may have delivered before (a bounded run's, a restarted
        query's replay): raise when the output held (``delivered``) more items than they gave.
        Epochs computed again give the same items up to where the first run failed (§4), so
        more means other items: the input was changed before that point, or the output holds
        another query's or run's items."""
        released = self._egress.released
        if delivered is None or delivered <= released:
            return
        raise EngineError(
            f"query {self.name!r}: its output holds {delivered} items, but the query computed "
            f"again gives {released}; expected at most {released} (a query computed again "
            "gives the same items up to where it failed, however it is cut into epochs). The "
            "input was changed before that point, or the output holds the items of another "
            "query or run. Fix: restore the input as it was up to the item that failed, or give "
            "the query a new output (and a new checkpoint directory)"
        )

    @contextmanager
    def spark_errors(self, k: int | None) -> Iterator[None]:
        """Every Spark job of the query runs in this: what Spark raises in it becomes the
        :class:`QueryRunError` of epoch ``k`` (None: while a run is cut into epochs), in the
        user's words (:meth:`_run_error`), and PySpark's context loggers stay silent
        (:func:`engine._spark.engine_work`). Any other error passes as it is."""
        try:
            with engine_work():
                yield
        except (CapturedException, Py4JJavaError) as error:
            raise self._run_error(k, error) from None

    def _run_error(self, k: int | None, error: BaseException) -> QueryRunError:
        """What Spark raised in epoch ``k`` (None: while the run was cut into epochs), in the
        user's words. An error of the engine's or an adapter's raised in a task (a source that
        cannot be read, a function's result the engine refuses) is its own message, with its
        fix (:func:`task_error`: not the worker's traceback). Else Spark's
        (:func:`spark_message`): an analysis error is raised where an operator builds its
        DataFrames, so it names that operator; an error in a task (a UDF, a cast) surfaces in
        whichever job first needs the rows, where Spark runs the operators together, so it
        names none."""
        when = "while cutting the run into epochs" if k is None else f"epoch {k}"
        own = task_error(error)
        if own is not None:
            name, message = own
            return QueryRunError(
                f"query {self.name!r}, {when}: a Spark task raised {name}: {message}", error
            )
        failure = engine_failure(error)
        if failure is not None:
            return QueryRunError(
                f"query {self.name!r}, {when}: ctistream failed in its own code in a Spark "
                f"task: {failure}. Expected this query to run: the failure is a "
                "defect of ctistream, not of the query or its input. Fix: report it with this "
                "message (this error's spark_error holds the worker's traceback); with a "
                "checkpoint, the query starts again on it once fixed, losing nothing it "
                "accepted",
                error,
            )
        node = self._building
        if isinstance(error, AnalysisException) and node is not None and node.call:
            where = f"in {node.call}"
        else:
            where = "in a Spark task" if k is None else "in a Spark task of the epoch"
        message = spark_message(error)
        fix = (
            ""  # an error the engine raises through Spark (F.raise_error) carries its own
            if "Fix:" in message
            else ". Fix: correct the expression or function it names for the values it met "
            "(this error's spark_error holds Spark's exception as raised)"
        )
        return QueryRunError(
            f"query {self.name!r}, {when}: Spark failed {where}: {message}{fix}", error
        )

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per input: counts by kind (§8) and the current CTI (``cti``: ISO time, ``-inf`` or
        ``+inf``; ``cti_ticks``: the same in ticks)."""
        out = {}
        for b in self.inputs:
            st = self._ingress.get(b.spec.index)
            if st is None:
                continue
            m: dict[str, Any] = dict.fromkeys(
                (
                    "events_in",
                    "ctis_explicit",
                    "ctis_generated",
                    "ctis_imported",
                    "ctis_ignored",
                    "dropped",
                    "adjusted",
                ),
                0,
            )
            m.update(st.counts)
            m["cti_ticks"] = st.emitted
            ordering = self._ordering.get(b.spec.index)
            out[b.spec.name] = complete_metrics(m, b.spec.ordering, ordering)
        return out

    def warn_held(self, stacklevel: int = 2) -> None:
        """After a run that stopped (driver; semantics §8, last paragraph): for each input still
        at CTI -inf while the query's inputs hold events, a :class:`HeldEventsWarning` and a
        warning on the query's log naming the input and the fix. Reads the ingress state the
        run left (no Spark job). ``stacklevel``: the caller to point the warning at."""
        states = [(b.spec, self._ingress.get(b.spec.index)) for b in self.inputs]
        for message, fields in _held_warnings(self.name, states):
            log.warning(message, extra={"ctistream": fields})
            warnings.warn(message, HeldEventsWarning, stacklevel=stacklevel + 1)

    def output_cti(self) -> int:
        """The query's latest output CTI (-inf before the first)."""
        egress = getattr(self, "_egress", None)
        return egress.last_cti if egress is not None else MIN_TIME

    def watermark_delay(self) -> timedelta | None:
        """Wall clock minus the query's latest output CTI (§8); None while it is -inf / +inf."""
        return watermark_delay(self.output_cti())

    def operator_metrics(self) -> dict[str, dict[str, Any]]:
        """Per stateful operator (``"<n>:<kind>"`` in plan order): rows of state it holds now,
        the Spark partitions they are in, the last CTI it emitted and, for a lifetime operator,
        ``dropped``: the events dropped because their start landed at ``±inf`` (§5). Counting
        the state runs a small Spark job."""
        with self._release_lock:
            return self._operator_metrics()

    def _operator_metrics(self) -> dict[str, dict[str, Any]]:
        out = {}
        for i, node in enumerate(walk(self.root)):
            st = self._ops.get(id(node))
            if st is None:
                continue
            kept = [df for df in state_frames(st) if df is not None]
            m = out[operator_name(i, node)] = {
                "state_rows": sum(count_rows(df) for df in kept),
                "state_partitions": sum(df.rdd.getNumPartitions() for df in kept),
                "cti": iso_time(st.emitted),
                "cti_ticks": st.emitted,
            }
            if isinstance(st, LifetimeState):  # events whose start landed at +-inf (§5)
                m["dropped"] = st.dropped
        return out

    def _epoch(
        self,
        raws: dict[int, DataFrame],
        lo: int | None,
        hi: int | None,
        stopping: bool,
        before: tuple | None,
        as_read: Collection[int] | None = None,
        upcoming: _Upcoming | None = None,
    ) -> list:
        """One epoch: items with arrival in [lo, hi) (and position < ``before``). Commits the new
        states only when the whole epoch succeeded, their rows computed."""
        cache = EpochCache()
        try:
            with self._held.recording():
                items, states = self._epoch_plan(
                    raws, lo, hi, stopping, before, cache, as_read, upcoming
                )
            with self._release_lock, self.records.phase("checkpoint"):
                # the new state's rows computed (one job), then what only old state read freed
                self._held.release_all_but(states, compute=True)
                self._ingress, self._ordering, self._ops, self._egress = states
            return items
        except BaseException:
            self._drop_ahead()  # the next epoch's ingress started from states not committed
            with self._release_lock:
                self._held.release_all_but(self._ingress, self._ordering, self._ops, self._egress)
            raise
        finally:
            cache.release()

    def _epoch_plan(
        self, raws, lo, hi, stopping, before, cache: EpochCache, as_read, upcoming
    ) -> tuple[list, tuple]:
        trace = self._trace
        if trace is not None:
            trace.begin_epoch(lo, hi)
        with self.records.phase("ingress"):
            ahead = self._take_ahead((lo, hi, stopping), cache) if before is None else None
            if ahead is None:
                flows, ingress, ordering = self._ingress_all(
                    raws, lo, hi, stopping, before, cache, as_read, self._ingress, self._ordering
                )
            else:
                flows, ingress, ordering = ahead
        if upcoming is not None:
            self._ahead = _Ahead.start(self, upcoming, ingress, ordering)
        ops = dict(self._ops)
        self._building = None
        began = time.perf_counter()
        for step in self._plan.steps:
            node = step.node
            self._building = node  # the operator an analysis error comes from (_run_error)
            inputs = [flows[id(c)] for c in node.children()]
            flow, st = _EXECUTORS[type(step)](step, inputs, ops.get(id(node)), cache)
            if step.stateful:
                ops[id(node)] = st
            if step.checkpoint:  # engine.physical._checkpointed
                keyed = checkpoint(flow.keyed, eager=False) if flow.keyed is not None else None
                events = flow.events
                if step.checkpoint_events:
                    events = checkpoint(events, eager=False)
                flow = replace(
                    flow, events=events, ctis=checkpoint(flow.ctis, eager=False), keyed=keyed
                )
            flows[id(node)] = flow
            if trace is not None and step.stateful:
                trace.operator(node, flow)
        self._building = None
        self.records.add("operators", began)
        root = flows[id(self.root)]
        with self.records.phase("egress"):
            items, egress = egress_epoch(
                root, self.output_shape, payload_columns(root.events), self._egress
            )
        if trace is not None:
            trace.end_epoch(root)
        return items, (ingress, ordering, ops, egress)

    def _ingress_all(
        self,
        raws: dict[int, Any],
        lo: int | None,
        hi: int | None,
        stopping: bool,
        before: tuple | None,
        cache: EpochCache,
        as_read: Collection[int] | None,
        ingress: dict[int, IngressState],
        ordering: dict[int, OrderingState],
    ) -> tuple[dict[int, Flow], dict[int, IngressState], dict[int, OrderingState]]:
        """Every input's ingress for one epoch (in import order), from the states ``ingress``
        and ``ordering``: the inputs' flows (by node id) and the states after the epoch."""
        trace = self._trace
        flows: dict[int, Flow] = {}
        ingress, ordering = dict(ingress), dict(ordering)
        for scan in self._plan.scans:
            spec = scan.spec
            raw = raws[spec.index]
            read = None
            if isinstance(raw, SourceRead):  # the epoch's rows, read where the scan runs
                read = raw if before is None else replace(raw, before=before)
                raw = read.frame(self.spark)
            else:
                if lo is not None:
                    raw = raw.filter(F.col("__arr") >= lo)
                if hi is not None:
                    raw = raw.filter(F.col("__arr") < hi)
                if before is not None:
                    raw = raw.filter(F.col(POS) < pos_literal(*before))
            if spec.ordering is not None:  # §7 before §3 (engine/ordering.py)
                idx = spec.index
                raw, ordering[idx] = order_epoch(
                    spec.ordering,
                    raw,
                    ordering[idx],
                    cache,
                    # traced: the timeline marks what §7 dropped or moved
                    decided=None if trace is None else lambda d, s=spec: trace.ordering(s, d),
                    diagnosed=scan.diagnosed,
                )
            imp = spec.settings.import_settings if spec.settings else None
            imports = None
            if imp is not None:
                imports = flows[id(self._node(imp.stream_name))].ctis
            rows = EpochRows(
                raw,
                imports,
                stopping and spec.flush_on_stop,
                # an input's partitions come in position order as read, §7 reorders them
                spec.ordering is None and (as_read is None or spec.index in as_read),
                read,
            )
            flow, ingress[spec.index] = ingress_epoch(
                self.spark, scan, rows, ingress[spec.index], cache, trace
            )
            flows[id(scan.node)] = flow
            if trace is not None:  # the input's keyed CTIs (made after trace.ingress)
                trace.input_flow(spec, flow)
        return flows, ingress, ordering

    def _take_ahead(self, epoch: tuple, cache: EpochCache) -> tuple | None:
        """The ingress of ``epoch`` (lo, hi, stopping) if it ran ahead, its cached frames now
        ``cache``'s and its checkpoints this epoch's; raises what it raised."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if ahead.upcoming.epoch != epoch:  # pragma: no cover - run() passes the next epoch
            ahead.drop()
            return None
        return ahead.adopt(cache)

    def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.drop()

    def _node(self, name: str) -> InputNode:
        return next(b.node for b in self.inputs if b.spec.name == name)


@dataclass(frozen=True)
class _Upcoming:
    """The next epoch of a bounded run: the inputs read whole (the others are read from where
    this epoch's ingress leaves them), its bounds and whether the run stops after it."""

    raws: dict[int, DataFrame]
    lo: int | None
    hi: int | None
    stopping: bool

    @property
    def epoch(self) -> tuple:
        return (self.lo, self.hi, self.stopping)


@dataclass
class _Ahead:
    """The next epoch's ingress, run in a thread of its own while this epoch's operators and
    egress run: a bounded input's scan is one task per source partition (B1's input is one),
    so it leaves a core to the operators' jobs and the driver's planning. It starts from the
    states this epoch's ingress leaves, before they are committed: if this epoch fails, it is
    dropped (``engine.runtime.Runtime._epoch``)."""

    upcoming: _Upcoming
    cache: EpochCache
    thread: threading.Thread
    made: list[DataFrame] = field(default_factory=list)
    result: tuple | None = None
    error: BaseException | None = None

    @classmethod
    def start(
        cls,
        rt: Runtime,
        upcoming: _Upcoming,
        ingress: dict[int, IngressState],
        ordering: dict[int, OrderingState],
    ) -> _Ahead:
        reads = {b.spec.index: rt._source_read(b, upcoming.hi, ingress) for b in rt.inputs}
        raws = reads | upcoming.raws

        def work() -> None:
            with made_checkpoints() as made, engine_work():
                ahead.made = made
                try:
                    ahead.result = rt._ingress_all(
                        raws,
                        upcoming.lo,
                        upcoming.hi,
                        upcoming.stopping,
                        None,
                        ahead.cache,
                        None,
                        ingress,
                        ordering,
                    )
                except BaseException as e:  # raised where the epoch takes it (adopt)
                    ahead.error = e

        ahead = cls(upcoming, EpochCache(), InheritableThread(target=work, daemon=True))
        ahead.thread.start()
        return ahead

    def adopt(self, cache: EpochCache) -> tuple:
        self.thread.join()
        cache.adopt(self.cache)
        adopt_checkpoints(self.made)
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def drop(self) -> None:
        self.thread.join()
        self.cache.release()
        release_checkpoints(self.made)


# -- executors: one per physical node type ---------------------------------------------------
# Each takes its physical node, its input flows (in the logical node's child order), the state
# it left in the last epoch (None before the first) and the epoch's cache, and returns its
# output flow and its state after the epoch (None for an operator without state).


def _run_where(step: WhereStep, inputs: list[Flow], _: Any, cache: EpochCache) -> tuple:
    return where(inputs[0], step.node.condition), None


def _run_select(step: SelectStep, inputs: list[Flow], _: Any, cache: EpochCache) -> tuple:
    return select(inputs[0], step.node.columns), None


def _run_merge(step: MergeStep, inputs: list[Flow], _: Any, cache: EpochCache) -> tuple:
    return inputs[0].merged(), None


def _run_lifetime(step: LifetimeStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    node = step.node
    return alter_lifetime(
        inputs[0],
        shift=node.shift,
        start_fn=node.start_fn,
        duration=node.duration,
        state=st or LifetimeState(),
        cache=cache,
    )


def _run_window(step: WindowStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    return window_aggregate(inputs[0], step.spec, st or WindowState(), cache)


def _run_snapshot(step: SnapshotStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    node = step.node
    state = st or SnapshotState()
    return snapshot_aggregate(
        inputs[0], node.keys, node.aggregates, state, cache, cut_by=node.cut_by
    )


def _run_count(step: CountWindowStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    # global CTIs only (engine.operators.count_session)
    return count_aggregate(inputs[0].merged(), step, st or CountState(), cache)


def _run_session(step: SessionWindowStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    return session_aggregate(inputs[0].merged(), step, st or SessionState(), cache)


def _run_join(step: JoinStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    return join(inputs[0], inputs[1], step, st or JoinState(), cache)


def _run_anti_join(step: AntiJoinStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    return anti_join(inputs[0], inputs[1], step.node.on, st or AntiJoinState(), cache)


def _run_left_outer_join(
    step: LeftOuterJoinStep, inputs: list[Flow], st: Any, cache: EpochCache
) -> tuple:
    return left_outer_join(inputs[0], inputs[1], step, st or LeftOuterJoinState(), cache)


def _run_clip(step: ClipStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    return clip_event_duration(inputs[0], inputs[1], step.node.on, st or ClipState(), cache)


def _run_union(step: UnionStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    return union(inputs, st or UnionState.initial(len(step.node.inputs)), cache)


def _run_window_rows(step: WindowRowsStep, inputs: list[Flow], st: Any, cache: EpochCache) -> tuple:
    """Windowed ``top_k`` / ``apply``: the window's own operator, handing its complete windows'
    members to the node's op (engine.operators.window_rows)."""
    node = step.node
    if node.size == 0:
        state = st or SnapshotState()
        return snapshot_aggregate(inputs[0], node.keys, (), state, cache, node.op, node.cut_by)
    spec = WindowSpec(
        node.size, node.hop, node.keys, (), node.point_at_end, node.op, node.latest_by
    )
    return window_aggregate(inputs[0], spec, st or WindowState(), cache)


#: physical node type -> its executor (engine.physical.plan makes the nodes)
_EXECUTORS: dict[type[Step], Callable[[Any, list[Flow], Any, EpochCache], tuple]] = {
    WhereStep: _run_where,
    SelectStep: _run_select,
    MergeStep: _run_merge,
    LifetimeStep: _run_lifetime,
    WindowStep: _run_window,
    SnapshotStep: _run_snapshot,
    CountWindowStep: _run_count,
    SessionWindowStep: _run_session,
    JoinStep: _run_join,
    AntiJoinStep: _run_anti_join,
    LeftOuterJoinStep: _run_left_outer_join,
    ClipStep: _run_clip,
    UnionStep: _run_union,
    GroupStep: group_input,
    GroupApplyStep: pass_through,
    WindowRowsStep: _run_window_rows,
    DiagnosticsStep: diagnostics_flow,
}


def _undelivered(first: int, items: list, delivered: int | None) -> tuple[int, list] | None:
    """What an output holding ``delivered`` items lacks of an epoch whose ``items`` are the
    query's output items numbered from ``first`` (semantics §9): the number of the first item
    it lacks and the items from there; None when it lacks none. The items are numbered from the
    query's first, the same for any cut into epochs (§4), so what the output holds beyond an
    epoch is skipped in the epochs after it."""
    skip = 0 if delivered is None else max(0, delivered - first)
    if skip and skip >= len(items):
        return None
    return first + skip, items[skip:]


def _held_warnings(
    query: str, states: Sequence[tuple[InputSpec, IngressState | None]]
) -> list[tuple[str, dict[str, Any]]]:
    """The warnings (message, log fields) of :meth:`Runtime.warn_held`: one per input whose CTI
    is still -inf, when the query's inputs took events that were not dropped. Such an input
    keeps the query's output CTI at -inf (every operator's output CTI is at most the minimum of
    its inputs', semantics §5), so none of those events was released."""
    held = {
        spec.name: st.counts["events_in"] - st.counts["dropped"]
        for spec, st in states
        if st is not None
    }
    total = sum(held.values())
    found = []
    for spec, st in states:
        if st is None or st.emitted > MIN_TIME or total <= 0:
            continue
        generation = spec.settings.generation if spec.settings else None
        imported = spec.settings.import_settings if spec.settings else None
        why, fix = [], []
        if spec.ordering is not None:
            why.append("its event ordering made no watermark and does not flush on stop")
            fix.append("set flush_on_stop=True in its EventOrderingSettings")
        elif generation is not None:
            why.append("its CTI generation made no CTI and does not flush on stop")
            fix.append("set flush_on_stop=True in its AdvanceTimeGenerationSettings")
        else:
            why.append("it has no CTI generation")
            fix.append(
                "bind it with AdvanceTimeSettings(generation=AdvanceTimeGenerationSettings("
                "frequency, delay, flush_on_stop=True))"
            )
        if imported is not None:
            why.append(f"the input it imports CTIs from, {imported.stream_name!r}, had none")
            fix.append(f"give {imported.stream_name!r} CTIs")
        else:
            why.append("it imports no CTIs")
            fix.append(
                "import another input's CTIs (AdvanceTimeSettings(import_settings="
                "AdvanceTimeImportSettings('<input>')))"
            )
        without = [
            p for p, ps in zip(spec.partitions, st.partitions, strict=True) if ps.cti == MIN_TIME
        ]
        if len(without) < len(spec.partitions):
            why.append(
                f"its partition(s) {without} had no CTI (an input's CTI is the minimum over its "
                "partitions)"
            )
            fix.append("have its adapter send CTIs on every partition")
        else:
            why.append("its adapter sent no explicit CTI")
            fix.append("have its adapter send CTIs (a CTI at +inf at its end releases everything)")
        own = held[spec.name]
        message = (
            f"query {query!r}: input {spec.name!r} ended the run without a CTI: "
            f"{', '.join(why[:-1])} and {why[-1]}. So the query released nothing (its output "
            f"CTI stayed -inf): {own} event(s) of this input and {total} of all its inputs are "
            f"held back. Fix: {'; or '.join(fix)}"
        )
        fields = {"query": query, "input": spec.name, "held": own, "held_in_query": total}
        found.append((message, fields))
    return found
