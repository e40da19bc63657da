"""Hypothesis strategies: scripted inputs of every shape, settings, plans and epoch cuts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ctistream.adapters.memory import EventScript
from ctistream.engine import (
    MAX_TIME,
    MIN_TIME,
    TICK,
    AdvanceTimeGenerationSettings,
    AdvanceTimeImportSettings,
    AdvanceTimePolicy,
    AdvanceTimeSettings,
    EventShape,
    edge_end,
    edge_start,
    interval,
    point,
)
from hypothesis import strategies as st

COLUMNS = ("k", "v")
SCHEMA = "k bigint, v bigint"
#: the schema of cases with double payloads (``cases(doubles=True)``)
DOUBLES_SCHEMA = "k bigint, v double"
#: doubles whose naive sums depend on the order they are added in: magnitudes far apart
#: (1e16 + 1.0 - 1e16 is 0.0 left to right, 1.0 exactly), decimal fractions (0.1 + 0.2 + 0.3 is
#: 0.6000000000000001, 0.3 + 0.2 + 0.1 is 0.6), both signs, tiny and huge values
TRICKY = (1e16, -1e16, 1.0, -1.0, 0.1, 0.2, 0.3, -0.7, 2.5e-300, -3e-17, 1e300, -1e300, 0.0)
double_values = st.one_of(
    st.sampled_from(TRICKY),
    st.floats(-1e20, 1e20, allow_nan=False, allow_infinity=False),
)
NAMES = ("a", "b", "c")
#: where a case's times start with ``cases(extremes=True)``: 0, just above -inf, or
#: low enough below +inf that an event (at most 40 + 15 ticks later) ends before it
EXTREMES = (0, MIN_TIME + 1, MAX_TIME - 80)


@dataclass(frozen=True)
class Case:
    script: EventScript
    shapes: dict[str, EventShape]
    settings: dict[str, AdvanceTimeSettings | None]
    length: int
    #: the payload's Spark schema
    schema: str = SCHEMA

    def __repr__(self) -> str:
        lines = [f"shapes={self.shapes}", f"settings={self.settings}"]
        for name in self.shapes:
            for p in self.script.partitions(name):
                lines.append(f"{name}/{p}: {self.script.items(name, p)}")
        return "\n".join(lines)


generations = st.builds(
    AdvanceTimeGenerationSettings,
    st.one_of(st.integers(1, 4), st.sampled_from([5, 10]).map(lambda t: timedelta(microseconds=t))),
    st.sampled_from([-TICK, TICK * 0, TICK * 3]),
    st.booleans(),
)
policies = st.sampled_from([AdvanceTimePolicy.DROP, AdvanceTimePolicy.ADJUST])


@st.composite
def settings_for(draw, index: int) -> AdvanceTimeSettings | None:
    """Generation and/or import from an earlier input (no cycles), or none at all (rarely)."""
    imports = None
    if index > 0 and draw(st.booleans()):
        imports = AdvanceTimeImportSettings(NAMES[draw(st.integers(0, index - 1))])
    gen = draw(st.one_of(st.none(), generations)) if imports else draw(generations)
    if gen is None and imports is None:  # pragma: no cover - excluded above
        gen = draw(generations)
    if imports is None and draw(st.integers(0, 9)) == 0:
        return None  # explicit CTIs only, no policy: violations fail the run
    return AdvanceTimeSettings(gen, imports, draw(policies))


@st.composite
def cases(
    draw,
    max_inputs: int = 1,
    max_items: int = 18,
    min_inputs: int = 1,
    doubles: bool = False,
    forever: bool = False,
    extremes: bool = False,
    flushed: bool = False,
) -> Case:
    """Scripts of 1 .. ``max_inputs`` inputs; payloads ``k`` (0 .. 2) and ``v`` (0 .. 3, or with
    ``doubles`` a double from :data:`double_values`); with ``forever``, an INTERVAL input's
    intervals sometimes end at +inf (semantics §5's bounded work: windows count them up to the
    latest finite moment seen); with ``extremes``, every time of a case is sometimes moved to
    just above -inf or just below +inf (§1: legal input; windows and shifts there, §5); with
    ``flushed``, each partition of an input that did not end gets an explicit CTI at +inf last
    (whatever its settings: the +inf at which open events count up to the latest moment)."""
    base = draw(st.sampled_from(EXTREMES)) if extremes else 0
    n_inputs = draw(st.integers(min_inputs, max_inputs))
    names = NAMES[:n_inputs]
    shapes = {
        n: draw(st.sampled_from([EventShape.POINT, EventShape.INTERVAL, EventShape.EDGE]))
        for n in names
    }
    settings = {n: draw(settings_for(i)) for i, n in enumerate(names)}
    parts = {n: [str(p) for p in range(draw(st.integers(1, 2)))] for n in names}
    script = EventScript()
    for n in names:
        script.declare(n, *parts[n])
    open_edges: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    ended: set[str] = set()
    length = 0
    for _ in range(draw(st.integers(0, max_items))):
        live = [n for n in names if n not in ended]
        if not live:
            break
        name = draw(st.sampled_from(live))
        part = draw(st.sampled_from(parts[name]))
        v = draw(double_values) if doubles else draw(st.integers(0, 3))
        payload = {"k": draw(st.integers(0, 2)), "v": v}
        t = base + draw(st.integers(0, 40))
        action = draw(st.sampled_from(["event", "event", "event", "cti", "close", "end"]))
        shape = shapes[name]
        opened = open_edges.setdefault((name, part), [])
        if action == "end":
            if draw(st.integers(0, 3)) == 0:
                script.end(name)
                ended.add(name)
                length += 1
                continue
            action = "event"
        if action == "cti":
            script.cti(name, t, partition=part)
        elif action == "close" and shape is EventShape.EDGE and opened:
            start, pl = opened.pop(draw(st.integers(0, len(opened) - 1)))
            end = start + draw(st.integers(1, 15))
            script.insert(name, edge_end(start, end, pl), partition=part)
        elif shape is EventShape.POINT or (shape is EventShape.INTERVAL and draw(st.booleans())):
            script.insert(name, point(t, payload), partition=part)
        elif shape is EventShape.INTERVAL:
            end = t + draw(st.integers(2, 15))
            if forever and draw(st.integers(0, 3)) == 0:
                end = MAX_TIME
            script.insert(name, interval(t, end, payload), partition=part)
        else:
            script.insert(name, edge_start(t, payload), partition=part)
            opened.append((t, payload))
        length += 1
    for name in names if flushed else ():
        for part in parts[name] if name not in ended else ():
            script.cti(name, MAX_TIME, partition=part)
            length += 1
    return Case(script, shapes, settings, length, DOUBLES_SCHEMA if doubles else SCHEMA)


@st.composite
def epoch_cuts(draw, length: int) -> list[int]:
    """Arrival stamps to cut at (scripts stamp arrival 0, 1, 2, ...)."""
    if length < 2:
        return []
    return sorted(draw(st.sets(st.integers(1, length - 1), min_size=1, max_size=3)))


#: the windows of generated windowed ``top_k`` / ``apply`` (size, hop); (0, 0): snapshots
ROW_WINDOWS = ((10, 10), (10, 5), (0, 0))


def windowed(stream, size: int, hop: int):
    """``stream`` cut into the windows of :data:`ROW_WINDOWS`."""
    if size == 0:
        return stream.snapshot_window()
    return stream.hopping_window(TICK * size, TICK * hop)


def distinct_values(events):
    """A deterministic ``apply`` function: one row per distinct ``v`` of the window, ``v * 10 +``
    how many events have it ``+ 100 *`` how many of those are open (their end NaT: +inf)."""
    import pandas as pd

    rows = []
    for v, group in events.groupby("v", sort=True):
        rows.append(int(v) * 10 + len(group) + 100 * int(group["end"].isna().sum()))
    return pd.DataFrame({"v": pd.Series(rows, dtype="int64")})
