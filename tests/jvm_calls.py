"""Counting the driver's calls to the JVM, and a live in-process input to count them over.

Every call PySpark makes to Spark's JVM is a py4j command sent by the gateway client's
``send_command``, one round trip each: :class:`JvmCalls` counts them by kind (the command's
first line: ``c`` a method call, ``r`` a reflection lookup, ``i`` a constructor, ``a`` an
array's element or length, ``m`` py4j's release of Java objects the Python side no longer
holds, from its finalizer thread, ...) and by the line of the library's own code that
issued them (the innermost frame of ``ctistream``'s engine, adapters or bindings; ``other``
for other threads). The commands sent by the thread that entered the count
(:attr:`JvmCalls.here`) are deterministic for a given query and input, unlike the seconds, so
they are what a test can pin; the releases depend on when Python's collector runs.

:class:`LiveScriptFactory` makes a scripted input that behaves as a live one (Kafka, Event
Hubs): each epoch of a started query reads what was appended to the script since the last one
(``latest_offsets``), so a query can be stepped over a few events at a time without a broker.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import ctistream.adapters
import ctistream.bindings
import ctistream.engine
from ctistream.adapters.memory import (
    MemoryInputAdapter,
    MemoryInputConfig,
    MemoryInputFactory,
)
from ctistream.engine.contracts import SourceItem
from ctistream.engine.events import EventShape

#: the directories whose code counts as the library's own (engine, adapters, bindings)
_OWN = tuple(
    f"{Path(str(m.__file__)).parent}/"
    for m in (ctistream.engine, ctistream.adapters, ctistream.bindings)
)

#: the functions of engine._spark that send commands for whoever called them
_RELAYS = {"__getattr__", "send_command"}


def _caller() -> str:
    """``module.py:line`` of the innermost frame of the library's own code on this stack (not
    counting the driver's caching view of the JVM, ``engine._spark``, which sends on behalf of
    its callers)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if frame.f_code.co_name in _RELAYS:
            frame = frame.f_back
            continue
        for own in _OWN:
            if name.startswith(own):
                return f"{Path(own).name}/{name[len(own) :]}:{frame.f_lineno}"
        frame = frame.f_back
    return "other"


class JvmCalls:
    """Counts the py4j commands sent to the driver's JVM while active (``with``), from every
    thread: per kind and per ``(kind, caller)``."""

    def __init__(self, spark) -> None:
        self._client = spark.sparkContext._gateway._gateway_client
        self.kinds: Counter[str] = Counter()
        self.lines: Counter[tuple[str, str]] = Counter()
        #: the commands sent by the thread that entered the count
        self.here = 0
        self._lock = threading.Lock()
        self._thread = threading.get_ident()

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def reset(self) -> None:
        self.kinds.clear()
        self.lines.clear()
        self.here = 0

    def __enter__(self) -> JvmCalls:
        self._thread = threading.get_ident()
        real = self._client.send_command

        def counted(command, *args, **kwargs):
            kind, where = command[:1], _caller()
            with self._lock:
                self.kinds[kind] += 1
                self.lines[kind, where] += 1
                self.here += threading.get_ident() == self._thread
            return real(command, *args, **kwargs)

        self._client.send_command = counted
        return self

    def __exit__(self, *exc: object) -> None:
        del self._client.send_command  # the class's own again


class _LiveScriptInput(MemoryInputAdapter):
    """A script's input read as a live source: each ``latest_offsets`` takes the script's
    partitions' current lengths as where reading stops (pickled with the adapter)."""

    def __init__(self, config: MemoryInputConfig, shape: EventShape) -> None:
        super().__init__(config, shape)
        self._ends: dict[str, int] = {}

    def latest_offsets(self) -> Mapping[str, int]:
        self._ends = {p: len(self._script.items(self._name, p)) for p in self.partitions()}
        return dict(self._ends)

    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        items = self._script.items(self._name, partition)
        yield from items[start_offset : self._ends.get(partition, len(items))]


class LiveScriptFactory(MemoryInputFactory):
    """Makes scripted inputs read as live ones (:class:`_LiveScriptInput`): append to the
    script between the steps of a started query."""

    def create(self, config: MemoryInputConfig, shape: EventShape) -> MemoryInputAdapter:
        return _LiveScriptInput(config, shape)
