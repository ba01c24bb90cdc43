"""Loader benchmark: jb.Loader against tf.data, Grain, the PyTorch DataLoader
and NumPy and numba loops, all producing the same batches.

One output contract (bench/contract.py): a jaxbatch plan decides which
examples go into which batch, and every framework gets exactly those index
lists and must produce the same arrays from them; the first CHECK_BATCHES
batches of every configuration are checked byte-equal (names, dtypes, shapes,
values) to a per-example reference before any timing counts. So padding,
batch shapes and output bytes are the same for everyone, and what is timed
is the loading: gathering each batch's examples, padding or packing them,
and handing the arrays to the consumer.

Workload: NUM_EXAMPLES token sequences whose lengths are the embedded pydoc
paragraph lengths resampled with replacement (fixed seed), times 4 minus
0..3 (mean ~99 tokens, max 3120); int32 token ids in [1, 32000), stored once
as (values, offsets). Two plans, each the first TIMED_BATCHES batches of
jb.Loader's shuffled epoch (seed 0):
  padded  AutoBuckets(max_shapes=8, token_budget=32768): ~300 examples a batch;
  packed  Pack(row_length=4096, rows_per_batch=8, max_segments_per_row=64,
          algorithm="first_fit") over the whole (shuffled) data set.

Configurations, each with at most THREADS (2) threads or worker processes,
the cores of the machine (the harness records them); each framework set up as
its documentation recommends for speed, the variants tried once and the
fastest kept for the repetitions (all tuning runs are in the JSON):
  jaxbatch    jb.Loader(ds, planner, shuffle=True, seed=0, num_threads=2,
              prefetch=4); planning the epoch's 1M examples is its startup
              (reported, not in the rates): the anchors get the plan ready-made.
  NumPy       the vectorised collate (contract.Collate: one fancy-index gather
              of every real token and a masked store, no per-example loop) in
              a serial loop over the plan's batches (1 thread).
  numba       the collate as compiled per-example copies, serial (1 thread):
              what one C++-speed thread does without jaxbatch's threads or
              prefetch hints (not one of the target's anchors).
  tf.data     Dataset.range(batches).map(gather + pad with tf ops on a
              RaggedTensor | the NumPy collate via tf.numpy_function,
              num_parallel_calls=AUTOTUNE, deterministic=True).prefetch(AUTOTUNE),
              options.threading.private_threadpool_size=2.
  Grain       MapDataset.source(plan batches).map(NumPy collate): a batch-level
              source, read with ReadOptions(num_threads=2, prefetch_buffer_size=8),
              with ReadOptions(num_threads=0) (Grain's advice for in-memory
              data), or .mp_prefetch(MultiprocessingOptions(num_workers=2)).
  DataLoader  a Dataset whose __getitems__ runs the NumPy collate, batch_sampler
              = the plan's batches, collate_fn = identity, num_workers 0, 1
              or 2 (prefetch_factor 4), torch.set_num_threads(1).

Each figure is the median of REPS alternating repetitions (bench/harness.py)
with its min-max; ratios are jaxbatch / anchor within each repetition. A rate
is steady state: from the second batch to the last of the run; so is CPU per
batch (user + system of every thread, and of worker processes via psutil),
which, unlike wall time, holds on a machine other work shares. Bounds, to
say what limits jaxbatch: jb.collate alone (1 thread) on the same planner's
batches read in memory order and shuffled; cores busy (CPU seconds over wall
seconds); and once the machine's copy bandwidth (np.copyto from the token
values, read front to back, into rotating buffers of the mean output batch
size, 1 and 2 threads), the bound on bytes written per second.

Packing (bench/packers.py): jb.plan's packers against numba ports that
rebuild the same rows (checked), whole data set and a bounded window; and
jaxbatch's streaming loader against Grain's streaming packers.

Run: ``make bench``, or ``.venv-bench/bin/python bench/bench_loader.py
[--quick] [--force]``. Writes bench/results/bench_loader.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contract  # noqa: E402
import harness  # noqa: E402
import packers  # noqa: E402
from contract import Batch, BatchPlan, Collate, Tokens  # noqa: E402

import jaxbatch as jb  # noqa: E402
from jaxbatch._src.data.default_data import pydoc_lengths  # noqa: E402

SEED = 0
NUM_EXAMPLES = 1_000_000
QUICK_EXAMPLES = 20_000
LENGTH_SCALE = 4
VOCAB = 32_000
THREADS = 2
PREFETCH = 4
TOKEN_BUDGET = 32_768
# The packed plan's shape is the packing section's (bench/packers.py).
ROW_LENGTH, ROWS_PER_BATCH, MAX_SEGMENTS = (
    packers.ROW_LENGTH,
    packers.ROWS_PER_BATCH,
    packers.MAX_SEGMENTS,
)
TIMED_BATCHES = 2000
TUNE_BATCHES = 500
CHECK_BATCHES = 8
QUICK_TIMED_BATCHES = 12
QUICK_CHECK_BATCHES = 3
TARGET = 5.0  # jaxbatch / the best of tf.data, Grain and DataLoader
ANCHORS = ("tf.data", "Grain", "DataLoader")

Make = Callable[[int], Iterator[Batch]]


# --------------------------------------------------------------------------- data


def make_tokens(num_examples: int, seed: int = SEED) -> Tokens:
    rng = np.random.default_rng(seed)
    base = pydoc_lengths()
    lengths = base[rng.integers(0, len(base), num_examples)] * LENGTH_SCALE
    lengths = np.maximum(lengths - rng.integers(0, LENGTH_SCALE, num_examples), 1)
    offsets = np.zeros(num_examples + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(1, VOCAB, int(offsets[-1]), dtype=np.int32)
    return Tokens(values, offsets)


def planners() -> dict[str, Any]:
    return {
        "padded": jb.AutoBuckets(max_shapes=8, token_budget=TOKEN_BUDGET),
        # First fit: on shuffled input it fills rows as well as best-fit
        # decreasing without segment cap (0.02% padding here), while
        # best-fit decreasing under a 64-segment cap leaves the shortest
        # examples for last and pads ~20%.
        "packed": jb.Pack(
            ROW_LENGTH, ROWS_PER_BATCH, max_segments_per_row=MAX_SEGMENTS, algorithm="first_fit"
        ),
    }


def dataset(tokens: Tokens) -> jb.Dataset:
    return jb.Dataset.from_arrays({"tokens": (tokens.values, tokens.offsets)})


def jaxbatch_loader(tokens: Tokens, planner: Any) -> jb.Loader:
    return jb.Loader(
        dataset(tokens), planner, shuffle=True, seed=SEED, num_threads=THREADS, prefetch=PREFETCH
    )


def capture_plan(tokens: Tokens, name: str, planner: Any, count: int) -> BatchPlan:
    """The first `count` batches of jb.Loader's epoch as index lists: the plan
    every framework gets."""
    batches = []
    with jaxbatch_loader(tokens, planner) as loader:
        for batch in loader:
            batches.append(np.array(batch["example_index"], copy=True))
            if len(batches) == count:
                break
    whole = jb.plan(dataset(tokens), planner)
    return BatchPlan(
        name=name,
        planner=repr(planner),
        packed=whole.packed,
        boundaries=np.asarray(whole.boundaries, np.int64),
        batches=batches,
    )


# --------------------------------------------------------------------------- configurations
# Each configuration is a function count -> an iterator over the first `count`
# batches of the plan that releases its threads or processes when closed.


@dataclasses.dataclass(frozen=True)
class Variant:
    framework: str
    name: str
    describe: str
    make: Make
    threads: int = THREADS  # threads or processes that load


def jaxbatch_variant(tokens: Tokens, planner: Any) -> Variant:
    def make(count: int) -> Iterator[Batch]:
        loader = jaxbatch_loader(tokens, planner)
        try:
            for k, batch in enumerate(loader):
                yield batch
                if k + 1 == count:
                    break
        finally:
            loader.close()

    return Variant(
        "jaxbatch",
        "jaxbatch",
        f"jb.Loader(ds, {planner!r}, shuffle=True, seed={SEED}, num_threads={THREADS}, "
        f"prefetch={PREFETCH})",
        make,
    )


def numpy_variant(tokens: Tokens, plan: BatchPlan) -> Variant:
    collate = Collate(tokens, plan)

    def make(count: int) -> Iterator[Batch]:
        for ids in plan.batches[:count]:
            yield collate(ids)

    return Variant("NumPy", "NumPy", "serial loop: contract.Collate(ids) per batch", make, 1)


def numba_variants(tokens: Tokens, plan: BatchPlan) -> list[Variant]:
    """The collate as compiled loops (numba), serial: one copy per example,
    what a C++ collator does in one thread, without jaxbatch's threads or
    prefetch hints."""
    try:
        import numba
    except ImportError:
        return []

    @numba.njit(cache=False)
    def padded(values, offsets, ids, length):
        rows = len(ids)
        out = np.zeros((rows, length), np.int32)
        mask = np.zeros((rows, length), np.bool_)
        lens = np.zeros(rows, np.int32)
        for r in range(rows):
            e = ids[r]
            if e >= 0:
                a = offsets[e]
                n = offsets[e + 1] - a
                out[r, :n] = values[a : a + n]
                mask[r, :n] = True
                lens[r] = n
        return out, mask, lens

    @numba.njit(cache=False)
    def packed(values, offsets, ids, length):
        rows, segments = ids.shape
        out = np.zeros((rows, length), np.int32)
        seg = np.zeros((rows, length), np.int32)
        pos = np.zeros((rows, length), np.int32)
        lens = np.zeros((rows, segments), np.int32)
        for r in range(rows):
            used = 0
            for s in range(segments):
                e = ids[r, s]
                if e < 0:
                    continue
                a = offsets[e]
                n = offsets[e + 1] - a
                out[r, used : used + n] = values[a : a + n]
                for k in range(n):
                    seg[r, used + k] = s + 1
                    pos[r, used + k] = k
                lens[r, s] = n
                used += n
        return out, seg, pos, lens

    lengths = tokens.lengths

    def collate(ids: np.ndarray) -> Batch:
        length = plan.padded_length(lengths[ids[ids >= 0]])
        if plan.packed:
            out, seg, pos, lens = packed(tokens.values, tokens.offsets, ids, length)
            return {"tokens": out, "tokens_segment_ids": seg, "tokens_positions": pos,
                    "tokens_lengths": lens, "example_index": ids}  # fmt: skip
        out, mask, lens = padded(tokens.values, tokens.offsets, ids, length)
        return {"tokens": out, "tokens_mask": mask, "tokens_lengths": lens, "example_index": ids}

    collate(plan.batches[0])  # compiles, outside any timing

    def make(count: int) -> Iterator[Batch]:
        for ids in plan.batches[:count]:
            yield collate(ids)

    return [Variant("numba", "numba", "serial loop: compiled per-example copies", make, 1)]


def tf_variants(tokens: Tokens, plan: BatchPlan) -> list[Variant]:
    try:
        import tensorflow as tf
    except ImportError:
        return []
    n = len(tokens)
    # Index n is an empty example: where a row or segment has id -1.
    splits = np.append(tokens.offsets, tokens.offsets[-1])
    rt = tf.RaggedTensor.from_row_splits(
        tf.constant(tokens.values), tf.constant(splits), validate=False
    )
    lengths32 = tf.constant(np.append(tokens.lengths, 0).astype(np.int32))
    boundaries = tf.constant(plan.boundaries.astype(np.int32))
    empty = tf.constant(n, tf.int64)
    sizes = [b.size for b in plan.batches]
    starts = tf.constant(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    shape = plan.batches[0].shape[1:]
    flat_ids = tf.constant(np.concatenate([b.reshape(-1) for b in plan.batches]))

    def batch_ids(b):
        ids = flat_ids[starts[b] : starts[b + 1]]
        return tf.reshape(ids, [-1, *shape]) if plan.packed else ids

    def padded(b):
        ids = batch_ids(b)
        g = tf.gather(rt, tf.where(ids < 0, empty, ids))
        lens = tf.cast(g.row_lengths(), tf.int32)
        length = tf.gather(boundaries, tf.searchsorted(boundaries, [tf.reduce_max(lens)]))[0]
        rows = tf.shape(ids)[0]
        return {
            "tokens": g.to_tensor(0, shape=tf.stack([rows, length])),
            "tokens_mask": tf.sequence_mask(lens, length),
            "tokens_lengths": lens,
            "example_index": ids,
        }

    def packed(b):
        ids = batch_ids(b)
        real = ids >= 0
        flat = tf.boolean_mask(ids, real)
        g = tf.gather(rt, flat)
        ex_lens = g.row_lengths()
        segs = tf.reduce_sum(tf.cast(real, tf.int64), axis=1)
        row_tokens = tf.reduce_sum(tf.RaggedTensor.from_row_lengths(ex_lens, segs), axis=1)
        rows_rt = tf.RaggedTensor.from_row_lengths(g.flat_values, row_tokens)
        dense = [ids.shape[0], int(plan.boundaries[0])]
        seg_of_example = tf.cast(tf.ragged.range(segs).flat_values + 1, tf.int32)
        seg = rows_rt.with_flat_values(tf.repeat(seg_of_example, ex_lens))
        pos = rows_rt.with_flat_values(tf.cast(tf.ragged.range(ex_lens).flat_values, tf.int32))
        return {
            "tokens": rows_rt.to_tensor(0, shape=dense),
            "tokens_segment_ids": seg.to_tensor(0, shape=dense),
            "tokens_positions": pos.to_tensor(0, shape=dense),
            "tokens_lengths": tf.where(real, tf.gather(lengths32, tf.where(real, ids, empty)), 0),
            "example_index": ids,
        }

    collate = Collate(tokens, plan)
    keys = sorted(collate(plan.batches[0]))
    dtypes = [tf.as_dtype(collate(plan.batches[0])[k].dtype) for k in keys]

    def numpy_function(b):
        def run(b):
            out = collate(plan.batches[int(b)])
            return tuple(out[k] for k in keys)

        return dict(zip(keys, tf.numpy_function(run, [b], dtypes, stateful=False), strict=True))

    def variant(fn, label: str) -> Variant:
        def make(count: int) -> Iterator[Batch]:
            ds = tf.data.Dataset.range(count).map(
                fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
            )
            ds = ds.prefetch(tf.data.AUTOTUNE)
            options = tf.data.Options()
            options.threading.private_threadpool_size = THREADS
            ds = ds.with_options(options)
            yield from ds.as_numpy_iterator()

        return Variant(
            "tf.data",
            f"tf.data {label}",
            f"Dataset.range(batches).map({label}, num_parallel_calls=AUTOTUNE, "
            f"deterministic=True).prefetch(AUTOTUNE), private_threadpool_size={THREADS}",
            make,
        )

    ops = packed if plan.packed else padded
    return [
        variant(ops, "gather+pad in tf ops (RaggedTensor)"),
        variant(numpy_function, "tf.numpy_function(NumPy collate)"),
    ]


def grain_variants(tokens: Tokens, plan: BatchPlan) -> list[Variant]:
    try:
        import grain
    except ImportError:
        return []
    logging.getLogger("absl").setLevel(logging.ERROR)
    collate = Collate(tokens, plan)

    def variant(label: str, read: dict[str, int], workers: int) -> Variant:
        def make(count: int) -> Iterator[Batch]:
            ds = grain.MapDataset.source(plan.batches[:count]).map(collate)
            it_ds = ds.to_iter_dataset(grain.ReadOptions(**read))
            if workers:
                # Grain 0.2.18's mp_prefetch reads absl flags, which a script
                # not started by absl.app has not parsed.
                from absl import flags

                if not flags.FLAGS.is_parsed():
                    flags.FLAGS.mark_as_parsed()
                it_ds = it_ds.mp_prefetch(
                    grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=4)
                )
            it = iter(it_ds)
            try:
                yield from it
            finally:
                if hasattr(it, "close"):
                    it.close()

        read_text = ", ".join(f"{k}={v}" for k, v in read.items())
        mp = f".mp_prefetch(MultiprocessingOptions(num_workers={workers}))" if workers else ""
        return Variant(
            "Grain",
            f"Grain {label}",
            f"MapDataset.source(batches).map(collate).to_iter_dataset(ReadOptions({read_text})){mp}",
            make,
            max(1, workers, read["num_threads"]),
        )

    return [
        variant(f"{THREADS} read threads", {"num_threads": THREADS, "prefetch_buffer_size": 8}, 0),
        variant("in the caller's thread", {"num_threads": 0, "prefetch_buffer_size": 0}, 0),
        variant(f"mp_prefetch {THREADS} workers", {"num_threads": 0}, THREADS),
    ]


class TorchBatches:
    """A torch map-style Dataset whose __getitems__ gets a whole batch's ids
    (from the batch sampler) and collates them at once."""

    def __init__(self, collate: Collate, size: int):
        self.collate = collate
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        raise NotImplementedError("batches only: __getitems__")

    def __getitems__(self, ids: np.ndarray) -> dict:
        import torch

        return {k: torch.from_numpy(v) for k, v in self.collate(np.asarray(ids)).items()}


def identity(batch):
    return batch


def torch_variants(tokens: Tokens, plan: BatchPlan) -> list[Variant]:
    try:
        import torch
    except ImportError:
        return []
    collate = Collate(tokens, plan)

    def variant(workers: int) -> Variant:
        def make(count: int) -> Iterator[Batch]:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            loader = torch.utils.data.DataLoader(
                TorchBatches(collate, len(tokens)),
                batch_sampler=plan.batches[:count],
                collate_fn=identity,
                num_workers=workers,
                prefetch_factor=4 if workers else None,
            )
            it = iter(loader)
            try:
                for batch in it:
                    yield {k: v.numpy() for k, v in batch.items()}
            finally:
                del it  # joins the workers
                torch.set_num_threads(threads)

        extra = ", prefetch_factor=4" if workers else ""
        return Variant(
            "DataLoader",
            f"DataLoader {workers} workers",
            f"DataLoader(Dataset with __getitems__ = NumPy collate, batch_sampler=plan, "
            f"collate_fn=identity, num_workers={workers}{extra})",
            make,
            max(1, workers),
        )

    return [variant(w) for w in range(THREADS + 1)]


def variants(tokens: Tokens, plan: BatchPlan, planner: Any) -> dict[str, list[Variant]]:
    out = {
        "jaxbatch": [jaxbatch_variant(tokens, planner)],
        "NumPy": [numpy_variant(tokens, plan)],
        "numba": numba_variants(tokens, plan),
        "DataLoader": torch_variants(tokens, plan),
        "Grain": grain_variants(tokens, plan),
        "tf.data": tf_variants(tokens, plan),
    }
    return {k: v for k, v in out.items() if v}


# --------------------------------------------------------------------------- measuring


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (all its threads) and of its
    live child processes (worker processes; counted when psutil is installed,
    as in .venv-bench)."""
    total = time.process_time()
    try:
        import psutil
    except ImportError:
        return total
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def timed_run(variant: Variant, plan: BatchPlan, stats: list[dict], count: int) -> dict:
    """One run over the first `count` batches: startup is building the
    iterator and its first batch, the steady state the rest."""
    gc.collect()
    t0 = time.perf_counter()
    it = variant.make(count)
    next(it)
    t1, c1 = time.perf_counter(), cpu_seconds()
    batches = 1
    for _ in it:
        batches += 1
    t2, c2 = time.perf_counter(), cpu_seconds()
    it.close()
    if batches != count:
        raise AssertionError(f"{variant.name}: {batches} batches, expected {count}")
    steady = stats[1:count]
    seconds = t2 - t1
    examples = sum(s["examples"] for s in steady)
    nbytes = sum(s["bytes"] for s in steady)
    return {
        "startup_s": t1 - t0,
        "steady_s": seconds,
        "batches": count - 1,
        "examples": examples,
        "bytes": nbytes,
        "examples_per_s": examples / seconds,
        "bytes_per_s": nbytes / seconds,
        "cpu_us_per_batch": 1e6 * (c2 - c1) / (count - 1),
        "cores_busy": (c2 - c1) / seconds,
    }


