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


def test_top_sensors_ranks_the_busiest_per_minute_and_applies_a_pandas_function(spark, capsys):
    module = runpy.run_path(str(EXAMPLES / "top_sensors.py"))
    from ctistream.bindings import Application

    out = module["run"](Application("top-sensors-test", spark))
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
