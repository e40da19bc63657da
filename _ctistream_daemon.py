"""PySpark's Python worker daemon, quiet about a task that Spark cancelled.

When a task fails, Spark aborts its job and cancels the job's other running tasks: it closes
their workers' sockets. A worker still computing finds the socket closed when it flushes its
output, and PySpark's daemon prints the ``BrokenPipeError`` (or ``ConnectionResetError``)
traceback on stderr, after the real error and looking like one. Nothing is lost: the task's
result is not wanted any more, and the error that failed the job reaches the driver as raised.

The engine's sessions run this module as the daemon (``spark.python.daemon.module``, set in
``ctistream.engine._spark.LEAN_SESSION``): PySpark's own daemon, whose worker loop ends such a
worker as a worker that was asked to stop, without the traceback. Every other error is PySpark's
as before. It sits outside the ``ctistream`` package on purpose: the daemon forks its workers,
and importing ``ctistream`` first would start threads (numpy's, pyarrow's allocator) before the
fork, which PySpark's daemon avoids.
"""

from __future__ import annotations

import socket

import pyspark.daemon as daemon

_worker = daemon.worker


def _worker_quiet_on_cancel(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1  # not reused: the daemon closes the socket and ends the worker


if __name__ == "__main__":
    daemon.worker = _worker_quiet_on_cancel
    daemon.manager()
