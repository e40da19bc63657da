"""Repeatable aggregates (semantics §4): ``sum``, ``avg`` / ``mean`` and the variance family over
doubles, computed exactly and rounded once; ``sum`` over integers, added without overflow.

The rule (docs/decisions.md, "Doubles"): the exact sum of the values is a rational number that
does not depend on their order, so every way of cutting the values into epochs, partitions,
partial aggregates and Spark tasks gives the same result. Each aggregate returns the double
nearest to its exact value (ties to even):

* ``sum(x)`` of doubles or floats: the exact sum, rounded once;
* ``avg(x)`` / ``mean(x)`` of numbers other than decimals: the exact sum of ``CAST(x AS DOUBLE)``
  divided by the count, rounded once;
* ``var_samp`` / ``variance`` (``var_pop``): ``(S2 - S1**2 / n) / (n - 1)`` (``/ n``) with the
  exact sums ``S1`` of the values and ``S2`` of their squares, rounded once; ``stddev_samp`` /
  ``stddev`` / ``std`` (``stddev_pop``): the double nearest to the square root of that exact
  variance.

Special values as IEEE arithmetic has them, whatever the order: a NaN, or both infinities, make
NaN; one infinity makes that infinity (the variance family: NaN); a finite exact value beyond the
doubles rounds to an infinity. A zero result is ``+0.0``. No value (only nulls): null, as Spark's
own aggregates; a sample variance of one value: null, as Spark's.

A partial aggregate that is carried between epochs or merged across partitions is an
*expansion*: a short ``array<double>`` whose exact sum is the exact sum of the values it stands
for (``[]``: no value; ``[nan]``, ``[inf]``, ``[-inf]``: the special cases). Partials merge by
concatenation and are kept short by :func:`expansion`; :func:`rounded_sum` and
:func:`rounded_mean` round once, where a window's result is released.

A ``sum`` of integers (Spark's ``bigint``) overflows in ANSI mode as soon as a running total
leaves bigint, so whether it fails depends on the order of the values: 2**62, 2**62, -2**62 fails
added left to right and gives 2**62 added right to left. Its values are therefore added as
``decimal(38,0)`` (:data:`INTEGER_SUM`: no overflow before about 10**19 values), and the total
becomes bigint where the result is released (:func:`integer_total`): a total outside bigint fails
there, for every order and cut, naming the aggregate. Without ANSI mode Spark's bigint sums wrap
around, which does not depend on the order, and are left as they are.

The functions here run on executors (pandas UDFs over ``array<double>`` columns, one call per
result row or per partial row, never per event) and in the scan's Arrow code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "INTEGER_SUM",
    "MOMENTS",
    "SUMS",
    "compress_column",
    "compress_lists",
    "expansion",
    "integer_total",
    "mean_column",
    "moment_column",
    "rounded_mean",
    "rounded_moment",
    "rounded_sum",
    "sum_column",
]

#: Spark's names of the sums computed exactly (``sum`` only over doubles and floats)
SUMS = ("sum", "avg", "mean")
#: Spark's names of the variance family: name -> (delta degrees of freedom, square root)
MOMENTS = {
    "variance": (1, False),
    "var_samp": (1, False),
    "var_pop": (0, False),
    "stddev": (1, True),
    "std": (1, True),
    "stddev_samp": (1, True),
    "stddev_pop": (0, True),
}

#: the type integers are summed in (module docstring)
INTEGER_SUM = "decimal(38,0)"

_NAN = float("nan")
_INF = float("inf")
_TOP = 2.0**1023  # the largest power of two among the doubles


def expansion(values: Sequence[float] | np.ndarray) -> list[float]:
    """A short list of doubles whose exact sum is the exact sum of ``values`` (the largest
    first; ``[0.0]`` for values that sum to zero, ``[]`` for no values; ``[nan]`` / ``[inf]`` /
    ``[-inf]`` for the special cases of the module docstring).

    ``math.fsum`` returns the double nearest to the exact sum of its arguments; the residual
    exact sum minus that double is summed again the same way until it is zero (each round
    leaves a residual at least 2**52 times smaller: one or two rounds for most data)."""
    xs = np.asarray(values, dtype=np.float64)
    if xs.size == 0:
        return []
    finite = np.isfinite(xs)
    if not finite.all():
        special = xs[~finite]
        if np.isnan(special).any() or (special.max() > 0 and special.min() < 0):
            return [_NAN]
        return [float(special[0])]
    items = xs.tolist()
    parts: list[float] = []
    while True:
        try:
            s = math.fsum(items) if not parts else math.fsum([*items, *(-p for p in parts)])
        except OverflowError:  # a partial sum left the doubles: exact in rationals instead
            return _split(sum(map(Fraction, items), Fraction(0)))
        if s == 0.0:
            return parts or [0.0]
        parts.append(s)


def _split(exact: Fraction) -> list[float]:
    """:func:`expansion` of an exact rational that is a sum of doubles (it may lie beyond them)."""
    parts: list[float] = []
    while exact != 0:
        try:
            s = float(exact)
        except OverflowError:
            s = _TOP if exact > 0 else -_TOP
        parts.append(s)
        exact -= Fraction(s)
    return parts or [0.0]


def _special(parts: Sequence[float]) -> float | None:
    """The result of an expansion that stands for a special case, else None."""
    return parts[0] if len(parts) == 1 and not math.isfinite(parts[0]) else None


def _exact(parts: Iterable[float]) -> Fraction:
    return sum(map(Fraction, parts), Fraction(0))


def _nearest(exact: Fraction) -> float:
    """The double nearest to ``exact`` (ties to even; an infinity beyond the doubles), never
    ``-0.0``."""
    try:
        return float(exact) + 0.0
    except OverflowError:
        return _INF if exact > 0 else -_INF


def rounded_sum(parts: Sequence[float]) -> float | None:
    """The repeatable ``sum``: the double nearest to the exact sum of an expansion; None for no
    value."""
    if len(parts) == 0:
        return None
    special = _special(parts)
    if special is not None:
        return special
    try:
        return math.fsum(parts) + 0.0
    except OverflowError:
        return _nearest(_exact(parts))


def rounded_mean(parts: Sequence[float], n: int) -> float | None:
    """The repeatable ``avg``: the double nearest to the exact sum of an expansion divided by the
    count ``n`` of its values; None for no value."""
    if n == 0 or len(parts) == 0:
        return None
    special = _special(parts)
    if special is not None:
        return special
    return _nearest(_exact(parts) / n)


def rounded_moment(values: Sequence[float] | np.ndarray, ddof: int, root: bool) -> float | None:
    """The repeatable variance (``ddof`` 1: sample, 0: population) of ``values``, or with
    ``root`` its standard deviation: from the exact sums of the values and of their squares;
    None for fewer than ``ddof + 1`` values (Spark: null)."""
    xs = np.asarray(values, dtype=np.float64)
    n = xs.size
    if n == 0 or n <= ddof:
        return None
    if not np.isfinite(xs).all():
        return _NAN
    s1 = _exact(expansion(xs))
    variance = (_sum_of_squares(xs) - s1 * s1 / n) / (n - ddof)
    return _sqrt_nearest(variance) if root else _nearest(variance)


def _sum_of_squares(xs: np.ndarray) -> Fraction:
    """The exact sum of the squares of finite ``xs``. Where a square and its parts stay within
    the doubles, Veltkamp's split ``x = hi + lo`` (26 significant bits each) makes ``hi*hi``,
    ``2*hi*lo`` and ``lo*lo`` exact doubles, summed by :func:`expansion`; the other values are
    squared in rationals."""
    ax = np.abs(xs)
    safe = (ax == 0) | ((ax >= 2.0**-400) & (ax <= 2.0**500))
    x = xs[safe]
    c = x * 134217729.0  # 2**27 + 1
    hi = c - (c - x)
    lo = x - hi
    total = _exact(expansion(np.concatenate([hi * hi, 2.0 * hi * lo, lo * lo])))
    for v in xs[~safe].tolist():
        total += Fraction(v) ** 2
    return total


def _sqrt_nearest(x: Fraction) -> float:
    """The double nearest to the square root of ``x >= 0``: an integer square root with at least
    55 bits and a sticky bit for the remainder, so the one rounding to a double is correct."""
    if x == 0:
        return 0.0
    num, den = x.numerator, x.denominator
    # sqrt(x) = sqrt(num * den * 4**k) / (den * 2**k); pick k for 110+ bits under the root
    k = max(0, (220 - (num * den).bit_length()) // 2 + 1)
    scaled = num * den << (2 * k)
    root = math.isqrt(scaled)
    sticky = 1 if root * root != scaled else 0
    return _nearest(Fraction(2 * root + sticky, den << (k + 1)))


# -- Spark side: pandas UDFs over array<double> columns, one call per row of partials ---------


@cache
def _udfs() -> dict[str, Any]:
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("array<double>")  # type: ignore[call-overload]
    def compress(parts: pd.Series) -> pd.Series:
        return pd.Series([None if p is None else expansion(p) for p in parts])

    @pandas_udf("double")  # type: ignore[call-overload]
    def total(parts: pd.Series) -> pd.Series:
        return pd.Series([None if p is None else rounded_sum(p) for p in parts], dtype=object)

    @pandas_udf("double")  # type: ignore[call-overload]
    def mean(parts: pd.Series, n: pd.Series) -> pd.Series:
        got = [
            None if p is None else rounded_mean(p, int(k)) for p, k in zip(parts, n, strict=True)
        ]
        return pd.Series(got, dtype=object)

    moments = {name: pandas_udf(_moment(*how), "double") for name, how in MOMENTS.items()}
    return {"compress": compress, "total": total, "mean": mean, **moments}


def _moment(ddof: int, root: bool) -> Any:
    def moment(values: pd.Series) -> pd.Series:
        got = [None if v is None else rounded_moment(v, ddof, root) for v in values]
        return pd.Series(got, dtype=object)

    return moment


def compress_column(parts: Any) -> Any:
    """Column: the expansion ``parts`` (``array<double>``) made short again (:func:`expansion`)."""
    return _udfs()["compress"](parts)


def sum_column(parts: Any) -> Any:
    """Column: :func:`rounded_sum` of the expansion ``parts``."""
    return _udfs()["total"](parts)


def mean_column(parts: Any, n: Any) -> Any:
    """Column: :func:`rounded_mean` of the expansion ``parts`` and the count ``n``."""
    return _udfs()["mean"](parts, n)


def integer_total(total: Any, where: str) -> Any:
    """Column: the exact sum of integers ``total`` (a :data:`INTEGER_SUM` Column) as bigint,
    Spark's type for a sum of integers; a total outside bigint fails the epoch with an error
    naming ``where`` (the aggregate, e.g. ``"tumbling_window('10 ticks').aggregate(s=...)"``)."""
    from pyspark.sql import functions as F

    inside = total.between(-(2**63), 2**63 - 1)
    message = F.concat(
        F.lit(f"{where}: a sum of integers is "),
        total.cast("string"),
        F.lit(
            ", outside bigint (-2**63 to 2**63 - 1), Spark's type for a sum of integers. "
            "Expected sums within bigint. Fix: sum the values as decimals, e.g. "
            "F.sum(F.col(...).cast('decimal(38,0)')), or as doubles"
        ),
    )
    return F.when(total.isNull() | inside, total.cast("bigint")).otherwise(F.raise_error(message))


def moment_column(name: str, values: Any) -> Any:
    """Column: the variance-family aggregate ``name`` (a key of :data:`MOMENTS`) of the
    ``array<double>`` of all values (:func:`rounded_moment`)."""
    return _udfs()[name](values)


def compress_lists(lists: Any) -> Any:
    """Arrow: each row of ``lists`` (``list<double>``, or ``list<list<double>>`` of expansions to
    merge; null items are no values, as ``collect_list`` skips nulls) as one short expansion
    (``list<double>``). Runs in the scan, once per partial row."""
    import pyarrow as pa

    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    if pa.types.is_list(lists.type.value_type):
        lists = pa.array(
            [
                [v for part in row or () for v in part or () if v is not None]
                for row in lists.to_pylist()
            ],
            pa.list_(pa.float64()),
        )
    offsets = lists.offsets.to_numpy()
    values = lists.values
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    numbers = values.to_numpy(zero_copy_only=False)
    rows = []
    for i in range(len(lists)):
        lo, hi = offsets[i], offsets[i + 1]
        rows.append(expansion(numbers[lo:hi][valid[lo:hi]]))
    return pa.array(rows, pa.list_(pa.float64()))
