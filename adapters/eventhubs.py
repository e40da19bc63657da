"""Azure Event Hubs adapters (azure-eventhub): partitions in, one partition out, sequence numbers
kept by the engine.

**Input.** :class:`EventHubInputFactory` makes an :class:`EventHubInputAdapter` from an
:class:`EventHubInputConfig`. Every partition of the event hub is one source partition, named by
its partition id (``"0"``, ``"1"``, ...); a :class:`SourceItem`'s ``offset`` is the event's
*sequence number* (Event Hubs' own ``offset`` string is a byte position and is not used). Each
event's body is one item::

    body {"ts": "2026-01-01T00:00:00+00:00", "id": 1, "v": 2.5}     POINT at ts
    body {"ts": 10, "te": 20, "id": 1}                              INTERVAL [ts, te), int ticks
    body {"ts": 10, "side": "start", "id": 1} / {..., "side": "end", "te": 20}   EDGE halves
    property ctistream-kind: CTI, body {"ts": 15}                   explicit CTI at ts

    cfg = EventHubInputConfig(connection_string=conn, eventhub_name="sensors",
                              schema="id int, v double", time_field="ts")

* **Bounded runs.** The engine's runtime runs bounded inputs to their end. :meth:`partitions`
  (driver) snapshots every partition's last enqueued sequence number; :meth:`read` (executors)
  stops there, so every read of a partition gives the same events however much the hub has grown
  meanwhile. The snapshot travels with the pickled adapter; a :meth:`read` without one takes it
  when it starts. No END item is enqueued: an event hub does not end, so ``flush_on_stop`` flushes
  when the run stops.
* **Sequence numbers.** :meth:`read` ``(partition, n)`` reads from sequence number ``n``
  inclusive (``starting_position=n``), or from the first event still retained if that is later: a
  query restarted after committing ``n - 1`` reads from ``n``. The consumer group
  (``consumer_group``, default ``$Default``) only names the read; no checkpoint store is used and
  nothing is written to the hub: the engine keeps the positions.
* **Format.** ``"json"``: the body is one UTF-8 JSON object; ``schema`` (Spark DDL, required)
  lists the payload fields, which may include the time fields to keep them in the payload; other
  fields are ignored and a missing field is null. Types as in :mod:`adapters.files` for JSON lines
  (timestamps, dates and decimals also from strings).
* **Event time.** ``time_field`` names the start (for a POINT, its time); without it the start is
  the event's enqueued time (ms, so ticks are multiples of 1000). ``end_field`` is the end of an
  INTERVAL and of an END edge; ``edge_field`` says ``"start"`` or ``"end"`` for an EDGE input.
  Times are read as :mod:`adapters.files` reads them: int ticks (1 tick = 1 µs since the Unix
  epoch, UTC), a string of digits, an ISO-8601 date-time *with* a UTC offset, or
  ``"+inf"``/``"-inf"`` where the engine accepts them. Naive date-times and floats are refused.
* **Arrival** is the enqueued time in ticks, raised to the largest enqueued time seen before it
  in the same read of the partition, so that arrival stamps never decrease.
* **Explicit CTIs** are events with the application property :data:`KIND_PROPERTY`
  (``ctistream-kind``) = ``CTI``; their time is read exactly like an event's start (``time_field``
  of the body, else the enqueued time), so ``{"ts": "+inf"}`` is a flushing CTI. The property may
  also say ``INSERT`` (the default for events without it); anything else is malformed. A CTI is
  enqueued in its partition's order, so the input's CTI is the minimum over partitions: send CTIs
  to every partition (``EventHubProducerClient.send_batch(..., partition_id=p)``).
* **Malformed events** (not UTF-8 JSON, not an object, a missing or unreadable time, a wrong
  type) raise :class:`engine.errors.MalformedRecordError` naming the event hub, partition,
  sequence number and offset, what was expected, what was got and the fix. ``read`` is a
  generator, so every item before the bad event has been yielded first, and the engine processes
  and delivers them before it raises. With ``dead_letter_eventhub`` the event is sent to that
  event hub of the same namespace instead (same body, its application properties plus
  ``ctistream-error``, ``ctistream-source-eventhub``, ``ctistream-source-partition`` and
  ``ctistream-source-sequence-number``; partition key = the source partition, so the letters of
  one partition stay in order) and reading goes on. A dead-letter *hub* rather than a file: reads
  run on executors, which share no file system on a cluster, while the hub is already reachable
  and as durable as the source (the Kafka adapter does the same with a topic). A run sends each
  letter once however it is cut into epochs; dead letters are at-least-once: a replayed read
  sends them again; deduplicate by (source hub, partition, sequence number).

**Output.** :class:`EventHubOutputFactory` makes an :class:`EventHubOutputAdapter` that sends
each committed event as one JSON body ``{"start", "end", "edge", <payload fields>}`` (times
ISO-8601 with ``+00:00``, or ``"+inf"``) and, with ``include_ctis`` (default), each CTI as
``{"start": t}`` with the property ``ctistream-kind: CTI``. All events go to one partition
(``partition_id``, default ``"0"``) in delivery order, in batches (``create_batch``/
``send_batch``, each batch appended all or nothing). Read back with
``EventHubInputConfig(time_field="start", end_field="end", edge_field="edge", schema=...)`` (no
``end_field`` for POINT), the output is the same stream. Delivery is exactly-once per item: see
:class:`EventHubOutputAdapter`.

**Endpoint down.** Every client operation is retried by azure-eventhub itself: ``retry_total``
retries, ``retry_backoff`` growing exponentially (``retry_mode``) up to ``retry_backoff_max``.
Then :class:`EventHubsUnavailableError` says what could not be done, at which endpoint, and how to
fix it (:class:`EventHubNotFoundError` for a missing event hub or partition, a plain
:class:`EventHubsAdapterError` for refused credentials). When a connection drops in the middle of
a read, azure-eventhub's receiver reconnects quietly instead of reporting it, so a read that gets
nothing for ``receive_timeout`` although the snapshot says more events exist counts as a failure:
it checks the partition (a failure to reach it ends the read with the error above) and reconnects
where it stopped, ``retry_total`` times. An input that fails on the driver fails the query before
it runs; one that fails on an executor fails the run (or a started query's epoch) with a
:class:`~engine.errors.QueryRunError` naming the query and the epoch whose message is this error's
(its class name, text and fix; not the Python worker's traceback); an output that fails leaves
the epochs before it in the hub, and a restart completes the failed epoch.

Who calls what, and where: the engine calls ``create``, :meth:`EventHubInputAdapter.partitions` and
:meth:`EventHubInputAdapter.payload_schema` on the driver, pickles the adapter (configuration,
shape, snapshot) and calls :meth:`EventHubInputAdapter.read` on executors, where the consumer
client is built. Clients are never built in ``__init__``. Output adapters live on the driver.

Tested with azure-eventhub 5.15 (its pure-Python AMQP transport) against an in-memory endpoint
(``tests/brokers/eventhubs.py``); ``UseDevelopmentEmulator=true`` in the connection string makes
the client speak plain AMQP, as for the Event Hubs emulator.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
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
from ctistream.engine.events import EventShape, cti
from ctistream.engine.settings import AdapterAdvanceTimeSettings
from ctistream.engine.temporal import format_ticks, to_duration
from pydantic import BeforeValidator, Field, SecretStr, ValidationInfo, model_validator

if TYPE_CHECKING:
    from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

__all__ = [
    "COUNT_PROPERTY",
    "EPOCH_PROPERTY",
    "INDEX_PROPERTY",
    "KIND_PROPERTY",
    "EventHubConnectionConfig",
    "EventHubInputAdapter",
    "EventHubInputConfig",
    "EventHubInputFactory",
    "EventHubNotFoundError",
    "EventHubOutputAdapter",
    "EventHubOutputConfig",
    "EventHubOutputFactory",
    "EventHubsAdapterError",
    "EventHubsDataLossError",
    "EventHubsUnavailableError",
]

#: Application property marking an event as a CTI (value ``CTI``) or an event (``INSERT``).
KIND_PROPERTY = "ctistream-kind"
#: Output properties: the epoch an event belongs to, its item's number among the query's output
#: items (from the query's first, CTIs counted, sent or not), and the number after the last item of
#: the delivery that sent it.
EPOCH_PROPERTY = "ctistream-epoch"
INDEX_PROPERTY = "ctistream-item"
COUNT_PROPERTY = "ctistream-count"
#: Dead-letter properties, added to the event's own.
ERROR_PROPERTY = "ctistream-error"
SOURCE_EVENTHUB_PROPERTY = "ctistream-source-eventhub"
SOURCE_PARTITION_PROPERTY = "ctistream-source-partition"
SOURCE_SEQUENCE_PROPERTY = "ctistream-source-sequence-number"

_DEAD_LETTER_HINT = (
    " Or set EventHubInputConfig.dead_letter_eventhub to set malformed events aside in another "
    "event hub."
)
_QUEUED_BATCHES = 4  # batches a receiver thread may hold before the reader takes them
_TAIL_WINDOW = 16


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class EventHubsAdapterError(EngineError):
    """An Event Hubs adapter cannot do its work; the message says what, where and how to fix it."""


class EventHubsUnavailableError(EventHubsAdapterError, ConnectionError):
    """The endpoint did not answer (or kept failing) after every configured retry."""


class EventHubNotFoundError(EventHubsAdapterError, LookupError):
    """The event hub (or the output partition) does not exist in the namespace."""


class EventHubsDataLossError(EventHubsAdapterError):
    """A partition no longer holds events the query reads on from: they expired first."""


class _ClientFailed(Exception):
    """The client reported an error after its own retries (from its receive thread)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


