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
