"""Reading an input (engine/source.py): one Spark partition per source partition read, each in
offset order, and only the offsets asked for. Ingress's scan runs over these partitions as they
come (semantics §3 is sequential per source partition), so both properties are load-bearing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputAdapter,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings
from ctistream.engine.contracts import ItemKind, SourceItem
from ctistream.engine.events import EventShape, point
from ctistream.engine.source import SourceRead, read_input
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType


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


def _taken(spark, stops=None, **kw):
    """The read's rows but its STOP rows, which go to ``stops`` (a list) if given."""
    read = SourceRead(_adapter(), 0, ["a", "b", "c"], PAYLOAD, **kw)
    rows = read.frame(spark).select("__kind", "__part", "__off", "__arr", "__error").collect()
    if stops is not None:
        stops.extend((p, off, arr) for kind, p, off, arr, _ in rows if kind == "STOP")
    return [tuple(r) for r in rows if r[0] != "STOP"]


def test_a_read_stops_before_the_first_item_stamped_at_or_after_until(spark):
    # arrival stamps: partition p's offset k arrived at 3k + p
    stops: list = []
    rows = _taken(spark, stops, until=9)
    assert [(p, off) for _, p, off, _, _ in rows] == [(p, k) for p in range(3) for k in range(3)]
    # where each partition stopped (the next read starts there): offset 3, stamped 9 + p
    assert stops == [(p, 3, 9 + p) for p in range(3)]
    # a partition read to its end (a: its last item is stamped 15) has no STOP row
    stops.clear()
    assert len(_taken(spark, stops, until=16)) == 6 + 5 + 5
    assert stops == [(1, 5, 16), (2, 5, 17)]


@pytest.mark.parametrize(
    ("before", "b_offsets"),
    [((7, 0, 2, 1, 0), [0, 1]), ((7, 0, 2, 1, 1), [0, 1, 2]), ((7, 1, 0, 0, 0), [0, 1, 2])],
)
def test_a_read_stops_before_a_position(spark, before, b_offsets):
    # partition b's offset 2 is at position (7, 0, 2, 1, 0): before it, at it, or after it
    rows = _taken(spark, before=before)
    assert [off for _, p, off, _, _ in rows if p == 1] == b_offsets
    assert [off for _, p, off, _, _ in rows if p == 0] == [0, 1, 2]  # stamped 0, 3, 6
    assert [off for _, p, off, _, _ in rows if p == 2] == [0, 1]  # stamped 2, 5


def test_a_read_from_an_offset_checks_arrivals_against_the_item_before_it(spark):
    # partition a from offset 2 (stamped 6), after an item stamped 10: the adapter broke its
    # contract, so the read ends there with the error, as within one read
    rows = _taken(spark, ranges=[(2, None), None, None], last=[(10, 1), None, None])
    assert len(rows) == 1
    kind, part, off, arr, error = rows[0]
    assert (kind, part, off, arr) == ("BAD", 0, 2, 10)
    assert "offset 2: arrival 6 after arrival 10 at offset 1" in error
    # a read stopped before that position does not report it
    assert (
        _taken(
            spark,
            ranges=[(2, None), None, None],
            last=[(10, 1), None, None],
            before=(10, 0, 2, 0, 0),
        )
        == []
    )


class _LoggedAdapter(MemoryInputAdapter):
    """Appends each read's (partition, start offset) to the file ``log``."""

    log = ""

    def read(self, partition, start_offset):
        with open(self.log, "a") as f:
            f.write(f"{partition} {start_offset}\n")
        yield from super().read(partition, start_offset)


class _LoggedFactory(MemoryInputFactory):
    def __init__(self, log):
        self.log = str(log)

    def create(self, config, shape):
        adapter = _LoggedAdapter(config, shape)
        adapter.log = self.log
        return adapter


@pytest.mark.parametrize(
    ("epochs", "starts"),
    [
        ([6, 12], {"a": [0, 2, 4], "b": [0, 2, 4], "c": [0, 2, 4]}),
        # b and c take nothing before 1, so they start from 0 again
        ([1, 9], {"a": [0, 1, 3], "b": [0, 0, 3], "c": [0, 0, 3]}),
        # every partition's END (stamped 20) is taken before the last epoch: none read again
        ([6, 12, 21], {"a": [0, 2, 4], "b": [0, 2, 4], "c": [0, 2, 4]}),
        # an int cuts at quantiles, read from the start once more to find them
        (2, None),
    ],
)
def test_a_bounded_run_reads_each_epoch_from_where_the_last_one_stopped(
    spark, app, tmp_path, epochs, starts
):
    # arrival stamps: partition p's offset k arrived at 3k + p; the END (offset 6) at 20
    script = _adapter()._script
    script.end("s", arrival=20)
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    log = tmp_path / "reads.log"
    out, queries = [], []
    for k, factory in enumerate((_LoggedFactory(log), MemoryInputFactory())):
        config = MemoryInputConfig(script=script, schema="v long")
        stream = Stream.create("s", factory, config, EventShape.POINT, settings)
        sink = f"reads{k}-{epochs}"
        output = (MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.POINT)
        queries.append(stream.to_query(app, sink, *output))
        queries[-1].run(epochs=epochs if k == 0 else 1)
        out.append(MemoryOutputFactory.collected(sink))

    def reads() -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for line in log.read_text().splitlines():
            part, start = line.split()
            found.setdefault(part, []).append(int(start))
        return found

    first = reads()
    if starts is None:
        assert all(r[:2] == [0, 0] and r == sorted(r) and len(r) == 3 for r in first.values())
    else:
        assert first == starts
    assert out[0] == out[1] and len(out[0]) > 18
    queries[0].run(epochs=epochs)  # the same query again reads the same ranges again
    assert reads() == {p: r + r for p, r in first.items()}


class _RepeatedOffset(MemoryInputAdapter):
    """Offsets 0, 1, 1, 2 stamped 10, 20, 30, 40: the third item breaks the contract."""

    def partitions(self):
        return ["p"]

    def read(self, partition, start_offset):
        for off, arr in ((0, 10), (1, 20), (1, 30), (2, 40)):
            if off >= start_offset:
                yield SourceItem(ItemKind.EVENT, off, arr, point(arr, {"v": off}))


def test_an_item_out_of_order_at_a_cut_is_reported_in_the_epoch_before_it(spark):
    # as a read of everything does: the error row right after the last item in order
    adapter = _RepeatedOffset(
        MemoryInputConfig(script=EventScript(), schema="v long"), EventShape.POINT
    )
    for until in (None, 25):
        read = SourceRead(adapter, 0, ["p"], PAYLOAD, until=until)
        rows = read.frame(spark).select("__kind", "__off", "__arr").collect()
        assert [tuple(r) for r in rows] == [("INSERT", 0, 10), ("INSERT", 1, 20), ("BAD", 2, 20)]
