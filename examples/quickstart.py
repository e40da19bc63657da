"""Quickstart: an adapter factory that declares its CTI settings, a query bound in code, and a slow
reference stream that borrows the CTIs of a fast data stream. Runs on local Spark with in-memory
adapters and prints what each query delivers: events and CTIs, in order.

    python examples/quickstart.py
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    edge_start,
    point,
)
from ctistream.engine.temporal import format_ticks
from pyspark.sql import functions as F

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class SensorInputFactory(MemoryInputFactory):
    """A factory that knows its source: readings are at most 2 s out of order, so it asks for a
    CTI after every 3 readings, 2 s behind the latest one, dropping what comes later still."""

    def declare_advance_time_properties(
        self, config: MemoryInputConfig, shape: EventShape
    ) -> AdapterAdvanceTimeSettings:
        return AdapterAdvanceTimeSettings(
            AdvanceTimeGenerationSettings(3, timedelta(seconds=2), True), AdvanceTimePolicy.DROP
        )


def script() -> EventScript:
    s = EventScript()
    s.insert("limits", edge_start(at(0), {"sensor": 1, "value": 50.0}))
    readings = [
        (1, 1, 42.0),
        (2, 2, 57.5),
        (1.5, 1, 61.0),
        (4, 2, 49.0),
        (3, 1, 70.5),
        (6, 2, 66.0),
        (0.5, 1, 99.0),
        (7, 1, 51.0),
        (9, 2, 58.0),
    ]  # (time, sensor, value)
    for t, sensor, value in readings:
        s.insert("sensors", point(at(t), {"sensor": sensor, "value": value}))
    s.insert("limits", edge_start(at(5), {"sensor": 2, "value": 60.0}))  # a late update
    return s


def show(title: str, sink: str) -> None:
    print(f"\n== {title}")
    for e in MemoryOutputFactory.collected(sink):
        if e.is_cti:
            print(f"   CTI   {format_ticks(e.start)}")
        else:
            print(f"   event {format_ticks(e.start)}  {dict(e.payload)}")


def main() -> None:
    app = Application("quickstart")
    events = script()

    # 1. Bind a query in code: the factory's own settings apply; filter and project.
    sensors = Stream.create(
        "sensors", SensorInputFactory(), MemoryInputConfig(script=events), EventShape.POINT
    )
    hot = sensors.where(F.col("value") > 55).select(
        "sensor", (F.col("value") * 9 / 5 + 32).alias("fahrenheit")
    )
    q1 = hot.to_query(
        app, "hot", MemoryOutputFactory(), MemoryOutputConfig(name="hot"), EventShape.POINT
    )
    q1.run(epochs=3)
    show("readings above 55 (the one at 12:00:00.5 came too late and was dropped)", "hot")
    print("   metrics:", q1.metrics()["sensors"])

    # 2. A slow reference stream imports the CTIs of the fast one, so the union keeps pace.
    data = Stream.create(
        "sensors", SensorInputFactory(), MemoryInputConfig(script=events), EventShape.POINT
    )
    limits = Stream.create(
        "limits",
        MemoryInputFactory(),
        MemoryInputConfig(script=events),
        EventShape.EDGE,
        AdvanceTimeSettings(None, AdvanceTimeImportSettings("sensors"), AdvanceTimePolicy.ADJUST),
    )
    q2 = data.union(limits).to_query(
        app, "synced", MemoryOutputFactory(), MemoryOutputConfig(name="synced"), EventShape.POINT
    )
    q2.run()
    show("readings and limits, the limits stream following the sensors' CTIs", "synced")
    print("   metrics:", q2.metrics()["limits"])


if __name__ == "__main__":
    main()
