"""Progress records: what each epoch of a query did, as one JSON-serialisable dict (semantics §8).

After every epoch that succeeded, the runtime builds one record (Structured Streaming's
``StreamingQueryProgress``), keeps it (``query.last_progress``, ``query.recent_progress``: the
last :data:`RECENT`), logs it as one JSON line on the ``ctistream.progress`` logger at INFO and
hands it to the query's ``on_progress`` callback. The record is made on the driver from what the
epoch left there anyway (the inputs' ingress counts and CTIs, the operators' CTIs and the rows
of their state as the jobs that computed it counted them, the released output items, the wall
clock, Spark's status tracker): making it runs no Spark job.

Keys (``docs/decisions.md``, "Progress records", says why each is what it is)::

    query, epoch, timestamp            the query, its epoch number (continued after a restart
                                       on a checkpoint), the wall clock when the epoch began
    inputs.<name>                      rows (events and explicit CTIs read in the epoch),
                                       rows_per_second (rows / the epoch's total time), cti and
                                       cti_ticks, arrival and arrival_ticks (the latest arrival
                                       stamp the input took), lag_seconds (arrival minus CTI),
                                       events, ctis_explicit, ctis_generated, ctis_imported,
                                       ctis_ignored, dropped, adjusted, dropped_by_reason,
                                       adjusted_by_reason: all counts of this epoch
    operators.<n>:<kind>               state_rows (the rows of state it holds, counted by the
                                       jobs that computed them: engine.rows.state_rows), cti
                                       and cti_ticks (its latest output CTI); a lifetime
                                       operator's dropped (§5) in the epoch
    output                             events and ctis released in the epoch, delivered (what
                                       the output adapter received: less on a replay), pending
                                       (events waiting for a CTI), cti and cti_ticks
    durations_ms                       read, ingress, operators, egress, checkpoint, total
    spark_jobs                         Spark jobs started in the epoch

Spark runs lazily, so a phase's time is the driver's wall clock in it with the Spark jobs it
starts: a bounded run reads its input in ingress's scan (its ``read`` is the planning of that),
and the operators' rows are mostly computed by the job that collects the output (``egress``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ctistream.engine._spark import job_ids
from ctistream.engine.events import EventKind
from ctistream.engine.operators import LifetimeState
from ctistream.engine.ordering import complete_metrics
from ctistream.engine.plan import Node, walk
from ctistream.engine.rows import state_rows
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, format_ticks, iso_time

if TYPE_CHECKING:
    from ctistream.engine.events import Event
    from ctistream.engine.runtime import Runtime
    from pyspark.sql import DataFrame

__all__ = ["PHASES", "RECENT", "Progress", "operator_name", "progress_line", "state_frames"]

#: how many records ``query.recent_progress`` keeps (Structured Streaming keeps 100 too)
RECENT = 100

#: the phases of an epoch timed in ``durations_ms`` (``total`` follows them)
PHASES = ("read", "ingress", "operators", "egress", "checkpoint")

#: one JSON line per epoch; ``record.ctistream`` holds the record for structured handlers
log = logging.getLogger("ctistream.progress")

#: the ingress counts an input's record reports per epoch (semantics §8)
_COUNTS = (
    "events_in",
    "ctis_explicit",
    "ctis_generated",
    "ctis_imported",
    "ctis_ignored",
    "dropped",
    "adjusted",
)

_GROUP = "spark.jobGroup.id"


def operator_name(i: int, node: Node) -> str:
    """A stateful operator's name in metrics and progress records: ``"<n>:<kind>"``, ``n`` its
    place in plan order (:func:`engine.plan.walk`), e.g. ``"2:join"``."""
    return f"{i}:{type(node).__name__.removesuffix('Node').lower()}"


def _input_totals(rt: Runtime) -> dict[str, dict[str, Any]]:
    """Per input: its counts since the query began, its CTI and latest arrival, from the ingress
    and ordering states on the driver (``complete_metrics`` without the per-key part, which
    would run a job)."""
    out = {}
    for b in rt.inputs:
        st = rt._ingress.get(b.spec.index)
        if st is None:
            continue
        m: dict[str, Any] = dict.fromkeys(_COUNTS, 0)
        m.update({k: st.counts[k] for k in _COUNTS if k in st.counts})
        m["cti_ticks"] = st.emitted
        m = complete_metrics(m, None, rt._ordering.get(b.spec.index))
        m["arrival_ticks"] = st.arrival
        out[b.spec.name] = m
    return out


def _lifetime_drops(rt: Runtime) -> dict[str, int]:
    return {
        operator_name(i, node): st.dropped
        for i, node in enumerate(walk(rt.root))
        if isinstance(st := rt._ops.get(id(node)), LifetimeState)
    }


def state_frames(st: Any) -> list[DataFrame | None]:
    """The frames of operator state ``st`` whose rows are its state rows: its held events (one
    frame, or one per side), partial aggregates and, per group, latest times."""
    held = getattr(st, "held", None)
    frames = list(held) if isinstance(held, list) else [held]
    return frames + [getattr(st, name, None) for name in ("pairs", "partials", "group_latest")]


def _state_rows(st: Any) -> int | None:
    """The rows of state ``st`` holds, without a Spark job (:func:`engine.rows.state_rows`: known
    on the driver or counted by the job that computed each frame); 0 for a state holding no
    frame, None where a frame's count is not known."""
    counts = [state_rows(df) for df in state_frames(st) if df is not None]
    return None if None in counts else sum(counts)  # type: ignore[arg-type]


