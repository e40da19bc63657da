"""Running a scripted query on Spark from tests, in as many epoch cuts as asked."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, Stream
from ctistream.engine import AdvanceTimeSettings, Event, EventShape, Versions

_names = itertools.count()


@dataclass(frozen=True)
class In:
    """How a test binds one scripted input."""

    shape: EventShape = EventShape.POINT
    settings: AdvanceTimeSettings | None = None
    schema: str | None = None
    versions: Versions | None = None


def killed(query: Any) -> None:
    """A started query as its process's death leaves it, in this process: dropped without
    ``stop()``, its checkpoint free again (the system releases a dead process's lock)."""
    query._started().dir.unlock()


def spark_run(
    app: Application,
    script: EventScript,
    inputs: Mapping[str, In],
    build: Callable[[dict[str, Stream]], Stream] | None = None,
    shape: EventShape = EventShape.POINT,
    epochs: int | Sequence[int] = 1,
    trace: bool = False,
) -> tuple[list[Event], dict]:
    """Bind ``inputs`` (in this order) to the script, build the query, run it (``trace``: with
    its timeline recorded); return what the sink received and the query's metrics."""
    streams = {
        name: Stream.create(
            name,
            MemoryInputFactory(),
            MemoryInputConfig(script=script, schema=spec.schema),
            spec.shape,
            spec.settings,
            versions=spec.versions,
        )
        for name, spec in inputs.items()
    }
    root = build(streams) if build else next(iter(streams.values()))
    sink = f"out{next(_names)}"
    query = root.to_query(app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), shape)
    try:
        query.run(epochs=epochs, trace=True if trace else None)
        return MemoryOutputFactory.collected(sink), query.metrics()
    finally:
        # The session-wide application would keep every query and the cached state DataFrames
        # of its operators; dropping it lets Spark clean them up (thousands of runs per suite).
        app.queries.pop(sink, None)
