"""The order of items within an egress segment (decisions.md, Egress): (start, START edges first,
end, payload values in column order), nulls first, NaN above every number, structs and arrays
field by field. Pure Python: the segment is sorted on the driver."""

from __future__ import annotations

import math

from ctistream.engine.egress import _segment_key


def _item(start, end, edge, *payload):
    # (start, end, edge, release time, END edge's position, payload...)
    return (start, end, edge, start, None, *payload)


def test_items_sort_by_start_then_start_edges_then_end_then_payload():
    items = [
        _item(2, 5, None, 1),
        _item(1, 9, None, 1),
        _item(1, 4, "END", 1),
        _item(1, 2**63 - 1, "START", 1),
        _item(1, 4, None, 0),
    ]
    assert sorted(items, key=_segment_key) == [items[3], items[4], items[2], items[1], items[0]]


def test_nulls_sort_first_and_nan_above_every_number():
    values = [2.5, math.nan, None, -math.inf, math.inf, 0.0]
    got = [it[5] for it in sorted((_item(0, 1, None, v) for v in values), key=_segment_key)]
    assert got[:5] == [None, -math.inf, 0.0, 2.5, math.inf]
    assert math.isnan(got[5])


def test_structs_and_arrays_compare_field_by_field_with_nulls_first():
    def order(values):
        return [it[5] for it in sorted((_item(0, 1, None, v) for v in values), key=_segment_key)]

    assert order([(1, "b"), (1, None), (0, "z")]) == [(0, "z"), (1, None), (1, "b")]
    assert order([[2, None], [1, 3], [2, 0], None]) == [None, [1, 3], [2, None], [2, 0]]
