"""Key values as Spark compares, groups and orders them (the reference follows
docs/decisions.md: a join's keys, a group's keys, the order of results)."""

from __future__ import annotations

import math
from typing import Any

#: Spark's one NaN: every NaN key is this object, so NaNs group and join together
_NAN = float("nan")


def spark_key(value: Any) -> Any:
    """A key value as Spark groups and joins it: every NaN one value, -0.0 the same as 0.0."""
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if value == 0.0:
            return 0.0
    return value


def keys_equal(a: Any, b: Any) -> bool:
    """Spark's equality of two join keys: nulls never equal, NaN equal to NaN, -0.0 to 0.0, keys
    of two numeric types compared in the wider one (a bigint and a double as doubles)."""
    if a is None or b is None:
        return False
    a, b = spark_key(a), spark_key(b)
    if a is _NAN or b is _NAN:
        return a is b
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
    if numbers and isinstance(a, float) != isinstance(b, float):
        return float(a) == float(b)
    return bool(a == b)


def spark_order(value: Any) -> tuple:
    """``value``'s place in Spark's ascending order: nulls first, NaN above every number."""
    if value is None:
        return (0, 0)
    if isinstance(value, int | float) and not isinstance(value, bool):
        nan = isinstance(value, float) and math.isnan(value)
        return (1, (nan, 0.0 if nan else value))
    return (1, value)
