"""``Stream``: the query-building API. Each operator returns a new ``Stream`` over a plan node."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from ctistream.engine._spark import parse_schema
from ctistream.engine.columns import check_columns
from ctistream.engine.contracts import InputAdapterFactory, OutputAdapterFactory
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.events import EventShape
from ctistream.engine.operators.group_apply import rewrite
from ctistream.engine.operators.window import WindowOutput
from ctistream.engine.operators.window_rows import (
    Apply,
    PerWindow,
    TopK,
    apply_schema,
    sort_key,
)
from ctistream.engine.plan import (
    AntiJoinNode,
    ClipNode,
    CountWindowNode,
    DiagnosticsNode,
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
    walk,
)
from ctistream.engine.settings import AdvanceTimeSettings, EventOrderingSettings, Versions
from ctistream.engine.temporal import duration_text, to_duration_ticks
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType


def _positive(value: timedelta | str, name: str, owner: str) -> int:
    return to_duration_ticks(value, name=name, owner=owner, min_ticks=1)


def _streams(what: str, *others: Any) -> None:
    """Raise when one of ``others``, what ``what`` combines this stream with, is not a Stream."""
    for other in others:
        if not isinstance(other, Stream):
            raise TypeError(
                f"{what}() takes other Streams; got a {type(other).__name__} ({other!r}). Fix: "
                "pass a Stream, as Stream.create(...) or an operator on one gives it (e.g. "
                "readings.join(sensors, on='id'), where sensors = Stream.create('sensors', ...))"
            )


def _keys(on: str | Sequence[str], what: str) -> tuple[str, ...]:
    keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"{what}() needs the key column name(s) in on=, e.g. on='id'; got {on!r}")
    return keys


# -- substreams (semantics §7, ``over=key``) ---------------------------------------------------
@dataclass(frozen=True)
class _Key:
    """A stream's substream key: the payload column, and the inputs whose ``over=`` it is."""

    column: str
    inputs: tuple[str, ...]

    def __str__(self) -> str:
        which = "input" if len(self.inputs) == 1 else "inputs"
        names = ", ".join(repr(n) for n in self.inputs)
        return f"substream key {self.column!r} of {which} {names} (over={self.column!r})"

    def with_inputs(self, *others: _Key | None) -> _Key:
        names = [*self.inputs]
        for other in others:
            names += [n for n in (other.inputs if other else ()) if n not in names]
        return _Key(self.column, tuple(names))


#: How an operator's substream key follows from its inputs' keys; raises QueryBuildError when the
#: operator would lose a key.
_Rule = Callable[[tuple[_Key | None, ...]], _Key | None]


def _lost(
    call: str, op: str, key: _Key, expected: str, got: str, fix: str, whose: str = "the stream"
) -> QueryBuildError:
    return QueryBuildError(
        f"{call} loses the {key}: expected {expected}; got {got}. Every key of a substream input "
        "has its own timeline (watermark and CTIs); an operator that drops the key would merge "
        f"them without saying so. Fix: {fix}, or call .merge_substreams() on {whose} before "
        f"{op}() to merge the substreams into one timeline on purpose"
    )


def _keep(keys: tuple[_Key | None, ...]) -> _Key | None:
    return keys[0]


def _merged(keys: tuple[_Key | None, ...]) -> _Key | None:
    return None


def _select_rule(call: str, passed: frozenset[str], keys: tuple[_Key | None, ...]) -> _Key | None:
    key = keys[0]
    if key is None or key.column in passed or "*" in passed:
        return key
    col = key.column
    raise _lost(
        call,
        "select",
        key,
        f"the key column passed through under its own name ({col!r} or F.col({col!r}))",
        f"no column that passes {col!r} through (passed through as is: {sorted(passed)})",
        f"add {col!r} to the select",
    )


def _join_rule(
    call: str, op: str, on: tuple[str, ...], keys: tuple[_Key | None, ...]
) -> _Key | None:
    left, right = keys
    for side, key in (("left", left), ("right", right)):
        if key is not None and key.column not in on:
            raise _lost(
                call,
                op,
                key,
                f"the {side} side's key {key.column!r} among the {op} keys",
                f"on={list(on)}",
                f"{op} on={[*on, key.column]}",
                f"the {side} stream",
            )
    if left is not None and right is not None:
        if left.column != right.column:
            raise QueryBuildError(
                f"{call}: the left stream has the {left} and the right stream the {right}; "
                "expected one substream key for both sides (or a key on one side only, e.g. a "
                f"reference stream); got two. Fix: call .merge_substreams() on one side before "
                f"{op}()"
            )
        return left.with_inputs(right)
    return left or right


