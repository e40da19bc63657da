"""Progress records (semantics §8, engine/progress.py): one JSON-serialisable record per epoch,
``query.last_progress`` / ``recent_progress``, the ``on_progress`` callback, one JSON line on the
``ctistream.progress`` logger, the line ``progress=True`` prints; right after a restart on a
checkpoint too. Every count is worked by hand in the comments."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from ctistream.adapters.files import FileOutputConfig, FileOutputFactory
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    interval,
    point,
)
from ctistream.engine.progress import RECENT
from pyspark.sql import functions as F

from tests.harness import killed

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = 1_000_000
T0_TICKS = int(T0.timestamp()) * S


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: int) -> str:
    return at(seconds).isoformat()


def explicit_ctis(policy: AdvanceTimePolicy) -> AdvanceTimeSettings:
    """CTIs from the script only (a count of 100 events is never reached), ``policy`` for an
    event that arrives behind the CTI (semantics §3)."""
    return AdvanceTimeSettings(AdvanceTimeGenerationSettings(100, timedelta(0)), policy=policy)


# The keys api.md "Progress records" names (more may follow).
TOP = {"query", "epoch", "timestamp", "inputs", "operators", "output", "durations_ms", "spark_jobs"}
INPUT = {"rows", "rows_per_second", "cti", "cti_ticks", "lag_seconds", "dropped", "adjusted"}
OPERATOR = {"state_rows", "cti", "cti_ticks"}
OUTPUT = {"events", "cti", "cti_ticks"}
DURATIONS = {"read", "ingress", "operators", "egress", "checkpoint", "total"}


def _join_script() -> EventScript:
    """Two inputs joined on k, cut into two epochs at arrival 16 s (the ``# --`` line)."""
    s = EventScript()
    s.insert("l", point(at(1), {"k": 1}), arrival=at(10))
    s.insert("r", interval(at(0), at(10), {"k": 1, "v": 1}), arrival=at(11))
    s.cti("l", at(5), arrival=at(12))
    s.cti("r", at(5), arrival=at(13))
    s.insert("l", point(at(3), {"k": 1}), arrival=at(14))  # behind l's CTI 5: DROP drops it
    s.insert("r", interval(at(2), at(8), {"k": 1, "v": 2}), arrival=at(15))  # ADJUST: [5, 8)
    # -- epoch 1
    s.insert("l", point(at(6), {"k": 1}), arrival=at(16))
    s.cti("l", at(20), arrival=at(17))
    s.cti("r", at(20), arrival=at(18))
    return s


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def joined(app):
    """One run of the join in two epochs, with a callback, the progress logger listened to,
    stderr caught and the run's Spark jobs in a job group of their own."""
    script, name = _join_script(), f"progress-{uuid.uuid4().hex[:6]}"
    left = Stream.create(
        "l",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema="k int"),
        EventShape.POINT,
        explicit_ctis(AdvanceTimePolicy.DROP),
    )
    right = Stream.create(
        "r",
        MemoryInputFactory(),
        MemoryInputConfig(script=script, schema="k int, v int"),
        EventShape.INTERVAL,
        explicit_ctis(AdvanceTimePolicy.ADJUST),
    )
    query = left.join(right, on="k").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    called = []

    def on_progress(record):  # what the query and its output show when the callback runs
        called.append((record, query.last_progress, len(MemoryOutputFactory.collected(name))))

    logger, lines = logging.getLogger("ctistream.progress"), _Lines()
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not .level: it clears the level cache too
    sc, group = app.spark.sparkContext, f"progress-test-{name}"
    sc.setJobGroup(group, "the progress records' test")
    began, err = datetime.now(UTC), io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            query.run(epochs=[at(16)], progress=True, on_progress=on_progress)
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)
        logger.removeHandler(lines)
        logger.setLevel(level)
        app.queries.pop(name, None)
    jobs = len(sc.statusTracker().getJobIdsForGroup(group))
    return query, called, lines.records, err.getvalue(), jobs, began


