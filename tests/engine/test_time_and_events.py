"""Time is int64 ticks of 1 µs since the epoch, UTC; events are validated values (§1-§2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from ctistream.engine import (
    MAX_TIME,
    MIN_TIME,
    TICK,
    EdgeType,
    EventKind,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.temporal import saturating_sub, to_datetime, to_ticks


def test_a_tick_is_one_microsecond_and_infinities_are_the_int64_bounds():
    assert timedelta(microseconds=1) == TICK
    assert (MIN_TIME, MAX_TIME) == (-(2**63), 2**63 - 1)


def test_aware_datetimes_become_ticks_since_the_epoch_in_utc():
    assert to_ticks(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)) == 1_000_000
    plus_two = timezone(timedelta(hours=2))
    assert to_ticks(datetime(1970, 1, 1, 2, 0, 0, 5, tzinfo=plus_two)) == 5
    assert to_datetime(1_000_001) == datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)


def test_a_naive_datetime_is_refused_with_a_fix():
    with pytest.raises(TypeError, match=r"timezone-aware.*naive 2026-01-01T00:00:00.*Fix"):
        point(datetime(2026, 1, 1), {})


def test_shapes_have_their_lifetimes():
    assert (point(5).start, point(5).end, point(5).shape) == (5, 6, EventShape.POINT)
    assert (interval(5, 9).end, interval(5, 9).shape) == (9, EventShape.INTERVAL)
    s, e = edge_start(5, {"a": 1}), edge_end(5, 9, {"a": 1})
    assert (s.end, s.edge, s.shape) == (MAX_TIME, EdgeType.START, EventShape.EDGE)
    assert (e.start, e.end, e.edge) == (5, 9, EdgeType.END)
    assert (cti(7).kind, cti(7).start, cti(MAX_TIME).start) == (EventKind.CTI, 7, MAX_TIME)


@pytest.mark.parametrize(
    "bad", [lambda: interval(5, 5), lambda: edge_end(5, 4), lambda: point(MAX_TIME)]
)
def test_empty_or_infinite_lifetimes_are_refused(bad):
    with pytest.raises(ValueError, match="got"):
        bad()


def test_events_are_values_with_frozen_payloads():
    a, b = point(1, {"x": 1}), point(1, {"x": 1})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(TypeError):
        a.payload["x"] = 2  # type: ignore[index]


def test_cti_arithmetic_saturates_at_the_infinities():
    assert saturating_sub(10, 3) == 7
    assert saturating_sub(MAX_TIME - 1, -5) == MAX_TIME
    assert saturating_sub(MIN_TIME + 1, 5) == MIN_TIME
    assert saturating_sub(MAX_TIME, 5) == MAX_TIME