def _union_rule(call: str, keys: tuple[_Key | None, ...]) -> _Key | None:
    keyed = [k for k in keys if k is not None]
    if not keyed:
        return None
    first = keyed[0]
    shown = [None if k is None else k.column for k in keys]
    if len({k.column for k in keyed}) > 1:
        raise QueryBuildError(
            f"{call}: its inputs have different substream keys (by input: {shown}); expected one "
            "key for every input (or none). Fix: call .merge_substreams() on the keyed inputs "
            "before union()"
        )
    if len(keyed) < len(keys):
        raise _lost(
            call,
            "union",
            first,
            f"every input split by {first.column!r} (or none)",
            f"inputs without a key (keys by input: {shown})",
            f"split every input by {first.column!r} (EventOrderingSettings(over=...))",
            "each keyed input",
        )
    return first.with_inputs(*keyed[1:])


def _group_rule(
    call: str, op: str, group: tuple[str, ...], keys: tuple[_Key | None, ...]
) -> _Key | None:
    key = keys[0]
    if key is None or key.column in group:
        return key
    listed = ", ".join(repr(k) for k in group)
    raise _lost(
        call,
        op,
        key,
        f"{key.column!r} among the group_by keys (one result per key, on the key's timeline)",
        f"group_by({listed})" if group else "no group_by (one result over all keys)",
        f".group_by({', '.join(repr(k) for k in (*group, key.column))})",
    )


def _group_key(group: tuple[str, ...], keys: tuple[_Key | None, ...]) -> _Key | None:
    """The substream key inside ``group_apply``: none when it is a group key (one group, one
    key's timeline), else the input's."""
    key = keys[0]
    return None if key is not None and key.column in group else key


def _applied_key(group: tuple[str, ...], keys: tuple[_Key | None, ...]) -> _Key | None:
    """``group_apply``'s substream key (sources: fn's result, the input): the input's when it
    is a group key (every result carries it), else fn's result's."""
    result, source = keys
    return source if source is not None and source.column in group else result


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|`[^`]+`")


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) > 1 and name[0] == name[-1] == "`" else name


def _passed_through(column: Column | str) -> str | None:
    """The payload column a ``select`` column passes through unchanged and under its own name
    (``"*"``: all of them), or None for a rename, a computed value or a nested field.

    Reads the Column's unresolved expression only: no Spark work. What it does not recognise (a
    Spark Connect Column, say) counts as an expression, so a kept key may be reported lost, never
    a lost one kept.
    """
    if isinstance(column, str):  # DataFrame.select takes a string as a column name
        if column == "*" or (column.startswith("`") and column.endswith("`")):
            return _unquote(column)
        return None if "." in column else column
    try:
        node = column._jc.node()  # type: ignore[attr-defined]
        if node.getClass().getSimpleName() == "Alias":
            names = node.name()
            inner = _node_name(node.child())
            if names.length() == 1 and inner not in (None, "*") and inner == names.apply(0):
                return inner
            return None
        return _node_name(node)
    except Exception:  # not a classic Column, or Spark's internals moved: an expression
        return None


def _node_name(node: Any) -> str | None:
    kind = node.getClass().getSimpleName()
    if kind == "UnresolvedAttribute":
        parts = node.nameParts()
        return str(parts.apply(0)) if parts.length() == 1 else None
    if kind == "UnresolvedStar":
        return "*" if node.unparsedTarget().isEmpty() else None
    if kind == "SqlExpression":  # F.expr("k")
        text = str(node.expression()).strip()
        return _unquote(text) if _IDENTIFIER.fullmatch(text) else None
    return None


def _show(value: Any) -> str:
    if isinstance(value, timedelta):  # as the interval string that spells it
        return repr(duration_text(to_duration_ticks(value, name="", owner="")))
    return str(value) if isinstance(value, Column) else repr(value)


def _call(name: str, *args: Any, **kwargs: Any) -> str:
    shown = [*(_show(a) for a in args), *(f"{k}={_show(v)}" for k, v in kwargs.items())]
    return f"{name}({', '.join(shown)})"


def _input_schema(node: InputNode) -> StructType:
    """An input's payload schema as :attr:`Stream.schema` gives it: its ``schema=`` (or a
    template input's declaration), else what its adapter declares (the adapter made for it)."""
    given = "its schema= in Stream.create" if node.template is None else "its Stream.input"
    ddl, where = node.schema, f"input {node.name!r}, the schema in {given}"
    if ddl is None and node.factory is not None:
        adapter = node.factory.create(node.config, node.shape)
        adapter.bound_as(node.name)
        ddl = adapter.payload_schema()
        where = (
            f"input {node.name!r}, the payload schema its {type(adapter).__name__} "
            "declares (its config's schema, or the adapter's own)"
        )
    if ddl is None:
        raise QueryBuildError(
            f"input {node.name!r}: its adapter declares no payload schema and the binding "
            "gives none. Fix: pass schema= to Stream.create"
        )
    return parse_schema(ddl, where)


