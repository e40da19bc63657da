"""Hand-checked timelines of Group and Apply in the reference interpreter (semantics §5).

§5: ``fn`` is applied to each group's events separately; the results are unioned and carry the
key columns; the output CTI is the minimum over groups of ``fn``'s output CTI, a group with no
events yet counting as ``fn`` over an empty input. The expected values are worked by hand in the
comments; ``tests/engine/test_group_apply.py`` runs the same scripts on Spark.
"""

from __future__ import annotations

from ctistream.adapters.memory import EventScript
from ctistream.engine.events import EventShape, cti, interval, point
from ctistream.engine.settings import AdvanceTimeGenerationSettings, AdvanceTimeSettings
from ctistream.engine.temporal import MAX_TIME, TICK

from . import Binding, GroupApply, Input, Join, Snapshot, Where, Window, run_reference

INF = MAX_TIME
#: a CTI at every event's start (frequency 1, delay 0), and +inf when the run stops
EVERY = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, TICK * 0, True))


def count(rows: list[dict]) -> int:
    return len(rows)


def total(rows: list[dict]) -> int:
    return sum(r["v"] for r in rows)


# -- a window per group, ungrouped inside fn ----------------------------------------------------
def window_script() -> EventScript:
    script = EventScript()
    for t, k in ((1, "a"), (5, "b"), (12, "a"), (14, "a"), (25, "b")):
        script.insert("a", point(t, {"k": k, "v": t}))
    return script


WINDOW_PLAN = GroupApply(
    Input("a"),
    ("k",),
    lambda g: Window(Where(g, lambda p: p["v"] > 1), 10, 10, (), (("n", count), ("s", total))),
)
# Input CTIs (one per event, at its start): 1, 5, 12, 14, 25, then +inf at the stop.
# Group a: the where drops v=1, keeps 12, 14. Group b: 5, 25. Each group's window (size 10)
# pulls its CTI back to the start of the earliest open window, which does not depend on the
# events: 1 -> 0, 5 -> 0, 12 -> 10, 14 -> 10, 25 -> 20, +inf -> +inf; so does the group without
# events, and the minimum over the three groups is that too. Windows: b's [0, 10) (n 1, s 5)
# completes at CTI 12, a's [10, 20) (n 2, s 26) at 25, b's [20, 30) (n 1, s 25) at +inf. Each
# result gets its group's key in front (fn's window has no group_by).
WINDOW_OUT = [
    cti(0),
    interval(0, 10, {"k": "b", "n": 1, "s": 5}),
    cti(10),
    interval(10, 20, {"k": "a", "n": 2, "s": 26}),
    cti(20),
    interval(20, 30, {"k": "b", "n": 1, "s": 25}),
    cti(INF),
]


def test_a_window_inside_group_apply_counts_each_groups_events_and_carries_the_key():
    result = run_reference(
        window_script(), [Binding("a", EVERY, ("k", "v"))], WINDOW_PLAN, EventShape.INTERVAL
    )
    assert result.output == WINDOW_OUT


# -- a snapshot in one group holds the CTI back for every group --------------------------------
def snapshot_script() -> EventScript:
    script = EventScript()
    script.insert("a", interval(0, 10, {"k": "a"}))
    for s in (2, 5, 8):
        script.insert("a", interval(s, s + 1, {"k": "b"}))
    return script


SNAPSHOT_PLAN = GroupApply(Input("a"), ("k",), lambda g: Snapshot(g, (), (("n", count),)))
# Input CTIs: 0 (after [0, 10) a), 2, 5, 8 (after b's [2, 3), [5, 6), [8, 9)), then +inf.
# Group a: [0, 10) has start < c <= end for c = 2, 5, 8, so its snapshot CTI stays at the
# snapshot start 0 until +inf (CTI 0 itself: no event has 0 < 0, so 0).
# Group b alone would move on: snapshots are cut at b's own endpoints 2, 3, 5, 6, 8, 9 (not
# at a's 0 and 10); at CTI 5 no b event has start < 5 <= end, so its CTI is 5, and [2, 3)
# is final (3 < 5); at 8 its CTI is 8 and [5, 6) is final.
# Group without events: CTIs 0, 2, 5, 8, +inf as they come.
# Minimum over groups: 0 at the first event, then a holds it at 0 until +inf: b's results
# [2, 3) and [5, 6), computed at CTIs 5 and 8, are released only at +inf, with a's [0, 10)
# (one snapshot: no other group's endpoint cuts it) and b's [8, 9).
SNAPSHOT_OUT = [
    cti(0),
    interval(0, 10, {"k": "a", "n": 1}),
    interval(2, 3, {"k": "b", "n": 1}),
    interval(5, 6, {"k": "b", "n": 1}),
    interval(8, 9, {"k": "b", "n": 1}),
    cti(INF),
]


