"""Durations are timedeltas or Spark-style interval strings, never bare numbers (semantics §1).

Every duration parameter of the public API (window size and hop, shift, durations, generation
delay, ordering tolerances) refuses ``10`` and ``10.0`` with a message naming the parameter, its
operator or setting, and both spellings that work; strings are read exactly, in ticks.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from ctistream.adapters.eventhubs import EventHubInputConfig
from ctistream.adapters.kafka import KafkaInputConfig
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
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventOrderingSettings,
    EventShape,
    cti,
    interval,
    point,
)
from ctistream.engine.temporal import duration_text, to_duration_ticks
from pydantic import ValidationError
from pyspark.sql import functions as F

from tests.harness import In, spark_run

S = 1_000_000  # ticks in one second


def _stream() -> Stream:
    return Stream.input("s", "k string, v double")


#: (owner, parameter, a call that passes the duration under test to that parameter)
DURATION_PARAMETERS = [
    ("tumbling_window()", "size", lambda d: _stream().tumbling_window(d)),
    ("hopping_window()", "size", lambda d: _stream().hopping_window(d, "1 second")),
    ("hopping_window()", "hop", lambda d: _stream().hopping_window("1 second", d)),
    ("shift_event_time()", "delta", lambda d: _stream().shift_event_time(d)),
    ("alter_event_duration()", "duration", lambda d: _stream().alter_event_duration(d)),
    (
        "alter_event_lifetime()",
        "duration",
        lambda d: _stream().alter_event_lifetime(lambda s: s, d),
    ),
    ("AdvanceTimeGenerationSettings", "delay", lambda d: AdvanceTimeGenerationSettings(1, d)),
    (
        "AdvanceTimeGenerationSettings",
        "delay",
        lambda d: AdvanceTimeSettings.unordered_start_time(d),
    ),
    (
        "EventOrderingSettings",
        "out_of_order_tolerance",
        lambda d: EventOrderingSettings(out_of_order_tolerance=d),
    ),
    (
        "EventOrderingSettings",
        "late_arrival_tolerance",
        lambda d: EventOrderingSettings(late_arrival_tolerance=d),
    ),
    (
        "EventOrderingSettings",
        "early_arrival_window",
        lambda d: EventOrderingSettings(early_arrival_window=d),
    ),
]
_IDS = [f"{owner}-{name}-{i}" for i, (owner, name, _) in enumerate(DURATION_PARAMETERS)]


@pytest.mark.parametrize(("owner", "name", "call"), DURATION_PARAMETERS, ids=_IDS)
@pytest.mark.parametrize("bare", [10, 10.0])
def test_every_duration_parameter_refuses_a_bare_number_showing_both_spellings(
    owner, name, call, bare
):
    # 10 could be ticks, milliseconds or seconds (and 10.0 read as seconds by pydantic while 10
    # was ticks): the message names the parameter and its owner and spells the two ways out.
    with pytest.raises((TypeError, ValidationError)) as caught:
        call(bare)
    message = str(caught.value)
    assert f"{owner}: {name} must be a duration; got the bare number {bare!r}" in message
    assert f'Fix: {name}=timedelta(seconds=10) or {name}="10 seconds"' in message
    assert "TICK * 10 for 10 ticks of 1 µs" in message


@pytest.mark.parametrize(("owner", "name", "call"), DURATION_PARAMETERS, ids=_IDS)
def test_every_duration_parameter_takes_a_string_or_a_timedelta(owner, name, call):
    call("10 seconds")
    call(timedelta(seconds=10))
    call(TICK * 10)


@pytest.mark.parametrize(
    ("text", "ticks"),
    [
        ("10 seconds", 10 * S),
        ("1 second", S),
        ("0.5 seconds", 500_000),  # exact: no float on the way
        ("1.1 seconds", 1_100_000),  # 1.1 * 1e6 as floats is 1100000.0000000002
        ("0.000001 seconds", 1),  # one tick
        (".25 seconds", 250_000),
        ("500 milliseconds", 500_000),
        ("1 millisecond", 1_000),
        ("7 microseconds", 7),
        ("1 minute", 60 * S),
        ("1 minute 30 seconds", 90 * S),
        ("2 hours", 7_200 * S),
        ("1 day", 86_400 * S),
        ("2 weeks", 14 * 86_400 * S),
        ("interval 10 seconds", 10 * S),  # Spark's optional prefix
        ("  INTERVAL 1 Hour  ", 3_600 * S),  # case and outer blanks do not matter
        ("1 hour -30 minutes", 1_800 * S),  # Spark sums signed parts
        ("-1 second", -S),
    ],
)
def test_interval_strings_are_read_exactly_in_ticks(text, ticks):
    assert to_duration_ticks(text, name="d", owner="test") == ticks


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("10", "got '10': a number without a unit"),
        ("", "no '<number> <unit>' part"),
        ("10 sec", "unknown unit 'sec'"),
        ("10seconds", "cannot read '10seconds'"),
        ("1 month", "months have no fixed length"),
        ("1 year", "years have no fixed length"),
        ("1.5 minutes", "only seconds may have a fraction"),
        ("0.0000005 seconds", "finer than one tick"),
        ("1 second and more", "cannot read 'and more'"),
    ],
)
def test_a_string_that_is_no_interval_is_refused_with_the_way_out(text, why):
    with pytest.raises(ValueError, match=why) as caught:
        to_duration_ticks(text, name="size", owner="tumbling_window()")
    assert str(caught.value).startswith("tumbling_window(): size must be a timedelta or a")
    assert 'Fix: e.g. size="10 seconds"' in str(caught.value)


@pytest.mark.parametrize("zero_or_less", ["0 seconds", "-1 second", timedelta(0), -TICK])
def test_window_sizes_hops_and_durations_must_be_positive(zero_or_less):
    s = _stream()
    for call in (
        lambda: s.tumbling_window(zero_or_less),
        lambda: s.hopping_window("1 second", zero_or_less),
        lambda: s.alter_event_duration(zero_or_less),
    ):
        with pytest.raises(ValueError, match=r"must be at least 1 tick \(1 µs\); got"):
            call()


def test_a_shift_may_be_negative_and_a_generation_delay_too():
    _stream().shift_event_time("-1 second")
    assert AdvanceTimeGenerationSettings(1, "-1 microsecond").delay == -TICK


def test_ordering_tolerances_may_not_be_negative():
    with pytest.raises(ValidationError, match="late_arrival_tolerance must be zero or positive"):
        EventOrderingSettings(late_arrival_tolerance="-1 second")


def test_settings_store_a_string_as_the_timedelta_it_spells():
    # 5 and 5.0 must never mean different units: both are refused and the spellings agree.
    assert AdvanceTimeGenerationSettings(1, "5 seconds") == AdvanceTimeGenerationSettings(
        1, timedelta(seconds=5)
    )
    assert AdvanceTimeGenerationSettings("1 minute").frequency == timedelta(minutes=1)
    ordering = EventOrderingSettings(late_arrival_tolerance="0.5 seconds")
    assert ordering.late_arrival_tolerance == timedelta(milliseconds=500)
    assert ordering.late_ticks == 500_000


def test_an_int_generation_frequency_is_still_an_event_count():
    assert AdvanceTimeGenerationSettings(3).by_count
    with pytest.raises(ValidationError, match=r"an event count .* got 3.0 \(float\)"):
        AdvanceTimeGenerationSettings(3.0)


@pytest.mark.parametrize(
    "spell",
    [
        lambda seconds: f"{seconds} seconds",
        lambda seconds: timedelta(seconds=seconds),
        lambda seconds: TICK * (seconds * S),
    ],
    ids=["string", "timedelta", "ticks"],
)
def test_every_spelling_builds_the_same_plan(spark, spell):
    s = _stream()
    agg = {"n": F.count("*")}
    hopping = s.hopping_window(spell(10), spell(5)).aggregate(**agg).node
    assert (hopping.size, hopping.hop) == (10 * S, 5 * S)
    tumbling = s.tumbling_window(spell(10)).aggregate(**agg).node
    assert (tumbling.size, tumbling.hop) == (10 * S, 10 * S)
    assert s.shift_event_time(spell(-3)).node.shift == -3 * S
    assert s.alter_event_duration(spell(2)).node.duration == 2 * S
    assert s.alter_event_lifetime(lambda c: c, spell(2)).node.duration == 2 * S


def test_a_hopping_window_spelled_in_strings_runs_on_spark(app):
    script = EventScript()
    for t in (1, 7, 12):
        script.insert("a", point(t * S, {"k": "a", "v": float(t)}))
    every = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, "0 seconds", True))
    out, _ = spark_run(
        app,
        script,
        {"a": In(settings=every)},
        lambda s: s["a"].hopping_window("10 seconds", "5 seconds").aggregate(n=F.count("*")),
        EventShape.INTERVAL,
        epochs=[2],
    )
    # Windows [k*5 s, k*5 s + 10 s): the point at 1 s is in [-5, 5) and [0, 10); 7 s in
    # [0, 10) and [5, 15); 12 s in [5, 15) and [10, 20).
    assert [e for e in out if e.kind.name == "INSERT"] == [
        interval(-5 * S, 5 * S, {"n": 1}),
        interval(0, 10 * S, {"n": 2}),
        interval(5 * S, 15 * S, {"n": 2}),
        interval(10 * S, 20 * S, {"n": 1}),
    ]
    assert out[-1] == cti(MAX_TIME)


@pytest.mark.parametrize("name", ["trigger", "idle_timeout"])
def test_query_start_takes_durations_and_refuses_bare_numbers(app, name):
    script = EventScript()
    script.end("a")
    stream = Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema="v int"),
        EventShape.POINT,
    )
    query = stream.to_query(
        app,
        f"start-{name}",
        MemoryOutputFactory(),
        MemoryOutputConfig(name=f"start-{name}"),
        EventShape.POINT,
    )
    try:
        with pytest.raises(
            TypeError, match=f"Query.start\\(\\): {name} must be a duration; got the bare number 10"
        ):
            query.start(**{name: 10})
    finally:
        app.queries.pop(f"start-{name}", None)


def test_connector_timeouts_take_strings_and_refuse_bare_numbers():
    config = KafkaInputConfig(
        bootstrap_servers="h:9092", topic="t", schema="v int", request_timeout="2 seconds"
    )
    assert config.request_timeout == timedelta(seconds=2)
    with pytest.raises(ValidationError, match="KafkaInputConfig: retry_backoff must be a duration"):
        KafkaInputConfig(bootstrap_servers="h:9092", topic="t", schema="v int", retry_backoff=0.5)
    hub = EventHubInputConfig(
        connection_string="Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
        "SharedAccessKey=x",
        eventhub_name="h",
        schema="v int",
        receive_timeout="1 minute",
    )
    assert hub.receive_timeout == timedelta(minutes=1)


@pytest.mark.parametrize(
    ("ticks", "text"),
    [
        # the largest unit that divides the duration: 90 s is no whole number of minutes
        (90_000_000, "90 seconds"),
        (60_000_000, "1 minute"),
        (1_500_000, "1500 milliseconds"),
        (10, "10 microseconds"),
        (-5_000_000, "-5 seconds"),
        (7 * 86_400_000_000, "1 week"),
        (0, "0 seconds"),
    ],
)
def test_a_duration_is_shown_as_the_interval_string_that_reads_back_to_it(ticks, text):
    assert duration_text(ticks) == text
    assert to_duration_ticks(text, name="size", owner="tumbling_window()") == ticks
