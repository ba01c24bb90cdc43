"""Planners over grid sizes (images [h, w, ...], pair features [L, L, ...]):
PadToMax and AutoBuckets over (h, w), checked against NumPy references."""

import itertools
import math
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb
from jaxbatch import _core

sizes_st = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=60)


def _sizes(pairs):
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def _round(x, m):
    return max(1, math.ceil(x / m)) * m


def _check_coverage(plan, sizes):
    """Every example in exactly one batch (or dropped), in a shape that holds it."""
    seen = np.zeros(len(sizes), dtype=np.int64)
    for spec in plan:
        shape = spec.shape
        assert shape.width > 0 and shape.grid == (shape.rows, shape.length, shape.width)
        for e in spec.example_ids:
            seen[e] += 1
            assert sizes[e, 0] <= shape.length and sizes[e, 1] <= shape.width
    seen[plan.dropped_examples] += 1
    assert (seen == 1).all()


# ---- PadToMax ------------------------------------------------------------


@given(sizes_st, st.integers(1, 7), st.integers(1, 5), st.sampled_from(["pad", "keep", "drop"]))
def test_pad_to_max_pads_each_axis_to_the_batch_largest(pairs, batch, multiple, remainder):
    sizes = _sizes(pairs)
    plan = jb.plan(sizes, jb.PadToMax(batch, multiple, remainder))
    assert plan.grid
    expected = []
    for start in range(0, len(sizes), batch):
        chunk = sizes[start : start + batch]
        if len(chunk) < batch and remainder == "drop":
            break
        rows = len(chunk) if remainder == "keep" else batch
        expected.append(
            (rows, _round(chunk[:, 0].max(), multiple), _round(chunk[:, 1].max(), multiple))
        )
    assert [spec.shape.grid for spec in plan] == expected
    _check_coverage(plan, sizes)
    kept = sizes[: len(expected) * batch] if remainder == "drop" else sizes
    assert plan.stats.real_elements == int((kept[:, 0] * kept[:, 1]).sum())
    assert plan.stats.padded_elements == sum(r * h * w for r, h, w in expected)


def test_grid_plan_pickles_with_its_widths():
    sizes = _sizes([(3, 5), (7, 2), (4, 4)])
    plan = jb.plan(sizes, jb.PadToMax(2))
    again = pickle.loads(pickle.dumps(plan._core))
    assert again.grid and again.shapes == plan._core.shapes
    assert [s.width for s in plan.shapes] == [5, 4]


def test_a_one_length_planner_over_grid_sizes_is_refused():
    try:
        jb.plan(_sizes([(3, 5)]), jb.Pack(row_length=8, rows_per_batch=2))
    except ValueError as e:
        assert "two variable axes" in str(e) and "PadToMax or AutoBuckets" in str(e)
    else:
        raise AssertionError("expected a ValueError")


# ---- AutoBuckets: the shape choice against brute force -------------------


def _brute_force(h, w, max_shapes, rows, pad):
    """The least cost over every set of <= max_shapes shapes from
    distinct(h) x distinct(w) that holds every example, each example in its
    smallest-area shape (ties: smaller H)."""
    pts, counts = np.unique(np.stack([h, w], 1), axis=0, return_counts=True)
    candidates = [(a, b) for a in np.unique(h) for b in np.unique(w)]
    best = None
    for k in range(1, max_shapes + 1):
        for shapes in itertools.combinations(candidates, k):
            held = [0] * k
            for (ph, pw), c in zip(pts, counts, strict=True):
                fits = [(a * b, a, s) for s, (a, b) in enumerate(shapes) if a >= ph and b >= pw]
                if not fits:
                    break
                held[min(fits)[2]] += c
            else:
                cost = 0
                for (a, b), n in zip(shapes, held, strict=True):
                    if n:
                        cost += a * b * (rows * math.ceil(n / rows) if pad else n)
                best = cost if best is None else min(best, cost)
    return best


