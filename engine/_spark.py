"""The one place that talks to Spark's session API (camelCase stays in here)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from py4j import protocol as proto
from py4j.clientserver import JavaClient
from py4j.java_gateway import GatewayClient, JavaClass, JavaMember, JVMView
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

__all__ = [
    "LEAN_SESSION",
    "cache_jvm_classes",
    "collect_driver_garbage",
    "default_session",
    "engine_work",
    "job_ids",
    "parse_schema",
    "settle_driver",
    "settle_worker",
    "utc_labelled",
]

#: Session settings for many small epochs, each a few Spark jobs with deep plans:
#:
#: * Spark keeps the last 1000 SQL executions and jobs (plans included) for its UI even when the
#:   UI is off, which grows the driver's heap by hundreds of MB over a long run: keep a few.
#: * Spark's memory page defaults to up to 64 MB (a share of the heap per core), and a broadcast
#:   hash join on an integral key builds its table in at least one page: every epoch's join of
#:   a few hundred CTIs took 64 MB on the driver, kept until the JVM's garbage collector let Spark
#:   clean the broadcast (some were never cleaned): the driver's heap grew with the number of
#:   epochs. Pages of 2 MB fit epochs of this size.
#: * Executors talk to their Python workers over Unix domain sockets, not TCP on loopback: over
#:   TCP each Arrow function (reading an input, the ingress scan) waited about 40 ms for its
#:   first input batch, as a small write waits for a delayed acknowledgement. With
#:   :func:`settle_worker`, a job of 1,000 rows through two of them took 200-250 ms (median)
#:   instead of 280-310 (``python -m benchmarks.workers``).
#: * Spark keeps the classes it compiled for generated code in a cache of 100 entries by default
#:   (keyed by the code's text). An epoch of a join feeding a hopping window runs about 200
#:   distinct pieces of generated code, so the cache evicted each before its next use and Spark
#:   compiled about 1,000 pieces per B2 run of four epochs (4-5 s of a 24 s run); with room for
#:   1,000 it compiles only code it has not seen.
#: * PySpark 4 wraps every DataFrame and column function so that an analysis error can name the
#:   Python line that called it: four py4j calls each (the active session, a setting, the call
#:   site set and cleared). An epoch's plans are built by the engine's own code, so the line
#:   would be the engine's; without it B2's driver made 16,700 py4j calls per run instead of
#:   38,000.
#: * PySpark's worker daemon prints a ``BrokenPipeError`` traceback on stderr for every task
#:   that Spark cancels after another task of its job failed: ``_ctistream_daemon`` is PySpark's
#:   daemon without it (the real error still reaches the driver).
LEAN_SESSION = {
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.buffer.pageSize": "2m",
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.sql.codegen.cache.maxEntries": "1000",
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.python.daemon.module": "_ctistream_daemon",
}


def default_session(app_name: str, master: str | None = None) -> SparkSession:
    """An existing active session, or a new one tuned for small epochs.

    ``master`` defaults to ``$CTISTREAM_MASTER``, else to what Spark is given otherwise
    (``spark-submit --master``, ``spark.master`` in ``spark-defaults.conf``), else ``local[*]``.
    Executors use this Python unless ``$PYSPARK_PYTHON`` says otherwise.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    master = master or os.environ.get("CTISTREAM_MASTER")
    if master:  # else spark-submit's --master or Spark's own default (local[*]) stays in force
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "false")
        # Spark's console progress bar ("[Stage 3:> (0 + 2) / 2]") would write over what the
        # application prints
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("CTISTREAM_SHUFFLE_PARTITIONS", "2"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in LEAN_SESSION.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("CTISTREAM_SPARK_LOG_LEVEL", "ERROR"))
    return session


#: see :func:`settle_worker`
UNFROZEN_LIMIT = 20_000


def settle_worker() -> None:
    """Called first by every function the engine runs in a Python worker (executors).

    PySpark's daemon runs a full ``gc.collect()`` in a reused worker after each of its tasks.
    With PySpark, pyarrow, pandas and the adapters' clients imported, a worker's collector
    tracks 75-95K objects and each collection takes 45-100 ms, which the next Python task
    given to that worker waits for: twice in a started query's step (reading, then the ingress
    scan). Here, once a worker holds more than :data:`UNFROZEN_LIMIT` tracked objects, they are
    collected once more and frozen (:func:`gc.freeze`), so later collections pass over them.
    Frozen objects are still freed when nothing refers to them; only cycles among them that
    become garbage later stay. A worker freezes again only once that many new objects have
    outlived its collections (new imports, caches), so what can stay is small and bounded by
    how often that happens."""
    import gc

    if len(gc.get_objects()) > UNFROZEN_LIMIT:
        gc.collect()
        gc.freeze()


