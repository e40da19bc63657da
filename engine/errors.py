"""Errors the engine raises. Each message says what, where, expected, got, and how to fix."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CheckpointDamageError",
    "CtiViolationError",
    "EngineError",
    "HeldEventsWarning",
    "MalformedRecordError",
    "QueryBuildError",
    "QueryRunError",
    "QueryStoppedError",
    "engine_failure",
    "spark_message",
    "task_error",
    "unknown_column",
]


class EngineError(Exception):
    """Base of the engine's own errors."""


class QueryBuildError(EngineError, ValueError):
    """A query cannot be built as bound: unknown stream, unsupported shape, import cycle, ..."""


class QueryRunError(EngineError, RuntimeError):
    """Spark failed while a query ran an epoch (an error in a UDF, a value a cast or an ANSI
    operation refused, ...). The message names the query, the epoch, the operator when it is
    known, and Spark's own message in the user's words: without the engine's internal columns
    or its plan. ``spark_error`` holds Spark's exception as raised."""

    def __init__(self, message: str, spark_error: BaseException) -> None:
        super().__init__(message)
        self.spark_error = spark_error


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


#: An engine column (``__pos``, ``__kind#12L``, backquoted or not) in a Spark message; not a
#: Python dunder (``__init__``), whose name ends with ``__``.
_INTERNAL = re.compile(r"`?\b__[a-z][a-z0-9]*(?:_[a-z0-9]+)*\b(?:#\d+L?)?`?")
#: A line where Spark starts dumping a plan or a JVM stack.
_PLAN = re.compile(r"^\s*(?:[+:]- |== .* ==|at [\w$.]+\()")
#: Where an AnalysisException's text ends and its plan begins: ``SQLSTATE: 42703;`` (or
#: ``...; line 1 pos 0;``) at the end of a line.
_BEFORE_PLAN = re.compile(r"(SQLSTATE: \w+)[^\n]*;\n.*", re.DOTALL)


def _spark_text(error: BaseException) -> str:
    """Spark's text for ``error``: its error class and message (the Java message of py4j's
    Py4JJavaError), plan and stack included."""
    get = getattr(error, "getMessage", None)
    try:
        text = str(get()) if callable(get) else str(error)
    except Exception:  # a py4j error whose JVM side is gone
        text = str(error)
    java = getattr(error, "java_exception", None)  # py4j's Py4JJavaError: the Java message
    if java is not None:
        with contextlib.suppress(Exception):  # its JVM side is gone: the Python text
            text = str(java.getMessage())
    return text


def spark_message(error: BaseException) -> str:
    """Spark's message for ``error`` in the user's words: Spark's own text (error class and
    message), without the plan or JVM stack that may follow it, and without the engine's
    internal column names (dropped from Spark's lists of suggestions, named as "an engine
    column" elsewhere)."""
    text = _BEFORE_PLAN.sub(r"\1", _spark_text(error))
    lines = []
    for line in text.splitlines():
        if _PLAN.match(line):
            break
        lines.append(line)
    text = "\n".join(lines).strip().removesuffix(";")
    text = re.sub(r"(?:,\s*)?`__[a-z]\w*`(?:,\s*(?=\]))?", "", text)
    text = text.replace("[, ", "[")
    return _INTERNAL.sub("an engine column", text)


#: The start of the traceback of an exception raised in a Python worker, as Spark reports it.
_TRACEBACK = "Traceback (most recent call last):\n"
#: The line that names an exception after its traceback: ``module.Class: message``.
_RAISED = re.compile(r"([A-Za-z_][\w.]*)(?:: |$)")
#: Where the worker's error ends in Spark's text: the SQL state Spark appends, its JVM stack.
_AFTER_RAISED = re.compile(r"^\s*(?:SQLSTATE: \w+\s*$|at [\w$.]+\(|(?:JVM|Driver) stacktrace:)")


def task_error(error: BaseException) -> tuple[str, str] | None:
    """The engine's or an adapter's error that a Spark task raised in a Python worker and that
    failed the job ``error`` (Spark's exception), as its class name and its own message:
    Spark reports it as the worker's traceback, whose last exception is the one raised. Such
    an error is a subclass of :class:`EngineError`, or one whose message gives its fix
    ("Fix:", as every error of the engine's does). None when ``error`` is no such error (a
    user's function failed, or Spark itself did)."""
    found = _worker_error(error)
    if found is None:
        return None
    name, text = found
    cls = _error_class(name)
    if cls is None and "Fix:" not in text:
        return None
    return (name.rpartition(".")[2] if cls is None else cls.__name__), text


