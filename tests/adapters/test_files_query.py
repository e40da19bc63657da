"""File inputs and outputs through a whole query on Spark: one partition per file, the input's CTI
the minimum over files, malformed records stopping the run after everything before them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.files import (
    FileInputAdapter,
    FileInputConfig,
    FileInputFactory,
    FileOutputConfig,
    FileOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    CtiViolationError,
    EventOrderingSettings,
    EventShape,
    MalformedRecordError,
    QueryBuildError,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY_EVENT = AdapterAdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
)


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def write_jsonl(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def read_output(path) -> list[tuple[str, str, dict]]:
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        payload = {k: v for k, v in row.items() if k not in ("kind", "start", "end", "edge")}
        out.append((row["kind"], row["start"], payload))
    return out


def run(app, name, config, out_path, epochs=1):
    stream = Stream.create(name, FileInputFactory(), config, EventShape.POINT)
    query = stream.to_query(
        app,
        f"{name}-{epochs}",
        FileOutputFactory(),
        FileOutputConfig(path=str(out_path)),
        EventShape.POINT,
    )
    query.run(epochs=epochs)
    return query


@pytest.mark.parametrize("epochs", [1, 3])
def test_two_files_are_two_partitions_and_the_input_cti_is_their_minimum(app, tmp_path, epochs):
    write_jsonl(tmp_path / "a.jsonl", [{"ts": iso(s), "v": s} for s in (1, 2, 3)])
    write_jsonl(tmp_path / "b.jsonl", [{"ts": iso(s), "v": s} for s in (1.5, 2.5)])
    config = FileInputConfig(
        path=str(tmp_path / "*.jsonl"), time_column="ts", advance_time=EVERY_EVENT
    )
    (tmp_path / "out").mkdir()  # not where the input's glob reads
    out = tmp_path / "out" / f"out{epochs}.jsonl"
    run(app, "files", config, out, epochs)
    # Row i of every file arrives at i: a1 b1.5 | a2 b2.5 | a3, end of b | end of a. Each file's
    # CTI follows its own events; the input's CTI is the smaller of the two.
    ins = lambda s: ("INSERT", iso(s), {"v": s})  # noqa: E731
    ct = lambda s: ("CTI", iso(s), {})  # noqa: E731
    assert read_output(out) == [
        ct(1),
        ins(1),
        ct(1.5),
        ins(1.5),
        ct(2),
        ins(2),
        ct(2.5),
        ins(2.5),
        ct(3),
        ins(3),
        ("CTI", "+inf", {}),
    ]


def test_a_malformed_record_stops_the_run_after_delivering_everything_before_it(app, tmp_path):
    write_jsonl(
        tmp_path / "in.jsonl",
        [{"ts": iso(1), "v": 1}, {"ts": iso(2), "v": 2}, '{"ts": broken', {"ts": iso(4), "v": 4}],
    )
    config = FileInputConfig(
        path=str(tmp_path / "in.jsonl"),
        time_column="ts",
        advance_time=EVERY_EVENT,
        schema="v bigint",
    )
    out = tmp_path / "out.jsonl"
    with pytest.raises(MalformedRecordError, match=r"in\.jsonl, line 3") as error:
        run(app, "bad", config, out)
    assert "Fix" in str(error.value)
    # CTIs at 1 s and 2 s were generated before the bad record; no flush, the run failed.
    assert read_output(out) == [
        ("CTI", iso(1), {}),
        ("INSERT", iso(1), {"v": 1}),
        ("CTI", iso(2), {}),
    ]


# arrival stamps are line offsets: cut before offset 2 (malformed; the first item after it is at
# offset 3) and before offset 6 (the second of two malformed lines before the item at offset 7)
@pytest.mark.parametrize("epochs", [1, [2, 6], [3, 7], 3])
def test_with_a_dead_letter_file_malformed_records_are_set_aside_once(app, tmp_path, epochs):
    naive = {"ts": "2026-01-01T00:00:02", "v": 2}
    rows = [{"ts": iso(s), "v": s} for s in range(9)]
    rows[2], rows[5], rows[6] = naive, '{"ts": broken', naive
    write_jsonl(tmp_path / "in.jsonl", rows)
    dead = tmp_path / "dead.jsonl"
    config = FileInputConfig(
        path=str(tmp_path / "in.jsonl"),
        time_column="ts",
        schema="v long",
        advance_time=EVERY_EVENT,
        dead_letter_path=str(dead),
    )
    out = tmp_path / "out.jsonl"
    run(app, "dead", config, out, epochs)
    inserted = [r[2]["v"] for r in read_output(out) if r[0] == "INSERT"]
    assert inserted == [0, 1, 3, 4, 7, 8]
    # each malformed line once, however the run is cut into epochs
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(x["line"], "naive" in x["error"]) for x in letters] == [
        (3, True),
        (6, False),
        (7, True),
    ]


@pytest.mark.parametrize("second", ["malformed", "violation"])
def test_the_first_bad_item_of_any_input_stops_the_run(app, tmp_path, second):
    # Inputs a and b (explicit CTIs, no policy) run in that order within an epoch. a breaks its
    # CTI at arrival 3; b has a bad item at arrival 2, found only when the epoch runs again up to
    # a's violation. The run must stop at b's, the first in arrival order, after delivering all
    # before it: the union's CTI min(5, 3) = 3 and the two points at 1 s.
    write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"ts": iso(1), "v": 1},
            {"ts": iso(5), "c": True},
            {"ts": iso(6), "v": 6},
            {"ts": iso(2), "v": 2},  # arrival 3: below a's CTI at 5 s
        ],
    )
    bad = '{"ts": broken' if second == "malformed" else {"ts": iso(2), "v": 2}
    write_jsonl(tmp_path / "b.jsonl", [{"ts": iso(1), "v": 10}, {"ts": iso(3), "c": True}, bad])

    def stream(name):
        config = FileInputConfig(
            path=str(tmp_path / f"{name}.jsonl"), time_column="ts", cti_column="c", schema="v long"
        )
        return Stream.create(name, FileInputFactory(), config, EventShape.POINT)

    out = tmp_path / "out.jsonl"
    query = (
        stream("a")
        .union(stream("b"))
        .to_query(
            app,
            f"first-bad-{second}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.POINT,
        )
    )
    error = MalformedRecordError if second == "malformed" else CtiViolationError
    with pytest.raises(error, match=r"b\.jsonl.*(line 3|offset 2)"):
        query.run()
    assert read_output(out) == [
        ("INSERT", iso(1), {"v": 1}),
        ("INSERT", iso(1), {"v": 10}),
        ("CTI", iso(3), {}),
    ]


def test_a_malformed_record_of_an_ordered_input_stops_the_run_after_everything_before_it(
    app, tmp_path
):
    # Arrival-time policies (§7) run before ingress and pass the malformed record on to it,
    # which stops the run where it arrived. The watermark (max event time, no out-of-order
    # tolerance) makes CTIs at 1 s and 2 s; the point at 2 s waits for a later CTI, which never
    # comes.
    rows = [{"t": iso(s), "a": iso(s), "v": s} for s in (1, 2, 4)]
    write_jsonl(tmp_path / "in.jsonl", [*rows[:2], '{"t": broken', rows[2]])
    config = FileInputConfig(
        path=str(tmp_path / "in.jsonl"),
        time_column="t",
        arrival_column="a",
        schema="t timestamp, v long",
    )
    stream = Stream.create(
        "ordered",
        FileInputFactory(),
        config,
        EventShape.POINT,
        ordering=EventOrderingSettings(event_time="t"),
    )
    out = tmp_path / "out.jsonl"
    query = stream.to_query(
        app, "ordered-bad", FileOutputFactory(), FileOutputConfig(path=str(out)), EventShape.POINT
    )
    with pytest.raises(MalformedRecordError, match=r"in\.jsonl, line 3"):
        query.run()
    assert read_output(out) == [
        ("CTI", iso(1), {}),
        ("INSERT", iso(1), {"t": iso(1), "v": 1}),
        ("CTI", iso(2), {}),
    ]


class _OldBatches(FileInputAdapter):
    """An override written before read_batches took ``until``."""

    def read_batches(self, partition, start_offset, payload):
        yield from super().read_batches(partition, start_offset, payload)


class _OldBatchesFactory(FileInputFactory):
    def create(self, config, shape):
        return _OldBatches(config, shape)


def test_a_read_batches_override_without_until_fails_when_the_query_is_built(app, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [{"ts": iso(1), "v": 1}])
    config = FileInputConfig(path=str(tmp_path / "in.jsonl"), time_column="ts", schema="v long")
    stream = Stream.create("old", _OldBatchesFactory(), config, EventShape.POINT)
    output = FileOutputConfig(path=str(tmp_path / "out.jsonl"))
    with pytest.raises(QueryBuildError) as info:
        stream.to_query(app, "old", FileOutputFactory(), output, EventShape.POINT)
    message = str(info.value)
    assert "input 'old': _OldBatches.read_batches" in message
    assert "expected read_batches(partition, start_offset, payload, until=None)" in message
    assert "Fix: add 'until=None'" in message
