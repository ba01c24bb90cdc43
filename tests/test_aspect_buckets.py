"""jb.AspectBuckets (aspect-ratio buckets of a fixed area, for users who resize)
against a slow, obvious Python reference: kohya-ss sd-scripts' resolutions,
the nearest bucket compared exactly with fractions, the choice of buckets by
brute force over every subset."""

from __future__ import annotations

import itertools
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb
from jaxbatch._src.plan.planners import planner_from_key

# --- reference -----------------------------------------------------------------


def ref_resolutions(area: int, multiple: int) -> list[tuple[int, int]]:
    """kohya's make_bucket_resolutions: each width's tallest height and the
    transposes, one (the largest) per ratio W / H, by ratio."""
    best: dict[Fraction, tuple[int, int]] = {}
    for w in range(multiple, area // multiple + 1, multiple):
        h = area // w // multiple * multiple
        for r in [(h, w), (w, h)]:
            q = Fraction(r[1], r[0])
            if q not in best or best[q][0] * best[q][1] < r[0] * r[1]:
                best[q] = r
    return [best[q] for q in sorted(best)]


def ref_nearest(buckets: list[tuple[int, int]], h: int, w: int) -> tuple[int, int]:
    """The bucket nearest w / h in log space (exactly: the least max(x/c, c/x));
    a tie goes to the taller (the lower ratio)."""
    x = Fraction(w, h)
    ordered = sorted(buckets, key=lambda b: Fraction(b[1], b[0]))
    return min(
        ordered,
        key=lambda b: (
            max(x / Fraction(b[1], b[0]), Fraction(b[1], b[0]) / x),
            Fraction(b[1], b[0]),
        ),
    )


def log_error(h: int, w: int, target: tuple[int, int]) -> float:
    return abs(math.log(w / h) - math.log(target[1] / target[0]))


def ref_best_error(sizes: np.ndarray, cands: list[tuple[int, int]], k: int) -> float:
    best = math.inf
    for m in range(1, k + 1):
        for chosen in itertools.combinations(cands, m):
            total = sum(min(log_error(h, w, c) for c in chosen) for h, w in sizes)
            best = min(best, total)
    return best


def images_at(sizes, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in sizes]


# --- properties ------------------------------------------------------------------

sizes_st = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=0, max_size=30
).map(lambda s: np.array(s, dtype=np.int64).reshape(-1, 2))


@settings(max_examples=60, deadline=None)
@given(
    sizes=sizes_st,
    max_shapes=st.integers(1, 4),
    batch_size=st.integers(1, 5),
    remainder=st.sampled_from(["pad", "keep", "drop"]),
)
def test_every_example_once_at_its_buckets_resolution(sizes, max_shapes, batch_size, remainder):
    area, multiple = 48 * 48, 16
    planner = jb.AspectBuckets(
        area, multiple=multiple, max_shapes=max_shapes, batch_size=batch_size, remainder=remainder
    )
    plan = jb.plan(sizes, planner)
    targets = plan.resize_to
    assert targets is not None and targets.shape == (len(sizes), 2)
    seen = np.zeros(len(sizes), int)
    for spec in plan:
        assert spec.shape.grid is not None
        for e in spec.example_ids:
            seen[e] += 1
            assert tuple(targets[e]) == (spec.shape.length, spec.shape.width)
        assert len(spec.example_ids) <= spec.shape.rows <= batch_size
    seen[plan.dropped_examples.astype(int)] += 1
    assert (seen == 1).all()
    cands = ref_resolutions(area, multiple)
    used = sorted({tuple(t) for t in targets.tolist()})
    assert len(used) <= max_shapes
    for h, w in used:
        assert (h, w) in cands and h * w <= area and h % multiple == 0 and w % multiple == 0
    for (h, w), t in zip(sizes.tolist(), targets.tolist(), strict=True):
        assert tuple(t) == ref_nearest(used, h, w)


@settings(max_examples=25, deadline=None)
@given(sizes=sizes_st.filter(lambda s: 0 < len(s) <= 10), max_shapes=st.integers(1, 3))
def test_chosen_buckets_error_equals_the_brute_force_optimum(sizes, max_shapes):
    area, multiple = 48 * 48, 16
    plan = jb.plan(
        sizes, jb.AspectBuckets(area, multiple=multiple, max_shapes=max_shapes, batch_size=4)
    )
    error = sum(log_error(h, w, tuple(t)) for (h, w), t in zip(sizes, plan.resize_to, strict=True))
    assert error == pytest.approx(
        ref_best_error(sizes, ref_resolutions(area, multiple), max_shapes), abs=1e-9
    )