def test_a_snapshot_in_one_group_holds_back_the_results_of_every_group():
    result = run_reference(
        snapshot_script(), [Binding("a", EVERY, ("k",))], SNAPSHOT_PLAN, EventShape.INTERVAL
    )
    assert result.output == SNAPSHOT_OUT


# -- each group's snapshot holds the CTI back to its own endpoint --------------------------------
def snapshot_floors_script() -> EventScript:
    script = EventScript()
    script.insert("a", interval(0, 5, {"k": "x"}))
    script.insert("a", interval(3, 7, {"k": "y"}))
    script.insert("a", interval(4, 12, {"k": "y"}))
    script.insert("a", interval(6, 8, {"k": "x"}))
    return script


# Input CTIs: 0, 3, 4, 6 (one after each event), then +inf.
# Group x (endpoints 0, 5, then 6, 8 once [6, 8) arrives):
#   c=0: nothing has start < 0 -> 0.  c=3, c=4: [0, 5) spans them -> x's endpoint below: 0.
#   c=6: [0, 5) ended (5 < 6), [6, 8) starts at 6 (not < 6): nothing spans 6 -> 6.
#   Snapshots: [0, 5) (n 1) final at CTI 6 (5 < 6); [5, 6) holds nothing; [6, 8) at +inf.
# Group y (endpoints 3, 7, then 4, 12):
#   c=0: no event -> 0.  c=3: [3, 7) starts at 3 (not < 3) -> 3.  c=4: [3, 7) spans 4 -> y's
#   endpoint below 4: 3 (4 is [4, 12)'s start, not below 4).  c=6: both span 6 -> below 6: 4.
#   Snapshots: [3, 4) (n 1) final at CTI 6; [4, 7) (n 2) and [7, 12) (n 1) at +inf.
# Group without events: 0, 3, 4, 6, +inf.
# Minimum over the groups' latest CTIs: 0 at 0, 3 and 4 (x holds it at 0), min(x 6, y 4) = 4 at
# CTI 6: the x floor that held the CTI is gone and y's, a different endpoint, takes over. Over
# all events at once the snapshot would be cut at every endpoint (0, 3, 4, 5, 6, 7, 8, 12) and
# its CTI at 6 would be 5, x's end.
SNAPSHOT_FLOORS_OUT = [
    cti(0),
    interval(0, 5, {"k": "x", "n": 1}),
    interval(3, 4, {"k": "y", "n": 1}),
    cti(4),
    interval(4, 7, {"k": "y", "n": 2}),
    interval(6, 8, {"k": "x", "n": 1}),
    interval(7, 12, {"k": "y", "n": 1}),
    cti(INF),
]


def test_each_groups_snapshot_holds_the_cti_back_to_its_own_endpoint():
    result = run_reference(
        snapshot_floors_script(), [Binding("a", EVERY, ("k",))], SNAPSHOT_PLAN, EventShape.INTERVAL
    )
    assert result.output == SNAPSHOT_FLOORS_OUT


def test_without_group_apply_the_snapshot_of_group_b_alone_releases_at_once():
    # The same b events alone (the group without a): CTI 5 releases [2, 3), CTI 8 [5, 6): what
    # the previous test holds back is held by group a's snapshot only.
    script = EventScript()
    for s in (2, 5, 8):
        script.insert("a", interval(s, s + 1, {"k": "b"}))
    plan = GroupApply(Input("a"), ("k",), lambda g: Snapshot(g, (), (("n", count),)))
    result = run_reference(script, [Binding("a", EVERY, ("k",))], plan, EventShape.INTERVAL)
    assert result.output == [
        cti(2),
        interval(2, 3, {"k": "b", "n": 1}),
        cti(5),
        interval(5, 6, {"k": "b", "n": 1}),
        cti(8),
        interval(8, 9, {"k": "b", "n": 1}),
        cti(INF),
    ]


# -- a join against another stream, then a window ---------------------------------------------
def join_script() -> EventScript:
    script = EventScript()
    script.insert("r", interval(0, 20, {"id": 1, "w": 10}))
    script.insert("a", point(2, {"k": "x", "id": 1, "v": 1}))
    script.insert("a", point(4, {"k": "y", "id": 1, "v": 2}))
    script.insert("a", point(6, {"k": "x", "id": 2, "v": 3}))
    script.insert("r", interval(12, 30, {"id": 2, "w": 20}))
    script.insert("a", point(15, {"k": "x", "id": 2, "v": 4}))
    script.insert("a", point(16, {"k": "y", "id": 1, "v": 5}))
    return script


