"""A Spark standalone cluster on 127.0.0.1 for tests: one master and a few small workers, run as
subprocesses with the ``bin/spark-class`` that pyspark ships.

Everything binds to 127.0.0.1 (``SPARK_LOCAL_IP``, ``--host``); the master's RPC and web UI get
free ports chosen here, the workers' ports are picked by the OS; the master's REST submission
server is off. Each process runs in its own process group with its log in ``<root>/logs``, and
:meth:`StandaloneCluster.stop` ends the groups (workers take their executors with them).

    with StandaloneCluster(tmp_path / "cluster", workers=2) as cluster:
        cluster.master_url   # spark://127.0.0.1:<port>, for SparkSession.builder.master(...)

or ``start_in_background()`` / ``ready()`` to do other work while the JVMs start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

__all__ = [
    "SHORT_LIVED_JVM",
    "SPARK_HOME",
    "ClusterError",
    "StandaloneCluster",
    "free_port",
    "loopback_env",
]

#: The installed pyspark package: it holds ``bin/spark-class`` and ``jars/``.
SPARK_HOME = Path(pyspark.__file__).resolve().parent

#: JVM options for processes that live a minute: the quick compiler only, one GC thread. Halves
#: the CPU time they take on a small machine.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# Only loopback, and no proxy for it (urllib would otherwise honour $http_proxy).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ClusterError(RuntimeError):
    """The test cluster did not start, or a process of it died."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_env(**extra: str) -> dict[str, str]:
    """This process's environment with Spark bound to 127.0.0.1 (addresses and host names)."""
    env = dict(os.environ)
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1")
    env["SPARK_LOCAL_HOSTNAME"] = "127.0.0.1"
    env.update(extra)
    return env


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file, indented, or a note that there is none."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"    ({path} does not exist)"
    return "\n".join("    " + line for line in text[-lines:]) or f"    ({path} is empty)"


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on 127.0.0.1.

    ``start()`` returns once every worker is registered and ALIVE at the master, or raises
    :class:`ClusterError` saying which process, what was expected, what it saw and where the logs
    are. ``stop()`` is safe to call at any point, also after a failed start.
    """

    def __init__(
        self,
        root: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        timeout: float = 180.0,
    ) -> None:
        self.root = Path(root)
        self.workers, self.cores, self.memory, self.timeout = workers, cores, memory, timeout
        self._choose_ports()
        self.logs = self.root / "logs"
        self.work_dirs = [self.root / f"worker{i}" for i in range(workers)]
        self._procs: list[tuple[str, subprocess.Popen, Path]] = []
        self._starting: threading.Thread | None = None
        self._failed: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> StandaloneCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the master, wait for it, start the workers, wait until all are ALIVE."""
        self.logs.mkdir(parents=True, exist_ok=True)
        conf = self.root / "conf"
        conf.mkdir(exist_ok=True)
        # An empty conf dir keeps a machine's spark-env.sh / spark-defaults.conf out of the test.
        props = conf / "cluster.properties"
        props.write_text(
            "spark.master.rest.enabled false\n"
            # A port taken between free_port() and the bind fails (and start() chooses again)
            # instead of the master moving to the next port, where nobody would look for it.
            "spark.port.maxRetries 0\n"
        )
        env = loopback_env(
            SPARK_CONF_DIR=str(conf),
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=SHORT_LIVED_JVM,
        )
        deadline = time.monotonic() + self.timeout
        for attempt in range(3):
            args = ["--host", "127.0.0.1", "--port", str(self.master_port)]
            args += ["--webui-port", str(self.ui_port), "--properties-file", str(props)]
            self._spawn("master", "org.apache.spark.deploy.master.Master", args, env)
            try:
                self._wait(deadline, lambda s: s.get("status") == "ALIVE", "the master to be ALIVE")
                break
            except ClusterError:
                _, proc, log = self._procs[-1]
                taken = "Address already in use" in log.read_text(errors="replace")
                if proc.poll() is None or not taken or attempt == 2:
                    raise
                # Another process took a port after free_port() chose it: choose again.
                self._procs.pop()
                log.rename(log.with_suffix(f".attempt{attempt}.log"))
                self._choose_ports()
        for i, work in enumerate(self.work_dirs):
            work.mkdir(parents=True, exist_ok=True)
            args = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
            args += ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work)]
            args += ["--properties-file", str(props), self.master_url]
            self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", args, env)
        self._wait(
            deadline,
            lambda s: s.get("aliveworkers", 0) >= self.workers,
            f"{self.workers} workers ALIVE",
        )

    def _choose_ports(self) -> None:
        self.master_port = free_port()
        self.ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.status_url = f"http://127.0.0.1:{self.ui_port}/json/"

    def start_in_background(self) -> None:
        """:meth:`start` in a thread, so the caller can do other work meanwhile; :meth:`ready`
        waits for it."""

        def start() -> None:
            try:
                self.start()
            except BaseException as error:
                self._failed = error

        self._starting = threading.Thread(target=start, name="standalone-cluster", daemon=True)
        self._starting.start()

    def ready(self) -> StandaloneCluster:
        """Wait for :meth:`start_in_background`; raise what the start raised."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._failed is not None:
            raise self._failed
        return self

    def stop(self) -> None:
        """End every process group (workers first: they end their executors), then the master."""
        if self._starting is not None:  # let a start under way finish spawning first
            self._starting.join()
            self._starting = None
        procs, self._procs = self._procs[::-1], []
        for _, proc, _ in procs:
            if proc.returncode is None:
                _signal_group(proc, signal.SIGTERM)
        for _, proc, _ in procs:
            if proc.returncode is None:
                _end_group(proc, timeout=15)

    # -- state --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, apps), from its web UI on 127.0.0.1."""
        with _OPENER.open(self.status_url, timeout=5) as response:
            return json.loads(response.read())

    def executor_dirs(self) -> list[Path]:
        """The work directories of the workers' executors (``<worker>/<app>/<executor id>``)."""
        return sorted(p for w in self.work_dirs for p in w.glob("app-*/*") if p.is_dir())

    def diagnostics(self) -> str:
        """The tails of the master's and workers' logs and of every executor's stderr."""
        parts = [f"  {name} ({log}):\n{tail(log)}" for name, _, log in self._procs]
        parts += [f"  executor {d}:\n{tail(d / 'stderr')}" for d in self.executor_dirs()]
        return "\n".join(parts)

    # -- helpers ------------------------------------------------------------------------------
    def _spawn(self, name: str, cls: str, args: list[str], env: dict[str, str]) -> None:
        log = self.logs / f"{name}.log"
        command = ["bash", str(SPARK_HOME / "bin" / "spark-class"), cls, *args]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,
            )
        self._procs.append((name, proc, log))

    def _wait(self, deadline: float, ready: Any, what: str) -> None:
        seen: Any = "no answer yet"
        while True:
            for name, proc, log in self._procs:
                if proc.poll() is not None:
                    raise ClusterError(
                        f"standalone cluster {self.master_url}: the {name} process exited with "
                        f"code {proc.returncode} while waiting for {what}; expected it to keep "
                        f"running. Its log {log}:\n{tail(log)}\nFix: check that `java -version` "
                        f"is 17 (JAVA_HOME / PATH), that {SPARK_HOME / 'bin' / 'spark-class'} "
                        "runs, and that 127.0.0.1 ports are free"
                    )
            try:
                status = self.status()
                if ready(status):
                    return
                seen = {
                    "status": status.get("status"),
                    "aliveworkers": status.get("aliveworkers"),
                    "workers": [(w.get("id"), w.get("state")) for w in status.get("workers", [])],
                }
            except (OSError, urllib.error.URLError, ValueError) as error:
                seen = f"{type(error).__name__}: {error}"
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"standalone cluster {self.master_url}: expected {what} within "
                    f"{self.timeout:g} s of starting; got {seen} from {self.status_url}. "
                    f"Logs:\n{self.diagnostics()}\nFix: a slow machine may need a longer "
                    "timeout (StandaloneCluster(timeout=...)); otherwise the logs above say why "
                    "a process did not come up or register"
                )
            time.sleep(0.25)


def _end_group(proc: subprocess.Popen, timeout: float) -> None:
    """Wait up to ``timeout`` for the group's leader to exit, without reaping it (so its group id
    cannot be reused meanwhile), kill what is left of the group, then reap the leader."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break
        time.sleep(0.1)
    _signal_group(proc, signal.SIGKILL)  # an executor can outlive its worker, or a hung JVM
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
