"""The query the cluster test runs, its input files and its expected events.

Four reading files (one sensor each, so four source partitions) and a file of per-sensor limits:
readings generate a CTI every 5 events, 2 s behind, and drop late events; limits import the
readings' CTIs. The query joins readings with the limit in force, keeps readings above it and
counts them per sensor in 10 s tumbling windows, into a JSON lines file.

Run as a script, it is the driver of the cluster run (a process of its own: the test session
already has a local SparkContext, and a process can have one):

    python -m tests.cluster.query --master spark://127.0.0.1:7077 --inputs DIR --output FILE \
        --markers DIR

It builds the application on that master, waits for two executors, runs the query with input
adapters that also leave a marker (file, pid, working directory) for each file they read, and
prints a JSON summary line: the executors and the query's metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ctistream.adapters.files import (
    FileInputAdapter,
    FileInputConfig,
    FileInputFactory,
    FileOutputConfig,
    FileOutputFactory,
)
from ctistream.bindings import Application, Query, Stream
from ctistream.engine import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
)
from pyspark.sql import functions as F

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
SENSORS = (1, 2, 3, 4)
EPOCHS = 1
#: The late reading: sensor 3 at 12 s, value 99, written after its reading 30 (at ~45 s), when
#: that file's CTI is past 40 s: it is dropped.
LATE = (3, 12.0, 99)
#: SQL settings of the test session (tests/conftest.py) that matter for speed on tiny inputs.
FAST_SMALL_PLANS = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def readings(sensor: int) -> list[tuple[float, int]]:
    """(seconds, value) of a sensor's readings, in file order (before the late one)."""
    return [(round(i * 1.5 + 0.1 * sensor, 1), (i * 37 + sensor * 11) % 100) for i in range(40)]


def cap(sensor: int, seconds: float) -> int:
    """The limit in force: one for [0, 30 s), another from 30 s on."""
    return 40 + 5 * sensor if seconds < 30 else 70 - 5 * sensor


