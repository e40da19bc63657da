"""Latency of a started query, the engine's and native Structured Streaming's side by side.

    python -m benchmarks.latency --rate 1000 --seconds 60 --warmup 30 --trigger-ms 200
    python -m benchmarks.latency --scenario lookup --rate 1000 --seconds 60 --warmup 30

Starts a Kafka-protocol broker on 127.0.0.1 (Tansu, as the tests do) and, in this one process and
SparkSession, runs each side in turn (``--sides``, default the engine first) over topics of its
own: a producer process enqueues ``--rate`` events per second for ``--seconds`` (event time =
enqueue time, a sequence number, a key of 100 and a value in the payload), the started query
reads them with a ``--trigger-ms`` trigger and writes its output to another topic, and a consumer
process reads that back. Producer and consumer run in processes of their own: as threads of the
query's driver process they waited for its interpreter lock, which added to the latency they
measured. The producer starts once the query has run its first (empty) epochs or batch: the
first ones start Spark's executors and Python workers.

Scenarios (``--scenario``):

* ``pass``: the events straight through. Engine: a Kafka input with a CTI after every event
  (delay 0, so an event is committed as soon as the next one arrives) to a Kafka output. Native:
  the topic read, each record's JSON parsed and written again. An event's latency is the time
  it was read back minus the time it was enqueued.
* ``lookup``: the events joined on ``key`` with a reference of 100 keys (one START edge each,
  written to a Parquet file at the start, read by the engine's file input with the events'
  CTIs imported, ADJUST; native: a stream-static join with the same file), then a hopping
  window of 1 s every 200 ms averaging ``v`` per key. A window can be released once an event
  timed at or after its end arrives, which is enqueued at its end (events are enqueued 1/rate
  apart, with event time = enqueue time), so a window's latency is the time it was read back
  minus its end. The engine releases it in the epoch whose CTI passes its end; native Structured
  Streaming (watermark delay 0, append mode) in the batch after the one whose events moved the
  watermark past its end, which it runs at once (a no-data batch).

The native side reads and writes Kafka with kafka-python: Spark's JVM Kafka connector
(``spark-sql-kafka``) cannot be installed on these machines (no Maven repository is reachable),
so the native query's source is PySpark's Python data source API (:mod:`benchmarks.kafka_source`,
the records read on the executors) and its sink a ``foreachBatch`` function that collects the
batch and sends it with one kafka-python producer on the driver, as the engine's Kafka output
adapter does. Its micro-batch engine (offsets and commit logs, triggers, state store) is Spark's
own; its Kafka I/O is Python, as the engine's is, so the comparison is of the two engines, not of
the two Kafka clients. Native Spark with its JVM connector would read on the executors without
Python workers, and write from them.

Prints, per side: p50, p90, p99 and max over the events (windows) after ``--warmup`` seconds;
the steps (engine epochs with their reading and planning; native: the micro-batches'
``triggerExecution``) and their own time (the engine's epoch; native: ``addBatch``, the batch's
execution and sink), medians and max while producing; and the Spark jobs per step while
producing (median and max; counted with the status tracker by job group, :mod:`benchmarks.jobs`).
Then one line per side with p50 and p99 side by side. ``--heap``: also the live heap after each
engine epoch (a long run of a query that runs until stopped: does what it keeps grow?).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import queue
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from ctistream.adapters.files import FileInputConfig, FileInputFactory
from ctistream.adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pyspark.sql import functions as F

from benchmarks import memory
from benchmarks.jobs import JobCount, steady
from benchmarks.kafka_source import KafkaSource
from tests.brokers.kafka import TansuBroker

KEYS = 100
WINDOW = timedelta(seconds=1)
HOP = timedelta(milliseconds=200)
SCHEMA = {"pass": "seq long", "lookup": "seq long, key long, v double"}  # the payload read
SIDES = ("engine", "native")


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
        ts = datetime.fromtimestamp(now, UTC).isoformat()
        value = {"ts": ts, "seq": n, "key": n % KEYS, "v": (n % 1000) / 10}
        producer.send(topic, json.dumps(value).encode(), timestamp_ms=int(now * 1000))
        times[n] = now
        n += 1
    producer.flush()
    producer.close()
    sent.put((times, time.process_time()))


def consume(bootstrap: str, topic: str, got: mp.Queue, halt) -> None:
    """Read the output topic; put ``(seq, read time)`` pairs (pass-through events) and
    ``(-1, window end, read time)`` triples (windows) on ``got`` as they come."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    while not halt.is_set():
        for records in consumer.poll(timeout_ms=50).values():
            now = time.time()
            out = []
            for r in records:
                fields = json.loads(r.value)
                if "seq" in fields:
                    out.append((fields["seq"], now))
                elif "end" in fields and "key" in fields:
                    end = datetime.fromisoformat(fields["end"]).timestamp()
                    out.append((-1, end, now))
            got.put(out)
    consumer.close()


