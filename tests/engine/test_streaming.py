"""Started queries (semantics §4, §9): epochs over what the inputs hold, checkpoints, replay.

A started query must give what a bounded run gives over the same arrival sequence, however its
epochs fall, and a query restarted from its checkpoint directory must deliver every output item
exactly once. The Kafka tests use the real broker on 127.0.0.1 (tests/brokers/kafka.py).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventKind,
    EventOrderingSettings,
    EventShape,
    OrderingAction,
    cti,
    point,
)
from ctistream.engine.checkpoint import read_checked
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.temporal import MAX_TIME, to_ticks
from kafka import KafkaProducer
from pyspark.sql import functions as F

from tests.adapters.test_kafka import produce, read_back
from tests.harness import killed

S = 1_000_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_MS = int(T0.timestamp()) * 1000
SCHEMA = "id int, v double"
EVERY_3 = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(3, timedelta(0), True), policy=AdvanceTimePolicy.DROP
)


def _tag() -> str:
    return uuid.uuid4().hex[:6]


def _memory_query(app, name: str):
    script = EventScript().declare("events", "0")
    for i, s in enumerate([1, 2, 5, 4, 7, 9, 12, 11, 15]):
        script.insert("events", point(T0 + timedelta(seconds=s), {"id": i % 2, "v": float(i)}))
    stream = Stream.create(
        "events",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=SCHEMA),
        EventShape.POINT,
        EVERY_3,
    )
    out = stream.tumbling_window(timedelta(seconds=5)).group_by("id").aggregate(n=F.count("*"))
    return out.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )


def test_a_started_query_over_bounded_input_gives_what_run_gives(app, capsys, caplog):
    tag = _tag()
    with caplog.at_level(logging.INFO, logger="ctistream.runtime"):
        _memory_query(app, f"run-{tag}").run(epochs=2, progress=True)
    expected = MemoryOutputFactory.collected(f"run-{tag}")
    # one progress line and one structured log record per epoch
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith(f"[run-{tag}]")]
    assert [x.split(":")[0] for x in lines] == [f"[run-{tag}] epoch 1/2", f"[run-{tag}] epoch 2/2"]
    fields = [r.ctistream for r in caplog.records if hasattr(r, "ctistream")]
    assert [(f["query"], f["epoch"]) for f in fields] == [(f"run-{tag}", 0), (f"run-{tag}", 1)]
    assert sum(f["items"] for f in fields) == len(expected)

    q = _memory_query(app, f"started-{tag}")
    q.start(trigger=timedelta(milliseconds=100))  # epochs in a loop on a thread
    deadline = time.monotonic() + 120
    while q.metrics()["events"]["events_in"] < 9:  # readable while it runs
        assert q.exception() is None
        assert time.monotonic() < deadline, "the started query read nothing in 120 s"
        time.sleep(0.1)
    q.stop()  # flushes on stop
    got = MemoryOutputFactory.collected(f"started-{tag}")
    assert got == expected
    assert any(e.kind is EventKind.INSERT for e in got)
    assert got[-1].kind is EventKind.CTI
    with pytest.raises(RuntimeError, match="not started"):
        q.step()


def test_a_started_query_freezes_what_its_driver_holds_so_full_collections_stay_short(app):
    # the driver's full collections would otherwise walk every object PySpark, pandas, pyarrow
    # and the query hold (engine._spark.settle_driver)
    import gc

    keep = [[i] for i in range(30_000)]  # live, collected before the start  # noqa: F841
    assert len(gc.get_objects()) > 30_000
    q = _memory_query(app, f"frozen-{_tag()}")
    q.start(trigger=None)
    try:
        assert len(gc.get_objects()) < 5_000  # what a collection still walks
        q.step()  # and what one step leaves behind is not frozen again
        assert gc.get_freeze_count() > 30_000
        frozen = gc.get_freeze_count()
        q.step()
        # no freeze again (frozen objects that nothing refers to any more are still freed)
        assert gc.get_freeze_count() <= frozen
    finally:
        q.stop()


def _produce(bootstrap: str, topic: str, rows: list[tuple[int, int, int, float]]) -> None:
    """``(n, partition, id, seconds)``: a point at T0 + seconds, stamped T0 + n ms, so arrival
    order is the order of ``n`` across partitions and batches."""
    values = []
    for n, p, i, s in rows:
        ts = (T0 + timedelta(seconds=s)).isoformat()
        values.append((p, {"ts": ts, "et": ts, "id": i}, T0_MS + n, None))
    produce(bootstrap, topic, values)


def _kafka_query(app, name: str, bootstrap: str, source: str, sink: str, keyed: bool = False):
    """A tumbling window per id over a Kafka topic: CTIs every 3 events, or (``keyed``) the
    arrival-time policies with substreams per id, whose per-key CTIs close each id's windows."""
    config = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic=source, schema="id int, et timestamp", time_field="ts"
    )
    settings, ordering = EVERY_3, None
    if keyed:
        settings = None
        ordering = EventOrderingSettings(
            event_time="et", late_arrival_tolerance=timedelta(seconds=1), over="id"
        )
    stream = Stream.create(
        "events", KafkaInputFactory(), config, EventShape.POINT, settings, ordering=ordering
    )
    out = stream.tumbling_window(timedelta(seconds=4)).group_by("id").aggregate(n=F.count("*"))
    return out.to_query(
        app,
        name,
        KafkaOutputFactory(),
        KafkaOutputConfig(bootstrap_servers=bootstrap, topic=sink),
        EventShape.INTERVAL,
    )


