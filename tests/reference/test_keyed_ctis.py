"""Hand-worked timelines for per-key CTIs (substreams) in the reference interpreter.

The rules are in ``interpreter.py``'s module docstring ("Per-key CTIs"). Every expected value is
worked out by hand in the comments. Times are plain ticks with explicit arrival stamps; a
position is ``(arrival, binding index, offset, partition index, sub-position)`` and a keyed CTI
as :class:`Result` reports it is ``(position, K, k, c)``.

The main script, ``lagging()``: one partition, ``over="k"``, out-of-order tolerance 0, late
tolerance 20, no early window, flush on stop. Key ``a`` runs ahead of arrival, key ``b`` lags::

    offset  t   k  arrival | input CTI (arrival - 20) | wm(k) | keyed v = max(CTI, wm)
    0       10  a  10      | -10                      | 10    | (a, 10)
    1       11  b  11      | -9                       | 11    | (b, 11)
    2       25  a  12      | -8                       | 25    | (a, 25)
    3       12  b  13      | -7                       | 12    | (b, 12)
    4       41  a  14      | -6                       | 41    | (a, 41)
    5       23  b  30      | 10                       | 23    | (b, 23)
    6       52  a  50      | 30                       | 52    | (a, 52)
    stop                   | +inf (flush)             |       |

No event is late (``arrival - t <= 20``), out of order (each key's times rise) or below the
partition's CTI, so every event leaves ingress at its ``t``; every watermark rises and every
``v`` is above the input's CTI and the key's previous one, so every event makes a keyed row.
"""

from __future__ import annotations

from ctistream.adapters.memory import EventScript
from ctistream.engine.events import EventShape, cti, interval, point
from ctistream.engine.settings import (
    AdvanceTimeImportSettings,
    AdvanceTimeSettings,
    EventOrderingSettings,
)
from ctistream.engine.temporal import MAX_TIME, TICK

from . import (
    AlterEventLifetime,
    Binding,
    Input,
    Join,
    MergeSubstreams,
    Select,
    ShiftEventTime,
    Snapshot,
    Union,
    Where,
    Window,
    run_reference,
)

POINT, INTERVAL = EventShape.POINT, EventShape.INTERVAL

LAGGING = [(10, "a", 10), (11, "b", 11), (25, "a", 12), (12, "b", 13)]
LAGGING += [(41, "a", 14), (23, "b", 30), (52, "a", 50)]


def ordered(**kwargs) -> EventOrderingSettings:
    settings = {
        "event_time": "t",
        "over": "k",
        "out_of_order_tolerance": TICK * 0,
        "late_arrival_tolerance": TICK * 20,
        "early_arrival_window": None,
        "flush_on_stop": True,
    }
    return EventOrderingSettings(**{**settings, **kwargs})


def script(events) -> EventScript:
    s = EventScript()
    for t, k, arrival in events:
        s.insert("s", point(0, {"t": t, "k": k}), arrival=arrival)
    return s


def run(plan, shape=POINT, events=LAGGING, **ordering):
    bindings = [Binding("s", None, ("t", "k"), ordered(**ordering))]
    return run_reference(script(events), bindings, plan, shape)


def at(arrival: int, offset: int, partition: int = 0) -> tuple:
    """The position of the CTIs right after the event at ``offset`` (sub-position 1)."""
    return (arrival, 0, offset, partition, 1)


def keyed(*rows) -> list[tuple]:
    """``(arrival, offset, k, c)`` rows of the lagging script (column ``k``, partition 0)."""
    return [(at(arrival, offset), "k", k, c) for arrival, offset, k, c in rows]


def ctis(result, name="s") -> list[int]:
    return [e.start for e in result.ingress[name] if e.is_cti]


def p(t: int, k: str):
    return point(t, {"t": t, "k": k})


def counted(start: int, end: int, k: str, n: int):
    return interval(start, end, {"k": k, "count": n})


def tumbling(child, keys=("k",)):
    return Window(child, 10, 10, keys, (("count", len),))


