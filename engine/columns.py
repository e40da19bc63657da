"""Build-time checks of the columns a plan names (driver, no Spark job).

Every column an operator names (``where``, ``select``, ``join(on=)``, ``anti_join(on=)``,
``left_outer_join(on=)``, ``clip_event_duration(on=)``, ``group_by``, ``aggregate``,
``alter_event_lifetime``'s ``start_fn``, a union's inputs) is resolved when the query is made,
against an empty DataFrame of the payload schema that reaches the operator: Spark's own analyzer
resolves the user's Columns, no job runs, and a mistake is a
:class:`~engine.errors.QueryBuildError` in the user's words (the call, the column, the columns
available there and the closest match) before any epoch. What a payload is at each operator follows
semantics §5 (each operator's payload rule) and the operator modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctistream.engine._spark import engine_work
from ctistream.engine.diagnostics import check_diagnostics, diagnostic_schema
from ctistream.engine.errors import QueryBuildError, spark_message, unknown_column
from ctistream.engine.operators.join import output_columns
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
from ctistream.engine.rows import START
from ctistream.engine.schema import check_payload_names
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, LongType, StringType, StructField, StructType

__all__ = ["check_columns"]


def check_columns(
    spark: SparkSession, root: Node, schemas: Mapping[int, StructType]
) -> dict[int, StructType]:
    """Resolve the columns every operator of the plan under ``root`` names, inputs' payload
    ``schemas`` given by node id; the payload schema of every node by id. Raises
    :class:`QueryBuildError` at the first operator (children first) that names a column its
    input does not have, or whose expression Spark's analyzer refuses, or an ``aggregate``
    that is not an aggregate."""
    out: dict[int, StructType] = {}
    with engine_work():  # the errors Spark's analyzer raises here are reported as ours
        for node in walk(root):
            schema = out[id(node)] = _payload(spark, node, out, schemas)
            if not isinstance(node, InputNode):  # an input's names are checked as it is bound
                _check_names(node.call or type(node).__name__, schema.fieldNames())
    return out


def _check_names(call: str, names: list[str]) -> None:
    """An operator's output names: distinct (a later reference to one would be ambiguous), and
    none of the engine's own (:func:`engine.schema.check_payload_names`)."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise QueryBuildError(
            f"{call}: the output would have two columns named {twice[0]!r} (its columns: "
            f"{names}); expected distinct names. Fix: give one of them another name with "
            ".alias(...)"
        )
    try:
        check_payload_names(names)
    except ValueError as e:
        raise QueryBuildError(f"{call}: {e}") from None


