"""The engine's side of B1 and B2, over the files written by :mod:`benchmarks.data`.

B1: the data stream (POINT at ``start``, arrival from ``arrival``), CTIs by count 1000 with a 5 s
delay and DROP, tumbling 1-minute count per key. B3: the same stream, a count per session of each
key (``session_window`` with a 30 s timeout). B2: the same stream joined on ``key`` with the
reference stream (EDGE, importing the data stream's CTIs, ADJUST), then a hopping 1-minute /
10-second average of ``v`` per key. One epoch per data file: the cuts are the arrival stamps at
which the files start, so the engine's epochs are the native query's micro-batches. P: the data
stream straight to the output (a pass-through), run as a user would: ``query.run()`` with its
default epochs.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from datetime import timedelta

from ctistream.adapters.files import FileInputConfig, FileInputFactory
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
)
from pyspark.sql import functions as F

from benchmarks.jobs import JobCount
from benchmarks.one_partition import OnePartitionFileFactory
from benchmarks.sink import CountingConfig, CountingFactory

DATA = "data"
REF = "ref"


@dataclass
class Result:
    rows: int
    seconds: float
    batches: int
    kept: list = field(default_factory=list)  # (window start ticks, key, value) when asked
    epoch_seconds: list[float] = field(default_factory=list)  # wall time of each epoch
    dropped: int = 0
    jobs: JobCount | None = None  # the Spark jobs of each epoch (batch)


def data_stream(meta: dict, partitions: str) -> Stream:
    """``partitions="one"``: the files chained as one partition (see :mod:`.one_partition`);
    ``"files"``: the stock ``FileInputFactory``, one partition per file."""
    config = FileInputConfig(
        path=meta["data_dir"],
        format="parquet",
        time_column="start",
        arrival_column="arrival",
        schema="key bigint, v double",
    )
    settings = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1000, timedelta(seconds=5)), policy=AdvanceTimePolicy.DROP
    )
    factory = OnePartitionFileFactory() if partitions == "one" else FileInputFactory()
    return Stream.create(DATA, factory, config, EventShape.POINT, settings)


def ref_stream(meta: dict) -> Stream:
    config = FileInputConfig(
        path=meta["ref_path"],
        time_column="start",
        end_column="end",
        edge_column="edge",
        arrival_column="arrival",
        schema="key bigint, w double",
    )
    settings = AdvanceTimeSettings(
        import_settings=AdvanceTimeImportSettings(DATA), policy=AdvanceTimePolicy.ADJUST
    )
    return Stream.create(REF, FileInputFactory(), config, EventShape.EDGE, settings)


def run(
    app: Application, which: str, meta: dict, name: str, partitions: str = "one", keep: bool = False
) -> Result:
    """Build and run B1, B2 or P as query ``name`` of ``app``; time it from binding to the end.

    The run's Spark jobs run in job group ``name`` (set on this thread; the engine's read-ahead
    thread inherits it) and are counted at the end of each epoch's delivery."""
    sc = app.spark.sparkContext
    sc.setJobGroup(name, "benchmark: the engine side")
    jobs = JobCount(sc, name, since=-1)
    try:
        return _run(app, which, meta, name, partitions, keep, jobs)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def _run(
    app: Application,
    which: str,
    meta: dict,
    name: str,
    partitions: str,
    keep: bool,
    jobs: JobCount,
) -> Result:
    t0 = time.perf_counter()
    data = data_stream(meta, partitions)
    cuts = meta["cuts"]
    if which == "P":
        out, value, cuts = data, "v", None
    elif which == "B1":
        out = data.tumbling_window(timedelta(minutes=1)).group_by("key").aggregate(n=F.count("*"))
        value = "n"
    elif which == "B3":
        sessions = data.session_window(timedelta(seconds=30)).group_by("key")
        out, value = sessions.aggregate(n=F.count("*")), "n"
    else:
        joined = data.join(ref_stream(meta), on="key")
        out = (
            joined.hopping_window(timedelta(minutes=1), timedelta(seconds=10))
            .group_by("key")
            .aggregate(avg_v=F.avg("v"))
        )
        value = "avg_v"
    sink = CountingFactory()
    config = CountingConfig(value, keep, jobs.mark)
    query = out.to_query(app, name, sink, config, EventShape.INTERVAL)
    t_run = time.perf_counter()
    if cuts is None:
        query.run()
    else:
        query.run(epochs=cuts)
    seconds = time.perf_counter() - t0
    counted = sink.last
    assert counted is not None
    marks = [t_run, *counted.delivered_at]
    return Result(
        rows=counted.events,
        seconds=seconds,
        batches=counted.epochs,
        kept=counted.kept,
        epoch_seconds=[b - a for a, b in itertools.pairwise(marks)],
        dropped=query.metrics()[DATA]["dropped"],
        jobs=jobs,
    )
