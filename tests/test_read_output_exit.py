"""A process that reads a job's output and exits never aborts (issue 38,
item 4). On main jb.read_output handed Arrow the shard's Python bytes
without a copy; an Arrow thread dropping the last reference after
interpreter shutdown began aborted the process ("terminate called without
an active exception", SIGABRT) about 1 time in 15 with jax imported.

The check: 200 processes, two at a time, each reading the output and
exiting through the interpreter's normal shutdown, none ending non-zero (on
main at least one aborts with probability above 1 - 0.94**200). Each is
forked from one driver that imported jax and jaxbatch once, so a run costs
its read and its shutdown, not two seconds of imports: on main this aborted
7 of 100 forked processes, as 3 of 50 processes each started anew did (two
at a time, load ~10 on 2 cores), and 200 new processes took 6 min of CPU."""

import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import jaxbatch as jb

RUNS = 200
# The driver: forks RUNS children, two at a time; a child reads and leaves
# by SystemExit, so it unwinds to the top and the interpreter shuts down as
# a script's does. Flat, with no try/finally a child would also run.
DRIVER = """
import os, sys
import jax
import jaxbatch as jb

folder, runs, examples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
running, failed = [], []
for i in range(runs):
    pid = os.fork()
    if pid == 0:
        out = jb.read_output(folder)
        assert len(out["example_index"]) == examples == len(out["tokens"])
        sys.exit(0)
    running.append(pid)
    if len(running) == 2 or i == runs - 1:
        for pid in running:
            status = os.waitpid(pid, 0)[1]
            if status:
                failed.append(status)
        running = []
print(len(failed), sorted(set(failed)))
"""


def _total(example):
    return {"sum": jnp.sum(example["x"] * example["x_mask"]), "tokens": example["x"] * 2.0}


@pytest.mark.timeout(600)
def test_reading_a_jobs_output_and_exiting_never_aborts(tmp_path):
    ds = jb.Dataset.from_arrays({"x": [np.arange(n, dtype=np.float32) for n in (3, 5, 8, 2) * 10]})
    folder = tmp_path / "job"
    jb.run(_total, ds, folder, progress=False, checkpoint_every=10)  # several shards
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(folder), str(RUNS), str(len(ds))],
        env=env,
        capture_output=True,
        text=True,
        timeout=550,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    failed, statuses = run.stdout.split(" ", 1)
    why = f"{failed} of {RUNS} exits failed (wait statuses {statuses.strip()})"
    assert failed == "0", f"{why}: {run.stderr[-1000:]}"
