"""Memory-mapped inputs truncated, replaced and renamed under a running
Loader, many times at random moments: each run must end with the reference
batches or an OSError naming the file, and never with a signal.

Each (kind, threads) runs tests/truncation_worker.py in a subprocess, which
forks once per trial: a SIGBUS (what a read past a truncated file's end
raised before the engine guarded its reads) kills only that trial's process
and is counted, naming the trial, rather than taking pytest down.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Per (kind, threads): 9 truncations, 3 replacements, 3 renames. About 3 s
# each here, most of it starting Python and writing the data.
TRIALS = 15
TIMEOUT_S = 120
WORKER = Path(__file__).with_name("truncation_worker.py")


def run_worker(kind: str, threads: int, seed: int, folder: Path) -> tuple[dict, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, str(WORKER), kind, str(threads), str(TRIALS), str(seed), str(folder)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, f"worker exited {done.returncode}; stderr:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])["counts"], done.stderr


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["arrow", "npy", "huggingface"])
def test_files_changed_under_a_loader_end_well_or_name_the_file(kind, threads, tmp_path):
    if kind == "huggingface":
        pytest.importorskip("datasets")
    counts, stderr = run_worker(kind, threads, seed=100 + threads, folder=tmp_path)
    signals = {k: n for k, n in counts.items() if k.startswith("signal")}
    assert not signals, f"trials killed by a signal: {signals}\n{stderr}"
    assert counts.get("wrong", 0) == 0, f"wrong outcomes:\n{stderr}"
    assert counts.get("complete", 0) + counts.get("error", 0) == TRIALS, counts
    # About half the changes land while batches are read (none in 15 is a
    # chance of about 1e-5): the test tests something.
    assert counts.get("error", 0) >= 1, counts


def test_collate_of_a_truncated_npy_file_raises_naming_it(tmp_path):
    # jb.collate reads the mapping in place, with no stamp to compare: the
    # read past the new end itself is the OSError, in a subprocess so that a
    # signal fails the test instead of killing pytest.
    code = """
import numpy as np, os, sys
import jaxbatch as jb
path = sys.argv[1]
np.save(path, np.arange(1 << 20, dtype=np.int64))
values = np.load(path, mmap_mode="r")
lengths = np.full(1024, 1024)
ds = jb.Dataset.from_arrays({"t": (values, np.concatenate([[0], np.cumsum(lengths)]))})
plan = jb.plan(ds, jb.PadToMax(256))
os.truncate(path, 4096)
try:
    jb.collate(ds, plan[2], num_threads=2)
except OSError as e:
    print(e)
"""
    path = str(tmp_path / "values.npy")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, f"exited {done.returncode}; stderr:\n{done.stderr}"
    assert f"collate: {path} was truncated while it was read" in done.stdout, done.stdout
