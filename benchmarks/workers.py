"""The fixed cost of the engine's Python functions on the executors.

    python -m benchmarks.workers --jobs 40

A started query's step runs two Arrow functions in one task (reading the input, then the ingress
scan), with the rows kept in between (a local checkpoint). This runs that shape over 1,000 rows,
``--jobs`` times, in four processes: executors talking to their Python workers over loopback TCP
(Spark's default) or over Unix domain sockets (the engine's session), and functions that call
:func:`engine._spark.settle_worker` first or do not (a worker stays frozen once it froze, so each
way runs in a process of its own). Prints the median and minimum job time of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_SETTLE = "CTISTREAM_BENCH_SETTLE"  # read by the functions in the workers (they inherit it)


def _settle() -> None:
    if os.environ.get(_SETTLE) == "1":
        from ctistream.engine._spark import settle_worker

        settle_worker()


def _rows(batches):
    import pyarrow as pa

    _settle()
    for _ in batches:
        n = 1000
        yield pa.RecordBatch.from_pydict({"a": list(range(n)), "s": ["x"] * n})


def _same(batches):
    _settle()
    yield from batches


def _one(uds: bool, jobs: int) -> list[float]:
    from ctistream.engine._spark import LEAN_SESSION
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers need this venv's pyarrow
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    builder = builder.config("spark.sql.shuffle.partitions", "2")
    for key, value in LEAN_SESSION.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.python.unix.domain.socket.enabled", str(uds).lower())
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    times = []
    for i in range(jobs + 4):
        t = time.perf_counter()
        df = spark.range(0, 1, 1, 1).mapInArrow(_rows, "a long, s string")
        df = df.selectExpr("*", f"{i} AS epoch").localCheckpoint(eager=False)
        df.mapInArrow(_same, df.schema).groupBy().count().collect()
        if i >= 4:  # the first jobs start the workers
            times.append(time.perf_counter() - t)
    spark.stop()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--uds", choices=["true", "false"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.uds is not None:  # one side, in a process of its own (the setting is static)
        print(json.dumps(_one(args.uds == "true", args.jobs)))
        return
    for uds in ("false", "true"):
        for settle in ("0", "1"):
            cmd = [sys.executable, "-m", "benchmarks.workers", "--jobs", str(args.jobs)]
            env = {**os.environ, _SETTLE: settle}
            out = subprocess.run(
                [*cmd, "--uds", uds], capture_output=True, text=True, check=True, env=env
            ).stdout
            ms = [t * 1000 for t in json.loads(out.strip().splitlines()[-1])]
            socket = "Unix domain socket" if uds == "true" else "loopback TCP"
            label = "settle_worker first" if settle == "1" else "as before"
            print(
                f"{socket:18s} {label:20s} jobs {len(ms):3d}  median {statistics.median(ms):6.0f} "
                f"ms  min {min(ms):6.0f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
