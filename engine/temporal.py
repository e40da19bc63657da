"""Application time: int64 ticks of one microsecond since the Unix epoch, UTC.

Semantics §1. Inside the engine every time value is a plain ``int``; the public API also takes
timezone-aware :class:`datetime.datetime` moments, and takes durations only as
:class:`datetime.timedelta` values or Spark-style interval strings (``"10 seconds"``), converted
here. A naive ``datetime`` is refused: guessing its zone would make results depend on the machine;
a bare number as a duration too: ``5`` and ``5.0`` must never mean different units.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

__all__ = [
    "MAX_TIME",
    "MIN_TIME",
    "TICK",
    "format_ticks",
    "iso_time",
    "saturating_sub",
    "to_datetime",
    "to_duration",
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


#: Spark's interval units of fixed length (``IntervalUtils.stringToInterval``), in ticks; each
#: also takes a plural ``s``. Months and years have no fixed length and are refused.
_UNIT_TICKS = {
    "week": 7 * 86_400_000_000,
    "day": 86_400_000_000,
    "hour": 3_600_000_000,
    "minute": 60_000_000,
    "second": 1_000_000,
    "millisecond": 1_000,
    "microsecond": 1,
}
#: One ``[+|-] number unit`` part of a Spark interval string; as in Spark, only seconds may
#: have a fraction.
_PART = re.compile(r"([+-]?)\s*(\d+\.?\d*|\.\d+)\s+([a-z]+)(?=\s|$)")
_INTERVAL = re.compile(r"(?:interval\s+)?(.*)", re.DOTALL)


def _as_seconds(value: int | float) -> int | float:
    """The number a user gave, as it would read in ``timedelta(seconds=...)``."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _parse_interval(text: str) -> int:
    """Ticks of a Spark interval string (``"1 minute 30 seconds"``); ValueError naming the
    first part that is not one, exact (no float on the way)."""
    body = _INTERVAL.fullmatch(text.strip().lower())
    rest = body.group(1).strip() if body else ""
    if not rest:
        raise ValueError("no '<number> <unit>' part")
    if re.fullmatch(r"[+-]?\s*(\d+\.?\d*|\.\d+)", rest):
        raise ValueError("a number without a unit")
    total = 0
    pos = 0
    for part in _PART.finditer(rest):
        gap = rest[pos : part.start()]
        if gap.strip():
            raise ValueError(f"cannot read {gap.strip()!r}")
        pos = part.end()
        sign, number, word = part.groups()
        unit = word[:-1] if word.endswith("s") else word
        if unit in ("month", "year"):
            raise ValueError(
                f"{unit}s have no fixed length in ticks; use days or weeks (e.g. '30 days')"
            )
        if unit not in _UNIT_TICKS:
            raise ValueError(
                f"unknown unit {word!r}; expected one of "
                + ", ".join(f"{u}(s)" for u in _UNIT_TICKS)
            )
        whole, _, fraction = number.partition(".")
        if fraction.rstrip("0") and unit != "second":
            raise ValueError(
                f"{number} {word}: only seconds may have a fraction (as in Spark); "
                "e.g. '1 minute 30 seconds' or '1.5 seconds'"
            )
        if len(fraction.rstrip("0")) > 6:
            raise ValueError(
                f"{number} seconds is finer than one tick (1 µs); expected at most 6 digits "
                "after the point"
            )
        ticks = int(whole or "0") * _UNIT_TICKS[unit] + int(fraction[:6].ljust(6, "0"))
        total += -ticks if sign == "-" else ticks
    if rest[pos:].strip():
        raise ValueError(f"cannot read {rest[pos:].strip()!r}")
    return total


def to_duration_ticks(
    value: timedelta | str, *, name: str, owner: str, min_ticks: int | None = None
) -> int:
    """Return a duration as ticks, exactly: the one reading of durations (semantics §1).

    ``value`` is a :class:`~datetime.timedelta` (``TICK * n`` spells n ticks) or a Spark-style
    interval string: ``"10 seconds"``, ``"1 minute 30 seconds"``, ``"500 milliseconds"``,
    ``"interval 2 hours"`` (units week, day, hour, minute, second, millisecond, microsecond,
    singular or plural; only seconds may have a fraction, at most 6 digits: ``"0.5 seconds"``
    is 500000 ticks). A bare ``int`` or ``float`` is refused (``TypeError``): ``5`` and
    ``5.0`` must never mean different units. ``name`` and ``owner`` (the parameter and the
    operator or setting) go into the message; ``min_ticks``, when given, is the smallest
    duration allowed (``ValueError`` below it). Called on the driver, when a query is built.
    """
    where = f"{owner}: {name}"
    if isinstance(value, bool) or not isinstance(value, timedelta | str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            n = _as_seconds(value)
            ticks_hint = f"; TICK * {n} for {n} ticks of 1 µs" if isinstance(n, int) else ""
            raise TypeError(
                f"{where} must be a duration; got the bare number {value!r}, which names no "
                f"unit. Expected a timedelta or a Spark-style interval string. Fix: "
                f'{name}=timedelta(seconds={n}) or {name}="{n} seconds"{ticks_hint}'
            )
        raise TypeError(
            f"{where} must be a duration: a timedelta or a Spark-style interval string; got "
            f"{type(value).__name__} {value!r}. Fix: {name}=timedelta(seconds=10) or "
            f'{name}="10 seconds"'
        )
    if isinstance(value, timedelta):
        ticks = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    else:
        try:
            ticks = _parse_interval(value)
        except ValueError as e:
            raise ValueError(
                f"{where} must be a timedelta or a Spark-style interval string; got "
                f'{value!r}: {e}. Fix: e.g. {name}="10 seconds", "1 minute 30 seconds", '
                f'"500 milliseconds" or {name}=timedelta(seconds=10)'
            ) from None
    if not MIN_TIME <= ticks <= MAX_TIME:
        raise ValueError(
            f"{where} must fit in int64 ticks (about ±292000 years); got {value!r}. "
            "Fix: pass a shorter duration"
        )
    if min_ticks is not None and ticks < min_ticks:
        least = {0: "zero or positive", 1: "at least 1 tick (1 µs)"}.get(
            min_ticks, f"at least {min_ticks} ticks"
        )
        raise ValueError(
            f"{where} must be {least}; got {value!r} ({ticks} ticks). Fix: pass a "
            + ("duration >= 0" if min_ticks == 0 else "positive duration")
            + ', e.g. timedelta(seconds=10) or "10 seconds"'
        )
    return ticks


def duration_text(ticks: int) -> str:
    """A duration as the interval string that reads back to it (:func:`to_duration_ticks`),
    in its largest whole unit: ``"10 seconds"``, ``"1 minute"``, ``"10 microseconds"``."""
    if ticks == 0:
        return "0 seconds"
    for unit, size in _UNIT_TICKS.items():
        if ticks % size == 0:
            n = ticks // size
            return f"{n} {unit}" + ("" if abs(n) == 1 else "s")
    raise AssertionError("a microsecond divides every duration")


def to_duration(
    value: timedelta | str, *, name: str, owner: str, min_ticks: int | None = None
) -> timedelta:
    """:func:`to_duration_ticks` as a ``timedelta``, for the field validators of pydantic
    settings and configs: every error is a ``ValueError``, which pydantic reports as a
    ``ValidationError`` naming the field."""
    try:
        ticks = to_duration_ticks(value, name=name, owner=owner, min_ticks=min_ticks)
    except TypeError as e:
        raise ValueError(str(e)) from None
    return timedelta(microseconds=ticks)


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
