"""The query of the crash test (tests/engine/test_crash.py), and the process it runs in.

``python -m tests.engine.crash_child '<json>'`` starts two queries over one Kafka topic (one
writing to a Kafka topic, one to a JSON-lines file), each with its own checkpoint directory,
waits until both have read ``total`` events, stops them and prints ``DONE``. The parent kills
it with SIGKILL at random moments and starts it again. With ``kill_in_stop`` the child kills
itself in the middle of the first stop epoch it delivers (half of its items out). A query whose
checkpoint records its stop refuses to start (semantics §9): the child prints ``STOPPED
<query>`` and goes on with the other.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta

from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
from ctistream.adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.adapters.memory import EventScript, MemoryInputConfig, MemoryInputFactory
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    interval,
)
from ctistream.engine.errors import QueryStoppedError
from pyspark.sql import functions as F

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = 4
#: The payload of the query's output records.
OUTPUT_SCHEMA = "id int, n long, total double"


def _events(bootstrap: str, topic: str) -> Stream:
    # a CTI after every 4 events of a partition, 1 s behind its latest start, later ones dropped;
    # +inf when the query stops, so every window is released
    settings = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(4, timedelta(seconds=1), flush_on_stop=True),
        policy=AdvanceTimePolicy.DROP,
    )
    config = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic=topic, schema="id int, v double", time_field="ts"
    )
    return Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, settings)


def _reference() -> Stream:
    """One weight per key, valid for the whole run; it follows the events' CTIs (import)."""
    script = EventScript().declare("ref", "0")
    for k in range(KEYS):
        script.insert(
            "ref",
            interval(T0, T0 + timedelta(hours=1), {"id": k, "w": float(k + 1)}),
            arrival=int(T0.timestamp()) * 1_000_000,
        )
    settings = AdvanceTimeSettings(
        import_settings=AdvanceTimeImportSettings("events"), policy=AdvanceTimePolicy.ADJUST
    )
    config = MemoryInputConfig(script=script, schema="id int, w double")
    return Stream.create("ref", MemoryInputFactory(), config, EventShape.INTERVAL, settings)


def result(bootstrap: str, topic: str) -> Stream:
    joined = _events(bootstrap, topic).join(_reference(), on="id")
    return (
        joined.tumbling_window(timedelta(seconds=2))
        .group_by("id")
        .aggregate(n=F.count("*"), total=F.sum(F.col("v") * F.col("w")))
    )


def kafka_query(app, name: str, bootstrap: str, topic: str, sink: str):
    out = KafkaOutputConfig(bootstrap_servers=bootstrap, topic=sink)
    return result(bootstrap, topic).to_query(
        app, name, KafkaOutputFactory(), out, EventShape.INTERVAL
    )


def file_query(app, name: str, bootstrap: str, topic: str, path: str):
    out = FileOutputConfig(path=path)
    return result(bootstrap, topic).to_query(
        app, name, FileOutputFactory(), out, EventShape.INTERVAL
    )


def _kill_in_stop() -> None:
    """The first delivery of a stop epoch (it holds the flush's CTI at +inf) delivers half of
    its items, then kills this process and its Spark JVM (their process group)."""
    from ctistream.adapters._marked import MarkedOutputAdapter
    from ctistream.adapters.files import FileOutputAdapter

    for kind in (MarkedOutputAdapter, FileOutputAdapter):

        def deliver(self, epoch, items, first, deliver=kind.deliver):
            if any(e.is_cti and e.start == MAX_TIME for e in items):
                deliver(self, epoch, items[: len(items) // 2], first)
                os.killpg(os.getpgrp(), signal.SIGKILL)
            deliver(self, epoch, items, first)

        kind.deliver = deliver


def main(args: dict) -> None:
    from ctistream.bindings import Application

    if args.get("kill_in_stop"):
        _kill_in_stop()
    app = Application("crash-child", master="local[2]")
    b, topic = args["bootstrap"], args["topic"]
    queries = [
        (kafka_query(app, "to-kafka", b, topic, args["sink"]), args["ckpt_kafka"]),
        (file_query(app, "to-file", b, topic, args["file"]), args["ckpt_file"]),
    ]
    running = []
    for q, ckpt in queries:
        try:
            q.start(
                timedelta(milliseconds=200),
                checkpoint=ckpt,
                checkpoint_every=2,
                max_offsets_per_epoch=args["per_epoch"],
            )
        except QueryStoppedError:  # killed during or after its stop: the start completed it
            print(f"STOPPED {q.name}", flush=True)
            continue
        running.append((q, ckpt))
    queries = running
    while True:
        for q, _ in queries:
            if q.exception() is not None:
                raise q.exception()
        if all(q.metrics()["events"]["events_in"] >= args["total"] for q, _ in queries):
            break
        time.sleep(0.2)
    for q, _ in queries:
        q.stop()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
