"""A query started again on its checkpoint (semantics §9): a failed epoch is not a delivered
epoch, and a stop is recorded.

A failed epoch delivers what came before its first bad item and raises; the user fixes the cause
(rewrites the file, sets a dead letter aside for a malformed record) and starts the query again on
the same checkpoint: the epoch is replayed and the output ends up holding exactly what a clean run
writes, every item once. Each case is checked against a clean run over the fixed input and, item
by item, against the output worked out by hand.

A stop with flush ends the query for good: starting it again on its checkpoint raises the error
pinned below; ``stop(flush=False)`` leaves it resumable, and a bounded input that ended before
the stop stays ended. (A kill during the stop epoch: tests/engine/test_crash.py.)
"""

from __future__ import annotations

import json
import uuid
import warnings
from datetime import timedelta

import pytest
from ctistream.adapters.eventhubs import (
    EventHubInputFactory,
    EventHubOutputConfig,
    EventHubOutputFactory,
)
from ctistream.adapters.files import (
    FileInputConfig,
    FileInputFactory,
    FileOutputConfig,
    FileOutputFactory,
)
from ctistream.adapters.kafka import KafkaInputFactory, KafkaOutputConfig, KafkaOutputFactory
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    CtiViolationError,
    EventShape,
    MalformedRecordError,
    cti,
    point,
)
from ctistream.engine.contracts import OutputAdapter, OutputAdapterFactory
from ctistream.engine.errors import EngineError, QueryBuildError, QueryStoppedError
from ctistream.engine.runtime import _undelivered

from tests.adapters import test_eventhubs as eh
from tests.adapters import test_kafka as kf
from tests.adapters.test_files_query import iso, read_output, write_jsonl
from tests.brokers.eventhubs import (  # noqa: F401 - session fixtures
    eventhubs_connection_string,
    eventhubs_endpoint,
)

#: a CTI at every event's start, later events dropped, +inf on stop
EVERY_EVENT = AdapterAdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
)


def _tag() -> str:
    return uuid.uuid4().hex[:6]


def _file_query(app, name, path, out, **config):
    stream = Stream.create(
        name,
        FileInputFactory(),
        FileInputConfig(path=str(path), time_column="ts", schema="v double", **config),
        EventShape.POINT,
    )
    return stream.to_query(
        app,
        f"{name}-{_tag()}",
        FileOutputFactory(),
        FileOutputConfig(path=str(out)),
        EventShape.POINT,
    )


# -- a failed epoch is not a delivered epoch -----------------------------------------------------


def test_an_output_gets_the_items_it_lacks_numbered_from_the_query_s_first():
    items = [cti(1), cti(2)]  # the query's output items 3 and 4
    assert _undelivered(3, items, None) == (3, items)  # it holds nothing
    assert _undelivered(3, items, 3) == (3, items)  # items 0-2
    assert _undelivered(3, items, 4) == (4, items[1:])  # items 0-3: an epoch cut part-way
    assert _undelivered(3, items, 5) is None  # items 0-4: all of these
    assert _undelivered(3, items, 9) is None  # more: the epochs after this one skip the rest
    assert _undelivered(3, [], 3) == (3, [])  # an epoch without items is delivered empty
    assert _undelivered(3, [], 4) is None
    # an output that holds less than the epoch begins with (a new output, a lost record) gets
    # the epoch from its first item: items before it cannot be computed again
    assert _undelivered(3, items, 1) == (3, items)


class _PerEpoch(OutputAdapter):
    """An output adapter written for the per-epoch contract."""

    def deliver(self, epoch, items):
        pass

    def delivered_through(self):
        return None


class _PerEpochFactory(OutputAdapterFactory):
    def create(self, config, shape):
        return _PerEpoch()


class _PerItemInEpoch(OutputAdapter):
    """An output adapter written for the contract that counted items within an epoch."""

    def deliver(self, epoch, items):
        pass


class _PerItemInEpochFactory(OutputAdapterFactory):
    def create(self, config, shape):
        return _PerItemInEpoch()


