"""In-process adapters: a scripted source in the style of Beam's TestStream, and a collecting sink.

A script fixes the arrival order of every event and CTI of every input exactly::

    script = EventScript()
    script.insert("sensors", point(t, {"id": 1, "v": 2.0}))   # arrival from a shared counter
    script.cti("sensors", t3)                                 # explicit CTI
    script.insert("sensors", point(t4, {...}), partition="p1")
    script.end("sensors")                                     # end of this input
    cfg = MemoryInputConfig(script=script, schema="id int, v double")

The script is complete before the query runs; the adapter reads it like a broker: per partition,
from an offset.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

from ctistream.engine._model import Model
from ctistream.engine.contracts import (
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    SourceItem,
)
from ctistream.engine.events import Event, EventKind, EventShape, cti
from ctistream.engine.schema import infer_payload_schema
from ctistream.engine.temporal import format_ticks, to_ticks
from pydantic import ConfigDict

__all__ = [
    "EventScript",
    "MemoryInputAdapter",
    "MemoryInputConfig",
    "MemoryInputFactory",
    "MemoryOutputAdapter",
    "MemoryOutputConfig",
    "MemoryOutputFactory",
]

DEFAULT_PARTITION = "0"


class EventScript:
    """A scripted arrival sequence for any number of named inputs.

    Every call appends one item. Its arrival stamp is the given ``arrival`` (a tz-aware datetime
    or int ticks) or, by default, one more than the previous item's: a counter shared by all
    inputs, so the order of calls is the arrival order. Arrival stamps never decrease.
    """

    def __init__(self) -> None:
        self._items: dict[str, dict[str, list[SourceItem]]] = {}
        self._ended: set[str] = set()
        self._last_arrival = -1

    # -- building -------------------------------------------------------------------------
    def declare(self, stream: str, *partitions: str) -> EventScript:
        """Declare partitions of ``stream`` up front (a partition with no items holds the input's
        CTI at -inf). Partitions used by later calls are declared automatically."""
        parts = self._items.setdefault(stream, {})
        for p in partitions:
            parts.setdefault(str(p), [])
        return self

    def insert(
        self,
        stream: str,
        event: Event,
        *,
        arrival: datetime | int | None = None,
        partition: str = DEFAULT_PARTITION,
    ) -> EventScript:
        """Append an INSERT event (point, interval or edge) to ``stream``."""
        if not isinstance(event, Event) or event.kind is not EventKind.INSERT:
            raise TypeError(
                f"insert() takes an INSERT event built with point/interval/edge_start/edge_end; "
                f"got {event!r}. Fix: use script.cti(stream, t) for CTIs"
            )
        self._append(stream, ItemKind.EVENT, event, arrival, partition)
        return self

    def cti(
        self,
        stream: str,
        t: datetime | int,
        *,
        arrival: datetime | int | None = None,
        partition: str = DEFAULT_PARTITION,
    ) -> EventScript:
        """Append an explicit CTI at ``t`` to ``stream``'s ``partition``."""
        self._append(stream, ItemKind.CTI, cti(t), arrival, partition)
        return self

    def end(self, stream: str, *, arrival: datetime | int | None = None) -> EventScript:
        """End ``stream``: every partition ends here (a flush_on_stop input flushes to +inf)."""
        stamp = self._next_arrival(arrival, stream)
        parts = self._items.setdefault(stream, {})
        if not parts:
            parts[DEFAULT_PARTITION] = []
        for p, items in parts.items():
            items.append(SourceItem(ItemKind.END, len(items), stamp))
            del p
        self._ended.add(stream)
        return self

    def _next_arrival(self, arrival: datetime | int | None, stream: str) -> int:
        if stream in self._ended:
            raise ValueError(
                f"input {stream!r} already ended in this script; got another item for it. "
                "Fix: add items before script.end()"
            )
        if arrival is None:
            stamp = self._last_arrival + 1
        else:
            stamp = to_ticks(arrival, what="arrival")
            if stamp < self._last_arrival:
                raise ValueError(
                    f"arrival stamps must not decrease; got {format_ticks(stamp)} after "
                    f"{format_ticks(self._last_arrival)} for input {stream!r}. Fix: append items "
                    "in arrival order"
                )
        self._last_arrival = stamp
        return stamp

    def _append(
        self,
        stream: str,
        kind: ItemKind,
        event: Event,
        arrival: datetime | int | None,
        partition: str,
    ) -> None:
        stamp = self._next_arrival(arrival, stream)
        items = self._items.setdefault(stream, {}).setdefault(str(partition), [])
        items.append(SourceItem(kind, len(items), stamp, event))

    # -- reading --------------------------------------------------------------------------
    def streams(self) -> list[str]:
        return list(self._items)

    def partitions(self, stream: str) -> list[str]:
        return list(self._items.get(stream, {})) or [DEFAULT_PARTITION]

    def items(self, stream: str, partition: str) -> list[SourceItem]:
        return self._items.get(stream, {}).get(partition, [])

    def events(self, stream: str) -> list[Event]:
        return [
            i.event
            for items in self._items.get(stream, {}).values()
            for i in items
            if i.kind is ItemKind.EVENT and i.event is not None
        ]


