"""No half-empty last batch where a token budget sets the rows: each shape's
rows are the budget's spread evenly over its batches (cc/jaxbatch/plan/
balance.h), against NumPy references (the rows a batch from
reference.balanced_rows; FixedBuckets' batches in full), and against the
plan a loader state saved before balancing (version 3) restores: never more
batches, no shape added, every example once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import balanced_rows

import jaxbatch as jb

lengths_st = st.lists(st.integers(1, 64), min_size=1, max_size=120)


def batches_of(plan) -> list[tuple[int, int, list[tuple[int, ...]]]]:
    """(rows, length, [each row's example ids, padding rows left out]) per batch."""
    return [
        (b.shape.rows, b.shape.length, [tuple(map(int, r)) for r in b.rows if len(r)]) for b in plan
    ]


def assert_every_example_once(plan, n: int) -> None:
    ids = np.concatenate([b.example_ids for b in plan]) if len(plan.shapes) else np.array([])
    assert sorted(ids.tolist()) == list(range(n))


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, rows=st.integers(1, 12), multiple=st.sampled_from([1, 2, 3]))
def test_pack_spreads_the_budgets_rows_over_its_batches(lengths, rows, multiple):
    cap = rows * multiple  # the budget's rows, a multiple of rows_multiple
    budget = cap * 64 + 63  # rounded down to whole rows
    balanced = jb.plan(lengths, jb.Pack(64, token_budget=budget, rows_multiple=multiple))
    # The same packing with the budget's rows fixed: its rows are the reference's.
    fixed = jb.plan(lengths, jb.Pack(64, rows_per_batch=cap, rows_multiple=multiple))
    rows_fixed = sorted(r for _, _, rs in batches_of(fixed) for r in rs)
    rows_balanced = sorted(r for _, _, rs in batches_of(balanced) for r in rs)
    assert rows_balanced == rows_fixed
    want = balanced_rows(len(rows_fixed), cap, multiple)
    assert [s.rows for s in balanced.shapes] == [want]
    assert balanced.stats.batches == fixed.stats.batches == -(-len(rows_fixed) // cap)
    assert balanced.stats.padded_elements <= fixed.stats.padded_elements
    assert_every_example_once(balanced, len(lengths))


def fixed_buckets_reference(lengths, boundaries, budget):
    """FixedBuckets(boundaries, token_budget=budget) in NumPy: each example to
    the first boundary >= its length; bucket k's rows the budget's (budget //
    boundary) spread over its count; a batch emitted when full, in input
    order, then the partial ones in bucket order."""
    bucket = np.searchsorted(boundaries, lengths)
    counts = np.bincount(bucket, minlength=len(boundaries))
    rows = [balanced_rows(int(c), budget // b) for c, b in zip(counts, boundaries, strict=True)]
    pending: list[list[tuple[int]]] = [[] for _ in boundaries]
    out = []
    for example, k in enumerate(bucket):
        pending[k].append((example,))
        if len(pending[k]) == rows[k]:
            out.append((rows[k], boundaries[k], pending[k]))
            pending[k] = []
    out += [(rows[k], boundaries[k], p) for k, p in enumerate(pending) if p]
    return out


@settings(max_examples=60, deadline=None)
@given(
    lengths=lengths_st,
    boundaries=st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True).map(sorted),
    scale=st.integers(1, 10),
)
def test_fixed_buckets_equal_the_numpy_reference(lengths, boundaries, scale):
    boundaries = sorted({*boundaries, 64})
    budget = 64 * scale
    plan = jb.plan(lengths, jb.FixedBuckets(boundaries, token_budget=budget))
    assert batches_of(plan) == fixed_buckets_reference(lengths, boundaries, budget)
    # batch_size is the user's: never balanced.
    plan = jb.plan(lengths, jb.FixedBuckets(boundaries, batch_size=scale))
    assert {s.rows for s in plan.shapes} == {scale}


def stream(dataset, planner, version: int | None = None) -> tuple[list, list]:
    """(shapes, batches as ((rows, length), example ids)) of one unshuffled
    epoch; with `version`, of a loader restored from a state saved at its
    start under that loader state version (so planned as that version did)."""
    state = None
    if version is not None:
        with jb.Loader(dataset, planner, epochs=1) as loader:
            state = {**loader.get_state(), "version": version}
    with jb.Loader(dataset, planner, epochs=1, state=state) as loader:
        shapes = [(s.rows, s.length) for s in loader.shapes]
        batches = [(b["tokens"].shape, b["example_index"]) for b in loader]
    return shapes, batches


def planned_ids(batches) -> list[int]:
    ids = np.concatenate([index for _, index in batches])
    return sorted(ids[ids >= 0].tolist())


@settings(max_examples=25, deadline=None)
@given(lengths=lengths_st, max_shapes=st.integers(1, 4), scale=st.integers(1, 12))
def test_auto_buckets_never_add_a_batch_nor_a_shape(lengths, max_shapes, scale):
    dataset = jb.Dataset.from_arrays({"tokens": [np.zeros(n, np.int32) for n in lengths]})
    planner = jb.AutoBuckets(max_shapes, token_budget=64 * scale)
    shapes, batches = stream(dataset, planner)
    old_shapes, old_batches = stream(dataset, planner, version=3)
    assert len(batches) == len(old_batches)
    assert sorted(length for _, length in shapes) == sorted(length for _, length in old_shapes)
    old_rows = {length: rows for rows, length in old_shapes}
    for rows, length in shapes:
        assert rows <= old_rows[length] and rows * length <= 64 * scale
        held = [int((index >= 0).sum()) for shape, index in batches if shape == (rows, length)]
        assert len(held) * rows - sum(held) < len(held)  # under one empty row a batch
    assert planned_ids(batches) == planned_ids(old_batches) == list(range(len(lengths)))


def test_the_demo_lowers_its_cap_for_the_fewest_empty_rows():
    from types import SimpleNamespace

    from jaxbatch._src.cli.demo.command import fewest_empty_rows, job_planner

    def slots(rows: int, cap: int) -> int:
        batches = -(-rows // cap)
        return batches * balanced_rows(rows, cap)

    # Texts of 240 tokens: one a row of 256, so `texts` rows.
    for texts in range(1, 300, 23):
        dataset = jb.Dataset.from_arrays({"ids": [np.ones(240, np.int32)] * texts})
        for cap in (1, 2, 7, 20, 41):
            got = jb.plan(dataset, fewest_empty_rows(dataset, 256, cap))
            candidates = range(max(1, (cap + 1) // 2), cap + 1)
            best = min(slots(texts, r) for r in candidates)
            want = max(r for r in candidates if slots(texts, r) == best)
            assert got.stats.padded_elements == best * 256, (texts, cap)
            assert got.shapes[0].rows == balanced_rows(texts, want), (texts, cap)
    model = SimpleNamespace(
        config=SimpleNamespace(max_seq_length=256), embed_packed_fn=lambda segments: segments
    )
    for texts, rows, batches in ((100, 25, 4), (467, 39, 12)):
        dataset = jb.Dataset.from_arrays({"ids": [np.ones(240, np.int32)] * texts})
        planner, _ = job_planner(model, dataset, "pack", 8, 41 * 256)
        plan = jb.plan(dataset, planner)
        assert (plan.shapes[0].rows, plan.stats.batches) == (rows, batches)
        assert plan.stats.padded_elements == rows * batches * 256
