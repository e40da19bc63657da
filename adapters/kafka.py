"""Kafka adapters (kafka-python): topics in, one topic partition out, offsets kept by the engine.

**Input.** :class:`KafkaInputFactory` makes a :class:`KafkaInputAdapter` from a
:class:`KafkaInputConfig`. Every Kafka partition of ``topic`` is one source partition, named by
its number (``"0"``, ``"1"``, ...); a :class:`SourceItem`'s ``offset`` is the record's Kafka
offset. Each record is one item::

    value {"ts": "2026-01-01T00:00:00+00:00", "id": 1, "v": 2.5}     POINT at ts
    value {"ts": 10, "te": 20, "id": 1}                              INTERVAL [ts, te), int ticks
    value {"ts": 10, "side": "start", "id": 1} / {..., "side": "end", "te": 20}   EDGE halves
    header ctistream-kind: CTI, value {"ts": 15}                     explicit CTI at ts

    cfg = KafkaInputConfig(bootstrap_servers="broker:9092", topic="sensors",
                           schema="id int, v double", time_field="ts")

* **Bounded runs.** The engine's runtime runs bounded inputs to their end. :meth:`partitions`
  (driver, when the query is created) takes a snapshot of every partition's end offset, as Spark's
  batch Kafka source does with ``endingOffsets=latest``; :meth:`read` (executors) stops there, so
  every read of a partition gives the same records however much the topic has grown meanwhile.
  The snapshot travels with the pickled adapter. A :meth:`read` without a snapshot takes the end
  offset when it starts. No END item is enqueued: a topic does not end, so ``flush_on_stop``
  flushes when the run stops.
* **Offsets.** :meth:`read` ``(partition, n)`` reads from ``max(n, first offset still in the
  log)``: a query restarted after committing offset ``n - 1`` reads from ``n``. Offsets need not
  be contiguous (transaction markers, compaction). No consumer group, no committed offsets: the
  consumer is ``assign()``-ed and ``seek()``-ed, and the engine keeps the offsets.
* **Format.** ``"json"`` (default): the value is one UTF-8 JSON object; ``schema`` (Spark DDL,
  required) lists the payload fields, which may include the time fields to keep them in the
  payload; other fields are ignored and a missing field is null. Types as in :mod:`adapters.files`
  for JSON lines (timestamps, dates and decimals also from strings). ``"raw"``: the payload is the
  record value as bytes in one ``binary`` column (``value_column``, default ``"value"``); the time
  is the record timestamp and the shape POINT. Record keys are not read.
* **Event time.** ``time_field`` names the start (for a POINT, its time); without it the start is
  the record timestamp (ms, so ticks are multiples of 1000). ``end_field`` is the end of an
  INTERVAL and of an END edge; ``edge_field`` says ``"start"`` or ``"end"`` for an EDGE input.
  Times are read as :mod:`adapters.files` reads them: int ticks (1 tick = 1 µs since the Unix
  epoch, UTC), a string of digits, an ISO-8601 date-time *with* a UTC offset, or
  ``"+inf"``/``"-inf"`` where the engine accepts them (a CTI, an interval end). Naive date-times
  and floats are refused.
* **Arrival** is the record timestamp in ticks, raised to the largest timestamp seen before it in
  the same read of the partition: producer-set timestamps may go back, and the engine needs the
  arrival stamps of a partition not to decrease. A read from offset ``n`` starts that running
  maximum at record ``n``.
* **Explicit CTIs** are records with the header :data:`KIND_HEADER` (``ctistream-kind``) =
  ``CTI``; their time is read exactly like an event's start (``time_field`` of the value, else the
  record timestamp), so ``{"ts": "+inf"}`` is a flushing CTI. The header may also say ``INSERT``
  (the default for records without it); anything else is malformed. A CTI is enqueued in its
  partition's order, so the input's CTI is the minimum over partitions.
* **Malformed records** (not JSON, not an object, a missing or unreadable time, a wrong type, a
  null value) raise :class:`engine.errors.MalformedRecordError` naming the topic, partition and
  offset, what was expected, what was got and the fix. ``read`` is a generator, so every item
  before the bad record has been yielded first, and the engine processes and delivers them before
  it raises. With ``dead_letter_topic`` the record is written there instead (same key and value,
  its headers plus ``ctistream-error``, ``ctistream-source-topic``, ``ctistream-source-partition``
  and ``ctistream-source-offset``) and reading goes on. A run writes each letter once however it is
  cut into epochs; dead letters are at-least-once: a replayed read writes them again; deduplicate
  by (source topic, partition, offset).

**Output.** :class:`KafkaOutputFactory` makes a :class:`KafkaOutputAdapter` that writes each
committed event as one JSON record ``{"start", "end", "edge", <payload fields>}`` (times in the
form above: ISO-8601 with ``+00:00``, ``"+inf"``; payload timestamps and dates as ISO strings,
decimals as strings, binary as base64) and, with ``include_ctis`` (default), each CTI as
``{"start": t}`` with the header ``ctistream-kind: CTI``. Records have no key. Read back with
``KafkaInputConfig(time_field="start", end_field="end", edge_field="edge", schema=...)`` (no
``end_field`` for POINT), the output is the same stream. All records go to one partition
(``partition``, default 0), in delivery order. Delivery is exactly-once per item, without
transactions: see :class:`KafkaOutputAdapter`.

**Broker down.** Every client operation gets ``connect_attempts`` attempts, separated by a
backoff of ``retry_backoff`` doubling after each failure (at most 30 s), each attempt waiting at
most ``request_timeout``; then :class:`KafkaUnavailableError` says what could not be done, at which
bootstrap address, and how to fix it. A read that stalls (no progress for ``request_timeout``)
counts as a failed attempt and reconnects where it stopped. Nothing past what was processed is
delivered: an input that fails on the driver fails the query before it runs; one that fails on an
executor fails the run before its first epoch is delivered (a started query: the epoch), with a
:class:`~engine.errors.QueryRunError` naming the query and the epoch whose message is this error's
(its class name, text and fix; not the Python worker's traceback); an output that fails leaves
the epochs before in the topic, and a restart completes the failed epoch.

Who calls what, and where: the engine calls ``create``, :meth:`KafkaInputAdapter.partitions` and
:meth:`KafkaInputAdapter.payload_schema` on the driver, pickles the adapter (configuration, shape,
end-offset snapshot) and calls :meth:`KafkaInputAdapter.read` on executors, where the consumer is
built. Clients are never built in ``__init__``. Output adapters live on the driver.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from ctistream.adapters._broker import DeadLetters, Retries, Stalled
from ctistream.adapters._marked import Mark, MarkedOutputAdapter, read_mark
from ctistream.adapters._records import (
    _Bad,
    _Column,
    _event,
    _got,
    _parse_ddl,
    _parse_time,
    _quote,
)
from ctistream.adapters._secret import SecretConfig
from ctistream.engine.contracts import (
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapterFactory,
    SourceItem,
)
from ctistream.engine.errors import EngineError, MalformedRecordError, QueryBuildError
from ctistream.engine.events import EventShape, cti, point
from ctistream.engine.settings import AdapterAdvanceTimeSettings
from ctistream.engine.temporal import to_duration
from pydantic import BeforeValidator, Field, SecretStr, ValidationInfo, model_validator

if TYPE_CHECKING:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

__all__ = [
    "COUNT_HEADER",
    "EPOCH_HEADER",
    "INDEX_HEADER",
    "KIND_HEADER",
    "KafkaAdapterError",
    "KafkaConnectionConfig",
    "KafkaDataLossError",
    "KafkaInputAdapter",
    "KafkaInputConfig",
    "KafkaInputFactory",
    "KafkaOutputAdapter",
    "KafkaOutputConfig",
    "KafkaOutputFactory",
    "KafkaTopicNotFoundError",
    "KafkaUnavailableError",
]

#: Header marking a record as a CTI (value ``CTI``) or an event (``INSERT``, the default).
KIND_HEADER = "ctistream-kind"
#: Output headers: the epoch a record belongs to, its item's number among the query's output items
#: (from the query's first, CTIs counted, written or not), and the number after the last item of
#: the delivery that wrote it.
EPOCH_HEADER = "ctistream-epoch"
INDEX_HEADER = "ctistream-item"
COUNT_HEADER = "ctistream-count"
#: Dead-letter headers, added to the record's own.
ERROR_HEADER = "ctistream-error"
SOURCE_TOPIC_HEADER = "ctistream-source-topic"
SOURCE_PARTITION_HEADER = "ctistream-source-partition"
SOURCE_OFFSET_HEADER = "ctistream-source-offset"

_DEAD_LETTER_HINT = (
    " Or set KafkaInputConfig.dead_letter_topic to skip malformed records into a topic."
)
_MAX_BACKOFF = timedelta(seconds=30)
_POLL_MS = 200
_FETCH_MAX_WAIT_MS = 100
#: The output sends records in chunks of at most this many bytes, each one produce batch.
_BATCH_BYTES = 1024 * 1024
_CHUNK_BYTES = _BATCH_BYTES // 2
_RECORD_OVERHEAD = 96  # a generous bound on a record's framing within a batch
_TAIL_WINDOW = 16


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class KafkaAdapterError(EngineError):
    """A Kafka adapter cannot do its work; the message says what, where and how to fix it."""


class KafkaUnavailableError(KafkaAdapterError, ConnectionError):
    """No broker answered (or kept answering) after every configured attempt."""


class KafkaDataLossError(KafkaAdapterError):
    """A partition no longer holds records the query reads on from: they were deleted first."""


class KafkaTopicNotFoundError(KafkaAdapterError, LookupError):
    """The topic (or the output partition) does not exist on the cluster."""


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


def _timeout(value: Any, info: ValidationInfo) -> Any:
    # A duration as everywhere (semantics §1): a timedelta or "10 seconds", never a bare number.
    return to_duration(
        value, name=str(info.field_name), owner=str((info.config or {}).get("title", "config"))
    )


_Timeout = Annotated[timedelta, BeforeValidator(_timeout)]


def _servers(value: Any) -> Any:
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, list | tuple):
        servers = tuple(str(s).strip() for s in value if str(s).strip())
        if servers:
            return servers
    raise ValueError(
        f"bootstrap_servers must name at least one broker, e.g. 'host:9092' or "
        f"['host1:9092', 'host2:9092']; got {value!r}"
    )


class KafkaConnectionConfig(SecretConfig):
    """How to reach the cluster; shared by :class:`KafkaInputConfig` and
    :class:`KafkaOutputConfig`.

    ``bootstrap_servers`` is ``"host:port"``, a comma-separated list or a sequence of them.
    Security: ``security_protocol`` and, for SASL, ``sasl_mechanism`` with ``sasl_username`` and
    ``sasl_password`` (a :class:`~pydantic.SecretStr`, never printed, not even by a validation
    error: :mod:`adapters._secret`); ``ssl_cafile`` for a private CA. Failures: each client call
    gets ``connect_attempts`` attempts of at most ``request_timeout`` each, separated by
    ``retry_backoff`` doubling after every failure.
    """

    bootstrap_servers: Annotated[tuple[str, ...], BeforeValidator(_servers)]
    client_id: str = "ctistream"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None
    connect_attempts: int = Field(default=3, ge=1)
    retry_backoff: _Timeout = timedelta(milliseconds=500)
    request_timeout: _Timeout = timedelta(seconds=10)

    @model_validator(mode="after")
    def _check_connection(self) -> KafkaConnectionConfig:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl != (self.sasl_mechanism is not None):
            raise ValueError(
                f"security_protocol {self.security_protocol!r} and sasl_mechanism "
                f"{self.sasl_mechanism!r} do not match; expected a mechanism exactly with "
                "SASL_PLAINTEXT or SASL_SSL. Fix: set both, or neither"
            )
        if sasl and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(
                f"sasl_mechanism {self.sasl_mechanism!r} needs sasl_username and sasl_password; "
                "got only one or neither. Fix: give both"
            )
        if self.request_timeout < timedelta(milliseconds=500):
            raise ValueError(
                f"request_timeout must be at least 500 ms; got {self.request_timeout!r}. "
                "Fix: e.g. timedelta(seconds=10)"
            )
        if self.retry_backoff < timedelta(0):
            raise ValueError(f"retry_backoff must not be negative; got {self.retry_backoff!r}")
        return self

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers as one string, for messages."""
        return ",".join(self.bootstrap_servers)


