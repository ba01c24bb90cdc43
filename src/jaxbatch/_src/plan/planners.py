"""Planner descriptions: small frozen value types over the engine's planner
options.

The engine keeps every rule: each field's default is read from the core's
options type, a planner validates itself when it is built (``__post_init__``
asks the engine, so ``jb.PadToMax(batch_size=0)`` fails on the line that
wrote it, with the engine's message), and its key, what loader states and job
journals store, is the engine's text (``PlannerKey``). Python checks only
what the engine cannot see: that a count is a Python integer, a choice a
string, boundaries a sequence.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypedDict

import numpy as np

from jaxbatch import _core
from jaxbatch._src.plan.graph_fit import DEFAULT_MULTIPLE, DEFAULT_SEED, fit_planner

Remainder = Literal["pad", "keep", "drop"]
TooLong = Literal["error", "truncate", "skip", "split"]
Algorithm = Literal["first_fit", "best_fit", "concat_then_split"]
GraphAlgorithm = Literal["next_fit", "first_fit", "best_fit"]
TooBig = Literal["error", "skip"]
PartialPatches = Literal["error", "pad"]
PatchAlgorithm = Literal["first_fit", "best_fit"]

_INT64 = (-(2**63), 2**63 - 1)


def _default(options_type, field: str):
    """The engine's default of an option, as the Python field holds it."""
    return _to_python(getattr(options_type(), field))


def _to_python(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list):
        return tuple(value)
    return value


def _to_core(planner: str, option: str, value: Any, current: Any) -> Any:
    """A Python field's value as the core option `current` holds it."""
    if isinstance(current, enum.Enum):
        members = type(current).__members__
        if not isinstance(value, str) or value not in members:
            allowed = ", ".join(repr(m) for m in members)
            raise ValueError(f"{planner}: {option} must be one of {allowed}, found {value!r}")
        return members[value]
    if isinstance(current, list):
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
            raise ValueError(f"{planner}: {option} must be a sequence of integers, found {value!r}")
        return [_integer(planner, f"{option}[{k}]", v) for k, v in enumerate(value)]
    if value is None and current is None:  # An option the planner may go without.
        return None
    if option == "row_length" and isinstance(value, Sequence | np.ndarray):
        if not isinstance(value, str | bytes):  # Pack's few row lengths for one column
            return [_integer(planner, f"{option}[{k}]", v) for k, v in enumerate(value)]
    if isinstance(value, Mapping):  # Pack's row_length, one per feature
        return {
            _feature(planner, option, k): _integer(planner, f"{option}[{k!r}]", v)
            for k, v in value.items()
        }
    return _integer(planner, option, value)


def _feature(planner: str, option: str, name: Any) -> str:
    if not isinstance(name, str):
        raise ValueError(
            f"{planner}: {option} must map column names (str) to integers, found key {name!r}"
        )
    return name


def _integer(planner: str, option: str, value: Any) -> int:
    try:
        ok = not isinstance(value, bool) and int(value) == value
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok or not _INT64[0] <= int(value) <= _INT64[1]:
        raise ValueError(
            f"{planner}: {option} must be a positive integer, found {value!r} (at most 2**63 - 1)"
        )
    return int(value)


class _Planner:
    """What the planners share: their fields are the core options'."""

    _core_type: ClassVar[Any]

    def __post_init__(self) -> None:
        _core.validate_planner(self._options())

    def _options(self):
        """The core's options (each field converted, not yet validated)."""
        o = self._core_type()
        name = type(self).__name__
        for f in dataclasses.fields(self):
            setattr(o, f.name, _to_core(name, f.name, self._core_field(f.name), getattr(o, f.name)))
        return o

    def _core_field(self, name: str) -> Any:
        """A field's value in the engine's layout (before conversion)."""
        return getattr(self, name)

    @classmethod
    def _python_field(cls, name: str, value: Any) -> Any:
        """A core option's value as the field holds it (_core_field's inverse)."""
        return value

    @classmethod
    def _from_options(cls, options) -> Planner:
        return cls(
            **{
                f.name: cls._python_field(f.name, _to_python(getattr(options, f.name)))
                for f in dataclasses.fields(cls)
            }
        )

    @property
    def key(self) -> str:
        """The engine's canonical text of this planner (what states and journals store)."""
        return _core.planner_key(self._options())


