"""Arrow columns of two variable axes into grid columns, values read in place.

Three Arrow layouts hold examples [h, w, *inner]:

* nested lists ``list<list<T>>`` (``large_list`` either level; ``T`` may be
  a ``fixed_size_list`` or, as Hugging Face's ``Array3D`` stores it, a
  ``list`` whose entries all have one length): h rows of w cells each;
* Hugging Face ``Array2D`` / ``Array3D`` extension types, whose storage is
  such nested lists;
* Arrow's ``fixed_shape_tensor`` extension type: every example of one shape.

The cells are the innermost values, back to back, so the values buffer is
used without a copy; only the cell offsets (one per example) are computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.data.arrow_nulls import refuse_nulls, values_in_use
from jaxbatch._src.data.arrow_values import values_and_inner
from jaxbatch._src.data.dtypes import dtype_name


def _pa():
    return require("pyarrow", "Dataset.from_arrow")


def _is_list(pa: Any, t: Any) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _storage_type(t: Any) -> Any:
    return t.storage_type if hasattr(t, "storage_type") else t


def is_grid_type(arrow_type: Any) -> bool:
    """Whether a column of `arrow_type` is a grid: nested lists of numbers
    (maybe an extension type over them) or a fixed_shape_tensor of rank >= 2."""
    pa = _pa()
    if _is_fixed_shape_tensor(arrow_type):
        return len(arrow_type.shape) >= 2
    t = _storage_type(arrow_type)
    if not (_is_list(pa, t) and _is_list(pa, t.value_type)):
        return False
    leaf = t.value_type.value_type
    if _is_list(pa, leaf):
        leaf = leaf.value_type
    while pa.types.is_fixed_size_list(leaf):
        leaf = leaf.value_type
    return pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)


def _is_fixed_shape_tensor(t: Any) -> bool:
    pa = _pa()
    kind = getattr(pa, "FixedShapeTensorType", None)
    return kind is not None and isinstance(t, kind)


# ---- one chunk -----------------------------------------------------------------


def _tensor_chunk(name: str, array: Any) -> tuple:
    """A fixed_shape_tensor chunk: every example h x w cells of the rest."""
    t = array.type
    if t.permutation is not None and list(t.permutation) != sorted(t.permutation):
        raise ValueError(
            f"column {name!r}: a fixed_shape_tensor with permutation {list(t.permutation)} is "
            f"not row-major; expected none (cast it to its logical layout first)"
        )
    shape = list(t.shape)
    values, extent, _ = values_and_inner(name, array.storage)
    h, w = shape[0], shape[1]
    offsets = np.arange(len(array) + 1, dtype=np.int64) * (h * w)
    shapes = np.tile(np.array([h, w], np.int64), (len(array), 1))
    return values, extent, shape[2:], offsets, shapes, np.zeros(len(array), bool)


def _nested_chunk(name: str, array: Any) -> tuple:
    """A nested-list chunk: (values, bytes the core may read, inner shape,
    cell offsets, [n, 2] shapes, per example whether its rows differ in
    length)."""
    pa = _pa()
    if hasattr(array, "storage"):
        array = array.storage
    outer, rows = values_in_use(array)
    middle, cells = values_in_use(rows)
    heights = np.diff(outer)
    row_lengths = np.diff(middle)
    starts = np.minimum(outer[:-1], max(len(row_lengths) - 1, 0))
    widths = np.where(heights > 0, row_lengths[starts] if len(row_lengths) else 0, 0)
    uneven = np.zeros(len(heights), bool)
    if len(row_lengths):
        owner = np.repeat(np.arange(len(heights)), heights)
        bad_rows = row_lengths != widths[owner]
        uneven[owner[bad_rows]] = True
    inner: list[int] = []
    if _is_list(pa, cells.type):  # Array3D's channels: lists that must share one length
        cell_offsets, leaf = values_in_use(cells)
        sizes = np.unique(np.diff(cell_offsets))
        if sizes.size > 1:
            raise ValueError(
                f"column {name!r}: the innermost lists of a grid are its cells' channels and "
                f"must share one length, found lengths {sizes[:5].tolist()}"
            )
        inner = [int(sizes[0])] if sizes.size else [0]
        cells = leaf
    values, extent, more = values_and_inner(name, cells)
    offsets = np.ascontiguousarray(middle[outer])
    shapes = np.stack([heights, widths], axis=1).astype(np.int64)
    return values, extent, inner + more, offsets, shapes, uneven


# ---- the column ----------------------------------------------------------------


def grid_from_arrow(
    name: str, arrays: list, first_example: int, order: np.ndarray | None
) -> _core.RaggedColumn:
    """A grid column over `arrays` (a column's validated chunks), as
    arrow.column_from_arrow reads any column: in place, in `order`."""
    tensor = _is_fixed_shape_tensor(arrays[0].type)
    storages = [a.storage if hasattr(a, "storage") else a for a in arrays]
    refuse_nulls(name, storages, first_example, order)
    parts = [(_tensor_chunk if tensor else _nested_chunk)(name, a) for a in arrays]
    uneven = np.concatenate([p[5] for p in parts])
    shapes = np.concatenate([p[4] for p in parts]).reshape(-1, 2)
    _refuse_uneven(name, uneven, shapes, first_example, order)
    values, extent, inner, offsets, _, _ = parts[0]
    dtype = dtype_name(values.dtype, f"column {name!r}")
    keep = ([(p[0], p[3]) for p in parts], arrays, order)
    if len(parts) == 1 and order is None:
        cells = _core.RaggedColumn.ragged(name, dtype, inner, extent, offsets, keep)
    else:
        chunks = [(p[1], p[3], len(p[3]) - 1) for p in parts]
        cells = _core.RaggedColumn.gathered(name, dtype, inner, False, chunks, order, keep)
        if order is not None:
            inside = (order >= 0) & (order < len(shapes))
            shapes = shapes[np.where(inside, order, 0)]  # the engine named any outside
    return _core.RaggedColumn.grid(cells, np.ascontiguousarray(shapes).reshape(-1))


def _refuse_uneven(
    name: str, uneven: np.ndarray, shapes: np.ndarray, first: int, order: np.ndarray | None
) -> None:
    """ValueError naming the first example whose rows differ in length
    (numbered as refuse_nulls numbers them)."""
    if order is None:
        bad = np.flatnonzero(uneven)
        rows, numbers = bad, bad + first
    else:
        inside = (order >= 0) & (order < len(uneven))
        bad = np.flatnonzero(inside & uneven[np.where(inside, order, 0)])
        rows, numbers = order[bad], bad
    if bad.size:
        h, w = shapes[int(rows[0])]
        raise ValueError(
            f"column {name!r}, example {int(numbers[0])}: a grid example's rows must all have "
            f"its first row's {w} cells, found rows of other lengths among its {h} rows"
        )
