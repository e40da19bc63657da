"""Temporal left outer join (semantics §5): the join's pairs, plus the anti-join's fragments of
left lifetimes with the right columns null; the output CTI is the minimum of both sides' latest
CTIs.

Both parts come from the operators that define them, run over the same two inputs: the pairs
from :func:`engine.operators.join.join` (its rule for when a pair forms and when its end is
known), the fragments from :func:`engine.operators.anti_join.anti_join` (its rule for when a
fragment is decided). Their CTIs are the same rule over the same inputs, so the join's are the
output's. The payload is the join's (:func:`engine.operators.join.output_columns`): a fragment
gets a null in each right column, so every right column is nullable. Neither part takes keyed
CTIs (the anti-join's fragments end by the sides' CTIs: docs/decisions.md, "Per-key CTIs").
State: the join's and the anti-join's, each bounded by the CTIs as theirs are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctistream.engine.operators.anti_join import AntiJoinState, anti_join
from ctistream.engine.operators.join import JoinState, join
from ctistream.engine.rows import HEADER, EpochCache, Flow
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from ctistream.engine.physical import LeftOuterJoinStep

__all__ = ["LeftOuterJoinState", "left_outer_join"]


@dataclass
class LeftOuterJoinState:
    """The join's state (``matched``) and the anti-join's (``unmatched``)."""

    matched: JoinState = field(default_factory=JoinState)
    unmatched: AntiJoinState = field(default_factory=AntiJoinState)

    @property
    def held(self) -> list[DataFrame | None]:
        """Every side's held events, the join's then the anti-join's (the operator metrics'
        ``state_rows``)."""
        return [*self.matched.held, *self.unmatched.held]

    @property
    def emitted(self) -> int:
        return self.matched.emitted


def left_outer_join(
    left: Flow, right: Flow, step: LeftOuterJoinStep, state: LeftOuterJoinState, cache: EpochCache
) -> tuple[Flow, LeftOuterJoinState]:
    """The left outer join of ``left`` and ``right`` on ``step.node.on`` (semantics §5)."""
    pairs, pairs_state = join(left, right, step.pairs, state.matched, cache)
    fragments, fragments_state = anti_join(left, right, step.node.on, state.unmatched, cache)
    schema = pairs.events.schema
    payload = schema.fieldNames()[len(HEADER) :]
    n_left = len([c for c in left.events.columns if c not in HEADER])
    nulls = [F.lit(None).cast(schema[c].dataType).alias(c) for c in payload[n_left:]]
    widened = fragments.events.select("*", *nulls)
    events = pairs.events.unionByName(widened)
    out = Flow(events, pairs.ctis, True, latest=pairs.latest)
    return out, LeftOuterJoinState(pairs_state, fragments_state)
