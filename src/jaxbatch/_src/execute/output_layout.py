"""Which of a per-example function's outputs are per token.

A batched output ``[rows, n, ...]`` is per token when ``n`` is the batch's
padded length, but an output can be that long by accident (an embedding of
384 values in a bucket of 384 tokens; a vector of 3 moments in a batch of
3-token rows). So the question is put to the function itself: its output
shapes are evaluated (tracing only) on one row and on the same row one token
longer, and only the outputs that grow with it are per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxbatch._src.base.tree_names import joined_names
from jaxbatch._src.collate import keys


@dataclass
class Column:
    """One output's values for a run of examples: ``values`` [n, *shape]
    (fixed) or [sum(lengths), *inner] with ``lengths`` [n] (per token, or
    per node or edge of a graph)."""

    values: np.ndarray
    lengths: np.ndarray | None = None


def leaf_names(out: Any) -> list[tuple[str, Any]]:
    """(column name, leaf) for every leaf of an output pytree: a bare array is
    ``output``; dict keys and sequence indices are joined with dots. Two
    leaves that would make one name are refused, naming both."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(out)[0]
    paths = [path for path, _ in leaves]
    names = joined_names(paths, ".", "", "the function's output", empty="output")
    if keys.EXAMPLE_INDEX in names:
        raise ValueError(f"output names {names} must not be 'example_index' (the job's own)")
    return list(zip(names, [leaf for _, leaf in leaves], strict=True))


def per_token_leaves(fun, batch) -> list[bool]:
    """Which output leaves are per token: those whose leading axis follows
    the example's padded length. Found by evaluating the function's output
    shapes (tracing only, nothing runs) on one row of the batch and on the
    same row one token longer, so an output that happens to be as long as
    the row (an embedding of 384 in a bucket of 384 tokens, or per-segment
    values as many as the tokens) is never mistaken for one."""
    import jax

    def row(extra: int):
        spec = {}
        for key, value in batch.items():
            shape = list(np.shape(value)[1:])
            if extra and _token_level_key(key, batch) and shape:
                shape[0] += extra
            spec[key] = jax.ShapeDtypeStruct(tuple(shape), np.asarray(value).dtype)
        return spec

    base = leaf_names(jax.eval_shape(fun, row(0)))
    longer = leaf_names(jax.eval_shape(fun, row(1)))
    length = batch.shape.length
    out = []
    for (name, a), (_, b) in zip(base, longer, strict=True):
        token = len(a.shape) >= 1 and a.shape[0] == length and b.shape[0] == length + 1
        if batch.packed and not token and (len(a.shape) < 1 or a.shape[0] != batch.shape.segments):
            raise ValueError(_not_per_segment(name, tuple(a.shape), batch))
        out.append(token)
    return out


def _not_per_segment(name: str, shape: tuple, batch) -> str:
    """Why an output of a packed row that is neither per token nor per
    segment has no per-example value, and what to return instead."""
    length, slots = batch.shape.length, batch.shape.segments
    column = batch.length_column
    if keys.example_lengths(batch, column) != keys.lengths(column):  # PatchPack's keys
        return (
            f"output {name!r} has shape {shape} per packed row: with PatchPack each row holds "
            f"up to {slots} images, so an output must be per image ([{slots}, ...], e.g. "
            f"jb.masked.segment_mean(x, row['{keys.segment_ids(column)}'], {slots})) or per "
            f"patch ([{length}, ...], each image's patches given back in order)"
        )
    return (
        f"output {name!r} has shape {shape} per packed row: "
        f"with Pack each row holds up to {slots} examples, so an output "
        f"must be per token ([{length}, ...]) or per segment ([{slots}, "
        f"...], e.g. jb.masked.segment_sum(x, row['<column>_segment_ids'], "
        f"{slots})); use AutoBuckets or PadToMax for one example per row"
    )


def _token_level_key(key: str, batch) -> bool:
    """Keys whose first per-row axis is a ragged column's token axis."""
    return any(key == column + s for column in batch.ragged_columns for s in keys.TOKEN_SUFFIXES)


def unbatch_per_token(out, leaves: list[bool]) -> bool | dict[str, bool]:
    """per_token= for :func:`jaxbatch.unbatch` of ``out`` from
    :func:`per_token_leaves`: one bool for a single array, one per key for a
    dict of arrays."""
    if isinstance(out, dict):
        return dict(zip(out, leaves, strict=True))
    return leaves[0]