#: The keyed rows of the lagging script's ingress (module docstring's table).
INGRESS_KEYED = keyed(
    (10, 0, "a", 10),
    (11, 1, "b", 11),
    (12, 2, "a", 25),
    (13, 3, "b", 12),
    (14, 4, "a", 41),
    (30, 5, "b", 23),
    (50, 6, "a", 52),
)


# -- ingress --------------------------------------------------------------------------------------
def test_ingress_emits_a_keyed_cti_after_each_event_that_raises_its_keys_watermark():
    r = run(Input("s"))
    assert r.keyed_ctis == {"s": INGRESS_KEYED}
    # The global CTI is today's: arrival - 20 at each rising arrival, +inf at the stop.
    assert ctis(r) == [-10, -9, -8, -7, -6, 10, 30, MAX_TIME]
    # Keyed rows are not in ingress (events and global CTIs only) and are not counted.
    assert [e for e in r.ingress["s"] if not e.is_cti] == [p(t, k) for t, k, _ in LAGGING]
    assert r.counts["s"]["ctis_generated"] == 7 + 1  # seven rises, one flush
    assert r.counts["s"]["ctis_explicit"] == r.counts["s"]["ctis_imported"] == 0


def test_a_keyed_cti_is_held_back_by_the_other_partitions_cti():
    # late 100; key a only in p0, b only in p1; explicit CTIs 40 and 90 on p1.
    #   arr 100 p0 (50, a): p0 CTI 0; input min(0, -inf) = -inf: no CTI.
    #       v(a) = min(max(0, 50), max(-inf, -inf)) = -inf: not above the input's CTI.
    #   arr 110 p1 (120, b): p1 CTI 10; input min(0, 10) = 0 at (110, 0, 0, 1, 1).
    #       v(b) = min(max(0, -inf), max(10, 120)) = 0: not above the input's CTI 0.
    #   arr 115 p1 CTI 40: p1 40; input min(0, 40) = 0: no change, and no keyed row (no event).
    #   arr 120 p0 (60, a): p0 CTI 20; input min(20, 40) = 20.
    #       v(a) = min(max(20, 60), max(40, -inf)) = 40 (p0 alone would give 60): emitted.
    #   arr 130 p1 CTI 90: p1 90; input min(20, 90) = 20: no change.
    #   arr 140 p0 (70, a): p0 CTI 40; input min(40, 90) = 40.
    #       v(a) = min(max(40, 70), max(90, -inf)) = 70: emitted.
    s = EventScript().declare("s", "p0", "p1")
    s.insert("s", point(0, {"t": 50, "k": "a"}), arrival=100, partition="p0")
    s.insert("s", point(0, {"t": 120, "k": "b"}), arrival=110, partition="p1")
    s.cti("s", 40, arrival=115, partition="p1")
    s.insert("s", point(0, {"t": 60, "k": "a"}), arrival=120, partition="p0")
    s.cti("s", 90, arrival=130, partition="p1")
    s.insert("s", point(0, {"t": 70, "k": "a"}), arrival=140, partition="p0")
    bindings = [Binding("s", None, ("t", "k"), ordered(late_arrival_tolerance=TICK * 100))]
    r = run_reference(s, bindings, Input("s"), POINT, stop=False)
    assert ctis(r) == [0, 20, 40]
    assert r.keyed_ctis["s"] == [
        ((120, 0, 1, 0, 1), "k", "a", 40),
        ((140, 0, 2, 0, 1), "k", "a", 70),
    ]
    # p0: MIN -> 0, 0 -> 20, 20 -> 40; p1: MIN -> 10. The keyed rows add nothing.
    assert r.counts["s"]["ctis_generated"] == 4
    assert r.counts["s"]["ctis_explicit"] == 2 and r.counts["s"]["ctis_ignored"] == 0


def test_null_keys_and_watermarks_that_do_not_rise_make_no_keyed_cti():
    # late 100: input CTI arrival - 100 = -90, -89, -88, -87.
    #   (10, None): a null key: no keyed CTI.
    #   (20, a): wm(a) 20, the first: v = max(-89, 20) = 20.
    #   (15, a): below wm 20 -> adjusted to 20; wm stays 20: no keyed CTI.
    #   (30, a): wm 30: v = 30.
    events = [(10, None, 10), (20, "a", 11), (15, "a", 12), (30, "a", 13)]
    r = run(Input("s"), events=events, late_arrival_tolerance=TICK * 100, flush_on_stop=False)
    assert ctis(r) == [-90, -89, -88, -87]
    assert r.keyed_ctis["s"] == [(at(11, 1), "k", "a", 20), (at(13, 3), "k", "a", 30)]


