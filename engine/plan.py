"""The logical plan a :class:`bindings.Stream` builds: plain values, no Spark work.

Each node kind states, once, how its operator moves CTIs (:attr:`Node.cti_rule`, semantics §5)
and names itself (:meth:`Node.label`): what ``Stream.explain()`` shows.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from ctistream.engine.events import EventShape
from ctistream.engine.settings import AdvanceTimeSettings, EventOrderingSettings, Versions
from ctistream.engine.temporal import duration_text
from pyspark.sql import Column

__all__ = [
    "AntiJoinNode",
    "ClipNode",
    "CountWindowNode",
    "DiagnosticsNode",
    "GroupApplyNode",
    "GroupNode",
    "InputNode",
    "JoinNode",
    "LeftOuterJoinNode",
    "LifetimeNode",
    "MergeNode",
    "Node",
    "SelectNode",
    "SessionWindowNode",
    "SnapshotNode",
    "UnionNode",
    "WhereNode",
    "WindowNode",
    "WindowRowsNode",
    "substitute",
    "walk",
]

_creation = itertools.count()


def _text(column: Column | str) -> str:
    """A Column as its expression reads, operators between their operands (``(v > 1)``; Spark
    4 prints an unresolved ``v > 1`` as ``>(v, 1)``). Reads the Column's unresolved expression
    only (no Spark work); what it does not know (a Spark Connect Column, say) shows as PySpark
    prints it."""
    if isinstance(column, str):
        return column
    try:
        return _node_text(column._jc.node())  # type: ignore[attr-defined]
    except Exception:  # not a classic Column, or Spark's internals moved
        shown = str(column)
        found = re.fullmatch(r"Column<'(.*)'>", shown, re.S)
        return found.group(1) if found else shown


_INFIX = {"and": "AND", "or": "OR"}


def _node_text(node: Any) -> str:
    kind = node.getClass().getSimpleName()
    if kind == "UnresolvedFunction":
        name = str(node.functionName())
        args = node.arguments()
        shown = [_node_text(args.apply(i)) for i in range(args.length())]
        symbol = name in _INFIX or not name.replace("_", "").isalnum()
        if symbol and len(shown) == 2:
            return f"({shown[0]} {_INFIX.get(name, name)} {shown[1]})"
        if symbol and len(shown) == 1:
            return f"{name}{shown[0]}"
        return f"{name}({', '.join(shown)})"
    if kind == "Alias" and node.name().length() == 1:
        return f"{_node_text(node.child())} AS {node.name().apply(0)}"
    if kind == "LambdaFunction":  # a higher-order function's (F.transform, F.exists, ...)
        # PySpark numbers its variables from a counter of the JVM's life (x_1, then x_4, ...):
        # shown by their own names, the text is the same in every build
        variables = node.arguments()
        names = [str(variables.apply(i).name()) for i in range(variables.length())]
        body = _node_text(node.function())
        shown = [re.sub(r"_\d+$", "", name) for name in names]
        for name, plain in zip(names, shown, strict=True):
            body = re.sub(rf"\b{re.escape(name)}\b", plain, body)
        return f"{shown[0] if len(shown) == 1 else '(' + ', '.join(shown) + ')'} -> {body}"
    if kind == "ExpressionColumnNode":  # a Python UDF's call, say
        return _expression_text(node.expression())
    return _no_addresses(str(node.sql()))


def _expression_text(expression: Any) -> str:
    """A Catalyst expression inside a Column as it reads: a Python UDF (or grouped aggregate
    UDF) as its name and arguments; Spark's SQL text of the arguments would show their source
    positions, with the JVM's object addresses, which differ from run to run."""
    kind = expression.getClass().getSimpleName()
    if kind == "ColumnNodeExpression":
        return _node_text(expression.node())
    if kind == "AggregateExpression":
        return _expression_text(expression.aggregateFunction())
    if kind in ("PythonUDF", "PythonUDAF"):
        args = expression.children()
        shown = [_expression_text(args.apply(i)) for i in range(args.length())]
        return f"{expression.name()}({', '.join(shown)})"
    return _no_addresses(str(expression.sql()))


def _no_addresses(text: str) -> str:
    """``text`` without the JVM's object addresses (``[Ljava.lang.StackTraceElement;@6d4b3967``):
    a label is the same for the same query in every run (engine.streaming: a checkpoint's
    shape)."""
    return re.sub(r"\[L[\w.$]+;@[0-9a-f]+", "[...]", text)


