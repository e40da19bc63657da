"""The physical plan: how a bound logical plan runs, every fusion chosen here (driver).

:func:`plan` takes the logical plan (:mod:`engine.plan`) and its bound inputs
(:mod:`engine.binding`) and returns one physical node per logical node: an :class:`InputScan`
per input (its ingress, :func:`engine.ingress.ingress_epoch`) and a :class:`Step` per operator,
which the runtime (:mod:`engine.runtime`) executes from a table, physical node type -> executor.
A node is a small frozen value holding its choices; an operator receives its node, never a flag.

The fusions, each decided by one function below whose docstring says why it is sound:

* a window aggregated in its input's scan (:func:`_pushed_window`, :attr:`InputScan.pushed`);
* a lookup join's data side packed by its scan (:func:`_packed`, :attr:`InputScan.packed`);
* END edges matched on the driver (:func:`_edges_on_driver`, :attr:`InputScan.edges_on_driver`);
* a join read only for its events' lifetimes (:func:`_lifetimes_only`,
  :attr:`JoinStep.lifetimes_only`), its window's partial aggregates computed by the join
  (:func:`_window_over_join`, :attr:`JoinStep.window`), and its pairs with a side of points
  deferred to one interval (:func:`_points`, :attr:`JoinStep.points`);
* which sides' keyed CTIs enter a join (:func:`_keyed_sides`, :attr:`JoinStep.keyed_sides`);
* the query's root window's results and CTIs handed to egress as egress reads them
  (:func:`_egress_reads`, :attr:`engine.operators.window.WindowSpec.egress_only`,
  :attr:`CountWindowStep.egress_only`, :attr:`SessionWindowStep.egress_only`);
* which operators' outputs are checkpointed (:func:`_checkpointed`, :attr:`Step.checkpoint`)
  and whether the next epoch's ingress runs ahead (:attr:`PhysicalPlan.ingress_ahead`).

A traced run (``Query.run(trace=True)``, :mod:`ctistream.viz.trace`) gets the plan of
``plan(..., traced=True)``: the trace records each input's events and each operator's own
output, and its epochs one after another, so no fusion that hides them applies there (no pushed
window, no packing, no lifetimes-only join, every operator's output kept, no ingress ahead).
Every choice gives the same output as without it (semantics §4), so traced and untraced runs
deliver the same items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from ctistream.engine._spark import ansi_mode, case_sensitive
from ctistream.engine.binding import Binding, BoundInput
from ctistream.engine.ingress import InputSpec, driver_compares
from ctistream.engine.operators.window import PushedWindow, WindowSpec, push_window
from ctistream.engine.plan import (
    AntiJoinNode,
    ClipNode,
    CountWindowNode,
    DiagnosticsNode,
    GroupApplyNode,
    GroupNode,
    InputNode,
    JoinNode,
    LeftOuterJoinNode,
    LifetimeNode,
    MergeNode,
    Node,
    SelectNode,
    SessionWindowNode,
    SnapshotNode,
    UnionNode,
    WhereNode,
    WindowNode,
    WindowRowsNode,
    walk,
)
from pyspark.sql import SparkSession

__all__ = [
    "AntiJoinStep",
    "ClipStep",
    "CountWindowStep",
    "DiagnosticsStep",
    "GroupApplyStep",
    "GroupStep",
    "InputScan",
    "JoinStep",
    "LeftOuterJoinStep",
    "LifetimeStep",
    "MergeStep",
    "PhysicalPlan",
    "SelectStep",
    "SessionWindowStep",
    "SnapshotStep",
    "Step",
    "UnionStep",
    "WhereStep",
    "WindowRowsStep",
    "WindowStep",
    "plan",
]


@dataclass(frozen=True, eq=False)
class InputScan:
    """An input's ingress: the scan over its items of each epoch (semantics §3).

    ``pushed``: the window that alone reads the input, whose partial aggregates the scan
    computes and hands Spark instead of the events (:func:`_pushed_window`). ``packed``: the scan
    hands Spark its events packed for the lookup join that reads them (:func:`_packed`).
    ``edges_on_driver``: the input's END edges may be matched on the driver, in an epoch with few
    enough of them (:func:`_edges_on_driver`). ``diagnosed``: the input's diagnostic stream is
    read (``stream.diagnostics()``), so §7's decisions come to the scan as rows of their own
    (:func:`engine.ordering.order_epoch`)."""

    node: InputNode
    spec: InputSpec
    pushed: PushedWindow | None = None
    packed: bool = False
    edges_on_driver: bool = False
    diagnosed: bool = False


@dataclass(frozen=True, eq=False, kw_only=True)
class Step:
    """An operator as it runs: ``node`` the logical node (errors name its ``call``).

    ``checkpoint``: its output is made a leaf for the operators after it by a lazy local
    checkpoint (:func:`_checkpointed`)."""

    node: Node
    checkpoint: bool = False

    #: whether the operator carries state from epoch to epoch (the runtime keeps it per node)
    stateful: ClassVar[bool] = False
    #: whether a checkpoint of its output covers its events (a join's events are already a
    #: selection over its own checkpoint, the output of its Arrow function)
    checkpoint_events: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class WhereStep(Step):
    node: WhereNode


@dataclass(frozen=True, eq=False, kw_only=True)
class SelectStep(Step):
    node: SelectNode


@dataclass(frozen=True, eq=False, kw_only=True)
class MergeStep(Step):
    node: MergeNode


@dataclass(frozen=True, eq=False, kw_only=True)
class LifetimeStep(Step):
    node: LifetimeNode
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class WindowStep(Step):
    """``spec``: the window's grid and aggregates. Its partial aggregates may come from its
    input's scan (:attr:`InputScan.pushed`) or from the join below it (:attr:`JoinStep.window`)
    instead of events: it merges what it receives (:attr:`engine.rows.Flow.partials`)."""

    node: WindowNode
    spec: WindowSpec
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class SnapshotStep(Step):
    node: SnapshotNode
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class CountWindowStep(Step):
    """``egress_only``: egress alone reads the output (:func:`_egress_reads`)."""

    node: CountWindowNode
    egress_only: bool = False
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class SessionWindowStep(Step):
    """``egress_only``: egress alone reads the output (:func:`_egress_reads`)."""

    node: SessionWindowNode
    egress_only: bool = False
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class WindowRowsStep(Step):
    """Windowed ``top_k`` or ``apply`` (:mod:`engine.operators.window_rows`)."""

    node: WindowRowsNode
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class JoinStep(Step):
    """A temporal equi-join (:func:`engine.operators.join.join`) and its choices.

    ``keyed_sides``: whether each side's keyed CTIs may be used (:func:`_keyed_sides`).
    ``lifetimes_only``: the output is read only for its events' lifetimes (:func:`_lifetimes_only`).
    ``window``: with ``lifetimes_only``, the window that alone reads the output, whose partial
    aggregates the join computes where the window's aggregates allow it (the join decides that
    on its output's types) and the output has no substreams (:func:`_window_over_join`).
    ``points``: whether every event of each side is a point (:func:`_points`)."""

    node: JoinNode
    keyed_sides: tuple[bool, bool] = (True, True)
    lifetimes_only: bool = False
    window: WindowSpec | None = None
    points: tuple[bool, bool] = (False, False)
    stateful: ClassVar[bool] = True
    checkpoint_events: ClassVar[bool] = False


@dataclass(frozen=True, eq=False, kw_only=True)
class AntiJoinStep(Step):
    node: AntiJoinNode
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class ClipStep(Step):
    node: ClipNode
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class LeftOuterJoinStep(Step):
    """A left outer join (:func:`engine.operators.outer_join.left_outer_join`): ``pairs`` is the
    join it runs for its pairs, with neither side's keyed CTIs (its anti-join's fragments end by
    the sides' CTIs, as the anti-join's do)."""

    node: LeftOuterJoinNode
    pairs: JoinStep
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class UnionStep(Step):
    node: UnionNode
    stateful: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, kw_only=True)
class GroupStep(Step):
    """The group's stream in ``group_apply``: its input's events and CTIs, keyed CTIs merged
    (engine.operators.group_apply.group_input)."""

    node: GroupNode


@dataclass(frozen=True, eq=False, kw_only=True)
class GroupApplyStep(Step):
    """``group_apply``'s output: passes fn's rewritten plan's (engine.operators.group_apply)."""

    node: GroupApplyNode


