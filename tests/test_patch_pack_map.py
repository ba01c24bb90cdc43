"""jb.map and jb.run over jb.PatchPack (NaViT patch packing): the function
gets one packed row of patches and returns per-image ([S, ...]) or
per-patch ([L, ...]) outputs; the results, keyed by image, equal a NumPy
reference computed image by image, through shuffling, patch dropping, OOM
splits, per-image checks, compilation ahead, an interrupted, resumed job
and a job over a Parquet file of images, whole and streamed."""

from __future__ import annotations

import logging
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import map_quarantining_one

import jaxbatch as jb
from jaxbatch._src.execute.executor import Executor, _spec_for
from jaxbatch._src.job import folder as job_folder

P = 2  # patch side


def _images(sizes: list[tuple[int, int]], seed: int = 0) -> list[np.ndarray]:
    """float32 RGB images of (patch rows, patch columns) `sizes`."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 1, size=(P * h, P * w, 3)).astype(np.float32) for h, w in sizes]


def _random_sizes(n: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 5)), int(rng.integers(1, 5))) for _ in range(n)]


def _dataset(images: list[np.ndarray]) -> jb.Dataset:
    labels = np.arange(len(images), dtype=np.int32) * 3
    return jb.Dataset.from_arrays({"image": images, "label": labels}, axes={"image": ("h", "w")})


def _planner(**kwargs) -> jb.PatchPack:
    options = {"patch": (P, P), "row_length": 24, "rows_per_batch": 2} | kwargs
    return jb.PatchPack(**options)


def _patches(image: np.ndarray) -> np.ndarray:
    """[n, P * P * 3]: the image's patches in raster order, by NumPy slicing."""
    h, w, _ = image.shape
    return np.stack(
        [
            image[r * P : (r + 1) * P, c * P : (c + 1) * P].reshape(-1)
            for r in range(h // P)
            for c in range(w // P)
        ]
    )


def embed(row):
    """Per image: its mean patch and its label twice; per patch: each
    patch's sum and (patch row, patch column)."""
    slots = row["example_index"].shape[0]
    return {
        "mean": jb.masked.segment_mean(row["image"], row["image_segment_ids"], slots),
        "label2": row["label"] * 2,
        "patch_sum": row["image"].sum(-1),
        "position": row["image_positions"],
    }


def _reference(image: np.ndarray, label: int) -> dict[str, np.ndarray]:
    patches = _patches(image)
    h, w = image.shape[0] // P, image.shape[1] // P
    position = np.array([(r, c) for r in range(h) for c in range(w)])
    return {
        "mean": patches.mean(0),
        "label2": np.int32(2 * label),
        "patch_sum": patches.sum(-1),
        "position": position,
    }


def _assert_reference(outputs: dict, images: list[np.ndarray], skip=()) -> None:
    assert sorted(outputs) == sorted(set(range(len(images))) - set(skip))
    for i, image in enumerate(images):
        if i in skip:
            continue
        want = _reference(image, 3 * i)
        for key, value in want.items():
            np.testing.assert_allclose(outputs[i][key], value, rtol=1e-5, atol=1e-6, err_msg=key)


# --- jb.map ----------------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=14))
def test_map_equals_the_per_image_reference(sizes):
    images = _images(sizes)
    result = jb.map(embed, _dataset(images), planner=_planner(drop_percent=0))
    _assert_reference(result.outputs, images)
    assert result.stats.examples == len(images) and result.quarantine == []
    assert result.stats.compilations == 1 == result.stats.expected_shapes


@pytest.mark.parametrize("shuffle", [False, True])
def test_map_over_a_loader_keys_each_image_whatever_the_order(shuffle):
    images = _images(_random_sizes(25, seed=1), seed=1)
    with jb.Loader(_dataset(images), _planner(), shuffle=shuffle, seed=4) as loader:
        result = jb.map(embed, loader, progress=True)
    _assert_reference(result.outputs, images)
    assert result.stats.batches == len(jb.plan(_dataset(images), _planner()))


def test_dropped_patches_come_back_per_image_in_raster_order():
    """drop_percent=50: each image's per-patch outputs are its kept patches
    (n - n * 50 // 100, at least one), a subset in raster order."""
    sizes = _random_sizes(20, seed=2)
    images = _images(sizes, seed=2)
    result = jb.map(embed, _dataset(images), planner=_planner(drop_percent=50, drop_seed=7))
    for i, ((h, w), image) in enumerate(zip(sizes, images, strict=True)):
        out, n = result.outputs[i], h * w
        raster = out["position"][:, 0] * w + out["position"][:, 1]
        assert len(raster) == max(1, n - n * 50 // 100)
        assert np.all(np.diff(raster) > 0)
        np.testing.assert_allclose(out["patch_sum"], _patches(image).sum(-1)[raster], rtol=1e-5)
        np.testing.assert_allclose(out["mean"], _patches(image)[raster].mean(0), rtol=1e-5)


def oom_above(limit: int):
    """`embed`'s mean whose *runtime* raises XLA's RESOURCE_EXHAUSTED for
    more than `limit` rows (the callback sees the whole batch)."""

    def host(x):
        if x.shape[0] > limit:
            raise MemoryError(f"RESOURCE_EXHAUSTED: Out of memory for {x.shape[0]} rows")
        return np.asarray(x)

    def f(row):
        out = embed(row)
        spec = jax.ShapeDtypeStruct(out["mean"].shape, out["mean"].dtype)
        mean = jax.pure_callback(host, spec, out["mean"], vmap_method="broadcast_all")
        return dict(out, mean=mean)

    return f


def test_an_oom_split_loses_and_duplicates_nothing(caplog):
    images = _images(_random_sizes(30, seed=3), seed=3)
    planner = _planner(rows_per_batch=4)
    with caplog.at_level(logging.WARNING, logger="jaxbatch"):
        result = jb.map(oom_above(1), _dataset(images), planner=planner, backoff=0.5)
    _assert_reference(result.outputs, images)
    assert result.stats.backoffs == [(4, 2), (2, 1)]
    assert result.stats.examples == len(images)
    assert "out of memory at 4 rows; retrying with 2" in caplog.text


def nan_for_some(row):
    """`embed`, with a NaN mean (per image) for example 5 and NaN patches
    (per patch) for example 7; the padding patches of every row are NaN too
    (0 / 0 pixels), which check_finite must pass over."""
    out = embed(row)
    bad_mean = (row["example_index"] == 5)[:, None]
    bad_patch = (row["example_index"] == 7)[jnp.maximum(row["image_segment_ids"] - 1, 0)]
    bad_patch = bad_patch & (row["image_segment_ids"] > 0)
    per_pixel = jnp.where(bad_patch, jnp.nan, row["image"].sum(-1)) / row["image_pixels"]
    return dict(out, mean=jnp.where(bad_mean, jnp.nan, out["mean"]), per_pixel=per_pixel)


def test_checks_set_aside_only_the_flagged_images_of_a_row():
    images = _images(_random_sizes(24, seed=5), seed=5)
    ds, planner = _dataset(images), _planner()
    result = jb.map(
        nan_for_some,
        ds,
        planner=planner,
        check_finite=True,
        check=lambda row, out: row["label"] != 3 * 9,  # per image: example 9 fails
        on_error="quarantine",
    )
    reasons = {q["example"]: q["reason"] for q in result.quarantine}
    assert reasons == {
        5: "an output is not finite (NaN or Inf)",
        7: "an output is not finite (NaN or Inf)",
        9: "check returned False",
    }
    # Their row-mates are kept and right.
    with jb.Loader(ds, planner, shuffle=False) as loader:
        rows = [r for b in loader for r in np.asarray(b["example_index"])]
    assert all(sum(e >= 0 for e in next(r for r in rows if i in r)) > 1 for i in reasons)
    _assert_reference(result.outputs, images, skip=set(reasons))
    for i in result.outputs:  # The NaN padding patches were not counted as failures.
        np.testing.assert_allclose(
            result.outputs[i]["per_pixel"], _patches(images[i]).sum(-1) / (P * P), rtol=1e-5
        )
    with pytest.raises(ValueError, match=r"jb.map: example [57] .*not finite"):
        jb.map(nan_for_some, ds, planner=planner, check_finite=True)


def test_every_planned_shape_compiles_once_ahead(monkeypatch):
    """remainder="keep" gives a last batch of fewer rows: a second shape,
    whose arrays compile_ahead predicts from the first batch's (per-patch
    keys [rows, L], per-image keys [rows, S]), so nothing compiles twice."""
    images = _images(_random_sizes(13, seed=6), seed=6)
    ds, planner = _dataset(images), _planner(rows_per_batch=3, remainder="keep")
    with jb.Loader(ds, planner, shuffle=False) as loader:
        shapes, batches = loader.shapes, [dict(b) for b in loader]
    assert [s.rows for s in shapes] == [3, 1]
    for batch in batches:
        shape = next(s for s in shapes if s.rows == batch["image"].shape[0])
        spec = _spec_for(batches[0], shape, True, "image")
        assert spec == {k: (v.shape, v.dtype) for k, v in batch.items()}
    compiled = []
    real_compile = Executor._compile

    def counting_compile(self, arrays):
        compiled.append({k: tuple(v.shape) for k, v in arrays.items()})
        return real_compile(self, arrays)

    monkeypatch.setattr(Executor, "_compile", counting_compile)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = jb.map(embed, ds, planner=planner)
    assert [c["image_pixels"] for c in compiled] == [(3, 24), (1, 24)]
    assert result.stats.compilations == 2 == result.stats.expected_shapes
    _assert_reference(result.outputs, images)


def test_refusals_name_the_output_or_the_option(tmp_path):
    ds = _dataset(_images(_random_sizes(4)))
    with pytest.raises(
        ValueError,
        match=r"output 'output' has shape \(\) per packed row: with PatchPack each row holds "
        r"up to \d+ images, so an output must be per image .*segment_mean",
    ):
        jb.map(lambda row: row["image"].sum(), ds, planner=_planner())
    split = _planner(too_long="split", row_length=8)
    with pytest.raises(ValueError, match=r"jb.map: PatchPack\(too_long='split'\)"):
        jb.map(embed, ds, planner=split)
    with pytest.raises(ValueError, match=r"jb.run: PatchPack\(too_long='split'\)"):
        jb.run(embed, ds, tmp_path / "out", planner=split)
    assert not (tmp_path / "out").exists()


# --- jb.run ----------------------------------------------------------------


def test_run_equals_map_and_resumes_after_a_crash_without_duplicates(tmp_path, monkeypatch):
    images = _images(_random_sizes(30, seed=9), seed=9)
    ds, planner = _dataset(images), _planner()
    mapped = jb.map(embed, ds, planner=planner).outputs
    jb.run(embed, ds, tmp_path / "reference", planner=planner, checkpoint_every=6, progress=False)

    class Crash(Exception):
        pass

    real_append = job_folder.Journal.append
    shards = []

    def crash_on_third_shard(self, record):
        if record["kind"] == "shard":
            if len(shards) == 2:
                raise Crash  # As if killed after two committed shards.
            shards.append(record)
        real_append(self, record)

    job = tmp_path / "job"
    monkeypatch.setattr(job_folder.Journal, "append", crash_on_third_shard)
    with pytest.raises(Crash):
        jb.run(embed, ds, job, planner=planner, checkpoint_every=6, progress=False)
    monkeypatch.setattr(job_folder.Journal, "append", real_append)
    report = jb.run(embed, ds, job, planner=planner, checkpoint_every=6, progress=False)
    assert report.runs == 2 and report.examples == len(images)

    out, reference = jb.read_output(job), jb.read_output(tmp_path / "reference")
    np.testing.assert_array_equal(out["example_index"], np.arange(len(images)))
    for key in ("mean", "label2"):
        np.testing.assert_array_equal(out[key], reference[key])
    for i in range(len(images)):
        for key in ("mean", "label2", "patch_sum", "position"):
            np.testing.assert_array_equal(np.asarray(out[key][i]), mapped[i][key], err_msg=key)
    _assert_reference({i: mapped[i] for i in range(len(images))}, images)


def test_a_pack_row_sets_aside_only_its_flagged_sequence():
    """The same per-segment checks for jb.Pack: a NaN token flags its own
    sequence, not the others packed beside it (nor the row's padding)."""
    rng = np.random.default_rng(11)
    tokens = [rng.integers(1, 50, size=int(n)).astype(np.int32) for n in rng.integers(1, 9, 20)]
    tokens[4][-1] = 999
    ds = jb.Dataset.from_arrays({"tokens": tokens})

    def halves(row):
        x = row["tokens"].astype(jnp.float32)
        return jnp.where(x == 999, jnp.nan, x / 2) / (row["tokens_segment_ids"] > 0)

    outputs = map_quarantining_one(halves, ds, jb.Pack(row_length=16, rows_per_batch=2), 4, 20)
    for i, output in outputs.items():
        np.testing.assert_allclose(output, tokens[i] / 2)


@pytest.mark.parametrize("stream", [False, True])
def test_run_over_a_parquet_file_of_images_equals_map(tmp_path, stream):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    images = _images(_random_sizes(20, seed=12), seed=12)
    typ = pa.list_(pa.list_(pa.list_(pa.float32(), 3)))
    labels = pa.array(np.arange(20, dtype=np.int32) * 3)
    table = pa.table({"image": pa.array([a.tolist() for a in images], type=typ), "label": labels})
    pq.write_table(table, tmp_path / "images.parquet", row_group_size=6)
    options = {"stream": True, "host_memory_limit": 200_000} if stream else {}
    jb.run(
        embed,
        tmp_path / "images.parquet",
        tmp_path / "out",
        planner=_planner(),
        checkpoint_every=7,
        progress=False,
        **options,
    )
    out = jb.read_output(tmp_path / "out")
    np.testing.assert_array_equal(out["example_index"], np.arange(20))
    _assert_reference(
        {i: {k: out[k][i] for k in ("mean", "label2", "patch_sum", "position")} for i in range(20)},
        images,
    )
