"""The failure tests' side inside the network namespace (tests/test_ray_job.py).

``cluster WORK RESULTS``: starts a Ray cluster of a head and three worker
nodes (one CPU each) on loopback, then runs one jaxbatch.ray job per failure
into WORK/<name>/ over WORK/input.arrow:

* ``worker``: SIGKILLs one of the job's worker processes mid-job;
* ``node``: removes a node that runs one of the job's workers mid-job;
* ``driver``: SIGKILLs the driver (a process of its own) mid-job, then runs
  the same call again, which resumes.

Each writes what it saw (when it struck, the journal's records) to RESULTS,
plus ray.data.read_parquet's view of each output. The test compares every
output with a single-process jb.run. ``drive WORK NAME ADDRESS``: one
driver, the job of ``driver``.

Everything here that waits has a limit; a job never waits on the cluster
for longer than DEADLINE.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import jaxbatch as jb
from jaxbatch._src.job.folder import JOURNAL_NAME, Journal

sys.path.insert(0, str(Path(__file__).parent))
import ray_job_functions  # noqa: E402
from ray_job_functions import JOB, fun  # noqa: E402

DEADLINE = 240  # seconds a job may take here, failure and recovery included
STRIKE_AFTER = 3  # units committed before the failure strikes
WORKERS = 2


def _job(work: Path, name: str, progress: bool = False):
    import ray

    import jaxbatch.ray as jbr

    # The workers cannot import tests/: the functions travel by value.
    ray.cloudpickle.register_pickle_by_value(ray_job_functions)
    return jbr.run(
        fun,
        work / "input.arrow",
        work / name,
        **{**JOB, "progress": progress},
        workers=WORKERS,
        max_retries=4,
    )


def _records(folder: Path) -> list[dict]:
    if not (folder / JOURNAL_NAME).exists():
        return []
    with Journal(folder / JOURNAL_NAME, write=False) as journal:
        return journal.records


def _wait_for_units(folder: Path, count: int) -> dict:
    """Waits until `count` units are committed; what the journal then says."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        records = _records(folder)
        shards = [r for r in records if r["kind"] == "shard"]
        if len(shards) >= count:
            return {
                "units_before": len(shards),
                "done_before": any(r["kind"] == "done" for r in records),
                "pids_before": sorted({r["worker"]["pid"] for r in shards}),
            }
        time.sleep(0.02)
    raise TimeoutError(f"{folder}: {count} units not committed in {DEADLINE} s")


def _job_worker(cluster, seen: dict) -> tuple[int, object]:
    """(pid, node) of a worker process of the running job: one that has
    committed units (so not a worker of an earlier job still exiting)."""
    for pid, node in _unit_workers(_raylets(cluster)):
        if pid in seen["pids_before"]:
            return pid, node
    raise RuntimeError(f"no worker process of this job found among {seen['pids_before']}")


