"""Images benchmark: a small ViT trained on real pixels of many sizes, four
ways, and L x L pair features padded per batch or in tied buckets.

Data (bench/image_data.py): crops of the images scikit-image ships,
downscaled to sizes from a stated distribution (COCO-style: 70% with the long
side at 256 px, the rest 64-240 px; camera formats 1:1 to 2:1, 30% portrait;
whole 16-px patches), labelled with their source image (24 classes).

Model: 16 x 16 patches (768 values) embedded to width 64, plus learned
patch-row and patch-column embeddings (up to 16 each), 2 pre-norm transformer
layers (2 heads, MLP 128) whose attention sees only the image's own patches
(for the jaxbatch ways jb.masked.attention_mask and segment_mean; the
baselines, resize and pad, run their own key-padding mask as an additive bias
and masked mean in plain JAX, expert_attention.py, and import nothing of
jaxbatch), a masked mean over each image's patches and a 24-way softmax
head; Adam (bench/adam.py, lr 1e-3); the loss is the mean cross entropy over
the batch's images (padding never counts).

The ways, each the same number of steps (--steps, 48 by default: 3 epochs
of pad's batches, so one compilation does not dominate; --quick: one epoch),
epoch after epoch, each epoch reshuffled, from the same initial parameters,
each batch at most 16 x 256 x 256 pixels. The two ways jaxbatch batches
load the same way: jb.plan over the image column's (h, w), then jb.collate
batch by batch in the training loop, no prefetching (nor for the baselines,
which batch in NumPy):

  resize   every image resized to 224 x 224 (skimage.transform.resize,
           bilinear, anti-aliased when shrinking, inside the timed loop),
           16 to a batch, the last batch padded with empty rows: one shape.
           An image bigger than 224 x 224 loses pixels: "pixels kept"
           counts min(h x w, 224 x 224) per image, and only those as real;
  pad      16 images to a batch, padded by hand to the batch's tallest and
           widest (jb.PadToMax's batches); jax.jit compiles once per new
           (rows, H, W);
  buckets  jb.AutoBuckets(4, token_budget=16 x 256 x 256): at most 4 shapes
           (H, W), a shape's rows at most budget // (H x W), spread evenly
           over its batches, the small shapes' last batches filling the
           larger ones' spare rows;
  patchpack
           jb.PatchPack(patch=(16, 16), row_length=384 (--pack-row),
           rows_per_batch=the budget's 4096 patches // row_length): each
           image's patches a segment of a packed row, 2-D positions: one
           shape. Attention is dense over a row, so its cost per patch grows
           with row_length; 384 is the shortest row that keeps >= 95% of the
           patches real on this distribution (256: 82%, 512: 98.6%; the
           numbers are in docs/images.md).

Each distinct input shape is compiled ahead of time and counted (as in
bench_train.py); every repetition recompiles (jax.clear_caches()). Wall time
covers batching (resizing, padding, loading), compiling and training; real
pixels per second is real (kept) pixels over wall seconds. Padded fraction
is 1 - real pixels / pixels the model is fed.

Pair features: for each pydoc paragraph (jaxbatch's embedded corpus, its
whitespace-token counts) an L x L feature; padded per batch (32 paragraphs,
shuffled, each batch padded to its longest L: B x L_max^2 elements) against
jb.AutoBuckets(4, batch_size=32) over the tied (L, L) sizes, the same rows a
batch (so about the same batches: a bucket's last one adds at most one
each): padded pair elements of each, and their ratio.

Targets (issue 30) are printed beside the measurements, never asserted.

Run: ``.venv/bin/python bench/bench_images.py [--images N] [--reps R]
[--quick] [--force]``. Writes bench/results/bench_images.json.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import adam  # noqa: E402
import expert_attention  # noqa: E402
import harness  # noqa: E402
import image_data  # noqa: E402
import transformer  # noqa: E402

WAYS = ("resize", "pad", "buckets", "patchpack")
BASELINES = ("resize", "pad")
PATCH = image_data.PATCH
GRID = image_data.CAP // PATCH  # most patches along either axis (16)
CHANNELS = 3
WIDTH, HEADS, MLP, LAYERS = 64, 2, 128, 2
CLASSES = len(image_data.SOURCES)
LEARNING_RATE = 1e-3
BATCH = 16  # images per resize / pad batch
RESIZE_TO = 224
PIXEL_BUDGET = BATCH * image_data.CAP * image_data.CAP  # pixels per batch, every way
BUCKET_SHAPES = 4
PACK_ROW = 384  # patches per packed row (--pack-row); rows per batch: pack_rows()
FULL_IMAGES = 256
# Steps per way in a full run: 3 epochs of pad-to-largest's batches, so one
# compilation (about 6 s under load) no longer dominates a way's wall time.
FULL_STEPS = 48
QUICK_IMAGES = 32
QUICK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}

PAIR_BATCH = 32
PAIR_SHAPES = 4

# The targets, checked in the printout only.
TARGET_BUCKETS_REAL, TARGET_PAD_BELOW = 0.85, 0.60
TARGET_PACK_REAL = 0.95
TARGET_PACK_SPEEDUP = 1.5
TARGET_PAIR_RATIO = 2.0


# -- batches ------------------------------------------------------------------
# Every way yields dicts: "images" [rows, H, W, 3] uint8 with "mask"
# [rows, H, W] and "labels" [rows] (-1 on padding rows), or packed
# "patches" [rows, L, 768] with "positions" [rows, L, 2], "segments" [rows, L]
# and "labels" [rows, S]; plus "index" (example ids, -1 for none), "real"
# (real pixels) and "fed" (pixels the model is fed).


def _padded(images: list[np.ndarray], rows: int, height: int, width: int) -> tuple:
    out = np.zeros((rows, height, width, CHANNELS), np.uint8)
    mask = np.zeros((rows, height, width), bool)
    for r, image in enumerate(images):
        h, w = image.shape[:2]
        out[r, :h, :w] = image
        mask[r, :h, :w] = True
    return out, mask


def _labels(labels: np.ndarray, index: np.ndarray) -> np.ndarray:
    return np.where(index >= 0, labels[np.maximum(index, 0)], -1).astype(np.int32)


def shuffled(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)


def pack_rows() -> int:
    """Packed rows per batch: the pixel budget's patches over PACK_ROW."""
    return PIXEL_BUDGET // (PATCH * PATCH) // PACK_ROW


