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
