"""Peak resident memory of a process tree (Python driver, JVM, Python workers), from /proc."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Peak:
    total: int = 0  # bytes: the largest sum over the tree seen in one sample
    pss: int = 0  # bytes: the same for PSS (shared pages of forked workers counted once)
    jvm: int = 0  # bytes: the largest RSS of the java processes
    python: int = 0  # bytes: the largest sum over the python processes
    live: list[int] = field(default_factory=list)  # bytes: live Java heap after full GCs
    samples: int = 0


def _pss(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _processes() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, RSS bytes) of every process we can read."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/statm") as f:
                rss = int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out[int(entry)] = (ppid, comm, rss)
    return out


def _descendants(root: int, procs: dict[int, tuple[int, str, int]]) -> list[int]:
    """``root`` and all its descendants among ``procs``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def java_pids(root: int) -> list[int]:
    """The java processes among ``root`` and its descendants."""
    procs = _processes()
    return [pid for pid in _descendants(root, procs) if procs[pid][1] == "java"]


def tree(root: int) -> list[tuple[str, int, int]]:
    """(command name, RSS bytes, PSS bytes) of ``root`` and all its descendants."""
    procs = _processes()
    return [(*procs[pid][1:], _pss(str(pid))) for pid in _descendants(root, procs)]


def live_heap(pid: int) -> int | None:
    """Bytes of live objects on JVM ``pid``'s heap: ``jcmd GC.class_histogram`` runs a full GC
    first and ends with the total over all classes. None without ``jcmd`` (a JRE, not a JDK)."""
    if shutil.which("jcmd") is None:
        return None
    r = subprocess.run(
        ["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True, check=False
    )
    last = r.stdout.strip().splitlines()[-1:] or [""]
    parts = last[0].split()
    if len(parts) == 3 and parts[0] == "Total" and parts[2].isdigit():
        return int(parts[2])
    return None  # the JVM was starting or exiting


class HeapAfterEpochs(logging.Handler):
    """The engine's live Java heap after each epoch: on the runtime's per-epoch log record, a
    full GC (``System.gc``) and then the heap in use, through py4j. What stays between epochs
    is the operators' state and the kept input, so this shows whether state grows."""

    def __init__(self, spark: Any) -> None:
        super().__init__(logging.INFO)
        self._jvm = spark._jvm
        self.samples: list[int] = []
        runtime = logging.getLogger("ctistream.runtime")
        runtime.setLevel(logging.INFO)
        runtime.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if "epoch" not in getattr(record, "ctistream", {}):
            return
        self._jvm.java.lang.System.gc()
        usage = self._jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        self.samples.append(int(usage.getHeapMemoryUsage().getUsed()))


def run_sampled(
    cmd: list[str], interval: float = 0.2, live_every: float | None = None
) -> tuple[str, Peak]:
    """Run ``cmd``, sampling its process tree every ``interval`` s; return its stdout and peak.
    ``live_every``: also measure the JVMs' live heap (after a full GC) every that many seconds."""
    peak = Peak()
    last_live = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, subprocess.Popen(cmd, stdout=out) as proc:
        while proc.poll() is None:
            procs = tree(proc.pid)
            if live_every is not None and time.monotonic() - last_live >= live_every:
                last_live = time.monotonic()
                for pid in java_pids(proc.pid):
                    live = live_heap(pid)
                    if live is not None:
                        peak.live.append(live)
            peak.total = max(peak.total, sum(rss for _, rss, _ in procs))
            peak.pss = max(peak.pss, sum(pss for _, _, pss in procs))
            peak.jvm = max(peak.jvm, sum(rss for name, rss, _ in procs if name == "java"))
            peak.python = max(
                peak.python, sum(rss for name, rss, _ in procs if name.startswith("python"))
            )
            peak.samples += 1
            time.sleep(interval)
        out.seek(0)
        stdout = out.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return stdout, peak
