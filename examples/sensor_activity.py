"""A StreamInsight user's sensor queries: the 3 busiest sensors per minute (TopK), each sensor's
peak per minute (a user-defined operator), its sessions of activity, and each reading clipped at
the sensor's next reading (ClipEventDuration).

* **Busiest sensors**: a tumbling window of 1 minute counts the readings per sensor (one result
  per sensor, lifetime the minute); a second tumbling window of 1 minute over those counts ranks
  them: ``top_k(3, F.col("readings").desc())`` keeps the 3 largest counts per minute, each with
  its ``rank`` (ties broken by start, end, then the payload: the lower sensor id first).
* **Peak per sensor**: ``apply(fn, schema)`` calls a pandas function once per complete minute
  and sensor, with the minute's readings (their payload, then ``start`` and ``end`` as UTC
  datetimes): it returns the peak value and the second of the minute it happened at.
* **Sessions**: ``session_window("20 seconds")`` per sensor: a reading joins the sensor's open
  session when it starts before the session's reach (its latest end + 20 s), else it opens a
  new one; one result per session (its readings and peak), lifetime ``[first reading, reach)``,
  once the CTI has passed its end. The output CTI waits at the start of the earliest session
  still open.
* **Clipped readings**: each reading is valid for at most a minute
  (``alter_event_duration``) and until the same sensor's next reading
  (``clip_event_duration(readings, on="sensor")``): the "value until the next value" lifetimes
  that time-weighted averages and snapshots are built on.

The windows release a minute once the input's CTI has passed its end (the output CTI is pulled
back to the start of the earliest minute still open), and every result is final.

    python examples/sensor_activity.py
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd  # type: ignore[import-untyped]
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    Event,
    EventShape,
    point,
)
from ctistream.engine.temporal import format_ticks
from pyspark.sql import functions as F

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)

#: (second, sensor, value): five sensors over two minutes
READINGS = [
    (2, 1, 20.5), (5, 2, 31.0), (9, 3, 18.0), (14, 1, 21.0), (20, 2, 33.5), (25, 4, 40.0),
    (31, 1, 22.5), (38, 3, 19.5), (44, 2, 30.0), (50, 5, 12.0), (55, 1, 24.0), (58, 3, 17.5),
    (63, 4, 41.0), (70, 4, 43.5), (75, 5, 11.0), (81, 2, 29.0), (90, 4, 39.0), (99, 5, 13.5),
    (104, 5, 12.5), (110, 1, 25.0),
]  # fmt: skip


def script() -> EventScript:
    s = EventScript()
    for second, sensor, value in READINGS:
        s.insert("readings", point(T0 + timedelta(seconds=second), {"sensor": sensor, "v": value}))
    return s


def peak(readings: pd.DataFrame) -> pd.DataFrame:
    """One sensor's readings in one minute -> its peak value and the second it came at."""
    top = readings.loc[readings["v"].idxmax()]
    return pd.DataFrame({"peak": [float(top["v"])], "at_second": [int(top["start"].second)]})


def run(app: Application) -> dict[str, list[Event]]:
    """The four queries over the same readings; what each delivers, events and CTIs, in order."""
    # a CTI after every reading, 5 s behind it: readings at most 5 s out of order
    settings = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1, timedelta(seconds=5), True), None, AdvanceTimePolicy.DROP
    )
    readings = Stream.create(
        "readings",
        MemoryInputFactory(),
        MemoryInputConfig(script=script(), schema="sensor int, v double"),
        EventShape.POINT,
        settings,
    )
    counts = (
        readings.tumbling_window("1 minute").group_by("sensor").aggregate(readings=F.count("*"))
    )
    busiest = counts.tumbling_window("1 minute").top_k(3, F.col("readings").desc())
    peaks = (
        readings.tumbling_window("1 minute")
        .group_by("sensor")
        .apply(peak, "peak double, at_second int")
    )
    sessions = (
        readings.session_window("20 seconds")
        .group_by("sensor")
        .aggregate(readings=F.count("*"), peak=F.max("v"))
    )
    clipped = readings.alter_event_duration("1 minute").clip_event_duration(readings, on="sensor")
    out = {}
    queries = (("busiest", busiest), ("peaks", peaks), ("sessions", sessions), ("clipped", clipped))
    for name, stream in queries:
        sink = f"sensor-activity-{name}"
        query = stream.to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
        )
        print(f"\n== {name}\n{stream.explain()}")
        query.run()
        out[name] = MemoryOutputFactory.collected(sink)
        for e in out[name]:
            if e.is_cti:
                print(f"   CTI   {format_ticks(e.start)}")
            else:
                print(f"   event {format_ticks(e.start)}  {dict(e.payload)}")
    return out


if __name__ == "__main__":
    run(Application("sensor-activity"))
