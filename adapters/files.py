"""File adapters: JSON lines, CSV and Parquet in; JSON lines and CSV out.

**Input.** :class:`FileInputFactory` makes a :class:`FileInputAdapter` from a
:class:`FileInputConfig`. ``path`` is a file, a directory (its files, not recursive, skipping names
that start with ``.`` or ``_``) or a glob; every matched file is one source partition, named by its
absolute path, partitions in sorted order. Each row of a file is one item::

    {"ts": "2024-01-01T00:00:00+00:00", "id": 1, "v": 2.5}          POINT at ts
    {"ts": 10, "te": 20, "id": 1}                                   INTERVAL [ts, te), int ticks
    {"ts": 10, "side": "start", "id": 1} / {..., "side": "end", "te": 20}   EDGE halves
    {"ts": 15, "is_cti": true}                                      explicit CTI at ts

    cfg = FileInputConfig(path="in/*.jsonl", time_column="ts", end_column="te",
                          cti_column="is_cti", schema="id bigint, v double")

* **Offsets** are the 0-based record index in the file (header and blank lines are not records).
  After the last record, :meth:`FileInputAdapter.read` yields one :attr:`ItemKind.END` item at
  offset ``n`` = the number of records.
* **Arrival**: by default the record index, so several files interleave row by row (row ``i`` of
  every file arrives at ``i``) and the END item arrives at ``n``. With ``arrival_column`` the stamp
  is read from the row (int ticks, ISO-8601 with offset, or a Parquet timestamp) and must not
  decrease within a file: a row whose arrival is below the largest arrival of an earlier row
  (counting every earlier row whose arrival parses) is malformed. The END item then arrives at that
  largest arrival (0 for a file with no such row).
* **Times** (``time_column``, ``end_column``, ``arrival_column``): int ticks (1 tick = 1 µs since
  the Unix epoch, UTC), a string of digits (ticks), an ISO-8601 date-time *with* a UTC offset, a
  zone-aware Parquet timestamp (sub-microsecond digits are dropped), or ``"+inf"``/``"-inf"``
  where the engine accepts them (a CTI, an interval end). Naive date-times and floats are refused.
* **Flags**: ``cti_column`` is true for ``true``, ``1``, ``"true"``, ``"1"`` or ``"CTI"`` and false
  for ``false``, ``0``, ``"false"``, ``"0"``, ``"INSERT"``, empty or null; ``edge_column`` is
  ``"start"`` or ``"end"`` (any case). So a file written by :class:`FileOutputAdapter` reads back
  with ``time_column="start", end_column="end", edge_column="edge", cti_column="kind"``.
* **Payload**: with ``schema`` (Spark DDL), exactly those columns, which may include the time
  column to keep it in the payload; other columns are ignored, and a missing value (or, in CSV,
  an empty one) is null. Without it the schema is inferred on the driver: Parquet from the
  first file's schema; JSON lines from the first :data:`INFER_ROWS` event rows (JSON types: boolean,
  bigint, double, string); CSV from the first file's header and the first :data:`INFER_ROWS` event
  rows (bigint, double, boolean, else string). Inference never makes timestamps from strings: give
  a schema for that. Inferred payloads exclude the time, end, edge, CTI and arrival columns.
  Supported payload types: boolean, tinyint, smallint, int, bigint, float, double, string
  (varchar/char), timestamp (values come out as UTC-aware datetimes), date, decimal(p, s).
* **Malformed records** raise :class:`engine.errors.MalformedRecordError` naming the file, the
  1-based line (row, for Parquet), the offset, what was expected, what was got and the fix. The
  reader is a generator, so every item before the bad record has been yielded first. With
  ``dead_letter_path`` the record is appended there instead, as one JSON line
  ``{"file", "line", "record", "error"}``, and reading goes on. Each epoch's read stops at its
  cut and the next starts where it stopped, so a run writes each letter once however it is cut;
  dead letters are still at-least-once: an epoch that is replayed (a restart) writes its dead
  letters again; deduplicate by ``(file, line)``. Problems that make the rest of a file
  unreadable (a CSV syntax error, undecodable CSV text) always raise.

**Output.** :class:`FileOutputFactory` makes a :class:`FileOutputAdapter` that appends each epoch's
items as rows ``{"kind", "start", "end", "edge", <payload columns>}`` and keeps the sidecar
``<path>.epoch`` (see :class:`FileOutputAdapter` for the durability rules).

Who calls what, and where: the engine calls ``create``, :meth:`FileInputAdapter.partitions` and
:meth:`FileInputAdapter.payload_schema` on the driver, pickles the adapter (it holds only its
configuration, shape and resolved schema) and calls :meth:`FileInputAdapter.read` on executors,
where the files are opened. Output adapters live on the driver only.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import glob
import hashlib
import io
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import PurePath
from typing import Annotated, Any, ClassVar, Literal

from ctistream.adapters._records import (
    _FLOAT_RE,
    _GOT_LIMIT,
    _SUPPORTED,
    _TICKS_RE,
    _Bad,
    _Column,
    _ddl,
    _event,
    _format_time,
    _got,
    _json_default,
    _json_ready,
    _parse_ddl,
    _parse_flag,
    _parse_time,
)
from ctistream.engine._model import Model
from ctistream.engine.checkpoint import DamagedFile, read_checked, write_checked
from ctistream.engine.contracts import (
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    SourceItem,
)
from ctistream.engine.errors import CheckpointDamageError, MalformedRecordError, QueryBuildError
from ctistream.engine.events import Event, EventKind, EventShape, cti
from ctistream.engine.schema import infer_payload_schema
from ctistream.engine.settings import AdapterAdvanceTimeSettings
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, format_ticks
from pydantic import BeforeValidator, ConfigDict, Field, model_validator

__all__ = [
    "INFER_ROWS",
    "FileFormat",
    "FileInputAdapter",
    "FileInputConfig",
    "FileInputFactory",
    "FileOutputAdapter",
    "FileOutputConfig",
    "FileOutputFactory",
]

#: How many event rows schema inference reads (JSON lines and CSV), across files in order.
INFER_ROWS = 1000

FileFormat = Literal["jsonl", "csv", "parquet"]

_EXTENSIONS: dict[str, FileFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_DEAD_LETTER_HINT = (
    " Or set FileInputConfig.dead_letter_path to skip malformed records into a file."
)
_PARQUET_BATCH_ROWS = 4096
#: Rows per batch of the columnar Parquet path.
_COLUMNAR_BATCH_ROWS = 65536


def _plain(t: Any) -> Any:
    """The Arrow type the engine hands to Spark for a file column type (``None``: no plain
    equivalent): nanosecond timestamps become microseconds, large strings strings."""
    import pyarrow as pa

    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz) if t.tz is not None else None
    if pa.types.is_large_string(t):
        return pa.string()
    return t


def _plain_array(a: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    target = _plain(a.type)
    return a if target == a.type else a.cast(target, safe=False)


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


_Path = Annotated[str, BeforeValidator(_fspath)]


# ---------------------------------------------------------------------------------------------
# Reading files record by record
# ---------------------------------------------------------------------------------------------


def _edges_digest(path: str, size: int) -> str:
    """The SHA-256 (16 hex digits) of the first and last MiB of the first ``size`` bytes of the
    file at ``path`` (FileInputAdapter.content)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(min(size, _EDGE_BYTES)))
        if size > _EDGE_BYTES:
            start = max(_EDGE_BYTES, size - _EDGE_BYTES)
            f.seek(start)
            digest.update(f.read(size - start))
    return digest.hexdigest()[:16]