def _name(value: str | None, role: str) -> None:
    if value is not None and not value.strip():
        raise ValueError(f"{role} must name a field; got an empty string")


class KafkaInputConfig(KafkaConnectionConfig):
    """What to read and how (see the module docstring for the record forms).

    ``schema`` (alias of the field ``schema_``): the payload as Spark DDL, required for
    ``format="json"`` (a live topic is not sampled to guess one). ``time_field``/``end_field``/
    ``edge_field`` name the value's special fields; without ``time_field`` the start is the record
    timestamp. ``isolation_level="read_committed"`` skips records of open or aborted transactions
    (where the broker supports it). ``advance_time`` is what
    :meth:`KafkaInputFactory.declare_advance_time_properties` declares; binding-level
    ``AdvanceTimeSettings`` override it.
    """

    topic: str
    format: Literal["json", "raw"] = "json"
    schema_: str | None = Field(default=None, alias="schema")
    time_field: str | None = None
    end_field: str | None = None
    edge_field: str | None = None
    value_column: str = "value"
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    max_poll_records: int = Field(default=500, ge=1)
    dead_letter_topic: str | None = None
    advance_time: AdapterAdvanceTimeSettings | None = None

    @model_validator(mode="after")
    def _check_input(self) -> KafkaInputConfig:
        if not self.topic.strip():
            raise ValueError("topic must name a Kafka topic; got an empty string")
        roles = {
            "time_field": self.time_field,
            "end_field": self.end_field,
            "edge_field": self.edge_field,
        }
        used: dict[str, str] = {}
        for role, field in roles.items():
            _name(field, role)
            if field is None:
                continue
            if field in used:
                raise ValueError(
                    f"{role} and {used[field]} are both {field!r}; expected a different field "
                    "for each role. Fix: name distinct fields"
                )
            used[field] = role
        if self.format == "json":
            if self.schema_ is None:
                raise ValueError(
                    f"format='json' needs the payload schema of topic {self.topic!r}; got none. "
                    "Fix: KafkaInputConfig(..., schema='id int, v double') (Spark DDL)"
                )
            _parse_ddl(self.schema_)
        else:
            given = {k: v for k, v in {**roles, "schema": self.schema_}.items() if v is not None}
            if given:
                raise ValueError(
                    f"format='raw' reads no fields from the value; got {sorted(given)}. Fix: drop "
                    "them (the payload is the value bytes and the time the record timestamp), or "
                    "use format='json'"
                )
            _name(self.value_column, "value_column")
            _parse_ddl(f"{_quote(self.value_column)} string")  # checks the name only
        if self.dead_letter_topic is not None and self.dead_letter_topic == self.topic:
            raise ValueError(
                f"dead_letter_topic is the input topic {self.topic!r}; expected another topic. "
                "Fix: e.g. dead_letter_topic='<topic>.dead'"
            )
        return self


