"""A checkpoint belongs to one query and one run at a time (semantics §9: never a result lost or
doubled without a word):

* a second run on a checkpoint another run holds is refused (both would deliver every item);
* the query a checkpoint belongs to is recorded at its first start, so a changed query is
  refused also before the first state snapshot;
* an input that reads another source than the one the offsets count in (a Kafka topic deleted
  and made again: a new topic id) is refused, and a live partition that now ends before the
  offset the query reads next is an error, not "nothing new";
* a query on a new checkpoint whose output already holds items says what it does with them.

The query is test_checkpoint_damage's: a tumbling 5 s count of a Kafka topic's points (a CTI at
every point) to a JSON-lines file.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
import warnings
from datetime import timedelta

import pytest
from ctistream.adapters.eventhubs import (
    EventHubInputConfig,
    EventHubInputFactory,
)
from ctistream.adapters.files import (
    FileInputConfig,
    FileInputFactory,
    FileOutputConfig,
    FileOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings, EventShape
from ctistream.engine.errors import EngineError, QueryBuildError

from tests.adapters.test_files_query import iso, read_output, write_jsonl
from tests.brokers.eventhubs import eventhubs_endpoint  # noqa: F401 - a fixture
from tests.engine.test_checkpoint_damage import T0, _query, produce_point

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0), True))


def test_a_second_run_on_a_checkpoint_is_refused_until_the_first_stops(app, kafka_broker, tmp_path):
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck"
    first = _query(app, b, topic, out)
    first.start(trigger=None, checkpoint=ck)
    produce_point(b, topic, 1)
    first.step()
    second = _query(app, b, topic, out)  # the same query, started again while it runs
    with pytest.raises(EngineError) as got:
        second.start(trigger=None, checkpoint=ck)
    message = str(got.value)
    assert f"the checkpoint {str(ck)!r} is in use by a running query" in message
    assert (
        f"(query {first.name!r} in process" in message and "Fix: stop the running query" in message
    )
    first.stop(flush=False)
    second.start(trigger=None, checkpoint=ck)  # released by the stop
    second.stop()
    # One point at 1 s: CTI 0 s (the window [0, 5) open), then the stop's flush: [0, 5) n=1
    # and CTI +inf, each once
    kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
    assert kinds == ["CTI", "INSERT", "CTI"]


def test_a_changed_query_is_refused_before_the_first_state_snapshot(app, kafka_broker, tmp_path):
    # Two epochs, no snapshot yet (every 10 epochs), stopped without flush: the 5 s windows'
    # epochs are logged. The same query with 3 s windows would replay them into other windows.
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck"
    q = _query(app, b, topic, out)
    q.start(trigger=None, checkpoint=ck, checkpoint_every=10)
    for s in (1, 6):
        produce_point(b, topic, s)
        q.step()
    q.stop(flush=False)
    assert not any((ck / "state").iterdir())
    with pytest.raises(QueryBuildError) as got:
        _query(app, b, topic, out, size=3).start(trigger=None, checkpoint=ck)
    message = str(got.value)
    assert "a query of another shape (its record of the query)" in message
    assert "that query has 'tumbling_window 5 seconds group_by id" in message
    assert "this one 'tumbling_window 3 seconds group_by id" in message
    # the checkpoint is free again: the query that wrote it goes on
    again = _query(app, b, topic, out)
    again.start(trigger=None, checkpoint=ck)
    again.stop(flush=False)


def test_an_input_topic_made_again_is_refused_on_restart(app, kafka_broker, tmp_path):
    # Run 1 reads points at 1 and 6 s (offsets 0, 1). The topic is deleted and made again with
    # three other points: its offsets 0..2 are not those the checkpoint counted, so offset 2
    # onwards would be read and the new points at offsets 0 and 1 skipped. The topic id tells.
    from kafka import KafkaAdminClient

    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck"
    q = _query(app, b, topic, out)
    q.start(trigger=None, checkpoint=ck)
    for s in (1, 6):
        produce_point(b, topic, s)
    q.step()
    q.stop(flush=False)
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    time.sleep(0.5)
    kafka_broker.create_topic(name=topic)
    for s in (11, 12, 13):
        produce_point(b, topic, s)
    with pytest.raises(QueryBuildError) as got:
        _query(app, b, topic, out).start(trigger=None, checkpoint=ck)
    message = str(got.value)
    assert f"input 'events': source Kafka topic {topic!r} (topic id " in message
    assert "Fix: start this query with a new checkpoint directory" in message


def test_a_partition_that_ends_before_the_next_offset_is_an_error(
    app,
    eventhubs_endpoint,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    # Event Hubs: run 1 reads 3 events (sequence numbers 0..2); the hub is emptied and gets one
    # event (sequence number 0). The query reads from 3 next: the partition now ends at 1.
    hub = f"src-{uuid.uuid4().hex[:8]}"
    eventhubs_endpoint.create_hub(hub, 1)

    def append(s: int) -> None:
        ts = (T0 + timedelta(seconds=s)).isoformat()
        eventhubs_endpoint.append(hub, 0, {"ts": ts, "id": 0}, enqueued_time=T0)

    def query():
        config = EventHubInputConfig(
            connection_string=eventhubs_endpoint.connection_string(hub),
            schema="id int",
            time_field="ts",
            receive_timeout=timedelta(seconds=5),
        )
        stream = Stream.create("events", EventHubInputFactory(), config, EventShape.POINT, EVERY)
        return stream.to_query(
            app,
            f"shrunk-{uuid.uuid4().hex[:6]}",
            FileOutputFactory(),
            FileOutputConfig(path=str(tmp_path / "out.jsonl")),
            EventShape.POINT,
        )

    for s in (1, 2, 3):
        append(s)
    q = query()
    q.start(trigger=None, checkpoint=tmp_path / "ck", checkpoint_every=1)  # nothing to replay
    q.step()
    q.stop(flush=False)
    eventhubs_endpoint.create_hub(hub, 1)  # emptied
    append(4)
    again = query()
    again.start(trigger=None, checkpoint=tmp_path / "ck", checkpoint_every=1)
    with pytest.raises(EngineError) as got:
        again.step()
    message = str(got.value)
    assert f"input 'events', partition '0' of event hub {hub!r} now ends at offset 1" in message
    assert "before offset 3, which the query reads next" in message and "Fix: restore" in message
    with pytest.raises(EngineError):
        again.stop(flush=False)  # raises what stopped it; nothing was logged for the epoch


def test_a_new_checkpoint_with_an_output_that_holds_items_warns(app, kafka_broker, tmp_path):
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    out = tmp_path / "out.jsonl"
    q = _query(app, b, topic, out)
    q.start(trigger=None, checkpoint=tmp_path / "ck1")
    produce_point(b, topic, 1)
    q.step()  # 1 item: CTI 0 s
    q.stop(flush=False)
    shutil.rmtree(tmp_path / "ck1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _query(app, b, topic, out)
        again.start(trigger=None, checkpoint=tmp_path / "ck2")
    again.stop(flush=False)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any(
        "is new, but its output already holds 1 items" in m and "Fix: give the query a new" in m
        for m in said
    ), said


@pytest.mark.parametrize("change", ["replaced", "truncated", "appended"])
def test_a_file_changed_under_a_delivered_epoch_is_refused_on_restart(app, tmp_path, change):
    # Epoch 0 reads the file (points 1, 2, 3; a CTI at each start, +inf at its end) and delivers
    # them all; no snapshot yet (every 10 epochs), stopped without flush: a restart replays it.
    # Replaced (points 7, 8) or cut short (points 1, 2), the file would give that epoch other
    # items under the numbers the output holds: refused, naming the input and the epoch. Rows
    # appended (a point at 4) are new input, read after the others (test_diagnostics' restart),
    # but this input ended in epoch 0 (its CTI at +inf, committed): they would come after the
    # end, so they are refused too. (A failed epoch is replayed over the fixed file:
    # test_restart's torn line.)
    source, out, ckpt = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ck"
    write_jsonl(source, [{"ts": iso(s), "v": s} for s in (1, 2, 3)])

    def query():
        config = FileInputConfig(path=str(source), time_column="ts", schema="v double")
        stream = Stream.create("f", FileInputFactory(), config, EventShape.POINT, EVERY)
        output = FileOutputConfig(path=str(out))
        name = f"changed-{uuid.uuid4().hex[:6]}"
        return stream.to_query(app, name, FileOutputFactory(), output, EventShape.POINT)

    q = query()
    q.start(trigger=None, checkpoint=ckpt, checkpoint_every=10)
    q.step()
    q.stop(flush=False)
    delivered = read_output(out)
    assert [r[2] for r in delivered if r[0] == "INSERT"] == [{"v": 1.0}, {"v": 2.0}, {"v": 3.0}]
    rows = {"replaced": [7, 8], "truncated": [1, 2], "appended": [1, 2, 3, 4]}[change]
    write_jsonl(source, [{"ts": iso(s), "v": s} for s in rows])
    with pytest.raises(EngineError) as got:
        query().start(trigger=None, checkpoint=ckpt)
    message = str(got.value)
    assert "input 'f' changed since epoch 0 read it and delivered its output" in message
    assert "in.jsonl" in message and "Fix: restore it" in message
    assert read_output(out) == delivered
