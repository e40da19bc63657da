"""A query with a left outer join or a clip started again on its checkpoint (semantics §9): the
operator's state (held events, their progress) is in the snapshot, so a restart after a crash
delivers exactly what a run without the crash delivers, worked out by hand below."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

import pytest
from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
from ctistream.adapters.kafka import KafkaInputFactory
from ctistream.bindings import Stream
from ctistream.engine import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    EventShape,
)

from tests.adapters import test_kafka as kf
from tests.adapters.test_files_query import T0, iso
from tests.harness import killed

#: a CTI at every event's start, +inf on stop
EVERY_EVENT = AdapterAdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
)


def _query(app, op: str, bootstrap: str, topics: tuple[str, str], out):
    left, right = (
        Stream.create(
            name,
            KafkaInputFactory(),
            kf.input_config(
                bootstrap, topic, time_field="ts", end_field="te", advance_time=EVERY_EVENT
            ),
            EventShape.INTERVAL,
        )
        for name, topic in zip(("l", "r"), topics, strict=True)
    )
    return getattr(left, op)(right, on="id").to_query(
        app,
        f"{op}-{uuid.uuid4().hex[:6]}",
        FileOutputFactory(),
        FileOutputConfig(path=str(out)),
        EventShape.INTERVAL,
    )


def _record(n: int, start: float, end: float, id_: int, v: float) -> tuple:
    return (0, {"ts": iso(start), "te": iso(end), "id": id_, "v": v}, kf.ARRIVAL_MS + n, None)


#: (topic index, record) in arrival order, per epoch
EPOCHS = [
    [(0, _record(0, 0, 10, 1, 1.0)), (1, _record(1, 1, 2, 9, 9.0))],
    [(1, _record(2, 3, 6, 1, 2.0)), (0, _record(3, 20, 25, 2, 4.0))],
]


def _seconds(text: str) -> float | str:
    return text if text.endswith("inf") else (datetime.fromisoformat(text) - T0).total_seconds()


def _events(path) -> list[tuple]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        (_seconds(r["start"]), _seconds(r["end"]), r["id"], r["v"], r.get("right_v"))
        for r in rows
        if r["kind"] == "INSERT"
    ]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        # Epoch 0: l [0, 10) id 1 (cL 0), r [1, 2) id 9 (cR 1). The anti-join's part [0, ...) of
        # [0, 10) is decided at 0 < cR: a START edge, held with its progress. Epoch 1 (after the
        # restart): r [3, 6) id 1 pairs with the held [0, 10): [3, 6); cR 3; l [20, 25) id 2,
        # cL 20. The stop's CTIs at +inf end [0, 3) and release [6, 10) and [20, 25).
        (
            "left_outer_join",
            [
                (0, 3, 1, 1.0, None),
                (3, 6, 1, 1.0, 2.0),
                (6, 10, 1, 1.0, None),
                (20, 25, 2, 4.0, None),
            ],
        ),
        # Epoch 0: [0, 10) leaves as a START edge (its end 10 is not <= cR 1), held. Epoch 1:
        # r [3, 6) id 1 cuts it at 3 <= cR 3: END edge [0, 3). [20, 25) ends at +inf's CTI.
        ("clip_event_duration", [(0, 3, 1, 1.0, None), (20, 25, 2, 4.0, None)]),
    ],
)
def test_a_restart_after_a_crash_delivers_what_a_run_without_it_does(
    app, kafka_broker, tmp_path, op, expected
):
    b = kafka_broker.bootstrap

    def produce(topics, epoch):
        for i, record in EPOCHS[epoch]:
            kf.produce(b, topics[i], [record])

    topics = (kafka_broker.create_topic(), kafka_broker.create_topic())
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"
    first = _query(app, op, b, topics, out)
    first.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    produce(topics, 0)
    first.step()  # epoch 0, its state written
    killed(first)  # the next start restores epoch 0's state
    again = _query(app, op, b, topics, out)
    again.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    produce(topics, 1)
    again.step()
    again.stop()

    clean_topics = (kafka_broker.create_topic(), kafka_broker.create_topic())
    produce(clean_topics, 0)
    produce(clean_topics, 1)
    clean_out = tmp_path / "clean.jsonl"
    clean = _query(app, op, b, clean_topics, clean_out)
    clean.start(trigger=None, checkpoint=tmp_path / "clean-ckpt")
    clean.step()
    clean.stop()

    assert _events(out) == expected
    assert _events(clean_out) == expected
