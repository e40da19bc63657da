"""Damage to a checkpoint is detected, never silently used (semantics §9).

One query (a tumbling window of 5 s counting a Kafka topic's points, one point produced and
read per epoch, the state written every third epoch, a CTI at +inf on stop, output to a
JSON-lines file) runs epochs 0..7 and is then dropped as if killed; a copy of its checkpoint
directory and output file is taken at that moment.
Each case damages one file of a copy (deletes it, cuts it to half, or flips one bit in its
middle) and starts the query again on it, then stops it. The file must end up holding exactly
what the query delivered when it went on undamaged, with a warning naming what was set aside, or
the start must fail naming the file and the fix, having delivered nothing; following the fix
then gives the undamaged output.

Where the copy stands (engine/streaming.py: epoch k's state is written when (k + 1) % 3 == 0)::

    offsets/0..7.json, commits/0..7     each epoch logged, then committed after delivery
    state/2, state/5                    snapshots after epochs 2 and 5 (kept: the newest two)
    out.jsonl, out.jsonl.epoch          output through epoch 7 and its progress record

A restart restores state/5 and replays epochs 6 and 7 from offsets/6.json and offsets/7.json
(their output is already in the file, so it is not delivered again); the stop's epoch then
flushes the open window. Points at 1, 2, 3, 4 | 6, 7 | 11, 12 s, one per epoch, a CTI at each:
window [0, 5) counts 4 (delivered by epoch 4, whose CTI is 6 s), [5, 10) counts 2 (delivered by
epoch 6, CTI 11 s), [10, 15) counts 2 (delivered by the stop's CTI at +inf). State/5 holds the
points at 6 and 7 s; skipping epoch 6 makes [10, 15) count 1; delivering epoch 6 again writes
[5, 10) twice.
"""

from __future__ import annotations

import json
import shutil
import uuid
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
from ctistream.adapters.kafka import KafkaInputConfig, KafkaInputFactory
from ctistream.bindings import Stream
from ctistream.engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings, EventShape
from ctistream.engine.errors import CheckpointDamageError, QueryStoppedError
from pyspark.sql import functions as F

from tests.adapters.test_kafka import produce

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECONDS = [1, 2, 3, 4, 6, 7, 11, 12]


def _query(app, bootstrap: str, topic: str, out: Path, size: int = 5, summed: bool = False):
    """The query of the module text (a window of ``size`` s; ``summed``: n sums the ids)."""
    config = KafkaInputConfig(
        bootstrap_servers=bootstrap, topic=topic, schema="id int", time_field="ts"
    )
    every = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0), True))
    stream = Stream.create("events", KafkaInputFactory(), config, EventShape.POINT, every)
    windows = stream.tumbling_window(timedelta(seconds=size)).group_by("id")
    counts = windows.aggregate(n=F.sum("id") if summed else F.count("*"))
    return counts.to_query(
        app,
        f"damage-{uuid.uuid4().hex[:6]}",
        FileOutputFactory(),
        FileOutputConfig(path=str(out)),
        EventShape.INTERVAL,
    )


def produce_point(bootstrap: str, topic: str, seconds: float) -> None:
    """The query's input: one point of id 0 at T0 + ``seconds`` (its broker timestamp T0)."""
    ts = (T0 + timedelta(seconds=seconds)).isoformat()
    produce(bootstrap, topic, [(0, {"ts": ts, "id": 0}, int(T0.timestamp() * 1000), None)])


def _start(query, ckpt: Path) -> None:
    query.start(trigger=None, checkpoint=ckpt, checkpoint_every=3)


@pytest.fixture(scope="module")
def crashed(app, kafka_broker, tmp_path_factory):
    """(bootstrap, topic, the copy taken after epoch 7, the undamaged run's output bytes)."""
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    run = tmp_path_factory.mktemp("run")
    q = _query(app, b, topic, run / "out.jsonl")
    _start(q, run / "ck")
    for s in SECONDS:  # one point per epoch
        produce_point(b, topic, s)
        q.step()
    copy = tmp_path_factory.mktemp("crashed") / "copy"
    shutil.copytree(run, copy)  # the query is killed here; the original goes on undamaged
    q.stop()
    expected = (run / "out.jsonl").read_bytes()
    windows = [json.loads(line) for line in expected.decode().splitlines()]
    counts = [
        (w["start"][17:19], w["end"][17:19], w["n"]) for w in windows if w["kind"] == "INSERT"
    ]
    assert counts == [
        ("00", "05", 4),
        ("05", "10", 2),
        ("10", "15", 2),
    ]  # worked by hand: see the module text
    return b, topic, copy, expected


def _target(run: Path, what: str) -> Path:
    if what == "state":  # the newest snapshot's largest Parquet part: the held events
        parts = (run / "ck" / "state" / "5").rglob("part-*")
        return max(parts, key=lambda p: p.stat().st_size)
    return {
        "offsets": run / "ck" / "offsets" / "6.json",
        "commits": run / "ck" / "commits" / "7",
        "progress": run / "out.jsonl.epoch",
    }[what]


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:  # garble: one bit flipped in the middle, the length unchanged
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])