def _job_group(rt: Runtime) -> str | None:
    return rt.spark.sparkContext.getLocalProperty(_GROUP)


def _job_ids(rt: Runtime, group: str | None) -> list[int]:
    return job_ids(rt.spark.sparkContext, group)


def _lag(arrival: int | None, cti: int) -> float | None:
    if arrival is None or cti in (MIN_TIME, MAX_TIME):
        return None
    return (arrival - cti) / 1_000_000


@dataclass
class _Epoch:
    """One epoch being timed: what the state was when it began, and its phases so far."""

    began: datetime
    t0: float
    inputs: dict[str, dict[str, Any]]
    drops: dict[str, int]
    last_job: int
    group: str | None
    ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    ran: tuple[int, list[Event], int] | None = None  # epoch number, items, items delivered


class Progress:
    """A query's progress records (driver). The runtime calls :meth:`begin` when an epoch
    begins, :meth:`phase` around its parts, :meth:`ran` once its output is delivered, and
    :meth:`finish` once it is done (a started query's after its checkpoint): that makes the
    record, keeps it, logs it and calls :attr:`callback` with it. An epoch that fails makes no
    record; the next :meth:`begin` forgets it."""

    def __init__(self) -> None:
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._lock = threading.Lock()
        self._epoch: _Epoch | None = None
        #: called with each record after its epoch (``on_progress``), on the thread that ran it
        self.callback: Callable[[dict[str, Any]], Any] | None = None

    @property
    def last(self) -> dict[str, Any] | None:
        with self._lock:
            return self._recent[-1] if self._recent else None

    @property
    def recent(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._recent)

    def begin(self, rt: Runtime) -> None:
        """An epoch begins, before its input is read (an epoch that began and failed is
        forgotten)."""
        group = _job_group(rt)
        self._epoch = _Epoch(
            datetime.now(UTC),
            time.perf_counter(),
            _input_totals(rt),
            _lifetime_drops(rt),
            max(_job_ids(rt, group), default=-1),
            group,
        )

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the wall-clock time of the block to phase ``name`` of the running epoch."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, t)

    def add(self, name: str, since: float) -> None:
        """Add the wall-clock time since ``since`` (``time.perf_counter()``) to phase ``name``."""
        if self._epoch is not None:
            self._epoch.ms[name] += (time.perf_counter() - since) * 1000

    def ran(self, k: int, items: list[Event], delivered: int) -> None:
        """Epoch ``k`` released ``items`` and delivered ``delivered`` of them."""
        if self._epoch is not None:
            self._epoch.ran = (k, items, delivered)

    def finish(self, rt: Runtime) -> dict[str, Any] | None:
        """The epoch is done: its record, kept, logged and handed to :attr:`callback` (whose
        errors propagate: the epoch is complete by then). None when no epoch ran."""
        epoch, self._epoch = self._epoch, None
        if epoch is None or epoch.ran is None:
            return None
        record = _record(rt, epoch)
        with self._lock:
            self._recent.append(record)
        if log.isEnabledFor(logging.INFO):
            log.info("%s", json.dumps(record), extra={"ctistream": record})
        if rt.progress is not None:
            print(progress_line(record, rt.progress), file=sys.stderr, flush=True)
        if self.callback is not None:
            self.callback(record)
        return record