def test_a_key_seen_in_two_partitions_takes_the_smaller_of_their_bounds():
    # late 100; a in both partitions.
    #   arr 100 p1 (40, a): p1 CTI 0; input min(-inf, 0) = -inf; v = -inf (p0): none.
    #   arr 101 p0 (60, a): p0 CTI 1; input min(1, 0) = 0.
    #       v = min(max(1, 60), max(0, 40)) = 40: emitted.
    #   arr 102 p0 (70, a): p0 CTI 2; input still 0. v = min(max(2, 70), max(0, 40)) = 40: not
    #       above a's last keyed CTI 40: none.
    #   arr 103 p1 (45, a): p1 CTI 3; input min(2, 3) = 2.
    #       v = min(max(2, 70), max(3, 45)) = 45: emitted.
    s = EventScript().declare("s", "p0", "p1")
    s.insert("s", point(0, {"t": 40, "k": "a"}), arrival=100, partition="p1")
    s.insert("s", point(0, {"t": 60, "k": "a"}), arrival=101, partition="p0")
    s.insert("s", point(0, {"t": 70, "k": "a"}), arrival=102, partition="p0")
    s.insert("s", point(0, {"t": 45, "k": "a"}), arrival=103, partition="p1")
    bindings = [Binding("s", None, ("t", "k"), ordered(late_arrival_tolerance=TICK * 100))]
    r = run_reference(s, bindings, Input("s"), POINT, stop=False)
    assert ctis(r) == [0, 2]
    assert r.keyed_ctis["s"] == [
        ((101, 0, 0, 0, 1), "k", "a", 40),
        ((103, 0, 1, 1, 1), "k", "a", 45),
    ]


def test_keyed_ctis_come_only_at_events_that_raise_the_keys_watermark():
    # late 100; a only in p0; an explicit CTI 30 on p1 holds a's keyed CTI back.
    #   arr 100 p0 (50, a): p0 CTI 0; input -inf; v = min(max(0, 50), -inf) = -inf: none.
    #   arr 101 p1 CTI 30: input min(0, 30) = 0; not an event: no keyed CTI.
    #   arr 102 p0 (40, a): below wm 50 -> 50, wm stays 50: no keyed CTI, although
    #       min(max(2, 50), max(30, -inf)) = 30 is above the input's CTI min(2, 30) = 2.
    #   arr 103 p0 (60, a): wm 60; input min(3, 30) = 3; v = min(max(3, 60), 30) = 30.
    s = EventScript().declare("s", "p0", "p1")
    s.insert("s", point(0, {"t": 50, "k": "a"}), arrival=100, partition="p0")
    s.cti("s", 30, arrival=101, partition="p1")
    s.insert("s", point(0, {"t": 40, "k": "a"}), arrival=102, partition="p0")
    s.insert("s", point(0, {"t": 60, "k": "a"}), arrival=103, partition="p0")
    bindings = [Binding("s", None, ("t", "k"), ordered(late_arrival_tolerance=TICK * 100))]
    r = run_reference(s, bindings, Input("s"), POINT, stop=False)
    assert ctis(r) == [0, 2, 3]
    assert [e.start for e in r.ingress["s"] if not e.is_cti] == [50, 50, 60]
    assert r.keyed_ctis["s"] == [((103, 0, 2, 0, 1), "k", "a", 30)]


