"""Event values and shapes (semantics §1-§2).

An :class:`Event` is an immutable value. Shapes exist only at the boundary: an adapter produces
points, intervals or edges and a consumer asks for one shape; inside the engine every event is a
half-open interval ``[start, end)`` and a START edge is the interval ``[start, +inf)`` until its
END edge arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from ctistream.engine._model import Choice
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, format_ticks, iso_time, to_ticks

__all__ = [
    "EdgeType",
    "Event",
    "EventKind",
    "EventShape",
    "cti",
    "edge_end",
    "edge_start",
    "interval",
    "point",
]


class EventShape(Choice):
    """The shape an adapter produces or a consumer asks for."""

    POINT = "POINT"
    INTERVAL = "INTERVAL"
    EDGE = "EDGE"


class EdgeType(Choice):
    """Which half of an edge event a row is."""

    START = "START"
    END = "END"


class EventKind(Choice):
    """An INSERT carries a payload; a CTI is a punctuation that commits the timeline before it."""

    INSERT = "INSERT"
    CTI = "CTI"


@dataclass(frozen=True, slots=True)
class Event:
    """One event or CTI.

    ``start``/``end`` are ticks. A CTI has ``start == end ==`` its timestamp and an empty payload.
    A START edge has ``end == MAX_TIME``; its END edge repeats ``start`` and the payload and carries
    the real ``end``. Build events with :func:`point`, :func:`interval`, :func:`edge_start`,
    :func:`edge_end` and :func:`cti`, which validate.
    """

    kind: EventKind
    start: int
    end: int
    payload: Mapping[str, Any] = field(default_factory=dict)
    edge: EdgeType | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", MappingProxyType(dict(self.payload)))

    def __hash__(self) -> int:
        return hash(
            (self.kind, self.start, self.end, self.edge, tuple(sorted(self.payload.items())))
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.kind, self.start, self.end, self.edge, dict(self.payload)) == (
            other.kind,
            other.start,
            other.end,
            other.edge,
            dict(other.payload),
        )

    def __repr__(self) -> str:
        """The constructor call that makes this event, with ISO times (``start``/``end`` hold
        the ticks): ``point(2026-01-01T00:00:05+00:00, {'v': 1})``, ``cti(+inf)``."""
        payload = dict(self.payload)
        if self.kind is EventKind.CTI:
            return f"cti({iso_time(self.start)})"
        if self.edge is EdgeType.START:
            return f"edge_start({iso_time(self.start)}, {payload})"
        if self.edge is EdgeType.END:
            return f"edge_end({iso_time(self.start)}, {iso_time(self.end)}, {payload})"
        if self.end == self.start + 1:
            return f"point({iso_time(self.start)}, {payload})"
        return f"interval({iso_time(self.start)}, {iso_time(self.end)}, {payload})"

    @property
    def is_cti(self) -> bool:
        return self.kind is EventKind.CTI

    @property
    def shape(self) -> EventShape | None:
        """The narrowest shape that describes this event (``None`` for a CTI)."""
        if self.kind is EventKind.CTI:
            return None
        if self.edge is not None:
            return EventShape.EDGE
        return EventShape.POINT if self.end == self.start + 1 else EventShape.INTERVAL

    def describe(self) -> str:
        """A readable description for error messages: the repr and the times in ticks."""

        def ticks(t: int) -> str:
            return f"{t} ticks" if MIN_TIME < t < MAX_TIME else iso_time(t)

        times = f"start {ticks(self.start)}"
        if self.edge is EdgeType.END or (self.edge is None and self.kind is EventKind.INSERT):
            times += f", end {ticks(self.end)}"
        return f"{self!r} ({times})"


def _time(value: datetime | int, what: str) -> int:
    t = to_ticks(value, what=what)
    if t in (MIN_TIME, MAX_TIME):
        raise ValueError(f"{what} of an event must be finite; got {format_ticks(t)}")
    return t


def _payload(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    if payload is None:
        return {}
    if not isinstance(payload, Mapping):
        raise TypeError(f"payload must be a mapping of column name to value; got {payload!r}")
    return dict(payload)


def point(t: datetime | int, payload: Mapping[str, Any] | None = None) -> Event:
    """A point event at ``t``: lifetime ``[t, t + 1 tick)``."""
    s = _time(t, "point time")
    return Event(EventKind.INSERT, s, s + 1, _payload(payload))


def interval(
    start: datetime | int, end: datetime | int, payload: Mapping[str, Any] | None = None
) -> Event:
    """An interval event ``[start, end)``; ``end`` must be after ``start``."""
    s, e = _time(start, "interval start"), to_ticks(end, what="interval end")
    if e <= s:
        raise ValueError(
            f"interval end must be after its start; got start {format_ticks(s)}, "
            f"end {format_ticks(e)}. Fix: use point() for an instant, or swap the two times"
        )
    return Event(EventKind.INSERT, s, e, _payload(payload))


def edge_start(start: datetime | int, payload: Mapping[str, Any] | None = None) -> Event:
    """A START edge: opens ``[start, +inf)`` until the END edge with the same start and payload."""
    return Event(
        EventKind.INSERT, _time(start, "edge start"), MAX_TIME, _payload(payload), EdgeType.START
    )


def edge_end(
    start: datetime | int, end: datetime | int, payload: Mapping[str, Any] | None = None
) -> Event:
    """An END edge: closes the open edge with this ``start`` and payload to ``[start, end)``."""
    s, e = _time(start, "edge start"), _time(end, "edge end")
    if e <= s:
        raise ValueError(
            f"edge end must be after its start; got start {format_ticks(s)}, end {format_ticks(e)}"
        )
    return Event(EventKind.INSERT, s, e, _payload(payload), EdgeType.END)


def cti(t: datetime | int) -> Event:
    """A CTI at ``t``: promises no later event starts (or END edge ends) before ``t``."""
    c = to_ticks(t, what="CTI time")
    return Event(EventKind.CTI, c, c)