_ROWS = [
    [(0, 1, 1.0), (1, 2, 2.0), (2, 1, 3.0), (0, 2, 2.5), (1, 1, 5.0)],
    [(2, 2, 6.0), (0, 1, 4.5), (1, 1, 9.0), (2, 2, 8.0)],
    [(0, 1, 10.0), (1, 2, 13.0), (2, 1, 12.0), (0, 2, 17.0)],
    [(1, 1, 18.0), (2, 2, 21.0)],
]
_n = iter(range(10**6))
BATCHES = [[(next(_n), *row) for row in batch] for batch in _ROWS]


def test_a_restarted_query_replays_from_its_checkpoint_and_delivers_exactly_once(
    app, kafka_broker, tmp_path, keyed=True
):
    """With substreams (per-key CTIs, several state frames per operator); the same replay
    without them is the crash test's (tests/engine/test_crash.py)."""
    b = kafka_broker.bootstrap
    source = kafka_broker.create_topic(partitions=3)
    once, sink = kafka_broker.create_topic(), kafka_broker.create_topic()
    tag = _tag()

    # The same input, read by a query that never stops half-way: one epoch, then the stop.
    for batch in BATCHES:
        _produce(b, source, batch)
    whole = _kafka_query(app, f"whole-{tag}", b, source, once, keyed)
    whole.start(trigger=None)
    whole.step()
    whole.stop()
    expected = read_back(b, once, EventShape.INTERVAL)
    assert sum(e.kind is EventKind.INSERT for e in expected) >= 5

    # Now a query that reads the topic as it grows and crashes twice.
    source2 = kafka_broker.create_topic(partitions=3)
    ckpt = tmp_path / "ckpt"
    q = _kafka_query(app, f"a-{tag}", b, source2, sink, keyed)
    q.start(trigger=None, checkpoint=ckpt, checkpoint_every=2)
    _produce(b, source2, BATCHES[0])
    q.step()  # epoch 0
    _produce(b, source2, BATCHES[1])
    q.step()  # epoch 1: state written after it
    _produce(b, source2, BATCHES[2])
    q.step()  # epoch 2: logged and delivered, state not written
    killed(q)
    q2 = _kafka_query(app, f"b-{tag}", b, source2, sink, keyed)
    q2.start(trigger=None, checkpoint=ckpt, checkpoint_every=2)  # state of 1, replays 2
    _produce(b, source2, BATCHES[3])
    q2.step()  # epoch 3
    killed(q2)  # the next start replays epoch 3 (no state after it) and stops
    q3 = _kafka_query(app, f"c-{tag}", b, source2, sink, keyed)
    q3.start(trigger=None, checkpoint=ckpt, checkpoint_every=2)
    q3.stop()
    got = read_back(b, sink, EventShape.INTERVAL)
    assert got == expected
    assert sorted((ckpt / "state").iterdir())  # snapshots were written


def _live_join(app, name: str, bootstrap: str, data: str, ref: str):
    every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    events = Stream.create(
        "data",
        KafkaInputFactory(),
        KafkaInputConfig(bootstrap_servers=bootstrap, topic=data, schema="id int", time_field="ts"),
        EventShape.POINT,
        every_event,
    )
    weights = Stream.create(
        "ref",
        KafkaInputFactory(),
        KafkaInputConfig(
            bootstrap_servers=bootstrap,
            topic=ref,
            schema="id int, w double",
            time_field="ts",
            end_field="te",
        ),
        EventShape.INTERVAL,
        every_event,
    )
    return events.join(weights, on="id").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )


