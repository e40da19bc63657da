"""Payload schemas: inference from Python values and the engine's reserved column names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "RESERVED_PREFIX",
    "check_payload_names",
    "infer_payload_schema",
    "schema_differences",
]

#: Engine header columns start with this; payload columns may not.
RESERVED_PREFIX = "__"

_PY_TO_SPARK: list[tuple[type, str]] = [
    (bool, "boolean"),
    (int, "bigint"),
    (float, "double"),
    (str, "string"),
    (datetime, "timestamp"),
]


def _spark_type(value: Any, column: str) -> str:
    for py, spark in _PY_TO_SPARK:
        if isinstance(value, py):
            return spark
    raise TypeError(
        f"payload column {column!r} holds {type(value).__name__} {value!r}; expected bool, int, "
        "float, str or datetime. Fix: give the input an explicit schema"
    )


def infer_payload_schema(payloads: Iterable[Mapping[str, Any]]) -> str:
    """A Spark DDL string for the payloads: columns in first-seen order, type of the first
    non-null value (int widened to double where floats appear too; all-null columns are strings)."""
    types: dict[str, str | None] = {}
    for payload in payloads:
        for name, value in payload.items():
            seen = types.get(name)
            if value is None:
                types.setdefault(name, None)
                continue
            t = _spark_type(value, name)
            if seen is None:
                types[name] = t
            elif {seen, t} == {"bigint", "double"}:
                types[name] = "double"
            elif seen != t:
                raise TypeError(
                    f"payload column {name!r} holds both {seen} and {t} values. "
                    "Fix: give the input an explicit schema, or make the values one type"
                )
    check_payload_names(types)
    return ", ".join(f"`{n}` {t or 'string'}" for n, t in types.items())


def check_payload_names(names: Iterable[str]) -> None:
    """Refuse payload column names the engine reserves for itself, and names with a dot or a
    backtick: the engine's plans name columns as Spark SQL reads them, where ``a.b`` is field
    ``b`` of a struct ``a``."""
    for name in names:
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(
                f"payload column {name!r} starts with {RESERVED_PREFIX!r}, which the engine "
                "reserves for its own columns. Fix: rename the column"
            )
        odd = [ch for ch in ".`" if ch in name]
        if odd:
            fixed = name.replace(".", "_").replace("`", "")
            raise ValueError(
                f"payload column {name!r} has {' and '.join(repr(ch) for ch in odd)} in its "
                "name; expected a name without '.' or '`' (Spark SQL reads 'a.b' as field 'b' "
                f"of a struct 'a'). Fix: rename the column, e.g. {fixed!r}"
            )


def schema_differences(expected: StructType, got: StructType) -> list[str]:
    """How ``got`` differs from ``expected``, column by column (name and type; the order of the
    columns and their nullability do not count): ``"missing column `a` bigint"``,
    ``"extra column `b` string"``, ``"column `v`: expected double, got bigint"``."""
    want = {f.name: f.dataType.simpleString() for f in expected.fields}
    have = {f.name: f.dataType.simpleString() for f in got.fields}
    out = [f"missing column `{n}` {t}" for n, t in want.items() if n not in have]
    out += [
        f"column `{n}`: expected {t}, got {have[n]}"
        for n, t in want.items()
        if n in have and have[n] != t
    ]
    out += [f"extra column `{n}` {t}" for n, t in have.items() if n not in want]
    return out