_PAD, _FIXED, _AUTO, _PACK, _GRAPH, _GRAPH_BUCKETS = (
    _core.PadToMaxOptions,
    _core.FixedBucketsOptions,
    _core.AutoBucketsOptions,
    _core.PackOptions,
    _core.GraphBudgetOptions,
    _core.GraphBucketsOptions,
)
_PATCH = _core.PatchPackOptions
_ASPECT = _core.AspectBucketsOptions
# The fits' defaults for the planners' other options: the engine's.
_BUDGET_ALGORITHM, _BUDGET_TOO_BIG = _default(_GRAPH, "algorithm"), _default(_GRAPH, "too_big")
_BUCKETS_ALGORITHM = _default(_GRAPH_BUCKETS, "algorithm")
_BUCKETS_TOO_BIG = _default(_GRAPH_BUCKETS, "too_big")


@dataclasses.dataclass(frozen=True)
class PadToMax(_Planner):
    """Consecutive batches of ``batch_size``, each padded to its longest
    example rounded up to ``pad_to_multiple``: the usual hand-written baseline.
    Every distinct padded length is one more compilation. ``batch_size``
    must be a multiple of ``rows_multiple`` (for a kept remainder the last
    batch's rows are rounded up to it).

    Over grid sizes (images ``[h, w, ...]``, pair features ``[L, L, ...]``)
    each axis pads to the batch's largest, both rounded up to
    ``pad_to_multiple``: a batch of ``(rows, H, W)``."""

    batch_size: int
    pad_to_multiple: int = _default(_PAD, "pad_to_multiple")
    remainder: Remainder = _default(_PAD, "remainder")
    rows_multiple: int = _default(_PAD, "rows_multiple")
    _core_type: ClassVar[Any] = _PAD


@dataclasses.dataclass(frozen=True)
class FixedBuckets(_Planner):
    """tf.data's ``bucket_by_sequence_length``: an example of length ``l`` goes
    to the first boundary ``>= l`` and is padded to it. Give ``batch_size``
    rows per batch, or ``token_budget`` elements per batch (a bucket of length
    ``L`` gets at most ``token_budget // L`` rows), or both (the smaller
    wins). A budget's rows are spread evenly over the batches a bucket needs
    (with ``remainder="pad"``: ``R`` examples under ``M`` rows a batch come
    ``ceil(R / ceil(R / M))`` a batch, one shape still), so its last batch
    is not mostly padding; ``batch_size`` alone is kept as given.
    ``rows_multiple`` makes every batch's row count a multiple of it: set
    ``jax.local_device_count()`` so each process's batch splits evenly over
    its devices (:func:`jaxbatch.global_batches`). A token budget's rows are
    rounded down to it, a kept remainder's rows up.

    Or give each bucket its own rows with ``batch_sizes`` (tf.data's
    ``bucket_batch_sizes``), instead of ``batch_size`` and ``token_budget``:
    bucket ``k`` holds the lengths in ``(boundaries[k-1], boundaries[k]]``
    and the last boundary closes the last bucket (a longer example follows
    ``too_long``), so there is one batch size per boundary,
    ``len(batch_sizes) == len(boundaries)``, where tf.data's open-ended last
    bucket makes it ``len(bucket_boundaries) + 1``. Each must be a multiple
    of ``rows_multiple``.

    An example longer than the last boundary follows ``too_long``:
    ``"error"`` (the default), ``"truncate"``, ``"skip"``, or ``"split"``,
    which cuts it into pieces of the last boundary's length (the last piece
    shorter, padded into the first bucket that holds it), every token in
    exactly one row. ``example_index`` names each row's example and
    ``example_piece`` which piece; :func:`jaxbatch.unbatch` keys a split
    batch's results by ``(example, piece)`` and :func:`jaxbatch.join_pieces`
    joins them. Every ragged column must share the length column's lengths,
    and ``remainder="drop"`` is refused (it would drop part of an example).
    :class:`AutoBuckets` has no ``too_long``: its buckets always cover the
    longest example."""

    boundaries: Sequence[int]
    batch_size: int | None = None
    token_budget: int | None = None
    remainder: Remainder = _default(_FIXED, "remainder")
    too_long: TooLong = _default(_FIXED, "too_long")
    rows_multiple: int = _default(_FIXED, "rows_multiple")
    batch_sizes: Sequence[int] = _default(_FIXED, "batch_sizes")
    _core_type: ClassVar[Any] = _FIXED


