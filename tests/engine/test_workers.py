"""Python workers (engine/_spark.py): what the engine's functions do first in a worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: freezing is for good, and this test process should keep its own
# collector as it is.
_WORKER = """
import gc, json
import pandas, pyarrow, pyspark.sql  # what a PySpark worker holds before the engine's code runs
from ctistream.engine._spark import UNFROZEN_LIMIT, settle_worker

before = len(gc.get_objects())
settle_worker()
first = (gc.get_freeze_count(), len(gc.get_objects()))
kept = [[i] for i in range(100)]  # a task's own objects
settle_worker()
print(json.dumps({"limit": UNFROZEN_LIMIT, "before": before, "first": first,
                  "second": [gc.get_freeze_count(), len(gc.get_objects())]}))
"""


def test_a_worker_freezes_what_it_imported_once_and_later_collections_pass_over_it():
    out = subprocess.run(
        [sys.executable, "-c", _WORKER], cwd=ROOT, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    limit = got["limit"]
    assert got["before"] > limit  # PySpark, pandas and pyarrow alone are more than the limit
    frozen, left = got["first"]
    assert frozen > limit  # what the collector tracked (less garbage) is now frozen ...
    assert left < limit // 10  # ... and a collection looks at a few objects only
    # a few new objects do not freeze again (a freeze would also take the task's own objects)
    assert got["second"][0] == frozen
    assert got["second"][1] >= 100