def _payload(
    spark: SparkSession,
    node: Node,
    out: Mapping[int, StructType],
    schemas: Mapping[int, StructType],
) -> StructType:
    call = node.call or type(node).__name__.removesuffix("Node").lower()
    if isinstance(node, InputNode):
        return schemas[id(node)]
    if isinstance(node, WhereNode):
        schema = out[id(node.child)]
        _resolve(spark, call, schema, "the stream's payload", lambda df: df.filter(node.condition))
        return schema
    if isinstance(node, SelectNode):
        schema = out[id(node.child)]
        columns = node.columns
        selected = _resolve(
            spark, call, schema, "the stream's payload", lambda df: df.select(*columns)
        )
        return selected.schema
    if isinstance(node, MergeNode):
        return out[id(node.child)]
    if isinstance(node, GroupNode | GroupApplyNode):  # the group keys: columns of its input
        schema = out[id(node.child)]
        for key in node.keys:
            _resolve(spark, call, schema, "the stream's payload", _selecting(key))
        return schema
    if isinstance(node, LifetimeNode):
        schema = out[id(node.child)]
        start_fn = node.start_fn
        if start_fn is not None:  # given the start (ticks) as a Column, as the operator does
            ticks = StructType([*schema.fields, StructField(START, LongType())])
            moved = _resolve(
                spark,
                call,
                ticks,
                "the stream's payload",
                lambda df: df.select(start_fn(F.col(START))),
                shown=schema,
            )
            got = moved.schema.fields[0].dataType
            if not isinstance(got, IntegralType):
                raise QueryBuildError(
                    f"{call}: start_fn returns {got.simpleString()}; expected a Column of "
                    "integer ticks (bigint, 1 tick = 1 µs), as event times are whole ticks. "
                    "Fix: keep its arithmetic integral (e.g. lambda s: s - s % 60_000_000), or "
                    "end it with .cast('bigint')"
                )
        return schema
    if isinstance(node, WindowNode | SnapshotNode | CountWindowNode | SessionWindowNode):
        return _aggregate(spark, call, out[id(node.child)], node.keys, node.aggregates)
    if isinstance(node, WindowRowsNode):  # windowed top_k, apply (engine.operators.window_rows)
        schema = out[id(node.child)]
        for name in (*node.keys, *node.op.columns()):
            _resolve(spark, call, schema, "the windowed stream's payload", _selecting(name))
        return node.op.schema_of(schema, node.keys)
    if isinstance(node, JoinNode | AntiJoinNode | LeftOuterJoinNode | ClipNode):
        left, right = out[id(node.left)], out[id(node.right)]
        for side, schema in (("left", left), ("right", right)):
            for key in node.on:
                _resolve(spark, call, schema, f"the {side} stream's payload", _selecting(key))
        if isinstance(node, AntiJoinNode | ClipNode):
            return left
        try:
            names = output_columns(left.fieldNames(), right.fieldNames())
        except QueryBuildError as e:
            raise QueryBuildError(f"{call}: {e}") from None
        fields = [*left.fields, *right.fields]
        if isinstance(node, LeftOuterJoinNode):  # a fragment's right columns are null
            fields = [*left.fields, *(StructField(f.name, f.dataType, True) for f in right.fields)]
        return StructType(
            [StructField(n, f.dataType, f.nullable) for n, f in zip(names, fields, strict=True)]
        )
    if isinstance(node, DiagnosticsNode):  # engine.diagnostics
        schema, given = out[id(node.child)], node.child
        check_diagnostics(given.name, schema.fieldNames())
        return diagnostic_schema(schema)
    if isinstance(node, UnionNode):
        schemas_in = [out[id(c)] for c in node.inputs]
        first = schemas_in[0].fieldNames()
        for i, schema in enumerate(schemas_in[1:], start=1):
            if sorted(schema.fieldNames()) != sorted(first):
                raise QueryBuildError(
                    f"{call}: input {i + 1} has the payload columns {schema.fieldNames()}, input "
                    f"1 has {first}; expected the same columns on every input. Fix: select the "
                    "same columns on every input before the union"
                )
        return schemas_in[0]
    raise TypeError(f"unknown plan node {node!r}")  # pragma: no cover


def _selecting(name: str) -> Callable[[DataFrame], DataFrame]:
    return lambda df: df.select(F.col(_quoted(name)))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _aggregate(
    spark: SparkSession,
    call: str,
    schema: StructType,
    keys: Sequence[str],
    aggregates: Sequence[tuple[str, Column]],
) -> StructType:
    """A window's payload: its group keys, then its named aggregates; each key a column of the
    input, each aggregate an aggregate Column over it."""
    where = "the windowed stream's payload"
    for key in keys:
        _resolve(spark, call, schema, where, _selecting(key))
    for name, col in aggregates:
        each = f"{call}: aggregate {name}={col}"
        alone = _resolve(spark, each, schema, where, lambda df, col=col: df.select(col))
        # Spark plans a select of an aggregate Column (or one over aggregates) as an
        # aggregation over all rows, and any other select as a projection
        plan = alone._jdf.queryExecution().analyzed()  # type: ignore[operator]
        if plan.getClass().getSimpleName() != "Aggregate":
            raise QueryBuildError(
                f"{each} is not an aggregate: it calls no aggregate function, so a window (or "
                "group) of several events has no one value for it. Expected an aggregate "
                "Column (F.sum, F.count, F.avg, F.max, ... or a pandas_udf of type GROUPED_AGG), "
                f"possibly inside an expression. Fix: aggregate it (e.g. {name}=F.max(...)), or "
                "compute it with .select() after aggregate(); the group keys are in the output "
                "already"
            )
        _refuse_strings_as_numbers(each, schema, col)
    named = [col.alias(name) for name, col in aggregates]
    key_cols = [F.col(_quoted(k)) for k in keys]
    return _resolve(spark, call, schema, where, lambda df: df.groupBy(*key_cols).agg(*named)).schema