def utc_labelled(data: Any) -> Any:
    """``data`` (an Arrow table or record batch) with every timestamp, nested ones too, labelled
    UTC: the same instants. Spark hands a grouped Arrow function (``applyInArrow``, cogrouped too)
    its timestamps labelled with the session's time zone and refuses any but UTC back, so every
    such function of the engine returns what this gives."""
    import pyarrow as pa

    def utc(t: Any) -> Any:
        """``t`` with its timestamps labelled UTC; ``t`` itself (nullability, field names and
        all) where it holds none to relabel."""
        if pa.types.is_timestamp(t):
            return pa.timestamp(t.unit, "UTC") if t.tz is not None else t
        if pa.types.is_struct(t):
            fields = [f.with_type(utc(f.type)) for f in t]
            return t if fields == list(t) else pa.struct(fields)
        if pa.types.is_map(t):
            key, item = t.key_field, t.item_field
            new_key, new_item = key.with_type(utc(key.type)), item.with_type(utc(item.type))
            unchanged = new_key == key and new_item == item
            return t if unchanged else pa.map_(new_key, new_item, t.keys_sorted)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            item = t.value_field.with_type(utc(t.value_type))
            if item == t.value_field:
                return t
            return pa.list_(item) if pa.types.is_list(t) else pa.large_list(item)
        return t

    schema = pa.schema([f.with_type(utc(f.type)) for f in data.schema])
    if schema == data.schema:
        return data
    columns = [  # only what changes: casting other structs can trip over their nulls
        c if c.type == f.type else c.cast(f.type) for c, f in zip(data.columns, schema, strict=True)
    ]
    return type(data).from_arrays(columns, schema=schema)


def ansi_mode(spark: SparkSession) -> bool:
    """Whether ``spark`` runs SQL in ANSI mode (Spark's default): an integer overflow fails
    instead of wrapping around."""
    return spark.conf.get("spark.sql.ansi.enabled", "true") == "true"


def case_sensitive(spark: SparkSession) -> bool:
    """Whether ``spark`` resolves column names case-sensitively (not by default)."""
    return spark.conf.get("spark.sql.caseSensitive", "false") == "true"


def parse_schema(ddl: str, where: str) -> StructType:
    """Parse a Spark DDL column list (needs an active session). ``where`` names it as the user
    gave it (``input 'd' (schema=)``) in the :class:`~engine.errors.QueryBuildError` raised when
    it is not one."""
    from ctistream.engine.errors import QueryBuildError
    from pyspark.errors import PySparkException

    if not ddl.strip():
        return StructType([])
    try:
        return StructType.fromDDL(ddl)
    except PySparkException as e:  # a parse error, a type Spark does not know, a bad precision
        said = str(e).split("SQLSTATE")[0].strip().splitlines()[0].strip().rstrip(".")
        raise QueryBuildError(
            f"{where}: {ddl!r} is not a list of columns Spark can read: {said}. Expected "
            "Spark DDL: names and types separated by commas ('id bigint, v double'), of types "
            "Spark knows (bigint, int, double, string, boolean, timestamp, decimal(p, s) with "
            "p <= 38, array<...>, struct<...>, map<...>). Fix: correct the schema there"
        ) from None


#: seconds between two of :func:`collect_driver_garbage`'s collections
COLLECT_EVERY = 10.0
_collected = [0.0]  # when it last collected (time.monotonic)


def collect_driver_garbage() -> None:
    """Called after each epoch, on the driver: a full collection of Python's garbage, at most
    every :data:`COLLECT_EVERY` seconds.

    Every py4j object the engine calls a method on is in a reference cycle (it caches the
    method's proxy, which refers back to it), so the Java objects behind an epoch's DataFrames
    (analysed plans and all they hold) are released only when Python's cyclic collector frees
    the proxies. Left to itself, the collector runs a full collection more and more rarely as
    the driver's objects grow: in B1 over 8M events the JVM's live heap grew by about 0.6 MB
    per epoch, and stayed flat with this. A full collection
    takes about 30 ms on a bench driver; at most one per interval costs well under 1 % of a
    run's time."""
    import gc
    import time

    now = time.monotonic()
    if now - _collected[0] >= COLLECT_EVERY:
        gc.collect()
        _collected[0] = time.monotonic()


class _MethodCachingClass(JavaClass):
    """A JVM class whose static methods py4j looks up once (:class:`_ClassCachingView`)."""

    def __getattr__(self, name: str) -> object:
        found = JavaClass.__getattr__(self, name)
        if isinstance(found, JavaMember):  # a method: not a field, whose value may change
            self.__dict__[name] = found
        return found


class _ImportCountingClient:
    """Mixed into the class of the driver's py4j client by :func:`cache_jvm_classes`: counts
    the commands that change what a JVM view's short names name (imports and their removal),
    so that :class:`_ClassCachingView` knows when the short names it keeps may be stale."""

    view_changes = 0

    def send_command(self, command: str, *args: object, **kwargs: object) -> object:
        if command.startswith(proto.JVMVIEW_COMMAND_NAME):
            self.view_changes += 1
        return super().send_command(command, *args, **kwargs)  # type: ignore[misc]