def test_inputs_without_over_and_importers_have_no_keyed_ctis():
    # Without over the watermark (max seen, tolerance 0) is the CTI: 10, 11, 25; (12, b) is out
    # of order -> 25; 41; (23, b) -> 41; 52; +inf. Egress (points, sorted by start then payload):
    #   cti 10 | a10, cti 11 | b11, cti 25 | (25, t=12 b), (25, t=25 a), cti 41
    #   | (41, t=23 b), (41, t=41 a), cti 52 | a52, cti +inf
    s = script(LAGGING)
    bindings = [
        Binding("s", None, ("t", "k"), ordered(over=None)),
        Binding("imp", AdvanceTimeSettings(None, AdvanceTimeImportSettings("s")), ("t", "k")),
    ]
    r = run_reference(s, bindings, Input("s"), POINT)
    assert r.keyed_ctis == {"s": [], "imp": []}
    assert r.root_keyed_ctis == []
    assert r.output == [
        cti(10),
        p(10, "a"),
        cti(11),
        p(11, "b"),
        cti(25),
        point(25, {"t": 12, "k": "b"}),
        p(25, "a"),
        cti(41),
        point(41, {"t": 23, "k": "b"}),
        p(41, "a"),
        cti(52),
        p(52, "a"),
        cti(MAX_TIME),
    ]
    # An importer of a keyed input gets its global CTIs only.
    keyed_run = run_reference(
        s, [Binding("s", None, ("t", "k"), ordered()), bindings[1]], Input("imp"), POINT
    )
    assert keyed_run.keyed_ctis == {"s": INGRESS_KEYED, "imp": []}
    assert ctis(keyed_run, "imp") == [-10, -9, -8, -7, -6, 10, 30, MAX_TIME]


# -- egress ---------------------------------------------------------------------------------------
def test_egress_releases_a_keys_items_at_its_keyed_cti_and_delivers_no_keyed_cti():
    # Pending points are released by the first CTI (global, or keyed for their key) above them:
    #   0: a10, cti -10 | (a, 10) releases nothing (10 < 10 is false)
    #   1: b11, cti -9  | (b, 11) nothing
    #   2: a25, cti -8  | (a, 25) releases a10
    #   3: b12, cti -7  | (b, 12) releases b11
    #   4: a41, cti -6  | (a, 41) releases a25
    #   5: b23, cti 10 releases nothing | (b, 23) releases b12
    #   6: a52, cti 30 releases b23 (a41 is not below 30) | (a, 52) releases a41
    #   stop: cti +inf releases a52
    r = run(Input("s"))
    assert r.root_keyed_ctis == INGRESS_KEYED
    assert r.output == [
        cti(-10),
        cti(-9),
        cti(-8),
        p(10, "a"),
        cti(-7),
        p(11, "b"),
        cti(-6),
        p(25, "a"),
        cti(10),
        p(12, "b"),
        p(23, "b"),
        cti(30),
        p(41, "a"),
        p(52, "a"),
        cti(MAX_TIME),
    ]


#: The lagging script's points released by global CTIs only (no keyed CTI reaches egress):
#: nothing is below -10 ... 10; cti 30 releases a10 b11 b12 b23 a25; +inf releases a41 a52.
MERGED_POINTS = [
    cti(-10),
    cti(-9),
    cti(-8),
    cti(-7),
    cti(-6),
    cti(10),
    p(10, "a"),
    p(11, "b"),
    p(12, "b"),
    p(23, "b"),
    p(25, "a"),
    cti(30),
    p(41, "a"),
    p(52, "a"),
    cti(MAX_TIME),
]


def test_merge_substreams_drops_keyed_ctis():
    r = run(MergeSubstreams(Input("s")))
    assert r.keyed_ctis == {"s": INGRESS_KEYED}  # ingress still makes them
    assert r.root_keyed_ctis == []
    assert r.output == MERGED_POINTS


# -- operators ------------------------------------------------------------------------------------
def test_where_keeps_every_keyed_cti_and_select_passes_them():
    # where k == "b": a's keyed rows stay (they release nothing: no a event passes).
    #   3: b12, cti -7 | (b, 12) releases b11;  5: b23, cti 10 | (b, 23) releases b12
    #   6: cti 30 releases b23;  stop: cti +inf.
    r = run(Where(Input("s"), lambda q: q["k"] == "b"))
    assert r.root_keyed_ctis == INGRESS_KEYED
    assert r.output == [
        cti(-10),
        cti(-9),
        cti(-8),
        cti(-7),
        p(11, "b"),
        cti(-6),
        cti(10),
        p(12, "b"),
        p(23, "b"),
        cti(30),
        cti(MAX_TIME),
    ]
    selected = run(Select(Input("s"), lambda q: {"k": q["k"], "t": q["t"]}))
    assert selected.root_keyed_ctis == INGRESS_KEYED