def _aggregates(keys: tuple[str, ...], aggregates: tuple[tuple[str, Column], ...]) -> str:
    grouped = f" group_by {', '.join(keys)}" if keys else ""
    return f"{grouped} aggregate {', '.join(f'{n}={_text(c)}' for n, c in aggregates)}"


@dataclass(eq=False)
class Node:
    """Base of plan nodes; identity matters (a node used twice is evaluated once per epoch).

    ``call``: the user's call that made the node, as errors name it (``join(on='id')``);
    empty for a node made otherwise."""

    call: str = field(default="", kw_only=True)

    #: How the operator moves CTIs, in one line (semantics §5): its output CTI from its inputs'.
    cti_rule: ClassVar[str] = ""

    def children(self) -> Sequence[Node]:
        return ()

    def label(self) -> str:
        """The operator and its arguments, in one line (``where (v > 1)``)."""
        return type(self).__name__.removesuffix("Node").lower()


@dataclass(eq=False)
class InputNode(Node):
    """An input. ``order`` is the binding order (creation order of the binding).

    A template input (``Stream.input``) is *unbound*: ``factory``, ``config`` and ``shape`` are
    None and ``schema`` is its declared payload; binding copies the plan with a bound node in its
    place (:func:`substitute`). A bound copy names its ``template``: its ``schema`` is then the
    template's declaration, which the adapter's own schema must agree with, not an override.
    ``ordering``: the input's arrival-time policies (semantics §7), or None. ``versions``: the
    input's rows are versions of keys, made into edges by ingress (:class:`Versions`), or None.
    """

    name: str
    factory: Any
    config: Any
    shape: EventShape | None
    settings: AdvanceTimeSettings | None = None
    schema: str | None = None
    order: int = field(default_factory=lambda: next(_creation))
    template: str | None = None
    ordering: EventOrderingSettings | None = None
    versions: Versions | None = None

    cti_rule: ClassVar[str] = "the input's own: explicit, generated or imported (§3)"

    @property
    def bound(self) -> bool:
        return self.factory is not None

    def label(self) -> str:
        if self.shape is None:
            return f"input {self.name!r} (template input: {self.schema})"
        if self.versions is not None:
            keys = ", ".join(self.versions.key)
            return f"input {self.name!r} (versions of {keys}, made into EDGE events)"
        return f"input {self.name!r} ({self.shape.value})"


@dataclass(eq=False)
class WhereNode(Node):
    child: Node
    condition: Column

    cti_rule: ClassVar[str] = "the input's, unchanged (§5)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"where {_text(self.condition)}"


@dataclass(eq=False)
class MergeNode(Node):
    """The substreams of ``child`` merged into one timeline: its keyed CTIs are dropped."""

    child: Node

    cti_rule: ClassVar[str] = "the input's CTIs that hold for every key; keyed CTIs dropped (§7)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return "merge_substreams"


@dataclass(eq=False)
class SelectNode(Node):
    child: Node
    columns: tuple[Column | str, ...]

    cti_rule: ClassVar[str] = "the input's, unchanged (§5)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"select {', '.join(_text(c) for c in self.columns)}"


@dataclass(eq=False)
class LifetimeNode(Node):
    """``start' = start_fn(start + shift)``; ``end' = start' + duration`` or, without a duration,
    ``end + shift``. See :mod:`engine.operators.lifetime`."""

    child: Node
    shift: int = 0
    start_fn: Callable[[Column], Column] | None = None
    duration: int | None = None

    @property
    def cti_rule(self) -> str:  # type: ignore[override]
        if self.start_fn is not None:
            return "moved as an event's start is: start_fn(c + shift) (§5)"
        if self.shift:
            return "moved by the shift: c + shift (§5)"
        return "the input's, unchanged (§5)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        if self.start_fn is None and self.shift == 0 and self.duration == 1:
            return "to_point"
        parts = []
        if self.shift:
            parts.append(f"shift_event_time {duration_text(self.shift)}")
        if self.start_fn is not None:
            name = getattr(self.start_fn, "__name__", type(self.start_fn).__name__)
            parts.append(f"alter_event_lifetime {name}, {duration_text(self.duration or 0)}")
        elif self.duration is not None:
            parts.append(f"alter_event_duration {duration_text(self.duration)}")
        return ", ".join(parts) or "lifetime (unchanged)"


