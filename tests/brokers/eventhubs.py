"""An in-memory Event Hubs namespace served over AMQP 1.0 on 127.0.0.1, for tests of the real
``azure-eventhub`` client (5.15, its pure-Python AMQP stack; plain AMQP, as for the emulator, when
the connection string says ``UseDevelopmentEmulator=true``).

It speaks the subset that client uses: SASL (any mechanism is accepted), Open, Begin, Attach,
Flow, Transfer, Disposition, Detach, End, Close; ``$cbs`` put-token (always 200); ``$management``
READ of ``com.microsoft:eventhub`` and ``com.microsoft:partition`` (404 for unknown ones);
receivers on ``<hub>/ConsumerGroups/<group>/Partitions/<n>`` from the selector filter the client
sends (sequence number, offset or enqueued time; ``>`` or ``>=``), live tail included; senders on
``<hub>`` (partition key hash, else round robin) or ``<hub>/Partitions/<n>``, batches included.
Every frame is written with all its fields by the codec inside azure-eventhub (``_pyamqp``), which
is why the tests need that client's version. Not implemented: TLS, authentication (every token is
accepted), consumer groups as separate cursors or readers' epochs, retention (every event stays),
geo-replication, session flow control (only link credit is honoured), idle-timeout heartbeats.

One thread accepts; each connection runs in its own thread, which reads frames and, between them,
pushes stored events to its receivers as their link credit allows.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.eventhub._pyamqp import performatives as pf
from azure.eventhub._pyamqp._decode import _DECODE_BY_CONSTRUCTOR, decode_frame, decode_payload
from azure.eventhub._pyamqp._encode import (
    encode_annotations,
    encode_frame,
    encode_payload,
    encode_value,
)
from azure.eventhub._pyamqp.endpoints import Source, Target
from azure.eventhub._pyamqp.error import AMQPError
from azure.eventhub._pyamqp.message import Message, Properties
from azure.eventhub._pyamqp.outcomes import Accepted
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes

__all__ = [
    "EventHubsEndpoint",
    "StoredEvent",
    "eventhubs_connection_string",
    "eventhubs_endpoint",
    "running_endpoint",
]

_SASL_HEADER, _AMQP_HEADER = b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00"
_BATCH_FORMAT = 0x80013700  # a transfer whose data sections are whole encoded messages
_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS = 0x71, 0x72
_MAX_FRAME, _WINDOW, _CREDIT, _MAX_MESSAGE = 65536, 1 << 20, 1000, 1 << 20
_NODES = ("$cbs", "$management")
_ADDRESS = re.compile(r"^(?P<hub>[^/$]+)(?:/ConsumerGroups/[^/]+)?(?:/Partitions/(?P<p>\d+))?$")
_SELECTOR = re.compile(r"amqp\.annotation\.(x-opt-[\w-]+)\s*(>=|>)\s*'([^']*)'")


def _perf(kind: Any, **fields: Any) -> Any:
    """A performative (or source/target) with every field present; those not given are null."""
    return kind(**{name: fields.get(name) for name in kind._fields})


def _typed(amqp_type: str, value: Any) -> dict[str, Any]:
    return {TYPE: amqp_type, VALUE: value}


def _ms(value: datetime | int | None) -> int:
    if value is None:
        return int(time.time() * 1000)
    if isinstance(value, int):
        return value
    return (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


@dataclass
class StoredEvent:
    """One event of a partition: what the broker stamped and the sender's encoded sections."""

    sequence_number: int
    offset: str  # Event Hubs offsets are byte positions, as strings
    enqueued_ms: int
    annotations: dict[Any, Any]  # the sender's message annotations (e.g. x-opt-partition-key)
    sections: bytes  # properties, application properties and body, exactly as sent

    def message(self) -> Message:
        """The event as the codec decodes it (keys and strings as bytes)."""
        return decode_payload(memoryview(self.sections))

    def encoded(self) -> bytes:
        """The event as a receiver gets it: the broker's annotations first."""
        annotations = {
            **{
                k: _typed(AMQPTypes.string, v) if isinstance(v, bytes) else v
                for k, v in self.annotations.items()
            },
            b"x-opt-sequence-number": _typed(AMQPTypes.long, self.sequence_number),
            b"x-opt-offset": _typed(AMQPTypes.string, self.offset),
            b"x-opt-enqueued-time": _typed(AMQPTypes.timestamp, self.enqueued_ms),
        }
        section = bytearray()
        descriptor = _typed(AMQPTypes.ulong, _MESSAGE_ANNOTATIONS)
        encode_value(
            section, _typed(AMQPTypes.described, (descriptor, encode_annotations(annotations)))
        )
        return bytes(section) + self.sections


