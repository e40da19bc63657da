"""The temporal join on Spark (semantics §5): overlap on equal keys, intersection lifetimes, the
older CTI of both sides, edges whose end is determined by the other side's CTI, bounded state."""

from __future__ import annotations

import pytest
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
    AdvanceTimeImportSettings,
    AdvanceTimeSettings,
    EventKind,
    EventShape,
    QueryBuildError,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.operators import join as join_operator

from tests.harness import In, spark_run

EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))  # CTI at each start
NEVER = AdvanceTimeSettings(
    AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
)  # explicit CTIs only


def run_cut(app, script, inputs, shape, cuts):
    build = lambda s: s["l"].join(s["r"], on="k")  # noqa: E731
    whole, _ = spark_run(app, script, inputs, build, shape, 1)
    cut, _ = spark_run(app, script, inputs, build, shape, cuts)
    assert cut == whole
    return whole


def test_pairs_with_equal_keys_and_overlapping_lifetimes_get_the_intersection(app):
    script = EventScript()
    script.insert("l", interval(0, 10, {"k": 1, "v": "a"}))  # l CTI 0
    script.insert("r", interval(5, 20, {"k": 1, "v": "x"}))  # r CTI 5 -> join CTI 0
    script.insert("r", interval(5, 20, {"k": 2, "v": "y"}))  # other key: no pair
    script.insert("l", point(12, {"k": 1, "v": "b"}))  # l CTI 12 -> join CTI 5
    script.insert("r", interval(12, 13, {"k": None, "v": "z"}))  # null keys never match
    script.insert("l", interval(12, 30, {"k": None, "v": "c"}))
    out = run_cut(
        app,
        script,
        {"l": In(EventShape.INTERVAL, EVERY), "r": In(EventShape.INTERVAL, EVERY)},
        EventShape.INTERVAL,
        [2, 4],
    )
    pair = {"k": 1, "v": "a", "right_k": 1, "right_v": "x"}
    later = {"k": 1, "v": "b", "right_k": 1, "right_v": "x"}
    assert out == [cti(0), cti(5), interval(5, 10, pair), cti(12), point(12, later), cti(MAX_TIME)]


def test_keys_match_as_sparks_join_compares_them(app, spark):
    # Two keys; -0.0 and 0.0 one value, NaN equal to NaN, a null in either key never equal:
    # the pairs are the ones Spark's own equi-join finds on the same rows, checked by hand too.
    nan = float("nan")
    lefts = [(-0.0, "a", "l1"), (nan, "a", "l2"), (None, "a", "l3"), (1.0, None, "l4")]
    lefts += [(1.0, "b", "l5"), (2.0, "b", "l6")]
    rights = [(0.0, "a", "r1"), (nan, "a", "r2"), (None, "a", "r3"), (1.0, None, "r4")]
    rights += [(1.0, "c", "r5"), (2.0, "b", "r6"), (2.0, "b", "r7")]
    script = EventScript()
    for (k, j, v), (rk, rj, w) in zip(lefts, rights[: len(lefts)], strict=True):
        script.insert("l", interval(0, 10, {"k": k, "j": j, "v": v}))
        script.insert("r", interval(5, 20, {"k": rk, "j": rj, "w": w}))
    for rk, rj, w in rights[len(lefts) :]:
        script.insert("r", interval(5, 20, {"k": rk, "j": rj, "w": w}))
    inputs = {
        "l": In(EventShape.INTERVAL, EVERY, "k double, j string, v string"),
        "r": In(EventShape.INTERVAL, EVERY, "k double, j string, w string"),
    }
    build = lambda s: s["l"].join(s["r"], on=["k", "j"])  # noqa: E731
    for cuts in (1, [3, 8]):
        out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, cuts)
        pairs = sorted((e.payload["v"], e.payload["w"]) for e in out if e.kind is not EventKind.CTI)
        assert pairs == [("l1", "r1"), ("l2", "r2"), ("l6", "r6"), ("l6", "r7")], cuts
        assert {(e.start, e.end) for e in out if e.kind is not EventKind.CTI} == {(5, 10)}
    left = spark.createDataFrame(lefts, "k double, j string, v string")
    right = spark.createDataFrame(rights, "k double, j string, w string")
    found = left.join(right, (left.k == right.k) & (left.j == right.j)).select("v", "w")
    assert sorted(map(tuple, found.collect())) == pairs


