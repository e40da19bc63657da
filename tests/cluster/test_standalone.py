"""A query on a Spark standalone cluster (a master and two one-core workers on 127.0.0.1): its
file adapters read on executors of both workers, and its output equals the local run's and the
events worked out by hand (tests/cluster/query.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.cluster.query import EPOCHS, build, expected_events, write_inputs
from tests.cluster.standalone import (
    SHORT_LIVED_JVM,
    ClusterError,
    StandaloneCluster,
    loopback_env,
    tail,
)

ROOT = Path(__file__).resolve().parents[2]
#: Generous: only a hang should reach it (a normal run takes a minute or less).
DRIVER_TIMEOUT = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster starting in the background (``cluster.ready()`` waits for it), always stopped."""
    starting = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    starting.start_in_background()
    try:
        yield starting
    finally:
        starting.stop()


def run_driver(cluster: StandaloneCluster, inputs: Path, output: Path, markers: Path) -> dict:
    """Run tests/cluster/query.py as the cluster's driver (a process of its own: this one has
    its local SparkContext); return its summary."""
    log = output.with_suffix(".driver.log")
    command = [sys.executable, "-m", "tests.cluster.query", "--master", cluster.master_url]
    command += ["--inputs", str(inputs), "--output", str(output), "--markers", str(markers)]
    jvm = " ".join(
        f"--conf 'spark.{side}.defaultJavaOptions={SHORT_LIVED_JVM}'"
        for side in ("driver", "executor")
    )
    env = loopback_env(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYSPARK_SUBMIT_ARGS=f"{jvm} pyspark-shell",
    )
    with open(log, "w") as err:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=DRIVER_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the cluster driver ({' '.join(command)}) did not finish within "
                f"{DRIVER_TIMEOUT} s; expected a run of a minute or two. Its log {log}:\n"
                f"{tail(log)}\nCluster:\n{cluster.diagnostics()}"
            ) from None
        finally:
            if proc.poll() is None:  # timed out or interrupted: end it and its JVM
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    summary = [line for line in out.splitlines() if line.startswith("SUMMARY ")]
    if proc.returncode != 0 or not summary:
        raise AssertionError(
            f"the cluster driver ({' '.join(command)}) exited with code {proc.returncode}; "
            f"expected 0 and a SUMMARY line. Its output:\n{out}\nIts log {log}:\n{tail(log, 40)}"
            f"\nCluster:\n{cluster.diagnostics()}"
        )
    return json.loads(summary[-1].removeprefix("SUMMARY "))


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_query_on_a_standalone_cluster_reads_on_both_workers_and_equals_the_local_run(
    app, cluster, tmp_path
):
    inputs, markers = tmp_path / "in", tmp_path / "markers"
    write_inputs(inputs)
    markers.mkdir()
    # The local run first, while the cluster's JVMs start.
    query = build(app, inputs, tmp_path / "local.jsonl", "cluster-local")
    try:
        query.run(epochs=EPOCHS)
    finally:
        app.queries.pop("cluster-local", None)
    summary = run_driver(cluster.ready(), inputs, tmp_path / "cluster.jsonl", markers)
    on_cluster, local = read_rows(tmp_path / "cluster.jsonl"), read_rows(tmp_path / "local.jsonl")

    # The events are the ones worked out by hand; the late reading was dropped; the last CTI is
    # the flush at the end of the input.
    fields = ("start", "end", "sensor", "n", "top")
    events = [{k: r[k] for k in fields} for r in on_cluster if r["kind"] == "INSERT"]
    assert sorted(events, key=lambda e: (e["start"], e["sensor"])) == expected_events()
    assert summary["metrics"]["readings"]["dropped"] == 1
    assert on_cluster[-1]["kind"] == "CTI" and on_cluster[-1]["start"] == "+inf"
    # Everything, CTIs and delivery order included, is what the local run delivers.
    assert on_cluster == local

    # The driver had two executors (plus its own block manager), both on this machine ...
    assert summary["master"] == cluster.master_url
    assert len(summary["executors"]) == 3
    assert all(x.startswith("127.0.0.1:") for x in summary["executors"])
    # ... and every file was read on an executor (standalone executors run in
    # <worker dir>/<app id>/<executor id>), on both workers.
    read = [json.loads(m.read_text()) for m in markers.glob("*.json")]
    files = sorted(str(p) for p in (inputs / "readings").glob("*.jsonl"))
    assert sorted({m["file"] for m in read}) == sorted([*files, str(inputs / "limits.jsonl")])
    executor_dirs = {d.resolve() for d in cluster.executor_dirs()}
    assert {Path(m["cwd"]).resolve() for m in read} <= executor_dirs
    workers = {Path(m["cwd"]).resolve().parents[1] for m in read}
    assert workers == {w.resolve() for w in cluster.work_dirs}


class _Status(BaseHTTPRequestHandler):
    """A master status page that never shows more than one worker."""

    def do_GET(self):
        body = json.dumps({"status": "ALIVE", "aliveworkers": 1, "workers": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_workers_that_do_not_register_are_reported_with_what_was_expected_and_seen(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cluster = StandaloneCluster(tmp_path, workers=2, timeout=0.5)
        cluster.status_url = f"http://127.0.0.1:{server.server_address[1]}/json/"
        with pytest.raises(ClusterError) as error:
            cluster._wait(0, lambda s: s["aliveworkers"] >= 2, "2 workers ALIVE")
    finally:
        server.shutdown()
        server.server_close()
    message = str(error.value)
    assert "expected 2 workers ALIVE within 0.5 s" in message
    assert "'aliveworkers': 1" in message
    assert cluster.status_url in message and "Fix:" in message
