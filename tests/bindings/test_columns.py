"""Mistakes fail when the query is made, in the user's words: every column an operator names is
resolved against the payload that reaches it (engine/columns.py); what Spark still raises while
an epoch runs is wrapped (engine.errors.QueryRunError) without the engine's internal columns or
plan; a cancelled task leaves no BrokenPipeError traceback on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from itertools import count

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import QueryBinder, QueryTemplate, Stream
from ctistream.engine import EventOrderingSettings, EventShape, QueryBuildError, point
from ctistream.engine.errors import QueryRunError, engine_failure, spark_message, task_error
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

US10 = timedelta(microseconds=10)
_names = count()
#: an engine column in a message: ``__pos``, ``__kind#12L`` (not a dunder like ``__init__``)
INTERNAL = re.compile(r"\b__[a-z]+\b(?!__)")


def _input(name: str = "s", schema: str | None = None, ordering=None):
    script = EventScript()
    for i in range(4):
        script.insert(name, point(i, {"id": i, "v": float(i)}))
    script.cti(name, 10).end(name)
    config = MemoryInputConfig(script=script, stream=name)
    return Stream.create(
        name, MemoryInputFactory(), config, EventShape.POINT, schema=schema, ordering=ordering
    )


def _query(app, stream: Stream):
    n = next(_names)
    out = MemoryOutputConfig(name=f"columns-{n}")
    return stream.to_query(app, f"columns-{n}", MemoryOutputFactory(), out, EventShape.POINT), out


def _other() -> Stream:
    return _input("r")


# Each case: the stream as the user builds it; the call the error names; the misspelled column;
# the columns available where it is named; the closest match (difflib), or None.
CASES = {
    "where": (lambda s: s.where(F.col("vv") > 1), "where(Column<", "vv", ["id", "v"], "v"),
    "where sql": (lambda s: s.where("vv > 1"), "where('vv > 1')", "vv", ["id", "v"], "v"),
    "select": (lambda s: s.select("idd", "v"), "select('idd', 'v')", "idd", ["id", "v"], "id"),
    "select expr": (
        lambda s: s.select((F.col("vv") * 2).alias("w")),
        "select(Column<",
        "vv",
        ["id", "v"],
        "v",
    ),
    # a misspelt join key must not build and then fail at run time with an IndexError
    "join": (lambda s: s.join(_other(), on="nope"), "join(on='nope')", "nope", ["id", "v"], None),
    "join close": (
        lambda s: s.join(_other(), on="idd"),
        "join(on='idd')",
        "idd",
        ["id", "v"],
        "id",
    ),
    "join right side": (
        # the left side has 'w'; the right side has id, v: the error says which side
        lambda s: s.select("id", F.col("v").alias("w")).join(_other(), on="w"),
        "join(on='w')",
        "w",
        ["id", "v"],
        None,
    ),
    "anti_join": (
        lambda s: s.anti_join(_other(), on=["id", "vv"]),
        "anti_join(on=['id', 'vv'])",
        "vv",
        ["id", "v"],
        "v",
    ),
    "group_by": (
        lambda s: s.tumbling_window(US10).group_by("idd").aggregate(n=F.count("*")),
        "group_by('idd')",
        "idd",
        ["id", "v"],
        "id",
    ),
    "aggregate": (
        lambda s: s.tumbling_window(US10).aggregate(total=F.sum("vv")),
        "aggregate(total)",
        "vv",
        ["id", "v"],
        "v",
    ),
    "snapshot aggregate": (
        lambda s: s.snapshot_window().group_by("id").aggregate(m=F.max("vv")),
        "snapshot_window().group_by('id').aggregate(m)",
        "vv",
        ["id", "v"],
        "v",
    ),
    "start_fn": (
        lambda s: s.alter_event_lifetime(lambda t: t + F.col("idd"), US10),
        "alter_event_lifetime(<lambda>",
        "idd",
        ["id", "v"],
        "id",
    ),
    # a later operator sees the payload the operators before it made: the window's output
    "after a window": (
        lambda s: s.tumbling_window(US10).aggregate(total=F.sum("v")).where(F.col("totl") > 1),
        "where(Column<",
        "totl",
        ["total"],
        "total",
    ),
    "after a join": (
        # a clashing right column is right_-prefixed: right_v, not v2
        lambda s: s.join(_other(), on="id").select("id", "v2"),
        "select('id', 'v2')",
        "v2",
        ["id", "v", "right_id", "right_v"],
        "v",
    ),
}


def _check_message(message: str, call: str, column: str, available: list[str], close) -> None:
    assert call in message
    assert f"no column {column!r}" in message
    assert f"the columns available there are {available}" in message
    if close is None:
        assert "no column comes close" in message
    else:
        assert f"the closest match is {close!r}" in message
    assert "Fix:" in message
    assert not INTERNAL.search(message), message  # no engine column, no plan
    assert "+- " not in message


@pytest.mark.parametrize("case", list(CASES))
def test_a_misspelled_column_fails_when_the_query_is_built(app, case):
    build, call, column, available, close = CASES[case]
    with pytest.raises(QueryBuildError) as raised:
        _query(app, build(_input()))  # to_query: no epoch has run
    _check_message(str(raised.value), call, column, available, close)


def test_a_template_query_is_checked_when_create_query_binds_it(app):
    readings = Stream.input("readings", "sensor bigint, v double")
    template = QueryTemplate("typo", readings.where(F.col("sensr") == 1))
    script = EventScript()
    script.insert("site", point(1, {"sensor": 1, "v": 2.0})).end("site")
    binder = (
        QueryBinder(template)
        .bind_producer(
            "readings",
            MemoryInputFactory(),
            MemoryInputConfig(script=script, stream="site"),
            EventShape.POINT,
        )
        .add_consumer(
            "out", MemoryOutputFactory(), MemoryOutputConfig(name="typo"), EventShape.POINT
        )
    )
    with pytest.raises(QueryBuildError) as raised:
        app.create_query("typo", binder)
    _check_message(str(raised.value), "where(Column<", "sensr", ["sensor", "v"], "sensor")
    assert "typo" not in app.queries


@pytest.mark.parametrize(
    ("ordering", "call", "column"),
    [
        (EventOrderingSettings(event_time="idd"), "(event_time='idd')", "idd"),
        (EventOrderingSettings(event_time="id", over="vv"), "(over='vv')", "vv"),
    ],
)
def test_a_misspelled_ordering_column_names_the_closest(app, ordering, call, column):
    with pytest.raises(QueryBuildError) as raised:
        _query(app, _input(ordering=ordering))
    close = {"idd": "id", "vv": "v"}[column]
    _check_message(str(raised.value), call, column, ["id", "v"], close)


@pytest.mark.parametrize(
    ("aggregate", "function"),
    [(lambda: F.sum("name"), "sum"), (lambda: F.avg("NAME") * 2, "avg")],
    ids=["sum", "inside-an-expression"],
)
def test_a_number_aggregate_of_a_string_column_fails_when_the_query_is_built(
    app, aggregate, function
):
    # Spark accepts sum(name) over a string by casting each value to a double, and fails the
    # epoch at run time on 'x' in words that name neither the aggregate nor the column
    stream = _input(schema="id bigint, name string").tumbling_window(US10).group_by("id")
    with pytest.raises(QueryBuildError) as raised:
        _query(app, stream.aggregate(t=aggregate()))
    message = str(raised.value)
    assert "group_by('id').aggregate(t)" in message
    assert f"{function}() takes numbers, but 'name" in message.replace("'NAME", "'name")
    assert "Fix: aggregate a numeric column, or cast it" in message
    # cast on purpose, the user's call: the query builds
    _query(app, stream.aggregate(t=F.sum(F.col("name").cast("double"))))


@pytest.mark.parametrize(
    "aggregate",
    [lambda: F.col("v"), lambda: F.col("v") + 1, lambda: F.lit(1)],
    ids=["column", "expression", "literal"],
)
def test_a_non_aggregate_in_aggregate_fails_when_the_query_is_built(app, aggregate):
    stream = _input().tumbling_window(US10).group_by("id").aggregate(x=aggregate())
    with pytest.raises(QueryBuildError) as raised:
        _query(app, stream)
    message = str(raised.value)
    assert "group_by('id').aggregate(x)" in message
    assert "is not an aggregate" in message and "Fix:" in message


def test_aggregates_inside_expressions_and_over_group_keys_build(app):
    # an expression over aggregates is an aggregate; a group key may be used inside one
    stream = (
        _input()
        .tumbling_window(US10)
        .group_by("id")
        .aggregate(n=F.count("*") + 1, top=F.max("v") * 2, k=F.max(F.col("id")))
    )
    _query(app, stream)


def test_an_output_column_the_engine_reserves_or_a_duplicate_fails_when_built(app):
    with pytest.raises(QueryBuildError, match=r"select\(.*'__x' starts with '__'"):
        _query(app, _input().select("id", F.col("v").alias("__x")))
    with pytest.raises(QueryBuildError, match=r"two columns named 'id'.*Fix:"):
        _query(app, _input().tumbling_window(US10).group_by("id").aggregate(id=F.count("*")))


def test_a_column_name_with_a_dot_fails_when_built_naming_the_input_or_the_call(app):
    # Spark SQL reads `a.b` as field b of a struct a: a payload named so would fail at the
    # first epoch with Spark's unresolved-column error, so it is refused when the query is built
    script = EventScript().insert("d", point(1, {"a.b": 1}))
    config = MemoryInputConfig(script=script, schema="`a.b` int")
    dotted = Stream.create("d", MemoryInputFactory(), config, EventShape.POINT)
    with pytest.raises(QueryBuildError, match=r"input 'd': payload column 'a.b' has '.'.*'a_b'"):
        _query(app, dotted)
    with pytest.raises(QueryBuildError, match=r"select\(.*'v.2' has '.'.*Fix: .*'v_2'"):
        _query(app, _input().select("id", F.col("v").alias("v.2")))


def test_a_payload_column_named_as_an_outputs_own_field_fails_when_built(app, tmp_path):
    # A file output writes kind, start, end and edge beside the payload; a Kafka output its
    # time, end and edge fields as configured. A payload column of one of those names would be
    # the same field as the output's: refused when the query is built, not at the first epoch's
    # delivery, and nothing is written.
    from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
    from ctistream.adapters.kafka import KafkaOutputConfig, KafkaOutputFactory

    path = tmp_path / "out.jsonl"
    named_end = _input().select("id", F.col("v").alias("end"))
    with pytest.raises(QueryBuildError) as got:
        named_end.to_query(
            app,
            "own-fields",
            FileOutputFactory(),
            FileOutputConfig(path=str(path)),
            EventShape.POINT,
        )
    message = str(got.value)
    assert "query 'own-fields': its payload column 'end'" in message
    assert (
        "FileOutputAdapter writes beside each event's payload (['kind', 'start', 'end', 'edge'])"
        in message
    )
    assert "Fix: rename it" in message and "alias('end_value')" in message
    assert "own-fields" not in app.queries and not path.exists()

    kafka = KafkaOutputConfig(bootstrap_servers="127.0.0.1:9", topic="t", time_field="v")
    with pytest.raises(
        QueryBuildError, match=r"payload column 'v' has the name of a field.*\['v', 'end', 'edge'\]"
    ):
        _input().to_query(app, "own-fields-k", KafkaOutputFactory(), kafka, EventShape.POINT)
    # the same payload with the output's fields named otherwise is accepted
    fine = KafkaOutputConfig(bootstrap_servers="127.0.0.1:9", topic="t", time_field="t")
    _input().to_query(app, "own-fields-k", KafkaOutputFactory(), fine, EventShape.POINT)
    app.queries.pop("own-fields-k")


@pytest.mark.parametrize("start_fn", [lambda s: s / 2, lambda s: s.cast("string")])
def test_a_start_fn_that_does_not_return_ticks_fails_when_built(app, start_fn):
    # s / 2 is a double: an event at tick 1 would start at 0.5
    with pytest.raises(QueryBuildError, match=r"start_fn returns (double|string); expected"):
        _query(app, _input().alter_event_lifetime(start_fn, US10))


def test_a_spark_error_at_run_time_is_wrapped_in_the_users_words(app):
    # id / 0 passes every build check; ANSI mode refuses it on the executors while the epoch runs
    query, _ = _query(app, _input().where(F.col("id") / F.lit(0) > 1))
    with pytest.raises(QueryRunError) as raised:
        query.run()
    message = str(raised.value)
    assert message.startswith(f"query {query.name!r}, epoch 0: Spark failed")
    assert "DIVIDE_BY_ZERO" in message and "Fix:" in message
    assert "== DataFrame ==" not in message  # Spark's context dump
    assert not INTERNAL.search(message), message
    assert raised.value.spark_error is not None


def test_spark_message_drops_the_plan_and_the_engine_columns(spark):
    # a real analysis error over a frame shaped like the engine's: header columns, then payload
    frame = spark.createDataFrame([], "__kind string, __pos bigint, id bigint, v double")
    with pytest.raises(AnalysisException) as raised:
        frame.filter(F.col("vv") > 1)
    assert "__pos" in str(raised.value) or "__kind" in str(raised.value)  # what Spark says
    message = spark_message(raised.value)
    assert "`vv` cannot be resolved" in message
    assert "`v`" in message  # Spark's own suggestion stays
    assert not INTERNAL.search(message), message
    assert "Filter" not in message and "+- " not in message and "LocalRelation" not in message


def _worker_failure(raised: str, after: str = "\n SQLSTATE: 38000") -> Exception:
    """An error with Spark's text for a Python worker's exception: its traceback (a chained
    one, as ``raise ... from``), the exception line(s) ``raised``, then what Spark appends."""
    frames = '  File "/x/adapters/_broker.py", line 96, in _run\n    raise fail(error) from error\n'
    return Exception(
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: "
        f"Traceback (most recent call last):\n{frames}OSError: refused\n\nThe above exception "
        f"was the direct cause of the following exception:\n\nTraceback (most recent call "
        f"last):\n{frames}{raised}{after}"
    )


def test_task_error_is_the_engines_own_error_without_the_worker_traceback():
    kafka = "cannot read partition 0 of Kafka topic 't': no Kafka broker answered. Fix: start it"
    raised = f"ctistream.adapters.kafka.KafkaUnavailableError: {kafka}"
    assert task_error(_worker_failure(raised)) == ("KafkaUnavailableError", kafka)
    # a Py4JJavaError's text: the JVM stack follows; a message of two lines keeps both
    two = "ctistream.engine.errors.MalformedRecordError: input 'a': bad\nvalue. Fix: correct it"
    stack = "\n\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:1)"
    assert task_error(_worker_failure(two, stack)) == (
        "MalformedRecordError",
        "input 'a': bad\nvalue. Fix: correct it",
    )
    # an error the engine raises as a built-in exception gives its fix
    builtin = "ValueError: apply(f, 'n bigint'): the function returned ... Fix: return them"
    assert task_error(_worker_failure(builtin)) == ("ValueError", builtin[len("ValueError: ") :])
    # a user's function's error, or a class that is not the engine's, stays Spark's message
    assert task_error(_worker_failure("ValueError: boom in the user's UDF")) is None
    assert task_error(_worker_failure("ctistream.engine.errors.Nope: x")) is None
    assert task_error(_worker_failure("mymodule.MyError: x")) is None
    assert task_error(Exception("[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012")) is None


def test_a_task_error_from_the_engines_own_code_is_said_to_be_its_defect():
    # The innermost frame that is not a library's (PySpark, pyarrow, pandas, numpy, Python's
    # own) tells whose code failed: the engine's (installed anywhere: the worker may run it
    # from another place than the driver), a user's, or none (a library failed on a result
    # handed to it).
    def failure(*frames: str, raised: str = "KeyError: 'x'") -> Exception:
        shown = "".join(f'  File "{f}", line 7, in g\n    x = y\n' for f in frames)
        return Exception(
            "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback "
            f"(most recent call last):\n{shown}{raised}\n SQLSTATE: 38000"
        )

    worker = "/opt/spark/python/lib/pyspark.zip/pyspark/worker.py"
    arrow = "/venv/lib/python3.11/site-packages/pyarrow/ipc.py"
    own = "/elsewhere/site-packages/ctistream/engine/packed.py"
    assert engine_failure(failure(worker, own)) == "KeyError: 'x' (at engine/packed.py:7)"
    assert engine_failure(failure(worker, own, arrow)) == "KeyError: 'x' (at engine/packed.py:7)"
    assert engine_failure(failure(worker, own, "/home/me/job.py")) is None  # the user's code
    assert engine_failure(failure(worker, arrow)) is None  # nobody's frame: not told
    assert engine_failure(Exception("[DIVIDE_BY_ZERO] Division by zero.")) is None


#: A query whose job has two tasks at once (local[2], two partitions): the task with v == 1.0
#: fails at once; the other is still in its UDF when Spark aborts the job and closes its worker's
#: socket, and that worker's flush finds the pipe broken.
CANCELLED_TASK = """
import sys, time
import pandas as pd
from ctistream.adapters.memory import *
from ctistream.bindings import Application, Stream
from ctistream.engine import EventShape, point
from ctistream.engine.errors import QueryRunError
from pyspark.sql import functions as F