def test_a_quiet_input_advances_by_time_driven_ctis_so_a_join_still_emits(
    app, kafka_broker, tmp_path
):
    b = kafka_broker.bootstrap
    now = datetime.now(UTC)
    ms = int(now.timestamp() * 1000)
    data, ref = kafka_broker.create_topic(), kafka_broker.create_topic()

    def send(topic: str, values: list[dict]) -> None:
        producer = KafkaProducer(bootstrap_servers=b)
        try:
            for n, v in enumerate(values):
                producer.send(topic, json.dumps(v).encode(), timestamp_ms=ms + n).get(timeout=10)
        finally:
            producer.close()

    iso = lambda s: (now + timedelta(seconds=s)).isoformat()  # noqa: E731
    # the reference: one weight for key 1 from an hour ago to an hour ahead, then silence
    send(ref, [{"ts": iso(-3600), "te": iso(3600), "id": 1, "w": 2.0}])
    # the data: key 1 five and four seconds ago
    send(data, [{"ts": iso(-5), "id": 1}, {"ts": iso(-4), "id": 1}])

    results = {}
    for idle in (None, timedelta(milliseconds=300)):
        name = f"quiet-{_tag()}"
        q = _live_join(app, name, b, data, ref)
        q.start(trigger=None, checkpoint=tmp_path / name, idle_timeout=idle)
        q.step()  # both inputs have news
        time.sleep(0.6)
        q.step()  # the reference is quiet now
        results[idle] = [
            e for e in MemoryOutputFactory.collected(name) if e.kind is EventKind.INSERT
        ]
        q.stop(flush=False)
        logged = json.loads(read_checked(tmp_path / name / "offsets" / "1.json"))
        # the time-driven CTI of the reference (input 1) is in the offset log, for replay
        assert ("1" in logged["ctis"]) is (idle is not None)
    # Without it the join's CTI stays at the reference's CTI (an hour ago): nothing is final.
    assert results[None] == []
    # With it, both inputs have been quiet for longer than 300 ms by the second epoch: their
    # CTIs follow the clock (delay 0), and both pairs are committed.
    pairs = results[timedelta(milliseconds=300)]
    assert [p.payload for p in pairs] == [{"id": 1, "right_id": 1, "w": 2.0}] * 2
    assert [p.start for p in pairs] == [to_ticks(now - timedelta(seconds=s)) for s in (5, 4)]


def test_a_quiet_partition_gets_time_driven_ctis_while_the_other_has_news(
    app, kafka_broker, tmp_path
):
    # Two partitions, a CTI after every event (delay 0). Partition 1 has one event (id 0),
    # 10 s ago, then nothing; partition 0 gets an event before every step (ids 1, 2, 3 at
    # -4 s, -3 s, -2 s). The input's CTI is the minimum over its partitions (§3.5): partition
    # 1's stays at -10 s, so without time-driven CTIs nothing is ever final (a point is
    # released by a CTI above its start). With them (§7), partition 1, quiet since the first
    # step, gets a CTI at the wall clock at the second, while partition 0 still has news: the
    # input's CTI is then partition 0's, -3 s (releasing ids 0 and 1), then -2 s (id 2).
    b = kafka_broker.bootstrap
    every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    released = {}
    for idle in (None, timedelta(milliseconds=300)):
        topic = kafka_broker.create_topic(partitions=2)
        now = datetime.now(UTC)
        ms = int(now.timestamp() * 1000)

        def send(partition: int, n: int, seconds: int, topic=topic, now=now, ms=ms) -> None:
            value = json.dumps({"ts": (now + timedelta(seconds=seconds)).isoformat(), "id": n})
            producer = KafkaProducer(bootstrap_servers=b)
            try:
                producer.send(topic, value.encode(), partition=partition, timestamp_ms=ms + n)
                producer.flush()
            finally:
                producer.close()

        name = f"quiet-part-{_tag()}"
        config = KafkaInputConfig(
            bootstrap_servers=b, topic=topic, schema="id int", time_field="ts"
        )
        stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every_event)
        out = MemoryOutputConfig(name=name)
        q = stream.to_query(app, name, MemoryOutputFactory(), out, EventShape.POINT)
        q.start(trigger=None, checkpoint=tmp_path / name, idle_timeout=idle)
        send(1, 0, -10)
        for n in (1, 2, 3):
            send(0, n, n - 5)
            q.step()
            time.sleep(0.4)
        collected = MemoryOutputFactory.collected(name)
        released[idle] = [e.payload["id"] for e in collected if e.kind is EventKind.INSERT]
        q.stop(flush=False)
        logged = json.loads(read_checked(tmp_path / name / "offsets" / "1.json"))
    assert released[None] == []
    assert released[timedelta(milliseconds=300)] == [0, 1, 2]
    # partition 1's CTI is in the second epoch's offset log (for replay), not partition 0's
    offsets = logged["ctis"]["0"][2]
    assert offsets[0] is None and offsets[1] is not None


