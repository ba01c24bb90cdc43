"""Core benchmark: planning and collation, reported as ratios.

The machine running this is usually shared and noisy, so every result is
also given as a ratio against an anchor measured in the same run on the same
data (np.argsort, the C++ gather bound of collation, a hand-written NumPy
collator): ratios hold where absolute times vary. Each timing is the best of
a few repeats (time.perf_counter), except the collation bound's: the median
of alternating repetitions with its min-max.

Two length distributions of 1M examples each:
  pydoc      the embedded pydoc paragraph lengths (2608), resampled with
             replacement (fixed seed);
  lognormal  median 100, sigma 0.8 (mean ~138), rounded, clipped to [1, 2048].

Sections:
  1. planning time and plan stats per planner (and the issue's efficiency
     targets on the plain 2608 pydoc lengths);
  2. collation against its physical bound (bench/cpp/collate_bound.cc: the
     same plan gathered by per-row memcpy + memset of the padding into the
     same arrays, same threads, reused buffers, and a faster bound an expert
     would write: persistent threads, prefetch, bulk clearing; built in
     build/cpp by ``make bench``), then jb.collate from Python against a
     NumPy per-example loop.
Packing against Grain's packers and compiled (numba) first-fit / best-fit
packers is in bench_loader.py, beside the loaders.

Run: ``make bench`` (installs the anchors into .venv-bench), or
``.venv-bench/bin/python bench/bench_core.py [--quick]``. Writes
bench/results/bench_core.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import jaxbatch as jb
from jaxbatch._src.data.default_data import pydoc_lengths

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

SEED = 0
MAX_LENGTH = 2048
ROW_LENGTH = 2048  # >= every example: packing never truncates.
PLAN_TOKEN_BUDGET = 65536  # elements per batch for the planning section
PAD_TO_MAX_BATCH = 128
COLLATE_TOKEN_BUDGET = 1 << 22  # 4M elements: padded batches ~20 MB, packed ~100 MB
SMALL_TOKEN_BUDGET = 1 << 16  # 64k elements: a loader worker's batch, ~0.3-0.5 MB
POW2 = [1 << k for k in range(12)]  # 1 .. 2048
RESULTS = Path(__file__).resolve().parent / "results" / "bench_core.json"
BOUND_BINARY = Path(__file__).resolve().parents[1] / "build" / "cpp" / "collate_bound"
SHORT_MEDIAN, SHORT_MAX = 16, 128  # short rows: under collator.cc's 512-byte bulk-clear rows


# --------------------------------------------------------------------------- data


def make_lengths(n: int) -> dict[str, np.ndarray]:
    """The two length distributions, n examples each, from fixed seeds."""
    rng = np.random.default_rng(SEED)
    pydoc = rng.choice(pydoc_lengths(), size=n, replace=True).astype(np.int64)
    rng = np.random.default_rng(SEED + 1)
    lognormal = np.clip(np.rint(rng.lognormal(math.log(100.0), 0.8, size=n)), 1, MAX_LENGTH)
    return {"pydoc": pydoc, "lognormal": lognormal.astype(np.int64)}


def make_tokens(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ragged int32 column: distinct values (so a wrong copy shows) and offsets."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.arange(offsets[-1], dtype=np.int32), offsets


# --------------------------------------------------------------------------- timing


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Best wall time of `repeats` calls, and the last call's result."""
    best, result = math.inf, None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def table(title: str, header: list[str], rows: list[list[Any]], note: str = "") -> None:
    cells = [[str(c) for c in header]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )

    print(f"\n== {title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for r in cells[1:]:
        print(line(r))
    if note:
        print(note)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 1e5:
            return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
        return f"{value:.3g}"
    return str(value)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# --------------------------------------------------------------------------- 1. planning


def planners() -> dict[str, jb.PadToMax | jb.FixedBuckets | jb.AutoBuckets | jb.Pack]:
    rows = PLAN_TOKEN_BUDGET // ROW_LENGTH
    return {
        f"PadToMax(batch_size={PAD_TO_MAX_BATCH})": jb.PadToMax(PAD_TO_MAX_BATCH),
        "FixedBuckets(pow2)": jb.FixedBuckets(POW2, token_budget=PLAN_TOKEN_BUDGET),
        "AutoBuckets(8)": jb.AutoBuckets(8, token_budget=PLAN_TOKEN_BUDGET),
        "AutoBuckets(16)": jb.AutoBuckets(16, token_budget=PLAN_TOKEN_BUDGET),
        "Pack best_fit": jb.Pack(ROW_LENGTH, rows, algorithm="best_fit"),
        "Pack first_fit": jb.Pack(ROW_LENGTH, rows, algorithm="first_fit"),
    }


def bench_planning(all_lengths: dict[str, np.ndarray], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dist, lengths in all_lengths.items():
        sort_s, _ = best_of(lambda lengths=lengths: np.argsort(lengths, kind="stable"), repeats)
        rows, results = [], {}
        for name, planner in planners().items():
            seconds, plan = best_of(lambda p=planner, lengths=lengths: jb.plan(lengths, p), repeats)
            s = plan.stats
            results[name] = {
                "planner": repr(planner),
                "seconds": seconds,
                "ns_per_example": 1e9 * seconds / len(lengths),
                "vs_argsort": seconds / sort_s,
                "efficiency": s.efficiency,
                "shapes": s.shapes,
                "batches": s.batches,
                "real_elements": s.real_elements,
                "padded_elements": s.padded_elements,
            }
            rows.append(
                [
                    name,
                    1e3 * seconds,
                    results[name]["ns_per_example"],
                    seconds / sort_s,
                    pct(s.efficiency),
                    s.shapes,
                    s.batches,
                ]
            )
        table(
            f"1. planning, {dist}: {len(lengths):,} examples, mean length "
            f"{lengths.mean():.1f}, max {lengths.max()} (token_budget {PLAN_TOKEN_BUDGET}, "
            f"row_length {ROW_LENGTH})",
            ["planner", "ms", "ns/example", "x argsort", "real elements", "shapes", "batches"],
            rows,
            f"   x argsort: plan time / np.argsort(lengths, kind='stable') = {1e3 * sort_s:.1f} ms",
        )
        out[dist] = {"argsort_seconds": sort_s, "planners": results}
    return out


def pydoc_targets() -> dict[str, Any]:
    """The issue's targets on the plain 2608 pydoc lengths, under both
    remainder policies: the bucket padding alone ("keep") and with the last
    partial batch of each bucket padded to a full batch ("pad", the default)."""
    lengths = pydoc_lengths()
    cases = {
        "AutoBuckets(8)": (
            lambda r: jb.AutoBuckets(8, token_budget=PLAN_TOKEN_BUDGET, remainder=r),
            "~75%",
        ),
        "AutoBuckets(16)": (
            lambda r: jb.AutoBuckets(16, token_budget=PLAN_TOKEN_BUDGET, remainder=r),
            "~89%",
        ),
        "FixedBuckets(pow2)": (
            lambda r: jb.FixedBuckets(POW2, token_budget=PLAN_TOKEN_BUDGET, remainder=r),
            "~70%, 11 shapes",
        ),
        "Pack best_fit": (
            lambda r: jb.Pack(ROW_LENGTH, PLAN_TOKEN_BUDGET // ROW_LENGTH, remainder=r),
            ">= 99%",
        ),
    }
    rows, out = [], {}
    for name, (make, target) in cases.items():
        keep, pad = jb.plan(lengths, make("keep")).stats, jb.plan(lengths, make("pad")).stats
        out[name] = {
            "target": target,
            "keep": {"efficiency": keep.efficiency, "shapes": keep.shapes, "batches": keep.batches},
            "pad": {"efficiency": pad.efficiency, "shapes": pad.shapes, "batches": pad.batches},
        }
        rows.append(
            [name, target, pct(keep.efficiency), keep.shapes, pct(pad.efficiency), pad.shapes]
        )
    table(
        f"1b. targets on the plain pydoc lengths ({len(lengths)} examples, "
        f"{int(lengths.sum())} tokens, token_budget {PLAN_TOKEN_BUDGET})",
        ["planner", "target", "keep: real", "shapes", "pad: real", "shapes"],
        rows,
        "   keep: bucket padding only (independent of token_budget). pad (the default): each\n"
        "   bucket's last batch is padded to token_budget // length rows; here the whole data\n"
        f"   set ({int(lengths.sum())} tokens) is about one token_budget, so remainder rows\n"
        "   dominate and AutoBuckets' DP, which counts them, picks fewer shapes than allowed.",
    )
    return out


# --------------------------------------------------------------------------- 2. collation


def short_lengths(n: int) -> np.ndarray:
    """Short sequences (lognormal, median 16, clipped to [1, 128]): rows of
    at most 512 bytes of int32."""
    rng = np.random.default_rng(SEED + 2)
    short = np.rint(rng.lognormal(math.log(SHORT_MEDIAN), 0.8, size=n))
    return np.clip(short, 1, SHORT_MAX).astype(np.int64)


def run_bound(lengths: np.ndarray, plan: str, threads: int, reps: int) -> dict[str, Any]:
    """Runs bench/cpp/collate_bound on `lengths` (it builds the same int32
    dataset and plan, checks both outputs byte-equal, times them alternately)."""
    if not BOUND_BINARY.exists():
        raise SystemExit(
            f"{BOUND_BINARY} is missing: build it with `make bench`, or "
            "`.venv/bin/cmake --build build/cpp --target collate_bound` after `make test-cpp`"
        )
    with tempfile.NamedTemporaryFile(suffix=".int64") as f:
        lengths.astype("<i8").tofile(f.name)
        cmd = [str(BOUND_BINARY), "--lengths", f.name, "--plan", plan]
        cmd += ["--threads", str(threads), "--reps", str(reps)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def bench_bound(
    lengths: dict[str, np.ndarray], threads: int, reps: int, quick: bool
) -> dict[str, Any]:
    """jaxbatch's collation as a fraction of the simple and the fast gather
    bound, per case."""
    short = short_lengths(len(lengths["lognormal"]))
    budget = COLLATE_TOKEN_BUDGET // 8 if quick else COLLATE_TOKEN_BUDGET
    autobuckets = f"autobuckets:16:{budget}"
    small = f"autobuckets:16:{SMALL_TOKEN_BUDGET}"
    # (lengths, plan, threads): large batches on every thread, and a loader
    # worker's batches (a few hundred kB, one thread each), where the
    # per-batch and per-row overheads show.
    cases = {
        f"padded short rows (lognormal median {SHORT_MEDIAN}, <= {SHORT_MAX})": (
            short,
            autobuckets,
            threads,
        ),
        "padded long rows (lognormal median 100)": (lengths["lognormal"], autobuckets, threads),
        "padded long rows (pydoc)": (lengths["pydoc"], autobuckets, threads),
        "packed (lognormal)": (
            lengths["lognormal"],
            f"pack:{ROW_LENGTH}:{budget // ROW_LENGTH}",
            threads,
        ),
        "small batches, padded short rows": (short, small, 1),
        "small batches, padded long rows (pydoc)": (lengths["pydoc"], small, 1),
        "small batches, packed (lognormal)": (
            lengths["lognormal"],
            f"pack:{ROW_LENGTH}:{SMALL_TOKEN_BUDGET // ROW_LENGTH}",
            1,
        ),
    }
    out: dict[str, Any] = {}
    rows = []
    for name, (case_lengths, plan, case_threads) in cases.items():
        r = run_bound(case_lengths, plan, case_threads, reps)
        jb_s = r["jaxbatch_seconds"]
        fractions = [b / j for b, j in zip(r["bound_seconds"], jb_s, strict=True)]
        fast = [b / j for b, j in zip(r["fast_bound_seconds"], jb_s, strict=True)]
        r["jaxbatch_over_bound"] = harness.summary(fractions)
        r["jaxbatch_over_fast_bound"] = harness.summary(fast)
        out[name] = r
        gbs = r["output_bytes"] / 1e9
        rows.append(
            [
                name,
                plan,
                case_threads,
                r["batches"],
                f"{r['max_batch_bytes'] / 1e6:.1f}",
                gbs / harness.summary(r["bound_seconds"])["median"],
                gbs / harness.summary(r["fast_bound_seconds"])["median"],
                gbs / harness.summary(jb_s)["median"],
                harness.spread([100 * f for f in fractions], ".0f") + "%",
                harness.spread([100 * f for f in fast], ".0f") + "%",
            ]
        )
    memcpy = next(iter(out.values()))
    table(
        f"2a. collation vs the gather bounds in C++ (the same threads all, reused buffers, "
        f"median of {reps} interleaved repetitions)",
        [
            "case",
            "plan",
            "threads",
            "batches",
            "max MB",
            "simple GB/s",
            "fast GB/s",
            "jb GB/s",
            "jb / simple (min-max)",
            "jb / fast (min-max)",
        ],
        rows,
        "   simple bound: bench/cpp/collate_bound.cc, per row one memcpy of the example and one\n"
        "   memset of the padding, mask/lengths or segment_ids/positions/lengths and\n"
        "   example_index in the same pass, rows split over the threads as the collator splits\n"
        "   them, fresh threads per batch.\n"
        "   fast bound: the same pass with a persistent thread pool, software prefetch of the\n"
        "   examples ahead and short rows cleared in bulk (its config in the JSON).\n"
        "   jb: jaxbatch::Collate() with an allocator handing out the same reused buffers.\n"
        "   Outputs checked byte-equal for every batch first; then batch by batch, each in\n"
        "   turn, in an order shuffled per batch. GB/s counts output bytes.\n"
        "   jb / bound = bound seconds / jaxbatch seconds per repetition (target >= 60% of the\n"
        "   simple bound).\n"
        f"   memcpy of a batch-sized buffer on this machine: "
        f"{memcpy['memcpy_gb_per_s_1_thread']:.1f} GB/s with 1 thread, "
        f"{memcpy['memcpy_gb_per_s_threads']:.1f} GB/s with {threads}.",
    )
    return out


def numpy_collate_padded(values, offsets, ids, rows, length):
    """The usual hand-written padded collator, one example at a time."""
    tokens = np.full((rows, length), 0, dtype=values.dtype)
    mask = np.zeros((rows, length), dtype=bool)
    lengths = np.zeros(rows, dtype=np.int32)
    index = np.full(rows, -1, dtype=np.int64)
    for r, e in enumerate(ids):
        a, b = offsets[e], offsets[e + 1]
        n = b - a
        tokens[r, :n] = values[a:b]
        mask[r, :n] = True
        lengths[r] = n
        index[r] = e
    return {
        "tokens": tokens,
        "tokens_mask": mask,
        "tokens_lengths": lengths,
        "example_index": index,
    }


def numpy_collate_packed(values, offsets, ids, row_begin, rows, length, segments):
    """The usual hand-written packing collator (Grain's output names)."""
    tokens = np.full((rows, length), 0, dtype=values.dtype)
    segment_ids = np.zeros((rows, length), dtype=np.int32)
    positions = np.zeros((rows, length), dtype=np.int32)
    seg_lengths = np.zeros((rows, segments), dtype=np.int32)
    index = np.full((rows, segments), -1, dtype=np.int64)
    arange = np.arange(length, dtype=np.int32)
    for r in range(len(row_begin) - 1):
        used = 0
        for s, e in enumerate(ids[row_begin[r] : row_begin[r + 1]]):
            a, b = offsets[e], offsets[e + 1]
            n = b - a
            tokens[r, used : used + n] = values[a:b]
            segment_ids[r, used : used + n] = s + 1
            positions[r, used : used + n] = arange[:n]
            seg_lengths[r, s] = n
            index[r, s] = e
            used += n
    return {
        "tokens": tokens,
        "tokens_segment_ids": segment_ids,
        "tokens_positions": positions,
        "tokens_lengths": seg_lengths,
        "example_index": index,
    }


def numpy_inputs(plan: jb.BatchPlan) -> list[tuple[jb.BatchShape, list[int], list[int]]]:
    """Per batch what a hand-written collator gets: its shape, example ids
    and row starts as plain lists, prepared outside timing."""
    out = []
    for spec in plan:
        starts = np.cumsum([0] + [len(r) for r in spec.rows]).tolist()
        out.append((spec.shape, spec.example_ids.tolist(), starts))
    return out


def numpy_collate(values, offsets, packed: bool, shape: jb.BatchShape, ids, starts):
    if packed:
        return numpy_collate_packed(
            values, offsets, ids, starts, shape.rows, shape.length, shape.segments
        )
    return numpy_collate_padded(values, offsets, ids, shape.rows, shape.length)


def run_jaxbatch_collate(ds: jb.Dataset, specs: list[jb.BatchSpec]) -> int:
    """Collates every batch in one thread (as the NumPy loop); returns the output bytes."""
    total = 0
    for spec in specs:
        batch = jb.collate(ds, spec, num_threads=1, padded_segments=False)
        total += sum(a.nbytes for a in batch.values())
    return total


def run_numpy_collate(values, offsets, packed: bool, inputs: list[tuple]) -> None:
    for shape, ids, starts in inputs:
        numpy_collate(values, offsets, packed, shape, ids, starts)


def collate_case(dataset: tuple, planner, repeats: int) -> dict[str, Any]:
    """One plan's collation from Python against the NumPy per-example loop."""
    values, offsets, ds = dataset
    plan = jb.plan(ds, planner)
    specs = list(plan)
    jb_s, nbytes = best_of(lambda: run_jaxbatch_collate(ds, specs), repeats)
    inputs = numpy_inputs(plan)
    # Same arrays, checked once outside timing (first and last batch).
    for k in sorted({0, len(specs) - 1}):
        want = numpy_collate(values, offsets, plan.packed, *inputs[k])
        got = jb.collate(ds, specs[k], padded_segments=False)  # the loop's arrays
        assert sorted(got) == sorted(want), (sorted(got), sorted(want))
        for key, array in want.items():
            assert got[key].dtype == array.dtype, (key, got[key].dtype, array.dtype)
            np.testing.assert_array_equal(got[key], array, err_msg=f"{planner} {key}")
    # The loop is slow and steady: one repeat fewer.
    np_s, _ = best_of(
        lambda: run_numpy_collate(values, offsets, plan.packed, inputs), max(1, repeats - 1)
    )
    n = ds.num_examples
    return {
        "planner": repr(planner),
        "batches": len(specs),
        "efficiency": plan.stats.efficiency,
        "output_bytes": nbytes,
        "batch_bytes_mean": max(1, nbytes // len(specs)),
        "output_arrays": {k: [list(a.shape), str(a.dtype)] for k, a in got.items()},
        "jaxbatch_seconds": jb_s,
        "numpy_loop_seconds": np_s,
        "jaxbatch_gb_per_s": nbytes / jb_s / 1e9,
        "numpy_loop_gb_per_s": nbytes / np_s / 1e9,
        "jaxbatch_examples_per_s": n / jb_s,
        "numpy_loop_examples_per_s": n / np_s,
        "ratio_jaxbatch_vs_numpy_loop": np_s / jb_s,
    }


def bench_collation(datasets: dict[str, tuple], repeats: int) -> dict[str, Any]:
    configs = {
        "padded AutoBuckets(16)": jb.AutoBuckets(16, token_budget=COLLATE_TOKEN_BUDGET),
        "packed Pack best_fit": jb.Pack(ROW_LENGTH, COLLATE_TOKEN_BUDGET // ROW_LENGTH),
    }
    out: dict[str, Any] = {}
    rows = []
    for dist, dataset in datasets.items():
        for label, planner in configs.items():
            r = collate_case(dataset, planner, repeats)
            name = f"{dist} / {label}"
            out[name] = r
            rows.append(
                [
                    name,
                    r["batches"],
                    pct(r["efficiency"]),
                    f"{r['batch_bytes_mean'] / 1e6:.0f}",
                    r["jaxbatch_gb_per_s"],
                    r["numpy_loop_gb_per_s"],
                    f"{r['ratio_jaxbatch_vs_numpy_loop']:.1f}x",
                ]
            )
    table(
        f"2b. jb.collate from Python vs a NumPy per-example loop, 1 thread each "
        f"(token_budget {COLLATE_TOKEN_BUDGET}, every batch of the plan)",
        ["plan", "batches", "real", "MB/batch", "jb GB/s", "np GB/s", "jb / np loop"],
        rows,
        "   GB/s counts every output array (values, mask or segment ids/positions, lengths,\n"
        "   example_index). np: the usual hand-written loop, one example at a time, producing\n"
        "   the same arrays (checked equal): an anchor for the Python-level cost, not a bound\n"
        "   (2a is the bound). jb.collate includes the binding and fresh output arrays.",
    )
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k examples, a smoke run")
    parser.add_argument("--examples", type=int, help="examples per distribution (default 1M)")
    parser.add_argument("--repeats", type=int, help="timing repeats, best kept (default 3)")
    parser.add_argument(
        "--force", action="store_true", help="run even when the load average is above the cores"
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="collation threads (section 2a)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args(argv)
    n = args.examples or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (2 if args.quick else 3)
    machine = harness.check_load(args.force)

    start = time.perf_counter()
    print(
        f"jaxbatch {jb.__version__} core benchmark: {n:,} examples per distribution, best of "
        f"{repeats}; {harness.describe(machine)}, Python {platform.python_version()}, "
        f"numpy {np.__version__}"
    )
    all_lengths = make_lengths(n)
    datasets = {}
    for dist, lengths in all_lengths.items():
        values, offsets = make_tokens(lengths)
        datasets[dist] = (values, offsets, jb.Dataset.from_arrays({"tokens": (values, offsets)}))

    results: dict[str, Any] = {
        "config": {
            "examples": n,
            "repeats": repeats,
            "quick": args.quick,
            "seed": SEED,
            "row_length": ROW_LENGTH,
            "plan_token_budget": PLAN_TOKEN_BUDGET,
            "collate_token_budget": COLLATE_TOKEN_BUDGET,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "jaxbatch": jb.__version__,
            "machine": platform.machine(),
            "load": machine,
        },
        "lengths": {
            d: {"mean": float(v.mean()), "max": int(v.max()), "tokens": int(v.sum())}
            for d, v in all_lengths.items()
        },
    }
    results["planning"] = bench_planning(all_lengths, repeats)
    results["pydoc_targets"] = pydoc_targets()
    bound_reps = harness.QUICK_REPS if args.quick else max(repeats, harness.MIN_REPS)
    results["collation_bound"] = bench_bound(all_lengths, args.threads, bound_reps, args.quick)
    results["collation"] = bench_collation(datasets, repeats)
    results["total_seconds"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out} ({results['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
