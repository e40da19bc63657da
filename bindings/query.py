"""``Query``: a plan bound to its adapters, run by the engine's runtime."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine.runtime import Runtime

__all__ = ["Query"]


class Query:
    """A bound query of an :class:`~bindings.Application`. Adapters are made, settings resolved
    and imports checked when the query is created, so binding errors surface there."""

    def __init__(self, name: str, runtime: Runtime, description: str = "") -> None:
        self.name = name
        self.description = description
        self._runtime = runtime

    def run(self, epochs: int | Sequence[datetime | int] = 1) -> None:
        """Run over bounded inputs to their end, then stop (inputs that flush on stop flush).

        ``epochs``: how many epochs to cut the arrival sequence into, or the arrival stamps at
        which to cut. The output is the same for any cut (semantics §4).
        """
        self._runtime.run(epochs)

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per input: events in, CTIs explicit / generated / imported / ignored, dropped,
        adjusted, and the input's current CTI (ticks)."""
        return self._runtime.metrics()

    def operator_metrics(self) -> dict[str, dict[str, Any]]:
        """Per stateful operator: the rows of state it holds and the last CTI it emitted."""
        return self._runtime.operator_metrics()
