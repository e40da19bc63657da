"""Payload values as output adapters receive them: the Python values the input gave, whichever
way egress collects the epoch (Arrow for flat payloads, rows for binary and nested ones)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from ctistream.adapters.memory import EventScript
from ctistream.engine import EventKind, cti, point

from tests.harness import In, spark_run

S = 1_000_000
T = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)

FLAT = "i int, l long, d double, s string, b boolean, t timestamp, dt date, dec decimal(10,2)"
FLAT_VALUES = [
    {
        "i": 1,
        "l": 2**40,
        "d": 0.5,
        "s": "é✓",
        "b": True,
        "t": T,
        "dt": date(2026, 3, 1),
        "dec": Decimal("12.34"),
    },
    dict.fromkeys(["i", "l", "d", "s", "b", "t", "dt", "dec"]),
]
NESTED = "bin binary, arr array<int>, st struct<a:int,z:string>, m map<string,int>"
NESTED_VALUES = [
    {"bin": b"\x00\xff", "arr": [1, None, 3], "st": (1, "x"), "m": {"k": 1}},
    dict.fromkeys(["bin", "arr", "st", "m"]),
]


@pytest.mark.parametrize(("schema", "values"), [(FLAT, FLAT_VALUES), (NESTED, NESTED_VALUES)])
def test_payload_values_reach_the_output_as_the_input_gave_them(app, schema, values):
    script = EventScript()
    for k, v in enumerate(values):
        script.insert("a", point((k + 1) * S, v))
    script.cti("a", 10 * S)
    out, _ = spark_run(app, script, {"a": In(schema=schema)})
    events = [e for e in out if e.kind is EventKind.INSERT]
    assert [e.start for e in events] == [S, 2 * S]
    assert out[-1] == cti(10 * S)
    for e, v in zip(events, values, strict=True):
        assert e.payload == v
        for name, got in e.payload.items():
            # same types too (a bool is not just == 1, a decimal stays exact)
            assert type(got) is type(v[name]) or isinstance(v[name], bytes | tuple)
    t = events[0].payload.get("t")
    if t is not None:  # timestamps are aware, in UTC
        assert t.utcoffset().total_seconds() == 0
        assert t == T
    assert events == [point((k + 1) * S, v) for k, v in enumerate(values)]
