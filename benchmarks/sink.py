"""A counting output adapter: counts what each epoch delivers and when it was delivered.

``keep=True`` also keeps ``(start, key, value)`` of every event, for comparing results;
``on_deliver`` is called at the end of each delivery (the benchmarks count Spark jobs there).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ctistream.engine.contracts import OutputAdapter, OutputAdapterFactory
from ctistream.engine.events import Event, EventShape


@dataclass
class CountingConfig:
    value: str | None = None  # the payload column to keep next to start and key
    keep: bool = False
    on_deliver: Callable[[], None] | None = None  # called after each deliver (counting jobs)


class CountingOutput(OutputAdapter):
    def __init__(self, config: CountingConfig) -> None:
        self.config = config
        self.events = 0
        self.ctis = 0
        self.epochs = 0
        self.delivered_at: list[float] = []  # time.perf_counter() at each deliver
        self.kept: list[tuple[int, Any, Any]] = []

    def deliver(self, epoch: int, items: Sequence[Event], first: int) -> None:
        self.delivered_at.append(time.perf_counter())
        self.epochs += 1
        for e in items:
            if e.is_cti:
                self.ctis += 1
                continue
            self.events += 1
            if self.config.keep:
                self.kept.append((e.start, e.payload["key"], e.payload[self.config.value]))
        if self.config.on_deliver is not None:
            self.config.on_deliver()


class CountingFactory(OutputAdapterFactory[CountingConfig]):
    """Remembers the adapter it made last (``.last``), so the caller can read its counts."""

    supported_shapes: ClassVar[frozenset[EventShape]] = frozenset(EventShape)

    def __init__(self) -> None:
        self.last: CountingOutput | None = None

    def create(self, config: CountingConfig, shape: EventShape) -> CountingOutput:
        self.last = CountingOutput(config)
        return self.last