@dataclasses.dataclass(frozen=True)
class AutoBuckets(_Planner):
    """Chooses the bucket boundaries that minimise total padded elements with
    at most ``max_shapes`` distinct batch shapes (so at most that many
    compilations): dynamic programming over the length histogram, exact for
    ``remainder="keep"`` and ``"drop"``. With ``"pad"`` (the default) the
    empty rows of each bucket's last batch take the longest examples of the
    shorter buckets (they were padded anyway), so only the shortest bucket
    pads a remainder, and a bucket whose longest examples moved up pads to
    the longest left; the boundaries are the best of the exact optima with
    and without empty rows counted, within 2% of the exact optimum of whole
    batches on molecule-size data (measured, tests/test_plan.py).
    With ``token_budget`` each bucket of length ``L`` gets at most
    ``token_budget // L`` rows, so short sequences get big batches, spread
    evenly over the batches the bucket needs (as :class:`FixedBuckets`).
    ``rows_multiple`` makes every batch's row count a multiple of it: set
    ``jax.local_device_count()`` so each process's batch splits evenly over
    its devices (:func:`jaxbatch.global_batches`). A token budget's rows are
    rounded down to it, a kept remainder's rows up.

    Over grid sizes (images ``[h, w, ...]``, pair features ``[L, L, ...]``)
    it chooses at most ``max_shapes`` shapes ``(H, W)`` from the joint
    ``(h, w)`` histogram, minimising padded cells: each example goes to the
    smallest-area shape that holds it, a shape gets ``batch_size`` rows
    and/or ``token_budget // (H * W)`` (so ``token_budget`` counts cells per
    batch), and each shape is cut to the bounding box of its examples.
    Exact (every set of shapes scored) when the distinct sizes are few (up
    to ~30 bounding-box candidates at 4 shapes); otherwise each axis is
    first reduced to 32 values by the 1-D optimum over its marginal, and
    shapes are added greedily and improved by single swaps, and the better
    of that and an exhaustive search over a coarser grid is kept: within
    5% of the exhaustive optimum on the histograms of
    tests/test_grid_planners.py (worst measured 3.1%). Square
    data (every ``h == w``, tied axes) gets square shapes. The empty rows
    of a shape's last batch are not filled from other shapes (the 1-D
    planner's ``remainder="pad"`` filling)."""

    max_shapes: int
    token_budget: int | None = None
    batch_size: int | None = None
    pad_to_multiple: int = _default(_AUTO, "pad_to_multiple")
    remainder: Remainder = _default(_AUTO, "remainder")
    rows_multiple: int = _default(_AUTO, "rows_multiple")
    _core_type: ClassVar[Any] = _AUTO


