"""No silent empty result (semantics §8, last paragraph): a run that ends with events held back by
an input that never had a CTI warns, naming the input and the fix.

An input's CTI stays -inf without CTI generation, imported CTIs or explicit CTIs from its adapter;
every operator's output CTI is at most the minimum of its inputs' (§5), so the query's output
CTI stays -inf and egress releases nothing (§6). The runs here are small: the rule does not depend
on the number of events, and each run is cut into one and several epochs where the cut matters
(the warning comes once, at the end of the run, never per epoch).
"""

from __future__ import annotations

import logging
import uuid
import warnings
from datetime import timedelta

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventKind,
    EventShape,
    HeldEventsWarning,
    point,
)

POINT = EventShape.POINT
#: A CTI after every event at its start, and +inf when the run stops.
GENERATE = AdvanceTimeSettings(
    generation=AdvanceTimeGenerationSettings(1, timedelta(0), flush_on_stop=True),
    policy=AdvanceTimePolicy.DROP,
)


def script_of(stream: str, n: int, *, end: bool = True) -> EventScript:
    script = EventScript()
    for i in range(n):
        script.insert(stream, point(10 * i, {"id": i}))
    if end:
        script.end(stream)
    return script


def query_over(app, *streams: Stream):
    name = "held-" + uuid.uuid4().hex[:8]
    stream = streams[0] if len(streams) == 1 else streams[0].union(*streams[1:])
    return name, stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), POINT
    )


def held_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, HeldEventsWarning)]


def run_recorded(query, epochs: int = 1) -> list[str]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        query.run(epochs=epochs)
    for w in record:  # pointed at the caller's query.run(), not at the engine
        if issubclass(w.category, HeldEventsWarning):
            assert w.filename == __file__
    return held_warnings(record)


@pytest.mark.parametrize("epochs", [1, 3])
def test_a_run_whose_input_never_had_a_cti_warns_naming_it_and_the_fix(app, caplog, epochs):
    # 30 points on an input bound without settings, whose adapter sends no CTI: its CTI stays
    # -inf, so the output CTI does and nothing is released (§6). Guards against: 30 in, 0 out,
    # no word.
    script = script_of("sensors", 30)
    stream = Stream.create("sensors", MemoryInputFactory(), MemoryInputConfig(script=script), POINT)
    name, query = query_over(app, stream)
    with caplog.at_level(logging.WARNING, logger="ctistream.runtime"):
        got = run_recorded(query, epochs)
    assert MemoryOutputFactory.collected(name) == []
    assert query.metrics()["sensors"]["cti"] == "-inf"  # still -inf
    assert len(got) == 1  # once, at the end of the run
    message = got[0]
    assert f"query {name!r}: input 'sensors' ended the run without a CTI" in message
    assert "it has no CTI generation, it imports no CTIs and its adapter sent no explicit CTI" in (
        message
    )
    assert "30 event(s) of this input and 30 of all its inputs are held back" in message
    assert "Fix: bind it with AdvanceTimeSettings(generation=AdvanceTimeGenerationSettings(" in (
        message
    )
    assert "flush_on_stop=True" in message and "AdvanceTimeImportSettings('<input>')" in message
    assert "have its adapter send CTIs" in message
    # (the engine's records: a Kafka client another test left retrying logs at WARNING too)
    logged = [
        r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("ctistream")
    ]
    assert [r.getMessage() for r in logged] == [message]
    assert logged[0].ctistream == {
        "query": name,
        "input": "sensors",
        "held": 30,
        "held_in_query": 30,
    }


def test_an_input_without_ctis_holds_back_the_other_inputs_events_and_is_named(app):
    # 'a' generates CTIs and flushes (its CTI ends at +inf); 'b' is empty and has no CTI source:
    # the union's CTI is the older of the two, -inf (§5), so a's 3 events are never released.
    # Nothing is held on 'b' itself, but the result is empty because of it.
    script = script_of("a", 3).declare("b", "0")
    a = Stream.create("a", MemoryInputFactory(), MemoryInputConfig(script=script), POINT, GENERATE)
    b = Stream.create(
        "b", MemoryInputFactory(), MemoryInputConfig(script=script, schema="id int"), POINT
    )
    name, query = query_over(app, a, b)
    got = run_recorded(query)
    assert [e for e in MemoryOutputFactory.collected(name) if e.kind is EventKind.INSERT] == []
    assert len(got) == 1 and "input 'b' ended the run without a CTI" in got[0]
    assert "0 event(s) of this input and 3 of all its inputs are held back" in got[0]


def test_generation_that_made_no_cti_and_does_not_flush_names_flush_on_stop(app):
    # A CTI candidate after every 10th event: 4 events make none, and nothing flushes on stop.
    script = script_of("slow", 4)
    every_10 = AdvanceTimeSettings(
        generation=AdvanceTimeGenerationSettings(10, timedelta(0)), policy=AdvanceTimePolicy.DROP
    )
    stream = Stream.create(
        "slow", MemoryInputFactory(), MemoryInputConfig(script=script), POINT, every_10
    )
    name, query = query_over(app, stream)
    got = run_recorded(query)
    assert MemoryOutputFactory.collected(name) == []
    assert len(got) == 1
    assert "its CTI generation made no CTI and does not flush on stop" in got[0]
    assert "Fix: set flush_on_stop=True in its AdvanceTimeGenerationSettings" in got[0]