def test_each_epoch_s_record_holds_the_counts_and_ctis_worked_by_hand(joined):
    query, *_ = joined
    first, second = query.recent_progress
    assert query.last_progress == second
    assert (first["epoch"], second["epoch"]) == (0, 1)
    # Epoch 0 (arrivals 10-15 s). l read 2 events and 1 CTI: rows 3; its point at 3 s came
    # behind its CTI 5 s: dropped. Its latest arrival is 14 s: lag 14 - 5 = 9 s.
    # r read 2 intervals and 1 CTI: rows 3; [2, 8) came behind its CTI 5: adjusted to [5, 8).
    # Its latest arrival is 15 s: lag 10 s.
    l0, r0 = first["inputs"]["l"], first["inputs"]["r"]
    assert {k: l0[k] for k in ("rows", "events", "ctis_explicit", "dropped", "adjusted")} == {
        "rows": 3,
        "events": 2,
        "ctis_explicit": 1,
        "dropped": 1,
        "adjusted": 0,
    }
    assert l0["dropped_by_reason"]["cti-violation"] == 1
    assert (r0["rows"], r0["dropped"], r0["adjusted"]) == (3, 0, 1)
    assert (l0["cti"], l0["cti_ticks"]) == (iso(5), T0_TICKS + 5 * S)
    assert (r0["cti"], r0["cti_ticks"]) == (iso(5), T0_TICKS + 5 * S)
    assert (l0["lag_seconds"], r0["lag_seconds"]) == (9.0, 10.0)
    assert l0["arrival"] == iso(14)
    # The join's CTI is the smaller of its inputs' (semantics §5): 5 s. Its one pair, l's point
    # at 1 s with r's [0, 10), is released by that CTI: 1 event and the CTI 5 s delivered.
    assert first["operators"]["2:join"]["cti"] == iso(5)
    assert first["output"] == {
        "events": 1,
        "cti": iso(5),
        "cti_ticks": T0_TICKS + 5 * S,
        "ctis": 1,
        "delivered": 2,
        "pending": 0,
    }
    # Epoch 1 (arrivals 16-18 s): l read the point at 6 s and the CTI 20 s (rows 2, lag 17 - 20
    # = -3 s: the CTI is ahead of the arrivals); r read its CTI 20 s (rows 1, lag 18 - 20).
    # The point at 6 s pairs with [0, 10) and with the adjusted [5, 8): 2 events, CTI 20 s.
    l1, r1 = second["inputs"]["l"], second["inputs"]["r"]
    assert (l1["rows"], l1["dropped"], l1["lag_seconds"], l1["cti"]) == (2, 0, -3.0, iso(20))
    assert (r1["rows"], r1["adjusted"], r1["lag_seconds"], r1["cti"]) == (1, 0, -2.0, iso(20))
    assert second["operators"]["2:join"]["cti_ticks"] == T0_TICKS + 20 * S
    assert (second["output"]["events"], second["output"]["cti"]) == (2, iso(20))
    # what the output received, epoch by epoch, is what the records say
    name = first["query"]
    got = MemoryOutputFactory.collected(name)
    assert len(got) == first["output"]["delivered"] + second["output"]["delivered"] == 5


def test_a_record_has_api_md_s_keys_and_is_json(joined):
    query, *_ = joined
    for record in query.recent_progress:
        assert json.loads(json.dumps(record)) == record
        assert set(record) >= TOP
        for entry in record["inputs"].values():
            assert set(entry) >= INPUT
        assert set(record["operators"]["2:join"]) >= OPERATOR
        assert set(record["output"]) >= OUTPUT
        assert set(record["durations_ms"]) >= DURATIONS


