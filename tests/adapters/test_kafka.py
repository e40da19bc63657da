"""Kafka adapters against a real Kafka-protocol broker (Tansu) on 127.0.0.1.

Most tests call the adapters directly, as the engine calls them on the driver and executors; a few
run whole queries on Spark: a three-partition topic with out-of-order data and generated CTIs must
give exactly what the same query gives over ``adapters.memory`` with the same items, and a
malformed record must stop a query after everything before it was delivered. Values asserted
literally are worked out by hand from the rules (semantics §3), in the comments next to them.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ctistream.adapters.kafka import (
    COUNT_HEADER,
    EPOCH_HEADER,
    INDEX_HEADER,
    KIND_HEADER,
    KafkaAdapterError,
    KafkaInputAdapter,
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
    KafkaTopicNotFoundError,
    KafkaUnavailableError,
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
    MAX_TIME,
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    Event,
    EventKind,
    EventShape,
    MalformedRecordError,
    QueryRunError,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.contracts import ItemKind, SourceItem
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from pydantic import ValidationError

from tests.brokers.kafka import free_port

S = 1_000_000  # ticks per second
MS = 1_000  # ticks per millisecond
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_TICKS = int(T0.timestamp()) * S
ARRIVAL_MS = 1_800_000_000_000  # record timestamps (ms) of the records the tests produce
SCHEMA = "id int, v double"
QUICK = {
    "connect_attempts": 2,
    "request_timeout": timedelta(seconds=1),
    "retry_backoff": timedelta(milliseconds=100),
}


@pytest.fixture
def broker(kafka_broker):
    return kafka_broker


@pytest.fixture
def own_broker(private_kafka_broker):
    return private_kafka_broker


# -- helpers ---------------------------------------------------------------------------------


def at(seconds: float) -> int:
    return T0_TICKS + int(seconds * S)


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, Any, int | None, Sequence[tuple[str, bytes]] | None]],
) -> None:
    """Send ``(partition, value, timestamp_ms, headers)`` records in one go (so the broker gets
    multi-record batches) and wait for every acknowledgement. Dict values are sent as JSON."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    try:
        futures = [
            producer.send(
                topic,
                value=json.dumps(value).encode() if isinstance(value, dict) else value,
                key=b"key" if value is None else None,  # a tombstone needs a key
                partition=partition,
                timestamp_ms=ts,
                headers=list(headers) if headers else None,
            )
            for partition, value, ts, headers in records
        ]
        producer.flush()
        for f in futures:
            f.get(timeout=10)
    finally:
        producer.close()