def test_shift_event_time_moves_keyed_ctis():
    # +5: global CTIs -5 -4 -3 -2 -1 15 35 +inf; each keyed c + 5 stays above the global CTI
    # emitted before it and the key's previous keyed CTI.
    r = run(ShiftEventTime(Input("s"), 5))
    assert r.root_keyed_ctis == keyed(
        (10, 0, "a", 15),
        (11, 1, "b", 16),
        (12, 2, "a", 30),
        (13, 3, "b", 17),
        (14, 4, "a", 46),
        (30, 5, "b", 28),
        (50, 6, "a", 57),
    )
    assert [e.start for e in r.output if e.is_cti] == [-5, -4, -3, -2, -1, 15, 35, MAX_TIME]


def test_alter_event_lifetime_emits_a_moved_keyed_cti_only_when_it_rises():
    # start_fn floors to 10: global -10 (then -9..-6 -> -10: no rise), 10, 30, +inf.
    # keyed: a 10 -> 10; b 11 -> 10; a 25 -> 20; b 12 -> 10, not above b's 10: not emitted;
    # a 41 -> 40; b 23 -> 20 (above the global 10 emitted at that position first); a 52 -> 50.
    r = run(AlterEventLifetime(Input("s"), lambda t: t // 10 * 10, 1))
    assert r.root_keyed_ctis == keyed(
        (10, 0, "a", 10),
        (11, 1, "b", 10),
        (12, 2, "a", 20),
        (14, 4, "a", 40),
        (30, 5, "b", 20),
        (50, 6, "a", 50),
    )
    assert [e.start for e in r.output if e.is_cti] == [-10, 10, 30, MAX_TIME]


#: Two events: (30, a) at arrival 10 (input CTI -10, keyed (a, 30)); (15, b) at arrival 32
#: (input CTI 12, keyed (b, 15): b's first, above 12).
JUST_ABOVE = [(30, "a", 10), (15, "b", 32)]


def test_a_moved_keyed_cti_not_above_the_global_output_cti_is_not_emitted():
    # floor to 10: cti -10; (a, 30) -> 30; cti 12 -> 10; (b, 15) -> 10: not above the global 10
    # emitted just before it (b has no keyed CTI yet): not emitted.
    r = run(AlterEventLifetime(Input("s"), lambda t: t // 10 * 10, 1), events=JUST_ABOVE)
    assert r.keyed_ctis["s"] == [(at(10, 0), "k", "a", 30), (at(32, 1), "k", "b", 15)]
    assert r.root_keyed_ctis == [(at(10, 0), "k", "a", 30)]
    assert [e.start for e in r.output if e.is_cti] == [-10, 10, MAX_TIME]


def test_union_and_join_on_the_key_keep_keyed_ctis_snapshot_drops_them():
    alone = run(Input("s"))
    # One input: each key's CTI in the union is that input's, so the keyed rows are the same.
    union = run(Union((Input("s"),)))
    assert union.root_keyed_ctis == alone.keyed_ctis["s"] != []
    assert union.output == alone.output
    # A self-join on k: at each keyed row both sides have the same CTI for the key (the two
    # rows at one position count together), so the join's keyed CTIs are the input's too.
    join = run(Join(Input("s"), Input("s"), ("k",)))
    assert join.root_keyed_ctis == alone.keyed_ctis["s"]
    merged = MergeSubstreams(Input("s"))
    assert join.output != run(Join(merged, merged, ("k",))).output
    # Not on the key, or from a side with a join below it: dropped at that side. With the left
    # side's dropped, a key's CTI is min(left CTI, right's) = the global one: nothing above it.
    assert run(Join(Input("s"), Input("s"), ("t",))).root_keyed_ctis == []
    below = Join(Input("s"), Input("s"), ("k",))
    assert run(Join(below, Input("s"), ("k",))).root_keyed_ctis == []
    snapshot = run(Snapshot(Input("s"), ("k",), (("count", len),)), INTERVAL)
    assert snapshot.root_keyed_ctis == []
    assert snapshot.output == run(Snapshot(merged, ("k",), (("count", len),)), INTERVAL).output


# -- windows --------------------------------------------------------------------------------------
def test_a_window_grouped_by_the_key_completes_a_keys_windows_at_its_keyed_cti():
    # Tumbling 10, grouped by k, count. last = latest global input CTI, last_a / last_b keyed.
    #   0: cti -10: nothing complete; out cti pulled(-10) = -10.
    #      (a, 10) > max(-10, -inf): a's windows ending <= 10: none; last_a 10; out (a, 10).
    #   1: cti -9: pulled -10, no rise. (b, 11): none; last_b 11; out (b, pulled 11 = 10).
    #   2: cti -8: no rise. (a, 25) > max(-8, 10): a's [10,20) (a10) -> a:1; last_a 25;
    #      out (a, 20).
    #   3: cti -7. (b, 12) > max(-7, 11): nothing ends <= 12; last_b 12; pulled 10 not above
    #      b's 10: no output.
    #   4: cti -6. (a, 41) > max(-6, 25): a's [20,30) (a25) -> a:1; last_a 41; out (a, 40).
    #   5: cti 10: nothing ends in (-6, 10]; out cti 10.
    #      (b, 23) > max(10, 12): b's [10,20) (b11, b12) -> b:2; last_b 23; out (b, 20).
    #   6: cti 30: [10,20): a done through 41, b through 23: nothing; [20,30): a done, b (b23)
    #      -> b:1; out cti 30. (a, 52) > max(30, 41): a's [40,50) (a41) -> a:1; out (a, 50).
    #   stop: +inf, latest 52: [40,50) a done through 52; [50,60) (a52) -> a:1; out cti +inf.
    # Egress (intervals, due at their start): a's results leave at a's keyed CTIs, before the
    # global CTI 10; b's [20,30) waits for the global CTI 30.
    r = run(tumbling(Input("s")), INTERVAL)
    assert r.root_keyed_ctis == keyed(
        (10, 0, "a", 10),
        (11, 1, "b", 10),
        (12, 2, "a", 20),
        (14, 4, "a", 40),
        (30, 5, "b", 20),
        (50, 6, "a", 50),
    )
    assert r.output == [
        cti(-10),
        counted(10, 20, "a", 1),
        counted(20, 30, "a", 1),
        cti(10),
        counted(10, 20, "b", 2),
        counted(20, 30, "b", 1),
        cti(30),
        counted(40, 50, "a", 1),
        counted(50, 60, "a", 1),
        cti(MAX_TIME),
    ]


#: The lagging script's tumbling counts with global CTIs only: cti -10; cti 10 (nothing ends
#: by 10); cti 30 completes [10,20) a:1 b:2 and [20,30) a:1 b:1; +inf (latest 52) [40,50) and
#: [50,60).
MERGED_WINDOWS = [
    cti(-10),
    cti(10),
    counted(10, 20, "a", 1),
    counted(10, 20, "b", 2),
    counted(20, 30, "a", 1),
    counted(20, 30, "b", 1),
    cti(30),
    counted(40, 50, "a", 1),
    counted(50, 60, "a", 1),
    cti(MAX_TIME),
]


def test_a_windows_keyed_output_cti_must_be_above_its_global_output_cti():
    # Tumbling 10 by k: cti -10 -> -10; (a, 30): nothing ends <= 30 for a ([30,40)); out
    # (a, 30). cti 12: nothing ends in (-10, 12]; out pulled 10. (b, 15) > max(12, -inf):
    # nothing of b ends <= 15; pulled(15) = 10 is not above the global 10: no output.
    # Stop: +inf (latest 30): [10,20) b:1, [30,40) a:1.
    r = run(tumbling(Input("s")), INTERVAL, events=JUST_ABOVE)
    assert r.root_keyed_ctis == [(at(10, 0), "k", "a", 30)]
    assert r.output == [
        cti(-10),
        cti(10),
        counted(10, 20, "b", 1),
        counted(30, 40, "a", 1),
        cti(MAX_TIME),
    ]


def test_a_window_after_merge_substreams_waits_for_the_global_cti():
    r = run(tumbling(MergeSubstreams(Input("s"))), INTERVAL)
    assert r.root_keyed_ctis == []
    assert r.output == MERGED_WINDOWS


def test_a_window_not_grouped_by_the_key_drops_keyed_ctis():
    # keys (): one group; a's keyed CTIs would complete b's events too, so they are dropped.
    # Global only: cti -10, cti 10, cti 30 completes [10,20) (3 events) and [20,30) (2);
    # +inf: [40,50) and [50,60).
    r = run(tumbling(Input("s"), keys=()), INTERVAL)
    assert r.root_keyed_ctis == []
    assert r.output == [
        cti(-10),
        cti(10),
        interval(10, 20, {"count": 3}),
        interval(20, 30, {"count": 2}),
        cti(30),
        interval(40, 50, {"count": 1}),
        interval(50, 60, {"count": 1}),
        cti(MAX_TIME),
    ]


def test_a_hopping_window_grouped_by_the_key_with_keyed_ctis():
    # size 20, hop 10: a point at t is in the windows starting at floor(t/10)*10 - 10 and
    # floor(t/10)*10. pulled(c) = the smallest ws with ws + 20 > c = floor((c-20)/10)*10 + 10.
    #   0: cti -10 -> out pulled(-10) = -20. (a, 10): windows ending <= 10: [-10,10)? a10 is not
    #      in it (it ends at 10). None. out (a, pulled 10 = 0).
    #   1: cti -9: pulled -20, no rise. (b, 11): none; out (b, 0).
    #   2: cti -8. (a, 25): a's windows ending <= 25: [0,20) (a10) -> a:1; out (a, 10).
    #   3: cti -7. (b, 12): none ending <= 12 with b (b11 in [0,20), [10,30)); pulled 0 not
    #      above b's 0.
    #   4: cti -6. (a, 41): a's windows ending in (25, 41]: [10,30) (a10, a25) -> a:2,
    #      [20,40) (a25) -> a:1; out (a, 30).
    #   5: cti 10 -> pulled 0 (nothing ends <= 10); out cti 0. (b, 23): b's windows ending in
    #      (12, 23]: [0,20) (b11, b12) -> b:2; out (b, 10).
    #   6: cti 30: windows ending in (10, 30]: [0,20) a and b done; [10,30): a done (41), b
    #      (b11, b12, b23) -> b:3; out cti pulled(30) = 20. (a, 52) > max(30, 41): a's windows
    #      ending in (41, 52]: [30,50) (a41) -> a:1; out (a, 40).
    #   stop: +inf, latest 52; windows starting <= 52 ending above 30: [20,40) a done (52),
    #      b (b23) -> b:1; [30,50) a done; [40,60) (a41, a52) -> a:2; [50,70) (a52) -> a:1.
    r = run(Window(Input("s"), 20, 10, ("k",), (("count", len),)), INTERVAL)
    assert r.root_keyed_ctis == keyed(
        (10, 0, "a", 0),
        (11, 1, "b", 0),
        (12, 2, "a", 10),
        (14, 4, "a", 30),
        (30, 5, "b", 10),
        (50, 6, "a", 40),
    )
    # Egress: (a, 10) releases [0,20)a; (a, 30) releases [10,30)a and [20,40)a; cti 0 nothing;
    # (b, 10) releases [0,20)b; cti 20 releases [10,30)b; (a, 40) releases [30,50)a; +inf the
    # rest, sorted by start.
    assert r.output == [
        cti(-20),
        counted(0, 20, "a", 1),
        counted(10, 30, "a", 2),
        counted(20, 40, "a", 1),
        cti(0),
        counted(0, 20, "b", 2),
        counted(10, 30, "b", 3),
        cti(20),
        interval(30, 50, {"k": "a", "count": 1}),
        interval(20, 40, {"k": "b", "count": 1}),
        interval(40, 60, {"k": "a", "count": 2}),
        interval(50, 70, {"k": "a", "count": 1}),
        cti(MAX_TIME),
    ]
