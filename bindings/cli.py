"""The ``ctistream`` command: run a query defined in a module, print its metrics, draw its timeline.

::

    ctistream examples/lookup_join.py:query --epochs 4 --timeline-html lookup.html
    python -m bindings.cli mypackage.queries:build_query

``MODULE:ATTR`` names a module (a dotted name importable from the current directory or the
installed packages, or a path to a ``.py`` file) and, in it, a :class:`~bindings.Query` or a
callable that takes no arguments and returns one (so the module can build its application and
bindings when asked, not when imported). The command runs the query over its bounded inputs with
tracing on, prints a line per epoch made from its progress record
(:func:`engine.progress.progress_line`) and the inputs' and operators' metrics, and writes the
timeline as PNG and HTML (:mod:`viz.timeline`; by default ``<query>-timeline.png`` and
``.html`` in the current directory). Exit status: 0 when the run succeeded, 1 when the query
failed (its metrics and the timeline up to the failure are still written), 2 when
``MODULE:ATTR`` does not name a query.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctistream.bindings.query import Query
from ctistream.engine.errors import CtiViolationError, MalformedRecordError
from ctistream.engine.progress import progress_line
from ctistream.viz.timeline import require_matplotlib
from ctistream.viz.trace import Trace

__all__ = ["TargetError", "load_query", "main"]

_EXAMPLE = "examples/lookup_join.py:query or mypackage.queries:build_query"


class TargetError(Exception):
    """``MODULE:ATTR`` does not name a query; the message says what, expected, got and the fix."""


def load_query(target: str) -> Query:
    """The :class:`~bindings.Query` that ``target`` (``MODULE:ATTR``) names, calling ``ATTR``
    when it is a callable with no required arguments. Raises :class:`TargetError`."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise TargetError(
            f"expected MODULE:ATTR, e.g. {_EXAMPLE}; got {target!r}. Fix: name the module (a "
            "dotted name or a .py file) and, after a colon, the query or the function that "
            "builds it"
        )
    module = _import(module_name)
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            where = ".".join([module_name, *attr.split(".")[:i]])
            found = sorted(
                n
                for n, v in vars(obj).items()
                if not n.startswith("_")
                and (
                    isinstance(v, Query)
                    or (inspect.isfunction(v) and v.__module__ == getattr(obj, "__name__", None))
                )
            )
            raise TargetError(
                f"{where} has no attribute {part!r}; expected a Query or a function that returns "
                f"one. Its queries and functions: {found or 'none'}. Fix: use one of them, or "
                f"define {part} in {module_name}"
            )
        obj = getattr(obj, part)
    if isinstance(obj, Query):
        return obj
    if not callable(obj):
        raise TargetError(
            f"{target} is a {type(obj).__name__} ({obj!r:.80}); expected a ctistream.Query or a "
            "function with no arguments that returns one. Fix: point at the query, or at a "
            "function such as `def query(): return stream.to_query(app, ...)`"
        )
    try:
        required = [
            p.name
            for p in inspect.signature(obj).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):  # builtins without a signature: just try the call
        required = []
    if required:
        raise TargetError(
            f"{target} takes arguments {required}; expected a Query or a function with no "
            "required arguments. Fix: give them defaults, or add a function that calls it with "
            "them, e.g. `def query(): return build(Application('demo'), ...)`"
        )
    result = obj()
    if not isinstance(result, Query):
        raise TargetError(
            f"{target}() returned {type(result).__name__} {result!r:.80}; expected a "
            "ctistream.Query. Fix: return the query, e.g. `return stream.to_query(app, name, "
            "factory, config, shape)`"
        )
    return result


def _import(name: str) -> Any:
    if name.endswith(".py") or "/" in name or os.sep in name:
        path = Path(name).resolve()
        if not path.is_file():
            raise TargetError(
                f"no file {name!r} (looked at {path}); expected a Python file defining the "
                f"query, e.g. {_EXAMPLE}. Fix: check the path (relative to the current directory "
                f"{os.getcwd()})"
            )
        sys.path.insert(0, str(path.parent))
        stem = re.sub(r"\W", "_", path.stem)
        spec = importlib.util.spec_from_file_location(f"ctistream_cli_{stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as missing:
        if missing.name is None or not (name == missing.name or name.startswith(missing.name)):
            raise  # the module exists but one of its own imports is missing
        raise TargetError(
            f"no module named {name!r} (searched the current directory {os.getcwd()} and "
            f"the installed packages); expected an importable module or a .py file, e.g. "
            f"{_EXAMPLE}. Fix: run from the directory that holds it, install its package, or "
            "give the file's path"
        ) from None


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):  # counts by reason: the non-zero ones
        nonzero = [f"{k}={v}" for k, v in value.items() if v]
        return " ".join(nonzero) or "0"
    return str(value)


