"""Temporal operators: each turns its inputs' flows for one epoch (and its state) into its output
flow, and moves CTIs by its rule from semantics §5, quoted in its docstring."""

from ctistream.engine.operators.basic import UnionState, select, union, where
from ctistream.engine.operators.lifetime import LifetimeState, alter_lifetime

__all__ = ["LifetimeState", "UnionState", "alter_lifetime", "select", "union", "where"]