def test_a_record_s_times_and_rates_add_up(joined):
    query, *_, began = joined
    for record in query.recent_progress:
        d = record["durations_ms"]
        phases = sum(d[p] for p in DURATIONS - {"total"})
        assert all(d[p] >= 0 for p in DURATIONS) and phases <= d["total"]
        for entry in record["inputs"].values():
            rate = entry["rows"] / (d["total"] / 1000)
            assert entry["rows_per_second"] == pytest.approx(rate, rel=1e-3, abs=1e-3)
        stamp = datetime.fromisoformat(record["timestamp"])
        assert stamp.tzinfo is not None and began <= stamp <= datetime.now(UTC)
    first, second = query.recent_progress
    assert first["timestamp"] < second["timestamp"]


def test_the_spark_jobs_of_the_records_are_every_job_the_run_ran(joined):
    # every job the run started ran in the test's job group; making the records ran none
    query, *_, jobs, _ = joined
    counted = [r["spark_jobs"] for r in query.recent_progress]
    assert all(n >= 1 for n in counted) and sum(counted) == jobs


def test_the_callback_gets_each_record_after_its_epoch_in_order(joined):
    query, called, *_ = joined
    assert [c[0] for c in called] == query.recent_progress
    # each call sees its record as the newest, and the epoch's output already delivered
    assert [c[1] for c in called] == query.recent_progress
    assert [c[2] for c in called] == [2, 5]


def test_each_record_is_one_json_line_on_the_progress_logger(joined):
    query, _, logged, *_ = joined
    assert [r.levelno for r in logged] == [logging.INFO] * 2
    assert [json.loads(r.getMessage()) for r in logged] == query.recent_progress
    assert all("\n" not in r.getMessage() for r in logged)
    assert [r.ctistream for r in logged] == query.recent_progress


def test_progress_true_prints_a_line_made_from_the_record(joined):
    query, _, _, err, *_ = joined
    name = query.name
    lines = [x for x in err.splitlines() if x.startswith(f"[{name}]")]
    # rows in: 3 + 3, then 2 + 1; events out 1, then 2; l's drop, r's adjustment in epoch 0
    first, second = query.recent_progress
    assert lines[0].startswith(f"[{name}] epoch 1/2: ")
    assert "6 rows in (" in lines[0] and "1 events out, 1 dropped, 1 adjusted" in lines[0]
    assert f"output CTI {iso(5)} ({T0_TICKS + 5 * S} ticks)" in lines[0]
    assert lines[0].endswith(f", {first['spark_jobs']} Spark jobs")
    assert lines[1].startswith(f"[{name}] epoch 2/2: ")
    assert "3 rows in (" in lines[1] and "2 events out, 0 dropped, 0 adjusted" in lines[1]
    assert len(lines) == 2 and second["epoch"] == 1


def test_recent_progress_keeps_the_last_hundred_oldest_first(joined):
    # the records of 101 more epochs, made from the query's state as its last epoch left it
    query, *_ = joined
    rt = query._runtime
    for k in range(2, 2 + RECENT + 1):
        rt.records.begin(rt)
        rt.records.ran(k, [], 0)
        rt.records.finish(rt)
    recent = query.recent_progress
    assert RECENT == 100 and len(recent) == 100
    assert [r["epoch"] for r in recent] == list(range(3, 103))
    assert query.last_progress == recent[-1]
    assert recent[-1]["inputs"]["l"]["rows"] == 0  # nothing was read in those