@dataclass(frozen=True, eq=False, kw_only=True)
class DiagnosticsStep(Step):
    """``input.diagnostics()``: the input's diagnostic rows and CTIs (engine.diagnostics)."""

    node: DiagnosticsNode


@dataclass(frozen=True, eq=False)
class PhysicalPlan:
    """How a query runs: ``scans`` in import order (an input after the one it imports CTIs from),
    ``steps`` the operators, each after its inputs.

    ``ingress_ahead``: a bounded run's next epoch's ingress runs in a thread while this epoch's
    operators run (``engine.runtime._Ahead``); not in a traced run, whose trace records each
    epoch's ingress, operators and egress in that order."""

    scans: tuple[InputScan, ...]
    steps: tuple[Step, ...]
    ingress_ahead: bool = True


def plan(spark: SparkSession, root: Node, binding: Binding, traced: bool = False) -> PhysicalPlan:
    """The physical plan of the logical plan under ``root`` with its bound inputs (driver, when
    the query is built; no Spark job). ``traced``: the plan of a traced run (module docstring)."""
    readers: dict[int, list[Node]] = {}
    for node in walk(root):
        for child in node.children():
            readers.setdefault(id(child), []).append(node)
    by_node = {id(b.node): b for b in binding.inputs}
    names_case, ansi = case_sensitive(spark), ansi_mode(spark)

    pushed: dict[int, PushedWindow] = {}  # by input index
    for node in walk(root):
        b = by_node.get(id(node.child)) if isinstance(node, WindowNode) else None
        if b is not None and not traced:
            window = _pushed_window(node, b, readers, names_case, ansi)
            if window is not None:
                pushed[b.spec.index] = window
    scans = tuple(
        InputScan(
            b.node,
            b.spec,
            pushed.get(b.spec.index),
            not traced and _packed(b, binding.inputs, readers, pushed),
            _edges_on_driver(b),
            any(isinstance(r, DiagnosticsNode) for r in readers.get(id(b.node), [])),
        )
        for b in binding.order
    )

    specs = {  # each window's, shared by a join that computes its partial aggregates
        id(node): replace(_window_spec(node), egress_only=_egress_reads(node, root, traced))
        for node in walk(root)
        if isinstance(node, WindowNode)
    }
    steps: list[Step] = []
    for node in walk(root):
        if isinstance(node, InputNode):
            continue
        checkpoint = _checkpointed(node, root, traced)
        if isinstance(node, WindowNode):
            steps.append(WindowStep(node=node, spec=specs[id(node)], checkpoint=checkpoint))
        elif isinstance(node, JoinNode):
            lifetimes = not traced and _lifetimes_only(node, readers)
            steps.append(
                JoinStep(
                    node=node,
                    checkpoint=checkpoint,
                    keyed_sides=_keyed_sides(node),
                    lifetimes_only=lifetimes,
                    window=_window_over_join(node, readers, specs) if lifetimes else None,
                    points=(_points(node.left, by_node), _points(node.right, by_node)),
                )
            )
        elif isinstance(node, LeftOuterJoinNode):
            pairs = JoinStep(
                node=JoinNode(node.left, node.right, node.on, call=node.call),
                keyed_sides=(False, False),
            )
            steps.append(LeftOuterJoinStep(node=node, pairs=pairs, checkpoint=checkpoint))
        elif isinstance(node, CountWindowNode | SessionWindowNode):
            egress_only = _egress_reads(node, root, traced)
            step_type = _STEPS[type(node)]
            steps.append(step_type(node=node, checkpoint=checkpoint, egress_only=egress_only))
        else:
            steps.append(_STEPS[type(node)](node=node, checkpoint=checkpoint))
    return PhysicalPlan(scans, tuple(steps), ingress_ahead=not traced)


