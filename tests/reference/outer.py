"""The reference's left outer join (semantics §5): the join's pairs and the anti-join's
fragments, each computed by the interpreter's own join and anti-join over the same inputs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ctistream.engine.events import Event

__all__ = ["LeftOuterJoin", "left_outer_rows"]


@dataclass(frozen=True)
class LeftOuterJoin:
    """§5 left outer join: the join's pairs (``Join``), plus the anti-join's fragments of left
    lifetimes (``AntiJoin``) with the right columns null; payload as the join's (left columns,
    then ``right_columns``, a name the left side has ``right_``-prefixed). Output CTI: the
    minimum of both sides' latest CTIs. Like the anti-join it takes global CTIs only (module
    docstring of the interpreter, "Per-key CTIs" rule 5)."""

    left: Any
    right: Any
    on: tuple[str, ...]
    #: the right side's payload columns, in order (null in the anti-join's fragments)
    right_columns: tuple[str, ...]


def left_outer_rows(node: LeftOuterJoin, pairs: list, fragments: list) -> list:
    """The join's rows ``pairs`` and the anti-join's rows ``fragments`` (both in position order,
    both with the same CTI rows: the same rule over the same inputs) merged by position: at each
    position the events of both, then the CTI once."""

    def widened(row: Any) -> Any:
        e = row.event
        payload = dict(e.payload)
        for c in node.right_columns:
            payload[f"right_{c}" if c in payload else c] = None
        return replace(row, event=Event(e.kind, e.start, e.end, payload, e.edge))

    rows = [*pairs, *(widened(r) for r in fragments if not r.event.is_cti)]
    return sorted(rows, key=lambda r: (r.position, r.event.is_cti))
