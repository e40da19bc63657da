"""B1/B2/B3/P: the engine side by side with the nearest native Structured Streaming query.

    python -m benchmarks.run --events 200000 --per-file 100000 --which B1 B2
    python -m benchmarks.run --events 200000 --per-file 100000 --which B3 --check
    python -m benchmarks.run --memory --events 2000000 8000000 --which B1
    python -m benchmarks.run --memory --events 2000000 8000000 --per-file 250000 --which P

P is a pass-through (the data stream straight to the counting sink) that the engine runs with
``query.run()``'s default epochs, where B1 and B2 cut one epoch per data file: it shows what a
plain run holds in memory as the input grows.

Generates the data if missing (under ``--cache``), then in one process with one SparkSession runs
the engine query and the native query over the same files, alternating which goes first over
``--reps`` repetitions, and prints wall time, throughput, ratio (engine events/s over native
events/s, same repetition) and rows out; then compares the two sides' window results, and
prints each side's Spark jobs per steady epoch (engine) or micro-batch (native): the median and
the largest count over the epochs after the first, in the last repetition (see :mod:`.jobs`).
``--memory`` runs every (size, benchmark, side) in a fresh subprocess instead and reports the
peak RSS of its whole process tree (driver, JVM, Python workers), sampled every 0.2 s, and the
peak PSS (forked Python workers share pages, which RSS counts once per process), and the
live Java heap (the bytes left after a full GC, forced through ``jcmd`` every ``--live-every``
seconds; median and largest sample): RSS also holds heap the JVM committed and never gave
back, and the code it compiled, which grow with how long it runs. The engine side also
reports its live heap right after each epoch (a full GC on the runtime's per-epoch log record):
the state kept between epochs.

Session (both sides): ``local[2]``, UI off, UTC, ``spark.sql.shuffle.partitions=2``: one task per
core per shuffle stage. Native stateful operators run one state-store task per shuffle partition
in every micro-batch, so more partitions add fixed cost per batch without parallelism on 2 cores;
2 is also the engine's own default. Change it with ``--shuffle-partitions``. The first repetition
also pays the JVM's warm-up (mostly on whichever side goes first): use ``--reps 3`` or more.

Where the two sides differ by design (the comparison prints what it finds):

* Lateness: the engine drops an event whose start is below the data partition's CTI in force when
  it arrives (a CTI after every 1000 events, 5 s behind the largest start); native Spark drops a
  row only when its window has already closed under the watermark of the previous micro-batch
  (largest event time so far - 5 s, fixed for the whole batch). Events here are at most 3 s late,
  so neither side drops any, and every B1 window both sides emit has the same count.
* Release: native emits a window one micro-batch after the watermark passes its end (the extra
  no-data batch at the end); the engine emits it in the epoch whose CTI passes it. Neither flushes
  at the end, so both emit exactly the windows ending at or before the last CTI / watermark.
* B3 sessions: the engine's session of a key is made of points ``[t, t + 1 µs)``, so it reaches
  ``last + 1 µs + 30 s``; native's ``session_window`` ends at ``last + 30 s``. Both are compared
  by (session start, key) and count, so the 1 µs does not show.
* B2 join: the engine's join is temporal (an event meets the reference version whose lifetime
  contains it); native's stream-static join meets the latest value whatever the time. Late events
  timed before the reference's first START edges (``BASE``) therefore have no partner in the
  engine: B2 windows holding such events differ, and the window before ``BASE`` is native-only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import Counter
from pathlib import Path

from ctistream.engine.temporal import format_ticks

from benchmarks import data, engine_side, jobs, memory, native
from benchmarks.engine_side import Result

SIDES = ("engine", "native")


def session(args: argparse.Namespace):
    from ctistream.engine._spark import LEAN_SESSION
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("ctistream-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        # the engine's Application sets this too; set here so both sides run with it
        .config("spark.sql.constraintPropagation.enabled", "false")
    )
    for key, value in LEAN_SESSION.items():  # as the engine's default session; both sides
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def dataset(args: argparse.Namespace, events: int) -> dict:
    root = Path(args.cache) / f"e{events}-f{args.per_file}-s{args.seed}"
    return data.generate(root, events, args.per_file, args.seed)


def run_side(app, spark, side: str, which: str, meta: dict, name: str, args) -> Result:
    if side == "engine":
        return engine_side.run(app, which, meta, name, args.partitions, keep=args.check)
    return native.run(spark, which, meta, name, keep=args.check)


def compare(which: str, eng: Result, nat: Result) -> str:
    """How the two sides' window results agree: same windows, same values, and the differences
    (P: the same events, as a multiset of (start, key, v))."""
    if which == "P":
        e, n = Counter(eng.kept), Counter(nat.kept)
        same = sum((e & n).values())
        return (
            f"P: {eng.rows} events from the engine, {nat.rows} from native, {same} in both; "
            f"only engine {sum((e - n).values())}, only native {sum((n - e).values())}"
        )
    e = {(s, k): v for s, k, v in eng.kept}
    n = {(s, k): v for s, k, v in nat.kept}
    both = e.keys() & n.keys()
    differ = [w for w in sorted(both) if not math.isclose(e[w], n[w], rel_tol=1e-9)]
    lines = [
        f"{which}: {len(both)} windows (start, key) on both sides, "
        f"{len(both) - len(differ)} with equal values, {len(differ)} differ"
    ]
    for label, only in (("engine", e.keys() - n.keys()), ("native", n.keys() - e.keys())):
        if only:
            starts = sorted({s for s, _ in only})
            lines.append(
                f"  only {label}: {len(only)} windows, starts {format_ticks(starts[0])} .. "
                f"{format_ticks(starts[-1])} ({len(starts)} distinct)"
            )
    for w in differ[:5]:
        at = f"start {format_ticks(w[0])} key {w[1]}"
        lines.append(f"  differs: {at}: engine {e[w]} native {n[w]}")
    lines.append(
        f"  dropped as late: engine {eng.dropped} (CTI, DROP), native {nat.dropped} (watermark)"
    )
    return "\n".join(lines)


def side_by_side(args: argparse.Namespace) -> None:
    from ctistream.bindings import Application

    spark = session(args)
    app = Application("bench", spark)
    rows = []
    for events in args.events:
        meta = dataset(args, events)
        for which in args.which:
            last: dict[str, Result] = {}
            for rep in range(args.reps):
                order = SIDES if rep % 2 == 0 else SIDES[::-1]
                got = {}
                for side in order:
                    name = f"{which.lower()}-{side}-{events}-{rep}"
                    got[side] = run_side(app, spark, side, which, meta, name, args)
                    print(f"  {name}: {got[side].seconds:.1f} s", file=sys.stderr, flush=True)
                ratio = got["native"].seconds / got["engine"].seconds
                for side in SIDES:
                    rows.append((which, side, rep, events, got[side], ratio))
                last = got
            if args.check:
                print(compare(which, last["engine"], last["native"]))
            epochs = ", ".join(f"{s:.1f}" for s in last["engine"].epoch_seconds)
            print(f"{which} engine seconds per epoch (last rep; 1st includes reading): {epochs}")
            epochs = ", ".join(f"{s:.1f}" for s in last["native"].epoch_seconds)
            print(f"{which} native seconds per batch (last rep): {epochs}")
            for side in SIDES:
                per = "epoch" if side == "engine" else "micro-batch"
                print(
                    f"{which} {side} Spark jobs per steady {per} (last rep): "
                    f"{jobs.steady(last[side].jobs) if last[side].jobs else 'not counted'}"
                )
    print_table(rows)


def print_table(rows: list) -> None:
    head = ("bench", "side", "rep", "events", "batches", "wall s", "events/s", "ratio", "rows out")
    print("\n" + " | ".join(head))
    print(" | ".join("---" for _ in head))
    for which, side, rep, events, r, ratio in rows:
        cells = (which, side, rep, events, r.batches, f"{r.seconds:.1f}")
        cells += (f"{events / r.seconds:,.0f}", f"{ratio:.2f}" if side == "engine" else "")
        print(" | ".join(str(c) for c in (*cells, r.rows)))
    ratios: dict[tuple[str, int], list[float]] = {}
    for which, side, _, events, _, ratio in rows:
        if side == "engine":
            ratios.setdefault((which, events), []).append(ratio)
    for (which, events), rs in ratios.items():
        print(f"{which}, {events} events: median ratio engine/native {statistics.median(rs):.2f}")


def one_side(args: argparse.Namespace) -> None:
    """``--side``: one query, once, in this process; print its result as JSON (for --memory)."""
    from ctistream.bindings import Application

    meta = dataset(args, args.events[0])
    spark = session(args)
    app = Application("bench", spark) if args.side == "engine" else None
    heap = memory.HeapAfterEpochs(spark) if args.side == "engine" and args.memory else None
    r = run_side(app, spark, args.side, args.which[0], meta, f"{args.which[0]}-{args.side}", args)
    result = {"rows": r.rows, "seconds": r.seconds, "batches": r.batches}
    print("RESULT " + json.dumps(result | {"heap": heap.samples if heap else []}))


def memory_mode(args: argparse.Namespace) -> None:
    head = ("bench", "side", "events", "batches", "wall s", "peak RSS MB", "PSS MB", "JVM MB")
    head += ("Python MB", "live heap MB: any time, median / max (samples)")
    head += ("between epochs, median / max",)
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for events in args.events:
        dataset(args, events)  # generated here, so the children only read
        for which in args.which:
            for side in args.sides:
                cmd = [sys.executable, "-m", "benchmarks.run", "--side", side, "--which", which]
                cmd += ["--memory"]  # with --side: the engine's heap after each epoch too
                cmd += ["--events", str(events), "--per-file", str(args.per_file)]
                cmd += ["--seed", str(args.seed), "--cache", args.cache, "--reps", "1"]
                cmd += ["--partitions", args.partitions, "--driver-memory", args.driver_memory]
                cmd += ["--shuffle-partitions", str(args.shuffle_partitions), "--no-check"]
                out, peak = memory.run_sampled(cmd, live_every=args.live_every)
                r = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
                peaks = (peak.total, peak.pss, peak.jvm, peak.python)
                mb = [f"{b / 2**20:,.0f}" for b in peaks]
                live = [b / 2**20 for b in peak.live]
                between = [b / 2**20 for b in r["heap"]]
                for samples, count in ((live, True), (between, False)):
                    if not samples:
                        mb.append("n/a")
                        continue
                    cell = f"{statistics.median(samples):,.0f} / {max(samples):,.0f}"
                    mb.append(cell + (f" ({len(samples)})" if count else ""))
                cells = (which, side, events, r["batches"], f"{r['seconds']:.1f}", *mb)
                lines.append(" | ".join(str(c) for c in cells))
                print(f"  {lines[-1]}", file=sys.stderr, flush=True)
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, nargs="+", default=[2_000_000])
    p.add_argument("--per-file", type=int, default=1_000_000, help="events per micro-batch file")
    p.add_argument("--which", nargs="+", choices=("B1", "B2", "B3", "P"), default=["B1", "B2"])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--cache", default="/tmp/ctistream-bench", help="where the data sets go")
    p.add_argument(
        "--partitions",
        choices=("one", "files"),
        default="one",
        help="engine input: the files as one partition (default), or one partition per file "
        "(stock FileInputFactory; its CTI stays at the end of the first file)",
    )
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the comparison")
    p.add_argument("--memory", action="store_true", help="peak RSS per size, fresh processes")
    p.add_argument(
        "--live-every",
        type=float,
        default=5.0,
        help="--memory: seconds between live-heap samples (each runs a full GC through jcmd)",
    )
    p.add_argument(
        "--sides", nargs="+", choices=SIDES, default=list(SIDES), help="--memory: which sides"
    )
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        one_side(args)
    elif args.memory:
        memory_mode(args)
    else:
        side_by_side(args)


if __name__ == "__main__":
    main()
