"""Spark jobs per epoch (engine) or micro-batch (native), counted with the status tracker.

Every Spark job runs in the job group of the thread that started it: Structured Streaming runs a
query's jobs (its ``foreachBatch`` function's too) in the group named by the query's run id; the
engine sets none, so its jobs run in the group of the thread that runs it (none, or the one the
benchmark sets). :class:`JobCount` takes the SparkContext's status tracker's job ids of one
group at each mark (the end of an epoch or batch) and keeps how many are new. Counting reads what
Spark records anyway and runs no job. Job ids are numbered across groups in the order jobs start,
so :meth:`JobCount.others` tells whether a job of another group ran between the counted ones
(the benchmarks print it when one did: the count would then miss jobs the run started).

The tracker keeps the last ``spark.ui.retainedJobs`` jobs (50 in the engine's lean session): a
count is exact while fewer jobs run between two marks.
"""

from __future__ import annotations

import statistics

from ctistream.engine._spark import job_ids

_GROUP = "spark.jobGroup.id"


class JobCount:
    """The jobs of job ``group`` (None: jobs of no group) started between marks.

    ``since``: count only jobs with a larger id (default: the group's newest job now; -1 for a
    group that is new, so the first mark counts all of its jobs)."""

    def __init__(self, spark_context, group: str | None, since: int | None = None) -> None:
        self._sc = spark_context
        self.group = group
        self._last = max(self._ids(), default=-1) if since is None else since
        self.counts: list[int] = []
        self.first: int | None = None  # the smallest job id counted

    @classmethod
    def of_current_thread(cls, spark_context) -> JobCount:
        """A count of the job group the calling thread runs in (inside ``foreachBatch``: the
        query's), from its first job on."""
        return cls(spark_context, spark_context.getLocalProperty(_GROUP), since=-1)

    def _ids(self) -> list[int]:
        return job_ids(self._sc, self.group)

    def mark(self) -> None:
        """The end of an epoch or batch: keep how many jobs started since the previous mark."""
        new = [j for j in self._ids() if j > self._last]
        if new:
            self._last = max(new)
            if self.first is None:
                self.first = min(new)
        self.counts.append(len(new))

    def others(self) -> int:
        """Jobs of other groups that started between this group's first and last job (job ids
        are numbered in the order jobs start, whatever their group): 0 when the count holds
        every job the run started in that time."""
        if self.first is None:
            return 0
        return self._last - self.first + 1 - sum(self.counts)


def steady(count: JobCount, warm: int = 1) -> str:
    """``"median M, max N over K (first F)"``: the jobs per epoch after the first ``warm``, and
    the jobs of other groups that ran meanwhile, if any."""
    counts = count.counts
    if not counts:
        return "none counted"
    first = f"first {', '.join(map(str, counts[:warm]))}"
    rest = counts[warm:]
    others = f"; {count.others()} jobs of other groups ran meanwhile" if count.others() else ""
    if not rest:
        return f"no steady one ({first}{others})"
    return f"median {statistics.median(rest):g}, max {max(rest)} over {len(rest)} ({first}{others})"