#: the physical node of each operator kind
_STEPS: dict[type[Node], type[Step]] = {
    WindowNode: WindowStep,
    JoinNode: JoinStep,
    WhereNode: WhereStep,
    SelectNode: SelectStep,
    MergeNode: MergeStep,
    LifetimeNode: LifetimeStep,
    SnapshotNode: SnapshotStep,
    CountWindowNode: CountWindowStep,
    SessionWindowNode: SessionWindowStep,
    AntiJoinNode: AntiJoinStep,
    LeftOuterJoinNode: LeftOuterJoinStep,
    ClipNode: ClipStep,
    UnionNode: UnionStep,
    GroupNode: GroupStep,
    GroupApplyNode: GroupApplyStep,
    WindowRowsNode: WindowRowsStep,
    DiagnosticsNode: DiagnosticsStep,
}


def _window_spec(node: WindowNode) -> WindowSpec:
    return WindowSpec(
        node.size, node.hop, node.keys, node.aggregates, node.point_at_end, None, node.latest_by
    )


def _pushed_window(
    node: WindowNode,
    b: BoundInput,
    readers: dict[int, list[Node]],
    names_case: bool,
    ansi: bool,
) -> PushedWindow | None:
    """The window ``node`` that reads input ``b`` directly, pushed into ``b``'s scan, which
    then hands Spark one row of partial aggregates per window, group and source partition
    instead of one per event (docs/decisions.md, "Operators": "A window of partial aggregates
    that is the only reader of an input"). Only where the window is the input's only reader (no
    other operator needs the events), the input is a POINT input (an interval or an edge may end
    at +inf, counted only as windows complete: docs/decisions.md, "Operators", the window at
    +inf), without substreams (a keyed CTI completes a key's windows), and
    :func:`engine.operators.window.push_window` takes the aggregates (those Arrow computes as
    Spark does); None otherwise."""
    ordering = b.spec.ordering
    if len(readers.get(id(b.node), [])) > 1 or not b.spec.points or getattr(ordering, "over", None):
        return None
    spec = _window_spec(node)
    return push_window(spec, b.schema, names_case, ansi)


