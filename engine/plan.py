"""The logical plan a :class:`bindings.Stream` builds: plain values, no Spark work."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column

from engine.events import EventShape
from engine.settings import AdvanceTimeSettings

__all__ = [
    "InputNode",
    "JoinNode",
    "LifetimeNode",
    "Node",
    "SelectNode",
    "SnapshotNode",
    "UnionNode",
    "WhereNode",
    "WindowNode",
    "walk",
]

_creation = itertools.count()


@dataclass(eq=False)
class Node:
    """Base of plan nodes; identity matters (a node used twice is evaluated once per epoch)."""

    def children(self) -> Sequence[Node]:
        return ()


@dataclass(eq=False)
class InputNode(Node):
    """A bound input. ``order`` is the binding order (creation order of the binding)."""

    name: str
    factory: Any
    config: Any
    shape: EventShape
    settings: AdvanceTimeSettings | None = None
    schema: str | None = None
    order: int = field(default_factory=lambda: next(_creation))


@dataclass(eq=False)
class WhereNode(Node):
    child: Node
    condition: Column

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