def reference_file(root: str) -> str:
    """The lookup scenario's reference: a START edge per key, an hour before now (EDGE-shaped
    as ``adapters.files`` reads it; arriving at its event time)."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    table = pa.table(
        {
            "key": pa.array(range(KEYS), type=pa.int64()),
            "w": pa.array([k / 10 for k in range(KEYS)], type=pa.float64()),
            "start": pa.array([start] * KEYS, type=pa.timestamp("us", tz="UTC")),
            "end": pa.array([None] * KEYS, type=pa.timestamp("us", tz="UTC")),
            "edge": pa.array(["start"] * KEYS),
            "arrival": pa.array([start] * KEYS, type=pa.timestamp("us", tz="UTC")),
        }
    )
    path = str(Path(root) / "ref.parquet")
    pq.write_table(table, path)
    return path


def kafka_query(
    app: Application,
    name: str,
    bootstrap: str,
    source: str,
    sink: str,
    scenario: str = "pass",
    ref_path: str | None = None,
):
    """The engine's query: points from ``source`` (a CTI after every event, delay 0), written
    to ``sink`` as they are committed (``pass``), or joined with the reference and windowed
    (``lookup``)."""
    every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    config = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic=source, schema=SCHEMA[scenario], time_field="ts"
    )
    stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every_event)
    out = KafkaOutputConfig(bootstrap_servers=bootstrap, topic=sink)
    if scenario == "pass":
        return stream.to_query(app, name, KafkaOutputFactory(), out, EventShape.POINT)
    assert ref_path is not None
    windows = lookup_windows(stream, ref_path)
    return windows.to_query(app, name, KafkaOutputFactory(), out, EventShape.INTERVAL)


def lookup_windows(stream: Stream, ref_path: str) -> Stream:
    """The ``lookup`` scenario's result: ``stream`` (the points, named ``events``) joined with
    the reference at ``ref_path`` (EDGE file input importing the points' CTIs, ADJUST), then
    the hopping average of ``v`` per key."""
    ref_config = FileInputConfig(
        path=ref_path,
        time_column="start",
        end_column="end",
        edge_column="edge",
        arrival_column="arrival",
        schema="key bigint, w double",
    )
    imported = AdvanceTimeSettings(
        import_settings=AdvanceTimeImportSettings("events"), policy=AdvanceTimePolicy.ADJUST
    )
    ref = Stream.create("ref", FileInputFactory(), ref_config, EventShape.EDGE, imported)
    return (
        stream.join(ref, on="key")
        .hopping_window(WINDOW, HOP)
        .group_by("key")
        .aggregate(avg_v=F.avg("v"))
    )


def _interval(span: timedelta) -> str:
    return f"{span // timedelta(milliseconds=1)} milliseconds"


def _last_end(at: float) -> float:
    """The end of the last window that an event enqueued at ``at`` releases."""
    hop = HOP.total_seconds()
    return math.floor(at / hop + 1e-9) * hop


@dataclass
class Side:
    """What one side's run recorded: per step (engine epoch, native micro-batch), in order."""

    label: str
    warm: int  # steps run before the producer started
    steps: list[float] = field(default_factory=list)  # whole step, seconds
    own: list[float] = field(default_factory=list)  # its epoch / addBatch, seconds
    jobs: JobCount | None = None


class EngineSide:
    label = "engine"
    warm = 2  # the first epochs start Spark's executors and Python workers

    def __init__(self, app: Application, args, bootstrap, source, sink, ref_path) -> None:
        self.query = kafka_query(
            app, "latency-engine", bootstrap, source, sink, args.scenario, ref_path
        )
        self.trigger = timedelta(milliseconds=args.trigger_ms)
        self.record = Side(self.label, self.warm)
        self.jobs = JobCount(app.spark.sparkContext, None)  # the query's thread sets no group
        self.heap = memory.HeapAfterEpochs(app.spark) if args.heap else None
        EngineLog.current = self

    def on_record(self, fields: dict) -> None:
        if "seconds" in fields:  # the epoch's own time (ctistream.runtime)
            self.record.own.append(fields["seconds"])
        elif "step_seconds" in fields:  # and with the reading and planning (ctistream.streaming)
            self.record.steps.append(fields["step_seconds"])
            self.jobs.mark()

    def start(self) -> None:
        self.query.start(trigger=self.trigger)

    def done(self) -> int:
        return len(self.record.steps)

    def stop(self) -> Side:
        self.query.stop(flush=False)
        EngineLog.current = None
        self.record.jobs = self.jobs
        return self.record


class EngineLog(logging.Handler):
    """Hands the engine's per-epoch and per-step log records to the side being run."""

    current: EngineSide | None = None

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "ctistream", None)
        if fields and EngineLog.current is not None:
            EngineLog.current.on_record(fields)