app = Application("cancelled", master="local[2]")
script = EventScript()
for i in range(4):
    script.insert("s", point(i, {"id": i, "v": float(i)}), partition=str(i % 2))
script.cti("s", 10).end("s")

@F.pandas_udf("double")
def boom(v: pd.Series) -> pd.Series:
    if (v == 1.0).any():
        raise ValueError("boom in the user's UDF")
    time.sleep(2)
    return v

s = Stream.create("s", MemoryInputFactory(), MemoryInputConfig(script=script), EventShape.POINT)
out = MemoryOutputConfig(name="o")
query = s.select("id", boom("v").alias("w")).to_query(
    app, "q", MemoryOutputFactory(), out, EventShape.POINT
)
try:
    query.run()
except QueryRunError as e:
    print("raised:", e)
time.sleep(4)  # the cancelled task's worker flushes after its UDF's sleep
"""


def test_a_cancelled_task_leaves_no_broken_pipe_traceback_on_stderr(tmp_path):
    # its own Spark (a subprocess): the test session's JVM writes to the stderr it started with
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "CTISTREAM_SPARK_LOG_LEVEL": "ERROR"}
    done = subprocess.run(
        [sys.executable, "-c", CANCELLED_TASK],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert "raised: query 'q', epoch 0" in done.stdout, done.stderr[-3000:]
    assert "boom in the user's UDF" in done.stdout
    # the executor's own log of the real error is still there; no traceback of the cancel
    assert "boom in the user's UDF" in done.stderr
    assert "BrokenPipeError" not in done.stderr and "Broken pipe" not in done.stderr


def test_calls_of_the_wrong_kind_say_what_was_expected_and_the_fix(app):
    # A window's operation asked of a stream names the window call to make first (it was a
    # bare AttributeError); apply's schema of another type shows what it got (it showed '');
    # group_apply's keys of another type say what they should be (a bare "'int' object is
    # not iterable"); an input importing its own CTIs says what to import from instead.
    from ctistream.engine import AdvanceTimeImportSettings, AdvanceTimeSettings

    s = _input()
    for name in ("top_k", "apply", "aggregate"):
        with pytest.raises(AttributeError) as got:
            getattr(s, name)
        assert f"{name}() is an operation of a window" in str(got.value)
        assert f"Fix: call a window first, e.g. stream.tumbling_window('1 minute').{name}(" in (
            str(got.value)
        )
    with pytest.raises(AttributeError, match=r"^'Stream' object has no attribute 'nope'$"):
        s.nope  # noqa: B018 - the attribute access is the call under test
    with pytest.raises(TypeError, match=r"apply\(<lambda>, 5\): schema must be Spark DDL"):
        s.tumbling_window(US10).apply(lambda e: e, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"takes the group key column name\(s\).*got keys=3"):
        s.group_apply(3, lambda g: g)  # type: ignore[arg-type]
    script = EventScript().insert("b", point(1, {"id": 1, "v": 1.0}))
    config = MemoryInputConfig(script=script, stream="b")
    itself = AdvanceTimeSettings(import_settings=AdvanceTimeImportSettings("b"))
    b = Stream.create("b", MemoryInputFactory(), config, EventShape.POINT, itself)
    with pytest.raises(QueryBuildError) as got:
        _query(app, b)
    message = str(got.value)
    assert "input 'b' imports CTIs from itself; expected another input of query" in message
    assert "Fix: import from the fast stream it is looked up against" in message
