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

``--parquet`` measures a source larger than memory instead: one Parquet file
(~400 MB of int32 tokens decoded, 200 row groups) read whole versus streamed
by row groups under ``host_memory_limit`` (64 MB), same planner, threads and
shuffle=False. Each run is a fresh process (so its peak RSS is its own);
reported: examples/s (open + one epoch), the opening's seconds, peak RSS
growth over the process after imports and a warm-up, and row-group reads,
as medians over alternating repetitions (bench/harness.py) with min-max.
Both sides' batches are hashed and checked equal.

    python bench/bench_scale.py --parquet [--quick] [--force]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The multi-process launcher the tests use (tests/launch.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import harness  # noqa: E402
from launch import launch_local  # noqa: E402


def make_dataset(num_examples: int) -> jb.Dataset:
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 512, num_examples)
    values = rng.integers(0, 30000, int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return jb.Dataset.from_arrays({"tokens": (values, offsets)})


def worker(args) -> None:
    from launch import initialize_from_env

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
    for k in range(args.reps):  # The shards together are the epoch, each example once.
        seen = sum(r["examples"][k] for r in runs)
        if seen != args.examples:
            raise AssertionError(
                f"{processes} processes loaded {seen} examples in repetition {k + 1}, "
                f"expected the epoch's {args.examples}"
            )
    return [
        sum(r["examples"][k] for r in runs) / max(r["times"][k] for r in runs)
        for k in range(args.reps)
    ]


PARQUET_LIMIT = 64 << 20
PARQUET_THREADS = 2


def write_parquet(path: Path, groups: int, per_group: int = 1000, length: int = 500) -> int:
    """int32 token lists of lengths length/2..3*length/2, `per_group` per row
    group; returns the decoded bytes of the tokens."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    writer, decoded = None, 0
    for _ in range(groups):
        lengths = rng.integers(length // 2, length * 3 // 2, per_group)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = rng.integers(0, 30000, int(offsets[-1]), dtype=np.int32)
        table = pa.table({"tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        decoded += values.nbytes + offsets.nbytes
    writer.close()
    return decoded


def parquet_run(args) -> None:
    """One fresh process: warm up on a small file, then open and read the big
    one; prints examples, seconds, peak RSS growth and a hash of every batch."""
    import pyarrow.parquet  # noqa: F401 - its memory belongs to the baseline

    from jaxbatch import _core

    def status(key: str) -> int:
        """VmRSS (now) or VmHWM (peak) of this process: its own, where
        ru_maxrss would start at the forking parent's."""
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

    stream = args.parquet_run == "stream"
    options = dict(shuffle=False, num_threads=PARQUET_THREADS)
    if stream:
        options.update(stream=True, host_memory_limit=PARQUET_LIMIT)
    planner = jb.AutoBuckets(8, token_budget=65536)
    for _ in jb.Loader(args.small, planner, **options):
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # The peak restarts from here.
    baseline = status("VmRSS")
    start = time.perf_counter()
    loader = jb.Loader(args.big, planner, **options)
    opened = time.perf_counter() - start
    digest = 0
    for batch in loader:
        for name in sorted(batch):
            digest = _core.hash64(np.ascontiguousarray(batch[name]).tobytes(), digest)
    seconds = time.perf_counter() - start
    peak = status("VmHWM")
    stats = loader.stats
    loader.close()
    print(json.dumps({"examples": stats.examples, "seconds": seconds, "open_seconds": opened,
                      "rss_growth": peak - baseline, "chunk_reads": stats.chunk_reads,
                      "digest": digest}))  # fmt: skip


def parquet_main(args) -> None:
    import subprocess

    reps = harness.repetitions(args)
    env = harness.check_load(args.force)
    groups = 20 if args.quick else 200
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big.parquet", Path(tmp) / "small.parquet"
        decoded = write_parquet(big, groups)
        write_parquet(small, 2, per_group=100)

        def contender(mode):
            def run():
                out = subprocess.run(
                    [sys.executable, __file__, "--parquet-run", mode, "--big", str(big),
                     "--small", str(small)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                return json.loads(out.stdout.strip().splitlines()[-1])

            return run

        runs = harness.alternate({"bulk": contender("bulk"), "stream": contender("stream")}, reps)
    digests = {r["digest"] for rs in runs.values() for r in rs}
    if len(digests) != 1:
        raise AssertionError(f"bulk and stream batches differ: digests {digests}")
    print(
        f"bench_scale --parquet: {groups} row groups x 1000 examples, {decoded / 2**20:.0f} MB "
        f"decoded; AutoBuckets(8, token_budget=65536), shuffle=False, {PARQUET_THREADS} threads; "
        f"stream with host_memory_limit={PARQUET_LIMIT >> 20} MB; {reps} alternating repetitions, "
        f"{harness.describe(env)}"
    )
    rows = [["read", "examples/s", "open s", "peak RSS growth MB", "row-group reads"]]
    result = {"env": env, "decoded_bytes": decoded, "limit": PARQUET_LIMIT, "runs": runs}
    for name, rs in runs.items():
        rate = [r["examples"] / r["seconds"] for r in rs]
        rows.append([
            name, harness.spread(rate, ",.0f"), harness.spread([r["open_seconds"] for r in rs]),
            harness.spread([r["rss_growth"] / 2**20 for r in rs], ".0f"),
            str(rs[0]["chunk_reads"]),
        ])  # fmt: skip
        result[name] = {"examples_per_s": harness.summary(rate),
                        "rss_growth": harness.summary([r["rss_growth"] for r in rs])}  # fmt: skip
    ratio = [b["seconds"] / s["seconds"] for b, s in zip(runs["bulk"], runs["stream"], strict=True)]
    result["stream_speed_vs_bulk"] = harness.summary(ratio)
    print(harness.format_table(rows))
    print(f"stream / bulk examples/s: {harness.spread(ratio)} (per repetition pair)")
    print(f"wrote {harness.write_json('bench_scale_parquet', result)}")


def main() -> int | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parquet", action="store_true", help="Parquet bulk vs streamed")
    parser.add_argument("--parquet-run", choices=["bulk", "stream"], help=argparse.SUPPRESS)
    parser.add_argument("--big", help=argparse.SUPPRESS)
    parser.add_argument("--small", help=argparse.SUPPRESS)
    harness.add_arguments(parser, default_reps=3)
    parser.add_argument("--examples", type=int, default=None)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    if args.parquet_run:
        return parquet_run(args)
    if args.parquet:
        return parquet_main(args)
    args.reps = 3 if args.reps is None else args.reps  # Each is several processes' epoch.
    if args.examples is None:
        args.examples = 8000 if args.quick else 40000
    if args.worker:
        return worker(args)
    if args.reps < 3:
        parser.error("--reps must be >= 3 (a median with a spread)")
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_scale: {e}")
        return 1
    print(
        f"bench_scale: {args.examples} examples (lengths 8-511, AutoBuckets(8, "
        f"token_budget=32768)), {args.reps} repetitions, {args.cores} cores available, "
        f"CPU devices, 1 per process; {harness.describe(env)}"
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
    sys.exit(main())