class NativeSide:
    """The nearest native query: Structured Streaming over :mod:`benchmarks.kafka_source`, a
    ``foreachBatch`` sink writing each batch's rows with one kafka-python producer."""

    label = "native"
    warm = 1  # batch 0 (no data) runs at the start; later ones only when data comes

    def __init__(self, spark, args, bootstrap, source, sink, ref_path) -> None:
        self.spark, self.args, self.bootstrap, self.sink = spark, args, bootstrap, sink
        self.source, self.ref_path = source, ref_path
        self.record = Side(self.label, self.warm)
        self.jobs: JobCount | None = None
        self.batches: list[int] = []
        self.producer: KafkaProducer | None = None
        self.checkpoint = tempfile.TemporaryDirectory(prefix="latency-native-")

    def _frame(self):
        read = (
            self.spark.readStream.format(KafkaSource.name())
            .option("bootstrap", self.bootstrap)
            .option("topic", self.source)
            .load()
        )
        schema = f"ts string, {SCHEMA[self.args.scenario]}"
        fields = F.from_json(F.col("value").cast("string"), schema)
        events = read.select(fields.alias("e")).select("e.*")
        if self.args.scenario == "pass":
            return events.select(F.to_json(F.struct("seq", "ts")).alias("value"))
        ref = self.spark.read.parquet(self.ref_path).select("key", "w")
        timed = events.withColumn("ts", F.col("ts").cast("timestamp"))
        timed = timed.withWatermark("ts", "0 seconds")
        window = F.window("ts", _interval(WINDOW), _interval(HOP))
        agg = timed.join(ref, "key").groupBy(window, "key").agg(F.avg("v").alias("avg_v"))
        value = F.struct(
            F.col("window.start").alias("start"), F.col("window.end").alias("end"), "key", "avg_v"
        )
        return agg.select(F.to_json(value).alias("value"))

    def _deliver(self, batch, batch_id: int) -> None:
        if self.producer is None:
            self.producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        for row in batch.collect():
            self.producer.send(self.sink, row.value.encode())
        self.producer.flush()
        if self.jobs is None:  # the query's job group: this batch's thread's
            self.jobs = JobCount.of_current_thread(self.spark.sparkContext)
        self.jobs.mark()
        self.batches.append(batch_id)

    def start(self) -> None:
        # keep every batch's progress (the default keeps the last 100)
        self.spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        self.query = (
            self._frame()
            .writeStream.queryName("latency_native")
            .outputMode("append")
            .foreachBatch(self._deliver)
            .option("checkpointLocation", self.checkpoint.name)
            .trigger(processingTime=f"{self.args.trigger_ms} milliseconds")
            .start()
        )

    def done(self) -> int:
        return len(self.batches)

    def stop(self) -> Side:
        self.query.stop()
        by_batch = {
            p["batchId"]: p["durationMs"]
            for p in self.query.recentProgress
            if "addBatch" in p.get("durationMs", {})
        }
        for b in self.batches:
            ms = by_batch.get(b, {})
            self.record.steps.append(ms.get("triggerExecution", float("nan")) / 1000)
            self.record.own.append(ms.get("addBatch", float("nan")) / 1000)
        self.record.jobs = self.jobs
        if self.producer is not None:
            self.producer.close()
        self.checkpoint.cleanup()
        return self.record