def _timeout(value: Any, info: ValidationInfo) -> Any:
    # A duration as everywhere (semantics §1): a timedelta or "10 seconds", never a bare number.
    return to_duration(
        value, name=str(info.field_name), owner=str((info.config or {}).get("title", "config"))
    )


_Timeout = Annotated[timedelta, BeforeValidator(_timeout)]


_ENDPOINT = re.compile(r"sb://[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?/?")
_HUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_FORM = (
    "'Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
    "SharedAccessKey=<key>[;EntityPath=<hub>]'"
)


def _settings(connection_string: str) -> dict[str, str]:
    parts = (p.split("=", 1) for p in connection_string.split(";") if "=" in p)
    return {k.strip().lower(): v.strip() for k, v in parts}


def _name(value: str | None, role: str) -> None:
    if value is not None and not value.strip():
        raise ValueError(f"{role} must name a field; got an empty string")


class EventHubConnectionConfig(SecretConfig):
    """How to reach the event hub; shared by :class:`EventHubInputConfig` and
    :class:`EventHubOutputConfig`.

    ``connection_string`` (a :class:`~pydantic.SecretStr`, never printed, not even in part by a
    validation error: :mod:`adapters._secret`) is the namespace's or the event hub's, as the
    portal shows it: ``Endpoint=sb://<ns>.servicebus.windows.net/;
    SharedAccessKeyName=...;SharedAccessKey=...[;EntityPath=<hub>]`` (add
    ``UseDevelopmentEmulator=true`` for the emulator). ``eventhub_name`` may be left out when the
    string has ``EntityPath``; if both are given they must agree. ``consumer_group`` names the reads
    (the input's, and the output's read of its partition tail). Failures: azure-eventhub retries
    each operation ``retry_total`` times, waiting ``retry_backoff`` (doubling with
    ``retry_mode="exponential"``) up to ``retry_backoff_max``; a read that gets nothing for
    ``receive_timeout`` while events are due counts as a failure too.
    """

    connection_string: SecretStr
    eventhub_name: str | None = None
    consumer_group: str = "$Default"
    retry_total: int = Field(default=3, ge=0)
    retry_backoff: _Timeout = timedelta(milliseconds=800)
    retry_backoff_max: _Timeout = timedelta(seconds=120)
    retry_mode: Literal["exponential", "fixed"] = "exponential"
    receive_timeout: _Timeout = timedelta(seconds=60)

    @model_validator(mode="after")
    def _check_connection(self) -> EventHubConnectionConfig:
        # The messages never show a part of the string: a key may have run into it.
        settings = _settings(self.connection_string.get_secret_value())
        endpoint = settings.get("endpoint", "")
        if not endpoint.startswith("sb://"):
            raise ValueError(
                "connection_string has no 'Endpoint=sb://<namespace host>/'; expected an Event "
                "Hubs connection string. Fix: copy it from the namespace's or the event hub's "
                "'Shared access policies' in the portal"
            )
        if not _ENDPOINT.fullmatch(endpoint):
            raise ValueError(
                "the Endpoint of connection_string is not 'sb://<namespace host>[:port]/' (a "
                "host name and nothing after the '/'; the value is not shown, as a secret may "
                "have run into it). Fix: end it at the '/' and separate the parts with ';': "
                f"{_FORM}"
            )
        entity = settings.get("entitypath")
        if entity and not _HUB_NAME.fullmatch(entity):
            raise ValueError(
                "the EntityPath of connection_string is not an event hub name (letters, digits, "
                "'.', '-' and '_', starting and ending with a letter or digit; the value is not "
                "shown, as a secret may have run into it). Fix: separate the parts with ';': "
                f"{_FORM}, or leave EntityPath out and set eventhub_name"
            )
        if self.eventhub_name is not None and not self.eventhub_name.strip():
            raise ValueError("eventhub_name must name an event hub; got an empty string")
        if entity and self.eventhub_name and entity != self.eventhub_name:
            raise ValueError(
                f"connection_string is for event hub {entity!r} (EntityPath) but eventhub_name is "
                f"{self.eventhub_name!r}; expected one event hub. Fix: use a namespace-level "
                "connection string (no EntityPath), or drop eventhub_name"
            )
        if not (entity or self.eventhub_name):
            raise ValueError(
                "no event hub named: the connection string has no EntityPath and eventhub_name "
                "is not set. Fix: EventHub...Config(..., eventhub_name='<hub>'), or use the "
                "event hub's own connection string (it ends in ';EntityPath=<hub>')"
            )
        if self.retry_backoff < timedelta(0) or self.receive_timeout <= timedelta(0):
            raise ValueError(
                f"retry_backoff must not be negative and receive_timeout must be positive; got "
                f"{self.retry_backoff!r} and {self.receive_timeout!r}"
            )
        return self

    @property
    def hub(self) -> str:
        """The event hub's name."""
        settings = _settings(self.connection_string.get_secret_value())
        return self.eventhub_name or settings["entitypath"]

    @property
    def endpoint(self) -> str:
        """The namespace endpoint, for messages (no secret in it)."""
        return _settings(self.connection_string.get_secret_value())["endpoint"].rstrip("/")


