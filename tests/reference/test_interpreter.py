"""Hand-checked timelines for the reference interpreter, one rule per test.

Every expected value here is derived by hand from semantics.md §1-§6 and docs/decisions.md; the
comments show the derivation. Times are plain ticks unless a test says otherwise.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from ctistream.adapters.memory import EventScript
from ctistream.engine.errors import CtiViolationError, MalformedRecordError
from ctistream.engine.events import (
    EdgeType,
    Event,
    EventKind,
    EventShape,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from ctistream.engine.settings import (
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
)
from ctistream.engine.temporal import MAX_TIME, TICK

from . import Binding, Input, Result, Select, Union, Where, run_reference

DROP = AdvanceTimePolicy.DROP
ADJUST = AdvanceTimePolicy.ADJUST
POINT = EventShape.POINT
INTERVAL = EventShape.INTERVAL
EDGE = EventShape.EDGE
INF = MAX_TIME
S = 1_000_000  # one second in ticks


# -- helpers ----------------------------------------------------------------------------------
def generate(frequency, delay=TICK * 0, flush=False, policy=DROP) -> AdvanceTimeSettings:
    return AdvanceTimeSettings(AdvanceTimeGenerationSettings(frequency, delay, flush), None, policy)


def policy_only(policy: AdvanceTimePolicy) -> AdvanceTimeSettings:
    """A policy with a generation that never fires in these small tests (explicit CTIs drive)."""
    return generate(1_000_000, policy=policy)


def importing(stream: str, policy=DROP) -> AdvanceTimeSettings:
    return AdvanceTimeSettings(None, AdvanceTimeImportSettings(stream), policy)


def run_one(
    script: EventScript,
    settings: AdvanceTimeSettings | None,
    shape: EventShape = POINT,
    *,
    columns: tuple[str, ...] = ("v",),
    plan=None,
    stop: bool = True,
    name: str = "a",
) -> Result:
    return run_reference(
        script, [Binding(name, settings, columns)], plan or Input(name), shape, stop=stop
    )


def empty_end(start: int, payload: dict) -> Event:
    """An END edge row whose lifetime is empty (end == adjusted start)."""
    return Event(EventKind.INSERT, start, start, payload, EdgeType.END)


def v(x) -> dict:
    return {"v": x}


# -- generation (§3.2) ------------------------------------------------------------------------
def test_time_span_generation_matches_the_semantics_example():
    # T = 10 s, delay 0, points at 1, 5, 12, 14, 25, 31 s: periods 0,0,1,1,2,3 -> CTIs 12, 25, 31 s
    script = EventScript()
    for t in (1, 5, 12, 14, 25, 31):
        script.insert("a", point(t * S, v(t)))
    r = run_one(script, generate(timedelta(seconds=10)))
    assert r.ingress["a"] == [
        point(1 * S, v(1)),
        point(5 * S, v(5)),
        point(12 * S, v(12)),
        cti(12 * S),
        point(14 * S, v(14)),
        point(25 * S, v(25)),
        cti(25 * S),
        point(31 * S, v(31)),
        cti(31 * S),
    ]
    assert r.counts["a"]["ctis_generated"] == 3
    # Egress: CTI 12 s releases 1 and 5; 25 s releases 12 and 14; 31 s releases 25.
    assert r.output == [
        point(1 * S, v(1)),
        point(5 * S, v(5)),
        cti(12 * S),
        point(12 * S, v(12)),
        point(14 * S, v(14)),
        cti(25 * S),
        point(25 * S, v(25)),
        cti(31 * S),
    ]


def test_time_span_periods_use_floor_also_for_negative_times():
    # T = 10: floor periods of -15, -11, -5, 3 are -2, -2, -1, 0 -> CTIs at -5 and 3.
    # (Truncation would give -1, -1, 0, 0 and only a CTI at -5.)
    script = EventScript()
    for t in (-15, -11, -5, 3):
        script.insert("a", point(t, v(t)))
    r = run_one(script, generate(timedelta(microseconds=10)))
    assert [e for e in r.ingress["a"] if e.is_cti] == [cti(-5), cti(3)]


def test_count_frequency_makes_a_cti_after_every_nth_counted_event_minus_delay():
    # N = 3, delay 5: after the 3rd event max_start = 30 -> 25; after the 6th, 60 -> 55.
    script = EventScript()
    for t in (10, 30, 20, 50, 40, 60, 70):
        script.insert("a", point(t, v(t)))
    r = run_one(script, generate(3, delay=TICK * 5))
    assert r.ingress["a"] == [
        point(10, v(10)),
        point(30, v(30)),
        point(20, v(20)),
        cti(25),
        point(50, v(50)),
        point(40, v(40)),
        point(60, v(60)),
        cti(55),
        point(70, v(70)),
    ]
    assert r.counts["a"]["ctis_generated"] == 2
    assert r.counts["a"]["dropped"] == 0


def test_end_edges_are_not_counted():
    # N = 2: counted are START(10) and START(30) -> CTI 30 right after START(30); the END edges
    # in between do not count, and START(50) is only the 3rd counted event.
    script = EventScript()
    script.insert("a", edge_start(10, v("x")))
    script.insert("a", edge_end(10, 20, v("x")))
    script.insert("a", edge_start(30, v("y")))
    script.insert("a", edge_end(30, 40, v("y")))
    script.insert("a", edge_start(50, v("z")))
    r = run_one(script, generate(2), EDGE)
    assert r.ingress["a"] == [
        edge_start(10, v("x")),
        edge_end(10, 20, v("x")),
        edge_start(30, v("y")),
        cti(30),
        edge_end(30, 40, v("y")),
        edge_start(50, v("z")),
    ]


def test_adjusted_events_count_with_their_original_start():
    # T = 100, ADJUST, explicit CTI 250. Interval [150, 400) is adjusted to [250, 400) but sets
    # the starting period with its original start: floor(150/100) = 1. Point 260 -> period 2 > 1
    # -> candidate 260 > 250 -> CTI 260. (With the adjusted start the period would already be 2.)
    script = EventScript()
    script.cti("a", 250)
    script.insert("a", interval(150, 400, v(1)))
    script.insert("a", point(260, v(2)))
    r = run_one(script, generate(timedelta(microseconds=100), policy=ADJUST), INTERVAL)
    assert r.ingress["a"] == [
        cti(250),
        interval(250, 400, v(1)),
        point(260, v(2)),
        cti(260),
    ]
    assert r.counts["a"]["adjusted"] == 1


def test_dropped_events_still_count():
    # N = 2, DROP, explicit CTI 100: point 50 is dropped but is the 1st counted event; point 120
    # is the 2nd -> CTI max_start 120.
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", point(50, v(1)))
    script.insert("a", point(120, v(2)))
    r = run_one(script, generate(2))
    assert r.ingress["a"] == [cti(100), point(120, v(2)), cti(120)]
    assert r.counts["a"]["dropped"] == 1
    assert r.counts["a"]["ctis_generated"] == 1


def test_a_candidate_not_above_the_current_cti_is_no_cti():
    # N = 1: point 10 -> CTI 10; point 5 is dropped, candidate max(10, 5) = 10 is not > 10;
    # point 10 again does not violate (10 >= 10) and its candidate 10 is not > 10.
    script = EventScript()
    script.insert("a", point(10, v(1)))
    script.insert("a", point(5, v(2)))
    script.insert("a", point(10, v(3)))
    r = run_one(script, generate(1))
    assert r.ingress["a"] == [point(10, v(1)), cti(10), point(10, v(3))]
    assert r.counts["a"]["ctis_generated"] == 1
    assert r.counts["a"]["dropped"] == 1


def test_delay_minus_one_tick_commits_each_point_at_once():
    # N = 1, delay -1 tick: the CTI after point t is t + 1, which releases that point at once:
    # each point is delivered in the same segment as the CTI right after it.
    script = EventScript()
    script.insert("a", point(10, v(1)))
    script.insert("a", point(20, v(2)))
    r = run_one(script, generate(1, delay=-TICK))
    assert r.ingress["a"] == [point(10, v(1)), cti(11), point(20, v(2)), cti(21)]
    assert r.output == [point(10, v(1)), cti(11), point(20, v(2)), cti(21)]


def test_a_candidate_is_clamped_to_plus_infinity():
    # max_start = +inf - 10, delay -100 ticks: max_start - delay overflows int64 -> +inf.
    script = EventScript()
    script.insert("a", point(INF - 10, v(1)))
    r = run_one(script, generate(1, delay=-TICK * 100))
    assert r.ingress["a"] == [point(INF - 10, v(1)), cti(INF)]
    assert r.output == [point(INF - 10, v(1)), cti(INF)]


# -- explicit CTIs (§2, §3.1) -----------------------------------------------------------------
def test_an_explicit_cti_not_above_the_current_one_is_ignored_and_counted():
    # 10 -> CTI 10; 10 (equal) and 5 (lower) are ignored; 20 -> CTI 20.
    script = EventScript()
    for t in (10, 10, 5, 20):
        script.cti("a", t)
    r = run_one(script, None)
    assert r.ingress["a"] == [cti(10), cti(20)]
    assert r.counts["a"] == {
        "events_in": 0,
        "ctis_explicit": 4,
        "ctis_generated": 0,
        "ctis_imported": 0,
        "ctis_ignored": 2,
        "dropped": 0,
        "adjusted": 0,
    }


# -- violations (§3.4) ------------------------------------------------------------------------
def _violating_points_and_intervals() -> EventScript:
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", point(50, v(1)))  # a violating point
    script.insert("a", interval(50, 150, v(2)))  # overlaps the CTI (end 150 > 100)
    script.insert("a", interval(50, 100, v(3)))  # entirely before it (end 100 <= 100)
    script.insert("a", interval(20, 60, v(4)))  # entirely before it
    script.insert("a", point(100, v(5)))  # start == CTI: no violation
    script.cti("a", 200)
    return script


def test_drop_drops_every_violating_point_and_interval():
    r = run_one(_violating_points_and_intervals(), policy_only(DROP), INTERVAL)
    assert r.ingress["a"] == [cti(100), point(100, v(5)), cti(200)]
    assert r.counts["a"]["dropped"] == 4
    assert r.counts["a"]["adjusted"] == 0
    assert r.output == [cti(100), point(100, v(5)), cti(200)]


def test_adjust_moves_an_overlapping_interval_to_the_cti_and_drops_the_rest():
    r = run_one(_violating_points_and_intervals(), policy_only(ADJUST), INTERVAL)
    assert r.ingress["a"] == [cti(100), interval(100, 150, v(2)), point(100, v(5)), cti(200)]
    assert r.counts["a"]["dropped"] == 3
    assert r.counts["a"]["adjusted"] == 1
    # Segment of CTI 200: start 100 for both, then by end: the point [100, 101) first.
    assert r.output == [cti(100), point(100, v(5)), interval(100, 150, v(2)), cti(200)]


def _violating_start_edge() -> EventScript:
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, v("a")))  # violates
    script.insert("a", edge_start(120, v("b")))
    script.insert("a", edge_end(50, 150, v("a")))  # end 150 >= 100: no violation itself
    script.insert("a", edge_end(120, 130, v("b")))
    script.cti("a", 200)
    return script


def test_adjust_moves_a_start_edge_and_its_end_edge_closes_it_from_the_cti():
    r = run_one(_violating_start_edge(), policy_only(ADJUST), EDGE)
    assert r.ingress["a"] == [
        cti(100),
        edge_start(100, v("a")),
        edge_start(120, v("b")),
        edge_end(100, 150, v("a")),  # matched by the original start 50, takes start 100
        edge_end(120, 130, v("b")),
        cti(200),
    ]
    assert r.counts["a"]["adjusted"] == 1
    assert r.counts["a"]["dropped"] == 0
    # One segment at CTI 200: by start, START edge before END edge of the same start.
    assert r.output == [
        cti(100),
        edge_start(100, v("a")),
        edge_end(100, 150, v("a")),
        edge_start(120, v("b")),
        edge_end(120, 130, v("b")),
        cti(200),
    ]


def test_drop_drops_a_start_edge_and_then_its_end_edge():
    r = run_one(_violating_start_edge(), policy_only(DROP), EDGE)
    assert r.ingress["a"] == [
        cti(100),
        edge_start(120, v("b")),
        edge_end(120, 130, v("b")),
        cti(200),
    ]
    assert r.counts["a"]["dropped"] == 2  # the START edge, and the END edge that follows it
    assert r.output == [cti(100), edge_start(120, v("b")), edge_end(120, 130, v("b")), cti(200)]


@pytest.mark.parametrize("policy", [DROP, ADJUST])
def test_a_late_end_edge_closes_its_open_start_edge_at_the_cti(policy):
    # §3.4: START(10) is kept (no CTI yet). At CTI 100, END(10, 50) breaks it (50 < 100); its
    # START edge is open, so it is not dropped (the event would live forever): it closes the
    # START edge at the CTI, [10, 100), and counts as adjusted, under DROP and ADJUST alike.
    script = EventScript()
    script.insert("a", edge_start(10, v("a")))
    script.cti("a", 100)
    script.insert("a", edge_end(10, 50, v("a")))
    script.cti("a", 200)
    r = run_one(script, policy_only(policy), EDGE)
    assert r.ingress["a"] == [
        edge_start(10, v("a")),
        cti(100),
        edge_end(10, 100, v("a")),
        cti(200),
    ]
    assert (r.counts["a"]["adjusted"], r.counts["a"]["dropped"]) == (1, 0)
    # EDGE consumer: the START edge at CTI 100 (10 < 100); its END edge at 100 is committed by
    # CTI 200 (100 < 200).
    assert r.output == [edge_start(10, v("a")), cti(100), edge_end(10, 100, v("a")), cti(200)]


def test_a_late_end_edge_of_an_adjusted_start_edge_ends_at_the_cti_then_in_force():
    # ADJUST: START(50) at CTI 100 -> [100, +inf). CTI 150. END(50, 120): 120 < 150 breaks it,
    # closes the START edge at 150: [100, 150). Two adjustments (the START and the END edge).
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, v("a")))
    script.cti("a", 150)
    script.insert("a", edge_end(50, 120, v("a")))
    script.cti("a", 200)
    r = run_one(script, policy_only(ADJUST), INTERVAL)
    assert [e for e in r.ingress["a"] if not e.is_cti] == [
        edge_start(100, v("a")),
        edge_end(100, 150, v("a")),
    ]
    assert (r.counts["a"]["adjusted"], r.counts["a"]["dropped"]) == (2, 0)
    assert r.output == [cti(100), cti(150), interval(100, 150, v("a")), cti(200)]


@pytest.mark.parametrize("shape", [POINT, INTERVAL, EDGE])
def test_a_late_end_edge_of_a_start_edge_adjusted_to_the_same_cti_empties_it(shape):
    # ADJUST: START(50) at CTI 100 -> [100, +inf); END(50, 70) while the CTI is still 100:
    # 70 < 100 closes it at 100, [100, 100): empty, so nothing is released for it whatever the
    # consumer's shape. Both edges count as adjusted, neither as dropped.
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, v("a")))
    script.insert("a", edge_end(50, 70, v("a")))
    script.cti("a", 200)
    r = run_one(script, policy_only(ADJUST), shape)
    assert r.ingress["a"] == [cti(100), edge_start(100, v("a")), empty_end(100, v("a")), cti(200)]
    assert (r.counts["a"]["adjusted"], r.counts["a"]["dropped"]) == (2, 0)
    assert r.output == [cti(100), cti(200)]


def test_a_late_end_edge_whose_start_edge_was_dropped_is_dropped_too():
    # DROP: START(50) at CTI 100 is dropped; END(50, 70) breaks the CTI and closes a START edge
    # that was dropped: dropped as well (two drops, no adjustment).
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, v("a")))
    script.insert("a", edge_end(50, 70, v("a")))
    r = run_one(script, policy_only(DROP), EDGE)
    assert [e for e in r.ingress["a"] if not e.is_cti] == []
    assert (r.counts["a"]["adjusted"], r.counts["a"]["dropped"]) == (0, 2)


@pytest.mark.parametrize("shape", [POINT, INTERVAL, EDGE])
def test_an_event_whose_lifetime_becomes_empty_is_never_released(shape):
    # ADJUST: START(50) -> START(100); END(50, 100) does not violate (100 >= 100) and closes it
    # to [100, 100): empty, so no consumer gets anything for it.
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, v("a")))
    script.insert("a", edge_end(50, 100, v("a")))
    script.cti("a", 200)
    r = run_one(script, policy_only(ADJUST), shape)
    assert r.ingress["a"] == [cti(100), edge_start(100, v("a")), empty_end(100, v("a")), cti(200)]
    assert r.output == [cti(100), cti(200)]


def test_a_violation_without_policy_fails_naming_input_partition_offset_event_and_cti():
    script = EventScript()
    script.insert("a", point(5, v(1)))  # offset 0
    script.cti("a", 10)  # offset 1
    script.insert("a", point(20, v(2)))  # offset 2
    script.cti("a", 30)  # offset 3
    script.insert("a", point(25, v(3)))  # offset 4: 25 < 30
    with pytest.raises(CtiViolationError) as info:
        run_one(script, None)
    err = info.value
    assert (err.input_name, err.partition, err.offset) == ("a", "0", 4)
    assert "point(1970-01-01T00:00:00.000025+00:00, {'v': 3})" in str(err)
    assert "(30 ticks)" in str(err)
    # Everything before it is delivered: CTI 10 releases point 5, CTI 30 releases point 20.
    assert err.partial_result.output == [point(5, v(1)), cti(10), point(20, v(2)), cti(30)]


def test_an_end_edge_violation_without_policy_fails():
    script = EventScript()
    script.insert("a", edge_start(10, v("a")))
    script.cti("a", 100)
    script.insert("a", edge_end(10, 50, v("a")))  # offset 2, end 50 < 100
    with pytest.raises(CtiViolationError) as info:
        run_one(script, None, EDGE)
    assert (info.value.input_name, info.value.partition, info.value.offset) == ("a", "0", 2)


def test_a_start_edge_violation_without_policy_fails():
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(10, v("a")))
    with pytest.raises(CtiViolationError) as info:
        run_one(script, None, EDGE)
    assert info.value.offset == 1


def test_an_end_edge_without_an_open_start_edge_is_malformed():
    script = EventScript()
    script.insert("edges", edge_start(10, v("x")))
    script.insert("edges", edge_end(10, 20, v("y")))  # offset 1: payload differs, no match
    with pytest.raises(MalformedRecordError, match=r"'edges'.*partition '0', offset 1"):
        run_one(script, generate(1), EDGE, name="edges")


def test_a_late_end_edge_with_no_open_start_edge_is_malformed():
    # §3.4: with a policy a late END edge is matched like any other (it closes its START edge
    # at the CTI), so one that closes nothing is malformed input, as when it is on time.
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_end(10, 50, v("x")))  # offset 1
    with pytest.raises(MalformedRecordError, match=r"'a'.*partition '0', offset 1"):
        run_one(script, policy_only(DROP), EDGE)


def test_end_edges_match_the_oldest_open_identical_start_edge():
    # Two identical START edges (the first adjusted, ADJUST): END edges close them in FIFO order.
    script = EventScript()
    script.cti("a", 100)
    script.insert("a", edge_start(50, v("a")))  # adjusted to 100
    script.cti("a", 120)
    script.insert("a", edge_start(50, v("a")))  # adjusted to 120
    script.insert("a", edge_end(50, 150, v("a")))  # closes the first: [100, 150)
    script.insert("a", edge_end(50, 160, v("a")))  # closes the second: [120, 160)
    r = run_one(script, policy_only(ADJUST), EDGE)
    assert [e for e in r.ingress["a"] if e.edge is EdgeType.END] == [
        edge_end(100, 150, v("a")),
        edge_end(120, 160, v("a")),
    ]


# -- partitions (§3.5) ------------------------------------------------------------------------
def test_the_input_cti_is_the_minimum_over_its_partitions():
    script = EventScript()
    script.cti("a", 10, partition="p0")  # p0 10, p1 -inf -> -inf
    script.cti("a", 5, partition="p1")  # min(10, 5) = 5
    script.cti("a", 20, partition="p1")  # min(10, 20) = 10
    script.cti("a", 30, partition="p0")  # min(30, 20) = 20
    r = run_one(script, None)
    assert r.ingress["a"] == [cti(5), cti(10), cti(20)]


def test_a_declared_partition_without_items_holds_the_input_at_minus_infinity():
    script = EventScript().declare("a", "0", "1")
    script.insert("a", point(10, v(1)), partition="0")
    script.insert("a", point(20, v(2)), partition="0")
    r = run_one(script, generate(1, flush=True), stop=False)
    # Partition 0 is at CTI 20 but partition 1 has none: the input stays at -inf.
    assert r.ingress["a"] == [point(10, v(1)), point(20, v(2))]
    assert r.output == []


def test_end_of_input_flushes_each_partition_at_its_own_position():
    # end() puts an END item in each partition: partition 1's at offset 0, partition 0's at
    # offset 2. Position order (arrival, binding, offset, partition) takes partition 1's first:
    # min(20, +inf) = 20 is emitted there, then +inf at partition 0's END.
    script = EventScript().declare("a", "0", "1")
    script.insert("a", point(10, v(1)), partition="0")
    script.insert("a", point(20, v(2)), partition="0")
    script.end("a")
    r = run_one(script, generate(1, flush=True))
    assert r.ingress["a"] == [point(10, v(1)), point(20, v(2)), cti(20), cti(INF)]
    assert r.output == [point(10, v(1)), cti(20), point(20, v(2)), cti(INF)]
    # Partition 0: CTIs 10, 20 and its flush; partition 1: its flush.
    assert r.counts["a"]["ctis_generated"] == 4


def test_the_stop_flush_raises_all_partitions_at_one_position():
    # p0 at 5, p1 at 10 -> input 5. At stop both go to +inf at one position: only +inf is
    # emitted (partition by partition would have emitted 10 first).
    script = EventScript()
    script.insert("a", point(5, v(1)), partition="p0")
    script.insert("a", point(10, v(2)), partition="p1")
    r = run_one(script, generate(1, flush=True))
    assert r.ingress["a"] == [point(5, v(1)), point(10, v(2)), cti(5), cti(INF)]


def test_items_at_one_arrival_are_ordered_by_offset_before_partition():
    # At arrival 1: p1's item (offset 0) comes before p0's item (offset 1).
    script = EventScript()
    script.cti("a", 5, partition="p0", arrival=0)  # p0 5, p1 -inf
    script.cti("a", 7, partition="p0", arrival=1)  # offset 1
    script.cti("a", 6, partition="p1", arrival=1)  # offset 0: first -> min(5, 6) = 5
    r = run_one(script, None)
    # then p0 -> 7: min(7, 6) = 6
    assert r.ingress["a"] == [cti(5), cti(6)]


# -- import (§3.3) ----------------------------------------------------------------------------
def test_a_slow_input_importing_a_fast_ones_ctis_is_adjusted_and_releases_the_union():
    bindings = [
        Binding("fast", generate(1), ("v",)),
        Binding("slow", importing("fast", ADJUST), ("v",)),
    ]
    script = EventScript()
    script.insert("fast", point(10, v(1)))  # fast CTI 10, imported by slow at the same place
    script.insert("slow", interval(5, 30, v(2)))  # 5 < 10: adjusted to [10, 30)
    script.insert("fast", point(20, v(3)))  # CTI 20 for both
    script.insert("slow", interval(15, 18, v(4)))  # entirely before 20: dropped
    script.insert("fast", point(25, v(5)))  # CTI 25 for both
    script.insert("slow", interval(25, 40, v(6)))  # fine; never released (no later CTI)
    r = run_reference(script, bindings, Union((Input("fast"), Input("slow"))), INTERVAL)
    assert r.ingress["fast"] == [
        point(10, v(1)),
        cti(10),
        point(20, v(3)),
        cti(20),
        point(25, v(5)),
        cti(25),
    ]
    assert r.ingress["slow"] == [
        cti(10),
        interval(10, 30, v(2)),
        cti(20),
        cti(25),
        interval(25, 40, v(6)),
    ]
    assert r.counts["slow"] == {
        "events_in": 3,
        "ctis_explicit": 0,
        "ctis_generated": 0,
        "ctis_imported": 3,
        "ctis_ignored": 0,
        "dropped": 1,
        "adjusted": 1,
    }
    # Union CTI = min(fast, slow) = 10, 20, 25.
    assert r.output == [
        cti(10),
        point(10, v(1)),
        interval(10, 30, v(2)),
        cti(20),
        point(20, v(3)),
        cti(25),
    ]


@pytest.mark.parametrize(
    ("order", "expected_slow"),
    [
        # fast is binding 0: its CTI 10 (at its event's position) comes before slow's event
        (("fast", "slow"), [cti(10), interval(10, 30, v(2))]),
        # slow is binding 0: its event comes first and meets no CTI
        (("slow", "fast"), [interval(5, 30, v(2)), cti(10)]),
    ],
)
def test_an_imported_cti_sits_at_the_position_of_the_cti_it_imports(order, expected_slow):
    settings = {"fast": generate(1), "slow": importing("fast", ADJUST)}
    bindings = [Binding(n, settings[n], ("v",)) for n in order]
    script = EventScript()
    script.insert("fast", point(10, v(1)), arrival=1)
    script.insert("slow", interval(5, 30, v(2)), arrival=1)
    r = run_reference(script, bindings, Input("slow"), INTERVAL)
    assert r.ingress["slow"] == expected_slow


def test_imports_chain_and_apply_to_every_partition_of_the_importer():
    # c imports b imports a. b has a declared partition without items: the imported CTI raises
    # it too. b's own CTI 50 on partition "0" leaves b at min(50, 10) = 10.
    bindings = [
        Binding("c", importing("b"), ("v",)),
        Binding("b", importing("a"), ("v",)),
        Binding("a", generate(1), ("v",)),
    ]
    script = EventScript().declare("b", "0", "1")
    script.insert("a", point(10, v(1)))
    script.cti("b", 50, partition="0")
    script.insert("a", point(60, v(2)))
    r = run_reference(script, bindings, Input("c"), POINT)
    assert r.ingress["b"] == [cti(10), cti(60)]
    assert r.ingress["c"] == [cti(10), cti(60)]
    assert r.counts["b"]["ctis_imported"] == 2
    assert r.counts["b"]["ctis_explicit"] == 1
    assert r.counts["c"]["ctis_imported"] == 2


def test_import_of_an_unbound_input_is_refused():
    bindings = [Binding("slow", importing("nope"), ("v",))]
    with pytest.raises(ValueError, match="'nope'"):
        run_reference(EventScript(), bindings, Input("slow"), POINT)


@pytest.mark.parametrize(
    "bindings",
    [
        [Binding("a", importing("b"), ("v",)), Binding("b", importing("a"), ("v",))],
        [Binding("a", importing("a"), ("v",))],
    ],
)
def test_an_import_cycle_is_refused(bindings):
    with pytest.raises(ValueError, match="import cycle"):
        run_reference(EventScript(), bindings, Input("a"), POINT)


def test_bindings_and_plan_are_checked():
    with pytest.raises(ValueError, match="more than once"):
        run_reference(
            EventScript(), [Binding("a", None, ()), Binding("a", None, ())], Input("a"), POINT
        )
    with pytest.raises(ValueError, match="'b'"):
        run_reference(EventScript(), [Binding("a", None, ())], Input("b"), POINT)


# -- flush on stop (§3.2) ---------------------------------------------------------------------
def _two_points() -> EventScript:
    script = EventScript()
    script.insert("a", point(10, v(1)))
    script.insert("a", point(20, v(2)))
    return script


def test_flush_on_stop_at_the_end_of_the_input():
    script = _two_points().end("a")
    r = run_one(script, generate(1, flush=True), stop=False)
    assert r.ingress["a"] == [point(10, v(1)), cti(10), point(20, v(2)), cti(20), cti(INF)]
    assert r.output == [cti(10), point(10, v(1)), cti(20), point(20, v(2)), cti(INF)]


def test_no_flush_at_the_end_without_flush_on_stop():
    script = _two_points().end("a")
    r = run_one(script, generate(1, flush=False))
    # point 20 is never released: no CTI above it.
    assert r.output == [cti(10), point(10, v(1)), cti(20)]


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        (True, [cti(10), point(10, v(1)), cti(20), point(20, v(2)), cti(INF)]),
        (False, [cti(10), point(10, v(1)), cti(20)]),
    ],
)
def test_flush_on_stop_when_the_run_stops(stop, expected):
    r = run_one(_two_points(), generate(1, flush=True), stop=stop)
    assert r.output == expected


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        # a flushes first: union min(+inf, 20) = 20, then +inf
        (("a", "b"), [cti(10), point(10, v(1)), cti(20), point(20, v(2)), cti(INF)]),
        # b flushes first: min(10, +inf) = 10 changes nothing, then +inf
        (("b", "a"), [cti(10), point(10, v(1)), point(20, v(2)), cti(INF)]),
    ],
)
def test_the_stop_flush_comes_after_everything_in_binding_order(order, expected):
    bindings = [Binding(n, generate(1, flush=True), ("v",)) for n in order]
    script = EventScript()
    script.insert("a", point(10, v(1)))  # a CTI 10; union -inf (b has none)
    script.insert("b", point(20, v(2)))  # b CTI 20; union 10
    r = run_reference(script, bindings, Union((Input("a"), Input("b"))), POINT)
    assert r.output == expected


# -- union (§5) -------------------------------------------------------------------------------
def test_the_union_cti_is_the_minimum_of_the_latest_ctis():
    bindings = [Binding("a", None, ("v",)), Binding("b", None, ("v",))]
    script = EventScript()
    script.insert("a", point(7, v(1)))
    script.cti("a", 10)  # union min(10, -inf): nothing
    script.cti("b", 5)  # union 5: releases nothing
    script.insert("b", point(12, v(2)))
    script.cti("a", 20)  # min(20, 5) = 5: nothing new
    script.cti("b", 30)  # min(20, 30) = 20: releases 7 and 12
    r = run_reference(script, bindings, Union((Input("a"), Input("b"))), POINT)
    assert r.output == [cti(5), point(7, v(1)), point(12, v(2)), cti(20)]


def test_union_emits_one_cti_for_rows_at_the_same_position():
    # slow imports fast and has an explicit CTI of its own. fast 3 -> slow 3 -> union 3;
    # slow 5 -> union min(3, 5) = 3; fast 10 and slow's import of it share one position:
    # the union emits 10 only (row by row would give 5 then 10).
    bindings = [Binding("fast", None, ("v",)), Binding("slow", importing("fast"), ("v",))]
    script = EventScript()
    script.cti("fast", 3)
    script.cti("slow", 5)
    script.cti("fast", 10)
    r = run_reference(script, bindings, Union((Input("fast"), Input("slow"))), POINT)
    assert r.ingress["slow"] == [cti(3), cti(5), cti(10)]
    assert r.output == [cti(3), cti(10)]


# -- egress (§6) ------------------------------------------------------------------------------
def test_point_consumer_segment_is_sorted_by_start_then_payload_in_column_order_nulls_first():
    script = EventScript()
    script.insert("a", point(30, {"v": "x", "k": 2}))
    script.insert("a", point(10, {"k": 1, "v": "y"}))
    script.insert("a", point(30, {"k": 1, "v": "z"}))
    script.insert("a", point(30, {"k": None, "v": "w"}))
    script.insert("a", point(20, {"k": 1, "v": None}))
    script.insert("a", point(20, {"k": 1, "v": "a"}))
    script.cti("a", 100)
    r = run_one(script, None, columns=("k", "v"))
    assert r.output == [
        point(10, {"k": 1, "v": "y"}),
        point(20, {"k": 1, "v": None}),
        point(20, {"k": 1, "v": "a"}),
        point(30, {"k": None, "v": "w"}),
        point(30, {"k": 1, "v": "z"}),
        point(30, {"k": 2, "v": "x"}),
        cti(100),
    ]
    assert [list(e.payload) for e in r.output if not e.is_cti] == [["k", "v"]] * 6


def test_point_consumer_gets_intervals_as_points_at_their_start():
    script = EventScript()
    script.insert("a", interval(10, 50, v(1)))
    script.cti("a", 11)  # 10 < 11: released though its end is not committed
    r = run_one(script, None, POINT)
    assert r.output == [point(10, v(1)), cti(11)]


def test_interval_consumer_segment_is_sorted_by_start_then_end():
    script = EventScript()
    script.insert("a", interval(10, 50, v("a")))
    script.insert("a", interval(10, 20, v("b")))
    script.insert("a", point(10, v("c")))
    script.insert("a", interval(5, 100, v("d")))
    script.cti("a", 11)  # all starts < 11; ends need not be committed
    r = run_one(script, None, INTERVAL)
    assert r.output == [
        interval(5, 100, v("d")),
        point(10, v("c")),  # a point stays a point: [10, 11)
        interval(10, 20, v("b")),
        interval(10, 50, v("a")),
        cti(11),
    ]


def test_interval_consumer_waits_for_the_end_edge_of_an_open_edge():
    script = EventScript()
    script.insert("a", edge_start(10, v("a")))
    script.cti("a", 20)  # start committed, end unknown: nothing
    script.insert("a", edge_start(25, v("b")))
    script.insert("a", edge_end(25, 28, v("b")))
    script.cti("a", 30)  # b is complete and committed; a still open
    script.insert("a", edge_end(10, 40, v("a")))
    script.cti("a", 50)  # a is released now, after b, though its start is earlier
    r = run_one(script, None, INTERVAL)
    assert r.output == [
        cti(20),
        interval(25, 28, v("b")),
        cti(30),
        interval(10, 40, v("a")),
        cti(50),
    ]


def test_edge_consumer_gets_points_and_intervals_as_start_and_end_edges():
    script = EventScript()
    script.insert("a", point(10, v("a")))
    script.insert("a", interval(10, 12, v("b")))
    script.insert("a", interval(5, 15, v("c")))
    script.cti("a", 11)  # STARTs at 5, 10, 10; no end < 11 (the point ends at 11)
    script.cti("a", 13)  # ENDs at 11 and 12
    script.cti("a", 20)  # END at 15
    script.insert("a", point(30, v("d")))
    script.cti("a", 40)  # START 30 and END 31 together: the START edge first
    r = run_one(script, None, EDGE)
    assert r.output == [
        edge_start(5, v("c")),
        edge_start(10, v("a")),
        edge_start(10, v("b")),
        cti(11),
        edge_end(10, 11, v("a")),
        edge_end(10, 12, v("b")),
        cti(13),
        edge_end(5, 15, v("c")),
        cti(20),
        edge_start(30, v("d")),
        edge_end(30, 31, v("d")),
        cti(40),
    ]


def test_edge_consumer_puts_start_edges_before_end_edges_of_the_same_start():
    # By (start, end) alone END(10, 11) would come before both START edges (end +inf).
    script = EventScript()
    script.insert("a", point(10, v("b")))
    script.insert("a", interval(10, 30, v("a")))
    script.cti("a", 20)
    r = run_one(script, None, EDGE)
    assert r.output == [
        edge_start(10, v("a")),
        edge_start(10, v("b")),
        edge_end(10, 11, v("b")),
        cti(20),
    ]


def test_edge_consumer_gets_an_end_edge_once_its_end_is_committed():
    script = EventScript()
    script.insert("a", edge_start(10, v("a")))
    script.cti("a", 20)
    script.insert("a", edge_end(10, 35, v("a")))
    script.cti("a", 30)  # 35 is not < 30
    script.cti("a", 40)
    r = run_one(script, None, EDGE)
    assert r.output == [
        edge_start(10, v("a")),
        cti(20),
        cti(30),
        edge_end(10, 35, v("a")),
        cti(40),
    ]


def test_point_consumer_gets_an_edge_as_a_point_at_its_start():
    script = EventScript()
    script.insert("a", edge_start(10, v("a")))
    script.cti("a", 11)
    script.insert("a", edge_end(10, 20, v("a")))  # releases nothing more
    script.cti("a", 30)
    r = run_one(script, None, POINT)
    assert r.output == [point(10, v("a")), cti(11), cti(30)]


def test_events_not_released_when_the_run_stops_are_never_delivered():
    script = EventScript()
    script.insert("a", point(10, v(1)))
    script.cti("a", 10)  # 10 is not < 10
    r = run_one(script, None)
    assert r.output == [cti(10)]


# -- where / select (§5) ----------------------------------------------------------------------
def _edges_k() -> EventScript:
    script = EventScript()
    script.insert("a", edge_start(10, {"k": 1}))
    script.insert("a", edge_start(20, {"k": 2}))
    script.insert("a", edge_end(10, 30, {"k": 1}))
    script.insert("a", edge_end(20, 40, {"k": 2}))
    script.cti("a", 50)
    return script


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (EDGE, [edge_start(20, {"k": 2}), edge_end(20, 40, {"k": 2}), cti(50)]),
        (INTERVAL, [interval(20, 40, {"k": 2}), cti(50)]),
        (POINT, [point(20, {"k": 2}), cti(50)]),
    ],
)
def test_where_keeps_or_drops_both_edges_of_an_event(shape, expected):
    plan = Where(Input("a"), lambda p: p["k"] == 2)
    r = run_one(_edges_k(), None, shape, columns=("k",), plan=plan)
    assert r.output == expected


def test_where_passes_ctis_when_it_drops_every_event():
    script = EventScript()
    script.insert("a", point(10, v(1)))
    script.cti("a", 20)
    r = run_one(script, None, plan=Where(Input("a"), lambda p: False))
    assert r.output == [cti(20)]


def test_select_projects_both_edges_and_sets_the_column_order():
    plan = Select(Input("a"), lambda p: {"twice": p["k"] * 2, "k": p["k"]})
    r = run_one(_edges_k(), None, INTERVAL, columns=("k",), plan=plan)
    assert r.output == [
        interval(10, 30, {"twice": 2, "k": 1}),
        interval(20, 40, {"twice": 4, "k": 2}),
        cti(50),
    ]
    assert list(r.output[0].payload) == ["twice", "k"]


def test_select_that_merges_payloads_keeps_edges_matched():
    # Two edges at start 10 both project to {}: after the select the END edges close the open
    # START edges oldest first, and the INTERVAL consumer gets [10, 30) and [10, 40).
    script = EventScript()
    script.insert("a", edge_start(10, {"k": 1}))
    script.insert("a", edge_start(10, {"k": 2}))
    script.insert("a", edge_end(10, 40, {"k": 2}))
    script.insert("a", edge_end(10, 30, {"k": 1}))
    script.cti("a", 50)
    plan = Select(Input("a"), lambda p: {})
    r = run_one(script, None, INTERVAL, columns=("k",), plan=plan)
    assert r.output == [interval(10, 30, {}), interval(10, 40, {}), cti(50)]


# -- payload columns --------------------------------------------------------------------------
def test_payloads_follow_the_binding_columns():
    script = EventScript()
    script.insert("a", point(1, {"w": 2}))  # "v" missing: null
    r = run_one(script, None, columns=("v", "w"))
    assert r.ingress["a"] == [point(1, {"v": None, "w": 2})]
    assert list(r.ingress["a"][0].payload) == ["v", "w"]


def test_a_payload_column_outside_the_binding_columns_is_malformed():
    script = EventScript()
    script.insert("a", point(1, {"v": 1, "extra": 2}))
    with pytest.raises(MalformedRecordError, match="extra"):
        run_one(script, None)