def _packed(
    b: BoundInput,
    inputs: Sequence[BoundInput],
    readers: dict[int, list[Node]],
    pushed: dict[int, PushedWindow],
) -> bool:
    """Whether input ``b``'s scan packs its events (:mod:`engine.packed`) for the lookup join
    that reads them (docs/decisions.md, "Running on Spark": "Packed events: the lookup join"):
    an input without edges, substreams, §7 ordering or a pushed window, read only by a join
    whose other side has an input that imports this one's CTIs (the seeds' lookup: a slow
    reference stream synchronized with a fast data stream, which the join pairs with the
    reference side collected whole). The join pairs the packed events chunk by chunk, each
    event in one chunk, so each pair forms once, as in the cogroup it replaces."""
    by = readers.get(id(b.node), [])
    if len(by) != 1 or not isinstance(by[0], JoinNode) or by[0].left is by[0].right:
        return False
    if b.spec.edges or b.spec.ordering is not None or b.spec.index in pushed:
        return False
    importers = {
        i.spec.name: i.spec.settings.import_settings.stream_name
        for i in inputs
        if i.spec.settings is not None and i.spec.settings.import_settings is not None
    }
    other = by[0].right if by[0].left is b.node else by[0].left
    return any(
        isinstance(n, InputNode) and importers.get(n.name) == b.spec.name for n in walk(other)
    )


def _edges_on_driver(b: BoundInput) -> bool:
    """Whether input ``b``'s END edges may be matched to their START edges on the driver, in an
    epoch whose items and open START edges are few (``engine.ingress.DRIVER_EDGES``, checked each
    epoch): the input has edges (not versions, which ingress closes by key), and the driver
    compares its payload's values as Spark does (:func:`engine.ingress.driver_compares`), so the
    FIFO matching per start and payload (semantics §3.4) pairs the same edges in either place
    (docs/decisions.md, "Ingress (§3), per partition": "Where edges are matched")."""
    if not b.spec.edges or b.spec.versions is not None:
        return False
    return driver_compares([b.schema[c].dataType for c in b.spec.payload])


