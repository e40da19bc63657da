"""Adapter factories as users subclass them: declared settings, binding-level overrides, shapes."""

from __future__ import annotations

from typing import ClassVar

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
    AdapterAdvanceTimeSettings,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    MalformedRecordError,
    QueryBuildError,
    cti,
    point,
)
from ctistream.engine.contracts import InputAdapter, InputAdapterFactory, ItemKind, SourceItem


class CountingFactory(MemoryInputFactory):
    """Declares a CTI after every 2 events and records every call it gets."""

    calls: ClassVar[list[tuple[str, object, EventShape]]] = []

    def create(self, config, shape):
        self.calls.append(("create", config, shape))
        return super().create(config, shape)

    def declare_advance_time_properties(self, config, shape):
        self.calls.append(("declare", config, shape))
        return AdapterAdvanceTimeSettings(AdvanceTimeGenerationSettings(2), AdvanceTimePolicy.DROP)


def _script() -> EventScript:
    script = EventScript()
    for t in (10, 20, 30, 40):
        script.insert("a", point(t, {"v": t}))
    return script


def _run(app, settings=None, name="f"):
    config = MemoryInputConfig(script=_script())
    stream = Stream.create("a", CountingFactory(), config, EventShape.POINT, settings)
    q = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    q.run()
    return config, MemoryOutputFactory.collected(name)


def test_the_factory_declares_settings_once_per_adapter_with_the_same_config_and_shape(app):
    CountingFactory.calls.clear()
    config, out = _run(app, name="declared")
    assert CountingFactory.calls == [
        ("create", config, EventShape.POINT),
        ("declare", config, EventShape.POINT),
    ]
    # Every 2nd event: CTIs at 20 and 40.
    assert out == [
        point(10, {"v": 10}),
        cti(20),
        point(20, {"v": 20}),
        point(30, {"v": 30}),
        cti(40),
    ]


def test_binding_level_settings_override_the_factorys(app):
    _, out = _run(app, AdvanceTimeSettings.increasing_start_time(), name="override")
    assert out == [
        cti(10),
        point(10, {"v": 10}),
        cti(20),
        point(20, {"v": 20}),
        cti(30),
        point(30, {"v": 30}),
        cti(40),
        point(40, {"v": 40}),
        cti(2**63 - 1),
    ]


class PointsOnly(MemoryInputFactory):
    supported_shapes = frozenset({EventShape.POINT})


def test_a_shape_the_factory_cannot_make_fails_when_the_query_is_built(app):
    stream = Stream.create("a", PointsOnly(), MemoryInputConfig(script=_script()), EventShape.EDGE)
    with pytest.raises(QueryBuildError, match=r"PointsOnly cannot make EDGE.*supports \['POINT'\]"):
        stream.to_query(
            app, "shape", MemoryOutputFactory(), MemoryOutputConfig(name="shape"), EventShape.POINT
        )


def test_factories_must_be_instances():
    with pytest.raises(TypeError, match="InputAdapterFactory instance"):
        Stream.create("a", MemoryInputFactory, None, EventShape.POINT)  # type: ignore[arg-type]
    assert issubclass(MemoryInputFactory, InputAdapterFactory)


class Backwards(InputAdapter):
    """A user's adapter that breaks the contract: its third item arrives before the second."""

    def partitions(self):
        return ["only"]

    def payload_schema(self):
        return "v long"

    def read(self, partition, start_offset):
        for offset, (t, arrival) in enumerate([(10, 1), (20, 5), (30, 3), (40, 6)]):
            if offset >= start_offset:
                yield SourceItem(ItemKind.EVENT, offset, arrival, point(t, {"v": t}))


class BackwardsFactory(InputAdapterFactory):
    def create(self, config, shape):
        return Backwards()