def test_keys_of_different_integer_types_match_by_value(app):
    script = EventScript()
    script.insert("l", point(1, {"k": 7, "v": "a"}))
    script.insert("r", interval(0, 5, {"k": 7, "w": "x"}))
    script.insert("r", interval(0, 5, {"k": 7 + 2**32, "w": "y"}))  # not 7 as an int
    inputs = {
        "l": In(EventShape.POINT, NEVER, "k int, v string"),
        "r": In(EventShape.INTERVAL, NEVER, "k bigint, w string"),
    }
    build = lambda s: s["l"].join(s["r"], on="k")  # noqa: E731
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, 1)
    assert out == [point(1, {"k": 7, "v": "a", "right_k": 7, "w": "x"}), cti(MAX_TIME)]


def test_a_bigint_key_beyond_2_53_meets_a_double_key_as_spark_compares_them(app, spark):
    # Spark compares a bigint with a double as doubles: 2**53 + 1 rounds to 2**53
    script = EventScript()
    script.insert("l", point(1, {"k": 2**53 + 1, "v": "a"}))
    script.insert("r", interval(0, 5, {"k": float(2**53), "w": "x"}))
    inputs = {
        "l": In(EventShape.POINT, NEVER, "k bigint, v string"),
        "r": In(EventShape.INTERVAL, NEVER, "k double, w string"),
    }
    build = lambda s: s["l"].join(s["r"], on="k")  # noqa: E731
    out, _ = spark_run(app, script, inputs, build, EventShape.INTERVAL, 1)
    left = spark.createDataFrame([(2**53 + 1,)], "k bigint")
    right = spark.createDataFrame([(float(2**53),)], "k double")
    assert left.join(right, left.k == right.k).count() == 1
    assert [e.payload["w"] for e in out if e.kind is not EventKind.CTI] == ["x"]


def test_keys_of_types_that_do_not_widen_are_refused_with_the_fix(app):
    script = EventScript()
    script.insert("l", point(1, {"k": 7, "v": "a"}))
    script.insert("r", interval(0, 5, {"k": "7", "w": "x"}))
    inputs = {
        "l": In(EventShape.POINT, NEVER, "k int, v string"),
        "r": In(EventShape.INTERVAL, NEVER, "k string, w string"),
    }
    build = lambda s: s["l"].join(s["r"], on="k")  # noqa: E731
    with pytest.raises(QueryBuildError) as refused:
        spark_run(app, script, inputs, build, EventShape.INTERVAL, 1)
    text = str(refused.value)
    assert "'k' is int on the left" in text and "string on the right" in text
    assert "expected" in text and "Fix: cast" in text


def test_an_open_edge_pair_ends_once_the_other_sides_cti_passes_the_known_end(app):
    script = EventScript()
    script.insert("r", edge_start(0, {"k": 1}))  # reference: open from 0
    script.insert("l", interval(2, 6, {"k": 1}))  # the pair [2, min(6, ?)) opens as an edge
    script.cti("r", 4)  # r may still end before 6: the pair waits
    script.cti("l", 10)
    script.cti("r", 7)  # r cannot end before 7 now, so the pair ends at 6
    script.cti("r", 20)
    inputs = {"l": In(EventShape.INTERVAL, NEVER), "r": In(EventShape.EDGE, NEVER)}
    out = run_cut(app, script, inputs, EventShape.EDGE, [2, 4])
    both = {"k": 1, "right_k": 1}
    # The stop flushes l first (join CTI 20 = r's), then r (+inf).
    assert out == [
        edge_start(2, both),
        cti(4),
        edge_end(2, 6, both),
        cti(7),
        cti(10),
        cti(20),
        cti(MAX_TIME),
    ]