def test_an_output_adapter_of_an_earlier_contract_is_refused_when_the_query_is_built(app, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"ts": iso(1), "v": 1}])
    stream = Stream.create(
        "old",
        FileInputFactory(),
        FileInputConfig(path=str(tmp_path / "in.jsonl"), time_column="ts", schema="v double"),
        EventShape.POINT,
    )
    with pytest.raises(QueryBuildError, match=r"_PerEpoch defines delivered_through\(\).*Fix"):
        stream.to_query(app, f"old-{_tag()}", _PerEpochFactory(), None, EventShape.POINT)
    with pytest.raises(QueryBuildError) as error:
        stream.to_query(app, f"old-{_tag()}", _PerItemInEpochFactory(), None, EventShape.POINT)
    assert str(error.value).endswith(
        "_PerItemInEpoch.deliver does not take (epoch, items, first); expected "
        "deliver(epoch, items, first) as ctistream.OutputAdapter declares it, first being the "
        "number of items[0] among the query's output items. Fix: add the parameter 'first'; an "
        "adapter that records progress records first + len(items) and returns it from "
        "progress()"
    )


def test_a_file_fixed_after_a_cti_violation_is_delivered_whole_once(app, tmp_path):
    # Explicit CTIs only, no policy. The point at 2.5 s breaks the CTI at 5 s: the epoch stops
    # there, after delivering what the CTIs at 3 s and 5 s committed (points 1, 2 | 4).
    def rows(bad: float) -> list:
        return [
            {"ts": iso(1), "v": 1},
            {"ts": iso(2), "v": 2},
            {"ts": iso(3), "c": True},
            {"ts": iso(4), "v": 4},
            {"ts": iso(5), "c": True},
            {"ts": iso(bad), "v": bad},
            {"ts": iso(6), "v": 6},
            {"ts": iso(7), "c": True},
        ]

    source, out, ckpt = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ckpt"
    write_jsonl(source, rows(2.5))
    failed = _file_query(app, "fixed", source, out, cti_column="c")
    failed.start(trigger=None, checkpoint=ckpt)
    with pytest.raises(CtiViolationError, match=r"in\.jsonl.*offset 5"):
        failed.step()
    ins = lambda s: ("INSERT", iso(s), {"v": s})  # noqa: E731
    ct = lambda s: ("CTI", iso(s), {})  # noqa: E731
    before = [ins(1), ins(2), ct(3), ins(4), ct(5)]
    assert read_output(out) == before

    # The user moves the point to 5.5 s and starts the query again on the same checkpoint: the
    # epoch is replayed and the CTI at 7 s commits 5.5 and 6, delivered after what is there.
    write_jsonl(source, rows(5.5))
    again = _file_query(app, "fixed", source, out, cti_column="c")
    again.start(trigger=None, checkpoint=ckpt)
    again.step()
    again.stop(flush=False)
    assert read_output(out) == [*before, ins(5.5), ins(6), ct(7)]

    clean_out = tmp_path / "clean.jsonl"
    clean = _file_query(app, "fixed", source, clean_out, cti_column="c")
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop(flush=False)
    assert out.read_text() == clean_out.read_text()


def test_a_file_whose_torn_last_line_is_completed_ends_in_the_replay_without_an_error(
    app, tmp_path
):
    # A CTI at each event's start, +inf at the file's end (increasing_start_time). Points 1, 2,
    # then a torn line (its writer had not finished it): the epoch delivers point 1 (committed
    # by the CTI at 2 s) and stops at the malformed record. The writer completes the line; the
    # start on the same checkpoint replays the epoch, which delivers 2 and 4 and, the file read
    # to its end, the CTI at +inf. The query ended in that replay: its output is complete, so
    # the start is not refused (it raised QueryStoppedError), and stop() has nothing to run.
    source, out, ckpt = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ckpt"

    def query():
        config = FileInputConfig(path=str(source), time_column="ts", schema="v double")
        settings = AdvanceTimeSettings.increasing_start_time()
        stream = Stream.create("torn", FileInputFactory(), config, EventShape.POINT, settings)
        output = FileOutputConfig(path=str(out))
        return stream.to_query(app, f"torn-{_tag()}", FileOutputFactory(), output, EventShape.POINT)

    write_jsonl(source, [{"ts": iso(1), "v": 1}, {"ts": iso(2), "v": 2}])
    with open(source, "a") as f:
        f.write(f'{{"ts": "{iso(4)}", "v": 4.')
    failed = query()
    failed.start(trigger=None, checkpoint=ckpt)
    with pytest.raises(MalformedRecordError):
        failed.step()
    ins = lambda s: ("INSERT", iso(s), {"v": s})  # noqa: E731
    before = read_output(out)
    assert [r for r in before if r[0] == "INSERT"] == [ins(1)]
    with open(source, "a") as f:
        f.write("0}\n")
    again = query()
    again.start(trigger=None, checkpoint=ckpt)
    again.stop()
    got = read_output(out)
    assert got[: len(before)] == before
    assert [r for r in got if r[0] == "INSERT"] == [ins(1), ins(2), ins(4)]
    assert got[-1][0] == "CTI" and got.count(got[-1]) == 1, got