class EventHubInputConfig(EventHubConnectionConfig):
    """What to read and how (see the module docstring for the event forms).

    ``schema`` (alias of the field ``schema_``): the payload as Spark DDL, required (a live hub is
    not sampled to guess one). ``time_field``/``end_field``/``edge_field`` name the body's special
    fields; without ``time_field`` the start is the enqueued time. ``max_batch_size`` is how many
    events the client prefetches and hands over at once. ``dead_letter_eventhub`` names an event
    hub of the same namespace for malformed events (the connection string must allow sending to
    it). ``advance_time`` is what :meth:`EventHubInputFactory.declare_advance_time_properties`
    declares; binding-level ``AdvanceTimeSettings`` override it.
    """

    format: Literal["json"] = "json"
    schema_: str = Field(alias="schema")
    time_field: str | None = None
    end_field: str | None = None
    edge_field: str | None = None
    max_batch_size: int = Field(default=300, ge=1)
    dead_letter_eventhub: str | None = None
    advance_time: AdapterAdvanceTimeSettings | None = None

    @model_validator(mode="after")
    def _check_input(self) -> EventHubInputConfig:
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
        _parse_ddl(self.schema_)
        if self.dead_letter_eventhub is not None and self.dead_letter_eventhub == self.hub:
            raise ValueError(
                f"dead_letter_eventhub is the input event hub {self.hub!r}; expected another "
                "event hub. Fix: e.g. dead_letter_eventhub='<hub>-dead'"
            )
        return self


