"""Loader throughput with 1, 2 and 4 jax.distributed processes on this machine.

Each process is a real jax.distributed CPU process (loopback coordinator,
gloo collectives, one device each) running ``jb.Loader(shard="jax")`` and
building global arrays with ``jb.global_batches``; each step runs a jitted
sum over the global batch, so every step is one collective across the
processes. Reported: global examples/s (examples of all processes / the
slowest process's time between two barriers), median of the repetitions and
their spread (min-max).

    python bench/bench_scale.py            # 3 repetitions of 1 epoch of 40,000 examples
    python bench/bench_scale.py --quick    # a smaller data set, for a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import jaxbatch as jb
from jaxbatch._launch import launch_local


def make_dataset(num_examples: int) -> jb.Dataset:
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 512, num_examples)
    values = rng.integers(0, 30000, int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return jb.Dataset.from_arrays({"tokens": (values, offsets)})


def worker(args) -> None:
    from jaxbatch._launch import initialize_from_env

    initialize_from_env(init_timeout=120)
    import jax
    from jax.experimental import multihost_utils

    ds = make_dataset(args.examples)
    planner = jb.AutoBuckets(8, token_budget=32768)
    total = jax.jit(lambda b: b["tokens"].sum())
    threads = max(1, args.cores // jax.process_count())
    times, examples = [], []
    for rep in range(args.reps + 1):  # the first run compiles: not timed
        multihost_utils.sync_global_devices(f"start {rep}")
        start = time.perf_counter()
        with jb.Loader(ds, planner, seed=rep, shard="jax", num_threads=threads) as loader:
            for batch in jb.global_batches(loader):
                total(batch).block_until_ready()
            count = loader.stats.examples
        elapsed = time.perf_counter() - start
        multihost_utils.sync_global_devices(f"end {rep}")
        if rep:
            times.append(elapsed)
            examples.append(count)
    out = Path(args.out) / f"{jax.process_index()}.json"
    out.write_text(json.dumps({"times": times, "examples": examples}))
    jax.distributed.shutdown()


def measure(processes: int, args) -> list[float]:
    """Global examples/s of each repetition."""
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, __file__, "--worker", "--out", out, "--cores", str(args.cores),
                "--examples", str(args.examples), "--reps", str(args.reps)]  # fmt: skip
        results = launch_local(argv, processes, local_devices=1, timeout=600)
        for r in results:
            if r.returncode != 0:
                raise RuntimeError(
                    f"process {r.process_id} failed (rc={r.returncode}):\n{r.output}"
                )
        runs = [json.loads((Path(out) / f"{i}.json").read_text()) for i in range(processes)]
    return [
        sum(r["examples"][k] for r in runs) / max(r["times"][k] for r in runs)
        for k in range(args.reps)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data set, 3 repetitions")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--examples", type=int, default=None)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    if args.examples is None:
        args.examples = 8000 if args.quick else 40000
    if args.worker:
        return worker(args)
    if args.reps < 3:
        parser.error("--reps must be >= 3 (a median with a spread)")
    print(
        f"bench_scale: {args.examples} examples (lengths 8-511, AutoBuckets(8, "
        f"token_budget=32768)), {args.reps} repetitions, {args.cores} cores available, "
        "CPU devices, 1 per process"
    )
    print(f"{'processes':>9} {'examples/s (median)':>20} {'min':>10} {'max':>10} {'vs 1':>6}")
    base = None
    for p in args.processes:
        rates = measure(p, args)
        median = statistics.median(rates)
        base = base or median
        print(f"{p:>9} {median:>20,.0f} {min(rates):>10,.0f} {max(rates):>10,.0f} "
              f"{median / base:>5.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