#: how much of each end of an input file its content digest reads (FileInputAdapter.content)
_EDGE_BYTES = 1 << 20


@dataclass(slots=True)
class _Row:
    """One record: its 0-based index (the offset), 1-based line (row for Parquet), its raw form
    for dead letters, and its fields (None when ``error`` says why they could not be read)."""

    index: int
    line: int
    raw: Any
    fields: Mapping[str, Any] | None
    error: _Bad | None = None


class _Tally:
    """How many records a reader has passed, skipped ones included."""

    rows: int = 0


class _Fatal(Exception):
    """The rest of a file cannot be read: not skippable by dead-lettering."""

    def __init__(self, line: int, bad: _Bad) -> None:
        super().__init__(bad.what)
        self.line, self.bad = line, bad


def _jsonl_rows(path: str, start: int, parse_prefix: bool, tally: _Tally) -> Iterator[_Row]:
    with open(path, "rb") as f:
        index = 0
        for line_no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            if index < start and not parse_prefix:
                index += 1
                tally.rows = index
                continue
            row = _Row(index, line_no, None, None)
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                row.raw = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                row.error = _Bad(
                    "the line is not UTF-8 text", "UTF-8 JSON", f"{e}", "write the file as UTF-8"
                )
            else:
                row.raw = text
                try:
                    fields = json.loads(text)
                except json.JSONDecodeError as e:
                    row.error = _Bad(
                        f"the line is not valid JSON ({e.msg} at column {e.colno})",
                        "one JSON object per line",
                        _got(text),
                        "repair the line",
                    )
                else:
                    if isinstance(fields, dict):
                        row.fields = fields
                    else:
                        row.error = _Bad(
                            "the line is not a JSON object",
                            "one JSON object per line",
                            _got(text),
                            'write each record as {"column": value, ...}',
                        )
            index += 1
            tally.rows = index
            yield row


def _utf8_lines(f: Any) -> Iterator[str]:
    # Decoding line by line makes a decoding error surface at its own line.
    for number, raw in enumerate(f):
        yield raw.decode("utf-8-sig" if number == 0 else "utf-8")


def _csv_rows(path: str, start: int, parse_prefix: bool, tally: _Tally) -> Iterator[_Row]:
    with open(path, "rb") as f:
        reader = csv.reader(_utf8_lines(f))
        previous = 0
        try:
            header: list[str] | None = None
            for fields in reader:
                line = previous + 1
                previous = reader.line_num
                if not fields:
                    continue
                if header is None:
                    header = fields
                    continue
                index = tally.rows
                tally.rows = index + 1
                if index < start and not parse_prefix:
                    continue
                if len(fields) != len(header):
                    yield _Row(
                        index,
                        line,
                        fields,
                        None,
                        _Bad(
                            "the row has the wrong number of fields",
                            f"{len(header)} fields, as in the header",
                            f"{len(fields)} fields {_got(fields)}",
                            "quote fields that contain commas, and give every row every column",
                        ),
                    )
                else:
                    record = dict(zip(header, fields, strict=True))
                    yield _Row(index, line, record, record)
        except (csv.Error, UnicodeDecodeError) as e:
            raise _Fatal(
                previous + 1,
                _Bad(
                    "the file cannot be read as CSV from here on",
                    "UTF-8 CSV with a header line",
                    str(e),
                    "repair the file",
                ),
            ) from e


def _parquet_rows(
    path: str, start: int, prefix_columns: list[str] | None, tally: _Tally
) -> Iterator[_Row]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    try:
        names = set(pf.schema_arrow.names)
        index = 0
        for group in range(pf.num_row_groups):
            n = pf.metadata.row_group(group).num_rows
            columns: list[str] | None = None
            if index + n <= start:
                columns = [c for c in prefix_columns or [] if c in names]
                if not columns:
                    index += n
                    tally.rows = index
                    continue
            for batch in pf.iter_batches(
                batch_size=_PARQUET_BATCH_ROWS, row_groups=[group], columns=columns
            ):
                for record in _normalise_timestamps(batch).to_pylist():
                    tally.rows = index + 1
                    yield _Row(index, index + 1, record, record)
                    index += 1
        tally.rows = index
    finally:
        pf.close()


def _normalise_timestamps(batch: Any) -> Any:
    import pyarrow as pa

    arrays, changed = [], False
    for array in batch.columns:
        t = array.type
        if pa.types.is_timestamp(t) and t.unit == "ns":
            # Ticks are microseconds; nanosecond digits are dropped, as Spark does.
            array = array.cast(pa.timestamp("us", tz=t.tz), safe=False)
            changed = True
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names) if changed else batch


