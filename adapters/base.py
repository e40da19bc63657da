"""Adapter contracts: base classes and value types only; implementations live beside this module.

The engine uses a partitioned pull model:

* An :class:`InputAdapter` declares its source partitions when the input starts
  (:meth:`InputAdapter.partitions`) and, per partition, yields :class:`SourceItem` values in that
  partition's own order from a resumable offset (:meth:`InputAdapter.read`). The offset given is
  the *next* offset to read: reading from ``0`` reads everything, and a query restarted after
  offset ``n`` was committed reads from ``n + 1``.
* ``read`` runs on Spark executors: the adapter object is pickled to them, so it must hold only
  its configuration. Clients (files, sockets) are opened inside ``read``, never in ``__init__``.
* Every item carries an *arrival* stamp (ticks, or a counter for scripted sources). The engine
  orders all items of all inputs by (arrival, binding order of the input, offset, partition):
  semantics §4. Explicit CTIs are items too: an adapter enqueues them in its partition's order.
* An :class:`OutputAdapter` lives on the driver and receives, per epoch, the committed events and
  CTIs in delivery order (:meth:`OutputAdapter.deliver`). It can make delivery idempotent by
  remembering the last epoch it delivered (:meth:`OutputAdapter.delivered_through`).

Adapters are made by factories, as in StreamInsight: :meth:`InputAdapterFactory.create` is called
once per adapter instance, and :meth:`InputAdapterFactory.declare_advance_time_properties` is called
for the same instance with the same config and shape. Settings given at binding level override
what the factory declares.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Generic, TypeVar

from engine.events import Event, EventShape
from engine.settings import AdapterAdvanceTimeSettings

__all__ = [
    "InputAdapter",
    "InputAdapterFactory",
    "ItemKind",
    "OutputAdapter",
    "OutputAdapterFactory",
    "SourceItem",
]

ConfigT = TypeVar("ConfigT")


class ItemKind(StrEnum):
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
    arrival stamp in ticks (non-decreasing within a partition). ``event`` is the event or CTI,
    ``None`` for :attr:`ItemKind.END`.
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

    @abstractmethod
    def partitions(self) -> Sequence[str]:
        """The source partitions, declared when the input starts (driver). Never empty."""

    def bound_as(self, name: str) -> None:  # noqa: B027 - optional hook
        """Called once on the driver with the name the input is bound under, before
        :meth:`partitions`. The default does nothing."""

    @abstractmethod
    def payload_schema(self) -> str:
        """The payload columns as a Spark DDL string, e.g. ``"id int, v double"`` (driver)."""

    @abstractmethod
    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        """Yield the items of ``partition`` in order, from ``start_offset`` on (executor).

        Must be deterministic: the same partition and offset yield the same items, so an epoch
        can be replayed. Raises :class:`engine.errors.MalformedRecordError` naming the partition
        and offset of a record that cannot be read, unless the adapter dead-letters it.
        """


class OutputAdapter(ABC):
    """A consumer of a query's committed output (driver)."""

    @abstractmethod
    def deliver(self, epoch: int, items: Sequence[Event]) -> None:
        """Receive the output of ``epoch``: committed events (in the consumer's shape) and CTIs.

        For each new output CTI, in increasing order, the events it newly commits sorted by
        (start, end, payload), then the CTI itself. Called once per epoch, epochs in order,
        possibly with an empty ``items``.
        """

    def delivered_through(self) -> int | None:
        """The last epoch this adapter has durably delivered, or None. The engine skips epochs up
        to it when it replays after a restart. The default remembers nothing."""
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
