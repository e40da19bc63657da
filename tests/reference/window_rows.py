"""Reference: windowed ``top_k`` and ``apply`` (semantics §5), literal to the table's rows.

| windowed ``.top_k(k, *order_by)`` | per window (and group), the ``k`` events first in
  ``order_by`` (ties broken by start, end, payload), each with the window's lifetime and a
  ``rank`` column (1..k) | as the window |
| windowed ``.apply(fn, schema)`` | ``fn(pandas.DataFrame of the window's events, with start
  and end columns) -> pandas.DataFrame`` matching ``schema``, once per complete window (and
  group); each result row gets the window's lifetime and, when grouped, the group's key
  columns | as the window |

The windows are the interpreter's own (``_window`` for tumbling and hopping windows,
``_snapshot`` for snapshots): which events are in a window, when it completes, where its results
sit and how the CTI moves. They hand each complete window's group (its key values, its members
in arrival order, the window) to the functions here instead of aggregating it.

Choices (docs/decisions.md, "Windowed top_k and apply"): ``order_by`` terms are (column,
ascending, nulls first); values compare as Spark orders them (NaN above every number, -0.0 equal
to 0.0); ties by start, then end, then each payload column ascending with nulls first. ``fn``
gets the payload columns, then ``start`` and ``end`` as ``datetime64[us, UTC]`` (``NaT`` for
±inf), in the order start, end, arrival.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctistream.engine.temporal import MAX_TIME, MIN_TIME, to_datetime

__all__ = ["Apply", "TopK", "evaluate_window_rows"]


@dataclass(frozen=True)
class TopK:
    """Windowed top_k: ``size``/``hop`` a tumbling or hopping grid, ``size == 0`` snapshots;
    ``order``: (column, ascending, nulls first) terms."""

    child: Any
    size: int
    hop: int
    keys: tuple[str, ...]
    k: int
    order: tuple[tuple[str, bool, bool], ...]
    point_at_end: bool = False


@dataclass(frozen=True)
class Apply:
    """Windowed apply: ``fn`` from the window's events (pandas) to rows of ``columns``."""

    child: Any
    size: int
    hop: int
    keys: tuple[str, ...]
    fn: Callable[[Any], Any]
    columns: tuple[str, ...]
    point_at_end: bool = False


def _compare(a: Any, b: Any, nulls_first: bool) -> int:
    """Spark's order of two values of a column: nulls first or last, NaN above every number,
    -0.0 equal to 0.0."""
    if a is None or b is None:
        if a is None and b is None:
            return 0
        return (-1 if a is None else 1) * (1 if nulls_first else -1)
    if isinstance(a, float) and isinstance(b, float) and (math.isnan(a) or math.isnan(b)):
        return math.isnan(a) - math.isnan(b)
    return (a > b) - (a < b)


def _top_k(node: TopK, group: dict, members: list, window: tuple[int, int]) -> list[dict]:
    def before(x: Any, y: Any) -> int:
        for column, ascending, nulls_first in node.order:
            a, b = x.payload[column], y.payload[column]
            if a is None or b is None:
                c = _compare(a, b, nulls_first)
            else:
                c = _compare(a, b, True) * (1 if ascending else -1)
            if c:
                return c
        for a, b in ((x.start, y.start), (x.end, y.end)):
            if a != b:
                return -1 if a < b else 1
        for column in x.payload:
            c = _compare(x.payload[column], y.payload[column], True)
            if c:
                return c
        return 0

    ranked = sorted(members, key=functools.cmp_to_key(before))[: node.k]
    return [{**m.payload, "rank": i} for i, m in enumerate(ranked, 1)]


def _times(ticks: list[int]) -> Any:
    import pandas as pd

    values = [pd.NaT if t in (MIN_TIME, MAX_TIME) else pd.Timestamp(to_datetime(t)) for t in ticks]
    return pd.Series(values, dtype="datetime64[us, UTC]")


def _apply(node: Apply, group: dict, members: list, window: tuple[int, int]) -> list[dict]:
    import pandas as pd

    ordered = sorted(members, key=lambda m: (m.start, m.end))  # stable: then arrival
    events = pd.DataFrame([m.payload for m in ordered])
    events["start"] = _times([m.start for m in ordered])
    events["end"] = _times([m.end for m in ordered])
    got = node.fn(events)
    if not isinstance(got, pd.DataFrame) or sorted(got.columns) != sorted(node.columns):
        raise ValueError(f"apply: expected columns {list(node.columns)}; got {got!r}")
    rows = []
    for record in got[list(node.columns)].to_dict("records"):
        plain = {c: v.item() if hasattr(v, "item") else v for c, v in record.items()}
        rows.append({**group, **plain})
    return rows


def evaluate_window_rows(node: TopK | Apply, rows: list) -> list:
    """The rows of ``node`` from its input's rows: the window's operator with this node's
    per-window rows in place of aggregates."""
    from . import interpreter as ref

    if isinstance(node, TopK):
        results = functools.partial(_top_k, node)
    else:
        results = functools.partial(_apply, node)
    if node.size == 0:
        snapshot = ref.Snapshot(node.child, node.keys, ())
        return ref._snapshot(snapshot, ref._global_only(rows), results)
    window = ref.Window(node.child, node.size, node.hop, node.keys, (), node.point_at_end)
    return ref._window(window, rows, results)