def _table(title: str, rows: dict[Any, dict[str, Any]]) -> str:
    """``rows`` as an aligned text table: one row per name, one column per metric. A metric
    that is itself a table (``keys``: per substream key) follows as its own table."""
    if not rows:
        return f"{title}: none"
    keys: list[str] = []
    for m in rows.values():
        # times show in ISO (``cti``); their ``*_ticks`` twins would only widen the table
        keys += [k for k in m if k not in keys and k != "keys" and not k.endswith("_ticks")]
    cells = [[title, *keys]] + [
        [str(name), *(_cell(k, m.get(k)) for k in keys)] for name, m in rows.items()
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]
    for name, m in rows.items():
        if isinstance(m.get("keys"), dict) and m["keys"]:
            lines += ["", _table(f"{title} {name}: key", m["keys"])]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ctistream",
        description="Run a ctistream query defined in a module over its bounded inputs, print "
        "its metrics and write its timeline (event time against arrival time) as PNG and HTML.",
    )
    p.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help=f"a Query, or a function with no arguments returning one; e.g. {_EXAMPLE}",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs to cut the run into (default: by size, at most about 250,000 input items "
        "each, as query.run() does)",
    )
    p.add_argument("--timeline-png", metavar="PATH", help="default: <query>-timeline.png")
    p.add_argument("--timeline-html", metavar="PATH", help="default: <query>-timeline.html")
    p.add_argument("--no-timeline", action="store_true", help="run without tracing")
    p.add_argument(
        "--trace-cap",
        type=int,
        default=20_000,
        metavar="N",
        help="items kept per input and per CTI series before sampling (default 20000)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctistream`` console script and of ``python -m bindings.cli``."""
    args = _parser().parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        print(f"ctistream: --epochs must be >= 1; got {args.epochs}", file=sys.stderr)
        return 2
    if args.trace_cap < 1:
        print(f"ctistream: --trace-cap must be >= 1; got {args.trace_cap}", file=sys.stderr)
        return 2
    if not args.no_timeline:  # before the query runs: the PNG would fail only after it
        try:
            require_matplotlib()
        except ImportError as missing:
            print(f"ctistream: {missing}, or run with --no-timeline", file=sys.stderr)
            return 2
    # Spark's console progress bar would interleave with what the command prints; the session
    # is made by the target module, so say it through the environment Spark starts from.
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell"
    )
    try:
        query = load_query(args.target)
    except TargetError as bad:
        print(f"ctistream: {bad}", file=sys.stderr)
        return 2

    trace = None if args.no_timeline else Trace(cap=args.trace_cap)
    status, began = 0, time.monotonic()
    try:
        query.run(
            args.epochs,
            trace=trace if trace is not None else False,
            on_progress=lambda record: print(progress_line(record), flush=True),
        )
    except (CtiViolationError, MalformedRecordError) as failed:
        print(f"ctistream: query {query.name!r} failed: {failed}", file=sys.stderr)
        status = 1
    took = time.monotonic() - began
    print(
        f"query {query.name!r}: {'failed' if status else 'ran'} in "
        f"{'epochs by size' if args.epochs is None else f'{args.epochs} epoch(s)'}, "
        f"{took:.1f} s"
    )
    print()
    print(_table("input", query.metrics()))
    print()
    print(_table("operator", query.operator_metrics()))
    if trace is not None:
        stem = re.sub(r"[^\w.-]", "_", query.name) + "-timeline"
        png = Path(args.timeline_png or f"{stem}.png")
        html = Path(args.timeline_html or f"{stem}.html")
        timeline = query.timeline(png=png, html=html)
        print()
        print(f"timeline: {png} and {html}")
        for note in timeline.notes:
            print(f"  {note}")
    return status


if __name__ == "__main__":
    sys.exit(main())
