"""``Stream``: the query-building API. Each operator returns a new ``Stream`` over a plan node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from adapters.base import InputAdapterFactory, OutputAdapterFactory
from engine.events import EventShape
from engine.plan import InputNode, Node, SelectNode, UnionNode, WhereNode
from engine.settings import AdvanceTimeSettings

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
