"""plan(): lengths to a BatchPlan, computed by the C++ planners."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.ints import int64_array
from jaxbatch._src.base.words import counted
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.plan.planners import (
    GRAPH_PLANNERS,
    PATCH_PLANNERS,
    PLANNERS,
    AspectBuckets,
    Pack,
    PatchPack,
    Planner,
)


@dataclasses.dataclass(frozen=True)
class PlanStats:
    """What a plan costs. Every example is in a batch or counted in
    ``dropped`` (remainder="drop") or ``skipped`` (too_long="skip")."""

    examples: int
    batches: int
    shapes: int
    real_elements: int
    padded_elements: int
    efficiency: float
    occupied_elements: int
    batches_per_shape: tuple[int, ...]
    dropped: int
    skipped: int
    truncated: int
    # Graph plans (GraphBudget, GraphBuckets): real_elements and
    # padded_elements count nodes; these count edges and graphs (0 otherwise).
    real_edges: int = 0
    padded_edges: int = 0
    real_graphs: int = 0
    padded_graphs: int = 0

    @property
    def node_efficiency(self) -> float:
        """Real nodes over node slots (a graph plan's ``efficiency``)."""
        return self.efficiency

    @property
    def edge_efficiency(self) -> float:
        """Real edges over edge slots (1.0 when there are none)."""
        return self.real_edges / self.padded_edges if self.padded_edges else 1.0

    @property
    def graph_efficiency(self) -> float:
        """Real graphs over graph slots (the padding graph's slot included)."""
        return self.real_graphs / self.padded_graphs if self.padded_graphs else 1.0

    @property
    def row_efficiency(self) -> float:
        """Real elements over the elements of rows that hold an example: the
        bucketing's own efficiency, before partial batches' padding rows."""
        return self.real_elements / self.occupied_elements if self.occupied_elements else 1.0

    def __str__(self) -> str:
        if self.padded_graphs:
            return (
                f"{counted(self.examples, 'graph')} in {counted(self.batches, 'batch', 'batches')} "
                f"of {counted(self.shapes, 'shape')}; {self.node_efficiency:.1%} real nodes, "
                f"{self.edge_efficiency:.1%} real edges, {self.graph_efficiency:.1%} real graphs; "
                f"skipped {self.skipped}"
            )
        return (
            f"{counted(self.examples, 'example')} in {counted(self.batches, 'batch', 'batches')} "
            f"of {counted(self.shapes, 'shape')}; "
            f"{self.efficiency:.1%} real elements ({self.real_elements} of "
            f"{self.padded_elements}); dropped {self.dropped}, skipped {self.skipped}, "
            f"truncated {self.truncated}"
        )


@dataclasses.dataclass(frozen=True)
class BatchShape:
    """A batch's padded shape: ``rows`` x ``length``; ``segments`` is the most
    examples a packed row holds (0 when not packed). A graph batch has
    ``rows`` graph slots, ``length`` node slots and ``edges`` edge slots.
    A ``Pack`` with several features gives each its own row length in
    ``feature_lengths`` (``(("inputs", 512), ("targets", 128))``, by name;
    ``feature_length(name)`` reads one), and ``length`` is their sum.
    A grid batch (images, pair features) pads each example to ``length`` x
    ``width`` cells (H x W; ``grid`` is ``(rows, H, W)``); ``width`` is 0
    for every other batch."""

    rows: int
    length: int
    segments: int = 0
    edges: int = 0
    feature_lengths: tuple[tuple[str, int], ...] = ()
    width: int = 0

    @classmethod
    def from_core(
        cls, shape: tuple[int, ...], feature_lengths: tuple[tuple[str, int], ...] = ()
    ) -> BatchShape:
        """From the engine's (rows, length, segments, edges[, width]) tuple."""
        rows, length, segments, edges, *width = shape
        return cls(rows, length, segments, edges, feature_lengths, width[0] if width else 0)

    @property
    def grid(self) -> tuple[int, int, int] | None:
        """``(rows, H, W)`` for a grid batch, else None."""
        return (self.rows, self.length, self.width) if self.width else None

    def feature_length(self, name: str) -> int:
        """The row length of feature `name` (``length`` with one feature)."""
        if not self.feature_lengths:
            return self.length
        lengths = dict(self.feature_lengths)
        if name not in lengths:
            raise KeyError(f"BatchShape: no feature {name!r}; features are {sorted(lengths)}")
        return lengths[name]


class BatchSpec:
    """One planned batch: its shape and which examples fill which rows."""

    def __init__(self, plan: BatchPlan, index: int):
        self.plan = plan
        self.index = index
        self.shape = BatchShape.from_core(plan._core.batch_shape(index), plan._feature_lengths)

    @property
    def rows(self) -> list[np.ndarray]:
        """Example ids per row (one or none for padded plans, a row's segments
        for packed plans)."""
        core = self.plan._core
        first, last = core.batch_row_begin[self.index], core.batch_row_begin[self.index + 1]
        starts = core.row_example_begin[first : last + 1]
        ids = core.example_ids
        stored = [ids[starts[r] : starts[r + 1]] for r in range(len(starts) - 1)]
        # Only rows that hold examples are stored; the padding rows after them are empty.
        return stored + [ids[:0]] * (self.shape.rows - len(stored))

    @property
    def example_ids(self) -> np.ndarray:
        """Every example in this batch, row by row."""
        core = self.plan._core
        first, last = core.batch_row_begin[self.index], core.batch_row_begin[self.index + 1]
        starts = core.row_example_begin
        return core.example_ids[starts[first] : starts[last]]

    def __repr__(self) -> str:
        return f"BatchSpec(index={self.index}, shape={self.shape})"


class BatchPlan:
    """Which examples go into which batch, and each batch's shape.

    Iterate it (or index it) for :class:`BatchSpec` values to pass to
    :func:`jaxbatch.collate`. ``stats`` says what it costs.
    """

    def __init__(self, core: _core.BatchPlan, planner: Planner | PatchPack):
        self._core = core
        self.planner = planner
        s = core.stats
        fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(PlanStats)}
        fields["batches_per_shape"] = tuple(fields["batches_per_shape"])
        self.stats = PlanStats(**fields)

    @property
    def packed(self) -> bool:
        return self._core.packed

    @property
    def graph(self) -> bool:
        """Whether the batches are graph batches (GraphBudget, GraphBuckets)."""
        return self._core.graph

    @property
    def grid(self) -> bool:
        """Whether the batches are grid batches (examples of h x w cells,
        planned from ``(h, w)`` sizes): each shape has a ``width``."""
        return self._core.grid

    @property
    def length_column(self) -> str | None:
        return self._core.length_column or None

    @property
    def shapes(self) -> list[BatchShape]:
        return [BatchShape.from_core(s, self._feature_lengths) for s in self._core.shapes]

    @property
    def _feature_lengths(self) -> tuple[tuple[str, int], ...]:
        return tuple(self._core.feature_row_lengths.items())

    @property
    def boundaries(self) -> list[int]:
        """The distinct padded lengths, increasing (bucket boundaries)."""
        return sorted({s.length for s in self.shapes})

    @property
    def dropped_examples(self) -> np.ndarray:
        return np.array(self._core.dropped_examples)

    @property
    def skipped_examples(self) -> np.ndarray:
        return np.array(self._core.skipped_examples)

    @property
    def resize_to(self) -> np.ndarray | None:
        """:class:`AspectBuckets`: each example's ``(H, W)`` target, ``[n, 2]``
        by example id (``(0, 0)`` for one not planned); None for other planners."""
        if not isinstance(self.planner, AspectBuckets):
            return None
        return np.array(self._core.resize_to).reshape(-1, 2)

    def __len__(self) -> int:
        return self._core.num_batches

    def __getitem__(self, index: int) -> BatchSpec:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(
                f"BatchPlan: batch {index} out of range; the plan has "
                f"{counted(n, 'batch', 'batches')}"
            )
        return BatchSpec(self, index % n)

    def __iter__(self) -> Iterator[BatchSpec]:
        return (BatchSpec(self, i) for i in range(len(self)))

    def __repr__(self) -> str:
        return f"BatchPlan({self.planner}: {self.stats})"


