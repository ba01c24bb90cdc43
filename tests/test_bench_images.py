"""bench/bench_images.py --quick and bench/image_data.py: the data follow the
stated size distribution, every way trains on every image once, the pixel and
compilation counts match NumPy references computed here, and the pair
features' padded elements match a per-batch reference. Nothing here depends
on timing."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_images  # noqa: E402
import image_data  # noqa: E402
from conftest import run_bench_quick  # noqa: E402

PATCH = image_data.PATCH


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    return run_bench_quick(bench_images, "bench_images", tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def quick_images():
    return image_data.examples(bench_images.QUICK_IMAGES, seed=0)


def test_sources_are_the_files_scikit_image_ships():
    images = image_data.sources()
    assert len(images) == len(image_data.SOURCES) == bench_images.CLASSES
    for name, image in zip(image_data.SOURCES, images, strict=True):
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3, name
        assert min(image.shape[:2]) >= 100, name


def test_drawn_sizes_follow_the_stated_distribution():
    sizes = image_data.draw_sizes(20_000, np.random.default_rng(1))
    assert np.all(sizes % PATCH == 0) and sizes.min() >= 2 * PATCH
    long, short = sizes.max(1), sizes.min(1)
    assert long.max() == image_data.CAP
    assert abs(np.mean(long == image_data.CAP) - image_data.CAP_SHARE) < 0.02
    # Each format's share among the images stored at the cap (short = 256 / format).
    capped = short[long == image_data.CAP]
    for ratio, share in image_data.FORMATS:
        expected = max(2, round(image_data.CAP / ratio / PATCH)) * PATCH
        assert abs(np.mean(capped == expected) - share) < 0.02, ratio
    portrait = sizes[:, 0] > sizes[:, 1]
    landscape = sizes[:, 0] < sizes[:, 1]
    assert (
        abs(portrait.sum() / (portrait.sum() + landscape.sum()) - image_data.PORTRAIT_SHARE) < 0.02
    )


def test_fit_never_upscales_and_keeps_whole_patches():
    for size, source in [((256, 192), (102, 102, 3)), ((64, 256), (172, 448, 3)),
                         ((256, 256), (512, 512, 3))]:  # fmt: skip
        h, w = image_data.fit(np.array(size), source)
        assert h <= max(source[0], PATCH) and w <= max(source[1], PATCH)
        assert h % PATCH == 0 and w % PATCH == 0
    assert image_data.fit(np.array((256, 256)), (512, 512, 3)) == (256, 256)
    assert image_data.fit(np.array((256, 192)), (102, 102, 3)) == (96, 64)


def test_examples_are_seeded_crops_of_their_source(quick_images):
    images, labels = quick_images
    again, labels_again = image_data.examples(bench_images.QUICK_IMAGES, seed=0)
    assert np.array_equal(labels, labels_again)
    assert all(np.array_equal(a, b) for a, b in zip(images, again, strict=True))
    sources = image_data.sources()
    for image, label in zip(images, labels, strict=True):
        h, w, c = image.shape
        assert c == 3 and h % PATCH == 0 and w % PATCH == 0
        assert h <= sources[label].shape[0] and w <= sources[label].shape[1]
        # A downscaled crop keeps its source's overall brightness roughly.
        assert abs(float(image.mean()) - float(sources[label].mean())) < 100


def test_patchify_cuts_patches_in_row_major_order():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (2, 32, 48, 3), dtype=np.uint8)
    mask = np.zeros((2, 32, 48), bool)
    mask[0] = True
    mask[1, :16, :32] = True
    patches, positions, segments = (np.asarray(a) for a in bench_images.patchify(images, mask))
    assert patches.shape == (2, 6, PATCH * PATCH * 3)
    for b in range(2):
        for k in range(6):
            r, c = divmod(k, 3)
            expected = images[b, r * PATCH : (r + 1) * PATCH, c * PATCH : (c + 1) * PATCH]
            assert np.array_equal(patches[b, k], expected.reshape(-1))
            assert positions[b, k].tolist() == [r, c]
    assert segments.tolist() == [[1] * 6, [1, 1, 0, 0, 0, 0]]


def test_quick_run_trains_every_way_on_every_image(quick_result, quick_images):
    images, _ = quick_images
    total = sum(x.shape[0] * x.shape[1] for x in images)
    runs = quick_result["runs"]
    assert set(runs) | set(quick_result["not_available"]) == set(bench_images.WAYS)
    assert set(bench_images.BASELINES) <= set(runs)
    kept = sum(min(x.shape[0] * x.shape[1], bench_images.RESIZE_TO**2) for x in images)
    for way, rs in runs.items():
        expected = kept if way == "resize" else total
        assert {r["real_pixels"] for r in rs} == {expected}, way
        for r in rs:
            assert 0 <= r["padded_fraction"] < 1 and np.isfinite(r["last_quarter_loss"]), way


def test_quick_run_compilations_follow_from_the_batching(quick_result, quick_images):
    images, _ = quick_images
    runs = quick_result["runs"]
    first = {way: rs[0] for way, rs in runs.items()}
    assert first["resize"]["shapes"] == [[bench_images.BATCH, 224, 224, 3]]
    # pad: one compilation per distinct (rows, H, W) of the shuffled batches.
    order = bench_images.shuffled(len(images))
    shapes = set()
    fed = 0
    for start in range(0, len(order), bench_images.BATCH):
        chunk = [images[i] for i in order[start : start + bench_images.BATCH]]
        shape = (len(chunk), max(x.shape[0] for x in chunk), max(x.shape[1] for x in chunk))
        shapes.add(shape + (3,))
        fed += shape[0] * shape[1] * shape[2]
    assert sorted(map(list, shapes)) == first["pad"]["shapes"]
    assert first["pad"]["fed_pixels"] == fed
    if "buckets" in first:
        assert first["buckets"]["compilations"] <= bench_images.BUCKET_SHAPES
        for rows, h, w, _ in first["buckets"]["shapes"]:
            assert rows * h * w <= bench_images.PIXEL_BUDGET
    if "patchpack" in first:
        rows, length, values = first["patchpack"]["shapes"][0]
        assert first["patchpack"]["compilations"] == 1
        assert (rows, length, values) == (bench_images.pack_rows(), bench_images.PACK_ROW, 768)


def test_pair_features_match_a_per_batch_reference(quick_result):
    pairs = quick_result["pairs"]
    lengths = bench_images.pair_lengths(quick=True)
    order = bench_images.shuffled(len(lengths))
    batches = [lengths[order[s : s + bench_images.PAIR_BATCH]]
               for s in range(0, len(order), bench_images.PAIR_BATCH)]  # fmt: skip
    per = pairs["padded_per_batch"]
    assert per["batches"] == len(batches)
    assert per["elements"] == sum(len(b) * int(b.max()) ** 2 for b in batches)
    assert per["real"] == int(np.sum(lengths.astype(np.int64) ** 2))
    if "tied_buckets" in pairs:
        tied = pairs["tied_buckets"]
        assert tied["batches"] <= per["batches"] + bench_images.PAIR_SHAPES
        assert tied["shapes"] <= bench_images.PAIR_SHAPES
        assert tied["real"] == per["real"]
        assert pairs["ratio"] == pytest.approx(per["padded"] / tied["padded"])


@pytest.mark.skipif(bench_images.available("patchpack") is not None, reason="no jb.PatchPack yet")
def test_packed_patches_are_the_padded_ways_patches(quick_images):
    """The patchpack way feeds the model each image's patches and positions
    exactly as patchify cuts them from a padded batch: the ways differ in
    batching only."""
    images, labels = quick_images
    seen = 0
    for b in bench_images.patchpack_batches(images, labels):
        patches, positions, segments = (np.asarray(b[k]) for k in ("patches", "positions",
                                                                     "segments"))  # fmt: skip
        for row, examples in enumerate(np.asarray(b["index"])):
            for s, e in enumerate(examples):
                if e < 0:
                    continue
                image = images[e]
                mask = np.ones(image.shape[:2], bool)
                want = [np.asarray(a)[0] for a in bench_images.patchify(image[None], mask[None])]
                at = segments[row] == s + 1
                assert np.array_equal(patches[row, at], want[0]), e
                assert np.array_equal(positions[row, at], want[1]), e
                assert b["labels"][row, s] == labels[e]
                seen += 1
    assert seen == len(images)


def test_steps_run_epoch_after_epoch_each_reshuffled(quick_images):
    """--steps: exactly that many batches, epoch after epoch, each epoch a
    new order over every image once."""
    images, labels = quick_images
    per_epoch = len(images) // bench_images.BATCH
    tagged = list(bench_images._epochs("pad", images, labels, 2 * per_epoch + 1))
    assert [e for e, _ in tagged] == [0] * per_epoch + [1] * per_epoch + [2]
    orders = []
    for epoch in (0, 1):
        index = np.concatenate([b["index"] for e, b in tagged if e == epoch])
        assert sorted(index.tolist()) == list(range(len(images)))
        orders.append(index.tolist())
    assert orders[0] != orders[1]


def _bound_reference(sizes, k):
    """Every set of at most k shapes from distinct heights x widths that
    holds every image, each image in its smallest-area shape."""
    import itertools

    candidates = [(h, w) for h in set(sizes[:, 0]) for w in set(sizes[:, 1])]
    best = None
    for n in range(1, k + 1):
        for shapes in itertools.combinations(candidates, n):
            areas = [min((a * b for a, b in shapes if a >= h and b >= w), default=None)
                     for h, w in sizes]  # fmt: skip
            if None not in areas:
                best = sum(areas) if best is None else min(best, sum(areas))
    return float((sizes[:, 0] * sizes[:, 1]).sum()) / best


def test_bucket_bound_is_the_best_set_of_full_batches():
    rng = np.random.default_rng(3)
    for _ in range(5):
        sizes = rng.choice([16, 48, 64, 96], size=(30, 2))
        sizes[0] = sizes.max(0)  # the bound needs an image of the largest (h, w)
        for k in (1, 2, 3):
            bound, shapes = bench_images.bucket_bound(sizes, k)
            assert len(shapes) <= k
            assert bound == pytest.approx(_bound_reference(sizes, k))


def test_buckets_stay_within_the_bound(quick_images):
    """On the quick images the 2-D buckets' real pixels lie under the bound
    of full batches (test_grid_planners checks they are never fewer than
    the plain plan's, remainders not filled)."""
    import jaxbatch as jb

    images, _ = quick_images
    sizes = np.array([x.shape[:2] for x in images], np.int64)
    planner = jb.AutoBuckets(bench_images.BUCKET_SHAPES, token_budget=bench_images.PIXEL_BUDGET)
    plan = jb.plan(sizes, planner)
    bound, _ = bench_images.bucket_bound(sizes, bench_images.BUCKET_SHAPES)
    assert plan.stats.efficiency <= bound + 1e-12
