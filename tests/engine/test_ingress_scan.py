"""Ingress's per-partition scan (engine/ingress.py::_sequencer) carries its running values from one
Arrow batch to the next: Spark hands a partition's rows in batches of
``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000) rows, so epochs of small tests see one
batch while large ones see many. Whatever the split, the scan must give the same rows."""

from __future__ import annotations

from itertools import pairwise

import pyarrow as pa
import pytest
from ctistream.engine.ingress import _P, _SRC, _ScanRules, _sequencer
from ctistream.engine.rows import EDGE, END, KIND, POS, START
from ctistream.engine.temporal import MIN_TIME
from hypothesis import given, settings
from hypothesis import strategies as st

_POS = pa.struct(
    [
        ("arr", pa.int64()),
        ("inp", pa.int32()),
        ("off", pa.int64()),
        ("part", pa.int32()),
        ("sub", pa.int32()),
    ]
)

_item = st.one_of(
    st.tuples(st.just("INSERT"), st.sampled_from([None, "START", "END"]), st.integers(0, 40)),
    st.tuples(st.sampled_from(["CTI", "BCAST", "WM", "EOI"]), st.none(), st.integers(0, 40)),
)


def _source(kind: str, start: int) -> str | None:
    """A broadcast CTI is imported or the stop's flush (either, by its value)."""
    if kind != "BCAST":
        return None
    return "flush" if start % 2 else "import"


def _batch(items: list[tuple[str, str | None, int]]) -> pa.RecordBatch:
    n = len(items)
    pos = [{"arr": i, "inp": 0, "off": i, "part": 0, "sub": 0} for i in range(n)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _, _ in items]),
            pa.array([e for _, e, _ in items], pa.string()),
            pa.array([s for _, _, s in items], pa.int64()),
            pa.array([s + 3 for _, _, s in items], pa.int64()),
            pa.array(pos, _POS),
            pa.array([0] * n, pa.int32()),
            pa.array([_source(k, s) for k, _, s in items], pa.string()),
        ],
        names=[KIND, EDGE, START, END, POS, _P, _SRC],
    )


@settings(max_examples=200)
@given(
    items=st.lists(_item, min_size=1, max_size=30),
    cuts=st.lists(st.integers(1, 29), max_size=6),
    frequency=st.sampled_from([None, 1, 2, 5, 10]),
    by_count=st.booleans(),
    delay=st.sampled_from([0, 1, 7]),
    flush=st.booleans(),
    adjust=st.booleans(),
    before=st.sampled_from([(0, None, None, MIN_TIME), (4, 12, 1, 9)]),
)
def test_the_scan_gives_the_same_rows_for_any_split_into_batches(
    items, cuts, frequency, by_count, delay, flush, adjust, before
):
    if before[1] is not None and frequency is not None and not by_count:
        before = (before[0], before[1], before[1] // frequency, before[3])  # period of max start
    scan = _sequencer([before], _ScanRules(frequency, by_count, delay, flush, adjust))
    whole = _batch(items)
    bounds = sorted({c for c in cuts if c < len(items)} | {0, len(items)})
    parts = [whole.slice(a, b - a) for a, b in pairwise(bounds)]
    one = pa.Table.from_batches(list(scan(iter([whole])))).to_pylist()
    split = pa.Table.from_batches(list(scan(iter(parts)))).to_pylist()
    assert split == one
    # and one row at a time: every running value comes from the rows before it
    singles = [whole.slice(i, 1) for i in range(len(items))]
    assert pa.Table.from_batches(list(scan(iter(singles)))).to_pylist() == one


def test_rows_out_of_position_order_stop_the_scan_with_both_positions():
    scan = _sequencer([(0, None, None, MIN_TIME)], _ScanRules(1, True))
    first, second = (
        _batch([("INSERT", None, 5), ("INSERT", None, 6)]).slice(1, 1),
        _batch([("INSERT", None, 5)]),
    )
    with pytest.raises(AssertionError, match=r"\(0, 0, 0, 0, 0\) after \(1, 0, 1, 0, 0\)"):
        list(scan(iter([first, second])))
