"""jb.PatchPack (NaViT patch packing) against a NumPy reference: every real
patch of every image appears exactly once, with its pixels, its (patch row,
patch column) position and its image's segment; masked mean-pooling per
segment equals each image's NumPy mean; token dropping is deterministic per
(seed, epoch, image); options validate and round-trip through their key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb


def _images(rng: np.random.Generator, n: int, side: int, channels: int) -> list[np.ndarray]:
    return [
        rng.integers(
            1, 255, size=(rng.integers(0, side + 1), rng.integers(0, side + 1), channels)
        ).astype(np.float32)
        for _ in range(n)
    ]


def _dataset(images: list[np.ndarray]) -> jb.Dataset:
    return jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})


def _reference_patches(image: np.ndarray, ph: int, pw: int, pad: float) -> dict:
    """{(patch row, patch column): (flattened patch, real pixels)} by slicing."""
    h, w, c = image.shape
    gh, gw = -(-h // ph), -(-w // pw)
    padded = np.full((gh * ph, gw * pw, c), pad, np.float32)
    padded[:h, :w] = image
    out = {}
    for r in range(gh):
        for q in range(gw):
            patch = padded[r * ph : (r + 1) * ph, q * pw : (q + 1) * pw]
            real = max(0, min(ph, h - r * ph)) * max(0, min(pw, w - q * pw))
            out[(r, q)] = (patch.reshape(-1), real)
    return out


def _seen_patches(ds, plan, planner, pad):
    """{image: {(row, col): (patch, pixels)}} over every batch, asserting the
    layout of each row (segments 1.. in order, padding after)."""
    seen: dict[int, dict] = {}
    for spec in plan:
        batch = jb.collate(ds, spec, pad_value=pad)
        ids, pos, pix = batch["image_segment_ids"], batch["image_positions"], batch["image_pixels"]
        index, counts = batch["example_index"], batch["image_patches"]
        assert batch["image"].shape[:2] == ids.shape == pix.shape == pos.shape[:2]
        for r in range(ids.shape[0]):
            used = int(counts[r].sum())
            assert (ids[r, used:] == 0).all() and (pix[r, used:] == 0).all()
            assert (batch["image"][r, used:] == pad).all()
            start = 0
            for s, e in enumerate(index[r]):
                if e < 0:
                    assert counts[r, s] == 0
                    continue
                n = int(counts[r, s])
                assert (ids[r, start : start + n] == s + 1).all()
                for k in range(start, start + n):
                    key = (int(pos[r, k, 0]), int(pos[r, k, 1]))
                    assert key not in seen.setdefault(int(e), {}), "a patch appears twice"
                    seen[int(e)][key] = (batch["image"][r, k], int(pix[r, k]))
                start += n
    return seen


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 12),
    ph=st.integers(1, 4),
    pw=st.integers(1, 4),
    algorithm=st.sampled_from(["best_fit", "first_fit"]),
    pad=st.sampled_from([0.0, -1.0]),
)
def test_every_patch_exactly_once_with_position_and_segment(seed, n, ph, pw, algorithm, pad):
    rng = np.random.default_rng(seed)
    images = _images(rng, n, 10, 2)
    ds = _dataset(images)
    planner = jb.PatchPack(
        patch=(ph, pw),
        row_length=100,
        rows_per_batch=2,
        algorithm=algorithm,
        partial_patches="pad",
    )
    plan = jb.plan(ds, planner)
    seen = _seen_patches(ds, plan, planner, pad)
    for e, image in enumerate(images):
        want = _reference_patches(image, ph, pw, pad)
        got = seen.get(e, {})
        assert set(got) == set(want), f"image {e}"
        for key, (patch, real) in want.items():
            np.testing.assert_array_equal(got[key][0], patch)
            assert got[key][1] == real
    assert plan.stats.real_elements == sum(len(_reference_patches(i, ph, pw, 0)) for i in images)


def test_masked_mean_pool_per_segment_equals_numpy_mean():
    rng = np.random.default_rng(3)
    images = _images(rng, 9, 12, 3)
    images = [i[: i.shape[0] // 2 * 2, : i.shape[1] // 2 * 2] for i in images]  # whole patches
    ds = _dataset(images)
    planner = jb.PatchPack(patch=(2, 2), row_length=40, rows_per_batch=3)
    for spec in jb.plan(ds, planner):
        batch = jb.collate(ds, spec)
        segments = batch["example_index"].shape[1]
        # entry s pools segment id s + 1: the row's image in slot s
        pooled = np.asarray(
            jb.masked.segment_mean(batch["image"], batch["image_segment_ids"], segments)
        )
        for r, row in enumerate(batch["example_index"]):
            for s, e in enumerate(row):
                if e >= 0 and images[e].size:
                    pixels = images[e].reshape(-1, images[e].shape[-1])
                    # the mean over patches of each patch's flattened pixels
                    want = _patch_matrix(images[e], 2, 2).mean(axis=0)
                    np.testing.assert_allclose(pooled[r, s], want, rtol=1e-5)
                    assert pixels.shape[0] == int(batch["image_patches"][r, s]) * 4


def _patch_matrix(image: np.ndarray, ph: int, pw: int) -> np.ndarray:
    h, w, c = image.shape
    return (
        image.reshape(h // ph, ph, w // pw, pw, c).transpose(0, 2, 1, 3, 4).reshape(-1, ph * pw * c)
    )


def test_attention_mask_keeps_images_apart():
    images = [np.ones((4, 4, 1), np.float32), np.ones((2, 4, 1), np.float32)]
    ds = _dataset(images)
    plan = jb.plan(ds, jb.PatchPack(patch=(2, 2), row_length=8, rows_per_batch=1))
    batch = jb.collate(ds, plan[0])
    mask = np.asarray(jb.masked.attention_mask(batch["image_segment_ids"]))
    ids = batch["image_segment_ids"][0]
    want = (ids[:, None] == ids[None, :]) & (ids[:, None] > 0)
    np.testing.assert_array_equal(mask[0], want)
    assert ids.tolist() == [1, 1, 1, 1, 2, 2, 0, 0]


def test_dropping_is_deterministic_per_seed_and_epoch():
    rng = np.random.default_rng(1)
    images = [rng.random((8, 8, 1), dtype=np.float32) for _ in range(4)]
    ds = _dataset(images)
    planner = jb.PatchPack(patch=(2, 2), row_length=16, rows_per_batch=2, drop_percent=50)
    plan = jb.plan(ds, planner)
    assert plan.stats.real_elements == 4 * 8  # 16 patches each, half kept

    def kept(epoch, p=planner):
        out = {}
        for spec in jb.plan(ds, p):
            b = jb.collate(ds, spec, epoch=epoch)
            for r, row in enumerate(b["example_index"]):
                start = 0
                for s, e in enumerate(row):
                    n = int(b["image_patches"][r, s])
                    if e >= 0:
                        out[int(e)] = [tuple(x) for x in b["image_positions"][r, start : start + n]]
                    start += n
        return out

    first = kept(0)
    assert all(len(v) == 8 and len(set(v)) == 8 for v in first.values())
    assert kept(0) == first  # same seed, epoch and image: the same patches
    assert kept(1) != first  # another epoch draws again
    other = jb.PatchPack(
        patch=(2, 2), row_length=16, rows_per_batch=2, drop_percent=50, drop_seed=9
    )
    assert kept(0, other) != first


def test_policies_and_errors():
    ds = _dataset([np.zeros((5, 4, 1), np.float32)])
    with pytest.raises(ValueError, match="image 0 is 5 x 4 pixels, not a multiple of the patch"):
        jb.plan(ds, jb.PatchPack(patch=(2, 2), row_length=8, rows_per_batch=1))
    with pytest.raises(ValueError, match="truncate"):
        jb.PatchPack(patch=(2, 2), row_length=8, rows_per_batch=1, too_long="truncate")
    with pytest.raises(ValueError, match="drop_percent"):
        jb.PatchPack(row_length=8, rows_per_batch=1, drop_percent=100)
    big = _dataset([np.zeros((8, 4, 1), np.float32), np.zeros((2, 2, 1), np.float32)])
    with pytest.raises(ValueError, match="image 0 has 4 x 2 = 8 patches"):
        jb.plan(big, jb.PatchPack(patch=(2, 2), row_length=4, rows_per_batch=1))
    plan = jb.plan(big, jb.PatchPack(patch=(2, 2), row_length=4, rows_per_batch=1, too_long="skip"))
    assert plan.stats.skipped == 1
    split = jb.plan(
        big, jb.PatchPack(patch=(2, 2), row_length=4, rows_per_batch=4, too_long="split")
    )
    batch = jb.collate(big, split[0])
    assert sorted(batch["example_piece"][batch["example_piece"] >= 0].tolist()) == [0, 0, 1]


def test_key_round_trip():
    planner = jb.PatchPack(
        patch=(14, 14), row_length=256, token_budget=4096, drop_percent=25, drop_seed=7
    )
    assert planner.key.startswith("PatchPack(patch=[14, 14], row_length=256, rows_per_batch=None")
    from jaxbatch._src.plan.planners import planner_from_key

    assert planner_from_key(planner.key) == planner
