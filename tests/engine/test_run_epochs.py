"""A bounded run's default epochs (``query.run()``, engine/runtime.py): cut by size, so the driver,
which holds an epoch's output until it is delivered, needs no more memory for a larger input.
Any cut gives the same output (semantics §4); a small input stays one epoch at no extra cost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from ctistream.adapters.memory import (
    EventScript,
    MemoryInputAdapter,
    MemoryInputFactory,
    MemoryOutputConfig,
    MemoryOutputFactory,
)
from ctistream.adapters.memory import MemoryInputConfig as Config
from ctistream.bindings import Stream
from ctistream.engine import AdvanceTimeGenerationSettings, AdvanceTimeSettings, runtime
from ctistream.engine.events import EventShape, point


def _script() -> EventScript:
    # 30 points, point i at time i arriving at i, then the END (stamped 30): 31 items
    script = EventScript()
    for i in range(30):
        script.insert("s", point(i, {"v": i}))
    return script.end("s")


class _Unsized(MemoryInputAdapter):
    """A scripted input whose adapter cannot tell its size on the driver."""

    def size_hint(self) -> None:
        return None


class _UnsizedFactory(MemoryInputFactory):
    def create(self, config, shape):
        return _Unsized(config, shape)


def _run(app, name, factory=None, **kw) -> list[tuple[int, list]]:
    """Run the pass-through over ``_script()`` (a CTI generated after every event) into sink
    ``name``; what it delivered, epoch by epoch."""
    settings = AdvanceTimeSettings(AdvanceTimeGenerationSettings(1, timedelta(0)))
    config = Config(script=_script(), schema="v long")
    stream = Stream.create("s", factory or MemoryInputFactory(), config, EventShape.POINT, settings)
    output = (MemoryOutputFactory(), MemoryOutputConfig(name=name), EventShape.POINT)
    stream.to_query(app, name, *output).run(**kw)
    return MemoryOutputFactory.epochs(name)


def _flat(epochs: list[tuple[int, list]]) -> list:
    return [e for _, items in epochs for e in items]


@pytest.mark.parametrize("factory", [MemoryInputFactory, _UnsizedFactory])
def test_a_run_over_more_items_than_an_epoch_holds_is_cut_into_epochs_by_size(
    app, monkeypatch, factory
):
    one = _run(app, f"by-size-one-{factory.__name__}", factory(), epochs=1)
    monkeypatch.setattr(runtime, "EPOCH_ITEMS", 10)
    cut = _run(app, f"by-size-{factory.__name__}", factory())
    # 31 items, at most about 10 an epoch: ceil(31 / 10) = 4 epochs, cut at approximate
    # quantiles 1/4, 2/4, 3/4 of the stamps 0..30 (rank error 31 / 16 < 2; Spark finds 6, 14, 21)
    assert [k for k, _ in cut] == [0, 1, 2, 3]
    # event i is released by the CTI generated after event i + 1 (CTI i + 1 > i), and the input
    # does not flush: events 0..28 are delivered, each epoch those before its last CTI (cuts
    # 6, 14, 21: events 0..4, 5..12, 13..19, 20..28), near 31 / 4 each
    events = [sum(1 for e in items if not e.is_cti) for _, items in cut]
    assert sum(events) == 29
    assert all(3 <= n <= 12 for n in events), events
    # the same output as one epoch, item for item (semantics §4)
    assert len(one) == 1
    assert _flat(cut) == _flat(one)
    assert [e.start for e in _flat(cut) if not e.is_cti] == list(range(29))


def test_a_small_input_stays_one_epoch_with_no_spark_job_more_than_one_epoch_runs(app, spark):
    sc = spark.sparkContext
    jobs = []
    for k, epochs in enumerate(({"epochs": 1}, {})):
        group = f"small-run-{k}"
        sc.setJobGroup(group, "a small run")
        try:
            got = _run(app, f"small-{k}", **epochs)
        finally:
            sc.setJobGroup("", "")
        assert [n for n, _ in got] == [0]  # one epoch: 31 items, far below EPOCH_ITEMS
        jobs.append(len(sc.statusTracker().getJobIdsForGroup(group)))
    # the script's size is known on the driver: no job counts the items (nor reads them again)
    assert jobs[1] == jobs[0]