def _record(rt: Runtime, epoch: _Epoch) -> dict[str, Any]:
    assert epoch.ran is not None
    k, items, delivered = epoch.ran
    total_ms = (time.perf_counter() - epoch.t0) * 1000
    seconds = total_ms / 1000
    inputs: dict[str, Any] = {}
    for name, now in _input_totals(rt).items():
        before = epoch.inputs.get(name, {})
        d = {k2: now[k2] - before.get(k2, 0) for k2 in _COUNTS}
        rows = d["events_in"] + d["ctis_explicit"]
        cti, arrival = now["cti_ticks"], now["arrival_ticks"]
        inputs[name] = {
            "rows": rows,
            "rows_per_second": round(rows / seconds, 3) if seconds > 0 else 0.0,
            "cti": now["cti"],
            "cti_ticks": cti,
            "lag_seconds": _lag(arrival, cti),
            "dropped": d["dropped"],
            "adjusted": d["adjusted"],
            "events": d["events_in"],
            **{c: d[c] for c in _COUNTS[1:5]},
            "dropped_by_reason": _minus(now["dropped_by_reason"], before.get("dropped_by_reason")),
            "adjusted_by_reason": _minus(
                now["adjusted_by_reason"], before.get("adjusted_by_reason")
            ),
            "arrival": None if arrival is None else iso_time(arrival),
            "arrival_ticks": arrival,
        }
    operators: dict[str, Any] = {}
    for i, node in enumerate(walk(rt.root)):
        st = rt._ops.get(id(node))
        if st is None:
            continue
        name = operator_name(i, node)
        op = {"state_rows": _state_rows(st), "cti": iso_time(st.emitted), "cti_ticks": st.emitted}
        if isinstance(st, LifetimeState):
            op["dropped"] = st.dropped - epoch.drops.get(name, 0)
        operators[name] = op
    out_cti = rt.output_cti()
    ctis = sum(1 for e in items if e.kind is EventKind.CTI)
    jobs = [j for j in _job_ids(rt, epoch.group) if j > epoch.last_job]
    return {
        "query": rt.name,
        "epoch": k,
        "timestamp": epoch.began.isoformat(timespec="microseconds"),
        "inputs": inputs,
        "operators": operators,
        "output": {
            "events": len(items) - ctis,
            "cti": iso_time(out_cti),
            "cti_ticks": out_cti,
            "ctis": ctis,
            "delivered": delivered,
            "pending": len(rt._egress.pending),
        },
        "durations_ms": {p: round(v, 3) for p, v in epoch.ms.items()}
        | {"total": round(total_ms, 3)},
        "spark_jobs": len(jobs),
    }


def _minus(now: dict[str, int], before: dict[str, int] | None) -> dict[str, int]:
    return {r: n - (before or {}).get(r, 0) for r, n in now.items()}


def progress_line(record: dict[str, Any], epochs: int = 0) -> str:
    """The line ``progress=True`` and the ``ctistream`` command print for a record:
    ``[query] epoch k[/n]: seconds, rows in (per second), events out, dropped, adjusted, output
    CTI, Spark jobs``; ``k`` counts from 1, ``n`` is the run's number of epochs (0: unknown)."""
    inputs = record["inputs"].values()
    rows = sum(i["rows"] for i in inputs)
    seconds = record["durations_ms"]["total"] / 1000
    rate = rows / seconds if seconds > 0 else 0.0
    dropped = sum(i["dropped"] for i in inputs)
    adjusted = sum(i["adjusted"] for i in inputs)
    out = record["output"]
    total = f"/{epochs}" if epochs else ""
    return (
        f"[{record['query']}] epoch {record['epoch'] + 1}{total}: {seconds:.1f} s, {rows} rows in "
        f"({rate:,.1f}/s), {out['events']} events out, {dropped} dropped, {adjusted} adjusted, "
        f"output CTI {format_ticks(out['cti_ticks'])}, {record['spark_jobs']} Spark jobs"
    )
