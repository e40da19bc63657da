"""Record helpers shared by the adapters that read and write JSON-like records (files, Kafka).

A private module: a small Spark DDL reader for payload schemas, the conversion of one record's
values (times, flags, edge types, payload columns) with the errors that say what is wrong, and the
JSON forms the output adapters write. Nothing here opens a file or a connection, so the functions
run the same on the driver, on executors and in tests without Spark.

The rules for times: int ticks (1 tick = 1 µs since the Unix epoch, UTC), a string of digits
(ticks), an ISO-8601 date-time *with* a UTC offset, an aware ``datetime``, or ``"+inf"``/``"-inf"``
where the engine accepts them. Naive date-times and floats are refused, never guessed.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from ctistream.engine.events import (
    EdgeType,
    Event,
    EventShape,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.schema import check_payload_names
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, format_ticks, to_datetime, to_ticks

_GOT_LIMIT = 120

# ---------------------------------------------------------------------------------------------
# Payload schemas: a small Spark DDL reader (no Spark needed on the driver or in tests)
# ---------------------------------------------------------------------------------------------

_TYPE_ALIASES = {
    "boolean": "boolean",
    "bool": "boolean",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "double": "double",
    "string": "string",
    "varchar": "string",
    "char": "string",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "date": "date",
    "decimal": "decimal",
    "dec": "decimal",
    "numeric": "decimal",
}
_INT_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
_SUPPORTED = (
    "boolean, tinyint, smallint, int, bigint, float, double, string, varchar(n), char(n), "
    "timestamp, date, decimal(p, s)"
)
_COLUMN_RE = re.compile(
    r"""^\s*(?P<name>`(?:[^`]|``)+`|[A-Za-z0-9_]+)\s*:?\s*
        (?P<type>[A-Za-z_]+)\s*
        (?:\(\s*(?P<p>\d+)\s*(?:,\s*(?P<s>\d+)\s*)?\))?\s*
        (?P<notnull>NOT\s+NULL)?\s*
        (?:COMMENT\s+'(?:[^'\\]|\\.)*')?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Column:
    """One payload column: canonical Spark type name, nullability, decimal precision/scale."""

    name: str
    type: str
    nullable: bool = True
    precision: int = 10
    scale: int = 0

    def describe(self) -> str:
        if self.type == "decimal":
            return f"decimal({self.precision}, {self.scale})"
        return self.type


def _split_top_level(ddl: str) -> list[str]:
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(ddl):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "`'":
            quote = ch
        elif ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(ddl[start:i])
            start = i + 1
    parts.append(ddl[start:])
    return [p for p in parts if p.strip()]


def _parse_ddl(ddl: str) -> list[_Column]:
    """Parse ``"id int, v double NOT NULL"`` into columns; ValueError naming what is unsupported."""
    columns: list[_Column] = []
    for part in _split_top_level(ddl):
        m = _COLUMN_RE.match(part)
        if m is None:
            raise ValueError(
                f"schema column {part.strip()!r} is not a simple 'name type' pair; expected one "
                f"of the types {_SUPPORTED}. Fix: write e.g. schema='id bigint, v double'; nested "
                "types (array, map, struct) are not read from files"
            )
        name = m["name"]
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        raw_type = m["type"].lower()
        canonical = _TYPE_ALIASES.get(raw_type)
        if canonical is None:
            raise ValueError(
                f"schema column {name!r} has type {m['type']!r}; expected one of {_SUPPORTED}. "
                "Fix: use a supported type, or leave the column out of the schema"
            )
        precision, scale = 10, 0
        if canonical == "decimal" and m["p"] is not None:
            precision, scale = int(m["p"]), int(m["s"] or 0)
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(
                    f"schema column {name!r} is decimal({precision}, {scale}); expected "
                    "1 <= precision <= 38 and scale <= precision. Fix: e.g. decimal(10, 2)"
                )
        columns.append(_Column(name, canonical, m["notnull"] is None, precision, scale))
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"schema names columns {duplicates} more than once; expected each column once. "
            "Fix: remove the duplicates"
        )
    check_payload_names(names)
    return columns


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ddl(columns: Sequence[tuple[str, str]]) -> str:
    check_payload_names(n for n, _ in columns)
    return ", ".join(f"{_quote(n)} {t}" for n, t in columns)


# ---------------------------------------------------------------------------------------------
# Value conversion
# ---------------------------------------------------------------------------------------------