class EventHubOutputConfig(EventHubConnectionConfig):
    """Where to send a query's output: one partition of one event hub (it must exist).

    ``time_field``/``end_field``/``edge_field`` name the body fields the output writes the start,
    end and edge type under; the defaults are what :class:`EventHubInputConfig` is told to read
    back. ``include_ctis=False`` sends events only. The partition should belong to this query
    alone: the adapter learns what it already sent from the partition's tail.
    """

    partition_id: str = "0"
    time_field: str = "start"
    end_field: str = "end"
    edge_field: str = "edge"
    include_ctis: bool = True

    @model_validator(mode="after")
    def _check_output(self) -> EventHubOutputConfig:
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
# Clients, retries and reading a range of sequence numbers
# ---------------------------------------------------------------------------------------------


def _client_options(cfg: EventHubConnectionConfig, retries: int | None = None) -> dict[str, Any]:
    return {
        "conn_str": cfg.connection_string.get_secret_value(),
        "eventhub_name": cfg.hub,
        "retry_total": cfg.retry_total if retries is None else retries,
        "retry_backoff_factor": cfg.retry_backoff.total_seconds(),
        "retry_backoff_max": cfg.retry_backoff_max.total_seconds(),
        "retry_mode": cfg.retry_mode,
    }


def _consumer(cfg: EventHubConnectionConfig) -> EventHubConsumerClient:
    from azure.eventhub import EventHubConsumerClient

    return EventHubConsumerClient.from_connection_string(
        consumer_group=cfg.consumer_group, **_client_options(cfg)
    )


def _producer(
    cfg: EventHubConnectionConfig, hub: str | None = None, retries: int | None = None
) -> EventHubProducerClient:
    from azure.eventhub import EventHubProducerClient

    options = _client_options(cfg, retries)
    if hub is not None:
        options["eventhub_name"] = hub
    return EventHubProducerClient.from_connection_string(**options)


def _client_error(error: BaseException) -> bool:
    from azure.eventhub.exceptions import EventHubError

    return isinstance(error, EventHubError | Stalled | _ClientFailed)


def _final(error: BaseException) -> bool:
    """A failure no attempt cures: a missing event hub or partition, refused credentials."""
    from azure.eventhub.exceptions import AuthenticationError

    cause = error.error if isinstance(error, _ClientFailed) else error
    return _not_found(cause) or isinstance(cause, AuthenticationError)


def _not_found(error: BaseException) -> bool:
    error = error.error if isinstance(error, _ClientFailed) else error
    text = f"{error} {getattr(error, 'details', '')}".lower()
    return any(s in text for s in ("notfound", "not-found", "not found", "status code: 404"))


def _failure(
    cfg: EventHubConnectionConfig,
    what: str,
    error: BaseException,
    after: str,
    *,
    hub: str | None = None,
    named_by: str = "eventhub_name / EntityPath",
) -> Exception:
    """The clear error for a client failure that the retries did not cure, of a client of
    event hub ``hub`` (default: the config's), which the config's ``named_by`` names."""
    from azure.eventhub.exceptions import AuthenticationError

    cause = error.error if isinstance(error, _ClientFailed) else error
    text = f"{type(cause).__name__}: {' '.join(str(cause).split())}"
    where = f"event hub {hub or cfg.hub!r} at {cfg.endpoint}"
    if _not_found(cause):
        return EventHubNotFoundError(
            f"cannot {what}: {where} was not found ({text}). Expected an existing event hub "
            f"(and partition). Fix: create it, or correct {named_by} and the partition id. "
            f"{after}"
        )
    if isinstance(cause, AuthenticationError):
        return EventHubsAdapterError(
            f"cannot {what}: {where} refused the credentials ({text}). Expected a key with "
            "Listen rights to read and Send rights to write. Fix: check SharedAccessKeyName and "
            f"SharedAccessKey (or the SAS token) of the connection string. {after}"
        )
    return EventHubsUnavailableError(
        f"cannot {what}: no answer from {where} after {cfg.retry_total} retries "
        f"(retry_backoff {cfg.retry_backoff}, {cfg.retry_mode}, at most {cfg.retry_backoff_max}); "
        f"last error: {text}. Expected a reachable Event Hubs endpoint. "
        "Fix: check the connection string's Endpoint and key (Listen rights to read, Send to "
        "write) and that port 5671 (AMQP over TLS; 5672 for the emulator) is open from the "
        "driver and every executor; for a slow or restarting endpoint raise retry_total or "
        f"retry_backoff_max. {after}"
    )


def _retries(cfg: EventHubConnectionConfig) -> Retries:
    """Operations of clients that retry on their own: failures become clear errors at once, but
    a stalled read is tried again here, ``retry_total`` times, waiting ``retry_backoff`` (doubling
    with ``retry_mode="exponential"``) up to ``retry_backoff_max``."""
    return Retries(
        attempts=cfg.retry_total + 1,
        backoff=cfg.retry_backoff,
        max_backoff=cfg.retry_backoff_max,
        doubling=cfg.retry_mode == "exponential",
        ours=_client_error,
        again=lambda error: isinstance(error, Stalled),
        fail=partial(_failure, cfg),
    )