def _split(raw: bytes) -> tuple[dict[Any, Any], bytes]:
    """An encoded message as (its message annotations, its other sections still encoded)."""
    buffer, rest, annotations = memoryview(raw), bytearray(), {}
    while buffer:  # each section: 0x00 0x53 <descriptor> <value>
        after, value = _DECODE_BY_CONSTRUCTOR[buffer[3]](buffer[4:])
        if buffer[2] == _MESSAGE_ANNOTATIONS:
            annotations = dict(value or {})
        elif buffer[2] != _DELIVERY_ANNOTATIONS:  # those are for the hop, not the event
            rest += buffer[: len(buffer) - len(after)]
        buffer = after
    return annotations, bytes(rest)


class EventHubsEndpoint:
    """The namespace: named hubs of N partitions each, served on ``127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self._hubs: dict[str, list[list[StoredEvent]]] = {}
        self._created: dict[str, int] = {}
        self._round_robin: dict[str, int] = {}
        self._begin: dict[tuple[str, int], int] = {}  # the first sequence number retained
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._sockets: set[socket.socket] = set()

    # -- for tests ----------------------------------------------------------------------------
    def connection_string(self, hub: str = "hub") -> str:
        return (
            f"Endpoint=sb://127.0.0.1:{self.port};SharedAccessKeyName=k;SharedAccessKey=v;"
            f"EntityPath={hub};UseDevelopmentEmulator=true"
        )

    def create_hub(self, name: str, partitions: int = 2) -> None:
        """Create (or empty) hub ``name`` with partitions ``"0"`` .. ``str(partitions - 1)``."""
        with self._lock:
            self._hubs[name] = [[] for _ in range(partitions)]
            self._created[name], self._round_robin[name] = _ms(None), 0

    def append(
        self,
        hub: str,
        partition: int | str,
        body: bytes | str | dict[str, Any],
        properties: dict[str, Any] | None = None,
        enqueued_time: datetime | int | None = None,
    ) -> StoredEvent:
        """Store one event as if it had been sent (dict bodies as JSON). ``enqueued_time``: ms
        since the epoch or an aware datetime; by default now, and never before the partition's
        last event."""
        data = json.dumps(body) if isinstance(body, dict) else body
        data = data.encode() if isinstance(data, str) else data
        raw = encode_payload(bytearray(), Message(application_properties=properties, data=[data]))
        return self._store(hub, int(partition), bytes(raw), _ms(enqueued_time))

    def expire(self, hub: str, partition: int | str, before: int) -> None:
        """Drop the events of one partition with sequence numbers below ``before``, as the
        hub's retention does: no receiver gets them, the partition's properties begin after."""
        with self._lock:
            self._begin[hub, int(partition)] = before

    def begin(self, hub: str, partition: int | str) -> int:
        """The first sequence number the partition still holds (:meth:`expire`)."""
        with self._lock:
            return self._begin.get((hub, int(partition)), 0)

    def events(self, hub: str, partition: int | str, start: int = 0, count: int = -1) -> list:
        """The stored events of one partition (``count`` of them from index ``start``)."""
        with self._lock:
            events = self._hubs[hub][int(partition)]
            return events[start : start + count if count >= 0 else None]

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> EventHubsEndpoint:
        threading.Thread(target=self._accept, name="eventhubs-endpoint", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening and drop every connection (clients see the endpoint go down)."""
        with contextlib.suppress(OSError):  # wakes the accepting thread; close() alone does not
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            self._sockets.add(sock)
            threading.Thread(target=_Connection(self, sock).run, daemon=True).start()

    # -- storage ------------------------------------------------------------------------------
    def _store(self, hub: str, partition: int | None, raw: bytes, ms: int) -> StoredEvent:
        annotations, sections = _split(raw)
        with self._lock:
            partitions = self._hubs[hub]
            if partition is None:
                key = annotations.get(b"x-opt-partition-key")
                if key is not None:
                    partition = zlib.crc32(bytes(key)) % len(partitions)
                else:
                    partition = self._round_robin[hub]
                    self._round_robin[hub] = (partition + 1) % len(partitions)
            events = partitions[partition]
            last = events[-1] if events else None
            offset = int(last.offset) + len(last.sections) if last else 0
            ms = max(ms, last.enqueued_ms) if last else ms
            events.append(StoredEvent(len(events), str(offset), ms, annotations, sections))
            return events[-1]

    def _partitions(self, hub: str) -> int | None:
        with self._lock:
            return len(self._hubs[hub]) if hub in self._hubs else None