class _Bad(Exception):
    """One record is malformed: what is wrong, what was expected, what was got, how to fix it."""

    def __init__(self, what: str, expected: str, got: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.expected, self.got, self.fix = what, expected, got, fix


def _got(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > _GOT_LIMIT:
        text = text[: _GOT_LIMIT - 3] + "..."
    return text if isinstance(value, str) else f"{type(value).__name__} {text}"


_TICKS_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_TIME_EXPECTED = (
    "int ticks (µs since 1970-01-01 UTC) or an ISO-8601 date-time with a UTC offset, "
    "e.g. 2024-01-01T00:00:00+00:00"
)


def _aware_ticks(value: datetime, what: str) -> int:
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise _Bad(
            f"{what} is a naive date-time",
            _TIME_EXPECTED,
            _got(value.isoformat()),
            "add the UTC offset to the value (Z or +HH:MM); naive times are never guessed",
        )
    return to_ticks(value)


def _parse_time(value: Any, what: str) -> int:
    """A time value of a row as ticks; raises _Bad for missing, naive, float or unparseable."""
    if value is None or value == "":
        raise _Bad(f"{what} is missing", _TIME_EXPECTED, _got(value), f"give every row a {what}")
    if isinstance(value, bool | float):
        raise _Bad(
            f"{what} has the wrong type",
            _TIME_EXPECTED,
            _got(value),
            "write times as int ticks or ISO strings; floats are never read as times",
        )
    if isinstance(value, int):
        if not MIN_TIME <= value <= MAX_TIME:
            raise _Bad(
                f"{what} is out of range",
                "ticks that fit in int64",
                _got(value),
                "check the unit: one tick is one microsecond",
            )
        return value
    if isinstance(value, datetime):
        return _aware_ticks(value, what)
    if isinstance(value, str):
        text = value.strip()
        lowered = text.lower()
        if lowered in ("+inf", "inf"):
            return MAX_TIME
        if lowered == "-inf":
            return MIN_TIME
        if _TICKS_RE.fullmatch(text):
            return _parse_time(int(text), what)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise _Bad(
                f"{what} is not a time",
                _TIME_EXPECTED,
                _got(value),
                "write an ISO-8601 date-time with its offset, or int ticks",
            ) from None
        if parsed.tzinfo is None:
            raise _Bad(
                f"{what} is a naive date-time",
                _TIME_EXPECTED,
                _got(value),
                "add the UTC offset to the value (Z or +HH:MM); naive times are never guessed",
            )
        return to_ticks(parsed)
    raise _Bad(
        f"{what} has the wrong type",
        _TIME_EXPECTED,
        _got(value),
        "write times as int ticks or ISO strings",
    )


def _parse_flag(value: Any, what: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "cti"):
            return True
        if lowered in ("false", "0", "", "insert"):
            return False
    raise _Bad(
        f"{what} is not a flag",
        "true/false, 1/0, 'CTI'/'INSERT', or empty",
        _got(value),
        "mark CTI rows with true and other rows with false or nothing",
    )


def _parse_edge(value: Any, what: str) -> EdgeType:
    if isinstance(value, str) and value.strip().lower() in ("start", "end"):
        return EdgeType(value.strip().upper())
    raise _Bad(
        f"{what} is not an edge type" if value not in (None, "") else f"{what} is missing",
        "'start' or 'end'",
        _got(value),
        "mark each row of an EDGE input as the start or the end of its event",
    )


def _coerce(column: _Column, value: Any, text: bool, config: str = "FileInputConfig") -> Any:
    """``value`` as the Python value of ``column``'s Spark type; raises _Bad on a mismatch.

    ``text`` is True for CSV, whose values are all strings: they are parsed. JSON and Parquet
    values must have the right type already, except that timestamps, dates and decimals are also
    taken from strings (JSON has no such types). ``config`` names the configuration class in the
    fix of the message.
    """
    if value is None or (text and value == ""):
        if not column.nullable:
            raise _Bad(
                f"payload column {column.name!r} is null",
                f"a {column.describe()} value (the column is NOT NULL)",
                _got(value),
                "give the column a value",
            )
        return None
    kind = column.type

    def bad(hint: str = "") -> _Bad:
        return _Bad(
            f"payload column {column.name!r} has the wrong type",
            f"a {column.describe()} value{hint}",
            _got(value),
            f"fix the value, or give {config} a schema with the column's real type",
        )

    if kind == "string":
        if isinstance(value, str):
            return value
        raise bad()
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if text and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise bad(" (true or false)")
    if kind in _INT_BITS:
        number: Any = value
        if text and isinstance(value, str) and _TICKS_RE.fullmatch(value.strip()):
            number = int(value.strip())
        if isinstance(number, bool) or not isinstance(number, int):
            raise bad()
        bits = _INT_BITS[kind]
        if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            raise bad(f" in [{-(2 ** (bits - 1))}, {2 ** (bits - 1) - 1}]")
        return number
    if kind in ("float", "double"):
        if text and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad() from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad()
        return float(value)
    if kind == "timestamp":
        if isinstance(value, datetime | int | str) and not isinstance(value, bool):
            what = f"payload column {column.name!r}"
            if isinstance(value, datetime):
                return to_datetime(_aware_ticks(value, what))
            ticks = _parse_time(value, what)
            if ticks in (MIN_TIME, MAX_TIME):
                raise bad(" (a finite time)")
            return to_datetime(ticks)
        raise bad(" (ISO-8601 with a UTC offset, or int ticks)")
    if kind == "date":
        if isinstance(value, date) and not isinstance(value, datetime):
            return value
        if isinstance(value, str):
            try:
                return date.fromisoformat(value.strip())
            except ValueError:
                raise bad(" (YYYY-MM-DD)") from None
        raise bad(" (YYYY-MM-DD)")
    if kind == "decimal":
        if isinstance(value, bool) or not isinstance(value, Decimal | int | float | str):
            raise bad()
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            raise bad() from None
        if not number.is_finite():
            raise bad(" (a finite number)")
        quantum = Decimal(1).scaleb(-column.scale)
        number = number.quantize(quantum, rounding=ROUND_HALF_UP)
        if len(number.as_tuple().digits) > column.precision and number != 0:
            raise bad(f" with at most {column.precision - column.scale} integer digits")
        return number
    raise bad()  # pragma: no cover - _parse_ddl only makes the kinds above


# ---------------------------------------------------------------------------------------------
# Building one event from a record
# ---------------------------------------------------------------------------------------------


def _event(
    shape: EventShape,
    start: int,
    start_what: str,
    fields: Mapping[str, Any],
    columns: Sequence[_Column],
    *,
    text: bool = False,
    end_field: str | None = None,
    edge_field: str | None = None,
    names: str = "column",
    config: str = "FileInputConfig",
) -> Event:
    """The INSERT event of ``shape`` a record describes; raises :class:`_Bad` naming the field.

    ``start`` is the parsed start (``start_what`` names where it came from); ``fields`` holds the
    payload ``columns`` and, by name, the end (``end_field``, INTERVAL and END edges) and the edge
    type (``edge_field``, EDGE). ``names`` is how messages call a field (``"column"``,
    ``"field"``); ``text`` and ``config`` are passed on to :func:`_coerce`.
    """
    if start in (MIN_TIME, MAX_TIME):
        raise _Bad(
            f"{start_what} is infinite",
            "a finite event start",
            format_ticks(start),
            "only CTIs may be at +inf or -inf",
        )
    payload = {c.name: _coerce(c, fields.get(c.name), text, config) for c in columns}
    edge: EdgeType | None = None
    if shape is EventShape.EDGE:
        assert edge_field is not None
        edge = _parse_edge(fields.get(edge_field), f"edge_{names} {edge_field!r}")
    end = 0
    if shape is EventShape.INTERVAL or edge is EdgeType.END:
        assert end_field is not None
        end_what = f"end_{names} {end_field!r}"
        end = _parse_time(fields.get(end_field), end_what)
        if end <= start:
            raise _Bad(
                f"{end_what} is not after the start",
                f"an end after the start {format_ticks(start)}",
                format_ticks(end),
                "swap the start and end, or bind the input as POINT for instants",
            )
    try:
        if shape is EventShape.POINT:
            return point(start, payload)
        if shape is EventShape.INTERVAL:
            return interval(start, end, payload)
        if edge is EdgeType.START:
            return edge_start(start, payload)
        return edge_end(start, end, payload)
    except (TypeError, ValueError) as e:  # the builders' own checks, as a backstop
        raise _Bad(
            "the record is not a valid event",
            f"a {shape.value} event",
            str(e),
            "fix the times of the record",
        ) from None


# ---------------------------------------------------------------------------------------------
# Writing: the JSON forms of times and values
# ---------------------------------------------------------------------------------------------


def _format_time(ticks: int) -> str:
    if ticks == MIN_TIME:
        return "-inf"
    if ticks == MAX_TIME:
        return "+inf"
    try:
        return to_datetime(ticks).isoformat()
    except (OverflowError, ValueError):
        return str(ticks)  # beyond year 9999: plain ticks, which the input adapter reads back


def _json_ready(value: Any) -> Any:
    """A payload value as a JSON record holds it: a struct (a PySpark ``Row``) as an object of
    its fields, arrays and maps with their values so (JSON would write a ``Row``, a tuple, as an
    array and lose its field names)."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _json_ready(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as JSON")