def _unit_workers(raylets: dict[int, object]) -> list[tuple[int, object]]:
    """(pid, node) of every UnitRunner process of this cluster: a worker is
    a child of its node's raylet (other clusters on the machine are not)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().decode(errors="replace")
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        if not cmdline.startswith("ray::UnitRunner"):
            continue
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid")))
        if ppid in raylets:
            found.append((int(entry.name), raylets[ppid]))
    return found


def _raylets(cluster) -> dict[int, object]:
    return {node.all_processes["raylet"][0].process.pid: node for node in cluster.list_all_nodes()}


def _in_thread(target) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run():
        try:
            box["report"] = target()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            box["error"] = repr(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _finish(thread: threading.Thread, box: dict) -> dict:
    thread.join(DEADLINE)
    if thread.is_alive():
        raise TimeoutError(f"the job did not finish in {DEADLINE} s")
    if "error" in box:
        raise RuntimeError(box["error"])
    return box["report"].to_dict()


def worker_killed(work: Path, cluster) -> dict:
    thread, box = _in_thread(lambda: _job(work, "worker"))
    seen = _wait_for_units(work / "worker", STRIKE_AFTER)
    pid, _ = _job_worker(cluster, seen)
    os.kill(pid, signal.SIGKILL)
    return {**seen, "killed_pid": pid, "report": _finish(thread, box)}


def node_removed(work: Path, cluster) -> dict:
    thread, box = _in_thread(lambda: _job(work, "node"))
    seen = _wait_for_units(work / "node", STRIKE_AFTER)
    _, node = _job_worker(cluster, seen)
    # A lost node takes every process on it: its workers are SIGKILLed with
    # its raylet (a worker whose raylet alone died would run on, unaware,
    # through calls that do not pass its raylet).
    doomed = [pid for pid, n in _unit_workers(_raylets(cluster)) if n is node]
    cluster.remove_node(node, allow_graceful=False)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    report = _finish(thread, box)
    cluster.add_node(num_cpus=1)  # For the next job: a spare CPU again.
    return {**seen, "removed_node": node.node_id[:12], "report": report}


def driver_killed(work: Path, cluster) -> dict:
    command = [sys.executable, __file__, "drive", str(work), "driver", cluster.address]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seen = _wait_for_units(work / "driver", STRIKE_AFTER)
    finally:
        first.kill()  # SIGKILL
        first.wait(30)
    again = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE)
    if again.returncode != 0:
        raise RuntimeError(f"the rerun failed:\n{again.stdout[-3000:]}\n{again.stderr[-3000:]}")
    report = json.loads((work / "driver" / "report.json").read_text())
    return {**seen, "killed_rc": first.returncode, "report": report}


def ray_data_views(folders: dict[str, Path]) -> dict[str, dict]:
    """What ray.data.read_parquet reads from each job's folder, against
    jb.read_output: the same examples, each once, and the same values. One
    folder a read: given several paths, Ray Data 2.60 resolves them in
    threads that race to import fsspec's HTTP filesystem (absent without
    aiohttp) and one of them fails on the half-imported module."""
    import pyarrow as pa
    import ray

    views = {}
    for name, folder in folders.items():
        refs = ray.data.read_parquet(str(folder)).to_arrow_refs()
        part = pa.concat_tables(ray.get(refs)).sort_by("example_index")
        ours = jb.read_output(folder)
        index = part.column("example_index").to_numpy()
        views[name] = {
            "rows": len(index),
            "same_index": bool(np.array_equal(index, ours["example_index"])),
            "same_sums": bool(np.array_equal(part.column("s").to_numpy(), ours["s"])),
            "same_tokens": part.column("t").to_pylist() == [t.tolist() for t in ours["t"]],
        }
    return views


def _snapshot(work: Path, skip: set[str]) -> dict[str, list[int]]:
    """Every file under `work` but the jobs' folders: path -> size, mtime."""
    out = {}
    for root, dirs, files in os.walk(work):
        dirs[:] = [d for d in dirs if Path(root, d) not in {work / s for s in skip}]
        for f in files:
            st = os.lstat(Path(root, f))
            out[str(Path(root, f).relative_to(work))] = [st.st_size, st.st_mtime_ns]
    return out


def cluster_main(work: Path, results: Path, ray_temp: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    # Fast failure detection: a removed node is declared dead in about a second.
    system = {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 300,
        "health_check_failure_threshold": 3,
    }
    started = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "_system_config": system,
            "temp_dir": ray_temp,
        },
    )
    for _ in range(3):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    out: dict = {"cluster_seconds": time.monotonic() - started, "scenarios": {}}
    names = ("worker", "node", "driver")
    before = _snapshot(work, set(names))
    try:
        for name, scenario in zip(names, (worker_killed, node_removed, driver_killed), strict=True):
            t0 = time.monotonic()
            out["scenarios"][name] = scenario(work, cluster)
            out["scenarios"][name]["seconds"] = time.monotonic() - t0
            out["scenarios"][name]["records"] = _records(work / name)
        out["untouched"] = _snapshot(work, set(names)) == before
        t0 = time.monotonic()
        out["ray_data"] = ray_data_views({name: work / name for name in names})
        out["ray_data_seconds"] = time.monotonic() - t0
        out["addresses"] = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
    finally:
        results.write_text(json.dumps(out))
        ray.shutdown()
        cluster.shutdown()
        print(f"cluster: {time.monotonic() - started:.1f} s from start to shut down")


def drive_main(work: Path, name: str, address: str) -> None:
    import ray

    ray.init(address=address)
    _job(work, name)


if __name__ == "__main__":
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if sys.argv[1] == "cluster":
        cluster_main(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
    else:
        drive_main(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
