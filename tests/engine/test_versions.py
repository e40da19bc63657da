"""A reference input given as versions of keys (``Stream.create(..., versions=Versions(...))``):
ingress makes the START and END edges (semantics §1 edges, §3, §3.4; docs/decisions.md
"Versions"). Each rule by hand, the same in the reference interpreter and in Spark for several
epoch cuts, and random versions against the reference."""

from __future__ import annotations

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputConfig,
    MemoryInputFactory,
)
from ctistream.bindings import Stream
from ctistream.engine import (
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    CtiViolationError,
    EventKind,
    EventShape,
    MalformedRecordError,
    QueryBuildError,
    Versions,
    cti,
    edge_end,
    edge_start,
    interval,
    point,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.harness import In, spark_run
from tests.reference import Binding, Input, run_reference

SCHEMA = "k int, v int, gone boolean"
COLUMNS = ("k", "v", "gone")
VERSIONS = Versions(key="k", deleted="gone")
#: explicit CTIs only (a CTI after 10**6 versions never comes), flushed at the end
GEN = AdvanceTimeGenerationSettings(10**6, TICK * 0, True)
ADJUST = AdvanceTimeSettings(GEN, policy=AdvanceTimePolicy.ADJUST)
DROP = AdvanceTimeSettings(GEN, policy=AdvanceTimePolicy.DROP)


def row(k: int, v: int, gone: bool = False) -> dict:
    return {"k": k, "v": v, "gone": gone}


def _run_both(app, script, settings, cuts, shape=EventShape.EDGE):
    """The reference's result, after checking that Spark delivers the same (and counts the
    same) for one epoch and for ``cuts``."""
    expected = run_reference(
        script, [Binding("ref", settings, COLUMNS, versions=VERSIONS)], Input("ref"), shape
    )
    inputs = {"ref": In(EventShape.POINT, settings, SCHEMA, VERSIONS)}
    for epochs in (1, cuts):
        output, metrics = spark_run(app, script, inputs, None, shape, epochs)
        assert output == expected.output, f"epochs={epochs}"
        got = {k: metrics["ref"][k] for k in expected.counts["ref"]}
        assert got == expected.counts["ref"], f"epochs={epochs}"
    return expected


@pytest.mark.parametrize("cuts", [[2], [3, 6], [1, 4, 7]])
def test_versions_become_edges_by_hand(app, cuts):
    # Policy ADJUST; rows are (key k, value v) at their valid-from time; "gone" marks a delete.
    script = EventScript()
    script.insert("ref", point(10, row(1, 50)))  # k1 opens 50 at 10
    script.insert("ref", point(20, row(1, 60)))  # new version: closes 50 at 20, opens 60 at 20
    script.insert("ref", point(12, row(2, 7)))  # k2 opens 7 at 12 (other key: no order rule)
    script.insert("ref", point(15, row(2, 0, gone=True)))  # delete: closes 7 at 15
    script.insert("ref", point(25, row(3, 1)))  # k3 opens 1 at 25 ...
    script.insert("ref", point(25, row(3, 2)))  # ... same time: closes 1 at 25, [25, 25) empty
    script.cti("ref", 30)
    script.insert("ref", point(22, row(1, 70)))  # late (22 < CTI 30): closes 60 at 30, and
    #                                            ADJUST opens 70 at 30 (§3.4)
    script.insert("ref", point(40, row(9, 0, gone=True)))  # delete of an unknown key: ignored
    script.cti("ref", 50)
    expected = _run_both(app, script, ADJUST, cuts)
    # Delivered as EDGE, per CTI segment sorted by (start, end, payload), a START edge before
    # the END edges of its start (§6). CTI 30 commits: 50 [10, 20), 7 [12, 15), 60 from 20, and
    # 3:2 from 25 (3:1 is [25, 25), empty: never released). CTI 50 commits 60's END edge at 30
    # and 70 from 30.
    assert expected.output == [
        edge_start(10, row(1, 50)),
        edge_end(10, 20, row(1, 50)),
        edge_start(12, row(2, 7)),
        edge_end(12, 15, row(2, 7)),
        edge_start(20, row(1, 60)),
        edge_start(25, row(3, 2)),
        cti(30),
        edge_end(20, 30, row(1, 60)),
        edge_start(30, row(1, 70)),
        cti(50),
        cti(2**63 - 1),
    ]
    counts = expected.counts["ref"]
    # adjusted: 70's start moved to 30 and 60's END edge closed at 30; the unknown delete is
    # counted on its own, not as dropped
    assert (counts["events_in"], counts["adjusted"], counts["dropped"]) == (8, 2, 0)
    assert counts["deletes_ignored"] == 1


@pytest.mark.parametrize("cuts", [[2], [4]])
def test_a_late_version_under_drop_closes_the_old_one_at_the_cti_and_is_dropped(app, cuts):
    # DROP: the late version of k1 (15 < CTI 20) still closes 50 at the CTI (never dropped while
    # 50 is open: §3.4, adjusted), but is itself dropped; the delete of k1 at 30 then closes the
    # dropped version: dropped too (as an END edge whose START edge was dropped).
    script = EventScript()
    script.insert("ref", point(10, row(1, 50)))
    script.cti("ref", 20)
    script.insert("ref", point(15, row(1, 60)))
    script.insert("ref", point(30, row(1, 0, gone=True)))
    script.cti("ref", 40)
    expected = _run_both(app, script, DROP, cuts, EventShape.INTERVAL)
    assert [e for e in expected.output if e.kind is EventKind.INSERT] == [
        interval(10, 20, row(1, 50))  # the INTERVAL consumer's 50: [10, 20)
    ]
    counts = expected.counts["ref"]
    assert (counts["adjusted"], counts["dropped"], counts["deletes_ignored"]) == (1, 2, 0)


@pytest.mark.parametrize("cuts", [[1], [2]])
def test_a_version_before_its_keys_open_version_is_malformed(app, cuts):
    # k1 is open from 10 (its version arrived first); a version of k1 at 5 arrives after it:
    # malformed, named by input, partition, offset and key; everything before it is delivered.
    script = EventScript()
    script.insert("ref", point(10, row(1, 50)))
    script.insert("ref", point(3, row(2, 1)))  # another key: fine
    script.insert("ref", point(5, row(1, 60)))
    expected_message = (
        r"version on input 'ref' \(partition '0', offset 2\) for key \{'k': 1\} is at .*5 ticks"
        r".*before the key's open version \(valid from .*10 ticks.*Fix: send a key's versions"
    )
    with pytest.raises(MalformedRecordError, match=expected_message):
        run_reference(
            script,
            [Binding("ref", ADJUST, COLUMNS, versions=VERSIONS)],
            Input("ref"),
            EventShape.EDGE,
        )
    inputs = {"ref": In(EventShape.POINT, ADJUST, SCHEMA, VERSIONS)}
    for epochs in (1, cuts):
        with pytest.raises(MalformedRecordError, match=expected_message):
            spark_run(app, script, inputs, None, EventShape.EDGE, epochs)


def test_a_late_version_without_a_policy_is_a_cti_violation(app):
    script = EventScript()
    script.insert("ref", point(10, row(1, 50)))
    script.cti("ref", 20)
    script.insert("ref", point(15, row(1, 60)))
    # no settings: explicit CTIs only and no policy
    with pytest.raises(CtiViolationError) as ref_error:
        run_reference(
            script,
            [Binding("ref", None, COLUMNS, versions=VERSIONS)],
            Input("ref"),
            EventShape.EDGE,
        )
    inputs = {"ref": In(EventShape.POINT, None, SCHEMA, VERSIONS)}
    with pytest.raises(CtiViolationError) as got:
        spark_run(app, script, inputs, None, EventShape.EDGE, [2])
    assert str(got.value) == str(ref_error.value)
    assert "point(1970-01-01T00:00:00.000015+00:00, {'k': 1, 'v': 60, 'gone': False})" in str(
        got.value
    )


def test_versions_are_checked_when_the_query_is_built(app):
    script = EventScript()
    script.insert("ref", point(10, row(1, 50)))
    config = MemoryInputConfig(script=script, schema=SCHEMA)
    with pytest.raises(QueryBuildError, match=r"expected shape EventShape.POINT, got EDGE"):
        Stream.create("ref", MemoryInputFactory(), config, EventShape.EDGE, versions=VERSIONS)
    for versions, what in (
        (Versions(key="sensor"), r"names column\(s\) \['sensor'\].*Fix: name the key"),
        (Versions(key="k", deleted="v"), r"deleted column 'v' is int; expected boolean"),
    ):
        s = Stream.create("ref", MemoryInputFactory(), config, EventShape.POINT, versions=versions)
        with pytest.raises(QueryBuildError, match=what):
            from ctistream.adapters.memory import MemoryOutputConfig, MemoryOutputFactory

            s.to_query(
                app,
                "v-bad",
                MemoryOutputFactory(),
                MemoryOutputConfig(name="v-bad"),
                EventShape.EDGE,
            )
        app.queries.pop("v-bad", None)


# -- random versions against the reference ------------------------------------------------------
@st.composite
def version_scripts(draw):
    """A few keys' versions and deletes over two partitions, in valid-from order per key and
    partition (out-of-order ones are malformed: pinned above), some late, with explicit CTIs."""
    script = EventScript()
    latest: dict[tuple[str, int], int] = {}
    n = draw(st.integers(4, 12))
    for i in range(n):
        if draw(st.integers(0, 4)) == 0:
            script.cti("ref", draw(st.integers(0, 40)), partition=draw(st.sampled_from("01")))
            continue
        part = draw(st.sampled_from("01"))
        k = draw(st.integers(1, 3))
        t = max(latest.get((part, k), 0), draw(st.integers(0, 40)))
        latest[(part, k)] = t
        gone = draw(st.integers(0, 3)) == 0
        script.insert("ref", point(t, row(k, i, gone)), partition=part)
    return script, n


@given(
    data=st.data(),
    scripts=version_scripts(),
    policy=st.sampled_from([AdvanceTimePolicy.ADJUST, AdvanceTimePolicy.DROP]),
)
def test_random_versions_match_the_reference_for_any_epoch_cut(app, data, scripts, policy):
    script, n = scripts
    cuts = sorted(data.draw(st.sets(st.integers(1, n), min_size=1, max_size=3)))
    _run_both(app, script, AdvanceTimeSettings(GEN, policy=policy), cuts)