def test_a_pair_is_empty_when_its_edge_closes_before_the_other_event_starts(app):
    script = EventScript()
    script.insert("l", edge_start(0, {"k": 1}))
    script.insert("r", interval(5, 9, {"k": 1}))  # pairs with the open edge from 5
    script.insert("l", edge_end(0, 3, {"k": 1}))  # the edge ended at 3: nothing overlaps
    script.cti("l", 50)
    script.cti("r", 50)
    inputs = {"l": In(EventShape.EDGE, NEVER), "r": In(EventShape.INTERVAL, NEVER)}
    # Cut where the pair opens and where the edge closes, for the edge consumer (it would get a
    # START edge first); the other consumers, in one epoch (suite time).
    assert run_cut(app, script, inputs, EventShape.EDGE, [1, 3]) == [cti(50), cti(MAX_TIME)]
    build = lambda s: s["l"].join(s["r"], on="k")  # noqa: E731
    for shape in (EventShape.POINT, EventShape.INTERVAL):
        assert spark_run(app, script, inputs, build, shape, 1)[0] == [cti(50), cti(MAX_TIME)]


def test_a_pair_waiting_across_epochs_learns_the_ends_its_edges_get_later(app):
    # Both sides open edges: the pair opens in the first epoch, each side's END edge comes in an
    # epoch of its own (cuts at 2 and 3), and the pair ends when both ends are known: min(8, 5).
    script = EventScript()
    script.insert("l", edge_start(0, {"k": 1}))
    script.insert("r", edge_start(2, {"k": 1}))  # the pair [2, ?) opens
    script.insert("l", edge_end(0, 8, {"k": 1}))  # r may still end before 8: the pair waits
    script.insert("r", edge_end(2, 5, {"k": 1}))  # both ends known: the pair ends at 5
    script.cti("l", 10)
    script.cti("r", 10)
    inputs = {"l": In(EventShape.EDGE, NEVER), "r": In(EventShape.EDGE, NEVER)}
    both = {"k": 1, "right_k": 1}
    out = run_cut(app, script, inputs, EventShape.EDGE, [2, 3])
    assert out == [edge_start(2, both), edge_end(2, 5, both), cti(10), cti(MAX_TIME)]


def test_a_waiting_pair_ends_at_its_closed_sides_end_once_the_other_cti_passes_it(app):
    # The left edge closes in the second epoch (end 8); the pair ends at 8 only when r's CTI
    # reaches 8, in the third epoch (r's CTI 6 before it is not enough).
    script = EventScript()
    script.insert("l", edge_start(0, {"k": 1}))
    script.insert("r", edge_start(2, {"k": 1}))
    script.insert("l", edge_end(0, 8, {"k": 1}))
    script.cti("r", 6)
    script.cti("r", 9)
    script.cti("l", 20)
    inputs = {"l": In(EventShape.EDGE, NEVER), "r": In(EventShape.EDGE, NEVER)}
    both = {"k": 1, "right_k": 1}
    out = run_cut(app, script, inputs, EventShape.EDGE, [2, 4])
    # The join's CTI is the older of both sides' latest: none until l's CTI 20, then r's 9;
    # the stop's flush takes both sides to +inf.
    assert out == [edge_start(2, both), edge_end(2, 8, both), cti(9), cti(MAX_TIME)]