def resize_batches(images: list[np.ndarray], labels: np.ndarray, epoch: int = 0) -> Iterator[dict]:
    """BATCH images resized to RESIZE_TO x RESIZE_TO; the last batch padded
    with empty rows, so one shape."""
    from skimage.transform import resize

    order = shuffled(len(images), epoch)
    for start in range(0, len(order), BATCH):
        ids = order[start : start + BATCH]
        out = []
        real = 0
        for i in ids:
            image = images[i]
            h, w = image.shape[:2]
            shrink = h * w > RESIZE_TO * RESIZE_TO
            r = resize(image, (RESIZE_TO, RESIZE_TO), order=1, anti_aliasing=shrink,
                       preserve_range=True)  # fmt: skip
            out.append(r.round().astype(np.uint8))
            real += min(h * w, RESIZE_TO * RESIZE_TO)
        pixels, mask = _padded(out, BATCH, RESIZE_TO, RESIZE_TO)
        index = np.full(BATCH, -1, np.int64)
        index[: len(ids)] = ids
        yield {"images": pixels, "mask": mask, "labels": _labels(labels, index), "index": index,
               "real": real, "fed": pixels.shape[0] * RESIZE_TO * RESIZE_TO}  # fmt: skip


def pad_batches(images: list[np.ndarray], labels: np.ndarray, epoch: int = 0) -> Iterator[dict]:
    """BATCH images padded to the batch's tallest and widest, by hand in
    NumPy (the last batch padded with empty rows): the batches jb.PadToMax
    plans, without jaxbatch."""
    order = shuffled(len(images), epoch)
    for start in range(0, len(order), BATCH):
        ids = order[start : start + BATCH]
        chunk = [images[i] for i in ids]
        height = max(image.shape[0] for image in chunk)
        width = max(image.shape[1] for image in chunk)
        pixels, mask = _padded(chunk, BATCH, height, width)
        index = np.full(BATCH, -1, np.int64)
        index[: len(ids)] = ids
        yield {"images": pixels, "mask": mask, "labels": _labels(labels, index), "index": index,
               "real": int(mask.sum()), "fed": mask.size}  # fmt: skip


_DATASETS: dict[int, Any] = {}


