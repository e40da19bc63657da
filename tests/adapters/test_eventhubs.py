"""Event Hubs adapters with the real azure-eventhub client, against an in-memory Event Hubs
endpoint speaking AMQP 1.0 on 127.0.0.1 (``tests/brokers/eventhubs.py``).

Most tests call the adapters directly, as the engine calls them on the driver and executors; two
run whole queries on Spark: a three-partition hub with out-of-order data and generated CTIs, sent
through the output adapter to another hub and read back, must give exactly what the same query
gives over ``adapters.memory`` with the same items, and a malformed event must stop a query after
everything before it was delivered. Values asserted literally are worked out by hand
from the rules (semantics §3), in the comments next to them.
"""

from __future__ import annotations

import json
import pickle
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.eventhub import EventHubConsumerClient
from ctistream.adapters.eventhubs import (
    COUNT_PROPERTY,
    EPOCH_PROPERTY,
    INDEX_PROPERTY,
    KIND_PROPERTY,
    EventHubInputAdapter,
    EventHubInputConfig,
    EventHubInputFactory,
    EventHubNotFoundError,
    EventHubOutputConfig,
    EventHubOutputFactory,
    EventHubsAdapterError,
    EventHubsDataLossError,
    EventHubsUnavailableError,
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
from pydantic import ValidationError

from tests.brokers.eventhubs import (  # noqa: F401 - session fixtures
    EventHubsEndpoint,
    eventhubs_connection_string,
    eventhubs_endpoint,
    running_endpoint,
)

S = 1_000_000  # ticks per second
MS = 1_000  # ticks per millisecond
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_TICKS = int(T0.timestamp()) * S
ENQUEUED_MS = 1_800_000_000_000  # enqueued times (ms) of the events the tests append
SCHEMA = "id int, v double"
QUICK: dict[str, Any] = {
    "retry_total": 1,
    "retry_backoff": timedelta(milliseconds=50),
    "receive_timeout": timedelta(seconds=5),
}


@pytest.fixture
def hubs(eventhubs_endpoint: EventHubsEndpoint) -> EventHubsEndpoint:  # noqa: F811
    return eventhubs_endpoint


# -- helpers ---------------------------------------------------------------------------------


def at(seconds: float) -> int:
    return T0_TICKS + int(seconds * S)


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def new_hub(endpoint: EventHubsEndpoint, partitions: int = 1) -> str:
    name = "hub-" + uuid.uuid4().hex[:8]
    endpoint.create_hub(name, partitions)
    return name


def input_config(endpoint: EventHubsEndpoint, hub: str, **kw: Any) -> EventHubInputConfig:
    kw.setdefault("schema", SCHEMA)
    return EventHubInputConfig(connection_string=endpoint.connection_string(hub), **{**QUICK, **kw})


def adapter(
    endpoint: EventHubsEndpoint, hub: str, shape: EventShape = EventShape.POINT, **kw: Any
) -> EventHubInputAdapter:
    return EventHubInputFactory().create(input_config(endpoint, hub, **kw), shape)


def read_back(
    endpoint: EventHubsEndpoint, hub: str, shape: EventShape = EventShape.POINT, partition="0"
) -> list[Event]:
    """An output hub read back through the input adapter, CTIs included."""
    a = adapter(
        endpoint,
        hub,
        shape,
        time_field="start",
        end_field=None if shape is EventShape.POINT else "end",
        edge_field="edge" if shape is EventShape.EDGE else None,
    )
    a.partitions()
    return [item.event for item in a.read(partition, 0) if item.event is not None]


def output(endpoint: EventHubsEndpoint, hub: str, shape=EventShape.POINT, **kw: Any):
    config = EventHubOutputConfig(connection_string=endpoint.connection_string(hub), **kw)
    return EventHubOutputFactory().create(config, shape)


def properties(endpoint: EventHubsEndpoint, hub: str, partition: str = "0") -> list[dict]:
    """The application properties of every event of one partition, keys and strings decoded."""

    def text(x: Any) -> Any:
        return x.decode() if isinstance(x, bytes) else x

    return [
        {text(k): text(v) for k, v in (e.message().application_properties or {}).items()}
        for e in endpoint.events(hub, partition)
    ]


def closed_port_connection_string() -> str:
    with running_endpoint() as gone:
        return gone.connection_string("hub")  # nothing listens there once it has stopped


# -- configuration -----------------------------------------------------------------------------

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=hunter2"


def test_configs_are_validated_and_keep_secrets_secret():
    config = EventHubInputConfig(connection_string=CONN, eventhub_name="h", schema=SCHEMA)
    assert (config.hub, config.endpoint) == ("h", "sb://ns.servicebus.windows.net")
    assert "hunter2" not in repr(config) and "hunter2" not in str(config.model_dump())
    with pytest.raises(ValidationError, match="no event hub named"):
        EventHubInputConfig(connection_string=CONN, schema=SCHEMA)
    with pytest.raises(ValidationError, match=r"is for event hub 'a' .* eventhub_name is 'b'"):
        EventHubInputConfig(connection_string=CONN + ";EntityPath=a", eventhub_name="b", schema="")
    with pytest.raises(ValidationError, match="Endpoint=sb://"):
        EventHubInputConfig(connection_string="HostName=x", eventhub_name="h", schema=SCHEMA)
    with pytest.raises(ValidationError, match="schema"):
        EventHubInputConfig(connection_string=CONN, eventhub_name="h")
    with pytest.raises(ValidationError, match="both 'ts'"):
        EventHubInputConfig(
            connection_string=CONN,
            eventhub_name="h",
            schema=SCHEMA,
            time_field="ts",
            end_field="ts",
        )
    with pytest.raises(ValidationError, match="receive_timeout must be a duration; got the bare"):
        EventHubInputConfig(
            connection_string=CONN, eventhub_name="h", schema=SCHEMA, receive_timeout=10
        )
    with pytest.raises(ValidationError, match="is the input event hub"):
        EventHubInputConfig(
            connection_string=CONN, eventhub_name="h", schema=SCHEMA, dead_letter_eventhub="h"
        )
    with pytest.raises(ValidationError, match="must differ"):
        EventHubOutputConfig(connection_string=CONN, eventhub_name="h", end_field="start")


def test_shapes_need_their_fields_and_nothing_connects_before_partitions():
    factory = EventHubInputFactory()
    config = EventHubInputConfig(connection_string=CONN, eventhub_name="h", schema=SCHEMA)
    with pytest.raises(ValueError, match="needs end_field"):
        factory.create(config.model_copy(update={"time_field": "ts"}), EventShape.INTERVAL)
    with pytest.raises(ValueError, match="edge_field is for EDGE inputs only"):
        factory.create(config.model_copy(update={"end_field": "te"}), EventShape.EDGE)
    # Making and pickling an adapter is offline (the namespace above does not exist).
    made = factory.create(config, EventShape.POINT)
    assert pickle.loads(pickle.dumps(made)).last_sequence_numbers is None
    assert made.payload_schema() == SCHEMA


# -- input -------------------------------------------------------------------------------------


def test_the_endpoint_serves_the_clients_own_properties(hubs, eventhubs_connection_string):  # noqa: F811
    first = hubs.append("hub", 1, {"id": 1}, enqueued_time=ENQUEUED_MS)
    second = hubs.append("hub", 1, b"x" * 10, enqueued_time=ENQUEUED_MS + 5)
    client = EventHubConsumerClient.from_connection_string(
        eventhubs_connection_string, consumer_group="$Default"
    )
    try:
        assert client.get_eventhub_properties()["partition_ids"] == ["0", "1"]
        props = client.get_partition_properties("1")
        assert client.get_partition_properties("0")["is_empty"] is True
    finally:
        client.close()
    assert props["is_empty"] is False
    assert props["last_enqueued_sequence_number"] == second.sequence_number == 1
    assert props["last_enqueued_offset"] == second.offset != first.offset == "0"
    assert props["last_enqueued_time_utc"] == datetime.fromtimestamp((ENQUEUED_MS + 5) / 1000, UTC)


def test_partitions_snapshot_the_last_sequence_numbers_and_every_read_stops_there(hubs):
    hub = new_hub(hubs, 3)
    for i, p in enumerate([0, 1, 0, 0]):
        hubs.append(hub, p, {"id": i, "v": 1.0}, enqueued_time=ENQUEUED_MS + i)
    a = adapter(hubs, hub)
    assert a.size_hint() is None  # no snapshot yet
    assert a.partitions() == ["0", "1", "2"]
    assert a.last_sequence_numbers == {"0": 2, "1": 0, "2": -1}  # -1: empty
    assert a.size_hint() == 4  # what a bounded run reads: 3 + 1 + 0 events
    hubs.append(hub, 0, {"id": 9, "v": 9.0}, enqueued_time=ENQUEUED_MS + 9)  # after the snapshot
    shipped = pickle.loads(pickle.dumps(a))  # as the engine ships it to executors
    assert [i.event.payload["id"] for i in shipped.read("0", 0)] == [0, 2, 3]
    assert list(shipped.read("2", 0)) == []  # nothing to read: no connection either


def test_events_carry_sequence_numbers_enqueued_times_and_explicit_ctis(hubs):
    hub = new_hub(hubs)
    for i in range(5):
        props = {KIND_PROPERTY: "CTI"} if i == 3 else {KIND_PROPERTY: "INSERT"} if i == 1 else None
        hubs.append(hub, 0, {"id": i, "v": i / 2}, props, enqueued_time=ENQUEUED_MS + 10 * i)
    a = adapter(hubs, hub)  # no time_field: the start is the enqueued time
    a.partitions()
    items = list(a.read("0", 0))
    # Offsets are sequence numbers; arrival is the enqueued time (ms) in ticks; event 3 is a
    # CTI at its own enqueued time.
    assert items == [
        SourceItem(
            ItemKind.CTI if i == 3 else ItemKind.EVENT,
            i,
            (ENQUEUED_MS + 10 * i) * MS,
            cti((ENQUEUED_MS + 30) * MS)
            if i == 3
            else point((ENQUEUED_MS + 10 * i) * MS, {"id": i, "v": i / 2}),
        )
        for i in range(5)
    ]
    # A restart after committing sequence number 2 reads from 3.
    assert [i.offset for i in a.read("0", 3)] == [3, 4]
    assert list(a.read("0", 5)) == []


def test_a_malformed_event_raises_naming_hub_partition_and_sequence_number(hubs):
    hub = new_hub(hubs)
    hubs.append(hub, 0, {"ts": iso(1), "id": 1, "v": 1.0})
    hubs.append(hub, 0, {"ts": "2026-01-01T00:00:02", "id": 2, "v": 2.0})  # naive
    a = adapter(hubs, hub, time_field="ts")
    a.partitions()
    items = a.read("0", 0)
    assert next(items).event == point(at(1), {"id": 1, "v": 1.0})  # yielded before the error
    with pytest.raises(MalformedRecordError) as error:
        next(items)
    message = str(error.value)
    assert f"event hub {hub!r}, partition '0', sequence number 1" in message
    assert "naive" in message and "expected" in message and "got '2026-01-01T00:00:02'" in message
    assert "Fix: add the UTC offset" in message and "dead_letter_eventhub" in message


def test_with_a_dead_letter_hub_malformed_events_are_set_aside(hubs):
    hub, dead = new_hub(hubs), new_hub(hubs, 2)
    bodies: list[Any] = [
        {"ts": iso(1), "id": 1, "v": 1.0},
        b'{"ts": broken',  # not JSON
        b"\xff\xfe",  # not UTF-8
        [1, 2],  # not an object
        {"ts": iso(3), "id": "three", "v": 3.0},  # wrong type
        {"ts": iso(4), "id": 4, "v": 4.0},
    ]
    for body in bodies:
        hubs.append(hub, 0, json.dumps(body) if isinstance(body, list) else body)
    hubs.append(hub, 0, {"ts": iso(5)}, {KIND_PROPERTY: "MAYBE"})  # not a kind
    a = adapter(hubs, hub, time_field="ts", dead_letter_eventhub=dead)
    a.partitions()
    assert [i.event for i in a.read("0", 0)] == [
        point(at(1), {"id": 1, "v": 1.0}),
        point(at(4), {"id": 4, "v": 4.0}),
    ]
    # The letters keep one partition's order (partition key = the source partition).
    letters = [e for p in ("0", "1") for e in hubs.events(dead, p)]
    props = [p for p in (properties(hubs, dead, "0") + properties(hubs, dead, "1")) if p]
    assert [p["ctistream-source-sequence-number"] for p in props] == ["1", "2", "3", "4", "6"]
    assert {p["ctistream-source-eventhub"] for p in props} == {hub}
    assert {p["ctistream-source-partition"] for p in props} == {"0"}
    errors = [p["ctistream-error"] for p in props]
    for error, what in zip(
        errors,
        ["not valid JSON", "not UTF-8", "not a JSON object", "wrong type", "not an event kind"],
        strict=True,
    ):
        assert what in error and f"event hub {hub!r}" in error
    # the engine's reads for arrival stamps only (run(epochs=N)) skip them without a letter
    assert [i.offset for i in a.without_side_effects().read("0", 0)] == [0, 5]
    assert sum(len(hubs.events(dead, p)) for p in ("0", "1")) == len(letters)
    assert letters[0].message().data == [b'{"ts": broken']  # the body as it was
    assert props[-1][KIND_PROPERTY] == "MAYBE"  # and its own properties


def test_a_missing_hub_is_named_with_the_fix(hubs):
    a = adapter(hubs, "no-such-hub")
    with pytest.raises(EventHubNotFoundError, match=r"'no-such-hub' at sb://127\.0\.0\.1:.* Fix"):
        a.partitions()


def test_events_expired_before_a_read_from_past_the_start_are_an_error_not_skipped(hubs):
    # Ten events; the hub's retention drops sequence numbers 0 to 6. A read from the start
    # (offset 0: a partition the query has read nothing from) begins at the first event held.
    # A read from 4 (where a query's checkpoint says it goes on) would skip 4 to 6 without a
    # word: it is refused naming them and the fix. A read from 7 on is whole.
    hub = new_hub(hubs)
    for n in range(10):
        hubs.append(hub, 0, {"ts": iso(n), "id": n, "v": float(n)})
    hubs.expire(hub, 0, 7)
    a = adapter(hubs, hub, time_field="ts")
    a.partitions()
    assert [i.offset for i in a.read("0", 0)] == [7, 8, 9]
    assert [i.offset for i in a.read("0", 7)] == [7, 8, 9]
    with pytest.raises(EventHubsDataLossError) as got:
        list(a.read("0", 4))
    message = str(got.value)
    assert f"partition '0' of event hub {hub!r} no longer holds sequence numbers 4 to 6" in message
    assert "Fix: start the query on a new checkpoint directory" in message


def test_a_missing_dead_letter_hub_is_named_with_its_setting(hubs):
    # The source hub exists; the dead-letter hub does not: the error names the dead-letter hub
    # as the missing one and dead_letter_eventhub as what to correct (it named the source hub
    # and eventhub_name, which are right).
    hub = new_hub(hubs)
    hubs.append(hub, 0, {"ts": iso(1), "id": 1, "v": 1.0})
    hubs.append(hub, 0, b"not json")
    a = adapter(hubs, hub, time_field="ts", dead_letter_eventhub="no-such-dead-hub")
    a.partitions()
    with pytest.raises(EventHubNotFoundError) as got:
        list(a.read("0", 0))
    message = str(got.value)
    assert "dead-letter event hub 'no-such-dead-hub': event hub 'no-such-dead-hub' at" in message
    assert "Fix: create it, or correct dead_letter_eventhub" in message
    assert f"{hub!r} at" not in message


# -- output ------------------------------------------------------------------------------------

EPOCH0 = [point(at(1), {"id": 1, "v": 1.0}), cti(at(1))]
EPOCH1 = [point(at(2), {"id": 2, "v": 2.0}), point(at(2), {"id": 3, "v": 3.0}), cti(at(3))]


def test_output_events_read_back_as_the_same_stream_with_epoch_properties(hubs):
    hub = new_hub(hubs, 2)
    out = output(hubs, hub, partition_id="1")
    assert out.progress() is None
    out.deliver(0, EPOCH0, 0)
    out.deliver(1, [], 2)
    out.deliver(2, EPOCH1, 2)
    out.close()
    assert hubs.events(hub, "0") == []  # one partition, in order
    assert read_back(hubs, hub, partition="1") == EPOCH0 + EPOCH1
    first = hubs.events(hub, "1")[0].message().data[0]
    assert json.loads(first) == {
        "start": iso(1),
        "end": (T0 + timedelta(seconds=1, microseconds=1)).isoformat(),
        "edge": None,
        "id": 1,
        "v": 1.0,
    }
    marks = [
        (p[KIND_PROPERTY], p[EPOCH_PROPERTY], p[INDEX_PROPERTY], p[COUNT_PROPERTY])
        for p in properties(hubs, hub, "1")
    ]
    assert marks == [
        ("INSERT", 0, 0, 2),
        ("CTI", 0, 1, 2),
        ("INSERT", 2, 2, 5),  # items are numbered from the query's first, across epochs
        ("INSERT", 2, 3, 5),
        ("CTI", 2, 4, 5),
    ]


def test_edges_round_trip_and_ctis_can_be_left_out(hubs):
    edges = [
        edge_start(at(1), {"id": 1, "v": 0.5}),
        cti(at(1)),
        edge_end(at(1), at(5), {"id": 1, "v": 0.5}),
        interval(at(1), at(3), {"id": 2, "v": 1.0}),
    ]
    hub = new_hub(hubs)
    output(hubs, hub, EventShape.EDGE, include_ctis=False).deliver(0, edges[:3], 0)
    assert read_back(hubs, hub, EventShape.EDGE) == [edges[0], edges[2]]
    # the CTI left out still counts among the output items: the END edge is item 2 of 0-2
    assert [(p[INDEX_PROPERTY], p[COUNT_PROPERTY]) for p in properties(hubs, hub)] == [
        (0, 3),
        (2, 3),
    ]
    assert output(hubs, hub).progress() == 3


def test_a_partly_sent_epoch_is_completed_with_the_items_after_it(hubs):
    hub = new_hub(hubs)
    first = output(hubs, hub)
    first.deliver(0, EPOCH0, 0)
    first.close()
    # A crash after the first event of epoch 1 (items 2-4), then an event of another writer.
    body = {"start": iso(2), "end": iso(2.000001), "edge": None, "id": 2, "v": 2.0}
    marks = {KIND_PROPERTY: "INSERT", EPOCH_PROPERTY: 1, INDEX_PROPERTY: 2, COUNT_PROPERTY: 5}
    hubs.append(hub, 0, body, marks)
    hubs.append(hub, 0, {"note": "not ours"})
    again = output(hubs, hub)  # a restarted query learns from the partition's tail
    assert again.progress() == 3
    again.deliver(1, EPOCH1[1:], 3)  # and the engine hands over the rest of epoch 1
    again.close()
    ours = [(p[EPOCH_PROPERTY], p[INDEX_PROPERTY]) for p in properties(hubs, hub) if p]
    assert ours == [(0, 0), (0, 1), (1, 2), (1, 3), (1, 4)]
    last = output(hubs, hub)
    assert last.progress() == 5
    with pytest.raises(EventHubsAdapterError, match=r"items up to number 4 already, but items"):
        last.deliver(0, EPOCH0, 0)  # another query sending to the same partition


def test_an_output_partition_that_does_not_exist_is_named(hubs):
    out = output(hubs, new_hub(hubs, 2), partition_id="5", **QUICK)
    with pytest.raises(EventHubNotFoundError, match=r"has partitions \['0', '1'\], not '5'"):
        out.deliver(0, EPOCH0, 0)


# -- endpoint down -----------------------------------------------------------------------------


def test_no_endpoint_fails_after_the_configured_retries():
    conn = closed_port_connection_string()
    port = conn.split(":")[2].split(";")[0]
    a = EventHubInputFactory().create(
        EventHubInputConfig(connection_string=conn, schema=SCHEMA, **QUICK), EventShape.POINT
    )
    expected = rf"at sb://127\.0\.0\.1:{port} after 1 retries.*Fix: .*{{}}"
    with pytest.raises(EventHubsUnavailableError, match=expected.format("The query was not")):
        a.partitions()
    with pytest.raises(EventHubsUnavailableError, match=expected.format("This run delivers")):
        list(a.read("0", 0))  # on an executor, without a snapshot
    out = EventHubOutputFactory().create(
        EventHubOutputConfig(connection_string=conn, **QUICK), EventShape.POINT
    )
    with pytest.raises(EventHubsUnavailableError, match=expected.format("Nothing was sent")):
        out.progress()


def test_an_endpoint_that_stops_mid_read_fails_it_with_a_clear_error():
    with running_endpoint() as own:
        own.create_hub("hub", 1)
        for i in range(20):
            own.append("hub", 0, {"id": i, "v": 1.0})
        # The client reconnects silently when its connection drops: the read notices after
        # receive_timeout without events, and the retry finds nothing listening.
        a = adapter(own, "hub", max_batch_size=1, receive_timeout=timedelta(seconds=1))
        a.partitions()
        items = a.read("0", 0)
        assert next(items).offset == 0
        own.stop()
        with pytest.raises(EventHubsUnavailableError, match="from sequence number") as error:
            list(items)
    assert "Fix" in str(error.value)


@pytest.mark.parametrize("how", ["run", "step capped"])
def test_an_endpoint_that_goes_away_while_a_query_reads_fails_it_with_the_adapters_error(
    app, tmp_path, monkeypatch, how
):
    # The endpoint answers while the query is made (partitions, last sequence numbers: on the
    # driver) and is gone when the executors read the hub. A started query snapshots the last
    # sequence numbers again before each epoch: the endpoint is taken away right after that.
    # With max_offsets_per_epoch the epoch's cut is a Spark job of its own, the first to read.
    with running_endpoint() as own:
        own.create_hub("hub", 1)
        for i in range(5):
            own.append("hub", 0, {"ts": iso(i), "id": i, "v": 1.0}, enqueued_time=ENQUEUED_MS + i)
        config = input_config(own, "hub", time_field="ts", receive_timeout=timedelta(seconds=1))
        stream = Stream.create("gone", EventHubInputFactory(), config, EventShape.POINT)
        name = "gone-" + uuid.uuid4().hex[:6]
        output = MemoryOutputConfig(name=name)
        query = stream.to_query(app, name, MemoryOutputFactory(), output, EventShape.POINT)
        if how == "run":
            own.stop()
            with pytest.raises(QueryRunError) as error:
                query.run()
        else:
            snapshot = EventHubInputAdapter.latest_offsets

            def then_gone(self: EventHubInputAdapter) -> Any:
                ends = snapshot(self)
                own.stop()  # on the driver only: the executors' adapters are not patched
                return ends

            monkeypatch.setattr(EventHubInputAdapter, "latest_offsets", then_gone)
            query.start(trigger=None, checkpoint=tmp_path / "ckpt", max_offsets_per_epoch=2)
            with pytest.raises(QueryRunError) as error:
                query.step()
    message = str(error.value)
    assert message.startswith(f"query {name!r}, epoch 0: a Spark task raised ")
    assert (
        "EventHubsUnavailableError: cannot read partition '0' of event hub 'hub' from sequence "
        "number 0: no answer from event hub 'hub'"
    ) in message
    assert "Fix: check the connection string's Endpoint" in message
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


def test_three_partitions_give_what_the_memory_adapters_give_and_round_trip(app, hubs):
    source, sink = new_hub(hubs, 3), new_hub(hubs)
    # Round robin over the partitions, 10 ms apart: arrival = enqueued time.
    rows = [(p, *OUT_OF_ORDER[p][k]) for k in range(4) for p in range(3)]
    script = EventScript().declare("events", "0", "1", "2")
    for n, (p, i, s) in enumerate(rows):
        ms = ENQUEUED_MS + 10 * n
        hubs.append(source, p, {"ts": iso(s), "id": i, "v": i * 1.5}, enqueued_time=ms)
        script.insert(
            "events", point(at(s), {"id": i, "v": i * 1.5}), arrival=ms * MS, partition=str(p)
        )
    tag = uuid.uuid4().hex[:6]
    Stream.create(
        "events",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema=SCHEMA),
        EventShape.POINT,
        GENERATE,
    ).to_query(
        app,
        f"mem-{tag}",
        MemoryOutputFactory(),
        MemoryOutputConfig(name=f"mem-{tag}"),
        EventShape.POINT,
    ).run()
    expected = MemoryOutputFactory.collected(f"mem-{tag}")

    stream = Stream.create(
        "events",
        EventHubInputFactory(),
        input_config(hubs, source, time_field="ts"),
        EventShape.POINT,
        GENERATE,
    )
    sink_config = EventHubOutputConfig(connection_string=hubs.connection_string(sink))
    query = stream.to_query(
        app, f"eh-{tag}", EventHubOutputFactory(), sink_config, EventShape.POINT
    )
    query.run(epochs=2)  # another cut of the arrival sequence: the same output (semantics §4)
    got = read_back(hubs, sink)
    assert got == expected
    # By hand: the dropped ids are missing, the kept late ones (7, 10) are there; the input's
    # CTI is the minimum over partitions, so the first output CTI comes once p2 has one: after
    # id9 (p0 at 8, p1 at 1, p2 at 5) it is 1 s; the flush ends the output.
    ids = [e.payload["id"] for e in got if not e.is_cti]
    assert sorted(ids) == sorted(set(range(1, 13)) - DROPPED)
    assert got[0] == cti(at(1)) and got[-1] == cti(MAX_TIME)
    # A restarted query's output adapter learns from the hub that both epochs are there: the
    # last event is the last output item, numbered from the query's first.
    last = properties(hubs, sink)[-1]
    assert last[EPOCH_PROPERTY] == 1 and last[INDEX_PROPERTY] + 1 == last[COUNT_PROPERTY]
    assert last[COUNT_PROPERTY] == len(got)
    restarted = EventHubOutputFactory().create(sink_config, EventShape.POINT)
    assert restarted.progress() == len(got)


