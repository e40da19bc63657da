"""The retry policy the Kafka and Event Hubs adapters share (``adapters/_broker.py``), without a
broker: which failures are tried again, how often, how long between attempts, and the clear error
at the end. The brokers' own tests (test_kafka.py, test_eventhubs.py) run it against real clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from azure.eventhub.exceptions import AuthenticationError, EventHubError
from ctistream.adapters import eventhubs
from ctistream.adapters._broker import Retries, Stalled
from ctistream.adapters.eventhubs import EventHubOutputConfig


class Down(ConnectionError):
    """A client failure another attempt may cure."""


class Refused(ConnectionError):
    """A client failure no attempt cures."""


def policy(attempts: int, backoff_ms: int = 100, max_ms: int = 250, doubling: bool = True):
    return Retries(
        attempts=attempts,
        backoff=timedelta(milliseconds=backoff_ms),
        max_backoff=timedelta(milliseconds=max_ms),
        doubling=doubling,
        ours=lambda error: isinstance(error, ConnectionError),
        again=lambda error: isinstance(error, Down),
        fail=lambda what, error, after: RuntimeError(f"cannot {what}: {error}. {after}"),
    )


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The waits between attempts, in seconds, instead of waiting."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def failing(*outcomes):
    """An operation that raises or returns ``outcomes`` in turn; ``calls`` counts its calls."""
    calls = []

    def operation():
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return operation, calls


def test_a_failure_is_tried_again_with_a_doubling_backoff_until_the_attempts_run_out(sleeps):
    operation, calls = failing(Down("a"), Down("b"), Down("c"), Down("d"))
    with pytest.raises(RuntimeError, match=r"^cannot read x: d\. Nothing was read\.$") as error:
        policy(4).call("read x", "Nothing was read.", operation)
    assert isinstance(error.value.__cause__, Down)
    assert len(calls) == 4  # attempts in all, the first included
    # After failure n the wait is 100 ms * 2 ** (n - 1), at most 250 ms: 100, 200, 400 -> 250;
    # no wait after the last.
    assert sleeps == [0.1, 0.2, 0.25]


def test_an_attempt_that_succeeds_gives_its_result(sleeps):
    operation, calls = failing(Down("a"), Down("b"), 42)
    assert policy(3).call("read", "", operation) == 42
    assert (len(calls), sleeps) == (3, [0.1, 0.2])


def test_the_fixed_backoff_waits_the_same_each_time_and_no_more_than_the_maximum(sleeps):
    operation, _ = failing(Down("a"), Down("b"), 1)
    assert policy(3, backoff_ms=300, max_ms=1000, doubling=False).call("r", "", operation) == 1
    operation, _ = failing(Down("a"), 2)
    assert policy(2, backoff_ms=300, max_ms=200, doubling=False).call("r", "", operation) == 2
    assert sleeps == [0.3, 0.3, 0.2]


@pytest.mark.parametrize(
    "failure, raised",
    [(Refused("no"), RuntimeError), (ValueError("bad record"), ValueError)],
    ids=["a client failure no attempt cures ends them", "another failure passes as it is"],
)
def test_a_failure_not_worth_another_attempt_ends_at_once(sleeps, failure, raised):
    operation, calls = failing(failure)
    with pytest.raises(raised) as error:
        policy(5).call("read", "", operation)
    assert (len(calls), sleeps) == (1, [])
    assert failure in (error.value, error.value.__cause__)


def reads(*scripts):
    """Successive reads, each yielding its script's items and raising where it has an error;
    ``closed`` records the reads closed (finished, failed or dropped)."""
    started: list[int] = []
    closed: list[int] = []

    def read() -> Iterator[int]:
        number = len(started)
        started.append(number)
        try:
            for step in scripts[number]:
                if isinstance(step, BaseException):
                    raise step
                yield step
        finally:
            closed.append(number)

    return read, started, closed


def test_a_resumed_read_counts_failures_from_its_last_item(sleeps):
    # attempts=2: a failure right after an item is the first of a new count, so the read goes on
    # (100 ms); the read after it fails before yielding: the second failure in a row, the end.
    read, started, _ = reads([1, 2, Down("x")], [3, Down("y")], [Down("z")], [4])
    seen: list[int] = []
    with pytest.raises(RuntimeError, match="cannot read from 3: z"):
        for item in policy(2).resume(lambda: f"read from {len(seen)}", "", read):
            seen.append(item)
    assert (seen, len(started), sleeps) == ([1, 2, 3], 3, [0.1, 0.1])
    # attempts=3: the same failures, one more attempt after the second (200 ms), which ends.
    read, started, closed = reads([1, 2, Down("x")], [3, Down("y")], [Down("z")], [4])
    assert list(policy(3).resume(lambda: "read", "", read)) == [1, 2, 3, 4]
    assert (len(started), closed, sleeps[2:]) == (4, [0, 1, 2, 3], [0.1, 0.1, 0.2])


def test_a_read_that_is_dropped_is_closed(sleeps):
    read, _, closed = reads([1, Down("x")], [2, 3, 4])
    items = policy(2).resume(lambda: "read", "", read)
    assert [next(items), next(items)] == [1, 2]
    items.close()
    assert closed == [0, 1]


def test_a_malformed_record_in_a_resumed_read_passes_as_it_is(sleeps):
    bad = ValueError("malformed")
    read, _, _ = reads([1, Down("x")], [2, bad])
    seen: list[int] = []
    with pytest.raises(ValueError) as error:
        for item in policy(3).resume(lambda: "read", "", read):
            seen.append(item)
    assert (error.value, seen, sleeps) == (bad, [1, 2], [0.1])


# -- what each broker retries ----------------------------------------------------------------------

CONN = "Endpoint=sb://127.0.0.1:5672/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"


def test_event_hubs_sends_fail_at_once_on_refused_credentials_as_kafka_does():
    # The output's producer does not retry, so the adapter retries a send's failures itself;
    # refused credentials and a missing hub are final (Kafka: a non-retriable error).
    cfg = EventHubOutputConfig(connection_string=CONN)
    sends, reads_ = eventhubs._send_retries(cfg), eventhubs._retries(cfg)
    assert sends.again(EventHubError("connection lost")) and sends.again(Stalled())
    assert not sends.again(AuthenticationError("Unauthorized access"))
    assert not sends.again(EventHubError("The messaging entity could not be found (NotFound)"))
    # Other operations use clients that retry on their own: only a stalled read is tried again.
    assert reads_.again(Stalled()) and not reads_.again(EventHubError("connection lost"))
    assert (sends.attempts, reads_.attempts) == (cfg.retry_total + 1, cfg.retry_total + 1)