def image_dataset(images: list[np.ndarray]):
    """The images as a jaxbatch grid column ("image", axes (h, w)), built
    once per list (each epoch of each way reads the same dataset)."""
    import jaxbatch as jb

    key = id(images)
    if key not in _DATASETS or _DATASETS[key][0] is not images:
        _DATASETS[key] = (
            images,
            jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")}),
        )
    return _DATASETS[key][1]


def _grid_batch(b: dict, labels: np.ndarray) -> dict:
    index = np.asarray(b["example_index"]).reshape(-1)
    mask = np.asarray(b["image_mask"])
    return {"images": b["image"], "mask": mask, "labels": _labels(labels, index),
            "index": index, "real": int(mask.sum()), "fed": mask.size}  # fmt: skip


def bucket_batches(images: list[np.ndarray], labels: np.ndarray, epoch: int = 0) -> Iterator[dict]:
    """jb.AutoBuckets over the image column's (h, w) sizes, planned over a
    shuffled order with jb.plan and collated batch by batch with jb.collate."""
    import jaxbatch as jb

    planner = jb.AutoBuckets(BUCKET_SHAPES, token_budget=PIXEL_BUDGET)
    ds = image_dataset(images)
    for spec in jb.plan(ds, planner, order=shuffled(len(images), epoch)):
        yield _grid_batch(jb.collate(ds, spec), labels)


def patchpack_batches(
    images: list[np.ndarray], labels: np.ndarray, epoch: int = 0
) -> Iterator[dict]:
    """jb.PatchPack batches, planned over a shuffled order and collated one
    by one with jb.collate (the Loader does not cut patches yet)."""
    import jaxbatch as jb

    planner = jb.PatchPack(patch=(PATCH, PATCH), row_length=PACK_ROW, rows_per_batch=pack_rows())
    ds = image_dataset(images)
    for spec in jb.plan(ds, planner, order=shuffled(len(images), epoch)):
        b = jb.collate(ds, spec)
        index = np.asarray(b["example_index"])
        segments = np.asarray(b["image_segment_ids"])
        yield {"patches": b["image"], "positions": b["image_positions"],
               "segments": segments, "labels": _labels(labels, index), "index": index,
               "real": int(np.count_nonzero(segments)) * PATCH * PATCH,
               "fed": segments.size * PATCH * PATCH}  # fmt: skip


BATCHES: dict[str, Callable[[list[np.ndarray], np.ndarray, int], Iterator[dict]]] = {
    "resize": resize_batches,
    "pad": pad_batches,
    "buckets": bucket_batches,
    "patchpack": patchpack_batches,
}


def available(way: str) -> str | None:
    """None when this jaxbatch runs ``way`` (one epoch of two tiny images
    goes through it), else why not: a way whose API has not landed is left
    out of the table with that reason, not failed."""
    images = [
        np.zeros((PATCH, 2 * PATCH, CHANNELS), np.uint8),
        np.zeros((PATCH, PATCH, 3), np.uint8),
    ]
    try:
        for _ in BATCHES[way](images, np.zeros(2, np.int32), 0):
            pass
    except (AttributeError, TypeError, ValueError, NotImplementedError) as e:
        return f"{type(e).__name__}: {e}"
    return None


# -- the best shapes ---------------------------------------------------------