@dataclass
class _Link:
    ours: int  # our handle
    sending: bool  # True when the endpoint sends on it (the client receives)
    address: str
    hub: str | None = None
    partition: int | None = None
    position: int = 0  # index of the next event to send (receivers of events)
    credit: int = 0
    delivery_count: int = 0
    first: list[Any] | None = None  # the first transfer frame of a delivery in progress
    partial: bytearray = field(default_factory=bytearray)


@dataclass
class _Session:
    next_incoming_id: int
    next_outgoing_id: int = 0
    links: dict[int, _Link] = field(default_factory=dict)  # by the client's handle


class _Closed(Exception):
    pass


class _Connection:
    def __init__(self, endpoint: EventHubsEndpoint, sock: socket.socket) -> None:
        self.endpoint, self.sock = endpoint, sock
        self.buffer = bytearray()
        self.sessions: dict[int, _Session] = {}
        self.max_frame = _MAX_FRAME
        self.handles = 0

    def run(self) -> None:
        try:
            self._handshake(_SASL_HEADER)
            self._send(0, pf.SASLMechanism([b"ANONYMOUS", b"PLAIN", b"MSSBCBS"]), b"\x01")
            self._frame(wait=None)  # sasl-init
            self._send(0, pf.SASLOutcome(code=0, additional_data=None), b"\x01")
            self._handshake(_AMQP_HEADER)
            while True:
                frame = self._frame(wait=0.02)
                if frame is not None:
                    self._dispatch(*frame)
                self._pump()
        except (_Closed, OSError, ValueError):  # ValueError: stop() closed the socket under us
            pass
        finally:
            self.endpoint._sockets.discard(self.sock)
            self.sock.close()

    # -- framing ------------------------------------------------------------------------------
    def _fill(self, n: int, wait: float | None) -> bool:
        while len(self.buffer) < n:
            if wait is not None and not select.select([self.sock], [], [], wait)[0]:
                return False
            chunk = self.sock.recv(65536)
            if not chunk:
                raise _Closed
            self.buffer += chunk
        return True

    def _handshake(self, header: bytes) -> None:
        self._fill(8, None)
        if bytes(self.buffer[:8]) != header:
            raise _Closed
        del self.buffer[:8]
        self.sock.sendall(header)

    def _frame(self, wait: float | None) -> tuple[int, int, list[Any]] | None:
        """The next frame as (channel, performative code, fields), or None after ``wait``."""
        while self._fill(8, wait):
            size = int.from_bytes(self.buffer[:4], "big")
            if not self._fill(size, wait):
                return None
            data = bytes(self.buffer[:size])
            del self.buffer[:size]
            if size > 8:  # 8 bytes: an empty frame, a heartbeat
                code, fields = decode_frame(memoryview(data)[data[4] * 4 :])
                return int.from_bytes(data[6:8], "big"), code, fields
        return None

    def _send(self, channel: int, performative: Any, frame_type: bytes = b"\x00") -> None:
        header, body = encode_frame(performative, frame_type)
        self.sock.sendall(header + channel.to_bytes(2, "big") + (body or b""))

    # -- performatives ------------------------------------------------------------------------
    def _dispatch(self, channel: int, code: int, f: list[Any]) -> None:
        session = self.sessions.get(channel)
        if code == 0x18:  # close
            self._send(0, _perf(pf.CloseFrame))
            raise _Closed
        if code == 0x10:  # open
            self.max_frame = min(f[2] or _MAX_FRAME, _MAX_FRAME)
            self._send(
                0,
                _perf(
                    pf.OpenFrame,
                    container_id="ctistream-test",
                    max_frame_size=_MAX_FRAME,
                    channel_max=255,
                ),
            )
        elif code == 0x11:  # begin
            self.sessions[channel] = _Session(next_incoming_id=f[1])
            begin = _perf(
                pf.BeginFrame,
                remote_channel=channel,
                next_outgoing_id=0,
                incoming_window=_WINDOW,
                outgoing_window=_WINDOW,
                handle_max=255,
            )
            self._send(channel, begin)
        elif session is None:
            return
        elif code == 0x12:  # attach
            self._attach(channel, session, f)
        elif code == 0x13 and f[4] is not None and f[4] in session.links:  # flow on a link
            link = session.links[f[4]]
            if link.sending:  # the client's count and credit, as of now
                link.credit = (f[5] or 0) + (f[6] or 0) - link.delivery_count
        elif code == 0x14:  # transfer
            session.next_incoming_id += 1
            self._transfer(channel, session, f)
        elif code == 0x16 and f[0] in session.links:  # detach
            self._send(
                channel, _perf(pf.DetachFrame, handle=session.links.pop(f[0]).ours, closed=True)
            )
        elif code == 0x17:  # end
            del self.sessions[channel]
            self._send(channel, _perf(pf.EndFrame))

    def _attach(self, channel: int, session: _Session, f: list[Any]) -> None:
        client_receives = bool(f[2])  # the role field: True for a receiver
        terminus = (f[5] if client_receives else f[6]) or [None]
        address = bytes(terminus[0] or b"").decode()
        if "://" in address:  # amqps://host:port/hub/... -> hub/...
            address = address.split("://", 1)[1].partition("/")[2]
        self.handles += 1
        link = _Link(self.handles, client_receives, address)
        error = None
        if address not in _NODES:
            m = _ADDRESS.match(address)
            count = self.endpoint._partitions(m["hub"]) if m else None
            p = int(m["p"]) if m and m["p"] is not None else None
            if count is None or (p is not None and p >= count):
                error = f"The messaging entity '{address}' could not be found."
            elif client_receives and p is None:
                error = f"'{address}' is not a partition of a consumer group."
            else:
                link.hub, link.partition = m["hub"], p
                if client_receives:
                    filters = terminus[7] if len(terminus) > 7 else None
                    link.position = self._first_admitted(m["hub"], p, filters)
        reply = _perf(
            pf.AttachFrame,
            name=f[0],
            handle=link.ours,
            role=not client_receives,
            send_settle_mode=f[3],
            rcv_settle_mode=f[4],
            source=_perf(Source, address=address if client_receives else None),
            target=_perf(Target, address=None if client_receives else address),
            incomplete_unsettled=False,
            initial_delivery_count=0 if client_receives else None,
            max_message_size=_MAX_MESSAGE,
        )
        self._send(channel, reply)
        if error is not None:
            not_found = AMQPError(b"amqp:not-found", error.encode(), None)
            self._send(
                channel, _perf(pf.DetachFrame, handle=link.ours, closed=True, error=not_found)
            )
            return
        session.links[f[1]] = link
        if not client_receives:
            link.delivery_count = f[9] or 0
            self._grant(channel, session, link)

    def _first_admitted(self, hub: str, partition: int, filters: dict | None) -> int:
        """The index of the first event the receiver's selector filter admits."""
        events = self.endpoint.events(hub, partition)
        text = " ".join(bytes(v).decode() for v in (filters or {}).values() if v)
        m = _SELECTOR.search(text)
        if m is None:
            return self.endpoint.begin(hub, partition)
        what, op, bound = m.groups()
        if bound == "@latest":
            return len(events)
        keys = {
            "x-opt-sequence-number": lambda e: e.sequence_number,
            "x-opt-offset": lambda e: int(e.offset),
            "x-opt-enqueued-time": lambda e: e.enqueued_ms,
        }
        key = keys[what]
        admitted = (
            (lambda e: key(e) >= int(bound)) if op == ">=" else (lambda e: key(e) > int(bound))
        )
        first = next((i for i, e in enumerate(events) if admitted(e)), len(events))
        return max(first, self.endpoint.begin(hub, partition))

    def _grant(self, channel: int, session: _Session, link: _Link) -> None:
        """Give a client's sender link credit (and the session window) to send on."""
        link.credit = _CREDIT
        flow = _perf(
            pf.FlowFrame,
            next_incoming_id=session.next_incoming_id,
            incoming_window=_WINDOW,
            next_outgoing_id=session.next_outgoing_id,
            outgoing_window=_WINDOW,
            handle=link.ours,
            delivery_count=link.delivery_count,
            link_credit=_CREDIT,
            drain=False,
            echo=False,
        )
        self._send(channel, flow)

    def _transfer(self, channel: int, session: _Session, f: list[Any]) -> None:
        link = session.links.get(f[0])
        if link is None:
            return
        link.first = link.first or f
        link.partial += f[-1]  # decode_frame appends the payload to a transfer's fields
        if f[5]:  # more frames of this delivery follow
            return
        first, raw = link.first, bytes(link.partial)
        link.first, link.partial = None, bytearray()
        link.delivery_count += 1
        link.credit -= 1
        if link.address in _NODES:
            self._reply(channel, session, link.address, decode_payload(memoryview(raw)))
        elif first[3] == _BATCH_FORMAT:
            for inner in decode_payload(memoryview(raw)).data or []:
                self.endpoint._store(link.hub, link.partition, bytes(inner), _ms(None))
        else:
            self.endpoint._store(link.hub, link.partition, raw, _ms(None))
        if not first[4]:  # unsettled: settle it as accepted
            accept = _perf(
                pf.DispositionFrame,
                role=True,
                first=first[1],
                last=first[1],
                settled=True,
                state=Accepted(),
            )
            self._send(channel, accept)
        if link.credit < _CREDIT // 2:
            self._grant(channel, session, link)

    def _reply(self, channel: int, session: _Session, node: str, request: Message) -> None:
        """Answer a ``$cbs`` or ``$management`` request on the node's response link."""
        props = {bytes(k).decode(): v for k, v in (request.application_properties or {}).items()}
        status, body = self._read(props) if node == "$management" else (200, None)
        response = Message(
            properties=Properties(correlation_id=request.properties.message_id),
            application_properties={
                "status-code": status,
                "status-description": "OK" if status == 200 else "The entity could not be found.",
            },
            value=body,
        )
        for link in session.links.values():
            if link.sending and link.address == node:
                self._deliver(channel, session, link, encode_payload(bytearray(), response))

    def _read(self, props: dict[str, Any]) -> tuple[int, Any]:
        hub = bytes(props.get("name") or b"").decode()
        count = self.endpoint._partitions(hub)
        if count is None:
            return 404, None
        if bytes(props.get("type") or b"") == b"com.microsoft:eventhub":
            created = _typed(AMQPTypes.timestamp, self.endpoint._created[hub])
            ids = [str(i) for i in range(count)]
            return 200, {"name": hub, "created_at": created, "partition_ids": ids}
        partition = bytes(props.get("partition") or b"").decode()
        if not partition.isdigit() or int(partition) >= count:
            return 404, None
        events = self.endpoint.events(hub, partition)
        begin = self.endpoint.begin(hub, partition)
        last = events[-1] if events else None
        return 200, {
            "name": hub,
            "type": "com.microsoft:partition",
            "partition": partition,
            "begin_sequence_number": _typed(AMQPTypes.long, begin),
            "last_enqueued_sequence_number": _typed(
                AMQPTypes.long, last.sequence_number if last else -1
            ),
            "last_enqueued_offset": last.offset if last else "-1",
            "last_enqueued_time_utc": _typed(AMQPTypes.timestamp, last.enqueued_ms if last else 0),
            "is_partition_empty": len(events) <= begin,
        }

    def _pump(self) -> None:
        """Send stored events to the receivers, as far as their credit goes."""
        for channel, session in list(self.sessions.items()):
            for link in list(session.links.values()):
                if link.sending and link.hub is not None and link.credit > 0:
                    begin = self.endpoint.begin(link.hub, link.partition)
                    link.position = max(link.position, begin)
                    events = self.endpoint.events(
                        link.hub, link.partition, link.position, link.credit
                    )
                    for event in events:
                        self._deliver(channel, session, link, event.encoded())
                        link.position += 1
                        link.credit -= 1

    def _deliver(self, channel: int, session: _Session, link: _Link, payload: bytes) -> None:
        """One settled delivery, split into frames that fit the client's max frame size."""
        delivery_id = session.next_outgoing_id
        session.next_outgoing_id += 1
        link.delivery_count += 1

        def frame(chunk: bytes, more: bool) -> Any:
            return _perf(
                pf.TransferFrame,
                handle=link.ours,
                delivery_id=delivery_id,
                delivery_tag=delivery_id.to_bytes(8, "big"),
                message_format=0,
                settled=True,
                more=more,
                resume=False,
                aborted=False,
                batchable=False,
                payload=chunk,
            )

        room = self.max_frame - 8 - len(encode_frame(frame(b"", False))[1] or b"") - 16
        for start in range(0, max(len(payload), 1), room):
            self._send(channel, frame(payload[start : start + room], start + room < len(payload)))


@contextlib.contextmanager
def running_endpoint() -> Iterator[EventHubsEndpoint]:
    """An endpoint of its own, stopped at the end (a test may stop it earlier)."""
    endpoint = EventHubsEndpoint().start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture(scope="session")
def eventhubs_endpoint() -> Iterator[EventHubsEndpoint]:
    """The endpoint, started once per test session; tests create hubs with unique names."""
    with running_endpoint() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def eventhubs_connection_string(eventhubs_endpoint: EventHubsEndpoint) -> str:
    """``Endpoint=sb://127.0.0.1:PORT;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=hub;
    UseDevelopmentEmulator=true``, where hub ``hub`` exists with 2 partitions."""
    eventhubs_endpoint.create_hub("hub", 2)
    return eventhubs_endpoint.connection_string("hub")
