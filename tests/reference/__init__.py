"""The reference interpreter of the temporal contract: the oracle for the Spark engine's tests."""

from .interpreter import (
    AlterEventDuration,
    AlterEventLifetime,
    AntiJoin,
    Binding,
    Input,
    Join,
    Node,
    Result,
    Select,
    ShiftEventTime,
    Snapshot,
    ToPoint,
    Union,
    Where,
    Window,
    run_reference,
)

__all__ = [
    "AlterEventDuration",
    "AlterEventLifetime",
    "AntiJoin",
    "Binding",
    "Input",
    "Join",
    "Node",
    "Result",
    "Select",
    "ShiftEventTime",
    "Snapshot",
    "ToPoint",
    "Union",
    "Where",
    "Window",
    "run_reference",
]
