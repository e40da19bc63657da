"""ctistream: a StreamInsight-style temporal event engine with CTI punctuations, on Apache Spark.

Every public name is importable from here::

    from ctistream import Application, Stream, point, AdvanceTimeSettings, ...

The temporal contract is ``docs/semantics.md`` in the repository; docstrings cite it by section
("semantics §5"). The main names, by topic:

Build and run a query
    Application (owns the SparkSession and the queries), Stream (``Stream.create`` binds an
    input; ``where``, ``select``, ``union``, ``join``, ``left_outer_join``, ``anti_join``,
    ``clip_event_duration``, ``group_apply``, windows (time, snapshot, count and session; with
    ``aggregate``, ``top_k`` or ``apply``), ``to_query``; ``explain()`` and ``schema`` show the
    plan and the payload), Query (``run``, ``start`` /
    ``stop``, ``metrics``, ``timeline``), WindowOutput.

Query templates (bind one query to many adapters)
    QueryTemplate, QueryBinder, ``Stream.input``, ``Application.create_query``.

Time and events (semantics §1-§2)
    point, interval, edge_start, edge_end, cti, Event, EventKind, EventShape, EdgeType; TICK,
    MIN_TIME (-inf), MAX_TIME (+inf). Times are aware ``datetime`` values or int ticks (µs).

How inputs get their CTIs (semantics §3, §7)
    AdvanceTimeGenerationSettings, AdvanceTimeImportSettings, AdvanceTimePolicy,
    AdvanceTimeSettings, AdapterAdvanceTimeSettings; EventOrderingSettings, OrderingAction;
    Versions (a reference input given as versions of a key: the engine makes its edges).

Writing adapters
    InputAdapter, InputAdapterFactory, OutputAdapter, OutputAdapterFactory, SourceItem,
    ItemKind; PushInputAdapter, PushInputAdapterFactory, PushInputSource,
    EnqueueResult, AdapterState, ArrivalStamp. Built in: ``ctistream.adapters.memory``
    (scripts and a collecting sink), ``.files``, ``.kafka``, ``.eventhubs``, ``.push``.

Errors and warnings
    QueryBuildError, QueryRunError, CtiViolationError, MalformedRecordError,
    CheckpointDamageError, QueryStoppedError, PushAdapterError, HeldEventsWarning.

The subpackages hold the rest: ``ctistream.engine`` (time, events, settings, errors, the
runtime), ``ctistream.adapters`` (the adapter contracts and the built-in adapters),
``ctistream.bindings`` (the query-building API and the ``ctistream`` command) and
``ctistream.viz`` (``Trace``, what a traced run records, and ``Timeline``, its picture; the PNG
needs matplotlib, which only the ``viz`` extra installs: ``pip install "ctistream[viz]"``).
"""

from ctistream.adapters import (
    AdapterState,
    ArrivalStamp,
    EnqueueResult,
    InputAdapter,
    InputAdapterFactory,
    ItemKind,
    OutputAdapter,
    OutputAdapterFactory,
    PushAdapterError,
    PushInputAdapter,
    PushInputAdapterFactory,
    PushInputSource,
    SourceItem,
)
from ctistream.bindings import Application, Query, QueryBinder, QueryTemplate, Stream
from ctistream.engine import (
    MAX_TIME,
    MIN_TIME,
    TICK,
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    CheckpointDamageError,
    CtiViolationError,
    EdgeType,
    Event,
    EventKind,
    EventOrderingSettings,
    EventShape,
    HeldEventsWarning,
    MalformedRecordError,
    OrderingAction,
    QueryBuildError,
    QueryRunError,
    QueryStoppedError,
    Versions,
    WindowOutput,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)

__all__ = [
    "MAX_TIME",
    "MIN_TIME",
    "TICK",
    "AdapterAdvanceTimeSettings",
    "AdapterState",
    "AdvanceTimeGenerationSettings",
    "AdvanceTimeImportSettings",
    "AdvanceTimePolicy",
    "AdvanceTimeSettings",
    "Application",
    "ArrivalStamp",
    "CheckpointDamageError",
    "CtiViolationError",
    "EdgeType",
    "EnqueueResult",
    "Event",
    "EventKind",
    "EventOrderingSettings",
    "EventShape",
    "HeldEventsWarning",
    "InputAdapter",
    "InputAdapterFactory",
    "ItemKind",
    "MalformedRecordError",
    "OrderingAction",
    "OutputAdapter",
    "OutputAdapterFactory",
    "PushAdapterError",
    "PushInputAdapter",
    "PushInputAdapterFactory",
    "PushInputSource",
    "Query",
    "QueryBinder",
    "QueryBuildError",
    "QueryRunError",
    "QueryStoppedError",
    "QueryTemplate",
    "SourceItem",
    "Stream",
    "Versions",
    "WindowOutput",
    "cti",
    "edge_end",
    "edge_start",
    "interval",
    "point",
]
