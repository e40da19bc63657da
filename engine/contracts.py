"""Adapter contracts: base classes and value types only. The engine defines what it reads and
writes here; the implementations live in ``adapters/`` and import this module, never the other way.

The engine uses a partitioned pull model:

* An :class:`InputAdapter` declares its source partitions when the input starts
  (:meth:`InputAdapter.partitions`) and, per partition, yields :class:`SourceItem` values in that
  partition's own order from a resumable offset (:meth:`InputAdapter.read`). The offset given is
  the *next* offset to read: reading from ``0`` reads everything, and a query restarted after
  offset ``n`` was committed reads from ``n + 1``.
* ``read`` runs on Spark executors: the engine reads each bound adapter with an Arrow function
  (see ``engine/source.py``) over one Spark partition per source partition, and the adapter
  object is pickled to the executors with it, so it must hold
  only its configuration. Clients (files, sockets, broker consumers) are opened inside ``read``,
  never in ``__init__``. What the executors call is :meth:`InputAdapter.read_batches`, which by
  default turns ``read``'s items into Arrow batches; columnar sources override it.
* Every item carries an *arrival* stamp (ticks, or a counter for scripted sources). The engine
  orders all items of all inputs by (arrival, binding order of the input, offset, partition):
  semantics §4. Explicit CTIs are items too: an adapter enqueues them in its partition's order.
* An :class:`OutputAdapter` lives on the driver and receives, per epoch, the committed events and
  CTIs in delivery order (:meth:`OutputAdapter.deliver`), numbered from the query's first item
  on. It makes delivery exactly-once by recording, with what it delivers, how many items it
  holds (:meth:`OutputAdapter.progress`). A restarted query computes the items after its
  checkpoint again and hands the adapter only those numbered from that count on, however the
  run is cut into epochs (semantics §4, §9).

Two models of input adapter. StreamInsight's adapters *push*: the server calls ``Start()``, the
adapter enqueues events until the server's buffer is full, then waits for ``Resume()``. This
engine *pulls*: Spark decides when to read, reads many partitions at once and re-reads from an
offset to replay, so :class:`InputAdapter` above is the native contract.

* Use the **pull** model (this module) for any source that can be read again from a position:
  files, brokers, tables, anything partitioned. Pull adapters read on Spark executors (``read``),
  never on the driver; the driver only asks for partitions and the payload schema.
* Use the **push** model (:mod:`adapters.push`: ``PushInputAdapter`` with ``start``/``resume``,
  ``enqueue``/``enqueue_cti`` returning ``EnqueueResult.SUCCESS`` or ``FULL``, ``ready()``,
  ``stopping``, ``stopped()``; made by a ``PushInputAdapterFactory``) to port a StreamInsight
  adapter with its structure intact. The engine runs it behind a pull adapter with one partition
  whose offsets are the enqueue sequence numbers, on an executor too. A push adapter cannot seek:
  every read makes a new one and reads it from the start, so its output is repeatable only if
  it is deterministic given its configuration (a file, a list), not for a live feed (put that
  behind a broker and read it with a pull adapter).

Output has one contract: StreamInsight's dequeue loop maps to :meth:`OutputAdapter.deliver`,
called once per epoch with what ``Dequeue`` would have returned until ``Empty`` (an epoch that
failed part-way: twice, the items before the failure and, after the restart, the rest).

Adapters are made by factories, as in StreamInsight: :meth:`InputAdapterFactory.create` is called
once per adapter instance, and :meth:`InputAdapterFactory.declare_advance_time_properties` is called
for the same instance with the same config and shape. Settings given at binding level override
what the factory declares.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from ctistream.engine._model import Choice
from ctistream.engine.errors import MalformedRecordError
from ctistream.engine.events import Event, EventShape

if TYPE_CHECKING:
    import pyarrow as pa
from ctistream.engine.settings import AdapterAdvanceTimeSettings

__all__ = [
    "InputAdapter",
    "InputAdapterFactory",
    "ItemKind",
    "OutputAdapter",
    "OutputAdapterFactory",
    "SourceItem",
]

ConfigT = TypeVar("ConfigT")

#: Rows per Arrow batch made by the default :meth:`InputAdapter.read_batches`.
BATCH_ROWS = 8192


class ItemKind(Choice):
    """What a :class:`SourceItem` is."""

    #: An INSERT event: point, interval, START edge or END edge.
    EVENT = "EVENT"
    #: An explicit CTI enqueued by the adapter.
    CTI = "CTI"
    #: End of this input: no more items in any partition. Triggers ``flush_on_stop``.
    END = "END"


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One item of one source partition.

    ``offset`` is the item's position in its partition (strictly increasing); ``arrival`` is its
    arrival stamp in ticks (non-decreasing within a partition). The engine checks both: an item
    out of that order stops the input like a malformed record, after the items before it.
    ``event`` is the event or CTI, ``None`` for :attr:`ItemKind.END`.
    """

    kind: ItemKind
    offset: int
    arrival: int
    event: Event | None = None


