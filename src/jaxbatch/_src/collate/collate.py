"""collate() and unbatch(): planned batches to dense arrays and back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.choices import check_choice, choices
from jaxbatch._src.collate import batch_tree, keys
from jaxbatch._src.data import graphs
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


def unbatch(
    outputs: Mapping[str, Any] | Any,
    batch: Batch,
    *,
    per_token: bool | Mapping[str, bool] | None = None,
    per: GraphRole | Mapping[str, GraphRole] | None = None,
) -> dict[Any, Any]:
    """Per-example results with the padding removed, keyed by example index.
    (Keys typed Any: a batch of pieces keys them ``(example, piece)``, which
    only the planner, a run-time value, says.)

    ``outputs`` is an array or a dict of arrays whose leading axis is the
    batch's rows (``[rows, ...]``): per-token arrays (``[rows, L, ...]``,
    L the batch's padded length) are cut to each example's length, per-row
    arrays give one entry per example. For packed batches per-token arrays
    are split by segment and per-segment arrays (``[rows, S, ...]``) indexed.
    A key that names a ragged column uses that column's lengths; collate's
    own extra keys (masks, lengths, ...) are left out, so
    ``unbatch(collate(ds, spec), batch)`` gives back the examples.

    A batch of ``Pack(too_long="split")``, ``Pack(algorithm=
    "concat_then_split")`` or ``FixedBuckets(too_long="split")`` holds
    pieces of examples (its ``example_piece`` says which): its results are keyed by
    ``(example, piece)``, and :func:`join_pieces` joins the per-token results
    of every piece of an example, gathered over the batches that hold them.

    For a graph batch, outputs are per node (``[nodes, ...]``), per edge
    (``[edges, ...]``) or per graph (``[graphs, ...]``): each graph gets its
    own nodes, edges or row. Which one is read from the leading axis (a key
    that names a column follows the column) unless ``per`` says:
    ``"node"``, ``"edge"`` or ``"graph"``, or a dict of them by name; a
    leading axis that two of them share is a ValueError asking for ``per=``.

    Example::

        logits = model(batch["tokens"])           # [rows, L, vocab]
        per_example = jb.unbatch(logits, batch)   # {example: [length, vocab]}
    """
    if not isinstance(batch, Batch):
        raise TypeError(f"unbatch: expected the Batch collate returned, found {type(batch)}")
    single = not isinstance(outputs, Mapping)
    items = {"": outputs} if single else dict(outputs)
    if batch.is_graphs:
        return _unbatch_graphs(items, batch, single, per)
    if per is not None:
        raise ValueError("unbatch: per= is for graph batches; use per_token= for sequences")
    index = np.asarray(batch[keys.EXAMPLE_INDEX])
    piece_ids = np.asarray(batch[keys.EXAMPLE_PIECE]) if keys.EXAMPLE_PIECE in batch else None
    result: dict[Any, Any] = {}
    for key, value in items.items():
        if not single and key in batch.aux_keys:
            continue
        array = np.asarray(value)
        if array.ndim < 1 or array.shape[0] != batch.shape.rows:
            raise ValueError(
                f"unbatch: output {key!r} has shape {array.shape}; expected a leading axis of "
                f"{batch.shape.rows} rows"
            )
        if key in batch.ragged_columns:
            lengths, token_level = np.asarray(batch[keys.example_lengths(batch, key)]), True
        elif key in batch.fixed_columns:
            lengths, token_level = None, False
        else:
            lengths = np.asarray(batch[keys.example_lengths(batch, batch.length_column)])
            forced = per_token.get(key) if isinstance(per_token, Mapping) else per_token
            token_level = (
                array.ndim >= 2 and array.shape[1] == batch.shape.length
                if forced is None
                else bool(forced)
            )
            if forced is None and token_level and batch.packed:
                _refuse_ambiguous(key, array.shape, batch.shape)
        own_length = key in batch.ragged_columns  # a non-aligned column has its own width
        if (
            token_level
            and not own_length
            and (array.ndim < 2 or array.shape[1] != batch.shape.length)
        ):
            raise ValueError(
                f"unbatch: output {key!r} of shape {array.shape} is per-token but its second "
                f"axis is not the batch's padded length {batch.shape.length}"
            )
        if batch.packed:
            pieces = _unpack(array, index, lengths, token_level, piece_ids)
        else:
            pieces = _unpad(array, index, lengths, token_level, piece_ids)
        for example, piece in pieces:
            if single:
                result[example] = piece
            else:
                result.setdefault(example, {})[key] = piece
    return result


_PER = choices(GraphRole)


def _graph_role(key: str, array: np.ndarray, batch: Batch, per: Any) -> str:
    forced = per.get(key) if isinstance(per, Mapping) else per
    sizes = {"node": batch.shape.length, "edge": batch.shape.edges, "graph": batch.shape.rows}
    if forced is not None:
        check_choice("unbatch", "per", forced, GraphRole)
        role = forced
    elif batch.graph_layout.role_of(key) is not None:
        role = batch.graph_layout.role_of(key)
    elif key in batch.fixed_columns:
        role = "graph"
    else:
        lead = array.shape[0] if array.ndim else None
        roles = [r for r in _PER if sizes[r] == lead]
        if len(roles) != 1:
            raise ValueError(
                f"unbatch: output {key!r} has shape {array.shape}; this graph batch has "
                f"{sizes['node']} nodes, {sizes['edge']} edges and {sizes['graph']} graphs, so "
                + (
                    f"it could be per {' or per '.join(roles)}: pass per={{{key!r}: ...}}"
                    if roles
                    else "it is none of them (a leading axis of one of these)"
                )
            )
        role = roles[0]
    if array.ndim < 1 or array.shape[0] != sizes[role]:
        raise ValueError(
            f"unbatch: output {key!r} of shape {array.shape} is per {role} but the batch has "
            f"{sizes[role]} {role} slots"
        )
    return role


def _unbatch_graphs(items, batch, single, per) -> dict[int, Any]:
    index = np.asarray(batch[keys.GRAPH_INDEX])
    n_node, n_edge = np.asarray(batch[graphs.N_NODE]), np.asarray(batch[graphs.N_EDGE])
    starts = {"node": np.cumsum(n_node) - n_node, "edge": np.cumsum(n_edge) - n_edge}
    counts = {"node": n_node, "edge": n_edge}
    result: dict[int, Any] = {}
    for key, value in items.items():
        if not single and (key in batch.aux_keys or key in (graphs.N_NODE, graphs.N_EDGE)):
            continue
        array = np.asarray(value)
        role = _graph_role(key, array, batch, per)
        for g in np.flatnonzero(index >= 0):
            if role == "graph":
                piece = array[g]
            else:
                piece = array[starts[role][g] : starts[role][g] + counts[role][g]]
                if key in (graphs.SENDERS, graphs.RECEIVERS):
                    piece = piece - starts["node"][g]  # back to the graph's own node ids
            if single:
                result[int(index[g])] = piece
            else:
                result.setdefault(int(index[g]), {})[key] = piece
    return result


def _refuse_ambiguous(key, shape, batch_shape) -> None:
    """A packed batch whose segment axis is as long as its rows: an output
    [rows, L, ...] may be per token or per segment; unbatch does not guess."""
    if batch_shape.segments == batch_shape.length:
        raise ValueError(
            f"unbatch: output {key!r} of shape {shape} could be per token or per segment: this "
            f"packed batch's rows and segment axis are both {batch_shape.length} long; pass "
            f"per_token=True or False (or {{name: bool}}), or plan with "
            f"Pack(max_segments_per_row=...) below row_length"
        )


def _unpad(array, index, lengths, per_token, piece_ids=None):
    """(key, result) per row: the example, or (example, piece) for a split batch."""
    for r in np.flatnonzero(index >= 0):
        key = int(index[r]) if piece_ids is None else (int(index[r]), int(piece_ids[r]))
        yield key, array[r, : lengths[r]] if per_token else array[r]


def _unpack(array, index, lengths, per_token, piece_ids=None):
    """(key, result) per segment: the example, or (example, piece) for a split batch."""
    starts = np.cumsum(lengths, axis=1) - lengths if per_token else None
    rows, slots = np.nonzero(index >= 0)
    for r, s in zip(rows, slots, strict=True):
        key = int(index[r, s]) if piece_ids is None else (int(index[r, s]), int(piece_ids[r, s]))
        if per_token:
            yield key, array[r, starts[r, s] : starts[r, s] + lengths[r, s]]
        else:
            yield key, array[r, s]


def join_pieces(results: Mapping[tuple[int, int], Any]) -> dict[int, Any]:
    """Per-example results from the per-piece ones :func:`unbatch` gives for
    ``Pack(too_long="split")``, ``Pack(algorithm="concat_then_split")`` and
    ``FixedBuckets(too_long="split")`` batches: each example's pieces
    concatenated in piece order along their first (token) axis, an array or
    each key of a dict.
    Gather the pieces of every batch first (an example's pieces may be in
    several batches, or on several hosts); a missing piece is a ValueError
    naming the example, since a result joined without it would be short.

    Example::

        pieces = {}
        for batch in loader:
            pieces.update(jb.unbatch(model(batch["tokens"]), batch))
        per_example = jb.join_pieces(pieces)     # {example: [length, ...]}
    """
    by_example: dict[int, dict[int, Any]] = {}
    for key, value in results.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(
                f"join_pieces: expected (example, piece) keys, as unbatch gives for a "
                f"Pack(too_long='split') batch, found {key!r}"
            )
        by_example.setdefault(int(key[0]), {})[int(key[1])] = value
    out: dict[int, Any] = {}
    for example, pieces in sorted(by_example.items()):
        if sorted(pieces) != list(range(len(pieces))):
            raise ValueError(
                f"join_pieces: example {example} has pieces {sorted(pieces)}, expected "
                f"0..{len(pieces) - 1} with none missing; gather every batch's pieces first"
            )
        parts = [pieces[k] for k in range(len(pieces))]
        out[example] = _join(example, parts)
    return out


def _join(example: int, parts: list) -> Any:
    if isinstance(parts[0], Mapping):
        return {k: _join(example, [p[k] for p in parts]) for k in parts[0]}
    arrays = [np.asarray(p) for p in parts]
    if any(a.ndim == 0 for a in arrays):
        raise ValueError(
            f"join_pieces: example {example} has a per-piece scalar result; only per-token "
            "results (a leading token axis) join"
        )
    return np.concatenate(arrays, axis=0)
