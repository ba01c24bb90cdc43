"""unbatch() and join_pieces(): a batch's outputs back to per-example results.

An output's layout is read from its shape, exactly: per token of one ragged
column (its second axis is that column's padded or packed row length), per
segment of a packed row (its second axis is the segment slots S) or per row
of a padded batch; a shape that fits two layouts, or none, is refused with
the shapes that would fit. A batch that packs several features, each its
own row length, has no one token axis: an output not named after a column
says which feature it follows (``column=``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxbatch._src.base.choices import check_choice, choices, one_of
from jaxbatch._src.collate import keys
from jaxbatch._src.collate.collate import Batch, GraphRole
from jaxbatch._src.data import graphs


def unbatch(
    outputs: Mapping[str, Any] | Any,
    batch: Batch,
    *,
    per_token: bool | Mapping[str, bool] | None = None,
    per: GraphRole | Mapping[str, GraphRole] | None = None,
    column: str | Mapping[str, str] | None = None,
) -> dict[Any, Any]:
    """Per-example results with the padding removed, keyed by example index.
    (Keys typed Any: a batch of pieces keys them ``(example, piece)``, which
    only the planner, a run-time value, says.)

    ``outputs`` is an array or a dict of arrays whose leading axis is the
    batch's rows (``[rows, ...]``). Each output's layout is read from its
    shape, exactly:

    * per token ``[rows, L, ...]``, L the row length of its column (the
      batch's padded length, or a packed row's length): cut to each
      example's tokens (split by segment in a packed row);
    * per segment ``[rows, S, ...]`` (packed batches, S =
      ``batch.segments``): one value per segment's example;
    * per row (padded batches): any other ``[rows, ...]``, one per example.

    A packed output that is neither per token nor per segment is a
    ValueError naming the shapes that would be, and so is one that could be
    both (S == L): ``per_token=True`` or ``False`` (or ``{name: bool}``)
    says which. A key that names a ragged column uses that column's lengths;
    other outputs follow the batch's length column, or the ragged column
    ``column=`` names (one name, or ``{output name: column}``). A batch that
    packs several features (``Pack(row_length={"inputs": ..., "targets":
    ...})``) has no one token axis, so there an output not named after a
    column needs ``column=`` (a per-segment output with ``per_token=False``
    needs none: segment k is the same example in every feature). Collate's
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
        decoded = jb.unbatch(decoder(b), b, column="targets")  # several features
    """
    if not isinstance(batch, Batch):
        raise TypeError(f"unbatch: expected the Batch collate returned, found {type(batch)}")
    single = not isinstance(outputs, Mapping)
    items = {"": outputs} if single else dict(outputs)
    if batch.is_graphs:
        if column is not None:
            raise ValueError("unbatch: column= is for sequence batches; use per= for graphs")
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
        name = "output" if single else f"output {key!r}"
        forced = per_token.get(key) if isinstance(per_token, Mapping) else per_token
        own = column.get(key) if isinstance(column, Mapping) else column
        lengths = _layout(name, key if not single else None, array, batch, forced, own)
        if batch.packed:
            pieces = _unpack(array, index, lengths, piece_ids)
        else:
            pieces = _unpad(array, index, lengths, piece_ids)
        for example, piece in pieces:
            if single:
                result[example] = piece
            else:
                result.setdefault(example, {})[key] = piece
    return result


# --- Which layout an output has ------------------------------------------


def _layout(name, key, array, batch, forced, column) -> np.ndarray | None:
    """The lengths to cut `array` by when it is per token (its column's
    per-example lengths), None when it is per segment or per row; a
    ValueError when its shape fits no layout, or two."""
    rows, packed = batch.shape.rows, batch.packed
    if array.ndim < 1 or array.shape[0] != rows:
        raise ValueError(
            f"unbatch: {name} has shape {array.shape}; expected a leading axis of {rows} rows"
        )
    second = array.shape[1] if array.ndim >= 2 else None
    slots = batch.shape.segments if packed else None
    if key in batch.fixed_columns:  # a fixed column is one value per example
        if packed and second != slots:
            raise ValueError(_matches_none(name, array.shape, batch, None))
        return None
    if key in batch.ragged_columns:
        return np.asarray(batch[keys.example_lengths(batch, key)])
    if forced is False and packed and second == slots:
        return None  # per segment: the same example in every feature
    feature = _feature(name, batch, column)
    width = np.shape(batch[feature])[1]
    token, segment = second == width, packed and second == slots
    if forced is None and token and segment:
        raise ValueError(
            f"unbatch: {name} of shape {array.shape} could be per token or per segment: this "
            f"packed batch's rows and segment axis are both {width} long; pass per_token=True "
            f"or False (or {{name: bool}}), or plan with Pack(max_segments_per_row=...) below "
            f"row_length"
        )
    if forced or (forced is None and token):
        if not token:
            raise ValueError(
                f"unbatch: {name} of shape {array.shape} is per-token but its second axis is "
                f"not {feature!r}'s padded length {width}"
            )
        return np.asarray(batch[keys.example_lengths(batch, feature)])
    if packed and not segment:
        raise ValueError(_matches_none(name, array.shape, batch, (feature, width)))
    return None


def _feature(name: str, batch: Batch, column: Any) -> str:
    """The ragged column whose tokens an output follows: `column`, or the
    batch's length column where the batch has one token axis."""
    ragged = batch.ragged_columns
    features = [n for n, _ in batch.shape.feature_lengths]
    if column is None:
        if features:
            widths = ", ".join(f"{n!r} ({w} long)" for n, w in batch.shape.feature_lengths)
            raise ValueError(
                f"unbatch: {name} is not named after a column, and this batch packs several "
                f"features, each its own row length: {widths}. Pass column= naming the "
                f"feature it follows ({one_of(tuple(features))}; one name, or {{output: "
                f"column}}), or per_token=False for a per-segment output"
            )
        return batch.length_column
    if column not in ragged:
        raise ValueError(
            f"unbatch: column={column!r} for {name} is not a ragged column of this batch; "
            f"expected {one_of(ragged)}"
        )
    return column


