"""Slow, obviously-correct NumPy/Python versions of the engine, for tests."""

from __future__ import annotations

import itertools
import math

import numpy as np


def rounded(length: int, multiple: int) -> int:
    return max(multiple, -(-length // multiple) * multiple)


def rows_for(length: int, batch_size: int | None, token_budget: int | None) -> int:
    rows = batch_size if batch_size else 2**62
    if token_budget:
        rows = min(rows, token_budget // length)
    return rows


def balanced_rows(count: int, cap: int, multiple: int = 1) -> int:
    """The rows a batch of a shape holding `count` rows under a budget of
    `cap` rows a batch: the fewest (a multiple of `multiple`) whose batches
    hold them in as few batches as batches of `cap` would."""
    if count == 0:
        return cap
    batches = -(-count // cap)
    return next(r for r in range(multiple, cap + 1, multiple) if r * batches >= count)


def bucket_cost(length, count, rows, pad_remainder):
    return length * rows * math.ceil(count / rows) if pad_remainder else length * count


def brute_force_autobuckets_cost(lengths, max_shapes, batch_size, token_budget, multiple, pad):
    """The least padded elements over every choice of <= max_shapes boundaries."""
    values = sorted({rounded(int(v), multiple) for v in lengths})
    counts = {v: 0 for v in values}
    for v in lengths:
        counts[rounded(int(v), multiple)] += 1
    best = None
    last = values[-1]
    inner = values[:-1]
    for k in range(0, min(max_shapes, len(values))):
        for chosen in itertools.combinations(inner, k):
            bounds = [*chosen, last]
            cost, prev = 0, -1
            for b in bounds:
                n = sum(c for v, c in counts.items() if prev < v <= b)
                if n:
                    cost += bucket_cost(b, n, rows_for(b, batch_size, token_budget), pad)
                prev = b
            best = cost if best is None else min(best, cost)
    return best


def collate_padded(examples: list[np.ndarray], rows: int, length: int, pad, dtype, inner):
    """A hand-written padding loop: the reference for padded batches."""
    values = np.full((rows, length, *inner), pad, dtype=dtype)
    mask = np.zeros((rows, length), bool)
    lengths = np.zeros(rows, np.int32)
    for r, x in enumerate(examples):
        values[r, : len(x)] = x
        mask[r, : len(x)] = True
        lengths[r] = len(x)
    return values, mask, lengths


def collate_packed(row_examples: list[list[np.ndarray]], rows, length, segments, pad, dtype, inner):
    """A hand-written packing loop: the reference for packed batches."""
    values = np.full((rows, length, *inner), pad, dtype=dtype)
    seg = np.zeros((rows, length), np.int32)
    pos = np.zeros((rows, length), np.int32)
    lens = np.zeros((rows, segments), np.int32)
    for r, row in enumerate(row_examples):
        at = 0
        for s, x in enumerate(row):
            values[r, at : at + len(x)] = x
            seg[r, at : at + len(x)] = s + 1
            pos[r, at : at + len(x)] = np.arange(len(x))
            lens[r, s] = len(x)
            at += len(x)
    return values, seg, pos, lens


def map_quarantining_one(fn, ds, planner, example: int, count: int) -> dict:
    """jb.map(fn, ds, planner) with check_finite=True, on_error="quarantine",
    where only `example` (of `count`) gives a non-finite output: asserts it
    alone was set aside although it shares a packed row with others, and
    returns the outputs of the rest, to compare with a reference."""
    import jaxbatch as jb

    result = jb.map(fn, ds, planner=planner, check_finite=True, on_error="quarantine")
    assert [q["example"] for q in result.quarantine] == [example]
    with jb.Loader(ds, planner, shuffle=False) as loader:
        row = next(r for b in loader for r in np.asarray(b["example_index"]) if example in r)
    assert sum(row >= 0) > 1  # it has row-mates, kept
    assert sorted(result.outputs) == [i for i in range(count) if i != example]
    return result.outputs
