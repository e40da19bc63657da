"""Group and Apply (semantics §5): ``group_apply(keys, fn)`` runs ``fn``'s sub-query once per group.

§5: "``fn(Stream) -> Stream`` is applied to each group's events separately; results are unioned
and carry the key columns"; output CTI: "the minimum over groups of ``fn``'s output CTI (a group
with no events yet counts as ``fn`` over an empty input)".

The engine does not run a sub-query per group: it runs ``fn``'s plan once, over all groups, with
the group keys made part of every grouping inside it (:func:`rewrite`, driver, when the query is
built). How each node kind takes the keys is the table :data:`TAKES_KEYS`; a node kind not in it
is refused inside ``group_apply`` with a build error, so an operator added later is never run
over all groups as if it were one. Why the output and the CTIs are those of the literal rule
(docs/decisions.md, "Group and Apply"):

* where, select, the lifetime operators: per event, and their output CTI is a function of the
  input CTI alone; every group's input CTI is the input's CTI.
* a window grouped by the keys (and its own keys): its results per group are the group's own;
  its CTI pull-back depends on the grid alone, the same for every group and for the empty one.
  The same for a windowed top-k or apply (their windows' rule), a count window (the last ``n``
  start times of each group: the input's CTI, unchanged) and a session window (each group's
  sessions; CTI: the older of the input's and the start of the earliest open session, and the
  minimum over groups of the earliest open session of each is the earliest of all). At the CTI
  +inf, a tumbling or hopping window counts an event that ends at +inf up to the latest finite
  moment of the event's own group (§5's bounded work, per group): over events that may end at
  +inf it tracks that moment per group (``latest_by``, the keys).
* a join, anti-join, left outer join or clip of two streams of the group, also on the keys:
  pairs (or cuts) within a group only; against another stream (on its own ``on``; the group's
  stream on the left, which carries the keys): each group's events meet all of the other
  stream's, as per group. CTI: min of the sides' CTIs, and the minimum over groups of
  ``min(l_g, r)`` is ``min(min_g l_g, r)``.
* a union of the group's own streams: per group it is the union of their groups.
* a snapshot window (with aggregate, top-k or apply): grouped by the keys and cut by them
  (:mod:`engine.operators.snapshot`, ``cut_by``): each group's snapshots and CTI are its own,
  and the operator's CTI is the minimum over the groups.

Every CTI rule of these but the snapshot's is monotone in its input CTIs and the same function
for every group, so the minimum over groups commutes with it; the snapshot takes the minimum
over its groups itself: the rewritten plan's CTI is the literal rule's.

The runtime runs :class:`~engine.plan.GroupNode` as :func:`group_input` (the input's events
and CTIs; keyed CTIs of substreams are merged there) and :class:`~engine.plan.GroupApplyNode`
as :func:`pass_through`; neither holds state, so the query's state is the groups' own
operators' state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ctistream.engine.errors import QueryBuildError
from ctistream.engine.events import EventShape
from ctistream.engine.plan import (
    AntiJoinNode,
    ClipNode,
    CountWindowNode,
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
)
from ctistream.engine.rows import EpochCache, Flow
from pyspark.sql import Column

__all__ = ["TAKES_KEYS", "group_input", "pass_through", "rewrite"]

#: ``passes(column)``: the payload column a select column passes through under its own name
#: (``"*"`` for all), or None (bindings.stream's reading of a Column)
Passes = Callable[[Column | str], str | None]


def pass_through(step: Any, inputs: list[Flow], _: Any, cache: EpochCache) -> tuple:
    """Executor of ``group_apply``'s output: fn's rewritten plan's flow, no state."""
    return inputs[0], None


def group_input(step: Any, inputs: list[Flow], _: Any, cache: EpochCache) -> tuple:
    """Executor of the group's stream ``fn`` is given: the input's events and CTIs, its keyed
    CTIs merged (dropped, as at a snapshot: docs/decisions.md, "Group and Apply"), no state."""
    return inputs[0].merged(), None


class _Rewrite:
    """One ``group_apply``'s rewrite: ``group`` the node ``fn`` was given, ``call`` the user's
    ``group_apply(...)``."""

    def __init__(self, group: GroupNode, call: str, passes: Passes) -> None:
        self.group, self.keys, self.call, self.passes = group, group.keys, call, passes
        self.memo: dict[int, Node] = {}
        self.derived: dict[int, bool] = {}

    def of_group(self, node: Node) -> bool:
        """Whether ``node``'s events come from the group's stream."""
        found = self.derived.get(id(node))
        if found is None:
            found = node is self.group or any(self.of_group(c) for c in node.children())
            self.derived[id(node)] = found
        return found

    def node(self, node: Node) -> Node:
        done = self.memo.get(id(node))
        if done is None:
            if node is self.group or not self.of_group(node):
                done = node  # the group itself, or another stream: evaluated once, as is
            else:
                take = TAKES_KEYS.get(type(node))
                if take is None:
                    raise self.error(
                        node,
                        "is not supported inside group_apply yet",
                        "apply it after group_apply, grouped by the keys",
                    )
                done = take(self, node)
            self.memo[id(node)] = done
        return done

    def error(self, node: Node, what: str, fix: str) -> QueryBuildError:
        keys = ", ".join(repr(k) for k in self.keys)
        op = node.call or node.label()
        return QueryBuildError(
            f"{self.call}: {op} inside fn {what} (group keys {keys}). Fix: {fix}"
        )


def _child(r: _Rewrite, node: Any) -> Node:
    return replace(node, child=r.node(node.child))


