"""The logical plan a :class:`bindings.Stream` builds: plain values, no Spark work."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ctistream.engine.events import EventShape
from ctistream.engine.settings import AdvanceTimeSettings, EventOrderingSettings
from pyspark.sql import Column

__all__ = [
    "AntiJoinNode",
    "InputNode",
    "JoinNode",
    "LifetimeNode",
    "MergeNode",
    "Node",
    "SelectNode",
    "SnapshotNode",
    "UnionNode",
    "WhereNode",
    "WindowNode",
    "substitute",
    "walk",
]

_creation = itertools.count()


@dataclass(eq=False)
class Node:
    """Base of plan nodes; identity matters (a node used twice is evaluated once per epoch).

    ``call``: the user's call that made the node, as errors name it (``join(on='id')``);
    empty for a node made otherwise."""

    call: str = field(default="", kw_only=True)

    def children(self) -> Sequence[Node]:
        return ()


@dataclass(eq=False)
class InputNode(Node):
    """An input. ``order`` is the binding order (creation order of the binding).

    A template input (``Stream.input``) is *unbound*: ``factory``, ``config`` and ``shape`` are
    None and ``schema`` is its declared payload; binding copies the plan with a bound node in its
    place (:func:`substitute`). A bound copy names its ``template``: its ``schema`` is then the
    template's declaration, which the adapter's own schema must agree with, not an override.
    ``ordering``: the input's arrival-time policies (semantics §7), or None.
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

    @property
    def bound(self) -> bool:
        return self.factory is not None


@dataclass(eq=False)
class WhereNode(Node):
    child: Node
    condition: Column

    def children(self) -> Sequence[Node]:
        return (self.child,)


@dataclass(eq=False)
class MergeNode(Node):
    """The substreams of ``child`` merged into one timeline: its keyed CTIs are dropped."""

    child: Node

    def children(self) -> Sequence[Node]:
        return (self.child,)


@dataclass(eq=False)
class SelectNode(Node):
    child: Node
    columns: tuple[Column | str, ...]

    def children(self) -> Sequence[Node]:
        return (self.child,)


@dataclass(eq=False)
class LifetimeNode(Node):
    """``start' = start_fn(start + shift)``; ``end' = start' + duration`` or, without a duration,
    ``end + shift``. See :mod:`engine.operators.lifetime`."""

    child: Node
    shift: int = 0
    start_fn: Callable[[Column], Column] | None = None
    duration: int | None = None

    def children(self) -> Sequence[Node]:
        return (self.child,)


@dataclass(eq=False)
class WindowNode(Node):
    """A tumbling or hopping window with grouping keys and named aggregate Columns."""

    child: Node
    size: int
    hop: int
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]
    point_at_end: bool = False

    def children(self) -> Sequence[Node]:
        return (self.child,)


@dataclass(eq=False)
class JoinNode(Node):
    """A temporal equi-join on payload columns ``on``."""

    left: Node
    right: Node
    on: tuple[str, ...]

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)


@dataclass(eq=False)
class AntiJoinNode(Node):
    """The parts of left lifetimes not covered by right events with equal ``on`` columns."""

    left: Node
    right: Node
    on: tuple[str, ...]

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)


@dataclass(eq=False)
class SnapshotNode(Node):
    """A snapshot window with grouping keys and named aggregate Columns."""

    child: Node
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]

    def children(self) -> Sequence[Node]:
        return (self.child,)


@dataclass(eq=False)
class UnionNode(Node):
    inputs: tuple[Node, ...]

    def children(self) -> Sequence[Node]:
        return self.inputs


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
