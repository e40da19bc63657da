"""Inspecting a query: ``Stream.explain()``, ``Stream.schema``, the reprs of streams, queries and
events (ISO times), and ``metrics()`` with ISO CTIs beside their ticks. Expected texts are
worked out by hand from the plan each test builds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.engine.errors import QueryBuildError
from pyspark.sql import functions as F

from ctistream import (
    MAX_TIME,
    MIN_TIME,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventOrderingSettings,
    EventShape,
    Stream,
    Versions,
    WindowOutput,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # 1_767_225_600 s after the epoch
S = 1_000_000  # ticks per second

INPUT_RULE = "the input's own: explicit, generated or imported (§3)"
SAME = "the input's, unchanged (§5)"


def _plan() -> tuple[Stream, Stream]:
    """Sensors split by device (substreams) joined with an un-keyed lookup stream on the key,
    shifted, windowed per device, merged and projected: every kind of line explain() prints."""
    sensors = Stream.create(
        "sensors",
        MemoryInputFactory(),
        MemoryInputConfig(script=EventScript(), schema="device string, v double, t timestamp"),
        EventShape.POINT,
        ordering=EventOrderingSettings(event_time="t", over="device"),
    )
    limits = Stream.create(
        "limits",
        MemoryInputFactory(),
        MemoryInputConfig(script=EventScript(), schema="device string, limit double"),
        EventShape.EDGE,
        AdvanceTimeSettings(None, AdvanceTimeImportSettings("sensors"), AdvanceTimePolicy.ADJUST),
    )
    joined = sensors.where(F.col("v") > 0.5).join(limits, on="device")
    top = (
        joined.shift_event_time(timedelta(seconds=5))
        .tumbling_window(timedelta(minutes=1), output=WindowOutput.POINT_AT_END)
        .group_by("device")
        .aggregate(n=F.count("*"), top=F.max("v"))
        .merge_substreams()
        .select("device", "top")
    )
    return joined, top


def test_explain_shows_each_operator_with_its_key_and_cti_rule(spark):  # Columns need one
    _, top = _plan()
    # Root first, each input indented under the operator that reads it (the join: left, then
    # right). The key is 'device' from the sensors input (over=) up to the window grouped by it;
    # the lookup input has none; merge_substreams drops it, so it and the select show "-".
    assert top.explain().splitlines() == [
        f"select device, top  key -  CTI: {SAME}",
        "  merge_substreams  key -  CTI: the input's CTIs that hold for every key; keyed CTIs "
        "dropped (§7)",
        "    tumbling_window 1 minute group_by device aggregate n=count(*), top=max(v), each "
        "result a point at its window's end  key 'device'  CTI: pulled back to the end of the "
        "earliest window still open; the input's when none is (§5)",
        "      shift_event_time 5 seconds  key 'device'  CTI: moved by the shift: c + shift (§5)",
        "        join on device  key 'device'  CTI: the older of the two sides' latest CTIs (§5)",
        f"          where (v > 0.5)  key 'device'  CTI: {SAME}",
        f"            input 'sensors' (POINT)  key 'device'  CTI: {INPUT_RULE}",
        f"          input 'limits' (EDGE)  key -  CTI: {INPUT_RULE}",
    ]


def test_explain_names_the_lifetime_operators_and_the_hopping_window(spark):
    a = Stream.input("a", "k bigint, v double")
    lines = [
        a.to_point().explain().splitlines()[0],
        a.alter_event_duration(timedelta(seconds=90)).explain().splitlines()[0],
        a.shift_event_time(timedelta(seconds=-5)).explain().splitlines()[0],
        a.hopping_window(timedelta(minutes=1), timedelta(seconds=10))
        .aggregate(s=F.sum("v"))
        .explain()
        .splitlines()[0],
        a.snapshot_window().group_by("k").aggregate(n=F.count("v")).explain().splitlines()[0],
        a.union(a.where("v > 1")).explain().splitlines()[0],
        a.anti_join(a, on=["k"]).explain().splitlines()[-1],
    ]
    # to_point and alter_event_duration keep every start, so the CTI too; a shift moves both
    assert lines == [
        f"to_point  key -  CTI: {SAME}",
        f"alter_event_duration 90 seconds  key -  CTI: {SAME}",
        "shift_event_time -5 seconds  key -  CTI: moved by the shift: c + shift (§5)",
        "hopping_window 1 minute every 10 seconds aggregate s=sum(v)  key -  CTI: pulled back to "
        "the start of the earliest window still open; the input's when none is (§5)",
        "snapshot_window group_by k aggregate n=count(v)  key -  CTI: the start of the snapshot "
        "that holds the input's CTI, or that CTI where no event spans it (§5)",
        "union of 2  key -  CTI: the oldest of the inputs' latest CTIs (§5)",
        f"  input 'a' (template input: k bigint, v double)  key -  CTI: {INPUT_RULE}",
    ]


def test_schema_is_the_payload_each_operator_makes(spark):
    joined, top = _plan()
    # The join: the left side's columns, then the right side's, the clashing key prefixed.
    assert joined.schema.simpleString() == (
        "struct<device:string,v:double,t:timestamp,right_device:string,limit:double>"
    )
    # The window: its group key, then the aggregates (count is a bigint, max of a double a
    # double); the select keeps two of them.
    assert top.schema.simpleString() == "struct<device:string,top:double>"


def test_schema_names_a_misspelled_column_as_the_query_would(spark):
    # the payload rules and their errors are the ones the query is checked with when made: the
    # call, the column, the closest one; no Spark plan
    joined, _ = _plan()
    with pytest.raises(QueryBuildError) as error:
        joined.where("limt > 1").schema  # noqa: B018
    message = str(error.value)
    assert "'limt'" in message and "'limit'" in message and "Fix:" in message
    assert "LogicalRDD" not in message and "#" not in message


def test_the_repr_of_a_stream_names_its_operator_inputs_and_key():
    joined, top = _plan()
    assert (
        repr(joined)
        == "<Stream join on device; inputs 'sensors', 'limits', substream key 'device'>"
    )
    assert repr(top) == "<Stream select device, top; inputs 'sensors', 'limits'>"


def test_events_show_iso_times_and_keep_their_ticks():
    t = T0 + timedelta(seconds=5)
    p = point(t, {"sensor": 1})
    assert repr(p) == "point(2026-01-01T00:00:05+00:00, {'sensor': 1})"
    assert (p.start, p.end) == (1_767_225_605 * S, 1_767_225_605 * S + 1)
    assert repr(interval(t, t + timedelta(milliseconds=1500), {})) == (
        "interval(2026-01-01T00:00:05+00:00, 2026-01-01T00:00:06.500000+00:00, {})"
    )
    assert (
        repr(edge_start(3, {"a": "x"}))
        == "edge_start(1970-01-01T00:00:00.000003+00:00, {'a': 'x'})"
    )
    assert repr(edge_end(t, t + timedelta(seconds=1), {})) == (
        "edge_end(2026-01-01T00:00:05+00:00, 2026-01-01T00:00:06+00:00, {})"
    )
    assert [repr(cti(MAX_TIME)), repr(cti(MIN_TIME)), repr(cti(t))] == [
        "cti(+inf)",
        "cti(-inf)",
        "cti(2026-01-01T00:00:05+00:00)",
    ]
    # error messages add the ticks
    assert p.describe() == (
        "point(2026-01-01T00:00:05+00:00, {'sensor': 1}) "
        "(start 1767225605000000 ticks, end 1767225605000001 ticks)"
    )


def test_metrics_and_the_query_repr_show_ctis_in_iso_with_ticks_beside(app):
    script = EventScript()
    script.insert("a", point(T0 + timedelta(seconds=1), {"v": 1}))
    script.insert("a", point(T0 + timedelta(seconds=3), {"v": 2}))
    # A CTI at each start (count 1, no delay), no flush: the input's CTI ends at 3 s, which
    # commits the point at 1 s and holds the one at 3 s.
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0), False))
    stream = Stream.create(
        "a", MemoryInputFactory(), MemoryInputConfig(script=script), EventShape.POINT, settings
    )
    name = "inspect-metrics"
    query = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    try:
        assert repr(query) == (
            f"<Query {name!r}: 'a' (POINT) -> MemoryOutputAdapter (POINT); output CTI -inf; idle>"
        )
        query.run()
        m = query.metrics()["a"]
        assert (m["cti"], m["cti_ticks"]) == ("2026-01-01T00:00:03+00:00", 1_767_225_603 * S)
        assert (m["events_in"], m["ctis_generated"]) == (2, 2)
        assert MemoryOutputFactory.collected(name) == [
            cti(T0 + timedelta(seconds=1)),
            point(T0 + timedelta(seconds=1), {"v": 1}),
            cti(T0 + timedelta(seconds=3)),
        ]
        assert repr(query) == (
            f"<Query {name!r}: 'a' (POINT) -> MemoryOutputAdapter (POINT); output CTI "
            "2026-01-01T00:00:03+00:00; idle>"
        )
    finally:
        app.queries.pop(name, None)


def test_explain_names_an_input_given_as_versions_and_what_it_becomes(spark):
    limits = Stream.create(
        "limits",
        MemoryInputFactory(),
        MemoryInputConfig(script=EventScript(), schema="site string, device string, limit double"),
        EventShape.POINT,
        versions=Versions(key=("site", "device")),
    )
    made = "input 'limits' (versions of site, device, made into EDGE events)"
    assert limits.explain() == f"{made}  key -  CTI: {INPUT_RULE}"
