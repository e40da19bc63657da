"""What a query leaves in Spark's block manager: only the state it still reads.

Every epoch checkpoints each stateful operator's output and its new state, and a run reads its
input into a checkpoint too. Spark frees a local checkpoint only once the JVM's garbage collector
has collected its RDD (``unpersist()`` on the DataFrame does not), so a query that did not release
them itself would keep about one more per operator and epoch: a query that runs until stopped
would fill the memory store and grow the driver's heap with dead state. These tests count the
RDDs Spark keeps after runs of different lengths."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    interval,
    point,
)
from ctistream.engine.rows import Checkpoints, checkpoint, frames, leaf_rdds
from pyspark.sql import functions as F

S = 1_000_000
EVERY_5 = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(5, TICK * 0, True), policy=AdvanceTimePolicy.DROP
)


def _query(app, name: str):
    script = EventScript()
    for i in range(60):
        script.insert("data", point(i * S, {"k": i % 4, "v": float(i)}))
        if i % 10 == 0:
            script.insert("ref", interval(i * S, (i + 25) * S, {"k": i % 4, "w": 2.0}))
    data, ref = (
        Stream.create(
            n, MemoryInputFactory(), MemoryInputConfig(script=script, schema=s), shape, EVERY_5
        )
        for n, s, shape in (
            ("data", "k long, v double", EventShape.POINT),
            ("ref", "k long, w double", EventShape.INTERVAL),
        )
    )
    out = (
        data.join(ref, on="k")
        .tumbling_window(timedelta(seconds=20))
        .group_by("k")
        .aggregate(avg=F.avg(F.col("v") * F.col("w")))
    )
    return out.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
    )


def _kept(spark) -> set[int]:
    return set(spark.sparkContext._jsc.getPersistentRDDs().keySet())


def _state_reads(query) -> set[int]:
    rt = query._runtime
    state = (rt._ingress, rt._ordering, rt._ops, rt._egress)
    return {r.id() for df in frames(state) for r in leaf_rdds(df)}


def test_a_run_leaves_only_the_checkpoints_its_state_reads_however_many_epochs(app):
    left = {}
    for epochs in (2, 4):
        before = _kept(app.spark)
        q = _query(app, f"release-{epochs}")
        q.run(epochs=epochs)
        left[epochs] = _kept(app.spark) - before
        # what is left is the state the query would go on from: the join's held events, the
        # window's open windows; the input it read and every replaced state are gone
        assert left[epochs] <= _state_reads(q), epochs
        assert left[epochs], "the window holds events of open windows"
    assert len(left[4]) == len(left[2])


def test_a_started_query_releases_each_epochs_checkpoints_as_it_goes(app):
    q = _query(app, "release-started")
    before = _kept(app.spark)
    q.start(trigger=None)
    counts = []
    for _ in range(3):
        q.step()  # the memory adapter's whole script is read by the first step
        left = _kept(app.spark) - before
        assert left <= _state_reads(q)
        counts.append(len(left))
    q.stop()
    assert len(set(counts)) == 1, counts


def test_a_run_that_fails_while_the_next_epoch_is_read_ahead_leaves_only_its_state(app):
    # A bounded run reads epoch k+1's inputs while epoch k's operators run (engine.runtime,
    # _Ahead). Epoch 1 fails in its egress job (the event with v = 35 raises), after epoch 2's
    # ingress started from epoch 1's states, which are never committed: that read is dropped,
    # its cached frames and checkpoints released, and what was delivered stays.
    script = EventScript()
    for i in range(60):
        script.insert("data", point(i * S, {"k": i % 4, "v": float(i)}))
    stream = Stream.create(
        "data",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema="k long, v double"),
        EventShape.POINT,
        EVERY_5,
    )
    boom = F.when(F.col("v") == 35.0, F.raise_error(F.lit("boom at 35"))).otherwise(F.col("v"))
    name = "release-failed"
    q = stream.select("k", boom.alias("v")).to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    before = _kept(app.spark)
    with pytest.raises(Exception, match="boom at 35"):
        q.run(epochs=[20, 40])  # arrival stamps: the script's item numbers
    delivered = MemoryOutputFactory.collected(name)
    # epoch 0 (items 0-19) ends with the CTI generated after the 20th event, at 19: the points
    # before it were delivered
    assert [e.payload["v"] for e in delivered if e.payload] == [float(i) for i in range(19)]
    assert _kept(app.spark) - before <= _state_reads(q)
    assert q._runtime._ahead is None


def test_state_kept_as_lazy_checkpoints_is_computed_in_one_job_before_its_source_goes(app):
    # Operators keep state as lazy checkpoints (a window's open windows are a selection over
    # one that the epoch's egress job computes; held events are computed by no job of theirs).
    # Releasing what the epoch replaced would leave them nothing to be computed from: the epoch
    # computes them first, all in one job.
    spark = app.spark
    held = Checkpoints()
    with held.recording():
        old = checkpoint(spark.range(10).selectExpr("id AS k", "id * 2 AS v"))
    with held.recording():
        merged = checkpoint(old.selectExpr("k", "v + 1 AS v"), eager=False)
        state = merged.filter("k < 5")
        other = checkpoint(old.selectExpr("k * 10 AS k"), eager=False)
    rdds = [df._jdf.queryExecution().analyzed().rdd() for df in (merged, other)]
    assert not any(r.isCheckpointed() for r in rdds)
    sc = spark.sparkContext
    sc.setJobGroup("compute-state", "the epoch's state")
    try:
        held.release_all_but([state, other], compute=True)
    finally:
        sc.setJobGroup(None, None)  # type: ignore[arg-type]
    assert len(sc.statusTracker().getJobIdsForGroup("compute-state")) == 1
    assert all(r.isCheckpointed() for r in rdds)
    assert sorted(tuple(r) for r in state.collect()) == [(k, 2 * k + 1) for k in range(5)]
    assert sorted(r[0] for r in other.collect()) == [k * 10 for k in range(10)]
    assert not old._jdf.queryExecution().analyzed().rdd().getStorageLevel().useMemory()


def test_state_a_job_already_computed_is_cut_from_its_source_without_another_job(app):
    # A lookup join's held events are a selection over its pairs' lazy checkpoint, which egress
    # computes while it reads the window above it; Spark then marks only the checkpoint the job
    # ended at (the window's) as done. The pairs' partitions are all cached: the epoch's end only
    # cuts their lineage, with no job (a steady B2 epoch runs one job fewer).
    spark = app.spark
    held = Checkpoints()
    with held.recording():
        pairs = checkpoint(spark.range(10).selectExpr("id AS k", "id * 2 AS v"), eager=False)
        state = pairs.filter("k < 5")
        above = checkpoint(pairs.groupBy().sum("v"), eager=False)
    assert above.collect()[0][0] == 90  # 2 * (0 + 1 + ... + 9): the "egress" job
    rdd = pairs._jdf.queryExecution().analyzed().rdd()
    assert not rdd.isCheckpointed()  # computed, but not marked by that job
    sc = spark.sparkContext
    sc.setJobGroup("cut-state", "the epoch's state")
    try:
        held.release_all_but([state], compute=True)
    finally:
        sc.setJobGroup(None, None)  # type: ignore[arg-type]
    assert len(sc.statusTracker().getJobIdsForGroup("cut-state")) == 0
    assert rdd.isCheckpointed()
    assert sorted(tuple(r) for r in state.collect()) == [(k, 2 * k) for k in range(5)]
