"""What the Kafka and Event Hubs adapters share: retries with backoff, stalled reads, dead letters.

A private module. Each broker adapter states its retry policy as a :class:`Retries` value (which
failures are its client's, which of those another attempt may cure, how many attempts, how long to
wait, and its clear error for a failure that ends them); tenacity runs the attempts. Reads that
yield items run through :meth:`Retries.resume`, which keeps tenacity off the path of the items and
counts failures from the last item. A read sets malformed records aside through a
:class:`DeadLetters` of its broker: one acknowledged write each, with the broker's retries. What
each adapter retries and writes is documented on its module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

import tenacity

__all__ = ["DeadLetters", "Retries", "Stalled"]

T = TypeVar("T")
R = TypeVar("R")


class Stalled(Exception):
    """A read made no progress for its timeout although more was due: the broker went away
    (a client may reconnect quietly instead of saying so). A client failure of both brokers."""


@dataclass(frozen=True, slots=True)
class Retries:
    """How a broker adapter calls a client operation (driver or executor).

    A failure for which ``ours`` is false is not the client's (a malformed record, an adapter
    error) and passes as it is. A client failure for which ``again`` is true is tried again, up to
    ``attempts`` calls in all: after the n-th failure the next call waits ``backoff``, times
    ``2 ** (n - 1)`` when ``doubling``, at most ``max_backoff``. Any other client failure, or the
    last one, becomes ``fail(what, error, after)``: the adapter's error saying what could not be
    done (``what``), why, how to fix it and what it means for the run (``after``).
    """

    attempts: int
    backoff: timedelta
    max_backoff: timedelta
    doubling: bool
    ours: Callable[[BaseException], bool]
    again: Callable[[BaseException], bool]
    fail: Callable[[str, BaseException, str], Exception]

    def call(self, what: str, after: str, operation: Callable[[], T]) -> T:
        """``operation()``, with the attempts above; the clear error when they end."""
        return self._run(operation, lambda error: self.fail(what, error, after))

    def resume(
        self, what: Callable[[], str], after: str, read: Callable[[], Iterator[T]]
    ) -> Iterator[T]:
        """The items of ``read()``; after a client failure, those of another ``read()`` with the
        attempts above, where each call goes on where the last stopped (the caller keeps the
        position). Failures count from the last item yielded, so a read that keeps making
        progress is never given up. ``what()`` is asked when the error is made (it may name the
        position). Closing this generator closes the read."""
        items = read()
        while True:
            try:
                yield from items
                return
            except Exception as error:
                if not self.ours(error):
                    raise
                failure = error
            items = self._run(
                self._reopen(failure, read), lambda error: self.fail(what(), error, after)
            )

    def _run(self, operation: Callable[[], T], fail: Callable[[BaseException], Exception]) -> T:
        wait: tenacity.wait.wait_base
        if self.doubling:
            wait = tenacity.wait_exponential(
                multiplier=self.backoff.total_seconds(), max=self.max_backoff.total_seconds()
            )
        else:
            wait = tenacity.wait_fixed(min(self.backoff, self.max_backoff))
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda error: self.ours(error) and self.again(error)),
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=wait,
            reraise=True,
        )
        try:
            return retrying(operation)
        except Exception as error:
            if self.ours(error):
                raise fail(error) from error
            raise

    @staticmethod
    def _reopen(failure: Exception, read: Callable[[], Iterator[T]]) -> Callable[[], Iterator[T]]:
        """An operation for :meth:`_run` whose first call raises ``failure`` (the failure that
        stopped the read is the first one counted) and whose later calls start a new read and
        take its first item (so a read that fails before it yields counts as a failure)."""
        pending = [failure]

        def reopen() -> Iterator[T]:
            if pending:
                raise pending.pop()
            items = read()
            for first in items:
                return _prepend(first, items)
            return iter(())

        return reopen


def _prepend(first: T, items: Iterator[T]) -> Iterator[T]:
    yield first
    yield from items


class DeadLetters(ABC, Generic[R]):
    """Where a read sets its malformed records aside: a dead-letter topic or event hub (executor).

    Made by a read whose input names one; :meth:`send` writes one record with its error message,
    acknowledged, with the broker's retries (the producer is opened on the first letter and again
    after a failed write, which discards it); :meth:`close` ends it with the read. Letters are
    at-least-once: a replayed read writes them again.
    """

    def __init__(self, retries: Retries, after: str) -> None:
        self._retries = retries
        self._after = after
        self._producer: Any = None

    def send(self, record: R, message: str) -> None:
        """Write ``record`` with ``message`` to the dead letters; return once acknowledged."""
        letter = self._letter(record, message)

        def write() -> None:
            if self._producer is None:
                self._producer = self._open()
            try:
                self._write(self._producer, letter)
            except Exception:
                producer, self._producer = self._producer, None
                self._discard(producer)
                raise

        self._retries.call(self._what(record), self._after, write)

    def close(self) -> None:
        """Close the producer, if one is open."""
        producer, self._producer = self._producer, None
        if producer is not None:
            self._close(producer)

    @abstractmethod
    def _letter(self, record: R, message: str) -> Any:
        """What to write for ``record``: its value, its headers or properties and the error's."""

    @abstractmethod
    def _what(self, record: R) -> str:
        """The write of ``record``, for the error when it cannot be done."""

    @abstractmethod
    def _open(self) -> Any:
        """A new producer for the dead letters."""

    @abstractmethod
    def _write(self, producer: Any, letter: Any) -> None:
        """Write ``letter`` and wait for its acknowledgement."""

    @abstractmethod
    def _close(self, producer: Any) -> None:
        """Close ``producer``, ignoring its errors."""

    def _discard(self, producer: Any) -> None:
        """Close ``producer`` after a failed write (the default: as :meth:`_close`)."""
        self._close(producer)
