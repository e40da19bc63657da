"""Secrets never echoed: a Kafka SASL password or an Event Hubs connection string (its
SharedAccessKey) given to a config never appears in an error, a log line, a repr or a trace.

Every case feeds known secrets through one path that can fail or print (each validator of each
config model, an unknown or misspelled field, a wrong type, the JSON entry point, a config nested
in a user's model, connection-string parsing, the runtime errors of a client that connects to a
closed loopback port, the reprs of configs, adapters, factories, streams and queries) and greps
everything that path produced for any six-character piece of the secret: the exception's str and
repr, its pydantic ``errors()`` and ``json()``, the traceback text with every chained
``__cause__``/``__context__``, every log record (DEBUG and up, all loggers) and stdout/stderr.
Pieces rather than the whole secret because pydantic truncates long inputs and printed the tail
of a SharedAccessKey (``'En...Ke='``).
"""

from __future__ import annotations

import logging
import pickle
import traceback
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from ctistream.adapters.eventhubs import (
    EventHubInputConfig,
    EventHubInputFactory,
    EventHubOutputConfig,
    EventHubOutputFactory,
    EventHubsAdapterError,
)
from ctistream.adapters.kafka import (
    KafkaAdapterError,
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.adapters.memory import EventScript, MemoryInputConfig, MemoryInputFactory
from ctistream.bindings import Stream
from ctistream.engine import EventShape, point
from pydantic import BaseModel, ValidationError

from tests.brokers.eventhubs import running_endpoint
from tests.brokers.kafka import free_port

#: Random-looking secrets: none of their six-character pieces occurs in any message by chance.
PASSWORD = "pw-Zq7xW3kP9vR2mT5yLd"
KEY = "Hx4nB8sLq2Wd6Jt0Yc1Rv5Ke9Mg3Pa7Uf="
ENDPOINT = "Endpoint=sb://ns.servicebus.windows.net/"
#: As the portal shows a namespace-level connection string: no EntityPath.
PORTAL = f"{ENDPOINT};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"
SASL = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "PLAIN",
    "sasl_username": "app",
    "sasl_password": PASSWORD,
}
QUICK_KAFKA = {"connect_attempts": 1, "request_timeout": timedelta(seconds=1)}
QUICK_HUBS = {"retry_total": 0, "retry_backoff": timedelta(milliseconds=50)}
POINT = EventShape.POINT


def pieces(secret: str, n: int = 6) -> set[str]:
    return {secret[i : i + n] for i in range(len(secret) - n + 1)}


def exception_text(error: BaseException) -> str:
    """Everything an exception can show: its traceback with the chain, and per exception in
    the chain its str, repr, attributes and, for a ValidationError, errors() and json()."""
    parts = ["".join(traceback.format_exception(error))]
    todo: list[BaseException | None] = [error]
    seen: set[int] = set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        parts += [str(e), repr(e), repr(e.args), repr(getattr(e, "__dict__", {}))]
        if isinstance(e, ValidationError):
            parts += [repr(e.errors()), e.json()]
        todo += [e.__cause__, e.__context__]
    return "\n".join(parts)


def logged_text(caplog: pytest.LogCaptureFixture) -> str:
    return caplog.text + "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {r.__dict__.get('ctistream')!r}"
        for r in caplog.records
    )


def assert_never_echoed(*texts: str) -> None:
    text = "\n".join(texts)
    found = sorted(p for secret in (PASSWORD, KEY) for p in pieces(secret) if p in text)
    assert not found, f"secret pieces {found} in:\n{text}"


@pytest.fixture
def grep(caplog, capfd) -> Callable[[Callable[[], Any], type[BaseException]], BaseException]:
    """``grep(make, error_type)``: runs ``make``, which must raise ``error_type``, with every
    logger at DEBUG, and asserts that nothing it raised, logged or printed holds a secret."""

    def run(make: Callable[[], Any], error_type: type[BaseException]) -> BaseException:
        caplog.clear()
        with caplog.at_level(logging.DEBUG), pytest.raises(error_type) as raised:
            make()
        out, err = capfd.readouterr()
        assert_never_echoed(exception_text(raised.value), logged_text(caplog), out, err)
        return raised.value

    return run


# -- Kafka: every validator, extra fields, wrong types -------------------------------------------


def kafka_input(**kw: Any) -> KafkaInputConfig:
    base = {"bootstrap_servers": "h:9092", "topic": "t", "schema": "id int"}
    return KafkaInputConfig(**{**base, **kw})


def kafka_output(**kw: Any) -> KafkaOutputConfig:
    return KafkaOutputConfig(**{"bootstrap_servers": "h:9092", "topic": "t", **kw})