class KafkaOutputConfig(KafkaConnectionConfig):
    """Where to write a query's output: one partition of one topic (it must exist).

    ``time_field``/``end_field``/``edge_field`` name the fields the output writes the start, end
    and edge type under; the defaults are what :class:`KafkaInputConfig` is told to read back.
    ``include_ctis=False`` writes events only. The partition should belong to this query alone:
    the adapter learns what it already wrote from the partition's tail.
    """

    topic: str
    partition: int = Field(default=0, ge=0)
    time_field: str = "start"
    end_field: str = "end"
    edge_field: str = "edge"
    include_ctis: bool = True

    @model_validator(mode="after")
    def _check_output(self) -> KafkaOutputConfig:
        if not self.topic.strip():
            raise ValueError("topic must name a Kafka topic; got an empty string")
        fields = [self.time_field, self.end_field, self.edge_field]
        for role, field in zip(("time_field", "end_field", "edge_field"), fields, strict=True):
            _name(field, role)
        if len(set(fields)) < 3:
            raise ValueError(
                f"time_field, end_field and edge_field must differ; got {fields}. "
                "Fix: name distinct fields"
            )
        return self


# ---------------------------------------------------------------------------------------------
# Clients and retries
# ---------------------------------------------------------------------------------------------


def _ms(value: timedelta) -> int:
    return max(1, int(value.total_seconds() * 1000))