def plan(
    data: Dataset | Any,
    planner: Planner | PatchPack,
    *,
    column: str | None = None,
    order: Any = None,
) -> BatchPlan:
    """Plans batches over a dataset's lengths (or a sequence of lengths).

    ``column`` picks the ragged column whose lengths drive the plan (default:
    the first ragged one); ``order`` lists example ids to plan, in order (a
    shuffle, a shard, a filter's matches; default every example in index
    order): exactly those, with every planner, so an empty order plans
    nothing (zero batches), and an id listed twice is a ValueError (a plan
    holds each example once). Deterministic: the same lengths and planner
    give the same plan.

    A graph planner (:class:`GraphBudget`, :class:`GraphBuckets`) plans a
    graph dataset (:meth:`Dataset.from_graphs`) by its node and edge counts.

    Sizes of shape ``[n, 2]`` (each example's height and width: images,
    pair features) make a grid plan: each batch's shape is ``(rows, H, W)``
    (:attr:`BatchShape.grid`) and its examples are padded to H x W cells.

    Example::

        plan = jb.plan(ds, jb.AutoBuckets(max_shapes=8, token_budget=65536))
        print(plan.stats.efficiency, plan.boundaries)
    """
    if not isinstance(planner, PLANNERS + PATCH_PLANNERS):
        raise TypeError(
            f"plan: expected a planner "
            f"({', '.join(c.__name__ for c in PLANNERS + PATCH_PLANNERS)}), "
            f"found {type(planner).__name__}"
        )
    order = _order(order)
    if not isinstance(data, Dataset):  # Sizes given: no column to pick, nothing to read.
        return _plan_sizes(data, planner, column, order)
    if isinstance(planner, PatchPack):
        return _plan_patches(data, planner, column, order)
    if isinstance(planner, GRAPH_PLANNERS):
        if column is not None:
            raise ValueError(
                f"plan: {type(planner).__name__} plans by node and edge counts; "
                f"column={column!r} does not apply"
            )
        nodes, edges = _core.graph_counts(data._core, "plan")
        return BatchPlan(_core.plan(nodes, planner._options(), order, edges), planner)
    if _several_features(planner):
        return _plan_features(data, planner, list(planner._options().row_length), column, order)
    name = column if column is not None else data.default_length_column
    if data._core.column(name).is_grid:  # Images, pair features: by (h, w), as a Loader plans.
        return _plan_column_grid(data, planner, name, order)
    core = _core.plan(data.lengths(name), planner._options(), order)
    core.length_column = name
    return BatchPlan(core, planner)


