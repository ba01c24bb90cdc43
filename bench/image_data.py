"""Real pixels at a stated size distribution, for bench/bench_images.py.

The pixels are the photographs and scans scikit-image ships inside its
package (``skimage.data``: the ones read from a file in the installed
package; the rest need a download, which a benchmark must not do). Each
example is a crop of one of them, downscaled to a size drawn from this
distribution (COCO-style storage: a dataset keeps its images with the long
side capped, and a photo's aspect ratio is its camera's format):

- long side: ``CAP`` (256 px) for ``CAP_SHARE`` (70%) of the images (stored
  at the cap); the rest uniform over whole patches from 64 to 240 px
  (images that were smaller than the cap);
- format (long : short): 1:1 20%, 4:3 35%, 3:2 25%, 16:9 15%, 2:1 5%;
  portrait (taller than wide) with probability 30%;
- short side: long / format, rounded to whole patches (``PATCH`` = 16 px),
  at least 2 patches;
- never upscaled: a size bigger than its source (in either axis) is scaled
  down to fit, keeping the format, in whole patches.

Sizes are whole patches so every way (resize, padding, 2-D buckets, patch
packing) sees the same patches; a real pipeline crops to whole patches the
same way. The crop: the largest window of the source with the example's
aspect ratio, scaled by a factor uniform in [0.6, 1], at a uniform position,
then downscaled (Lanczos) to the example's size. The label is the
source image's index (a 24-way classification). Everything is seeded.

Example::

    images, labels = image_data.examples(384, seed=0)  # [h, w, 3] uint8 each
"""

from __future__ import annotations

import numpy as np

PATCH = 16
CAP = 256  # long side of the images stored at the cap (px)
CAP_SHARE = 0.7
MIN_LONG = 64  # smallest long side of the images below the cap (px)
FORMATS = ((1.0, 0.20), (4 / 3, 0.35), (3 / 2, 0.25), (16 / 9, 0.15), (2.0, 0.05))
PORTRAIT_SHARE = 0.3
CROP_SCALE = (0.6, 1.0)

# The skimage.data images read from a file inside the installed package (as
# of scikit-image 0.26; checked by sources()). Left out: cat (the same file
# as chelsea), binary_blobs (generated, not a photograph), lfw_subset (25 x 25
# faces) and the images that need a download (brain, cells3d, eagle, ...).
SOURCES = (
    "astronaut",
    "brick",
    "camera",
    "cell",
    "checkerboard",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "colorwheel",
    "grass",
    "gravel",
    "horse",
    "hubble_deep_field",
    "immunohistochemistry",
    "logo",
    "microaneurysms",
    "moon",
    "page",
    "retina",
    "rocket",
    "shepp_logan_phantom",
    "stereo_motorcycle",
    "text",
)


def _rgb(image: np.ndarray) -> np.ndarray:
    """Any skimage.data image as [h, w, 3] uint8: gray repeated, alpha
    dropped, booleans and floats in [0, 1] scaled to 0..255."""
    if image.dtype == bool:
        image = image.astype(np.uint8) * 255
    elif image.dtype != np.uint8:
        image = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


def sources() -> list[np.ndarray]:
    """The SOURCES images as [h, w, 3] uint8, read from scikit-image's own
    files. Raises ImportError naming the package when it is missing."""
    try:
        import skimage.data
    except ImportError as e:
        raise ImportError(
            "bench/image_data.py reads the images scikit-image ships: "
            "pip install scikit-image (requirements-dev.txt pins it)"
        ) from e
    out = []
    for name in SOURCES:
        image = getattr(skimage.data, name)()
        if isinstance(image, tuple):  # stereo_motorcycle: (left, right, disparity)
            image = image[0]
        out.append(_rgb(image))
    return out


def draw_sizes(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` (h, w) sizes in pixels, int64 [n, 2], from the distribution in
    the module's docstring (before fitting them to a source)."""
    ratios = np.array([r for r, _ in FORMATS])
    weights = np.array([w for _, w in FORMATS])
    fmt = rng.choice(ratios, n, p=weights / weights.sum())
    below = rng.integers(MIN_LONG // PATCH, CAP // PATCH, n) * PATCH  # 64 .. 240
    long = np.where(rng.random(n) < CAP_SHARE, CAP, below)
    short = np.maximum(2, np.round(long / fmt / PATCH)).astype(np.int64) * PATCH
    portrait = rng.random(n) < PORTRAIT_SHARE
    return np.stack([np.where(portrait, long, short), np.where(portrait, short, long)], 1)


def fit(size: np.ndarray, source_shape: tuple[int, ...]) -> tuple[int, int]:
    """``size`` (h, w) scaled down, keeping its aspect ratio, until it fits
    the source, in whole patches (at least one)."""
    h, w = int(size[0]), int(size[1])
    scale = min(1.0, source_shape[0] / h, source_shape[1] / w)
    if scale == 1.0:
        return h, w
    return (
        max(PATCH, int(h * scale) // PATCH * PATCH),
        max(PATCH, int(w * scale) // PATCH * PATCH),
    )


def crop_and_downscale(
    source: np.ndarray, size: tuple[int, int], rng: np.random.Generator
) -> np.ndarray:
    """A window of ``source`` with the aspect ratio of ``size`` (the largest
    one times a factor in CROP_SCALE, at a uniform position), downscaled
    with Lanczos filtering (Pillow's, which scikit-image requires; for 384
    images 2.5 s against 14 s for skimage.transform.resize's Gaussian
    anti-aliasing, both measured under load) to ``size``: [h, w, 3] uint8."""
    from PIL import Image

    h, w = size
    sh, sw = source.shape[:2]
    largest = min(sh / h, sw / w)  # window = size x this factor
    factor = max(1.0, largest * rng.uniform(*CROP_SCALE))  # never smaller than size
    ch, cw = min(sh, round(h * factor)), min(sw, round(w * factor))
    y, x = rng.integers(0, sh - ch + 1), rng.integers(0, sw - cw + 1)
    window = source[y : y + ch, x : x + cw]
    if (ch, cw) == (h, w):
        return np.ascontiguousarray(window)
    out = Image.fromarray(np.ascontiguousarray(window)).resize((w, h), Image.Resampling.LANCZOS)
    return np.asarray(out)


def examples(n: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """``n`` images ([h, w, 3] uint8, h and w multiples of PATCH) and their
    labels (the index of the source image, int32), seeded."""
    rng = np.random.default_rng(seed)
    images = sources()
    sizes = draw_sizes(n, rng)
    labels = rng.integers(0, len(images), n).astype(np.int32)
    out = []
    for size, label in zip(sizes, labels, strict=True):
        source = images[label]
        out.append(crop_and_downscale(source, fit(size, source.shape), rng))
    return out, labels