def test_records_continue_right_after_a_restart_on_the_checkpoint(app, tmp_path):
    # l's script: a point at 1 s, the CTI 5 s, a point at 3 s behind it (dropped). A bounded
    # input is read whole by a started query's first epoch.
    script = EventScript()
    script.insert("l", point(at(1), {"k": 1}), arrival=at(10))
    script.cti("l", at(5), arrival=at(11))
    script.insert("l", point(at(3), {"k": 2}), arrival=at(12))
    out, ckpt, tag = tmp_path / "out.jsonl", tmp_path / "ckpt", uuid.uuid4().hex[:6]

    def query(n: int):
        stream = Stream.create(
            "l",
            MemoryInputFactory(),
            MemoryInputConfig(script=script, schema="k int"),
            EventShape.POINT,
            explicit_ctis(AdvanceTimePolicy.DROP),
        )
        return stream.to_query(
            app,
            f"restart-{tag}-{n}",
            FileOutputFactory(),
            FileOutputConfig(path=str(out)),
            EventShape.POINT,
        )

    first = query(1)
    first.start(trigger=None, checkpoint=ckpt, checkpoint_every=2)
    first.step()  # epoch 0: logged and committed; no state snapshot before epoch 1's
    # it read it all: rows 3 (2 events, 1 CTI), 1 dropped; it released the point at 1 s and
    # the CTI 5 s, both delivered
    [r0] = first.recent_progress
    assert (r0["inputs"]["l"]["rows"], r0["inputs"]["l"]["dropped"]) == (3, 1)
    assert (r0["output"]["events"], r0["output"]["delivered"]) == (1, 2)
    # The first query is left as a crash leaves it. The next one replays epoch 0 from the
    # offset log when it starts (a record of its own, with the same counts; its output holds
    # both items already: nothing delivered), then runs epoch 1.
    killed(first)
    again, seen = query(2), []
    again.start(trigger=None, checkpoint=ckpt, checkpoint_every=2, on_progress=seen.append)
    again.step()
    replayed, r1 = again.recent_progress
    assert seen == again.recent_progress
    assert (replayed["epoch"], r1["epoch"]) == (0, 1)
    rate = "rows_per_second"  # of its own time
    assert {k: v | {rate: 0} for k, v in replayed["inputs"].items()} == {
        k: v | {rate: 0} for k, v in r0["inputs"].items()
    }
    assert (replayed["output"]["events"], replayed["output"]["delivered"]) == (1, 0)
    # Epoch 1 read nothing: its counts are its own, not the query's since its start; the CTI
    # and the latest arrival are the ones epoch 0 left (lag: arrival 12 s - CTI 5 s)
    entry = r1["inputs"]["l"]
    assert (entry["rows"], entry["dropped"], entry["events"]) == (0, 0, 0)
    assert (entry["cti"], entry["lag_seconds"]) == (iso(5), 7.0)
    assert (r1["output"]["events"], r1["output"]["delivered"], r1["output"]["cti"]) == (
        0,
        0,
        iso(5),
    )


# -- state rows (engine.rows.state_rows): counted by the jobs that compute the state ----------
# Three epochs, cut at arrivals 200 s and 300 s; every input's CTIs explicit. Times in seconds.


def _window_script() -> EventScript:
    s = EventScript()
    for t, k, arrival in ((1, 1, 100), (3, 2, 101), (12, 1, 102)):
        s.insert("a", point(at(t), {"k": k}), arrival=at(arrival))
    s.cti("a", at(5), arrival=at(103))
    # -- epoch 1
    s.insert("a", point(at(14), {"k": 2}), arrival=at(200))
    s.insert("a", point(at(15), {"k": 1}), arrival=at(201))
    s.cti("a", at(12), arrival=at(202))
    # -- epoch 2
    s.insert("a", point(at(25), {"k": 1}), arrival=at(300))
    s.cti("a", at(22), arrival=at(301))
    return s


def _count_script() -> EventScript:
    s = EventScript()
    for t, k, arrival in ((1, 1, 100), (2, 2, 101), (3, 1, 102), (7, 1, 103)):
        s.insert("a", point(at(t), {"k": k}), arrival=at(arrival))
    s.cti("a", at(5), arrival=at(104))
    # -- epoch 1
    s.insert("a", point(at(9), {"k": 2}), arrival=at(200))
    s.insert("a", point(at(11), {"k": 1}), arrival=at(201))
    s.cti("a", at(10), arrival=at(202))
    # -- epoch 2
    s.cti("a", at(20), arrival=at(300))
    return s


