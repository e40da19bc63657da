"""Deterministic benchmark inputs as Parquet files (numpy, seeded).

Data stream (``<root>/data/part-NNNNN.parquet``, one file per micro-batch): event ``i`` arrives at
``BASE + i ms`` (column ``arrival``); its event time ``start`` is the same, except for 2 % of the
events ("late"), whose start is earlier by a uniform 1..3000 ms. Columns ``key`` (bigint, 100
keys), ``v`` (double), ``start``, ``arrival`` (timestamps, UTC). File names and modification
times both follow arrival order (Spark's file source orders files by modification time).

Reference stream (``<root>/ref/ref.parquet``), EDGE-shaped as ``adapters.files`` reads it
(``edge`` = ``"start"``/``"end"``, ``end`` set on END rows only): a START edge per key (1,000 keys,
``w`` double) at ``BASE``; then a few update rounds spread over the run, each closing the current
edge of some keys (END edge at ``t``) and opening a new one (START edge at ``t``, new ``w``). Each
row arrives at its own event time, so it interleaves with the data stream by arrival.

``<root>/meta.json`` is written last: its presence means the data set is complete.

    python -m benchmarks.data /tmp/bench --events 200000 --per-file 100000
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BASE = datetime(2026, 1, 1, tzinfo=UTC)  # on a minute boundary: windows align on both sides
BASE_US = int(BASE.timestamp()) * 1_000_000
MS = 1_000

DATA_KEYS = 100
LATE_FRACTION = 0.02
MAX_LATE_MS = 3_000
REF_KEYS = 1_000

_TS = pa.timestamp("us", tz="UTC")


def _ts(micros: np.ndarray) -> pa.Array:
    return pa.array(micros, type=pa.int64()).cast(_TS)


def data_table(events: int, seed: int) -> pa.Table:
    """All ``events`` rows of the data stream, in arrival order."""
    rng = np.random.default_rng([seed, 0])
    arrival = BASE_US + np.arange(events, dtype=np.int64) * MS
    late = rng.random(events) < LATE_FRACTION
    lateness = rng.integers(1, MAX_LATE_MS + 1, events, dtype=np.int64) * MS
    start = arrival - np.where(late, lateness, 0)
    return pa.table(
        {
            "key": pa.array(rng.integers(0, DATA_KEYS, events, dtype=np.int64)),
            "v": pa.array(np.round(rng.random(events) * 100.0, 3)),
            "start": _ts(start),
            "arrival": _ts(arrival),
        }
    )


def ref_table(events: int, seed: int, rounds: int, keys_per_round: int) -> pa.Table:
    """The reference stream's EDGE rows, in arrival order (each arrives at its event time)."""
    rng = np.random.default_rng([seed, 1])
    w = np.round(rng.random(REF_KEYS) * 10.0, 3)
    opened = np.full(REF_KEYS, BASE_US, dtype=np.int64)
    rows: list[tuple[int, float, int, int | None, str]] = [
        (k, float(w[k]), BASE_US, None, "start") for k in range(REF_KEYS)
    ]
    span = events * MS
    for r in range(1, rounds + 1):
        t = BASE_US + (span * r // (rounds + 1)) // MS * MS
        for k in sorted(rng.choice(REF_KEYS, keys_per_round, replace=False).tolist()):
            rows.append((k, float(w[k]), int(opened[k]), t, "end"))
            w[k] = round(float(rng.random()) * 10.0, 3)
            opened[k] = t
            rows.append((k, float(w[k]), t, None, "start"))
    key, wv, start, end, edge = zip(*rows, strict=True)
    arrival = [s if e is None else e for s, e in zip(start, end, strict=True)]
    return pa.table(
        {
            "key": pa.array(key, type=pa.int64()),
            "w": pa.array(wv, type=pa.float64()),
            "start": _ts(np.array(start, dtype=np.int64)),
            "end": pa.array(end, type=pa.int64()).cast(_TS),
            "edge": pa.array(edge, type=pa.string()),
            "arrival": _ts(np.array(arrival, dtype=np.int64)),
        }
    )


def generate(
    root: str | os.PathLike[str],
    events: int,
    per_file: int = 1_000_000,
    seed: int = 7,
    ref_rounds: int = 4,
    ref_keys_per_round: int = 100,
) -> dict:
    """Write the data set under ``root`` unless its ``meta.json`` exists; return the meta."""
    root = Path(root)
    meta_path = root / "meta.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "ref").mkdir(parents=True, exist_ok=True)
    table = data_table(events, seed)
    files = []
    for k, lo in enumerate(range(0, events, per_file)):
        path = root / "data" / f"part-{k:05d}.parquet"
        pq.write_table(table.slice(lo, per_file), path)
        mtime = 1_700_000_000 + k  # strictly increasing: the native file source's order
        os.utime(path, (mtime, mtime))
        files.append(str(path))
    ref = ref_table(events, seed, ref_rounds, ref_keys_per_round)
    pq.write_table(ref, root / "ref" / "ref.parquet")
    meta = {
        "events": events,
        "per_file": per_file,
        "seed": seed,
        "files": files,
        "data_dir": str(root / "data"),
        "ref_path": str(root / "ref" / "ref.parquet"),
        "ref_rows": ref.num_rows,
        "late": int(pc.sum(pc.less(table["start"], table["arrival"])).as_py()),
        # epoch cuts: the arrival stamp (ticks) of the first row of every file but the first
        "cuts": [BASE_US + lo * MS for lo in range(per_file, events, per_file)],
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("root")
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--per-file", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    meta = generate(a.root, a.events, a.per_file, a.seed)
    print(f"{meta['events']} events in {len(meta['files'])} files, {meta['ref_rows']} ref rows")


if __name__ == "__main__":
    main()
