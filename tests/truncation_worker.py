"""Changes a memory-mapped input under a running Loader, many times: the
stress test of tests/test_truncation.py runs this in a subprocess, where a
signal (SIGBUS from a read past a truncated file's end) is a clear failure,
the process's death, instead of pytest's.

    python truncation_worker.py KIND THREADS TRIALS SEED FOLDER

KIND is arrow, npy or huggingface. Each trial, in a process forked for it
(a signal kills only the trial, counted as "signal N"), copies pristine
data to a fresh path, starts a Loader over it with THREADS workers and,
after a random delay (a thread of its own), truncates one of its mapped
files to a random size, renames a new file over it, or renames it away,
while the main thread takes batches. A trial must end either normally, with
every batch equal to the reference's, or with an OSError whose message
names the file; every batch before the error must equal the reference's
too (none was read from zeros that stood in for the lost bytes). Prints
one JSON line: the counts.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

import jaxbatch as jb

EXAMPLES = 20000
MAX_LENGTH = 96
BATCH_SIZE = 256
MUTATIONS = ("truncate", "truncate", "truncate", "replace", "rename")


def token_rows(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1 << 30, rng.integers(1, MAX_LENGTH)) for _ in range(EXAMPLES)]


def write_pristine(kind: str, folder: Path, rows: list[np.ndarray]) -> Path:
    """The data as `kind` stores it, under `folder`: what each trial copies."""
    if kind == "arrow":
        import pyarrow as pa
        import pyarrow.feather as feather

        path = folder / "d.arrow"
        table = pa.table({"t": pa.array([r.tolist() for r in rows], pa.list_(pa.int64()))})
        feather.write_feather(table, path, compression="uncompressed")
        return path
    if kind == "npy":
        path = folder / "d"
        path.mkdir()
        lengths = np.array([len(r) for r in rows])
        np.save(path / "t.values.npy", np.concatenate(rows).astype(np.int64))
        np.save(path / "t.offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        return path
    import datasets

    datasets.disable_progress_bars()
    path = folder / "hf"
    features = datasets.Features({"t": datasets.List(datasets.Value("int64"))})
    ds = datasets.Dataset.from_dict({"t": [r.tolist() for r in rows]}, features=features)
    ds.save_to_disk(str(path))
    return path


def open_loader(kind: str, path: Path, threads: int):
    """A Loader over the data at `path` and the files it maps."""
    options = dict(prefetch=2, num_threads=threads, shuffle=False)
    planner = jb.PadToMax(BATCH_SIZE)
    if kind == "huggingface":
        import datasets

        ds = datasets.load_from_disk(str(path))
        files = [f["filename"] for f in ds.cache_files]
        return jb.Loader(ds, planner, **options), files
    loader = jb.Loader(str(path), planner, **options)
    files = [str(p) for p in sorted(path.glob("*.npy"))] if path.is_dir() else [str(path)]
    return loader, files


def mutate(how: str, file: str, rng: random.Random) -> None:
    if how == "truncate":
        size = os.path.getsize(file)
        # A cut inside the last page too: past it, reads find zeros, no fault.
        os.truncate(file, rng.choice([0, rng.randrange(size), max(size - rng.randrange(64), 0)]))
    elif how == "replace":
        spare = file + ".new"
        shutil.copyfile(file, spare)
        os.replace(spare, file)
    else:
        os.rename(file, file + ".gone")


def same_batch(batch, reference) -> bool:
    return batch.keys() == reference.keys() and all(
        np.array_equal(batch[k], reference[k]) for k in batch
    )


def trial(kind, pristine, workdir, threads, how, delay, rng, reference) -> str:
    """One run: 'complete', 'error' (an OSError naming the file) or a
    description of what went wrong."""
    path = workdir / pristine.name
    if pristine.is_dir():
        shutil.copytree(pristine, path)
    else:
        shutil.copyfile(pristine, path)
    loader, files = open_loader(kind, path, threads)
    victim = rng.choice(files)
    changer = threading.Timer(delay, mutate, (how, victim, rng))
    changer.start()
    batches = []  # Kept, compared after: a consumer that keeps up keeps the workers reading.
    try:
        batches.extend(loader)
        outcome = "complete" if len(batches) == len(reference) else "ended early"
    except OSError as e:
        named = victim in str(e)
        outcome = "error" if named else f"OSError not naming {victim}: {e}"
    finally:
        changer.join()
        loader.close()
    for step, batch in enumerate(batches):
        if step >= len(reference) or not same_batch(batch, reference[step]):
            return f"batch {step} differs from the reference"
    return outcome


def run_forked(job) -> str:
    """`job()`'s outcome, run in a child process: a signal kills only the
    child and is counted as 'signal N' with the trial that raised it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            outcome = job()
        except BaseException as e:  # noqa: BLE001 - reported, never lost
            outcome = f"raised {type(e).__name__}: {e}"
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return outcome


def main() -> None:
    kind, threads, trials, seed, folder = sys.argv[1:]
    threads, trials, rng = int(threads), int(trials), random.Random(int(seed))
    folder = Path(folder)
    (folder / "pristine").mkdir(parents=True)
    pristine = write_pristine(kind, folder / "pristine", token_rows(int(seed)))
    loader, _ = open_loader(kind, pristine, threads)
    start = time.perf_counter()
    reference = [{k: np.array(v) for k, v in b.items()} for b in loader]
    took = time.perf_counter() - start
    loader.close()
    workdir = folder / "work"
    workdir.mkdir()
    counts: dict[str, int] = {}
    for t in range(trials):
        how = MUTATIONS[t % len(MUTATIONS)]
        # Mostly while batches are read; some after the last one.
        delay = rng.uniform(0, 1.3 * took)
        trial_rng = random.Random(rng.random())
        shutil.rmtree(workdir)  # Here: a trial killed by a signal leaves its files.
        workdir.mkdir()
        job = functools.partial(
            trial, kind, pristine, workdir, threads, how, delay, trial_rng, reference
        )
        outcome = run_forked(job)
        good = outcome in ("complete", "error")
        key = outcome if good or outcome.startswith("signal") else "wrong"
        counts[key] = counts.get(key, 0) + 1
        if not good:
            print(f"trial {t} ({how} after {delay * 1e3:.1f} ms): {outcome}", file=sys.stderr)
    print(json.dumps({"counts": counts, "reference_s": took}))


if __name__ == "__main__":
    main()
