"""Errors the engine raises. Each message says what, where, expected, got, and how to fix."""

from __future__ import annotations

__all__ = [
    "CheckpointDamageError",
    "CtiViolationError",
    "EngineError",
    "HeldEventsWarning",
    "MalformedRecordError",
    "QueryBuildError",
    "QueryStoppedError",
]


class EngineError(Exception):
    """Base of the engine's own errors."""


class QueryBuildError(EngineError, ValueError):
    """A query cannot be built as bound: unknown stream, unsupported shape, import cycle, ..."""


class QueryStoppedError(EngineError, RuntimeError):
    """A query was started again on the checkpoint of a query that ended for good: it stopped
    with flush, or every input ended (semantics §9). The message names the checkpoint and the fix.
    """


class MalformedRecordError(EngineError, ValueError):
    """A source record cannot be read as an event; the message names the source and position."""


class CtiViolationError(EngineError):
    """An event broke the CTI in force on an input that has no violation policy.

    Everything that arrived before the event was processed and delivered; the offending event's
    position is not committed, so a restart reads it again.
    """

    def __init__(self, input_name: str, partition: str, offset: int, event: str, cti: str) -> None:
        self.input_name = input_name
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"CTI violation on input {input_name!r} (partition {partition!r}, offset {offset}): "
            f"{event} breaks the CTI at {cti}; expected start (or, for an END edge, end) "
            ">= the CTI. "
            "The input has only explicit CTIs and no violation policy. Fix: give the binding "
            "AdvanceTimeSettings(..., policy=AdvanceTimePolicy.DROP or ADJUST), or make the source "
            "respect its CTIs. Everything before this event was delivered."
        )


class HeldEventsWarning(UserWarning):
    """A run ended with every event held back by an input that never had a CTI (semantics §8).

    Such an input (no CTI generation, no imported CTIs, no explicit CTI from its adapter) keeps
    the query's output CTI at -inf, so nothing is released; the warning names the input and the
    fix, instead of an empty result without a word.
    """


class CheckpointDamageError(EngineError):
    """A checkpoint file that a restart needs is missing or damaged and nothing can stand in for
    it (semantics §9: damage is detected, never silently used). The message names the file and
    the fix; the query computed and delivered nothing from it."""
