"""The reference interpreter of the temporal contract: the oracle for the Spark engine's tests."""

from .interpreter import Binding, Input, Node, Result, Select, Union, Where, run_reference

__all__ = ["Binding", "Input", "Node", "Result", "Select", "Union", "Where", "run_reference"]
