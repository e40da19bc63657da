"""``Stream``: the query-building API. Each operator returns a new ``Stream`` over a plan node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from adapters.base import InputAdapterFactory, OutputAdapterFactory
from engine.events import EventShape
from engine.operators.window import WindowOutput
from engine.plan import (
    AntiJoinNode,
    InputNode,
    JoinNode,
    LifetimeNode,
    Node,
    SelectNode,
    SnapshotNode,
    UnionNode,
    WhereNode,
    WindowNode,
)
from engine.settings import AdvanceTimeSettings, EventOrderingSettings
from engine.temporal import to_duration_ticks


def _positive(value: timedelta | int, what: str) -> int:
    ticks = to_duration_ticks(value, what=what)
    if ticks < 1:
        raise ValueError(
            f"{what} must be at least 1 tick (1 µs); got {value!r}. Fix: pass a positive timedelta"
        )
    return ticks


def _keys(on: str | Sequence[str], what: str) -> tuple[str, ...]:
    keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"{what}() needs the key column name(s) in on=, e.g. on='id'; got {on!r}")
    return keys


if TYPE_CHECKING:
    from bindings.application import Application
    from bindings.query import Query

__all__ = ["Stream", "WindowedStream"]


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
        ordering: EventOrderingSettings | None = None,
    ) -> Stream:
        """Bind an input adapter, as StreamInsight's ``CepStream.Create``.

        ``advance_time_settings`` override what ``factory.declare_advance_time_properties``
        declares. ``schema`` (Spark DDL) overrides the adapter's payload schema. ``ordering``:
        arrival-time policies (semantics §7, Azure Stream Analytics' event ordering) for a point
        input: event time from a payload column, late / early / out-of-order rules, and the
        watermark as the input's CTIs; the factory's declared settings are then not used, and
        ``advance_time_settings`` may only import CTIs.
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
        if ordering is not None and not isinstance(ordering, EventOrderingSettings):
            raise TypeError(
                f"input {name!r}: ordering must be EventOrderingSettings; got "
                f"{type(ordering).__name__}. Fix: ordering=EventOrderingSettings(event_time=...)"
            )
        return cls(
            InputNode(
                name, factory, config, shape, advance_time_settings, schema, ordering=ordering
            )
        )

    @classmethod
    def input(cls, name: str, schema: str | StructType) -> Stream:
        """An unbound input of a query template, as StreamInsight's ``CepStream<T>.Create(name)``.

        ``schema`` is the payload as Spark DDL (``"id bigint, v double"``) or a ``StructType``:
        the input's type, which every adapter bound to it must agree with. Build the query over
        it, make a :class:`~bindings.QueryTemplate` and bind the input by ``name`` with
        :meth:`~bindings.QueryBinder.bind_producer`.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"stream name must be a non-empty string; got {name!r}")
        if isinstance(schema, StructType):
            schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
        if not isinstance(schema, str):
            raise TypeError(
                f"template input {name!r}: schema must be Spark DDL or a StructType; got "
                f"{schema!r}. Fix: e.g. Stream.input({name!r}, 'id bigint, v double')"
            )
        return cls(InputNode(name, None, None, None, schema=schema))

    def where(self, condition: Column | str) -> Stream:
        """Keep events whose payload satisfies ``condition`` (a Column or SQL expression)."""
        cond = F.expr(condition) if isinstance(condition, str) else condition
        return Stream(WhereNode(self._node, cond))

    def select(self, *columns: Column | str) -> Stream:
        """Project the payload to ``columns`` (names or Columns, aliased as you like)."""
        if not columns:
            raise ValueError("select() needs at least one column")
        return Stream(SelectNode(self._node, tuple(columns)))

    def join(self, other: Stream, on: str | Sequence[str]) -> Stream:
        """Pairs of events with equal ``on`` columns whose lifetimes overlap; lifetime = the
        intersection; payload = this stream's columns, then ``other``'s (a clashing name gets a
        ``right_`` prefix). CTI = the older of both sides' latest CTIs."""
        return Stream(JoinNode(self._node, other.node, _keys(on, "join")))

    def anti_join(self, other: Stream, on: str | Sequence[str]) -> Stream:
        """The parts of this stream's lifetimes that no event of ``other`` with equal ``on``
        columns covers (nulls never match); payload = this stream's columns. CTI = the older of
        both sides' latest CTIs. A part leaves once the other side's CTI has passed it, as a
        START edge first when its end is not yet known."""
        return Stream(AntiJoinNode(self._node, other.node, _keys(on, "anti_join")))

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

    def tumbling_window(
        self, size: timedelta | int, *, output: WindowOutput = WindowOutput.WINDOW
    ) -> WindowedStream:
        """Windows ``[k * size, (k + 1) * size)``; follow with ``group_by`` and ``aggregate``."""
        ticks = _positive(size, "size")
        return WindowedStream(self._node, ticks, ticks, WindowOutput(output))

    def hopping_window(
        self,
        size: timedelta | int,
        hop: timedelta | int,
        *,
        output: WindowOutput = WindowOutput.WINDOW,
    ) -> WindowedStream:
        """Windows ``[k * hop, k * hop + size)``; an event counts in every window it overlaps."""
        return WindowedStream(
            self._node, _positive(size, "size"), _positive(hop, "hop"), WindowOutput(output)
        )

    def snapshot_window(self) -> WindowedStream:
        """Snapshots: the spans between consecutive event endpoints; follow with ``group_by``
        and ``aggregate``. Output CTI: the start of the snapshot that contains the input CTI."""
        return WindowedStream(self._node, 0, 0, WindowOutput.WINDOW)

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


class WindowedStream:
    """A stream cut into windows, waiting for its aggregate: ``.group_by(...).aggregate(...)`` or
    ``.aggregate(...)`` over all events of each window."""

    def __init__(
        self, node: Node, size: int, hop: int, output: WindowOutput, keys: tuple[str, ...] = ()
    ) -> None:
        self._node, self._size, self._hop, self._output, self._keys = node, size, hop, output, keys

    def group_by(self, *keys: str) -> WindowedStream:
        """Group each window's events by these payload columns: one result per group."""
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise ValueError(f"group_by() takes payload column names; got {keys!r}")
        return WindowedStream(self._node, self._size, self._hop, self._output, keys)

    def aggregate(self, **aggregates: Column) -> Stream:
        """One event per non-empty window (and group): the group keys and these named aggregate
        Columns, e.g. ``n=F.count("*"), avg_v=F.avg("v")`` or a pandas UDAF."""
        if not aggregates:
            raise ValueError("aggregate() needs at least one named aggregate, e.g. n=F.count('*')")
        for name, col in aggregates.items():
            if not isinstance(col, Column):
                raise TypeError(
                    f"aggregate {name!r} must be a PySpark aggregate Column; got {col!r}. "
                    "Fix: e.g. F.sum('v'), or a pandas_udf of type GROUPED_AGG"
                )
        if self._size == 0:  # a snapshot window
            return Stream(SnapshotNode(self._node, self._keys, tuple(aggregates.items())))
        return Stream(
            WindowNode(
                self._node,
                self._size,
                self._hop,
                self._keys,
                tuple(aggregates.items()),
                self._output is WindowOutput.POINT_AT_END,
            )
        )