@dataclass(eq=False)
class WindowNode(Node):
    """A tumbling or hopping window with grouping keys and named aggregate Columns."""

    child: Node
    size: int
    hop: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]
    point_at_end: bool = False
    #: the leading ``keys`` whose groups each count an event that ends at +inf up to their own
    #: latest finite moment (§5's bounded work per group: ``group_apply``'s keys), or ()
    latest_by: tuple[str, ...] = ()

    @property
    def cti_rule(self) -> str:  # type: ignore[override]
        where = "end" if self.point_at_end else "start"
        return (
            f"pulled back to the {where} of the earliest window still open; the input's "
            "when none is (§5)"
        )

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        if self.size == self.hop:
            window = f"tumbling_window {duration_text(self.size)}"
        else:
            window = f"hopping_window {duration_text(self.size)} every {duration_text(self.hop)}"
        at_end = ", each result a point at its window's end" if self.point_at_end else ""
        return f"{window}{_aggregates(self.keys, self.aggregates)}{at_end}"


@dataclass(eq=False)
class JoinNode(Node):
    """A temporal equi-join on payload columns ``on``."""

    left: Node
    right: Node
    on: tuple[str, ...]

    cti_rule: ClassVar[str] = "the older of the two sides' latest CTIs (§5)"

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)

    def label(self) -> str:
        return f"join on {', '.join(self.on)}"


@dataclass(eq=False)
class AntiJoinNode(Node):
    """The parts of left lifetimes not covered by right events with equal ``on`` columns."""

    left: Node
    right: Node
    on: tuple[str, ...]

    cti_rule: ClassVar[str] = JoinNode.cti_rule

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)

    def label(self) -> str:
        return f"anti_join on {', '.join(self.on)}"


@dataclass(eq=False)
class LeftOuterJoinNode(Node):
    """The join's pairs, plus the anti-join's fragments of left lifetimes with the right
    columns null (:mod:`engine.operators.outer_join`)."""

    left: Node
    right: Node
    on: tuple[str, ...]

    cti_rule: ClassVar[str] = JoinNode.cti_rule

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)

    def label(self) -> str:
        return f"left_outer_join on {', '.join(self.on)}"


@dataclass(eq=False)
class ClipNode(Node):
    """Each left event's end cut at the first matching right start after its start
    (:mod:`engine.operators.clip`)."""

    left: Node
    right: Node
    on: tuple[str, ...]

    cti_rule: ClassVar[str] = JoinNode.cti_rule

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)

    def label(self) -> str:
        return f"clip_event_duration on {', '.join(self.on)}"


@dataclass(eq=False)
class SnapshotNode(Node):
    """A snapshot window with grouping keys and named aggregate Columns; ``cut_by``: columns
    whose groups are cut at their own endpoints (``group_apply``'s keys), else all events'."""

    child: Node
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]
    cut_by: tuple[str, ...] = ()

    cti_rule: ClassVar[str] = (
        "the start of the snapshot that holds the input's CTI, or that CTI where no event spans it"
        " (§5)"
    )

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"snapshot_window{_aggregates(self.keys, self.aggregates)}"


@dataclass(eq=False)
class CountWindowNode(Node):
    """A count window (``n`` distinct start times per group) with named aggregate Columns."""

    child: Node
    n: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]

    cti_rule: ClassVar[str] = "the input's, unchanged (§5)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"count_window {self.n}{_aggregates(self.keys, self.aggregates)}"


@dataclass(eq=False)
class SessionWindowNode(Node):
    """A session window (gap ``timeout``, optional ``max_duration``, in ticks) with grouping
    keys and named aggregate Columns."""

    child: Node
    timeout: int
    max_duration: int | None
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]

    cti_rule: ClassVar[str] = (
        "the older of the input's CTI and the start of the earliest session still open (§5)"
    )

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        most = f" max_duration {duration_text(self.max_duration)}" if self.max_duration else ""
        window = f"session_window timeout {duration_text(self.timeout)}{most}"
        return f"{window}{_aggregates(self.keys, self.aggregates)}"


