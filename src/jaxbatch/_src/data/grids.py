"""Grid columns: examples of shape [h, w, *inner] (images, L x L pair features).

A grid column keeps its values as a ragged column whose rows are the
h * w cells of each example, row-major, and the engine keeps each
example's (h, w) beside them (RaggedColumn.grid). Columns name their
variable axes with ``axes=``: two names make a column a grid, one name
repeated is a tie (``("L", "L")`` is square, and beside ``tokens`` named
``("L",)`` as long as the tokens on both axes); the engine checks every
tie when the Dataset is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.ints import int64_array
from jaxbatch._src.data.dtypes import as_bytes, dtype_name

Axes = Mapping[str, Sequence[str]]

# ---- the axes declaration ------------------------------------------------------


def axes_of(axes: Axes | None, names: Sequence[str], who: str) -> dict[str, tuple[str, ...]]:
    """``axes`` checked against the columns: a mapping of column name to
    one axis name (a ragged column) or two (a grid column)."""
    out: dict[str, tuple[str, ...]] = {}
    for column, declared in (axes or {}).items():
        if column not in names:
            raise ValueError(f"{who}: axes= names column {column!r}; the columns are {list(names)}")
        if isinstance(declared, str) or not all(isinstance(a, str) for a in declared):
            raise ValueError(
                f"{who}: axes[{column!r}] must be a tuple of axis names, one per variable axis "
                f"(('L',) or ('h', 'w')), found {declared!r}"
            )
        if len(declared) not in (1, 2):
            raise ValueError(
                f"{who}: axes[{column!r}] names {len(declared)} axes; a column has one "
                f"variable axis (ragged) or two (grid), found {tuple(declared)}"
            )
        out[column] = tuple(declared)
    return out


def is_grid(axes: Mapping[str, tuple[str, ...]], name: str) -> bool:
    return len(axes.get(name, ())) == 2


def named(column: _core.RaggedColumn, axes: Mapping[str, tuple[str, ...]]) -> _core.RaggedColumn:
    """`column` with its declared axis names (the engine checks the count)."""
    declared = axes.get(column.name)
    return column if declared is None else _core.RaggedColumn.with_axes(column, list(declared))


# ---- from numpy ----------------------------------------------------------------


def grid_from_arrays(name: str, arrays: list[np.ndarray], dtype: Any) -> _core.RaggedColumn:
    """A grid column from per-example arrays [h_i, w_i, *inner] (one copy,
    in the engine): each is viewed as its h_i * w_i cells."""
    if not arrays:
        if dtype is None:
            raise ValueError(
                f"column {name!r}: cannot infer a dtype from an empty column; "
                f"pass dtypes={{{name!r}: ...}}"
            )
        target = np.dtype(dtype).newbyteorder("=")
        empty = _core.RaggedColumn.from_pieces(
            name, dtype_name(target, f"column {name!r}"), [], False, []
        )
        return _core.RaggedColumn.grid(empty, np.zeros(0, np.int64))
    for i, a in enumerate(arrays):
        if a.ndim < 2:
            raise ValueError(
                f"column {name!r}, example {i}: axes= declares two variable axes (a grid), "
                f"expected an array of rank >= 2 [h, w, ...], found shape {a.shape}"
            )
    cells = [np.ascontiguousarray(a).reshape(-1, *a.shape[2:]) for a in arrays]
    pieces = [(as_bytes(c), c.dtype.name, list(c.shape)) for c in cells]
    shapes = np.array([a.shape[:2] for a in arrays], np.int64).reshape(-1)
    target = arrays[0].dtype
    column = _core.RaggedColumn.from_pieces(
        name, dtype_name(target, f"column {name!r}"), list(arrays[0].shape[2:]), False, pieces
    )
    return _core.RaggedColumn.grid(column, shapes)


def grid_from_pair(name: str, values: np.ndarray, shapes: Any) -> _core.RaggedColumn:
    """A grid column over `values` [total cells, *inner] (no copy) and
    `shapes` [num_examples, 2]: example i is the next h_i * w_i cells."""
    shapes = np.asarray(shapes)
    if shapes.ndim != 2 or shapes.shape[1] != 2 or not np.issubdtype(shapes.dtype, np.integer):
        raise ValueError(
            f"column {name!r}: a grid column given as (values, shapes) needs integer shapes "
            f"[num_examples, 2] (h, w per example), found shape {shapes.shape} of {shapes.dtype}"
        )
    if values.ndim < 1:
        raise ValueError(f"column {name!r}: expected values [cells, ...], found a scalar")
    shapes = int64_array(
        shapes, f"column {name!r}", lambda k: f"example {k // 2}'s {('h', 'w')[k % 2]}"
    )
    offsets = np.zeros(len(shapes) + 1, np.int64)
    np.cumsum(np.maximum(shapes, 0).prod(axis=1), out=offsets[1:])
    values = np.ascontiguousarray(values)
    cells = _core.RaggedColumn.ragged(
        name,
        dtype_name(values.dtype, f"column {name!r}"),
        list(values.shape[1:]),
        as_bytes(values),
        offsets,
        (values, offsets),
    )
    return _core.RaggedColumn.grid(cells, shapes.reshape(-1))


def grid_state(column: _core.RaggedColumn) -> tuple:
    """What a pickle keeps of a column beyond its values and lengths."""
    shapes = np.stack([column.heights(), column.widths()], axis=1) if column.is_grid else None
    return (shapes, list(column.axes))


def rebuilt(column: _core.RaggedColumn, shapes: Any, axes: list[str]) -> _core.RaggedColumn:
    if shapes is not None:
        column = _core.RaggedColumn.grid(column, np.asarray(shapes, np.int64).reshape(-1))
    return _core.RaggedColumn.with_axes(column, axes) if axes else column