class InputAdapter(ABC):
    """A source of events and CTIs, split into named partitions.

    Built by an :class:`InputAdapterFactory` on the driver; pickled to the executors that call
    :meth:`read`. Implementations keep configuration only and open connections inside ``read``.
    """

    #: True when every partition ends (files, scripts); False for brokers.
    bounded: ClassVar[bool] = True
    #: False when a read from an offset cannot seek there but replays the source from its start
    #: (a push source): a bounded run then reads the input once and keeps it, where it would
    #: otherwise read each epoch from where the last one stopped.
    seekable: ClassVar[bool] = True
    #: False on the copy :meth:`without_side_effects` returns: :meth:`read` then writes no dead
    #: letters (nor anything else).
    side_effects: bool = True

    @abstractmethod
    def partitions(self) -> Sequence[str]:
        """The source partitions, declared when the input starts (driver). Never empty."""

    def latest_offsets(self) -> Mapping[str, int] | None:
        """Live sources (driver, before each epoch of a started query): take a new snapshot of
        every partition's end, where :meth:`read` stops from now on, and return per partition
        the offset after the last item now available. Bounded sources return None (the
        default): the engine reads them to their end once."""
        return None

    def bound_as(self, name: str) -> None:  # noqa: B027 - optional hook
        """Called once on the driver with the name the input is bound under, before
        :meth:`partitions`. The default does nothing."""

    def content(self) -> str | None:
        """Bounded adapters (driver): a digest of what a read from offset 0 yields now, e.g. the
        files' sizes and digests. A started query logs it with the epoch that reads the input,
        and a restart that would replay a delivered epoch over other content is refused (the
        output holds that epoch's items already: they would be numbered alike but differ).
        None (the default): not checked."""
        return None

    def holds(self, content: str) -> bool:
        """Whether the input still holds what :meth:`content` returned then (driver): by
        default the same content; an adapter whose input may grow at its end (files) accepts
        what was appended since."""
        return self.content() == content

    def source(self) -> str | None:
        """What this adapter's offsets count in, e.g. ``"Kafka topic 'sensors'"`` (driver): a
        started query's checkpoint records it, and a restart whose input reads another source
        is refused (the offsets logged would skip or repeat its items). It is written to the
        checkpoint: no secrets. None (the default): not recorded."""
        return None

    def reads_file(self, path: str) -> bool:
        """Whether this input reads, or once it exists would read, the local file at absolute
        ``path`` (driver): a query whose output writes a file its input reads is refused when
        it is built (a run would read its own output back). False (the default): it reads no
        local files."""
        return False

    def size_hint(self) -> int | None:
        """At most how many items (events, CTIs, ENDs) a read of every partition from offset 0
        yields, if the driver can tell cheaply after :meth:`partitions` (a script's length,
        Parquet row counts, a broker's end offsets); None (the default) when it cannot. A bounded
        run cuts its epochs by size (``run()``'s default ``epochs``): inputs whose hints add up
        to a small size run as one epoch with no Spark job to count them; otherwise the engine
        counts the items in a Spark job. A hint too small only makes the epoch larger: the
        output is the same for any cut (semantics §4)."""
        return None

    def without_side_effects(self) -> InputAdapter:
        """A copy of this adapter for the reads the engine makes only to look at arrival stamps
        (the quantiles a bounded run is cut at when ``run(epochs=N)``): it reads the same items
        but has :attr:`side_effects` False, so a malformed record it skips is not dead-lettered
        again by that read. Adapters that write anywhere while reading check the flag."""
        quiet = copy.copy(self)
        quiet.side_effects = False
        return quiet

    @abstractmethod
    def payload_schema(self) -> str | None:
        """The payload columns as a Spark DDL string, e.g. ``"id int, v double"`` (driver), or
        None if the adapter cannot tell: the binding must then give it (``Stream.create(...,
        schema=...)`` or the template input it is bound to). A template input's declared schema
        must agree with the one returned here."""

    @abstractmethod
    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        """Yield the items of ``partition`` in order, from ``start_offset`` on (executor).

        Must be deterministic: the same partition and offset yield the same items, so an epoch
        can be replayed. Raises :class:`engine.errors.MalformedRecordError` naming the partition
        and offset of a record that cannot be read, unless the adapter dead-letters it.
        """

    def read_batches(
        self, partition: str, start_offset: int, payload: pa.Schema, until: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The items of :meth:`read`, as Arrow record batches (executor): the engine's read path.

        Columns, by name: ``__kind`` (string: an :class:`ItemKind` value), ``__edge`` (string
        ``START``/``END`` or null), ``__start`` and ``__end`` (int64 ticks; a CTI's time is in
        ``__start``; null for END items), ``__arr`` and ``__off`` (int64), then the columns of
        ``payload`` (the Arrow form of :meth:`payload_schema`). The same rules as :meth:`read`
        apply; a :class:`engine.errors.MalformedRecordError` raised by the iterator stops the
        input after the rows already yielded. ``until``: an arrival stamp, or None; the engine
        takes nothing from the first item stamped at or after it on, so the read may end with
        that item, and should not read past it where reading has side effects (dead letters).

        The default converts :meth:`read` in batches. Adapters whose source is columnar (Parquet,
        Arrow IPC, a broker's record batches) override it so no Python object is made per item.
        """
        import pyarrow as pa

        header = [
            ("__kind", pa.string()),
            ("__edge", pa.string()),
            ("__start", pa.int64()),
            ("__end", pa.int64()),
            ("__arr", pa.int64()),
            ("__off", pa.int64()),
        ]
        schema = pa.schema([*header, *payload])
        names = payload.names
        rows: list[tuple] = []

        def flush() -> Iterator[pa.RecordBatch]:
            """The rows gathered, as a batch; where a payload value is not of its column's
            type (a malformed record), the rows before it, then the error naming it."""
            try:
                batches, error = [_batch(rows, schema)], None
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                at, error = _first_unfit(rows, schema, len(header), partition, e)
                batches = [_batch(rows[:at], schema)] if at else []
            rows.clear()
            yield from batches
            if error is not None:
                raise error

        blank = (None,) * len(names)
        try:
            for item in self.read(partition, start_offset):
                ev = item.event
                if ev is None:
                    rows.append(
                        (item.kind.value, None, None, None, item.arrival, item.offset, *blank)
                    )
                else:
                    edge = ev.edge.value if ev.edge is not None else None
                    values = (ev.payload.get(k) for k in names)
                    head = (item.kind.value, edge, ev.start, ev.end, item.arrival, item.offset)
                    rows.append((*head, *values))
                if until is not None and item.arrival >= until:
                    break
                if len(rows) >= BATCH_ROWS:
                    yield from flush()
        except MalformedRecordError:
            if rows:  # a malformed value among them comes first
                yield from flush()
            raise
        if rows:
            yield from flush()


def _batch(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [[]] * len(schema)
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def _first_unfit(
    rows: list[tuple], schema: pa.Schema, header: int, partition: str, error: Exception
) -> tuple[int, Exception]:
    """The index of the first of ``rows`` with a payload value Arrow cannot take as its
    column's type, and a :class:`MalformedRecordError` naming it (``error``, what Arrow raised,
    where no payload value is to blame)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    offset = schema.get_field_index("__off")
    for i, row in enumerate(rows):
        for field, value in zip(list(schema)[header:], row[header:], strict=True):
            try:
                pa.array([value], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                try:  # as the payload schema names it
                    declared = from_arrow_type(field.type).simpleString()
                except Exception:  # a type PySpark does not map back: Arrow's name
                    declared = str(field.type)
                return i, MalformedRecordError(
                    f"partition {partition!r}, offset {row[offset]}: payload column "
                    f"{field.name!r} "
                    f"is declared {declared}; got {value!r} (a {type(value).__name__}). "
                    "Fix: give the event a value of the declared type, or declare the column "
                    "with the type its values have"
                )
    return 0, error


class OutputAdapter(ABC):
    """A consumer of a query's committed output (driver).

    The contract, in full. The engine numbers the query's output items (events and CTIs, in
    delivery order) 0, 1, 2, ... from its first epoch on; the numbers depend on the arrival
    sequence alone, not on how it is cut into epochs (semantics §4). It calls :meth:`deliver`
    with each epoch's items and the number of the first, and, before it delivers after a start,
    :meth:`progress` to learn how many items the output holds. An adapter that records,
    atomically with the items it writes, ``first + len(items)`` and returns the last count
    recorded from :meth:`progress` gets exactly-once output across crashes, failed epochs and
    restarts, however the run after them is cut; one that records nothing gets every item at
    least once::

        def deliver(self, epoch, items, first):
            self.write(items, count=first + len(items))  # one atomic write

        def progress(self):
            return self.read_count()  # None when nothing was written
    """

    @abstractmethod
    def deliver(self, epoch: int, items: Sequence[Event], first: int) -> None:
        """Receive output of ``epoch``: committed events (in the consumer's shape) and CTIs,
        ``items[0]`` being the query's output item number ``first``.

        For each new output CTI, in increasing order, the events it newly commits sorted by
        (start, end, payload), then the CTI itself. Epochs come in order; an epoch normally comes
        in one call with all of its items (possibly none). ``first`` is the count
        :meth:`progress` reported, or the number after the last item of the call before: the
        engine skips what the output holds, also across epochs when a restarted run is cut into
        epochs differently. It is larger only when the output holds less than the epochs a
        restart computes again begin with (a new output, a lost record): those earlier items
        cannot be computed again. An epoch that fails part-way (a malformed record, a CTI
        violation without a policy) is delivered up to its first bad item, then the query
        raises; run again after the fix, the query computes it again and this receives the rest.
        Return once the items are durably delivered (or raise).
        """

    #: Whether :meth:`progress` counts through the last item delivered, CTIs included, also
    #: when they were not written: then a count below what a restart's newest state snapshot
    #: released means the output lacks items (its file was restored from a backup, say), and the
    #: restart restores an older snapshot to deliver them again. An output that marks only the
    #: records it writes, and writes no CTIs, counts up to its last record: after most epochs
    #: that is below what was released (trailing CTIs), and it lacks nothing.
    counts_every_item: bool = True

    #: The names this output writes beside each event's payload (its time, end, edge and kind
    #: fields): a query whose payload has a column of one of these names is refused when it is
    #: built, before anything runs.
    own_fields: tuple[str, ...] = ()

    #: The local files this output writes, as absolute paths: a query whose input reads one of
    #: them (:meth:`InputAdapter.reads_file`) is refused when it is built.
    files: tuple[str, ...] = ()

    def progress(self) -> int | None:
        """How many of the query's output items this output durably holds (driver): the count
        after the last item it wrote, CTIs counted whether it writes them or not (see
        :attr:`counts_every_item`); or None when it holds nothing (or does not know). Called
        before the first epoch a run or a restarted query delivers: the engine hands
        :meth:`deliver` only the items numbered from this count on. The default reports None:
        a restart then takes the commit log's account, so the epochs it records as delivered
        are not delivered again, and says so with a warning."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called once when the query stops; release resources here."""


class InputAdapterFactory(ABC, Generic[ConfigT]):
    """Makes input adapters from a configuration; users subclass it.

    ``supported_shapes`` lists the event shapes the adapters can produce; binding any other shape
    fails when the query is built.
    """

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    @abstractmethod
    def create(self, config: ConfigT, shape: EventShape) -> InputAdapter:
        """Make one adapter instance for ``config`` producing events of ``shape`` (driver)."""

    def declare_advance_time_properties(
        self, config: ConfigT, shape: EventShape
    ) -> AdapterAdvanceTimeSettings | None:
        """The adapter's own CTI generation settings and policy, or None (driver).

        Called once per adapter instance made by :meth:`create`, with the same config and shape,
        so a factory can derive its settings from the configuration. Binding-level
        ``AdvanceTimeSettings`` override the result.
        """
        return None


class OutputAdapterFactory(ABC, Generic[ConfigT]):
    """Makes output adapters from a configuration; users subclass it."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    @abstractmethod
    def create(self, config: ConfigT, shape: EventShape) -> OutputAdapter:
        """Make one output adapter for ``config`` consuming events of ``shape`` (driver)."""