if TYPE_CHECKING:
    from ctistream.bindings.application import Application
    from ctistream.bindings.query import Query

__all__ = ["Stream", "WindowedStream"]


#: what a window offers and a stream does not (Stream.__getattr__ names the call to make first)
_WINDOWED = frozenset({"aggregate", "top_k", "apply"})


class Stream:
    """A temporal stream: a bound input, or operators over other streams.

    Build it with :meth:`create`, transform it with the operator methods, and bind it to an
    output with :meth:`to_query`. Building does no Spark work.

    A stream knows its :attr:`substream_key` (semantics §7): an input split into substreams with
    ``EventOrderingSettings(over="k")`` has the key ``"k"``, operators that keep the column keep
    it, and an operator that would lose it raises :class:`~engine.errors.QueryBuildError` when
    it is called, unless :meth:`merge_substreams` came first.
    """

    def __init__(
        self, node: Node, *, _sources: tuple[Stream, ...] = (), _rule: _Rule | None = None
    ) -> None:
        self._node = node
        self._sources = _sources
        self._rule = _rule
        self._shown = _sources  # what explain() shows under it (group_apply: fn's result only)
        # Worked out now, from the sources' keys, so an operator that loses the key fails
        # where the user calls it.
        self._key = self._derive({}, {id(s): s._key for s in _sources})

    @property
    def node(self) -> Node:
        return self._node

    def __getattr__(self, name: str) -> Any:
        """A window's operation (``aggregate``, ``top_k``, ``apply``) asked of a stream: say
        which call comes first."""
        if name in _WINDOWED:
            raise AttributeError(
                f"'Stream' object has no attribute {name!r}: {name}() is an operation of a "
                "window. Fix: call a window first, e.g. stream.tumbling_window('1 minute')"
                f".{name}(...), or hopping_window / snapshot_window / count_window / "
                "session_window (then group_by(...) for one result per group)"
            )
        raise AttributeError(f"'Stream' object has no attribute {name!r}")

    def __repr__(self) -> str:
        inputs = ", ".join(repr(n.name) for n in walk(self._node) if isinstance(n, InputNode))
        key = "" if self._key is None else f", substream key {self._key.column!r}"
        return f"<Stream {self._node.label()}; inputs {inputs}{key}>"

    def explain(self) -> str:
        """The logical plan as text, this stream's operator first and each input below the
        operator that reads it (indented): per line the operator and its arguments, its
        substream key (semantics §7; ``-``: one timeline) and how it moves CTIs (§5)::

            union of 2  key -  CTI: the oldest of the inputs' latest CTIs (§5)
              where (v > 1)  key -  CTI: the input's, unchanged (§5)
                input 'sensors' (POINT)  key -  CTI: the input's own: ...

        Building it does no Spark work."""
        lines: list[str] = []

        def show(stream: Stream, depth: int) -> None:
            node, key = stream._node, stream.substream_key
            shown = "-" if key is None else repr(key)
            lines.append(f"{'  ' * depth}{node.label()}  key {shown}  CTI: {node.cti_rule}")
            for source in stream._shown:
                show(source, depth + 1)

        show(self, 0)
        return "\n".join(lines)

    @property
    def schema(self) -> StructType:
        """The payload's columns and types, as Spark would make them (a ``StructType``;
        ``.simpleString()`` reads as DDL). Worked out on the driver by Spark's analyser over
        empty frames: no job runs. A bound input's payload is its ``schema=`` or what its
        adapter declares (the adapter is made for it, as when the query is created); a template
        input's is its declared schema. Needs a SparkSession: make the
        :class:`~bindings.Application` first."""
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError(
                "Stream.schema needs a SparkSession to work out the payload's types; there is "
                "none. Fix: create the Application (app = Application(...)) first"
            )
        inputs = {id(n): _input_schema(n) for n in walk(self._node) if isinstance(n, InputNode)}
        return check_columns(spark, self._node, inputs)[id(self._node)]

    @property
    def substream_key(self) -> str | None:
        """The payload column this stream is split into substreams by (``over=`` of its
        inputs, kept through its operators), or None: one timeline. Inputs of a template
        (:meth:`input`) have none until bound; the binding is checked when the query is made."""
        return None if self._key is None else self._key.column

    def _derive(self, bound_over: Mapping[str, str], memo: dict[int, _Key | None]) -> _Key | None:
        """This stream's key when the template inputs named in ``bound_over`` are split by those
        columns (the other inputs as built); raises QueryBuildError where the key is lost."""
        if id(self) in memo:
            return memo[id(self)]
        key = None
        node = self._node
        if self._rule is not None:
            key = self._rule(tuple(s._derive(bound_over, memo) for s in self._sources))
        elif isinstance(node, InputNode):
            if node.bound:
                column = node.ordering.over if node.ordering is not None else None
            else:
                column = bound_over.get(node.name)
            key = None if column is None else _Key(column, (node.name,))
        memo[id(self)] = key
        return key

    def _then(self, node: Node, rule: _Rule, *others: Stream) -> Stream:
        return Stream(node, _sources=(self, *others), _rule=rule)

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
        versions: Versions | None = None,
    ) -> Stream:
        """Bind an input adapter, as StreamInsight's ``CepStream.Create``.

        ``advance_time_settings`` override what ``factory.declare_advance_time_properties``
        declares. ``schema`` (Spark DDL) overrides the adapter's payload schema. ``ordering``:
        arrival-time policies (semantics §7, Azure Stream Analytics' event ordering) for a point
        input: event time from a payload column, late / early / out-of-order rules, and the
        watermark as the input's CTIs; the factory's declared settings are then not used, and
        ``advance_time_settings`` may only import CTIs. ``versions``: the rows are versions of
        keys (a reference input: each row a key's value from its time on), read as POINT rows;
        the engine makes the START and END edges (:class:`~ctistream.engine.Versions`), so the
        stream is an EDGE stream.
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
        if versions is not None and not isinstance(versions, Versions):
            raise TypeError(
                f"input {name!r}: versions must be Versions; got {type(versions).__name__}. "
                "Fix: versions=Versions(key='sensor_id', deleted='deleted')"
            )
        if versions is not None and shape is not EventShape.POINT:
            raise QueryBuildError(
                f"input {name!r}: versions= reads each row as the moment its version becomes "
                f"valid; expected shape EventShape.POINT, got {shape.value}. Fix: bind the input "
                "as EventShape.POINT (the engine makes the START and END edges), or drop "
                "versions= and send the edges yourself"
            )
        if versions is not None and ordering is not None:
            raise QueryBuildError(
                f"input {name!r}: versions= and ordering= together; expected one of them (the "
                "arrival-time policies place points, versions make edges). Fix: drop ordering= "
                "and give the versions' input AdvanceTimeSettings (e.g. an import)"
            )
        return cls(
            InputNode(
                name,
                factory,
                config,
                shape,
                advance_time_settings,
                schema,
                ordering=ordering,
                versions=versions,
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
        return self._then(WhereNode(self._node, cond, call=_call("where", condition)), _keep)

    def select(self, *columns: Column | str) -> Stream:
        """Project the payload to ``columns`` (names or Columns, aliased as you like).

        Keeps the substream key when its column passes through under its own name (``"k"``,
        ``F.col("k")``, ``"*"``); a rename or an expression loses it."""
        if not columns:
            raise ValueError("select() needs at least one column")
        passed = frozenset(n for n in map(_passed_through, columns) if n is not None)
        call = _call("select", *columns)
        rule = partial(_select_rule, call, passed)
        return self._then(SelectNode(self._node, tuple(columns), call=call), rule)

    def join(self, other: Stream, on: str | Sequence[str]) -> Stream:
        """Pairs of events with equal ``on`` columns whose lifetimes overlap; lifetime = the
        intersection; payload = this stream's columns, then ``other``'s (a clashing name gets a
        ``right_`` prefix). CTI = the older of both sides' latest CTIs.

        A substream key of either side must be in ``on`` (both sides' the same column); the
        result keeps it. A keyed stream joined with an un-keyed one (a reference stream) on the
        key stays keyed."""
        _streams("join", other)
        keys = _keys(on, "join")
        rule = partial(_join_rule, _call("join", on=list(keys)), "join", keys)
        node = JoinNode(self._node, other.node, keys, call=_call("join", on=on))
        return self._then(node, rule, other)

    def anti_join(self, other: Stream, on: str | Sequence[str]) -> Stream:
        """The parts of this stream's lifetimes that no event of ``other`` with equal ``on``
        columns covers (nulls never match); payload = this stream's columns. CTI = the older of
        both sides' latest CTIs. A part leaves once the other side's CTI has passed it, as a
        START edge first when its end is not yet known. Substream keys as for :meth:`join`."""
        _streams("anti_join", other)
        keys = _keys(on, "anti_join")
        rule = partial(_join_rule, _call("anti_join", on=list(keys)), "anti_join", keys)
        node = AntiJoinNode(self._node, other.node, keys, call=_call("anti_join", on=on))
        return self._then(node, rule, other)

    def left_outer_join(self, other: Stream, on: str | Sequence[str]) -> Stream:
        """The pairs of :meth:`join`, plus the parts of this stream's lifetimes that no event of
        ``other`` with equal ``on`` columns covers (:meth:`anti_join`'s), with ``other``'s
        columns null; payload and CTI as :meth:`join`'s (``other``'s columns nullable).
        Substream keys as for :meth:`join`; no keyed CTIs pass (as for :meth:`anti_join`)."""
        _streams("left_outer_join", other)
        keys = _keys(on, "left_outer_join")
        call = _call("left_outer_join", on=list(keys))
        rule = partial(_join_rule, call, "left_outer_join", keys)
        node = LeftOuterJoinNode(self._node, other.node, keys, call=_call("left_outer_join", on=on))
        return self._then(node, rule, other)

    def clip_event_duration(self, other: Stream, on: str | Sequence[str]) -> Stream:
        """Each event's end cut to the start of the first event of ``other`` with equal ``on``
        columns (nulls never match) that starts strictly after this event's start and before
        its end (StreamInsight's ClipEventDuration); payload = this stream's columns. CTI = the
        older of both sides' latest CTIs. An event leaves as a START edge first when its end is
        not yet final. Substream keys as for :meth:`join`; no keyed CTIs pass."""
        _streams("clip_event_duration", other)
        keys = _keys(on, "clip_event_duration")
        call = _call("clip_event_duration", on=list(keys))
        rule = partial(_join_rule, call, "clip_event_duration", keys)
        node = ClipNode(self._node, other.node, keys, call=_call("clip_event_duration", on=on))
        return self._then(node, rule, other)

    def union(self, *others: Stream) -> Stream:
        """All events of this stream and ``others``; CTI = the older of their latest CTIs.

        Every input must have the same substream key, or none: merge the keyed ones
        (:meth:`merge_substreams`) to union them with un-keyed streams."""
        if not others:
            raise ValueError("union() needs at least one other stream")
        _streams("union", *others)
        call = f"union() of {len(others) + 1} streams"
        rule = partial(_union_rule, call)
        node = UnionNode((self._node, *(o.node for o in others)), call=call)
        return self._then(node, rule, *others)

    def shift_event_time(self, delta: timedelta | str) -> Stream:
        """Move every event by ``delta`` (``[start + d, end + d)``); CTIs move by ``delta`` too.
        ``delta`` is a duration (semantics §1), and may be negative."""
        shift = to_duration_ticks(delta, name="delta", owner="shift_event_time()")
        return self._then(LifetimeNode(self._node, shift=shift), _keep)

    def alter_event_duration(self, duration: timedelta | str) -> Stream:
        """Give every event the lifetime ``[start, start + duration)``; CTIs are unchanged.
        START edges become intervals at once. ``duration``: a positive duration (§1)."""
        ticks = _positive(duration, "duration", "alter_event_duration()")
        return self._then(LifetimeNode(self._node, duration=ticks), _keep)

    def alter_event_lifetime(
        self, start_fn: Callable[[Column], Column], duration: timedelta | str
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
        name = getattr(start_fn, "__name__", type(start_fn).__name__)
        node = LifetimeNode(
            self._node,
            start_fn=start_fn,
            duration=_positive(duration, "duration", "alter_event_lifetime()"),
            call=f"alter_event_lifetime({name}, {_show(duration)})",
        )
        return self._then(node, _keep)

    def to_point(self) -> Stream:
        """Every event becomes a point at its start; CTIs are unchanged."""
        return self._then(LifetimeNode(self._node, duration=1), _keep)

    def tumbling_window(
        self, size: timedelta | str, *, output: WindowOutput = WindowOutput.WINDOW
    ) -> WindowedStream:
        """Windows ``[k * size, (k + 1) * size)``; follow with ``group_by`` and ``aggregate``.
        ``size``: a positive duration (semantics §1), e.g. ``"1 minute"``."""
        ticks = _positive(size, "size", "tumbling_window()")
        call = _call("tumbling_window", size)
        return WindowedStream(self, ticks, ticks, WindowOutput(output), call=call)

    def hopping_window(
        self,
        size: timedelta | str,
        hop: timedelta | str,
        *,
        output: WindowOutput = WindowOutput.WINDOW,
    ) -> WindowedStream:
        """Windows ``[k * hop, k * hop + size)``; an event counts in every window it overlaps.
        ``size`` and ``hop``: positive durations (semantics §1)."""
        return WindowedStream(
            self,
            _positive(size, "size", "hopping_window()"),
            _positive(hop, "hop", "hopping_window()"),
            WindowOutput(output),
            call=_call("hopping_window", size, hop),
        )

    def snapshot_window(self) -> WindowedStream:
        """Snapshots: the spans between consecutive event endpoints; follow with ``group_by``
        and ``aggregate``. Output CTI: the start of the snapshot that contains the input CTI."""
        return WindowedStream(self, 0, 0, WindowOutput.WINDOW, call="snapshot_window()")

    def count_window(self, n: int) -> WindowedStream:
        """Count windows (StreamInsight's count-by-start-time window, semantics §5): per group,
        each run of ``n`` consecutive distinct start times is a window holding the events that
        start at them; one result per complete window, a point at its last start time, once the
        CTI passes it. Follow with ``group_by`` and ``aggregate``. Output CTI: the input's."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(
                f"count_window(n={n!r}): n is the number of distinct start times per window, "
                f"an int; got a {type(n).__name__}. Fix: pass a whole number, e.g. "
                "count_window(5)"
            )
        if n < 1:
            raise ValueError(
                f"count_window(n={n!r}): n is the number of distinct start times per window, "
                f"at least 1; got {n}. Fix: pass n >= 1, e.g. count_window(5)"
            )
        return WindowedStream(
            self,
            0,
            0,
            WindowOutput.WINDOW,
            call=f"count_window({n})",
            build=lambda node, keys, aggs, call: CountWindowNode(node, n, keys, aggs, call=call),
        )

    def session_window(
        self, timeout: timedelta | str, max_duration: timedelta | str | None = None
    ) -> WindowedStream:
        """Session windows (ASA SessionWindow, semantics §5): per group, events in start order
        join the open session while they start before its reach (the largest end so far +
        ``timeout``); with ``max_duration``, a session still open at a multiple of it (from 0)
        at least ``max_duration`` after its start ends there. One result per session, its
        lifetime ``[first start, end)``, once the CTI reaches its end. Follow with ``group_by``
        and ``aggregate``. Output CTI: the older of the input CTI and the start of the earliest
        session still open. Durations are positive (semantics §1), e.g. ``"30 seconds"``."""
        gap = _positive(timeout, "timeout", "session_window()")
        most = None
        if max_duration is not None:
            most = _positive(max_duration, "max_duration", "session_window()")
        shown = [timeout] if max_duration is None else [timeout, max_duration]
        return WindowedStream(
            self,
            0,
            0,
            WindowOutput.WINDOW,
            call=_call("session_window", *shown),
            build=lambda node, keys, aggs, call: SessionWindowNode(
                node, gap, most, keys, aggs, call=call
            ),
        )

    def group_apply(self, keys: str | Sequence[str], fn: Callable[[Stream], Stream]) -> Stream:
        """StreamInsight's Group and Apply (semantics §5): ``fn(group) -> Stream`` is applied to
        each group's events (the events with equal ``keys`` columns) separately; the results
        are unioned and carry the key columns. CTI: the oldest over groups of ``fn``'s output
        CTI, a group without events counting as ``fn`` over an empty input.

        ``fn`` builds a sub-query from the stream it is given: where/select (keeping the keys),
        the lifetime operators, tumbling/hopping windows (their results are per group, the keys
        first unless ``group_by`` names them), joins and anti-joins on further columns between
        streams made from the group or against another stream (the group's stream on the left:
        each group's events meet all of the other stream's), unions of the group's own streams.
        Refused when the query is built, with the fix: a key that is not a column, a sub-query
        that drops a key, ``fn`` not returning a Stream made from its argument, and what
        ``group_apply`` does not run yet (:mod:`engine.operators.group_apply`).

        A substream key (§7) among ``keys`` is kept (each group is on one key's timeline);
        otherwise it follows ``fn``'s operators as everywhere."""
        iterable = isinstance(keys, Iterable) and not isinstance(keys, str)
        names = tuple(keys) if iterable else (keys,)
        if (
            not names
            or not all(isinstance(k, str) and k for k in names)
            or len(set(names)) < len(names)
        ):
            raise ValueError(
                f"group_apply() takes the group key column name(s), distinct and at least one, "
                f"e.g. group_apply('sensor_id', fn); got keys={keys!r}"
            )
        call = f"group_apply(keys={list(names)!r}, fn={getattr(fn, '__name__', repr(fn))})"
        if not callable(fn):
            raise TypeError(
                f"{call}: fn must be a function from the group's Stream to a Stream; got "
                f"{type(fn).__name__}. Fix: e.g. lambda g: g.tumbling_window('1 minute')"
                ".aggregate(n=F.count('*'))"
            )
        within = partial(_group_key, names)
        group = Stream(GroupNode(self._node, names, call=call), _sources=(self,), _rule=within)
        result = fn(group)
        if not isinstance(result, Stream):
            raise QueryBuildError(
                f"{call}: fn returned {type(result).__name__}; expected a Stream made from the "
                "stream fn is given. Fix: return the sub-query's Stream (a windowed stream "
                "needs .aggregate(...))"
            )
        inner = rewrite(result.node, group.node, call, _passed_through)
        node = GroupApplyNode(inner, names, call=call)
        out = Stream(node, _sources=(result, self), _rule=partial(_applied_key, names))
        out._shown = (result,)
        return out

    def merge_substreams(self) -> Stream:
        """This stream with its substreams merged into one timeline: no :attr:`substream_key`
        and only the CTIs valid for every key (its keyed CTIs are dropped), so operators that
        drop the key column may follow. On a stream without a key it changes nothing."""
        return self._then(MergeNode(self._node), _merged)

    def diagnostics(self) -> Stream:
        """The diagnostic stream of this input (semantics §8): one point event per item its
        ingress dropped or adjusted (CTI violation, early, late, out-of-order), at the CTI in
        force when the item arrived, with the columns ``action``, ``reason``,
        ``original_start``, ``original_end``, ``new_start``, ``new_end`` (ticks), ``input``,
        ``partition``, ``offset``, then the item's own payload; its CTI is the input's. Bind
        it to an output, join it, window it, like any stream. Inputs only: raises
        :class:`~engine.errors.QueryBuildError` on a stream made by an operator."""
        node = self._node
        if not isinstance(node, InputNode):
            inputs = ", ".join(repr(n.name) for n in walk(node) if isinstance(n, InputNode))
            raise QueryBuildError(
                f"diagnostics() on {node.label()!r}: expected an input stream (the diagnostics "
                "are what an input's ingress dropped or adjusted), got a stream made by an "
                f"operator over the input(s) {inputs}. Fix: call diagnostics() on the Stream "
                "that Stream.create made for the input, then apply the operators to its result"
            )
        return self._then(DiagnosticsNode(node, call="diagnostics()"), _merged)

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
        self,
        source: Stream,
        size: int,
        hop: int,
        output: WindowOutput,
        keys: tuple[str, ...] = (),
        *,
        call: str = "window()",
        build: Callable[[Node, tuple[str, ...], tuple[tuple[str, Column], ...], str], Node]
        | None = None,
    ) -> None:
        self._source, self._size, self._hop, self._output, self._keys = (
            source,
            size,
            hop,
            output,
            keys,
        )
        self._call = call
        self._build = build  # the plan node of a window other than the grid and snapshot ones

    def group_by(self, *keys: str) -> WindowedStream:
        """Group each window's events by these payload columns: one result per group. A
        substream key must be among them (or merge the substreams first)."""
        if not keys or not all(isinstance(k, str) and k for k in keys):
            raise ValueError(f"group_by() takes payload column names; got {keys!r}")
        return WindowedStream(
            self._source,
            self._size,
            self._hop,
            self._output,
            keys,
            call=self._call,
            build=self._build,
        )

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
        grouped = f".group_by({', '.join(repr(k) for k in self._keys)})" if self._keys else ""
        call = f"{self._call}{grouped}.aggregate({', '.join(aggregates)})"
        op = self._call.split("(", 1)[0]
        rule = partial(_group_rule, call, op, self._keys)
        node = self._source.node
        if self._build is not None:
            return self._source._then(
                self._build(node, self._keys, tuple(aggregates.items()), call), rule
            )
        if self._size == 0:  # a snapshot window
            return self._source._then(
                SnapshotNode(node, self._keys, tuple(aggregates.items()), call=call), rule
            )
        return self._source._then(
            WindowNode(
                node,
                self._size,
                self._hop,
                self._keys,
                tuple(aggregates.items()),
                self._output is WindowOutput.POINT_AT_END,
                call=call,
            ),
            rule,
        )

    def _grouped_call(self, op: str) -> str:
        grouped = f".group_by({', '.join(repr(k) for k in self._keys)})" if self._keys else ""
        return f"{self._call}{grouped}.{op}"

    def _rows(self, op: PerWindow, call: str) -> Stream:
        """A :class:`WindowRowsNode` of ``op`` over this window, keeping a substream key only
        among the group_by keys (as ``aggregate``). Over tumbling, hopping and snapshot windows
        only: count and session windows take ``aggregate``."""
        if self._build is not None:
            window = self._call.split("(", 1)[0]
            raise QueryBuildError(
                f"{self._call}...{call}: top_k and apply run over tumbling, hopping and snapshot "
                f"windows; got {window}, which takes aggregate only. Fix: aggregate the "
                f"{window} (e.g. .aggregate(n=F.count('*'))), or use top_k / apply over a "
                "tumbling, hopping or snapshot window"
            )
        rule = partial(_group_rule, call, self._call.split("(", 1)[0], self._keys)
        node = WindowRowsNode(
            self._source.node,
            self._size,
            self._hop,
            self._keys,
            op,
            self._output is WindowOutput.POINT_AT_END,
            call=call,
        )
        return self._source._then(node, rule)

    def top_k(self, k: int, *order_by: Column | str) -> Stream:
        """Per window (and group), the ``k`` events first in ``order_by`` (semantics §5), each
        with the window's lifetime and a ``rank`` column (1 .. k) after its payload; ties are
        broken by start, end, then the payload columns in order (ascending, nulls first).

        ``order_by``: payload column names (ascending) or columns with ``.asc()``, ``.desc()``
        (``F.col("n").desc()``: the largest first) and their ``_nulls_first`` / ``_nulls_last``
        forms. Output CTI: as the window's. Released once the window is complete; results are
        final. A substream key must be among the group_by keys."""
        call = self._grouped_call(_call("top_k", k, *order_by))
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(
                f"{call}: k must be a whole number of events, at least 1; got "
                f"{type(k).__name__} {k!r}. Fix: pass an int, e.g. top_k(3, F.col('n').desc())"
            )
        if k < 1:
            raise QueryBuildError(
                f"{call}: k must be at least 1; got {k}. Fix: ask for 1 or more events per "
                "window, e.g. top_k(1, ...) for the first"
            )
        if not order_by:
            raise ValueError(
                f"{call}: order_by is missing; expected at least one column to rank by. Fix: "
                "e.g. top_k(3, F.col('v').desc())"
            )
        order = tuple(sort_key(o) for o in order_by)
        return self._rows(TopK(k, order), call)

    def apply(self, fn: Callable[[Any], Any], schema: str | StructType) -> Stream:
        """The user-defined operator (semantics §5): ``fn(events)`` once per complete window
        (and group), in a Spark task (``applyInPandas``). ``events`` is a pandas DataFrame of the
        window's events: their payload columns, then ``start`` and ``end`` (each event's own
        lifetime, tz-aware UTC ``datetime64[us, UTC]``; ``NaT`` for the +inf end of an edge still
        open), in the order start, end, arrival. ``fn`` returns a pandas DataFrame with exactly
        the columns of ``schema`` (Spark DDL or a ``StructType``; any order), zero or more rows;
        each becomes an event with the window's lifetime and, when grouped, the group's key
        columns first. Output CTI: as the window's. Results are final.

        A result with other columns fails the run with a ``QueryRunError`` naming expected and
        got columns, the window and the group; fix ``fn`` and start the query again on its
        checkpoint: nothing already accepted is lost."""
        name = getattr(fn, "__name__", type(fn).__name__)
        shown = schema.simpleString() if isinstance(schema, StructType) else schema
        call = self._grouped_call(f"apply({name}, {shown!r})")
        if not callable(fn):
            raise TypeError(
                f"{call}: fn must be a function from a pandas DataFrame to one; got {fn!r}. "
                "Fix: pass e.g. lambda events: events.groupby('k', as_index=False).size()"
            )
        if not isinstance(schema, str | StructType):
            raise TypeError(
                f"{call}: schema must be Spark DDL or a StructType; got {schema!r}. Fix: e.g. "
                "schema='k bigint, n bigint'"
            )
        parsed = apply_schema(schema)
        if not parsed.fields:
            raise QueryBuildError(
                f"{call}: schema has no columns; expected the columns fn returns. Fix: e.g. "
                "schema='n bigint'"
            )
        clash = [k for k in self._keys if k in parsed.fieldNames()]
        if clash:
            raise QueryBuildError(
                f"{call}: schema names the group_by key column(s) {clash}; the engine adds the "
                "group's keys to every result row itself. Fix: leave them out of schema (and of "
                "what fn returns)"
            )
        return self._rows(Apply(fn, parsed, call), call)