@dataclass(eq=False)
class WindowRowsNode(Node):
    """Windowed ``top_k`` or ``apply`` (``op``, :mod:`engine.operators.window_rows`) over a
    tumbling or hopping window (``size``, ``hop``) or, with ``size == 0``, snapshots; grouped by
    ``keys``. Windows, membership and CTIs are the window's (:class:`WindowNode`,
    :class:`SnapshotNode`, its ``cut_by`` too)."""

    child: Node
    size: int
    hop: int
    keys: tuple[str, ...]
    op: Any
    point_at_end: bool = False
    cut_by: tuple[str, ...] = ()
    #: as :attr:`WindowNode.latest_by`
    latest_by: tuple[str, ...] = ()

    @property
    def cti_rule(self) -> str:  # type: ignore[override]
        if self.size == 0:
            return "as the window: " + SnapshotNode.cti_rule
        where = "end" if self.point_at_end else "start"
        return (
            f"as the window: pulled back to the {where} of the earliest window still open; the "
            "input's when none is (§5)"
        )

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        if self.size == 0:
            window = "snapshot_window"
        elif self.size == self.hop:
            window = f"tumbling_window {duration_text(self.size)}"
        else:
            window = f"hopping_window {duration_text(self.size)} every {duration_text(self.hop)}"
        grouped = f" group_by {', '.join(self.keys)}" if self.keys else ""
        at_end = ", each result a point at its window's end" if self.point_at_end else ""
        return f"{window}{grouped} {self.op.label()}{at_end}"


@dataclass(eq=False)
class UnionNode(Node):
    inputs: tuple[Node, ...]

    cti_rule: ClassVar[str] = "the oldest of the inputs' latest CTIs (§5)"

    def children(self) -> Sequence[Node]:
        return self.inputs

    def label(self) -> str:
        return f"union of {len(self.inputs)}"


@dataclass(eq=False)
class GroupNode(Node):
    """The events of one group of ``group_apply(keys, fn)``: the stream ``fn`` is given. Its
    events and CTIs are its input's (keyed CTIs merged); what makes it one group per key value
    is the plan above it, rewritten by :func:`engine.operators.group_apply.rewrite` (semantics
    §5, Group and Apply)."""

    child: Node
    keys: tuple[str, ...]

    cti_rule: ClassVar[str] = "the input's, unchanged (§5)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"the events of one group by {', '.join(self.keys)}"


@dataclass(eq=False)
class GroupApplyNode(Node):
    """``group_apply(keys, fn)``: ``child`` is ``fn``'s plan with every grouping inside it also
    by ``keys`` (:func:`engine.operators.group_apply.rewrite`); its output passes unchanged."""

    child: Node
    keys: tuple[str, ...]

    cti_rule: ClassVar[str] = (
        "the oldest over groups of fn's output CTI, a group without events counting as fn over an"
        " empty input (§5)"
    )

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"group_apply by {', '.join(self.keys)}"


@dataclass(eq=False)
class DiagnosticsNode(Node):
    """``input.diagnostics()``: one point per item ``child``'s ingress dropped or adjusted
    (semantics §8, :mod:`engine.diagnostics`)."""

    child: InputNode

    cti_rule: ClassVar[str] = "the input's CTI (§8)"

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def label(self) -> str:
        return f"diagnostics of input {self.child.name!r} (dropped and adjusted items)"


def walk(root: Node) -> Iterator[Node]:
    """Every node reachable from ``root`` once, children before parents."""
    seen: set[int] = set()

    def visit(node: Node) -> Iterator[Node]:
        if id(node) in seen:
            return
        seen.add(id(node))
        for child in node.children():
            yield from visit(child)
        yield node

    yield from visit(root)


def substitute(root: Node, replacements: Mapping[Node, Node]) -> Node:
    """A copy of the plan under ``root`` with each node in ``replacements`` (by identity) replaced.

    Only the nodes above a replaced one are copied; the rest are shared. A node reached twice is
    copied once, so the copy keeps the plan's sharing. Works for any node type whose children are
    fields holding a ``Node`` or a tuple of them.
    """
    memo: dict[int, Node] = {}

    def copy(node: Node) -> Node:
        done = memo.get(id(node))
        if done is not None:
            return done
        new = replacements.get(node)
        if new is None:
            changes: dict[str, Any] = {}
            for f in fields(node):
                value = getattr(node, f.name)
                if isinstance(value, Node):
                    moved: Any = copy(value)
                    changed = moved is not value
                elif isinstance(value, tuple) and any(isinstance(v, Node) for v in value):
                    moved = tuple(copy(v) if isinstance(v, Node) else v for v in value)
                    changed = any(a is not b for a, b in zip(moved, value, strict=True))
                else:
                    continue
                if changed:
                    if not f.init:
                        raise TypeError(f"cannot copy {type(node).__name__}: {f.name} is not init")
                    changes[f.name] = moved
            new = replace(node, **changes) if changes else node
        memo[id(node)] = new
        return new

    return copy(root)
