"""Advance-time settings: how an input gets its CTIs (semantics §3), and the arrival-time
policies of an input (semantics §7: :class:`EventOrderingSettings`).

Frozen, validated pydantic models. As in StreamInsight they can be built positionally::

    AdvanceTimeGenerationSettings(10, timedelta(seconds=5), True)
    AdvanceTimeSettings(None, AdvanceTimeImportSettings("dataStream"), AdvanceTimePolicy.ADJUST)

Durations are ``timedelta`` or Spark-style interval strings (``"5 seconds"``), read by
:func:`engine.temporal.to_duration_ticks` and stored as ``timedelta``; a bare number is refused
(semantics §1), except a generation ``frequency``, where an ``int`` is an event count. The code
that applies the settings lives in :mod:`engine.ingress`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ctistream.engine._model import Choice, Model
from ctistream.engine.temporal import TICK, to_duration
from pydantic import ConfigDict, ValidationInfo, field_validator, model_validator

__all__ = [
    "AdapterAdvanceTimeSettings",
    "AdvanceTimeGenerationSettings",
    "AdvanceTimeImportSettings",
    "AdvanceTimePolicy",
    "AdvanceTimeSettings",
    "EventOrderingSettings",
    "OrderingAction",
    "Versions",
]


class AdvanceTimePolicy(Choice):
    """What happens to an event that breaks the CTI in force when it arrives."""

    #: The event is dropped.
    DROP = "DROP"
    #: An event overlapping the CTI gets ``start = CTI``; one entirely before it is dropped.
    ADJUST = "ADJUST"


def _duration(value: Any, info: ValidationInfo, owner: str, min_ticks: int | None = None) -> Any:
    """A settings field's duration as a ``timedelta`` (None stays None)."""
    if value is None:
        return value
    return to_duration(value, name=str(info.field_name), owner=owner, min_ticks=min_ticks)


def _ticks(value: timedelta) -> int:
    """A validated ``timedelta`` field as ticks (exact: timedelta counts whole microseconds)."""
    return value // TICK


_FROZEN = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=False)


class AdvanceTimeGenerationSettings(Model):
    """Generate CTIs from the events of an input.

    ``frequency``: an ``int`` N makes a CTI after every N-th counted event; a ``timedelta`` T makes
    one whenever the largest start seen moves into a later period of length T (application time,
    never wall-clock time). Counted events are points, intervals and START edges, never END edges.
    ``delay``: the CTI is ``largest start seen - delay``; zero and negative delays are allowed
    (``-TICK`` commits each point event at once). ``flush_on_stop``: a CTI at ``+inf`` follows the
    last event when the input ends or the query stops.
    """

    model_config = _FROZEN

    frequency: int | timedelta
    delay: timedelta = timedelta(0)
    flush_on_stop: bool = False

    def __init__(
        self,
        frequency: int | timedelta | str | None = None,
        delay: timedelta | str = timedelta(0),
        flush_on_stop: bool = False,
        /,
        **kwargs: Any,
    ) -> None:
        if frequency is not None:
            kwargs["frequency"] = frequency
        kwargs.setdefault("delay", delay)
        kwargs.setdefault("flush_on_stop", flush_on_stop)
        super().__init__(**kwargs)

    @field_validator("frequency", mode="before")
    @classmethod
    def _check_frequency(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ValueError(
                    f"AdvanceTimeGenerationSettings: frequency as an event count must be >= 1; "
                    f"got {value}. Fix: use 1 for a CTI after every event"
                )
            return value
        if not isinstance(value, timedelta | str):
            raise ValueError(
                f"AdvanceTimeGenerationSettings: frequency must be an event count (int >= 1) or "
                f"a time span (a timedelta or a Spark-style interval string); got "
                f"{value!r} ({type(value).__name__}). Fix: AdvanceTimeGenerationSettings(10) or "
                "AdvanceTimeGenerationSettings(timedelta(seconds=1)) or "
                'AdvanceTimeGenerationSettings("1 second")'
            )
        return _duration(value, info, "AdvanceTimeGenerationSettings", min_ticks=1)

    @field_validator("delay", mode="before")
    @classmethod
    def _check_delay(cls, value: Any, info: ValidationInfo) -> Any:
        return _duration(value, info, "AdvanceTimeGenerationSettings")

    @property
    def by_count(self) -> bool:
        """True when the frequency is an event count."""
        return isinstance(self.frequency, int)

    @property
    def frequency_ticks(self) -> int:
        """The frequency as an event count or, for a time span, as ticks."""
        if isinstance(self.frequency, int):
            return self.frequency
        return _ticks(self.frequency)

    @property
    def delay_ticks(self) -> int:
        return _ticks(self.delay)


class AdvanceTimeImportSettings(Model):
    """Import the CTIs of another input of the same query (binding level only)."""

    model_config = _FROZEN

    stream_name: str

    def __init__(self, stream_name: str | None = None, /, **kwargs: Any) -> None:
        if stream_name is not None:
            kwargs["stream_name"] = stream_name
        super().__init__(**kwargs)

    @field_validator("stream_name")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "stream_name must name an input of the same query; got an empty string"
            )
        return value


