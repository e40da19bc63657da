"""Peak resident memory of a process tree (Python driver, JVM, Python workers), from /proc."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Peak:
    total: int = 0  # bytes: the largest sum over the tree seen in one sample
    pss: int = 0  # bytes: the same for PSS (shared pages of forked workers counted once)
    jvm: int = 0  # bytes: the largest RSS of the java processes
    python: int = 0  # bytes: the largest sum over the python processes
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


def tree(root: int) -> list[tuple[str, int, int]]:
    """(command name, RSS bytes, PSS bytes) of ``root`` and all its descendants."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            found.append((*procs[pid][1:], _pss(str(pid))))
        todo.extend(children.get(pid, []))
    return found


def run_sampled(cmd: list[str], interval: float = 0.2) -> tuple[str, Peak]:
    """Run ``cmd``, sampling its process tree every ``interval`` s; return its stdout and peak."""
    peak = Peak()
    with tempfile.TemporaryFile("w+") as out, subprocess.Popen(cmd, stdout=out) as proc:
        while proc.poll() is None:
            procs = tree(proc.pid)
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