def bucket_bound(sizes: np.ndarray, max_shapes: int) -> tuple[float, list[tuple[int, int]]]:
    """The most real pixels any plan of at most ``max_shapes`` shapes (H, W)
    can reach on ``sizes`` ([n, 2] (h, w)) when every batch is full (no
    partial batch, no empty row): each image costs the area of the smallest
    shape holding it, so the best set is found by scoring every set of
    bounding-box candidates (H a height and W a width of the data) that
    includes (max h, max w), which one image at least must have (else
    ValueError). Returns (real / fed pixels, the shapes)."""
    import itertools

    points, counts = np.unique(sizes, axis=0, return_counts=True)
    top = (int(points[:, 0].max()), int(points[:, 1].max()))
    if not any((p == top).all() for p in points):
        raise ValueError(f"bucket_bound: no image is {top}, the largest height and width")
    candidates = [(int(h), int(w)) for h in np.unique(points[:, 0])
                  for w in np.unique(points[:, 1]) if (h, w) != top]  # fmt: skip
    shapes = np.array(candidates + [top], np.int64).reshape(-1, 2)
    holds = (shapes[None, :, 0] >= points[:, None, 0]) & (shapes[None, :, 1] >= points[:, None, 1])
    area = np.where(holds, shapes[:, 0] * shapes[:, 1], np.iinfo(np.int64).max)  # [points, shapes]
    best, best_set = int(area[:, -1] @ counts), (len(candidates),)
    for k in range(1, min(max_shapes, len(shapes)) - 0):
        sets = np.array(list(itertools.combinations(range(len(candidates)), k)), np.int64)
        for start in range(0, len(sets), 4096):
            chunk = sets[start : start + 4096]
            cost = np.minimum(area[:, chunk].min(2), area[:, -1:]).T @ counts  # [sets]
            j = int(cost.argmin())
            if cost[j] < best:
                best, best_set = int(cost[j]), (*chunk[j], len(candidates))
    real = int((points[:, 0] * points[:, 1]) @ counts)
    return real / best, sorted((int(shapes[j, 0]), int(shapes[j, 1])) for j in best_set)


# -- model ----------------------------------------------------------------------


def init_params(seed: int = 0) -> dict:
    import jax
    import jax.numpy as jnp

    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 4 + 4 * LAYERS))
    values = PATCH * PATCH * CHANNELS
    return {
        "layers": transformer.init_layers(keys, LAYERS, WIDTH, MLP),
        "embed": jax.random.normal(next(keys), (values, WIDTH)) / math.sqrt(values),
        "row": jax.random.normal(next(keys), (GRID, WIDTH)) * 0.02,
        "col": jax.random.normal(next(keys), (GRID, WIDTH)) * 0.02,
        "norm": jnp.ones(WIDTH),
        "head": jax.random.normal(next(keys), (WIDTH, CLASSES)) / math.sqrt(WIDTH),
    }


def _encoded(params, patches, positions, attend):
    """Patches [R, L, 768] (uint8) at ``positions`` [R, L, 2] through the
    embedding and the blocks, attending with ``attend``: [R, L, WIDTH]."""
    import jax.numpy as jnp

    x = (patches.astype(jnp.float32) / 255.0 - 0.5) @ params["embed"]
    x = x + params["row"][positions[..., 0]] + params["col"][positions[..., 1]]
    return transformer.norm(transformer.encode(params["layers"], x, attend, HEADS), params["norm"])


def _cross_entropy(params, pooled, labels):
    """(sum of cross entropies, number of images) of pooled [..., WIDTH] and
    labels [...] (-1: no image)."""
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(pooled @ params["head"], -1)
    valid = labels >= 0
    nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
    return jnp.sum(jnp.where(valid, nll, 0.0)), jnp.sum(valid)


def patch_loss(params, patches, positions, segments, labels):
    """(sum of cross entropies, number of images): ``patches`` [R, L, 768]
    (uint8 pixels, (patch row, patch column, channel) order), ``positions``
    [R, L, 2], ``segments`` [R, L] (0 = padding), ``labels`` [R, S] (the
    label of segment s + 1; -1 for none). A patch attends to its own image's
    patches only; an image's logits come from the mean of its patches
    (jaxbatch's mask, masked softmax and segment mean)."""
    import jaxbatch as jb

    allowed = jb.masked.attention_mask(segments)[:, None]  # [R, 1, L, L]
    x = _encoded(params, patches, positions, transformer.masked_attention(allowed))
    return _cross_entropy(params, jb.masked.segment_mean(x, segments, labels.shape[1]), labels)


def expert_grid_loss(params, images, mask, labels):
    """What the baselines (resize, pad) run on their padded images [B, H, W,
    3], one image a row: a key-padding mask and a masked mean over the real
    patches, in plain JAX (expert_attention.py, no jaxbatch)."""
    patches, positions, segments = patchify(images, mask)
    valid = segments != 0
    allowed = expert_attention.key_mask(valid)

    def attend(q, k, v):
        return expert_attention.attend(q, k, v, allowed)

    x = _encoded(params, patches, positions, attend)
    return _cross_entropy(params, expert_attention.masked_mean(x, valid), labels)


