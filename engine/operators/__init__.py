"""Temporal operators: each turns its inputs' flows for one epoch (and its state) into its output
flow, and moves CTIs by its rule from semantics §5, quoted in its docstring."""

from engine.operators.basic import UnionState, select, union, where

__all__ = ["UnionState", "select", "union", "where"]
