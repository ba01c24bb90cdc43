"""Arrow columns of two variable axes into grid columns, values read in place.

Four Arrow layouts hold examples [h, w, *inner]:

* nested lists ``list<list<T>>`` (``large_list`` either level; ``T`` may be
  a ``fixed_size_list`` or, as Hugging Face's ``Array3D`` stores it, a
  ``list`` whose entries all have one length): h rows of w cells each;
* Hugging Face ``Array2D`` / ``Array3D`` extension types, whose storage is
  such nested lists;
* Arrow's ``fixed_shape_tensor`` extension type: every example of one shape;
* Arrow's ``variable_shape_tensor`` canonical extension type (storage
  ``struct<data: list<T>, shape: fixed_size_list<int32>[ndim]>``): each
  example its own shape, row-major in ``data``. pyarrow reads it as a plain
  extension type over that storage; its dimensions after the first two
  must be the same for every example.

The cells are the innermost values, back to back, so the values buffer is
used without a copy; only the cell offsets (one per example) are computed.
"""

from __future__ import annotations

import re
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
    if _is_variable_shape_tensor(arrow_type):
        storage = arrow_type.storage_type
        data = storage.field("data").type
        return storage.field("shape").type.list_size >= 2 and _is_number(pa, data.value_type)
    t = _storage_type(arrow_type)
    if not (_is_list(pa, t) and _is_list(pa, t.value_type)):
        return False
    leaf = t.value_type.value_type
    if _is_list(pa, leaf):
        leaf = leaf.value_type
    while pa.types.is_fixed_size_list(leaf):
        leaf = leaf.value_type
    return _is_number(pa, leaf)


def _is_number(pa: Any, t: Any) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _is_fixed_shape_tensor(t: Any) -> bool:
    pa = _pa()
    kind = getattr(pa, "FixedShapeTensorType", None)
    return kind is not None and isinstance(t, kind)


VARIABLE_SHAPE_TENSOR = "arrow.variable_shape_tensor"


def _is_variable_shape_tensor(t: Any) -> bool:
    if getattr(t, "extension_name", None) != VARIABLE_SHAPE_TENSOR:
        return False
    storage = t.storage_type
    names = {storage.field(i).name for i in range(storage.num_fields)}
    return {"data", "shape"} <= names


def _permutation(t: Any) -> list[int] | None:
    """The type's permutation: pyarrow exposes the canonical type's metadata
    only in its text form (``..., permutation=[1,0]]``)."""
    found = re.search(r"permutation=\[([0-9, ]*)\]", str(t))
    return [int(p) for p in found.group(1).split(",") if p.strip()] if found else None


def _refuse_permuted(name: str, kind: str, permutation: Any) -> None:
    if permutation is not None and list(permutation) != sorted(permutation):
        raise ValueError(
            f"column {name!r}: a {kind} with permutation {list(permutation)} is not "
            f"row-major; expected none (cast it to its logical layout first)"
        )


# ---- one chunk -----------------------------------------------------------------


def _tensor_chunk(name: str, array: Any) -> tuple:
    """A fixed_shape_tensor chunk: every example h x w cells of the rest."""
    t = array.type
    _refuse_permuted(name, "fixed_shape_tensor", t.permutation)
    shape = list(t.shape)
    values, extent, _ = values_and_inner(name, array.storage)
    h, w = shape[0], shape[1]
    offsets = np.arange(len(array) + 1, dtype=np.int64) * (h * w)
    shapes = np.tile(np.array([h, w], np.int64), (len(array), 1))
    return values, extent, shape[2:], offsets, shapes, np.zeros(len(array), bool)


def _variable_tensor_chunk(
    name: str, data: Any, shape: Any, first: int, cell: list[int] | None
) -> tuple:
    """A variable_shape_tensor chunk (its `_tensor_fields`): example i is
    `shape[i]`, row-major in its `data` list; its first two dimensions are
    h and w, the rest (equal for every example: `cell`, the first chunk's,
    when given) the cell. Errors number the chunk's rows from `first` (the
    table's rows, before any order)."""
    if shape.null_count:
        raise ValueError(f"column {name!r}: expected a shape for every example, found nulls")
    ndim = shape.type.list_size
    dims = np.asarray(shape.flatten()).astype(np.int64).reshape(-1, ndim)
    if (dims < 0).any():
        bad = int(np.flatnonzero((dims < 0).any(axis=1))[0])
        negative = ", ".join(f"dimension {j} is {v}" for j, v in enumerate(dims[bad]) if v < 0)
        raise ValueError(
            f"column {name!r}, example {first + bad}: its shape {dims[bad].tolist()} has "
            f"negative dimensions ({negative}); expected sizes >= 0"
        )
    offsets, flat = values_in_use(data)
    cells = dims[:, 2:]
    if cell is None:
        cell = cells[0].tolist() if len(dims) else [0] * (ndim - 2)
    differs = (cells != np.array(cell, np.int64)).any(axis=1)
    if differs.any():
        bad = int(np.flatnonzero(differs)[0])
        raise ValueError(
            f"column {name!r}, example {first + bad}: a grid's cells must share one shape, "
            f"expected {cell} after (h, w), found {cells[bad].tolist()}"
        )
    inner = list(cell)
    per_cell = int(np.prod(inner, dtype=np.int64))
    sizes, expected = np.diff(offsets), dims[:, 0] * dims[:, 1] * per_cell
    if (sizes != expected).any():
        bad = int(np.flatnonzero(sizes != expected)[0])
        raise ValueError(
            f"column {name!r}, example {first + bad}: its shape {dims[bad].tolist()} holds "
            f"{int(expected[bad])} values, but its data has {int(sizes[bad])}"
        )
    values, extent, more = values_and_inner(name, flat)
    shapes = np.ascontiguousarray(dims[:, :2])
    return (
        values,
        extent,
        inner + more,
        offsets // max(per_cell, 1),
        shapes,
        np.zeros(len(dims), bool),
    )


def _tensor_fields(array: Any) -> tuple[Any, Any]:
    """A variable_shape_tensor's data and shape children, the struct's own
    offset and nulls applied (a null example becomes a null data list)."""
    storage = array.storage
    names = [storage.type.field(i).name for i in range(storage.type.num_fields)]
    children = storage.flatten()
    return children[names.index("data")], children[names.index("shape")]


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
    kind = arrays[0].type
    if _is_variable_shape_tensor(kind):
        _refuse_permuted(name, "variable_shape_tensor", _permutation(kind))
        fields = [_tensor_fields(a) for a in arrays]
        refuse_nulls(name, [data for data, _ in fields], first_example, order)
        starts = first_example + np.cumsum([0] + [len(a) for a in arrays[:-1]])
        parts, cell = [], None
        for (data, shape), first in zip(fields, starts, strict=True):
            parts.append(_variable_tensor_chunk(name, data, shape, int(first), cell))
            if cell is None and len(shape):  # the data's values are numbers: inner is the cell
                cell = parts[-1][2]
    else:
        chunk = _tensor_chunk if _is_fixed_shape_tensor(kind) else _nested_chunk
        refuse_nulls(name, [a.storage if hasattr(a, "storage") else a for a in arrays],
                     first_example, order)  # fmt: skip
        parts = [chunk(name, a) for a in arrays]
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