def patchify(images, mask):
    """Padded images [B, H, W, 3] to patch rows: (patches [B, L, 768],
    positions [B, L, 2], segments [B, L]: 1 on an image's patches)."""
    import jax.numpy as jnp

    b, height, width, c = images.shape
    gh, gw = height // PATCH, width // PATCH
    patches = images.reshape(b, gh, PATCH, gw, PATCH, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, gh * gw, PATCH * PATCH * c)
    rows, cols = jnp.meshgrid(jnp.arange(gh), jnp.arange(gw), indexing="ij")
    positions = jnp.broadcast_to(jnp.stack([rows, cols], -1).reshape(1, -1, 2), (b, gh * gw, 2))
    segments = mask[:, ::PATCH, ::PATCH].reshape(b, -1).astype(jnp.int32)
    return patches, positions, segments


def _step(loss_fn):
    def step(params, opt, *inputs):
        import jax
        import jax.numpy as jnp

        def loss(p):
            total, count = loss_fn(p, *inputs)
            return total / jnp.maximum(count, 1)

        value, grads = jax.value_and_grad(loss)(params)
        params, opt = adam.update(params, opt, grads, LEARNING_RATE)
        return params, opt, value

    return step


def grid_loss(params, images, mask, labels):
    patches, positions, segments = patchify(images, mask)
    return patch_loss(params, patches, positions, segments, labels[:, None])


grid_step = _step(grid_loss)
expert_grid_step = _step(expert_grid_loss)
packed_step = _step(patch_loss)


# -- one training run -----------------------------------------------------------


