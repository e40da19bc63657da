"""The reference's ``clip_event_duration`` (semantics §5, StreamInsight's ClipEventDuration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctistream.engine.events import EdgeType, Event, EventKind, cti
from ctistream.engine.temporal import MAX_TIME, MIN_TIME

from .keys import keys_equal

__all__ = ["ClipEventDuration", "clip_rows"]


@dataclass(frozen=True)
class ClipEventDuration:
    """§5 clip: each left event's end is cut to the start of the first right event with equal
    keys (nulls never match) that starts strictly after the left start and before the left end;
    payload = the left payload. Output CTI: the minimum of both sides' latest CTIs.

    Rows of both sides by (position, side, events / END edges / CTI), as for the join; a right
    event counts by its start alone (its END edge plays no part). After every position group,
    with ``cL``/``cR`` the sides' latest CTIs, a left event's *candidate* end is the smaller of
    its end (when known) and the smallest start ``r > start`` of a matching right event
    received. It is *final* when it is at most ``cR`` (a later right event starts at or after
    ``cR``) and either the left end is known or the candidate is such a start ``r`` at most
    ``cL`` (an open left edge ends at or after ``cL``, so not before ``r``). A left event
    leaves after the group it arrives in: as an interval when its end is final then, else as a
    START edge whose END edge follows after the group in which the end becomes final. An open
    left edge that no right event clips stays open until its END edge. Keyed CTIs are dropped
    at its inputs (global CTIs only), as for the anti-join.
    """

    left: Any
    right: Any
    on: tuple[str, ...]


@dataclass(eq=False)
class _Clipped:
    start: int
    end: int | None  # None while an open edge
    payload: dict[str, Any]
    clip: int | None = None  # the smallest matching right start above ``start``
    started: bool = False  # its START edge has left
    done: bool = False


def _kind_order(event: Event) -> int:
    if event.is_cti:
        return 2
    return 1 if event.edge is EdgeType.END else 0


def clip_rows(node: ClipEventDuration, left: list, right: list, row: Any) -> list:
    """The output rows (``row(position, event)`` makes one) of ``left`` clipped by ``right``
    (both global rows only, in position order)."""
    tagged = [
        (r.position, side, _kind_order(r.event), seq, r)
        for side, rows in enumerate((left, right))
        for seq, r in enumerate(rows)
    ]
    tagged.sort(key=lambda t: t[:4])
    lefts: list[_Clipped] = []
    starts: list[tuple[int, dict[str, Any]]] = []  # right starts and payloads received
    latest = [MIN_TIME, MIN_TIME]
    emitted = MIN_TIME
    out: list = []

    def matches(lp: dict, rp: dict) -> bool:
        return all(keys_equal(lp[k], rp[k]) for k in node.on)

    def take(x: _Clipped, r: int, rp: dict) -> None:
        if r > x.start and matches(x.payload, rp) and (x.clip is None or r < x.clip):
            x.clip = r

    i = 0
    while i < len(tagged):
        pos = tagged[i][0]
        while i < len(tagged) and tagged[i][0] == pos:
            _, side, _, _, r = tagged[i]
            i += 1
            e = r.event
            if e.is_cti:
                latest[side] = e.start
            elif side == 1:
                if e.edge is not EdgeType.END:
                    starts.append((e.start, dict(e.payload)))
                    for x in lefts:
                        take(x, e.start, dict(e.payload))
            elif e.edge is EdgeType.END:  # (an edge whose end is final already: no change)
                x = next(
                    y
                    for y in lefts
                    if y.end is None and y.start == e.start and y.payload == dict(e.payload)
                )
                x.end = e.end
            else:
                x = _Clipped(e.start, None if e.edge is EdgeType.START else e.end, dict(e.payload))
                for s, rp in starts:
                    take(x, s, rp)
                lefts.append(x)
        c_l, c_r = latest
        for x in lefts:
            if x.done:
                continue
            known = [v for v in (x.end, x.clip) if v is not None]
            v = min(known) if known else MAX_TIME
            final = known and v <= c_r and (x.end is not None or v <= c_l)
            if final:
                edge = EdgeType.END if x.started else None
                out.append(row(pos, Event(EventKind.INSERT, x.start, v, x.payload, edge)))
                x.done = True
            elif not x.started:
                event = Event(EventKind.INSERT, x.start, MAX_TIME, x.payload, EdgeType.START)
                out.append(row(pos, event))
                x.started = True
        c = min(latest)
        if c > emitted:
            emitted = c
            out.append(row(pos, cti(c)))
    return out