def _rows(
    fmt: FileFormat,
    path: str,
    start: int,
    prefix_columns: list[str] | None,
    tally: _Tally,
) -> Iterator[_Row]:
    if fmt == "jsonl":
        return _jsonl_rows(path, start, prefix_columns is not None, tally)
    if fmt == "csv":
        return _csv_rows(path, start, prefix_columns is not None, tally)
    return _parquet_rows(path, start, prefix_columns, tally)


# ---------------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------------


class FileInputConfig(Model):
    """Where and how to read an input from files (see the module docstring for the formats).

    ``schema`` (alias of the field ``schema_``) is the payload as Spark DDL; by default inferred.
    ``advance_time`` is what :meth:`FileInputFactory.declare_advance_time_properties` declares;
    binding-level ``AdvanceTimeSettings`` override it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    path: _Path
    format: FileFormat | None = None
    time_column: str
    end_column: str | None = None
    edge_column: str | None = None
    cti_column: str | None = None
    arrival_column: str | None = None
    schema_: str | None = Field(default=None, alias="schema")
    dead_letter_path: Annotated[str | None, BeforeValidator(_fspath)] = None
    advance_time: AdapterAdvanceTimeSettings | None = None

    @model_validator(mode="after")
    def _check(self) -> FileInputConfig:
        if not self.path.strip():
            raise ValueError("path must name a file, a directory or a glob; got an empty string")
        roles = {
            "time_column": self.time_column,
            "end_column": self.end_column,
            "edge_column": self.edge_column,
            "cti_column": self.cti_column,
            "arrival_column": self.arrival_column,
        }
        used: dict[str, str] = {}
        for role, column in roles.items():
            if column is None:
                continue
            if not column:
                raise ValueError(f"{role} must name a column; got an empty string")
            if column in used:
                raise ValueError(
                    f"{role} and {used[column]} are both {column!r}; expected a different column "
                    "for each role. Fix: name distinct columns"
                )
            used[column] = role
        if self.schema_ is not None:
            _parse_ddl(self.schema_)
        return self

    @property
    def special_columns(self) -> frozenset[str]:
        """The columns that are not payload when the schema is inferred."""
        return frozenset(
            c
            for c in (
                self.time_column,
                self.end_column,
                self.edge_column,
                self.cti_column,
                self.arrival_column,
            )
            if c is not None
        )


class FileInputAdapter(InputAdapter):
    """Reads the files of a :class:`FileInputConfig` as events of one shape, one partition per file.

    Made by :class:`FileInputFactory` on the driver. :meth:`partitions` and :meth:`payload_schema`
    run on the driver; :meth:`read` runs on executors, opening its file there. The adapter holds
    its config, its shape and, once :meth:`payload_schema` has run, the resolved schema string, so
    executors never infer a schema of their own.
    """

    bounded: ClassVar[bool] = True

    def __init__(self, config: FileInputConfig, shape: EventShape) -> None:
        shape = EventShape(shape)
        needs_end = shape is not EventShape.POINT
        if needs_end and config.end_column is None:
            raise QueryBuildError(
                f"a {shape.value} file input needs end_column; got none for {config.path!r}. "
                "Fix: FileInputConfig(..., end_column='<column of the end time>')"
            )
        if not needs_end and config.end_column is not None:
            raise QueryBuildError(
                f"a POINT file input has no end; got end_column={config.end_column!r} for "
                f"{config.path!r}. Fix: bind the input as INTERVAL, or drop end_column"
            )
        if (shape is EventShape.EDGE) != (config.edge_column is not None):
            raise QueryBuildError(
                f"edge_column is for EDGE inputs only, and every EDGE input needs one; got shape "
                f"{shape.value} with edge_column={config.edge_column!r} for {config.path!r}. "
                "Fix: give edge_column exactly when binding as EDGE"
            )
        self._config = config
        self._shape = shape
        self._schema: str | None = config.schema_
        self._columns: list[_Column] | None = None

    # -- driver -------------------------------------------------------------------------------
    def partitions(self) -> Sequence[str]:
        """The matched files as absolute paths, sorted. Raises FileNotFoundError when none match,
        and ValueError when their format cannot be told or differs between files."""
        return [path for path, _ in self._files()]

    def content(self) -> str:
        """Per matched file: its name, size and the SHA-256 of its first and last MiB."""
        return "; ".join(
            f"{os.path.basename(path)} {os.path.getsize(path)} bytes "
            f"{_edges_digest(path, os.path.getsize(path))}"
            for path, _ in self._files()
        )

    def holds(self, content: str) -> bool:
        """Whether every file still begins with what :meth:`content` recorded: rows appended to
        a file since are new input, read after what was read (rows replaced are not)."""
        files = [path for path, _ in self._files()]
        recorded = [part.split(" ") for part in content.split("; ")]
        if [os.path.basename(p) for p in files] != [r[0] for r in recorded]:
            return False
        for path, (_, size, _, digest) in zip(files, recorded, strict=True):
            if os.path.getsize(path) < int(size) or _edges_digest(path, int(size)) != digest:
                return False
        return True

    def size_hint(self) -> int:
        """At most how many items the files hold: per file its END, and a Parquet file's row
        count (its footer) or a text file's size in bytes (a record takes at least one)."""
        import pyarrow.parquet as pq

        total = 0
        for path, fmt in self._files():
            rows = pq.read_metadata(path).num_rows if fmt == "parquet" else os.path.getsize(path)
            total += rows + 1
        return total

    def payload_schema(self) -> str:
        """The payload as Spark DDL: the configured schema, else inferred (and remembered)."""
        if self._schema is None:
            self._schema = self._infer()
        return self._schema

    # -- executor -----------------------------------------------------------------------------
    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        """Yield the items of file ``partition`` from record ``start_offset`` on, then END.

        Deterministic for an unchanged file. Records before ``start_offset`` are passed over
        (their arrival stamps are still read, so the arrival checks and the END stamp do not
        depend on where a read starts) and never dead-lettered again.
        """
        cfg = self._config
        columns = self._payload_columns()
        fmt = self._format_of(partition)
        text = fmt == "csv"
        arrival_column = cfg.arrival_column
        tally = _Tally()
        prefix = [arrival_column] if arrival_column is not None else None
        high: int | None = None  # largest arrival of any earlier row whose arrival parses
        rows = _rows(fmt, partition, start_offset, prefix, tally)
        try:
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    break
                except _Fatal as fatal:
                    raise MalformedRecordError(
                        self._message(partition, fmt, fatal.line, None, fatal.bad, hint=False)
                    ) from None
                if row.index < start_offset:
                    if row.fields is not None and arrival_column is not None:
                        with contextlib.suppress(_Bad):  # it was reported when first read
                            high = self._arrival(row.fields, high)
                    continue
                try:
                    if row.error is not None:
                        raise row.error
                    assert row.fields is not None
                    if arrival_column is None:
                        arrival = row.index
                    else:
                        arrival = high = self._arrival(row.fields, high)
                    item = self._item(row.index, row.fields, arrival, columns, text)
                except _Bad as bad:
                    message = self._message(
                        partition,
                        fmt,
                        row.line,
                        row.index,
                        bad,
                        hint=cfg.dead_letter_path is None,
                    )
                    if cfg.dead_letter_path is None:
                        raise MalformedRecordError(message) from None
                    if self.side_effects:
                        self._dead_letter(partition, row, message)
                    continue
                yield item
        finally:
            rows.close()
        n = tally.rows
        if n >= start_offset:
            end_arrival = n if arrival_column is None else (high if high is not None else 0)
            yield SourceItem(ItemKind.END, n, end_arrival)

    def read_batches(
        self, partition: str, start_offset: int, payload: Any, until: int | None = None
    ) -> Iterator[Any]:
        """:meth:`read` as Arrow batches (``until`` as the base class takes it). Parquet files
        are read column by column, with no Python object per row, while every row is
        well-formed and every column has the type the row path would accept without conversion
        (timestamps with a zone or int64 ticks, a boolean CTI flag, a string edge column,
        payload columns of the schema's exact types); from the first batch where that does not
        hold, the rest of the file goes through :meth:`read`, so errors, dead letters and
        offsets are exactly the same."""
        if self._format_of(partition) != "parquet":
            yield from super().read_batches(partition, start_offset, payload, until)
            return
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(partition)
        try:
            columns = self._columnar_columns(pf.schema_arrow, payload)
            index, high = 0, None
            if columns is not None:
                # row groups wholly before the start: only their arrival stamps are read
                groups = range(pf.num_row_groups)
                for group in groups:
                    n = pf.metadata.row_group(group).num_rows
                    if index + n > start_offset:
                        break
                    high = self._latest_arrival(pf, group, high)
                    index += n
                    groups = range(group + 1, pf.num_row_groups)
                for batch in pf.iter_batches(
                    batch_size=_COLUMNAR_BATCH_ROWS, columns=columns, row_groups=groups
                ):
                    done = self._columnar_batch(batch, index, high, payload)
                    if done is None:
                        break
                    out, high = done
                    n = batch.num_rows
                    if index + n > start_offset:
                        yield out.slice(max(0, start_offset - index))
                        if until is not None and out.column("__arr")[n - 1].as_py() >= until:
                            return  # the engine takes nothing from here on
                    index += n
                else:
                    if index >= start_offset:
                        yield self._end_batch(index, high, payload)
                    return
            yield from super().read_batches(partition, max(index, start_offset), payload, until)
        finally:
            pf.close()

    def _latest_arrival(self, pf: Any, group: int, high: int | None) -> int | None:
        """``high`` raised to the latest finite arrival stamp of row group ``group``, as
        :meth:`read` keeps it over the rows before its start."""
        import pyarrow as pa
        import pyarrow.compute as pc

        column = self._config.arrival_column
        if column is None:
            return high
        a = pf.read_row_group(group, columns=[column]).column(0)
        if pa.types.is_dictionary(a.type):
            a = a.dictionary_decode()
        if pa.types.is_timestamp(a.type):
            a = a.cast(pa.timestamp("us", tz=a.type.tz), safe=False)
        a = a.cast(pa.int64())
        finite = pc.and_(pc.not_equal(a, MIN_TIME), pc.not_equal(a, MAX_TIME))
        latest = pc.max(a.filter(pc.fill_null(finite, False))).as_py()
        return high if latest is None else latest if high is None else max(high, latest)

    def _columnar_columns(self, file_schema: Any, payload: Any) -> list[str] | None:
        """The file columns the columnar path reads, or None when a type rules it out."""
        import pyarrow as pa

        cfg = self._config
        names = set(file_schema.names)

        def kind(name: str) -> pa.DataType | None:
            t = file_schema.field(name).type
            return t.value_type if pa.types.is_dictionary(t) else t

        def is_time(name: str | None) -> bool:
            if name is None or name not in names:
                return name is None
            t = kind(name)
            return pa.types.is_int64(t) or (pa.types.is_timestamp(t) and t.tz is not None)

        times = [cfg.time_column, cfg.end_column, cfg.arrival_column]
        if cfg.time_column not in names or not all(is_time(c) for c in times):
            return None
        for name, test in (
            (cfg.cti_column, pa.types.is_boolean),
            (cfg.edge_column, pa.types.is_string),
        ):
            if name is not None and name in names and not test(kind(name)):
                return None
        for f in payload:
            if f.name in names and _plain(kind(f.name)) != f.type:
                return None
        wanted = [*times, cfg.cti_column, cfg.edge_column, *payload.names]
        return [c for c in dict.fromkeys(wanted) if c is not None and c in names]

    def _columnar_batch(
        self, batch: Any, index: int, high: int | None, payload: Any
    ) -> tuple[Any, int | None] | None:
        """The raw batch of ``batch`` (rows ``index``..), and the new arrival high mark; None
        when a row is malformed (the row path then reports or dead-letters it)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        cfg, shape, n = self._config, self._shape, batch.num_rows
        names = set(batch.schema.names)

        def column(name: str | None) -> Any:
            if name is None or name not in names:
                return None
            a = batch.column(name)
            return a.dictionary_decode() if pa.types.is_dictionary(a.type) else a

        def ticks(name: str | None) -> Any:
            a = column(name)
            if a is None:
                return pa.nulls(n, pa.int64())
            if pa.types.is_timestamp(a.type):
                a = a.cast(pa.timestamp("us", tz=a.type.tz), safe=False)
            return a.cast(pa.int64())

        ok = pc.is_valid(start := ticks(cfg.time_column))
        flags = column(cfg.cti_column)
        is_cti = pa.repeat(False, n) if flags is None else pc.fill_null(flags, False)
        event = pc.invert(is_cti)
        finite = pc.and_(pc.not_equal(start, MIN_TIME), pc.not_equal(start, MAX_TIME))
        ok = pc.and_(ok, pc.or_(is_cti, finite))
        edge = pa.nulls(n, pa.string())
        if shape is EventShape.POINT:
            end = pc.if_else(is_cti, start, pc.add(start, 1))
        else:
            end = ticks(cfg.end_column)
            after = pc.fill_null(pc.greater(end, start), False)
            needs_end = event
            if shape is EventShape.EDGE:
                raw_edge = column(cfg.edge_column)
                upper = pc.utf8_upper(raw_edge) if raw_edge is not None else edge
                known = pc.fill_null(pc.is_in(upper, value_set=pa.array(["START", "END"])), False)
                ok = pc.and_(ok, pc.or_(is_cti, known))
                edge = pc.if_else(is_cti, pa.scalar(None, pa.string()), upper)
                needs_end = pc.and_(event, pc.fill_null(pc.equal(upper, "END"), False))
                end = pc.if_else(pc.fill_null(pc.equal(upper, "START"), False), MAX_TIME, end)
            ok = pc.and_(ok, pc.or_(pc.invert(needs_end), after))
            end = pc.if_else(is_cti, start, end)
        if cfg.arrival_column is None:
            arrival = pa.array(range(index, index + n), pa.int64())
        else:
            arrival = ticks(cfg.arrival_column)
            ok = pc.and_(ok, pc.is_valid(arrival))
            bounded = pc.and_(pc.not_equal(arrival, MIN_TIME), pc.not_equal(arrival, MAX_TIME))
            ok = pc.and_(ok, pc.fill_null(bounded, False))
        if not pc.all(pc.fill_null(ok, False)).as_py():
            return None
        if cfg.arrival_column is not None and n:
            floor = pa.concat_arrays([pa.array([high if high is not None else MIN_TIME]), arrival])
            if not pc.all(pc.greater_equal(floor[1:], floor[:-1])).as_py():
                return None
            high = arrival[n - 1].as_py()
        kind = pc.if_else(is_cti, ItemKind.CTI.value, ItemKind.EVENT.value)
        header = {
            "__kind": kind,
            "__edge": edge,
            "__start": start,
            "__end": end,
            "__arr": arrival,
            "__off": pa.array(range(index, index + n), pa.int64()),
        }
        values = [
            _plain_array(column(f.name)) if f.name in names else pa.nulls(n, f.type)
            for f in payload
        ]
        if flags is not None:  # a CTI row has no payload
            values = [pc.if_else(is_cti, pa.scalar(None, v.type), v) for v in values]
        arrays = [*header.values(), *values]
        return pa.RecordBatch.from_arrays(arrays, names=[*header, *payload.names]), high

    def _end_batch(self, n: int, high: int | None, payload: Any) -> Any:
        import pyarrow as pa

        arrival = n if self._config.arrival_column is None else (high if high is not None else 0)
        row = {"__kind": ItemKind.END.value, "__arr": arrival, "__off": n}
        header = [
            pa.field("__kind", pa.string()),
            pa.field("__edge", pa.string()),
            pa.field("__start", pa.int64()),
            pa.field("__end", pa.int64()),
            pa.field("__arr", pa.int64()),
            pa.field("__off", pa.int64()),
        ]
        return pa.RecordBatch.from_pylist([row], schema=pa.schema([*header, *payload]))

    # -- helpers ------------------------------------------------------------------------------
    def reads_file(self, path: str) -> bool:
        """Whether ``path`` is, or once it exists would be, one of this input's files: the
        file named, a file directly in the directory named (not a ``.`` or ``_`` name), or a
        match of the glob."""
        cfg = self._config
        pattern = os.path.abspath(os.path.expanduser(cfg.path))
        if cfg.dead_letter_path and path == os.path.abspath(cfg.dead_letter_path):
            return False
        if glob.has_magic(pattern):
            name, wanted = os.path.basename(path), os.path.basename(pattern)
            if name.startswith(".") and not wanted.startswith("."):
                return False  # a glob's wildcards skip hidden names
            if "**" in pattern:  # any depth (none included) below the part before it
                head, tail = pattern.split("**", 1)
                rest = path[len(head) :]
                return path.startswith(head) and any(
                    fnmatch.fnmatch(rest, p) for p in ("*" + tail, tail.lstrip(os.sep))
                )
            return PurePath(path).match(pattern)
        if os.path.isdir(pattern):
            name = os.path.basename(path)
            return os.path.dirname(path) == pattern and not name.startswith((".", "_"))
        return path == pattern

    def _files(self) -> list[tuple[str, FileFormat]]:
        cfg = self._config
        path = os.path.expanduser(cfg.path)
        if glob.has_magic(path):
            found = [p for p in glob.glob(path, recursive=True) if os.path.isfile(p)]
        elif os.path.isdir(path):
            found = [
                os.path.join(path, name)
                for name in os.listdir(path)
                if not name.startswith((".", "_")) and os.path.isfile(os.path.join(path, name))
            ]
        elif os.path.isfile(path):
            found = [path]
        else:
            found = []
        dead = os.path.abspath(cfg.dead_letter_path) if cfg.dead_letter_path else None
        files = sorted({os.path.abspath(p) for p in found} - {dead})
        if not files:
            raise FileNotFoundError(
                f"no input files match path {cfg.path!r} (a file, a directory or a glob; looked "
                f"in {os.path.abspath(path)!r}). Fix: check the path, or write the files first"
            )
        result = [(f, self._format_of(f)) for f in files]
        formats = sorted({fmt for _, fmt in result})
        if len(formats) > 1:
            raise ValueError(
                f"files matching {cfg.path!r} have different formats {formats}; expected one "
                "format per input. Fix: narrow the path with a glob such as '*.jsonl'"
            )
        return result

    def _format_of(self, path: str) -> FileFormat:
        if self._config.format is not None:
            return self._config.format
        ext = os.path.splitext(path)[1].lower()
        fmt = _EXTENSIONS.get(ext)
        if fmt is None:
            raise ValueError(
                f"cannot tell the format of {path!r} from its extension {ext!r}; expected one of "
                f"{sorted(_EXTENSIONS)}. Fix: set FileInputConfig(format='jsonl'|'csv'|'parquet'), "
                "or narrow the path with a glob"
            )
        return fmt

    def _payload_columns(self) -> list[_Column]:
        if self._columns is None:
            self._columns = _parse_ddl(self.payload_schema())
        return self._columns

    def _infer(self) -> str:
        files = self._files()
        fmt = files[0][1]
        special = self._config.special_columns
        if fmt == "parquet":
            return self._infer_parquet(files[0][0], special)
        payloads: list[dict[str, Any]] = []
        for path, _ in files:
            if len(payloads) >= INFER_ROWS:
                break
            rows = _rows(fmt, path, 0, None, _Tally())
            try:
                for row in rows:
                    if row.fields is None or self._is_cti_row(row.fields):
                        continue
                    payloads.append({k: v for k, v in row.fields.items() if k not in special})
                    if len(payloads) >= INFER_ROWS:
                        break
            except _Fatal:
                pass  # read() reports it, at its place in the file
            finally:
                rows.close()
        header = None
        if fmt == "csv":
            header = next(filter(None, (_csv_header(path) for path, _ in files)), None)
        try:
            if fmt == "jsonl":
                return infer_payload_schema(payloads)
            names = [c for c in header or [] if c not in special]
            return _ddl([(n, _infer_csv_type([p.get(n, "") for p in payloads])) for n in names])
        except (TypeError, ValueError) as e:
            raise type(e)(
                f"cannot infer the payload schema of {self._config.path!r}: {e} "
                "(as FileInputConfig(schema='col type, ...'))"
            ) from e

    def _is_cti_row(self, fields: Mapping[str, Any]) -> bool:
        column = self._config.cti_column
        if column is None:
            return False
        try:
            return _parse_flag(fields.get(column), column)
        except _Bad:
            return True  # unreadable flag: leave the row out of inference

    def _infer_parquet(self, path: str, special: frozenset[str]) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns: list[tuple[str, str]] = []
        for field in pq.read_schema(path):
            if field.name in special:
                continue
            t = field.type
            if pa.types.is_dictionary(t):
                t = t.value_type
            spark = _arrow_to_spark(t)
            if spark is None:
                raise ValueError(
                    f"column {field.name!r} of {path!r} has type {t}, which file inputs do not "
                    f"read (supported: {_SUPPORTED}; timestamps need a time zone). Fix: give "
                    "FileInputConfig(schema=...) listing only the columns you need"
                )
            columns.append((field.name, spark))
        return _ddl(columns)

    def _arrival(self, fields: Mapping[str, Any], high: int | None) -> int:
        column = self._config.arrival_column
        assert column is not None
        what = f"arrival_column {column!r}"
        a = _parse_time(fields.get(column), what)
        if a in (MIN_TIME, MAX_TIME):
            raise _Bad(
                f"{what} is infinite",
                "a finite arrival time",
                format_ticks(a),
                "stamp each row with the time it arrived",
            )
        if high is not None and a < high:
            raise _Bad(
                f"{what} goes back in time",
                f"an arrival >= {format_ticks(high)}, the latest arrival of an earlier row",
                format_ticks(a),
                "sort the file by its arrival column",
            )
        return a

    def _item(
        self,
        offset: int,
        fields: Mapping[str, Any],
        arrival: int,
        columns: list[_Column],
        text: bool,
    ) -> SourceItem:
        cfg = self._config
        what = f"time_column {cfg.time_column!r}"
        start = _parse_time(fields.get(cfg.time_column), what)
        if cfg.cti_column is not None and _parse_flag(
            fields.get(cfg.cti_column), f"cti_column {cfg.cti_column!r}"
        ):
            return SourceItem(ItemKind.CTI, offset, arrival, cti(start))
        event = _event(
            self._shape,
            start,
            what,
            fields,
            columns,
            text=text,
            end_field=cfg.end_column,
            edge_field=cfg.edge_column,
        )
        return SourceItem(ItemKind.EVENT, offset, arrival, event)

    def _message(
        self,
        partition: str,
        fmt: FileFormat,
        line: int,
        offset: int | None,
        bad: _Bad,
        *,
        hint: bool,
    ) -> str:
        where = f"{partition}, {'row' if fmt == 'parquet' else 'line'} {line}"
        if offset is not None:
            where += f" (offset {offset})"
        return (
            f"malformed record in {where}: {bad.what}; expected {bad.expected}; got {bad.got}. "
            f"Fix: {bad.fix}." + (_DEAD_LETTER_HINT if hint else "")
        )

    def _dead_letter(self, partition: str, row: _Row, message: str) -> None:
        path = self._config.dead_letter_path
        assert path is not None
        record = {"file": partition, "line": row.line, "record": row.raw, "error": message}
        line = json.dumps(record, default=str, ensure_ascii=False) + "\n"
        # One write per record on an O_APPEND file: executors may share the file.
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)


def _csv_header(path: str) -> list[str] | None:
    """The header of a CSV file; None when it is empty or unreadable (read() reports why)."""
    with open(path, "rb") as f:
        try:
            for fields in csv.reader(_utf8_lines(f)):
                if fields:
                    return fields
        except (csv.Error, UnicodeDecodeError):
            return None
    return None


def _infer_csv_type(values: list[Any]) -> str:
    kinds: set[str] = set()
    for value in values:
        text = value.strip() if isinstance(value, str) else ""
        if not text:
            continue
        if _TICKS_RE.fullmatch(text) and -(2**63) <= int(text) < 2**63:
            kinds.add("bigint")
        elif _FLOAT_RE.fullmatch(text):
            kinds.add("double")
        elif text.lower() in ("true", "false"):
            kinds.add("boolean")
        else:
            return "string"
    if kinds == {"bigint"}:
        return "bigint"
    if kinds and kinds <= {"bigint", "double"}:
        return "double"
    if kinds == {"boolean"}:
        return "boolean"
    return "string"


def _arrow_to_spark(t: Any) -> str | None:
    import pyarrow as pa

    simple: list[tuple[Callable[[Any], bool], str]] = [
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_int8, "tinyint"),
        (pa.types.is_int16, "smallint"),
        (pa.types.is_int32, "int"),
        (pa.types.is_int64, "bigint"),
        (pa.types.is_uint8, "smallint"),
        (pa.types.is_uint16, "int"),
        (pa.types.is_uint32, "bigint"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "string"),
        (pa.types.is_date32, "date"),
    ]
    for test, spark in simple:
        if test(t):
            return spark
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else None
    if pa.types.is_decimal(t) and t.precision <= 38:
        return f"decimal({t.precision},{t.scale})"
    return None


class FileInputFactory(InputAdapterFactory[FileInputConfig]):
    """Makes :class:`FileInputAdapter` instances (driver). All three shapes are supported; the
    config's ``advance_time`` is what :meth:`declare_advance_time_properties` declares."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def create(self, config: FileInputConfig, shape: EventShape) -> FileInputAdapter:
        return FileInputAdapter(config, shape)

    def declare_advance_time_properties(
        self, config: FileInputConfig, shape: EventShape
    ) -> AdapterAdvanceTimeSettings | None:
        return config.advance_time


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