def _several_features(planner: Planner | PatchPack) -> bool:
    """Whether `planner` is a Pack of several features (row_length={...})."""
    return isinstance(planner, Pack) and isinstance(planner._options().row_length, dict)


def _plan_sizes(
    data: Any, planner: Planner | PatchPack, column: str | None, order: np.ndarray | None
) -> BatchPlan:
    """A plan of plain sizes: lengths ``[n]``, or ``[n, 2]`` (height, width)
    for a grid plan. Graphs and a Pack of several features need a Dataset."""
    if isinstance(planner, GRAPH_PLANNERS):
        raise TypeError(
            f"plan: {type(planner).__name__} plans graphs: pass a Dataset.from_graphs(...), "
            f"found {type(data).__name__}"
        )
    if _several_features(planner):
        raise TypeError(
            f"plan: Pack(row_length={{...}}) packs the named columns of a Dataset, "
            f"found {type(data).__name__}"
        )
    if column is not None:
        raise ValueError("plan: column= needs a Dataset, found plain lengths")
    lengths = np.asarray(data)
    if lengths.ndim == 2 and lengths.shape[1] == 2 and _integers(lengths):
        return _plan_grid(lengths, planner, order)
    if lengths.ndim != 1 or not _integers(lengths):
        raise ValueError(
            f"plan: expected a Dataset, 1-D integer lengths or [n, 2] integer (height, "
            f"width) sizes, found shape {lengths.shape} and dtype {lengths.dtype}"
        )
    lengths = int64_array(lengths, "plan", lambda k: f"example {k}'s length")
    core = _core.plan(lengths, planner._options(), order)
    core.length_column = ""
    return BatchPlan(core, planner)


def _plan_features(
    data: Any, planner: Planner, names: list[str], column: str | None, order: Any
) -> BatchPlan:
    """A Pack of several features: the engine takes the first feature's
    lengths (in its name order) and the others' after one another."""
    if column is not None:
        raise ValueError(
            f"plan: Pack(row_length={{...}}) plans by its features {names}; "
            f"column={column!r} does not apply"
        )
    lengths = [np.ascontiguousarray(data.lengths(n), dtype=np.int64) for n in names]
    others = np.concatenate(lengths[1:]) if len(lengths) > 1 else np.zeros(0, np.int64)
    core = _core.plan(lengths[0], planner._options(), order, others)
    core.length_column = names[0]
    return BatchPlan(core, planner)


def _plan_patches(
    data: Dataset, planner: PatchPack, column: str | None, order: np.ndarray | None
) -> BatchPlan:
    """PatchPack plans an image column (two variable axes) by each image's
    (height, width)."""
    name = column if column is not None else data.default_length_column
    images = data._core.column(name)
    if not images.is_grid:
        raise ValueError(
            f"plan: PatchPack plans images, a column with two variable axes "
            f"(axes={{{name!r}: ('h', 'w')}}); column {name!r} has one"
        )
    return _plan_column_grid(data, planner, name, order)


def _plan_column_grid(
    data: Dataset, planner: Planner, name: str, order: np.ndarray | None
) -> BatchPlan:
    """A plan of a grid column (two variable axes) by each example's
    (height, width)."""
    images = data._core.column(name)
    core = _core.plan(images.heights(), planner._options(), order, None, images.widths())
    core.length_column = name
    return BatchPlan(core, planner)


def _integers(sizes: np.ndarray) -> bool:
    return sizes.size == 0 or np.issubdtype(sizes.dtype, np.integer)


def _plan_grid(sizes: np.ndarray, planner: Planner, order: np.ndarray | None) -> BatchPlan:
    """A grid plan from each example's (height, width): images or pair
    features, each padded to its batch's H x W cells."""
    sizes = int64_array(sizes, "plan", lambda k: f"example {k // 2}'s {('height', 'width')[k % 2]}")
    heights, widths = np.ascontiguousarray(sizes[:, 0]), np.ascontiguousarray(sizes[:, 1])
    return BatchPlan(_core.plan(heights, planner._options(), order, None, widths), planner)


def _order(order: Any) -> np.ndarray | None:
    if order is None:
        return None
    order = int64_array(order, "plan", lambda k: f"order[{k}]")
    if order.ndim != 1:
        raise ValueError(f"plan: expected 1-D order, found shape {order.shape}")
    return order
