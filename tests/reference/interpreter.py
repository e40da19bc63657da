"""The reference interpreter: the temporal contract executed item by item, in arrival order.

This is the oracle the Spark engine is tested against (semantics §4: the reference interpreter
gives the expected output). It follows ``docs/semantics.md``
§1-§6 and ``docs/decisions.md`` literally and is written for reading, not for speed: one loop over
the merged arrival sequence, one small method per rule. It depends on nothing Spark-related.

Who calls it: tests, on the driver, with the same :class:`EventScript` they feed to the engine::

    result = run_reference(
        script,
        [Binding("sensors", AdvanceTimeSettings.increasing_start_time(), ("id", "v"))],
        Where(Input("sensors"), lambda p: p["v"] > 0),
        EventShape.POINT,
    )
    result.output      # what the output adapter must receive, events and CTIs, in order
    result.ingress     # per input: what leaves ingress (adjusted events and the input's CTIs)
    result.counts      # per input: events_in, ctis_*, dropped, adjusted

How a run goes:

1. Every item of every bound input gets a *position* ``(arrival, binding index, offset,
   partition index)`` and all items are processed in position order. A CTI generated after an
   event sits at the event's position with sub-position 1.
2. **Ingress** (§3), per partition: explicit CTIs, generation, violations (DROP / ADJUST / error),
   edge matching; per input: the input's CTI is the minimum over its partitions, emitted as a CTI
   row when it rises; every emitted input CTI is imported at once by the inputs that import it.
3. **Operators** (§5): ``Where``/``Select`` per event with CTIs passed through; ``Union`` merges by
   position, its CTI the minimum of its children's latest CTIs.
4. **Egress** (§6): each output CTI releases the pending items whose rule it satisfies, sorted.
5. **Per-key CTIs** (substreams, §7 ``over``): below.

Per-key CTIs
------------
A *keyed CTI row* ``(K, k, c)`` (a ``_Row`` with ``key=(K, k)`` and event ``cti(c)``) promises: no
more events with ``payload[K] == k`` start before ``c``. A CTI row without key is *global*: valid
for every key. A stream's CTI for key ``k`` at a point of its rows is ``max(latest global CTI,
latest keyed CTI of (K, k))``. Events whose ``K`` value is null never get keyed CTIs.

1. **Ingress** (an input with ``EventOrderingSettings(over=K)``): after an event of key ``k``
   (non-null) in partition ``p`` whose §7 raised the substream watermark ``wm(p, k)`` (above the
   one before, or the first one; also when §7 or §3 then drops the event), once §3 has handled the
   event and the input's global CTI row (if any) was emitted at ``(*pos[:4], 1)``: ``v = min over
   every partition q of max(cti_q, wm(q, k))`` (``cti_q`` the partition's effective CTI after the
   event, ``wm(q, k)`` -inf when ``q`` has not seen ``k``). The row ``(K, k, v)`` is emitted at
   ``(*pos[:4], 1)``, after the global row there, when ``v`` is above the input's global CTI and
   above the last keyed value emitted for ``k``. Only at such events (not when another
   partition's CTI rises: sound, just lazier). Imports never produce or carry keyed rows; keyed
   rows are not counted; :class:`Result` lists them in ``keyed_ctis``, not in ``ingress``.
2. **Where, Select**: keyed rows pass unchanged (a where keeps them whatever its predicate).
3. **ShiftEventTime, AlterEventDuration, ToPoint, AlterEventLifetime**: ``(K, k, c)`` becomes
   ``(K, k, moved(c))``, emitted only when above both the operator's latest global output CTI
   and its latest keyed output for ``k``.
4. **Window**: keyed rows on a column ``K`` not in the window's keys are dropped at its input.
   Otherwise each group is complete through ``max(last, last_k)`` (``last`` the latest global
   input CTI, ``last_k`` the latest keyed input CTI of the group's ``K`` value); a keyed row
   ``(K, k, c)`` with ``c`` above that completes the windows ``ws + size <= c`` of the groups of
   ``k`` only, then the keyed output ``(K, k, pulled(c))`` follows when above both the latest
   global output CTI and the latest keyed output of ``k``. A global CTI completes for each
   group the windows above ``max(last, last_k)``: a window is never emitted twice.
5. **Union, Join** (on ``K``): after the rows of a position, each key ``k`` with a keyed row
   there gets ``v = min over inputs of k's CTI in that input`` (an input without keyed rows:
   its global CTI), emitted as ``(K, k, v)`` when above the operator's latest global output CTI
   and its last keyed output of ``k``. A join takes keyed rows only on a column of ``on`` and
   only from a side with no Join or AntiJoin below it: such a side's pairs end by its global
   CTI, so its keys' CTIs could pass an END edge still to come. Pairs end by global CTIs.
   **AntiJoin, LeftOuterJoin, ClipEventDuration, Snapshot**: keyed rows are dropped at their
   inputs (global CTIs only).
6. **MergeSubstreams**: drops keyed rows; events and global CTIs pass.
7. **Egress**: a keyed row ``(K, k, c)`` releases the pending items whose payload has ``K`` with
   value ``k`` and whose due is below ``c`` (same rules per consumer shape), sorted as for a
   global CTI; no CTI item is delivered for it (adapters get global CTIs only). An item is
   released once.

Rows at one position of a stream come as events, the global CTI, then keyed CTIs. Only ingress
makes keyed rows (at most one per event, so at most one per position of an input), the operators
keep each keyed row at its input position, and union and join make at most one per key at a
position (several at one position, of different keys, in key order). One exception to "events
first": a window emits the results a keyed row completes at that row's position, after the global
CTI it emitted there; those results start at or after that global CTI (their windows were not
complete at the global input CTI, so they start at or after its pulled-back value), so no CTI
promise breaks.

When the run fails (a CTI violation without a policy, a malformed END edge) the error raised
carries ``partial_result``: the :class:`Result` of every item before the failing one, without a
stop flush, i.e. what the engine must have delivered before it failed.
"""

from __future__ import annotations