def test_a_partition_without_ctis_is_named(app):
    # Explicit CTIs on partition p0 only: the input's CTI is the minimum over p0 (+inf) and p1
    # (-inf), so p1's event and p0's are held (§3 step 5).
    script = EventScript()
    script.insert("two", point(5, {"id": 1}), partition="p0")
    script.insert("two", point(6, {"id": 2}), partition="p1")
    script.cti("two", MAX_TIME, partition="p0")
    stream = Stream.create("two", MemoryInputFactory(), MemoryInputConfig(script=script), POINT)
    name, query = query_over(app, stream)
    got = run_recorded(query)
    assert MemoryOutputFactory.collected(name) == []
    assert len(got) == 1
    assert "its partition(s) ['p1'] had no CTI" in got[0]
    assert "have its adapter send CTIs on every partition" in got[0]


def _explicit(app):
    script = script_of("s", 3, end=False).cti("s", 15)  # commits the points at 0 and 10
    return [Stream.create("s", MemoryInputFactory(), MemoryInputConfig(script=script), POINT)], 2


def _generated(app):
    script = script_of("s", 3)
    return [
        Stream.create("s", MemoryInputFactory(), MemoryInputConfig(script=script), POINT, GENERATE)
    ], 3


def _imported(app):
    # 's' has no CTI of its own and imports the CTIs of 'g', which generates and flushes
    script = script_of("s", 3).declare("g", "0")
    script.insert("g", point(0, {"id": 9})).end("g")
    imports = AdvanceTimeSettings(
        import_settings=AdvanceTimeImportSettings("g"), policy=AdvanceTimePolicy.DROP
    )
    s = Stream.create("s", MemoryInputFactory(), MemoryInputConfig(script=script), POINT, imports)
    g = Stream.create("g", MemoryInputFactory(), MemoryInputConfig(script=script), POINT, GENERATE)
    return [s, g], 4


@pytest.mark.parametrize("make", [_explicit, _generated, _imported])
def test_no_warning_when_every_input_gets_ctis(app, make):
    streams, released = make(app)
    name, query = query_over(app, *streams)
    assert run_recorded(query, 2) == []
    inserts = [e for e in MemoryOutputFactory.collected(name) if e.kind is EventKind.INSERT]
    assert len(inserts) == released


def test_no_warning_when_nothing_is_held(app):
    # An input without a CTI source that took no event: the result is empty because the input
    # is, and nothing was held back.
    script = EventScript().declare("quiet", "0")
    stream = Stream.create(
        "quiet", MemoryInputFactory(), MemoryInputConfig(script=script, schema="id int"), POINT
    )
    name, query = query_over(app, stream)
    assert run_recorded(query) == []
    assert MemoryOutputFactory.collected(name) == []


def test_a_started_query_warns_when_it_stops_with_a_flush_and_not_when_it_pauses(app):
    script = script_of("live", 5, end=False)
    config = MemoryInputConfig(script=script)
    paused = query_over(app, Stream.create("live", MemoryInputFactory(), config, POINT))[1]
    paused.start(trigger=None)
    paused.step()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        paused.stop(flush=False)  # resumable: the events may still get their CTI
    assert held_warnings(record) == []

    stopped = query_over(app, Stream.create("live", MemoryInputFactory(), config, POINT))[1]
    stopped.start(trigger=None)
    stopped.step()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        stopped.stop()
    got = [w for w in record if issubclass(w.category, HeldEventsWarning)]
    assert len(got) == 1 and "input 'live' ended the run without a CTI" in str(got[0].message)
    assert got[0].filename == __file__  # pointed at the caller's stop()


def test_the_check_reads_the_state_the_run_left_without_spark():
    # The driver-side rule on its own, for the cases a run above does not reach: an input that
    # imports from an input without CTIs, and an ordered input that made no watermark.
    from ctistream.engine.ingress import IngressState, InputSpec, PartitionState
    from ctistream.engine.runtime import _held_warnings
    from ctistream.engine.settings import EventOrderingSettings

    imports = AdvanceTimeSettings(
        import_settings=AdvanceTimeImportSettings("src"), policy=AdvanceTimePolicy.DROP
    )
    late = EventOrderingSettings(event_time="t")
    specs = [
        InputSpec("src", 0, ["0"], None, ["id"]),
        InputSpec("follower", 1, ["0"], imports, ["id"]),
        InputSpec("ordered", 2, ["0"], None, ["id"], ordering=late),
    ]
    states = []
    for n in (2, 3, 0):
        st = IngressState([PartitionState()])
        st.counts.update(events_in=n + 1, dropped=1)  # one of each dropped: n held
        states.append(st)
    found = _held_warnings("q", list(zip(specs, states, strict=True)))
    assert [f["input"] for _, f in found] == ["src", "follower", "ordered"]
    assert [(f["held"], f["held_in_query"]) for _, f in found] == [(2, 5), (3, 5), (0, 5)]
    follower, ordered = found[1][0], found[2][0]
    assert "the input it imports CTIs from, 'src', had none" in follower
    assert "give 'src' CTIs" in follower
    assert "its event ordering made no watermark and does not flush on stop" in ordered
    assert "set flush_on_stop=True in its EventOrderingSettings" in ordered
    # an input at a CTI, or a query that holds nothing, gives no warning
    states[0].emitted = states[1].emitted = states[2].emitted = 0
    assert _held_warnings("q", list(zip(specs, states, strict=True))) == []
    empty = [IngressState([PartitionState()]) for _ in specs]
    assert _held_warnings("q", list(zip(specs, empty, strict=True))) == []