_BASE_COLUMNS = ("kind", "start", "end", "edge")


class FileOutputConfig(Model):
    """Where to append a query's output.

    ``columns`` fixes the payload columns of a CSV file, in order. Without it a new CSV file's
    header takes the payload columns of the first event delivered with the header (only the base
    columns if that delivery holds CTIs only); an event with a column not in the header is refused.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: _Path
    format: Literal["jsonl", "csv"] = "jsonl"
    columns: tuple[str, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> FileOutputConfig:
        if not self.path.strip():
            raise ValueError("path must name the output file; got an empty string")
        for name in self.columns or ():
            if name in _BASE_COLUMNS:
                raise ValueError(
                    f"columns lists {name!r}, which the output writes itself; expected payload "
                    "columns only. Fix: rename the payload column in the query"
                )
        return self


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):  # a struct, map or array: as JSON
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    return str(_json_default(value)) if isinstance(value, datetime | date | bytes) else str(value)


class FileOutputAdapter(OutputAdapter):
    """Appends a query's committed output to one file, each item exactly once after recovery.

    Runs on the driver; the engine calls :meth:`deliver` with each epoch's items in order and
    :meth:`progress` before it replays epochs after a restart.

    Durability: :meth:`deliver` appends the rows, flushes and fsyncs the file, then writes the
    sidecar ``<path>.epoch`` = ``{"items": n, "bytes": L, "ended": e}`` (n = the query's output
    items the file holds: the number after its last row's, L = the data file's length after
    them; n is null before the first delivery; e: the last item is the CTI at +inf, after which
    nothing is delivered: a run over input that grew since is refused, not appended) atomically
    and behind a checksum (:func:`engine.checkpoint.write_checked`: temporary file, fsync,
    rename, fsync of the directory); a damaged sidecar is an error naming it and the fix
    (semantics §9). If the process
    dies between the data and the sidecar, the file holds a tail the sidecar does not cover: whole
    or torn rows. Creating the adapter (and every :meth:`deliver`) truncates the file back to
    ``L``, and the engine delivers those items again, so the file ends up with every item exactly
    once; an epoch that failed part-way is completed the same way after the restart. Until then a
    reader of the file may see that tail: readers that must see committed rows only should read
    the first ``L`` bytes. Without a sidecar the adapter starts one at the file's current length
    (existing content is kept); a file that does not exist is made at the first delivery. To
    start over, delete both files: a sidecar left behind makes a new query skip the items it
    records.
    """

    #: each row's own columns, before the payload's (:meth:`_row`)
    own_fields = ("kind", "start", "end", "edge")

    @property
    def files(self) -> tuple[str, ...]:
        return (os.path.abspath(self._path), os.path.abspath(self._sidecar))

    def __init__(self, config: FileOutputConfig, shape: EventShape) -> None:
        self._path = config.path
        self._format = config.format
        self._shape = EventShape(shape)
        self._columns: list[str] | None = list(config.columns) if config.columns else None
        self._sidecar = self._path + ".epoch"
        self._header: list[str] | None = None
        state = self._read_sidecar()
        if state is None:
            if os.path.exists(self._path):  # kept: the output starts after it
                self._write_sidecar(None, os.path.getsize(self._path))
        else:
            self._repair(state[1])
        if self._format == "csv" and os.path.exists(self._path) and os.path.getsize(self._path):
            self._header = _csv_header(self._path)

    def progress(self) -> int | None:
        """What the sidecar records: how many of the query's output items the file holds, or
        None."""
        state = self._read_sidecar()
        return None if state is None else state[0]

    def deliver(self, epoch: int, items: Sequence[Event], first: int) -> None:
        """Append ``items`` as rows: the query's output items numbered from ``first``, those
        after what :meth:`progress` reports."""
        state = self._read_sidecar()
        held = state[0] if state is not None else None
        if items and state is not None and state[2]:
            raise ValueError(
                f"output file {self._path!r} ends with the CTI at +inf (its sidecar "
                f"{self._sidecar!r} says so): the output it holds is complete, and nothing can "
                f"follow it; yet items from number {first} on are delivered (epoch {epoch}). "
                "The file holds a run of this query over less input (one that ended), or "
                "another query's output. Fix: give this run its own output file, or delete both "
                "files to start over"
            )
        if held is not None and first < held:
            raise ValueError(
                f"output file {self._path!r} holds {held} output items (its sidecar "
                f"{self._sidecar!r} says so), but items from number {first} on are delivered "
                f"(epoch {epoch}); expected {held} or later. The file is written by another "
                "query, or its sidecar was left by one. Fix: give each query its own output "
                "file, or delete both files to start over"
            )
        if state is None and not os.path.exists(self._path):
            # made at the first delivery, with its record first: a crash while the rows are
            # written leaves a tail the record does not cover, cut when the adapter is made again
            with open(self._path, "ab"):
                pass
            self._write_sidecar(None, 0)
        # A sidecar deleted under a live adapter: keep what the file holds.
        size = self._repair(state[1] if state is not None else os.path.getsize(self._path))
        rows = [self._row(e) for e in items]
        data = self._encode(rows, empty_file=size == 0)
        with open(self._path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        if items:  # the CTI at +inf last: nothing can follow
            ended = items[-1].is_cti and items[-1].start >= MAX_TIME
        else:
            ended = state is not None and state[2]
        self._write_sidecar(first + len(items), size, ended)

    # -- helpers ------------------------------------------------------------------------------
    def _row(self, event: Event) -> dict[str, Any]:
        kind, start, end, edge = self.own_fields
        row: dict[str, Any] = {
            kind: event.kind.value,
            start: _format_time(event.start),
            end: _format_time(event.end),
            edge: event.edge.value if event.edge is not None else None,
        }
        for name, value in event.payload.items():
            if name in row:
                raise ValueError(
                    f"payload column {name!r} of {event!r} clashes with the output's own column "
                    f"{name!r} in {self._path!r}. Fix: rename it in the query, e.g. with select"
                )
            row[name] = _json_ready(value)
        return row

    def _encode(self, rows: list[dict[str, Any]], *, empty_file: bool) -> bytes:
        if self._format == "jsonl":
            return "".join(
                json.dumps(r, default=_json_default, ensure_ascii=False) + "\n" for r in rows
            ).encode("utf-8")
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        header = self._header
        if empty_file or header is None:
            if not rows:
                return b""
            payload = self._columns
            if payload is None:
                first = next((r for r in rows if r["kind"] == EventKind.INSERT.value), rows[0])
                payload = [k for k in first if k not in _BASE_COLUMNS]
            header = [*_BASE_COLUMNS, *payload]
            writer.writerow(header)
        for r in rows:
            unknown = [k for k in r if k not in header]
            if unknown:
                raise ValueError(
                    f"payload columns {unknown} are not in the CSV header {header} of "
                    f"{self._path!r}. Fix: set FileOutputConfig(columns=[...]) to every payload "
                    "column, or write JSON lines"
                )
            writer.writerow([_csv_value(r.get(k)) for k in header])
        self._header = header
        return buffer.getvalue().encode("utf-8")

    def _repair(self, length: int) -> int:
        size = os.path.getsize(self._path) if os.path.exists(self._path) else -1
        if size < length:
            raise ValueError(
                f"output file {self._path!r} is {'missing' if size < 0 else f'{size} bytes'} but "
                f"its sidecar {self._sidecar!r} records {length} bytes delivered; expected at "
                "least that much. Fix: restore the file, or delete both files to start over"
            )
        if size > length:
            with open(self._path, "r+b") as f:
                f.truncate(length)
                f.flush()
                os.fsync(f.fileno())
            self._header = _csv_header(self._path) if self._format == "csv" and length else None
        return length

    def _read_sidecar(self) -> tuple[int | None, int, bool] | None:
        try:
            text = read_checked(self._sidecar).decode("utf-8")
        except FileNotFoundError:
            return None
        except DamagedFile as e:
            raise CheckpointDamageError(
                f"the progress record {self._sidecar!r} of output file {self._path!r} "
                f"{e.problem}; expected the record of what the file holds. Fix: for a query "
                f"with a checkpoint directory, delete the record only, keeping {self._path!r}: "
                "the query then delivers what its commit log does not record as delivered. A "
                "query without one (run()) would append all its output again after what the "
                "file holds: delete both the file and the record and run it again"
            ) from None
        try:
            state = json.loads(text)
            if not {"items", "bytes"} <= set(state) <= {"items", "bytes", "ended"}:
                raise KeyError
            items, length, ended = state["items"], state["bytes"], state.get("ended", False)
            if not (items is None or isinstance(items, int)) or not isinstance(length, int):
                raise TypeError
            if not isinstance(ended, bool):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(
                f"sidecar {self._sidecar!r} is unreadable; expected "
                f'{{"items": <int or null>, "bytes": <int>, "ended": <bool>}}; got '
                f"{text[:_GOT_LIMIT]!r}. Fix: delete it together with the output file to start over"
            ) from None
        return items, length, ended

    def _write_sidecar(self, items: int | None, length: int, ended: bool = False) -> None:
        """``ended``: the last item written is the CTI at +inf (nothing can follow it)."""
        body = {"items": items, "bytes": length, "ended": ended}
        write_checked(self._sidecar, json.dumps(body))


class FileOutputFactory(OutputAdapterFactory[FileOutputConfig]):
    """Makes :class:`FileOutputAdapter` instances (driver); creating one repairs a torn tail."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def create(self, config: FileOutputConfig, shape: EventShape) -> FileOutputAdapter:
        return FileOutputAdapter(config, shape)
