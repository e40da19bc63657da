"""The ``ctistream`` command: runs a query named ``module:attr``, prints metrics, draws the
timeline; refuses a target that names no query, saying what, expected and the fix."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from ctistream.bindings.cli import main

ROOT = Path(__file__).resolve().parent.parent
LOOKUP = ROOT / "examples" / "lookup_join.py"
t0 = 1_795_262_400 * 1_000_000  # 2026-11-21T12:00:00Z
S = 1_000_000


def test_the_command_runs_an_example_prints_metrics_and_writes_the_timeline(tmp_path):
    png, html = tmp_path / "t.png", tmp_path / "t.html"
    cmd = [
        sys.executable,
        "-m",
        "ctistream.bindings.cli",
        "examples/lookup_join.py:query",
        "--epochs",
        "1",
    ]
    cmd += ["--timeline-png", str(png), "--timeline-html", str(html)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "query 'lookup-import': ran in 1 epoch(s)" in out
    assert "[Stage" not in done.stderr  # no progress bar over the output
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    header = rows["input"]
    # 40 data points, each followed by a CTI, and the flush at the end: 41 generated CTIs, all
    # imported by the lookup stream. Its late update (both arriving after the CTI at 30 s) counts
    # two adjustments: the END edge at 20 s closes limit 50 at 30 s (semantics §3.4), and ADJUST
    # moves the START edge of limit 60 from 20 s to 30 s.
    assert rows["dataStream"][header.index("events_in")] == "40"
    assert rows["dataStream"][header.index("ctis_generated")] == "41"
    assert rows["lookupStream"][header.index("ctis_imported")] == "41"
    assert rows["lookupStream"][header.index("adjusted")] == "2"
    assert rows["2:join"][-1] == "+inf"
    assert f"timeline: {png} and {html}" in out

    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 20_000
    page = html.read_text()
    end, start = re.findall(r'<g class="event adjusted"[^>]*>', page)  # in arrival order
    for mark, kind in ((end, "end"), (start, "start")):
        assert 'data-input="lookupStream"' in mark and f'data-kind="{kind}"' in mark
        assert f'data-time="{t0 + 20 * S}"' in mark and f'data-adjusted="{t0 + 30 * S}"' in mark
    # The join's output CTIs follow the data stream: 1 s .. 40 s, then +inf at the stop.
    values = re.findall(r'class="cti output-cti"[^>]*data-value="([^"]+)"', page)
    assert values == [str(t0 + k * S) for k in range(1, 41)] + ["+inf"]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("lookup_join", r"expected MODULE:ATTR.*got 'lookup_join'.*Fix:"),
        ("no_such_module_x1:query", r"no module named 'no_such_module_x1'.*expected.*Fix:"),
        (f"{ROOT}/examples/nope.py:query", r"no file .*nope\.py.*expected.*Fix:"),
        (
            f"{LOOKUP}:nothing",
            r"has no attribute 'nothing'.*\['at', 'build', .*'main', 'query', 'run', .*Fix:",
        ),
        ("math:pi", r"math:pi is a float .*expected a ctistream\.Query.*Fix:"),
        (f"{LOOKUP}:build", r"takes arguments \['app', 'import_ctis'\].*Fix:"),
        (f"{LOOKUP}:script", r"returned EventScript .*expected a ctistream\.Query.*Fix:"),
    ],
)
def test_a_target_that_names_no_query_is_refused(target, says, capsys):
    assert main([target]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctistream: ") and re.search(says, err, re.S), err


def test_the_command_cuts_the_run_by_size_unless_told_how_many_epochs():
    # as query.run(): the default is None (epochs of at most about EPOCH_ITEMS input items), so
    # the command's memory does not grow with the input; --epochs N still cuts into N
    from ctistream.bindings.cli import _parser

    assert _parser().parse_args(["m:q"]).epochs is None
    assert _parser().parse_args(["m:q", "--epochs", "3"]).epochs == 3


_PROGRESS_MODULE = """
from datetime import UTC, datetime, timedelta

from ctistream.adapters.memory import (
    EventScript, MemoryInputConfig, MemoryInputFactory, MemoryOutputConfig, MemoryOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings, AdvanceTimePolicy, AdvanceTimeSettings, EventShape, point,
)
from pyspark.sql import SparkSession

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def query():
    script = EventScript()
    script.insert("s", point(T0 + timedelta(seconds=1), {"v": 1}))
    script.cti("s", T0 + timedelta(seconds=5))
    script.insert("s", point(T0 + timedelta(seconds=3), {"v": 2}))  # behind the CTI: dropped
    script.insert("s", point(T0 + timedelta(seconds=6), {"v": 3}))
    script.cti("s", T0 + timedelta(seconds=10))
    settings = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(100, timedelta(0)), policy=AdvanceTimePolicy.DROP
    )
    stream = Stream.create(
        "s", MemoryInputFactory(), MemoryInputConfig(script=script, schema="v int"),
        EventShape.POINT, settings,
    )
    app = Application("cli-progress", SparkSession.getActiveSession())
    return stream.to_query(
        app, "cli-progress", MemoryOutputFactory(), MemoryOutputConfig(name="cli-progress"),
        EventShape.POINT,
    )
"""


def test_the_command_prints_a_line_per_epoch_made_from_its_progress_record(spark, tmp_path, capsys):
    module = tmp_path / "progress_query.py"
    module.write_text(_PROGRESS_MODULE)
    assert main([f"{module}:query", "--epochs", "1", "--no-timeline"]) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if x.startswith("[cli-progress] epoch")]
    # By hand: 3 events and 2 CTIs read; the point at 3 s came behind the CTI 5 s (dropped);
    # the CTI 10 s released the points at 1 s and 6 s
    done = re.fullmatch(
        r"\[cli-progress\] epoch 1: [\d.]+ s, 5 rows in \([\d.,]+/s\), 2 events out, "
        r"1 dropped, 0 adjusted, output CTI 2026-01-01T00:00:10\+00:00 \((\d+) ticks\), "
        r"(\d+) Spark jobs",
        line,
    )
    assert done is not None, line
    assert int(done[1]) == 1_767_225_610 * S  # 2026-01-01T00:00:10Z
    assert int(done[2]) >= 1