def _send_retries(cfg: EventHubConnectionConfig) -> Retries:
    """Sends of the output, whose producer does not retry (a retried send that was in fact
    enqueued would be a duplicate): any client failure is tried again as a stall is, but a
    missing event hub or refused credentials fail at once."""
    return replace(_retries(cfg), again=lambda error: not _final(error))


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close()


def _receive(
    cfg: EventHubConnectionConfig, partition: str, start: int, end: int, batch: int = 300
) -> Iterator[Any]:
    """The events of ``partition`` with sequence numbers in ``[start, end]``, in order.

    ``EventHubConsumerClient.receive_batch`` blocks and calls back, so it runs in a thread that
    hands batches over through a small queue (the reader's pace holds it back). Raises
    :class:`_ClientFailed` when the client gives up and :class:`Stalled` when nothing comes for
    ``receive_timeout``. Closing the generator closes the client.
    """
    if start > end:
        return
    client = _consumer(cfg)
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=_QUEUED_BATCHES)
    stopping = threading.Event()

    def put(item: tuple[str, Any]) -> None:
        while not stopping.is_set():
            with contextlib.suppress(queue.Full):
                handoff.put(item, timeout=0.1)
                return

    def receive() -> None:
        try:
            client.receive_batch(
                lambda _, events: put(("events", events)) if events else None,
                partition_id=partition,
                starting_position=start,
                starting_position_inclusive=True,
                max_batch_size=batch,
                prefetch=batch,
                on_error=lambda _, error: put(("error", error)),
            )
        except Exception as error:
            put(("error", error))
        put(("done", None))

    thread = threading.Thread(target=receive, name=f"ctistream-eventhubs-{partition}", daemon=True)
    thread.start()
    last = start - 1
    wait = cfg.receive_timeout.total_seconds()
    try:
        while last < end:
            try:
                kind, value = handoff.get(timeout=wait)
            except queue.Empty:
                raise Stalled(
                    f"nothing received for {cfg.receive_timeout} after sequence number {last}; "
                    f"expected events up to {end}"
                ) from None
            if kind == "error":
                raise _ClientFailed(value)
            if kind == "done":
                raise Stalled(f"the receiver stopped after sequence number {last}")
            for event in value:
                seq = event.sequence_number
                if seq is None or seq <= last:
                    continue  # a redelivery after the client reconnected
                if seq > end:
                    return
                last = seq
                yield event
    finally:
        stopping.set()
        _close(client)
        thread.join(timeout=10)


def _properties(event: EventData) -> dict[str, Any]:
    def text(value: Any) -> Any:
        return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value

    return {text(k): text(v) for k, v in (event.properties or {}).items()}


def _enqueued_ticks(event: EventData) -> int | None:
    ms = event.system_properties.get(b"x-opt-enqueued-time")
    return None if ms is None else int(ms) * 1000


def _body(event: EventData) -> bytes:
    from azure.eventhub.amqp import AmqpMessageBodyType

    body = event.body
    if event.body_type is AmqpMessageBodyType.DATA:
        return body if isinstance(body, bytes) else b"".join(bytes(b) for b in body)
    if isinstance(body, str | bytes):
        return body.encode("utf-8") if isinstance(body, str) else body
    raise _Bad(
        f"the body is an AMQP {event.body_type.value} section",
        "a data body holding one UTF-8 JSON object",
        _got(body),
        "send the JSON as the event body (EventData('{...}'))",
    )


# ---------------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------------


