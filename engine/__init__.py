"""The temporal core: time, events, advance-time settings, errors; Spark operators underneath."""

from ctistream.engine.errors import (
    CheckpointDamageError,
    CtiViolationError,
    HeldEventsWarning,
    MalformedRecordError,
    QueryBuildError,
    QueryRunError,
    QueryStoppedError,
)
from ctistream.engine.events import (
    EdgeType,
    Event,
    EventKind,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.operators.window import WindowOutput
from ctistream.engine.settings import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventOrderingSettings,
    OrderingAction,
    Versions,
)
from ctistream.engine.temporal import MAX_TIME, MIN_TIME, TICK

__all__ = [
    "MAX_TIME",
    "MIN_TIME",
    "TICK",
    "AdapterAdvanceTimeSettings",
    "AdvanceTimeGenerationSettings",
    "AdvanceTimeImportSettings",
    "AdvanceTimePolicy",
    "AdvanceTimeSettings",
    "CheckpointDamageError",
    "CtiViolationError",
    "EdgeType",
    "Event",
    "EventKind",
    "EventOrderingSettings",
    "EventShape",
    "HeldEventsWarning",
    "MalformedRecordError",
    "OrderingAction",
    "QueryBuildError",
    "QueryRunError",
    "QueryStoppedError",
    "Versions",
    "WindowOutput",
    "cti",
    "edge_end",
    "edge_start",
    "interval",
    "point",
]