@dataclasses.dataclass(frozen=True)
class Pack(_Planner):
    """Sequence packing: several examples per row of ``row_length``, marked by
    segment ids and positions. ``algorithm="best_fit"`` is best-fit decreasing
    (longest first, into the fullest row that fits), ``"first_fit"`` keeps
    input order. Rows stay open for ``lookahead`` examples (None: all). Or
    stream with ``open_rows``: at most that many rows open at once, examples
    in input order (best fit is then online, without sorting), and when an
    example fits no open row the fullest closes, so rows never close all at
    once at a window's end (Grain's ``num_packing_bins`` flush every bin).
    ``max_segments_per_row`` sizes the per-segment outputs
    (``example_index``, ``<column>_lengths``: ``[rows, S]``); by default S
    is the most examples a row can hold (the smallest lengths that fit one
    row), rounded up to a power of two: it depends on the lengths only, so
    every epoch and host gets the same shape. An example longer than
    ``row_length`` follows ``too_long``: ``"split"`` cuts it into pieces of
    ``row_length`` (the last shorter), each packed as a segment of its own
    with positions from 0, so every token is trained on; ``example_index``
    names each piece's example and ``example_piece`` which piece (0, 1, ...;
    -1 padding), and :func:`jaxbatch.unbatch` keys a split batch's results by
    ``(example, piece)`` (:func:`jaxbatch.join_pieces` joins them). Pieces
    are what the packer sees: ``lookahead`` counts pieces. ``split`` is for
    ``Pack`` only and refuses ``remainder="drop"`` (it would drop part of an
    example), and ``jb.map``/``jb.run``, whose results are per example,
    refuse it. ``rows_per_batch`` must be a
    multiple of ``rows_multiple`` (for a kept remainder the last batch's rows
    are rounded up to it).

    ``algorithm="concat_then_split"`` is Grain's ``ConcatThenSplitIterDataset``
    (with ``split_full_length_features=True``): the examples, in the loader's
    (shuffled, sharded) order, are concatenated and cut at row ends, so every
    row is full but the last; each piece is a segment with positions from 0,
    keyed by ``example_index`` and ``example_piece`` as for ``"split"``. Every
    long example is cut, so ``too_long`` does not apply (only its default or
    ``"split"`` is accepted); ``lookahead``, ``open_rows`` and
    ``remainder="drop"`` are refused. ``max_segments_per_row`` closes a row
    early once it holds that many segments; by default it is the most any
    order of the lengths can put in a row, so no row closes early.

    Several features, each its own row length (a T5-style encoder-decoder):
    ``row_length={"inputs": 512, "targets": 128}`` packs those ragged
    columns jointly. An example enters a row only if every feature fits its
    own row length; each feature gets its own ``<name>_segment_ids`` and
    ``<name>_positions`` (``[rows, 512]``, ``[rows, 128]``), and example k of
    a row is segment k in every feature (an example empty in a feature still
    takes its segment there, of length 0). ``too_long="truncate"`` cuts each
    feature to its own row length (seqio's ``trim_and_pack``);
    ``max_segments_per_row`` is Grain's ``max_sequences_per_bin``; best fit
    picks, as Grain's does, the fitting row with the least room summed over
    the features (and without ``open_rows`` takes the examples by their
    total length, longest first). A ragged column not named follows the
    feature it is declared aligned with, and is refused otherwise.
    ``too_long="split"`` and ``"concat_then_split"`` are refused with
    several features: each feature would be cut at its own row ends, so the
    pieces would not pair up across features; and so are ``jb.map`` and
    ``jb.run``, whose per-example results follow one row length (iterate
    the Loader).

    A few row lengths for one column (short texts in short rows, so
    attention pays less): ``row_length=[96, 256]``, strictly increasing. Each
    example (under ``too_long="split"`` each piece, cut at the largest) packs
    into rows of the smallest row length that holds it, each group with the
    chosen algorithm; ``too_long`` applies past the largest. Give
    ``token_budget`` instead of ``rows_per_batch`` (one or the other) and
    rows of length ``L`` come at most ``token_budget // L`` to a batch
    (rounded down to ``rows_multiple``), so every batch holds at most
    ``token_budget`` tokens; it works with one row length too. With
    ``remainder="pad"`` and best fit (no ``lookahead``, no ``open_rows``)
    each row length's rows are spread evenly over the batches it needs
    (``R`` rows under ``M`` a batch: ``ceil(R / ceil(R / M))``), so the last
    batch is not mostly empty; a packing that follows the order keeps the
    budget's rows, since its row count, and so the shape, would change with
    a shuffle. One shape per row length
    (``loader.shapes`` lists them); with ``remainder="pad"`` the empty rows
    of a row length's last batch take the last rows of the shorter ones,
    re-packed, where they all fit, so small data does not pad a partial
    batch per row length. Batches of the row lengths are interleaved in the
    loader's (shuffled) order. ``concat_then_split`` and several features
    take one row length per column and no ``token_budget``.

    Or let the planner choose: ``row_length=256, max_shapes=2`` picks at
    most two row lengths, 256 the largest, from all the lengths (never their
    order, so every epoch and shard agrees), minimising an estimate of the
    work: a group's tokens fill whole rows of its length, and every slot of
    a row costs its token plus attention linear in the row length,
    ``attention_percent`` (default 34, attention's measured share of a
    packed 256-token batch's time in float32 on CPU) of a row of
    ``row_length``'s time. Exact dynamic programming over the length
    histogram, as :class:`AutoBuckets` chooses boundaries;
    ``jb.plan(...).shapes`` shows the choice."""

    row_length: int | Sequence[int] | Mapping[str, int]
    rows_per_batch: int | None = None
    max_segments_per_row: int | None = None
    algorithm: Algorithm = _default(_PACK, "algorithm")
    lookahead: int | None = None
    too_long: TooLong = _default(_PACK, "too_long")
    remainder: Remainder = _default(_PACK, "remainder")
    rows_multiple: int = _default(_PACK, "rows_multiple")
    open_rows: int | None = None
    token_budget: int | None = None
    max_shapes: int | None = None
    attention_percent: int = _default(_PACK, "attention_percent")
    _core_type: ClassVar[Any] = _PACK


