"""Latency of a started query: enqueue into Kafka -> the output record that commits the event.

    python -m benchmarks.latency --rate 1000 --seconds 40 --warmup 10 --trigger-ms 200

Starts a Kafka-protocol broker on 127.0.0.1 (Tansu, as the tests do), a producer process that
enqueues ``--rate`` point events per second for ``--seconds`` (event time = enqueue time, a
sequence number in the payload), and a started query (``Query.start(trigger=...)``) that reads
the topic with a CTI after every event (delay 0, so an event is committed as soon as the next one
arrives) and writes the events to an output topic. The producer starts once the query has run
two (empty) epochs: the first ones start Spark's executors and Python workers. A consumer process
reads the output; an event's latency is the time it was read back minus the time it was
enqueued. Producer and consumer run in processes of their own: as threads of the query's driver
process they waited for its interpreter lock, which added to the latency they measured.
Prints p50, p90, p99 and max over the events enqueued after ``--warmup`` seconds, and the
durations of the epochs run while producing. ``--heap``: also the live heap after each epoch
(a long run of a query that runs until stopped: does what it keeps grow with its epochs?).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import queue
import statistics
import time
from datetime import UTC, datetime, timedelta

from ctistream.adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings, EventShape
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from benchmarks import memory
from tests.brokers.kafka import TansuBroker


def produce(
    bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: int, sent: mp.Queue
) -> None:
    """Enqueue the events; put ``{seq: enqueue time}`` on ``sent`` at the end. An event's
    enqueue time is when ``send()`` was called, so the producer's linger counts as latency."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms)
    t0 = time.time()
    n = 0
    times: dict[int, float] = {}
    while n < rate * seconds:
        due = t0 + n / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        now = time.time()
        value = {"ts": datetime.fromtimestamp(now, UTC).isoformat(), "seq": n}
        producer.send(topic, json.dumps(value).encode(), timestamp_ms=int(now * 1000))
        times[n] = now
        n += 1
    producer.flush()
    producer.close()
    sent.put((times, time.process_time()))


def consume(bootstrap: str, topic: str, got: mp.Queue, halt) -> None:
    """Read the output topic; put ``(seq, read time)`` pairs on ``got`` as they come."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    while not halt.is_set():
        for records in consumer.poll(timeout_ms=50).values():
            now = time.time()
            seqs = [json.loads(r.value).get("seq") for r in records]
            got.put([(n, now) for n in seqs if n is not None])
    consumer.close()


def kafka_query(app: Application, name: str, bootstrap: str, source: str, sink: str):
    """The measured query: points from ``source`` (a CTI after every event, delay 0), written
    to ``sink`` as they are committed."""
    every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    config = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic=source, schema="seq long", time_field="ts"
    )
    stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every_event)
    out = KafkaOutputConfig(bootstrap_servers=bootstrap, topic=sink)
    return stream.to_query(app, name, KafkaOutputFactory(), out, EventShape.POINT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--trigger-ms", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument(
        "--linger-ms",
        type=int,
        default=5,
        help="the producer's linger: 0 sends a request per event, which cost the producer "
        "process half a core of the machine's two at 1,000 events/s (counted as latency)",
    )
    ap.add_argument(
        "--heap",
        action="store_true",
        help="also the live Java heap after each epoch (a full GC each: slows the epochs; "
        "for a long run that shows whether state grows, not for latency)",
    )
    args = ap.parse_args()

    epochs: list[float] = []  # the epochs' own time (ctistream.runtime)
    steps: list[float] = []  # and with the reading and planning before it (ctistream.streaming)

    class Epochs(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = getattr(record, "ctistream", None)
            if fields and "seconds" in fields:
                epochs.append(fields["seconds"])
            elif fields and "step_seconds" in fields:
                steps.append(fields["step_seconds"])

    for name in ("ctistream.runtime", "ctistream.streaming"):
        logging.getLogger(name).addHandler(Epochs())
        logging.getLogger(name).setLevel(logging.INFO)

    broker = TansuBroker().start()
    try:
        source = broker.create_topic(partitions=args.partitions)
        sink = broker.create_topic()
        app = Application("latency", master="local[2]")
        query = kafka_query(app, "latency", broker.bootstrap, source, sink)
        heap = memory.HeapAfterEpochs(app.spark) if args.heap else None

        ctx = mp.get_context("spawn")
        got_q, sent_q, halt = ctx.Queue(), ctx.Queue(), ctx.Event()
        reader = ctx.Process(target=consume, args=(broker.bootstrap, sink, got_q, halt))
        reader.start()
        query.start(trigger=timedelta(milliseconds=args.trigger_ms))
        while len(epochs) < 2:  # the first epochs start Spark's executors and Python workers
            time.sleep(0.05)
        warm = len(epochs)
        t_start = time.time()
        writer = ctx.Process(
            target=produce,
            args=(broker.bootstrap, source, args.rate, args.seconds, args.linger_ms, sent_q),
        )
        writer.start()
        got: dict[int, float] = {}
        sent: dict[int, float] | None = None
        producer_cpu = 0.0
        deadline = None
        while True:
            try:
                for n, at in got_q.get(timeout=0.1):
                    got.setdefault(n, at)
            except queue.Empty:
                pass
            if sent is None:
                try:
                    sent, producer_cpu = sent_q.get_nowait()
                    deadline = time.time() + 60
                except queue.Empty:
                    continue
            # the last event is committed only by a later one
            if max(sent) - 1 in got or time.time() > deadline:
                break
        writer.join()
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
        f"{args.partitions} partition(s), producer linger {args.linger_ms} ms (its process used "
        f"{producer_cpu:.1f} s of CPU); measured {len(lat)} events after {args.warmup:.0f} s "
        f"warm-up ({missing} not read back)"
    )
    if lat:
        print(
            f"latency s: p50 {pct(0.5):.3f}  p90 {pct(0.9):.3f}  p99 {pct(0.99):.3f}  "
            f"max {lat[-1]:.3f}"
        )
    timed, whole = epochs[warm:], steps[warm:]
    if timed and whole:
        print(
            f"epochs while producing: {len(timed)}, seconds median "
            f"{statistics.median(timed):.3f}, max {max(timed):.3f}; with reading and planning "
            f"median {statistics.median(whole):.3f}, max {max(whole):.3f} (the first {warm}, "
            f"before producing: {', '.join(f'{s:.2f}' for s in steps[:warm])} s)"
        )
    if heap is not None and heap.samples:
        mb = [b / 2**20 for b in heap.samples]
        tenth = max(1, len(mb) // 10)
        medians = [statistics.median(mb[i : i + tenth]) for i in range(0, len(mb), tenth)]
        print(
            f"live heap after each of {len(mb)} epochs, MB: first {mb[0]:.0f}, median of each "
            f"tenth of the run {', '.join(f'{m:.0f}' for m in medians)}, max {max(mb):.0f}"
        )


if __name__ == "__main__":
    main()