def _lifetimes_only(node: Node, readers: dict[int, list[Node]]) -> bool:
    """Whether only windows read ``node``'s output: a window's results depend on its events'
    lifetimes, not on whether one came as an interval or as a START and an END edge, so a join
    read only by windows hands on a pair whose end is known in the epoch it forms in as one
    interval (docs/decisions.md, "Operators": "A join whose output only windows read"). Not in
    a traced run: the trace shows the join's own output."""
    by = readers.get(id(node), [])
    return bool(by) and all(isinstance(n, WindowNode) for n in by)


def _window_over_join(
    node: Node, readers: dict[int, list[Node]], specs: dict[int, WindowSpec]
) -> WindowSpec | None:
    """For a join that one window alone reads, that window's spec: the join may compute the
    window's partial aggregates of its pairs with a finite end, as an input's scan does for a
    pushed window, and the window merges them with its open partials
    (docs/decisions.md, "Operators": a join pushing pairs to its window). The join checks, on
    its output's types, that :func:`engine.operators.window.push_window` takes the aggregates,
    and that its output has no substreams. Not for a window that tracks each group's latest
    time (``latest_by``): the join's partial aggregates carry the latest time of all groups."""
    by = readers.get(id(node), [])
    if not isinstance(node, JoinNode) or len(by) != 1 or not isinstance(by[0], WindowNode):
        return None
    if by[0].latest_by:
        return None
    return specs[id(by[0])]


def _points(node: Node, inputs: dict[int, BoundInput]) -> bool:
    """Whether every event of ``node``'s output is a point (lifetime ``[s, s + 1)``): a point
    input (``InputSpec.points``: versions are read as points and made edges), through filters,
    projections and merges (time untouched; ingress drops a point that breaks a CTI, never
    adjusts it, and arrival-time policies keep points points). A join read only by a window,
    without substreams, with a side of points, hands on a pair whose end is not known yet only
    once it is, as one interval: no window completes without it (docs/decisions.md,
    "Running on Spark": "A join read only by a window ... whose one side is all points")."""
    if isinstance(node, InputNode):
        return inputs[id(node)].spec.points
    if isinstance(node, WhereNode | SelectNode | MergeNode):
        return _points(node.child, inputs)
    return False


def _keyed_sides(node: JoinNode) -> tuple[bool, bool]:
    """Whether each side's keyed CTIs may enter the join: not from a side with a join or an
    anti-join at or below it, whose pairs end by the CTI of a side, so its keyed CTIs could pass
    an END edge still to come (docs/decisions.md, "Per-key CTIs")."""

    def joins_below(side: Node) -> bool:
        joins = JoinNode | AntiJoinNode | LeftOuterJoinNode | ClipNode
        return any(isinstance(n, joins) for n in walk(side))

    return (not joins_below(node.left), not joins_below(node.right))


def _egress_reads(node: Node, root: Node, traced: bool) -> bool:
    """Whether egress alone reads ``node``'s output: the query's root, untraced (the trace shows
    each operator's output as it is). Egress releases an interval or a point at the first CTI
    above its start (semantics §6), by the CTIs' values, reading positions of END edges only,
    and emits a CTI only when it rises (:func:`engine.ctis.rising`, on the driver); an operator
    reads an event's position (its place among the CTIs decides what it meets and when it is
    final) and takes the CTIs as they rise. So a root window neither places its results at the
    CTIs that complete them nor filters its CTIs to those that rise: in every epoch, a union
    with the CTIs and two sorts fewer in its last job, and fewer plans to build."""
    return node is root and not traced


def _checkpointed(node: Node, root: Node, traced: bool) -> bool:
    """Whether a stateful operator's output is made a leaf for the operators after it by a lazy
    local checkpoint (computed once, when first used; no extra job). Operators use their inputs
    several times (events, CTIs, held state), so a plan that embeds its whole upstream plan grows
    multiplicatively with depth and Spark's analyzer runs out of memory on a few stacked joins
    and windows. The root's output is used once, by egress's one job: planning its checkpoint
    costs more (about 80 ms a frame in B1) than it saves, unless a trace reads it too."""
    stateful = not isinstance(node, InputNode) and _STEPS[type(node)].stateful
    return stateful and (node is not root or traced)