import decimal
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ctistream.adapters.memory import EventScript
from ctistream.engine.contracts import ItemKind, SourceItem
from ctistream.engine.errors import CtiViolationError, MalformedRecordError, QueryBuildError
from ctistream.engine.events import (
    EdgeType,
    Event,
    EventKind,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.settings import (
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventOrderingSettings,
    Versions,
)
from ctistream.engine.temporal import (
    MAX_TIME,
    MIN_TIME,
    duration_text,
    format_ticks,
    saturating_sub,
)

from .clip import ClipEventDuration, clip_rows
from .diagnostics import Diagnostics, diagnostic
from .group_apply import GroupApply, evaluate_group_apply
from .keys import keys_equal, spark_key, spark_order
from .ordering import Decision, Ordering
from .outer import LeftOuterJoin, left_outer_rows
from .window_rows import Apply, TopK, evaluate_window_rows

__all__ = [
    "AlterEventDuration",
    "AlterEventLifetime",
    "AntiJoin",
    "Binding",
    "ClipEventDuration",
    "Diagnostics",
    "Input",
    "Join",
    "KeyedCti",
    "LeftOuterJoin",
    "MergeSubstreams",
    "Node",
    "Result",
    "Select",
    "ShiftEventTime",
    "Snapshot",
    "ToPoint",
    "Union",
    "Where",
    "Window",
    "run_reference",
]


# -- plan -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    """Plan leaf: the ingress output of the bound input ``name``."""

    name: str


@dataclass(frozen=True)
class Where:
    """Keep the events whose payload dict satisfies ``predicate``; CTIs pass unchanged."""

    child: Node
    predicate: Callable[[dict], bool]


@dataclass(frozen=True)
class Select:
    """Replace each event's payload by ``project(payload)`` (its key order is the column order);
    times and CTIs are untouched."""

    child: Node
    project: Callable[[dict], dict]


@dataclass(frozen=True)
class Union:
    """All events of all children; the CTI is the minimum over children of their latest CTI."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class ShiftEventTime:
    """§5: ``[start + delta, end + delta)``; output CTI ``c + delta``."""

    child: Node
    delta: int


@dataclass(frozen=True)
class AlterEventDuration:
    """§5: ``end = start + duration``; output CTI unchanged."""

    child: Node
    duration: int


@dataclass(frozen=True)
class AlterEventLifetime:
    """§5: ``start = start_fn(start)``, ``end = start + duration``; output CTI ``start_fn(c)``."""

    child: Node
    start_fn: Callable[[int], int]
    duration: int


@dataclass(frozen=True)
class ToPoint:
    """§5: ``end = start + 1``; output CTI unchanged."""

    child: Node


@dataclass(frozen=True)
class Window:
    """§5 hopping (``hop < size``) and tumbling (``hop == size``) windows with an aggregate.

    One event per non-empty window and group; ``aggregates`` map a result column to a function
    of the list of member payloads. ``point_at_end``: the result is a point at the window end
    instead of the window's lifetime. Output CTI: the start (or, for points, the end) of the
    earliest window still open.
    """

    child: Node
    size: int
    hop: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Callable[[list[dict]], Any]], ...]
    point_at_end: bool = False


@dataclass(frozen=True)
class Join:
    """§5 join: pairs with equal keys (nulls never match) whose lifetimes overlap; the lifetime
    is the intersection; the payload holds the left columns, then the right ones (a name that
    clashes gets a ``right_`` prefix). Output CTI: the minimum of both sides' latest CTIs.

    A pair forms when the later of its two events arrives, if their lifetimes overlap as then
    known (an open edge reaches +inf). If both are complete, it is an interval; otherwise a START
    edge, closed by an END edge once its end is determined: both sides complete (end = the
    smaller end), or one side complete with end ``e`` and the other side's CTI at or past ``e``
    (end = ``e``). An end at or before the start makes the pair empty: released never.
    """

    left: Node
    right: Node
    on: tuple[str, ...]


@dataclass(frozen=True)
class AntiJoin:
    """§5 anti-join: the parts of each left lifetime not covered by a right event with equal keys
    (nulls never match); payload = the left payload. Output CTI: the minimum of both sides' latest
    CTIs.

    After every position group, with ``cL``/``cR`` the sides' latest CTIs, a point ``t`` of a
    left event is *decided* when ``t < cR`` (later right events start, and right END edges end, at
    or after ``cR``) and the left event is complete or ``t < cL``. An uncovered fragment
    ``[p, q)`` (as known now: open edges reach +inf) leaves once ``p`` is decided: as an interval
    if its end is decided too (``q`` decided, or ``q`` the left event's end and that end ``<= cR``),
    otherwise as a START edge whose END edge follows when the end is decided.
    """

    left: Node
    right: Node
    on: tuple[str, ...]


@dataclass(frozen=True)
class Snapshot:
    """§5 snapshot window with an aggregate: one event per snapshot (the span between consecutive
    event endpoints) and group, over the events active in it. Output CTI: the start of the
    snapshot that contains the input CTI when an event holds it, else the input CTI itself
    (:func:`_snapshot`)."""

    child: Node
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Callable[[list[dict]], Any]], ...]


# -- aggregates over doubles (§4: repeatable; docs/decisions.md "Doubles") ------------------------
# An aggregate is a function of the window's (or snapshot's) member payloads. Over doubles the
# engine's sum, avg / mean and variance family are these: the exact value of the mathematical
# formula over the non-null values, as a rational number, then the double nearest to it (ties to
# even; beyond the doubles an infinity; a zero is +0.0). Exact values do not depend on the order
# of the values, so no cut into epochs, partitions or tasks can change a bit. Special values: a
# NaN, or both infinities, give NaN, one infinity that infinity (the variance family: NaN for any
# of them). No value gives None, and so does a sample variance or deviation of one value.


def _values(rows: list[dict], column: str) -> list[float]:
    return [float(r[column]) for r in rows if r[column] is not None]


def _special(xs: list[float]) -> float | None:
    """NaN, an infinity, or None when every value is finite."""
    if any(math.isnan(x) for x in xs) or (math.inf in xs and -math.inf in xs):
        return math.nan
    return next((x for x in xs if math.isinf(x)), None)


def _nearest(q: Fraction) -> float:
    try:
        return float(q) + 0.0  # int / int in Python is correctly rounded; + 0.0 makes -0.0 0.0
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def double_sum(column: str) -> Callable[[list[dict]], float | None]:
    """``F.sum(column)`` over doubles: the double nearest to the exact sum."""

    def total(rows: list[dict]) -> float | None:
        xs = _values(rows, column)
        if not xs:
            return None
        special = _special(xs)
        return special if special is not None else _nearest(sum(map(Fraction, xs), Fraction(0)))

    return total


def double_avg(column: str) -> Callable[[list[dict]], float | None]:
    """``F.avg(column)`` / ``F.mean(column)``: the double nearest to exact sum / count."""

    def mean(rows: list[dict]) -> float | None:
        xs = _values(rows, column)
        if not xs:
            return None
        special = _special(xs)
        if special is not None:
            return special
        return _nearest(sum(map(Fraction, xs), Fraction(0)) / len(xs))

    return mean


def _variance(xs: list[float], ddof: int) -> Fraction | float | None:
    """The exact variance: sum of squared deviations from the exact mean / (n - ddof)."""
    if len(xs) <= ddof or not xs:
        return None
    if _special(xs) is not None:
        return math.nan
    exact = [Fraction(x) for x in xs]
    mean = sum(exact, Fraction(0)) / len(exact)
    return sum(((x - mean) ** 2 for x in exact), Fraction(0)) / (len(exact) - ddof)


def double_variance(column: str, ddof: int = 1) -> Callable[[list[dict]], float | None]:
    """``F.var_samp`` / ``F.variance`` (``ddof=1``), ``F.var_pop`` (``ddof=0``): the double
    nearest to the exact variance."""

    def variance(rows: list[dict]) -> float | None:
        v = _variance(_values(rows, column), ddof)
        return v if v is None or isinstance(v, float) else _nearest(v)

    return variance


def double_stddev(column: str, ddof: int = 1) -> Callable[[list[dict]], float | None]:
    """``F.stddev`` / ``F.stddev_samp`` / ``F.std`` (``ddof=1``), ``F.stddev_pop`` (``ddof=0``):
    the double nearest to the square root of the exact variance."""

    def stddev(rows: list[dict]) -> float | None:
        v = _variance(_values(rows, column), ddof)
        if v is None or isinstance(v, float):
            return v
        return _sqrt_nearest(v)

    return stddev


def _sqrt_nearest(v: Fraction) -> float:
    """The double nearest to sqrt(v): a close guess, moved to the doubles a <= sqrt(v) < b
    around it, then the one on sqrt(v)'s side of their midpoint m (sqrt(v) < m iff v < m**2)."""
    if v == 0:
        return 0.0
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        guess = float((decimal.Decimal(v.numerator) / decimal.Decimal(v.denominator)).sqrt())
    a = guess
    while Fraction(a) ** 2 > v:
        a = math.nextafter(a, 0.0)
    while Fraction(math.nextafter(a, math.inf)) ** 2 <= v:
        a = math.nextafter(a, math.inf)
    b = math.nextafter(a, math.inf)
    if math.isinf(b):
        return a
    m = (Fraction(a) + Fraction(b)) / 2
    if v != m * m:
        return b if v > m * m else a
    return a if math.frexp(a)[0] * 2**53 % 2 == 0 else b  # a tie: the even one


@dataclass(frozen=True)
class MergeSubstreams:
    """Events and global CTIs pass unchanged; keyed CTI rows are dropped: downstream, every key
    follows the stream's one global CTI (the engine's ``Stream.merge_substreams()``)."""

    child: Node


Node = (
    Input
    | Diagnostics
    | MergeSubstreams
    | AntiJoin
    | Join
    | LeftOuterJoin
    | ClipEventDuration
    | Snapshot
    | Where
    | Select
    | Union
    | ShiftEventTime
    | AlterEventDuration
    | AlterEventLifetime
    | ToPoint
    | Window
    | GroupApply
)


@dataclass(frozen=True)
class Binding:
    """One bound input, in binding order.

    ``settings`` are the effective advance-time settings (the binding's own, or the adapter's
    ``as_binding()``); ``None`` means explicit CTIs only and no violation policy. ``columns`` is
    the payload column order (schema order) of this input. ``ordering``: the arrival-time
    policies of §7 (``reference/ordering.py``), applied before §3; they make the input's CTIs
    (``settings`` may then only import), and without ``settings`` the violation policy is the
    ordering action.
    """

    name: str
    settings: AdvanceTimeSettings | None
    columns: tuple[str, ...]
    ordering: EventOrderingSettings | None = None
    #: the input's rows (points) are versions of keys, made edges by ingress (§1, Versions)
    versions: Versions | None = None


@dataclass
class Result:
    """What a run produced.

    ``output``: the delivered items in order (events in the consumer's shape, and CTIs).
    ``ingress``: per input, its ingress output in position order (events as they leave ingress,
    with adjusted times, and the input's CTI rows).
    ``counts``: per input, ``events_in``, ``ctis_explicit``, ``ctis_generated``,
    ``ctis_imported``, ``ctis_ignored``, ``dropped``, ``adjusted``; for an input with ordering
    also ``dropped_by_reason``, ``adjusted_by_reason`` and, with ``over``, ``keys``.
    ``ordering``: per input with ordering, what §7 decided for each event, in arrival order.
    ``keyed_ctis``: per input (every bound input; an empty list when it has none), its keyed CTI
    rows in position order, as :data:`KeyedCti` tuples ``(position, K, k, c)``. They are not in
    ``ingress`` (which keeps the events and the input's global CTIs only) nor in ``counts``.
    ``root_keyed_ctis``: the keyed CTI rows that reached egress (the plan's root), in order;
    they release items ("Per-key CTIs" rule 7 in the module docstring) but are never delivered:
    ``output`` has global CTIs only.
    ``lifetime_dropped``: per lifetime operator (``ShiftEventTime``, ``AlterEventDuration``,
    ``AlterEventLifetime``, ``ToPoint``), children before parents, the events it dropped because
    their start landed at ``±inf`` (§5).
    """

    output: list[Event]
    ingress: dict[str, list[Event]]
    counts: dict[str, dict[str, Any]]
    ordering: dict[str, list[Decision]] = field(default_factory=dict)
    keyed_ctis: dict[str, list[KeyedCti]] = field(default_factory=dict)
    root_keyed_ctis: list[KeyedCti] = field(default_factory=list)
    lifetime_dropped: list[int] = field(default_factory=list)


# -- positions --------------------------------------------------------------------------------
# (arrival, binding index, offset, partition index, sub-position). Sub-position 1 is the CTI
# generated right after the event at the same position.
Position = tuple[int, int, int, int, int]

#: A keyed CTI as :class:`Result` reports it: ``(position, K, k, c)``.
KeyedCti = tuple[Position, str, Any, int]

#: Arrival of the stop flush: after every real arrival stamp (those are int64 ticks).
_STOP_ARRIVAL = MAX_TIME + 1

COUNT_NAMES = (
    "events_in",
    "ctis_explicit",
    "ctis_generated",
    "ctis_imported",
    "ctis_ignored",
    "dropped",
    "adjusted",
)


@dataclass(frozen=True)
class _Arrival:
    """One source item with its place in the arrival order."""

    position: Position
    binding: int
    partition: str
    item: SourceItem


@dataclass(frozen=True)
class _Row:
    """One row of a stream inside the plan: an event or a CTI, at a position.

    ``key``: None for events and *global* CTIs (valid for every key); ``(K, k)`` for a *keyed*
    CTI row, whose ``event`` is ``cti(c)``: no more events with ``payload[K] == k`` start before
    ``c`` (module docstring, "Per-key CTIs").
    """

    position: Position
    event: Event
    key: tuple[str, Any] | None = None


def _global_only(rows: list[_Row]) -> list[_Row]:
    """The rows without the keyed CTIs: the input of an operator that uses global CTIs only."""
    return [row for row in rows if row.key is None]


def _keyed(row: _Row) -> KeyedCti:
    assert row.key is not None
    return (row.position, row.key[0], row.key[1], row.event.start)


# -- ingress ----------------------------------------------------------------------------------
@dataclass
class _OpenEdge:
    """A START edge of a partition waiting for its END edge.

    ``start``/``payload`` are the original ones (END edges match on them); ``adjusted_start`` is
    the start it left ingress with, or None when it was dropped.
    """

    start: int
    payload: dict[str, Any]
    adjusted_start: int | None


@dataclass
class _Partition:
    name: str
    cti: int = MIN_TIME  # the effective CTI: running max of every CTI value seen
    counted: int = 0  # counted events (points, intervals, START edges) so far
    max_start: int | None = None  # largest original start of the counted events
    period: int | None = None  # floor(max_start / T) for time-span generation
    open_edges: list[_OpenEdge] = field(default_factory=list)
    #: versioned inputs: per key, its open version (a START edge made from a version row)
    versions: dict[tuple, _OpenEdge] = field(default_factory=dict)
    ended: bool = False


class _Ingress:
    """Semantics §3 for one input: its partitions' CTI state, violations, edges, imports."""

    def __init__(self, binding: Binding, index: int, partitions: Sequence[str]) -> None:
        self.binding = binding
        self.index = index
        self.name = binding.name
        settings = binding.settings
        self.generation = settings.generation if settings is not None else None
        self.policy: AdvanceTimePolicy | None = settings.policy if settings is not None else None
        ordering = binding.ordering
        self.ordering = Ordering(ordering) if ordering is not None else None
        if ordering is not None and settings is None:
            self.policy = AdvanceTimePolicy(ordering.action.value)
        gen_flush = self.generation is not None and self.generation.flush_on_stop
        self.flush_on_stop = ordering.flush_on_stop if ordering is not None else gen_flush
        self.partitions = {p: _Partition(p) for p in partitions}
        self.cti = MIN_TIME  # the input's CTI: min over partitions
        self.rows: list[_Row] = []
        self.counts = dict.fromkeys(COUNT_NAMES, 0)
        if binding.versions is not None:
            self.counts["deletes_ignored"] = 0
        self.importers: list[_Ingress] = []
        self.over = ordering.over if ordering is not None else None  # the substream column K
        self.keyed: dict[Any, int] = {}  # per key k: the last keyed CTI value emitted
        #: the diagnostic stream's events (reference/diagnostics.py), at their positions
        self.diagnostics: list[_Row] = []

    # items ---------------------------------------------------------------------------------
    def on_item(self, arrival: _Arrival) -> None:
        part = self.partitions[arrival.partition]
        item = arrival.item
        if item.kind is ItemKind.EVENT:
            self._on_event(part, item, arrival.position)
        elif item.kind is ItemKind.CTI:
            self._on_explicit_cti(part, item, arrival.position)
        else:
            self._on_end(part, arrival.position)

    def _on_explicit_cti(self, part: _Partition, item: SourceItem, pos: Position) -> None:
        assert item.event is not None
        self.counts["ctis_explicit"] += 1
        if self._raise_partition(part, item.event.start):
            self._publish(pos)
        else:
            self.counts["ctis_ignored"] += 1

    def _on_end(self, part: _Partition, pos: Position) -> None:
        part.ended = True
        if self.flush_on_stop:
            if self._raise_partition(part, MAX_TIME):
                self.counts["ctis_generated"] += 1
            self._publish(pos)

    def on_stop(self) -> None:
        """The bounded run stops: flush the partitions that have not ended (if configured)."""
        if not self.flush_on_stop:
            return
        for part in self.partitions.values():
            if not part.ended and self._raise_partition(part, MAX_TIME):
                self.counts["ctis_generated"] += 1
        # One position for all partitions: only the value after all of them is emitted.
        self._publish((_STOP_ARRIVAL, self.index, 0, 0, 0))

    def on_import(self, value: int, pos: Position) -> None:
        """A CTI emitted by the input this one imports, at that CTI's position."""
        self.counts["ctis_imported"] += 1
        for part in self.partitions.values():
            self._raise_partition(part, value)
        self._publish(pos)

    # events --------------------------------------------------------------------------------
    def _on_event(self, part: _Partition, item: SourceItem, pos: Position) -> None:
        event = item.event
        assert event is not None and event.kind is EventKind.INSERT
        self.counts["events_in"] += 1
        payload = self._payload(event, part, item)
        if self.binding.versions is not None:
            self._on_version(part, item, event, payload, pos)
            return
        if event.edge is EdgeType.END:
            self._on_end_edge(part, item, event, payload, pos)
            return  # END edges are never counted for generation
        decision = None
        watermark_before = None
        if self.ordering is not None:  # §7 applies before §3
            if self.over is not None:
                watermark_before = self.ordering.watermark(part.name, payload[self.over])
            decision = self.ordering.on_event(part.name, payload, item.arrival, pos)
            self._diagnose_ordering(part, item, decision, payload, pos)
            if decision.start is None:
                self._ordering_cti(part, decision, pos)
                self._keyed_cti(part, decision, watermark_before, pos)
                return
            event = point(decision.start, event.payload)

        # Checked against the CTI *before* the event (the CTI generated after it never applies).
        c = part.cti
        start: int | None = event.start
        if event.start < c:
            start = self._violation(part, item, event, c)
            self._diagnose(c, start, None, item, part, event, payload, pos)
        if start is not None:
            self._emit(pos, Event(EventKind.INSERT, start, event.end, payload, event.edge))
        if event.edge is EdgeType.START:
            part.open_edges.append(_OpenEdge(event.start, payload, start))
        # Dropped and adjusted events count too, with their original start.
        self._generate(part, event.start, pos)
        if decision is not None:
            self._ordering_cti(part, decision, pos)
            self._keyed_cti(part, decision, watermark_before, pos)

    def _diagnose(
        self,
        c: int,
        new_start: int | None,
        new_end: int | None,
        item: SourceItem,
        part: _Partition,
        event: Event,
        payload: dict[str, Any],
        pos: Position,
    ) -> None:
        """§8: a diagnostic for an item §3 dropped (no new start or end) or adjusted, at the CTI
        ``c`` in force when it arrived."""
        action = "dropped" if new_start is None and new_end is None else "adjusted"
        where = (self.name, part.name, item.offset)
        made = diagnostic(
            c,
            action,
            "cti-violation",
            (event.start, event.end),
            (new_start, new_end),
            where,
            payload,
        )
        self.diagnostics.append(_Row(pos, made))

    def _diagnose_ordering(
        self,
        part: _Partition,
        item: SourceItem,
        decision: Decision,
        payload: dict[str, Any],
        pos: Position,
    ) -> None:
        """§8 for §7's decision on an event: a diagnostic for a drop and one per rule that moved
        it, at the partition's CTI before the event, just before the event's position (the late
        rule's at sub-position -2, the others' at -1)."""
        assert self.ordering is not None
        verb, _, reasons = decision.action.partition(":")
        if verb == "ok":
            return
        t = decision.event_time
        original = (t, t + 1 if t is not None and MIN_TIME < t < MAX_TIME else None)
        where = (self.name, part.name, item.offset)
        c = part.cti
        if verb == "drop":
            made = diagnostic(c, "dropped", reasons, original, (None, None), where, payload)
            self.diagnostics.append(_Row((*pos[:4], -1), made))
            return
        for reason in reasons.split(","):
            if reason == "late":
                assert t is not None and self.ordering.late is not None
                new, sub = decision.arrival - self.ordering.late, -2
            else:
                new, sub = decision.start, -1
            made = diagnostic(c, "adjusted", reason, original, (new, None), where, payload)
            self.diagnostics.append(_Row((*pos[:4], sub), made))

    def _ordering_cti(self, part: _Partition, decision: Decision, pos: Position) -> None:
        """§7: the watermark is a generated CTI, right after the event that raises it."""
        if decision.cti is not None and self._raise_partition(part, decision.cti):
            self.counts["ctis_generated"] += 1
            self._publish((*pos[:4], 1))

    def _keyed_cti(
        self, part: _Partition, decision: Decision, watermark_before: int | None, pos: Position
    ) -> None:
        """Per-key CTIs, rule 1 (module docstring): after an event of key ``k`` that raised its
        substream's watermark, ``v = min over partitions q of max(cti_q, wm(q, k))`` is emitted
        as the keyed row ``(K, k, v)`` at ``(*pos[:4], 1)`` (after the global CTI row there, if
        any) when it is above the input's CTI and the last keyed value of ``k``."""
        k, watermark = decision.key, decision.watermark
        if self.over is None or self.ordering is None or k is None or watermark is None:
            return
        if watermark_before is not None and watermark <= watermark_before:
            return  # the substream's watermark did not rise
        v = MAX_TIME
        for q in self.partitions.values():
            wm = self.ordering.watermark(q.name, k)
            v = min(v, max(q.cti, MIN_TIME if wm is None else wm))
        if v > self.cti and v > self.keyed.get(k, MIN_TIME):
            self.keyed[k] = v
            self.rows.append(_Row((*pos[:4], 1), cti(v), (self.over, k)))

    def report(self) -> dict[str, Any]:
        """The input's counts (with §7's by reason when it has ordering)."""
        if self.ordering is None:
            return dict(self.counts)
        return self.ordering.counts(self.counts)

    def _violation(self, part: _Partition, item: SourceItem, event: Event, c: int) -> int | None:
        """An event with ``start < c``: the new start under ADJUST, or None when dropped."""
        if self.policy is None:
            raise CtiViolationError(
                self.name, part.name, item.offset, event.describe(), format_ticks(c)
            )
        if self.policy is AdvanceTimePolicy.ADJUST and event.end > c:
            self.counts["adjusted"] += 1
            return c
        self.counts["dropped"] += 1
        return None

    def _on_end_edge(
        self,
        part: _Partition,
        item: SourceItem,
        event: Event,
        payload: dict[str, Any],
        pos: Position,
    ) -> None:
        # §3.4: a violating END edge (``end < c``) fails the run without a policy; with one it
        # is matched like any END edge and, if its START edge is open, closes it at ``c``.
        c = part.cti
        late = event.end < c
        if late and self.policy is None:
            raise CtiViolationError(
                self.name, part.name, item.offset, event.describe(), format_ticks(c)
            )
        # The oldest open START edge with the same original start and payload (FIFO).
        match = next(
            (e for e in part.open_edges if e.start == event.start and e.payload == payload), None
        )
        if match is None:
            raise MalformedRecordError(
                f"END edge with no open START edge on input {self.name!r} (partition "
                f"{part.name!r}, offset {item.offset}): {event.describe()}; expected a START edge "
                "with the same start and payload earlier in the same partition. Fix: send the "
                "START edge first, or bind the input with a POINT or INTERVAL shape"
            )
        part.open_edges.remove(match)
        if match.adjusted_start is None:  # its START edge was dropped
            self.counts["dropped"] += 1
            self._diagnose(c, None, None, item, part, event, payload, pos)
            return
        end = event.end
        if late:  # never dropped: the event would live forever (§3.4)
            end = c
            self.counts["adjusted"] += 1
            self._diagnose(c, None, c, item, part, event, payload, pos)
        # May be empty (end == adjusted start == c): it still closes the START edge; no operator
        # and no consumer releases anything for it.
        self._emit(pos, Event(EventKind.INSERT, match.adjusted_start, end, payload, EdgeType.END))

    def _on_version(
        self,
        part: _Partition,
        item: SourceItem,
        event: Event,
        payload: dict[str, Any],
        pos: Position,
    ) -> None:
        """A row of a versioned input (§1, docs/decisions.md "Versions"), a point at ``t``: it
        closes its key's open version in this partition (an END edge at ``t``, or at the CTI
        ``c`` when ``t < c``: §3.4, counted as adjusted; the END edge of a dropped version is
        dropped and counted), then, unless it is a delete, opens the key's new version as a
        START edge at ``t`` under the §3 rules (generation counts it; DROP / ADJUST / error when
        ``t < c``). A delete of a key with no open version changes nothing (``deletes_ignored``);
        a row before its key's open version's original time is malformed. Each edge dropped or
        adjusted is a diagnostic (§8) with the row's offset and the edge's own payload: the END
        edge's is the version it closes, its original lifetime ``[start of that version, t)``
        (docs/decisions.md "Diagnostic stream")."""
        versions = self.binding.versions
        assert versions is not None
        key = tuple(payload[k] for k in versions.key)
        deleted = versions.deleted is not None and bool(payload[versions.deleted])
        t, c = event.start, part.cti
        if t < c and self.policy is None:
            raise CtiViolationError(
                self.name, part.name, item.offset, event.describe(), format_ticks(c)
            )
        before = part.versions.pop(key, None)
        if before is not None and t < before.start:
            what = "delete" if deleted else "version"
            raise MalformedRecordError(
                f"{what} on input {self.name!r} (partition {part.name!r}, offset "
                f"{item.offset}) for key {dict(zip(versions.key, key, strict=True))} is at "
                f"{format_ticks(t)}, before the key's open version (valid from "
                f"{format_ticks(before.start)}); expected each key's versions in valid-from "
                "order within a partition. Fix: send a key's versions in the order they became "
                "valid (a correction of the past is a new version from now on)"
            )
        # the END edge it stands for, as it reached §3 (its diagnostic's original lifetime)
        closing = None
        if before is not None:
            closing = Event(EventKind.INSERT, before.start, t, before.payload, EdgeType.END)
        if before is None:
            self.counts["deletes_ignored"] += deleted
        elif before.adjusted_start is None:  # the version it closes was dropped
            self.counts["dropped"] += 1
            self._diagnose(c, None, None, item, part, closing, before.payload, pos)
        else:
            self.counts["adjusted"] += t < c
            if t < c:
                self._diagnose(c, None, c, item, part, closing, before.payload, pos)
            end = max(t, c)
            self._emit(
                pos,
                Event(EventKind.INSERT, before.adjusted_start, end, before.payload, EdgeType.END),
            )
        if deleted:
            return  # a delete is an END edge: never counted for generation
        start: int | None = t
        if t < c:
            opened = edge_start(t, payload)
            start = self._violation(part, item, opened, c)
            self._diagnose(c, start, None, item, part, opened, payload, pos)
        if start is not None:
            self._emit(pos, Event(EventKind.INSERT, start, MAX_TIME, payload, EdgeType.START))
        part.versions[key] = _OpenEdge(t, payload, start)
        self._generate(part, t, pos)

    def _generate(self, part: _Partition, start: int, pos: Position) -> None:
        gen = self.generation
        if gen is None:
            return
        part.counted += 1
        part.max_start = start if part.max_start is None else max(part.max_start, start)
        if gen.by_count:
            due = part.counted % gen.frequency_ticks == 0
        else:
            period = part.max_start // gen.frequency_ticks  # floor, also for negative times
            # The first counted event only sets the starting period.
            due = part.period is not None and period > part.period
            if part.period is None or period > part.period:
                part.period = period
        if not due:
            return
        candidate = saturating_sub(part.max_start, gen.delay_ticks)
        if self._raise_partition(part, candidate):
            self.counts["ctis_generated"] += 1
            self._publish((*pos[:4], 1))

    # CTI state -----------------------------------------------------------------------------
    @staticmethod
    def _raise_partition(part: _Partition, value: int) -> bool:
        """Raise the partition's effective CTI to ``value``; False if it is not above it."""
        if value <= part.cti:
            return False
        part.cti = value
        return True

    def _publish(self, pos: Position) -> None:
        """Emit the input's CTI (min over partitions) at ``pos`` if it rose; importers follow."""
        value = min(p.cti for p in self.partitions.values())
        if value <= self.cti:
            return
        self.cti = value
        self._emit(pos, cti(value))
        for importer in self.importers:
            importer.on_import(value, pos)

    def _emit(self, pos: Position, event: Event) -> None:
        self.rows.append(_Row(pos, event))

    def _payload(self, event: Event, part: _Partition, item: SourceItem) -> dict[str, Any]:
        """The payload as a dict in the input's column order (a missing column is None)."""
        unknown = [k for k in event.payload if k not in self.binding.columns]
        if unknown:
            raise MalformedRecordError(
                f"event on input {self.name!r} (partition {part.name!r}, offset {item.offset}) "
                f"has columns {unknown} not in the input's columns {list(self.binding.columns)}: "
                f"{event.describe()}. Fix: list every payload column in Binding.columns"
            )
        return {c: event.payload.get(c) for c in self.binding.columns}


# -- operators --------------------------------------------------------------------------------
def _evaluate(node: Node, inputs: Mapping[str, list[_Row]], dropped: list[int]) -> list[_Row]:
    """The rows of ``node`` in position order (keyed CTI rows: module docstring, "Per-key
    CTIs"; the operators that use global CTIs only get their inputs without them)."""
    if isinstance(node, Input):
        return list(inputs[node.name])
    if isinstance(node, Diagnostics):  # its events and the input's global CTIs, by position
        ctis = [r for r in _global_only(inputs[node.name]) if r.event.is_cti]
        rows = [*inputs[("diagnostics", node.name)], *ctis]
        return sorted(rows, key=lambda r: (r.position, r.event.is_cti))
    if isinstance(node, MergeSubstreams):
        return _global_only(_evaluate(node.child, inputs, dropped))
    if isinstance(node, Where):
        return [
            row
            for row in _evaluate(node.child, inputs, dropped)
            if row.event.is_cti or node.predicate(dict(row.event.payload))
        ]
    if isinstance(node, Select):
        out = []
        for row in _evaluate(node.child, inputs, dropped):
            e = row.event
            if not e.is_cti:
                e = Event(e.kind, e.start, e.end, node.project(dict(e.payload)), e.edge)
            out.append(_Row(row.position, e, row.key))
        return out
    if isinstance(node, Union):
        return _union([_evaluate(child, inputs, dropped) for child in node.children])
    if isinstance(node, ShiftEventTime):
        d = node.delta
        return _lifetime(_evaluate(node.child, inputs, dropped), lambda t: t + d, None, dropped)
    if isinstance(node, AlterEventDuration):
        return _lifetime(
            _evaluate(node.child, inputs, dropped), lambda t: t, node.duration, dropped
        )
    if isinstance(node, ToPoint):
        return _lifetime(_evaluate(node.child, inputs, dropped), lambda t: t, 1, dropped)
    if isinstance(node, AlterEventLifetime):
        fn, duration = node.start_fn, node.duration

        def checked(t: int) -> int:
            """start_fn's value, refused outside int64 (docs/decisions.md: Spark's bigint
            arithmetic cannot saturate a user's expression)."""
            v = fn(t)
            if not MIN_TIME <= v <= MAX_TIME:
                raise OverflowError(
                    f"alter_event_lifetime(start_fn, duration={duration_text(duration)!r}): "
                    f"start_fn({t}) = {v} is outside int64"
                )
            return v

        rows = _evaluate(node.child, inputs, dropped)
        # §5: start_fn non-decreasing; refused where it maps a CTI below an earlier one
        highest: int | None = None
        for r in rows:
            t = r.event.start
            if r.key is not None or not r.event.is_cti or not _finite(t):
                continue
            v = checked(t)
            if highest is not None and v < highest:
                raise ValueError(
                    f"alter_event_lifetime(start_fn, duration={duration_text(duration)!r}): "
                    f"start_fn maps the CTI at {t} ticks to {v}, below {highest}"
                )
            highest = v if highest is None else max(highest, v)
        return _lifetime(rows, checked, duration, dropped)
    if isinstance(node, Window):
        return _window(node, _evaluate(node.child, inputs, dropped))
    if isinstance(node, Join):
        left, right = _evaluate(node.left, inputs, dropped), _evaluate(node.right, inputs, dropped)
        # Keyed rows enter a join on their key, from a side with no join below (rule 5).
        left, right = (
            [r for r in rows if r.key is None or (r.key[0] in node.on and not _joins_in(side))]
            for rows, side in ((left, node.left), (right, node.right))
        )
        return _join(node, left, right)
    if isinstance(node, AntiJoin):
        left = _global_only(_evaluate(node.left, inputs, dropped))
        return _anti_join(node, left, _global_only(_evaluate(node.right, inputs, dropped)))
    if isinstance(node, LeftOuterJoin):
        left = _global_only(_evaluate(node.left, inputs, dropped))
        right = _global_only(_evaluate(node.right, inputs, dropped))
        pairs = _join(Join(node.left, node.right, node.on), left, right)
        fragments = _anti_join(AntiJoin(node.left, node.right, node.on), left, right)
        return left_outer_rows(node, pairs, fragments)
    if isinstance(node, ClipEventDuration):
        left = _global_only(_evaluate(node.left, inputs, dropped))
        right = _global_only(_evaluate(node.right, inputs, dropped))
        return clip_rows(node, left, right, _Row)
    if isinstance(node, Snapshot):
        return _snapshot(node, _global_only(_evaluate(node.child, inputs, dropped)))
    from . import count_session  # its operators (it imports this module's rows)

    if isinstance(node, count_session.CountWindow):
        return count_session.count_window(
            node, _global_only(_evaluate(node.child, inputs, dropped))
        )
    if isinstance(node, count_session.SessionWindow):
        rows = _global_only(_evaluate(node.child, inputs, dropped))
        return count_session.session_window(node, rows)
    if isinstance(node, GroupApply):
        rows = _evaluate(node.child, inputs, dropped)
        return evaluate_group_apply(node, rows, _evaluate, inputs, _union, Input)
    if isinstance(node, TopK | Apply):
        return evaluate_window_rows(node, _evaluate(node.child, inputs, dropped))
    raise TypeError(f"not a plan node: {node!r}")


def _snapshot(node: Snapshot, rows: list[_Row], results: _Results | None = None) -> list[_Row]:
    """Item by item. Endpoints are the starts and ends of the events received (+inf for an edge
    still open); an empty lifetime has none. At an input CTI ``c`` every endpoint below ``c`` is
    known (later events start, and END edges end, at or after ``c``), so every snapshot ``[p, q)``
    between consecutive endpoints with ``q < c`` not emitted before is final: one result per
    group of the events active in it (``start <= p < end``), at the CTI's position. At ``c =
    +inf`` every snapshot is final, the last one ``[p, +inf)`` too (§5's bounded work: an event
    whose lifetime ends at +inf counts up to the snapshot that contains the latest finite
    moment, and that is the last one). Then the output CTI (§5, "a snapshot never stalls a
    query"): ``P``, the largest endpoint below ``c``, when some event received has ``start < c <=
    end`` (the snapshot from ``P`` holds it and is final only at a CTI above its end); otherwise
    ``c`` itself (``c`` at +inf)."""
    members: list[_Member] = []
    done = MIN_TIME  # snapshots ending at or before this are emitted
    emitted = MIN_TIME
    out: list[_Row] = []
    for row in rows:
        e = row.event
        if not e.is_cti:
            _take(members, e)
            continue
        c = e.start
        live = [m for m in members if m.end > m.start]
        points = sorted({m.start for m in live} | {m.end for m in live})
        for p, q in itertools.pairwise(points):
            if p < done or (q >= c and c != MAX_TIME):
                continue
            groups: dict[tuple, list[_Member]] = {}
            for m in live:
                if m.start <= p < m.end:
                    groups.setdefault(tuple(spark_key(m.payload[k]) for k in node.keys), []).append(
                        m
                    )
            for key in sorted(groups, key=lambda k: tuple(spark_order(v) for v in k)):
                group = dict(zip(node.keys, key, strict=True))
                for payload in (results or _aggregated(node.aggregates))(
                    group, groups[key], (p, q)
                ):
                    out.append(_Row(row.position, Event(EventKind.INSERT, p, q, payload)))
        before = [p for p in points if p < c]
        if before:
            done = max(done, before[-1])
        held_back = any(m.start < c <= m.end for m in live)  # then ``before`` is not empty
        start = before[-1] if held_back and c != MAX_TIME else c
        if start > emitted:
            emitted = start
            out.append(_Row(row.position, cti(start)))
    return out


#: a window's rows per complete window and group: (the group's key values, its members in
#: arrival order, the window ``(start, end)``) -> result payloads (aggregates: one row;
#: windowed top_k and apply: tests/reference/window_rows.py)
_Results = Callable[[dict[str, Any], list["_Member"], tuple[int, int]], list[dict[str, Any]]]


def _aggregated(aggregates: tuple[tuple[str, Callable[[list[dict]], Any]], ...]) -> _Results:
    """One result per window and group: the key values, then each aggregate of the members'
    payloads."""

    def rows(group: dict[str, Any], members: list[_Member], _: tuple[int, int]) -> list[dict]:
        payload = dict(group)
        for name, fn in aggregates:
            payload[name] = fn([m.payload for m in members])
        return [payload]

    return rows


@dataclass(eq=False)
class _Held:
    """An event one side of a join holds; ``end`` is +inf while it is an open edge."""

    start: int
    end: int
    open: bool
    payload: dict[str, Any]


@dataclass(eq=False)
class _Pair:
    left: _Held
    right: _Held
    start: int
    payload: dict[str, Any]


def _kind_order(event: Event) -> int:
    """Within one position of one side: events, then END edges, then the CTI."""
    if event.is_cti:
        return 2
    return 1 if event.edge is EdgeType.END else 0


def _join(node: Join, left: list[_Row], right: list[_Row]) -> list[_Row]:
    """Rows of both sides by (position, side, events / END edges / CTI); output CTI after every
    position group, when the minimum of both sides' latest CTIs rises; then the keyed CTIs
    (rule 5). Pairs end by the global CTIs only."""
    tagged = [
        (row.position, side, _kind_order(row.event), seq, row)
        for side, rows in enumerate((left, right))
        for seq, row in enumerate(rows)
    ]
    tagged.sort(key=lambda t: t[:4])
    held: tuple[list[_Held], list[_Held]] = ([], [])
    latest = [MIN_TIME, MIN_TIME]
    keyed = _KeyedMerge(2)
    pairs: list[_Pair] = []
    emitted = MIN_TIME
    out: list[_Row] = []

    def merged(lp: dict, rp: dict) -> dict:
        return {**lp, **{(f"right_{k}" if k in lp else k): v for k, v in rp.items()}}

    def determine(pair: _Pair, pos: Position) -> None:
        lh, rh = pair.left, pair.right
        if not lh.open and not rh.open:
            end = min(lh.end, rh.end)
        elif not lh.open and latest[1] >= lh.end:
            end = lh.end
        elif not rh.open and latest[0] >= rh.end:
            end = rh.end
        else:
            return
        pairs.remove(pair)
        out.append(_Row(pos, Event(EventKind.INSERT, pair.start, end, pair.payload, EdgeType.END)))

    i = 0
    while i < len(tagged):
        pos = tagged[i][0]
        while i < len(tagged) and tagged[i][0] == pos:
            _, side, _, _, row = tagged[i]
            i += 1
            e = row.event
            if row.key is not None:
                keyed.take(side, row)
            elif e.is_cti:
                latest[side] = e.start
                for pair in list(pairs):
                    determine(pair, pos)
            elif e.edge is EdgeType.END:
                x = next(
                    h
                    for h in held[side]
                    if h.open and h.start == e.start and h.payload == dict(e.payload)
                )
                x.end, x.open = e.end, False
                for pair in list(pairs):
                    if pair.left is x or pair.right is x:
                        determine(pair, pos)
            else:
                x = _Held(e.start, e.end, e.edge is EdgeType.START, dict(e.payload))
                held[side].append(x)
                for y in held[1 - side]:
                    if y.end <= y.start or any(
                        not keys_equal(x.payload[k], y.payload[k]) for k in node.on
                    ):
                        continue
                    if not (x.start < y.end and y.start < x.end):
                        continue
                    lh, rh = (x, y) if side == 0 else (y, x)
                    start = max(lh.start, rh.start)
                    payload = merged(lh.payload, rh.payload)
                    if not lh.open and not rh.open:
                        end = min(lh.end, rh.end)
                        out.append(_Row(pos, Event(EventKind.INSERT, start, end, payload)))
                        continue
                    out.append(
                        _Row(pos, Event(EventKind.INSERT, start, MAX_TIME, payload, EdgeType.START))
                    )
                    pairs.append(_Pair(lh, rh, start, payload))
                    determine(pairs[-1], pos)
        c = min(latest)
        if c > emitted:
            emitted = c
            out.append(_Row(pos, cti(c)))
        keyed.emit(pos, latest, emitted, out)
    return out


@dataclass(eq=False)
class _Left:
    """A left event of an anti-join: fragments below ``done`` have left; ``started`` when a START
    edge at ``done`` is waiting for its END edge."""

    held: _Held
    done: int
    started: bool = False


def _uncovered(lo: int, hi: int, covers: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The maximal parts of ``[lo, hi)`` outside every ``[a, b)`` of ``covers``."""
    out, t = [], lo
    for a, b in sorted(covers):
        if a >= hi or t >= hi:
            break
        if a > t:
            out.append((t, a))
        t = max(t, b)
    if t < hi:
        out.append((t, hi))
    return out


def _anti_join(node: AntiJoin, left: list[_Row], right: list[_Row]) -> list[_Row]:
    """Rows of both sides by (position, side, events / END edges / CTI), as for the join; after
    every position group each left event lets out the fragments that are decided, then the output
    CTI follows when the minimum of both sides' latest CTIs rises."""
    tagged = [
        (row.position, side, _kind_order(row.event), seq, row)
        for side, rows in enumerate((left, right))
        for seq, row in enumerate(rows)
    ]
    tagged.sort(key=lambda t: t[:4])
    lefts: list[_Left] = []
    rights: list[_Held] = []
    latest = [MIN_TIME, MIN_TIME]
    emitted = MIN_TIME
    out: list[_Row] = []

    def matches(x: _Held, y: _Held) -> bool:
        return all(keys_equal(x.payload[k], y.payload[k]) for k in node.on)

    def let_out(x: _Left, pos: Position) -> None:
        h, (c_l, c_r) = x.held, latest
        end = MAX_TIME if h.open else h.end
        covers = [
            (y.start, MAX_TIME if y.open else y.end)
            for y in rights
            if matches(h, y) and (y.open or y.end > y.start)
        ]
        for p, q in _uncovered(x.done, end, covers):
            if not (p < c_r and (not h.open or p < c_l)):
                return
            continued = x.started and p == x.done
            q_decided = q < MAX_TIME and (
                (q < c_r and (not h.open or q < c_l)) or (not h.open and q == h.end <= c_r)
            )
            if not q_decided:
                if not continued:
                    out.append(
                        _Row(pos, Event(EventKind.INSERT, p, MAX_TIME, h.payload, EdgeType.START))
                    )
                x.done, x.started = p, True
                return
            edge = EdgeType.END if continued else None
            out.append(_Row(pos, Event(EventKind.INSERT, p, q, h.payload, edge)))
            x.done, x.started = q, False

    i = 0
    while i < len(tagged):
        pos = tagged[i][0]
        while i < len(tagged) and tagged[i][0] == pos:
            _, side, _, _, row = tagged[i]
            i += 1
            e = row.event
            if e.is_cti:
                latest[side] = e.start
            elif e.edge is EdgeType.END:
                held = [x.held for x in lefts] if side == 0 else rights
                x = next(
                    h
                    for h in held
                    if h.open and h.start == e.start and h.payload == dict(e.payload)
                )
                x.end, x.open = e.end, False
            else:
                x = _Held(e.start, e.end, e.edge is EdgeType.START, dict(e.payload))
                if side == 0:
                    lefts.append(_Left(x, x.start))
                else:
                    rights.append(x)
        for x in lefts:
            let_out(x, pos)
        c = min(latest)
        if c > emitted:
            emitted = c
            out.append(_Row(pos, cti(c)))
    return out


@dataclass
class _Member:
    """An event a window operator holds: its end is +inf while it is an open edge."""

    start: int
    end: int
    payload: dict[str, Any]
    open: bool


def _take(members: list[_Member], e: Event) -> _Member:
    """An event joins ``members``; an END edge closes the oldest open identical edge instead.
    Returns the member added or closed."""
    if e.edge is EdgeType.END:
        match = next(
            m for m in members if m.open and m.start == e.start and m.payload == dict(e.payload)
        )
        match.end, match.open = e.end, False
        return match
    members.append(_Member(e.start, e.end, dict(e.payload), e.edge is EdgeType.START))
    return members[-1]


def _window(node: Window, rows: list[_Row], results: _Results | None = None) -> list[_Row]:
    """Item by item: events join the operator; an END edge closes the oldest open identical
    edge; an input CTI ``c`` completes every window ``[ws, ws + size)`` with ``ws + size <= c``
    not completed before, emitting one result per non-empty window and group (at the CTI's
    position, before the CTI), then the pulled-back CTI if it rises.

    At ``c = +inf`` the windows that complete are those starting at or before ``latest``, the
    latest finite moment the operator has seen: the largest finite start, end or global CTI of
    its input so far (§5's bounded work). An event whose lifetime ends at +inf (an edge never
    closed, an interval to +inf) so counts in every window from its start up to and including
    the window that contains ``latest``, never in windows without end. A finite CTI ``c``
    completes only windows with ``ws < ws + size <= c <= latest``: the bound never cuts them.

    A window lies between finite moments, ``-inf < ws`` and ``ws + size < +inf`` (§1;
    docs/decisions.md): the grid's windows beyond do not exist, so an event there counts in no
    window, and the pulled CTI is the earliest open window that exists, or ``c`` itself when
    none is open.

    Per-key CTIs (module docstring, rule 4): a keyed row ``(K, k, c)`` with ``K`` not among the
    window's keys is dropped. Otherwise a group is complete through ``max(last, last_k)`` (the
    latest global input CTI, and the latest keyed input CTI of its value ``k`` of ``K``); a keyed
    row above that completes, for the groups of ``k`` only, the windows with ``ws + size <= c``
    (results at the keyed row's position, sorted as for a global CTI), then emits the keyed
    output ``(K, k, pulled(c))`` if it is above the latest global output CTI and the latest keyed
    output of ``k``. A global CTI skips a group's windows completed by its keyed CTIs.
    """
    size, hop = node.size, node.hop
    members: list[_Member] = []
    last = MIN_TIME  # the input CTI up to which windows are complete
    last_keyed: dict[tuple[str, Any], int] = {}  # per (K, k): the latest keyed input CTI
    latest = MIN_TIME
    emitted = MIN_TIME
    emitted_keyed: dict[tuple[str, Any], int] = {}  # per (K, k): the latest keyed output CTI
    out: list[_Row] = []

    lowest = -(-(MIN_TIME + 1) // hop) * hop  # the smallest grid start above -inf

    def exists(ws: int) -> bool:
        """A window lies between finite moments (docs/decisions.md): ``-inf < ws`` and
        ``ws + size < +inf``; the grid's windows beyond do not exist."""
        return ws > MIN_TIME and ws + size < MAX_TIME

    def pulled(c: int) -> int:
        if c in (MIN_TIME, MAX_TIME):
            return c
        ws = ((c - size) // hop) * hop + hop  # smallest ws on the grid with ws+size > c
        ws = max(ws, lowest)
        if not exists(ws):  # no window is open: none can have a result after c
            return c
        return ws + size if node.point_at_end else ws

    def through(group: dict[str, Any]) -> int:
        """The input CTI through which the windows of ``group`` (its key columns) are complete:
        ``max(last, last_k)``."""
        return max([last, *(last_keyed.get((k, group[k]), MIN_TIME) for k in node.keys)])

    def complete(c: int, position: Position, only: tuple[str, Any] | None) -> None:
        """Emit the results of the windows ``c`` completes (of the groups of ``only`` if set)."""
        starts = set()
        for m in members:
            if m.end <= m.start:  # an edge closed at its adjusted start: an empty lifetime
                continue
            if only is not None and m.payload[only[0]] != only[1]:
                continue
            # grid starts ws with ws < m.end and ws + size > m.start, not completed before
            ws = ((m.start - size) // hop) * hop + hop
            ws = max(ws, lowest)
            while ws < m.end and exists(ws):
                we = ws + size
                done = we <= c if c != MAX_TIME else ws <= latest
                if we > last and done:
                    starts.add(ws)
                elif not done:
                    break
                ws += hop
        for ws in sorted(starts):
            we = ws + size
            groups: dict[tuple, list[_Member]] = {}
            for m in members:
                if m.start < we and m.end > ws and m.end > m.start:
                    groups.setdefault(tuple(spark_key(m.payload[k]) for k in node.keys), []).append(
                        m
                    )
            for key in sorted(groups, key=lambda k: tuple(spark_order(v) for v in k)):
                group = dict(zip(node.keys, key, strict=True))
                if only is not None and group[only[0]] != only[1]:
                    continue
                if we <= through(group):  # completed by a keyed CTI of its key before
                    continue
                start, end = (we, we + 1) if node.point_at_end else (ws, we)
                for payload in (results or _aggregated(node.aggregates))(
                    group, groups[key], (ws, we)
                ):
                    out.append(_Row(position, Event(EventKind.INSERT, start, end, payload)))

    for row in rows:
        e = row.event
        if not e.is_cti:
            _take(members, e)
            latest = max([latest, *(t for t in (e.start, e.end) if _finite(t))])
            continue
        c = e.start
        if row.key is None and _finite(c):
            latest = max(latest, c)
        if row.key is None:
            if c <= last:
                continue
            complete(c, row.position, None)
            last = c
            p = pulled(c)
            if p > emitted:
                emitted = p
                out.append(_Row(row.position, cti(p)))
            continue
        if row.key[0] not in node.keys:
            continue  # a keyed CTI on another column: merged (dropped) here
        if c <= max(last, last_keyed.get(row.key, MIN_TIME)):
            continue
        complete(c, row.position, row.key)
        last_keyed[row.key] = c
        p = pulled(c)
        if p > emitted and p > emitted_keyed.get(row.key, MIN_TIME):
            emitted_keyed[row.key] = p
            out.append(_Row(row.position, cti(p), row.key))
    return out


def _finite(t: int) -> bool:
    """``t`` is a moment on the timeline, not ``-inf`` or ``+inf``."""
    return t not in (MIN_TIME, MAX_TIME)


def _lifetime(
    rows: list[_Row], move: Callable[[int], int], duration: int | None, dropped: list[int]
) -> list[_Row]:
    """Move each start (and each CTI) by ``move``, saturating at ``±inf`` (§5: a shift that
    would cross ``±inf`` stays there). Without a duration, ends move like starts and edges stay
    edges. With one, ``end = start + duration`` (saturating): a START edge becomes that interval
    once its lifetime is known not to be empty, and its END edge is dropped. A START edge at
    ``s`` can still be closed at ``s`` (empty: semantics §3.4, or a join's pair that ends at its
    start) while its stream's CTI is at or below ``s``; after a CTI above ``s`` every END edge
    ends above ``s``. So it is held until the first CTI above ``s`` (global, or keyed of its
    key; ``s`` as it came, before the move), and leaves as the interval at that CTI's position,
    before it; an END edge at or before its start cancels the oldest held identical START edge,
    which never leaves. CTIs at +-inf stay; a CTI is emitted when it rises.

    An event whose start lands at ``±inf`` is dropped (§5) and counted in ``dropped`` (the
    operator's count, appended to the list when the operator is done): points, intervals and
    START edges, counted when they arrive (a START edge so is never held); the END edge of a
    dropped START edge lands there too and is dropped uncounted (it cancels nothing).

    Per-key CTIs (module docstring, rule 3): a keyed row ``(K, k, c)`` becomes ``(K, k,
    moved(c))``, emitted when that is above the latest global output CTI and the latest keyed
    output of ``(K, k)``."""

    def moved(t: int) -> int:
        return t if not _finite(t) else max(MIN_TIME, min(MAX_TIME, move(t)))

    def complete(e: Event) -> Event:
        start = moved(e.start)
        return Event(e.kind, start, saturating_sub(start, -duration), e.payload, None)

    out: list[_Row] = []
    current = MIN_TIME
    drops = 0
    keyed: dict[tuple[str, Any], int] = {}  # per (K, k): the latest keyed output CTI
    held: list[Event] = []  # START edges not yet known to be non-empty, in arrival order

    def release(pos: Position, c: int, key: tuple[str, Any] | None) -> None:
        for e in [e for e in held if e.start < c and (key is None or e.payload[key[0]] == key[1])]:
            held.remove(e)
            out.append(_Row(pos, complete(e)))

    for row in rows:
        e = row.event
        if row.key is not None:
            release(row.position, e.start, row.key)
            c = moved(e.start)
            if c > current and c > keyed.get(row.key, MIN_TIME):
                keyed[row.key] = c
                out.append(_Row(row.position, cti(c), row.key))
            continue
        if e.is_cti:
            release(row.position, e.start, None)
            c = moved(e.start)
            if c > current:
                current = c
                out.append(_Row(row.position, cti(c)))
            continue
        start = moved(e.start)
        if not _finite(start):
            drops += e.edge is not EdgeType.END
            continue
        if duration is None:
            out.append(_Row(row.position, Event(e.kind, start, moved(e.end), e.payload, e.edge)))
        elif e.edge is EdgeType.START:
            held.append(e)
        elif e.edge is EdgeType.END:
            if e.end <= e.start:  # an empty lifetime: its START edge never leaves
                same = next(h for h in held if h.start == e.start and h.payload == e.payload)
                held.remove(same)
        else:
            out.append(_Row(row.position, complete(e)))
    dropped.append(drops)
    return out


def _joins_in(node: Node) -> bool:
    """A Join, AntiJoin, LeftOuterJoin or ClipEventDuration at or below ``node``."""
    if isinstance(node, Join | AntiJoin | LeftOuterJoin | ClipEventDuration):
        return True
    if isinstance(node, Union):
        return any(_joins_in(c) for c in node.children)
    child = getattr(node, "child", None)
    return child is not None and _joins_in(child)


class _KeyedMerge:
    """Per-key CTIs of an operator with several inputs (rule 5): per input its latest keyed CTI
    of each key; after the rows of a position, each key with a keyed row there gets ``v = min
    over inputs of max(input's latest global CTI, its latest keyed CTI of the key)``, emitted as
    a keyed row when above the operator's latest global output CTI and its last keyed output of
    the key."""

    def __init__(self, n: int) -> None:
        self.latest: list[dict[tuple[str, Any], int]] = [{} for _ in range(n)]
        self.emitted: dict[tuple[str, Any], int] = {}
        self.touched: list[tuple[str, Any]] = []

    def take(self, child: int, row: _Row) -> None:
        assert row.key is not None
        mine = self.latest[child]
        mine[row.key] = max(mine.get(row.key, MIN_TIME), row.event.start)
        if row.key not in self.touched:
            self.touched.append(row.key)

    def emit(self, pos: Position, latest: list[int], current: int, out: list[_Row]) -> None:
        for key in sorted(self.touched, key=lambda kk: kk[1]):
            v = min(
                max(g, mine.get(key, MIN_TIME)) for g, mine in zip(latest, self.latest, strict=True)
            )
            if v > current and v > self.emitted.get(key, MIN_TIME):
                self.emitted[key] = v
                out.append(_Row(pos, cti(v), key))
        self.touched.clear()


def _union(children: list[list[_Row]]) -> list[_Row]:
    """Events at their positions; CTI = min over children of their latest CTI, when it rises.

    Rows of several children can share a position (an importer's CTI sits at the position of the
    CTI it imports; the same input can appear twice). All rows at one position are taken together
    and only the union's CTI after all of them is emitted (as ingress does for partitions).
    """
    tagged = [
        (row.position, child, seq, row)
        for child, rows in enumerate(children)
        for seq, row in enumerate(rows)
    ]
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    latest = [MIN_TIME] * len(children)
    keyed = _KeyedMerge(len(children))
    current = MIN_TIME
    out: list[_Row] = []
    i = 0
    while i < len(tagged):
        pos = tagged[i][0]
        while i < len(tagged) and tagged[i][0] == pos:
            _, child, _, row = tagged[i]
            if row.key is not None:
                keyed.take(child, row)
            elif row.event.is_cti:
                latest[child] = row.event.start
            else:
                out.append(row)
            i += 1
        value = min(latest) if latest else MIN_TIME
        if value > current:
            current = value
            out.append(_Row(pos, cti(value)))
        keyed.emit(pos, latest, current, out)
    return out


# -- egress -----------------------------------------------------------------------------------
@dataclass(eq=False)  # identity: two identical pending items are still two items
class _Pending:
    """An item waiting for the first output CTI ``c`` with ``due < c``."""

    event: Event
    due: int


@dataclass
class _RootEdge:
    """A START edge row seen at the root, with what it put in the pending list (if anything)."""

    start: int
    payload: dict[str, Any]
    pending: _Pending | None


def _sort_key(event: Event) -> tuple:
    payload = tuple(spark_order(v) for v in event.payload.values())
    return (event.start, 0 if event.edge is EdgeType.START else 1, event.end, payload)


def _of_key(event: Event, key: tuple[str, Any]) -> bool:
    """The event's payload has column ``key[0]`` with value ``key[1]`` (never null)."""
    column, k = key
    return column in event.payload and event.payload[column] == k


def _egress(rows: list[_Row], shape: EventShape) -> list[Event]:
    """Semantics §6 with decisions.md "Egress": release each item with the first output CTI
    satisfying its consumer rule; each segment sorted, then its CTI.

    Per-key CTIs (module docstring, rule 7): a keyed row ``(K, k, c)`` releases, sorted the same
    way, the pending items whose payload has ``K`` equal to ``k`` and ``due < c``; no CTI is
    delivered for it. (Edges never meet keyed rows: inputs with ``over`` are point inputs and
    the operators that make edges drop keyed rows.)"""
    pending: list[_Pending] = []
    open_edges: list[_RootEdge] = []
    output: list[Event] = []

    def add(event: Event, due: int) -> _Pending:
        p = _Pending(event, due)
        pending.append(p)
        return p

    for row in rows:
        e = row.event
        payload = dict(e.payload)
        if row.key is not None:
            due = [p for p in pending if p.due < e.start and _of_key(p.event, row.key)]
            pending[:] = [p for p in pending if p not in due]
            output.extend(sorted((p.event for p in due), key=_sort_key))
        elif e.is_cti:
            c = e.start
            released = [p.event for p in pending if p.due < c]
            pending[:] = [p for p in pending if not p.due < c]
            output.extend(sorted(released, key=_sort_key))
            output.append(e)
        elif e.edge is EdgeType.START:
            made = None
            if shape is EventShape.POINT:
                made = add(point(e.start, payload), e.start)
            elif shape is EventShape.EDGE:
                made = add(edge_start(e.start, payload), e.start)
            # INTERVAL: nothing until the END edge says where it ends.
            open_edges.append(_RootEdge(e.start, payload, made))
        elif e.edge is EdgeType.END:
            match = next(
                (r for r in open_edges if r.start == e.start and r.payload == payload), None
            )
            if match is None:  # ingress and where/select keep edges matched
                raise RuntimeError(f"reference interpreter bug: unmatched END edge {e!r}")
            open_edges.remove(match)
            if e.end <= e.start:
                # Empty lifetime: never released. Its START edge cannot have been released yet
                # (that needs a CTI above the start, which the END edge would then violate).
                if match.pending is not None:
                    if match.pending not in pending:
                        raise RuntimeError(f"reference interpreter bug: {e!r} after release")
                    pending.remove(match.pending)
                continue
            if shape is EventShape.INTERVAL:
                add(interval(e.start, e.end, payload), e.start)
            elif shape is EventShape.EDGE:
                add(edge_end(e.start, e.end, payload), e.end)
            # POINT: the point was released at its start already.
        else:  # a point or an interval
            if shape is EventShape.POINT:
                add(point(e.start, payload), e.start)
            elif shape is EventShape.INTERVAL:
                add(interval(e.start, e.end, payload), e.start)
            else:
                add(edge_start(e.start, payload), e.start)
                if e.end < MAX_TIME:  # an end at +inf is never committed (end < CTI)
                    add(edge_end(e.start, e.end, payload), e.end)
    return output


# -- the run ----------------------------------------------------------------------------------
def _check_bindings(bindings: Sequence[Binding], plan: Node) -> None:
    names = [b.name for b in bindings]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise QueryBuildError(f"inputs bound more than once: {dupes}; each name once")
    imports = {
        b.name: b.settings.import_settings.stream_name
        for b in bindings
        if b.settings is not None and b.settings.import_settings is not None
    }
    for b in bindings:
        if b.ordering is not None and b.settings is not None and b.settings.generation:
            raise QueryBuildError(
                f"input {b.name!r} has ordering and generation settings; the ordering's "
                "watermark is its generated CTI. Fix: drop one of them"
            )
    for importer, source in imports.items():
        if source not in names:
            raise QueryBuildError(
                f"input {importer!r} imports the CTIs of {source!r}, which is not bound in this "
                f"query (bound: {names}). Fix: bind {source!r} in the same query or import one "
                "of the bound inputs"
            )
    for importer in imports:
        chain = [importer]
        while chain[-1] in imports:
            nxt = imports[chain[-1]]
            if nxt in chain:
                cycle = " -> ".join([*chain[chain.index(nxt) :], nxt])
                raise QueryBuildError(
                    f"import cycle: {cycle}; an input cannot (indirectly) import its own CTIs. "
                    "Fix: let one of them generate its CTIs instead"
                )
            chain.append(nxt)

    def leaves(node: Node) -> list[str]:
        if isinstance(node, Input | Diagnostics):
            return [node.name]
        if isinstance(node, Union):
            return [n for c in node.children for n in leaves(c)]
        if isinstance(node, Join | AntiJoin | LeftOuterJoin | ClipEventDuration):
            return leaves(node.left) + leaves(node.right)
        if hasattr(node, "child"):
            return leaves(node.child)
        raise TypeError(f"not a plan node: {node!r}")

    for name in leaves(plan):
        if name not in names:
            raise QueryBuildError(f"the plan reads input {name!r}, which is not bound ({names})")


def _arrivals(script: EventScript, bindings: Sequence[Binding]) -> list[_Arrival]:
    """Every item of every bound input, in position order."""
    out = []
    for b, binding in enumerate(bindings):
        for p, partition in enumerate(script.partitions(binding.name)):
            for item in script.items(binding.name, partition):
                out.append(_Arrival((item.arrival, b, item.offset, p, 0), b, partition, item))
    out.sort(key=lambda a: a.position)
    return out


def _run(
    script: EventScript,
    bindings: Sequence[Binding],
    plan: Node,
    shape: EventShape,
    arrivals: list[_Arrival],
    stop: bool,
) -> Result:
    ingresses = [
        _Ingress(binding, i, script.partitions(binding.name)) for i, binding in enumerate(bindings)
    ]
    by_name = {ing.name: ing for ing in ingresses}
    for ing in ingresses:
        settings = ing.binding.settings
        if settings is not None and settings.import_settings is not None:
            by_name[settings.import_settings.stream_name].importers.append(ing)

    for i, arrival in enumerate(arrivals):
        try:
            ingresses[arrival.binding].on_item(arrival)
        except (CtiViolationError, MalformedRecordError) as exc:
            # What was delivered before the failing item (no stop flush: the run failed).
            exc.partial_result = _run(script, bindings, plan, shape, arrivals[:i], stop=False)
            raise
    if stop:
        for ing in ingresses:
            ing.on_stop()

    rows: dict[Any, list[_Row]] = {ing.name: ing.rows for ing in ingresses}
    rows |= {("diagnostics", ing.name): ing.diagnostics for ing in ingresses}
    dropped: list[int] = []
    root = _evaluate(plan, rows, dropped)
    return Result(
        output=_egress(root, shape),
        ingress={ing.name: [r.event for r in _global_only(ing.rows)] for ing in ingresses},
        counts={ing.name: ing.report() for ing in ingresses},
        ordering={ing.name: ing.ordering.trace for ing in ingresses if ing.ordering is not None},
        keyed_ctis={
            ing.name: [_keyed(r) for r in ing.rows if r.key is not None] for ing in ingresses
        },
        root_keyed_ctis=[_keyed(r) for r in root if r.key is not None],
        lifetime_dropped=dropped,
    )


def run_reference(
    script: EventScript,
    bindings: Sequence[Binding],
    plan: Node,
    shape: EventShape,
    *,
    stop: bool = True,
) -> Result:
    """Run ``plan`` over ``script`` as the contract says, and return what must be delivered.

    ``bindings`` are in binding order (their index is the binding index in positions). With
    ``stop=True`` the run stops after the last item: inputs that flush on stop get a CTI at +inf
    on the partitions that have not ended, in binding order. Raises
    :class:`~engine.errors.QueryBuildError` (a ``ValueError``) for an unknown import or plan
    input or an import cycle, :class:`~engine.errors.CtiViolationError` for a violation on an
    input without a policy and :class:`~engine.errors.MalformedRecordError` for an END edge with
    no open START edge; both carry ``partial_result``.
    """
    bindings = list(bindings)
    _check_bindings(bindings, plan)
    return _run(script, bindings, plan, shape, _arrivals(script, bindings), stop)
