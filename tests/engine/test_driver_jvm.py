"""The driver's view of the JVM (engine/_spark.py, ``cache_jvm_classes``): a class found by its
full name, and its static methods, are looked up in the JVM once, not at every
``pyspark.sql.functions`` call."""

from __future__ import annotations

from ctistream.engine._spark import cache_jvm_classes
from py4j.java_gateway import JavaClass
from pyspark.sql import functions as F


def _commands(spark, work) -> list[str]:
    """The kinds of the py4j commands ``work()`` sends (first letter: r reflection, c call)."""
    client = spark.sparkContext._gateway._gateway_client
    sent, real = [], client.send_command

    def spy(command, *args, **kwargs):
        sent.append(command[:1])
        return real(command, *args, **kwargs)

    client.send_command = spy
    try:
        work()
    finally:
        del client.send_command  # the class's own again
    return sent


def test_a_function_call_asks_the_jvm_for_its_class_once(app):
    spark = app.spark  # an Application made the session's view keep the classes it finds
    _commands(spark, lambda: F.col("x"))
    _commands(spark, lambda: [F.lit(1), F.max(F.col("y"))])
    # PySpark looks up org.apache.spark.sql.functions and then the function for every call:
    # two reflection commands ("r") before the call ("c") with py4j's own view; none once the
    # view has found them
    assert _commands(spark, lambda: [F.col("x"), F.lit(1), F.max(F.col("y"))]) == ["c"] * 4
    jvm = spark.sparkContext._jvm
    assert isinstance(vars(jvm)["org.apache.spark.sql.functions"], JavaClass)


def test_only_classes_found_by_full_name_are_kept(app):
    jvm = app.spark.sparkContext._jvm
    getattr(jvm, "no.such.Klass")  # not found: a package name for py4j, asked again next time
    assert "no.such.Klass" not in vars(jvm)
    cache_jvm_classes(app.spark)  # once per session: again changes nothing
    assert isinstance(vars(jvm)["org.apache.spark.sql.functions"], JavaClass)


def test_a_short_name_is_looked_up_once_until_an_import_changes_what_it_names(app):
    from ctistream.engine._spark import _ClassCachingView
    from py4j.java_gateway import java_import

    gateway = app.spark.sparkContext._gateway
    view = gateway.new_jvm_view()  # a view of its own: its imports change no other view's
    view.__class__ = _ClassCachingView
    java_import(view, "java.sql.*")
    assert view.Date._fqn == "java.sql.Date"
    # found once: PySpark looks PythonUtils up this way for every list it hands the JVM
    assert _commands(app.spark, lambda: view.Date) == []
    # a later import can make the short name name another class (a class imported by its name
    # comes before a package's): it is asked again
    java_import(view, "java.util.Date")
    assert _commands(app.spark, lambda: view.Date) == ["r"]
    assert view.Date._fqn == "java.util.Date"


def test_a_steady_epoch_of_a_started_pass_through_stays_under_its_jvm_calls(app):
    """A started query's small epoch is its plans built over py4j, one round trip a call: the
    calls of a steady epoch of a pass-through (the points of a live input with a CTI after each
    straight to the output; benchmarks/driver_calls.py's ``pass`` scenario) are counted, from
    the thread that steps (py4j's releases of Java objects, sent from its finalizer thread when
    Python's garbage collector runs, vary from run to run).

    Measured here: 203 (26 of them reflection lookups, two per class PySpark names by its short
    name) before the short names were kept and the per-epoch projections were SQL text, 170
    after (benchmarks/driver_calls.py counts the same per line)."""
    from datetime import UTC, datetime, timedelta

    from ctistream.adapters.memory import (
        EventScript,
        MemoryInputConfig,
        MemoryOutputConfig,
        MemoryOutputFactory,
    )
    from ctistream.bindings import Stream
    from ctistream.engine import (
        AdvanceTimeGenerationSettings,
        AdvanceTimeSettings,
        EventKind,
        EventShape,
        point,
    )

    from tests.jvm_calls import JvmCalls, LiveScriptFactory

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    script = EventScript().declare("events", "0")
    every_event = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    config = MemoryInputConfig(script=script, schema="seq long")
    stream = Stream.create("events", LiveScriptFactory(), config, EventShape.POINT, every_event)
    out = MemoryOutputConfig(name="driver-jvm-pass")
    query = stream.to_query(app, out.name, MemoryOutputFactory(), out, EventShape.POINT)
    query.start(trigger=None)
    counts = []
    try:
        with JvmCalls(app.spark) as calls:
            for k in range(2):
                for seq in range(3 * k, 3 * k + 3):
                    at = t0 + timedelta(seconds=seq)
                    script.insert("events", point(at, {"seq": seq}), arrival=at)
                calls.reset()
                query.step()
                counts.append(calls.here)
    finally:
        query.stop(flush=False)
    # a CTI after every event, delay 0: the epochs commit events 0..4 (event 5 waits for the
    # next one's CTI)
    got = [
        e.payload["seq"]
        for e in MemoryOutputFactory.collected(out.name)
        if e.kind is EventKind.INSERT
    ]
    assert got == list(range(5))
    # the second epoch is a steady one (the first also plans the query's start)
    assert counts[1] <= CEILING, counts


#: JVM calls of a steady pass-through epoch from the thread that steps (see the test above)
CEILING = 175
