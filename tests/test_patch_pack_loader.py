"""The Loader collates jb.PatchPack (NaViT patch packing): its batches equal
jb.plan + jb.collate's for the same order and epoch (drop_percent's dropped
patches included), every image's patches appear once an epoch against a
NumPy slicing reference, a per-image label is laid out per segment,
restore, shards, bad records and streaming work as for any planner, and
loader.shapes reports (rows, H, W) for grid plans."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_grid_columns import _drain, _same

import jaxbatch as jb


def _images(rng: np.random.Generator, n: int, patch: int = 2) -> list[np.ndarray]:
    """n float32 RGB images, sides whole patches of 1..4, pixels never 0."""
    return [
        rng.integers(
            1, 255, size=(patch * rng.integers(1, 5), patch * rng.integers(1, 5), 3)
        ).astype(np.float32)
        for _ in range(n)
    ]


def _dataset(images: list[np.ndarray]) -> jb.Dataset:
    labels = np.arange(100, 100 + len(images), dtype=np.int32)
    return jb.Dataset.from_arrays({"image": images, "label": labels}, axes={"image": ("h", "w")})


def _planner(**kwargs) -> jb.PatchPack:
    return jb.PatchPack(patch=(2, 2), row_length=24, rows_per_batch=2, **kwargs)


def _patches(image: np.ndarray, p: int = 2) -> dict[tuple[int, int], np.ndarray]:
    """{(patch row, patch column): flattened patch} by NumPy slicing."""
    h, w, _ = image.shape
    return {
        (r, q): image[r * p : (r + 1) * p, q * p : (q + 1) * p].reshape(-1)
        for r in range(h // p)
        for q in range(w // p)
    }


def _seen(batches) -> dict[int, dict[tuple[int, int], np.ndarray]]:
    """{image: {(row, col): patch}} over `batches`, each patch once; checks
    the label laid out per segment."""
    seen: dict[int, dict] = {}
    for b in batches:
        index, ids, pos = b["example_index"], b["image_segment_ids"], b["image_positions"]
        np.testing.assert_array_equal(b["label"], np.where(index >= 0, 100 + index, 0))
        for r, c in zip(*np.nonzero(ids), strict=True):
            e = int(index[r, ids[r, c] - 1])
            key = (int(pos[r, c, 0]), int(pos[r, c, 1]))
            assert key not in seen.setdefault(e, {}), "a patch appears twice"
            seen[e][key] = b["image"][r, c]
    return seen


def test_batches_equal_plan_and_collate_for_the_same_order_and_epoch():
    images = _images(np.random.default_rng(0), 30)
    ds = _dataset(images)
    planner = _planner(drop_percent=40, drop_seed=3)
    plan = jb.plan(ds, planner)
    with jb.Loader(ds, planner, shuffle=False, epochs=2, num_threads=3) as loader:
        got = _drain(loader)
    want = [
        {k: np.array(v) for k, v in jb.collate(ds, spec, epoch=epoch).items()}
        for epoch in range(2)
        for spec in plan
    ]
    _same(got, want)
    # Each epoch drops other patches: epoch 1 is not epoch 0 again.
    assert any(
        not np.array_equal(a["image_positions"], b["image_positions"])
        for a, b in zip(got[: len(plan)], got[len(plan) :], strict=True)
    )


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 25), shuffle=st.booleans())
def test_every_patch_once_an_epoch_against_numpy_slicing(seed, n, shuffle):
    images = _images(np.random.default_rng(seed), n)
    with jb.Loader(_dataset(images), _planner(), shuffle=shuffle, seed=seed % 97) as loader:
        batches = _drain(loader)
        assert loader.stats.real_elements == sum(len(_patches(i)) for i in images)
    seen = _seen(batches)
    assert set(seen) == set(range(n))
    for e, image in enumerate(images):
        want = _patches(image)
        assert set(seen[e]) == set(want), f"image {e}"
        for key, patch in want.items():
            np.testing.assert_array_equal(seen[e][key], patch)


def test_restore_mid_epoch_gives_the_same_remaining_batches_with_dropping():
    ds = _dataset(_images(np.random.default_rng(1), 40))
    options = dict(seed=5, epochs=2, num_threads=2, prefetch=2)
    planner = _planner(drop_percent=30, drop_seed=1)
    with jb.Loader(ds, planner, **options) as loader:
        whole = _drain(loader)
    for at in (1, len(whole) // 2 + 1):
        with jb.Loader(ds, planner, **options) as first:
            _drain(first, at)
            state = first.get_state()
        with jb.Loader(ds, planner, state=state, **options) as rest:
            _same(_drain(rest), whole[at:])


def test_thread_count_and_prefetch_do_not_change_the_stream():
    ds = _dataset(_images(np.random.default_rng(2), 30))
    planner = _planner(drop_percent=25)
    streams = [
        _drain(jb.Loader(ds, planner, seed=2, num_threads=t, prefetch=p))
        for t, p in [(1, 1), (4, 6)]
    ]
    _same(*streams)


def test_shards_partition_the_images():
    images = _images(np.random.default_rng(3), 50)
    ds = _dataset(images)
    planner = _planner(remainder="pad")
    seen: list[int] = []
    steps = set()
    for index in range(3):
        with jb.Loader(ds, planner, shard=(index, 3), seed=4) as loader:
            batches = _drain(loader)
        steps.add(len(batches))
        seen += [int(e) for b in batches for e in b["example_index"].ravel() if e >= 0]
    assert sorted(seen) == list(range(50))
    assert len(steps) == 1  # every shard as many steps


def test_bad_images_follow_on_error():
    images = _images(np.random.default_rng(4), 8)
    images[3][0, 0, 0] = np.nan
    ds = _dataset(images)
    schema = {"image": jb.ColumnSchema(finite=True)}
    with jb.Loader(ds, _planner(), schema=schema, on_error="skip", shuffle=False) as loader:
        batches = _drain(loader)
        assert loader.stats.skipped == 1
    assert set(_seen(batches)) == set(range(8)) - {3}
    with pytest.raises(ValueError, match="example 3"):
        _drain(jb.Loader(ds, _planner(), schema=schema, on_error="raise"))


def test_streamed_parquet_equals_reading_it_whole(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    images = _images(np.random.default_rng(5), 60)
    typ = pa.list_(pa.list_(pa.list_(pa.float32(), 3)))
    table = pa.table(
        {
            "image": pa.array([a.tolist() for a in images], type=typ),
            "label": pa.array(np.arange(100, 160, dtype=np.int32)),
        }
    )
    path = tmp_path / "images.parquet"
    pq.write_table(table, path, row_group_size=10)
    options = dict(seed=4, epochs=2, num_threads=2)
    planner = _planner(drop_percent=20)
    whole = _drain(jb.Loader(str(path), planner, **options))
    with jb.Loader(str(path), planner, stream=True, host_memory_limit=400_000, **options) as s:
        _same(whole, _drain(s))
    assert set(_seen(whole[: len(whole) // 2])) == set(range(60))


def test_a_ragged_column_beside_the_image_is_refused_naming_it():
    images = _images(np.random.default_rng(6), 4)
    ds = jb.Dataset.from_arrays(
        {"image": images, "caption": [np.arange(i + 1) for i in range(4)]},
        axes={"image": ("h", "w")},
    )
    with pytest.raises(ValueError, match="column 'caption' is ragged.*columns="):
        jb.Loader(ds, _planner())
    with pytest.raises(ValueError, match="column 'caption' is ragged"):
        jb.collate(ds, jb.plan(ds, _planner())[0])
    # Without it the same images load.
    alone = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    with jb.Loader(alone, _planner()) as loader:
        assert set(_seen_images(_drain(loader))) == set(range(4))


def _seen_images(batches) -> set[int]:
    return {int(e) for b in batches for e in b["example_index"].ravel() if e >= 0}


def test_loader_shapes_of_a_grid_dataset_are_the_plans_rows_h_w():
    rng = np.random.default_rng(7)
    images = [np.ones((int(h), int(w)), np.float32) for h, w in rng.integers(1, 30, (40, 2))]
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    for planner in (jb.PadToMax(batch_size=8), jb.AutoBuckets(3, token_budget=4096)):
        plan = jb.plan(ds, planner)
        with jb.Loader(ds, planner, shuffle=False) as loader:
            want = list(dict.fromkeys(spec.shape.grid for spec in plan))
            assert [s.grid for s in loader.shapes] == want
            for batch, spec in zip(loader, plan, strict=True):
                assert batch.shape.grid == spec.shape.grid == batch["image"].shape
