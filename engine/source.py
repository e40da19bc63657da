"""Reading inputs on Spark: each bound input adapter is read by an Arrow function on the executors.

The driver knows the adapter's source partitions (asked once when the query is built); each read
has one Spark partition per source partition, on the executors, where the adapter (pickled with
the function: it holds configuration only) reads Arrow batches
(:meth:`engine.contracts.InputAdapter.read_batches`). Batches get the engine's raw layout: the
item's kind, edge, start, end, arrival, input index, offset, partition index and, for a malformed
record, its error, then the payload, then the item's position (``__pos``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ctistream.engine._spark import settle_worker
from ctistream.engine.contracts import InputAdapter, ItemKind
from ctistream.engine.errors import MalformedRecordError
from ctistream.engine.rows import POS, POS_TYPE, Kind
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

__all__ = ["RAW_HEADER", "SourceRead", "read_input"]

RAW_HEADER = [
    StructField("__kind", StringType(), False),
    StructField("__edge", StringType(), True),
    StructField("__start", LongType(), True),
    StructField("__end", LongType(), True),
    StructField("__arr", LongType(), False),
    StructField("__inp", IntegerType(), False),
    StructField("__off", LongType(), False),
    StructField("__part", IntegerType(), False),
    StructField("__error", StringType(), True),
]

_KINDS = {
    ItemKind.EVENT.value: Kind.INSERT,
    ItemKind.CTI.value: Kind.CTI,
    ItemKind.END.value: Kind.EOI,
}


def raw_batches(
    adapter: InputAdapter,
    index: int,
    p: int,
    name: str,
    payload: StructType,
    start: int = 0,
    end: int | None = None,
    input_name: str | None = None,
    last: tuple[int, int] | None = None,
    until: int | None = None,
    before: tuple | None = None,
) -> Iterator[Any]:
    """Source partition ``name`` (index ``p``) of input ``index`` as raw Arrow batches, offsets
    ``start`` up to (not including) ``end`` (None: to its end), stopping before the first item
    stamped at or after ``until`` or positioned at or after ``before`` (None: no such stop).
    ``last``: the (arrival, offset) of the item read before ``start``, if any. Where it stops
    before an item, a last ``STOP`` row holds that item's arrival and offset: the next read
    starts there, after everything this one passed over (dead letters). A malformed record
    ends it with one BAD row (after everything before it), which the driver raises once
    everything before it in arrival order has been delivered. So does an item out of the order
    the adapter contract promises (offsets increasing, arrivals not decreasing): the engine
    relies on each partition coming in position order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    out = to_arrow_schema(StructType(RAW_HEADER + list(payload.fields)), timezone="UTC")
    arrival, offset = (last[0], start) if last is not None else (0, start)
    try:
        arrow_payload = to_arrow_schema(payload, timezone="UTC")
        for b in adapter.read_batches(name, start, arrow_payload, until):
            past = end is not None and b.num_rows and b.column("__off")[-1].as_py() >= end
            if past:
                b = b.filter(pc.less(b.column("__off"), end))
            where = f"partition {name!r}"
            if input_name is not None:
                where = f"input {input_name!r}, {where}"
            disorder = _disorder(b, where, last)
            stop = _stop(b, until, before, index, p)
            resume = None
            if stop is not None and (disorder is None or stop < disorder[0]):
                resume = b.slice(stop, 1)
                b, disorder, past = b.slice(0, stop), None, True
            elif disorder is not None:  # yield what comes before it, then stop there
                b = b.slice(0, disorder[0])
            n = b.num_rows
            if n:
                kind = b.column("__kind")
                for old, new in _KINDS.items():
                    kind = pc.if_else(pc.equal(kind, old), new, kind)
                extra = {
                    "__kind": kind,
                    "__inp": pa.array([index] * n, pa.int32()),
                    "__part": pa.array([p] * n, pa.int32()),
                    "__error": pa.nulls(n, pa.string()),
                }
                columns = [extra[f.name] if f.name in extra else b.column(f.name) for f in out]
                yield pa.RecordBatch.from_arrays(
                    [c.cast(f.type) for c, f in zip(columns, out, strict=True)], schema=out
                )
                arrival = b.column("__arr")[n - 1].as_py()
                offset = b.column("__off")[n - 1].as_py() + 1
                last = (arrival, offset - 1)
            if disorder is not None:
                raise MalformedRecordError(disorder[1])
            if resume is not None:  # the first item not taken: where the next read starts
                row = {"__kind": Kind.STOP.value, "__inp": index, "__part": p}
                row |= {k: resume.column(k)[0].as_py() for k in ("__arr", "__off")}
                yield pa.RecordBatch.from_pylist([row], schema=out)
            if past:
                return
    except MalformedRecordError as bad:
        if before is not None and (arrival, index, offset, p, 0) >= tuple(before):
            return
        said = str(bad)
        if input_name is not None and not said.startswith("input "):  # the adapter's own words
            said = f"input {input_name!r}: {said}"
        row = {"__kind": Kind.BAD.value, "__arr": arrival, "__inp": index, "__off": offset}
        row |= {"__part": p, "__error": said}
        yield pa.RecordBatch.from_pylist([row], schema=out)


