"""The nearest native Spark Structured Streaming queries on the files of :mod:`benchmarks.data`.

B1: ``readStream`` of the data directory, one file per micro-batch (``maxFilesPerTrigger=1``),
``withWatermark("start", "5 seconds")``, ``groupBy(window("start", "1 minute"), "key").count()``,
append mode, trigger ``availableNow``. B3: the same with ``session_window("start", "30
seconds")`` per key. B2: the same stream joined (stream-static) with the
reference's latest value per key, then ``window("start", "1 minute", "10 seconds")`` and ``avg(v)``.
P: the stream as read, no watermark, to the sink. The sink is ``foreachBatch``, which counts the
rows (and collects them when asked) and counts the batch's Spark jobs (the query's job
group).
"""

from __future__ import annotations

import itertools
import tempfile
import time

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from benchmarks.engine_side import Result
from benchmarks.jobs import JobCount

DATA_SCHEMA = "key bigint, v double, start timestamp, arrival timestamp"
TICKS = 1_000_000  # per second


def latest_reference(spark: SparkSession, ref_path: str) -> DataFrame:
    """The last START edge of every key: the reference as a static table."""
    starts = spark.read.parquet(ref_path).where(F.col("edge") == "start")
    last = Window.partitionBy("key").orderBy(F.col("start").desc())
    return (
        starts.withColumn("_rank", F.row_number().over(last)).where("_rank = 1").select("key", "w")
    )


def query(spark: SparkSession, which: str, meta: dict) -> tuple[DataFrame, str]:
    stream = (
        spark.readStream.schema(DATA_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(meta["data_dir"])
    )
    if which == "P":
        return stream, "v"
    stream = stream.withWatermark("start", "5 seconds")
    if which == "B1":
        agg = stream.groupBy(F.window("start", "1 minute"), "key").agg(F.count("*").alias("n"))
        return agg, "n"
    if which == "B3":
        session = F.session_window("start", "30 seconds").alias("window")
        return stream.groupBy(session, "key").agg(F.count("*").alias("n")), "n"
    joined = stream.join(latest_reference(spark, meta["ref_path"]), "key")
    agg = joined.groupBy(F.window("start", "1 minute", "10 seconds"), "key").agg(
        F.avg("v").alias("avg_v")
    )
    return agg, "avg_v"


def run(spark: SparkSession, which: str, meta: dict, name: str, keep: bool = False) -> Result:
    """Run B1 or B2 to the end of the files (availableNow); time it from start to termination."""
    result = Result(rows=0, seconds=0.0, batches=0)
    jobs: list[JobCount] = []  # of the query's job group, made in its first batch

    def sink(batch: DataFrame, batch_id: int) -> None:
        result.batches += 1
        marks.append(time.perf_counter())
        if keep:
            start = F.col("start" if which == "P" else "window.start")
            rows = batch.select(F.unix_micros(start).alias("s"), "key", value).collect()
            result.kept.extend((r["s"], r["key"], r[value]) for r in rows)
            result.rows += len(rows)
        else:
            result.rows += batch.count()
        if not jobs:
            jobs.append(JobCount.of_current_thread(spark.sparkContext))
        jobs[0].mark()

    with tempfile.TemporaryDirectory(prefix=f"native-{name}-") as checkpoint:
        t0 = time.perf_counter()
        marks = [t0]
        agg, value = query(spark, which, meta)
        q = (
            agg.writeStream.queryName(name)
            .outputMode("append")
            .foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        result.seconds = time.perf_counter() - t0
        result.epoch_seconds = [b - a for a, b in itertools.pairwise(marks)]
        result.jobs = jobs[0] if jobs else None
        result.dropped = sum(
            op.get("numRowsDroppedByWatermark", 0)
            for p in q.recentProgress
            for op in p.get("stateOperators", [])
        )
    return result