def test_a_checkpoint_of_another_query_shape_is_refused_with_a_fix(app, tmp_path):
    tag = _tag()
    q = _memory_query(app, f"ck-{tag}")
    q.start(trigger=None, checkpoint=tmp_path / "ck", checkpoint_every=1)
    q.step()
    q.stop()
    # the same input, but a plan without the window: its state cannot be restored
    script = EventScript().declare("events", "0")
    other = Stream.create(
        "events",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=SCHEMA),
        EventShape.POINT,
        EVERY_3,
    ).to_query(
        app,
        f"other-{tag}",
        MemoryOutputFactory(),
        MemoryOutputConfig(name=f"other-{tag}"),
        EventShape.POINT,
    )
    with pytest.raises(QueryBuildError, match=r"another shape.*new checkpoint directory"):
        other.start(trigger=None, checkpoint=tmp_path / "ck")


def test_an_item_of_a_lagging_live_partition_is_taken_as_arriving_when_it_is_read(
    app, kafka_broker
):
    """Epochs are contiguous in arrival order (docs/decisions.md, "Started queries"): once an
    epoch has taken items stamped up to t, an item a partition delivers later with an older
    broker timestamp is stamped t, the arrival floor. Read at rest in one epoch, the same records
    keep their own stamps. The input takes arrival time as application time, so the output
    shows each event's stamp."""
    b = kafka_broker.bootstrap
    ordering = EventOrderingSettings(
        event_time=None,
        late_arrival_tolerance=timedelta(0),
        early_arrival_window=None,
        action=OrderingAction.DROP,
        flush_on_stop=True,
    )

    def query(topic: str, name: str):
        config = KafkaInputConfig(bootstrap_servers=b, topic=topic, schema="id int")
        stream = Stream.create(
            "arrivals", KafkaInputFactory(), config, EventShape.POINT, ordering=ordering
        )
        out = MemoryOutputConfig(name=name)
        return stream.to_query(app, name, MemoryOutputFactory(), out, EventShape.POINT)

    def starts(name: str) -> dict[int, int]:
        got = MemoryOutputFactory.collected(name)
        return {e.payload["id"]: e.start for e in got if e.kind is EventKind.INSERT}

    early, lagging = (0, {"id": 1}, T0_MS + 10_000, None), (1, {"id": 2}, T0_MS + 5_000, None)

    live = kafka_broker.create_topic(partitions=2)
    name = f"live-{_tag()}"
    q = query(live, name)
    q.start(trigger=None)
    q.step()  # nothing yet: the floor stays where it was
    produce(b, live, [early])
    q.step()  # takes partition 0's record, stamped T0 + 10 s
    produce(b, live, [lagging])  # partition 1 delivers a record stamped T0 + 5 s
    q.step()
    q.stop()
    assert starts(name) == {1: to_ticks(T0) + 10 * S, 2: to_ticks(T0) + 10 * S}

    at_rest = kafka_broker.create_topic(partitions=2)
    produce(b, at_rest, [early, lagging])
    name = f"rest-{_tag()}"
    q = query(at_rest, name)
    q.start(trigger=None)
    q.step()
    q.stop()
    assert starts(name) == {1: to_ticks(T0) + 10 * S, 2: to_ticks(T0) + 5 * S}


EVERY = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(0), True), policy=AdvanceTimePolicy.DROP
)


def _every_event_stream(bootstrap: str, topic: str) -> Stream:
    """Points at ``ts`` with their ``id``; a CTI at each event's start (generation every event,
    delay 0), +inf on stop."""
    config = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic=topic, schema="id int", time_field="ts"
    )
    return Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, EVERY)


def _every_event_query(app, bootstrap: str, topic: str, name: str):
    """:func:`_every_event_stream` to a memory output ``name``."""
    out = MemoryOutputConfig(name=name)
    stream = _every_event_stream(bootstrap, topic)
    return stream.to_query(app, name, MemoryOutputFactory(), out, EventShape.POINT)


