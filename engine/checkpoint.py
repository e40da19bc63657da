"""A query's checkpoint directory: the offset log, the commit log and state snapshots (§9).

Layout under the directory::

    offsets/<k>.json   written before epoch k runs: what epoch k reads (per input and partition
                       the offset range), the arrival floor, and whether it stops the query
    commits/<k>        written once epoch k's output was delivered
    state/<k>/         the state after epoch k: ``state.json`` (numbers, the structure) and one
                       Parquet directory per DataFrame of state (held events, pending output)

Every file is written to a temporary name and renamed, so a crash leaves either the old or the
new version, never half of one. A restarted query loads the newest complete ``state/<k>`` and
replays epochs ``k+1 ..`` exactly as their offset-log entries say, so their output is the same;
outputs skip what they already delivered (:meth:`adapters.base.OutputAdapter.progress`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from engine.errors import QueryBuildError
from engine.rows import checkpoint

__all__ = ["CheckpointDir"]

_KEEP = 2  # state snapshots kept (the newest may be the one being written when a crash hits)


class CheckpointDir:
    """One query's checkpoint directory (driver)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        for sub in ("offsets", "commits", "state"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)

    # -- offset and commit logs ---------------------------------------------------------------
    def write_offsets(self, epoch: int, entry: dict[str, Any]) -> None:
        _write_text(self.path / "offsets" / f"{epoch}.json", json.dumps(entry, sort_keys=True))

    def offsets(self) -> dict[int, dict[str, Any]]:
        """Every offset-log entry by epoch."""
        out = {}
        for f in (self.path / "offsets").glob("*.json"):
            out[int(f.stem)] = json.loads(f.read_text())
        return out

    def commit(self, epoch: int) -> None:
        _write_text(self.path / "commits" / str(epoch), "")

    def committed(self) -> int | None:
        done = [int(f.name) for f in (self.path / "commits").iterdir() if f.name.isdigit()]
        return max(done, default=None)

    # -- state snapshots ----------------------------------------------------------------------
    def save_state(self, epoch: int, state: dict[str, Any]) -> None:
        """Write ``state`` (dataclasses, lists, dicts, Counters, numbers, strings, None and
        DataFrames) as the state after ``epoch``; drop older snapshots beyond the newest two."""
        final = self.path / "state" / str(epoch)
        tmp = self.path / "state" / f"{epoch}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        frames: list[DataFrame] = []

        def dump(value: Any) -> Any:
            if isinstance(value, DataFrame):
                frames.append(value)
                name = f"df{len(frames)}"
                value.write.parquet(str(tmp / name))
                return {"__df__": name}
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                fields = {f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
                kind = type(value)
                return {"__dc__": f"{kind.__module__}:{kind.__qualname__}", "fields": fields}
            if isinstance(value, Counter):
                return {"__counter__": {k: v for k, v in value.items()}}
            if isinstance(value, dict):
                return {"__dict__": [[dump(k), dump(v)] for k, v in value.items()]}
            if isinstance(value, list | tuple):
                return [dump(v) for v in value]
            if value is None or isinstance(value, bool | int | float | str):
                return value
            raise TypeError(f"cannot checkpoint a {type(value).__name__}: {value!r}")

        (tmp / "state.json").write_text(json.dumps(dump(state)))
        _fsync_dir(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _fsync_dir(final.parent)
        for old in self._snapshots()[:-_KEEP]:
            shutil.rmtree(self.path / "state" / str(old), ignore_errors=True)

    def latest_state(self, spark: SparkSession) -> tuple[int, dict[str, Any]] | None:
        """The newest complete snapshot, as (epoch, state), or None."""
        snaps = self._snapshots()
        if not snaps:
            return None
        epoch = snaps[-1]
        base = self.path / "state" / str(epoch)

        def load(value: Any) -> Any:
            if isinstance(value, list):
                return [load(v) for v in value]
            if not isinstance(value, dict):
                return value
            if "__df__" in value:
                return checkpoint(spark.read.parquet(str(base / value["__df__"])))
            if "__counter__" in value:
                return Counter(value["__counter__"])
            if "__dict__" in value:
                return {load(k): load(v) for k, v in value["__dict__"]}
            module, name = value["__dc__"].split(":")
            kind: Any = importlib.import_module(module)
            for part in name.split("."):
                kind = getattr(kind, part)
            fields = value["fields"]
            expected = {f.name for f in dataclasses.fields(kind)}
            if not set(fields) <= expected:
                raise QueryBuildError(
                    f"checkpoint {self.path}: the state snapshot of epoch {epoch} holds a "
                    f"{name} with fields {sorted(fields)}, written by another version of the "
                    f"engine; this version's {name} has {sorted(expected)}. Expected a snapshot "
                    "this version wrote. Fix: restart the query with a new checkpoint directory "
                    "(it replays its inputs from their start), or resume it with the version "
                    "that wrote this one"
                )
            return kind(**{k: load(v) for k, v in fields.items()})

        return epoch, load(json.loads((base / "state.json").read_text()))

    def _snapshots(self) -> list[int]:
        return sorted(
            int(d.name)
            for d in (self.path / "state").iterdir()
            if d.name.isdigit() and (d / "state.json").exists()
        )


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
