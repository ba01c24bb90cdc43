"""collate() and unbatch(): planned batches to dense arrays and back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal

import numpy as np

from jaxbatch import _core
from jaxbatch._src.collate import batch_tree, keys
from jaxbatch._src.data.dataset import Dataset, graph_layout
from jaxbatch._src.data.dtypes import numpy_dtype
from jaxbatch._src.plan.plan import BatchShape, BatchSpec
from jaxbatch._src.plan.planners import PatchPack

_AUX_SUFFIXES = keys.SUFFIXES
#: What a graph batch's output is per: unbatch(..., per=).
GraphRole = Literal["node", "edge", "graph"]

if TYPE_CHECKING:
    # The default (PEP 696) lets a user write `jb.Batch` for what collate and
    # the Loader give; typing_extensions is only the checker's (typeshed's).
    import numpy.typing as npt
    from typing_extensions import TypeVar

    ArrayT = TypeVar("ArrayT", default=npt.NDArray[Any])
else:
    from typing import TypeVar

    ArrayT = TypeVar("ArrayT")


class Batch(dict[str, ArrayT], Generic[ArrayT]):
    """A collated batch: a dict of numpy arrays (owned by C++ buffers, no
    copy) that also knows where it came from.

    Typed by what its values are: ``jb.Batch`` (``Batch[np.ndarray]``) is
    what collate and the Loader give, ``Batch[jax.Array]`` what
    :func:`jaxbatch.device_prefetch` gives; a Batch JAX rebuilds (``jit``,
    ``tree_map``) holds whatever the leaves became.

    Keys: each column; for a ragged column ``<name>_segment_ids`` and
    ``<name>_positions`` ``[rows, length]`` in both layouts (a padded row is
    one segment: ids 1 on real elements, positions 0..length-1, 0 in
    padding), so attention and position code need not branch; padded
    batches add ``<name>_mask`` and ``<name>_lengths`` ``[rows]``, packed
    ones per-segment ``<name>_lengths`` ``[rows, segments]``.
    ``example_index`` maps back to the examples, -1 for padding: ``[rows]``
    padded, ``[rows, segments]`` packed (each row's segments in order).
    :attr:`segments` is the segment slots per row either way.

    A graph batch (GraphBudget, GraphBuckets) holds each column concatenated
    over the batch's graphs and padded as ``jraph.pad_with_graphs`` pads
    (``nodes/...`` ``[nodes, ...]``, ``edges/...`` and ``senders``,
    ``receivers`` ``[edges]``, ``n_node``, ``n_edge`` and per-graph columns
    ``[graphs, ...]``), plus ``node_mask``, ``edge_mask``, ``graph_mask``,
    ``node_graph`` (each node's graph slot) and ``graph_index`` (each slot's
    example, -1 for padding); ``batch.graphs`` is the GraphsTuple.

    A Batch is a JAX pytree (its arrays the leaves, in sorted key order), so
    ``jax.jit(step)(batch)``, ``jax.device_put(batch)`` and ``tree_map`` keep
    it a Batch, ``.graphs`` included. ``index`` (the step) and ``epoch``
    change every step, so they stay out of the pytree: a Batch JAX rebuilds
    has them None (:func:`jaxbatch.device_prefetch` keeps them).
    """

    index: int | None = None
    epoch: int | None = None
    shape: BatchShape
    packed: bool
    length_column: str
    ragged_columns: tuple[str, ...]
    fixed_columns: tuple[str, ...]
    graph_layout: Any = None  # a graph batch's GraphLayout

    @property
    def is_graphs(self) -> bool:
        return self.graph_layout is not None

    @property
    def segments(self) -> int:
        """Segment slots per row: the packed shape's, 1 for a padded batch
        (the ``num_segments`` of :func:`jaxbatch.masked.segment_sum`)."""
        return self.shape.segments if self.packed else 1

    @property
    def graphs(self) -> Any:
        """The batch as a ``jraph.GraphsTuple`` (a NamedTuple with jraph's
        fields when jraph is not installed), padded as
        ``jraph.pad_with_graphs`` pads; its arrays are this batch's."""
        if self.graph_layout is None:
            raise AttributeError("Batch.graphs: this batch holds sequences, not graphs")
        return self.graph_layout.graphs_tuple(self)

    @property
    def aux_keys(self) -> tuple[str, ...]:
        """The keys collate added beside the columns."""
        if self.graph_layout is not None:
            return tuple(k for k in self if k in keys.GRAPH_KEYS)
        own = (keys.EXAMPLE_INDEX, keys.EXAMPLE_PIECE)
        return tuple(k for k in self if k in own or _aux_of(k, self.ragged_columns))


batch_tree.register(Batch)


def _aux_of(key: str, ragged: tuple[str, ...]) -> bool:
    return any(key == c + s for c in ragged for s in _AUX_SUFFIXES)


def collate(
    dataset: Dataset,
    batch: BatchSpec,
    *,
    pad_value: int | float | Mapping[str, int | float] = _core.DEFAULT_PAD_VALUE,
    num_threads: int | None = None,
    padded_segments: bool = _core.DEFAULT_PADDED_SEGMENTS,
    epoch: int = 0,
) -> Batch:
    """Fills one planned batch with the dataset's examples, in C++ (GIL
    released): ragged columns padded to the batch shape with ``pad_value``
    (one number, or a dict per column; integers exact, e.g. ``2**64 - 1`` for
    a uint64 column, and a value a column's dtype cannot hold is a
    ValueError naming the column), masks, lengths, segment ids and
    positions (a padded row is one segment: ids 1 on real elements, positions
    0..length-1, both 0 in padding; ``padded_segments=False`` leaves them out
    of padded batches), fixed columns stacked, and ``example_index``.
    A :class:`~jaxbatch.PatchPack` batch holds its image column cut into
    patches (see PatchPack for the keys) and each fixed-shape column per
    segment (``[rows, segments, ...]``, a label per image; a ragged column
    is refused); ``epoch`` picks the patches its ``drop_percent`` keeps.
    A large batch (over 4 MiB of output per thread) is filled by up to
    ``num_threads`` threads (default: the CPU count; at most 1024); buffers are reused
    across calls once numpy frees them.

    Example::

        for spec in plan:
            batch = jb.collate(ds, spec)  # batch["tokens"], batch["tokens_mask"], ...
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"collate: expected a jaxbatch.Dataset, found {type(dataset).__name__}")
    if not isinstance(batch, BatchSpec):
        raise TypeError(
            f"collate: expected a batch from a BatchPlan (plan[i]), found {type(batch).__name__}"
        )
    pads, default = pad_values(pad_value, "collate")
    # The engine checks the count; 0 asks it for the CPU count.
    threads = 0 if num_threads is None else int(num_threads)
    if not isinstance(padded_segments, bool):
        raise TypeError(f"collate: padded_segments must be a bool, found {padded_segments!r}")
    if isinstance(batch.plan.planner, PatchPack):
        return _collate_patches(dataset, batch, pads, default, threads, epoch)
    arrays = _core.collate(
        dataset._core, batch.plan._core, batch.index, pads, default, threads, padded_segments
    )
    fixed = {n: dataset._core.column(n).is_fixed for n in dataset.column_names}
    return batch_from_core(
        arrays,
        batch.index,
        batch.shape,
        batch.plan.packed,
        "" if batch.plan.graph else batch.plan.length_column or dataset.default_length_column,
        tuple(n for n, f in fixed.items() if not f),
        tuple(n for n, f in fixed.items() if f),
        graph_layout(dataset, "collate") if batch.plan.graph else None,
    )


def _collate_patches(
    dataset: Dataset, batch: BatchSpec, pads: Any, default: Any, threads: int, epoch: int
) -> Batch:
    """A PatchPack batch: its image column's patches, cut in C++."""
    column = batch.plan.length_column or dataset.default_length_column
    options = batch.plan.planner._options()
    arrays = _core.collate_patches(
        dataset._core, column, batch.plan._core, batch.index, options, epoch, pads, default, threads
    )
    fixed = tuple(n for n in dataset.column_names if dataset._core.column(n).is_fixed)
    return batch_from_core(arrays, batch.index, batch.shape, True, column, (column,), fixed)


def _pad_scalar(value: Any, what: str) -> int | float:
    """A pad value as the core takes it: an exact int (bools and numpy
    integers included; int64 or uint64, chosen by the core) or a float. The
    core checks it against each column's dtype and names the column."""
    if isinstance(value, np.generic | np.ndarray) and np.ndim(value) == 0:
        value = value.item()  # numpy scalars: exact Python ints and floats
    if isinstance(value, bool | int):
        if not -(2**63) <= value < 2**64:
            raise ValueError(
                f"{what}: expected a value representable as a 64-bit integer, found {value}"
            )
        return int(value)
    if isinstance(value, float):
        return value
    raise TypeError(f"{what}: expected an int or a float, found {type(value).__name__}")


def pad_values(pad_value: Any, where: str) -> tuple[list[tuple[str, int | float]], int | float]:
    """(per-column pad values, default) from one number or a dict of them."""
    if isinstance(pad_value, Mapping):
        pads = [
            (k, _pad_scalar(v, f"{where}: pad_value for column {k!r}"))
            for k, v in pad_value.items()
        ]
        return pads, _core.DEFAULT_PAD_VALUE  # the columns not named
    return [], _pad_scalar(pad_value, f"{where}: pad_value")


def batch_from_core(
    arrays, index, shape, packed, length_column, ragged, fixed, layout=None
) -> Batch:
    """A Batch over the (name, dtype, array) triples the core returns
    (`layout`: a graph batch's GraphLayout)."""
    out = Batch()
    for name, dtype, array in arrays:
        out[name] = array.view(numpy_dtype(dtype)) if dtype == "bfloat16" else array
    out.index = index
    out.shape = shape
    out.packed = packed
    out.length_column = length_column
    out.ragged_columns = ragged
    out.fixed_columns = fixed
    out.graph_layout = layout
    return out
