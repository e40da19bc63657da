"""The seeds' lookup scenario: a fast point stream joined with a slow, edge-shaped reference stream.

Without CTI import the join can only release results up to the reference stream's own time, so
its output stalls. With ``AdvanceTimeImportSettings("dataStream")`` and ADJUST the reference
stream borrows the data stream's CTIs: the join keeps pace with the data, and a reference update
that arrives late takes effect from the current CTI on. The update is written as it happened (the
old limit's END edge at its true end, then the new limit's START edge): both are late, so the END
edge closes the old limit at the CTI (it is never dropped, which would keep the old limit valid
forever: semantics §3.4) and ADJUST moves the new START edge to that CTI. Every reading is joined
with exactly one limit.

The lookup stream can be written two ways, with the same result: as the edges themselves (the
END edge of the old limit carries both its times), or as versions, one row per limit from the
time it is valid (``versions=Versions(key="sensor")``): the engine closes a sensor's limit when
its next version comes, at that version's time, or at the CTI when the version is late.

    python examples/lookup_join.py

``query`` builds the query with CTI import for the command line, which runs it, prints its metrics
and draws its timeline (the late update shows as an adjusted END edge, from 12:00:20 to the CTI
at 12:00:30, and an adjusted START edge):

    ctistream examples/lookup_join.py:query --epochs 4
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, Query, Stream
from ctistream.engine import (
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    Event,
    EventShape,
    Versions,
    edge_end,
    edge_start,
    point,
)
from ctistream.engine.temporal import format_ticks

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


class DataInputFactory(MemoryInputFactory):
    """The fast stream's adapter handles its own application time: a CTI after every event."""

    def declare_advance_time_properties(
        self, config: MemoryInputConfig, shape: EventShape
    ) -> AdapterAdvanceTimeSettings:
        return AdapterAdvanceTimeSettings(
            AdvanceTimeGenerationSettings(1, timedelta(0), True), AdvanceTimePolicy.DROP
        )


def script(versions: bool = False) -> EventScript:
    """The readings and the limits; ``versions``: the limits as versions, else as edges."""
    s = EventScript()
    if versions:  # one row per limit, from the time it is valid
        s.insert("lookupStream", point(at(0), {"sensor": 1, "limit": 50}))
    else:
        s.insert("lookupStream", edge_start(at(0), {"sensor": 1, "limit": 50}))
    for t in range(1, 41):
        s.insert("dataStream", point(at(t), {"sensor": 1, "value": t}))
        if t == 30 and versions:  # the limit changed at 12:00:20; the update arrives now
            s.insert("lookupStream", point(at(20), {"sensor": 1, "limit": 60}))
        elif t == 30:  # the same update as edges: the old limit's END edge, the new START edge
            s.insert("lookupStream", edge_end(at(0), at(20), {"sensor": 1, "limit": 50}))
            s.insert("lookupStream", edge_start(at(20), {"sensor": 1, "limit": 60}))
    return s


def build(app: Application, import_ctis: bool, versions: bool = False) -> Query:
    """The join of the data stream with the lookup stream, with or without CTI import; the
    lookup stream as edges, or (``versions``) as versions of each sensor's limit."""
    events = script(versions)
    data = Stream.create(
        "dataStream", DataInputFactory(), MemoryInputConfig(script=events), EventShape.POINT
    )
    if import_ctis:
        settings = AdvanceTimeSettings(
            None, AdvanceTimeImportSettings("dataStream"), AdvanceTimePolicy.ADJUST
        )
    else:  # the reference stream's own events are its only clock
        settings = AdvanceTimeSettings(
            AdvanceTimeGenerationSettings(1, timedelta(0), True), None, AdvanceTimePolicy.DROP
        )
    if versions:
        lookup = Stream.create(
            "lookupStream",
            MemoryInputFactory(),
            MemoryInputConfig(script=events),
            EventShape.POINT,  # each row is the moment a version becomes valid
            settings,
            versions=Versions(key="sensor"),
        )
    else:
        lookup = Stream.create(
            "lookupStream",
            MemoryInputFactory(),
            MemoryInputConfig(script=events),
            EventShape.EDGE,
            settings,
        )
    name = f"lookup-{'import' if import_ctis else 'own'}{'-versions' if versions else ''}"
    return data.join(lookup, on="sensor").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )


def query() -> Query:
    """The query with CTI import on a new local application (``ctistream ...:query``)."""
    return build(Application("lookup"), import_ctis=True)


def run(app: Application, import_ctis: bool, versions: bool = False) -> list[Event]:
    query = build(app, import_ctis, versions)
    query.run(epochs=4)
    return MemoryOutputFactory.collected(query.name)


def limits_by_reading(out: list[Event]) -> list[tuple[list[int], int, int]]:
    """Runs of consecutive readings joined with the same limits: (limits, first, last second)."""
    by_reading: dict[int, list[int]] = {}
    for e in out:
        if not e.is_cti:
            second = (e.start - int(T0.timestamp()) * 1_000_000) // 1_000_000
            by_reading.setdefault(second, []).append(e.payload["limit"])
    runs: list[tuple[list[int], int, int]] = []
    for second in sorted(by_reading):
        limits = sorted(by_reading[second])
        if runs and runs[-1][0] == limits and runs[-1][2] == second - 1:
            runs[-1] = (limits, runs[-1][1], second)
        else:
            runs.append((limits, second, second))
    return runs


def summary(out: list[Event]) -> str:
    events = [e for e in out if not e.is_cti]
    finite = [e.start for e in out if e.is_cti and e.start < 2**63 - 1]
    runs = ", ".join(
        f"limit {'+'.join(map(str, limits))} for readings {a}-{b} s"
        for limits, a, b in limits_by_reading(out)
    )
    return (
        f"{len(events)} joined events ({runs}), "
        f"last finite CTI {format_ticks(max(finite)) if finite else 'none'}"
    )


def main() -> None:
    app = Application("lookup")
    print("without import:", summary(run(app, import_ctis=False)))
    print("with import:   ", summary(run(app, import_ctis=True)))
    print("as versions:   ", summary(run(app, import_ctis=True, versions=True)))


if __name__ == "__main__":
    main()
