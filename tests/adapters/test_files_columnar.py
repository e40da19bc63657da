"""The columnar Parquet path of the file input (``read_batches``) gives exactly the items of the
row path (``read``): same rows, same offsets and arrivals, same END item, and the same errors,
because it hands a file to the row path from the first batch it cannot take whole."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ctistream.adapters import files
from ctistream.adapters.files import FileInputAdapter, FileInputConfig
from ctistream.engine import MAX_TIME, EventShape, MalformedRecordError
from ctistream.engine._spark import parse_schema
from ctistream.engine.contracts import InputAdapter, ItemKind
from pyspark.sql.pandas.types import to_arrow_schema

pytestmark = pytest.mark.usefixtures("spark")  # parsing the DDL payload schema needs a session

T = datetime(2026, 11, 21, 12, tzinfo=UTC)
TICKS = 1_795_262_400_000_000


def ts(values):
    return pa.array(values, pa.timestamp("us", tz="UTC"))


def _adapter(tmp_path, monkeypatch, table, shape, **cfg):
    monkeypatch.setattr(files, "_COLUMNAR_BATCH_ROWS", 3)
    path = tmp_path / "in.parquet"
    pq.write_table(table, path, row_group_size=3)
    cfg.setdefault("time_column", "t")
    adapter = FileInputAdapter(FileInputConfig(path=str(path), **cfg), shape)
    schema = to_arrow_schema(
        parse_schema(adapter.payload_schema(), "the test's adapter"), timezone="UTC"
    )
    return adapter, adapter.partitions()[0], schema


def both(tmp_path, monkeypatch, table, shape, start=0, **cfg):
    """(columnar table, row-path table) for ``table`` written as Parquet in batches of 3."""
    adapter, part, schema = _adapter(tmp_path, monkeypatch, table, shape, **cfg)
    fast = pa.Table.from_batches(list(adapter.read_batches(part, start, schema)))
    rows = pa.Table.from_batches(list(InputAdapter.read_batches(adapter, part, start, schema)))
    return fast, rows


def test_points_with_arrival_and_payload_types(tmp_path, monkeypatch):
    n = 8
    table = pa.table(
        {
            "t": ts([T.replace(second=i) for i in range(n)]),
            "arr": pa.array([TICKS + i for i in range(n)], pa.int64()),
            "k": pa.array([i % 3 for i in range(n)], pa.int64()),
            "v": pa.array([None if i == 2 else i / 2 for i in range(n)], pa.float64()),
            "s": pa.array([f"x{i}" for i in range(n)], pa.large_string()).dictionary_encode(),
            "at": ts([T] * n),
        }
    )
    fast, rows = both(tmp_path, monkeypatch, table, EventShape.POINT, arrival_column="arr")
    assert fast.num_rows == n + 1  # and the END item
    assert fast.equals(rows)
    fast, rows = both(tmp_path, monkeypatch, table, EventShape.POINT, start=4, arrival_column="arr")
    assert fast.column("__off").to_pylist() == [4, 5, 6, 7, 8]
    assert fast.equals(rows)


def test_intervals_edges_and_ctis(tmp_path, monkeypatch):
    table = pa.table(
        {
            "t": pa.array([10, 20, 20, 30, MAX_TIME, 40], pa.int64()),
            "e": pa.array([15, None, 25, MAX_TIME, None, 50], pa.int64()),
            "side": pa.array(["start", "Start", "END", "start", None, "end"]),
            "c": pa.array([False, None, False, False, True, False]),
            "k": pa.array([1, 2, 2, 3, None, 1], pa.int64()),
        }
    )
    # EDGE rows: START at 10 (its end column is ignored), START 20, END [20, 25), START 30,
    # a CTI at +inf, END [40, 50).
    kw = dict(end_column="e", edge_column="side", cti_column="c", schema="k bigint")
    fast, rows = both(tmp_path, monkeypatch, table, EventShape.EDGE, **kw)
    assert fast.equals(rows)
    assert fast.column("__kind").to_pylist() == ["EVENT"] * 4 + ["CTI", "EVENT", "END"]
    intervals = table.drop_columns(["side"]).set_column(
        1, "e", pa.array([15, 25, 25, 35, None, 50])
    )
    kw = dict(end_column="e", cti_column="c", schema="k bigint")
    fast, rows = both(tmp_path, monkeypatch, intervals, EventShape.INTERVAL, **kw)
    assert fast.equals(rows)


@pytest.mark.parametrize(
    "bad",
    [
        {"t": None},  # missing time
        {"arr": TICKS - 1},  # arrival goes back
        {"t": MAX_TIME},  # an infinite event start
    ],
)
def test_a_bad_row_goes_to_the_row_path_with_the_same_error(tmp_path, monkeypatch, bad):
    rows = [{"t": TICKS + i, "arr": TICKS + i, "k": i} for i in range(7)]
    rows[5].update(bad)  # in the second batch of 3
    table = pa.Table.from_pylist(
        rows, pa.schema([("t", pa.int64()), ("arr", pa.int64()), ("k", pa.int64())])
    )
    adapter, part, schema = _adapter(
        tmp_path, monkeypatch, table, EventShape.POINT, arrival_column="arr"
    )
    fast = adapter.read_batches(part, 0, schema)
    assert next(fast).num_rows == 3  # the first batch is whole
    with pytest.raises(MalformedRecordError) as fast_error:
        next(fast)  # the row path yields rows 3 and 4, then fails on 5
        next(fast)
    with pytest.raises(MalformedRecordError) as row_error:
        list(adapter.read(part, 0))
    assert str(fast_error.value) == str(row_error.value)
    assert "row 6 (offset 5)" in str(fast_error.value)


def test_a_bad_row_is_dead_lettered_by_both_paths_alike(tmp_path, monkeypatch):
    rows = [{"t": TICKS + i, "k": i} for i in range(7)]
    rows[4]["t"] = None
    table = pa.Table.from_pylist(rows, pa.schema([("t", pa.int64()), ("k", pa.int64())]))
    letters = tmp_path / "dead.jsonl"
    fast, rows_ = both(
        tmp_path, monkeypatch, table, EventShape.POINT, dead_letter_path=str(letters)
    )
    assert fast.equals(rows_)
    assert fast.column("__off").to_pylist() == [0, 1, 2, 3, 5, 6, 7]
    assert letters.read_text().count("\n") == 2  # once per path


@pytest.mark.parametrize("start", [2, 3, 4, 6, 8, 9])
def test_a_read_from_an_offset_skips_row_groups_and_matches_the_row_path(
    tmp_path, monkeypatch, start
):
    # Row groups of 3; row 1's arrival goes back (reported by a read from 0, not from 2 on). A
    # read from ``start`` reads only the arrival stamps of the groups wholly before it, and the
    # END item still carries the latest arrival of the whole file.
    arrivals = [TICKS + 10, TICKS + 5, *(TICKS + 10 + i for i in range(1, 8))]
    rows = [{"t": TICKS + i, "arr": a, "k": i} for i, a in enumerate(arrivals)]
    table = pa.Table.from_pylist(
        rows, pa.schema([("t", pa.int64()), ("arr", pa.int64()), ("k", pa.int64())])
    )
    read_columns = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kw):
        read_columns.append((i, columns))
        return real(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    fast, slow = both(tmp_path, monkeypatch, table, EventShape.POINT, start, arrival_column="arr")
    assert fast.equals(slow)
    assert fast.column("__off").to_pylist() == list(range(start, 10))
    assert fast.column("__arr").to_pylist()[-1] == TICKS + 17  # END: the latest arrival
    assert read_columns == [(g, ["arr"]) for g in range(min(start, 9) // 3)]


@pytest.mark.parametrize("stop", [0, 4, 5, 7, None])
def test_a_read_until_a_stamp_ends_with_the_first_item_at_or_after_it(tmp_path, monkeypatch, stop):
    # rows stamped TICKS + i, columnar batches of 3: the row path stops right after the first
    # item stamped at or after `until`, the columnar path at the end of that item's batch
    n = 8
    table = pa.table(
        {"t": ts([T.replace(second=i) for i in range(n)]), "arr": [TICKS + i for i in range(n)]}
    )
    adapter, part, schema = _adapter(
        tmp_path, monkeypatch, table, EventShape.POINT, arrival_column="arr", schema="arr bigint"
    )
    whole = pa.Table.from_batches(list(adapter.read_batches(part, 0, schema))).to_pylist()
    until = TICKS + stop if stop is not None else TICKS + 100
    fast = pa.Table.from_batches(list(adapter.read_batches(part, 0, schema, until))).to_pylist()
    rows = InputAdapter.read_batches(adapter, part, 0, schema, until)
    rows = pa.Table.from_batches(list(rows)).to_pylist()
    if stop is None:  # nothing reaches it: everything, END included
        assert fast == rows == whole and whole[-1]["__kind"] == ItemKind.END.value
        return
    assert rows == whole[: stop + 1]
    assert fast == whole[: min(n, (stop // 3 + 1) * 3)]
