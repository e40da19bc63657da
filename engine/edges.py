"""END-edge matching: which START edge an END edge closes (semantics §1, §3.4), stated once.

§1: "a later END edge ``(start, end, payload)`` with the same start and payload closes" the START
edge; when several identical START edges are open, the n-th END edge of a (start, payload), in
arrival order, closes the n-th START edge of it, in arrival order (FIFO; docs/decisions.md,
"Edges"). An input matches by the original start (§3.4: "an adjusted start edge is still closed
by its end edge") and per source partition (§3.5); an operator matches the edges of its input
stream.

:func:`fifo_pairs` is the rule over rows the driver holds; :func:`fifo_ranked` is the same rule
in Spark: both sides ranked in their order per key, joined on key and rank (null-safe, as
:func:`fifo_pairs` compares values with :func:`engine.rows.same_value`).
tests/engine/test_cti_rules.py checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from ctistream.engine.rows import same_value
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["RANK", "fifo_pairs", "fifo_ranked"]

#: the column :func:`fifo_ranked` ranks each side in
RANK = "__r"

_O = TypeVar("_O")
_E = TypeVar("_E")


def fifo_pairs(
    opens: Iterable[tuple[tuple, Any, _O]], ends: Iterable[tuple[tuple, Any, _E]]
) -> list[tuple[_O | None, _E]]:
    """Match END edges to START edges, FIFO per key, on the driver.

    ``opens`` and ends are ``(key, order, item)``: the key values (start and payload, with what
    else the match is per), a sortable arrival order, and what the caller wants back. Returns
    one ``(open item, end item)`` per END edge: the n-th END edge of a key (in ``order``)
    with the n-th START edge of it, or None where the key has fewer. The pairs come key by key,
    in the order each key's first END edge was given, then in ``order``. Whether a pair is
    legal (the START edge before its END edge) is the caller's to check."""
    waiting: dict[tuple, list[tuple[Any, _O]]] = {}
    for key, order, item in opens:
        waiting.setdefault(tuple(same_value(v) for v in key), []).append((order, item))
    closing: dict[tuple, list[tuple[Any, _E]]] = {}
    for key, order, item in ends:
        closing.setdefault(tuple(same_value(v) for v in key), []).append((order, item))
    pairs: list[tuple[_O | None, _E]] = []
    for key, these in closing.items():
        line = sorted(waiting.get(key, []), key=lambda x: x[0])
        for n, (_, item) in enumerate(sorted(these, key=lambda x: x[0])):
            pairs.append((line[n][1] if n < len(line) else None, item))
    return pairs


def fifo_ranked(
    opens: DataFrame,
    ends: DataFrame,
    key: list[str],
    open_order: str,
    end_order: str,
    only: str | None = None,
) -> tuple[DataFrame, DataFrame, list[Column]]:
    """:func:`fifo_pairs` in Spark: ``opens`` aliased ``o`` and ``ends`` aliased ``e``, each
    with its rank :data:`RANK` per ``key`` in its order (``open_order``, ``end_order``), and
    the condition that pairs an END edge with the START edge it closes (null-safe equal keys
    and ranks), for the caller to join as it needs. ``only``: a boolean column of ``opens``
    naming the rows that are open START edges (the others get no rank and close nothing)."""
    rank = F.row_number().over(Window.partitionBy(*key).orderBy(open_order))
    if only is not None:
        by_open = Window.partitionBy(only, *key).orderBy(open_order)
        rank = F.when(F.col(only), F.row_number().over(by_open))
    o = opens.withColumn(RANK, rank).alias("o")
    e = ends.withColumn(
        RANK, F.row_number().over(Window.partitionBy(*key).orderBy(end_order))
    ).alias("e")
    on = [F.col(f"o.{k}").eqNullSafe(F.col(f"e.{k}")) for k in [*key, RANK]]
    return o, e, on