def _restart(app, b: str, topic: str, run: Path) -> tuple[list[str], bytes]:
    """Start the query again on ``run``, stop it; the warnings and the output file."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q = _query(app, b, topic, run / "out.jsonl")
        _start(q, run / "ck")
        q.stop()
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return said, (run / "out.jsonl").read_bytes()


@pytest.mark.parametrize("how", ["delete", "truncate", "garble"])
@pytest.mark.parametrize("what", ["state", "offsets", "commits", "progress"])
def test_a_damaged_checkpoint_file_is_set_aside_with_a_warning_or_refused_with_the_fix(
    app, crashed, tmp_path, what, how
):
    b, topic, copy, expected = crashed
    run = tmp_path / "run"
    shutil.copytree(copy, run)
    target = _target(run, what)
    _damage(target, how)
    refused = what == "offsets" or (what == "progress" and how != "delete")
    if refused:
        # Nothing can stand in for the file: the start fails naming it and the fix, and
        # delivers nothing. Following the fix gives the undamaged output.
        before = (run / "out.jsonl").read_bytes()
        with pytest.raises(CheckpointDamageError) as error:
            _restart(app, b, topic, run)
        assert str(target) in str(error.value) and "Fix: " in str(error.value)
        assert (run / "out.jsonl").read_bytes() == before
        if what == "offsets":  # the fix: restore the entry from a backup (here: the copy)
            shutil.copy(_target(copy, what), target)
        else:  # the fix: delete the damaged progress record, keep the output file
            target.unlink()
    said, got = _restart(app, b, topic, run)
    assert got == expected
    if what == "state":  # snapshot 5 set aside: snapshot 2 restored, epochs 3..7 replayed
        assert any(str(target) in s and "epoch 2 instead" in s for s in said), said
    elif what == "commits" and how != "delete":  # a marker ignored: the output's progress decides
        assert any(str(target) in s and "ignored" in s for s in said), said
    elif what == "progress":  # the commit log says epochs through 7 are in the file
        commit = run / "ck" / "commits" / "7"
        assert any(str(commit) in s and "not delivered to it again" in s for s in said), said
    else:  # a deleted commit marker: the output's own progress record decides
        assert said == []


def test_a_damaged_stop_entry_is_refused_not_taken_for_a_pause(app, kafka_broker, tmp_path):
    # A query stopped with flush: its stop epoch (1) is logged with "stop": true and its state
    # written after it, so a restart replays nothing and reads offsets/1.json only to tell the
    # stop from a pause (semantics §9: a stop is recorded); the refusal names the stop, not only
    # that every input ended (this query's one input is at +inf either way). Damaged, the entry
    # cannot tell, and the start names it and the fix before anything else.
    b = kafka_broker.bootstrap
    topic = kafka_broker.create_topic()
    produce_point(b, topic, 1)
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ck"
    q = _query(app, b, topic, out)
    _start(q, ckpt)
    q.step()
    q.stop()  # epoch 1 flushes: the window [0, 5) is delivered
    assert sorted(p.name for p in (ckpt / "state").iterdir()) == ["1"]
    delivered = out.read_bytes()
    assert b'"n": 1' in delivered
    again = _query(app, b, topic, out)
    with pytest.raises(QueryStoppedError, match="records a stop with flush"):
        _start(again, ckpt)
    entry = ckpt / "offsets" / "1.json"
    _damage(entry, "garble")
    again = _query(app, b, topic, out)
    with pytest.raises(CheckpointDamageError) as error:
        _start(again, ckpt)
    text = str(error.value)
    assert str(entry) in text and "stopped with flush" in text and "Fix: " in text
    assert out.read_bytes() == delivered


def test_with_every_snapshot_damaged_the_start_is_refused_without_promising_a_restore(
    app, crashed, tmp_path
):
    # Both snapshots kept (epochs 5 and 2) damaged: the start is refused naming both, and no
    # warning says an older snapshot is restored instead (one used to, before the older one
    # was checked and found damaged too). Nothing is delivered.
    b, topic, copy, _ = crashed
    run = tmp_path / "run"
    shutil.copytree(copy, run)
    newest = _target(run, "state")
    oldest = max((run / "ck" / "state" / "2").rglob("part-*"), key=lambda p: p.stat().st_size)
    for part in (newest, oldest):
        _damage(part, "garble")
    before = (run / "out.jsonl").read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointDamageError) as error:
            _start(_query(app, b, topic, run / "out.jsonl"), run / "ck")
    message = str(error.value)
    assert "no state snapshot is intact" in message
    assert str(newest) in message and str(oldest) in message and "Fix: " in message
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not any("instead" in s for s in said), said
    assert (run / "out.jsonl").read_bytes() == before


def test_a_deleted_snapshot_is_told_from_one_never_written(app, crashed, tmp_path):
    # The checkpoint records the epoch of the newest snapshot it wrote (5) outside state/.
    # With state/5 deleted, snapshot 2 is restored and epochs 3..7 replayed, with a warning
    # naming the missing snapshot; the output is the undamaged run's. With every snapshot
    # deleted, the start is refused (it used to replay from epoch 0 without a word, whatever
    # its sources still held), naming what is missing and the fix; nothing is delivered.
    b, topic, copy, expected = crashed
    run = tmp_path / "run"
    shutil.copytree(copy, run)
    shutil.rmtree(run / "ck" / "state" / "5")
    said, got = _restart(app, b, topic, run)
    missing = str(run / "ck" / "state" / "5")
    assert any(missing in s and "epoch 2 instead" in s for s in said), said
    assert got == expected

    run = tmp_path / "run2"
    shutil.copytree(copy, run)
    for snapshot in ("5", "2"):
        shutil.rmtree(run / "ck" / "state" / snapshot)
    before = (run / "out.jsonl").read_bytes()
    with pytest.raises(CheckpointDamageError) as error:
        _start(_query(app, b, topic, run / "out.jsonl"), run / "ck")
    message = str(error.value)
    assert "no state snapshot is intact" in message and "Fix: " in message
    assert f"{str(run / 'ck' / 'state' / '5')!r} is missing" in message, message
    assert (run / "out.jsonl").read_bytes() == before
