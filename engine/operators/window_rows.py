"""Windowed ``top_k`` and ``apply``: operators that make rows per window, not one aggregate
(semantics §5).

| operator | events | output CTI |
|---|---|---|
| windowed ``.top_k(k, *order_by)`` | per window (and group), the ``k`` events first in
  ``order_by`` (ties broken by start, end, payload), each with the window's lifetime and a
  ``rank`` column (1..k) | as the window |
| windowed ``.apply(fn, schema)`` | ``fn(pandas.DataFrame of the window's events, with start
  and end columns) -> pandas.DataFrame`` matching ``schema``, once per complete window (and
  group); each result row gets the window's lifetime and, when grouped, the group's key
  columns | as the window |

Which events are in which window, when a window is complete and how CTIs move is the window's
own business: :func:`engine.operators.window.window_aggregate` (tumbling and hopping) and
:func:`engine.operators.snapshot.snapshot_aggregate` (snapshots) hand each complete window's
members (their events, one row per window they are in, with the window's columns) to a
:class:`PerWindow` instead of aggregating them, and place its rows at the CTI that completed the
window. So a window kind that hands over its members this way can be followed by ``top_k`` and
``apply`` as it is. State: the window's held events (bounded by time as for aggregates that do
not merge).

Runs in Spark: ``top_k`` is a ``row_number`` over the window and group; ``apply`` a
``groupBy(window, keys).applyInPandas`` (the user's function on the executors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctistream.engine.errors import QueryBuildError
from ctistream.engine.rows import END, POS, START
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, iso_time
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    NumericType,
    StringType,
    StructField,
    StructType,
)

__all__ = [
    "RANK",
    "Apply",
    "PerWindow",
    "SortKey",
    "TopK",
    "apply_schema",
    "as_times",
    "sort_key",
]

_ORDER = "__order"
#: the column ``top_k`` adds: the event's place in its window and group, 1 .. k
RANK = "rank"


@dataclass(frozen=True)
class SortKey:
    """One ``order_by`` term of ``top_k``: a payload column, ascending or not, nulls first or
    last (PySpark's defaults: ascending puts nulls first, descending last)."""

    column: str
    ascending: bool = True
    nulls_first: bool = True

    def spark(self) -> Column:
        c = F.col(f"`{self.column}`")
        if self.ascending:
            return c.asc_nulls_first() if self.nulls_first else c.asc_nulls_last()
        return c.desc_nulls_first() if self.nulls_first else c.desc_nulls_last()

    def __str__(self) -> str:
        way = "asc" if self.ascending else "desc"
        nulls = "first" if self.nulls_first else "last"
        return f"{self.column} {way} nulls {nulls}"


def sort_key(value: Column | str) -> SortKey:
    """An ``order_by`` term as :class:`SortKey`: a column name, ``F.col(name)``, or one with
    ``.asc()``, ``.desc()``, ``.asc_nulls_last()``, ``.desc_nulls_first()``. Reads the Column's
    unresolved expression only (no Spark work); raises TypeError for anything else (an
    expression: select it into a column first)."""
    if isinstance(value, str) and value:
        return SortKey(value)
    try:
        node = value._jc.node()  # type: ignore[union-attr]
        ascending, nulls_first = True, True
        if node.getClass().getSimpleName() == "SortOrder":
            ascending = "Ascending" in node.sortDirection().getClass().getSimpleName()
            nulls_first = "NullsFirst" in node.nullOrdering().getClass().getSimpleName()
            node = node.child()
        if node.getClass().getSimpleName() == "UnresolvedAttribute":
            parts = node.nameParts()
            if parts.length() == 1:
                return SortKey(str(parts.apply(0)), ascending, nulls_first)
    except Exception:  # not a classic Column: refused below
        pass
    raise TypeError(
        f"top_k() order_by takes payload column names or columns with .asc()/.desc(); got "
        f"{value!r}. Fix: select the expression into a column first, e.g. "
        ".select('*', (F.col('v') * 2).alias('v2')) and order by 'v2'"
    )


def as_times(ticks: Any) -> Any:
    """Ticks (a pandas Series of int64) as ``apply`` gives them to the user's function: tz-aware
    UTC ``datetime64[us, UTC]`` (exact: one tick is one microsecond); -inf and +inf (the end of
    an edge still open) as ``NaT`` (docs/decisions.md, "Windowed top_k and apply")."""
    import pandas as pd

    finite = (ticks != MIN_TIME) & (ticks != MAX_TIME)
    values = ticks.where(finite, 0).to_numpy(dtype="int64").astype("datetime64[us]")
    return pd.Series(values, index=ticks.index).dt.tz_localize("UTC").where(finite)


class PerWindow:
    """What a window hands each complete window's members to (module docstring)."""

    def names(self, payload: list[str], keys: tuple[str, ...]) -> list[str]:
        """The result's payload columns."""
        raise NotImplementedError

    def columns(self) -> tuple[str, ...]:
        """The input payload columns it names (checked when the query is made)."""
        return ()

    def schema_of(self, payload: StructType, keys: tuple[str, ...]) -> StructType:
        """The result's payload schema, from the input's ``payload``."""
        raise NotImplementedError

    def rows(
        self,
        members: DataFrame,
        window: list[str],
        keys: tuple[str, ...],
        payload: list[str],
        lifetime: tuple[str, str],
    ) -> DataFrame:
        """The result rows (``window`` columns, then :meth:`names`) of ``members``: one row per
        event and window it is in, with the ``window`` columns naming the window, ``START``,
        ``END``, ``POS`` and the ``payload`` columns. ``lifetime``: SQL over the ``window``
        columns, the window's start and end."""
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class TopK(PerWindow):
    """Per window and group, the ``k`` events first in ``order`` (ties by start, end, then the
    payload columns in order, ascending, nulls first), with their ``rank``."""

    k: int
    order: tuple[SortKey, ...]

    def names(self, payload: list[str], keys: tuple[str, ...]) -> list[str]:
        return [*payload, RANK]

    def columns(self) -> tuple[str, ...]:
        return tuple(s.column for s in self.order)

    def schema_of(self, payload: StructType, keys: tuple[str, ...]) -> StructType:
        return StructType([*payload.fields, StructField(RANK, IntegerType(), False)])

    def rows(
        self,
        members: DataFrame,
        window: list[str],
        keys: tuple[str, ...],
        payload: list[str],
        lifetime: tuple[str, str],
    ) -> DataFrame:
        ties = [F.col(START).asc(), F.col(END).asc()]
        ties += [F.col(f"`{c}`").asc_nulls_first() for c in payload]
        by = Window.partitionBy(*window, *(F.col(f"`{k}`") for k in keys))
        ranked = members.withColumn(
            RANK, F.row_number().over(by.orderBy(*(s.spark() for s in self.order), *ties))
        )
        return ranked.filter(F.col(RANK) <= self.k).select(
            *window, *(F.col(f"`{c}`") for c in payload), RANK
        )

    def label(self) -> str:
        return f"top_k {self.k} by {', '.join(map(str, self.order))}"


@dataclass(frozen=True)
class Apply(PerWindow):
    """The user's ``fn`` per complete window and group (module docstring); ``schema`` its
    result's columns; ``call`` the user's call, as errors name it."""

    fn: Callable[[Any], Any]
    schema: StructType
    call: str

    def names(self, payload: list[str], keys: tuple[str, ...]) -> list[str]:
        return [*keys, *self.schema.fieldNames()]

    def schema_of(self, payload: StructType, keys: tuple[str, ...]) -> StructType:
        taken = [c for c in ("start", "end") if c in payload.fieldNames()]
        if taken:  # the function would get the lifetime in place of the payload column
            raise QueryBuildError(
                f"{self.call}: the payload has a column named {taken[0]!r}; apply gives the "
                "function each event's lifetime as the columns 'start' and 'end'. Fix: rename "
                f"it before the window, e.g. .select('*') with F.col({taken[0]!r}).alias("
                f"'{taken[0]}_value')"
            )
        types = {f.name: f for f in payload.fields}
        return StructType([*(types[k] for k in keys), *self.schema.fields])

    def rows(
        self,
        members: DataFrame,
        window: list[str],
        keys: tuple[str, ...],
        payload: list[str],
        lifetime: tuple[str, str],
    ) -> DataFrame:
        types = {f.name: f for f in members.schema.fields}
        out = StructType(
            [*(types[w] for w in window), *(types[k] for k in keys), *self.schema.fields]
        )
        group = [*window, *(F.col(f"`{k}`") for k in keys)]
        # the events' order for the function: start, end, arrival (the position, a struct
        # that pandas cannot sort)
        order = F.row_number().over(Window.partitionBy(*group).orderBy(START, END, POS))
        given = members.select(
            *window,
            F.expr(lifetime[0]).alias("__wstart"),
            F.expr(lifetime[1]).alias("__wend"),
            START,
            END,
            order.alias(_ORDER),
            *(F.col(f"`{c}`") for c in payload),
        )
        run = _Run(self.fn, self.schema, self.call, tuple(window), keys, tuple(payload))

        def each(pdf: Any) -> Any:  # a function of one argument: Spark passes the rows only
            return run(pdf)

        return given.groupBy(*group).applyInPandas(each, out)

    def label(self) -> str:
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return f"apply {name} -> {self.schema.simpleString()}"


@dataclass(frozen=True)
class _Run:
    """Executor side of :class:`Apply`: one window and group's members (``pdf``) to the
    user's function, its result checked against the schema and given the window's columns and
    the group's keys. Picklable: the user's function and plain values."""

    fn: Callable[[Any], Any]
    schema: StructType
    call: str
    window: tuple[str, ...]
    keys: tuple[str, ...]
    payload: tuple[str, ...]

    def __call__(self, pdf: Any) -> Any:
        import pandas as pd

        # the events in a fixed order (start, end, arrival), whatever order Spark gives them in
        pdf = pdf.sort_values(_ORDER).reset_index(drop=True)
        events = pdf[list(self.payload)].copy()
        events["start"] = as_times(pdf[START])
        events["end"] = as_times(pdf[END])
        expected = self.schema.fieldNames()
        first = pdf.iloc[0]
        try:
            got = self.fn(events)
        except Exception as e:
            raise ValueError(
                f"{self.call}: the function raised {type(e).__name__}: {e} for "
                f"{self._where(first)}; expected a pandas DataFrame with the columns of the "
                f"schema, {expected}. Fix: make the function handle these events, then run the "
                "query again on its checkpoint: nothing it accepted is lost. Where it "
                f"raised:\n{_user_frames(e)}"
            ) from None
        if not isinstance(got, pd.DataFrame) or sorted(map(str, got.columns)) != sorted(expected):
            shown = (
                f"columns {[str(c) for c in got.columns]}"
                if isinstance(got, pd.DataFrame)
                else f"a {type(got).__name__}"
            )
            raise ValueError(
                f"{self.call}: the function returned {shown} for {self._where(first)}; "
                f"expected a pandas DataFrame with the columns of the schema, {expected}. Fix: "
                "make the function return exactly those columns (e.g. "
                f"return result[{expected}]), or change schema= to what it returns; then run "
                "the query again on its checkpoint: nothing it accepted is lost"
            )
        result = got[expected].reset_index(drop=True)
        self._check_types(result, first)
        for c in reversed([*self.window, *self.keys]):
            result.insert(0, c, [first[c]] * len(result))
        return result

    def _where(self, first: Any) -> str:
        """The window (and group) of the members whose first row is ``first``."""
        where = f"the window [{iso_time(int(first['__wstart']))}, {iso_time(int(first['__wend']))})"
        if self.keys:
            group = {k: _plain(first[k]) for k in self.keys}
            where += f", group {group}"
        return where

    def _check_types(self, result: Any, first: Any) -> None:
        """Each number, string or boolean column of ``result`` converts to its schema type as
        Spark converts it (unsafely: a float to an integer is truncated, as Spark's default
        does); raise naming the column, the value and the fix where one does not. Other types
        are left to Spark."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type

        for field in self.schema.fields:
            if not isinstance(field.dataType, _CHECKED):
                continue
            column = result[field.name]
            try:
                pa.Array.from_pandas(column, type=to_arrow_type(field.dataType), safe=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
                bad = next((v for v in column if not _converts(v, field.dataType)), None)
                raise ValueError(
                    f"{self.call}: the function returned {bad!r} (a {type(bad).__name__}) in "
                    f"column {field.name!r} for {self._where(first)}; expected values of the "
                    f"schema's type {field.dataType.simpleString()} ({e}). Fix: convert the "
                    "column in the function (e.g. result[...].astype(...)), or declare the "
                    "type it holds in schema=; then run the query again on its checkpoint: "
                    "nothing it accepted is lost"
                ) from None


#: the schema types whose values ``apply``'s result is checked for (:meth:`_Run._check_types`)
_CHECKED = (NumericType, StringType, BooleanType)


def _converts(value: Any, data_type: Any) -> bool:
    """Whether one value converts to ``data_type`` (for the error's example value)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        pa.array([value], type=to_arrow_type(data_type), from_pandas=True, safe=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return False
    return True


def _user_frames(error: BaseException) -> str:
    """The traceback of ``error`` from the user's function on (the engine's frame left out)."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)[1:]
    lines = traceback.format_list(frames) + traceback.format_exception_only(error)
    return "".join(lines).rstrip()


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def apply_schema(schema: str | StructType) -> StructType:
    """``apply``'s ``schema`` as a StructType (DDL parsed by Spark)."""
    from ctistream.engine._spark import parse_schema

    return schema if isinstance(schema, StructType) else parse_schema(schema, "apply()'s schema")
