"""Binding one query to adapters in code: a query template over an unbound input, bound twice.

StreamInsight's query-binder model: the query is written once over ``Stream.input(name, schema)``;
a ``QueryBinder`` binds that input to a producer (an adapter factory, its config, a shape and CTI
settings) and adds a consumer; ``app.create_query`` checks every binding and makes the query.
Here one template (the hottest reading per sensor per 10 s) is bound to an in-memory script and,
when a Kafka broker is given, to Kafka topics: readings in, one JSON record per result out.

    python examples/query_binder.py                            # in-memory adapters only
    python examples/query_binder.py --bootstrap 127.0.0.1:9092  # also Kafka: topics readings,
                                                                # hottest (created beforehand)
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

from ctistream.adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Application, QueryBinder, QueryTemplate, Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    point,
)
from kafka import KafkaProducer
from kafka.errors import KafkaError
from pyspark.sql import functions as F

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
READINGS = [(1, "s1", 20.5), (3, "s2", 31.0), (6, "s1", 24.0), (12, "s1", 22.0), (14, "s2", 29.5)]
#: A CTI after every reading, 2 s behind the latest one; readings later than that are dropped.
SETTINGS = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(1, timedelta(seconds=2), True), None, AdvanceTimePolicy.DROP
)


def template(app: Application) -> QueryTemplate:
    readings = Stream.input("readings", "sensor string, celsius double")
    hottest = (
        readings.tumbling_window(timedelta(seconds=10))
        .group_by("sensor")
        .aggregate(celsius=F.max("celsius"))
    )
    return app.create_query_template(
        "hottest-per-10s", hottest, "hottest reading per sensor per 10 s"
    )


def bind_memory(tpl: QueryTemplate, sink: str) -> QueryBinder:
    script = EventScript()
    for seconds, sensor, celsius in READINGS:
        script.insert(
            "readings",
            point(T0 + timedelta(seconds=seconds), {"sensor": sensor, "celsius": celsius}),
        )
    script.end("readings")
    return (
        QueryBinder(tpl)
        .bind_producer(
            "readings",
            MemoryInputFactory(),
            MemoryInputConfig(script=script),
            EventShape.POINT,
            SETTINGS,
        )
        .add_consumer(
            "out", MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
        )
    )


def publish(bootstrap: str, topic: str) -> None:
    """The sample readings as JSON records, the event time in the ``time`` field."""
    try:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=10_000)
        for seconds, sensor, celsius in READINGS:
            at = (T0 + timedelta(seconds=seconds)).isoformat()
            producer.send(
                topic, json.dumps({"time": at, "sensor": sensor, "celsius": celsius}).encode()
            )
        producer.flush()
        producer.close()
    except KafkaError as e:
        raise SystemExit(
            f"cannot publish the sample readings to topic {topic!r} at {bootstrap}: {e}. Fix: "
            "start the broker (or pass the address of a running one with --bootstrap)"
        ) from None


def bind_kafka(tpl: QueryTemplate, bootstrap: str, source: str, sink: str) -> QueryBinder:
    inp = KafkaInputConfig(
        bootstrap_servers=(bootstrap,),
        topic=source,
        schema="sensor string, celsius double",
        time_field="time",
    )
    out = KafkaOutputConfig(bootstrap_servers=(bootstrap,), topic=sink, include_ctis=False)
    return (
        QueryBinder(tpl)
        .bind_producer("readings", KafkaInputFactory(), inp, EventShape.POINT, SETTINGS)
        .add_consumer("out", KafkaOutputFactory(), out, EventShape.INTERVAL)
    )


def main(argv: list[str] | None = None, app: Application | None = None) -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--bootstrap", help="a Kafka broker, host:port")
    args.add_argument(
        "--source", default="readings", help="topic to publish the readings to and read"
    )
    args.add_argument("--sink", default="hottest", help="topic to write the results to")
    opts = args.parse_args(argv)
    app = app or Application("query-binder")
    tpl = template(app)

    app.create_query("hottest-memory", bind_memory(tpl, "hottest")).run()
    for e in MemoryOutputFactory.collected("hottest"):
        print("memory:", "CTI" if e.is_cti else "event", e.start, e.end, e.payload)

    if opts.bootstrap:
        publish(opts.bootstrap, opts.source)
        app.create_query(
            "hottest-kafka", bind_kafka(tpl, opts.bootstrap, opts.source, opts.sink)
        ).run()
        print(f"kafka: results written to topic {opts.sink!r}")


if __name__ == "__main__":
    main()