@pytest.mark.parametrize("imported", [False, True])
@pytest.mark.parametrize(("flush", "held"), [(False, 6), (True, 0)])
def test_join_state_holds_only_what_can_still_meet_a_future_event(
    app, flush, held, imported, monkeypatch
):
    # imported: r imports l's CTIs, so the join is a lookup join (engine.packed): l's held
    # events are kept packed, and counted as the events packed in them
    script = EventScript()
    for t in range(20):
        script.insert("l", point(t, {"k": t % 3}))
        script.insert("r", interval(t, t + 5, {"k": t % 3}))
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, flush))
    imports = AdvanceTimeSettings(import_settings=AdvanceTimeImportSettings("l"))
    calls = []
    real = join_operator._lookup_pairs
    monkeypatch.setattr(join_operator, "_lookup_pairs", lambda *a: calls.append(1) or real(*a))
    left, right = (
        Stream.create(n, MemoryInputFactory(), MemoryInputConfig(script=script), shape, s)
        for n, shape, s in (
            ("l", EventShape.POINT, settings),
            ("r", EventShape.INTERVAL, imports if imported else settings),
        )
    )
    name = f"join-state-{flush}-{imported}"
    query = left.join(right, on="k").to_query(
        app, name, MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT
    )
    query.run(epochs=3)
    # Both CTIs end at 19 without a flush: l keeps its point at 19 (r's next interval may start
    # at 19), r keeps its intervals ending after 19 ([15, 20) .. [19, 24)). After +inf: nothing.
    [join_state] = query.operator_metrics().values()
    assert join_state["state_rows"] == held
    assert bool(calls) == imported
    # the last epoch's progress record counts the same without a job of its own (a lookup
    # join's held side: the events packed in the rows its pairing function handed back)
    [record] = query.last_progress["operators"].values()
    assert record["state_rows"] == held


def test_a_join_whose_prefixed_name_is_taken_is_refused_with_the_names(app):
    # l ⋈ r has k, v, right_k, right_v; joined with r again, r's k would be right_k a second time
    script = EventScript()
    script.insert("l", interval(0, 10, {"k": 1, "v": "a"}))
    script.insert("r", interval(0, 10, {"k": 1, "v": "x"}))
    inputs = {"l": In(EventShape.INTERVAL, EVERY), "r": In(EventShape.INTERVAL, EVERY)}

    def build(s):
        return s["l"].join(s["r"], on="k").join(s["r"], on="k")

    message = r"two columns named 'right_k' .*Fix: rename a column with select\(\)"
    with pytest.raises(QueryBuildError, match=message):
        spark_run(app, script, inputs, build, EventShape.INTERVAL, 1)


@pytest.mark.parametrize(
    ("left_key", "right_key", "schemas"),
    [
        (float("nan"), float("nan"), ("k double, x bigint", "k double, y bigint")),
        (-0.0, 0.0, ("k double, x bigint", "k double, y bigint")),
        # 2**53 + 1 as a double is 2**53: keys of two numeric types meet in the wider one
        (2**53 + 1, float(2**53), ("k bigint, x bigint", "k double, y bigint")),
    ],
    ids=["nan", "signed-zero", "bigint-double"],
)
def test_keys_meet_as_spark_compares_them_in_the_engine_and_the_reference(
    app, left_key, right_key, schemas
):
    # A point at 1 µs meets the interval [0, 3) on keys Spark takes as equal (docs/decisions.md,
    # the join's keys): one pair at 1, in the engine and in the reference interpreter alike.
    from tests.reference import Binding, Input, Join, run_reference

    script = EventScript()
    script.insert("a", point(1, {"k": left_key, "x": 1}))
    script.insert("b", interval(0, 3, {"k": right_key, "y": 2}))
    inputs = {
        "a": In(EventShape.POINT, EVERY, schemas[0]),
        "b": In(EventShape.INTERVAL, EVERY, schemas[1]),
    }
    out, _ = spark_run(app, script, inputs, lambda s: s["a"].join(s["b"], on="k"), EventShape.POINT)
    bindings = [Binding("a", EVERY, ("k", "x")), Binding("b", EVERY, ("k", "y"))]
    plan = Join(Input("a"), Input("b"), ("k",))
    expected = run_reference(script, bindings, plan, EventShape.POINT).output
    assert [repr(e) for e in out] == [repr(e) for e in expected]  # NaN is not == NaN
    [pair] = [e for e in out if not e.is_cti]
    assert (pair.start, pair.payload["x"], pair.payload["y"]) == (1, 1, 2)
