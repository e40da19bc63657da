"""The driver's calls to the JVM (py4j) per steady epoch of a started query, and where from.

    python -m benchmarks.driver_calls --scenario pass --steps 5 --per-step 50
    python -m benchmarks.driver_calls --scenario lookup --steps 5 --per-step 50 --top 30

An epoch's plans are built on the driver through py4j, one round trip to the JVM per call: in a
small epoch these calls, not Spark's jobs, take most of the time. This runs the queries of
``benchmarks/latency.py`` (``pass``: points with a CTI after every event straight to an
output; ``lookup``: the points joined with a 100-key reference read from a Parquet file,
importing the points' CTIs, then a hopping 1 s / 200 ms average per key) without a broker: the
events come from a script read as a live input (:class:`tests.jvm_calls.LiveScriptFactory`)
and go to a memory output. The query is started with ``trigger=None``; before each step this
process appends ``--per-step`` events (1 ms apart) to the script. Over the steps after
``--warm`` it prints, per step: the py4j commands sent (median and max; all, and those of the
thread that steps, whose count does not depend on the machine's load or on when Python's
collector runs; the releases of Java objects do), the seconds, the mean per kind of command
(``c`` a call, ``r`` a reflection lookup, ``m`` py4j's release of a Java object, ...) and the
``--top`` lines of the library's code that sent the most (per step, summed over kinds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventShape,
    point,
)

from benchmarks.latency import KEYS, SCHEMA, lookup_windows, reference_file
from tests.jvm_calls import JvmCalls, LiveScriptFactory


def build(app: Application, scenario: str, script: EventScript, ref_root: str):
    """The scenario's query over ``script``'s input ``events`` (the points), to a memory
    output named after the scenario."""
    every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    config = MemoryInputConfig(script=script, schema=SCHEMA[scenario])
    stream = Stream.create("events", LiveScriptFactory(), config, EventShape.POINT, every_event)
    out = MemoryOutputConfig(name=f"driver-calls-{scenario}")
    if scenario == "pass":
        return stream.to_query(app, out.name, MemoryOutputFactory(), out, EventShape.POINT)
    windows = lookup_windows(stream, reference_file(ref_root))
    return windows.to_query(app, out.name, MemoryOutputFactory(), out, EventShape.INTERVAL)


def append(script: EventScript, scenario: str, first: int, n: int, t0: datetime) -> None:
    """Events ``first`` .. ``first + n - 1``, 1 ms apart from ``t0``, arriving in that order."""
    for seq in range(first, first + n):
        at = t0 + timedelta(milliseconds=seq)
        payload = {"seq": seq}
        if scenario == "lookup":
            payload |= {"key": seq % KEYS, "v": (seq % 1000) / 10}
        script.insert("events", point(at, payload), arrival=at)


def measure(app: Application, scenario: str, steps: int, warm: int, per_step: int):
    """Per measured step: its JVM calls (a :class:`Counter` per ``(kind, caller)``), those
    of them sent by the thread that steps, and its seconds."""
    script = EventScript().declare("events", "0")
    t0 = datetime.now(UTC).replace(microsecond=0)
    calls, seconds, here = [], [], []
    with tempfile.TemporaryDirectory(prefix="driver-calls-") as root:
        query = build(app, scenario, script, root)
        query.start(trigger=None)
        try:
            with JvmCalls(app.spark) as counter:
                for k in range(warm + steps):
                    append(script, scenario, k * per_step, per_step, t0)
                    counter.reset()
                    began = time.perf_counter()
                    query.step()
                    if k >= warm:
                        seconds.append(time.perf_counter() - began)
                        calls.append(Counter(counter.lines))
                        here.append(counter.here)
        finally:
            query.stop(flush=False)
    return calls, here, seconds


def report(
    scenario: str, calls: list[Counter], here: list[int], seconds: list[float], top: int
) -> None:
    totals = [sum(c.values()) for c in calls]
    print(f"{scenario}: {len(calls)} steady steps")
    print(
        f"  JVM calls per step: median {statistics.median(totals):g}, max {max(totals)}; "
        f"from the thread that steps: median {statistics.median(here):g}, max {max(here)}; "
        f"seconds per step: median {statistics.median(seconds):.3f}"
    )
    kinds: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for c in calls:
        for (kind, where), n in c.items():
            kinds[kind] += n
            lines[where] += n
    per = len(calls)
    print("  per kind: " + ", ".join(f"{k} {n / per:g}" for k, n in kinds.most_common()))
    print(f"  the {top} lines sending the most, per step:")
    for where, n in lines.most_common(top):
        print(f"    {n / per:8g}  {where}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=["pass", "lookup"], nargs="+", default=["pass", "lookup"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--per-step", type=int, default=50)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    app = Application("driver-calls", master="local[2]")
    for scenario in args.scenario:
        calls, here, seconds = measure(app, scenario, args.steps, args.warm, args.per_step)
        report(scenario, calls, here, seconds, args.top)


if __name__ == "__main__":
    main()