def _options(cfg: KafkaConnectionConfig, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Client options for ``cfg``, keeping only what this kafka-python version knows."""
    timeout = _ms(cfg.request_timeout)
    options: dict[str, Any] = {
        "bootstrap_servers": list(cfg.bootstrap_servers),
        "client_id": cfg.client_id,
        "security_protocol": cfg.security_protocol,
        "request_timeout_ms": timeout,
        "bootstrap_timeout_ms": timeout,  # kafka-python 3
        "api_version_auto_timeout_ms": timeout,  # kafka-python 2
        "reconnect_backoff_max_ms": 1000,
    }
    if cfg.sasl_mechanism is not None:
        assert cfg.sasl_password is not None
        options["sasl_mechanism"] = cfg.sasl_mechanism
        options["sasl_plain_username"] = cfg.sasl_username
        options["sasl_plain_password"] = cfg.sasl_password.get_secret_value()
    if cfg.ssl_cafile is not None:
        options["ssl_cafile"] = cfg.ssl_cafile
    return {k: v for k, v in options.items() if k in defaults}


def _consumer(cfg: KafkaConnectionConfig, **extra: Any) -> KafkaConsumer:
    from kafka import KafkaConsumer

    options = _options(cfg, KafkaConsumer.DEFAULT_CONFIG)
    options.update(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=_FETCH_MAX_WAIT_MS,
    )
    if "allow_auto_create_topics" in KafkaConsumer.DEFAULT_CONFIG:
        options["allow_auto_create_topics"] = False
    options.update(extra)
    return KafkaConsumer(**options)


def _producer(cfg: KafkaConnectionConfig, **extra: Any) -> KafkaProducer:
    from kafka import KafkaProducer

    options = _options(cfg, KafkaProducer.DEFAULT_CONFIG)
    options.update(acks="all", max_block_ms=_ms(cfg.request_timeout))
    if "allow_auto_create_topics" in KafkaProducer.DEFAULT_CONFIG:
        options["allow_auto_create_topics"] = False
    options.update(extra)
    return KafkaProducer(**{k: v for k, v in options.items() if k in KafkaProducer.DEFAULT_CONFIG})


def _retriable(error: BaseException) -> bool:
    from kafka import errors

    transient = tuple(
        getattr(errors, name)
        for name in ("KafkaConnectionError", "KafkaTimeoutError", "NoBrokersAvailable")
        if hasattr(errors, name)  # NoBrokersAvailable is kafka-python 2 only
    )
    if isinstance(error, (Stalled, *transient)):
        return True
    return isinstance(error, errors.KafkaError) and bool(getattr(error, "retriable", False))


def _client_error(error: BaseException) -> bool:
    from kafka.errors import KafkaError

    return isinstance(error, KafkaError | Stalled)


def _describe(error: BaseException) -> str:
    text, name = str(error), type(error).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def _seconds(value: timedelta) -> str:
    return f"{value.total_seconds():g} s"


def _unavailable(cfg: KafkaConnectionConfig, what: str, error: BaseException, after: str) -> str:
    return (
        f"cannot {what}: no Kafka broker answered at {cfg.bootstrap} after "
        f"{cfg.connect_attempts} attempt(s) (request_timeout {_seconds(cfg.request_timeout)}, "
        f"retry_backoff {_seconds(cfg.retry_backoff)}, doubling); last error: "
        f"{_describe(error)}. Expected a reachable broker. Fix: start the broker, or correct "
        "bootstrap_servers and security_protocol; for a slow or restarting broker raise "
        f"connect_attempts or request_timeout. {after}"
    )


def _refused(cfg: KafkaConnectionConfig, what: str, error: BaseException) -> str:
    return (
        f"cannot {what}: the Kafka cluster at {cfg.bootstrap} refused with "
        f"{_describe(error)}. Expected the request to be allowed. Fix: check "
        "security_protocol, the SASL credentials and the topic's ACLs"
    )


def _failure(
    cfg: KafkaConnectionConfig, what: str, error: BaseException, after: str
) -> KafkaAdapterError:
    """The clear error for a client failure that ends the attempts: refused or unavailable."""
    if not _retriable(error):
        return KafkaAdapterError(_refused(cfg, what, error))
    return KafkaUnavailableError(_unavailable(cfg, what, error, after))


def _retries(cfg: KafkaConnectionConfig) -> Retries:
    """Every client operation: ``connect_attempts`` attempts in all for a retriable failure,
    ``retry_backoff`` doubling after each failure (at most 30 s); any other fails at once."""
    return Retries(
        attempts=cfg.connect_attempts,
        backoff=cfg.retry_backoff,
        max_backoff=_MAX_BACKOFF,
        doubling=True,
        ours=_client_error,
        again=_retriable,
        fail=partial(_failure, cfg),
    )


def _close(client: Any, timeout_s: float = 1.0) -> None:
    try:
        client.close(timeout=timeout_s)
    except TypeError:  # a consumer's close() takes no seconds
        client.close()
    except Exception:
        pass


def _partitions_of(consumer: KafkaConsumer, cfg: KafkaConnectionConfig, topic: str) -> list[int]:
    ids = sorted(consumer.partitions_for_topic(topic) or ())
    if not ids:
        raise KafkaTopicNotFoundError(
            f"Kafka topic {topic!r} does not exist at {cfg.bootstrap} (or this client may not "
            "see it); expected an existing topic. Fix: create it (e.g. kafka-topics.sh --create "
            f"--topic {topic} --partitions N), or check the name and the ACLs"
        )
    return ids


def _end_offsets(
    consumer: KafkaConsumer, tps: Sequence[TopicPartition], stall: timedelta, *, confirm: bool
) -> dict[TopicPartition, int]:
    """The end offset (the offset after the last record) of each of ``tps``.

    With ``confirm``, each non-empty partition's reported end is checked against the high
    watermark of a fetch at the offset before it: some Kafka-protocol brokers (Tansu 0.6) report
    the base offset of the last record batch plus one, which would cut a snapshot short. Kafka's
    own answer is confirmed at the cost of one small fetch per partition.
    """
    reported = consumer.end_offsets(list(tps))
    begins = consumer.beginning_offsets(list(tps)) if confirm else {}
    ends: dict[TopicPartition, int] = {}
    for tp in tps:
        end = int(reported[tp])
        if confirm and end > int(begins[tp]):
            consumer.assign([tp])
            consumer.seek(tp, end - 1)
            deadline = time.monotonic() + stall.total_seconds()
            while True:
                consumer.poll(timeout_ms=_POLL_MS, max_records=1)
                high = consumer.highwater(tp)
                if high is not None:
                    end = max(end, int(high))
                    break
                if time.monotonic() > deadline:
                    raise Stalled(f"no fetch response for {tp} within {stall}")
        ends[tp] = end
    return ends


def _fetch(
    consumer: KafkaConsumer,
    tp: TopicPartition,
    start: int,
    end: int,
    stall: timedelta,
    max_records: int,
) -> Iterator[Any]:
    """The records of ``tp`` with offsets in ``[start, end)``, in order.

    Raises :class:`Stalled` when the consumer's position does not move for ``stall`` (a broker
    that went away; kafka-python's poll then just returns nothing), and
    :class:`KafkaAdapterError` when the partition turns out to end before ``end``.
    """
    if start >= end:
        return
    consumer.assign([tp])
    consumer.seek(tp, start)
    position = progressed = start
    deadline = time.monotonic() + stall.total_seconds()
    while position < end:
        batch = consumer.poll(timeout_ms=_POLL_MS, max_records=max_records).get(tp, ())
        for record in batch:
            if record.offset >= end:
                return
            position = record.offset + 1
            yield record
        # Transaction markers and compacted gaps move the position without records.
        now_at = consumer.position(tp)
        if now_at is not None and now_at > position:
            position = now_at
        if position > progressed:
            progressed = position
            deadline = time.monotonic() + stall.total_seconds()
        elif time.monotonic() > deadline:
            # Stuck: either the broker is gone (this raises a retriable error, or the next
            # attempt does) or the log no longer reaches the planned end.
            now_end = _end_offsets(consumer, [tp], stall, confirm=True)[tp]
            if now_end < end:
                raise KafkaAdapterError(
                    f"Kafka topic {tp.topic!r} partition {tp.partition} now ends at offset "
                    f"{now_end}, before offset {end}, the end this read was planned to (the "
                    "snapshot taken when the query started); expected the records up to it to "
                    f"stay. Offsets {position} to {end - 1} are gone: the topic was deleted and "
                    "made again, or truncated. Fix: start the query again, which takes a new "
                    "snapshot"
                )
            raise Stalled(f"no records from offset {position} for {stall}; end is {end}")


def _headers(record: Any) -> dict[str, bytes]:
    return {k: bytes(v) if v is not None else b"" for k, v in (record.headers or ())}


def _record_ticks(record: Any) -> int | None:
    ts = record.timestamp
    if ts is None or ts < 0:
        return None
    return int(ts) * 1000


# ---------------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------------


class KafkaInputAdapter(InputAdapter):
    """Reads one topic as events of one shape, one source partition per Kafka partition.

    Made by :class:`KafkaInputFactory` on the driver, where :meth:`partitions` lists the
    partitions and snapshots their end offsets and :meth:`payload_schema` gives the schema.
    Pickled to executors, which call :meth:`read`. Holds the configuration, the shape and the
    snapshot; consumers and the dead-letter producer are built inside the calls that use them.
    """

    bounded: ClassVar[bool] = False

    def __init__(self, config: KafkaInputConfig, shape: EventShape) -> None:
        shape = EventShape(shape)
        where = f"topic {config.topic!r}"
        if config.format == "raw" and shape is not EventShape.POINT:
            raise QueryBuildError(
                f"a raw Kafka input makes POINT events at the record timestamp; got shape "
                f"{shape.value} for {where}. Fix: bind it as POINT, or use format='json' with "
                "time fields"
            )
        needs_end = shape is not EventShape.POINT
        if needs_end and config.end_field is None:
            raise QueryBuildError(
                f"a {shape.value} Kafka input needs end_field; got none for {where}. "
                "Fix: KafkaInputConfig(..., end_field='<field of the end time>')"
            )
        if not needs_end and config.end_field is not None:
            raise QueryBuildError(
                f"a POINT Kafka input has no end; got end_field={config.end_field!r} for "
                f"{where}. Fix: bind the input as INTERVAL, or drop end_field"
            )
        if (shape is EventShape.EDGE) != (config.edge_field is not None):
            raise QueryBuildError(
                f"edge_field is for EDGE inputs only, and every EDGE input needs one; got shape "
                f"{shape.value} with edge_field={config.edge_field!r} for {where}. "
                "Fix: give edge_field exactly when binding as EDGE"
            )
        self._config = config
        self._shape = shape
        self._ends: dict[str, int] | None = None
        #: the topic's id (KIP-516), when the broker tells it: a topic made again has a new one
        self._topic_id: str | None = None
        self._columns: list[_Column] | None = None

    # -- driver -------------------------------------------------------------------------------
    def source(self) -> str:
        """The topic, with its id when the broker tells it (after :meth:`partitions`)."""
        topic = f"Kafka topic {self._config.topic!r}"
        return topic if self._topic_id is None else f"{topic} (topic id {self._topic_id})"

    def partitions(self) -> Sequence[str]:
        """The topic's partitions, ``"0"``, ``"1"``, ...; snapshots their end offsets, where
        every :meth:`read` stops. Raises :class:`KafkaTopicNotFoundError` for a missing topic and
        :class:`KafkaUnavailableError` when no broker answers."""
        cfg = self._config

        # read_committed ends at the last stable offset, which only ListOffsets reports.
        confirm = cfg.isolation_level == "read_uncommitted"

        def snapshot() -> tuple[dict[str, int], str | None]:
            from kafka import TopicPartition

            consumer = _consumer(cfg, isolation_level=cfg.isolation_level)
            try:
                tps = [
                    TopicPartition(cfg.topic, p) for p in _partitions_of(consumer, cfg, cfg.topic)
                ]
                ends = _end_offsets(consumer, tps, cfg.request_timeout, confirm=confirm)
                # the metadata the partitions came with (kafka-python has no public accessor)
                cluster = getattr(getattr(consumer, "_client", None), "cluster", None)
                topic_id = getattr(cluster, "topic_id", None)
                found = topic_id(cfg.topic) if topic_id is not None else None
                return {str(tp.partition): ends[tp] for tp in tps}, found and str(found)
            finally:
                _close(consumer)

        self._ends, topic_id = _retries(cfg).call(
            f"list the partitions of Kafka topic {cfg.topic!r}",
            "The query was not started.",
            snapshot,
        )
        if self._topic_id is not None and topic_id not in (None, self._topic_id):
            raise KafkaAdapterError(
                f"Kafka topic {cfg.topic!r} was deleted and made again while the query ran (its "
                f"id was {self._topic_id}, now {topic_id}): the offsets the query reached count "
                "in the old topic, so the new one's items would be skipped or read twice. Fix: "
                "restart the query with a new checkpoint directory and a new, empty output"
            )
        self._topic_id = topic_id or self._topic_id
        return list(self._ends)

    def latest_offsets(self) -> Mapping[str, int]:
        """A new end-offset snapshot (see :meth:`partitions`): the next offset per partition."""
        before = None if self._ends is None else set(self._ends)
        self.partitions()
        assert self._ends is not None
        if before is not None and set(self._ends) != before:
            raise KafkaAdapterError(
                f"Kafka topic {self._config.topic!r} now has partitions {sorted(self._ends)}; "
                f"the query started with {sorted(before)}. Fix: restart the query with a new "
                "checkpoint directory to read the new partitions"
            )
        return dict(self._ends)

    @property
    def end_offsets(self) -> Mapping[str, int] | None:
        """The end-offset snapshot by partition name (None before :meth:`partitions`)."""
        return None if self._ends is None else dict(self._ends)

    def size_hint(self) -> int | None:
        """At most how many records a read of the snapshot yields: the sum of its end offsets
        (None before :meth:`partitions`)."""
        return None if self._ends is None else sum(self._ends.values())

    def payload_schema(self) -> str:
        """The payload as Spark DDL: the configured schema, or ``"<value_column> binary"``."""
        cfg = self._config
        if cfg.format == "raw":
            return f"{_quote(cfg.value_column)} binary"
        assert cfg.schema_ is not None
        return cfg.schema_

    # -- executor -----------------------------------------------------------------------------
    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        """Yield the items of Kafka partition ``partition`` from offset ``start_offset`` (0:
        the first offset in the log) up to the end-offset snapshot.

        Deterministic for an unchanged log: the same partition and offset give the same items.
        Raises :class:`KafkaDataLossError` when records from ``start_offset`` (above 0) on were
        deleted before this read, :class:`MalformedRecordError` at a malformed record (unless
        it is dead-lettered) after yielding every item before it, and
        :class:`KafkaUnavailableError` when the broker cannot be reached (or stops answering)
        after every attempt.
        """
        from kafka import TopicPartition

        cfg = self._config
        if not partition.isdigit():
            raise ValueError(
                f"Kafka partitions are named by their number; got {partition!r} for topic "
                f"{cfg.topic!r}. Fix: use a name from partitions(), e.g. '0'"
            )
        tp = TopicPartition(cfg.topic, int(partition))
        end = None if self._ends is None else self._ends.get(partition)
        next_offset = max(0, start_offset)
        high: int | None = None  # largest record timestamp so far: the arrival floor
        dead = (
            _DeadLetters(cfg) if cfg.dead_letter_topic is not None and self.side_effects else None
        )

        def attempt() -> Iterator[SourceItem]:
            # One consumer; after a failure the next attempt goes on from next_offset.
            nonlocal end, next_offset, high
            consumer = _consumer(
                cfg, isolation_level=cfg.isolation_level, max_poll_records=cfg.max_poll_records
            )
            try:
                if end is None:
                    if tp.partition not in _partitions_of(consumer, cfg, cfg.topic):
                        raise KafkaTopicNotFoundError(
                            f"Kafka topic {cfg.topic!r} at {cfg.bootstrap} has no partition "
                            f"{partition}. Fix: read a partition that partitions() lists"
                        )
                    end = _end_offsets(
                        consumer,
                        [tp],
                        cfg.request_timeout,
                        confirm=cfg.isolation_level == "read_uncommitted",
                    )[tp]
                begin = int(consumer.beginning_offsets([tp])[tp])
                if begin > next_offset > 0:  # a read from the start takes the first one held
                    raise KafkaDataLossError(
                        f"partition {partition} of Kafka topic {cfg.topic!r} no longer holds "
                        f"offsets {next_offset} to {begin - 1}: they were deleted (the topic's "
                        "retention, or a delete of records) before the query read them; "
                        "expected every record from the offset the query reads on from (its "
                        "last epoch's, or its checkpoint's). Reading on from the first record "
                        "held would lose them without a word. Fix: start the query on a new "
                        "checkpoint directory to read on from what the topic holds (those "
                        "records are lost to it), and keep records longer than the query may "
                        "be stopped (retention.ms)"
                    )
                next_offset = max(next_offset, begin)
                for record in _fetch(
                    consumer, tp, next_offset, end, cfg.request_timeout, cfg.max_poll_records
                ):
                    ticks = _record_ticks(record)
                    if ticks is not None:
                        high = ticks if high is None else max(high, ticks)
                    arrival = high if high is not None else 0
                    try:
                        item = self._item(record, ticks, arrival)
                    except _Bad as bad:
                        message = self._message(record, bad, cfg.dead_letter_topic is None)
                        if cfg.dead_letter_topic is None:
                            raise MalformedRecordError(message) from None
                        if dead is not None:
                            dead.send(record, message)
                        next_offset = record.offset + 1
                        continue
                    next_offset = record.offset + 1
                    yield item
            finally:
                _close(consumer)

        what = f"read partition {partition} of Kafka topic {cfg.topic!r} from offset"
        try:
            yield from _retries(cfg).resume(
                lambda: f"{what} {next_offset}",
                "This run delivers nothing read after the last committed offset; a restart "
                "reads from there.",
                attempt,
            )
        finally:
            if dead is not None:
                dead.close()

    # -- helpers ------------------------------------------------------------------------------
    def _payload_columns(self) -> list[_Column]:
        if self._columns is None:
            self._columns = _parse_ddl(self.payload_schema()) if self._config.schema_ else []
        return self._columns

    def _item(self, record: Any, ticks: int | None, arrival: int) -> SourceItem:
        cfg = self._config
        kind = _headers(record).get(KIND_HEADER)
        is_cti = False
        if kind is not None:
            text = kind.decode("utf-8", errors="replace").strip().upper()
            if text not in ("CTI", "INSERT", ""):
                raise _Bad(
                    f"header {KIND_HEADER!r} is not a record kind",
                    "'CTI' or 'INSERT' (or no header, for an event)",
                    _got(text),
                    "mark CTI records with the header value CTI",
                )
            is_cti = text == "CTI"
        fields: Mapping[str, Any] = {}
        if cfg.format == "json" and not (is_cti and cfg.time_field is None):
            fields = self._fields(record)
        if cfg.time_field is not None:
            what = f"time_field {cfg.time_field!r}"
            start = _parse_time(fields.get(cfg.time_field), what)
        else:
            what = "the record timestamp"
            if ticks is None:
                raise _Bad(
                    "the record has no timestamp",
                    "a record timestamp (ms since the epoch) or a time_field in the value",
                    _got(record.timestamp),
                    "produce records with timestamps, or set KafkaInputConfig.time_field",
                )
            start = ticks
        if is_cti:
            return SourceItem(ItemKind.CTI, record.offset, arrival, cti(start))
        if cfg.format == "raw":
            if record.value is None:
                raise _Bad(
                    "the record has no value (a tombstone)",
                    "the value bytes of an event",
                    "null",
                    "skip tombstones before this topic, or dead-letter them",
                )
            event = point(start, {cfg.value_column: bytes(record.value)})
        else:
            event = _event(
                self._shape,
                start,
                what,
                fields,
                self._payload_columns(),
                end_field=cfg.end_field,
                edge_field=cfg.edge_field,
                names="field",
                config="KafkaInputConfig",
            )
        return SourceItem(ItemKind.EVENT, record.offset, arrival, event)

    @staticmethod
    def _fields(record: Any) -> Mapping[str, Any]:
        value = record.value
        if value is None:
            raise _Bad(
                "the record has no value (a tombstone)",
                "one UTF-8 JSON object",
                "null",
                "skip tombstones before this topic, or dead-letter them",
            )
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Bad(
                "the value is not UTF-8 text", "one UTF-8 JSON object", str(e), "produce UTF-8"
            ) from None
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as e:
            raise _Bad(
                f"the value is not valid JSON ({e.msg} at column {e.colno})",
                "one JSON object",
                _got(text),
                "produce valid JSON, or read the topic with format='raw'",
            ) from None
        if not isinstance(fields, dict):
            raise _Bad(
                "the value is not a JSON object",
                "one JSON object",
                _got(text),
                'produce each record as {"field": value, ...}',
            )
        return fields

    def _message(self, record: Any, bad: _Bad, hint: bool) -> str:
        return (
            f"malformed record in Kafka topic {record.topic!r}, partition {record.partition}, "
            f"offset {record.offset}: {bad.what}; expected {bad.expected}; got {bad.got}. "
            f"Fix: {bad.fix}." + (_DEAD_LETTER_HINT if hint else "")
        )


class _DeadLetters(DeadLetters[Any]):
    """Writes malformed records to ``dead_letter_topic``: same key and value, the record's headers
    plus the error's (executor)."""

    def __init__(self, cfg: KafkaInputConfig) -> None:
        super().__init__(
            _retries(cfg), "This run delivers nothing read after the last committed offset."
        )
        self._cfg = cfg

    def _letter(self, record: Any, message: str) -> dict[str, Any]:
        headers = [(k, bytes(v) if v is not None else b"") for k, v in (record.headers or ())]
        headers += [
            (ERROR_HEADER, message.encode("utf-8")),
            (SOURCE_TOPIC_HEADER, str(record.topic).encode("utf-8")),
            (SOURCE_PARTITION_HEADER, str(record.partition).encode("ascii")),
            (SOURCE_OFFSET_HEADER, str(record.offset).encode("ascii")),
        ]
        return {"value": record.value, "key": record.key, "headers": headers}

    def _what(self, record: Any) -> str:
        return (
            f"write offset {record.offset} of partition {record.partition} to dead-letter topic "
            f"{self._cfg.dead_letter_topic!r}"
        )

    def _open(self) -> KafkaProducer:
        return _producer(self._cfg)

    def _write(self, producer: KafkaProducer, letter: dict[str, Any]) -> None:
        topic = self._cfg.dead_letter_topic
        assert topic is not None
        producer.send(topic, **letter).get(timeout=self._cfg.request_timeout.total_seconds())

    def _close(self, producer: KafkaProducer) -> None:
        _close(producer, self._cfg.request_timeout.total_seconds())

    def _discard(self, producer: KafkaProducer) -> None:
        _close(producer)


class KafkaInputFactory(InputAdapterFactory[KafkaInputConfig]):
    """Makes :class:`KafkaInputAdapter` instances (driver). All three shapes are supported (raw
    topics: POINT); the config's ``advance_time`` is what :meth:`declare_advance_time_properties`
    declares."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def create(self, config: KafkaInputConfig, shape: EventShape) -> KafkaInputAdapter:
        return KafkaInputAdapter(config, shape)

    def declare_advance_time_properties(
        self, config: KafkaInputConfig, shape: EventShape
    ) -> AdapterAdvanceTimeSettings | None:
        return config.advance_time


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _mark(record: Any) -> Mark | None:
    headers = _headers(record)
    return read_mark(*(headers.get(h) for h in (EPOCH_HEADER, INDEX_HEADER, COUNT_HEADER)))


class KafkaOutputAdapter(MarkedOutputAdapter):
    """Writes a query's committed output to one topic partition, each item exactly once.

    Runs on the driver; the engine calls :meth:`deliver` with each epoch's items in order and
    :meth:`progress` before it replays epochs after a restart.

    Idempotence without transactions. Every record carries the headers :data:`EPOCH_HEADER`,
    :data:`INDEX_HEADER` (its item's number among the query's output items, CTIs counted whether
    ``include_ctis`` writes them or not) and :data:`COUNT_HEADER` (the number after the last item
    of the delivery that wrote it). On first use the adapter reads the partition's tail back to
    the last record with these headers: the partition holds the items up to its number, which is
    what :meth:`progress` tells the engine, and the engine hands :meth:`deliver` only the items
    after it, however the run is cut into epochs (an epoch that failed part-way, or was cut by a
    crash, is completed after the restart). Records are sent in chunks that each fit one produce
    batch (appended all or nothing), one chunk at a time with ``acks=all`` and no client-side
    retries, so the partition never has a gap. After a failed chunk the adapter reconnects and
    reads the tail again before sending, so a chunk that reached the log although its
    acknowledgement was lost is not written twice. Each :meth:`deliver` returns after its last
    chunk is acknowledged (flushed).

    Consequences: the partition should belong to this query alone (records of other writers are
    passed over, but a second query writing the same partition is indistinguishable). A new query
    over a partition that already holds items skips those items, as a restart would: to start
    over, write to a new topic or partition. Readers see an epoch's records as they are appended.

    Transactions were considered: kafka-python's transactional producer runs against the test
    broker (Tansu), but records of aborted transactions stay visible to ``read_committed``
    consumers there, so the scheme above does not rely on them.
    """

    _record = "record"
    _target = "topic"
    _verbs = ("write", "written", "writing")
    _error = KafkaAdapterError
    _config: KafkaOutputConfig
    _producer: KafkaProducer | None

    @property
    def _where(self) -> str:
        return f"Kafka topic {self._config.topic!r} partition {self._config.partition}"

    @property
    def _reads(self) -> Retries:
        return _retries(self._config)

    @property
    def _sends(self) -> Retries:
        return _retries(self._config)

    def _send(
        self, epoch: int, values: list[tuple[int, bytes, bool]], first: int, count: int
    ) -> None:
        cfg = self._config
        timeout_s = cfg.request_timeout.total_seconds()
        if self._producer is None:
            self._producer = self._new_producer()
        producer = self._producer
        at = first
        while at < len(values):
            size, stop = 0, at
            # A chunk is one produce batch, appended all or nothing: the budget leaves room for
            # the batch's own framing.
            while stop < len(values) and (stop == at or size + len(values[stop][1]) < _CHUNK_BYTES):
                size += len(values[stop][1]) + _RECORD_OVERHEAD
                stop += 1
            futures = [
                producer.send(
                    cfg.topic,
                    value=value,
                    partition=cfg.partition,
                    headers=self._headers(epoch, index, count, b"CTI" if is_cti else b"INSERT"),
                )
                for index, value, is_cti in values[at:stop]
            ]
            producer.flush(timeout=timeout_s)
            for future in futures:
                future.get(timeout=timeout_s)
            self._mark = Mark(epoch, values[stop - 1][0], count)
            at = stop

    def _new_producer(self) -> KafkaProducer:
        cfg = self._config
        timeout = _ms(cfg.request_timeout)
        linger = 1000  # > the time to append one chunk, so a chunk is one batch until flush()
        return _producer(
            cfg,
            enable_idempotence=False,
            retries=0,
            max_in_flight_requests_per_connection=1,
            linger_ms=linger,
            batch_size=_BATCH_BYTES,
            max_request_size=_BATCH_BYTES * 2,
            delivery_timeout_ms=linger + 2 * timeout,
        )

    @staticmethod
    def _headers(epoch: int, index: int, count: int, kind: bytes) -> list[tuple[str, bytes]]:
        return [
            (KIND_HEADER, kind),
            (EPOCH_HEADER, str(epoch).encode("ascii")),
            (INDEX_HEADER, str(index).encode("ascii")),
            (COUNT_HEADER, str(count).encode("ascii")),
        ]

    def _read_tail(self) -> Mark | None:
        """The mark of the last record of this scheme in the partition, scanning back from the
        end in growing windows (records of other writers and transaction markers are passed)."""
        from kafka import TopicPartition

        cfg = self._config
        consumer = _consumer(cfg)
        try:
            ids = _partitions_of(consumer, cfg, cfg.topic)
            if cfg.partition not in ids:
                raise KafkaTopicNotFoundError(
                    f"Kafka topic {cfg.topic!r} at {cfg.bootstrap} has partitions {ids}, not "
                    f"{cfg.partition}; expected the output partition to exist. Fix: set "
                    "KafkaOutputConfig.partition to one of them, or add partitions to the topic"
                )
            tp = TopicPartition(cfg.topic, cfg.partition)
            begin = int(consumer.beginning_offsets([tp])[tp])
            hi = _end_offsets(consumer, [tp], cfg.request_timeout, confirm=True)[tp]
            window = _TAIL_WINDOW
            while hi > begin:
                lo = max(begin, hi - window)
                last = None
                for record in _fetch(consumer, tp, lo, hi, cfg.request_timeout, 500):
                    last = _mark(record) or last
                if last is not None:
                    return last
                hi, window = lo, window * 8
            return None
        finally:
            _close(consumer)

    def _close_producer(self, producer: KafkaProducer) -> None:
        _close(producer, self._config.request_timeout.total_seconds())


class KafkaOutputFactory(OutputAdapterFactory[KafkaOutputConfig]):
    """Makes :class:`KafkaOutputAdapter` instances (driver). The adapter connects on first use
    (:meth:`KafkaOutputAdapter.progress` or :meth:`KafkaOutputAdapter.deliver`)."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def create(self, config: KafkaOutputConfig, shape: EventShape) -> KafkaOutputAdapter:
        return KafkaOutputAdapter(config, shape)