class _ClassCachingView(JVMView):
    """py4j's view of the driver's JVM (``SparkContext._jvm``), keeping each class it finds by
    its full name, and each class its static methods. py4j asks the JVM again at every lookup:
    two reflection round trips before each ``pyspark.sql.functions`` call (PySpark looks up
    ``org.apache.spark.sql.functions``, then the function, every time), a large share of the
    calls an epoch makes to the JVM. A full name names the same class for the JVM's life, a
    method name the same method, and only what was found is kept.

    A short name (``PythonUtils``, which PySpark looks up for every list it hands the JVM and
    every Python function it wraps) names a class through the view's imports: it is kept too,
    but only until anything is imported into (or removed from) a view of the JVM
    (:class:`_ImportCountingClient` counts those commands), then asked again."""

    def __getattr__(self, name: str) -> object:
        client = self._gateway_client
        changes = getattr(client, "view_changes", None)
        short = self.__dict__.setdefault("_short_names", {})
        kept = short.get(name)
        if kept is not None and changes is not None and kept[0] == changes:
            return kept[1]
        found = JVMView.__getattr__(self, name)
        if type(found) is JavaClass:
            found.__class__ = _MethodCachingClass
            if "." in name:
                self.__dict__[name] = found
            elif changes is not None:
                short[name] = (changes, found)
        return found


def cache_jvm_classes(session: SparkSession) -> None:
    """Make the driver's view of the JVM keep the classes it finds (:class:`_ClassCachingView`);
    a lookup that found one then costs no round trip. Once per session; a view or client that
    is not py4j's own is left as it is."""
    jvm = session.sparkContext._jvm
    if type(jvm) is not JVMView:
        return
    client = jvm._gateway_client
    counting = _COUNTING.get(type(client))
    if counting is not None:
        client.__class__ = counting
    jvm.__class__ = _ClassCachingView


class _ImportCountingJavaClient(_ImportCountingClient, JavaClient):
    """PySpark's py4j client (pinned threads), counting imports."""


class _ImportCountingGatewayClient(_ImportCountingClient, GatewayClient):
    """py4j's client without pinned threads (``PYSPARK_PIN_THREAD=false``), counting imports."""


#: py4j's own client classes and their import-counting subclasses
_COUNTING: dict[type, type] = {
    JavaClient: _ImportCountingJavaClient,
    GatewayClient: _ImportCountingGatewayClient,
}


def job_ids(sc: SparkContext, group: str | None) -> list[int]:
    """The ids of the jobs of job ``group`` (None: jobs of no group) that Spark's status tracker
    keeps, in two calls to the JVM: read element by element, py4j's array would take a call per
    job."""
    ids = sc._jsc.statusTracker().getJobIdsForGroup(group)
    return list(json.loads(getattr(sc._jvm, "java.util.Arrays").toString(ids)))


def settle_driver() -> None:
    """Called once when a query starts (:class:`engine.streaming.Streamer`), on the driver.

    The driver's collector tracks what PySpark, pandas, pyarrow and the query hold (150,000
    objects and more), and the full collections that a step's allocations set off every
    few steps each took about 75 ms of a step of about 0.55 s (an 800-event step, measured
    over 80 steps: 1.8 s in full collections, 0.2 s after this). What lives when the query
    starts is collected once more and frozen (:func:`gc.freeze`), so later collections pass
    over it. Unlike :func:`settle_worker` this runs once per started query: each freeze keeps
    cycles among what it froze that later become garbage (a query's DataFrames hold py4j
    objects in cycles), and a step's state is such garbage one step later."""
    import gc

    gc.collect()
    gc.freeze()


#: PySpark logs every analysis or execution error that has a DataFrame or SQL context at ERROR
#: on stderr (as JSON, with the JVM's stack and the plan) when it converts it, before it raises it.
_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")
_working = threading.local()
_filtered: list[bool] = []


class _NotEngineWork(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_working, "depth", 0)


@contextmanager
def engine_work() -> Iterator[None]:
    """The engine's own Spark work in this thread (checking a query's columns, running an
    epoch): PySpark's context loggers (:data:`_CONTEXT_LOGGERS`) stay silent in it, as every
    error they would log reaches the user as the engine's own error, in the user's words
    (:func:`engine.errors.spark_message`) instead of the engine's plan. Other threads, and the
    user's own Spark code, log as before."""
    if not _filtered:
        from pyspark.logger import PySparkLogger

        # PySpark's own class of logger: a plain one made first under the name would be the
        # one PySpark gets, and refuse its keyword arguments
        for name in _CONTEXT_LOGGERS:
            PySparkLogger.getLogger(name).addFilter(_NotEngineWork())
        _filtered.append(True)
    _working.depth = getattr(_working, "depth", 0) + 1
    try:
        yield
    finally:
        _working.depth -= 1
