"""jaxbatch.ray.run on a real Ray cluster of several nodes on this machine,
while things die: (a) a worker process is SIGKILLed, (b) a node is removed,
(c) the driver is SIGKILLed and the call rerun. Each time the output equals
a single-process jb.run over the same input, value for value, every example
exactly once (the quarantined ones set aside alike), and no file outside the
output folders is touched.

The cluster (a head and three one-CPU nodes) runs in a network namespace
with only loopback up (bench/loopback.py), one for the module:
tests/ray_cluster_worker.py, started here, runs all three jobs there and
writes what it saw; this side builds the input and the reference.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import loopback  # noqa: E402
from ray_job_functions import (  # noqa: E402
    CHECKPOINT_EVERY,
    EXAMPLES,
    JOB,
    fun,
    make_tokens,
    reference_sums,
)

import jaxbatch as jb  # noqa: E402

WORKER = Path(__file__).parent / "ray_cluster_worker.py"
SCENARIOS = ("worker", "node", "driver")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = loopback.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    # Short paths: Ray's sockets live under its temporary folder.
    work = Path(tempfile.mkdtemp(prefix="jbray-"))
    ray_temp = tempfile.mkdtemp(prefix="jbrt-")
    results = tmp_path_factory.mktemp("ray") / "results.json"
    tokens = make_tokens()
    table = pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32()))})
    with pa.OSFile(str(work / "input.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=5000)
    try:
        # The cluster's side runs while this side computes the reference.
        cluster_side = subprocess.Popen(
            loopback.command([sys.executable, WORKER, "cluster", work, results, ray_temp]),
            env=loopback.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            reference = jb.run(
                fun, work / "input.arrow", tmp_path_factory.mktemp("reference") / "out", **JOB
            )
            stdout, stderr = cluster_side.communicate(timeout=900)
        finally:
            cluster_side.kill()
        assert results.exists(), stdout[-4000:] + stderr[-6000:]
        seen = json.loads(results.read_text())
        assert cluster_side.returncode == 0, stderr[-6000:]
        yield {"seen": seen, "work": work, "tokens": tokens, "reference": reference}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_temp, ignore_errors=True)


def _same_output(folder: Path, reference_report, tokens) -> None:
    ours, theirs = jb.read_output(folder), jb.read_output(reference_report.output)
    # Every example once, in input order: the kept ones, the same as jb.run's.
    np.testing.assert_array_equal(ours["example_index"], theirs["example_index"])
    assert len(np.unique(ours["example_index"])) == len(ours["example_index"])
    np.testing.assert_array_equal(ours["s"], theirs["s"])
    assert all(np.array_equal(a, b) for a, b in zip(ours["t"], theirs["t"], strict=True))
    # And jb.run's are right: sums and tokens from the input itself.
    kept = ours["example_index"]
    np.testing.assert_array_equal(ours["s"], reference_sums(tokens)[kept])
    assert all(np.array_equal(t, tokens[i] * 2 + 1) for i, t in zip(kept, ours["t"], strict=True))


def _same_report(report: dict, reference) -> None:
    assert report["complete"] and report["total"] == EXAMPLES
    # Units close where jb.run closes shards: at the first batch end at or
    # past checkpoint_every examples.
    assert report["shards"] == reference.shards
    assert report["examples"] == reference.examples
    assert report["quarantined"] == reference.quarantined > 0
    assert report["quarantine"] == reference.quarantine  # same examples, same reasons
    assert report["examples"] + report["quarantined"] == EXAMPLES


def _struck_mid_job(scenario: dict) -> None:
    """The failure struck while the job ran: units were committed before it
    and the job had not finished."""
    assert 0 < scenario["units_before"] < scenario["report"]["shards"]
    assert not scenario["done_before"]


def _checked(cluster: dict, name: str) -> dict:
    """Scenario `name`, checked to have struck mid-job and to have left the
    reference's output and report."""
    scenario = cluster["seen"]["scenarios"][name]
    _struck_mid_job(scenario)
    _same_output(cluster["work"] / name, cluster["reference"], cluster["tokens"])
    _same_report(scenario["report"], cluster["reference"])
    return scenario


def _unit_records(scenario: dict) -> list[dict]:
    return [r for r in scenario["records"] if r["kind"] == "shard"]


@pytest.mark.timeout(1200)
def test_worker_killed_mid_job_equals_jb_run(cluster):
    scenario = _checked(cluster, "worker")
    # The killed process had committed units; Ray restarted its actor, and the
    # job's later units came from other processes.
    pids = [r["worker"]["pid"] for r in _unit_records(scenario)]
    killed = scenario["killed_pid"]
    assert killed in pids[: scenario["units_before"]]
    assert killed not in pids[scenario["units_before"] + 4 :]


@pytest.mark.timeout(1200)
def test_node_removed_mid_job_equals_jb_run(cluster):
    scenario = _checked(cluster, "node")
    records = _unit_records(scenario)
    nodes = [r["worker"]["node"] for r in records]
    removed = scenario["removed_node"]
    # The removed node's worker had committed units; none committed after the
    # removal came from that node (a few in flight as it struck may land).
    assert removed in nodes[: scenario["units_before"]]
    assert removed not in nodes[scenario["units_before"] + 4 :]


@pytest.mark.timeout(1200)
def test_driver_killed_and_rerun_resumes_equal_to_jb_run(cluster):
    scenario = _checked(cluster, "driver")
    assert scenario["killed_rc"] == -9
    assert scenario["report"]["runs"] == 2
    starts = [r for r in scenario["records"] if r["kind"] == "start"]
    # The rerun kept what the killed driver had recorded.
    assert starts[1]["resumed_at"] >= scenario["units_before"] * 0.5 * CHECKPOINT_EVERY


def test_ray_data_reads_each_example_once(cluster):
    for name in SCENARIOS:
        view = cluster["seen"]["ray_data"][name]
        assert view == {
            "rows": cluster["reference"].examples,
            "same_index": True,
            "same_sums": True,
            "same_tokens": True,
        }, name


def test_loopback_only_and_nothing_outside_the_outputs_touched(cluster):
    seen = cluster["seen"]
    assert seen["addresses"] == ["127.0.0.1"]
    assert seen["untouched"]
    # The work folder holds the input and the three outputs, nothing else.
    assert sorted(p.name for p in cluster["work"].iterdir()) == sorted(["input.arrow", *SCENARIOS])