@dataclasses.dataclass(frozen=True)
class GraphBudget(_Planner):
    """Graphs (``jb.Dataset.from_graphs``) into batches of exactly ``nodes``
    node slots, ``edges`` edge slots and ``graphs`` graph slots, padded the
    way ``jraph.pad_with_graphs`` pads: one padding graph holds every padding
    node and edge, so a batch holds at most ``nodes - 1`` real nodes,
    ``edges`` real edges and ``graphs - 1`` real graphs. One shape, so one
    compilation.

    ``algorithm="next_fit"`` fills one batch at a time, exactly
    ``jraph.dynamically_batch``; ``"first_fit"`` keeps up to
    ``open_batches`` batches open (default 8), each graph in order into the
    first it fits; ``"best_fit"`` (the default) plans ``open_batches``
    batches at a time: the longest run of the next graphs that fits their
    budget, spread over them largest first so every batch fills in nodes,
    edges and graphs alike (within a few percent of the fewest batches
    possible on molecules; each batch still a random mix). A graph larger
    than the budget is a ValueError naming it when the batches are planned
    (``too_big="skip"``: left out and counted in ``plan.stats.skipped``),
    never an abort half-way through an epoch."""

    nodes: int
    edges: int
    graphs: int
    algorithm: GraphAlgorithm = _default(_GRAPH, "algorithm")
    open_batches: int | None = None
    too_big: TooBig = _default(_GRAPH, "too_big")
    _core_type: ClassVar[Any] = _GRAPH

    @classmethod
    def fit(
        cls,
        data: Any,
        graphs: int,
        *,
        multiple: int = DEFAULT_MULTIPLE,
        algorithm: GraphAlgorithm = _BUDGET_ALGORITHM,
        open_batches: int | None = None,
        too_big: TooBig = _BUDGET_TOO_BIG,
        seed: int = DEFAULT_SEED,
        order: Any = None,
    ) -> GraphBudget:
        """The budget for ``graphs`` graph slots a batch, fitted to a graph
        Dataset: node and edge slots in the data's node:edge ratio, holding
        its largest graph, rounded up to ``multiple``, and chosen by
        planning the graphs (with this ``algorithm`` and ``open_batches``,
        in a few seeded shuffles, as a shuffling Loader plans them) to
        maximise real nodes and edges over their slots times how full of
        graphs the batches are (real graphs over ``graphs - 1`` a batch):
        neither padding nor steps are badly wasted. ``order`` (graph ids)
        plans the candidates on those graphs in that order instead.
        Docs: docs/graphs.md, "Choosing a budget from the data".

        Example::

            planner = jb.GraphBudget.fit(ds, graphs=32, multiple=8)
        """
        options = {"algorithm": algorithm, "open_batches": open_batches, "too_big": too_big}
        return _fit(cls, _core.fit_graph_budget, data, graphs, multiple, seed, order, options)


