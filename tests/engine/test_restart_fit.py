"""A restart on a checkpoint that does not fit what is started on it (semantics §9): never a result
changed or lost without a word.

* Another plan or other settings: state computed by one query would give the other results of
  neither, so the start is refused, naming the first difference and the fix.
* An output restored from before the newest state snapshot (its file and progress record from a
  backup): an older snapshot is restored and the epochs after it replayed, so the items the output
  lacks are delivered again, once; when no snapshot kept is that old, the oldest is, and the start
  warns naming the items the output does not get and what to do.
* A new output: the epochs the commit log records as delivered are not delivered to it again, with
  a warning naming the commit log, also when no epoch is replayed.

The query: a tumbling 5 s count of a Kafka topic's points, a CTI at every point, a point read per
epoch, the state written after every epoch (the newest two snapshots kept), output to a JSON-lines
file. Points at 1, 6, 11, 16 s, one per epoch; each closes the window before it. The output items
(events and CTIs, numbered from the query's first) through each epoch, worked by hand:

    epoch 0 (CTI 1 s)   CTI 0 (the open window [0, 5) holds the CTI at its start)      1 item
    epoch 1 (CTI 6 s)   [0, 5) n=1, CTI 5                                              3
    epoch 2 (CTI 11 s)  [5, 10) n=1, CTI 10                                            5
    epoch 3 (CTI 16 s)  [10, 15) n=1, CTI 15                                           7
    stop with flush     [15, 20) n=1, CTI +inf                                         9

The query is killed after epoch 3: the snapshots kept are those of epochs 2 (5 items released)
and 3 (7 items), the last epoch logged.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
import warnings
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from ctistream.adapters.kafka import (
    KafkaInputConfig,
    KafkaInputFactory,
    KafkaOutputConfig,
    KafkaOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings, EventShape
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.temporal import to_ticks
from pyspark.sql import functions as F

from tests.adapters.test_kafka import read_back
from tests.engine.test_checkpoint_damage import T0, _query, produce_point
from tests.harness import killed

SECONDS = [1, 6, 11, 16]
EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0), True))
#: (start s, end s, n) of the windows and the CTIs (s; None: +inf), in delivery order
EXPECTED = [0, (0, 5, 1), 5, (5, 10, 1), 10, (10, 15, 1), 15, (15, 20, 1), None]


def _start(query, ckpt: Path) -> None:
    query.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)


def _items(out: Path) -> list:
    rows = [json.loads(line) for line in out.read_text().splitlines()]

    def second(iso: str | None) -> int | None:
        return None if iso is None or iso == "+inf" else int(iso[17:19])

    return [
        (second(r["start"]), second(r["end"]), r["n"])
        if r["kind"] == "INSERT"
        else second(r["start"])
        for r in rows
    ]


@pytest.fixture(scope="module")
def crashed(app, kafka_broker, tmp_path_factory):
    """(bootstrap, topic, the run's directory as the query left it when killed after epoch 3,
    copies of its output file and progress record after each epoch)."""
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    run = tmp_path_factory.mktemp("run")
    q = _query(app, b, topic, run / "out.jsonl")
    _start(q, run / "ck")
    backups = {}
    for epoch, s in enumerate(SECONDS):
        produce_point(b, topic, s)
        q.step()
        backup = tmp_path_factory.mktemp(f"after-{epoch}")
        for name in ("out.jsonl", "out.jsonl.epoch"):
            shutil.copy(run / name, backup / name)
        backups[epoch] = backup
    killed = tmp_path_factory.mktemp("killed") / "run"
    shutil.copytree(run, killed)  # the query is killed here; the original goes on
    q.stop()
    assert _items(run / "out.jsonl") == EXPECTED  # worked by hand: see the module text
    assert _items(killed / "out.jsonl") == EXPECTED[:7]
    assert sorted(int(p.name) for p in (killed / "ck" / "state").iterdir()) == [2, 3]
    return b, topic, killed, backups


def _copy(crashed, tmp_path: Path, output_after: int | None) -> Path:
    """The killed run's checkpoint, with its output as it was after ``output_after`` (None: no
    output at all)."""
    _, _, run, backups = crashed
    dest = tmp_path / "run"
    shutil.copytree(run / "ck", dest / "ck")
    if output_after is not None:
        for name in ("out.jsonl", "out.jsonl.epoch"):
            shutil.copy(backups[output_after] / name, dest / name)
    return dest


def _resume(app, crashed, run: Path) -> list[str]:
    """Start the query again on ``run`` and stop it with flush; the warnings."""
    b, topic, _, _ = crashed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q = _query(app, b, topic, run / "out.jsonl")
        _start(q, run / "ck")
        q.stop()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_an_output_restored_from_before_the_newest_snapshot_gets_what_it_lacks_once(
    app, crashed, tmp_path
):
    # The output as after epoch 2 holds 5 items; snapshot 3 is past item 7, so snapshot 2
    # (5 items) is restored and epoch 3 replayed: items 6 and 7 come again, then the stop's.
    run = _copy(crashed, tmp_path, output_after=2)
    assert _items(run / "out.jsonl") == EXPECTED[:5]
    said = _resume(app, crashed, run)
    assert _items(run / "out.jsonl") == EXPECTED
    assert said == []  # the output kept its record: nothing to warn of


def test_an_output_older_than_every_snapshot_kept_is_told_which_items_it_does_not_get(
    app, crashed, tmp_path
):
    # The output as after epoch 1 holds 3 items; the oldest snapshot kept (epoch 2) is past item
    # 5, so items 4 and 5 ([5, 10) and CTI 10) cannot be computed again. Snapshot 2 is restored
    # (the fewest items left out), epoch 3 replayed, and the start names the items left out and
    # the fix. Not refused: an output that does not write CTIs reports a count this low although
    # it lacks nothing written.
    run = _copy(crashed, tmp_path / "old", output_after=1)
    said = _resume(app, crashed, run)
    assert _items(run / "out.jsonl") == EXPECTED[:3] + EXPECTED[5:]
    assert any(
        "holds 3 items" in s
        and "items 4 to 5 are not delivered" in s
        and "Fix: restore the output" in s
        for s in said
    ), said
    # what it says to do: the output as it was when the query stopped (here: was killed)
    run = _copy(crashed, tmp_path / "fixed", output_after=3)
    assert _resume(app, crashed, run) == []
    assert _items(run / "out.jsonl") == EXPECTED


def test_a_new_output_is_warned_of_the_epochs_it_does_not_get_also_without_a_replay(
    app, crashed, tmp_path
):
    # Snapshot 3 is of the last epoch logged: nothing is replayed. The new output gets only what
    # comes after epoch 3 (the stop's window and CTI), and the start says so.
    run = _copy(crashed, tmp_path, output_after=None)
    said = _resume(app, crashed, run)
    assert _items(run / "out.jsonl") == EXPECTED[7:]
    commit = run / "ck" / "commits" / "3"
    assert any(str(commit) in s and "not delivered to it again" in s for s in said), said


@pytest.mark.parametrize(
    ("size", "summed", "theirs", "ours"),
    [
        (3, False, "tumbling_window 5 seconds", "tumbling_window 3 seconds"),
        (5, True, "aggregate n=count(*)", "aggregate n=sum(id)"),
    ],
    ids=["window-size", "aggregate"],
)
def test_a_checkpoint_of_another_plan_is_refused_naming_the_difference(
    app, crashed, tmp_path, size, summed, theirs, ours
):
    # The same operators with other arguments: the 5 s window's state read as a 3 s window's
    # would count windows of neither grid; a count's partials read as a sum's would fail in Spark
    run = _copy(crashed, tmp_path, output_after=3)
    before = (run / "out.jsonl").read_bytes()
    b, topic, _, _ = crashed
    q = _query(app, b, topic, run / "out.jsonl", size, summed)
    with pytest.raises(QueryBuildError) as error:
        _start(q, run / "ck")
    text = str(error.value)
    assert re.search(
        f"another shape.*that query has '[^']*{re.escape(theirs)}[^']*', "
        f"this one '[^']*{re.escape(ours)}",
        text,
    )
    assert "Fix: start this query with a new checkpoint directory" in text
    assert (run / "out.jsonl").read_bytes() == before


def test_the_same_query_with_python_functions_built_again_fits_its_checkpoint(app, tmp_path):
    # A restart builds the query anew, in a new process as a rule: its Columns are new objects
    # and its Python UDFs new functions. A Column's text shows a UDF's arguments with where they
    # were written, the JVM's object addresses included, different in every build; the plan's
    # shape must not, or every restart of such a query would be refused.
    from ctistream.adapters.memory import (
        EventScript,
        MemoryInputConfig,
        MemoryInputFactory,
        MemoryOutputConfig,
        MemoryOutputFactory,
    )
    from ctistream.engine import point

    script = EventScript()
    for s in SECONDS:
        script.insert("events", point(T0 + timedelta(seconds=s), {"id": 0, "v": float(s)}))

    def build(name: str):
        big = F.udf(lambda v: v > 1.0, "boolean")
        stream = Stream.create(
            "events",
            MemoryInputFactory(),
            MemoryInputConfig(script=script, schema="id int, v double"),
            EventShape.POINT,
            EVERY,
        )
        windows = stream.where(big("v")).tumbling_window(timedelta(seconds=5)).group_by("id")
        return windows.aggregate(n=F.count("*")).to_query(
            app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.INTERVAL
        )

    tag = uuid.uuid4().hex[:6]
    first = build(f"udf-{tag}")
    _start(first, tmp_path / "ck")
    first.step()
    first.stop(flush=False)
    again = build(f"udf-again-{tag}")
    _start(again, tmp_path / "ck")  # fits: no QueryBuildError
    again.stop()


def test_a_plan_built_again_has_the_same_shape(app):
    # What a checkpoint's shape compares is each operator's label: it must read the same in
    # every build of one query, Python UDFs, grouped aggregate UDFs and higher-order functions
    # (whose variables PySpark numbers from a counter of the JVM's life) included
    from ctistream.adapters.memory import EventScript, MemoryInputConfig, MemoryInputFactory
    from ctistream.engine.plan import walk

    def build():
        big = F.udf(lambda v: v > 1.0, "boolean")

        @F.pandas_udf("double")
        def middle(v: pd.Series) -> float:
            return float(v.median())

        stream = Stream.create(
            "events",
            MemoryInputFactory(),
            MemoryInputConfig(script=EventScript(), schema="id int, v double, arr array<int>"),
            EventShape.POINT,
            EVERY,
        )
        kept = stream.where(big("v") & F.exists("arr", lambda x: x > 1))
        windows = kept.tumbling_window(timedelta(seconds=5)).group_by("id")
        summed = F.aggregate(F.collect_list("v"), F.lit(0.0), lambda acc, x: acc + x)
        return windows.aggregate(m=middle("v"), s=summed)

    first, again = ([n.label() for n in walk(build().node)] for _ in range(2))
    assert first == again
    assert first[1] == "where (<lambda>(v) AND exists(arr, x -> (x > 1)))"


def test_an_output_without_ctis_restarts_from_the_newest_snapshot_without_a_word(
    app, kafka_broker, tmp_path, caplog
):
    # A Kafka output that writes no CTIs marks only its records: killed after epoch 3 it counts
    # 6 (through [10, 15), item 5), below the 7 the newest snapshot released (CTI 15 is item 6),
    # and lacks nothing. The restart takes the newest snapshot, replays nothing and warns of
    # nothing; the topic holds each window once.
    b = kafka_broker.bootstrap
    topic, sink = kafka_broker.create_topic(), kafka_broker.create_topic()

    def query():
        config = KafkaInputConfig(
            bootstrap_servers=b, topic=topic, schema="id int", time_field="ts"
        )
        stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, EVERY)
        windows = stream.tumbling_window(timedelta(seconds=5)).group_by("id")
        out = KafkaOutputConfig(bootstrap_servers=b, topic=sink, include_ctis=False)
        return windows.aggregate(n=F.count("*")).to_query(
            app, f"fit-{uuid.uuid4().hex[:6]}", KafkaOutputFactory(), out, EventShape.INTERVAL
        )

    q = query()
    _start(q, tmp_path / "ck")
    for s in SECONDS:
        produce_point(b, topic, s)
        q.step()
    killed(q)
    with (
        warnings.catch_warnings(record=True) as caught,
        caplog.at_level(logging.INFO, logger="ctistream.streaming"),
    ):
        warnings.simplefilter("always")
        again = query()
        _start(again, tmp_path / "ck")
        again.stop()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "restored instead" in m or "replaying" in m], said
    got = read_back(b, sink, EventShape.INTERVAL, schema="id int, n bigint")
    second = lambda t: (t - to_ticks(T0)) // 1_000_000  # noqa: E731
    assert [(second(e.start), second(e.end), e.payload["n"]) for e in got] == [
        (0, 5, 1),
        (5, 10, 1),
        (10, 15, 1),
        (15, 20, 1),
    ]


OLDER_SHAPES = [
    # the plan as its operators' type names only: whether the state fits cannot be told
    ["InputNode", "WindowNode", "events:0"],
    # the plan as this version records it, but state kept otherwise (integer sums as bigint)
    ["shape 2: operators with their arguments, then inputs", "InputNode", "WindowNode"],
]


@pytest.mark.parametrize("older", OLDER_SHAPES)
def test_a_checkpoint_an_older_version_wrote_is_refused_as_such(app, crashed, tmp_path, older):
    # The message blames the version, not the user's query
    from ctistream.engine.checkpoint import read_checked, write_checked

    run = _copy(crashed, tmp_path, output_after=3)
    for snapshot in (run / "ck" / "state").iterdir():
        path = snapshot / "state.json"
        tree = json.loads(read_checked(path))
        for pair in tree["__dict__"]:
            if pair[0] == "shape":
                pair[1] = older
        write_checked(path, json.dumps(tree))
    b, topic, _, _ = crashed
    with pytest.raises(QueryBuildError) as error:
        _start(_query(app, b, topic, run / "out.jsonl"), run / "ck")
    text = str(error.value)
    assert "written by another version of the engine" in text
    assert str(older[:4]) in text and "Fix: start the query" in text


def test_a_damaged_older_snapshot_passed_to_for_an_old_output_is_named(app, crashed, tmp_path):
    # The output as after epoch 2 needs snapshot 2 (5 items), but its manifest is gone: snapshot
    # 3 (7 items) is the only one intact. The start names the damage and the items 6 and 7 the
    # output does not get; then the stop's window and CTI come.
    run = _copy(crashed, tmp_path, output_after=2)
    manifest = run / "ck" / "state" / "2" / "manifest.json"
    manifest.unlink()
    said = _resume(app, crashed, run)
    assert any(str(manifest) in s and "oldest kept, is damaged" in s for s in said), said
    assert any("holds 5 items" in s and "items 6 to 7 are not delivered" in s for s in said)
    assert _items(run / "out.jsonl") == EXPECTED[:5] + EXPECTED[7:]