def test_an_item_arriving_before_the_one_before_it_stops_the_run_after_what_came_first(app):
    every_event = AdvanceTimeSettings(
        AdvanceTimeGenerationSettings(1), policy=AdvanceTimePolicy.DROP
    )
    stream = Stream.create("a", BackwardsFactory(), None, EventShape.POINT, every_event)
    q = stream.to_query(
        app,
        "backwards",
        MemoryOutputFactory(),
        MemoryOutputConfig(name="backwards"),
        EventShape.POINT,
    )
    with pytest.raises(MalformedRecordError) as error:
        q.run()
    message = str(error.value)
    assert "partition 'only', offset 2: arrival 3 after arrival 5 at offset 1" in message
    assert message.startswith("input 'a', partition 'only'")
    assert "Fix:" in message
    assert MemoryOutputFactory.collected("backwards") == [cti(10), point(10, {"v": 10}), cti(20)]


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ("id bigint v double", "Syntax error at or near 'v'"),  # the comma left out
        ("id bigint, v notatype", "notatype"),  # a type Spark does not know
        ("id bigint, v decimal(50, 2)", "50"),  # a precision above 38
    ],
    ids=["syntax", "unknown-type", "precision"],
)
def test_a_payload_schema_spark_cannot_read_is_refused_naming_the_input_and_the_fix(
    app, schema, reason
):
    config = MemoryInputConfig(script=_script(), schema=schema)
    stream = Stream.create("a", MemoryInputFactory(), config, EventShape.POINT)
    with pytest.raises(QueryBuildError) as error:
        stream.to_query(
            app, "ddl", MemoryOutputFactory(), MemoryOutputConfig(name="ddl"), EventShape.POINT
        )
    message = str(error.value)
    assert message.startswith("input 'a'")
    assert f"{schema!r} is not a list of columns Spark can read: " in message
    assert reason.lower() in message.split("can read: ")[1].lower()
    assert "Fix: correct the schema" in message
    assert "Exception" not in message and "== SQL" not in message and "\n" not in message


def test_a_payload_value_not_of_its_declared_type_stops_the_run_after_what_came_first(app):
    # The script's events at 10 and 20 carry v as declared (bigint); the one at 30 carries a
    # string: a malformed record. A CTI at every event's start: the run delivers what the CTIs
    # of the first two commit (CTI 10, the point at 10, CTI 20; the point at 20 waits for a CTI
    # above it), then raises naming the input, partition, offset, column, value and fix.
    script = EventScript()
    for t, v in ((10, 10), (20, 20), (30, "thirty"), (40, 40)):
        script.insert("a", point(t, {"v": v}))
    config = MemoryInputConfig(script=script, schema="v bigint")
    every = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1), policy=AdvanceTimePolicy.DROP)
    stream = Stream.create("a", MemoryInputFactory(), config, EventShape.POINT, every)
    q = stream.to_query(
        app,
        "mistyped",
        MemoryOutputFactory(),
        MemoryOutputConfig(name="mistyped"),
        EventShape.POINT,
    )
    with pytest.raises(MalformedRecordError) as error:
        q.run()
    message = str(error.value)
    assert message.startswith("input 'a': partition '0', offset 2: payload column 'v'")
    assert "is declared bigint; got 'thirty' (a str)" in message and "Fix: " in message
    assert "Traceback" not in message
    assert MemoryOutputFactory.collected("mistyped") == [cti(10), point(10, {"v": 10}), cti(20)]


@pytest.mark.parametrize(
    ("combine", "what"),
    [
        (lambda s: s.join("a", on="v"), "join"),
        (lambda s: s.anti_join(None, on="v"), "anti_join"),
        (lambda s: s.left_outer_join(3, on="v"), "left_outer_join"),
        (lambda s: s.clip_event_duration("a", on="v"), "clip_event_duration"),
        (lambda s: s.union(s, 5), "union"),
    ],
)
def test_combining_with_something_that_is_not_a_stream_says_what_it_takes(combine, what):
    stream = Stream.create(
        "a", MemoryInputFactory(), MemoryInputConfig(script=_script()), EventShape.POINT
    )
    with pytest.raises(TypeError) as error:
        combine(stream)
    message = str(error.value)
    assert (
        message.startswith(f"{what}() takes other Streams; got a ")
        and "Fix: pass a Stream" in message
    )


@pytest.mark.parametrize("epochs", [2.0, True, "3"])
def test_run_epochs_of_another_type_is_refused_with_what_it_takes(app, epochs):
    stream = Stream.create(
        "a", MemoryInputFactory(), MemoryInputConfig(script=_script()), EventShape.POINT
    )
    name = f"epochs-{type(epochs).__name__}"
    q = stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    with pytest.raises(
        TypeError, match=r"run\(epochs=\.\.\.\) takes how many epochs .*Fix: e\.g\."
    ):
        q.run(epochs=epochs)
    assert MemoryOutputFactory.collected(name) == []
