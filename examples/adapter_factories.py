"""Writing your own adapters by subclassing the factories, as in StreamInsight.

Three adapters feed and drain one query:

* a **pull** input (the engine's native model): a meter log split into shards; the adapter names
  its partitions and reads each from an offset, on the Spark executors. Its factory declares the
  CTI settings, as StreamInsight's ``DeclareAdvanceTimeProperties`` does;
* a **push** input (StreamInsight's model, for ported adapters): readings typed in by hand,
  enqueued until the engine's buffer is FULL, then resumed;
* an **output** adapter that prints what each epoch commits.

    python examples/adapter_factories.py
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from ctistream.adapters import (
    EnqueueResult,
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    PushInputAdapter,
    PushInputAdapterFactory,
    SourceItem,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    Event,
    EventShape,
    MalformedRecordError,
    point,
)
from ctistream.engine.temporal import format_ticks
from pydantic import BaseModel, ConfigDict
from pyspark.sql import functions as F

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


# -- a pull adapter: shards of "seconds,meter,kwh" lines --------------------------------------
class MeterLogConfig(BaseModel):
    model_config = ConfigDict(frozen=True)
    shards: dict[str, tuple[str, ...]]


class MeterLogAdapter(InputAdapter):
    def __init__(self, config: MeterLogConfig) -> None:
        self.config = config  # configuration only: it is pickled to the executors

    def partitions(self) -> Sequence[str]:
        return sorted(self.config.shards)

    def payload_schema(self) -> str:
        return "meter bigint, kwh double"

    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        lines = self.config.shards[partition]
        for offset in range(start_offset, len(lines)):
            try:
                seconds, meter, kwh = lines[offset].split(",")
                event = point(
                    T0 + timedelta(seconds=int(seconds)), {"meter": int(meter), "kwh": float(kwh)}
                )
            except ValueError:
                raise MalformedRecordError(
                    f"shard {partition!r}, offset {offset}: expected 'seconds,meter,kwh'; got "
                    f"{lines[offset]!r}. Fix: correct the line"
                ) from None
            # Arrival: the line number, so the shards interleave line by line.
            yield SourceItem(ItemKind.EVENT, offset, offset, event)
        yield SourceItem(ItemKind.END, len(lines), len(lines))


class MeterLogFactory(InputAdapterFactory[MeterLogConfig]):
    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset({EventShape.POINT})

    def create(self, config: MeterLogConfig, shape: EventShape) -> InputAdapter:
        return MeterLogAdapter(config)

    def declare_advance_time_properties(
        self, config: MeterLogConfig, shape: EventShape
    ) -> AdapterAdvanceTimeSettings:
        # A CTI after every event, one second behind it; later readings are dropped.
        return AdapterAdvanceTimeSettings(
            AdvanceTimeGenerationSettings(1, timedelta(seconds=1), True), AdvanceTimePolicy.DROP
        )


# -- a push adapter: readings typed in by hand -------------------------------------------------
class ManualConfig(BaseModel):
    model_config = ConfigDict(frozen=True)
    readings: tuple[tuple[int, int, float], ...]  # (seconds, meter, kwh)


class ManualAdapter(PushInputAdapter):
    def __init__(self, readings: tuple[tuple[int, int, float], ...]) -> None:
        self.readings, self.next = readings, 0

    def start(self) -> None:
        self.produce()

    def resume(self) -> None:
        self.produce()

    def produce(self) -> None:
        while self.next < len(self.readings) and not self.stopping:
            seconds, meter, kwh = self.readings[self.next]
            event = point(T0 + timedelta(seconds=seconds), {"meter": meter, "kwh": kwh})
            if self.enqueue(event) is EnqueueResult.FULL:
                self.ready()  # the engine calls resume() once it has drained its buffer
                return
            self.next += 1
        self.stopped()


class ManualFactory(PushInputAdapterFactory[ManualConfig]):
    buffer_capacity: ClassVar[int] = 2  # tiny, so FULL and resume() really happen

    def create_adapter(self, config: ManualConfig, shape: EventShape) -> PushInputAdapter:
        return ManualAdapter(config.readings)

    def payload_schema(self, config: ManualConfig, shape: EventShape) -> str:
        return "meter bigint, kwh double"


# -- an output adapter that prints each epoch --------------------------------------------------
class PrintConfig(BaseModel):
    model_config = ConfigDict(frozen=True)
    title: str


class PrintAdapter(OutputAdapter):
    delivered: ClassVar[dict[str, list[Event]]] = {}

    def __init__(self, title: str) -> None:
        self.title = title
        self.delivered[title] = []

    def deliver(self, epoch: int, items: Sequence[Event], first: int) -> None:
        for e in items:
            self.delivered[self.title].append(e)
            if e.is_cti:
                print(f"[{self.title} epoch {epoch}] CTI {format_ticks(e.start)}")
            else:
                print(f"[{self.title} epoch {epoch}] {format_ticks(e.start)}  {e.payload}")


class PrintFactory(OutputAdapterFactory[PrintConfig]):
    def create(self, config: PrintConfig, shape: EventShape) -> OutputAdapter:
        return PrintAdapter(config.title)


def run(app: Application) -> list[Event]:
    log = MeterLogConfig(
        shards={
            "a": ("1,1,0.5", "4,1,0.7", "12,1,0.2"),
            "b": ("2,2,1.5", "11,2,1.0", "3,2,9.9"),  # 3 s arrives after the CTI at 10 s: dropped
        }
    )
    meters = Stream.create("meters", MeterLogFactory(), log, EventShape.POINT)
    manual = Stream.create(
        "manual",
        ManualFactory(),
        ManualConfig(readings=((5, 3, 2.0), (6, 3, 1.0), (15, 3, 4.0))),
        EventShape.POINT,
        AdvanceTimeSettings.increasing_start_time(),
    )
    totals = (
        meters.union(manual)
        .tumbling_window(timedelta(seconds=10))
        .group_by("meter")
        # a sum of doubles is exact, rounded once: 0.5 + 0.7 gives 1.2, in any epochs
        .aggregate(kwh=F.sum("kwh"), n=F.count("*"))
    )
    query = totals.to_query(
        app, "kwh-per-10s", PrintFactory(), PrintConfig(title="kwh"), EventShape.POINT
    )
    query.run(epochs=2)
    print(query.metrics())
    return PrintAdapter.delivered["kwh"]


if __name__ == "__main__":
    run(Application("adapter-factories"))
