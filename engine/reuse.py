"""What an operator builds for its query once, not at every epoch (driver).

An epoch's plans are built over py4j, one round trip to the JVM for every Column function and
operator. A Column is an unresolved expression bound to no DataFrame, so the Columns an
operator derives from its query's definition alone (not from the epoch's DataFrames or state)
are the same every epoch: :func:`once` builds them at the first epoch and hands the same ones
back after. DataFrames are never kept this way: they are bound to the epoch's plans.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["once"]

T = TypeVar("T")

#: per owner (by ``id``, while it lives), per key: what was built
_KEPT: dict[int, dict[Hashable, Any]] = {}
_LOCK = threading.Lock()


def once(owner: object, key: Hashable, make: Callable[[], T]) -> T:
    """``make()``, built once for ``owner`` (an object of the query's definition that lives as
    long as the query, such as an operator's spec) and ``key`` (what else it depends on), and
    kept until ``owner`` is collected. ``make`` must depend on nothing else."""
    with _LOCK:
        kept = _KEPT.get(id(owner))
        if kept is None:
            kept = _KEPT[id(owner)] = {}
            weakref.finalize(owner, _forget, id(owner))
        if key in kept:
            return kept[key]
    value = make()  # outside the lock: it calls the JVM
    with _LOCK:
        return kept.setdefault(key, value)


def _forget(owner: int) -> None:
    with _LOCK:
        _KEPT.pop(owner, None)
