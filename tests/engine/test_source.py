"""Reading an input (engine/source.py): one Spark partition per source partition read, each in
offset order, and only the offsets asked for. Ingress's scan runs over these partitions as they
come (semantics §3 is sequential per source partition), so both properties are load-bearing."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from adapters.memory import EventScript, MemoryInputAdapter, MemoryInputConfig
from engine.events import EventShape, point
from engine.source import read_input


def _adapter() -> MemoryInputAdapter:
    script = EventScript()
    # interleaved, so that an arrival-ordered read would mix the partitions
    for n in range(6):
        for name in ("a", "b", "c"):
            script.insert("s", point(100 * n, {"v": n}), partition=name)
    config = MemoryInputConfig(script=script, schema="v long")
    adapter = MemoryInputAdapter(config, EventShape.POINT)
    adapter.bound_as("s")
    return adapter


PAYLOAD = StructType([StructField("v", LongType())])


def _read(spark, ranges):
    adapter = _adapter()
    assert adapter.partitions() == ["a", "b", "c"]
    df = read_input(spark, adapter, 0, ["a", "b", "c"], PAYLOAD, ranges, "s")
    rows = df.select(F.spark_partition_id().alias("sp"), "__part", "__off", "v").collect()
    return df.rdd.getNumPartitions(), [tuple(r) for r in rows]


def test_one_spark_partition_per_source_partition_read_in_offset_order(spark):
    n, rows = _read(spark, [(1, 4), None, (0, None)])
    assert n == 2  # "b" is not read
    assert rows == [(0, 0, off, off) for off in (1, 2, 3)] + [(1, 2, off, off) for off in range(6)]


def test_everything_by_default_and_nothing_when_no_partition_is_read(spark):
    n, rows = _read(spark, None)
    assert n == 3
    assert [(sp, part) for sp, part, _, _ in rows] == [(p, p) for p in range(3) for _ in range(6)]
    assert _read(spark, [None, None, None])[1] == []