@dataclass
class Measured:
    side: Side
    latencies: list[float]
    missing: int
    producer_cpu: float
    heap: list[int] = field(default_factory=list)


def measure(side, broker: TansuBroker, source: str, sink: str, args) -> Measured:
    """Run one side: consumer, query, its warm-up steps, producer; until the last event
    (window) is read back or a minute after the producer finished."""
    ctx = mp.get_context("spawn")
    got_q, sent_q, halt = ctx.Queue(), ctx.Queue(), ctx.Event()
    reader = ctx.Process(target=consume, args=(broker.bootstrap, sink, got_q, halt))
    reader.start()
    side.start()
    started = time.time()
    while side.done() < side.warm and time.time() < started + 120:
        time.sleep(0.05)
    warm = side.done()
    writer = ctx.Process(
        target=produce,
        args=(broker.bootstrap, source, args.rate, args.seconds, args.linger_ms, sent_q),
    )
    writer.start()
    got: dict[int, float] = {}
    windows: dict[float, list[float]] = {}
    sent: dict[int, float] | None = None
    producer_cpu = 0.0
    deadline = None
    while True:
        try:
            for item in got_q.get(timeout=0.1):
                if item[0] >= 0:
                    got.setdefault(item[0], item[1])
                else:
                    windows.setdefault(item[1], []).append(item[2])
        except queue.Empty:
            pass
        if sent is None:
            try:
                sent, producer_cpu = sent_q.get_nowait()
                deadline = time.time() + 60
            except queue.Empty:
                continue
        last = max(sent)
        if args.scenario == "pass":
            done = last - 1 in got  # the last event is committed only by a later one
        else:
            done = max(windows, default=0.0) >= _last_end(sent[last]) - 1e-6
        if done or time.time() > deadline:
            break
    writer.join()
    record = side.stop()
    halt.set()
    reader.join()
    record.warm = warm
    assert sent is not None
    t_measured = min(sent.values()) + args.warmup  # from the first event enqueued
    if args.scenario == "pass":
        measured = [n for n in sent if sent[n] >= t_measured and n < max(sent)]
        lat = sorted(got[n] - sent[n] for n in measured if n in got)
        missing = sum(1 for n in measured if n not in got)
    else:
        last_end = _last_end(sent[max(sent)]) + 1e-6
        ends = [e for e in windows if t_measured <= e <= last_end]
        lat = sorted(t - e for e in ends for t in windows[e])
        missing = 0
    heap = getattr(side, "heap", None)
    return Measured(record, lat, missing, producer_cpu, heap.samples if heap else [])


def pct(lat: list[float], p: float) -> float:
    return lat[min(len(lat) - 1, int(p * len(lat)))]


