"""Timestamps are instants: a query gives the same results whatever the Spark session's time zone
(``spark.sql.session.timeZone``), worked by hand. Spark hands the engine's grouped Arrow functions
(an input's scan when CTIs come from elsewhere, a join's pairing, a session window) timestamps
labelled with that zone and takes back only UTC ones: each function relabels what it returns."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.memory import EventScript
from ctistream.engine import (
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimeSettings,
    EventShape,
    cti,
    interval,
    point,
)
from pyspark.sql import functions as F

from tests.harness import In, spark_run

#: only the script's CTIs, +inf when the run stops (a CTI every partition of the input takes)
FLUSHED = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
BASE = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # Europe's clocks go forward this night
SINCE = datetime(2025, 10, 26, 1, 15, tzinfo=UTC)  # and back this one


@contextmanager
def session_time_zone(spark, zone: str):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def _script() -> EventScript:
    # l: points at 0..5 µs, key t % 2, each with the instant BASE + t hours; r: one interval
    # [0, 100) per key with the instant SINCE
    script = EventScript()
    for k in (0, 1):
        script.insert("r", interval(0, 100, {"k": k, "since": SINCE}))
    for t in range(6):
        script.insert("l", point(t, {"k": t % 2, "at": BASE + timedelta(hours=t)}))
    return script


def _sessions(s):
    joined = s["l"].join(s["r"], on="k")
    return (
        joined.session_window(timedelta(microseconds=10))
        .group_by("k")
        .aggregate(last=F.max("at"), since=F.max("since"), n=F.count("*"))
    )


# Per key, the three points joined with the key's interval form one session: k = 0 has 0, 2, 4
# (reach 4 + 1 + 10 = 15), k = 1 has 1, 3, 5 (reach 16); both close at the CTI +inf.
EXPECTED = [
    interval(0, 15, {"k": 0, "last": BASE + timedelta(hours=4), "since": SINCE, "n": 3}),
    interval(1, 16, {"k": 1, "last": BASE + timedelta(hours=5), "since": SINCE, "n": 3}),
    cti(MAX_TIME),
]


@pytest.mark.parametrize("zone", ["America/Los_Angeles", "Europe/Berlin", "UTC"])
@pytest.mark.parametrize("lookup", [False, True], ids=["join", "lookup-join"])
def test_timestamps_come_out_as_the_same_instants_in_any_session_time_zone(app, zone, lookup):
    # lookup: r imports l's CTIs, so r's scan takes CTIs from elsewhere and the join pairs l's
    # packed events; otherwise both sides are joined by their keys' buckets
    imports = AdvanceTimeSettings(import_settings=AdvanceTimeImportSettings("l"))
    inputs = {
        "l": In(EventShape.POINT, FLUSHED, "k long, at timestamp"),
        "r": In(EventShape.INTERVAL, imports if lookup else FLUSHED, "k long, since timestamp"),
    }
    with session_time_zone(app.spark, zone):
        out, _ = spark_run(app, _script(), inputs, _sessions, EventShape.INTERVAL, 2)
    assert sorted(out[:-1], key=lambda e: e.start) + out[-1:] == EXPECTED


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin"])
def test_other_types_pass_a_grouped_arrow_function_as_they_are(app, zone):
    # A map whose values cannot be null (made by create_map) next to the timestamp: relabelling
    # the timestamp must leave the map's type as it is, or Spark refuses the function's result.
    # k = 0 has points 0, 2, 4 (one session [0, 15)), k = 1 has 1, 3, 5 ([1, 16)).
    inputs = {"l": In(EventShape.POINT, FLUSHED, "k long, at timestamp")}

    def build(s):
        mapped = s["l"].select("k", "at", F.create_map(F.lit("a"), F.lit(1)).alias("m"))
        sessions = mapped.session_window(timedelta(microseconds=10)).group_by("k")
        return sessions.aggregate(last=F.max("at"), n=F.count("*"))

    with session_time_zone(app.spark, zone):
        out, _ = spark_run(app, _script(), inputs, build, EventShape.INTERVAL, 2)
    assert sorted(out[:-1], key=lambda e: e.start) + out[-1:] == [
        interval(0, 15, {"k": 0, "last": BASE + timedelta(hours=4), "n": 3}),
        interval(1, 16, {"k": 1, "last": BASE + timedelta(hours=5), "n": 3}),
        cti(MAX_TIME),
    ]