def _stop(batch: Any, until: int | None, before: tuple | None, index: int, p: int) -> int | None:
    """The index of the batch's first item stamped at or after ``until`` or positioned at or
    after ``before`` (partition ``p`` of input ``index``), or None."""
    import numpy as np

    if batch.num_rows == 0 or (until is None and before is None):
        return None
    arr = batch.column("__arr").to_numpy(zero_copy_only=False)
    stop = np.zeros(len(arr), dtype=bool) if until is None else arr >= until
    if before is not None:  # (arr, index, off, p, 0) >= before
        b_arr, b_inp, b_off, b_part, b_sub = before
        off = batch.column("__off").to_numpy(zero_copy_only=False)
        if index != b_inp:
            tie = np.full(len(off), index > b_inp)
        else:
            tail = p > b_part or (p == b_part and b_sub <= 0)
            tie = (off > b_off) | ((off == b_off) & tail)
        stop |= (arr > b_arr) | ((arr == b_arr) & tie)
    hit = np.flatnonzero(stop)
    return int(hit[0]) if hit.size else None


def _disorder(batch: Any, where: str, last: tuple[int, int] | None) -> tuple[int, str] | None:
    """The index of the batch's first item whose offset does not increase or whose arrival goes
    back (``last``: the item before the batch), and the error to raise there; or None."""
    import numpy as np

    if batch.num_rows == 0:
        return None
    arr = batch.column("__arr").to_numpy(zero_copy_only=False)
    off = batch.column("__off").to_numpy(zero_copy_only=False)
    low = np.iinfo(np.int64).min
    prev_arr = np.concatenate(([last[0] if last else low], arr[:-1]))
    prev_off = np.concatenate(([last[1] if last else low], off[:-1]))
    bad = np.flatnonzero((arr < prev_arr) | (off <= prev_off))
    if not bad.size:
        return None
    i = int(bad[0])
    return i, (
        f"{where}, offset {int(off[i])}: arrival {int(arr[i])} after arrival "
        f"{int(prev_arr[i])} at offset {int(prev_off[i])}; expected offsets that increase and "
        "arrival stamps that do not decrease within a partition (the input adapter contract). "
        "Fix: make the adapter's read yield its items in offset order with non-decreasing "
        "arrival stamps"
    )


Ranges = Sequence[tuple[int, int | None] | None]


