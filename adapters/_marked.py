"""Exactly-once output to one broker partition by marks: shared by the Kafka and Event Hubs output.

A private module. Every output record carries its epoch, the number of its item among the query's
output items (the engine's numbering from the query's first item, CTIs included whether they are
written or not) and the number after the last item of the delivery that wrote it (headers in
Kafka, application properties in Event Hubs). On first use an adapter reads the partition's tail
back to the last marked record (:class:`Mark`): the output holds the items up to that record's
(:meth:`MarkedOutputAdapter.progress`), and the engine hands :meth:`MarkedOutputAdapter.deliver`
the items after it, numbered. The broker adapters supply the reading, the sending and the retries
(:class:`adapters._broker.Retries`); the guarantees are documented on each of them.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ctistream.adapters._broker import Retries
from ctistream.adapters._records import _format_time, _json_default, _json_ready
from ctistream.engine.contracts import OutputAdapter
from ctistream.engine.errors import EngineError
from ctistream.engine.events import Event, EventKind, EventShape


@dataclass(frozen=True, slots=True)
class Mark:
    """Where the output partition's tail stands: the last record this scheme wrote, as its
    epoch, its item's number among the query's output items and the number after the last item
    of the delivery that wrote it."""

    epoch: int
    index: int
    count: int


def read_mark(epoch: Any, index: Any, count: Any) -> Mark | None:
    """The mark a record carries as three raw values (ints, or their digits as text or bytes), or
    None when they are missing or not of this scheme."""
    try:
        mark = Mark(int(epoch), int(index), int(count))
    except (TypeError, ValueError):
        return None
    return mark if 0 <= mark.index < mark.count and mark.epoch >= 0 else None


_UNKNOWN: Any = object()


class MarkedOutputAdapter(OutputAdapter):
    """Writes each epoch's events and CTIs as JSON records to one partition, each item exactly
    once (driver). Subclasses say how to send, read the tail and handle client errors."""

    #: The words of the messages: one record, where records go, and how they get there.
    _record: ClassVar[str]  # "record"
    _target: ClassVar[str]  # "topic"
    _verbs: ClassVar[tuple[str, str, str]]  # ("write", "written", "writing")
    #: The error of the broker's adapters (a record that breaks the scheme).
    _error: ClassVar[type[EngineError]]

    def __init__(self, config: Any, shape: EventShape) -> None:
        self._config = config
        self._shape = EventShape(shape)
        self._producer: Any = None
        self._mark: Mark | None = _UNKNOWN

    # -- engine hooks -------------------------------------------------------------------------
    @property
    def counts_every_item(self) -> bool:  # type: ignore[override]
        """Only when CTIs are written: a mark moves with a record."""
        return bool(self._config.include_ctis)

    @property
    def own_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        """The record's time, end and edge fields, as configured."""
        cfg = self._config
        return (cfg.time_field, cfg.end_field, cfg.edge_field)

    def progress(self) -> int | None:
        """The number after the item of the partition's last marked record, or None (reads the
        tail once)."""
        mark = self._tail()
        return None if mark is None else mark.index + 1

    def deliver(self, epoch: int, items: Sequence[Event], first: int) -> None:
        """Write ``items``, the query's output items numbered from ``first``, those after what
        :meth:`progress` reports; return when they are acknowledged."""
        include_ctis = self._config.include_ctis
        write, _, writing = self._verbs
        values = [
            (first + i, self._value(e), e.is_cti)
            for i, e in enumerate(items)
            if include_ctis or not e.is_cti
        ]
        sends = self._sends
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            try:
                if self._mark is _UNKNOWN:
                    self._mark = self._read_tail()
                mark = self._mark
                if attempts == 1:
                    self._check_first(first, mark)
                start = 0  # after a failure: past the records that reached the partition
                if mark is not None:
                    start = sum(1 for v in values if v[0] <= mark.index)
                if start < len(values):
                    self._send(epoch, values, start, first + len(items))
            except Exception as error:
                if sends.ours(error):
                    self._reset()
                raise

        sends.call(
            f"{write} epoch {epoch} to {self._where}",
            f"Epochs before it are in the {self._target}; a restart completes this one "
            f"without {writing} any {self._record} twice.",
            attempt,
        )

    def close(self) -> None:
        """Close the producer."""
        self._reset()

    # -- what each broker provides ------------------------------------------------------------
    @property
    @abstractmethod
    def _where(self) -> str:
        """The output partition, for messages."""

    @property
    @abstractmethod
    def _reads(self) -> Retries:
        """How the tail is read: the broker's retries for reading."""

    @property
    @abstractmethod
    def _sends(self) -> Retries:
        """How a delivery is retried after a client failure (the producer closed and the tail
        read again before the next attempt)."""

    @abstractmethod
    def _send(
        self, epoch: int, values: list[tuple[int, bytes, bool]], first: int, count: int
    ) -> None:
        """Send ``(index, value, is_cti)`` from ``values[first]`` on, marked with the epoch,
        the index and ``count`` (the number after the delivery's last item); keep ``_mark`` at
        the last record acknowledged."""

    @abstractmethod
    def _read_tail(self) -> Mark | None:
        """The mark of the last record of this scheme in the partition."""

    @abstractmethod
    def _close_producer(self, producer: Any) -> None: ...

    # -- helpers ------------------------------------------------------------------------------
    def _check_first(self, first: int, mark: Mark | None) -> None:
        """Refuse items numbered ``first`` on when the partition holds items from there on
        already: the engine hands over only the items after what :meth:`progress` reports."""
        if mark is None or first > mark.index:
            return
        raise self._error(
            f"{self._where} holds the query's output items up to number {mark.index} already, "
            f"but items from number {first} on are being delivered; expected {mark.index + 1} "
            f"or later. The partition was probably {self._verbs[1]} by another query. Fix: give "
            f"each query its own output {self._target} or partition"
        )

    def _value(self, event: Event) -> bytes:
        cfg = self._config
        if event.kind is EventKind.CTI:
            row: dict[str, Any] = {cfg.time_field: _format_time(event.start)}
        else:
            row = {
                cfg.time_field: _format_time(event.start),
                cfg.end_field: _format_time(event.end),
                cfg.edge_field: event.edge.value if event.edge is not None else None,
            }
            for name, value in event.payload.items():
                if name in row:
                    raise ValueError(
                        f"payload field {name!r} of {event!r} clashes with the output's own field "
                        f"{name!r} in {self._where}. Fix: rename it in the query (e.g. with "
                        f"select), or set {type(cfg).__name__} time_field/end_field/edge_field "
                        "to other names"
                    )
                row[name] = _json_ready(value)
        return json.dumps(row, default=_json_default, ensure_ascii=False).encode("utf-8")

    def _tail(self) -> Mark | None:
        if self._mark is _UNKNOWN:
            self._mark = self._reads.call(
                f"read the tail of {self._where}",
                f"Nothing was {self._verbs[1]}.",
                self._read_tail,
            )
        return self._mark

    def _reset(self) -> None:
        """Close the producer and forget the tail: the next call reads it again."""
        producer, self._producer = self._producer, None
        if producer is not None:
            self._close_producer(producer)
        self._mark = _UNKNOWN