def _two_sided_script() -> EventScript:
    s = EventScript()
    s.insert("l", point(at(6), {"k": 1}), arrival=at(100))
    s.insert("r", interval(at(2), at(20), {"k": 1, "v": 1}), arrival=at(101))
    s.insert("r", interval(at(3), at(4), {"k": 2, "v": 2}), arrival=at(102))
    s.cti("l", at(5), arrival=at(103))
    s.cti("r", at(5), arrival=at(104))
    # -- epoch 1
    s.insert("l", point(at(8), {"k": 1}), arrival=at(200))
    s.insert("r", interval(at(7), at(9), {"k": 1, "v": 3}), arrival=at(201))
    s.cti("l", at(10), arrival=at(202))
    s.cti("r", at(7), arrival=at(203))
    # -- epoch 2
    s.insert("r", interval(at(25), at(40), {"k": 1, "v": 4}), arrival=at(300))
    s.cti("l", at(30), arrival=at(301))
    s.cti("r", at(25), arrival=at(302))
    return s


def _state_query(app, case: str, name: str):
    def input_(n, script, schema, shape=EventShape.POINT):
        config = MemoryInputConfig(script=script, schema=schema)
        return Stream.create(
            n, MemoryInputFactory(), config, shape, explicit_ctis(AdvanceTimePolicy.DROP)
        )

    if case == "window":
        a = input_("a", _window_script(), "k int")
        stream = a.tumbling_window(timedelta(seconds=10)).group_by("k").aggregate(n=F.count("*"))
    elif case == "count":
        a = input_("a", _count_script(), "k int")
        stream = a.count_window(2).group_by("k").aggregate(n=F.count("*"))
    else:
        script = _two_sided_script()
        left = input_("l", script, "k int")
        right = input_("r", script, "k int, v int", EventShape.INTERVAL)
        stream = left.join(right, on="k")
    return stream.to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )


STATE_ROWS = {
    # Tumbling windows of 10 s by k, a count per window (partial aggregates kept: one row per
    # open window and group). Epoch 0, CTI 5: none complete; open [0, 10) k=1 (1 s), k=2 (3 s)
    # and [10, 20) k=1 (12 s): 3. Epoch 1, CTI 12: [0, 10) completes; open [10, 20) k=1 (12,
    # 15 s), k=2 (14 s): 2. Epoch 2, CTI 22: [10, 20) completes; open [20, 30) k=1 (25 s): 1.
    "window": [3, 2, 1],
    # Count windows of 2 distinct starts by k: the last n - 1 = 1 start below the CTI per group,
    # and every event at or after it. Epoch 0, CTI 5: k=1's 3 s (1 s is older), k=2's 2 s, and
    # 7 s: 3. Epoch 1, CTI 10: k=1's 7 s, k=2's 9 s, and 11 s: 3. Epoch 2, CTI 20: k=1's 11 s,
    # k=2's 9 s: 2.
    "count": [3, 3, 2],
    # The join holds a left event while it ends after the right's latest CTI, a right one while
    # it ends after the left's. Epoch 0 (l 5, r 5): the point at 6 s (ends 6 s + 1 tick > 5) and
    # [2, 20) (20 > 5; [3, 4) ends by 5): 1 + 1. Epoch 1 (l 10, r 7): the point at 8 s (the one
    # at 6 s ends by 7) and [2, 20) ([7, 9) ends by 10): 1 + 1. Epoch 2 (l 30, r 25): no left
    # event ends after 25; [25, 40) (40 > 30): 0 + 1.
    "join": [2, 2, 1],
}


