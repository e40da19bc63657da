"""``Query``: a plan bound to its adapters, run by the engine's runtime."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from os import PathLike
from typing import Any

from ctistream.engine.runtime import Runtime
from ctistream.engine.streaming import Streamer
from ctistream.engine.temporal import iso_time, to_duration_ticks
from ctistream.viz.timeline import Timeline
from ctistream.viz.trace import Trace

__all__ = ["Query"]


class Query:
    """A bound query of an :class:`~bindings.Application`. Adapters are made, settings resolved
    and imports checked when the query is created, so binding errors surface there."""

    def __init__(self, name: str, runtime: Runtime, description: str = "") -> None:
        self.name = name
        self.description = description
        self._runtime = runtime
        self._trace: Trace | None = None
        self._streamer: Streamer | None = None

    def __repr__(self) -> str:
        rt = self._runtime
        inputs = ", ".join(f"{b.spec.name!r} ({b.node.shape})" for b in rt.inputs)
        output = f"{type(rt.output).__name__} ({rt.output_shape})"
        state = "running" if self._streamer is not None and not self._streamer.stopped else "idle"
        cti = iso_time(rt.output_cti())
        return f"<Query {self.name!r}: {inputs} -> {output}; output CTI {cti}; {state}>"

    def run(
        self,
        epochs: int | Sequence[datetime | int] | None = None,
        *,
        trace: bool | Trace = False,
        progress: bool = False,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        """Run over bounded inputs to their end, then stop (inputs that flush on stop flush).

        ``epochs``: how many epochs to cut the arrival sequence into, or the arrival stamps at
        which to cut; by default (None) by size: epochs of at most about 250,000 input items
        (:data:`engine.runtime.EPOCH_ITEMS`), so the driver, which holds an epoch's output until
        it is delivered, needs no more memory for a larger input. A small input is one epoch at
        no extra cost when its adapters know their size on the driver (scripts, Parquet files,
        Kafka and Event Hubs snapshots: ``InputAdapter.size_hint``); otherwise a Spark job
        counts the items first. The output is the same for any cut (semantics §4).
        A run that ends with every event held back by an input without a CTI warns
        (:class:`engine.errors.HeldEventsWarning`, semantics §8) naming the input and the fix.
        ``trace``: record what :meth:`timeline` draws (``True``, or a :class:`viz.trace.Trace`
        to set its cap); off by default, and free when off. A traced run costs one small Spark
        job per epoch more. ``progress``: print a line per epoch to stderr, made from its
        progress record (epoch k/n, seconds, rows in, events out, drops, output CTI, Spark
        jobs); each epoch goes to the ``ctistream.runtime`` logger at INFO either way.
        ``on_progress``: called with each epoch's progress record (:attr:`last_progress`)
        after the epoch, on the driver; what it raises stops the run.
        """
        self._runtime.progress = 0 if progress else None
        self._runtime.records.callback = on_progress
        if trace is True:
            trace = Trace()
        self._trace = trace or None
        self._runtime.run(epochs, trace=self._trace)

    def start(
        self,
        trigger: timedelta | str | None = timedelta(milliseconds=200),
        *,
        checkpoint: str | PathLike[str] | None = None,
        checkpoint_every: int = 10,
        max_offsets_per_epoch: int | None = None,
        idle_timeout: timedelta | str | None = None,
        progress: bool = False,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        """Run epochs continuously until :meth:`stop`: every ``trigger`` (at most; an epoch
        that takes longer starts the next one right after it), each over what the inputs hold
        then (:mod:`engine.streaming`). ``trigger=None`` runs no loop: call :meth:`step`.

        ``checkpoint``: the query's checkpoint directory. Offsets are logged before every
        epoch and the whole state is written every ``checkpoint_every`` epochs; a query started
        again on the same directory restores it and replays what came after, so its output
        adapter receives every item exactly once, also of an epoch that failed part-way
        (semantics §9). A checkpoint of a query stopped with flush, or whose inputs all ended,
        is refused (:class:`engine.errors.QueryStoppedError`); ``stop(flush=False)`` keeps
        it resumable.
        ``max_offsets_per_epoch``: read about this many offsets of each live partition per
        epoch (None: all that is there), to keep epochs small when a backlog waits; an epoch
        takes whole arrival stamps, so records sharing the stamp a partition reached at the cap
        are read with it. ``stop()`` with flush first reads all the inputs held when it was
        called, in as many such epochs as it takes.
        ``idle_timeout``: an input that generates its CTIs and has had nothing new for this
        long advances by time-driven CTIs: the wall clock minus its late-arrival tolerance
        (ordering settings) or its generation delay (semantics §7); logged for replay.
        ``trigger`` and ``idle_timeout`` are durations: a ``timedelta`` or a string such as
        ``"30 seconds"`` (semantics §1).
        ``progress`` and ``on_progress``: as for :meth:`run`, per epoch (a replayed one too); what
        ``on_progress`` raises stops the loop (:meth:`exception`), its epoch committed.
        """
        wait = None if trigger is None else _seconds(trigger, "trigger")
        idle = None if idle_timeout is None else _seconds(idle_timeout, "idle_timeout")
        running = self._streamer
        if running is not None and not running.stopped:
            if running.error is None:
                raise RuntimeError(
                    f"query {self.name!r} is already started; expected a stopped query. Fix: "
                    "call stop() first"
                )
            running.release()  # it failed: it starts again on its checkpoint
        self._runtime.progress = 0 if progress else None
        self._runtime.records.callback = on_progress
        self._streamer = Streamer(
            self._runtime,
            # relative to this process's directory: Spark's JVM, which writes the state
            # snapshots, resolves a relative path against the directory it started in
            None if checkpoint is None else os.path.abspath(checkpoint),
            checkpoint_every,
            max_offsets_per_epoch,
            idle,
        )
        if wait is not None:
            self._streamer.start(wait)

    def step(self) -> None:
        """Run one epoch now (a query started with ``trigger=None``)."""
        self._started().step()

    def stop(self, flush: bool = True) -> None:
        """Stop a started query: finish the running epoch, then run a last one in which inputs that
        flush on stop flush (unless ``flush=False``; with ``max_offsets_per_epoch``, a flush first
        reads what the live inputs held, in capped epochs), and close the output. Raises what
        stopped the loop, if anything did. A stop with ``flush`` that leaves every event held back
        by an input without a CTI warns (:class:`engine.errors.HeldEventsWarning`)."""
        streamer = self._started()
        self._streamer = None
        streamer.stop(flush)
        if flush:
            self._runtime.warn_held(stacklevel=2)

    def exception(self) -> BaseException | None:
        """What stopped a started query's loop, or None while it runs (or after it stopped)."""
        return None if self._streamer is None else self._streamer.error

    def _started(self) -> Streamer:
        if self._streamer is None:
            raise RuntimeError(
                f"query {self.name!r} is not started. Fix: call query.start(...) first"
            )
        return self._streamer

    @property
    def trace(self) -> Trace | None:
        """What the last traced run recorded (also when it failed part-way), or None."""
        return self._trace

    def timeline(
        self,
        png: str | PathLike[str] | None = None,
        html: str | PathLike[str] | None = None,
    ) -> Timeline:
        """The timeline of the last traced run: each input's events by event time against
        arrival, its CTIs, dropped and adjusted events, and each operator's and the query's
        output CTIs. Writes a PNG to ``png`` and a self-contained HTML page to ``html`` when
        given; the returned :class:`viz.timeline.Timeline` renders either on demand.

        Raises ``RuntimeError`` when the query has not run with ``trace=True``, and
        ``ImportError`` for a PNG without matplotlib, which only the ``viz`` extra installs
        (``pip install "ctistream[viz]"``); the HTML page needs nothing more.
        """
        if self._trace is None:
            raise RuntimeError(
                f"query {self.name!r} has no trace to draw a timeline from; expected a run with "
                "tracing on. Fix: call query.run(trace=True) (or run(epochs, trace=True)) first"
            )
        timeline = Timeline(self._trace)
        if png is not None:
            timeline.png(png)
        if html is not None:
            timeline.html(html)
        return timeline

    @property
    def last_progress(self) -> dict[str, Any] | None:
        """The progress record of the newest epoch that succeeded, or None before the first:
        a JSON-serialisable dict with what the epoch read per input (rows, rows per second, CTI,
        lag, drops and adjustments), each operator's state rows and CTI, the output's events
        and CTI, the time spent per phase and the Spark jobs it ran (semantics §8;
        :mod:`engine.progress` lists the keys). Making it runs no Spark job."""
        return self._runtime.records.last

    @property
    def recent_progress(self) -> list[dict[str, Any]]:
        """The progress records of the last epochs (at most
        :data:`engine.progress.RECENT`), oldest first; see :attr:`last_progress`."""
        return self._runtime.records.recent

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per input: events in, CTIs explicit / generated / imported / ignored, dropped,
        adjusted (and ``dropped_by_reason`` / ``adjusted_by_reason``: cti-violation, early, late,
        out-of-order, no-event-time), the input's current CTI (``cti``: ISO time, ``-inf`` or
        ``+inf``; ``cti_ticks``: the same in ticks), ``watermark_delay`` and, for an input with
        substreams (``EventOrderingSettings(over=...)``), ``keys``: the same per key with its
        ``watermark`` (and ``watermark_ticks``). Semantics §8."""
        return self._runtime.metrics()

    def operator_metrics(self) -> dict[str, dict[str, Any]]:
        """Per stateful operator: the rows of state it holds and the last CTI it emitted
        (``cti`` in ISO, ``cti_ticks`` in ticks); for a
        lifetime operator also ``dropped``, the events whose start landed at ``±inf`` (§5)."""
        return self._runtime.operator_metrics()

    def watermark_delay(self) -> timedelta | None:
        """Wall clock minus the latest output CTI (semantics §8), or None while there is none
        (-inf) or the output is flushed (+inf). Per input and per key: ``metrics()``."""
        return self._runtime.watermark_delay()


def _seconds(value: timedelta | str, name: str) -> float:
    """A wall-clock duration of :meth:`Query.start` in seconds, for the streaming loop."""
    ticks = to_duration_ticks(value, name=name, owner="Query.start()", min_ticks=0)
    return ticks / 1_000_000