def _five_points(stamp_ms) -> list[tuple[int, dict, int, None]]:
    """Five points, ids 0-4 at T0 + id s, in partition 0, record ``i`` stamped
    ``stamp_ms(i)``."""
    return [
        (0, {"ts": (T0 + timedelta(seconds=i)).isoformat(), "id": i}, stamp_ms(i), None)
        for i in range(5)
    ]


# The output of _every_event_query over _five_points, however they are cut into epochs: event i
# makes the CTI T0 + i s, which commits event i - 1 (start below it); the stop's flush (+inf)
# commits event 4. An output CTI is emitted when it rises, the first one (T0) with no event.
FIVE_POINTS_OUT = [
    x
    for i in range(5)
    for x in (
        [cti(T0)]
        if i == 0
        else [point(T0 + timedelta(seconds=i - 1), {"id": i - 1}), cti(T0 + timedelta(seconds=i))]
    )
] + [point(T0 + timedelta(seconds=4), {"id": 4}), cti(MAX_TIME)]


def test_a_capped_epoch_takes_every_record_of_the_stamp_it_reached_so_it_never_stalls(
    app, kafka_broker
):
    """max_offsets_per_epoch works a backlog off in steps (docs/decisions.md, "Started
    queries"); epochs take whole arrival stamps, the stamp a capped partition reached included,
    read past the cap when more records share it."""
    b = kafka_broker.bootstrap

    # One producer batch: all five records stamped T0 (one record timestamp). Cap 2: the capped
    # range (offsets 0-1) reaches stamp T0, so the epoch takes everything stamped T0: all five
    # (read past the cap). Before, it took what was stamped below T0 (nothing), every epoch.
    shared = kafka_broker.create_topic()
    produce(b, shared, _five_points(lambda i: T0_MS))
    name = f"shared-{_tag()}"
    q = _every_event_query(app, b, shared, name)
    q.start(trigger=None, max_offsets_per_epoch=2)
    q.step()
    assert q.metrics()["events"]["events_in"] == 5
    q.stop()
    assert MemoryOutputFactory.collected(name) == FIVE_POINTS_OUT

    # Stamps 1 ms apart, cap 1: each epoch reads one record and takes its stamp, so one event
    # per step: 3 after 3 steps. Before, the cut at the one record's own stamp took nothing.
    apart = kafka_broker.create_topic()
    produce(b, apart, _five_points(lambda i: T0_MS + i))
    name = f"apart-{_tag()}"
    q = _every_event_query(app, b, apart, name)
    q.start(trigger=None, max_offsets_per_epoch=1)
    for _ in range(3):
        q.step()
    assert q.metrics()["events"]["events_in"] == 3
    q.stop()  # reads the other two first (the next test), then flushes
    assert MemoryOutputFactory.collected(name) == FIVE_POINTS_OUT


def test_a_capped_query_reads_a_bounded_input_whole_before_it_caps(app, kafka_broker):
    """A bounded input (a script) is read to its end in one epoch: an epoch cut by a cap would
    leave its items stamped after the cut unread for good. So no epoch is capped before every
    bounded input was read."""
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    # ids 0-2 at T0 + id s, stamped 1 ms apart; the script's ids 10 and 11 arrive an hour later
    produce(b, topic, _five_points(lambda i: T0_MS + i)[:3])
    script = EventScript()
    for n in (10, 11):
        arrival = T0 + timedelta(hours=1, microseconds=n)
        script.insert("ref", point(T0 + timedelta(seconds=n), {"id": n}), arrival=arrival)
    ref = Stream.create(
        "ref",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema="id int"),
        EventShape.POINT,
        EVERY,
    )
    name = f"bounded-{_tag()}"
    out = MemoryOutputConfig(name=name)
    union = _every_event_stream(b, topic).union(ref)
    query = union.to_query(app, name, MemoryOutputFactory(), out, EventShape.POINT)
    query.start(trigger=None, max_offsets_per_epoch=1)
    query.step()  # not capped: the script is read whole, and the topic with it
    assert query.metrics()["ref"]["events_in"] == 2
    assert query.metrics()["events"]["events_in"] == 3
    query.stop()
    got = MemoryOutputFactory.collected(name)
    assert sorted(e.payload["id"] for e in got if e.kind is EventKind.INSERT) == [0, 1, 2, 10, 11]
    assert got[-1] == cti(MAX_TIME)


