"""A started query: epochs in a loop over live inputs, with checkpoints and replay (§4, §9).

Each epoch reads what its inputs hold *now*: a live adapter (Kafka, Event Hubs) takes a new
snapshot of its partitions' ends (:meth:`engine.contracts.InputAdapter.latest_offsets`) and the
epoch reads every partition from where the last one stopped up to it; a bounded adapter (files,
scripts) is read to its end by the first epoch. Epochs must be contiguous in arrival order
(semantics §4), but a live partition can deliver an item stamped earlier than items another
partition delivered in an earlier epoch. Such an item *arrives* when the engine reads it: its
stamp is raised to the epoch's arrival floor, the largest stamp of every earlier epoch.

Before an epoch runs, its plan (the offset range per input and partition, the floor, and the cut of
an epoch capped by ``max_offsets_per_epoch``) is written to the offset log; after its output is
delivered, to the commit log; every ``checkpoint_every`` epochs the whole state (ingress, operators,
egress, offsets) is written too (:mod:`engine.checkpoint`). A restarted query loads the newest state
and replays the logged epochs after it with the same ranges and floors, so it computes the same
output again; the output adapter receives only the items it does not hold
(:meth:`engine.contracts.OutputAdapter.progress`: a count of the query's output items, numbered
from its first whatever the epochs), also of an epoch that failed part-way. Nothing read after the
last logged epoch was delivered, so the query then simply goes on, unless it had ended for good (a
stop with flush, or every input at CTI +inf): then the start raises
:class:`engine.errors.QueryStoppedError` (semantics §9)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ctistream.engine._spark import ansi_mode, settle_driver
from ctistream.engine.checkpoint import CheckpointDir, warn_damage
from ctistream.engine.errors import EngineError, QueryBuildError, QueryStoppedError
from ctistream.engine.plan import walk
from ctistream.engine.rows import POS, Kind, release
from ctistream.engine.source import read_input
from ctistream.engine.temporal import MAX_TIME, MIN_TIME
from pyspark.sql import functions as F

__all__ = ["Streamer"]

log = logging.getLogger("ctistream.streaming")


class Streamer:
    """Runs a :class:`engine.runtime.Runtime` epoch after epoch (driver)."""

    def __init__(
        self,
        runtime: Any,
        checkpoint: str | None,
        checkpoint_every: int,
        max_offsets_per_epoch: int | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        if checkpoint_every < 1:
            raise ValueError(
                f"checkpoint_every must be >= 1 (epochs between state checkpoints); got "
                f"{checkpoint_every}. Fix: pass 1 to checkpoint after every epoch"
            )
        if max_offsets_per_epoch is not None and max_offsets_per_epoch < 1:
            raise ValueError(
                f"max_offsets_per_epoch must be >= 1 or None; got {max_offsets_per_epoch}. "
                "Fix: pass None to read everything available in each epoch"
            )
        self.rt = runtime
        self.max_offsets = max_offsets_per_epoch
        self.idle_timeout = idle_timeout
        #: per (input, partition): the wall clock when it last had new items
        self._heard: dict[tuple[int, int], float] = {}
        self.dir = CheckpointDir(checkpoint) if checkpoint is not None else None
        self.every = checkpoint_every
        self.epoch = 0  # the next epoch's number
        self.next: dict[int, list[int]] = {}  # per input, per partition: next offset to read
        self.done: dict[int, bool] = {}  # bounded inputs already read
        self.floor = MIN_TIME  # the largest arrival stamp of every epoch so far
        self.stopped = False
        #: the last epoch the commit log records as delivered, and the output items through it
        self.committed: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self.error: BaseException | None = None
        self._released = False
        if self.dir is not None:
            self.dir.lock(runtime.name)
        try:
            self._restore()
        except BaseException:
            self.release()
            raise
        settle_driver()

    # -- state ---------------------------------------------------------------------------------
    def _node_index(self) -> dict[int, int]:
        return {id(n): i for i, n in enumerate(walk(self.rt.root))}

    def _shape(self) -> list[str]:
        """What a checkpoint's state must fit: every operator of the plan with its arguments
        (its label: a window's size, keys and aggregates, a join's keys, ...), in order, Spark's
        ANSI mode, then each input with its source (:meth:`InputAdapter.source`), partitions,
        payload and time settings, one line each. State that another plan or other settings
        computed, or offsets counted in another source, would give results of neither query."""
        ops = [n.label() for n in walk(self.rt.root)]
        inputs = []
        for b in self.rt.inputs:
            spec, name = b.spec, f"input {b.spec.name!r}"
            inputs += [
                f"{name}: source {b.adapter.source()}",
                f"{name}: partitions {spec.partitions}",
                f"{name}: payload {b.schema.simpleString()}",
                f"{name}: CTI settings {spec.settings!r}",
                f"{name}: ordering {spec.ordering!r}",
                f"{name}: versions {spec.versions!r}",
            ]
        # ANSI mode decides how integer sums are kept (engine.exact): as decimals or as bigint
        return [_SHAPE, *ops, f"ANSI mode {ansi_mode(self.rt.spark)}", *inputs]

    def _check_shape(self, record: str, written: Any) -> None:
        """Raise when ``written``, the shape a record of the checkpoint holds (``record``: "its
        state snapshot of epoch 3"), is another query's (:meth:`_shape`), naming the first
        difference."""
        shape = self._shape()
        if written == shape:
            return
        written = written if isinstance(written, list) else []
        if not written or written[0] != _SHAPE:
            raise QueryBuildError(
                f"query {self.rt.name!r}: the checkpoint in {str(self.dir.path)!r} was written "
                f"by another version of the engine ({record} records its plan as "
                f"{written[:4]}...); this version records the plan and keeps its state as "
                f"{_SHAPE!r} says, so that state cannot be read here. Fix: start the "
                "query with a new checkpoint directory (and a new, empty output), or resume it "
                "with the version that wrote the checkpoint"
            )
        at = next(
            (i for i, (a, b) in enumerate(zip(shape, written, strict=False)) if a != b),
            min(len(shape), len(written)),
        )
        theirs = written[at] if at < len(written) else "nothing more"
        ours = shape[at] if at < len(shape) else "nothing more"
        raise QueryBuildError(
            f"query {self.rt.name!r}: the checkpoint in {str(self.dir.path)!r} was written by "
            f"a query of another shape ({record}): at step {at} "
            f"of the plan (operators, then inputs) that query has {theirs!r}, this one "
            f"{ours!r}; expected the query that wrote the checkpoint. Fix: start this query "
            "with a new checkpoint directory (and a new, empty output), or start the query that "
            "wrote the checkpoint: state cannot move between different plans, inputs or settings"
        )

    def _state(self) -> dict[str, Any]:
        index = self._node_index()
        return {
            "ingress": self.rt._ingress,
            "ordering": getattr(self.rt, "_ordering", {}),
            "ops": {index[k]: v for k, v in self.rt._ops.items()},
            "egress": self.rt._egress.to_frame(self.rt.spark),
            "shape": self._shape(),
            "stream": {
                "epoch": self.epoch,
                "next": self.next,
                "done": self.done,
                "floor": self.floor,
            },
        }

    def _restore(self) -> None:
        rt = self.rt
        rt.reset_state()
        self.next = {b.spec.index: [0] * len(b.spec.partitions) for b in rt.inputs}
        self.done = {b.spec.index: False for b in rt.inputs}
        if self.dir is None:
            return
        recorded = self.dir.shape()
        if recorded is not None:  # the checkpoint is for this query, snapshot or not
            self._check_shape("its record of the query", recorded)
        held = rt.output.progress()  # what the output holds by its own account, or None
        snap = self._snapshot(held if rt.output.counts_every_item else None)
        if snap is not None:
            _, st = snap
            nodes = list(walk(rt.root))
            rt._ingress = st["ingress"]
            rt._ordering = st["ordering"]
            rt._ops = {id(nodes[i]): v for i, v in st["ops"].items()}
            rt._egress = st["egress"].from_frame()
            s = st["stream"]
            self.epoch, self.next, self.done, self.floor = (
                s["epoch"],
                s["next"],
                s["done"],
                s["floor"],
            )
        replay = self.dir.replay(self.epoch)
        self.committed = self.dir.committed()
        if held is None and self.committed is not None:
            _warn_behind(rt, self.dir, self.committed[0], replay[-1][0] if replay else -1)
        if replay:
            log.info("query %s: replaying epochs %s..%s", rt.name, replay[0][0], replay[-1][0])
        for k, entry in replay:
            if self.committed is not None and k <= self.committed[0]:  # delivered
                self._check_content(k, entry)
            with rt.spark_errors(k):  # what Spark raises, in the user's words
                self._execute(k, entry)
        # only the logged epochs can have delivered what the output held before the replay
        rt.check_delivered(_at_least(held, self.committed) if replay else None)
        if replay:
            last: tuple[int, dict[str, Any]] | None = replay[-1]
        elif snap is not None:  # the snapshot's own epoch is the last one logged
            last = (snap[0], self.dir.entry(snap[0], _LAST))
        else:
            last = None
        self._refuse_ended(last)
        if recorded is None:
            self.dir.write_shape(self._shape())
        if held and recorded is None and not replay and snap is None and self.committed is None:
            _warn_reused(rt, self.dir, held)  # nothing logged: the checkpoint is new

    def _check_content(self, k: int, entry: dict[str, Any]) -> None:
        """Raise when a bounded input that delivered epoch ``k`` read now holds other content
        than the epoch logged (:meth:`engine.contracts.InputAdapter.content`): replayed, the
        epoch would number other items as those its output holds. (An epoch that failed is
        replayed over the fixed input: that is how a bad record is fixed.)"""
        by_index = {str(b.spec.index): b for b in self.rt.inputs}
        assert self.dir is not None
        ended = self.dir.ended(k)
        for i, logged in entry.get("content", {}).items():
            b = by_index[i]
            now = b.adapter.content()
            # grown: new rows, read after the others; but after an end (CTI +inf) none can come
            if not b.adapter.holds(logged) or (now != logged and int(i) in ended):
                raise EngineError(
                    f"query {self.rt.name!r}: input {b.spec.name!r} changed since epoch {k} read "
                    f"it and delivered its output (then: {logged}; now: {now}); replaying that "
                    "epoch over other input would change items the output already holds. "
                    "Expected the input as the epoch read it. Fix: restore it (appended or "
                    "replaced files), or start the query with a new checkpoint directory and a "
                    "new, empty output; new data belongs in new files of a new run"
                )

    def _snapshot(self, held: int | None) -> tuple[int, dict[str, Any]] | None:
        """The newest intact snapshot the output can go on from (None: there is none): one
        through which the query had released at most the items the output holds (``held``, by
        its own account; None: it keeps none, or does not count every item, so any:
        :attr:`engine.contracts.OutputAdapter.counts_every_item`). An output restored from
        before the newest snapshot (its file and progress record) holds fewer: an older one is
        restored and the epochs after it replayed, so the items it lacks come again, once. When
        no snapshot kept is that old, the oldest is restored with a warning naming the items
        that cannot be computed again."""
        passed: list[tuple[int, int]] = []  # (epoch, items released through it)
        oldest = None
        for epoch, st in self.dir.states(self.rt.spark):
            self._check_shape(f"its state snapshot of epoch {epoch}", st.get("shape"))
            released = st["egress"].released
            oldest = (epoch, st)
            if held is None or released <= held:
                if passed:
                    log.warning(
                        "query %s: its output holds %s items, fewer than the %s released "
                        "through epoch %s, its newest state snapshot: the snapshot of epoch %s "
                        "is restored instead and the epochs after it replayed, so the items it "
                        "lacks are delivered again",
                        self.rt.name,
                        held,
                        passed[0][1],
                        passed[0][0],
                        epoch,
                    )
                return oldest
            passed.append((epoch, released))
        if oldest is not None:
            epoch, released = passed[-1]
            warn_damage(
                f"query {self.rt.name!r}: its output holds {held} items by its own account, "
                f"but the oldest intact state snapshot in the checkpoint {str(self.dir.path)!r} "
                f"(epoch {epoch}, restored) comes after its item {released}: items {held + 1} "
                f"to {released} are not delivered to it again, and it lacks them. Fix: restore "
                "the output (its file and its progress record together) as it was when the "
                "query stopped, or start the query with a new checkpoint directory and a new, "
                "empty output"
            )
        return oldest

    def _refuse_ended(self, last: tuple[int, dict[str, Any]] | None) -> None:
        """Raise when the restored query ended for good (semantics §9, "a stop is recorded"):
        its last logged epoch (``last``: the epoch and its offset-log entry) is a stop with flush
        (replayed above if it had not completed), or every input is at CTI +inf. An input that
        ended on its own stays ended either way.

        A query whose inputs all ended only now, in an epoch this start replayed (one that
        failed part-way, its cause fixed; not a stop), is complete, not refused: its output got
        the rest of that epoch, and the query stays stopped (nothing runs; :meth:`stop` closes
        it). A stop, asked for by the user, is refused either way once completed."""
        rt, where = self.rt, str(self.dir.path) if self.dir is not None else None
        fix = (
            "Fix: start the query with a new checkpoint directory and a new, empty output (it "
            "reads its inputs again from their start and numbers its output items from the "
            "first)"
        )
        if last is not None and last[1].get("stop"):
            why = (
                f"records a stop with flush (epoch {last[0]}): the inputs that flush on stop are "
                "at CTI +inf, so every event read from now on would be dropped as a CTI "
                "violation; expected the checkpoint of a query that was not stopped, or stopped "
                "with stop(flush=False)"
            )
            fix += ", or stop it with stop(flush=False) to resume it later"
        elif rt.inputs and all(st.emitted >= MAX_TIME for st in rt._ingress.values()):
            if last is not None and (self.committed is None or self.committed[0] < last[0]):
                log.info("query %s: ended in epoch %s, replayed to its end now", rt.name, last[0])
                self.stopped = True
                return
            why = (
                "records that every input ended (all at CTI +inf): nothing read from now on "
                "could change the output; expected a checkpoint with an input below +inf"
            )
        else:
            return
        raise QueryStoppedError(f"query {rt.name!r}: its checkpoint {where!r} {why}. {fix}")

    # -- epochs --------------------------------------------------------------------------------
    def _plan(self, stopping: bool) -> dict[str, Any]:
        """What the next epoch reads: per input, per partition ``[start, end, capped]`` (end
        None: to the end; capped: ``max_offsets_per_epoch`` held it short of what is available)
        or None (nothing); and its ``cut`` (None: it takes everything in its ranges).

        With a capped partition, what lies past the cap may be stamped as early as what other
        partitions hold, or share the stamp the capped partition reached last. So the epoch
        takes whole arrival stamps: all items stamped up to the lowest of the largest stamps
        the capped partitions reached (:meth:`_highest`), that stamp included; the cut is one
        tick above it. Every partition is then read on up to what is available, each stopping
        at its first item stamped at or after the cut: a capped partition whose last stamp goes
        on past the cap is read past it to that stamp's end. One capped partition is so taken
        whole (at least the cap), whatever its items' stamps, so an epoch always makes progress."""
        inputs: dict[str, Any] = {}
        ends = {str(b.spec.index): b.adapter.latest_offsets() for b in self.rt.inputs}
        # A bounded input is read to its end in one epoch (its items do not resume at a cut), so
        # no epoch is capped before every bounded input was read
        cap = self.max_offsets
        if any(
            ends[str(b.spec.index)] is None and not self.done[b.spec.index] for b in self.rt.inputs
        ):
            cap = None
        for b in self.rt.inputs:
            i = b.spec.index
            ranges: list[Any] = [None] * len(b.spec.partitions)
            latest = ends[str(i)]
            if latest is None:
                if not self.done[i]:
                    ranges = [[n, None, False] for n in self.next[i]]
            else:
                for p, name in enumerate(b.spec.partitions):
                    start, end = self.next[i][p], latest[name]
                    if end < start:
                        raise _shrunk(self.rt.name, b, name, start, end)
                    if cap is not None:
                        end = min(end, start + cap)
                    if end > start:
                        ranges[p] = [start, end, end < latest[name]]
            inputs[str(i)] = ranges
        high = self._highest(inputs, self.floor)
        if high is not None:  # read on past the caps, up to the cut
            for b in self.rt.inputs:
                for p, x in enumerate(inputs[str(b.spec.index)]):
                    if x is not None and x[2]:
                        x[1] = ends[str(b.spec.index)][b.spec.partitions[p]]
        # what the bounded inputs read now hold: a replay of this epoch once delivered checks it
        content = {
            str(b.spec.index): b.adapter.content()
            for b in self.rt.inputs
            if ends[str(b.spec.index)] is None and not self.done[b.spec.index]
        }
        return {
            "inputs": inputs,
            "content": {i: c for i, c in content.items() if c is not None},
            "floor": self.floor,
            "cut": None if high is None else high + 1,
            "stop": stopping,
            "ctis": self._time_driven(inputs),
        }

    def _highest(self, inputs: dict[str, Any], floor: int) -> int | None:
        """The lowest of the largest arrival stamps (raised to ``floor``) the capped partitions
        of ``inputs`` (a plan's ranges) hold in their ranges; None when none is capped or they
        hold nothing. Read without side effects (no dead letters: the epoch's own read writes
        them), one small job per input with a capped partition."""
        highs: list[int] = []
        for b in self.rt.inputs:
            spec = b.spec
            capped = [
                tuple(x[:2]) if x is not None and x[2] else None for x in inputs[str(spec.index)]
            ]
            if any(capped):
                quiet = b.adapter.without_side_effects()
                df = read_input(
                    self.rt.spark,
                    quiet,
                    spec.index,
                    spec.partitions,
                    b.schema,
                    capped,
                    spec.name,
                    floor,
                )
                highs += [row[1] for row in df.groupBy("__part").agg(F.max("__arr")).collect()]
        return min(highs, default=None)

    def _time_driven(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Time-driven CTIs (ASA's rule, semantics §7): a partition of an input that generates
        its own CTIs that had nothing new for ``idle_timeout`` advances to the estimated arrival
        time (the wall clock) minus the input's tolerance (its ordering's late-arrival
        tolerance, else its CTI generation delay). Per partition, as §3.5 takes the input's CTI
        as the minimum over its partitions: one quiet partition would hold it back while the
        others have news. Per input: ``[value, arrival, offsets]``, a CTI at its next offset
        per quiet partition (None for the others); logged with the plan so a replay repeats
        them."""
        out: dict[str, Any] = {}
        if self.idle_timeout is None:
            return out
        now = time.time()
        for b in self.rt.inputs:
            i, spec = b.spec.index, b.spec
            quiet = []
            for p, r in enumerate(inputs[str(i)]):
                if r is not None or (i, p) not in self._heard:
                    self._heard[i, p] = now
                elif now - self._heard[i, p] >= self.idle_timeout:
                    quiet.append(p)
            gen = spec.settings.generation if spec.settings else None
            ordering = getattr(spec, "ordering", None)
            if not quiet or (ordering is None and gen is None):
                continue  # news everywhere; or it imports its CTIs, or has explicit ones only
            tolerance = ordering.late_ticks if ordering is not None else gen.delay_ticks
            ticks = int(now * 1_000_000)
            offsets = [off if p in quiet else None for p, off in enumerate(self.next[i])]
            out[str(i)] = [ticks - tolerance, max(ticks, self.floor), offsets]
        return out

    def _execute(self, k: int, plan: dict[str, Any]) -> None:
        """Run epoch ``k`` as ``plan`` says, deliver it (unless delivered), commit, and
        checkpoint the state every ``checkpoint_every`` epochs.

        Each partition is read from its range's start and, when the plan has a ``cut``
        (:meth:`_plan`), stops before its first item stamped at or after it: the next epoch
        starts there. So no read passes the cut, and an item (a dead letter too) is read by
        one epoch only. Without a cut the epoch takes all it read."""
        rt = self.rt
        rt.records.begin(rt)  # the epoch's progress record (engine.progress), from here
        began = time.perf_counter()
        ranges = {int(i): r for i, r in plan["inputs"].items()}
        # an entry logged by the version before this one has no "cut": that version cut below
        # the highest stamp (_highest), read from the epoch's capped ranges
        cut = plan["cut"] if "cut" in plan else self._highest(plan["inputs"], plan["floor"])
        raws = rt._read_all(
            {i: [tuple(x[:2]) if x is not None else None for x in r] for i, r in ranges.items()},
            plan["floor"],
            until=cut,
        )
        for i, (value, arrival, offsets) in plan.get("ctis", {}).items():
            raws[int(i)] = raws[int(i)].unionByName(
                _cti_rows(rt.spark, raws[int(i)], int(i), value, arrival, offsets)
            )
        try:
            rt.records.add("read", began)
            delivered = _at_least(rt.output.progress(), self.committed)
            as_read = [i for i in raws if str(i) not in plan.get("ctis", {})]
            rt.run_epoch(k, raws, None, cut, plan["stop"], delivered, as_read)
            resume: dict[int, dict[int, int]] = {}
            if cut is not None:  # where each partition goes on: its first item not taken
                for i, df in raws.items():  # (the STOP row where its read stopped)
                    rows = df.filter(F.col("__arr") >= cut).groupBy("__part").agg(F.min("__off"))
                    resume[i] = {r[0]: r[1] for r in rows.collect()}
        finally:
            release(raws)
        for i, r in ranges.items():
            for p, x in enumerate(r):
                if x is None:
                    continue
                if x[1] is None:
                    self.done[i] = True
                else:
                    self.next[i][p] = resume.get(i, {}).get(p, x[1])
        taken = (st.arrival for st in rt._ingress.values() if st.arrival is not None)
        self.floor = max([self.floor, *taken])
        self.epoch = k + 1
        if self.dir is not None:
            with rt.records.phase("checkpoint"):
                ended = [i for i, st in rt._ingress.items() if st.emitted >= MAX_TIME]
                self.dir.commit(k, rt._egress.released, ended)
                if self.epoch % self.every == 0 or plan["stop"]:
                    self.dir.save_state(k, self._state())
        rt.records.finish(rt)

    def step(self, stopping: bool = False) -> None:
        """Plan, log and run the next epoch."""
        if self.stopped:
            raise RuntimeError(
                f"query {self.rt.name!r} has stopped; expected a running query. Fix: start it again"
            )
        if self.error is not None:
            raise RuntimeError(
                f"query {self.rt.name!r} failed in epoch {self.epoch}: {self.error}; expected a "
                "running query. Fix: remove the cause and start the query again on its "
                "checkpoint: the epoch is replayed and what it did not deliver is delivered"
            ) from self.error
        k = self.epoch
        t0 = time.perf_counter()
        try:
            # what Spark raises (the epoch's jobs, a capped cut's while planning) in user's words
            with self.rt.spark_errors(k):
                plan = self._plan(stopping)
                if self.dir is not None:
                    self.dir.write_offsets(k, plan)
                self._execute(k, plan)
        except BaseException as e:
            # the runtime's state may be past the checkpoint's (up to the bad item): no epoch
            # may run from it, not even stop()'s; a run started after the fix takes the
            # checkpoint, so this one lets it go
            self.error = e
            self.release()
            raise
        seconds = time.perf_counter() - t0
        fields = {"query": self.rt.name, "epoch": k, "step_seconds": round(seconds, 3)}
        log.info(
            "query %s: epoch %d in %.2f s (reading included)",
            self.rt.name,
            k,
            seconds,
            extra={"ctistream": fields},
        )
        if stopping:
            self.stopped = True

    # -- the loop ------------------------------------------------------------------------------
    def start(self, trigger: float) -> None:
        if self.stopped:  # it ended in the epochs its start replayed
            return

        def loop() -> None:
            try:
                while not self._halt.is_set():
                    t0 = time.monotonic()
                    self.step()
                    self._halt.wait(max(0.0, trigger - (time.monotonic() - t0)))
            except BaseException as e:  # handed to stop() / Query.exception()
                log.exception("query %s failed in epoch %d", self.rt.name, self.epoch)
                self.error = e

        self._thread = threading.Thread(target=loop, name=f"ctistream-{self.rt.name}", daemon=True)
        self._thread.start()

    def stop(self, flush: bool = True) -> None:
        """Finish the running epoch, then run a last one that stops the inputs (flushing those
        that flush on stop, when ``flush``), and close the output. A flush ends the inputs for
        good, so before it, what the live inputs held when the stop began is read, in as many
        epochs as ``max_offsets_per_epoch`` needs: a stop's output does not depend on the cap."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.error is not None:
                raise self.error
            if not self.stopped:
                if flush and self.max_offsets is not None:
                    held = {b.spec.index: b.adapter.latest_offsets() for b in self.rt.inputs}
                    while any(
                        self.next[b.spec.index][p] < latest[name]
                        for b in self.rt.inputs
                        if (latest := held[b.spec.index]) is not None
                        for p, name in enumerate(b.spec.partitions)
                    ):
                        self.step()
                self.step(stopping=flush)
        finally:
            self.release()

    def release(self) -> None:
        """Close the output, then let the checkpoint go (another run may take it); once."""
        if self._released:
            return
        self._released = True
        try:
            self.rt.output.close()
        finally:
            if self.dir is not None:
                self.dir.unlock()


#: the first entry of a checkpoint's shape (:meth:`Streamer._shape`): how this version records
#: it and keeps its state (3: integer sums held as decimals, engine.exact)
_SHAPE = "shape 3: operators with their arguments, then inputs"

#: why a restart whose snapshot covers every logged epoch still reads the last entry
_LAST = (
    "A restart reads the entry of the last epoch logged to tell whether the query was stopped "
    "with flush (semantics §9: a stop is recorded)"
)


def _warn_behind(rt: Any, ckpt: CheckpointDir, committed: int, last: int) -> None:
    """Warn that the output reports nothing delivered although the commit log records epochs
    through ``committed`` as delivered: its progress record was lost (a damaged one is an
    error), or it is a new output (§9). Those epochs are not delivered to it again
    (:func:`_at_least`); ``last``: the last epoch replayed (-1: none)."""
    cut = (
        f"; epoch {committed + 1}, which the commit log does not record, is delivered whole: "
        "any part of it the output kept from a delivery cut short comes twice"
        if last > committed
        else ""
    )
    warn_damage(
        f"query {rt.name!r}: its output reports nothing delivered, but the commit log "
        f"{str(ckpt.commit_path(committed))!r} records epochs through {committed} delivered: "
        "the output's progress record was lost, the output is new, or it keeps no record "
        f"(its progress() gives None). Those epochs are not delivered to it again{cut}"
    )


def _shrunk(query: str, b: Any, partition: str, start: int, end: int) -> EngineError:
    """The error for a live partition that now ends before the offset the query reads next."""
    source = b.adapter.source()
    return EngineError(
        f"query {query!r}: input {b.spec.name!r}, partition {partition!r}"
        f"{f' of {source}' if source else ''} now ends at offset {end}, before offset {start}, "
        "which the query reads next: the partition was truncated, or deleted and made again, "
        "so items the query has not read may be gone and new ones would be skipped; expected a "
        "partition that only grows. Fix: restore the partition, or start the query with a new "
        "checkpoint directory and a new, empty output (it reads the partition from its start)"
    )


def _warn_reused(rt: Any, ckpt: CheckpointDir, held: int) -> None:
    """Warn that a query starting on a new checkpoint has an output that holds ``held`` items:
    they are taken as its own first items (exactly once across runs of one query, §9) and not
    delivered; items of another query or run there would stand in for this one's."""
    warn_damage(
        f"query {rt.name!r}: its checkpoint {str(ckpt.path)!r} is new, but its output "
        f"already holds {held} items: the query's first {held} output items are taken as those "
        "and not delivered to it (a run of this same query over the same inputs gives the "
        "same items). If the output holds another query's or an earlier run's items over other "
        "inputs, this query's first items are lost. Fix: give the query a new, empty output, "
        "or empty this one, unless it holds this query's own items"
    )


def _at_least(held: int | None, committed: tuple[int, int] | None) -> int | None:
    """How many output items the output holds (§9). An output that reports progress knows what
    it holds (it records its count with its items; a file output cuts its file back to its
    record), so its account decides, also within an epoch delivered in part. One that reports
    nothing while the commit log records epochs through ``committed`` (the epoch and the output
    items through it; its record lost, or a new output) holds every item of them by the commit
    log's account: an epoch is committed only once its output was delivered whole."""
    if held is None and committed is not None:
        return committed[1]
    return held


def _cti_rows(spark, like, index: int, value: int, arrival: int, offsets: list[int | None]):
    """Raw CTI rows at ``value``, one per partition with an offset (None: none), shaped like
    ``like``. Their positions have ``sub`` 1, so they never collide with a source item's."""
    rows = []
    for p, off in enumerate(offsets):
        if off is None:
            continue
        row = dict.fromkeys(like.columns)
        row |= {"__kind": Kind.CTI.value, "__start": value, "__arr": arrival, "__inp": index}
        row |= {"__off": off, "__part": p, POS: (arrival, index, off, p, 1)}
        rows.append(row)
    return spark.createDataFrame(rows, like.schema)