KAFKA_CASES: dict[str, tuple[Callable[[], Any], str]] = {
    # the first case: SASL without a mechanism (the model validator's error)
    "sasl-without-mechanism": (
        lambda: kafka_input(**{**SASL, "sasl_mechanism": None}),
        "do not match",
    ),
    "mechanism-without-sasl": (
        lambda: kafka_input(**{**SASL, "security_protocol": "SSL"}),
        "do not match",
    ),
    "password-without-username": (
        lambda: kafka_input(**{**SASL, "sasl_username": None}),
        "needs sasl_username and sasl_password",
    ),
    # the third case: a misspelled field echoed its input value
    "misspelled-password": (
        lambda: kafka_input(
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="app",
            sasl_pasword=PASSWORD,
        ),
        "sasl_pasword",
    ),
    "password-of-a-wrong-type": (
        lambda: kafka_input(**{**SASL, "sasl_password": [PASSWORD]}),
        "sasl_password",
    ),
    "request-timeout-too-small": (
        lambda: kafka_input(**SASL, request_timeout=timedelta(milliseconds=1)),
        "at least 500 ms",
    ),
    "timeout-not-a-timedelta": (lambda: kafka_input(**SASL, retry_backoff=5), "timedelta"),
    "bad-bootstrap-servers": (lambda: kafka_input(**{**SASL, "bootstrap_servers": []}), "broker"),
    "unknown-mechanism": (lambda: kafka_input(**{**SASL, "sasl_mechanism": "GSSAPI"}), "PLAIN"),
    "input-without-schema": (lambda: kafka_input(**SASL, schema=None), "payload schema"),
    "input-empty-topic": (lambda: kafka_input(**SASL, topic=" "), "topic must name"),
    "input-same-field-twice": (
        lambda: kafka_input(**SASL, time_field="ts", end_field="ts"),
        "both 'ts'",
    ),
    "input-raw-with-fields": (
        lambda: kafka_input(**SASL, format="raw", schema=None, time_field="ts"),
        "format='raw'",
    ),
    "input-bad-ddl": (lambda: kafka_input(**SASL, schema="id nonsense"), "nonsense"),
    "input-dead-letters-to-itself": (
        lambda: kafka_input(**SASL, dead_letter_topic="t"),
        "dead_letter_topic",
    ),
    "input-missing-topic": (
        lambda: KafkaInputConfig(bootstrap_servers="h:9092", schema="id int", **SASL),
        "topic",
    ),
    "output-fields-equal": (lambda: kafka_output(**SASL, end_field="start"), "must differ"),
    "output-empty-topic": (lambda: kafka_output(**SASL, topic=""), "topic must name"),
    "output-misspelled-password": (
        lambda: kafka_output(
            security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_passwd=PASSWORD
        ),
        "sasl_passwd",
    ),
    "model-validate-of-a-dict": (
        lambda: KafkaInputConfig.model_validate(
            {"bootstrap_servers": "h:9092", "topic": "t", **{**SASL, "sasl_mechanism": None}}
        ),
        "do not match",
    ),
    "json-with-an-error": (
        lambda: KafkaInputConfig.model_validate_json(
            f'{{"bootstrap_servers": "h:9092", "topic": "t", "sasl_password": "{PASSWORD}"}}'
        ),
        "payload schema",
    ),
    "json-that-does-not-parse": (
        lambda: KafkaInputConfig.model_validate_json(
            f'{{"bootstrap_servers": "h:9092", "sasl_password": "{PASSWORD}",'
        ),
        "Invalid JSON",
    ),
}


@pytest.mark.parametrize("case", list(KAFKA_CASES))
def test_no_kafka_config_error_shows_the_sasl_password(grep, case):
    make, message = KAFKA_CASES[case]
    error = grep(make, ValidationError)
    assert message in str(error)  # the error still says what is wrong


class Settings(BaseModel):
    """A user's own settings model holding the adapters' configs."""

    kafka: KafkaInputConfig | None = None
    hub: EventHubInputConfig | None = None


def test_a_config_nested_in_a_users_model_keeps_its_secret_too(grep):
    bad_kafka = {"bootstrap_servers": "h:9092", "topic": "t", **{**SASL, "sasl_mechanism": None}}
    grep(lambda: Settings(kafka=bad_kafka), ValidationError)
    grep(lambda: Settings(hub={"connection_string": PORTAL, "schema": "id int"}), ValidationError)


# -- Event Hubs: every validator, extra fields, wrong types, connection-string parsing ------------