def test_a_malformed_event_stops_a_query_after_everything_before_it_was_delivered(app, hubs):
    source, sink = new_hub(hubs), new_hub(hubs)
    for n, body in enumerate(
        [
            {"ts": iso(1), "id": 1, "v": 1.0},
            {"ts": iso(2), "id": 2, "v": 2.0},
            b'{"ts": broken',
            {"ts": iso(4), "id": 4, "v": 4.0},
        ]
    ):
        hubs.append(source, 0, body, enqueued_time=ENQUEUED_MS + n)
    every_event = AdapterAdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
    )
    stream = Stream.create(
        "bad",
        EventHubInputFactory(),
        input_config(hubs, source, time_field="ts", advance_time=every_event),
        EventShape.POINT,
    )
    query = stream.to_query(
        app,
        "bad-" + uuid.uuid4().hex[:6],
        EventHubOutputFactory(),
        EventHubOutputConfig(connection_string=hubs.connection_string(sink)),
        EventShape.POINT,
    )
    with pytest.raises(
        MalformedRecordError, match=rf"hub '{source}', partition '0', sequence number 2"
    ):
        query.run()
    # CTIs at 1 s and 2 s were generated before the bad event and commit the event at 1 s; the
    # event at 2 s waits for a CTI after it, and there is no flush: the run failed.
    assert read_back(hubs, sink) == [cti(at(1)), point(at(1), {"id": 1, "v": 1.0}), cti(at(2))]
