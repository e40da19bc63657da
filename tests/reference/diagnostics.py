"""The diagnostic stream (semantics §8) for the reference interpreter, from the contract's text.

"every input offers ``stream.diagnostics()``, a stream with one point event per item that its
ingress dropped or adjusted, at the CTI in force when the item arrived, with payload: the
action, the reason, the item's original start and end (and the new start or end for an
adjustment), the input, partition and offset, and the item's own payload columns. Its CTI is
the input's CTI."

Choices where the contract is silent are those of ``docs/decisions.md`` ("Diagnostic stream"):
one diagnostic per rule that moved an event (an event the late and then the out-of-order rule
moved has two; so counts by reason equal the metrics'), the CTI in force is the item's source
partition's effective CTI just before it, an item §7 handled has its event time as its original
start, its diagnostics sit just before it in the arrival order (sub-positions -2 for the late
rule, -1 for the others), and the stream has the input's global CTIs only (no keyed ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctistream.engine.events import Event, EventKind
from ctistream.engine.temporal import MAX_TIME

__all__ = ["Diagnostics", "diagnostic"]


@dataclass(frozen=True)
class Diagnostics:
    """Plan leaf: the diagnostic stream of the bound input ``name``."""

    name: str


def diagnostic(
    c: int,
    action: str,
    reason: str,
    original: tuple[int | None, int | None],
    new: tuple[int | None, int | None],
    where: tuple[str, str, int],
    payload: dict[str, Any],
) -> Event:
    """The point at ``c`` (the CTI in force) that reports one dropped or adjusted item:
    ``original`` and ``new`` are (start, end), ``where`` is (input, partition, offset)."""
    values = {
        "action": action,
        "reason": reason,
        "original_start": original[0],
        "original_end": original[1],
        "new_start": new[0],
        "new_end": new[1],
        "input": where[0],
        "partition": where[1],
        "offset": where[2],
        **payload,
    }
    return Event(EventKind.INSERT, c, c + 1 if c < MAX_TIME else c, values)
