"""Windowed ``top_k`` and ``apply`` (semantics §5), worked by hand: each expected output is
checked against the reference interpreter and against Spark, in one epoch and cut into several."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
from ctistream.adapters.files import (
    FileInputConfig,
    FileInputFactory,
    FileOutputConfig,
    FileOutputFactory,
)
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    MAX_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeSettings,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.errors import QueryBuildError, QueryRunError
from pyspark.sql import functions as F

from tests.adapters.test_files_query import iso, read_output, write_jsonl
from tests.engine.test_windows import _state_after
from tests.harness import In, spark_run
from tests.reference import Apply, Binding, Input, TopK, run_reference

#: a CTI at each event's start (delay 0), +inf when the input ends
EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))
#: only the script's explicit CTIs (and +inf at the end)
EXPLICIT = AdvanceTimeSettings(AdvanceTimeGenerationSettings(10**6, TICK * 0, True))
INF = cti(MAX_TIME)
SCHEMA = "k string, v bigint"


def _check(app, script, settings, in_shape, plan, build, expected, cuts=([1, 3, 5],)):
    """``expected`` is what the reference gives and what Spark gives, in 1 epoch and each cut."""
    ref = run_reference(script, [Binding("a", settings, ("k", "v"))], plan, EventShape.INTERVAL)
    assert ref.output == expected
    inputs = {"a": In(in_shape, settings, SCHEMA)}
    for epochs in (1, *cuts):
        got, _ = spark_run(
            app, script, inputs, lambda s: build(s["a"]), EventShape.INTERVAL, epochs
        )
        assert got == expected, f"epochs={epochs}"


def _sensors() -> EventScript:
    script = EventScript()
    for t, k, v in (
        (1, "a", 5),
        (3, "b", 9),
        (4, "a", 7),
        (12, "a", 1),
        (14, "b", 1),
        (25, "b", 2),
    ):
        script.insert("a", point(t, {"k": k, "v": v}))
    script.end("a")
    return script


def test_top_k_ranks_each_tumbling_window_when_the_cti_completes_it(app):
    # tumbling 10 ticks, top_k(2, v desc). CTIs at each start: 1, 3, 4, 12, 14, 25, then +inf.
    # The output CTI is pulled back to the start of the earliest open window: 0, 0, 0, 10, 10,
    # 20, +inf (emitted when it rises). The CTI decides the release: [0, 10) holds v 5, 9, 7
    # and completes only at the CTI 12 (its end 10 <= 12), not at 4: its two largest, 9 (rank
    # 1) and 7 (rank 2), come out before cti(10). [10, 20) holds v 1 at 12 (a) and v 1 at 14
    # (b): a tie on v, broken by start: 12 is rank 1. It completes at CTI 25. [20, 30) only at
    # +inf. Each segment is sorted by (start, end, payload).
    plan = TopK(Input("a"), 10, 10, (), 2, (("v", False, False),))
    expected = [
        cti(0),
        interval(0, 10, {"k": "a", "v": 7, "rank": 2}),
        interval(0, 10, {"k": "b", "v": 9, "rank": 1}),
        cti(10),
        interval(10, 20, {"k": "a", "v": 1, "rank": 1}),
        interval(10, 20, {"k": "b", "v": 1, "rank": 2}),
        cti(20),
        interval(20, 30, {"k": "b", "v": 2, "rank": 1}),
        INF,
    ]
    build = lambda s: s.tumbling_window(TICK * 10).top_k(2, F.col("v").desc())  # noqa: E731
    _check(app, _sensors(), EVERY, EventShape.POINT, plan, build, expected)


def test_top_k_per_group_of_hopping_windows_over_edges(app):
    # hopping(10, 5) grouped by k, top_k(1, "v") (ascending). Edges: a/3 opens at 2 and closes
    # at 6; a/8 opens at 4 and stays open until +inf. Explicit CTIs 9 and 16, then +inf.
    # Windows with ws + 10 > t: [-5, 5), [0, 10), [5, 15), [10, 20), ...
    # CTI 9: no window ends at or before 9 except [-5, 5): members a/3 [2, 6) and a/8 [4, inf):
    #   smallest v is 3 -> [-5, 5) a/3 rank 1. Pulled CTI: the earliest open window's start,
    #   0 (ws = 0: 0 + 10 > 9), the first CTI out; it releases [-5, 5) (start -5 < 0).
    # CTI 16: completes [0, 10) (a/3 and a/8: a/3 first) and [5, 15) (a/3 [2, 6) overlaps 5,
    #   a/8 too: a/3 first). Pulled: 10.
    # +inf: the open edge a/8 counts up to the window holding the latest finite moment, 16:
    #   [10, 20) and [15, 25), a/8 alone in each. Then +inf.
    script = EventScript()
    script.insert("a", edge_start(2, {"k": "a", "v": 3}))
    script.insert("a", edge_start(4, {"k": "a", "v": 8}))
    script.insert("a", edge_end(2, 6, {"k": "a", "v": 3}))
    script.cti("a", 9)
    script.cti("a", 16)
    script.end("a")
    plan = TopK(Input("a"), 10, 5, ("k",), 1, (("v", True, True),))
    expected = [
        interval(-5, 5, {"k": "a", "v": 3, "rank": 1}),
        cti(0),
        interval(0, 10, {"k": "a", "v": 3, "rank": 1}),
        interval(5, 15, {"k": "a", "v": 3, "rank": 1}),
        cti(10),
        interval(10, 20, {"k": "a", "v": 8, "rank": 1}),
        interval(15, 25, {"k": "a", "v": 8, "rank": 1}),
        INF,
    ]

    def build(s):
        return s.hopping_window(TICK * 10, TICK * 5).group_by("k").top_k(1, "v")

    _check(app, script, EXPLICIT, EventShape.EDGE, plan, build, expected, cuts=([2, 4],))


def _summary(events: pd.DataFrame) -> pd.DataFrame:
    """Per window: how many events, their total, and the ticks from the first start to the last
    end (NaT for an open end: -1)."""
    span = (events["end"].max() - events["start"].min()) // pd.Timedelta(microseconds=1)
    return pd.DataFrame(
        {
            "n": [len(events)],
            "total": [int(events["v"].sum())],
            "span": [-1 if pd.isna(span) else int(span)],
        }
    )


def test_apply_runs_once_per_complete_window_and_group(app):
    # tumbling 10 ticks grouped by k, apply(_summary). Points are [t, t + 1).
    # [0, 10): a has 1/5 and 4/7 -> n 2, total 12, span 5 - 1 = 4; b has 3/9 -> n 1, 9, 1.
    #   Complete at the CTI 12 (the CTI rule, as the window's: not at 4, whose pulled CTI is 0).
    # [10, 20): a 12/1 -> 1, 1, 1; b 14/1 -> 1, 1, 1. Complete at 25. [20, 30): b 25/2 at +inf.
    # Each row gets the window's lifetime and the key first.
    plan = Apply(Input("a"), 10, 10, ("k",), _summary, ("n", "total", "span"))
    expected = [
        cti(0),
        interval(0, 10, {"k": "a", "n": 2, "total": 12, "span": 4}),
        interval(0, 10, {"k": "b", "n": 1, "total": 9, "span": 1}),
        cti(10),
        interval(10, 20, {"k": "a", "n": 1, "total": 1, "span": 1}),
        interval(10, 20, {"k": "b", "n": 1, "total": 1, "span": 1}),
        cti(20),
        interval(20, 30, {"k": "b", "n": 1, "total": 2, "span": 1}),
        INF,
    ]

    def build(s):
        schema = "n bigint, total bigint, span bigint"
        return s.tumbling_window(TICK * 10).group_by("k").apply(_summary, schema)

    _check(app, _sensors(), EVERY, EventShape.POINT, plan, build, expected)


def test_apply_over_snapshots_sees_open_edges_with_no_end(app):
    # snapshot_window, ungrouped, apply(_summary). Edge a/3 [2, 6), edge b/4 opens at 4, open.
    # Endpoints 2, 4, 6, +inf: snapshots [2, 4) {a/3}, [4, 6) {a/3, b/4}, [6, +inf) {b/4}.
    # CTI 5: [2, 4) final (4 < 5); an event (b/4: 4 < 5 <= inf) holds 5, so the output CTI is
    #   the largest endpoint below it, 4.
    # CTI 7: [4, 6) final: n 2, total 7; b/4's end is NaT, which pandas' max skips: span
    #   6 - 2 = 4. Output CTI 6 (b/4 holds 7).
    # +inf: [6, +inf) {b/4}: n 1, total 4, its only end NaT: span NaT -> -1. Then +inf.
    # The first snapshot: a/3 alone, span 6 - 2 = 4.
    script = EventScript()
    script.insert("a", edge_start(2, {"k": "a", "v": 3}))
    script.insert("a", edge_start(4, {"k": "b", "v": 4}))
    script.insert("a", edge_end(2, 6, {"k": "a", "v": 3}))
    script.cti("a", 5)
    script.cti("a", 7)
    script.end("a")
    plan = Apply(Input("a"), 0, 0, (), _summary, ("n", "total", "span"))
    expected = [
        interval(2, 4, {"n": 1, "total": 3, "span": 4}),
        cti(4),
        interval(4, 6, {"n": 2, "total": 7, "span": 4}),
        cti(6),
        interval(6, MAX_TIME, {"n": 1, "total": 4, "span": -1}),
        INF,
    ]

    def build(s):
        return s.snapshot_window().apply(_summary, "n bigint, total bigint, span bigint")

    _check(app, script, EXPLICIT, EventShape.EDGE, plan, build, expected, cuts=([2, 4],))


def _stream():
    return Stream.create(
        "a",
        MemoryInputFactory(),
        MemoryInputConfig(script=_sensors(), schema=SCHEMA),
        EventShape.POINT,
        EVERY,
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda w: w.top_k(0, "v"), ValueError, r"k must be at least 1; got 0\. Fix: "),
        (lambda w: w.top_k(2.0, "v"), TypeError, r"k must be a whole number .* Fix: pass an int"),
        (lambda w: w.top_k(True, "v"), TypeError, r"got bool True"),
        (lambda w: w.top_k(2), ValueError, r"order_by is missing"),
        (lambda w: w.top_k(2, F.col("v") * 2), TypeError, r"select the expression into a column"),
        (lambda w: w.group_by("k").apply(_summary, "k string, n bigint"), ValueError, r"key"),
        (lambda w: w.apply("not a function", "n bigint"), TypeError, r"fn must be a function"),
    ],
)
def test_bad_arguments_are_refused_where_the_operator_is_called(app, call, error, message):
    with pytest.raises(error, match=message):
        call(_stream().tumbling_window("10 seconds"))


@pytest.mark.parametrize(
    "window",
    [lambda s: s.count_window(3), lambda s: s.session_window("5 seconds").group_by("k")],
)
@pytest.mark.parametrize(
    "call", [lambda w: w.top_k(1, "v"), lambda w: w.apply(_summary, "n bigint")]
)
def test_top_k_and_apply_over_count_or_session_windows_are_refused(spark, window, call):
    # they would otherwise run over snapshots: count and session windows take aggregate only
    with pytest.raises(QueryBuildError, match=r"take(s)? aggregate only\. Fix: aggregate the"):
        call(window(_stream()))


@pytest.mark.parametrize(
    "build",
    [
        lambda w: w.top_k(2, F.col("vv").desc()),
        lambda w: w.group_by("kk").top_k(2, "v"),
        lambda w: w.group_by("kk").apply(_summary, "n bigint"),
        lambda w: (
            w.top_k(1, "v")
            .select("k", F.col("v").alias("start"))
            .tumbling_window("1 minute")
            .apply(_summary, "n bigint")
        ),
    ],
)
def test_an_unknown_or_shadowed_column_is_refused_when_the_query_is_made(app, build):
    stream = build(_stream().tumbling_window("10 seconds"))
    sink = "unknown_column"
    expected = r"no column '(vv|kk)' in the windowed stream's|a column named 'start'; apply gives"
    with pytest.raises(QueryBuildError, match=expected):
        stream.to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.POINT
        )
    app.queries.pop(sink, None)


def test_explain_shows_the_operator_and_its_cti_rule(app):
    stream = _stream()
    top = stream.tumbling_window("1 minute").group_by("k").top_k(3, F.col("v").desc())
    shown = top.explain().splitlines()[0]
    assert shown.startswith("tumbling_window 1 minute group_by k top_k 3 by v desc nulls last")
    assert "CTI: as the window: pulled back to the start of the earliest window" in shown
    assert top.schema.simpleString() == "struct<k:string,v:bigint,rank:int>"
    applied = stream.snapshot_window().group_by("k").apply(_summary, "n bigint")
    assert applied.explain().splitlines()[0].startswith("snapshot_window group_by k apply _summary")
    assert applied.schema.simpleString() == "struct<k:string,n:bigint>"


# -- an apply whose function returns other columns: the run fails, the fix runs on ------------


def _per_key(broken: bool | str):
    """The summary per window and key; for key b ``broken`` names its total "sum" (True),
    raises ("raises") or counts in a string ("type")."""

    def summary(events: pd.DataFrame) -> pd.DataFrame:
        b = (events["k"] == "b").any()
        if b and broken == "raises":
            raise ValueError("bad reading")
        total = "sum" if b and broken is True else "total"
        n = "one" if b and broken == "type" else len(events)
        return pd.DataFrame({"n": [n], total: [float(events["v"].sum())]})

    return summary


def _file_apply(app, source, out, broken: bool | str):
    stream = Stream.create(
        "readings",
        FileInputFactory(),
        FileInputConfig(
            path=str(source), time_column="ts", cti_column="c", schema="k string, v double"
        ),
        EventShape.POINT,
    )
    windowed = stream.tumbling_window("10 seconds").group_by("k")
    query = windowed.apply(_per_key(broken), "n bigint, total double")
    return query.to_query(
        app,
        f"apply-{uuid.uuid4().hex[:6]}",
        FileOutputFactory(),
        FileOutputConfig(path=str(out)),
        EventShape.POINT,
    )


@pytest.mark.parametrize("broken", ["raises", "type"])
def test_an_apply_that_raises_or_returns_another_type_fails_naming_the_window_and_group(
    app, tmp_path, broken
):
    # The timeline of the test below; the function raises for group b, or counts it in a
    # string where the schema says bigint. The run fails naming the call, the window
    # [0, 10 s) and the group, and the fix; a raise shows where in the function it raised
    # (its own frames, not the engine's or Spark's); a value of another type shows the value
    # and the column, not PySpark's conversion traceback.
    rows = [
        {"ts": iso(1), "k": "a", "v": 1},
        {"ts": iso(2), "k": "b", "v": 5},
        {"ts": iso(11), "c": True},
    ]
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(source, rows)
    query = _file_apply(app, source, out, broken=broken)
    with pytest.raises(QueryRunError) as error:
        query.run()
    message = str(error.value)
    assert "apply(summary, 'n bigint, total double')" in message, message
    assert f"for the window [{iso(0)}, {iso(10)}), group {{'k': 'b'}}" in message, message
    assert "then run the query again on its checkpoint" in message
    if broken == "raises":
        assert "the function raised ValueError: bad reading" in message
        assert "test_window_rows.py" in message and "in summary" in message  # where it raised
        assert "operators/window_rows.py" not in message and "pyspark" not in message, message
    else:
        assert "the function returned 'one' (a str) in column 'n'" in message, message
        assert "expected values of the schema's type bigint" in message
        assert "Traceback" not in message and "convertToArrowArraySafely" not in message


def test_an_apply_returning_other_columns_fails_naming_them_and_runs_again_once_fixed(
    app, tmp_path
):
    # Points a/1 at 1 s, b/5 at 2 s, a/2 at 3 s, a/3 at 12 s; explicit CTIs at 11 s and 21 s.
    # tumbling 10 s by k, apply: n and total. The CTI at 11 s completes [0, 10 s): a (n 2,
    # total 3.0) and b (n 1, total 5.0); its CTI is pulled back to 10 s. The CTI at 21 s
    # completes [10 s, 20 s): a (1, 3.0); CTI 20 s. The broken function names its total "sum"
    # for group b: the run fails naming expected and got columns, the window and the group,
    # and delivers nothing of that epoch. Fixed, the query starts again on its checkpoint and
    # its output is the clean run's, every item once.
    rows = [
        {"ts": iso(1), "k": "a", "v": 1},
        {"ts": iso(2), "k": "b", "v": 5},
        {"ts": iso(3), "k": "a", "v": 2},
        {"ts": iso(11), "c": True},
        {"ts": iso(12), "k": "a", "v": 3},
        {"ts": iso(21), "c": True},
    ]
    source, out, ckpt = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ckpt"
    write_jsonl(source, rows)
    failed = _file_apply(app, source, out, broken=True)
    failed.start(trigger=None, checkpoint=ckpt)
    with pytest.raises(QueryRunError) as error:
        failed.step()
    message = str(error.value)
    for part in (
        "apply(summary, 'n bigint, total double')",
        "returned columns ['n', 'sum']",
        f"the window [{iso(0)}, {iso(10)})",
        "group {'k': 'b'}",
        "expected a pandas DataFrame with the columns of the schema, ['n', 'total']",
        "Fix: make the function return exactly those columns",
    ):
        assert part in message, message
    assert "a Spark task raised ValueError: tumbling_window(" in message  # not its traceback
    assert "Traceback" not in message and 'File "' not in message, message
    assert not out.exists() or read_output(out) == []

    again = _file_apply(app, source, out, broken=False)
    again.start(trigger=None, checkpoint=ckpt)
    again.step()
    again.stop(flush=False)
    ins = lambda s, k, n, total: ("INSERT", iso(s), {"k": k, "n": n, "total": total})  # noqa: E731
    ct = lambda s: ("CTI", iso(s), {})  # noqa: E731
    assert read_output(out) == [
        ins(0, "a", 2, 3.0),
        ins(0, "b", 1, 5.0),
        ct(10),
        ins(10, "a", 1, 3.0),
        ct(20),
    ]


# -- state bounded by time ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "op", "first"),
    [
        ("top_k_state", lambda w: w.top_k(1, F.col("v").desc()), [{"k": 0, "v": 8, "rank": 1}]),
        (
            "apply_state",
            lambda w: w.apply(lambda e: pd.DataFrame({"n": [len(e)]}), "n bigint"),
            [{"k": 0, "n": 3}],
        ),
    ],
)
def test_state_is_the_events_of_the_open_windows(app, name, op, first):
    # Points 0, 2, .., 98 (k = t % 4, v = t), a CTI at each, tumbling 10 by k, 5 epochs, no
    # flush: the last CTI 98 completes the windows up to [80, 90); the open [90, 100) holds the
    # points 90 .. 98, so the state is those 5 events, however long the input ran (as for
    # aggregates that do not merge, tests/engine/test_windows.py). [0, 10) k = 0 has 0, 4, 8:
    # the largest v is 8; n is 3.
    state, out = _state_after(app, name, op)
    assert state == {"state_rows": 5, "cti": "1970-01-01T00:00:00.000090+00:00", "cti_ticks": 90}
    assert len({(e.start, e.payload["k"]) for e in out}) == 18  # 9 windows x 2 groups
    assert [e.payload for e in out[:1]] == first


# -- substreams: grouped by the key, each key's windows complete at its keyed CTIs ---------------


def _count(events: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"count": [len(events)]})


#: tests/reference/test_keyed_ctis.py's lagging script (key a runs ahead, b lags), tumbling 10 by
#: k: a's windows complete at a's keyed CTIs (a/10 in [10, 20), a/25 in [20, 30) leave before the
#: global CTI 10), b's [10, 20) (b/11, b/12) at b's keyed CTI 23 and [20, 30) (b/23) at the
#: global CTI 30; [40, 50) and [50, 60) at +inf (worked out there for the count)
KEYED = [
    ("top_k", lambda w: w.top_k(1, F.col("t").desc()), (("t", False, False),)),
    ("apply", lambda w: w.apply(_count, "count bigint"), None),
]


@pytest.mark.parametrize(("op", "build", "order"), KEYED)
def test_grouped_by_the_substream_key_a_keys_windows_leave_at_its_keyed_ctis(app, op, build, order):
    from tests.reference.test_keyed_ctis import LAGGING, counted, ordered, script

    if op == "top_k":  # the latest t of each window and key: b's [10, 20) has 11 and 12
        plan = TopK(Input("s"), 10, 10, ("k",), 1, order)
        row = lambda s, e, k, t: interval(s, e, {"t": t, "k": k, "rank": 1})  # noqa: E731
        values = {"a": (10, 25, 41, 52), "b": (12, 23)}
    else:  # the counts of tests/reference/test_keyed_ctis.py
        plan = Apply(Input("s"), 10, 10, ("k",), _count, ("count",))
        row = counted
        values = {"a": (1, 1, 1, 1), "b": (2, 1)}
    a, b = values["a"], values["b"]
    expected = [
        cti(-10),
        row(10, 20, "a", a[0]),
        row(20, 30, "a", a[1]),
        cti(10),
        row(10, 20, "b", b[0]),
        row(20, 30, "b", b[1]),
        cti(30),
        row(40, 50, "a", a[2]),
        row(50, 60, "a", a[3]),
        INF,
    ]
    binding = [Binding("s", None, ("t", "k"), ordered())]
    assert run_reference(script(LAGGING), binding, plan, EventShape.INTERVAL).output == expected
    for epochs in (1, [12, 30]):
        stream = Stream.create(
            "s",
            MemoryInputFactory(),
            MemoryInputConfig(script=script(LAGGING), schema="t bigint, k string"),
            EventShape.POINT,
            ordering=ordered(),
        )
        result = build(stream.tumbling_window(TICK * 10).group_by("k"))
        assert result.substream_key == "k"
        sink = f"keyed-{op}-{epochs!r}"
        query = result.to_query(
            app, sink, MemoryOutputFactory(), MemoryOutputConfig(name=sink), EventShape.INTERVAL
        )
        try:
            query.run(epochs=epochs)
        finally:
            app.queries.pop(sink, None)
        assert MemoryOutputFactory.collected(sink) == expected, f"epochs={epochs}"