def _kafka_query(app, b, source, sink, **config):
    stream = Stream.create(
        "live",
        KafkaInputFactory(),
        kf.input_config(b, source, time_field="ts", advance_time=EVERY_EVENT, **config),
        EventShape.POINT,
    )
    return stream.to_query(
        app,
        f"live-{_tag()}",
        KafkaOutputFactory(),
        KafkaOutputConfig(bootstrap_servers=b, topic=sink),
        EventShape.POINT,
    )


#: the records of the malformed-record cases: points at 1, 2, 4 and 5 s, a broken one third
BODIES = [
    {"ts": iso(1), "id": 1, "v": 1.0},
    {"ts": iso(2), "id": 2, "v": 2.0},
    b'{"ts": broken',
    {"ts": iso(4), "id": 4, "v": 4.0},
    {"ts": iso(5), "id": 5, "v": 5.0},
]


def _expected(at) -> tuple[list, list]:
    """What a failed epoch delivers, and the whole output once the malformed record is set
    aside. A CTI at every event's start commits the events before it; the stop flushes."""
    p = lambda s: point(at(s), {"id": s, "v": float(s)})  # noqa: E731
    before = [cti(at(1)), p(1), cti(at(2))]
    return before, [*before, p(2), cti(at(4)), p(4), cti(at(5)), p(5), cti(MAX_TIME)]


def test_a_kafka_epoch_stopped_by_a_malformed_record_is_completed_once_after_the_fix(
    app, kafka_broker, tmp_path
):
    b = kafka_broker.bootstrap
    source, sink, dead = (kafka_broker.create_topic() for _ in range(3))
    kf.produce(b, source, [(0, v, kf.ARRIVAL_MS + n, None) for n, v in enumerate(BODIES)])
    before, whole = _expected(kf.at)
    ckpt = tmp_path / "ckpt"

    failed = _kafka_query(app, b, source, sink)
    failed.start(trigger=None, checkpoint=ckpt)
    with pytest.raises(MalformedRecordError, match=rf"topic '{source}', partition 0, offset 2"):
        failed.step()
    assert kf.read_back(b, sink) == before

    # the fix: a dead-letter topic takes the malformed record; the same checkpoint, whose epoch
    # 0 is logged, not committed: the output's items are that epoch's, not another query's
    again = _kafka_query(app, b, source, sink, dead_letter_topic=dead)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again.start(trigger=None, checkpoint=ckpt)
    assert not [w for w in caught if "is new" in str(w.message)]
    again.stop()
    assert kf.read_back(b, sink) == whole
    # the output's records are numbered by the item's place in its epoch, each once
    marks = [
        (kf.header(r, kf.EPOCH_HEADER), kf.header(r, kf.INDEX_HEADER))
        for r in (kf.raw_records(b, sink))
    ]
    assert len(set(marks)) == len(marks) == len(whole)

    clean_sink = kafka_broker.create_topic()
    clean = _kafka_query(app, b, source, clean_sink, dead_letter_topic=kafka_broker.create_topic())
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop()
    assert kf.read_back(b, clean_sink) == whole