def _select(r: _Rewrite, node: SelectNode) -> Node:
    passed = {n for n in map(r.passes, node.columns) if n is not None}
    lost = [k for k in r.keys if k not in passed and "*" not in passed]
    if lost:
        raise r.error(
            node,
            f"drops the key column {lost[0]!r}: every result of group_apply carries its group's "
            "keys, and the operators after it group by them",
            f"add {lost[0]!r} to the select (passed through under its own name)",
        )
    return _child(r, node)


def _snapshot(r: _Rewrite, node: SnapshotNode | WindowRowsNode) -> Node:
    """A snapshot window (with ``aggregate``, ``top_k`` or ``apply``) per group: cut at each
    group's own endpoints (``cut_by``) and grouped by the keys."""
    grouped = _grouped(r, node)
    cut_by = tuple(k for k in r.keys if k not in node.cut_by) + node.cut_by
    return replace(grouped, cut_by=cut_by)


def _grouped(r: _Rewrite, node: Any) -> Node:
    """A node with ``keys`` (its ``group_by``) and ``aggregates``: grouped by the keys it lacks,
    then its own; an aggregate named as a key is refused."""
    clash = [name for name, _ in getattr(node, "aggregates", ()) if name in r.keys]
    if clash:
        raise r.error(
            node,
            f"names an aggregate {clash[0]!r}, a key column: the result would lose the group's key",
            f"give the aggregate another name (e.g. {clash[0]}_value=...)",
        )
    missing = tuple(k for k in r.keys if k not in node.keys)
    return replace(node, child=r.node(node.child), keys=missing + node.keys)


def _window(r: _Rewrite, node: WindowNode | CountWindowNode | SessionWindowNode) -> Node:
    """A window of any kind (tumbling, hopping, count, session; windowed top-k and apply) per
    group: grouped by the keys too. A tumbling or hopping one whose input may hold events that
    end at +inf also counts them, at the CTI +inf, up to each group's own latest finite moment
    (``latest_by``); a count window reads only starts, and a session's end depends only on its
    own group's events."""
    if isinstance(node, WindowRowsNode) and node.size == 0:  # over snapshots
        return _snapshot(r, node)
    grouped = _grouped(r, node)
    if isinstance(node, WindowNode | WindowRowsNode) and _may_end_at_inf(node.child):
        latest_by = tuple(k for k in r.keys if k not in node.latest_by) + node.latest_by
        return replace(grouped, latest_by=latest_by)
    return grouped


def _join(r: _Rewrite, node: JoinNode | AntiJoinNode | LeftOuterJoinNode | ClipNode) -> Node:
    left, right = r.of_group(node.left), r.of_group(node.right)
    if not left:
        raise r.error(
            node,
            "has the group's stream on its right side: the result would carry the other "
            "stream's columns first, and an anti-join its events, once per group",
            "put the group's stream on the left (group.join(other, on) rather than "
            "other.join(group, on))",
        )
    on = node.on + tuple(k for k in r.keys if k not in node.on) if right else node.on
    return replace(node, left=r.node(node.left), right=r.node(node.right), on=on)


def _union(r: _Rewrite, node: UnionNode) -> Node:
    if not all(r.of_group(c) for c in node.inputs):
        raise r.error(
            node,
            "unions the group's stream with a stream not derived from it: each group's result "
            "would hold all of that stream's events",
            "union only streams made from the group's stream inside fn, and union the other "
            "stream with group_apply's result",
        )
    return replace(node, inputs=tuple(r.node(c) for c in node.inputs))


#: How each node kind inside ``fn`` takes the group keys (module docstring); a kind not here is
#: refused inside group_apply.
TAKES_KEYS: dict[type[Node], Callable[[_Rewrite, Any], Node]] = {
    WhereNode: _child,
    SelectNode: _select,
    LifetimeNode: _child,
    MergeNode: _child,
    GroupNode: _child,  # a group_apply inside fn: its groups within ours
    GroupApplyNode: _child,
    WindowNode: _window,
    CountWindowNode: _window,
    SessionWindowNode: _window,
    WindowRowsNode: _window,
    SnapshotNode: _snapshot,
    JoinNode: _join,
    AntiJoinNode: _join,
    LeftOuterJoinNode: _join,
    ClipNode: _join,
    UnionNode: _union,
}


def _may_end_at_inf(node: Node) -> bool:
    """Whether ``node``'s events may have lifetimes that end at +inf: from an input of edges or
    intervals, or a snapshot (its last snapshot), unless a lifetime operator gave them a
    duration. A tumbling or hopping window's results (aggregates, top-k, apply) and a count
    window's points end at finite moments."""
    if isinstance(node, InputNode):
        return node.shape is not EventShape.POINT or node.versions is not None
    if isinstance(node, LifetimeNode) and node.duration is not None:
        return False
    if isinstance(node, WindowNode | CountWindowNode):
        return False
    if isinstance(node, WindowRowsNode) and node.size > 0:
        return False
    if isinstance(node, JoinNode):
        return _may_end_at_inf(node.left) and _may_end_at_inf(node.right)
    if isinstance(node, AntiJoinNode):
        return _may_end_at_inf(node.left)
    return isinstance(node, SnapshotNode) or any(_may_end_at_inf(c) for c in node.children())


def rewrite(root: Node, group: GroupNode, call: str, passes: Passes) -> Node:
    """``fn``'s plan under ``root`` (``group``: the node ``fn`` was given) with every grouping
    inside it also by the group keys (:data:`TAKES_KEYS`); nodes not made from the group are
    shared as they are. Raises :class:`QueryBuildError` for ``call`` where a node would lose a
    key or is not supported inside group_apply."""
    r = _Rewrite(group, call, passes)
    if not r.of_group(root):
        raise QueryBuildError(
            f"{call}: fn returned a stream not made from the stream it was given; expected the "
            "result of operators applied to its argument (fn(group) -> group.where(...)...). "
            "Fix: build fn's result from its argument"
        )
    return r.node(root)