#: aggregate functions of numbers: over a string column Spark casts each value to a double, and
#: the first value that is not a number fails the epoch at run time
_OF_NUMBERS = frozenset(
    [
        "sum",
        "avg",
        "mean",
        "product",
        "stddev",
        "std",
        "stddev_samp",
        "stddev_pop",
        "variance",
        "var_samp",
        "var_pop",
        "skewness",
        "kurtosis",
    ]
)


def _refuse_strings_as_numbers(each: str, schema: StructType, col: Column) -> None:
    """Raise when ``col`` applies an aggregate of numbers (``F.sum``, ``F.avg``, ...) straight to
    a string column of ``schema``: what Spark accepts here fails at run time, on the first value
    that is not a number, in words that name neither the aggregate nor the column. An explicit
    cast (``F.col(c).cast("double")``) is the user's to make."""
    types = {f.name.lower(): f.dataType for f in schema.fields}

    def visit(node: Any) -> None:
        kind = node.getClass().getSimpleName()
        if kind == "Alias":
            visit(node.child())
        if kind != "UnresolvedFunction":
            return
        name = str(node.functionName()).lower()
        args = node.arguments()
        for i in range(args.length()):
            arg = args.apply(i)
            if name in _OF_NUMBERS and arg.getClass().getSimpleName() == "UnresolvedAttribute":
                column = str(arg.nameParts().mkString("."))
                if isinstance(types.get(column.lower()), StringType):
                    raise QueryBuildError(
                        f"{each}: {name}() takes numbers, but {column!r} is a string column "
                        "(Spark would cast each value to a double and fail the epoch at run "
                        "time on the first that is not a number). Expected a numeric column. "
                        f"Fix: aggregate a numeric column, or cast it if it holds numbers: "
                        f"F.{name}(F.col({column!r}).cast('double'))"
                    )
            visit(arg)

    try:
        node = col._jc.node()  # type: ignore[attr-defined]
    except Exception:  # not a classic Column: Spark's run-time error stands
        return
    visit(node)


def _resolve(
    spark: SparkSession,
    call: str,
    schema: StructType,
    where: str,
    build: Callable[[DataFrame], DataFrame],
    *,
    shown: StructType | None = None,
) -> DataFrame:
    """What ``build`` makes of an empty DataFrame of ``schema``, resolved by Spark's analyzer
    (no job runs); an analysis error raised as :class:`QueryBuildError` for ``call``.
    ``shown``: the columns to name as available (default: ``schema``'s)."""
    available = (shown or schema).fieldNames()
    try:
        df = build(spark.createDataFrame([], schema))
        df.schema  # noqa: B018 - resolved (classic PySpark resolves when the DataFrame is made)
        return df
    except AnalysisException as e:
        condition = e.getCondition() or ""
        if condition.startswith("UNRESOLVED_COLUMN"):
            raw = e.getMessageParameters().get("objectName", "")
            parts = re.findall(r"`((?:[^`]|``)*)`", raw)
            name = ".".join(p.replace("``", "`") for p in parts) if parts else raw
            raise unknown_column(call, name, available, where) from None
        raise QueryBuildError(
            f"{call}: Spark cannot resolve it over {where} (columns {available}): "
            f"{spark_message(e)}. Fix: write the expression over these columns"
        ) from None
