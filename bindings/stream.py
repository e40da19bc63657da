"""``Stream``: the query-building API. Each operator returns a new ``Stream`` over a plan node."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from adapters.base import InputAdapterFactory, OutputAdapterFactory
from engine.events import EventShape
from engine.plan import InputNode, LifetimeNode, Node, SelectNode, UnionNode, WhereNode
from engine.settings import AdvanceTimeSettings
from engine.temporal import to_duration_ticks


def _positive(value: timedelta | int, what: str) -> int:
    ticks = to_duration_ticks(value, what=what)
    if ticks < 1:
        raise ValueError(
            f"{what} must be at least 1 tick (1 µs); got {value!r}. Fix: pass a positive timedelta"
        )
    return ticks


if TYPE_CHECKING:
    from bindings.application import Application
    from bindings.query import Query

__all__ = ["Stream"]


class Stream:
    """A temporal stream: a bound input, or operators over other streams.

    Build it with :meth:`create`, transform it with the operator methods, and bind it to an
    output with :meth:`to_query`. Building does no Spark work.
    """

    def __init__(self, node: Node) -> None:
        self._node = node

    @property
    def node(self) -> Node:
        return self._node

    @classmethod
    def create(
        cls,
        name: str,
        factory: InputAdapterFactory[Any],
        config: Any,
        shape: EventShape,
        advance_time_settings: AdvanceTimeSettings | None = None,
        *,
        schema: str | None = None,
    ) -> Stream:
        """Bind an input adapter, as StreamInsight's ``CepStream.Create``.

        ``advance_time_settings`` override what ``factory.declare_advance_time_properties``
        declares. ``schema`` (Spark DDL) overrides the adapter's payload schema.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"stream name must be a non-empty string; got {name!r}")
        if not isinstance(factory, InputAdapterFactory):
            raise TypeError(
                f"input {name!r}: factory must be an InputAdapterFactory instance; got "
                f"{factory!r}. Fix: pass an instance, e.g. MemoryInputFactory()"
            )
        if not isinstance(shape, EventShape):
            raise TypeError(f"input {name!r}: shape must be an EventShape; got {shape!r}")
        if advance_time_settings is not None and not isinstance(
            advance_time_settings, AdvanceTimeSettings
        ):
            raise TypeError(
                f"input {name!r}: advance_time_settings must be AdvanceTimeSettings; got "
                f"{type(advance_time_settings).__name__}. Fix: wrap generation settings as "
                "AdvanceTimeSettings(AdvanceTimeGenerationSettings(...), None, policy)"
            )
        return cls(InputNode(name, factory, config, shape, advance_time_settings, schema))

    def where(self, condition: Column | str) -> Stream:
        """Keep events whose payload satisfies ``condition`` (a Column or SQL expression)."""
        cond = F.expr(condition) if isinstance(condition, str) else condition
        return Stream(WhereNode(self._node, cond))

    def select(self, *columns: Column | str) -> Stream:
        """Project the payload to ``columns`` (names or Columns, aliased as you like)."""
        if not columns:
            raise ValueError("select() needs at least one column")
        return Stream(SelectNode(self._node, tuple(columns)))

    def union(self, *others: Stream) -> Stream:
        """All events of this stream and ``others``; CTI = the older of their latest CTIs."""
        if not others:
            raise ValueError("union() needs at least one other stream")
        return Stream(UnionNode((self._node, *(o.node for o in others))))

    def shift_event_time(self, delta: timedelta | int) -> Stream:
        """Move every event by ``delta`` (``[start + d, end + d)``); CTIs move by ``delta`` too."""
        return Stream(LifetimeNode(self._node, shift=to_duration_ticks(delta, what="delta")))

    def alter_event_duration(self, duration: timedelta | int) -> Stream:
        """Give every event the lifetime ``[start, start + duration)``; CTIs are unchanged.
        START edges become intervals at once."""
        return Stream(LifetimeNode(self._node, duration=_positive(duration, "duration")))

    def alter_event_lifetime(
        self, start_fn: Callable[[Column], Column], duration: timedelta | int
    ) -> Stream:
        """``start = start_fn(start)``, ``end = start + duration``; CTIs become ``start_fn(c)``.

        ``start_fn`` maps a Column of int64 ticks to one, and must be non-decreasing (e.g.
        ``lambda s: s - s % 60_000_000`` snaps starts to the minute); otherwise a CTI could be
        moved past an event it should not commit.
        """
        if not callable(start_fn):
            raise TypeError(
                f"start_fn must map a Column of ticks to a Column; got {start_fn!r}. Fix: pass "
                "e.g. lambda s: s - s % 60_000_000"
            )
        return Stream(
            LifetimeNode(self._node, start_fn=start_fn, duration=_positive(duration, "duration"))
        )

    def to_point(self) -> Stream:
        """Every event becomes a point at its start; CTIs are unchanged."""
        return Stream(LifetimeNode(self._node, duration=1))

    def to_query(
        self,
        app: Application,
        name: str,
        factory: OutputAdapterFactory[Any],
        config: Any,
        shape: EventShape,
    ) -> Query:
        """Bind this stream to an output adapter: a query of ``app`` named ``name``."""
        return app._query(name, self._node, factory, config, shape)