def _hub_query(app, hubs, source, sink, **config):
    stream = Stream.create(
        "live",
        EventHubInputFactory(),
        eh.input_config(hubs, source, time_field="ts", advance_time=EVERY_EVENT, **config),
        EventShape.POINT,
    )
    return stream.to_query(
        app,
        f"hub-{_tag()}",
        EventHubOutputFactory(),
        EventHubOutputConfig(connection_string=hubs.connection_string(sink)),
        EventShape.POINT,
    )


def test_an_event_hubs_epoch_stopped_by_a_malformed_event_is_completed_once_after_the_fix(
    app,
    eventhubs_endpoint,  # noqa: F811
    tmp_path,
):
    hubs = eventhubs_endpoint
    source, sink, dead = eh.new_hub(hubs), eh.new_hub(hubs), eh.new_hub(hubs)
    for n, body in enumerate(BODIES):
        hubs.append(source, 0, body, enqueued_time=eh.ENQUEUED_MS + n)
    before, whole = _expected(eh.at)

    failed = _hub_query(app, hubs, source, sink)
    failed.start(trigger=None, checkpoint=tmp_path / "ckpt")
    with pytest.raises(MalformedRecordError, match=rf"hub '{source}', partition '0', sequence"):
        failed.step()
    assert eh.read_back(hubs, sink) == before

    again = _hub_query(app, hubs, source, sink, dead_letter_eventhub=dead)
    again.start(trigger=None, checkpoint=tmp_path / "ckpt")
    again.stop()
    assert eh.read_back(hubs, sink) == whole
    marks = [(p[eh.EPOCH_PROPERTY], p[eh.INDEX_PROPERTY]) for p in eh.properties(hubs, sink)]
    assert len(set(marks)) == len(marks) == len(whole)


# -- a stop is recorded --------------------------------------------------------------------------


def test_a_query_stopped_with_flush_refuses_to_start_again_on_its_checkpoint(
    app, kafka_broker, tmp_path
):
    b = kafka_broker.bootstrap
    source, sink = kafka_broker.create_topic(), kafka_broker.create_topic()
    kf.produce(b, source, [(0, BODIES[n], kf.ARRIVAL_MS + n, None) for n in (0, 1)])
    ckpt = tmp_path / "ckpt"
    query = _kafka_query(app, b, source, sink)
    query.start(trigger=None, checkpoint=ckpt)
    query.step()
    query.stop()  # the input flushes: its CTI is +inf
    p = lambda s: point(kf.at(s), {"id": s, "v": float(s)})  # noqa: E731
    stopped = [cti(kf.at(1)), p(1), cti(kf.at(2)), p(2), cti(MAX_TIME)]
    assert kf.read_back(b, sink) == stopped

    # an event arriving later would break the CTI at +inf: the restart is refused, with the fix
    kf.produce(b, source, [(0, BODIES[3], kf.ARRIVAL_MS + 3, None)])
    again = _kafka_query(app, b, source, sink)
    with pytest.raises(QueryStoppedError) as error:
        again.start(trigger=None, checkpoint=ckpt)
    assert str(error.value) == (
        f"query {again.name!r}: its checkpoint {str(ckpt)!r} records a stop with flush (epoch "
        "1): the inputs that flush on stop are at CTI +inf, so every event read from now on "
        "would be dropped as a CTI violation; expected the checkpoint of a query that was not "
        "stopped, or stopped with stop(flush=False). Fix: start the query with a new checkpoint "
        "directory and a new, empty output (it reads its inputs again from their start and "
        "numbers its output items from the first), or stop it with stop(flush=False) to resume "
        "it later"
    )
    assert kf.read_back(b, sink) == stopped