def hub_input(**kw: Any) -> EventHubInputConfig:
    kw.setdefault("schema", "id int")
    kw.setdefault("connection_string", PORTAL + ";EntityPath=h")
    return EventHubInputConfig(**kw)


HUB_CASES: dict[str, tuple[Callable[[], Any], str]] = {
    # the second case: a portal connection string without EntityPath
    "portal-string-without-entity-path": (
        lambda: EventHubInputConfig(schema="id int", connection_string=PORTAL),
        "no event hub named",
    ),
    "output-portal-string-without-entity-path": (
        lambda: EventHubOutputConfig(connection_string=PORTAL),
        "no event hub named",
    ),
    "no-endpoint": (
        lambda: hub_input(connection_string=f"SharedAccessKeyName=k;SharedAccessKey={KEY}"),
        "Endpoint=sb://",
    ),
    "entity-path-and-name-disagree": (
        lambda: hub_input(eventhub_name="other"),
        "eventhub_name is 'other'",
    ),
    # a ',' for a ';': the key runs into the EntityPath, which then is no event hub name
    "key-glued-to-entity-path": (
        lambda: hub_input(
            connection_string=f"{ENDPOINT};EntityPath=h,SharedAccessKeyName=k,SharedAccessKey={KEY}"
        ),
        "EntityPath",
    ),
    "key-glued-to-entity-path-and-a-name": (
        lambda: hub_input(
            eventhub_name="h",
            connection_string=f"{ENDPOINT};EntityPath=h,SharedAccessKeyName=k,SharedAccessKey={KEY}",
        ),
        "EntityPath",
    ),
    # ... or into the endpoint, which every error message names
    "key-glued-to-endpoint": (
        lambda: hub_input(
            connection_string=f"{ENDPOINT},SharedAccessKeyName=k,SharedAccessKey={KEY};EntityPath=h"
        ),
        "Endpoint",
    ),
    "misspelled-connection-string": (
        lambda: EventHubInputConfig(schema="id int", eventhub_name="h", conection_string=PORTAL),
        "conection_string",
    ),
    "connection-string-of-a-wrong-type": (
        lambda: hub_input(connection_string=[PORTAL]),
        "connection_string",
    ),
    "missing-schema": (
        lambda: EventHubInputConfig(connection_string=PORTAL + ";EntityPath=h"),
        "schema",
    ),
    "bad-ddl": (lambda: hub_input(schema="id nonsense"), "nonsense"),
    "same-field-twice": (lambda: hub_input(time_field="ts", end_field="ts"), "both 'ts'"),
    "dead-letters-to-itself": (lambda: hub_input(dead_letter_eventhub="h"), "is the input event"),
    "negative-backoff": (
        lambda: hub_input(retry_backoff=timedelta(seconds=-1)),
        "must not be negative",
    ),
    "timeout-not-a-timedelta": (lambda: hub_input(receive_timeout=3), "timedelta"),
    "retries-below-zero": (lambda: hub_input(retry_total=-1), "retry_total"),
    "empty-eventhub-name": (lambda: hub_input(eventhub_name=" "), "eventhub_name must name"),
    "output-fields-equal": (
        lambda: EventHubOutputConfig(connection_string=PORTAL, eventhub_name="h", edge_field="end"),
        "must differ",
    ),
    "model-validate-of-a-dict": (
        lambda: EventHubInputConfig.model_validate(
            {"connection_string": PORTAL, "schema": "i int"}
        ),
        "no event hub named",
    ),
    "json-that-does-not-parse": (
        lambda: EventHubInputConfig.model_validate_json(f'{{"connection_string": "{PORTAL}"'),
        "Invalid JSON",
    ),
}


@pytest.mark.parametrize("case", list(HUB_CASES))
def test_no_event_hubs_config_error_shows_the_shared_access_key(grep, case):
    make, message = HUB_CASES[case]
    error = grep(make, ValidationError)
    assert message in str(error)


def test_a_valid_connection_string_still_gives_its_hub_and_endpoint():
    config = hub_input()
    assert (config.hub, config.endpoint) == ("h", "sb://ns.servicebus.windows.net")
    named = EventHubOutputConfig(connection_string=PORTAL, eventhub_name="h.x-1_y")
    assert named.hub == "h.x-1_y"
    local = "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=hub"
    assert EventHubOutputConfig(connection_string=local).endpoint == "sb://127.0.0.1:5672"


# -- reprs and strs of what holds a config --------------------------------------------------------


