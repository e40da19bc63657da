"""One SparkSession for the whole suite (local[2], small shuffles, no UI), and hypothesis
profiles: ``ci`` (default, bounded for a 2-core machine) and ``thorough``."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

# Spark binds to the machine's first non-loopback address unless told otherwise; the tests' only
# network is 127.0.0.1 (child processes that start a JVM or a cluster inherit this too)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("CTISTREAM_EXAMPLES", "3")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=int(os.environ.get("CTISTREAM_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("ctistream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.adaptive.enabled", "false")
        # Tests run thousands of tiny epochs: compiling code for each plan costs more than it saves.
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    )
    from ctistream.engine._spark import LEAN_SESSION

    for key, value in LEAN_SESSION.items():
        session = session.config(key, value)
    session = session.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # The JVMs of child processes (crash, command line, cluster) compile with the JIT's quick
    # tier only: they live a minute or two, where the optimising tier spends more of the 2 cores
    # compiling than its code wins back (whole suite: test_crash 153 s -> 112 s, the command
    # line 43 s -> 24 s, the cluster 51 s -> 41 s). The session's JVM, started above, keeps both
    # tiers: over the suite's half hour they pay (its tests ran up to 2-3x slower without).
    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def app(spark):
    from ctistream.bindings import Application

    return Application("tests", spark)


# One Kafka broker for the whole session, shared by every module (a session fixture imported
# into two test modules would be two fixtures, and two brokers).
from tests.brokers.kafka import kafka_broker, private_kafka_broker  # noqa: E402, F401