def test_a_query_stopped_without_flush_resumes_delivering_nothing_twice(
    app, kafka_broker, tmp_path
):
    # A live input (Kafka) united with a bounded one (a file) that ends, and flushes, in the first
    # epoch. Stopped without flush, the query starts again on its checkpoint: the file stays
    # ended (read once: its points once), the topic is read on from where it stopped.
    b = kafka_broker.bootstrap
    source = kafka_broker.create_topic()
    table = tmp_path / "table.jsonl"
    write_jsonl(table, [{"ts": iso(0.5), "id": 0, "v": 0.5}, {"ts": iso(1.5), "id": 9, "v": 1.5}])

    def query(topic, out):
        live = Stream.create(
            "live",
            KafkaInputFactory(),
            kf.input_config(b, topic, time_field="ts", advance_time=EVERY_EVENT),
            EventShape.POINT,
        )
        bounded = Stream.create(
            "table",
            FileInputFactory(),
            FileInputConfig(
                path=str(table), time_column="ts", schema=kf.SCHEMA, advance_time=EVERY_EVENT
            ),
            EventShape.POINT,
        )
        return live.union(bounded).to_query(
            app,
            f"resume-{_tag()}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.POINT,
        )

    records = [(0, v, kf.ARRIVAL_MS + n, None) for n, v in enumerate(BODIES) if n != 2]
    kf.produce(b, source, records[:2])
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"
    first = query(source, out)
    first.start(trigger=None, checkpoint=ckpt)
    first.step()
    first.stop(flush=False)
    kf.produce(b, source, records[2:])
    again = query(source, out)
    again.start(trigger=None, checkpoint=ckpt)
    again.step()
    again.stop()

    clean_source, clean_out = kafka_broker.create_topic(), tmp_path / "clean.jsonl"
    kf.produce(b, clean_source, records)
    clean = query(clean_source, clean_out)
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop()
    got = read_output(out)
    # by hand: every point once, in start order, and the flush at the end
    assert [r[2]["id"] for r in got if r[0] == "INSERT"] == [0, 1, 9, 2, 4, 5]
    assert got[-1] == ("CTI", "+inf", {})
    assert out.read_text() == clean_out.read_text()
    assert [json.loads(line)["kind"] for line in out.read_text().splitlines()].count("CTI") > 1


def test_a_query_whose_inputs_all_ended_refuses_to_start_again_on_its_checkpoint(app, tmp_path):
    # One file input that flushes at its end: after the first epoch its CTI is +inf, so even a
    # stop without flush leaves nothing that could change the output.
    source, out, ckpt = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ckpt"
    write_jsonl(source, [{"ts": iso(1), "v": 1}])
    query = _file_query(app, "ended", source, out, advance_time=EVERY_EVENT)
    query.start(trigger=None, checkpoint=ckpt)
    query.step()
    query.stop(flush=False)
    assert read_output(out) == [
        ("CTI", iso(1), {}),
        ("INSERT", iso(1), {"v": 1}),
        ("CTI", "+inf", {}),
    ]
    again = _file_query(app, "ended", source, out, advance_time=EVERY_EVENT)
    with pytest.raises(QueryStoppedError) as error:
        again.start(trigger=None, checkpoint=ckpt)
    assert str(error.value) == (
        f"query {again.name!r}: its checkpoint {str(ckpt)!r} records that every input ended "
        "(all at CTI +inf): nothing read from now on could change the output; expected a "
        "checkpoint with an input below +inf. Fix: start the query with a new checkpoint "
        "directory and a new, empty output (it reads its inputs again from their start and "
        "numbers its output items from the first)"
    )


# -- a failed epoch is not a delivered epoch, whatever the cut of the run after the fix ----------


def _rows(fifth: float) -> list:
    """A file of explicit CTIs (no policy), its arrival stamps the row numbers 0-7. Its sixth row
    is the point at ``fifth`` seconds: 2.5 breaks the CTI at 5 s; the fix moves it to 5.5 s."""
    return [
        {"ts": iso(1), "id": 1, "v": 1.0},
        {"ts": iso(2), "id": 2, "v": 2.0},
        {"ts": iso(3), "c": True},
        {"ts": iso(4), "id": 4, "v": 4.0},
        {"ts": iso(5), "c": True},
        {"ts": iso(fifth), "id": 5, "v": fifth},
        {"ts": iso(6), "id": 6, "v": 6.0},
        {"ts": iso(7), "c": True},
    ]


def _ins(s: float, n: int) -> tuple:
    return ("INSERT", kf.at(s), {"id": n, "v": float(s)})


def _ct(s: float) -> tuple:
    return ("CTI", kf.at(s), {})