@settings(max_examples=40, deadline=None)
@given(
    sizes=sizes_st,
    ratios=st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=4),
)
def test_given_ratios_take_their_nearest_resolutions(sizes, ratios):
    area, multiple = 256 * 256, 64
    plan = jb.plan(sizes, jb.AspectBuckets(area, ratios=ratios, batch_size=3))
    cands = ref_resolutions(area, multiple)
    buckets = sorted({ref_nearest(cands, h, w) for w, h in ratios}, key=lambda b: b[1] / b[0])
    for (h, w), t in zip(sizes.tolist(), plan.resize_to.tolist(), strict=True):
        assert tuple(t) == ref_nearest(buckets, h, w)


def test_resolutions_are_kohyas():
    plan = jb.plan(
        np.array([[1, 100], [100, 1]]), jb.AspectBuckets(256 * 256, max_shapes=2, batch_size=1)
    )
    assert {tuple(t) for t in plan.resize_to.tolist()} == {(64, 1024), (1024, 64)}
    assert ref_resolutions(256 * 256, 64)[11:14] == [(320, 192), (256, 256), (192, 320)]


# --- collation, the Loader, the key -----------------------------------------------


SIZES = np.array([[480, 640], [640, 480], [300, 900], [1000, 250], [200, 200], [333, 500]])


def test_collating_resized_images_gives_exactly_the_bucket_shapes():
    planner = jb.AspectBuckets(256 * 256, multiple=32, max_shapes=3, batch_size=2)
    plan = jb.plan(SIZES, planner)
    images = images_at(plan.resize_to)  # what the user's resize returns
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    for spec in plan:
        batch = jb.collate(ds, spec)
        rows, h, w = spec.shape.grid
        assert batch["image"].shape == (rows, h, w, 3)
        for r, e in enumerate(spec.example_ids):
            np.testing.assert_array_equal(batch["image"][r], images[e])
            assert batch["image_mask"][r].all()
    # Loaded again with the same planner: the targets are the sizes.
    with jb.Loader(ds, planner) as loader:
        shapes = {tuple(b["image"].shape[1:3]) for b in loader}
    assert shapes == {tuple(t) for t in plan.resize_to.tolist()}


def test_images_not_resized_are_an_error_naming_them():
    planner = jb.AspectBuckets(256 * 256, multiple=32, max_shapes=3, batch_size=2)
    plan = jb.plan(SIZES, planner)
    ds = jb.Dataset.from_arrays({"image": images_at(SIZES)}, axes={"image": ("h", "w")})
    e = int(plan[0].example_ids[0])
    h, w = SIZES[e]
    th, tw = plan.resize_to[e]
    with pytest.raises(
        ValueError,
        match=f"example {e} is {h} x {w}, but the plan resizes it to {th} x {tw}.*never resizes",
    ):
        jb.collate(ds, plan[0])
    with pytest.raises(
        ValueError, match="example 0 is 480 x 640, but its bucket is .*never resizes"
    ):
        jb.Loader(ds, planner)


def test_key_pickle_and_option_errors():
    planner = jb.AspectBuckets(256 * 256, ratios=((4, 3), (1, 1)), token_budget=4 * 256 * 256)
    assert planner_from_key(planner.key) == planner
    plan = jb.plan(SIZES, planner)
    again = pickle.loads(pickle.dumps(plan._core))
    np.testing.assert_array_equal(np.array(again.resize_to).reshape(-1, 2), plan.resize_to)
    assert jb.plan(SIZES, jb.PadToMax(batch_size=2)).resize_to is None
    with pytest.raises(ValueError, match="give ratios .* or max_shapes .*found neither"):
        jb.AspectBuckets(256 * 256, batch_size=2)
    with pytest.raises(ValueError, match=r"ratios\[1\] must be a \(width, height\) pair"):
        jb.AspectBuckets(256 * 256, ratios=[(4, 3), (1, 1, 1)], batch_size=2)
    with pytest.raises(ValueError, match="raise token_budget to at least 65536"):
        jb.AspectBuckets(256 * 256, max_shapes=2, token_budget=1000)
    with pytest.raises(ValueError, match="found 6 lengths and 0 widths"):
        jb.plan(SIZES[:, 0], jb.AspectBuckets(256 * 256, max_shapes=2, batch_size=2))
