"""Push-style input adapters, for porting StreamInsight adapters.

StreamInsight's input adapters push: the server calls ``Start()``; the adapter creates events and
calls ``Enqueue``, which returns ``EnqueueOperationResult.Full`` when the server's buffer is full;
the adapter then calls ``Ready()`` and returns, and the server calls ``Resume()`` when it can take
more. The adapter checks ``AdapterState == Stopping`` and calls ``Stopped()`` when it has finished.
This module keeps that contract:

StreamInsight -> here:

* ``Start()``, ``Resume()`` -> :meth:`PushInputAdapter.start`, :meth:`~PushInputAdapter.resume`
* ``Enqueue(ref evt)``, ``EnqueueCtiEvent(t)`` -> :meth:`~PushInputAdapter.enqueue`,
  :meth:`~PushInputAdapter.enqueue_cti`
* ``EnqueueOperationResult.Success`` / ``Full`` -> :class:`EnqueueResult` ``SUCCESS`` / ``FULL``
* ``Ready()`` -> :meth:`~PushInputAdapter.ready`; ``Stopped()`` -> :meth:`~PushInputAdapter.stopped`
* ``AdapterState`` (``Stopping``) -> :class:`AdapterState`, :attr:`~PushInputAdapter.stopping`
* ``Dispose()`` -> :meth:`~PushInputAdapter.close`
* ``CreateInsertEvent()`` and setting times and payload -> :func:`engine.point`,
  :func:`~engine.interval`, :func:`~engine.edge_start`, :func:`~engine.edge_end`
* ``ReleaseEvent(ref evt)`` after ``Full`` -> nothing: events are values; enqueue the same event
  again in ``resume``
* the factory's ``Create(config, shape)`` -> :meth:`PushInputAdapterFactory.create_adapter`

A typical port::

    class ListAdapter(PushInputAdapter):
        def __init__(self, rows):
            self.rows, self.next = rows, 0      # configuration only: no connections here

        def start(self):
            self.produce()

        def resume(self):
            self.produce()

        def produce(self):
            while self.next < len(self.rows):
                if self.stopping:               # the engine wants to stop
                    break
                t, payload = self.rows[self.next]
                if self.enqueue(point(t, payload)) is EnqueueResult.FULL:
                    self.ready()                # more to come: the engine calls resume()
                    return
                self.next += 1
            self.stopped()                      # end of input

    class ListFactory(PushInputAdapterFactory[ListConfig]):
        def create_adapter(self, config, shape):
            return ListAdapter(config.rows)

        def payload_schema(self, config, shape):
            return "sensor bigint, v double"

``start``/``resume`` may produce on the calling thread (as above) or start a thread of their own
and return at once, as many StreamInsight adapters do; ``enqueue``, ``ready`` and ``stopped`` may
be called from any thread.

How the engine runs it. A push adapter is read through :class:`PushInputSource`, an ordinary pull
:class:`~engine.contracts.InputAdapter` with one partition (``"0"``), so the rest of the engine is
unchanged. Like every pull adapter it reads on a Spark executor: there the source asks the factory
for a new push adapter (:meth:`PushInputAdapterFactory.create_adapter`), calls ``start()``, and
hands the engine each enqueued item in enqueue order. Enqueued items wait in a bounded buffer
(:attr:`PushInputAdapterFactory.buffer_capacity`); ``enqueue`` returns ``FULL`` while it is full.
When the buffer has been drained and the adapter has called ``ready()``, the engine calls
``resume()``. When the buffer is drained after ``stopped()``, the input ends (as a script's
``end``: an input with ``flush_on_stop`` flushes).

* Offsets are the enqueue sequence numbers: 0, 1, 2, ... (events and CTIs alike).
* Arrival stamps (semantics §4: they order this input's items among all inputs' items) are chosen
  by the adapter class with :attr:`PushInputAdapter.arrival`: ``ArrivalStamp.SEQUENCE`` (the
  default) stamps the sequence number, like the memory adapters' counter, so the output does not
  depend on timing; ``ArrivalStamp.ENQUEUE_TIME`` stamps the wall-clock time of the enqueue in
  ticks (made non-decreasing), the way brokers stamp their append time, for a live source read
  with broker inputs.

Replay, honestly. A push source cannot seek: each time the engine reads the input (each
``query.run()``, and any re-read of the partition), it makes a new push adapter and reads it from
the start, skipping items before the offset it needs. So a bounded run reads it once, however it
is cut into epochs, and keeps what it read until the run ends (``seekable`` is False). The
output is repeatable only if the adapter is deterministic given its configuration: reading a
file, a table, a list. An adapter over a live feed (a socket, a device) will produce different
items when re-read; such sources belong behind a broker (``adapters.kafka``), which keeps
offsets.

Output adapters. StreamInsight output adapters dequeue (``Dequeue`` until ``Empty``, then
``Ready()`` and wait for ``Resume()``). Here an :class:`~engine.contracts.OutputAdapter` is handed
each epoch's committed events and CTIs in delivery order by
:meth:`~engine.contracts.OutputAdapter.deliver`: the body of a ported dequeue loop goes there, one
call per epoch (the epoch's items are what ``Dequeue`` would have returned before ``Empty``);
``Stop``/``Dispose`` become :meth:`~engine.contracts.OutputAdapter.close`. There is no separate push
output base.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from ctistream.engine._model import Choice
from ctistream.engine.contracts import InputAdapter, InputAdapterFactory, ItemKind, SourceItem
from ctistream.engine.errors import EngineError
from ctistream.engine.events import Event, EventKind, EventShape, cti

__all__ = [
    "AdapterState",
    "ArrivalStamp",
    "EnqueueResult",
    "PushAdapterError",
    "PushInputAdapter",
    "PushInputAdapterFactory",
    "PushInputSource",
]

ConfigT = TypeVar("ConfigT")

#: The one partition of a push source.
PARTITION = "0"


class EnqueueResult(Choice):
    """What :meth:`PushInputAdapter.enqueue` did (StreamInsight's ``EnqueueOperationResult``)."""

    #: The item was taken.
    SUCCESS = "SUCCESS"
    #: The engine's buffer is full (or the engine is stopping): the item was *not* taken. Stop
    #: producing, call :meth:`PushInputAdapter.ready` and return; enqueue it again in ``resume``.
    FULL = "FULL"


class AdapterState(Choice):
    """The life cycle of a push adapter (StreamInsight's ``AdapterState``)."""

    #: Made, not started yet.
    CREATED = "CREATED"
    #: ``start()`` or ``resume()`` was called; the adapter is producing.
    RUNNING = "RUNNING"
    #: The adapter called ``ready()`` and waits for ``resume()``.
    SUSPENDED = "SUSPENDED"
    #: The engine wants the adapter to stop: it should call ``stopped()`` soon.
    STOPPING = "STOPPING"
    #: The adapter called ``stopped()``: no more items.
    STOPPED = "STOPPED"


class ArrivalStamp(Choice):
    """How a push source stamps arrival (semantics §4)."""

    #: The enqueue sequence number: deterministic, like the memory adapters' counter.
    SEQUENCE = "SEQUENCE"
    #: The wall-clock time of the enqueue in ticks (non-decreasing), like a broker's append time.
    ENQUEUE_TIME = "ENQUEUE_TIME"


class PushAdapterError(EngineError, RuntimeError):
    """A push adapter broke its contract: enqueue after ``stopped()``, nothing happening for
    longer than the stall timeout, ... The message says which adapter, what and how to fix."""


class PushInputAdapter(ABC):
    """Base of push-style input adapters; users subclass it and implement :meth:`start` and
    :meth:`resume` (see the module docstring for a complete port).

    Made by :meth:`PushInputAdapterFactory.create_adapter` on a Spark executor, once per read of
    the input. Keep configuration in ``__init__`` (calling ``super().__init__()`` is not needed);
    open files and connections in :meth:`start` and release them in :meth:`close`.
    """

    #: How the engine stamps arrival for this adapter's items; see :class:`ArrivalStamp`.
    arrival: ClassVar[ArrivalStamp] = ArrivalStamp.SEQUENCE

    _buffer: _PushBuffer | None = None

    @abstractmethod
    def start(self) -> None:
        """Begin producing (engine thread). Enqueue items until ``enqueue`` returns ``FULL``
        (then call :meth:`ready` and return), until the input ends (then call :meth:`stopped`),
        or start a thread that does so and return."""

    @abstractmethod
    def resume(self) -> None:
        """Go on producing after :meth:`ready`, as :meth:`start` does (engine thread). Called once
        the engine has drained its buffer, and also when it is stopping, so a suspended adapter
        sees :attr:`stopping` and calls :meth:`stopped`."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Called (engine thread) when the engine stops reading before the input ended, e.g. the
        run failed. :attr:`stopping` is then True; the adapter should call :meth:`stopped`. The
        default does nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called once at the end (engine thread), after :meth:`stopped` or when the engine gives
        up waiting for it: release resources here (StreamInsight's ``Dispose``). The default does
        nothing."""

    # -- calls the adapter makes --------------------------------------------------------------
    def enqueue(self, event: Event) -> EnqueueResult:
        """Offer an event (built with :func:`~engine.point`, :func:`~engine.interval`,
        :func:`~engine.edge_start`, :func:`~engine.edge_end`; a :func:`~engine.cti` is taken as
        :meth:`enqueue_cti`). Returns ``SUCCESS`` or ``FULL`` (not taken: call :meth:`ready`).

        Raises :class:`PushAdapterError` after :meth:`stopped`, ``TypeError``/``ValueError`` for
        an event of the wrong shape or a payload with a naive datetime. The engine raises such an
        error too (it fails the read), so an adapter thread that dies of it does not leave the
        query waiting.
        """
        return self._engine("enqueue").enqueue(event)

    def enqueue_cti(self, t: datetime | int) -> EnqueueResult:
        """Offer an explicit CTI at ``t`` (aware datetime or ticks). ``SUCCESS`` or ``FULL``."""
        buffer = self._engine("enqueue_cti")
        try:
            event = cti(t)
        except (TypeError, ValueError) as bad:
            raise buffer.fail(type(bad)(f"{buffer.where}: enqueue_cti({t!r}): {bad}")) from None
        return buffer.enqueue(event)

    def ready(self) -> None:
        """Tell the engine the adapter has more to produce: it will call :meth:`resume` once its
        buffer is drained. Return from ``start``/``resume`` (or let the producing thread end)
        after calling it."""
        self._engine("ready").ready()

    def stopped(self) -> None:
        """Tell the engine the adapter has finished: end of input (or the reply to
        :attr:`stopping`). Enqueue nothing after it. Calling it again does nothing."""
        self._engine("stopped").stopped()

    @property
    def adapter_state(self) -> AdapterState:
        """The adapter's state (StreamInsight's ``AdapterState``)."""
        return self._buffer.state if self._buffer is not None else AdapterState.CREATED

    @property
    def stopping(self) -> bool:
        """True when the engine wants the adapter to stop: call :meth:`stopped` and return."""
        return self.adapter_state is AdapterState.STOPPING

    @property
    def input_name(self) -> str:
        """The name the input is bound under."""
        return self._engine("input_name").name

    @property
    def shape(self) -> EventShape:
        """The shape the input is bound with: enqueue events of this shape."""
        return self._engine("shape").shape

    def _engine(self, call: str) -> _PushBuffer:
        if self._buffer is None:
            raise PushAdapterError(
                f"{type(self).__name__}.{call}() was called before the engine started the "
                "adapter; expected calls from start()/resume() or threads they start. Fix: do "
                "not enqueue in __init__; the engine makes the adapter on the executor and calls "
                "start()"
            )
        return self._buffer


class _PushBuffer:
    """The engine's side of one push adapter: a bounded buffer and the adapter's state. All state
    changes happen under one condition, so the adapter may call in from any thread."""

    def __init__(
        self, adapter: PushInputAdapter, name: str, shape: EventShape, capacity: int
    ) -> None:
        self.name, self.shape, self.capacity = name, shape, capacity
        self.where = f"push adapter {type(adapter).__name__} of input {name!r}"
        self.stamp = ArrivalStamp(type(adapter).arrival)
        self.state = AdapterState.CREATED
        self.items: deque[SourceItem] = deque()
        self.seq = 0
        self.last_arrival = -1
        self.wants_resume = False
        self.error: BaseException | None = None
        self.full_count = 0
        self.activity = time.monotonic()
        self.cond = threading.Condition()

    # -- adapter side -------------------------------------------------------------------------
    def fail(self, error: BaseException) -> BaseException:
        """Remember the first contract error (the engine raises it too) and return it."""
        with self.cond:
            if self.error is None:
                self.error = error
            self.activity = time.monotonic()
            self.cond.notify_all()
        return error

    def _check(self, event: Any) -> None:
        if not isinstance(event, Event):
            raise TypeError(
                f"{self.where}: enqueue takes an Event built with point/interval/edge_start/"
                f"edge_end (or cti); got {type(event).__name__} {event!r}"
            )
        if event.kind is EventKind.CTI:
            return
        got = event.shape
        ok = (
            got is EventShape.EDGE
            if self.shape is EventShape.EDGE
            else got is EventShape.POINT
            if self.shape is EventShape.POINT
            else got in (EventShape.POINT, EventShape.INTERVAL)
        )
        if not ok:
            raise ValueError(
                f"{self.where}: the input is bound as {self.shape.value} but enqueue got "
                f"{event!r}, a {got.value if got else 'CTI'} event. Fix: enqueue events of the "
                "bound shape (self.shape), or bind the input with the shape the adapter makes"
            )
        for column, value in event.payload.items():
            if isinstance(value, datetime) and (
                value.tzinfo is None or value.tzinfo.utcoffset(value) is None
            ):
                raise TypeError(
                    f"{self.where}: payload column {column!r} of {event!r} is a naive datetime "
                    f"({value.isoformat()}); naive times are never guessed. Fix: attach a zone, "
                    "e.g. value.replace(tzinfo=datetime.UTC)"
                )

    def enqueue(self, event: Event) -> EnqueueResult:
        try:
            self._check(event)
        except (TypeError, ValueError) as bad:
            raise self.fail(bad) from None
        with self.cond:
            if self.state is AdapterState.STOPPED:
                raise self._fail_locked(
                    PushAdapterError(
                        f"{self.where}: enqueue({event!r}) after stopped(); expected no items "
                        "after the adapter said it has finished. Fix: call stopped() once, "
                        "after the last enqueue, and return"
                    )
                )
            self.activity = time.monotonic()
            if self.state is AdapterState.STOPPING or len(self.items) >= self.capacity:
                self.full_count += 1
                return EnqueueResult.FULL
            if self.stamp is ArrivalStamp.SEQUENCE:
                arrival = self.seq
            else:
                arrival = max(time.time_ns() // 1000, self.last_arrival)
            self.last_arrival = arrival
            kind = ItemKind.CTI if event.kind is EventKind.CTI else ItemKind.EVENT
            self.items.append(SourceItem(kind, self.seq, arrival, event))
            self.seq += 1
            self.cond.notify_all()
            return EnqueueResult.SUCCESS

    def _fail_locked(self, error: BaseException) -> BaseException:
        if self.error is None:
            self.error = error
        self.cond.notify_all()
        return error

    def ready(self) -> None:
        with self.cond:
            if self.state is AdapterState.STOPPED:
                raise self._fail_locked(
                    PushAdapterError(
                        f"{self.where}: ready() after stopped(); the adapter said it has "
                        "finished. Fix: call either ready() (more to come) or stopped() (done)"
                    )
                )
            self.activity = time.monotonic()
            self.wants_resume = True
            if self.state is AdapterState.RUNNING:
                self.state = AdapterState.SUSPENDED
            self.cond.notify_all()

    def stopped(self) -> None:
        with self.cond:
            self.activity = time.monotonic()
            self.state = AdapterState.STOPPED
            self.wants_resume = False
            self.cond.notify_all()

    # -- engine side --------------------------------------------------------------------------
    def next(self, stall_timeout: float | None) -> SourceItem | str:
        """The next buffered item; else ``"resume"`` (drained, the adapter called ready()) or
        ``"end"`` (drained, the adapter stopped). Waits for one of these; raises the adapter's
        contract error, or a stall error once it has waited ``stall_timeout`` seconds with no
        call from the adapter."""
        deadline: float | None = None
        with self.cond:
            while True:
                if self.items:
                    return self.items.popleft()
                if self.error is not None:
                    raise self.error
                if self.state is AdapterState.STOPPED:
                    return "end"
                if self.wants_resume:
                    self.wants_resume = False
                    if self.state is AdapterState.SUSPENDED:
                        self.state = AdapterState.RUNNING
                    self.activity = time.monotonic()
                    return "resume"
                if stall_timeout is None:
                    self.cond.wait()
                    continue
                now = time.monotonic()
                deadline = max(deadline or now + stall_timeout, self.activity + stall_timeout)
                if now >= deadline:
                    raise PushAdapterError(
                        f"{self.where}: nothing enqueued and neither ready() nor stopped() "
                        f"called for {stall_timeout:g} s (state {self.state.value}, "
                        f"{self.seq} item(s) so far); expected the adapter to enqueue, call "
                        "ready() when enqueue returns FULL, or stopped() at the end of input. "
                        "Fix: call ready() or stopped() before start()/resume() return; if it "
                        "produces on its own thread, check that the thread did not die; for a "
                        "slow source raise the factory's stall_timeout"
                    )
                self.cond.wait(deadline - now)

    def end_item(self) -> SourceItem:
        if self.stamp is ArrivalStamp.SEQUENCE:
            arrival = self.seq
        else:
            arrival = max(time.time_ns() // 1000, self.last_arrival)
        return SourceItem(ItemKind.END, self.seq, arrival)

    def begin(self) -> None:
        with self.cond:
            self.state = AdapterState.RUNNING
            self.activity = time.monotonic()

    def request_stop(self) -> bool:
        """Enter STOPPING unless stopped; True if the adapter was suspended (needs resume())."""
        with self.cond:
            if self.state is AdapterState.STOPPED:
                return False
            suspended = self.state is AdapterState.SUSPENDED or self.wants_resume
            self.state = AdapterState.STOPPING
            self.wants_resume = False
            self.cond.notify_all()
            return suspended

    def wait_stopping(self, until: float) -> str:
        """While stopping: wait until the adapter stopped (``"stopped"``), asked to be resumed
        (``"resume"``: resume it so it sees ``stopping``) or ``until`` passed (``"timeout"``)."""
        with self.cond:
            while True:
                if self.state is AdapterState.STOPPED:
                    return "stopped"
                if self.wants_resume:
                    self.wants_resume = False
                    return "resume"
                left = until - time.monotonic()
                if left <= 0:
                    return "timeout"
                self.cond.wait(left)


class PushInputSource(InputAdapter):
    """The pull :class:`~engine.contracts.InputAdapter` the engine reads a push adapter through: one
    partition ``"0"``, offsets = enqueue sequence numbers. Made by
    :meth:`PushInputAdapterFactory.create`; holds the factory, config and shape only, and makes
    the push adapter inside :meth:`read` (on the executor), driving it as the module docstring
    describes."""

    seekable = False

    def __init__(
        self, factory: PushInputAdapterFactory[Any], config: Any, shape: EventShape
    ) -> None:
        self._factory = factory
        self._config = config
        self._shape = shape
        self._name: str | None = None
        self.bounded = factory.bounded

    def bound_as(self, name: str) -> None:
        self._name = name

    def partitions(self) -> Sequence[str]:
        return [PARTITION]

    def payload_schema(self) -> str | None:
        return self._factory.payload_schema(self._config, self._shape)

    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        """Make a push adapter, start it and yield what it enqueues from ``start_offset`` on,
        then an END item once it has stopped; ``resume()`` whenever the buffer is drained and the
        adapter called ``ready()``. Closing the iterator early asks the adapter to stop."""
        if partition != PARTITION:
            raise ValueError(
                f"a push source has the one partition {PARTITION!r}; got {partition!r}"
            )
        factory = self._factory
        name = self._name or "?"
        adapter = factory.create_adapter(self._config, self._shape)
        if not isinstance(adapter, PushInputAdapter):
            raise TypeError(
                f"{type(factory).__name__}.create_adapter must return a PushInputAdapter; got "
                f"{adapter!r}. Fix: subclass ctistream.PushInputAdapter"
            )
        buffer = _PushBuffer(adapter, name, self._shape, factory.buffer_capacity)
        adapter._buffer = buffer
        finished = False
        try:
            buffer.begin()
            adapter.start()
            while True:
                step = buffer.next(factory.stall_timeout)
                if step == "end":
                    finished = True
                    yield buffer.end_item()
                    break
                if step == "resume":
                    adapter.resume()
                    continue
                assert isinstance(step, SourceItem)
                if step.offset >= start_offset:
                    yield step
        except GeneratorExit:
            # The engine stopped reading before the end: ask the adapter to stop, as
            # StreamInsight does (a suspended adapter is resumed so that it sees `stopping`).
            if not finished:
                until = time.monotonic() + factory.stop_timeout
                suspended = buffer.request_stop()
                adapter.stop()
                if suspended:
                    adapter.resume()
                while buffer.wait_stopping(until) == "resume":
                    adapter.resume()
            adapter.close()
            raise
        except BaseException:
            # Failing: tell the adapter (its threads see `stopping`, enqueue returns FULL), but
            # never let its clean-up hide the error.
            buffer.request_stop()
            with contextlib.suppress(Exception):
                adapter.stop()
            with contextlib.suppress(Exception):
                adapter.close()
            raise
        adapter.close()


class PushInputAdapterFactory(InputAdapterFactory[ConfigT]):
    """Makes push adapters; users subclass it and implement :meth:`create_adapter` (the port of
    a StreamInsight input adapter factory's ``Create``).

    The engine calls :meth:`create` on the driver, which returns a :class:`PushInputSource`; the
    source calls :meth:`create_adapter` on the executor for every read. The factory and the
    config are pickled to the executor with it, so they must be picklable (plain values, pydantic
    models). ``declare_advance_time_properties`` and ``supported_shapes`` work as for any factory.
    """

    #: How many enqueued items the engine buffers before ``enqueue`` returns FULL.
    buffer_capacity: ClassVar[int] = 1024
    #: Seconds without an enqueue, ``ready()`` or ``stopped()`` before the read fails with a
    #: :class:`PushAdapterError` (a hung adapter); None waits forever.
    stall_timeout: ClassVar[float | None] = 60.0
    #: Seconds the engine waits for ``stopped()`` after asking the adapter to stop.
    stop_timeout: ClassVar[float] = 10.0
    #: True when the input ends (the adapter calls ``stopped()`` by itself). A push source
    #: cannot say how far it has come, so one that does not end is refused when the query is
    #: built: a live feed belongs behind a broker (module docstring, "Replay, honestly").
    bounded: ClassVar[bool] = True

    @abstractmethod
    def create_adapter(self, config: ConfigT, shape: EventShape) -> PushInputAdapter:
        """Make a new push adapter for ``config`` producing events of ``shape`` (executor)."""

    def payload_schema(self, config: ConfigT, shape: EventShape) -> str | None:
        """The payload columns as Spark DDL (driver). The default, None, leaves it to the
        binding: ``Stream.create(..., schema=...)`` or the template input the adapter is bound
        to (``Stream.input(name, schema)``)."""
        return None

    def create(self, config: ConfigT, shape: EventShape) -> PushInputSource:
        """The pull source the engine reads the push adapters through (driver)."""
        return PushInputSource(self, config, shape)
