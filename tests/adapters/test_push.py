"""Push-style adapters as a StreamInsight user ports them: start/resume, enqueue returning FULL
under back-pressure, ready(), stopping, stopped(); the pull source the engine reads them through;
the errors a port runs into. One query run on Spark; everything else drives the source directly
(its ``read`` is an ordinary generator)."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ctistream.adapters import (
    AdapterState,
    ArrivalStamp,
    EnqueueResult,
    ItemKind,
    PushAdapterError,
    PushInputAdapter,
    PushInputAdapterFactory,
    SourceItem,
)
from ctistream.adapters.memory import MemoryOutputConfig, MemoryOutputFactory
from ctistream.bindings import Stream
from ctistream.engine import TICK, EventShape, QueryBuildError, cti, interval, point
from pydantic import BaseModel, ConfigDict
from pyspark.sql import functions as F

# -- a user's port: events from a list, a CTI where the list says so --------------------------


class ListConfig(BaseModel):
    """Rows ``("event", t, payload)`` or ``("cti", t, None)``; ``trace`` is a file the adapter
    appends what happened to (it runs on a Spark executor: a file is how a test sees it)."""

    model_config = ConfigDict(frozen=True)

    rows: tuple[tuple[str, int, dict[str, Any] | None], ...]
    trace: str


class ListAdapter(PushInputAdapter):
    def __init__(self, config: ListConfig) -> None:
        self.rows, self.next, self.trace = config.rows, 0, Path(config.trace)

    def log(self, line: str) -> None:
        with self.trace.open("a") as f:
            f.write(line + "\n")

    def start(self) -> None:
        self.log("start")
        self.produce()

    def resume(self) -> None:
        self.log("resume stopping" if self.stopping else "resume")
        self.produce()

    def produce(self) -> None:
        while self.next < len(self.rows):
            if self.stopping:
                break
            kind, t, payload = self.rows[self.next]
            result = self.enqueue(point(t, payload)) if kind == "event" else self.enqueue_cti(t)
            if result is EnqueueResult.FULL:
                self.log(f"full at {self.next}")
                self.ready()
                return
            self.next += 1
        self.log("stopped")
        self.stopped()

    def close(self) -> None:
        self.log("close")


class ListFactory(PushInputAdapterFactory[ListConfig]):
    buffer_capacity = 2
    made: ClassVar[list[ListAdapter]] = []  # in-process only (direct reads)

    def create_adapter(self, config: ListConfig, shape: EventShape) -> ListAdapter:
        adapter = ListAdapter(config)
        self.made.append(adapter)
        return adapter

    def payload_schema(self, config: ListConfig, shape: EventShape) -> str:
        return "id bigint, v double"


def _rows(*ts: int) -> tuple:
    return tuple(("event", t, {"id": t, "v": t / 10}) for t in ts)


def _trace(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _source(factory, config, name="nums", shape=EventShape.POINT):
    source = factory.create(config, shape)
    source.bound_as(name)
    return source


# -- back-pressure, straight on the pull source -----------------------------------------------


def test_full_at_capacity_then_resume_only_after_the_buffer_is_drained(tmp_path):
    trace = tmp_path / "trace"
    config = ListConfig(rows=_rows(10, 20, 30, 40, 50), trace=str(trace))
    source = _source(ListFactory(), config)
    assert source.partitions() == ["0"]
    assert source.payload_schema() == "id bigint, v double"
    items = source.read("0", 0)

    first = next(items)  # start(): 2 taken, the 3rd gets FULL -> ready() and return
    adapter = ListFactory.made[-1]
    assert _trace(trace) == ["start", "full at 2"]
    assert adapter.adapter_state is AdapterState.SUSPENDED
    second = next(items)  # the buffer's second item: now drained, but not resumed yet
    assert _trace(trace) == ["start", "full at 2"]
    third = next(items)  # drained and ready(): resume(), 2 more taken, FULL again
    assert _trace(trace) == ["start", "full at 2", "resume", "full at 4"]
    rest = list(items)
    log = ["start", "full at 2", "resume", "full at 4", "resume", "stopped", "close"]
    assert _trace(trace) == log
    assert adapter.adapter_state is AdapterState.STOPPED

    got = [first, second, third, *rest]
    # Offsets and (SEQUENCE) arrivals are the enqueue sequence numbers; stopped() ends the input.
    assert got == [
        SourceItem(ItemKind.EVENT, i, i, point(t, {"id": t, "v": t / 10}))
        for i, t in enumerate((10, 20, 30, 40, 50))
    ] + [SourceItem(ItemKind.END, 5, 5)]


def test_reading_from_an_offset_replays_the_adapter_from_the_start_and_skips(tmp_path):
    config = ListConfig(
        rows=(*_rows(10, 20), ("cti", 25, None), *_rows(30)), trace=str(tmp_path / "t")
    )
    got = list(_source(ListFactory(), config).read("0", 2))
    assert got == [
        SourceItem(ItemKind.CTI, 2, 2, cti(25)),
        SourceItem(ItemKind.EVENT, 3, 3, point(30, {"id": 30, "v": 3.0})),
        SourceItem(ItemKind.END, 4, 4),
    ]


def test_closing_the_read_early_stops_the_adapter_as_streaminsight_does(tmp_path):
    trace = tmp_path / "trace"
    config = ListConfig(rows=_rows(10, 20, 30, 40, 50), trace=str(trace))
    items = _source(ListFactory(), config).read("0", 0)
    next(items)
    adapter = ListFactory.made[-1]
    items.close()  # the engine stops reading: the suspended adapter is resumed in STOPPING
    assert _trace(trace) == ["start", "full at 2", "resume stopping", "stopped", "close"]
    assert adapter.adapter_state is AdapterState.STOPPED


class ThreadedAdapter(PushInputAdapter):
    """The other common StreamInsight shape: start()/resume() hand the work to a thread."""

    def __init__(self, n: int) -> None:
        self.n, self.next, self.fulls, self.threads = n, 0, 0, 0

    def start(self) -> None:
        self._spawn()

    def resume(self) -> None:
        self._spawn()

    def _spawn(self) -> None:
        self.threads += 1
        threading.Thread(target=self._produce, daemon=True).start()

    def _produce(self) -> None:
        while self.next < self.n and not self.stopping:
            if self.enqueue(point(self.next, {"i": self.next})) is EnqueueResult.FULL:
                self.fulls += 1
                self.ready()
                return
            self.next += 1
        self.stopped()


class ThreadedFactory(PushInputAdapterFactory[int]):
    buffer_capacity = 4
    stall_timeout = 10.0
    made: ClassVar[list[ThreadedAdapter]] = []

    def create_adapter(self, config: int, shape: EventShape) -> ThreadedAdapter:
        self.made.append(ThreadedAdapter(config))
        return self.made[-1]


def test_an_adapter_producing_on_its_own_threads_is_drained_in_enqueue_order():
    got = list(_source(ThreadedFactory(), 50).read("0", 0))
    adapter = ThreadedFactory.made[-1]
    assert [i.event for i in got[:-1]] == [point(i, {"i": i}) for i in range(50)]
    assert [i.offset for i in got] == list(range(51))
    assert got[-1].kind is ItemKind.END
    # Every FULL made the thread call ready() and end; each resume() started the next one.
    assert adapter.fulls >= 1 and adapter.threads == adapter.fulls + 1


class Stamped(ThreadedAdapter):
    arrival = ArrivalStamp.ENQUEUE_TIME


class StampedFactory(ThreadedFactory):
    def create_adapter(self, config: int, shape: EventShape) -> Stamped:
        return Stamped(config)


def test_enqueue_time_arrival_stamps_are_wall_clock_ticks_that_never_decrease():
    before = time.time_ns() // 1000
    got = list(_source(StampedFactory(), 20).read("0", 0))
    after = time.time_ns() // 1000
    arrivals = [i.arrival for i in got]
    assert arrivals == sorted(arrivals) and before <= arrivals[0] and arrivals[-1] <= after
    assert [i.offset for i in got] == list(range(21))


# -- a query over a push adapter --------------------------------------------------------------


# arrival stamps are enqueue sequence numbers; the list's 10 items end with its END at 10
@pytest.mark.parametrize("epochs", [1, 3, [3, 6]])
def test_a_query_over_a_ported_push_adapter(app, tmp_path, epochs):
    trace = tmp_path / "trace"
    rows = (*_rows(10, 20, 30), ("cti", 35, None), *_rows(40, 50, 60, 70), ("cti", 100, None))
    stream = Stream.create(
        "nums", ListFactory(), ListConfig(rows=rows, trace=str(trace)), EventShape.POINT
    )
    windows = stream.tumbling_window(TICK * 30).aggregate(n=F.count("*"), total=F.sum("v"))
    sink = f"push-{epochs}"
    query = windows.to_query(
        app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
    )
    query.run(epochs)
    # [0,30): 10, 20 -> 1.0 + 2.0; complete at CTI 35, which becomes 30 (the open window's start).
    # [30,60): 30, 40, 50 -> 12.0 and [60,90): 60, 70 -> 13.0; complete at CTI 100 -> 90.
    assert MemoryOutputFactory.collected(sink) == [
        interval(0, 30, {"n": 2, "total": 3.0}),
        cti(30),
        interval(30, 60, {"n": 3, "total": 12.0}),
        interval(60, 90, {"n": 2, "total": 13.0}),
        cti(90),
    ]
    # 9 items through a buffer of 2: back-pressure really happened on the executor. A push
    # source cannot seek, so however the run is cut the adapter runs once (not once per epoch).
    lines = _trace(trace)
    assert lines.count("start") == 1
    assert lines[0] == "start" and lines[-2:] == ["stopped", "close"]
    assert lines.count("resume") == 4 and sum(x.startswith("full at") for x in lines) == 4
    assert query.metrics()["nums"]["ctis_explicit"] == 2


class NoSchemaFactory(PushInputAdapterFactory[int]):
    def create_adapter(self, config: int, shape: EventShape) -> ThreadedAdapter:
        return ThreadedAdapter(config)


def test_a_push_input_without_a_schema_anywhere_fails_when_the_query_is_built(app):
    stream = Stream.create("n", NoSchemaFactory(), 3, EventShape.POINT)
    with pytest.raises(
        QueryBuildError, match=r"'n'.*declares no payload schema.*Fix: pass schema="
    ):
        stream.to_query(
            app, "noschema", MemoryOutputFactory(), MemoryOutputConfig(name="x"), EventShape.POINT
        )


class EndlessFactory(ThreadedFactory):
    bounded: ClassVar[bool] = False  # a live feed: the adapter never calls stopped() itself


def test_a_push_input_that_does_not_end_fails_when_the_query_is_built(app):
    # The engine reads a source without offsets (a push source) to its end: one that never
    # ends would keep every epoch, run() and start() alike, from completing
    stream = Stream.create("live", EndlessFactory(), 3, EventShape.POINT)
    with pytest.raises(QueryBuildError) as got:
        stream.to_query(
            app, "endless", MemoryOutputFactory(), MemoryOutputConfig(name="x"), EventShape.POINT
        )
    message = str(got.value)
    assert message.startswith("input 'live': PushInputSource does not end (bounded is False)")
    assert "Fix: put the feed behind a broker" in message


# -- errors a port runs into ------------------------------------------------------------------


class Scripted(PushInputAdapter):
    """start() runs the given function with the adapter."""

    def __init__(self, body) -> None:
        self.body = body

    def start(self) -> None:
        self.body(self)

    def resume(self) -> None:  # pragma: no cover - never suspended
        raise AssertionError("not resumed")


class ScriptedFactory(PushInputAdapterFactory[Any]):
    stall_timeout = 0.2

    def create_adapter(self, config: Any, shape: EventShape) -> Scripted:
        return Scripted(config)


def _read(body, shape=EventShape.POINT) -> list[SourceItem]:
    return list(_source(ScriptedFactory(), body, "src", shape).read("0", 0))


def test_enqueue_after_stopped_is_refused():
    def body(a):
        assert a.enqueue(point(1, {"v": 1})) is EnqueueResult.SUCCESS
        a.stopped()
        a.enqueue(point(2, {"v": 2}))

    with pytest.raises(
        PushAdapterError,
        match=r"Scripted of input 'src': enqueue\(point\(1970-01-01T00:00:00.000002\+00:00, "
        r".*\) after stopped\(\).*Fix:",
    ):
        _read(body)


def test_naive_datetimes_are_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"'src': enqueue_cti\(datetime.*naive.*Fix: attach a zone"):
        _read(lambda a: a.enqueue_cti(datetime(2024, 1, 1)))
    with pytest.raises(TypeError, match=r"payload column 'at' .* naive datetime.*Fix: attach"):
        _read(lambda a: a.enqueue(point(1, {"at": datetime(2024, 1, 1)})))
    # Event times go through the engine's constructors, which refuse naive datetimes too.
    with pytest.raises(TypeError, match="point time must be a timezone-aware datetime"):
        point(datetime(2024, 1, 1), {})
    aware = datetime(2024, 1, 1, tzinfo=UTC)
    got = _read(lambda a: (a.enqueue(point(aware, {"at": aware})), a.stopped()))
    assert got[0].event == point(aware, {"at": aware})


def test_an_event_of_another_shape_is_refused():
    shown = r"interval\(1970-01-01T00:00:00.000001\+00:00, 1970-01-01T00:00:00.000005\+00:00"
    with pytest.raises(ValueError, match=rf"bound as POINT but enqueue got {shown}"):
        _read(lambda a: a.enqueue(interval(1, 5, {"v": 1})))


def test_an_adapter_that_neither_signals_ready_nor_stopped_fails_instead_of_hanging():
    with pytest.raises(PushAdapterError, match=r"neither ready\(\) nor stopped\(\).*0.2 s.*Fix"):
        _read(lambda a: a.enqueue(point(1, {"v": 1})))


def test_an_error_in_an_adapter_thread_fails_the_read_instead_of_hanging():
    def body(a):
        def produce():
            # The thread ends on the error without a word; the engine raises it all the same.
            with contextlib.suppress(TypeError):
                a.enqueue(point(1, {"at": datetime(2024, 1, 1)}))

        threading.Thread(target=produce).start()

    with pytest.raises(TypeError, match="naive datetime"):
        _read(body)


def test_enqueue_before_the_engine_started_the_adapter():
    adapter = Scripted(None)
    assert adapter.adapter_state is AdapterState.CREATED and not adapter.stopping
    with pytest.raises(PushAdapterError, match=r"enqueue\(\) was called before the engine"):
        adapter.enqueue(point(1, {}))
