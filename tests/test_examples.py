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
    from bindings import Application

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
    # The late update (limit 60 from 20 s) takes effect from the CTI at its arrival (30 s) on.
    limits = {(e.start - t0) // second: e.payload["limit"] for e in imported if not e.is_cti}
    assert limits == {t: 50 if t < 30 else 60 for t in range(1, 41)}
