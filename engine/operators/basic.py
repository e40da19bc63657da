"""Stateless operators and union."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctistream.engine.ctis import keyed_min_of_latest, min_of_latest, risen
from ctistream.engine.rows import (
    CTI,
    HEADER,
    EpochCache,
    Flow,
    keyed_inputs,
    payload_columns,
)
from ctistream.engine.temporal import MIN_TIME
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["UnionState", "select", "union", "where"]


def where(flow: Flow, condition: Column) -> Flow:
    """Keep the events whose payload satisfies ``condition``; time untouched.

    CTI rule (§5): output CTI = input CTI. An END edge carries its START edge's payload, so both
    halves of an edge pass or fail together. Keyed CTIs pass too.
    """
    return replace(flow, events=flow.events.filter(condition))


def select(flow: Flow, columns: Sequence[Column | str]) -> Flow:
    """Project the payload; time untouched. CTI rule (§5): output CTI = input CTI. Keyed CTIs
    pass: a query that builds keeps the key column under its name (bindings.stream)."""
    return replace(flow, events=flow.events.select(*HEADER, *columns))


@dataclass
class UnionState:
    """Latest CTI of each input of a union, and the union's last emitted CTI."""

    latest: list[int]
    emitted: int = MIN_TIME
    #: substreams: per key the inputs' largest keyed CTIs (:func:`engine.ctis.keyed_min_of_latest`)
    keys: DataFrame | None = None

    @classmethod
    def initial(cls, n: int) -> UnionState:
        return cls([MIN_TIME] * n)


def union(flows: Sequence[Flow], state: UnionState, cache: EpochCache) -> tuple[Flow, UnionState]:
    """All events of all inputs, at their arrival positions.

    CTI rule (§5; the seeds: "Union operators release the older result of the most recent CTIs
    from either side"): output CTI = min over inputs of their latest CTI, emitted when it rises.
    With substreams, a key's output CTI is the minimum over inputs of the key's CTI there
    (:func:`engine.ctis.keyed_min_of_latest`).
    """
    events: DataFrame = flows[0].events
    columns = payload_columns(events)
    for f in flows[1:]:
        other = payload_columns(f.events)
        if sorted(other) != sorted(columns):
            raise ValueError(
                f"union inputs must have the same payload columns; got {columns} and {other}. "
                "Fix: select the same columns on every input before the union"
            )
        events = events.unionByName(f.events)
    tagged = flows[0].ctis.withColumn("__g", F.lit(0))
    for i, f in enumerate(flows[1:], start=1):
        tagged = tagged.unionByName(f.ctis.withColumn("__g", F.lit(i)))
    tagged = cache.keep(tagged)
    latest = list(state.latest)
    for row in tagged.groupBy("__g").agg(F.max(CTI).alias("m")).collect():
        latest[row["__g"]] = max(latest[row["__g"]], row["m"])
    ctis = cache.keep(min_of_latest(tagged, "__g", state.latest, state.emitted))
    edges = any(f.edges for f in flows)
    rose = risen(min(latest), state.emitted)
    unbounded = any(f.unbounded for f in flows)
    out = Flow(events.select(*HEADER, *columns), ctis, edges, latest=rose, unbounded=unbounded)
    new_state = UnionState(latest, max(state.emitted, min(latest)))
    key = keyed_inputs(list(flows), [True] * len(flows), None)
    if key is None:
        return out, new_state
    sides = [f.keyed if f.key == key else None for f in flows]
    keyed, new_state.keys = keyed_min_of_latest(
        tagged, sides, state.latest, ctis, state.emitted, state.keys
    )
    return replace(out, keyed=cache.keep(keyed), key=key), new_state