#: The output of the fixed file, worked by hand: each CTI releases the points before it, then
#: itself; the file's CTIs are explicit only, so its end adds none. Items 0-4 are those a run
#: over the broken file delivers before it raises (the point at 2.5 s is behind the CTI at 5 s).
WHOLE = [_ins(1, 1), _ins(2, 2), _ct(3), _ins(4, 4), _ct(5), _ins(5.5, 5), _ins(6, 6), _ct(7)]


class _Sink:
    """One output of a kind (file, Kafka topic, event hub) made fresh for a test: its factory and
    config, and its content read back as ``(kind, start ticks, payload)``."""

    def __init__(self, kind: str, request, tmp_path) -> None:
        self.kind = kind
        if kind == "files":
            path = tmp_path / f"out-{_tag()}.jsonl"
            self.factory, self.config = FileOutputFactory(), FileOutputConfig(path=str(path))
            self.read = lambda: [(k, _ticks(t), p) for k, t, p in read_output(path)]
        elif kind.startswith("kafka"):
            broker = request.getfixturevalue("kafka_broker")
            b, topic = broker.bootstrap, broker.create_topic()
            self.factory = KafkaOutputFactory()
            self.config = KafkaOutputConfig(
                bootstrap_servers=b, topic=topic, include_ctis=kind == "kafka"
            )
            self.read = lambda: [_row(e) for e in kf.read_back(b, topic)]
        else:
            hubs = request.getfixturevalue("eventhubs_endpoint")
            hub = eh.new_hub(hubs)
            self.factory = EventHubOutputFactory()
            self.config = EventHubOutputConfig(connection_string=hubs.connection_string(hub))
            self.read = lambda: [_row(e) for e in eh.read_back(hubs, hub)]

    def query(self, app, source):
        stream = Stream.create(
            "cut",
            FileInputFactory(),
            FileInputConfig(path=str(source), time_column="ts", schema=kf.SCHEMA, cti_column="c"),
            EventShape.POINT,
        )
        return stream.to_query(app, f"cut-{_tag()}", self.factory, self.config, EventShape.POINT)

    def expected(self, items: list) -> list:
        return items if self.kind != "kafka-no-ctis" else [i for i in items if i[0] != "CTI"]


def _ticks(text: str) -> int:
    from datetime import datetime

    from ctistream.engine.temporal import to_ticks

    return MAX_TIME if text == "+inf" else to_ticks(datetime.fromisoformat(text))


def _row(event) -> tuple:
    return (event.kind.value, event.start, dict(event.payload) if not event.is_cti else {})


#: How the run after the fix is cut against the failed run. Each cut is a branch of the engine's
#: numbering of what an output holds, the same for every kind of output; each kind recovers what
#: it holds its own way. Files and Kafka (with CTIs) run all three cuts; the other kinds the cut
#: that once lost items.
CUTS = {
    # More epochs. Failed: [0, 3) gives items 0-2 (points 1, 2, CTI 3), [3, 8) items 3-4 and
    # raises. Again: [0, 1) nothing, [1, 4) items 0-2, [4, 6) items 3-4 (point 4, CTI 5),
    # [6, 9) items 5-7: the output holds 5, so the first two epochs with items deliver
    # nothing and the last delivers all three (per epoch, epoch 1 gave CTI 3 again and
    # epoch 2 points 4 and CTI 5 again).
    "more-epochs": ([3], [1, 4, 6]),
    # Fewer epochs. Failed as above; again one epoch of items 0-7: the first 5 are held,
    # items 5-7 delivered (per epoch, epoch 0 < 1 was taken as delivered: 5-7 lost).
    "fewer-epochs": ([3], 1),
    # A replayed epoch shorter than what the output holds. Failed: one epoch, items 0-4.
    # Again: [0, 3) items 0-2, all held; the 2 more held carry into [3, 8), items 3-7,
    # which delivers 5-7 (per epoch: 5 held of an epoch 0 of 3 items was an error).
    "shorter-epoch": (1, [3]),
}


