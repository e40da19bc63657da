"""Count windows and session windows in the reference interpreter (semantics §5), literal to the
rows of the table; :mod:`tests.reference.interpreter` dispatches its plan nodes here.

Both operators use global CTIs only: keyed CTI rows are dropped at their input (merged, as for
snapshot windows; docs/decisions.md, "Count and session windows"). Events join the operator as
in every window (:func:`_take`: an END edge closes the oldest open identical START edge); an
empty lifetime (an edge closed at its adjusted start) counts nowhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctistream.engine.events import Event, EventKind, cti
from ctistream.engine.temporal import MAX_TIME, MIN_TIME

from .interpreter import _Member, _Row, _take
from .keys import spark_key, spark_order

__all__ = ["CountWindow", "SessionWindow", "count_window", "session_window"]


@dataclass(frozen=True)
class CountWindow:
    """§5 ``count_window(n)`` with an aggregate (StreamInsight's count-by-start-time window).

    Per group, the distinct start times ``d1 < d2 < ...`` of the events define windows: window
    ``i`` holds every event whose start is in ``{d_i .. d_(i+n-1)}``; one result per complete
    window, a point at ``d_(i+n-1)``, complete once the input CTI passes ``d_(i+n-1)``
    (``c > d_(i+n-1)``). A trailing window with fewer than ``n`` start times never completes.
    Output CTI: the input's (:func:`count_window`)."""

    child: Any
    n: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Callable[[list[dict]], Any]], ...]


@dataclass(frozen=True)
class SessionWindow:
    """§5 ``session_window(timeout, max_duration)`` with an aggregate (ASA SessionWindow).

    Per group, events in start order form sessions: an event joins the open session when its
    start is before the session's reach (the largest end of its events + ``timeout``), else it
    opens a new one. With ``max_duration`` ``D``: a session that starts at ``s`` and is still
    open at ``m``, the first multiple of ``D`` (grid from 0) with ``m - s >= D``, ends at ``m``;
    an event starting at or after ``m`` opens a new one. A session's lifetime is ``[s, end)``
    with ``end = min(reach, m)``; one result per session once ``end <= c``. Output CTI:
    ``min(c, start of the earliest session still open)`` (:func:`session_window`)."""

    child: Any
    timeout: int
    max_duration: int | None
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Callable[[list[dict]], Any]], ...]


def _group_order(key: tuple) -> tuple:
    return tuple(spark_order(v) for v in key)


def _groups(members: list[_Member], keys: tuple[str, ...]) -> dict[tuple, list[_Member]]:
    """The members with a non-empty lifetime, per group, in start order."""
    groups: dict[tuple, list[_Member]] = {}
    for m in sorted(members, key=lambda m: m.start):
        if m.end > m.start:
            groups.setdefault(tuple(spark_key(m.payload[k]) for k in keys), []).append(m)
    return groups


def _result(keys: tuple[str, ...], key: tuple, aggregates: Any, rows: list[dict]) -> dict:
    payload = dict(zip(keys, key, strict=True))
    for name, fn in aggregates:
        payload[name] = fn(rows)
    return payload


def count_window(node: CountWindow, rows: list[_Row]) -> list[_Row]:
    """Item by item. At an input CTI ``c`` above the last one ``last``, every window whose last
    start time ``d`` has ``last <= d < c`` is complete now (a window with ``d < last`` was
    complete at ``last``): one point ``[d, d + 1)`` per such window and group, at the CTI's
    position, before the CTI. Every start time below ``c`` is known then (§2: later events start
    at or after ``c``). The output CTI is ``c`` itself, when it rises (§5: "same as input"; an
    incomplete window ends at a start time ``>= c``, so no result can start before ``c``)."""
    members: list[_Member] = []
    last = MIN_TIME
    out: list[_Row] = []
    for row in rows:
        e = row.event
        if not e.is_cti:
            _take(members, e)
            continue
        c = e.start
        if c <= last:
            continue
        groups = _groups(members, node.keys)
        for key in sorted(groups, key=_group_order):
            starts = sorted({m.start for m in groups[key]})
            for i in range(node.n - 1, len(starts)):
                first, d = starts[i - node.n + 1], starts[i]
                if not last <= d < c:
                    continue
                inside = [m.payload for m in groups[key] if first <= m.start <= d]
                payload = _result(node.keys, key, node.aggregates, inside)
                out.append(_Row(row.position, Event(EventKind.INSERT, d, d + 1, payload)))
        last = c
        out.append(_Row(row.position, cti(c)))
    return out


def _grid_cap(first: int, d: int | None) -> int:
    """The end ``m`` that ``max_duration`` ``d`` gives a session starting at ``first``: the
    smallest multiple of ``d`` with ``m - first >= d``; +inf without ``d`` or beyond int64."""
    if d is None:
        return MAX_TIME
    m = -(-(first + d) // d) * d
    return m if m < MAX_TIME else MAX_TIME


def _sessions(node: SessionWindow, members: list[_Member]) -> list[tuple[int, int, list[_Member]]]:
    """The sessions of one group's members (in start order): ``(start, end, members)``."""
    sessions: list[tuple[int, int, list[_Member]]] = []
    first = reach = cap = MIN_TIME
    inside: list[_Member] = []
    for m in members:
        if inside and m.start < reach and m.start < cap:
            inside.append(m)
            reach = max(reach, min(m.end + node.timeout, MAX_TIME))
            continue
        if inside:
            sessions.append((first, min(reach, cap), inside))
        first, inside = m.start, [m]
        reach = min(m.end + node.timeout, MAX_TIME)  # an open edge (+inf) reaches +inf
        cap = _grid_cap(first, node.max_duration)
    if inside:
        sessions.append((first, min(reach, cap), inside))
    return sessions


def session_window(node: SessionWindow, rows: list[_Row]) -> list[_Row]:
    """Item by item. At an input CTI ``c`` the sessions are formed from every event received
    (in start order, per group); each session with ``end <= c`` not emitted before is final
    (a later event starts at or after ``c``, so at or after its end, and cannot join it): one
    result ``[start, end)`` per session and group at the CTI's position, before the CTI. At
    ``c = +inf`` every session is closed, one ending at +inf too (an edge never closed reaches
    +inf). Then the output CTI ``min(c, start of the earliest session still open)`` (open: its
    ``end > c``), when it rises."""
    members: list[_Member] = []
    emitted_sessions: set[tuple[tuple, int]] = set()
    last = MIN_TIME
    emitted = MIN_TIME
    out: list[_Row] = []
    for row in rows:
        e = row.event
        if not e.is_cti:
            _take(members, e)
            continue
        c = e.start
        if c <= last:
            continue
        last = c
        earliest_open = MAX_TIME
        groups = _groups(members, node.keys)
        for key in sorted(groups, key=_group_order):
            for start, end, inside in _sessions(node, groups[key]):
                if end > c:
                    earliest_open = min(earliest_open, start)
                    continue
                if (key, start) in emitted_sessions:
                    continue
                emitted_sessions.add((key, start))
                payload = _result(node.keys, key, node.aggregates, [m.payload for m in inside])
                out.append(_Row(row.position, Event(EventKind.INSERT, start, end, payload)))
        moved = min(c, earliest_open)
        if moved > emitted:
            emitted = moved
            out.append(_Row(row.position, cti(moved)))
    return out