JOIN_BINDINGS = [Binding("a", EVERY, ("k", "id", "v")), Binding("r", EVERY, ("id", "w"))]
JOIN_PLAN = GroupApply(
    Input("a"),
    ("k",),
    lambda g: Window(Join(g, Input("r"), ("id",)), 10, 10, (), (("n", count),)),
)
# Each group's events meet all of r's. Group x: 2 (id 1) meets [0, 20) -> pair [2, 3); 6 (id 2)
# meets nothing ([12, 30) starts later); 15 (id 2) meets [12, 30) -> [15, 16). Group y: 4 and
# 16 (id 1) meet [0, 20) -> [4, 5), [16, 17). Windows of 10: x and y each have one pair in
# [0, 10) and one in [10, 20).
# CTIs, per position: the join's is min(a's, r's): r 0 / a -inf -> -inf; a 2 -> 0; a 4, a 6 ->
# 0; r 12 -> min(6, 12) = 6; a 15 -> 12; a 16 -> 12; stop: a +inf -> 12, r +inf -> +inf. The
# window pulls 0 -> 0, 6 -> 0, 12 -> 10: [0, 10) completes at the join's CTI 12 (a's 15).
# Every group (and the group without events, whose join has no left events) has these CTIs.
JOIN_OUT = [
    cti(0),
    interval(0, 10, {"k": "x", "n": 1}),
    interval(0, 10, {"k": "y", "n": 1}),
    cti(10),
    interval(10, 20, {"k": "x", "n": 1}),
    interval(10, 20, {"k": "y", "n": 1}),
    cti(INF),
]


def test_each_groups_events_meet_all_of_the_other_streams_events():
    result = run_reference(join_script(), JOIN_BINDINGS, JOIN_PLAN, EventShape.INTERVAL)
    assert result.output == JOIN_OUT


# -- the group without events ------------------------------------------------------------------
def ctis_only_script() -> EventScript:
    script = EventScript()
    script.cti("a", 5)
    script.cti("a", 12)
    return script


CTIS_ONLY_PLAN = GroupApply(Input("a"), ("k",), lambda g: Window(g, 10, 10, (), (("n", count),)))
# No group has an event: fn over the empty input alone gives the output CTI. Its window pulls
# 5 -> 0, 12 -> 10 and +inf (the stop) -> +inf.
CTIS_ONLY_OUT = [cti(0), cti(10), cti(INF)]


def test_with_no_events_the_output_cti_is_fn_over_an_empty_input():
    result = run_reference(
        ctis_only_script(), [Binding("a", EVERY, ("k", "v"))], CTIS_ONLY_PLAN, EventShape.POINT
    )
    assert result.output == CTIS_ONLY_OUT


# -- a join of two streams of the group --------------------------------------------------------
def self_join_script() -> EventScript:
    script = EventScript()
    script.insert("a", point(1, {"k": "x", "id": 1, "v": 1}))
    script.insert("a", point(1, {"k": "y", "id": 1, "v": 5}))
    script.insert("a", point(1, {"k": "x", "id": 1, "v": 7}))
    return script


SELF_JOIN_PLAN = GroupApply(
    Input("a"),
    ("k",),
    lambda g: Join(Where(g, lambda p: p["v"] < 3), Where(g, lambda p: p["v"] >= 3), ("id",)),
)
# Group x: left v=1, right v=7, same id: the pair [1, 2). Group y: no left event (5 is not < 3).
# v=1 of x never meets v=5 of y, although their ids are equal: they are in different groups.
# CTIs: 1 after the first point (the others at 1 raise nothing), +inf at the stop; the join's
# is the minimum of its sides', which are both the input's: 1, then +inf. The pair starts at 1,
# so CTI 1 does not release it; +inf does.
SELF_JOIN_OUT = [
    cti(1),
    point(1, {"k": "x", "id": 1, "v": 1, "right_k": "x", "right_id": 1, "right_v": 7}),
    cti(INF),
]


def test_a_join_of_two_streams_of_the_group_pairs_events_of_the_same_group_only():
    result = run_reference(
        self_join_script(),
        [Binding("a", EVERY, ("k", "id", "v"))],
        SELF_JOIN_PLAN,
        EventShape.POINT,
    )
    assert result.output == SELF_JOIN_OUT