@pytest.mark.parametrize(
    ("kind", "failed", "again"),
    [
        *[
            pytest.param(kind, *cuts, id=f"{cut}-{kind}")
            for kind in ("files", "kafka")
            for cut, cuts in CUTS.items()
        ],
        *[
            pytest.param(kind, *CUTS["fewer-epochs"], id=f"fewer-epochs-{kind}")
            for kind in ("kafka-no-ctis", "eventhubs")
        ],
    ],
)
def test_a_run_after_the_fix_cut_otherwise_delivers_each_item_once(
    app, request, tmp_path, kind, failed, again
):
    sink = _Sink(kind, request, tmp_path)
    source = tmp_path / "in.jsonl"
    write_jsonl(source, _rows(2.5))
    with pytest.raises(CtiViolationError, match=r"in\.jsonl.*offset 5"):
        sink.query(app, source).run(epochs=failed)
    assert sink.read() == sink.expected(WHOLE[:5])

    write_jsonl(source, _rows(5.5))
    sink.query(app, source).run(epochs=again)
    assert sink.read() == sink.expected(WHOLE)

    clean = _Sink(kind, request, tmp_path)
    clean.query(app, source).run(epochs=1)
    assert clean.read() == sink.read()


def test_an_output_holding_more_than_the_run_computed_again_gives_is_an_error(app, tmp_path):
    # The fixed file's run delivers items 0-7. The file cut back to its first five rows (through
    # the CTI at 5 s) gives items 0-4 only: the output holds 3 the run does not compute.
    sink = _Sink("files", None, tmp_path)
    source = tmp_path / "in.jsonl"
    write_jsonl(source, _rows(5.5))
    sink.query(app, source).run(epochs=1)
    write_jsonl(source, _rows(5.5)[:5])
    query = sink.query(app, source)
    with pytest.raises(EngineError) as error:
        query.run(epochs=[3])
    assert str(error.value) == (
        f"query {query.name!r}: its output holds 8 items, but the query computed again gives 5; "
        "expected at most 5 (a query computed again gives the same items up to where it "
        "failed, however it is cut into epochs). The input was changed before that point, or "
        "the output holds the items of another query or run. Fix: restore the input as it was "
        "up to the item that failed, or give the query a new output (and a new checkpoint "
        "directory)"
    )
    assert sink.read() == WHOLE


def test_a_started_query_that_reads_other_offsets_per_epoch_after_the_fix_delivers_each_once(
    app, kafka_broker, tmp_path
):
    # Failed: the records arrive while the query runs. Epoch 0 reads the point at 1 s (its CTI
    # at 1 s: item 0), epoch 1 the point at 2 s (the point at 1 s, the CTI at 2 s: items 1-2),
    # epoch 2 the rest, and raises at the malformed record. Fixed (a dead-letter topic), the
    # query starts again on a new checkpoint over the same output and reads all five records in
    # one epoch: items 0-6, then the stop's flush, item 7. The output holds 3: epoch 0 skips
    # them and delivers items 3-6 (per epoch, epoch 0 was taken as delivered whole, being before
    # epoch 1, which the output held items of: items 3-7 were lost).
    b = kafka_broker.bootstrap
    source, sink, dead = (kafka_broker.create_topic() for _ in range(3))
    records = [(0, v, kf.ARRIVAL_MS + n, None) for n, v in enumerate(BODIES)]
    before, whole = _expected(kf.at)

    failed = _kafka_query(app, b, source, sink)
    failed.start(trigger=None, checkpoint=tmp_path / "ckpt")
    kf.produce(b, source, records[:1])
    failed.step()
    kf.produce(b, source, records[1:2])
    failed.step()
    kf.produce(b, source, records[2:])
    with pytest.raises(MalformedRecordError, match=rf"topic '{source}', partition 0, offset 2"):
        failed.step()
    assert kf.read_back(b, sink) == before
    epochs = [int(kf.header(r, kf.EPOCH_HEADER)) for r in kf.raw_records(b, sink)]
    assert epochs == [0, 1, 1]

    again = _kafka_query(app, b, source, sink, dead_letter_topic=dead)
    again.start(trigger=None, checkpoint=tmp_path / "new-ckpt")
    again.step()
    again.stop()
    assert kf.read_back(b, sink) == whole
    numbers = [int(kf.header(r, kf.INDEX_HEADER)) for r in kf.raw_records(b, sink)]
    assert numbers == list(range(len(whole)))