small_st = st.lists(
    st.tuples(st.sampled_from([1, 4, 9, 13]), st.sampled_from([2, 5, 11, 16])),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(small_st, st.integers(1, 3), st.integers(1, 5), st.booleans())
def test_exact_choice_equals_brute_force(pairs, max_shapes, rows, pad):
    sizes = _sizes(pairs)
    h, w = sizes[:, 0].copy(), sizes[:, 1].copy()
    shapes, cost, exact = _core.choose_grid_shapes(h, w, max_shapes, rows, pad, 10**8)
    assert exact and len(shapes) <= max_shapes
    assert cost == _brute_force(h, w, max_shapes, rows, pad)


# The heuristic (greedy additions and single swaps, and the exhaustive
# search of the finest coarser grid it can afford, whichever is better)
# against the exhaustive optimum, forced by a work limit of 1000 on 200
# seeded random histograms of 50-300 examples, the same every run: the
# worst measured ratio was 1.031 (mean 1.0005). Hypothesis is not used here:
# on a few examples with remainder="pad" (a handful of ceil steps) it finds
# histograms where the heuristic is 1.5x behind, where the exhaustive search
# runs anyway (the heuristic only runs past ~30 candidate shapes).
HEURISTIC_BOUND = 1.05


def test_heuristic_choice_is_within_its_measured_bound():
    rng = np.random.default_rng(2)
    ratios = []
    for _ in range(200):
        n = int(rng.integers(50, 300))
        h = rng.choice([1, 4, 9, 13], n).astype(np.int64)
        w = rng.choice([2, 5, 11, 16], n).astype(np.int64)
        k, rows, pad = int(rng.integers(2, 5)), int(rng.integers(1, 9)), bool(rng.integers(0, 2))
        _, best, exact = _core.choose_grid_shapes(h, w, k, rows, pad, 10**8)
        shapes, cost, forced = _core.choose_grid_shapes(h, w, k, rows, pad, 1000)
        assert exact and not forced and len(shapes) <= k
        ratios.append(cost / best)
    assert 1.0 <= min(ratios) and max(ratios) <= HEURISTIC_BOUND


# ---- AutoBuckets plans ---------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    sizes_st,
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from(["pad", "keep", "drop"]),
    st.integers(1, 2),
    st.booleans(),
)
def test_autobuckets_covers_every_example_within_its_budget(
    pairs, max_shapes, multiple, remainder, rows_multiple, budget
):
    sizes = _sizes(pairs)
    top = _round(sizes[:, 0].max(), multiple) * _round(sizes[:, 1].max(), multiple)
    token_budget = 4 * top * rows_multiple if budget else None
    batch_size = None if budget else 4 * rows_multiple
    planner = jb.AutoBuckets(
        max_shapes,
        token_budget=token_budget,
        batch_size=batch_size,
        pad_to_multiple=multiple,
        remainder=remainder,
        rows_multiple=rows_multiple,
    )
    plan = jb.plan(sizes, planner)
    _check_coverage(plan, sizes)
    cells = {(s.length, s.width) for s in plan.shapes}
    assert len(cells) <= max_shapes
    for s in plan.shapes:
        assert s.length % multiple == 0 and s.width % multiple == 0 and s.rows % rows_multiple == 0
        if budget:
            assert s.rows * s.length * s.width <= token_budget
        else:
            assert s.rows <= batch_size


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=200), st.integers(1, 6))
def test_square_data_keeps_square_shapes(lengths, max_shapes):
    sizes = _sizes([(x, x) for x in lengths])
    for planner in (jb.AutoBuckets(max_shapes, batch_size=4), jb.PadToMax(3, 8)):
        plan = jb.plan(sizes, planner)
        assert all(s.length == s.width for s in plan.shapes)
        _check_coverage(plan, sizes)


# The engine's exhaustive-search work limit (grid_buckets.h kMaxGridEvaluations).
MAX_GRID_EVALUATIONS = 20_000_000