@dataclasses.dataclass(frozen=True)
class GraphBuckets(_Planner):
    """:class:`GraphBudget`'s batches, each given the smallest of at most
    ``max_shapes`` (nodes, edges, graphs) shapes that holds it: so at most
    ``max_shapes`` compilations, and a batch that is not full (an epoch's
    remainder, a few large graphs) pads less. The shapes are chosen once
    from all the graphs, minimising padded nodes plus edges; the full budget
    is always one of them, so no batch pads more than under GraphBudget, and
    a shuffle or a shard never changes them."""

    max_shapes: int
    nodes: int
    edges: int
    graphs: int
    algorithm: GraphAlgorithm = _default(_GRAPH_BUCKETS, "algorithm")
    open_batches: int | None = None
    too_big: TooBig = _default(_GRAPH_BUCKETS, "too_big")
    _core_type: ClassVar[Any] = _GRAPH_BUCKETS

    @classmethod
    def fit(
        cls,
        data: Any,
        graphs: int,
        *,
        max_shapes: int,
        multiple: int = DEFAULT_MULTIPLE,
        algorithm: GraphAlgorithm = _BUCKETS_ALGORITHM,
        open_batches: int | None = None,
        too_big: TooBig = _BUCKETS_TOO_BIG,
        seed: int = DEFAULT_SEED,
        order: Any = None,
    ) -> GraphBuckets:
        """:meth:`GraphBudget.fit` for GraphBuckets: the largest shape's
        budget fitted by planning with ``max_shapes`` shapes, so the smaller
        shapes' savings count in the choice.

        Example::

            planner = jb.GraphBuckets.fit(ds, graphs=32, max_shapes=4, multiple=8)
        """
        options = {
            "max_shapes": max_shapes,
            "algorithm": algorithm,
            "open_batches": open_batches,
            "too_big": too_big,
        }
        return _fit(cls, _core.fit_graph_buckets, data, graphs, multiple, seed, order, options)


@dataclasses.dataclass(frozen=True)
class PatchPack(_Planner):
    """NaViT's patch packing ("Patch n' Pack"): images of any size, each cut
    into ``patch`` = (height, width) pixel patches in C++, an image's
    patches one segment of a row of ``row_length`` patches, rows packed from
    the patch counts by :class:`Pack`'s first or best fit, so one
    compilation whatever the sizes. Plans an image column (a Dataset with
    ``axes={"image": ("h", "w")}``) or ``[n, 2]`` (height, width) sizes.

    A batch of column ``k`` holds ``k`` ``[rows, L, ph * pw * C]`` (each
    patch flattened as ``[ph, pw, C]``), ``k_segment_ids`` ``[rows, L]`` (1..
    per image, 0 padding: :func:`jaxbatch.masked.attention_mask` and
    ``segment_mean`` work per image), ``k_positions`` ``[rows, L, 2]``
    (patch row, patch column in its image), ``k_pixels`` ``[rows, L]`` (real
    pixels a patch holds), ``k_patches`` ``[rows, S]`` (patches per image)
    and ``example_index`` ``[rows, S]``. Give ``rows_per_batch`` or
    ``token_budget`` (patches per batch: at most ``token_budget //
    row_length`` rows, spread evenly over the batches as :class:`Pack`
    spreads them).

    jaxbatch never resizes. A side that is not a multiple of the patch is a
    ValueError naming the image (``partial_patches="error"``, the default)
    or, with ``"pad"``, its last patch row and column are padded with the
    pad value and ``k_pixels`` counts the real pixels. An image of more
    patches than a row follows ``too_long``: ``"error"`` (default),
    ``"skip"`` (counted in ``plan.stats.skipped``) or ``"split"`` into runs
    of whole patch rows (``row_length // patch columns`` rows a piece, each
    a segment, ``example_piece`` says which); ``"truncate"`` is refused.
    ``drop_percent`` is NaViT's random patch dropping: an image of ``n``
    patches keeps ``n - n * drop_percent // 100`` (at least one), which
    ones drawn from (``drop_seed``, epoch, image), so a batch collated again
    for the same epoch (a restored loader's) has the same patches."""

    row_length: int
    patch: Sequence[int] = _default(_PATCH, "patch")
    rows_per_batch: int | None = None
    token_budget: int | None = None
    max_segments_per_row: int | None = None
    algorithm: PatchAlgorithm = _default(_PATCH, "algorithm")
    lookahead: int | None = None
    open_rows: int | None = None
    too_long: TooLong = _default(_PATCH, "too_long")
    partial_patches: PartialPatches = _default(_PATCH, "partial_patches")
    drop_percent: int = _default(_PATCH, "drop_percent")
    drop_seed: int = _default(_PATCH, "drop_seed")
    remainder: Remainder = _default(_PATCH, "remainder")
    rows_multiple: int = _default(_PATCH, "rows_multiple")
    _core_type: ClassVar[Any] = _PATCH