def test_a_stop_with_flush_under_a_cap_first_reads_all_the_topic_held(app, kafka_broker, tmp_path):
    """A stop with flush ends the inputs for good (+inf), so what was in the topic when stop()
    was called is read first, in as many capped epochs as it takes: the final output is the
    uncapped one (semantics §4). Before, the stop epoch read one cap more and flushed, leaving
    the rest out for good."""
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    produce(b, topic, _five_points(lambda i: T0_MS + i))  # stamps 1 ms apart
    name = f"drained-{_tag()}"
    q = _every_event_query(app, b, topic, name)
    ckpt = tmp_path / "ckpt"
    q.start(trigger=None, checkpoint=ckpt, max_offsets_per_epoch=2)
    q.stop()
    assert MemoryOutputFactory.collected(name) == FIVE_POINTS_OUT
    # cap 2: epoch 0 reads offsets 0-1 and takes both (stamps up to T0 + 1 ms), epoch 1 offsets
    # 2-3, epoch 2 offset 4 (all there is: no cap, no cut); epoch 3 is the stop, with nothing
    # left to read
    entries = [json.loads(read_checked(ckpt / "offsets" / f"{k}.json")) for k in range(4)]
    assert [e["inputs"]["0"][0] for e in entries] == [
        [0, 5, True],
        [2, 5, True],
        [4, 5, False],
        None,
    ]
    assert [e["stop"] for e in entries] == [False, False, False, True]
    assert not (ckpt / "offsets" / "4.json").exists()


CODEGEN_MODE = "spark.sql.codegen.factoryMode"


def test_steady_steps_of_a_started_query_compile_no_new_code(app, kafka_broker):
    """Spark compiles a plan's generated code once and reuses it while the code is the same; a
    value that changes every epoch written into a plan as a literal (the arrival floor, the CTI
    already emitted) changed the code and cost a compilation per epoch and stage. Steps over new
    records, after the first ones, compile nothing."""
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    every = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    config = KafkaInputConfig(bootstrap_servers=b, topic=topic, schema="id int", time_field="ts")
    stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every)
    name = f"compiled-{_tag()}"
    q = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    metrics = app.spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    compiled = metrics.METRIC_COMPILATION_TIME()
    # the tests' session generates no code (tests/conftest.py): this test does, as Spark's
    # defaults do
    conf = app.spark.conf
    saved = {k: conf.get(k) for k in ("spark.sql.codegen.wholeStage", CODEGEN_MODE)}
    conf.set("spark.sql.codegen.wholeStage", "true")
    conf.set(CODEGEN_MODE, "FALLBACK")
    q.start(trigger=None)
    counts = []
    try:
        for k in range(5):
            _produce(b, topic, [(10 * k + j, 0, j, 10.0 * k + j) for j in range(3)])
            before = compiled.getCount()
            q.step()
            counts.append(compiled.getCount() - before)
    finally:
        q.stop(flush=False)
        for k, v in saved.items():
            conf.set(k, v)
    assert sum(e.kind is EventKind.INSERT for e in MemoryOutputFactory.collected(name)) == 14
    assert counts[2:] == [0, 0, 0], f"compilations per step: {counts}"


def test_a_state_snapshot_from_another_version_is_refused_with_the_fix(spark, tmp_path):
    # An older version kept a field of pending pairs in a join's state; a snapshot holding it
    # cannot be resumed by this version: the error says which and what to do.
    from ctistream.engine.checkpoint import CheckpointDir, write_checked
    from ctistream.engine.operators.join import JoinState

    cp = CheckpointDir(tmp_path / "cp")
    cp.save_state(3, {"ops": [JoinState()]})
    written = tmp_path / "cp" / "state" / "3" / "state.json"
    state = json.loads(read_checked(written))
    [[key, [join_state]]] = state["__dict__"]  # {"ops": [JoinState]}, as save_state writes it
    assert key == "ops"
    join_state["fields"]["pairs"] = None  # as the earlier version wrote it
    write_checked(written, json.dumps(state))  # with its checksum: not damage
    with pytest.raises(QueryBuildError) as refused:
        cp.latest_state(spark)
    text = str(refused.value)
    assert "epoch 3" in text and "JoinState" in text and "'pairs'" in text
    assert "another version" in text and "Fix: restart the query with a new checkpoint" in text
    assert CheckpointDir(tmp_path / "fresh").latest_state(spark) is None