def _matches_none(name: str, shape: tuple, batch: Batch, token: tuple | None) -> str:
    rows, slots = batch.shape.rows, batch.shape.segments
    expected = f"per segment [{rows}, {slots}, ...] (S = {slots} segment slots)"
    if token is not None:
        feature, width = token
        expected = f"per token of {feature!r} [{rows}, {width}, ...] or " + expected
    return (
        f"unbatch: {name} has shape {shape}, which is no layout of this packed batch: "
        f"expected {expected}; a packed row has no per-row value (reduce per segment, "
        f"e.g. jb.masked.segment_sum)"
    )


# --- Graph batches ---------------------------------------------------------


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


# --- Cutting ---------------------------------------------------------------


def _unpad(array, index, lengths, piece_ids=None):
    """(key, result) per row: the example, or (example, piece) for a split
    batch; cut to its length when `lengths` (per token) is given."""
    for r in np.flatnonzero(index >= 0):
        key = int(index[r]) if piece_ids is None else (int(index[r]), int(piece_ids[r]))
        yield key, array[r] if lengths is None else array[r, : lengths[r]]


def _unpack(array, index, lengths, piece_ids=None):
    """(key, result) per segment: the example, or (example, piece) for a
    split batch; its tokens when `lengths` (per token) is given."""
    starts = None if lengths is None else np.cumsum(lengths, axis=1) - lengths
    rows, slots = np.nonzero(index >= 0)
    for r, s in zip(rows, slots, strict=True):
        key = int(index[r, s]) if piece_ids is None else (int(index[r, s]), int(piece_ids[r, s]))
        if starts is None:
            yield key, array[r, s]
        else:
            yield key, array[r, starts[r, s] : starts[r, s] + lengths[r, s]]


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
