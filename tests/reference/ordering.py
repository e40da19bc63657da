"""Semantics §7 (arrival-time policies) for the reference interpreter, event by event.

Written from the contract's text, one rule per step, in the order §7 gives them; the choices the
contract leaves open are those of ``docs/decisions.md`` ("Arrival-time policies"):

* per source partition, and with ``over`` per (partition, key): a *substream* with its largest
  event time seen;
* ``event_time=None``: the arrival time is the application time, and the tolerances and the early
  window are disregarded (arrival never goes backwards in a partition);
* an event whose event-time value is null (or +-inf) cannot be placed: dropped, reason
  ``no-event-time``, and it changes no watermark;
* the input's CTI candidate after an event: without ``over``, the partition's watermark when the
  event raised it; with ``over``, ``arrival - late_arrival_tolerance`` whenever an event's arrival
  is above every earlier one of the partition (the only bound that holds for keys not yet seen:
  the late rule keeps every later event of every key at or above it).

:class:`Ordering` decides; the interpreter's ingress applies the decision before §3 and feeds
the CTI candidate to §3 as a generated CTI of the partition, right after the event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctistream.engine.settings import EventOrderingSettings, OrderingAction
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, saturating_sub, to_ticks

__all__ = ["ADJUST_REASONS", "DROP_REASONS", "Decision", "Ordering"]

DROP_REASONS = ("cti-violation", "early", "late", "out-of-order", "no-event-time")
ADJUST_REASONS = ("cti-violation", "late", "out-of-order")


@dataclass(frozen=True)
class Decision:
    """What §7 did to one event.

    ``action``: ``"ok"``, ``"drop:<reason>"``, or ``"adjust:<reason>[,<reason>]"`` (an event can
    be moved by the late rule and then by the out-of-order rule). ``start``: the application time
    it leaves with, None when dropped. ``watermark``: its substream's watermark after it (None
    while the substream has seen no event time). ``cti``: the CTI candidate right after it.
    """

    position: tuple
    partition: str
    key: Any
    event_time: int | None
    arrival: int
    action: str
    start: int | None
    watermark: int | None
    cti: int | None


@dataclass
class _Substream:
    max_seen: int | None = None  # the largest original event time not dropped as early
    events_in: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS[1:], 0))
    adjusted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ADJUST_REASONS[1:], 0))


class Ordering:
    """The §7 state of one input: its substreams, and per partition the largest arrival."""

    def __init__(self, settings: EventOrderingSettings) -> None:
        self.settings = settings
        by_arrival = settings.event_time is None
        # With arrival time as application time ASA disregards the tolerances and the window.
        self.tolerance = 0 if by_arrival else settings.out_of_order_ticks
        self.late = None if by_arrival else settings.late_ticks
        self.early = None if by_arrival else settings.early_ticks
        self.substreams: dict[tuple[str, Any], _Substream] = {}
        self.max_arrival: dict[str, int] = {}
        self.trace: list[Decision] = []

    def _watermark(self, sub: _Substream) -> int | None:
        """§7: the watermark is ``max event time seen - out_of_order_tolerance``."""
        if sub.max_seen is None:
            return None
        return saturating_sub(sub.max_seen, self.tolerance)

    def watermark(self, partition: str, key: Any) -> int | None:
        """The current watermark of the substream ``(partition, key)`` (``key`` None without
        ``over``); None while it has seen no event time (the interpreter's per-key CTIs read it
        as -inf)."""
        sub = self.substreams.get((partition, key))
        return None if sub is None else self._watermark(sub)

    def on_event(
        self, partition: str, payload: dict[str, Any], arrival: int, position: tuple
    ) -> Decision:
        s = self.settings
        key = payload[s.over] if s.over is not None else None
        sub = self.substreams.setdefault((partition, key), _Substream())
        sub.events_in += 1
        if s.event_time is None:
            t = arrival  # the arrival time is the application time
        else:
            value = payload[s.event_time]
            t = to_ticks(value, what=s.event_time) if value is not None else None
        watermark_before = self._watermark(sub)
        reasons: list[str] = []
        start: int | None = t

        if t is None or t in (MIN_TIME, MAX_TIME):
            start, action = None, "drop:no-event-time"
        # 1. The early check: more than the window ahead of arrival -> dropped as early.
        elif self.early is not None and t - arrival > self.early:
            start, action = None, "drop:early"
        else:
            action = ""
            # 2. The late check: more than the tolerance behind arrival -> late.
            if self.late is not None and arrival - t > self.late:
                if s.action is OrderingAction.DROP:
                    start, action = None, "drop:late"
                else:
                    start = arrival - self.late
                    reasons.append("late")
            # 3. The out-of-order check: below the watermark -> out of order.
            if start is not None and watermark_before is not None and start < watermark_before:
                if s.action is OrderingAction.DROP:
                    start, action = None, "drop:out-of-order"
                else:
                    start = watermark_before
                    reasons.append("out-of-order")
            # Max event time seen: the original time of every event not dropped as early.
            sub.max_seen = t if sub.max_seen is None else max(sub.max_seen, t)
            if not action:
                action = "adjust:" + ",".join(reasons) if reasons else "ok"

        if start is None:
            sub.dropped[action.removeprefix("drop:")] += 1
        for reason in reasons:
            sub.adjusted[reason] += 1

        watermark = self._watermark(sub)
        if s.over is None:
            # The watermark is a generated CTI, emitted right after the event that raises it.
            raised = watermark is not None and (
                watermark_before is None or watermark > watermark_before
            )
            candidate = watermark if raised else None
        else:
            # Substreams: the partition's CTI follows its arrivals (module docstring).
            candidate = None
            if partition not in self.max_arrival or arrival > self.max_arrival[partition]:
                self.max_arrival[partition] = arrival
                candidate = saturating_sub(arrival, s.late_ticks)
        decision = Decision(
            position, partition, key, t, arrival, action, start, watermark, candidate
        )
        self.trace.append(decision)
        return decision

    def counts(self, ingress: dict[str, int]) -> dict[str, Any]:
        """The input's counts: §3's (``ingress``: ``dropped``/``adjusted`` are CTI violations
        there) with §7's added, by reason, and per key with ``over``."""
        out = dict(ingress)
        dropped = {"cti-violation": ingress["dropped"]}
        adjusted = {"cti-violation": ingress["adjusted"]}
        for reason in DROP_REASONS[1:]:
            dropped[reason] = sum(s.dropped[reason] for s in self.substreams.values())
        for reason in ADJUST_REASONS[1:]:
            adjusted[reason] = sum(s.adjusted[reason] for s in self.substreams.values())
        out["dropped"] = sum(dropped.values())
        out["adjusted"] = sum(adjusted.values())
        out["dropped_by_reason"] = dropped
        out["adjusted_by_reason"] = adjusted
        if self.settings.over is not None:
            keys: dict[Any, dict[str, Any]] = {}
            for (_, key), sub in self.substreams.items():
                k = keys.setdefault(
                    key,
                    {
                        "events_in": 0,
                        "dropped_by_reason": dict.fromkeys(DROP_REASONS[1:], 0),
                        "adjusted_by_reason": dict.fromkeys(ADJUST_REASONS[1:], 0),
                        "watermark": None,
                    },
                )
                k["events_in"] += sub.events_in
                for reason, n in sub.dropped.items():
                    k["dropped_by_reason"][reason] += n
                for reason, n in sub.adjusted.items():
                    k["adjusted_by_reason"][reason] += n
                # A key seen in several partitions: the smallest of its watermarks there.
                w = self._watermark(sub)
                if w is not None:
                    k["watermark"] = w if k["watermark"] is None else min(k["watermark"], w)
            out["keys"] = keys
        return out