def write_inputs(directory: Path) -> None:
    """``readings/sensor<n>.jsonl`` (one file per sensor) and ``limits.jsonl``."""
    (directory / "readings").mkdir(parents=True)
    for s in SENSORS:
        rows = [{"ts": iso(t), "sensor": s, "v": v} for t, v in readings(s)]
        if s == LATE[0]:
            rows.insert(31, {"ts": iso(LATE[1]), "sensor": s, "v": LATE[2]})
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (directory / "readings" / f"sensor{s}.jsonl").write_text(text)
    limits = [{"ts": iso(0), "te": iso(30), "sensor": s, "cap": cap(s, 0)} for s in SENSORS]
    limits += [{"ts": iso(30), "te": "+inf", "sensor": s, "cap": cap(s, 30)} for s in SENSORS]
    (directory / "limits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in limits))


def expected_events() -> list[dict[str, Any]]:
    """The query's events worked out in plain Python: per sensor and 10 s window, how many
    readings exceed the limit in force, and the largest of them (the late reading is dropped)."""
    out: dict[tuple[int, int], list[int]] = {}
    for s in SENSORS:
        for t, v in readings(s):
            if v > cap(s, t):
                out.setdefault((int(t // 10), s), []).append(v)
    return [
        {"start": iso(10 * w), "end": iso(10 * w + 10), "sensor": s, "n": len(vs), "top": max(vs)}
        for (w, s), vs in sorted(out.items())
    ]


def build(
    app: Application,
    inputs: Path,
    output: Path,
    name: str,
    factory: FileInputFactory | None = None,
) -> Query:
    """The query over ``inputs`` (see :func:`write_inputs`) into ``output``."""
    factory = factory or FileInputFactory()
    every5 = AdapterAdvanceTimeSettings(
        AdvanceTimeGenerationSettings(5, timedelta(seconds=2), True), AdvanceTimePolicy.DROP
    )
    data = Stream.create(
        "readings",
        factory,
        FileInputConfig(
            path=str(inputs / "readings"),
            time_column="ts",
            schema="sensor bigint, v bigint",
            advance_time=every5,
        ),
        EventShape.POINT,
    )
    limits = Stream.create(
        "limits",
        factory,
        FileInputConfig(
            path=str(inputs / "limits.jsonl"),
            time_column="ts",
            end_column="te",
            schema="sensor bigint, cap bigint",
        ),
        EventShape.INTERVAL,
        AdvanceTimeSettings(None, AdvanceTimeImportSettings("readings"), AdvanceTimePolicy.ADJUST),
    )
    above = (
        data.join(limits, on="sensor")
        .where(F.col("v") > F.col("cap"))
        .tumbling_window(timedelta(seconds=10))
        .group_by("sensor")
        .aggregate(n=F.count("*"), top=F.max("v"))
    )
    return above.to_query(
        app, name, FileOutputFactory(), FileOutputConfig(path=str(output)), EventShape.INTERVAL
    )


# ---------------------------------------------------------------------------------------------
# The cluster driver. Classes defined here are pickled by value when this runs as __main__, so
# executors need only the installed ctistream package, not the tests.
# ---------------------------------------------------------------------------------------------


class MarkingFileInputAdapter(FileInputAdapter):
    """A file input adapter that leaves a marker for every file it reads: which file, in which
    process and working directory (a standalone executor runs in ``<worker dir>/<app>/<id>``)."""

    def __init__(self, config: FileInputConfig, shape: EventShape, markers: str) -> None:
        super().__init__(config, shape)
        self._markers = markers

    def read_batches(self, partition: str, start_offset: int, payload: Any, until: Any = None):
        import socket
        import uuid

        marker = {"file": partition, "pid": os.getpid(), "cwd": os.getcwd()}
        marker["host"] = socket.gethostname()
        path = os.path.join(self._markers, f"{uuid.uuid4().hex}.json")
        with open(path, "w") as f:
            json.dump(marker, f)
        yield from super().read_batches(partition, start_offset, payload, until)


class MarkingFileInputFactory(FileInputFactory):
    def __init__(self, markers: str) -> None:
        self.markers = markers

    def create(self, config: FileInputConfig, shape: EventShape) -> FileInputAdapter:
        return MarkingFileInputAdapter(config, shape, self.markers)


def wait_for_executors(app: Application, count: int, timeout: float) -> list[str]:
    """``host:port`` of the block managers (the executors' and the driver's) once ``count``
    executors are registered."""
    tracker = app.spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while True:
        # One entry per block manager: the executors' and the driver's own.
        found = sorted(f"{e.host()}:{e.port()}" for e in tracker.getExecutorInfos())
        executors = len(found) - 1
        if executors >= count:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"application on {app.spark.sparkContext.master}: expected {count} executors "
                f"within {timeout:.0f} s; got {executors} (block managers: {found}). Fix: check "
                "the master's web UI and the worker logs: each worker needs free cores and memory "
                "for an executor"
            )
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", required=True)
    parser.add_argument("--inputs", required=True, type=Path)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--markers", required=True, type=Path)
    parser.add_argument("--executors", type=int, default=2)
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    app = Application("ctistream-cluster-test", master=args.master)
    # As the test session's own: plans of a few hundred rows run faster interpreted than compiled.
    for key, value in FAST_SMALL_PLANS.items():
        app.spark.conf.set(key, value)
    started = time.monotonic() - t0
    try:
        executors = wait_for_executors(app, args.executors, timeout=180)
        query = build(
            app, args.inputs, args.output, "cluster", MarkingFileInputFactory(str(args.markers))
        )
        t1 = time.monotonic()
        query.run(epochs=EPOCHS)
        ran = time.monotonic() - t1
        summary = {
            "master": app.spark.sparkContext.master,
            "executors": executors,
            "metrics": query.metrics(),
            "seconds": {"session": round(started, 1), "run": round(ran, 1)},
        }
        print("SUMMARY " + json.dumps(summary), flush=True)
    finally:
        app.spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
