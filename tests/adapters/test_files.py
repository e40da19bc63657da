"""File adapters: reading JSON lines, CSV and Parquet; writing JSON lines and CSV per epoch.

No Spark: the adapters are called directly, as the engine calls them on the driver and executors.
Expected values are written out by hand from the inputs each test creates.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ctistream.adapters.files import (
    FileInputAdapter,
    FileInputConfig,
    FileInputFactory,
    FileOutputAdapter,
    FileOutputConfig,
    FileOutputFactory,
)
from ctistream.engine.checkpoint import read_checked, write_checked
from ctistream.engine.contracts import ItemKind, SourceItem
from ctistream.engine.errors import CheckpointDamageError, MalformedRecordError, QueryBuildError
from ctistream.engine.events import EventShape, cti, edge_end, edge_start, interval, point
from ctistream.engine.settings import AdapterAdvanceTimeSettings, AdvanceTimeGenerationSettings
from ctistream.engine.temporal import MAX_TIME
from pydantic import ValidationError

S = 1_000_000  # ticks per second
NEW_YEAR_2024 = 1_704_067_200 * S


# -- helpers ---------------------------------------------------------------------------------


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def adapter(shape: EventShape = EventShape.POINT, **config: Any) -> FileInputAdapter:
    return FileInputFactory().create(FileInputConfig(**config), shape)


def read_all(a: FileInputAdapter, partition: str | None = None, start: int = 0) -> list[SourceItem]:
    return list(a.read(partition if partition is not None else a.partitions()[0], start))


def ev(offset: int, event: Any, arrival: int | None = None) -> SourceItem:
    return SourceItem(ItemKind.EVENT, offset, offset if arrival is None else arrival, event)


def ct(offset: int, t: int, arrival: int | None = None) -> SourceItem:
    return SourceItem(ItemKind.CTI, offset, offset if arrival is None else arrival, cti(t))


def end(offset: int, arrival: int | None = None) -> SourceItem:
    return SourceItem(ItemKind.END, offset, offset if arrival is None else arrival)


def collect(gen: Any) -> tuple[list[SourceItem], Exception | None]:
    """Items a reader yields before it raises, and what it raised."""
    items: list[SourceItem] = []
    try:
        for item in gen:
            items.append(item)
    except Exception as e:
        return items, e
    return items, None


# -- JSON lines --------------------------------------------------------------------------------


def test_jsonl_points_read_with_offsets_and_row_index_arrival(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": "1970-01-01T00:00:01+00:00", "id": 1, "v": 2.5},
            {"ts": "1970-01-01T01:00:02+01:00", "id": 2, "v": 3},
            "",  # blank lines are not records
            {"ts": 3 * S, "id": 3, "v": -1.0},
        ],
    )
    a = adapter(path=str(f), time_column="ts")
    assert a.partitions() == [str(f)]
    assert a.payload_schema() == "`id` bigint, `v` double"
    assert read_all(a) == [
        ev(0, point(1 * S, {"id": 1, "v": 2.5})),
        ev(1, point(2 * S, {"id": 2, "v": 3.0})),
        ev(2, point(3 * S, {"id": 3, "v": -1.0})),
        end(3),
    ]


def test_jsonl_intervals_read_start_and_end(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": 10, "te": 20, "k": "a"},
            {"ts": "2024-01-01T00:00:00Z", "te": "2024-01-01T00:00:01Z", "k": "b"},
        ],
    )
    a = adapter(EventShape.INTERVAL, path=str(f), time_column="ts", end_column="te")
    assert a.payload_schema() == "`k` string"
    assert read_all(a) == [
        ev(0, interval(10, 20, {"k": "a"})),
        ev(1, interval(NEW_YEAR_2024, NEW_YEAR_2024 + S, {"k": "b"})),
        end(2),
    ]


def test_jsonl_edges_read_start_and_end_rows(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": 10, "side": "start", "k": 1},
            {"ts": 12, "side": "START", "te": None, "k": 2},
            {"ts": 10, "side": "end", "te": 30, "k": 1},
        ],
    )
    a = adapter(EventShape.EDGE, path=str(f), time_column="ts", end_column="te", edge_column="side")
    assert a.payload_schema() == "`k` bigint"
    assert read_all(a) == [
        ev(0, edge_start(10, {"k": 1})),
        ev(1, edge_start(12, {"k": 2})),
        ev(2, edge_end(10, 30, {"k": 1})),
        end(3),
    ]


def test_jsonl_cti_rows_are_explicit_ctis_and_their_payload_is_ignored(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": 10, "id": 1},
            {"ts": 15, "is_cti": True, "id": "ignored"},
            {"ts": 20, "is_cti": False, "id": 2},
            {"ts": "+inf", "is_cti": True},
        ],
    )
    a = adapter(path=str(f), time_column="ts", cti_column="is_cti")
    assert a.payload_schema() == "`id` bigint"
    assert read_all(a) == [
        ev(0, point(10, {"id": 1})),
        ct(1, 15),
        ev(2, point(20, {"id": 2})),
        ct(3, MAX_TIME),
        end(4),
    ]


def test_explicit_schema_picks_and_converts_payload_columns(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {
                "ts": 1,
                "id": 7,
                "at": "2024-01-01T01:00:00+01:00",
                "day": "2024-02-29",
                "price": "1.005",
                "extra": [1, 2],
            },
            {"ts": 2, "id": 8},
        ],
    )
    a = adapter(
        path=str(f), time_column="ts", schema="id int, at timestamp, day date, price decimal(5,2)"
    )
    assert a.payload_schema() == "id int, at timestamp, day date, price decimal(5,2)"
    assert read_all(a) == [
        ev(
            0,
            point(
                1,
                {
                    "id": 7,
                    "at": datetime(2024, 1, 1, tzinfo=UTC),
                    "day": date(2024, 2, 29),
                    "price": Decimal("1.01"),
                },
            ),
        ),
        ev(1, point(2, {"id": 8, "at": None, "day": None, "price": None})),
        end(2),
    ]


# -- CSV ---------------------------------------------------------------------------------------


def test_csv_points_infer_types_from_the_header_and_rows(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text(
        "ts,id,v,ok,name\n"
        "1970-01-01T00:00:01Z,1,2.5,true,x\n"
        "2000000,2,3,false,\n"
        '3000000,3,,TRUE,"a, b"\n'
    )
    a = adapter(path=str(f), time_column="ts")
    assert a.payload_schema() == "`id` bigint, `v` double, `ok` boolean, `name` string"
    assert read_all(a) == [
        ev(0, point(1 * S, {"id": 1, "v": 2.5, "ok": True, "name": "x"})),
        ev(1, point(2 * S, {"id": 2, "v": 3.0, "ok": False, "name": None})),
        ev(2, point(3 * S, {"id": 3, "v": None, "ok": True, "name": "a, b"})),
        end(3),
    ]


def test_csv_intervals_and_cti_rows(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("start,end,cti,id\n10,20,false,1\n15,,true,\n\n16,18,,2\n")
    a = adapter(
        EventShape.INTERVAL, path=str(f), time_column="start", end_column="end", cti_column="cti"
    )
    assert a.payload_schema() == "`id` bigint"
    assert read_all(a) == [
        ev(0, interval(10, 20, {"id": 1})),
        ct(1, 15),
        ev(2, interval(16, 18, {"id": 2})),
        end(3),
    ]


def test_csv_edges(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("t,e,edge,k\n5,,start,a\n5,9,end,a\n")
    a = adapter(EventShape.EDGE, path=str(f), time_column="t", end_column="e", edge_column="edge")
    assert read_all(a) == [
        ev(0, edge_start(5, {"k": "a"})),
        ev(1, edge_end(5, 9, {"k": "a"})),
        end(2),
    ]


# -- Parquet -----------------------------------------------------------------------------------


def test_parquet_points_from_a_zoned_timestamp_column(tmp_path: Path) -> None:
    f = tmp_path / "a.parquet"
    table = pa.table(
        {
            "ts": pa.array(
                [datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC)],
                pa.timestamp("ns", tz="UTC"),
            ),
            "id": pa.array([1, 2], pa.int32()),
            "v": pa.array([0.5, None], pa.float64()),
            "name": pa.array(["a", "b"]),
        }
    )
    pq.write_table(table, f)
    a = adapter(path=str(f), time_column="ts")
    assert a.payload_schema() == "`id` int, `v` double, `name` string"
    assert read_all(a) == [
        ev(0, point(NEW_YEAR_2024, {"id": 1, "v": 0.5, "name": "a"})),
        ev(1, point(NEW_YEAR_2024 + S, {"id": 2, "v": None, "name": "b"})),
        end(2),
    ]


def test_parquet_intervals_edges_and_ctis_from_int_ticks(tmp_path: Path) -> None:
    f = tmp_path / "a.parquet"
    table = pa.table(
        {
            "ts": [10, 10, 12, 10],
            "te": [None, None, None, 40],
            "edge": ["start", None, None, "end"],
            "cti": [False, True, True, False],
            "k": [1, None, None, 1],
        }
    )
    pq.write_table(table, f, row_group_size=2)
    a = adapter(
        EventShape.EDGE,
        path=str(f),
        time_column="ts",
        end_column="te",
        edge_column="edge",
        cti_column="cti",
    )
    assert a.payload_schema() == "`k` bigint"
    assert read_all(a) == [
        ev(0, edge_start(10, {"k": 1})),
        ct(1, 10),
        ct(2, 12),
        ev(3, edge_end(10, 40, {"k": 1})),
        end(4),
    ]
    # Resuming inside the second row group skips the first one.
    assert read_all(a, start=3) == [ev(3, edge_end(10, 40, {"k": 1})), end(4)]


def test_parquet_arrival_of_skipped_row_groups_still_stamps_the_end(tmp_path: Path) -> None:
    f = tmp_path / "a.parquet"
    pq.write_table(pa.table({"ts": [1, 2, 3], "arr": [10, 20, 30]}), f, row_group_size=1)
    a = adapter(path=str(f), time_column="ts", arrival_column="arr")
    assert read_all(a) == [
        ev(0, point(1), 10),
        ev(1, point(2), 20),
        ev(2, point(3), 30),
        end(3, 30),
    ]
    assert read_all(a, start=3) == [end(3, 30)]


def test_parquet_naive_time_is_malformed_with_its_row_number(tmp_path: Path) -> None:
    f = tmp_path / "a.parquet"
    pq.write_table(
        pa.table({"ts": pa.array([datetime(2024, 1, 1)], pa.timestamp("us")), "id": [1]}), f
    )
    a = adapter(path=str(f), time_column="ts")
    items, error = collect(a.read(str(f), 0))
    assert items == []
    assert isinstance(error, MalformedRecordError)
    assert f"{f}, row 1 (offset 0)" in str(error)
    assert "naive" in str(error)


# -- partitions --------------------------------------------------------------------------------


def test_every_file_of_a_directory_is_one_partition_sorted_by_path(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", [{"ts": 5, "id": 20}])
    write_jsonl(tmp_path / "a.jsonl", [{"ts": 1, "id": 10}, {"ts": 2, "id": 11}])
    write_jsonl(tmp_path / "_SUCCESS.jsonl", [{"ts": 9}])  # skipped: starts with _
    write_jsonl(tmp_path / ".hidden.jsonl", [{"ts": 9}])  # skipped: starts with .
    a = adapter(path=str(tmp_path), time_column="ts")
    fa, fb = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    assert a.partitions() == [fa, fb]
    # Arrival is the row index: row i of every file arrives at i, so files interleave by row.
    assert read_all(a, fa) == [
        ev(0, point(1, {"id": 10})),
        ev(1, point(2, {"id": 11})),
        end(2),
    ]
    assert read_all(a, fb) == [ev(0, point(5, {"id": 20})), end(1)]


def test_a_glob_matches_files_in_several_directories(tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    write_jsonl(tmp_path / "d2" / "x.jsonl", [{"ts": 1}])
    write_jsonl(tmp_path / "d1" / "y.jsonl", [{"ts": 1}])
    (tmp_path / "d1" / "notes.txt").write_text("not matched")
    a = adapter(path=str(tmp_path / "*" / "*.jsonl"), time_column="ts")
    assert a.partitions() == [str(tmp_path / "d1" / "y.jsonl"), str(tmp_path / "d2" / "x.jsonl")]


def test_a_path_that_matches_nothing_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing-*.jsonl")
    a = adapter(path=missing, time_column="ts")
    with pytest.raises(FileNotFoundError, match="no input files match path") as info:
        a.partitions()
    assert missing in str(info.value)


def test_files_of_different_formats_are_refused(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"ts": 1}])
    (tmp_path / "b.csv").write_text("ts\n1\n")
    with pytest.raises(ValueError, match="different formats"):
        adapter(path=str(tmp_path), time_column="ts").partitions()


def test_an_unknown_extension_needs_an_explicit_format(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.log", [{"ts": 1, "id": 1}])
    with pytest.raises(ValueError, match="cannot tell the format"):
        adapter(path=str(f), time_column="ts").partitions()
    a = adapter(path=str(f), time_column="ts", format="jsonl")
    assert read_all(a) == [ev(0, point(1, {"id": 1})), end(1)]


# -- offsets and arrival -----------------------------------------------------------------------


def test_start_offset_resumes_at_that_record(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [{"ts": t, "id": t} for t in (1, 2, 3)])
    a = adapter(path=str(f), time_column="ts")
    assert read_all(a, start=2) == [ev(2, point(3, {"id": 3})), end(3)]
    assert read_all(a, start=3) == [end(3)]
    assert read_all(a, start=4) == []


def test_start_offset_resumes_csv_and_an_empty_file_just_ends(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("ts,id\n1,1\n2,2\n3,3\n")
    a = adapter(path=str(f), time_column="ts")
    assert read_all(a, start=1) == [ev(1, point(2, {"id": 2})), ev(2, point(3, {"id": 3})), end(3)]
    empty = tmp_path / "empty.csv"
    empty.write_text("ts,id\n")
    assert read_all(adapter(path=str(empty), time_column="ts", schema="id int")) == [end(0)]


def test_arrival_column_stamps_items_and_the_end(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": 1, "arr": "1970-01-01T00:00:10Z", "id": 1},
            {"ts": 2, "arr": 10 * S, "id": 2},
            {"ts": 2, "arr": 12 * S, "c": True},
            {"ts": 3, "arr": "1970-01-01T00:00:13+00:00", "id": 3},
        ],
    )
    a = adapter(path=str(f), time_column="ts", arrival_column="arr", cti_column="c")
    assert a.payload_schema() == "`id` bigint"
    expected = [
        ev(0, point(1, {"id": 1}), 10 * S),
        ev(1, point(2, {"id": 2}), 10 * S),
        ct(2, 2, 12 * S),
        ev(3, point(3, {"id": 3}), 13 * S),
        end(4, 13 * S),
    ]
    assert read_all(a) == expected
    assert read_all(a, start=3) == expected[3:]
    assert read_all(a, start=4) == expected[4:]  # the END keeps its arrival when resumed


def test_an_arrival_that_goes_back_is_malformed(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [{"ts": 1, "arr": 5}, {"ts": 2, "arr": 4}])
    items, error = collect(
        adapter(path=str(f), time_column="ts", arrival_column="arr").read(str(f), 0)
    )
    assert items == [ev(0, point(1, {}), 5)]
    assert isinstance(error, MalformedRecordError)
    assert "line 2 (offset 1)" in str(error)
    assert "goes back in time" in str(error)
    assert "sort the file by its arrival column" in str(error)


# -- malformed records -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_line", "fragments"),
    [
        ('{"ts": 3, "id": 3', ["not valid JSON", "one JSON object per line"]),
        ("[1, 2]", ["not a JSON object"]),
        ('{"id": 3}', ["time_column 'ts' is missing", "got null"]),
        (
            '{"ts": "2024-01-01T00:00:00", "id": 3}',
            ["naive", "UTC offset", "'2024-01-01T00:00:00'"],
        ),
        ('{"ts": "yesterday", "id": 3}', ["is not a time", "'yesterday'"]),
        ('{"ts": 1.5, "id": 3}', ["wrong type", "float 1.5", "never read as times"]),
        ('{"ts": 3, "id": "three"}', ["payload column 'id'", "a bigint value", "'three'"]),
    ],
)
def test_a_malformed_record_raises_after_the_items_before_it(
    tmp_path: Path, bad_line: str, fragments: list[str]
) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [{"ts": 1, "id": 1}, "", {"ts": 2, "id": 2}, bad_line])
    a = adapter(path=str(f), time_column="ts", schema="id bigint")
    items, error = collect(a.read(str(f), 0))
    assert items == [ev(0, point(1, {"id": 1})), ev(1, point(2, {"id": 2}))]
    assert isinstance(error, MalformedRecordError)
    message = str(error)
    assert f"malformed record in {f}, line 4 (offset 2)" in message
    assert "expected" in message and "got" in message and "Fix:" in message
    assert "dead_letter_path" in message
    for fragment in fragments:
        assert fragment in message


def test_an_interval_whose_end_is_not_after_its_start_is_malformed(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("ts,te\n1,2\n5,5\n")
    a = adapter(EventShape.INTERVAL, path=str(f), time_column="ts", end_column="te")
    items, error = collect(a.read(str(f), 0))
    assert items == [ev(0, interval(1, 2))]
    assert isinstance(error, MalformedRecordError)
    assert f"{f}, line 3 (offset 1)" in str(error)
    assert "end_column 'te' is not after the start" in str(error)


def test_a_csv_row_with_the_wrong_field_count_is_malformed(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text('ts,name\n1,"multi\nline"\n2,a,b\n')
    a = adapter(path=str(f), time_column="ts")
    items, error = collect(a.read(str(f), 0))
    assert items == [ev(0, point(1, {"name": "multi\nline"}))]
    assert isinstance(error, MalformedRecordError)
    assert f"{f}, line 4 (offset 1)" in str(error)  # the quoted field spans lines 2-3
    assert "2 fields, as in the header" in str(error)


def test_undecodable_csv_text_stops_the_read_even_with_dead_letters(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_bytes(b"ts,id\n1,1\n2,\xff\n3,3\n")
    a = adapter(
        path=str(f), time_column="ts", schema="id int", dead_letter_path=str(tmp_path / "d")
    )
    items, error = collect(a.read(str(f), 0))
    assert items == [ev(0, point(1, {"id": 1}))]
    assert isinstance(error, MalformedRecordError)
    assert f"{f}, line 3: the file cannot be read as CSV from here on" in str(error)


def test_naive_datetime_in_csv_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("ts,id\n2024-01-01 10:00:00,1\n")
    with pytest.raises(MalformedRecordError, match=r"line 2 \(offset 0\).*naive"):
        read_all(adapter(path=str(f), time_column="ts"))


def test_a_naive_payload_timestamp_is_rejected(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [{"ts": 1, "at": "2024-01-01T00:00:00"}])
    with pytest.raises(MalformedRecordError, match="payload column 'at' is a naive date-time"):
        read_all(adapter(path=str(f), time_column="ts", schema="at timestamp"))


def test_dead_letters_get_the_record_and_reading_goes_on(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    f = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": 1, "id": 1},
            "not json",
            {"ts": "2024-01-01T00:00:00", "id": 3},
            {"ts": 4, "id": 4},
        ],
    )
    a = adapter(path=str(tmp_path), time_column="ts", schema="id int", dead_letter_path=str(dead))
    assert a.partitions() == [str(f)]  # the dead-letter file is never an input
    assert read_all(a) == [ev(0, point(1, {"id": 1})), ev(3, point(4, {"id": 4})), end(4)]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["file"], d["line"], d["record"]) for d in letters] == [
        (str(f), 2, "not json"),
        (str(f), 3, '{"ts": "2024-01-01T00:00:00", "id": 3}'),
    ]
    assert f"{f}, line 2 (offset 1): the line is not valid JSON" in letters[0]["error"]
    assert "naive" in letters[1]["error"]
    # A resumed read does not dead-letter the records before its start again.
    assert read_all(a, str(f), 3) == [ev(3, point(4, {"id": 4})), end(4)]
    assert len(dead.read_text().splitlines()) == 2


def test_dead_letters_of_csv_and_parquet_hold_the_row(tmp_path: Path) -> None:
    dead = tmp_path / "dead.jsonl"
    c = tmp_path / "a.csv"
    c.write_text("ts,id\n1,x\n2,2\n")
    a = adapter(path=str(c), time_column="ts", schema="id int", dead_letter_path=str(dead))
    assert read_all(a) == [ev(1, point(2, {"id": 2})), end(2)]
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"ts": [1, None], "id": [1, 2]}), p)
    b = adapter(path=str(p), time_column="ts", dead_letter_path=str(dead))
    assert read_all(b) == [ev(0, point(1, {"id": 1})), end(2)]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["file"], d["line"], d["record"]) for d in letters] == [
        (str(c), 2, {"ts": "1", "id": "x"}),
        (str(p), 2, {"ts": None, "id": 2}),
    ]
    assert "row 2 (offset 1)" in letters[1]["error"]


# -- configuration -----------------------------------------------------------------------------


def test_config_refuses_one_column_in_two_roles_and_unknown_options() -> None:
    with pytest.raises(ValidationError, match="both 'ts'"):
        FileInputConfig(path="x.jsonl", time_column="ts", end_column="ts")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        FileInputConfig(path="x.jsonl", time_column="ts", delimiter=";")
    with pytest.raises(ValidationError, match="nested types"):
        FileInputConfig(path="x.jsonl", time_column="ts", schema="m map<string,int>")
    with pytest.raises(ValidationError, match="type 'binary'"):
        FileInputConfig(path="x.jsonl", time_column="ts", schema="b binary")


def test_config_accepts_a_pathlike_and_the_schema_alias(tmp_path: Path) -> None:
    cfg = FileInputConfig(path=tmp_path / "x.jsonl", time_column="ts", schema="id int")
    assert cfg.path == str(tmp_path / "x.jsonl")
    assert cfg.schema_ == "id int"


def test_shapes_need_their_columns() -> None:
    factory = FileInputFactory()
    assert factory.supported_shapes == frozenset(EventShape)
    with pytest.raises(QueryBuildError, match="needs end_column"):
        factory.create(FileInputConfig(path="x", time_column="ts"), EventShape.INTERVAL)
    with pytest.raises(QueryBuildError, match="POINT file input has no end"):
        factory.create(
            FileInputConfig(path="x", time_column="ts", end_column="e"), EventShape.POINT
        )
    with pytest.raises(QueryBuildError, match="edge_column"):
        factory.create(FileInputConfig(path="x", time_column="ts", end_column="e"), EventShape.EDGE)


def test_the_factory_declares_the_configured_advance_time_settings() -> None:
    settings = AdapterAdvanceTimeSettings(generation=AdvanceTimeGenerationSettings(1))
    cfg = FileInputConfig(path="x", time_column="ts", advance_time=settings)
    assert FileInputFactory().declare_advance_time_properties(cfg, EventShape.POINT) == settings
    plain = FileInputConfig(path="x", time_column="ts")
    assert FileInputFactory().declare_advance_time_properties(plain, EventShape.POINT) is None


def test_the_adapter_pickles_with_its_resolved_schema(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [{"ts": 1, "id": 1}])
    a = adapter(path=str(f), time_column="ts")
    a.payload_schema()
    copy = pickle.loads(pickle.dumps(a))
    f.write_text(json.dumps({"ts": 2, "id": 2, "new": "x"}) + "\n")
    # The executor's copy keeps the driver's schema instead of inferring again.
    assert copy.payload_schema() == "`id` bigint"
    assert read_all(copy, str(f)) == [ev(0, point(2, {"id": 2})), end(1)]


# -- output ------------------------------------------------------------------------------------


OUTPUT_ITEMS = [
    interval(NEW_YEAR_2024, NEW_YEAR_2024 + S, {"id": 1, "v": 0.5}),
    point(NEW_YEAR_2024 + 2 * S, {"id": 2, "v": None}),
    cti(NEW_YEAR_2024 + 3 * S),
]


def test_jsonl_output_writes_one_row_per_item(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    sink = FileOutputFactory().create(FileOutputConfig(path=str(out)), EventShape.INTERVAL)
    assert sink.progress() is None
    sink.deliver(0, OUTPUT_ITEMS, 0)
    sink.deliver(1, [edge_start(5, {"id": 3, "v": 1.0}), edge_end(5, 7, {"id": 3, "v": 1.0})], 3)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [
        {
            "kind": "INSERT",
            "start": "2024-01-01T00:00:00+00:00",
            "end": "2024-01-01T00:00:01+00:00",
            "edge": None,
            "id": 1,
            "v": 0.5,
        },
        {
            "kind": "INSERT",
            "start": "2024-01-01T00:00:02+00:00",
            "end": "2024-01-01T00:00:02.000001+00:00",
            "edge": None,
            "id": 2,
            "v": None,
        },
        {
            "kind": "CTI",
            "start": "2024-01-01T00:00:03+00:00",
            "end": "2024-01-01T00:00:03+00:00",
            "edge": None,
        },
        {
            "kind": "INSERT",
            "start": "1970-01-01T00:00:00.000005+00:00",
            "end": "+inf",
            "edge": "START",
            "id": 3,
            "v": 1.0,
        },
        {
            "kind": "INSERT",
            "start": "1970-01-01T00:00:00.000005+00:00",
            "end": "1970-01-01T00:00:00.000007+00:00",
            "edge": "END",
            "id": 3,
            "v": 1.0,
        },
    ]
    assert sink.progress() == 5  # output items 0-4


def test_output_reads_back_as_input(tmp_path: Path) -> None:
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"out.{fmt}"
        sink = FileOutputFactory().create(
            FileOutputConfig(path=str(out), format=fmt), EventShape.INTERVAL
        )
        sink.deliver(0, OUTPUT_ITEMS, 0)
        back = adapter(
            EventShape.INTERVAL,
            path=str(out),
            time_column="start",
            end_column="end",
            cti_column="kind",
            schema="id bigint, v double",
        )
        assert read_all(back) == [
            ev(0, OUTPUT_ITEMS[0]),
            ev(1, interval(NEW_YEAR_2024 + 2 * S, NEW_YEAR_2024 + 2 * S + 1, {"id": 2, "v": None})),
            ct(2, NEW_YEAR_2024 + 3 * S),
            end(3),
        ], fmt


def test_csv_output_has_a_header_and_spark_style_values(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    sink = FileOutputFactory().create(
        FileOutputConfig(path=str(out), format="csv"), EventShape.POINT
    )
    sink.deliver(0, [], 0)  # nothing to write yet: the header waits for the first row
    assert out.read_text() == ""
    sink.deliver(1, [point(0, {"ok": True, "name": "a, b"}), cti(1)], 0)
    assert out.read_text() == (
        "kind,start,end,edge,ok,name\n"
        'INSERT,1970-01-01T00:00:00+00:00,1970-01-01T00:00:00.000001+00:00,,true,"a, b"\n'
        "CTI,1970-01-01T00:00:00.000001+00:00,1970-01-01T00:00:00.000001+00:00,,,\n"
    )
    with pytest.raises(ValueError, match=r"payload columns \['other'\] are not in the CSV header"):
        sink.deliver(2, [point(3, {"other": 1})], 2)
    # A new adapter on the same file takes the header from the file.
    again = FileOutputFactory().create(
        FileOutputConfig(path=str(out), format="csv"), EventShape.POINT
    )
    again.deliver(2, [point(3, {"name": "c"})], 2)
    assert out.read_text().splitlines()[-1] == (
        "INSERT,1970-01-01T00:00:00.000003+00:00,1970-01-01T00:00:00.000004+00:00,,,c"
    )


def test_the_sidecar_counts_the_output_items_so_a_partial_epoch_is_completed(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    cfg = FileOutputConfig(path=str(out))
    whole = tmp_path / "whole.jsonl"
    FileOutputFactory().create(FileOutputConfig(path=str(whole)), EventShape.INTERVAL).deliver(
        0, OUTPUT_ITEMS, 0
    )
    sink = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    sink.deliver(0, OUTPUT_ITEMS[:1], 0)  # epoch 0 failed after its first item
    assert sink.progress() == 1
    # After a restart the sidecar still says so; the engine hands over the rest, items 1-2.
    restarted = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    assert restarted.progress() == 1
    restarted.deliver(0, OUTPUT_ITEMS[1:], 1)
    assert restarted.progress() == 3
    assert out.read_bytes() == whole.read_bytes()
    restarted.deliver(1, [], 3)
    assert restarted.progress() == 3
    sidecar = Path(str(out) + ".epoch")
    assert json.loads(read_checked(sidecar)) == {
        "items": 3,
        "bytes": len(whole.read_bytes()),
        "ended": False,
    }
    with pytest.raises(ValueError, match=r"holds 3 output items .* from number 0 on .*own output"):
        restarted.deliver(0, OUTPUT_ITEMS, 0)
    assert out.read_bytes() == whole.read_bytes()
    # a record of the per-epoch count an earlier version kept is not read as a count of items
    write_checked(sidecar, json.dumps({"epoch": 1, "items": 0, "bytes": len(whole.read_bytes())}))
    with pytest.raises(ValueError, match=r"is unreadable; expected \{.items.: <int or null>"):
        FileOutputFactory().create(cfg, EventShape.INTERVAL)
    # a sidecar without its checksum header (plain JSON, as earlier versions wrote it, without
    # an item count) is not trusted: refused naming it and the fix, the file left alone
    sidecar.write_text(json.dumps({"epoch": 4, "bytes": len(whole.read_bytes())}))
    with pytest.raises(
        CheckpointDamageError, match=r"has no checksum header.*Fix: .*delete the record only"
    ):
        FileOutputFactory().create(cfg, EventShape.INTERVAL)
    assert out.read_bytes() == whole.read_bytes()


def test_a_torn_tail_is_truncated_when_the_adapter_is_created(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cfg = FileOutputConfig(path=str(out))
    sink = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    sink.deliver(0, OUTPUT_ITEMS[:1], 0)
    epoch0 = out.read_bytes()
    # A crash during epoch 1: part of its rows reached the file, the sidecar did not move.
    with open(out, "ab") as f:
        f.write(b'{"kind": "INSERT", "start": "2024-01-01T00:0')
    restarted = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    assert out.read_bytes() == epoch0
    assert restarted.progress() == 1
    restarted.deliver(1, OUTPUT_ITEMS[1:], 1)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r["start"]) for r in rows] == [
        ("INSERT", "2024-01-01T00:00:00+00:00"),
        ("INSERT", "2024-01-01T00:00:02+00:00"),
        ("CTI", "2024-01-01T00:00:03+00:00"),
    ]


def test_an_output_file_shorter_than_its_sidecar_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cfg = FileOutputConfig(path=str(out))
    FileOutputFactory().create(cfg, EventShape.INTERVAL).deliver(0, OUTPUT_ITEMS, 0)
    os.truncate(out, 10)
    with pytest.raises(ValueError, match=r"records .* bytes delivered.*delete both files"):
        FileOutputFactory().create(cfg, EventShape.INTERVAL)


def test_a_sidecar_changed_on_disk_is_refused_and_the_file_left_alone(tmp_path: Path) -> None:
    # A sidecar whose byte count lost one (still valid JSON) made the adapter cut the output's
    # last byte without a word; its checksum now catches it (semantics §9).
    out = tmp_path / "out.jsonl"
    cfg = FileOutputConfig(path=str(out))
    FileOutputFactory().create(cfg, EventShape.INTERVAL).deliver(0, OUTPUT_ITEMS, 0)
    once = out.read_bytes()
    sidecar = Path(str(out) + ".epoch")
    count = f'"bytes": {len(once)}'.encode()
    assert count in sidecar.read_bytes()
    sidecar.write_bytes(sidecar.read_bytes().replace(count, f'"bytes": {len(once) - 1}'.encode()))
    with pytest.raises(CheckpointDamageError) as refused:
        FileOutputFactory().create(cfg, EventShape.INTERVAL)
    message = str(refused.value)
    assert str(sidecar) in message and "delete the record only" in message
    assert "without one (run()) would append all its output again" in message
    assert out.read_bytes() == once


def test_existing_content_without_a_sidecar_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"old": 1}\n')
    sink = FileOutputFactory().create(FileOutputConfig(path=str(out)), EventShape.POINT)
    sink.deliver(0, [cti(0)], 0)
    assert out.read_text().splitlines() == [
        '{"old": 1}',
        '{"kind": "CTI", "start": "1970-01-01T00:00:00+00:00", '
        '"end": "1970-01-01T00:00:00+00:00", "edge": null}',
    ]


def test_a_payload_column_named_like_an_output_column_is_refused(tmp_path: Path) -> None:
    sink = FileOutputFactory().create(
        FileOutputConfig(path=str(tmp_path / "o.jsonl")), EventShape.POINT
    )
    with pytest.raises(ValueError, match=r"payload column 'start'.*clashes"):
        sink.deliver(0, [point(1, {"start": 1})], 0)
    assert sink.progress() is None


def test_size_hint_bounds_the_items_from_footers_and_file_sizes(tmp_path: Path) -> None:
    # Parquet: the footers' row counts plus an END per file: 3 + 1 and 2 + 1 items, read exactly
    pq.write_table(pa.table({"ts": [1, 2, 3]}), tmp_path / "a.parquet", row_group_size=2)
    pq.write_table(pa.table({"ts": [4, 5]}), tmp_path / "b.parquet")
    a = adapter(path=str(tmp_path / "*.parquet"), time_column="ts")
    assert a.size_hint() == 7 == sum(len(read_all(a, p)) for p in a.partitions())
    # text: a record takes at least one byte, so the bytes bound it: "ts\n1\n2\n" is 7 bytes,
    # + 1 for the END, and holds 2 events and the END (3 items)
    (tmp_path / "c.csv").write_text("ts\n1\n2\n")
    c = adapter(path=str(tmp_path / "c.csv"), time_column="ts")
    assert c.size_hint() == 8
    assert len(read_all(c)) == 3


def test_nothing_is_delivered_after_the_cti_at_inf(tmp_path: Path) -> None:
    # The CTI at +inf ends a query's output: a file that ends with it is complete, and items
    # delivered after it would come from a run over other input (it grew, say) numbered as if
    # they followed on, some skipped as held. Refused, naming the file and the fix.
    out = tmp_path / "out.jsonl"
    cfg = FileOutputConfig(path=str(out))
    ended = [*OUTPUT_ITEMS, cti(MAX_TIME)]
    FileOutputFactory().create(cfg, EventShape.INTERVAL).deliver(0, ended, 0)
    whole = out.read_bytes()
    again = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    assert again.progress() == 4
    again.deliver(1, [], 4)  # nothing new: a run of the same query over the same input
    with pytest.raises(
        ValueError, match=r"ends with the CTI at \+inf .*Fix: give this run its own"
    ):
        again.deliver(1, [point(NEW_YEAR_2024 + 4 * S, {"id": 3, "v": 1.0})], 4)
    assert out.read_bytes() == whole


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_structs_arrays_and_maps_are_written_as_json_with_their_field_names(
    tmp_path: Path, fmt: str
) -> None:
    # A struct comes out of Spark as a Row, a tuple: JSON would write it as an array and lose
    # its field names, CSV as Python's repr. Both write it as a JSON object, nested ones too.
    from pyspark.sql import Row

    out = tmp_path / f"out.{fmt}"
    payload = {"st": Row(x=7, inner=Row(y="y")), "arr": [7, 2], "m": {"a": 1}}
    event = point(NEW_YEAR_2024, payload)
    cfg = FileOutputConfig(path=str(out), format=fmt)
    FileOutputFactory().create(cfg, EventShape.POINT).deliver(0, [event], 0)
    expected = {"st": {"x": 7, "inner": {"y": "y"}}, "arr": [7, 2], "m": {"a": 1}}
    if fmt == "jsonl":
        [row] = [json.loads(line) for line in out.read_text().splitlines()]
        got = {k: row[k] for k in expected}
    else:
        [row] = list(csv.DictReader(out.read_text().splitlines()))
        got = {k: json.loads(row[k]) for k in expected}
    assert got == expected


# -- an output where its input reads ------------------------------------------------------------


def test_an_output_its_input_would_read_is_refused_when_built_and_nothing_is_written(
    app, tmp_path: Path
) -> None:
    # A directory input reads every file directly in it (not '.' or '_' names), a glob what
    # it matches. An output file there would be read back as input: by a later epoch of the
    # same run (each epoch reads the files as they are then) or by the next run, as events
    # when its rows carry the input's time column ("start" here, as the output writes).
    # Refused when the query is built; the output file and its sidecar are not made.
    from ctistream.bindings import Stream

    inp = tmp_path / "in"
    (inp / "deep").mkdir(parents=True)
    write_jsonl(inp / "a.jsonl", [{"start": 1, "v": 1}])

    def build(path: str, out: Path) -> None:
        config = FileInputConfig(path=path, time_column="start", schema="v bigint")
        stream = Stream.create("events", FileInputFactory(), config, EventShape.POINT)
        name = f"own-output-{len(app.queries)}"
        output = FileOutputConfig(path=str(out))
        stream.to_query(app, name, FileOutputFactory(), output, EventShape.POINT)
        app.queries.pop(name)

    refused = [
        (str(inp), inp / "out.jsonl"),  # the directory's files
        (str(inp / "*.jsonl"), inp / "out.jsonl"),
        (str(inp / "a*"), inp / "a.out"),
        (str(tmp_path / "**" / "*.jsonl"), inp / "deep" / "out.jsonl"),  # any depth
        (str(inp / "**" / "*.jsonl"), inp / "out.jsonl"),  # depth 0 included
    ]
    for path, out in refused:
        with pytest.raises(QueryBuildError) as got:
            build(path, out)
        message = str(got.value)
        assert f"its output writes {str(out)!r}, which input 'events' reads" in message, path
        assert "Fix: write the output to another directory, or narrow" in message
        assert not out.exists() and not Path(f"{out}.epoch").exists()

    accepted = [
        (str(inp / "*.jsonl"), inp / "deep" / "out.jsonl"),  # a glob's * stays in its directory
        (str(inp), inp / "_out.jsonl"),  # a directory input skips '_' and '.' names
        (str(inp / "*.jsonl"), inp / ".out.jsonl"),  # a glob skips hidden names
        (str(inp / "a.jsonl"), inp / "b.jsonl"),  # a file input reads that file only
        (str(inp), tmp_path / "out.jsonl"),
    ]
    for path, out in accepted:
        build(path, out)
        assert not out.exists()  # made at the first delivery


def test_an_output_file_is_made_at_its_first_delivery_with_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Making the adapter for a new path writes nothing; the first delivery makes the file and
    # its record (items null, 0 bytes) before the rows, so that a crash after the rows reached
    # the file but before the record moved leaves a tail the record does not cover, cut when
    # the adapter is made again (without that first record the rows would be kept as what the
    # file held before the query, and delivered again after them).
    out = tmp_path / "out.jsonl"
    cfg = FileOutputConfig(path=str(out))
    sink = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    assert not out.exists() and not Path(f"{out}.epoch").exists()
    assert sink.progress() is None
    records = []
    real = FileOutputAdapter._write_sidecar

    def crash_after_the_rows(self, items, length, ended=False):
        if records:  # the record after the rows: the process dies first
            raise KeyboardInterrupt("killed")
        records.append((items, length))
        real(self, items, length, ended)

    monkeypatch.setattr(FileOutputAdapter, "_write_sidecar", crash_after_the_rows)
    with pytest.raises(KeyboardInterrupt):
        sink.deliver(0, OUTPUT_ITEMS[:1], 0)
    monkeypatch.undo()
    assert records == [(None, 0)] and out.stat().st_size > 0
    again = FileOutputFactory().create(cfg, EventShape.INTERVAL)
    assert out.read_bytes() == b"" and again.progress() is None
    again.deliver(0, OUTPUT_ITEMS, 0)
    assert again.progress() == len(OUTPUT_ITEMS)
    assert len(out.read_text().splitlines()) == len(OUTPUT_ITEMS)