def report(m: Measured, args) -> None:
    s = m.side
    what = "events" if args.scenario == "pass" else "window results"
    print(
        f"{s.label}: measured {len(m.latencies)} {what} after {args.warmup:.0f} s warm-up"
        + (f" ({m.missing} not read back)" if args.scenario == "pass" else "")
        + f"; the producer process used {m.producer_cpu:.1f} s of CPU"
    )
    lat = m.latencies
    if lat:
        print(
            f"  latency s: p50 {pct(lat, 0.5):.3f}  p90 {pct(lat, 0.9):.3f}  "
            f"p99 {pct(lat, 0.99):.3f}  max {lat[-1]:.3f}"
        )
    step, one = ("epochs", "epoch") if s.label == "engine" else ("micro-batches", "micro-batch")
    whole, own = s.steps[s.warm :], s.own[s.warm :]
    if whole and own:
        own_label = "the epoch alone" if s.label == "engine" else "addBatch"
        print(
            f"  {step} while producing: {len(whole)}, seconds median "
            f"{statistics.median(whole):.3f}, max {max(whole):.3f}; {own_label} median "
            f"{statistics.median(own):.3f}, max {max(own):.3f} (the first {s.warm}, before "
            f"producing: {', '.join(f'{x:.2f}' for x in s.steps[: s.warm])} s)"
        )
    if s.jobs is not None:
        print(f"  Spark jobs per {one} while producing: {steady(s.jobs, s.warm)}")
    if m.heap:
        mb = [b / 2**20 for b in m.heap]
        tenth = max(1, len(mb) // 10)
        medians = [statistics.median(mb[i : i + tenth]) for i in range(0, len(mb), tenth)]
        print(
            f"  live heap after each of {len(mb)} epochs, MB: first {mb[0]:.0f}, median of each "
            f"tenth of the run {', '.join(f'{m:.0f}' for m in medians)}, max {max(mb):.0f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=("pass", "lookup"), default="pass")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
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
        help="also the live Java heap after each engine epoch (a full GC each: slows the "
        "epochs; for a long run that shows whether state grows, not for latency)",
    )
    args = ap.parse_args()

    for name in ("ctistream.runtime", "ctistream.streaming"):
        logging.getLogger(name).addHandler(EngineLog())
        logging.getLogger(name).setLevel(logging.INFO)

    results: list[Measured] = []
    broker = TansuBroker().start()
    try:
        app = Application("latency", master="local[2]")
        app.spark.dataSource.register(KafkaSource)
        with tempfile.TemporaryDirectory(prefix="latency-ref-") as root:
            ref_path = reference_file(root) if args.scenario == "lookup" else None
            for label in args.sides:
                source = broker.create_topic(partitions=args.partitions)
                sink = broker.create_topic()
                if label == "engine":
                    side = EngineSide(app, args, broker.bootstrap, source, sink, ref_path)
                else:
                    side = NativeSide(app.spark, args, broker.bootstrap, source, sink, ref_path)
                results.append(measure(side, broker, source, sink, args))
    finally:
        broker.close()

    print(
        f"scenario {args.scenario}: rate {args.rate}/s for {args.seconds:.0f} s, trigger "
        f"{args.trigger_ms} ms, {args.partitions} partition(s), producer linger "
        f"{args.linger_ms} ms; sides run one after the other in one SparkSession, in this order"
    )
    for m in results:
        report(m, args)
    print("side by side, latency s (p50 / p99), step median s, Spark jobs per step median / max:")
    for m in results:
        s, lat = m.side, m.latencies
        whole = s.steps[s.warm :]
        jobs = s.jobs.counts[s.warm :] if s.jobs else []
        cells = [f"{pct(lat, 0.5):.3f} / {pct(lat, 0.99):.3f}" if lat else "n/a"]
        cells.append(f"{statistics.median(whole):.3f}" if whole else "n/a")
        cells.append(f"{statistics.median(jobs):g} / {max(jobs)}" if jobs else "n/a")
        print(f"  {s.label:7s} {'  '.join(cells)}")


if __name__ == "__main__":
    main()
