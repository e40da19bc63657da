"""A Kafka topic as a Structured Streaming source, through PySpark's Python data source API.

The native side of :mod:`benchmarks.latency`. Spark's own Kafka connector (``spark-sql-kafka``)
is a JVM package that cannot be installed on these machines (no Maven repository is reachable),
so the native query reads its topic with this source: a :class:`DataSourceStreamReader` whose
offsets are the Kafka partitions' next offsets, read on the executors with kafka-python. The
query around it is plain Structured Streaming (the micro-batch engine, its offsets log and
commit log, ``trigger(processingTime=...)``); only its Kafka I/O is Python, as the engine's is.

Register with ``spark.dataSource.register(KafkaSource)``, then
``spark.readStream.format("bench_kafka").option("bootstrap", ...).option("topic", ...).load()``:
columns ``value`` (binary), ``timestamp`` (the record's), ``partition``, ``offset``. Reads from the
beginning of the topic. Some Kafka-protocol brokers (the test broker, Tansu 0.6) answer a
ListOffsets(latest) with the base offset of the last record batch plus one: the end offsets are
confirmed with the high watermark of a fetch, as the engine's Kafka adapter does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

_POLL_MS = 100
_STALL_S = 30.0


class KafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_kafka"

    def schema(self) -> str:
        return "value binary, timestamp timestamp, partition int, offset long"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaReader(self.options["bootstrap"], self.options["topic"])


class Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        self.partition, self.start, self.end = partition, start, end


def _consumer(bootstrap: str):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)


class KafkaReader(DataSourceStreamReader):
    """Offsets ``{"<partition>": next offset}``; one input partition per Kafka partition with
    new records. The driver's consumer is kept for the query's life (the reader lives in one
    Python process on the driver); the executors make one per read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self._driver = None

    def _tps(self, consumer) -> list:
        from kafka import TopicPartition

        ids = sorted(consumer.partitions_for_topic(self.topic) or ())
        if not ids:
            raise LookupError(f"Kafka topic {self.topic!r} does not exist at {self.bootstrap}")
        return [TopicPartition(self.topic, p) for p in ids]

    def initialOffset(self) -> dict:
        if self._driver is None:
            self._driver = _consumer(self.bootstrap)
        return {str(tp.partition): 0 for tp in self._tps(self._driver)}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if self._driver is None:
            self._driver = _consumer(self.bootstrap)
        consumer = self._driver
        tps = self._tps(consumer)
        ends = {}
        for tp, end in consumer.end_offsets(tps).items():
            end = int(end)
            if end > 0:  # confirm with a fetch's high watermark
                consumer.assign([tp])
                consumer.seek(tp, end - 1)
                deadline = time.monotonic() + _STALL_S
                while consumer.highwater(tp) is None or consumer.position(tp) < end:
                    consumer.poll(timeout_ms=_POLL_MS, max_records=1)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no fetch response for {tp}")
                end = max(end, int(consumer.highwater(tp)))
            ends[str(tp.partition)] = end
        return ends

    def partitions(self, start: dict, end: dict) -> list[Range]:
        return [
            Range(int(p), int(start.get(p, 0)), int(e))
            for p, e in end.items()
            if int(e) > int(start.get(p, 0))
        ]

    def read(self, partition: Range) -> Iterator[tuple]:  # type: ignore[override]
        from kafka import TopicPartition

        tp = TopicPartition(self.topic, partition.partition)
        consumer = _consumer(self.bootstrap)
        try:
            consumer.assign([tp])
            consumer.seek(tp, partition.start)
            position = partition.start
            deadline = time.monotonic() + _STALL_S
            while position < partition.end:
                for record in consumer.poll(timeout_ms=_POLL_MS).get(tp, ()):
                    if record.offset >= partition.end:
                        return
                    position = record.offset + 1
                    at = datetime.fromtimestamp(record.timestamp / 1000, UTC)
                    yield (record.value, at, tp.partition, record.offset)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{tp}: no records from offset {position}")
        finally:
            consumer.close()

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None
