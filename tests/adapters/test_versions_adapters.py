"""Versions read through the files, Kafka and Event Hubs adapters become the edges they stand for
(``Stream.create(..., EventShape.POINT, versions=Versions(...))``, docs/decisions.md "Versions"):
the adapters read each row as a point at its valid-from time, with its boolean delete flag as a
payload column (CSV text ``true`` / ``false`` / empty, JSON booleans), and ingress makes the edges.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.eventhubs import EventHubInputConfig, EventHubInputFactory
from ctistream.adapters.files import FileInputConfig, FileInputFactory
from ctistream.adapters.kafka import KafkaInputConfig, KafkaInputFactory
from ctistream.adapters.memory import MemoryOutputConfig, MemoryOutputFactory
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    Versions,
    cti,
    edge_end,
    edge_start,
)

from tests.brokers.eventhubs import (  # noqa: F401 - session fixtures
    eventhubs_connection_string,
    eventhubs_endpoint,
)

S = 1_000_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_TICKS = int(T0.timestamp()) * S
SCHEMA = "sensor int, limit int, deleted boolean"
#: (valid-from second, sensor, limit, deleted): 50 for sensor 1 from 0 s, 7 for sensor 2 from
#: 1 s, 60 for sensor 1 from 2 s (closes 50 at 2 s; its flag is null: not a delete), sensor 2
#: deleted at 3 s (closes 7 at 3 s)
ROWS = [(0, 1, 50, False), (1, 2, 7, False), (2, 1, 60, None), (3, 2, 0, True)]
#: a CTI after every version (never after a delete: an END edge is not counted), flushed
EVERY = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(0), True), policy=AdvanceTimePolicy.DROP
)


def at(seconds: int) -> int:
    return T0_TICKS + seconds * S


def iso(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def p(sensor: int, limit: int, deleted: bool | None = False) -> dict:
    return {"sensor": sensor, "limit": limit, "deleted": deleted}


#: By hand, EDGE consumer: CTI 0 after 50's row commits nothing; CTI 1 commits 50's START edge;
#: CTI 2 commits 7's START edge (50's END edge at 2 s is not before 2 s); the flush commits the
#: rest, sorted by start: 50's END edge [0, 2), 7's END edge [1, 3), 60's START edge at 2 s.
EXPECTED = [
    cti(at(0)),
    edge_start(at(0), p(1, 50)),
    cti(at(1)),
    edge_start(at(1), p(2, 7)),
    cti(at(2)),
    edge_end(at(0), at(2), p(1, 50)),
    edge_end(at(1), at(3), p(2, 7)),
    edge_start(at(2), p(1, 60, None)),
    cti(MAX_TIME),
]


def _files(tmp_path, request):
    path = tmp_path / "limits.csv"
    lines = ["t,sensor,limit,deleted"]
    flags = {True: "true", False: "false", None: ""}  # empty: null
    lines += [f"{iso(s)},{k},{v},{flags[d]}" for s, k, v, d in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return FileInputFactory(), FileInputConfig(path=str(path), time_column="t", schema=SCHEMA)


def _kafka(tmp_path, request):
    from kafka import KafkaProducer

    broker = request.getfixturevalue("kafka_broker")
    topic = broker.create_topic(1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for s, k, v, d in ROWS:
            value = {"t": iso(s), "sensor": k, "limit": v, "deleted": d}
            producer.send(topic, value=json.dumps(value).encode(), partition=0).get(timeout=10)
    finally:
        producer.close()
    config = KafkaInputConfig(
        bootstrap_servers=broker.bootstrap, topic=topic, time_field="t", schema=SCHEMA
    )
    return KafkaInputFactory(), config


def _eventhubs(tmp_path, request):
    hubs = request.getfixturevalue("eventhubs_endpoint")
    hub = "hub-" + uuid.uuid4().hex[:8]
    hubs.create_hub(hub, 1)
    for n, (s, k, v, d) in enumerate(ROWS):
        value = {"t": iso(s), "sensor": k, "limit": v, "deleted": d}
        hubs.append(hub, 0, value, enqueued_time=1_800_000_000_000 + n)
    config = EventHubInputConfig(
        connection_string=hubs.connection_string(hub),
        time_field="t",
        schema=SCHEMA,
        retry_total=1,
        receive_timeout=timedelta(seconds=5),
    )
    return EventHubInputFactory(), config


@pytest.mark.parametrize(
    "source", [_files, _kafka, _eventhubs], ids=["files", "kafka", "eventhubs"]
)
def test_versions_read_by_an_adapter_become_the_expected_edges(app, tmp_path, request, source):
    factory, config = source(tmp_path, request)
    versions = Versions(key="sensor", deleted="deleted")
    stream = Stream.create("limits", factory, config, EventShape.POINT, EVERY, versions=versions)
    sink = f"versions-{source.__name__}"
    query = stream.to_query(
        app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.EDGE
    )
    try:
        query.run(epochs=2)
        assert MemoryOutputFactory.collected(sink) == EXPECTED
    finally:
        app.queries.pop(sink, None)


def test_open_versions_survive_a_restart_on_the_checkpoint(app, kafka_broker, tmp_path):
    # Kafka versions, the query stopped without flush after the first two rows and started
    # again on its checkpoint (a state snapshot every epoch) for the other two: the open
    # versions of sensors 1 and 2 come back from the snapshot, so 60 closes 50 at 2 s and the
    # delete closes 7 at 3 s, as in one run (EXPECTED). Lost state would leave 50 open forever
    # and count the delete as one of an unknown key.
    from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
    from kafka import KafkaProducer

    topic = kafka_broker.create_topic(1)

    def produce(rows):
        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        try:
            for s, k, v, d in rows:
                value = {"t": iso(s), "sensor": k, "limit": v, "deleted": d}
                producer.send(topic, value=json.dumps(value).encode(), partition=0).get(10)
        finally:
            producer.close()

    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"

    def query():
        config = KafkaInputConfig(
            bootstrap_servers=kafka_broker.bootstrap, topic=topic, time_field="t", schema=SCHEMA
        )
        versions = Versions(key="sensor", deleted="deleted")
        stream = Stream.create(
            "limits", KafkaInputFactory(), config, EventShape.POINT, EVERY, versions=versions
        )
        name = f"versions-restart-{uuid.uuid4().hex[:6]}"
        return stream.to_query(
            app, name, FileOutputFactory(), FileOutputConfig(path=str(out)), EventShape.EDGE
        )

    produce(ROWS[:2])
    first = query()
    first.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    first.step()
    first.stop(flush=False)
    produce(ROWS[2:])
    again = query()
    again.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    again.step()
    again.stop()
    got = []
    for line in out.read_text().splitlines():
        r = json.loads(line)
        payload = {k: r[k] for k in ("sensor", "limit", "deleted") if k in r}
        end = r["end"] if r["edge"] == "END" else None  # a CTI's or START edge's end aside
        got.append((r["kind"], r["edge"], r["start"], end, payload))
    want = []
    for e in EXPECTED:
        if e.is_cti:
            start = "+inf" if e.start == MAX_TIME else iso((e.start - T0_TICKS) // S)
            want.append(("CTI", None, start, None, {}))
        else:
            end = None if e.edge.value == "START" else iso((e.end - T0_TICKS) // S)
            start = iso((e.start - T0_TICKS) // S)
            want.append(("INSERT", e.edge.value, start, end, dict(e.payload)))
    assert got == want
    assert again.metrics()["limits"]["deletes_ignored"] == 0