def test_configs_adapters_factories_streams_and_queries_never_print_a_secret(app, capfd):
    configs = [
        kafka_input(**SASL),
        kafka_output(**SASL),
        hub_input(),
        EventHubOutputConfig(connection_string=PORTAL, eventhub_name="h"),
    ]
    kafka_in, kafka_out, hub_in, hub_out = configs
    adapters = [
        KafkaInputFactory().create(kafka_in, EventShape.POINT),
        KafkaOutputFactory().create(kafka_out, EventShape.POINT),
        EventHubInputFactory().create(hub_in, EventShape.POINT),
        EventHubOutputFactory().create(hub_out, EventShape.POINT),
    ]
    stream = Stream.create("k", KafkaInputFactory(), kafka_in, EventShape.POINT)
    script = EventScript().insert("m", point(1, {"id": 1}))
    memory = Stream.create("m", MemoryInputFactory(), MemoryInputConfig(script=script), POINT)
    query = memory.to_query(
        app, "secrets-" + uuid.uuid4().hex[:6], KafkaOutputFactory(), kafka_out, POINT
    )
    shown = []
    for x in [*configs, *adapters, stream, memory, query, query._runtime]:
        shown += [repr(x), str(x), f"{x}", repr(getattr(x, "__dict__", None))]
    for c in configs:
        shown += [str(c.model_dump()), c.model_dump_json(), repr(c.model_fields_set)]
    assert_never_echoed(*shown, *capfd.readouterr())
    # the secrets themselves are kept: adapters go to executors pickled, and clients get them
    assert pickle.loads(pickle.dumps(kafka_in)).sasl_password.get_secret_value() == PASSWORD
    assert KEY in pickle.loads(pickle.dumps(hub_in)).connection_string.get_secret_value()


# -- runtime errors: clients that reach a closed loopback port ------------------------------------


def test_kafka_clients_at_a_closed_port_fail_without_the_password(grep):
    bootstrap = f"127.0.0.1:{free_port()}"
    sasl = {**SASL, "security_protocol": "SASL_PLAINTEXT"}
    cfg = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic="t", schema="id int", **sasl, **QUICK_KAFKA
    )
    a = KafkaInputFactory().create(cfg, POINT)
    grep(a.partitions, KafkaAdapterError)  # the driver
    grep(lambda: list(a.read("0", 0)), KafkaAdapterError)  # an executor, without a snapshot
    out_cfg = KafkaOutputConfig(bootstrap_servers=bootstrap, topic="o", **sasl, **QUICK_KAFKA)
    out = KafkaOutputFactory().create(out_cfg, POINT)
    grep(out.progress, KafkaAdapterError)
    dead = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic="t", schema="id int", dead_letter_topic="d", **sasl
    )
    assert_never_echoed(repr(KafkaInputFactory().create(dead, POINT).without_side_effects()))


@pytest.fixture
def closed_hub() -> str:
    with running_endpoint() as gone:
        port = gone.port
    return (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey={KEY};"
        "EntityPath=hub;UseDevelopmentEmulator=true"
    )


def test_event_hubs_clients_at_a_closed_port_fail_without_the_key(grep, closed_hub):
    cfg = EventHubInputConfig(connection_string=closed_hub, schema="id int", **QUICK_HUBS)
    a = EventHubInputFactory().create(cfg, POINT)
    grep(a.partitions, EventHubsAdapterError)
    grep(lambda: list(a.read("0", 0)), EventHubsAdapterError)
    out_cfg = EventHubOutputConfig(connection_string=closed_hub, **QUICK_HUBS)
    grep(EventHubOutputFactory().create(out_cfg, POINT).progress, EventHubsAdapterError)


def test_a_query_whose_output_broker_is_down_fails_without_the_password(app, grep):
    bootstrap = f"127.0.0.1:{free_port()}"
    sasl = {**SASL, "security_protocol": "SASL_PLAINTEXT"}
    out = KafkaOutputConfig(bootstrap_servers=bootstrap, topic="o", **sasl, **QUICK_KAFKA)
    script = EventScript().insert("m", point(1, {"id": 1}))
    memory = Stream.create("m", MemoryInputFactory(), MemoryInputConfig(script=script), POINT)
    query = memory.to_query(app, "down-" + uuid.uuid4().hex[:6], KafkaOutputFactory(), out, POINT)
    grep(query.run, KafkaAdapterError)
    # an input over the same broker fails when the query is created
    kafka_in = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic="t", schema="id int", **sasl, **QUICK_KAFKA
    )
    stream = Stream.create("k", KafkaInputFactory(), kafka_in, POINT)
    grep(
        lambda: stream.to_query(
            app, "in-" + uuid.uuid4().hex[:6], KafkaOutputFactory(), out, POINT
        ),
        KafkaAdapterError,
    )
