"""Application time: int64 ticks of one microsecond since the Unix epoch, UTC.

Semantics §1. Inside the engine every time value is a plain ``int``; the public API also takes
timezone-aware :class:`datetime.datetime` and :class:`datetime.timedelta` values, converted here.
A naive ``datetime`` is refused: guessing its zone would make results depend on the machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = [
    "MAX_TIME",
    "MIN_TIME",
    "TICK",
    "format_ticks",
    "iso_time",
    "saturating_sub",
    "to_datetime",
    "to_duration_ticks",
    "to_ticks",
]

#: One tick: the engine's time resolution (that of ``datetime`` and Spark ``TimestampType``).
TICK = timedelta(microseconds=1)
#: ``-inf`` on the timeline: the smallest int64.
MIN_TIME: int = -(2**63)
#: ``+inf`` on the timeline: the largest int64. A CTI here flushes everything.
MAX_TIME: int = 2**63 - 1

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ticks(value: datetime | int, *, what: str = "time") -> int:
    """Return ``value`` as ticks since the epoch.

    ``value`` is an ``int`` of ticks (taken as is) or a timezone-aware ``datetime``.
    Raises ``TypeError`` for a naive ``datetime`` or any other type, naming ``what``.
    """
    if isinstance(value, bool):
        raise TypeError(
            f"{what} must be a timezone-aware datetime or int ticks; got bool {value!r}"
        )
    if isinstance(value, int):
        if not MIN_TIME <= value <= MAX_TIME:
            raise ValueError(
                f"{what} must fit in int64 ticks [{MIN_TIME}, {MAX_TIME}]; got {value}"
            )
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise TypeError(
                f"{what} must be a timezone-aware datetime; got naive {value.isoformat()}. "
                "Fix: attach a zone, e.g. value.replace(tzinfo=datetime.UTC)"
            )
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    raise TypeError(
        f"{what} must be a timezone-aware datetime or int ticks; got {type(value).__name__} "
        f"{value!r}"
    )


def to_duration_ticks(value: timedelta | int, *, what: str = "duration") -> int:
    """Return a duration (``timedelta`` or ``int`` ticks) as ticks; may be negative."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a timedelta or int ticks; got bool {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    raise TypeError(
        f"{what} must be a timedelta or int ticks; got {type(value).__name__} {value!r}"
    )


def to_datetime(ticks: int) -> datetime:
    """Return ticks as an aware UTC ``datetime`` (``±inf`` cannot be represented: ValueError)."""
    if ticks in (MIN_TIME, MAX_TIME):
        raise ValueError(f"{format_ticks(ticks)} has no datetime value")
    return _EPOCH + timedelta(microseconds=ticks)


def saturating_sub(t: int, d: int) -> int:
    """``t - d`` clamped to ``[MIN_TIME, MAX_TIME]``; ``±inf`` stay where they are."""
    if t in (MIN_TIME, MAX_TIME):
        return t
    return max(MIN_TIME, min(MAX_TIME, t - d))


def iso_time(ticks: int) -> str:
    """A moment as people read it: ISO 8601 in UTC (``2026-01-01T00:00:05+00:00``), ``-inf`` or
    ``+inf`` at the ends of the timeline, and the bare tick count for a moment beyond what a
    ``datetime`` holds (years 1-9999)."""
    if ticks == MIN_TIME:
        return "-inf"
    if ticks == MAX_TIME:
        return "+inf"
    try:
        return to_datetime(ticks).isoformat()
    except OverflowError:
        return str(ticks)


def format_ticks(ticks: int) -> str:
    """A readable form for messages: ``-inf``, ``+inf`` or ISO time with the tick count."""
    shown = iso_time(ticks)
    if ticks in (MIN_TIME, MAX_TIME):
        return shown
    return f"{ticks} ticks" if shown == str(ticks) else f"{shown} ({ticks} ticks)"