@dataclasses.dataclass(frozen=True)
class AspectBuckets(_Planner):
    """Aspect-ratio buckets of a fixed area, for images you resize (the
    buckets of diffusion training scripts, such as kohya-ss sd-scripts'):
    every bucket is a resolution ``(H, W)``, both multiples of ``multiple``,
    ``H * W <= area``, for each width the tallest such height (and the
    transposes). The buckets are those nearest the given ``ratios``
    (``(width, height)`` pairs, as in 4:3), or at most ``max_shapes`` chosen
    from the data: the set minimising the summed ``|log(w/h) - log(W/H)|``
    of every example to its nearest bucket, exact (dynamic programming over
    the resolutions between the data's least and greatest ratio).

    Each example goes to the bucket nearest its aspect ratio (a tie: the
    taller) and is to be resized to it: ``jb.plan(sizes, planner).resize_to``
    gives each example's ``(H, W)`` target, and each batch holds one
    bucket's examples at exactly its resolution, ``batch_size`` rows and/or
    ``token_budget // (H * W)`` (pixels per batch; at least ``area``),
    rounded down to ``rows_multiple``, a budget's rows spread evenly over a
    bucket's batches (as :class:`FixedBuckets`). jaxbatch never resizes: collating an
    example that is not at its target is a ValueError naming it, its size
    and the target, and a Loader refuses data not at its buckets (plan the
    original sizes, resize, then load the resized images with the same
    planner: their targets are their sizes)."""

    area: int
    multiple: int = _default(_ASPECT, "multiple")
    ratios: Sequence[tuple[int, int]] = ()
    max_shapes: int | None = None
    batch_size: int | None = None
    token_budget: int | None = None
    remainder: Remainder = _default(_ASPECT, "remainder")
    rows_multiple: int = _default(_ASPECT, "rows_multiple")
    _core_type: ClassVar[Any] = _ASPECT

    def _core_field(self, name: str) -> Any:
        if name != "ratios":
            return getattr(self, name)
        if isinstance(self.ratios, str | bytes) or not isinstance(self.ratios, Sequence):
            raise ValueError(
                f"AspectBuckets: ratios must be (width, height) pairs, found {self.ratios!r}"
            )
        flat = []
        for k, pair in enumerate(self.ratios):
            if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise ValueError(
                    f"AspectBuckets: ratios[{k}] must be a (width, height) pair, found {pair!r}"
                )
            flat += [pair[0], pair[1]]
        return flat

    @classmethod
    def _python_field(cls, name: str, value: Any) -> Any:
        if name != "ratios":
            return value
        return tuple(zip(value[::2], value[1::2], strict=True))


def _fit(cls, fit_core, data, graphs, multiple, seed, order, options) -> Any:
    """GraphBudget.fit / GraphBuckets.fit: the arguments as the engine takes
    them (checked as the planner's own fields are), the planner it fits."""
    who = f"{cls.__name__}.fit"
    planner = cls._core_type()
    for name, value in options.items():
        setattr(planner, name, _to_core(cls.__name__, name, value, getattr(planner, name)))
    graphs, multiple, seed = (_integer(who, k, v) for k, v in [
        ("graphs", graphs), ("multiple", multiple), ("seed", seed)])  # fmt: skip
    fitted = fit_planner(who, fit_core, data, graphs, multiple, seed, order, planner)
    return cls._from_options(fitted)


