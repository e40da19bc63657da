"""The reference Group and Apply (semantics §5), literally: one evaluation of ``fn`` per group.

§5: "``fn(Stream) -> Stream`` is applied to each group's events separately; results are unioned
and carry the key columns"; output CTI: "the minimum over groups of ``fn``'s output CTI (a group
with no events yet counts as ``fn`` over an empty input)".

So, with no knowledge of what ``fn`` builds:

1. The input's rows are split by the values of the key columns: a group's stream is its events
   (END edges included: an END edge carries its START edge's payload) and every global CTI of
   the input (a CTI's promise holds for any part of the stream). Keyed CTIs of substreams are
   merged (dropped) there, as at a snapshot (docs/decisions.md, "Group and Apply").
2. ``fn``'s plan is evaluated once per group that has an event anywhere in the run, and once
   more over the CTI rows alone: the group without events.
3. The results are unioned as :class:`~tests.reference.interpreter.Union` unions (events at
   their positions, the CTI the minimum over the groups' latest CTIs, emitted when it rises),
   and every event of a group gets the group's key columns, in front, where ``fn``'s result
   does not have them.

The Spark engine runs ``fn``'s plan once with the keys in every grouping
(``engine.operators.group_apply``); this module is what it must agree with.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ctistream.engine.events import Event

from .keys import spark_key, spark_order

__all__ = ["GroupApply", "evaluate_group_apply"]

_tokens = itertools.count()


@dataclass(frozen=True)
class GroupApply:
    """§5 Group and Apply: ``fn`` maps the plan leaf of one group's stream (an ``Input`` of a
    name of its own) to the group's sub-query; see the module docstring."""

    child: Any
    keys: tuple[str, ...]
    fn: Callable[[Any], Any]


def evaluate_group_apply(
    node: GroupApply,
    rows: list[Any],
    evaluate: Callable[[Any, Mapping[str, list[Any]], list[int]], list[Any]],
    inputs: Mapping[str, list[Any]],
    union: Callable[[list[list[Any]]], list[Any]],
    leaf: Callable[[str], Any],
) -> list[Any]:
    """The rows of ``node`` given its input's ``rows`` (the interpreter's ``evaluate``,
    ``union`` and ``Input`` leaf passed in; ``inputs`` the query's other inputs, which ``fn``
    may read)."""
    events: dict[tuple, list[Any]] = {}
    for row in rows:
        if not row.event.is_cti:
            group = tuple(spark_key(row.event.payload[k]) for k in node.keys)
            events.setdefault(group, [])
    order = sorted(events, key=lambda g: tuple(spark_order(v) for v in g))
    rows = [row for row in rows if row.key is None]  # keyed CTIs merged
    ctis = [row for row in rows if row.event.is_cti]
    outputs = []
    for group in [*order, None]:  # None: the group without events
        mine = ctis
        if group is not None:
            mine = [
                row
                for row in rows
                if row.event.is_cti
                or tuple(spark_key(row.event.payload[k]) for k in node.keys) == group
            ]
        name = f"__group{next(_tokens)}"
        out = evaluate(node.fn(leaf(name)), {**inputs, name: mine}, [])
        if group is not None:
            out = [_keyed(row, node.keys, group) for row in out]
        outputs.append(out)
    return union(outputs)


def _keyed(row: Any, keys: tuple[str, ...], group: tuple) -> Any:
    """``row`` with the group's key columns in front of its payload where it lacks them."""
    e = row.event
    if e.is_cti:
        return row
    missing = {k: v for k, v in zip(keys, group, strict=True) if k not in e.payload}
    if not missing:
        return row
    payload = {**missing, **dict(e.payload)}
    return replace(row, event=Event(e.kind, e.start, e.end, payload, e.edge))
