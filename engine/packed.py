"""Events handed from one Python function to the next as Arrow IPC streams, one binary value per
chunk of rows (docs/decisions.md, "Packed events").

A lookup join's fast input (a stream whose CTIs the join's other side imports) is read only by
that join: its scan hands Spark its events packed (``PACKED`` rows, column :data:`ARROW`), and
the join's Arrow function pairs them with the other side, collected whole. Spark then moves a
few binary values per epoch instead of converting every event to its rows, caching, shuffling
and sorting them, and converting them back to Arrow. Every packed table has the columns ``__start``,
``__end``, ``__pos`` and the payload; :func:`unpacked` turns packed rows back into events for
any plan that needs them as rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from ctistream.engine.rows import EDGE, KIND, Kind
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

__all__ = [
    "ARROW",
    "PACKED_TYPE",
    "chunk_sizes",
    "count_rows",
    "pack",
    "packed_frame",
    "unpack",
    "unpacked",
]

#: the column that holds a packed chunk of events
ARROW = "__arrow"
PACKED_TYPE = BinaryType()
#: rows per packed value (about 8 MB for B2's events): a bound on one value's size
CHUNK = 1 << 17


def _chunks(rows: int) -> list[tuple[int, int]]:
    """The (first row, rows) of each value :func:`pack` makes of ``rows`` rows."""
    return [(lo, min(CHUNK, rows - lo)) for lo in range(0, rows, CHUNK)]


def chunk_sizes(rows: int) -> list[int]:
    """How many rows each value :func:`pack` makes of ``rows`` rows holds, in order."""
    return [n for _, n in _chunks(rows)]


def pack(table: pa.Table | pa.RecordBatch) -> list[bytes]:
    """``table``'s rows as Arrow IPC streams of at most :data:`CHUNK` rows each."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    out = []
    for lo, n in _chunks(table.num_rows):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(lo, n))
        out.append(sink.getvalue().to_pybytes())
    return out


def unpack(value: Any) -> pa.Table:
    """The table packed in one :data:`ARROW` value (bytes, or an Arrow binary scalar)."""
    if isinstance(value, pa.Scalar):
        value = value.as_buffer()
    return pa.ipc.open_stream(value).read_all()


def unpacked(packed: DataFrame, events: StructType) -> DataFrame:
    """The events packed in ``packed``'s :data:`ARROW` column as rows of schema ``events``
    (``__kind`` INSERT, ``__edge`` null, then the packed columns): lazy, one Arrow function.
    Every batch is cast to ``events``' Arrow schema: values packed by an input's scan and
    values packed from Spark's rows (a lookup join's held events) differ in the nullability of
    nested fields, and one function hands Spark batches of one schema."""
    from pyspark.sql.pandas.types import to_arrow_schema

    names = events.fieldNames()
    schema = to_arrow_schema(events, timezone="UTC")

    def rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for value in b.column(ARROW):
                if not value.is_valid:
                    continue
                for t in unpack(value).to_batches():
                    n = t.num_rows
                    columns = {
                        KIND: pa.repeat(pa.scalar(Kind.INSERT), n),
                        EDGE: pa.nulls(n, pa.string()),
                    }
                    yield pa.RecordBatch.from_arrays(
                        [columns[c] if c in columns else t.column(c) for c in names], names=names
                    ).cast(schema)

    return packed.select(ARROW).mapInArrow(rows, events)


def packed_frame(rows: DataFrame, columns: list[str]) -> DataFrame:
    """``rows``' ``columns`` packed: one :data:`ARROW` value per Arrow batch of each partition
    (none for an empty partition)."""

    def packs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if b.num_rows:
                yield pa.RecordBatch.from_arrays([pa.array(pack(b), pa.binary())], names=[ARROW])

    return rows.select(*columns).mapInArrow(packs, StructType([StructField(ARROW, PACKED_TYPE)]))


def count_rows(df: DataFrame) -> int:
    """How many rows ``df`` holds, each packed value counted as the rows packed in it (one job)."""
    if ARROW not in df.columns:
        return df.count()

    def sizes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            n = [unpack(v).num_rows for v in b.column(ARROW) if v.is_valid]
            yield pa.RecordBatch.from_arrays([pa.array(n, pa.int64())], names=["n"])

    total = df.select(ARROW).mapInArrow(sizes, "n long").agg(F.sum("n")).first()
    return int(total[0] or 0)
