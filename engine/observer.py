"""The hooks a run calls on an observer: what the engine shows of an epoch as it runs.

The temporal core records nothing itself. A run given an observer (``Runtime.run(trace=...)``;
``query.run(trace=True)`` passes the recorder of :mod:`ctistream.viz.trace`, which draws the
timeline) calls the hooks of :class:`RunObserver` on the driver, in this order:

* :meth:`~RunObserver.start` once, when the run starts;
* per epoch, :meth:`~RunObserver.begin_epoch`; then, per input,
  :meth:`~RunObserver.ordering` (an input with ``EventOrderingSettings`` only),
  :meth:`~RunObserver.ingress` and :meth:`~RunObserver.input_flow`; then
  :meth:`~RunObserver.operator` per stateful operator, in plan order; and
  :meth:`~RunObserver.end_epoch` once egress has run. An epoch that fails and is re-run (up to
  a bad item) begins again with :meth:`~RunObserver.begin_epoch`; one that fails for good ends
  the run without :meth:`~RunObserver.end_epoch`.

The frames handed over are the epoch's lazy Spark DataFrames: an observer adds its own Spark
work to them (the recorder collects all it gathered in one job at :meth:`~RunObserver.end_epoch`)
and must not change what the run computes. A run with an observer delivers the same output as
one without (semantics §4), but runs the plain operators: it does not push windows into ingress,
pack lookup joins or read an epoch's input ahead, since the observer reads the frames those
fusions skip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ctistream.engine.ingress import InputSpec
    from ctistream.engine.plan import Node
    from ctistream.engine.rows import Flow
    from ctistream.engine.runtime import Runtime
    from pyspark.sql import DataFrame

__all__ = ["RunObserver"]


class RunObserver(Protocol):
    """What a run calls on its observer, on the driver (see the module for the order)."""

    def start(self, runtime: Runtime) -> None:
        """A run of ``runtime`` starts (its ``name``, ``inputs`` and plan ``root``): forget any
        earlier run."""

    def begin_epoch(self, lo: int | None, hi: int | None) -> None:
        """An epoch over arrivals ``[lo, hi)`` starts (None: open at that end), or starts again
        after its first attempt failed: forget what that attempt reported."""

    def ordering(self, spec: InputSpec, decisions: DataFrame) -> None:
        """The arrival-time policies' decisions (semantics §7) for one epoch of input ``spec``,
        before its ingress: one row per event with ``__pos``, ``event_time`` and ``action``
        (``ok``, ``drop:<reason>``, ``adjust:<reason>[,<reason>]``), as
        :func:`engine.ordering.order_epoch` makes them. Called by ``order_epoch``."""

    def ingress(self, spec: InputSpec, a: DataFrame, events: DataFrame, ctis: DataFrame) -> None:
        """One epoch of input ``spec``'s ingress (semantics §3), from
        :func:`engine.ingress.ingress_epoch`: ``a``, ingress's items with ``__kind``,
        ``__edge``, ``__start``, ``__end``, ``__pos``, ``__cb`` (the CTI in force before the
        item), ``__viol``, ``__drop`` and ``__adj``; ``events`` and ``ctis``, what the input
        emits (an END edge missing from ``events`` was dropped with its START edge)."""

    def input_flow(self, spec: InputSpec, flow: Flow) -> None:
        """The flow input ``spec``'s ingress returned for the epoch, right after
        :meth:`ingress`: for an input with substreams, its keyed CTIs (``flow.keyed``)."""

    def operator(self, node: Node, flow: Flow) -> None:
        """A stateful operator's output flow for the epoch: its CTIs and, for a stream with
        substreams, its keyed CTIs."""

    def end_epoch(self, root: Flow) -> None:
        """The epoch succeeded and egress has run; ``root`` is the query's output flow."""