def _worker_error(error: BaseException) -> tuple[str, str] | None:
    """The exception a Python worker raised, as Spark reports it in ``error``: its class (as
    the traceback names it) and its message; None when ``error`` holds no worker traceback."""
    text = _spark_text(error)
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    lines = text[at + len(_TRACEBACK) :].splitlines()
    while lines and lines[0][:1].isspace():  # the frames: "  File ...", then their source
        lines.pop(0)
    raised = _RAISED.match(lines[0]) if lines else None
    if raised is None:
        return None
    message = [lines[0][raised.end() :]]
    for line in lines[1:]:
        if _AFTER_RAISED.match(line):
            break
        message.append(line)
    return raised.group(1), "\n".join(message).strip()


def engine_failure(error: BaseException) -> str | None:
    """The Python error a Spark task raised (``error``: Spark's exception) when it came from
    the engine's own code, as ``"<Class>: <message> (at <module file>:<line>)"``: the innermost
    frame of the worker's traceback that is not a library's (PySpark, pyarrow, pandas, numpy,
    Python's own) is in the engine's package, not in a user's function. None when no frame
    tells (a library failed on what a frame gave it earlier, a user's function's result as
    well as the engine's), or a user's frame is innermost."""
    found = _worker_error(error)
    if found is None:
        return None
    text = _spark_text(error)
    for path, line in reversed(_FRAME.findall(text[text.rfind(_TRACEBACK) :])):
        if _library(path):
            continue
        own = next((f for f in _own_files() if path.endswith(os.sep + f)), None)
        if own is None:
            return None
        name, message = found
        return f"{name.rpartition('.')[2]}: {message} (at {own}:{line})"
    return None


#: a frame of a Python traceback: its file
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)', re.MULTILINE)
#: what marks a library's file in a worker's traceback
_LIBRARIES = (
    "pyspark.zip",
    *(f"{os.sep}{name}{os.sep}" for name in ("pyspark", "pyarrow", "pandas", "numpy", "py4j")),
)
_STDLIB = os.path.dirname(os.__file__)


def _library(path: str) -> bool:
    """Whether a traceback's file is a library's or Python's own (not the engine's or a
    user's, even when they are installed below Python's own directory)."""
    if any(lib in path for lib in _LIBRARIES):
        return True
    installed = f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path
    return path.startswith(_STDLIB) and not installed


def _own_files() -> list[str]:
    """The engine's modules as paths below its package's root (``engine/packed.py``, ...): a
    worker may run them from another place than the driver."""
    root = Path(__file__).resolve().parent.parent
    return [
        str(p.relative_to(root))
        for top in ("engine", "adapters", "bindings")
        for p in (root / top).rglob("*.py")
    ]


def _error_class(name: str) -> type | None:
    """The :class:`EngineError` subclass a traceback names ``module.Class`` (None: another
    class). Only the engine's own modules are imported for it; another module (a user's
    adapter) is looked up where the driver imported it."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name)
        if module is None and module_name.startswith("ctistream."):
            with contextlib.suppress(ImportError):
                module = importlib.import_module(module_name)
        if module is None:
            continue
        found: object = module
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        if isinstance(found, type) and issubclass(found, EngineError):
            return found
        return None
    return None


def unknown_column(call: str, name: str, available: Sequence[str], where: str) -> QueryBuildError:
    """The error for a column ``name`` that ``call`` names and ``where`` (e.g. "the stream's
    payload") does not have: the columns ``available`` there and the closest match
    (:func:`difflib.get_close_matches`)."""
    close = difflib.get_close_matches(name, list(available), n=1)
    match = f"the closest match is {close[0]!r}" if close else "no column comes close"
    hint = f"did you mean {close[0]!r}?" if close else "check the spelling and the operators before"
    return QueryBuildError(
        f"{call}: no column {name!r} in {where}; the columns available there are "
        f"{list(available)}; {match}. Fix: name one of the available columns ({hint})"
    )
