"""Packed events (engine.packed): what a packed value holds comes back whole, and is counted as
the events in it."""

from __future__ import annotations

import pyarrow as pa
from ctistream.engine.packed import ARROW, CHUNK, count_rows, pack, unpack


def test_a_packed_table_comes_back_whole_in_chunks_of_at_most_chunk_rows():
    table = pa.table({"__start": pa.array(range(CHUNK + 3), pa.int64())})
    values = pack(table)
    assert len(values) == 2
    back = pa.concat_tables([unpack(v) for v in values])
    assert back.equals(table)


def test_a_frame_of_packed_values_counts_the_events_in_them(spark):
    values = [*pack(pa.table({"v": [1, 2, 3, 4, 5]})), *pack(pa.table({"v": [6, 7]}))]
    packed = spark.createDataFrame([(v,) for v in [*values, None]], f"{ARROW} binary")
    assert count_rows(packed) == 7
    assert count_rows(spark.range(4)) == 4