@dataclass(frozen=True)
class SourceRead:
    """One read of an input on the executors (the arguments of :func:`read_input`, and where it
    stops): ``until`` and ``before`` as :func:`raw_batches` takes them, ``last`` per source
    partition the (arrival, offset) of the item before its range's start, or None.

    :meth:`frame` is the read as a DataFrame; :meth:`map` runs a function over its batches in
    the same Python task, so the rows go from the source to that function without a round trip
    through the JVM (ingress's scan, :mod:`engine.ingress`)."""

    adapter: InputAdapter
    index: int
    partitions: list[str]
    payload: StructType
    ranges: Ranges | None = None
    input_name: str | None = None
    floor: int | None = None
    until: int | None = None
    before: tuple | None = None
    last: Sequence[tuple[int, int] | None] | None = None

    @property
    def schema(self) -> StructType:
        return StructType([*RAW_HEADER, *self.payload.fields, StructField(POS, POS_TYPE, False)])

    def _chosen(self) -> list[tuple[int, int, int | None]]:
        ranges = self.ranges if self.ranges is not None else [(0, None)] * len(self.partitions)
        return [(p, *r) for p, r in enumerate(ranges) if r is not None]

    def batches(self, spark_partitions: Iterator[Any]) -> Iterator[Any]:
        """The raw batches, with positions, of the source partitions whose numbers
        ``spark_partitions`` (a ``spark.range`` partition) holds (executor)."""
        settle_worker()
        chosen = self._chosen()
        for b in spark_partitions:
            for i in b.column(0).to_pylist():
                p, start, end = chosen[i]
                last = self.last[p] if self.last is not None else None
                for raw in raw_batches(
                    self.adapter,
                    self.index,
                    p,
                    self.partitions[p],
                    self.payload,
                    start,
                    end,
                    self.input_name,
                    last,
                    self.until,
                    self.before,
                ):
                    floor = self.floor
                    yield _with_position(raw if floor is None else _raise_arrivals(raw, floor))

    def map(
        self,
        spark: SparkSession,
        fn: Callable[[Iterator[Any]], Iterator[Any]],
        schema: StructType,
    ) -> DataFrame:
        """``fn`` over the read's batches, one Spark partition per source partition read."""
        n = len(self._chosen())
        return spark.range(0, n, 1, max(n, 1)).mapInArrow(lambda it: fn(self.batches(it)), schema)

    def frame(self, spark: SparkSession) -> DataFrame:
        return self.map(spark, lambda batches: batches, self.schema)


def read_input(
    spark: SparkSession,
    adapter: InputAdapter,
    index: int,
    partitions: list[str],
    payload: StructType,
    ranges: Ranges | None = None,
    input_name: str | None = None,
    floor: int | None = None,
    until: int | None = None,
) -> DataFrame:
    """The raw rows of one input, read on the executors. ``ranges``: per source partition, the
    offsets ``(start, end)`` to read (``end`` None: to the partition's end), or None to skip the
    partition; None reads everything. ``input_name``: the input's name in the query, for errors.
    ``until``: each partition's read stops before its first item stamped at or after it, with a
    ``STOP`` row there (:func:`raw_batches`).
    ``floor``: arrival stamps below it are raised to it (a started query's epochs). It is
    applied here, not as a Spark expression: a literal that changes every epoch would change the
    plan's generated code, which Spark then compiles again every epoch.

    One Spark partition per source partition read, in offset order: ``spark.range`` numbers
    them and an Arrow function reads source partition ``chosen[i]`` where Spark partition ``i``
    runs, with the adapter as it is now (a live adapter's end-offset snapshot changes every
    epoch) pickled with the function. A Python Data Source did the same but also ran Python
    planner processes on the driver for each read (look the source up, create it, plan its
    partitions); starting them made a started query's first step about 5 s slower."""
    read = SourceRead(adapter, index, partitions, payload, ranges, input_name, floor, until)
    return read.frame(spark)


def _with_position(batch: Any) -> Any:
    """``batch`` with its items' positions (:data:`engine.rows.POS_TYPE`, ``sub`` 0) as a last
    column."""
    import pyarrow as pa

    fields = [batch.column(f"__{name}") for name in ("arr", "inp", "off", "part")]
    fields.append(pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows))
    names = [f.name for f in POS_TYPE.fields]
    position = pa.StructArray.from_arrays(fields, names=names)
    return pa.RecordBatch.from_arrays([*batch.columns, position], [*batch.schema.names, POS])


def _raise_arrivals(batch: Any, floor: int) -> Any:
    """``batch`` with its arrival stamps below ``floor`` raised to it."""
    import pyarrow.compute as pc

    i = batch.schema.get_field_index("__arr")
    raised = pc.max_element_wise(batch.column(i), floor)
    return batch.set_column(i, "__arr", raised.cast(batch.schema.field(i).type))