class MemoryInputConfig(Model):
    """Configuration of a scripted input.

    ``stream`` picks the script's input; by default the name the stream is bound under.
    ``schema`` is the payload as Spark DDL; by default inferred from the script's payloads.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    script: EventScript
    schema_: str | None = None
    stream: str | None = None

    def __init__(self, **data: Any) -> None:
        if "schema" in data:
            data["schema_"] = data.pop("schema")
        super().__init__(**data)


class MemoryInputAdapter(InputAdapter):
    """Reads one input of an :class:`EventScript`."""

    def __init__(self, config: MemoryInputConfig, shape: EventShape) -> None:
        self._script = config.script
        self._schema = config.schema_
        self._shape = shape
        self._stream = config.stream

    def bound_as(self, name: str) -> None:
        if self._stream is None:
            self._stream = name
        self._check_shapes()

    def _check_shapes(self) -> None:
        for event in self._script.events(self._name):
            got = event.shape
            ok = (
                got is EventShape.EDGE
                if self._shape is EventShape.EDGE
                else got is EventShape.POINT
                if self._shape is EventShape.POINT
                else got in (EventShape.POINT, EventShape.INTERVAL)
            )
            if not ok:
                raise ValueError(
                    f"input {self._name!r} is bound as {self._shape.value} but its script holds "
                    f"{event!r}, a {got.value if got else 'CTI'}. Fix: bind the input with the "
                    "shape of its events, or script events of that shape"
                )

    @property
    def _name(self) -> str:
        if self._stream is None:
            raise RuntimeError("memory input used before the engine bound it to a stream name")
        return self._stream

    def partitions(self) -> Sequence[str]:
        return self._script.partitions(self._name)

    def size_hint(self) -> int:
        """The script's items for this input."""
        return sum(len(self._script.items(self._name, p)) for p in self.partitions())

    def payload_schema(self) -> str:
        if self._schema is not None:
            return self._schema
        return infer_payload_schema(e.payload for e in self._script.events(self._name))

    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        yield from self._script.items(self._name, partition)[start_offset:]


class MemoryInputFactory(InputAdapterFactory[MemoryInputConfig]):
    """Makes :class:`MemoryInputAdapter` instances. Declares no advance-time settings: bind them
    with ``AdvanceTimeSettings`` or subclass and override ``declare_advance_time_properties``."""

    def create(self, config: MemoryInputConfig, shape: EventShape) -> MemoryInputAdapter:
        return MemoryInputAdapter(config, shape)


class MemoryOutputConfig(Model):
    """Configuration of a collecting sink: output is kept in-process under ``name``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str


class MemoryOutputAdapter(OutputAdapter):
    """Appends delivered items to :meth:`MemoryOutputFactory.collected` under its name."""

    def __init__(self, name: str) -> None:
        self._name = name

    def deliver(self, epoch: int, items: Sequence[Event], first: int) -> None:
        MemoryOutputFactory._deliver(self._name, epoch, items, first)

    def progress(self) -> int | None:
        return MemoryOutputFactory._progress(self._name)


class MemoryOutputFactory(OutputAdapterFactory[MemoryOutputConfig]):
    """Makes collecting sinks. Creating one for a name clears what was collected under it."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _epochs: ClassVar[dict[str, list[tuple[int, list[Event]]]]] = {}
    #: per name, the number after the last output item collected (its progress)
    _held: ClassVar[dict[str, int]] = {}

    def create(self, config: MemoryOutputConfig, shape: EventShape) -> MemoryOutputAdapter:
        with self._lock:
            self._epochs[config.name] = []
            self._held.pop(config.name, None)
        return MemoryOutputAdapter(config.name)

    @classmethod
    def collected(cls, name: str) -> list[Event]:
        """Everything delivered under ``name``, in delivery order, CTIs included."""
        with cls._lock:
            return [e for _, items in cls._epochs.get(name, []) for e in items]

    @classmethod
    def epochs(cls, name: str) -> list[tuple[int, list[Event]]]:
        """What was delivered under ``name``, epoch by epoch."""
        with cls._lock:
            return [(n, list(items)) for n, items in cls._epochs.get(name, [])]

    @classmethod
    def _deliver(cls, name: str, epoch: int, items: Sequence[Event], first: int) -> None:
        with cls._lock:
            cls._epochs.setdefault(name, []).append((epoch, list(items)))
            cls._held[name] = first + len(items)

    @classmethod
    def _progress(cls, name: str) -> int | None:
        with cls._lock:
            return cls._held.get(name)
