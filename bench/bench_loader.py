"""Loader benchmark: jb.Loader against tf.data, Grain, the PyTorch DataLoader
and NumPy and numba loops, naive and expert, all producing the same batches.

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
fastest kept for the repetitions (all tuning runs are in the JSON). Naive:
what the framework's documentation shows; the target's anchors are the naive
tf.data, Grain and DataLoader. Expert: what one writes to go fast in numba
or tf.data, the baselines jaxbatch's margin is taken over.
  jaxbatch    jb.Loader(ds, planner, shuffle=True, seed=0, num_threads=2,
              prefetch=4); planning the epoch's 1M examples is its startup
              (reported, not in the rates): the others get the plan ready-made.
  NumPy       (naive) the vectorised collate (contract.Collate: one fancy-index
              gather of every real token and a masked store, no per-example
              loop) in a serial loop over the plan's batches (1 thread).
  numba       (naive) the collate as compiled per-example copies, serial (1
              thread): what one C++-speed thread does without jaxbatch's
              threads or prefetch hints (not one of the target's anchors).
  numba batched (expert)  one @njit(nogil=True) call fills 4, 8 or 16
              consecutive batches into reused ring buffers (a task's buffers
              come back once the consumer is prefetch + 2 batches past them,
              as jb.Loader promises), on a ThreadPoolExecutor(2) that lives
              for the run, 3 tasks queued ahead, batches in plan order; each
              task's layout (padded lengths, places) computed in the timed
              loop.
  tf.data dense (expert)  Dataset.range(batches).map(one GatherV2 of a dense
              [rows, length] index array into the values with a 0 appended,
              which padding points at; mask, lengths (and packed: segment ids,
              positions) from dense ops), AUTOTUNE map and prefetch, the same
              Options. The index arrays are built in the map function (timed)
              or precomputed in NumPy for the run's batches when the iterator
              starts (packed: with the segment ids and positions, which the map
              copies with GatherV2): in its startup s, not in its rates, and
              printed as precompute us a batch.
  tf.data     (naive) Dataset.range(batches).map(gather + pad with tf ops on a
              RaggedTensor | the NumPy collate via tf.numpy_function,
              num_parallel_calls=AUTOTUNE, deterministic=True).prefetch(AUTOTUNE),
              options.threading.private_threadpool_size=2.
  Grain       (naive) MapDataset.source(plan batches).map(NumPy collate): a
              batch-level source, read with ReadOptions(num_threads=2,
              prefetch_buffer_size=8), with ReadOptions(num_threads=0) (Grain's
              advice for in-memory data), or
              .mp_prefetch(MultiprocessingOptions(num_workers=2)).
  DataLoader  (naive) a Dataset whose __getitems__ runs the NumPy collate,
              batch_sampler = the plan's batches, collate_fn = identity,
              num_workers 0, 1 or 2 (prefetch_factor 4),
              torch.set_num_threads(1).

Each figure is the median of REPS alternating repetitions (bench/harness.py)
with its min-max; ratios are jaxbatch / the other within each repetition, and
the margin over the best expert is jaxbatch's rate over the faster expert's
(numba batched or tf.data dense) in each repetition. A rate is steady state:
from the second batch to the last of the run; so is CPU per batch (user +
system of every thread, and of worker processes via psutil), which, unlike
wall time, holds on a machine other work shares. Bounds, to say what limits
jaxbatch: jb.collate alone (1 thread) on the same planner's batches read in
memory order and shuffled; cores busy (CPU seconds over wall seconds); and
once the machine's copy bandwidth (np.copyto from the token values, read
front to back, into rotating buffers of the mean output batch size, 1 and 2
threads), the bound on bytes written per second.

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
from collections import deque
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
TARGET = 5.0  # jaxbatch / the best of tf.data, Grain and DataLoader (naive)
ANCHORS = ("tf.data", "Grain", "DataLoader")
# What an expert writes to go fast in numba and in tf.data: the margin is
# jaxbatch's rate over the faster of them, repetition by repetition.
EXPERTS = ("numba batched (expert)", "tf.data dense (expert)")
BATCHES_PER_TASK = (4, 8, 16)  # numba batched: batches one compiled call fills
IN_FLIGHT = THREADS + 1  # numba batched: tasks queued ahead
HOLD = PREFETCH + 2  # batches a consumer may keep at once (jb.Loader: prefetch + 2)

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
    # The arrays the anchors give: values, mask, lengths (no padded segment ids).
    return jb.Loader(
        dataset(tokens),
        planner,
        shuffle=True,
        seed=SEED,
        num_threads=THREADS,
        prefetch=PREFETCH,
        padded_segments=False,
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
    # Filled by make: figures of the last run beside its timings (tf.data
    # dense's precompute), copied into timed_run's result.
    notes: dict[str, float] = dataclasses.field(default_factory=dict)


# jaxbatch's packed batches also carry tokens_segment_starts [rows, S] (the
# offsets fused attention kernels take), which no anchor writes: jaxbatch
# pays for writing it, and it is left out of what the contract compares.
EXTRA = "tokens_segment_starts"


def jaxbatch_variant(tokens: Tokens, planner: Any) -> Variant:
    def make(count: int) -> Iterator[Batch]:
        loader = jaxbatch_loader(tokens, planner)
        try:
            for k, batch in enumerate(loader):
                yield {name: array for name, array in batch.items() if name != EXTRA}
                if k + 1 == count:
                    break
        finally:
            loader.close()

    return Variant(
        "jaxbatch",
        "jaxbatch",
        f"jb.Loader(ds, {planner!r}, shuffle=True, seed={SEED}, num_threads={THREADS}, "
        f"prefetch={PREFETCH}, padded_segments=False)",
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


class _Arena:
    """One task's output memory: every array of its batches lies in these
    flat buffers (batch k's tokens at layout[k, 1], its lengths at
    layout[k, 2]); the batches handed out are views. Reused once the
    consumer is HOLD batches past the task's last batch."""

    def __init__(self, packed: bool):
        self.packed = packed
        self.tokens = np.empty(0, np.int32)
        self.aux = np.empty(0, np.int32 if packed else np.bool_)  # segment ids | mask
        self.positions = np.empty(0, np.int32)
        self.lengths = np.empty(0, np.int32)

    def ensure(self, elements: int, segments: int) -> None:
        if self.tokens.size < elements:
            size = elements + elements // 4
            self.tokens = np.empty(size, np.int32)
            self.aux = np.empty(size, self.aux.dtype)
            if self.packed:
                self.positions = np.empty(size, np.int32)
        if self.lengths.size < segments:
            self.lengths = np.empty(segments + segments // 4, np.int32)


def numba_batched_variants(tokens: Tokens, plan: BatchPlan) -> list[Variant]:
    """Expert: what one writes with numba to go fast. One @njit(nogil=True)
    call fills BATCHES_PER_TASK consecutive batches into one task's flat
    buffers, on a ThreadPoolExecutor of THREADS threads that lives for the
    whole run, IN_FLIGHT tasks queued ahead; batches come out in plan order
    as views of those buffers. The buffers are a ring reused across tasks:
    a task's buffers go back to the ring once the consumer is HOLD batches
    past its last batch (what jb.Loader promises: keep at most prefetch + 2
    batches), so the ring holds at most IN_FLIGHT + ceil(HOLD / batches per
    task) + 1 tasks' worth, allocated on first use and then reused. Each
    task's layout (every batch's padded length and place in the buffers) is
    computed in the timed loop by a second compiled function on the
    consumer's thread; the plan's index lists are handed over concatenated
    (one int64 array and the batch starts, built once, like tf.data's)."""
    try:
        import numba
    except ImportError:
        return []

    @numba.njit(nogil=True, cache=False)
    def lay_out(lengths, flat, starts, b0, b1, boundaries, segments, packed, layout):
        elements = 0
        slots = 0
        for k in range(b1 - b0):
            s, e = starts[b0 + k], starts[b0 + k + 1]
            if packed:
                length = boundaries[0]
            else:
                longest = 0
                for i in range(s, e):
                    x = flat[i]
                    if x >= 0 and lengths[x] > longest:
                        longest = lengths[x]
                length = boundaries[np.searchsorted(boundaries, longest)]
            layout[k, 0] = length
            layout[k, 1] = elements
            layout[k, 2] = slots
            elements += (e - s) // segments * length
            slots += e - s
        return elements, slots

    @numba.njit(nogil=True, cache=False)
    def fill_padded(values, offsets, flat, starts, b0, layout, tok, mask, lens):
        for k in range(layout.shape[0]):
            s = starts[b0 + k]
            length, at, slot = layout[k, 0], layout[k, 1], layout[k, 2]
            for r in range(starts[b0 + k + 1] - s):
                e = flat[s + r]
                row = at + r * length
                n = 0
                if e >= 0:
                    a = offsets[e]
                    n = offsets[e + 1] - a
                    tok[row : row + n] = values[a : a + n]
                tok[row + n : row + length] = 0
                mask[row : row + n] = True
                mask[row + n : row + length] = False
                lens[slot + r] = n

    @numba.njit(nogil=True, cache=False)
    def fill_packed(values, offsets, flat, starts, b0, layout, segments, tok, seg, pos, lens):
        for k in range(layout.shape[0]):
            s = starts[b0 + k]
            length, at, slot = layout[k, 0], layout[k, 1], layout[k, 2]
            for r in range((starts[b0 + k + 1] - s) // segments):
                row = at + r * length
                used = 0
                for j in range(segments):
                    e = flat[s + r * segments + j]
                    n = 0
                    if e >= 0:
                        a = offsets[e]
                        n = offsets[e + 1] - a
                        at_j = row + used
                        tok[at_j : at_j + n] = values[a : a + n]
                        for i in range(n):
                            seg[at_j + i] = j + 1
                            pos[at_j + i] = i
                        used += n
                    lens[slot + r * segments + j] = n
                tok[row + used : row + length] = 0
                seg[row + used : row + length] = 0
                pos[row + used : row + length] = 0

    values, offsets, lengths = tokens.values, tokens.offsets, tokens.lengths
    boundaries = plan.boundaries.astype(np.int64)
    segments = plan.batches[0].shape[1] if plan.packed else 1
    flat = np.concatenate([b.reshape(-1) for b in plan.batches]).astype(np.int64)
    starts = np.zeros(len(plan.batches) + 1, np.int64)
    np.cumsum([b.size for b in plan.batches], out=starts[1:])

    def make_for(per_task: int) -> Make:
        def submit(pool: ThreadPoolExecutor, arena: _Arena, b0: int, layout: np.ndarray):
            if plan.packed:
                return pool.submit(fill_packed, values, offsets, flat, starts, b0, layout,
                                   segments, arena.tokens, arena.aux, arena.positions,
                                   arena.lengths)  # fmt: skip
            return pool.submit(fill_padded, values, offsets, flat, starts, b0, layout,
                               arena.tokens, arena.aux, arena.lengths)  # fmt: skip

        def batch(arena: _Arena, b: int, length: int, at: int, slot: int) -> Batch:
            ids = plan.batches[b]
            rows = ids.shape[0]
            end = at + rows * length
            out = {"tokens": arena.tokens[at:end].reshape(rows, length), "example_index": ids}
            lens = arena.lengths[slot : slot + ids.size].reshape(ids.shape)
            if plan.packed:
                out["tokens_segment_ids"] = arena.aux[at:end].reshape(rows, length)
                out["tokens_positions"] = arena.positions[at:end].reshape(rows, length)
            else:
                out["tokens_mask"] = arena.aux[at:end].reshape(rows, length)
            out["tokens_lengths"] = lens
            return out

        def make(count: int) -> Iterator[Batch]:
            ring: list[_Arena] = []  # free task buffers
            pending: deque = deque()  # (future, first batch, layout, arena), in plan order
            handed: deque = deque()  # (last batch, arena) of the tasks being handed out
            pool = ThreadPoolExecutor(THREADS)
            done = -1  # the last batch handed to the consumer
            queued = 0  # the next batch to queue
            try:
                while done + 1 < count:
                    while handed and handed[0][0] <= done - HOLD:
                        ring.append(handed.popleft()[1])
                    while len(pending) < IN_FLIGHT and queued < count:
                        end = min(queued + per_task, count)
                        layout = np.empty((end - queued, 3), np.int64)
                        elements, slots = lay_out(lengths, flat, starts, queued, end, boundaries,
                                                  segments, plan.packed, layout)  # fmt: skip
                        arena = ring.pop() if ring else _Arena(plan.packed)
                        arena.ensure(elements, slots)
                        pending.append((submit(pool, arena, queued, layout), queued, layout, arena))
                        queued = end
                    future, b0, layout, arena = pending.popleft()
                    future.result()
                    handed.append((b0 + len(layout) - 1, arena))
                    for k, (length, at, slot) in enumerate(layout.tolist()):
                        done = b0 + k
                        yield batch(arena, done, length, at, slot)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)

        return make

    # Compiles both functions, outside any timing.
    warm = make_for(1)(1)
    next(warm)
    warm.close()
    return [
        Variant(
            "numba batched (expert)",
            f"numba {THREADS}-thread batched (expert), {k} batches a task",
            f"@njit(nogil=True) fill of {k} batches a call into reused ring buffers, "
            f"ThreadPoolExecutor({THREADS}), {IN_FLIGHT} tasks queued, plan order, "
            f"a batch kept valid for {HOLD} batches",
            make_for(k),
        )
        for k in BATCHES_PER_TASK
    ]


def tf_pipeline(tf: Any, count: int, fn: Any) -> Iterator[Batch]:
    """tf.data as its guide recommends for speed: Dataset.range(batches)
    .map(fn, num_parallel_calls=AUTOTUNE, deterministic=True)
    .prefetch(AUTOTUNE), on a private pool of THREADS threads."""
    ds = tf.data.Dataset.range(count).map(
        fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.threading.private_threadpool_size = THREADS
    yield from ds.with_options(options).as_numpy_iterator()


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
            yield from tf_pipeline(tf, count, fn)

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


def tf_dense_variants(tokens: Tokens, plan: BatchPlan) -> list[Variant]:
    """Expert: tf.data written densely, no RaggedTensor and no Python in the
    map function. Per batch one tf.gather (GatherV2) of a dense [rows,
    length] index array into the token values with a zero appended (padding
    points at it), and the other arrays from dense ops. The index array
    either is built in the map function from the batch's ids (lengths,
    offsets, a broadcast add; packed: tf.searchsorted over the row's segment
    ends gives each place its segment), all timed; or is precomputed, with
    the packed plan's segment ids and positions, in NumPy for all the run's
    batches when the iterator starts: that is in startup s, never in the
    rates, and is reported on its own (precompute us a batch)."""
    try:
        import tensorflow as tf
    except ImportError:
        return []
    n = len(tokens)
    zero = len(tokens.values)  # the appended 0 that padding gathers
    if zero >= 2**31 - 1:
        raise ValueError("tf.data dense: int32 indices hold at most 2**31 - 2 tokens")
    itype = np.int32
    values = tf.constant(np.append(tokens.values, 0).astype(np.int32))
    # Index n is an empty example (length 0, starting at the zero): id -1.
    lengths = tf.constant(np.append(tokens.lengths, 0).astype(itype))
    offsets = tf.constant(np.append(tokens.offsets[:-1], zero).astype(itype))
    boundaries = tf.constant(plan.boundaries.astype(itype))
    sizes = [b.size for b in plan.batches]
    starts = tf.constant(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    shape = plan.batches[0].shape[1:]
    flat_ids = tf.constant(np.concatenate([b.reshape(-1) for b in plan.batches]))
    row_length = int(plan.boundaries[0])
    segments = shape[0] if plan.packed else 1

    def batch_ids(b):
        ids = flat_ids[starts[b] : starts[b + 1]]
        return tf.reshape(ids, [-1, *shape]) if plan.packed else ids

    def padded(b):
        ids = batch_ids(b)
        safe = tf.where(ids < 0, tf.constant(n, tf.int64), ids)
        lens = tf.gather(lengths, safe)
        length = tf.gather(boundaries, tf.searchsorted(boundaries, [tf.reduce_max(lens)]))[0]
        inside = tf.range(length)[None, :] < lens[:, None]
        idx = tf.where(inside, tf.gather(offsets, safe)[:, None] + tf.range(length)[None, :], zero)
        return {
            "tokens": tf.gather(values, idx),
            "tokens_mask": inside,
            "tokens_lengths": tf.cast(lens, tf.int32),
            "example_index": ids,
        }

    def packed(b):
        ids = batch_ids(b)
        safe = tf.where(ids < 0, tf.constant(n, tf.int64), ids)
        lens = tf.gather(lengths, safe)  # [rows, segments]
        ends = tf.cumsum(lens, axis=1)
        place = tf.broadcast_to(tf.range(row_length, dtype=itype), [tf.shape(ids)[0], row_length])
        s = tf.searchsorted(ends, place, side="right", out_type=tf.int32)  # 0..segments
        inside = s < segments
        s = tf.minimum(s, segments - 1)
        pos = place - tf.gather(ends - lens, s, batch_dims=1)
        idx = tf.where(inside, tf.gather(tf.gather(offsets, safe), s, batch_dims=1) + pos, zero)
        return {
            "tokens": tf.gather(values, idx),
            "tokens_segment_ids": tf.where(inside, s + 1, 0),
            "tokens_positions": tf.cast(tf.where(inside, pos, 0), tf.int32),
            "tokens_lengths": tf.cast(lens, tf.int32),
            "example_index": ids,
        }

    # The contract's collate over tokens whose values are their own indices
    # gives each batch's index array (0-padded), segment ids and positions.
    index_collate = Collate(Tokens(np.arange(zero, dtype=itype), tokens.offsets), plan)

    def precompute(count: int) -> dict[str, Any]:
        idx, seg, pos, rows, cols = [], [], [], [], []
        for ids in plan.batches[:count]:
            out = index_collate(ids)
            inside = out["tokens_mask"] if not plan.packed else out["tokens_segment_ids"] > 0
            idx.append(np.where(inside, out["tokens"], zero).astype(itype).reshape(-1))
            rows.append(inside.shape[0])
            cols.append(inside.shape[1])
            if plan.packed:
                seg.append(out["tokens_segment_ids"])
                pos.append(out["tokens_positions"])
        at = np.concatenate([[0], np.cumsum([a.size for a in idx])]).astype(np.int64)
        pre = {
            "idx": tf.constant(np.concatenate(idx)),
            "at": tf.constant(at),
            "rows": tf.constant(np.array(rows, np.int64)),
            "cols": tf.constant(np.array(cols, np.int64)),
        }
        if plan.packed:  # fixed shape: [count, rows, row_length]
            pre["seg"] = tf.constant(np.stack(seg))
            pre["pos"] = tf.constant(np.stack(pos))
        return pre

    def precomputed_fn(pre: dict[str, Any]):
        def fn(b):
            idx = tf.reshape(
                pre["idx"][pre["at"][b] : pre["at"][b + 1]], [pre["rows"][b], pre["cols"][b]]
            )
            ids = batch_ids(b)
            lens = tf.cast(
                tf.gather(lengths, tf.where(ids < 0, tf.constant(n, tf.int64), ids)), tf.int32
            )
            out = {"tokens": tf.gather(values, idx), "tokens_lengths": lens, "example_index": ids}
            if plan.packed:  # copied (GatherV2 on axis 0) from the precomputed arrays
                out["tokens_segment_ids"] = tf.gather(pre["seg"], b)
                out["tokens_positions"] = tf.gather(pre["pos"], b)
            else:
                out["tokens_mask"] = tf.not_equal(idx, zero)
            return out

        return fn

    def variant(label: str, fn: Callable[[int], Any] | None) -> Variant:
        notes: dict[str, float] = {}

        def make(count: int) -> Iterator[Batch]:
            start = time.perf_counter()
            map_fn = fn if fn is not None else precomputed_fn(precompute(count))
            if fn is None:
                notes["precompute_us_per_batch"] = 1e6 * (time.perf_counter() - start) / count
            yield from tf_pipeline(tf, count, map_fn)

        return Variant(
            "tf.data dense (expert)",
            f"tf.data dense gather (expert), {label}",
            f"Dataset.range(batches).map(one GatherV2 of a dense index array, {label}, "
            f"num_parallel_calls=AUTOTUNE, deterministic=True).prefetch(AUTOTUNE), "
            f"private_threadpool_size={THREADS}",
            make,
            notes=notes,
        )

    return [
        variant("indices built in the map fn", packed if plan.packed else padded),
        variant("indices precomputed at start (in startup s)", None),
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
        "numba batched (expert)": numba_batched_variants(tokens, plan),
        "DataLoader": torch_variants(tokens, plan),
        "Grain": grain_variants(tokens, plan),
        "tf.data": tf_variants(tokens, plan),
        "tf.data dense (expert)": tf_dense_variants(tokens, plan),
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
        **variant.notes,
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
                jb.collate(ds, spec, num_threads=1, padded_segments=False)
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
                "precompute_us_per_batch",
            )  # fmt: skip
            if key in rs[0]
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
    experts = [fw for fw in EXPERTS if fw in runs]
    if experts:
        # Per repetition, jaxbatch's rate over the faster expert's in that repetition.
        faster = [max(runs[fw][i]["examples_per_s"] for fw in experts) for i in range(reps)]
        result["expert_margin"] = {
            "against": experts,
            "ratio": harness.summary([a / b for a, b in zip(ours, faster, strict=True)]),
            "best_by_median": max(
                experts, key=lambda fw: result["summary"][fw]["examples_per_s"]["median"]
            ),
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
    rows = [["framework (config)", "kind", "threads", "examples/s", "output MB/s", "padded/token",
             "CPU us/batch", "cores busy", "startup s", "jaxbatch / it: ex/s; CPU"]]  # fmt: skip
    for fw, s in r["summary"].items():
        kind = "expert" if fw in EXPERTS else "naive anchor" if fw in ANCHORS else "naive"
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
                "" if fw == "jaxbatch" else kind,
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
    for fw, s in r["summary"].items():
        if "precompute_us_per_batch" in s:
            print(
                f"   {r['configs'][fw]['name']}: precompute (in startup s, not in its rates) "
                f"{s['precompute_us_per_batch']['median']:,.0f} us a batch"
            )
    if "target" in r:
        t = r["target"]
        print(
            f"   target jaxbatch >= {t['target']:g}x the best naive anchor ({t['against']}): "
            f"{t['ratio']['median']:.2f}x -> {'met' if t['met'] else 'NOT met'} (CPU per batch: "
            f"{t['cpu_ratio']['median']:.2f}x less)"
        )
    if "expert_margin" in r:
        m = r["expert_margin"]
        q = m["ratio"]
        cpu = ", ".join(
            f"{fw} {r['summary'][fw]['cpu_us_per_batch']['median']:,.0f}"
            for fw in ("jaxbatch", *m["against"])
        )
        print(
            f"   jaxbatch over the best expert (the faster of {' and '.join(m['against'])} in "
            f"each repetition): {q['median']:.2f}x ({q['min']:.2f}-{q['max']:.2f}) examples/s; "
            f"CPU us/batch: {cpu}"
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
        f"alternating repetitions; {harness.describe(env)}"
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
