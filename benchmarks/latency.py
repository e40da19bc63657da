"""Latency of a started query: enqueue into Kafka -> the output record that commits the event.

    python -m benchmarks.latency --rate 1000 --seconds 40 --warmup 10 --trigger-ms 200

Starts a Kafka-protocol broker on 127.0.0.1 (Tansu, as the tests do), a producer thread that
enqueues ``--rate`` point events per second for ``--seconds`` (event time = enqueue time, a
sequence number in the payload), and a started query (``Query.start(trigger=...)``) that reads
the topic with a CTI after every event (delay 0, so an event is committed as soon as the next one
arrives) and writes the events to an output topic. The producer starts once the query has run
two (empty) epochs: the first ones start Spark's executors and Python workers. A consumer thread
reads the output; an event's latency is the time it was read back minus the time it was
enqueued. Prints p50, p90, p99 and max over the events enqueued after ``--warmup`` seconds, and
the durations of the epochs run while producing.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from bindings import Application, Stream
from engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings, EventShape
from tests.brokers.kafka import TansuBroker


def produce(bootstrap: str, topic: str, rate: int, seconds: float, sent: dict) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    t0 = time.time()
    n = 0
    while n < rate * seconds:
        due = t0 + n / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        now = time.time()
        value = {"ts": datetime.fromtimestamp(now, UTC).isoformat(), "seq": n}
        producer.send(topic, json.dumps(value).encode(), timestamp_ms=int(now * 1000))
        sent[n] = now
        n += 1
    producer.flush()
    producer.close()


def consume(bootstrap: str, topic: str, got: dict, halt: threading.Event) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    while not halt.is_set():
        for records in consumer.poll(timeout_ms=50).values():
            now = time.time()
            for r in records:
                value = json.loads(r.value)
                if "seq" in value:
                    got.setdefault(value["seq"], now)
    consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--trigger-ms", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=1)
    args = ap.parse_args()

    epochs: list[float] = []

    class Epochs(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = getattr(record, "ctistream", None)
            if fields:
                epochs.append(fields["seconds"])

    logging.getLogger("ctistream.runtime").addHandler(Epochs())
    logging.getLogger("ctistream.runtime").setLevel(logging.INFO)

    broker = TansuBroker().start()
    try:
        source = broker.create_topic(partitions=args.partitions)
        sink = broker.create_topic()
        app = Application("latency", master="local[2]")
        every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
        config = KafkaInputConfig(
            bootstrap_servers=broker.bootstrap, topic=source, schema="seq long", time_field="ts"
        )
        stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every_event)
        out = KafkaOutputConfig(bootstrap_servers=broker.bootstrap, topic=sink)
        query = stream.to_query(app, "latency", KafkaOutputFactory(), out, EventShape.POINT)

        sent: dict[int, float] = {}
        got: dict[int, float] = {}
        halt = threading.Event()
        reader = threading.Thread(target=consume, args=(broker.bootstrap, sink, got, halt))
        reader.start()
        query.start(trigger=timedelta(milliseconds=args.trigger_ms))
        while len(epochs) < 2:  # the first epochs start Spark's executors and Python workers
            time.sleep(0.05)
        warm = len(epochs)
        t_start = time.time()
        produce(broker.bootstrap, source, args.rate, args.seconds, sent)
        deadline = time.time() + 60
        last = max(sent) - 1  # the last event is committed only by a later one
        while last not in got and time.time() < deadline:
            time.sleep(0.1)
        query.stop(flush=False)
        halt.set()
        reader.join()
    finally:
        broker.close()

    measured = [n for n in sent if sent[n] - t_start >= args.warmup and n < max(sent)]
    lat = sorted(got[n] - sent[n] for n in measured if n in got)
    missing = sum(1 for n in measured if n not in got)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))]

    print(
        f"rate {args.rate}/s for {args.seconds:.0f} s, trigger {args.trigger_ms} ms, "
        f"{args.partitions} partition(s); measured {len(lat)} events after {args.warmup:.0f} s "
        f"warm-up ({missing} not read back)"
    )
    if lat:
        print(
            f"latency s: p50 {pct(0.5):.3f}  p90 {pct(0.9):.3f}  p99 {pct(0.99):.3f}  "
            f"max {lat[-1]:.3f}"
        )
    timed = epochs[warm:]
    if timed:
        print(
            f"epochs while producing: {len(timed)}, seconds median "
            f"{statistics.median(timed):.3f}, max {max(timed):.3f} (the first {warm}, before "
            f"producing: {', '.join(f'{s:.2f}' for s in epochs[:warm])} s)"
        )


if __name__ == "__main__":
    main()