class EventHubInputAdapter(InputAdapter):
    """Reads one event hub as events of one shape, one source partition per hub partition.

    Made by :class:`EventHubInputFactory` on the driver, where :meth:`partitions` lists the
    partitions and snapshots their last sequence numbers and :meth:`payload_schema` gives the
    schema. Pickled to executors, which call :meth:`read`. Holds the configuration, the shape and
    the snapshot; clients are built inside the calls that use them.
    """

    bounded: ClassVar[bool] = False

    def __init__(self, config: EventHubInputConfig, shape: EventShape) -> None:
        shape = EventShape(shape)
        where = f"event hub {config.hub!r}"
        needs_end = shape is not EventShape.POINT
        if needs_end and config.end_field is None:
            raise QueryBuildError(
                f"a {shape.value} Event Hubs input needs end_field; got none for {where}. "
                "Fix: EventHubInputConfig(..., end_field='<field of the end time>')"
            )
        if not needs_end and config.end_field is not None:
            raise QueryBuildError(
                f"a POINT Event Hubs input has no end; got end_field={config.end_field!r} for "
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
        self._columns: list[_Column] | None = None

    # -- driver -------------------------------------------------------------------------------
    def source(self) -> str:
        return f"event hub {self._config.hub!r}"

    def partitions(self) -> Sequence[str]:
        """The hub's partition ids; snapshots each one's last enqueued sequence number (-1 when
        empty), where every :meth:`read` stops. Raises :class:`EventHubNotFoundError` for a
        missing hub and :class:`EventHubsUnavailableError` when the endpoint does not answer."""
        cfg = self._config

        def snapshot() -> dict[str, int]:
            client = _consumer(cfg)
            try:
                return {p: _last_sequence(client, p) for p in client.get_partition_ids()}
            finally:
                _close(client)

        self._ends = _retries(cfg).call(
            f"list the partitions of event hub {cfg.hub!r}",
            "The query was not started.",
            snapshot,
        )
        return list(self._ends)

    def latest_offsets(self) -> Mapping[str, int]:
        """A new snapshot (see :meth:`partitions`): the next sequence number per partition."""
        before = None if self._ends is None else set(self._ends)
        self.partitions()
        assert self._ends is not None
        if before is not None and set(self._ends) != before:
            raise EventHubsAdapterError(
                f"event hub {self._config.hub!r} now has partitions {sorted(self._ends)}; the "
                f"query started with {sorted(before)}. Fix: restart the query with a new "
                "checkpoint directory to read the new partitions"
            )
        return {p: last + 1 for p, last in self._ends.items()}

    @property
    def last_sequence_numbers(self) -> Mapping[str, int] | None:
        """The snapshot by partition id (None before :meth:`partitions`)."""
        return None if self._ends is None else dict(self._ends)

    def size_hint(self) -> int | None:
        """At most how many events a read of the snapshot yields: per partition, its last
        sequence number plus one (None before :meth:`partitions`)."""
        return None if self._ends is None else sum(last + 1 for last in self._ends.values())

    def payload_schema(self) -> str:
        """The payload as Spark DDL: the configured schema."""
        return self._config.schema_

    # -- executor -----------------------------------------------------------------------------
    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        """Yield the items of partition ``partition`` from sequence number ``start_offset``
        (inclusive; 0: the first retained event) up to the snapshot.

        Deterministic while the events are retained: the same partition and sequence number give
        the same items. Raises :class:`EventHubsDataLossError` when events from ``start_offset``
        (above 0) on expired before this read, :class:`MalformedRecordError` at a malformed
        event (unless it is dead-lettered) after yielding every item before it, and
        :class:`EventHubsUnavailableError` when the endpoint cannot be reached (or stops
        answering) after every retry.
        """
        cfg = self._config
        what = f"read partition {partition!r} of event hub {cfg.hub!r} from sequence number"
        after = "This run delivers nothing read after the last committed sequence number."
        retries = _retries(cfg)
        snapshot = None if self._ends is None else self._ends.get(partition)
        end = (
            snapshot
            if snapshot is not None
            else retries.call(
                f"{what} {start_offset}", after, lambda: _snapshot_one(cfg, partition)
            )
        )
        next_seq = max(0, start_offset)
        high: int | None = None  # largest enqueued time so far: the arrival floor
        dead = (
            _DeadLetters(cfg, partition)
            if cfg.dead_letter_eventhub is not None and self.side_effects
            else None
        )
        attempts = 0

        def attempt() -> Iterator[SourceItem]:
            # One receiver; after a stall the next attempt goes on from next_seq.
            nonlocal attempts, next_seq, high
            attempts += 1
            if attempts > 1:
                first = retries.call(
                    f"{what} {next_seq}", after, lambda: _snapshot_one(cfg, partition, begin=True)
                )
                if first > next_seq > 0:
                    raise self._lost(partition, next_seq, min(first, end + 1))
                if first > end:
                    return  # a read from the start: nothing up to the snapshot is held
            for event in _receive(cfg, partition, next_seq, end, cfg.max_batch_size):
                if event.sequence_number > next_seq > 0:  # sequence numbers have no gaps
                    raise self._lost(partition, next_seq, event.sequence_number)
                ticks = _enqueued_ticks(event)
                if ticks is not None:
                    high = ticks if high is None else max(high, ticks)
                arrival = high if high is not None else 0
                next_seq = event.sequence_number + 1
                try:
                    item = self._item(event, ticks, arrival)
                except _Bad as bad:
                    message = self._message(partition, event, bad)
                    if cfg.dead_letter_eventhub is None:
                        raise MalformedRecordError(message + _DEAD_LETTER_HINT) from None
                    if dead is not None:
                        dead.send(event, message)
                    continue
                yield item

        try:
            yield from retries.resume(lambda: f"{what} {next_seq}", after, attempt)
        finally:
            if dead is not None:
                dead.close()

    # -- helpers ------------------------------------------------------------------------------
    def _payload_columns(self) -> list[_Column]:
        if self._columns is None:
            self._columns = _parse_ddl(self._config.schema_)
        return self._columns

    def _item(self, event: EventData, ticks: int | None, arrival: int) -> SourceItem:
        cfg = self._config
        kind = _properties(event).get(KIND_PROPERTY)
        is_cti = False
        if kind is not None:
            text = str(kind).strip().upper()
            if text not in ("CTI", "INSERT", ""):
                raise _Bad(
                    f"application property {KIND_PROPERTY!r} is not an event kind",
                    "'CTI' or 'INSERT' (or no property, for an event)",
                    _got(kind),
                    "mark CTI events with the property value CTI",
                )
            is_cti = text == "CTI"
        fields: Mapping[str, Any] = {}
        if not (is_cti and cfg.time_field is None):
            fields = self._fields(event)
        if cfg.time_field is not None:
            what = f"time_field {cfg.time_field!r}"
            start = _parse_time(fields.get(cfg.time_field), what)
        else:
            what = "the enqueued time"
            if ticks is None:
                raise _Bad(
                    "the event has no enqueued time",
                    "an x-opt-enqueued-time annotation, or a time_field in the body",
                    "none",
                    "set EventHubInputConfig.time_field",
                )
            start = ticks
        seq = event.sequence_number
        if is_cti:
            return SourceItem(ItemKind.CTI, seq, arrival, cti(start))
        made = _event(
            self._shape,
            start,
            what,
            fields,
            self._payload_columns(),
            end_field=cfg.end_field,
            edge_field=cfg.edge_field,
            names="field",
            config="EventHubInputConfig",
        )
        return SourceItem(ItemKind.EVENT, seq, arrival, made)

    @staticmethod
    def _fields(event: EventData) -> Mapping[str, Any]:
        raw = _body(event)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Bad(
                "the body is not UTF-8 text", "one UTF-8 JSON object", str(e), "send UTF-8"
            ) from None
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as e:
            raise _Bad(
                f"the body is not valid JSON ({e.msg} at column {e.colno})",
                "one JSON object",
                _got(text),
                "send each event as one JSON object",
            ) from None
        if not isinstance(fields, dict):
            raise _Bad(
                "the body is not a JSON object",
                "one JSON object",
                _got(text),
                'send each event as {"field": value, ...}',
            )
        return fields

    def _lost(self, partition: str, first: int, after: int) -> EventHubsDataLossError:
        """The error for events ``first`` .. ``after - 1`` of ``partition`` gone before they
        were read (semantics §9: a replay reads the offsets the checkpoint logged)."""
        return EventHubsDataLossError(
            f"partition {partition!r} of event hub {self._config.hub!r} no longer holds "
            f"sequence numbers {first} to {after - 1}: they expired (the event hub's retention) "
            "before the query read them; expected every event from the sequence number the "
            "query reads on from (its last epoch's, or its checkpoint's). Reading on from the "
            "first event held would lose them without a word. Fix: start the query on a new "
            "checkpoint directory to read on from what the hub holds (those events are lost "
            "to it), and keep events longer than the query may be stopped (the retention)"
        )

    def _message(self, partition: str, event: EventData, bad: _Bad) -> str:
        ticks = _enqueued_ticks(event)
        enqueued = format_ticks(ticks) if ticks is not None else "unknown"
        return (
            f"malformed event in event hub {self._config.hub!r}, partition {partition!r}, "
            f"sequence number {event.sequence_number} (offset {event.offset}, enqueued "
            f"{enqueued}): {bad.what}; expected {bad.expected}; got {bad.got}. Fix: {bad.fix}."
        )


def _last_sequence(client: EventHubConsumerClient, partition: str) -> int:
    props = client.get_partition_properties(partition)
    return -1 if props["is_empty"] else int(props["last_enqueued_sequence_number"])


def _snapshot_one(cfg: EventHubConnectionConfig, partition: str, begin: bool = False) -> int:
    """The partition's last sequence number (-1 when empty), or with ``begin`` its first
    retained one (a large number when empty, so that nothing is left to read)."""
    client = _consumer(cfg)
    try:
        if not begin:
            return _last_sequence(client, partition)
        props = client.get_partition_properties(partition)
        return 2**63 - 1 if props["is_empty"] else int(props["beginning_sequence_number"])
    finally:
        _close(client)


class _DeadLetters(DeadLetters["EventData"]):
    """Sends the malformed events of one partition to ``dead_letter_eventhub``: same body, the
    event's application properties plus the error's, the source partition as partition key so the
    letters of one partition stay in order (executor)."""

    def __init__(self, cfg: EventHubInputConfig, partition: str) -> None:
        hub = cfg.dead_letter_eventhub
        fail = partial(_failure, cfg, hub=hub, named_by="dead_letter_eventhub")
        super().__init__(
            replace(_retries(cfg), fail=fail),
            "This run delivers nothing read after the last committed sequence number.",
        )
        self._cfg = cfg
        self._partition = partition

    def _letter(self, event: EventData, message: str) -> EventData:
        from azure.eventhub import EventData

        try:
            body = _body(event)
        except _Bad:
            body = str(event.body).encode("utf-8")
        letter = EventData(body)
        letter.properties = {
            **_properties(event),
            ERROR_PROPERTY: message,
            SOURCE_EVENTHUB_PROPERTY: self._cfg.hub,
            SOURCE_PARTITION_PROPERTY: self._partition,
            SOURCE_SEQUENCE_PROPERTY: str(event.sequence_number),
        }
        return letter

    def _what(self, event: EventData) -> str:
        return (
            f"send sequence number {event.sequence_number} of partition {self._partition!r} to "
            f"dead-letter event hub {self._cfg.dead_letter_eventhub!r}"
        )

    def _open(self) -> EventHubProducerClient:
        assert self._cfg.dead_letter_eventhub is not None
        return _producer(self._cfg, self._cfg.dead_letter_eventhub)

    def _write(self, producer: EventHubProducerClient, letter: EventData) -> None:
        producer.send_batch([letter], partition_key=self._partition)

    def _close(self, producer: EventHubProducerClient) -> None:
        _close(producer)


class EventHubInputFactory(InputAdapterFactory[EventHubInputConfig]):
    """Makes :class:`EventHubInputAdapter` instances (driver). All three shapes are supported;
    the config's ``advance_time`` is what :meth:`declare_advance_time_properties` declares."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def create(self, config: EventHubInputConfig, shape: EventShape) -> EventHubInputAdapter:
        return EventHubInputAdapter(config, shape)

    def declare_advance_time_properties(
        self, config: EventHubInputConfig, shape: EventShape
    ) -> AdapterAdvanceTimeSettings | None:
        return config.advance_time


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _mark(event: EventData) -> Mark | None:
    props = _properties(event)
    return read_mark(*(props.get(p) for p in (EPOCH_PROPERTY, INDEX_PROPERTY, COUNT_PROPERTY)))


class EventHubOutputAdapter(MarkedOutputAdapter):
    """Sends a query's committed output to one event hub partition, each item exactly once.

    Runs on the driver; the engine calls :meth:`deliver` with each epoch's items in order and
    :meth:`progress` before it replays epochs after a restart.

    Idempotence. Every event carries the application properties :data:`EPOCH_PROPERTY`,
    :data:`INDEX_PROPERTY` (its item's number among the query's output items, CTIs counted
    whether ``include_ctis`` sends them or not) and :data:`COUNT_PROPERTY` (the number after the
    last item of the delivery that sent it), as ints. On first use the adapter reads the
    partition's tail back, through the same endpoint, to the last event with these properties:
    the partition holds the items up to its number, which is what :meth:`progress` tells the
    engine, and the engine hands :meth:`deliver` only the items after it, however the run is cut
    into epochs (an epoch that failed part-way, or was cut by a crash, is completed after the
    restart). Events go in batches, each appended all or
    nothing, one batch at a time, with no client-side retry of a send (a retried send whose first
    attempt was in fact enqueued would duplicate it): after a failed send the adapter reconnects,
    reads the tail again and sends what is missing, ``retry_total`` times (a missing event hub or
    refused credentials end it at once).

    Consequences: the partition should belong to this query alone (events of other writers are
    passed over, but a second query writing the same partition is indistinguishable). A new query
    over a partition that already holds items skips those items, as a restart would: to start
    over, send to a new event hub or partition. Readers see an epoch's events as they are
    appended.
    """

    _record = "event"
    _target = "event hub"
    _verbs = ("send", "sent", "sending")
    _error = EventHubsAdapterError
    _config: EventHubOutputConfig
    _producer: EventHubProducerClient | None

    @property
    def _where(self) -> str:
        return f"partition {self._config.partition_id!r} of event hub {self._config.hub!r}"

    @property
    def _reads(self) -> Retries:
        return _retries(self._config)

    @property
    def _sends(self) -> Retries:
        return _send_retries(self._config)

    def _send(
        self, epoch: int, values: list[tuple[int, bytes, bool]], first: int, count: int
    ) -> None:
        from azure.eventhub import EventData

        cfg = self._config
        if self._producer is None:
            self._producer = _producer(cfg, retries=0)
        producer = self._producer
        batch = producer.create_batch(partition_id=cfg.partition_id)
        last = None  # the index of the batch's last event
        for index, body, is_cti in values[first:]:
            event = EventData(body)
            event.properties = {
                KIND_PROPERTY: "CTI" if is_cti else "INSERT",
                EPOCH_PROPERTY: epoch,
                INDEX_PROPERTY: index,
                COUNT_PROPERTY: count,
            }
            try:
                batch.add(event)
            except ValueError:
                if len(batch) == 0:
                    raise EventHubsAdapterError(
                        f"output item {index} (epoch {epoch}) is {len(body)} bytes, more than one "
                        f"batch of event hub {cfg.hub!r} may hold ({batch.max_size_in_bytes} "
                        "bytes); expected smaller events. Fix: select fewer or smaller payload "
                        "columns, or use a tier with larger messages"
                    ) from None
                producer.send_batch(batch)
                self._mark = Mark(epoch, last, count)
                batch = producer.create_batch(partition_id=cfg.partition_id)
                batch.add(event)
            last = index
        producer.send_batch(batch)
        self._mark = Mark(epoch, last, count)

    def _read_tail(self) -> Mark | None:
        """The mark of the last event of this scheme in the partition, scanning back from the end
        in growing windows (events of other writers are passed over)."""
        cfg = self._config
        client = _consumer(cfg)
        try:
            ids = client.get_partition_ids()
            if cfg.partition_id not in ids:
                raise EventHubNotFoundError(
                    f"event hub {cfg.hub!r} at {cfg.endpoint} has partitions {ids}, not "
                    f"{cfg.partition_id!r}; expected the output partition to exist. Fix: set "
                    "EventHubOutputConfig.partition_id to one of them"
                )
            props = client.get_partition_properties(cfg.partition_id)
        finally:
            _close(client)
        if props["is_empty"]:
            return None
        begin = int(props["beginning_sequence_number"])
        hi = int(props["last_enqueued_sequence_number"])
        window = _TAIL_WINDOW
        while hi >= begin:
            lo = max(begin, hi - window + 1)
            last = None
            for event in _receive(cfg, cfg.partition_id, lo, hi):
                last = _mark(event) or last
            if last is not None:
                return last
            hi, window = lo - 1, window * 8
        return None

    def _close_producer(self, producer: EventHubProducerClient) -> None:
        _close(producer)


class EventHubOutputFactory(OutputAdapterFactory[EventHubOutputConfig]):
    """Makes :class:`EventHubOutputAdapter` instances (driver). The adapter connects on first use
    (:meth:`EventHubOutputAdapter.progress` or :meth:`EventHubOutputAdapter.deliver`)."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def create(self, config: EventHubOutputConfig, shape: EventShape) -> EventHubOutputAdapter:
        return EventHubOutputAdapter(config, shape)