def collate_bounds(tokens: Tokens, planner: Any, count: int, reps: int) -> dict[str, Any]:
    """CPU microseconds per batch of jb.collate alone (1 thread, no loader, no
    prefetch hints) over `count` batches of the planner's plan, its examples
    read in memory order (jb.plan over index order: each batch reads nearly
    contiguous bytes) and shuffled (as the loader reads them): what the
    random gather costs, and what the loader adds to collation."""
    ds = dataset(tokens)
    order = np.random.default_rng(SEED).permutation(len(tokens))
    out = {}
    for label, o in (("memory order", None), ("shuffled", order)):
        whole = jb.plan(ds, planner, order=o)
        specs = [whole[i] for i in range(min(count, len(whole)))]
        times = []
        for _ in range(reps):
            gc.collect()
            start = time.process_time()
            for spec in specs:
                jb.collate(ds, spec, num_threads=1)
            times.append(1e6 * (time.process_time() - start) / len(specs))
        out[label] = harness.summary(times)
    return out


def copy_bound(
    source: np.ndarray, batch_bytes: int, batches: int, threads: int, reps: int
) -> float:
    """Bytes per second np.copyto moves from `source` (the token values, far
    larger than the caches, read front to back) into PREFETCH + 2 rotating
    buffers of one output batch's size, `threads` threads at once (NumPy
    releases the GIL): a bound on writing the output bytes, with none of
    the gathering, padding or masking."""
    flat = source.view(np.uint8)
    per_thread = max(1, batches // threads)
    if per_thread * threads * batch_bytes > flat.size:
        per_thread = max(1, flat.size // (threads * batch_bytes))
    dst = [[np.zeros(batch_bytes, np.uint8) for _ in range(PREFETCH + 2)] for _ in range(threads)]

    def work(t: int) -> None:
        base = t * per_thread * batch_bytes
        for k in range(per_thread):
            start = base + k * batch_bytes
            np.copyto(dst[t][k % len(dst[t])], flat[start : start + batch_bytes])

    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(reps):
            start = time.perf_counter()
            list(pool.map(work, range(threads)))
            seconds = time.perf_counter() - start
            best = max(best, batch_bytes * per_thread * threads / seconds)
    return best


def bench_plan(
    tokens: Tokens, name: str, planner: Any, args: argparse.Namespace, reps: int
) -> dict[str, Any]:
    count = QUICK_TIMED_BATCHES if args.quick else TIMED_BATCHES
    tune = count if args.quick else TUNE_BATCHES
    checks = QUICK_CHECK_BATCHES if args.quick else CHECK_BATCHES
    plan = capture_plan(tokens, name, planner, count)
    if len(plan.batches) < count:
        raise RuntimeError(f"{name}: the plan has {len(plan.batches)} batches, fewer than {count}")
    stats = [contract.batch_stats(plan, tokens.lengths, ids) for ids in plan.batches]
    reference = [contract.reference_batch(tokens, plan, ids) for ids in plan.batches[:checks]]
    found = variants(tokens, plan, planner)
    # The contract first: every configuration's first batches equal the reference.
    for vs in found.values():
        for v in vs:
            it = v.make(checks)
            try:
                contract.check_stream(v.name, it, reference)
            finally:
                it.close()
    print(f"  {name}: {len(found)} frameworks, first {checks} batches byte-equal to the reference")
    # Tuning: one run per variant, the fastest kept.
    tuning: dict[str, Any] = {}
    chosen: dict[str, Variant] = {}
    for framework, vs in found.items():
        if len(vs) == 1:
            chosen[framework] = vs[0]
            continue
        runs = {v.name: timed_run(v, plan, stats, tune) for v in vs}
        tuning[framework] = {k: r["examples_per_s"] for k, r in runs.items()}
        best = max(vs, key=lambda v: runs[v.name]["examples_per_s"])
        chosen[framework] = best
        print(
            f"  {name} tuning {framework}: "
            + ", ".join(f"{k} {r:,.0f} ex/s" for k, r in tuning[framework].items())
        )
    runs = harness.alternate(
        {fw: (lambda v=v: timed_run(v, plan, stats, count)) for fw, v in chosen.items()}, reps
    )
    real = sum(s["tokens"] for s in stats)
    padded = sum(s["padded"] for s in stats)
    mean_bytes = sum(s["bytes"] for s in stats) // len(stats)
    result: dict[str, Any] = {
        "planner": plan.planner,
        "batches": count,
        "examples": sum(s["examples"] for s in stats),
        "padded_per_real_token": padded / real,
        "shapes": len(
            {(len(b), plan.padded_length(tokens.lengths[b[b >= 0]])) for b in plan.batches}
        ),
        "mean_batch_bytes": mean_bytes,
        "tuning": tuning,
        "configs": {
            fw: {"name": v.name, "describe": v.describe, "threads": v.threads}
            for fw, v in chosen.items()
        },
        "runs": runs,
        "summary": {},
        "ratios": {},  # jaxbatch examples/s over the anchor's, per repetition
        "cpu_ratios": {},  # the anchor's CPU per batch over jaxbatch's, per repetition
    }
    for fw, rs in runs.items():
        result["summary"][fw] = {
            key: harness.summary([r[key] for r in rs])
            for key in (
                "examples_per_s",
                "bytes_per_s",
                "startup_s",
                "cpu_us_per_batch",
                "cores_busy",
            )  # fmt: skip
        }
    ours = [r["examples_per_s"] for r in runs["jaxbatch"]]
    our_cpu = [r["cpu_us_per_batch"] for r in runs["jaxbatch"]]
    for fw, rs in runs.items():
        if fw != "jaxbatch":
            ratio = [a / r["examples_per_s"] for a, r in zip(ours, rs, strict=True)]
            result["ratios"][fw] = harness.summary(ratio)
            cpu = [r["cpu_us_per_batch"] / a for a, r in zip(our_cpu, rs, strict=True)]
            result["cpu_ratios"][fw] = harness.summary(cpu)
    anchors = [fw for fw in ANCHORS if fw in runs]
    if anchors:
        best = max(anchors, key=lambda fw: result["summary"][fw]["examples_per_s"]["median"])
        ratio = result["ratios"][best]
        result["target"] = {
            "against": best,
            "ratio": ratio,
            "cpu_ratio": result["cpu_ratios"][best],
            "target": TARGET,
            "met": ratio["median"] >= TARGET,
        }
    result["collate_cpu_us_per_batch"] = collate_bounds(tokens, planner, count, reps)
    copies = 2 if args.quick else 5
    result["copy_bytes_per_s"] = {
        f"{t} thread{'s' if t > 1 else ''}": copy_bound(tokens.values, mean_bytes, count, t, copies)
        for t in (1, THREADS)
    }
    return result


# --------------------------------------------------------------------------- report


def print_plan(name: str, r: dict[str, Any]) -> None:
    rows = [["framework (config)", "threads", "examples/s", "output MB/s", "padded/token",
             "CPU us/batch", "cores busy", "startup s", "jaxbatch / it: ex/s; CPU"]]  # fmt: skip
    for fw, s in r["summary"].items():
        ratio = ""
        if fw != "jaxbatch":
            q, c = r["ratios"][fw], r["cpu_ratios"][fw]
            ratio = (
                f"{q['median']:.2f}x ({q['min']:.2f}-{q['max']:.2f}); "
                f"CPU {c['median']:.2f}x ({c['min']:.2f}-{c['max']:.2f})"
            )
        ex = s["examples_per_s"]
        mb = s["bytes_per_s"]
        rows.append(
            [
                r["configs"][fw]["name"],
                str(r["configs"][fw]["threads"]),
                f"{ex['median']:,.0f} ({ex['min']:,.0f}-{ex['max']:,.0f})",
                f"{mb['median'] / 1e6:,.0f} ({mb['min'] / 1e6:,.0f}-{mb['max'] / 1e6:,.0f})",
                f"{r['padded_per_real_token']:.3f}",
                f"{s['cpu_us_per_batch']['median']:,.0f}",
                f"{s['cores_busy']['median']:.2f}",
                f"{s['startup_s']['median']:.2f}",
                ratio,
            ]
        )
    print(f"\n== {name}: {r['planner']}, first {r['batches']} batches ({r['examples']:,} examples, "
          f"{r['shapes']} shapes, {r['mean_batch_bytes'] / 1e6:.2f} MB a batch)")  # fmt: skip
    print(harness.format_table(rows))
    copies = ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in r["copy_bytes_per_s"].items())
    print(f"   copy bound (np.copyto from the token values into batch-sized buffers): {copies}")
    c = r["collate_cpu_us_per_batch"]
    print(
        f"   jb.collate alone, 1 thread, CPU us/batch: {c['memory order']['median']:.0f} reading "
        f"in memory order, {c['shuffled']['median']:.0f} shuffled"
    )
    if "target" in r:
        t = r["target"]
        print(
            f"   target jaxbatch >= {t['target']:g}x the best anchor ({t['against']}): "
            f"{t['ratio']['median']:.2f}x -> {'met' if t['met'] else 'NOT met'} (CPU per batch: "
            f"{t['cpu_ratio']['median']:.2f}x less)"
        )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_arguments(parser)
    parser.add_argument("--skip-packing", action="store_true", help="leave out the packers")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.getLogger("absl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    env = harness.check_load(args.force)
    reps = harness.repetitions(args)
    started = time.perf_counter()
    tokens = make_tokens(QUICK_EXAMPLES if args.quick else NUM_EXAMPLES)
    lengths = tokens.lengths
    print(
        f"workload: {len(tokens):,} sequences, {int(lengths.sum()):,} int32 tokens, length "
        f"mean {lengths.mean():.1f}, max {lengths.max()}; {THREADS} threads each; {reps} "
        f"alternating repetitions; load average {env['load_average']:.2f} on {env['cores']} "
        f"cores{' (forced)' if env['forced'] else ''}"
    )
    result: dict[str, Any] = {
        "benchmark": "bench_loader",
        "quick": args.quick,
        "env": env,
        "reps": reps,
        "threads": THREADS,
        "workload": {
            "num_examples": len(tokens),
            "tokens": int(lengths.sum()),
            "length_mean": float(lengths.mean()),
            "length_max": int(lengths.max()),
        },
        "versions": versions(),
        "plans": {},
    }
    for name, planner in planners().items():
        result["plans"][name] = bench_plan(tokens, name, planner, args, reps)
        print_plan(name, result["plans"][name])
    if not args.skip_packing:
        result["packing"] = packers.bench_packing(tokens.lengths, args, reps)
    result["load_average_end"] = os.getloadavg()[0]
    result["elapsed_s"] = time.perf_counter() - started
    path = harness.write_json("bench_loader", result)
    print(f"\nwrote {path} ({result['elapsed_s']:.0f} s)")
    return 0


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"numpy": np.__version__, "jaxbatch": jb.__version__}
    for dist in ("tensorflow-cpu", "grain", "torch", "numba"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


if __name__ == "__main__":
    sys.exit(main())