def _plain_padded_cells(h, w, max_shapes, rows):
    """Padded cells of the plain plan (remainders not filled): the shapes of
    the plain choice, each example in its smallest-area shape (ties: smaller
    H), every batch rows x the box of its shape's examples."""
    shapes, _, _ = _core.choose_grid_shapes(h, w, max_shapes, rows, True, MAX_GRID_EVALUATIONS)
    held = {}
    for ph, pw in zip(h.tolist(), w.tolist(), strict=True):
        s = min((a * b, a, i) for i, (a, b) in enumerate(shapes) if a >= ph and b >= pw)[2]
        n, bh, bw = held.get(s, (0, 0, 0))
        held[s] = (n + 1, max(bh, ph), max(bw, pw))
    return sum(math.ceil(n / rows) * rows * bh * bw for n, bh, bw in held.values())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=80),
    st.integers(1, 4),
    st.integers(2, 8),
)
def test_filled_remainders_never_pad_more_than_the_plain_plan(pairs, max_shapes, rows):
    """remainder="pad" fills a shape's spare rows with smaller shapes'
    examples that fit (grid_buckets.h FillGridRemainders): every example
    once, in a shape that holds it, at most max_shapes shapes, and never
    more padded cells than the plain plan's."""
    sizes = _sizes(pairs)
    h, w = sizes[:, 0].copy(), sizes[:, 1].copy()
    plan = jb.plan(sizes, jb.AutoBuckets(max_shapes, batch_size=rows))
    _check_coverage(plan, sizes)
    assert len({(s.length, s.width) for s in plan.shapes}) <= max_shapes
    assert all(s.rows == rows for s in plan.shapes)
    assert plan.stats.padded_elements <= _plain_padded_cells(h, w, max_shapes, rows)


def image_sizes(n, seed=0):
    """Image sizes from a few aspect ratios and areas: ratios (w / h) 1, 4/3,
    3/4, 16/9 and 2/3 (weights 4, 3, 1, 1, 1), areas 224^2 to 512^2
    (log-uniform), each side rounded to a multiple of 8."""
    rng = np.random.default_rng(seed)
    ratio = rng.choice([1.0, 4 / 3, 3 / 4, 16 / 9, 2 / 3], size=n, p=[0.4, 0.3, 0.1, 0.1, 0.1])
    area = np.exp(rng.uniform(np.log(224**2), np.log(512**2), size=n))
    h = np.round(np.sqrt(area / ratio) / 8) * 8
    w = np.round(np.sqrt(area * ratio) / 8) * 8
    return np.stack([h, w], 1).astype(np.int64)


def test_autobuckets_pads_far_less_than_pad_to_max_on_images():
    sizes = image_sizes(2000)
    budget = 16 * 512 * 512
    auto = jb.plan(sizes, jb.AutoBuckets(4, token_budget=budget)).stats
    pad = jb.plan(sizes, jb.PadToMax(16)).stats
    # Measured: 62.9% real cells in 4 shapes against PadToMax's 44.3% in
    # 114 shapes (the areas are continuous, so 4 shapes cannot fit closely).
    assert auto.shapes <= 4 < pad.shapes
    assert auto.efficiency > pad.efficiency + 0.15


def test_a_dataset_grid_column_plans_by_its_heights_and_widths():
    """jb.plan of a Dataset whose length column is a grid plans it by (h, w),
    as the Loader does, not by its cell counts: the same plan as its sizes."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 30, size=(60, 2))
    images = [np.zeros((h, w, 3), np.float32) for h, w in sizes]
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    for planner in (jb.PadToMax(batch_size=8), jb.AutoBuckets(max_shapes=3, token_budget=8000)):
        by_column, by_sizes = jb.plan(ds, planner), jb.plan(sizes, planner)
        assert by_column.grid and by_sizes.grid
        assert [b.shape for b in by_column] == [b.shape for b in by_sizes]
        assert [list(b.example_ids) for b in by_column] == [list(b.example_ids) for b in by_sizes]
        for spec in by_column:
            batch = jb.collate(ds, spec)
            assert batch["image"].shape[1:3] == spec.shape.grid[1:]
