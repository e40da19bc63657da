"""The illustrated example of Azure Stream Analytics' time handling documentation ("Illustrated
example of watermarks"), event by event, with what each of its three illustrations does to every
event.

Tolerances (the seed): early arrival window 5 minutes, late arrival window 5 minutes, reorder
(out-of-order) window 2 minutes; action ADJUST (the seed adjusts, never drops, late and
out-of-order events). Times are minutes after 12:00.

Every expected value below is worked out by hand from the seed's rules, and the ones the seed
states outright are marked ``# seed:`` with its words:

* "the watermark is the largest event time we have seen so far minus the out-of-order tolerance";
* "events ... 5 minutes greater than arrival time" are dropped as early;
* late: "if the event time is outside of the tolerance window ... adjust the event's time to be
  within the tolerance" (to arrival - 5);
* "events with event time lower than the watermark ... adjust the event's time to the watermark".

One statement of the seed is not reproduced by the per-event rule: for the fourth event (12:08,
arriving 12:13) the first illustration says "the watermark progresses on each event". By the rule
above it stays at 12:06 (the largest event time seen is still 12:08, the early 12:17 does not
count); the seed's picture also advances the watermark while no event arrives, to "the current
estimated arrival time minus the late arrival tolerance" (12:13 - 5 = 12:08). Those time-driven
watermarks need the streaming runtime (issue 5) and are not part of this example's tests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ctistream.engine import EventOrderingSettings, OrderingAction

BASE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def at(minute: int) -> datetime:
    return BASE + timedelta(minutes=minute)


def ticks(minute: int) -> int:
    return int((at(minute) - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))


# (event time, arrival time, device): the seed's table, in arrival order.
EVENTS = [
    (7, 7, "device1"),
    (8, 8, "device2"),
    (17, 11, "device1"),
    (8, 13, "device3"),
    (19, 16, "device1"),
    (12, 17, "device3"),
    (17, 18, "device2"),
    (20, 19, "device2"),
    (16, 21, "device3"),
    (23, 22, "device2"),
    (22, 24, "device2"),
    (21, 27, "device3"),
]

SCHEMA = "device_id string, event_time timestamp"


def payload(i: int) -> dict:
    event_time, _, device = EVENTS[i]
    return {"device_id": device, "event_time": at(event_time)}


def settings(early: bool = True, over: str | None = None, flush: bool = False):
    return EventOrderingSettings(
        event_time="event_time",
        out_of_order_tolerance=timedelta(minutes=2),
        late_arrival_tolerance=timedelta(minutes=5),
        early_arrival_window=timedelta(minutes=5) if early else None,
        action=OrderingAction.ADJUST,
        over=over,
        flush_on_stop=flush,
    )


# Per event: (action, application time it leaves with or None, watermark after it), the watermark
# being that of the event's substream (the input's, or with substreams the device's).

# 1. Early arrival policy on (5 minutes).
WITH_EARLY = [
    ("ok", 7, 5),  # seed: "processed without adjustments. The watermark progresses"
    ("ok", 8, 6),  # seed: same
    ("drop:early", None, 6),  # seed: "arrived 6 minutes early ... dropped"; "doesn't progress"
    ("ok", 8, 6),  # seed: "processed without adjustment" (late by exactly 5: not more than 5)
    ("ok", 19, 17),  # seed: "processed without adjustment. The watermark progresses"
    ("adjust:out-of-order", 17, 17),  # seed: "adjusted to the water mark level (12:17)"
    ("ok", 17, 17),  # 17 is not below the watermark 17
    ("ok", 20, 18),
    ("adjust:out-of-order", 18, 18),  # 16 < 18
    ("ok", 23, 21),
    ("ok", 22, 21),  # 22 >= 21
    ("adjust:late", 22, 21),  # seed: "adjusted (12:22), which is above the watermark (12:21)"
]

# 2. No early arrival policy.
WITHOUT_EARLY = [
    ("ok", 7, 5),
    ("ok", 8, 6),
    ("ok", 17, 15),  # seed: "not dropped ... the watermark is raised to 12:15"
    ("adjust:out-of-order", 15, 15),  # seed: "adjusted forward 7 minutes (12:08 to 12:15)"
    ("ok", 19, 17),
    ("adjust:out-of-order", 17, 17),
    ("ok", 17, 17),
    ("ok", 20, 18),
    ("adjust:out-of-order", 18, 18),
    ("ok", 23, 21),
    ("ok", 22, 21),
    ("adjust:late", 22, 21),
]

# 3. Substreams OVER device_id, early arrival policy on: one watermark per device.
# seed: "Multiple watermarks are tracked, one per stream. There are fewer events with their times
# adjusted as a result" (here only the late twelfth event).
SUBSTREAMS = [
    ("ok", 7, 5),  # device1
    ("ok", 8, 6),  # device2
    ("drop:early", None, 5),  # device1: 6 minutes early
    ("ok", 8, 6),  # device3
    ("ok", 19, 17),  # device1
    ("ok", 12, 10),  # device3: 12 >= device3's watermark 6 (the input's was 17)
    ("ok", 17, 15),  # device2
    ("ok", 20, 18),  # device2
    ("ok", 16, 14),  # device3: 16 >= 10 (the input's watermark would be 18)
    ("ok", 23, 21),  # device2
    ("ok", 22, 21),  # device2
    ("adjust:late", 22, 19),  # device3: late by 6, to 12:22; 22 >= 19
]

# With substreams the input's CTI (the one every key obeys) is arrival - late tolerance, raised
# at each event whose arrival is later than every earlier one (docs/decisions.md).
SUBSTREAM_INPUT_CTI = [a - 5 for _, a, _ in EVENTS]