@pytest.mark.parametrize("case", sorted(STATE_ROWS))
def test_state_rows_are_the_rows_each_epoch_leaves_held(app, case):
    # each record's state_rows as worked by hand (STATE_ROWS), and as operator_metrics()
    # counts them with a job of its own, called right after each epoch
    name = f"state-rows-{case}-{uuid.uuid4().hex[:6]}"
    query = _state_query(app, case, name)
    seen = []

    def on_progress(record):
        [(op, entry)] = record["operators"].items()
        seen.append((entry["state_rows"], query.operator_metrics()[op]["state_rows"]))

    query.run(epochs=[at(200), at(300)], on_progress=on_progress)
    app.queries.pop(name, None)
    assert [s for s, _ in seen] == STATE_ROWS[case]
    assert [m for _, m in seen] == STATE_ROWS[case]


def test_counting_state_rows_adds_no_spark_job_to_an_epoch(app, monkeypatch):
    # The same join run twice: once as it runs, once with its state checkpointed without the
    # observed count (engine.rows.counted_checkpoint as the plain lazy checkpoint it adds the
    # count to). Each epoch starts as many Spark jobs either way, and the output is the same.
    from ctistream.engine import rows
    from ctistream.engine.operators import join as join_module
    from ctistream.engine.operators import window as window_module

    def run(tag: str) -> tuple[list[int], list[int | None], list]:
        name = f"state-rows-jobs-{tag}-{uuid.uuid4().hex[:6]}"
        query = _state_query(app, "join", name)
        query.run(epochs=[at(200), at(300)])
        app.queries.pop(name, None)
        records = query.recent_progress
        jobs = [r["spark_jobs"] for r in records]
        return (
            jobs,
            [r["operators"]["2:join"]["state_rows"] for r in records],
            [(e.kind, e.start, e.end, e.payload) for e in MemoryOutputFactory.collected(name)],
        )

    counted = run("counted")

    def uncounted(df, aggregates):
        return rows.checkpoint(df, eager=False), [None] * len(aggregates)

    for module in (rows, join_module, window_module):
        monkeypatch.setattr(module, "counted_checkpoint", uncounted)
    plain = run("plain")
    assert counted[1] == STATE_ROWS["join"] and plain[1] == [None] * 3
    assert counted[0] == plain[0] and all(n >= 1 for n in counted[0])
    assert counted[2] == plain[2]


def test_the_join_s_records_count_the_events_it_holds(joined):
    # _join_script: after epoch 0 (l's CTI 5, r's 5) the join holds r's [0, 10) and [5, 8)
    # (adjusted), both ending after l's CTI 5; l's point at 1 s ends by r's CTI: 2 (README's
    # example). After epoch 1 (CTIs 20) every event ends by the other side's CTI: 0.
    # the run's two records (the last-hundred test above makes more through the callback)
    _, called, *_ = joined
    assert [c[0]["operators"]["2:join"]["state_rows"] for c in called[:2]] == [2, 0]


def test_state_rows_right_after_a_restart_on_a_state_snapshot(app, tmp_path):
    # _two_sided_script read whole by a started query's first epoch: at l's CTI 30 and r's 25 the
    # join holds r's [25, 40) (STATE_ROWS["join"]'s last epoch): 1. The query is left as a crash
    # leaves it after the snapshot of that epoch; the next one restores the snapshot and runs
    # epoch 1, which reads nothing and holds the same event, counted again.
    ckpt, tag = tmp_path / "ckpt", uuid.uuid4().hex[:6]
    first = _state_query(app, "join", f"restart-rows-{tag}-1")
    first.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    first.step()
    killed(first)
    again = _state_query(app, "join", f"restart-rows-{tag}-2")
    again.start(trigger=None, checkpoint=ckpt, checkpoint_every=1)
    again.step()
    [before], [after] = first.recent_progress, again.recent_progress
    assert (before["epoch"], after["epoch"]) == (0, 1)
    assert before["operators"]["2:join"]["state_rows"] == 1
    assert after["operators"]["2:join"]["state_rows"] == 1
    assert again.operator_metrics()["2:join"]["state_rows"] == 1
    for query in (first, again):
        app.queries.pop(query.name, None)