class AdvanceTimeSettings(Model):
    """Binding-level advance-time settings; they override what the adapter factory declares.

    At least one of ``generation`` and ``import_settings`` must be given; both may be.
    """

    model_config = _FROZEN

    generation: AdvanceTimeGenerationSettings | None = None
    import_settings: AdvanceTimeImportSettings | None = None
    policy: AdvanceTimePolicy = AdvanceTimePolicy.DROP

    def __init__(
        self,
        generation: AdvanceTimeGenerationSettings | None = None,
        import_settings: AdvanceTimeImportSettings | None = None,
        policy: AdvanceTimePolicy = AdvanceTimePolicy.DROP,
        /,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("generation", generation)
        kwargs.setdefault("import_settings", import_settings)
        kwargs.setdefault("policy", policy)
        super().__init__(**kwargs)

    @model_validator(mode="after")
    def _generation_or_import(self) -> AdvanceTimeSettings:
        if self.generation is None and self.import_settings is None:
            raise ValueError(
                "AdvanceTimeSettings needs generation settings, import settings, or both; got "
                "neither. Fix: AdvanceTimeSettings(AdvanceTimeGenerationSettings(1), None, policy) "
                "or AdvanceTimeSettings(None, AdvanceTimeImportSettings('otherStream'), policy)"
            )
        return self

    @classmethod
    def increasing_start_time(cls) -> AdvanceTimeSettings:
        """For inputs whose start times never decrease: a CTI at each event's start, Drop."""
        return cls(
            AdvanceTimeGenerationSettings(1, timedelta(0), True), None, AdvanceTimePolicy.DROP
        )

    @classmethod
    def strictly_increasing_start_time(cls) -> AdvanceTimeSettings:
        """For strictly increasing start times: a CTI one tick after each event's start, Drop."""
        return cls(AdvanceTimeGenerationSettings(1, -TICK, True), None, AdvanceTimePolicy.DROP)

    @classmethod
    def unordered_start_time(cls, delay: timedelta | str) -> AdvanceTimeSettings:
        """For events up to ``delay`` out of order: a CTI ``delay`` behind each event, Drop."""
        return cls(AdvanceTimeGenerationSettings(1, delay, True), None, AdvanceTimePolicy.DROP)


class AdapterAdvanceTimeSettings(Model):
    """What an input adapter factory declares: generation settings and a violation policy."""

    model_config = _FROZEN

    generation: AdvanceTimeGenerationSettings
    policy: AdvanceTimePolicy = AdvanceTimePolicy.DROP

    def __init__(
        self,
        generation: AdvanceTimeGenerationSettings | None = None,
        policy: AdvanceTimePolicy = AdvanceTimePolicy.DROP,
        /,
        **kwargs: Any,
    ) -> None:
        if generation is not None:
            kwargs["generation"] = generation
        kwargs.setdefault("policy", policy)
        super().__init__(**kwargs)

    def as_binding(self) -> AdvanceTimeSettings:
        """The same settings in binding form (no import)."""
        return AdvanceTimeSettings(self.generation, None, self.policy)


class OrderingAction(Choice):
    """What an arrival-time policy does to a late or out-of-order event (semantics §7)."""

    #: The event is dropped (and counted by reason).
    DROP = "DROP"
    #: The event's application time moves (to ``arrival - late_arrival_tolerance``, or to the
    #: watermark); the payload's event-time field keeps its value.
    ADJUST = "ADJUST"


def _column_name(value: Any, what: str, example: str) -> Any:
    if value is None:
        return value
    if not isinstance(value, str) or not value.strip() or value.startswith("__"):
        raise ValueError(
            f"{what} must name a payload column (a non-empty string not starting with '__'); "
            f"got {value!r}. Fix: e.g. {what}={example!r}"
        )
    return value


class EventOrderingSettings(Model):
    """Arrival-time policies of one input, as Azure Stream Analytics' event ordering (§7).

    ``event_time``: the payload column holding each event's time ("TIMESTAMP BY"), a timestamp
    or an integer of ticks; it becomes the event's application time (the adapter's own start is
    not used). ``None``: the arrival time is the application time (ASA's default, Flink's
    ingestion time); the tolerances and the early window are then disregarded, as arrival never
    goes backwards in a partition.

    Per event, in arrival order, per source partition (and per key with ``over``):

    1. ``early_arrival_window`` (``None`` turns it off): an event whose time is more than this
       ahead of its arrival is dropped (reason ``early``);
    2. ``late_arrival_tolerance``: an event whose time is more than this behind its arrival is
       late: ``DROP``, or ``ADJUST`` to ``arrival - tolerance`` (reason ``late``);
    3. ``out_of_order_tolerance``: the watermark is ``max event time seen - tolerance`` (over the
       original times of the events not dropped as early); an event below it is out of order:
       ``DROP``, or ``ADJUST`` to the watermark (reason ``out-of-order``). The watermark is the
       input's CTI, emitted right after the event that raises it.

    ``over``: a key column: every key gets its own watermark and policies (ASA substreams).
    ``flush_on_stop``: a CTI at ``+inf`` follows the last event when the input ends or the query
    stops, as :class:`AdvanceTimeGenerationSettings`. Point inputs only. Durations are
    ``timedelta`` or Spark-style interval strings (``"5 seconds"``) and may not be negative.
    """

    model_config = _FROZEN

    event_time: str | None = "event_time"
    out_of_order_tolerance: timedelta = timedelta(0)
    late_arrival_tolerance: timedelta = timedelta(seconds=5)
    early_arrival_window: timedelta | None = timedelta(minutes=5)
    action: OrderingAction = OrderingAction.ADJUST
    over: str | None = None
    flush_on_stop: bool = False

    @field_validator("event_time", mode="before")
    @classmethod
    def _check_event_time(cls, value: Any) -> Any:
        return _column_name(value, "event_time", "event_time")

    @field_validator("over", mode="before")
    @classmethod
    def _check_over(cls, value: Any) -> Any:
        return _column_name(value, "over", "device_id")

    @field_validator("action", mode="before")
    @classmethod
    def _check_action(cls, value: Any) -> Any:
        if isinstance(value, str) and value.upper() in OrderingAction.__members__:
            return OrderingAction(value.upper())
        raise ValueError(
            f"action must be OrderingAction.DROP or OrderingAction.ADJUST; got {value!r}. "
            "Fix: action=OrderingAction.ADJUST"
        )

    @field_validator(
        "out_of_order_tolerance", "late_arrival_tolerance", "early_arrival_window", mode="before"
    )
    @classmethod
    def _check_durations(cls, value: Any, info: ValidationInfo) -> Any:
        return _duration(value, info, "EventOrderingSettings", min_ticks=0)

    @model_validator(mode="after")
    def _over_needs_event_time(self) -> EventOrderingSettings:
        if self.over is not None and self.event_time is None:
            raise ValueError(
                f"over={self.over!r} (substreams) needs an event-time column; got "
                "event_time=None (arrival time), which gives every key the partition's arrival "
                "order, so there is nothing to keep apart. Fix: event_time='<column>', or drop over"
            )
        return self

    @property
    def out_of_order_ticks(self) -> int:
        return _ticks(self.out_of_order_tolerance)

    @property
    def late_ticks(self) -> int:
        return _ticks(self.late_arrival_tolerance)

    @property
    def early_ticks(self) -> int | None:
        if self.early_arrival_window is None:
            return None
        return _ticks(self.early_arrival_window)


class Versions(Model):
    """A reference input given as versions: the engine makes its START and END edges (§1, §3).

    Each row of the input is one version of a key: its ``key`` column(s), the time the version
    becomes valid (the row's time as the adapter reads it: the time column or field, a script
    point's start) and its payload. Bound with ``Stream.create(..., EventShape.POINT, ...,
    versions=Versions(key="sensor"))``, the input is an EDGE stream: per source partition and
    key, in arrival order, a version opens a START edge at its valid-from time and closes the
    key's open version with an END edge at that time (the version it replaces ends where it
    begins); a row whose ``deleted`` column is true closes the key's open version without opening
    another. Semantics §3 applies to these edges as to edges an adapter sends: a version or a
    delete whose time is below the CTI ``c`` in force closes the open version at ``c`` (§3.4,
    never dropped while that version is open) and the new version is dropped or, under ADJUST,
    starts at ``c``. docs/decisions.md ("Versions") has the rules for a second version at the
    same time, a version before its key's open one, and a delete of an unknown key.

    ``key``: one payload column or several (a tuple). ``deleted``: a boolean payload column
    marking deletes (null is false), or None when the input has no deletes.
    """

    model_config = _FROZEN

    key: tuple[str, ...]
    deleted: str | None = None

    def __init__(self, key: str | tuple[str, ...] | list[str], deleted: str | None = None) -> None:
        super().__init__(key=key, deleted=deleted)

    @field_validator("key", mode="before")
    @classmethod
    def _check_key(cls, value: Any) -> Any:
        keys = (value,) if isinstance(value, str) else value
        if not isinstance(keys, tuple | list) or not keys:
            raise ValueError(
                f"key must name the key column(s) of the versions; got {value!r}. "
                "Fix: key='sensor_id', or key=('site', 'sensor_id')"
            )
        return tuple(_column_name(k, "key", "sensor_id") for k in keys)

    @field_validator("deleted", mode="before")
    @classmethod
    def _check_deleted(cls, value: Any) -> Any:
        return None if value is None else _column_name(value, "deleted", "deleted")