def _flops(compiled) -> float:
    """XLA's count of the floating-point operations of one compiled step."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", 0.0)) if cost else 0.0


def _epochs(way, images, labels, steps):
    """``way``'s batches, epoch after epoch (each reshuffled with its own
    seed), each tagged with its epoch: one epoch when ``steps`` is None,
    else exactly ``steps`` batches."""
    epoch = taken = 0
    while True:
        for b in BATCHES[way](images, labels, epoch):
            if steps is not None and taken == steps:
                return
            yield epoch, b
            taken += 1
        epoch += 1
        if steps is None:
            return


def train(way, images, labels, initial, compiler_options=None, steps=None) -> dict:
    """``steps`` steps of ``way`` (one epoch when None) from ``initial``
    (parameters, optimizer state)."""
    import jax

    jax.clear_caches()
    params, opt = initial
    # The baselines run their own model code (expert_grid_loss); the jaxbatch ways jaxbatch's.
    grid_fn = expert_grid_step if way in BASELINES else grid_step
    grid = transformer.ShapeCache(grid_fn, compiler_options)
    packed = transformer.ShapeCache(packed_step, compiler_options)
    real = fed = offered = done = 0
    flops = 0.0
    losses: list[Any] = []
    seen: dict[int, list[np.ndarray]] = {}
    t0 = time.perf_counter()
    for epoch, b in _epochs(way, images, labels, steps):
        if "patches" in b:
            inputs = (b["patches"], b["positions"], b["segments"], b["labels"])
            params, opt, loss = packed(params, opt, *inputs)
            flops += _flops(packed.compiled[tuple(b["patches"].shape)])
        else:
            params, opt, loss = grid(params, opt, b["images"], b["mask"], b["labels"])
            flops += _flops(grid.compiled[tuple(b["images"].shape)])
        real += b["real"]
        fed += b["fed"]
        index = np.asarray(b["index"]).ravel()
        index = index[index >= 0]
        offered += sum(images[i].shape[0] * images[i].shape[1] for i in index)
        seen.setdefault(epoch, []).append(index)
        losses.append(loss)
        done += 1
    jax.block_until_ready(params)
    wall = time.perf_counter() - t0
    for epoch, parts in seen.items():
        index = np.sort(np.concatenate(parts))
        complete = steps is None or epoch < max(seen)
        if len(np.unique(index)) != len(index) or (
            complete and not np.array_equal(index, np.arange(len(images)))
        ):
            raise AssertionError(f"{way}: epoch {epoch} did not train on every image exactly once")
    shapes = sorted([list(k) for k in grid.compiled] + [list(k) for k in packed.compiled])
    tail = [float(v) for v in losses[-max(1, done // 4) :]]
    compile_seconds = grid.seconds + packed.seconds
    return {
        "compilations": len(grid.compiled) + len(packed.compiled),
        "shapes": shapes,
        "compile_seconds": compile_seconds,
        "wall_seconds": wall,
        "steps": done,
        "epochs": len(seen),
        "real_pixels": real,
        "fed_pixels": fed,
        "image_pixels": offered,  # the pixels of the images trained on
        "padded_fraction": 1 - real / fed,
        "pixels_per_second": real / wall,
        # Without compiling: the rate a long run settles at.
        "pixels_per_step_second": real / (wall - compile_seconds),
        # XLA's flops (forward and backward) per real pixel: the work the
        # batching asks for, whatever the machine's load.
        "flops_per_real_pixel": flops / real,
        "last_quarter_loss": float(np.mean(tail)),
    }


# -- pair features ------------------------------------------------------------


def pair_lengths(quick: bool) -> np.ndarray:
    from jaxbatch._src.data.default_data import pydoc_lengths

    lengths = pydoc_lengths()
    return lengths[:400] if quick else lengths


def padded_per_batch(lengths: np.ndarray) -> dict:
    """Batches of PAIR_BATCH (shuffled), each padded to its longest L."""
    order = shuffled(len(lengths))
    padded = batches = 0
    for start in range(0, len(order), PAIR_BATCH):
        chunk = lengths[order[start : start + PAIR_BATCH]]
        padded += len(chunk) * int(chunk.max()) ** 2
        batches += 1
    real = int(np.sum(lengths.astype(np.int64) ** 2))
    return {"batches": batches, "real": real, "elements": padded, "padded": padded - real}


def tied_buckets(lengths: np.ndarray) -> dict:
    """jb.AutoBuckets(PAIR_SHAPES, batch_size=PAIR_BATCH) over the tied
    (L, L) sizes: the same rows a batch as per-batch padding, so about the
    same batch count (a bucket's last batch adds at most one each)."""
    import jaxbatch as jb

    sizes = np.stack([lengths, lengths], 1)  # tied: (L, L)
    planner = jb.AutoBuckets(PAIR_SHAPES, batch_size=PAIR_BATCH)
    plan = jb.plan(sizes, planner, order=shuffled(len(lengths)))
    if not all(s.width == s.length for s in plan.shapes):
        raise NotImplementedError("AutoBuckets plans cells, not (L, L) shapes, here")
    s = plan.stats
    real, elements = s.real_elements, s.padded_elements
    return {"batches": s.batches, "shapes": s.shapes, "real": real, "elements": elements,
            "padded": elements - real}  # fmt: skip


def pair_features(quick: bool) -> dict:
    lengths = pair_lengths(quick)
    per_batch = padded_per_batch(lengths)
    result: dict[str, Any] = {"examples": len(lengths), "padded_per_batch": per_batch}
    why = None
    try:
        tied = tied_buckets(lengths)
    except (TypeError, AttributeError, ValueError, NotImplementedError) as e:
        why = f"{type(e).__name__}: {e}"
    if why is None:
        if tied["real"] != per_batch["real"]:
            raise AssertionError(f"pair cells: {tied['real']} bucketed != {per_batch['real']}")
        result["tied_buckets"] = tied
        result["ratio"] = per_batch["padded"] / max(1, tied["padded"])
    else:
        result["not_available"] = why
    return result


# -- report -------------------------------------------------------------------


def report(runs: dict[str, list[dict]], total_pixels: int) -> str:
    rows = [("way", "compiles", "compile s", "wall s", "padded", "pixels kept", "real Mpx/s",
             "excl. compile", "kflop/px", "steps", "loss")]  # fmt: skip
    for way, rs in runs.items():
        r0 = rs[0]
        rows.append(
            (
                way,
                str(r0["compilations"]),
                harness.spread([r["compile_seconds"] for r in rs], ".1f"),
                harness.spread([r["wall_seconds"] for r in rs], ".1f"),
                f"{r0['padded_fraction']:.1%}",
                f"{r0['real_pixels'] / r0['image_pixels']:.1%}",
                harness.spread([r["pixels_per_second"] / 1e6 for r in rs], ".2f"),
                harness.spread([r["pixels_per_step_second"] / 1e6 for r in rs], ".2f"),
                f"{r0['flops_per_real_pixel'] / 1e3:.0f}",
                str(r0["steps"]),
                harness.spread([r["last_quarter_loss"] for r in rs], ".2f"),
            )
        )
    return harness.format_table(rows)


def speedup(runs: dict[str, list[dict]], way: str, over: str, key: str) -> dict[str, float]:
    """``way``'s ``key`` (a rate) over ``over``'s, repetition by repetition."""
    pairs = zip(runs[way], runs[over], strict=True)
    return harness.summary([a[key] / b[key] for a, b in pairs])


def targets(runs: dict[str, list[dict]], pairs: dict) -> list[str]:
    """Each target of issue 30 as 'measured vs target' (never asserted)."""
    lines = []

    def real(way):
        return 1 - runs[way][0]["padded_fraction"]

    def verdict(ok):
        return "met" if ok else "NOT met"

    if "buckets" in runs:
        ok = real("buckets") >= TARGET_BUCKETS_REAL and real("pad") < TARGET_PAD_BELOW
        lines.append(
            f"2-D buckets: {real('buckets'):.1%} real pixels (target >= {TARGET_BUCKETS_REAL:.0%}) "
            f"where pad-to-largest has {real('pad'):.1%} (target setting < "
            f"{TARGET_PAD_BELOW:.0%}): {verdict(ok)}"
        )
    else:
        lines.append("2-D buckets: not run (--ways) or not available: target not measured")
    if "pad" not in runs:
        return ["targets: not measured (they compare with the pad way, not run)"]
    if "patchpack" in runs:
        compiles = runs["patchpack"][0]["compilations"]
        ok = real("patchpack") >= TARGET_PACK_REAL and compiles == 1
        lines.append(
            f"patch packing: {real('patchpack'):.1%} real patches (target >= "
            f"{TARGET_PACK_REAL:.0%}), {compiles} compilation(s) (target 1): {verdict(ok)}"
        )
        for key, what in (("pixels_per_second", "wall"), ("pixels_per_step_second",
                                                            "excluding compile")):  # fmt: skip
            s = speedup(runs, "patchpack", "pad", key)
            lines.append(
                f"patch packing throughput ({what}): {s['median']:.2f}x "
                f"({s['min']:.2f}-{s['max']:.2f}) pad-to-largest's real pixels/s "
                f"(target >= {TARGET_PACK_SPEEDUP}x): {verdict(s['median'] >= TARGET_PACK_SPEEDUP)}"
            )
        work = runs["pad"][0]["flops_per_real_pixel"] / runs["patchpack"][0]["flops_per_real_pixel"]
        lines.append(
            f"patch packing work: pad-to-largest needs {work:.2f}x its XLA flops per real pixel "
            f"(row_length={PACK_ROW}): the speedup a machine could reach at equal flop rates"
        )
    if "ratio" in pairs:
        lines.append(
            f"tied L x L buckets: {pairs['ratio']:.2f}x fewer padded pair elements than per-batch "
            f"padding at {pairs['tied_buckets']['batches']} vs "
            f"{pairs['padded_per_batch']['batches']} batches (target >= {TARGET_PAIR_RATIO}x): "
            f"{verdict(pairs['ratio'] >= TARGET_PAIR_RATIO)}"
        )
    else:
        lines.append("tied L x L buckets: not available in this jaxbatch: target not measured")
    return lines


def pair_report(pairs: dict) -> str:
    per = pairs["padded_per_batch"]
    lines = [
        f"pair features: {pairs['examples']} pydoc paragraphs, {per['real']:,} real L x L cells",
        f"  padded per batch ({PAIR_BATCH}, shuffled): {per['batches']} batches, "
        f"{per['elements']:,} elements, {per['padded']:,} padded "
        f"({per['real'] / per['elements']:.1%} real)",
    ]
    if "tied_buckets" in pairs:
        t = pairs["tied_buckets"]
        lines.append(
            f"  tied buckets (AutoBuckets({PAIR_SHAPES}, batch_size={PAIR_BATCH})): "
            f"{t['batches']} batches, {t['shapes']} shapes, {t['elements']:,} elements, "
            f"{t['padded']:,} padded ({t['real'] / t['elements']:.1%} real)"
        )
    else:
        lines.append(f"  tied buckets: not available: {pairs['not_available']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global PACK_ROW
    import jax

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, help=f"training images (default {FULL_IMAGES})")
    p.add_argument(
        "--steps",
        type=int,
        help=f"training steps per way, epoch after epoch (default {FULL_STEPS}; "
        "--quick: one epoch)",
    )
    p.add_argument("--pack-row", type=int, default=PACK_ROW, help="PatchPack's row_length")
    p.add_argument("--ways", default=",".join(WAYS), help="the ways to run, comma-separated")
    harness.add_arguments(p, default_reps=5)
    args = p.parse_args(argv)
    PACK_ROW = args.pack_row  # read by patchpack_batches and pack_rows
    if args.steps is None and not args.quick:
        args.steps = FULL_STEPS
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_images: {e}")
        return 1
    reps = harness.repetitions(args)
    n = args.images or (QUICK_IMAGES if args.quick else FULL_IMAGES)
    images, labels = image_data.examples(n, seed=0)
    total = sum(x.shape[0] * x.shape[1] for x in images)
    chosen = [w for w in WAYS if w in args.ways.split(",")]
    missing = {way: why for way in chosen if (why := available(way)) is not None}
    ways = [w for w in chosen if w not in missing]
    print(
        f"bench_images: {n} images ({total / 1e6:.1f} M pixels, "
        f"{len({x.shape for x in images})} sizes) from {len(image_data.SOURCES)} scikit-image "
        f"files; {args.steps or 'one epoch of'} steps a way; {reps} alternating repetitions; "
        f"{harness.describe(env)}" + (" (--quick: timings mean nothing)" if args.quick else ""),
        flush=True,
    )
    for way, why in missing.items():
        print(f"  {way}: not available: {why}")

    params = init_params()
    initial = jax.block_until_ready((params, adam.init(params)))
    options = QUICK_COMPILER_OPTIONS if args.quick else None

    def contender(way):
        return lambda: train(way, images, labels, initial, options, args.steps)

    def progress(rep, way, r):
        print(f"  rep {rep + 1} {way}: {r['wall_seconds']:.1f} s, {r['compilations']} compiles, "
              f"{1 - r['padded_fraction']:.1%} real", flush=True)  # fmt: skip

    runs = harness.alternate({w: contender(w) for w in ways}, reps, progress)
    for way, rs in runs.items():
        if {r["real_pixels"] for r in rs} != {rs[0]["real_pixels"]}:
            raise AssertionError(f"{way}: real pixels differ between repetitions")
        if way != "resize" and rs[0]["real_pixels"] != rs[0]["image_pixels"]:
            raise AssertionError(f"{way}: {rs[0]['real_pixels']} real pixels, expected all")
    pairs = pair_features(args.quick)
    sizes = np.array([x.shape[:2] for x in images], np.int64)
    try:
        bound = bucket_bound(sizes, BUCKET_SHAPES)
    except ValueError:
        bound = None
    result = {
        "config": {
            "images": n,
            "pixels": total,
            "sizes": len({x.shape for x in images}),
            "batch": BATCH,
            "resize_to": RESIZE_TO,
            "pixel_budget": PIXEL_BUDGET,
            "bucket_shapes": BUCKET_SHAPES,
            "pack_row": PACK_ROW,
            "pack_rows": pack_rows(),
            "steps": args.steps,
            "model": f"ViT {LAYERS} layers, width {WIDTH}, {HEADS} heads, MLP {MLP}, patch {PATCH}",
            "reps": reps,
            "quick": args.quick,
        },  # fmt: skip
        "environment": env,
        "not_available": missing,
        "runs": runs,
        "summary": {
            way: {
                key: harness.summary([r[key] for r in rs])
                for key in (
                    "compile_seconds",
                    "wall_seconds",
                    "pixels_per_second",
                    "pixels_per_step_second",
                )
            }
            for way, rs in runs.items()
        },  # fmt: skip
        "pairs": pairs,
        # The most real pixels BUCKET_SHAPES shapes allow, every batch full.
        "bucket_bound": None if bound is None else {"real": bound[0], "shapes": bound[1]},
    }
    print()
    print(report(runs, total))
    print()
    print(pair_report(pairs))
    result["targets"] = targets(runs, pairs)
    if bound is not None:
        result["targets"].append(
            f"best {BUCKET_SHAPES} shapes with every batch full (no partial batch): "
            f"{bound[0]:.1%} real pixels, {bound[1]}: the most any {BUCKET_SHAPES}-shape plan of "
            "these images can reach"
        )
    print()
    for line in result["targets"]:
        print(line)
    path = harness.write_json("bench_images", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
