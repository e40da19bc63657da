"""Where a started query's step goes: a Kafka -> Kafka query stepped by hand.

    python -m benchmarks.steps --steps 40 --per-step 800

The query of ``benchmarks/latency.py`` (a CTI after every event, the events written to an output
topic), started with ``trigger=None``. Before each step this process enqueues ``--per-step``
events (1 ms apart) and waits for them, so every step reads the same amount and nothing else
runs beside it (no producer or consumer process, as in the latency run). Prints, over the steps
after ``--warm``, the median and mean of each part of a step (the engine's functions, timed
from outside), the full garbage collections of the driver, and per step how many pieces of code
Spark compiled, how many Spark jobs ran and how many DataFrames the driver made (each new
DataFrame is analysed by Spark on the driver: 4-8 ms on this machine's two cores).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections import defaultdict
from datetime import UTC, datetime

import ctistream.adapters._marked as marked
import ctistream.engine.egress as egress
import ctistream.engine.ingress as ingress
import ctistream.engine.runtime as runtime
import ctistream.engine.streaming as streaming
from ctistream.bindings import Application
from kafka import KafkaProducer
from pyspark.sql.classic import dataframe

from benchmarks.latency import kafka_query
from tests.brokers.kafka import TansuBroker

#: seconds per part, for the steps after the warm-up
PARTS: dict[str, list[float]] = defaultdict(list)
_measuring = [False]

#: (label, module or class, attribute) of the functions timed
TIMED = [
    ("plan (end offsets)", streaming.Streamer, "_plan"),
    ("read (plans)", runtime.Runtime, "_read_all"),
    ("ingress", runtime, "ingress_epoch"),
    ("  its state job", ingress, "_collect_state"),
    ("egress", runtime, "egress_epoch"),
    ("  its collect", egress, "_collect_rows"),
    ("delivery", marked.MarkedOutputAdapter, "deliver"),
    ("release", streaming, "release"),
    ("whole step", streaming.Streamer, "step"),
]


def _timed(label: str, where: object, name: str) -> None:
    inner = getattr(where, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            if _measuring[0]:
                PARTS[label].append(time.perf_counter() - t0)

    setattr(where, name, timed)


def _count_dataframes() -> list[int]:
    """Count the DataFrames made from now on (one element: the count)."""
    made = [0]
    init = dataframe.DataFrame.__init__

    def counted(self, *args, **kwargs):
        made[0] += 1
        init(self, *args, **kwargs)

    dataframe.DataFrame.__init__ = counted  # type: ignore[method-assign]
    return made


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _on_gc.t0 = time.perf_counter()  # type: ignore[attr-defined]
    elif info["generation"] == 2 and _measuring[0]:
        PARTS["driver full collections"].append(time.perf_counter() - _on_gc.t0)  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--per-step", type=int, default=800)
    args = ap.parse_args()
    for label, where, name in TIMED:
        _timed(label, where, name)
    gc.callbacks.append(_on_gc)
    made = _count_dataframes()

    broker = TansuBroker().start()
    try:
        source, sink = broker.create_topic(), broker.create_topic()
        app = Application("steps", master="local[2]")
        query = kafka_query(app, "steps", broker.bootstrap, source, sink)
        compiled = app.spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
        compilations = compiled.METRIC_COMPILATION_TIME()
        tracker = app.spark.sparkContext.statusTracker()
        per_step: dict[str, list[int]] = defaultdict(list)
        query.start(trigger=None)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        t0, n = time.time(), 0
        for k in range(args.warm + args.steps):
            for _ in range(args.per_step):
                at = t0 + n / 1000
                value = {"ts": datetime.fromtimestamp(at, UTC).isoformat(), "seq": n}
                producer.send(source, json.dumps(value).encode(), timestamp_ms=int(at * 1000))
                n += 1
            producer.flush()
            _measuring[0] = k >= args.warm
            before = compilations.getCount(), max(tracker.getJobIdsForGroup(), default=-1)
            frames = made[0]
            query.step()
            if _measuring[0]:
                per_step["compilations"].append(compilations.getCount() - before[0])
                jobs = [j for j in tracker.getJobIdsForGroup() if j > before[1]]
                per_step["Spark jobs"].append(len(jobs))
                per_step["DataFrames made"].append(made[0] - frames)
        _measuring[0] = False
        producer.close()
        query.stop(flush=False)
    finally:
        broker.close()

    print(f"{args.steps} steps of {args.per_step} events after {args.warm} warm-up steps, ms:")
    for label in [t[0] for t in TIMED] + ["driver full collections"]:
        xs = PARTS.get(label, [])
        if xs:
            print(
                f"  {label:24s} median {statistics.median(xs) * 1000:7.1f}  mean "
                f"{statistics.mean(xs) * 1000:7.1f}  ({len(xs)} calls, {sum(xs):.2f} s in all)"
            )
    for what, counts in per_step.items():
        print(f"  {what} per step: median {statistics.median(counts)}, max {max(counts)}")


if __name__ == "__main__":
    main()
