"""Every example script runs and prints what its queries deliver."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_prints_its_events_and_ctis(spark, capsys):
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    # The late reading (99.0 at 12:00:00.5) is dropped; 61 °C is 141.8 °F.
    assert "'fahrenheit': 141.8" in out and "'fahrenheit': 210.2" not in out
    assert "'dropped': 1" in out
    # The late limit update is adjusted to the sensors' CTI at 12:00:07.
    assert "2026-11-21T12:00:07+00:00 (1795262407000000 ticks)  {'sensor': 2, 'value': 60.0}" in out
    assert out.count("CTI   +inf") == 2


def test_lookup_join_follows_the_data_stream_only_with_cti_import(spark):
    module = runpy.run_path(str(EXAMPLES / "lookup_join.py"))
    from ctistream.bindings import Application

    app = Application("lookup-test", spark)
    own = module["run"](app, import_ctis=False)
    imported = module["run"](app, import_ctis=True)
    second = 1_000_000
    t0 = 1_795_262_400 * second  # 2026-11-21T12:00:00Z

    def finite_ctis(out):
        return [(e.start - t0) // second for e in out if e.is_cti and e.start < 2**63 - 1]

    # Without import the join's CTI is stuck at the reference stream's own time (20 s) ...
    assert max(finite_ctis(own)) == 20
    # ... with it, the join's CTIs follow the data stream, one per data point.
    assert finite_ctis(imported) == list(range(1, 41))
    # The late update, written as it happened (limit 50 ends at 20 s, limit 60 starts at 20 s),
    # arrives with the CTI at 30 s: the late END edge closes limit 50 at 30 s (§3.4; dropping it
    # would keep 50 valid forever, and readings 30-40 s would join both limits) and ADJUST
    # starts limit 60 at 30 s. Each reading is joined once: 50 for 1-29 s, 60 for 30-40 s.
    joined = sorted(
        ((e.start - t0) // second, e.payload["limit"]) for e in imported if not e.is_cti
    )
    assert joined == [(t, 50 if t < 30 else 60) for t in range(1, 41)]
    assert module["limits_by_reading"](imported) == [([50], 1, 29), ([60], 30, 40)]
    # Without import the update is on time (the lookup stream's own CTI is 0): 50 ends at 20 s.
    assert module["limits_by_reading"](own) == [([50], 1, 19), ([60], 20, 40)]
    # The lookup stream as versions (a row for 50 from 0 s, a late row for 60 from 20 s) gives
    # the same output, CTIs included: the row for 60 closes 50 at 20 s, or at the CTI (30 s)
    # when late, and ADJUST starts 60 there.
    assert module["run"](app, import_ctis=True, versions=True) == imported
    assert module["run"](app, import_ctis=False, versions=True) == own


def test_adapter_factories_pull_push_and_output_adapters(spark, capsys):
    module = runpy.run_path(str(EXAMPLES / "adapter_factories.py"))
    from ctistream.bindings import Application

    out = module["run"](Application("factories-test", spark))
    t0 = 1_795_262_400 * 1_000_000
    events = [((e.start - t0) // 1_000_000, e.payload) for e in out if not e.is_cti]
    # [0, 10 s): meter 1 0.5 + 0.7, meter 2 1.5 (its 9.9 at 3 s arrives after the shard's CTI at
    # 10 s and is dropped), meter 3 2.0 + 1.0 (pushed); [10, 20 s): 0.2, 1.0, 4.0.
    assert events == [
        (0, {"meter": 1, "kwh": 1.2, "n": 2}),
        (0, {"meter": 2, "kwh": 1.5, "n": 1}),
        (0, {"meter": 3, "kwh": 3.0, "n": 2}),
        (10, {"meter": 1, "kwh": 0.2, "n": 1}),
        (10, {"meter": 2, "kwh": 1.0, "n": 1}),
        (10, {"meter": 3, "kwh": 4.0, "n": 1}),
    ]
    assert "'dropped': 1" in capsys.readouterr().out


def test_query_binder_binds_one_template_to_memory_and_to_kafka(spark, kafka_broker, capsys):
    import json

    from ctistream.bindings import Application

    from tests.adapters.test_kafka import raw_records

    module = runpy.run_path(str(EXAMPLES / "query_binder.py"))
    source, sink = kafka_broker.create_topic(1), kafka_broker.create_topic(1)
    argv = ["--bootstrap", kafka_broker.bootstrap, "--source", source, "--sink", sink]
    module["main"](argv, Application("binder-example", spark))
    # Hottest per sensor per 10 s: s1 max(20.5, 24.0), s2 31.0; then s1 22.0, s2 29.5.
    expected = [
        ("2026-11-21T12:00:00+00:00", "s1", 24.0),
        ("2026-11-21T12:00:00+00:00", "s2", 31.0),
        ("2026-11-21T12:00:10+00:00", "s1", 22.0),
        ("2026-11-21T12:00:10+00:00", "s2", 29.5),
    ]
    values = [json.loads(r.value) for r in raw_records(kafka_broker.bootstrap, sink)]
    assert [(v["start"], v["sensor"], v["celsius"]) for v in values] == expected
    printed = [line for line in capsys.readouterr().out.splitlines() if "event" in line]
    assert [line.split("'sensor': ")[1] for line in printed] == [
        f"'{s}', 'celsius': {c}}}" for _, s, c in expected
    ]


def test_sensor_activity_ranks_applies_sessions_and_clips_as_worked_by_hand(spark, capsys):
    module = runpy.run_path(str(EXAMPLES / "sensor_activity.py"))
    from ctistream.bindings import Application

    out = module["run"](Application("sensor-activity-test", spark))
    t0 = 1_795_262_400 * 1_000_000  # 2026-11-21T12:00:00Z
    minute = 60_000_000

    def events(name):
        return [((e.start - t0) // minute, dict(e.payload)) for e in out[name] if not e.is_cti]

    # Minute 0: sensor 1 has 4 readings (2, 14, 31, 55 s), sensors 2 and 3 have 3, 4 and 5 one:
    # 2 and 3 tie on the count, broken by the payload (sensor 2 first). Minute 1: sensors 4
    # (63, 70, 90 s) and 5 (75, 99, 104 s) have 3, then 1 and 2 one each (sensor 1 first).
    assert events("busiest") == [
        (0, {"sensor": 1, "readings": 4, "rank": 1}),
        (0, {"sensor": 2, "readings": 3, "rank": 2}),
        (0, {"sensor": 3, "readings": 3, "rank": 3}),
        (1, {"sensor": 1, "readings": 1, "rank": 3}),
        (1, {"sensor": 4, "readings": 3, "rank": 1}),
        (1, {"sensor": 5, "readings": 3, "rank": 2}),
    ]
    # Each sensor's peak per minute and its second within the minute.
    assert events("peaks") == [
        (0, {"sensor": 1, "peak": 24.0, "at_second": 55}),
        (0, {"sensor": 2, "peak": 33.5, "at_second": 20}),
        (0, {"sensor": 3, "peak": 19.5, "at_second": 38}),
        (0, {"sensor": 4, "peak": 40.0, "at_second": 25}),
        (0, {"sensor": 5, "peak": 12.0, "at_second": 50}),
        (1, {"sensor": 1, "peak": 25.0, "at_second": 50}),
        (1, {"sensor": 2, "peak": 29.0, "at_second": 21}),
        (1, {"sensor": 4, "peak": 43.5, "at_second": 10}),
        (1, {"sensor": 5, "peak": 13.5, "at_second": 39}),
    ]
    # CTIs 5 s behind each reading, pulled back to the start of the earliest open minute: the
    # reading at 2 s makes -3 s (minute -1 open: 11:59), 5 s makes 0 (12:00). Minute 0 is
    # released with the first CTI past its end (the reading at 70 s: 65 s, pulled to 12:01);
    # minute 1 at the flush.
    ctis = [e.start for e in out["peaks"] if e.is_cti]
    assert ctis == [t0 - minute, t0, t0 + minute, 2**63 - 1]
    assert "top_k 3 by readings desc nulls last" in capsys.readouterr().out

    # Sessions, timeout 20 s: a reading is a point [s, s + 1 tick), so a session's reach is its
    # latest reading + 1 tick + 20 s. Sensor 1 (2, 14, 31, 55, 110 s): 14 < 22 s + 1 tick joins,
    # 31 < 34 s + 1 tick joins, 55 >= 51 s + 1 tick opens a new one, 110 >= 75 s + 1 tick too.
    # Sensor 3 (9, 38, 58): 58 < 58 s + 1 tick (38's reach) joins 38's session, by one tick.
    # Sensor 4 (25, 63, 70, 90): 90 < 90 s + 1 tick joins likewise. Sensor 5 (50, 75, 99, 104).
    # Sensor 2 (5, 20, 44, 81): 44 >= 40 s + 1 tick opens a new one. All close by the flush.
    s = 1_000_000

    def session(first, last, sensor, n, peak):
        return (t0 + first * s, t0 + last * s + 1 + 20 * s, sensor, n, peak)

    got = sorted(
        (e.start, e.end, e.payload["sensor"], e.payload["readings"], e.payload["peak"])
        for e in out["sessions"]
        if not e.is_cti
    )
    assert got == sorted(
        [
            session(2, 31, 1, 3, 22.5), session(55, 55, 1, 1, 24.0), session(110, 110, 1, 1, 25.0),
            session(5, 20, 2, 2, 33.5), session(44, 44, 2, 1, 30.0), session(81, 81, 2, 1, 29.0),
            session(9, 9, 3, 1, 18.0), session(38, 58, 3, 2, 19.5),
            session(25, 25, 4, 1, 40.0), session(63, 90, 4, 3, 43.5),
            session(50, 50, 5, 1, 12.0), session(75, 75, 5, 1, 11.0), session(99, 104, 5, 2, 13.5),
        ]
    )  # fmt: skip
    # The output CTI waits at the earliest open session. Until the reading at 58 s it is held at
    # 2 s (sensor 1's first session, reach 51 s + 1 tick, is open while the input CTI, 5 s
    # behind the readings, is below that). With the reading at 58 s the input CTI is 53 s: the
    # sessions of 1 from 2 s, 2 from 5 s, 3 from 9 s and 4 from 25 s have closed (ends <= 53 s);
    # the earliest still open is sensor 3's from 38 s (38 and 58: reach 78 s + 1 tick), before
    # 2's from 44 s, 5's from 50 s and 1's from 55 s. So the CTI rises from 2 s to 38 s, and
    # those four sessions are released just before it.
    sessions = out["sessions"]
    ctis = [e.start for e in sessions if e.is_cti]
    assert ctis[ctis.index(t0 + 2 * s) + 1] == t0 + 38 * s
    at_38 = next(i for i, e in enumerate(sessions) if e.is_cti and e.start == t0 + 38 * s)
    at_2 = next(i for i, e in enumerate(sessions) if e.is_cti and e.start == t0 + 2 * s)
    released = [(e.start - t0) // s for e in sessions[at_2 + 1 : at_38]]
    assert released == [2, 5, 9, 25]
    assert sessions[-1].is_cti and sessions[-1].start == 2**63 - 1

    # Clipped: each reading lasts until the same sensor's next reading, at most 60 s.
    readings = module["READINGS"]
    expected = []
    for i, (second, sensor, value) in enumerate(readings):
        later = [r for r, k, _ in readings[i + 1 :] if k == sensor and r < second + 60]
        end = later[0] if later else second + 60
        expected.append((t0 + second * s, t0 + end * s, sensor, value))
    # worked out: sensor 1 [2, 14) [14, 31) [31, 55) [55, 110) [110, 170); sensor 4 [25, 63)
    # [63, 70) [70, 90) [90, 150); 5's last two [99, 104) [104, 164)
    assert (t0 + 55 * s, t0 + 110 * s, 1, 24.0) in expected
    assert (t0 + 110 * s, t0 + 170 * s, 1, 25.0) in expected
    clipped = [e for e in out["clipped"] if not e.is_cti]
    got = [(e.start, e.end, e.payload["sensor"], e.payload["v"]) for e in clipped]
    assert sorted(got) == sorted(expected)