def raw_records(bootstrap: str, topic: str, partition: int = 0) -> list[Any]:
    """Every record of one partition, as kafka-python returns them."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[Any] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out += consumer.poll(timeout_ms=200).get(tp, [])
            high = consumer.highwater(tp)
            if high is not None and consumer.position(tp) >= high:
                return out
        raise AssertionError(f"could not read {topic!r} to its end")
    finally:
        consumer.close()


def input_config(bootstrap: str, topic: str, **kw: Any) -> KafkaInputConfig:
    kw.setdefault("schema", SCHEMA)
    return KafkaInputConfig(bootstrap_servers=bootstrap, topic=topic, **kw)


def adapter(
    bootstrap: str, topic: str, shape: EventShape = EventShape.POINT, **kw: Any
) -> KafkaInputAdapter:
    return KafkaInputFactory().create(input_config(bootstrap, topic, **kw), shape)


def read_all(a: KafkaInputAdapter, partition: str = "0", start: int = 0) -> list[SourceItem]:
    return list(a.read(partition, start))


def read_back(
    bootstrap: str, topic: str, shape: EventShape = EventShape.POINT, schema: str | None = None
) -> list[Event]:
    """An output topic read back through the input adapter, CTIs included (payloads read with
    ``schema``, by default the one of :func:`input_config`)."""
    a = adapter(
        bootstrap,
        topic,
        shape,
        **({"schema": schema} if schema else {}),
        time_field="start",
        end_field=None if shape is EventShape.POINT else "end",
        edge_field="edge" if shape is EventShape.EDGE else None,
    )
    assert a.partitions() == ["0"]
    return [item.event for item in a.read("0", 0) if item.event is not None]


def output(bootstrap: str, topic: str, shape: EventShape = EventShape.POINT, **kw: Any):
    config = KafkaOutputConfig(bootstrap_servers=bootstrap, topic=topic, **kw)
    return KafkaOutputFactory().create(config, shape)


def header(record: Any, name: str) -> bytes | None:
    return dict(record.headers).get(name)


# -- configuration -----------------------------------------------------------------------------


def test_configs_are_validated_and_keep_secrets_secret():
    with pytest.raises(ValidationError, match="needs the payload schema"):
        KafkaInputConfig(bootstrap_servers="h:9092", topic="t")
    with pytest.raises(ValidationError, match="format='raw' reads no fields"):
        KafkaInputConfig(bootstrap_servers="h:9092", topic="t", format="raw", time_field="ts")
    with pytest.raises(ValidationError, match="both 'ts'"):
        input_config("h:9092", "t", time_field="ts", end_field="ts")
    with pytest.raises(ValidationError, match="request_timeout must be a duration; got the bare"):
        input_config("h:9092", "t", request_timeout=10)
    with pytest.raises(ValidationError, match="needs sasl_username and sasl_password"):
        input_config("h:9092", "t", security_protocol="SASL_SSL", sasl_mechanism="PLAIN")
    config = input_config(
        "h1:9092, h2:9092",
        "t",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="app",
        sasl_password="hunter2",
    )
    assert config.bootstrap_servers == ("h1:9092", "h2:9092")
    assert "hunter2" not in repr(config) and "hunter2" not in str(config.model_dump())
    assert pickle.loads(pickle.dumps(config)) == config  # adapters holding it go to executors
    with pytest.raises(ValidationError, match="must differ"):
        KafkaOutputConfig(bootstrap_servers="h:9092", topic="t", end_field="start")


def test_shapes_need_their_fields_when_the_adapter_is_made():
    factory = KafkaInputFactory()
    with pytest.raises(ValueError, match="needs end_field"):
        factory.create(input_config("h:9092", "t", time_field="ts"), EventShape.INTERVAL)
    with pytest.raises(ValueError, match="POINT Kafka input has no end"):
        factory.create(input_config("h:9092", "t", time_field="a", end_field="b"), EventShape.POINT)
    raw = KafkaInputConfig(bootstrap_servers="h:9092", topic="t", format="raw")
    with pytest.raises(ValueError, match="raw Kafka input makes POINT"):
        factory.create(raw, EventShape.INTERVAL)
    # Nothing connects before partitions()/read(): making and pickling an adapter is offline.
    made = factory.create(input_config("h:9092", "t"), EventShape.POINT)
    assert pickle.loads(pickle.dumps(made)).end_offsets is None


# -- input -------------------------------------------------------------------------------------


def test_partitions_snapshot_the_end_offsets_and_every_read_stops_there(broker):
    b = broker.bootstrap
    topic = broker.create_topic(partitions=3)
    produce(
        b,
        topic,
        [(p, {"id": i, "v": 1.0}, ARRIVAL_MS + i, None) for i, p in enumerate([0, 1, 0, 0])],
    )
    a = adapter(b, topic)
    assert a.size_hint() is None  # no snapshot yet
    assert a.partitions() == ["0", "1", "2"]
    # The snapshot counts every record of multi-record batches.
    assert a.end_offsets == {"0": 3, "1": 1, "2": 0}
    assert a.size_hint() == 4  # what a bounded run reads: 3 + 1 + 0 records
    produce(b, topic, [(0, {"id": 9, "v": 9.0}, ARRIVAL_MS + 9, None)])  # after the snapshot
    shipped = pickle.loads(pickle.dumps(a))  # as the engine ships it to executors
    assert [i.event.payload["id"] for i in read_all(shipped, "0")] == [0, 2, 3]
    assert read_all(shipped, "2") == []
    # A new adapter (a new run) sees the new record.
    again = adapter(b, topic)
    again.partitions()
    assert [i.offset for i in read_all(again, "0")] == [0, 1, 2, 3]


def test_a_read_from_a_stored_offset_gives_the_records_from_there(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    produce(b, topic, [(0, {"id": i, "v": i / 2}, ARRIVAL_MS + 10 * i, None) for i in range(6)])
    a = adapter(b, topic)
    a.partitions()
    everything = read_all(a)
    assert [(i.kind, i.offset, i.arrival) for i in everything] == [
        (ItemKind.EVENT, i, (ARRIVAL_MS + 10 * i) * MS) for i in range(6)
    ]
    # No time_field: the start is the record timestamp too (ms, so whole thousands of ticks).
    assert everything[2].event == point((ARRIVAL_MS + 20) * MS, {"id": 2, "v": 1.0})
    assert read_all(a, "0", 4) == everything[4:]
    assert read_all(a, "0", 6) == []
    assert read_all(a, "0", 60) == []


def test_records_of_every_shape_and_explicit_ctis_are_read_as_files_are(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    cti_header = [(KIND_HEADER, b"CTI")]
    produce(
        b,
        topic,
        [
            (0, {"ts": iso(1), "te": iso(3), "id": 1, "v": 1.5}, ARRIVAL_MS, None),
            (0, {"ts": at(2), "te": str(at(4)), "id": 2, "v": 2}, ARRIVAL_MS + 5, None),
            (0, {"ts": iso(2)}, ARRIVAL_MS + 3, cti_header),  # timestamp goes back
            (0, {"ts": "+inf"}, ARRIVAL_MS + 9, [(KIND_HEADER, b"cti")]),
        ],
    )
    items = read_all(adapter(b, topic, EventShape.INTERVAL, time_field="ts", end_field="te"), "0")
    assert [(i.kind, i.event) for i in items] == [
        (ItemKind.EVENT, interval(at(1), at(3), {"id": 1, "v": 1.5})),
        (ItemKind.EVENT, interval(at(2), at(4), {"id": 2, "v": 2.0})),
        (ItemKind.CTI, cti(at(2))),
        (ItemKind.CTI, cti(MAX_TIME)),
    ]
    # Arrival never goes back within a partition: the third record's is raised to the second's.
    assert [i.arrival for i in items] == [
        t * MS for t in (ARRIVAL_MS, ARRIVAL_MS + 5, ARRIVAL_MS + 5, ARRIVAL_MS + 9)
    ]

    edges = broker.create_topic()
    produce(
        b,
        edges,
        [
            (0, {"ts": iso(1), "side": "start", "id": 1, "v": 0.5}, ARRIVAL_MS, None),
            (0, {"ts": iso(1), "side": "END", "te": iso(5), "id": 1, "v": 0.5}, ARRIVAL_MS, None),
        ],
    )
    a = adapter(b, edges, EventShape.EDGE, time_field="ts", end_field="te", edge_field="side")
    assert [i.event for i in read_all(a)] == [
        edge_start(at(1), {"id": 1, "v": 0.5}),
        edge_end(at(1), at(5), {"id": 1, "v": 0.5}),
    ]


def test_a_raw_topic_gives_the_value_bytes_at_the_record_timestamp(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    produce(
        b,
        topic,
        [
            (0, b"\x00\xffbinary", ARRIVAL_MS, None),
            (0, b"", ARRIVAL_MS + 1, [(KIND_HEADER, b"CTI")]),
        ],
    )
    config = KafkaInputConfig(bootstrap_servers=b, topic=topic, format="raw", value_column="body")
    a = KafkaInputFactory().create(config, EventShape.POINT)
    assert a.payload_schema() == "`body` binary"
    assert [i.event for i in read_all(a)] == [
        point(ARRIVAL_MS * MS, {"body": b"\x00\xffbinary"}),
        cti((ARRIVAL_MS + 1) * MS),
    ]


@pytest.mark.parametrize(
    ("value", "headers", "what"),
    [
        (b'{"ts": broken', None, "the value is not valid JSON"),
        (b"[1, 2]", None, "the value is not a JSON object"),
        (b'{"id": 3, "v": 3.0}', None, "time_field 'ts' is missing"),
        (b'{"ts": "2026-01-01T00:00:03", "id": 3}', None, "time_field 'ts' is a naive date-time"),
        (b'{"ts": 3.5, "id": 3}', None, "time_field 'ts' has the wrong type"),
        (b'{"ts": 3000000, "id": "three"}', None, "payload column 'id' has the wrong type"),
        (b'{"ts": 3000000}', [(KIND_HEADER, b"DELETE")], "header 'ctistream-kind' is not"),
        (None, None, "the record has no value"),
    ],
)
def test_a_malformed_record_raises_naming_topic_partition_and_offset(broker, value, headers, what):
    b = broker.bootstrap
    topic = broker.create_topic(partitions=2)
    good = {"ts": at(1), "id": 1, "v": 1.0}
    produce(
        b,
        topic,
        [(1, good, ARRIVAL_MS, None), (1, value, ARRIVAL_MS + 1, headers), (1, good, None, None)],
    )
    seen: list[SourceItem] = []
    with pytest.raises(MalformedRecordError) as error:
        for item in adapter(b, topic, time_field="ts").read("1", 0):
            seen.append(item)
    message = str(error.value)
    assert f"Kafka topic {topic!r}, partition 1, offset 1: {what}" in message
    assert "expected" in message and "got" in message and "Fix:" in message
    assert "dead_letter_topic" in message
    assert [i.offset for i in seen] == [0]  # everything before the bad record came first


def test_with_a_dead_letter_topic_malformed_records_are_set_aside(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    dead = broker.create_topic()
    produce(
        b,
        topic,
        [
            (0, {"ts": at(1), "id": 1, "v": 1.0}, ARRIVAL_MS, None),
            (0, b"not json", ARRIVAL_MS + 1, [("trace", b"abc")]),
            (0, {"ts": "2026-01-01T00:00:02", "id": 2}, ARRIVAL_MS + 2, None),
            (0, {"ts": at(4), "id": 4, "v": 4.0}, ARRIVAL_MS + 3, None),
        ],
    )
    a = adapter(b, topic, time_field="ts", dead_letter_topic=dead)
    assert [i.offset for i in read_all(a)] == [0, 3]
    letters = raw_records(b, dead)
    assert [r.value for r in letters] == [b"not json", b'{"ts": "2026-01-01T00:00:02", "id": 2}']
    first = letters[0]
    assert header(first, "trace") == b"abc"  # the record's own headers are kept
    assert header(first, "ctistream-source-topic") == topic.encode()
    assert header(first, "ctistream-source-partition") == b"0"
    assert header(first, "ctistream-source-offset") == b"1"
    assert b"offset 1: the value is not valid JSON" in header(first, "ctistream-error")
    assert b"naive" in header(letters[1], "ctistream-error")
    # the engine's reads for arrival stamps only (run(epochs=N)) skip them without a letter
    assert [i.offset for i in read_all(a.without_side_effects())] == [0, 3]
    assert len(raw_records(b, dead)) == 2


def test_a_missing_topic_is_named_with_the_fix(broker):
    a = adapter(broker.bootstrap, "no-such-topic-" + uuid.uuid4().hex[:6], **QUICK)
    with pytest.raises(
        KafkaTopicNotFoundError, match=r"does not exist at 127\.0\.0\.1:.*Fix: create"
    ):
        a.partitions()


# -- output ------------------------------------------------------------------------------------

EPOCH0 = [point(at(1), {"id": 1, "v": 1.0}), cti(at(2))]
EPOCH1 = [point(at(2), {"id": 2, "v": 2.0}), point(at(3), {"id": 3, "v": 3.0}), cti(at(4))]
EPOCH2 = [point(at(4), {"id": 4, "v": 4.0}), cti(MAX_TIME)]


def test_output_records_read_back_as_the_same_stream_with_epoch_headers(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    out = output(b, topic)
    assert out.progress() is None
    out.deliver(0, EPOCH0, 0)
    out.deliver(1, [], 2)
    out.deliver(2, EPOCH1, 2)
    out.close()
    assert read_back(b, topic) == EPOCH0 + EPOCH1
    records = raw_records(b, topic)
    assert json.loads(records[0].value) == {
        "start": iso(1),
        "end": (T0 + timedelta(seconds=1, microseconds=1)).isoformat(),
        "edge": None,
        "id": 1,
        "v": 1.0,
    }
    assert json.loads(records[1].value) == {"start": iso(2)}
    assert [
        (header(r, KIND_HEADER), header(r, EPOCH_HEADER), header(r, INDEX_HEADER)) for r in records
    ] == [
        (b"INSERT", b"0", b"0"),
        (b"CTI", b"0", b"1"),
        (b"INSERT", b"2", b"2"),  # items are numbered from the query's first, across epochs
        (b"INSERT", b"2", b"3"),
        (b"CTI", b"2", b"4"),
    ]
    assert {header(r, COUNT_HEADER) for r in records[2:]} == {b"5"}


def test_edges_and_intervals_round_trip_and_ctis_can_be_left_out(broker):
    b = broker.bootstrap
    edges = [
        edge_start(at(1), {"id": 1, "v": 0.5}),
        cti(at(1)),
        edge_end(at(1), at(5), {"id": 1, "v": 0.5}),
    ]
    topic = broker.create_topic()
    out = output(b, topic, EventShape.EDGE)
    out.deliver(0, edges, 0)
    assert read_back(b, topic, EventShape.EDGE) == edges
    spans = [interval(at(1), at(3), {"id": 1, "v": 1.0}), cti(at(2))]
    topic = broker.create_topic()
    out = output(b, topic, EventShape.INTERVAL, include_ctis=False)
    out.deliver(0, [cti(at(0)), *spans], 0)
    assert read_back(b, topic, EventShape.INTERVAL) == spans[:1]
    # a CTI left out still counts among the output items: the interval is item 1 of 0-2
    record = raw_records(b, topic)[0]
    assert (header(record, INDEX_HEADER), header(record, COUNT_HEADER)) == (b"1", b"3")
    assert output(b, topic).progress() == 2


def test_an_epoch_that_failed_part_way_is_completed_with_the_items_after_it(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    first = output(b, topic)
    first.deliver(0, EPOCH0, 0)
    first.deliver(1, EPOCH1[:1], 2)  # epoch 1 failed after its first item
    first.close()
    # A fresh adapter (a restarted query) learns from the topic's tail what is there, and the
    # engine hands it the rest of epoch 1: items 3-4.
    again = output(b, topic)
    assert again.progress() == 3
    again.deliver(1, EPOCH1[1:], 3)
    again.deliver(2, EPOCH2, 5)
    again.close()
    assert read_back(b, topic) == EPOCH0 + EPOCH1 + EPOCH2
    marks = [
        (header(r, EPOCH_HEADER), header(r, INDEX_HEADER), header(r, COUNT_HEADER))
        for r in raw_records(b, topic)
    ]
    assert marks == [
        (b"0", b"0", b"2"),
        (b"0", b"1", b"2"),
        (b"1", b"2", b"3"),  # written by a delivery of items 2-2
        (b"1", b"3", b"5"),
        (b"1", b"4", b"5"),
        (b"2", b"5", b"7"),
        (b"2", b"6", b"7"),
    ]
    last = output(b, topic)
    assert last.progress() == 7
    with pytest.raises(KafkaAdapterError, match=r"items up to number 6 already, but items from"):
        last.deliver(1, EPOCH1, 2)  # another query writing the same partition


def test_a_partly_written_epoch_is_completed_from_its_first_missing_record(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    out = output(b, topic)
    out.deliver(0, EPOCH0, 0)
    out.close()
    # A crash after the first record of epoch 1 (items 2-4), and a record of another writer.
    torn = KafkaProducer(bootstrap_servers=b)
    value = json.dumps({"start": iso(2), "end": iso(2.000001), "edge": None, "id": 2, "v": 2.0})
    torn.send(
        topic,
        value=value.encode(),
        partition=0,
        headers=[
            (KIND_HEADER, b"INSERT"),
            (EPOCH_HEADER, b"1"),
            (INDEX_HEADER, b"2"),
            (COUNT_HEADER, b"5"),
        ],
    ).get(timeout=10)
    torn.send(topic, value=b'{"note": "not ours"}', partition=0).get(timeout=10)
    torn.close()
    again = output(b, topic)
    assert again.progress() == 3
    again.deliver(1, EPOCH1[1:], 3)
    again.close()
    records = raw_records(b, topic)
    ours = [r for r in records if header(r, EPOCH_HEADER) is not None]
    assert [(header(r, EPOCH_HEADER), header(r, INDEX_HEADER)) for r in ours] == [
        (b"0", b"0"),
        (b"0", b"1"),
        (b"1", b"2"),
        (b"1", b"3"),
        (b"1", b"4"),
    ]
    assert output(b, topic).progress() == 5


def test_an_output_partition_that_does_not_exist_is_named(broker):
    topic = broker.create_topic(partitions=2)
    out = output(broker.bootstrap, topic, partition=5, **QUICK)
    with pytest.raises(KafkaTopicNotFoundError, match=r"has partitions \[0, 1\], not 5"):
        out.deliver(0, EPOCH0, 0)


# -- broker down -------------------------------------------------------------------------------


def test_no_broker_at_the_address_fails_after_the_configured_retries():
    bootstrap = f"127.0.0.1:{free_port()}"
    a = adapter(bootstrap, "t", **QUICK)
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError) as error:
        a.partitions()
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert (
        f"cannot list the partitions of Kafka topic 't': no Kafka broker answered at {bootstrap}"
        in message
    )
    assert "after 2 attempt(s)" in message and "Fix: start the broker" in message


def test_a_broker_that_comes_back_within_the_attempts_is_waited_for(own_broker):
    name = "back-" + uuid.uuid4().hex[:6]
    own_broker.stop()

    def restart() -> None:
        time.sleep(1.0)
        own_broker.start()  # the same port; in-memory storage, so the topic is made again
        own_broker.create_topic(partitions=2, name=name)

    thread = threading.Thread(target=restart)
    thread.start()
    a = adapter(
        own_broker.bootstrap,
        name,
        connect_attempts=8,
        request_timeout=timedelta(seconds=1),
        retry_backoff=timedelta(milliseconds=200),
    )
    try:
        assert a.partitions() == ["0", "1"]
    finally:
        thread.join()


def test_a_broker_that_stops_fails_reads_and_deliveries_with_a_clear_error(own_broker):
    b = own_broker.bootstrap
    topic = own_broker.create_topic()
    produce(b, topic, [(0, {"id": 1, "v": 1.0}, ARRIVAL_MS, None)])
    a = adapter(b, topic, **QUICK)
    a.partitions()
    out = output(b, own_broker.create_topic(), **QUICK)
    out.deliver(0, EPOCH0, 0)
    own_broker.stop()
    with pytest.raises(KafkaUnavailableError) as error:
        read_all(a)
    assert (
        f"cannot read partition 0 of Kafka topic {topic!r} from offset 0: no Kafka broker "
        f"answered at {b} after 2 attempt(s)"
    ) in str(error.value)
    assert "This run delivers nothing read after the last committed offset" in str(error.value)
    with pytest.raises(KafkaUnavailableError) as error:
        out.deliver(1, EPOCH1, 2)
    assert "cannot write epoch 1 to Kafka topic" in str(error.value)
    assert "Epochs before it are in the topic" in str(error.value)


def test_a_read_whose_records_vanished_after_the_snapshot_says_so(broker):
    b = broker.bootstrap
    topic = broker.create_topic()
    produce(b, topic, [(0, {"id": i, "v": 1.0}, ARRIVAL_MS + i, None) for i in range(5)])
    a = adapter(b, topic, **QUICK)
    a.partitions()
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    broker.create_topic(name=topic)
    produce(b, topic, [(0, {"id": i, "v": 2.0}, ARRIVAL_MS + i, None) for i in range(2)])
    items = a.read("0", 0)
    assert [next(items).offset, next(items).offset] == [0, 1]
    with pytest.raises(KafkaAdapterError, match="now ends at offset 2, before offset 5"):
        next(items)


def test_a_query_over_an_unreachable_broker_fails_when_it_is_created(app):
    bootstrap = f"127.0.0.1:{free_port()}"
    once = {**QUICK, "connect_attempts": 1}
    stream = Stream.create(
        "down", KafkaInputFactory(), input_config(bootstrap, "t", **once), EventShape.POINT
    )
    with pytest.raises(KafkaUnavailableError, match=f"at {bootstrap} .*The query was not started"):
        stream.to_query(
            app,
            "down-" + uuid.uuid4().hex[:6],
            KafkaOutputFactory(),
            KafkaOutputConfig(bootstrap_servers=bootstrap, topic="o", **once),
            EventShape.POINT,
        )


@pytest.mark.parametrize("how", ["run", "run in 3 epochs", "step", "step capped"])
def test_a_broker_that_goes_away_while_a_query_reads_fails_it_with_the_adapters_error(
    app, own_broker, tmp_path, monkeypatch, how
):
    # The broker answers while the query is made (partitions, end offsets: on the driver) and
    # is gone when the executors read the topic. A started query snapshots the end offsets
    # again before each epoch: the broker is taken away right after that. With
    # max_offsets_per_epoch the epoch's cut is a Spark job of its own, the first to read; so is
    # run(epochs=3)'s, cutting the run at quantiles of the arrival stamps before epoch 0.
    b = own_broker.bootstrap
    topic = own_broker.create_topic()
    produce(
        b, topic, [(0, {"ts": iso(i), "id": i, "v": 1.0}, ARRIVAL_MS + i, None) for i in range(5)]
    )
    once = {**QUICK, "connect_attempts": 1}
    config = input_config(b, topic, time_field="ts", **once)
    stream = Stream.create("gone", KafkaInputFactory(), config, EventShape.POINT)
    name = "gone-" + uuid.uuid4().hex[:6]
    output = MemoryOutputConfig(name=name)
    query = stream.to_query(app, name, MemoryOutputFactory(), output, EventShape.POINT)
    if how.startswith("run"):
        own_broker.stop()
        with pytest.raises(QueryRunError) as error:
            query.run(epochs=3 if how == "run in 3 epochs" else None)
    else:
        snapshot = KafkaInputAdapter.latest_offsets

        def then_gone(self: KafkaInputAdapter) -> Any:
            ends = snapshot(self)
            own_broker.stop()  # on the driver only: the executors' adapters are not patched
            return ends

        monkeypatch.setattr(KafkaInputAdapter, "latest_offsets", then_gone)
        cap = 2 if how == "step capped" else None
        query.start(trigger=None, checkpoint=tmp_path / "ckpt", max_offsets_per_epoch=cap)
        with pytest.raises(QueryRunError) as error:
            query.step()
    message = str(error.value)
    when = "while cutting the run into epochs" if how == "run in 3 epochs" else "epoch 0"
    assert message.startswith(f"query {name!r}, {when}: a Spark task raised ")
    assert (
        f"KafkaUnavailableError: cannot read partition 0 of Kafka topic {topic!r} from offset "
        f"0: no Kafka broker answered at {b} after 1 attempt(s)"
    ) in message
    assert "Fix: start the broker" in message
    assert "Traceback" not in message and 'File "' not in message, message
    assert MemoryOutputFactory.collected(name) == []


# -- through queries -----------------------------------------------------------------------------

# Three partitions, event times out of order. Generation: a CTI after every event at
# max_start - 2 s, per partition (semantics §3, steps 2 and 5); DROP for events below it.
#   p0: id1 @10 (CTI 8), id2 @5 < 8 dropped, id3 @12 (CTI 10), id4 @9 < 10 dropped
#   p1: id5 @3 (CTI 1), id6 @4 (CTI 2), id7 @2 = CTI 2 kept, id8 @11 (CTI 9)
#   p2: id9 @7 (CTI 5), id10 @6 >= 5 kept, id11 @1 < 5 dropped, id12 @13 (CTI 11)
OUT_OF_ORDER = {
    0: [(1, 10), (2, 5), (3, 12), (4, 9)],
    1: [(5, 3), (6, 4), (7, 2), (8, 11)],
    2: [(9, 7), (10, 6), (11, 1), (12, 13)],
}
DROPPED = {2, 4, 11}
GENERATE = AdvanceTimeSettings(
    generation=AdvanceTimeGenerationSettings(1, timedelta(seconds=2), True),
    policy=AdvanceTimePolicy.DROP,
)


def arrival_order() -> list[tuple[int, int, int, int]]:
    """(partition, id, event second, arrival ms): round robin over the partitions."""
    rows = []
    for k in range(4):
        for p in range(3):
            ident, second = OUT_OF_ORDER[p][k]
            rows.append((p, ident, second, ARRIVAL_MS + 10 * len(rows)))
    return rows


def test_three_partitions_out_of_order_give_what_the_memory_adapters_give(app, broker):
    b = broker.bootstrap
    source = broker.create_topic(partitions=3)
    sink = broker.create_topic()
    rows = arrival_order()
    produce(
        b, source, [(p, {"ts": iso(s), "id": i, "v": i * 1.5}, ms, None) for p, i, s, ms in rows]
    )
    script = EventScript().declare("events", "0", "1", "2")
    for p, i, s, ms in rows:
        script.insert(
            "events", point(at(s), {"id": i, "v": i * 1.5}), arrival=ms * MS, partition=str(p)
        )
    tag = uuid.uuid4().hex[:6]
    memory = Stream.create(
        "events",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=SCHEMA),
        EventShape.POINT,
        GENERATE,
    )
    memory.to_query(
        app,
        f"mem-{tag}",
        MemoryOutputFactory(),
        MemoryOutputConfig(name=f"mem-{tag}"),
        EventShape.POINT,
    ).run()
    expected = MemoryOutputFactory.collected(f"mem-{tag}")

    def kafka_query(name: str):
        stream = Stream.create(
            "events",
            KafkaInputFactory(),
            input_config(b, source, time_field="ts"),
            EventShape.POINT,
            GENERATE,
        )
        return stream.to_query(
            app,
            name,
            KafkaOutputFactory(),
            KafkaOutputConfig(bootstrap_servers=b, topic=sink),
            EventShape.POINT,
        )

    kafka_query(f"kafka-{tag}").run(epochs=2)
    got = read_back(b, sink)
    assert got == expected
    # By hand: the dropped ids are missing, the kept late ones (7, 10) are there; the input's
    # CTI is the minimum over partitions, so the first output CTI comes once p2 has one: after
    # id9 (p0 at 8, p1 at 1, p2 at 5) it is 1 s; the flush ends the output.
    ids = [e.payload["id"] for e in got if not e.is_cti]
    assert sorted(ids) == sorted(set(range(1, 13)) - DROPPED)
    assert got[0] == cti(at(1))
    assert got[-1] == cti(MAX_TIME)
    # A restarted query (a fresh output adapter over the same topic) writes nothing twice.
    written = len(raw_records(b, sink))
    # (The engine skips what progress() reports: epoch 1 of the run before, all of it.)
    kafka_query(f"kafka-again-{tag}").run(epochs=1)
    assert len(raw_records(b, sink)) == written
    assert read_back(b, sink) == expected


def test_a_malformed_record_stops_a_query_after_everything_before_it_was_delivered(app, broker):
    b = broker.bootstrap
    source = broker.create_topic()
    sink = broker.create_topic()
    produce(
        b,
        source,
        [
            (0, {"ts": iso(1), "id": 1, "v": 1.0}, ARRIVAL_MS, None),
            (0, {"ts": iso(2), "id": 2, "v": 2.0}, ARRIVAL_MS + 1, None),
            (0, b'{"ts": broken', ARRIVAL_MS + 2, None),
            (0, {"ts": iso(4), "id": 4, "v": 4.0}, ARRIVAL_MS + 3, None),
        ],
    )
    every_event = AdapterAdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
    )
    stream = Stream.create(
        "bad",
        KafkaInputFactory(),
        input_config(b, source, time_field="ts", advance_time=every_event),
        EventShape.POINT,
    )
    query = stream.to_query(
        app,
        "bad-" + uuid.uuid4().hex[:6],
        KafkaOutputFactory(),
        KafkaOutputConfig(bootstrap_servers=b, topic=sink),
        EventShape.POINT,
    )
    with pytest.raises(MalformedRecordError, match=rf"topic '{source}', partition 0, offset 2"):
        query.run()
    # CTIs at 1 s and 2 s were generated before the bad record and commit the event at 1 s; the
    # event at 2 s waits for a CTI after it, and there is no flush: the run failed.
    assert read_back(b, sink) == [cti(at(1)), point(at(1), {"id": 1, "v": 1.0}), cti(at(2))]


def test_a_started_query_cut_into_capped_epochs_writes_each_dead_letter_once(app, broker):
    """The promise "a run writes each letter once however it is cut into epochs" (kafka.py): a
    capped epoch's cut must not make the next epoch read a malformed record again."""
    b = broker.bootstrap
    source = broker.create_topic(partitions=2)
    dead = broker.create_topic()
    produce(
        b,
        source,
        [(0, {"ts": iso(i), "id": i, "v": 1.0}, ARRIVAL_MS + 100 + i, None) for i in range(3)]
        + [
            (1, {"ts": iso(5), "id": 50, "v": 1.0}, ARRIVAL_MS + 120, None),
            (1, b"{bad json", ARRIVAL_MS + 130, None),
        ],
    )
    every_event = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1, timedelta(0), True), policy=AdvanceTimePolicy.DROP
    )
    config = input_config(b, source, time_field="ts", dead_letter_topic=dead)
    stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every_event)
    name = "letters-" + uuid.uuid4().hex[:6]
    query = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    query.start(trigger=None, max_offsets_per_epoch=2)
    # Epoch 0: partition 0 is capped at offsets 0-1, which reach stamp ARRIVAL_MS + 101 ms, so
    # the epoch takes what is stamped up to there: ids 0 and 1. Partition 1's first record
    # (ARRIVAL_MS + 120 ms) is past that: its read stops there, before the malformed record.
    query.step()
    assert query.metrics()["events"]["events_in"] == 2
    # Epoch 1: nothing is capped (one record left in partition 0, two in partition 1): id 2,
    # id 50 and the malformed record, whose letter is written now, once.
    query.step()
    assert query.metrics()["events"]["events_in"] == 4
    query.stop()
    letters = raw_records(b, dead)
    assert [
        (header(r, "ctistream-source-partition"), header(r, "ctistream-source-offset"))
        for r in letters
    ] == [(b"1", b"1")]
    got = MemoryOutputFactory.collected(name)
    assert sorted(e.payload["id"] for e in got if e.kind is EventKind.INSERT) == [0, 1, 2, 50]