#: Any planner: what jb.plan, jb.Loader, jb.map and jb.run take (``jb.Planner``
#: in annotations; a list of mixed planners is otherwise typed by their
#: private base, which no function takes).
Planner = PadToMax | FixedBuckets | AutoBuckets | Pack | GraphBudget | GraphBuckets | AspectBuckets


class GraphBudgetKwargs(TypedDict):
    """A graph budget to pass as keywords, ``jb.GraphBudget(**budget)`` or
    ``jb.GraphBuckets(3, **budget)``: typed, so a checker knows no value
    lands on ``algorithm`` or ``too_big`` (a plain dict of ints could)."""

    nodes: int
    edges: int
    graphs: int


PLANNERS = (PadToMax, FixedBuckets, AutoBuckets, Pack, GraphBudget, GraphBuckets, AspectBuckets)
GRAPH_PLANNERS = (GraphBudget, GraphBuckets)


def refuse_split(planner: Planner | PatchPack | None, who: str) -> None:
    """Raises for a planner that yields pieces of examples (the engine says
    which: Pack's ``too_long="split"`` or ``algorithm="concat_then_split"``,
    FixedBuckets' ``too_long="split"``) where results are per example."""
    if planner is None or not _core.planner_yields_pieces(planner._options()):
        return
    if isinstance(planner, PatchPack):
        raise ValueError(
            f"{who}: PatchPack(too_long='split') cuts an image into pieces, but {who}'s results "
            "are per image; iterate jb.Loader(ds, planner) and pool each piece by "
            "example_index, or use too_long='error' or 'skip'"
        )
    if isinstance(planner, FixedBuckets):
        raise ValueError(
            f"{who}: FixedBuckets(too_long='split') yields pieces of examples, but {who}'s "
            "results are per example; iterate jb.Loader(ds, planner) and join per-token outputs "
            "with jb.unbatch and jb.join_pieces, or use too_long='truncate' or 'skip'"
        )
    if planner.algorithm == "concat_then_split":
        raise ValueError(
            f"{who}: Pack(algorithm='concat_then_split') yields pieces of examples, but {who}'s "
            "results are per example; iterate jb.Loader(ds, planner) and join per-token outputs "
            "with jb.unbatch and jb.join_pieces, or use algorithm='best_fit' or 'first_fit'"
        )
    if planner.too_long == "split":
        raise ValueError(
            f"{who}: Pack(too_long='split') yields pieces of examples, but {who}'s results are "
            "per example; iterate jb.Loader(ds, planner) and join per-token outputs with "
            "jb.unbatch and jb.join_pieces, or use too_long='truncate' or 'skip'"
        )


# Planned, collated and loaded by jb.plan / jb.collate / jb.Loader, and run
# by jb.map and jb.run (per image: each row's segments), but not a Planner:
# its batches hold patches, not a column's own values.
PATCH_PLANNERS = (PatchPack,)


_BY_NAME = {c.__name__: c for c in PLANNERS + PATCH_PLANNERS}


def planner_key(planner: Planner | PatchPack | None) -> str:
    """The engine's key of a planner ("None" for a planner still to be chosen)."""
    return "None" if planner is None else planner.key


def planner_from_key(key: str) -> Planner | PatchPack:
    """The planner a key names (a key this or an earlier release stored)."""
    options = _core.parse_planner_key(key)
    return _BY_NAME[_core.planner_name(options)]._from_options(options)


def same_planner(key: str, planner: Planner | PatchPack) -> bool:
    """Whether a stored key names `planner`'s options (however it was written)."""
    try:
        return _core.parse_planner_key(key) == planner._options()
    except ValueError:
        return False


def refuse_several_features(planner: Planner | PatchPack | None, who: str) -> None:
    """Raises for a Pack of several features where results are per example:
    each feature has its own row length, and a per-token output follows one."""
    if isinstance(planner, Pack) and isinstance(planner.row_length, Mapping):
        raise ValueError(
            f"{who}: Pack(row_length={dict(planner.row_length)!r}) packs several features, each "
            f"to its own row length, but {who}'s per-example results follow one row length; "
            "iterate jb.Loader(ds, planner) and cut each feature's outputs by its own "
            "<name>_segment_ids (docs/padding-and-masking.md)"
        )
