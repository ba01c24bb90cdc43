"""Arrow columns into core columns without copying their values (pyarrow optional)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.data.arrow_grid import grid_from_arrow, is_grid_type
from jaxbatch._src.data.arrow_nulls import refuse_nulls, values_in_use
from jaxbatch._src.data.arrow_values import primitive_values, values_and_inner
from jaxbatch._src.data.dtypes import dtype_name


def _require_pyarrow():
    return require("pyarrow", "Dataset.from_arrow")


def supported_type(arrow_type: Any) -> bool:
    """Whether a column of `arrow_type` can be a core column: numbers or
    bools, as they are (fixed), in one list or large_list (ragged), with
    fixed_size_lists inside (an inner shape), or nested lists and tensor
    types of two variable axes (a grid: see arrow_grid)."""
    pa = _require_pyarrow()
    if is_grid_type(arrow_type):
        return True
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        arrow_type = arrow_type.value_type
    while pa.types.is_fixed_size_list(arrow_type):
        arrow_type = arrow_type.value_type
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
    )


def refuse_repeated_names(names: list[str], who: str) -> None:
    """ValueError, starting ``"<who>: "``, for a name two columns share: an
    Arrow schema may hold two fields of one name, which a column's name
    could not tell apart (pyarrow itself finds neither by that name)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(
                f"{who}: {names.count(name)} columns are named {name!r}; expected one column "
                f"per name, so that a name says which column it is: rename them "
                f"(Table.rename_columns)"
            )
        seen.add(name)


def _validated(name: str, column: Any) -> None:
    """Arrow's own check of `column` against its buffers, before anything
    reads it: a crafted or damaged file can declare lengths, offsets or null
    counts its buffers do not hold, and Arrow reads them as declared.
    ``full=True`` also checks every offset and the null counts against the
    validity bitmaps: O(examples) for a list column (about 0.5 ns each,
    measured), nothing per value for the numeric types a column can have."""
    pa = _require_pyarrow()
    try:
        column.validate(full=True)
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"column {name!r}: invalid Arrow data (its lengths, offsets or null counts do not "
            f"match its buffers): {e}"
        ) from e


def _chunks(name: str, column: Any) -> list:
    """The arrays of `column` (an Arrow array or chunked array), validated."""
    pa = _require_pyarrow()
    _validated(name, column)
    if isinstance(column, pa.ChunkedArray):
        return list(column.chunks) or [column.combine_chunks()]  # no chunks: one empty array
    return [column]


def _chunk_parts(name: str, array: Any) -> tuple:
    """One Arrow array's part of a core column: (dtype name, inner shape,
    the bytes the core may read, int64 offsets or None when fixed, examples,
    what keeps the memory alive)."""
    pa = _require_pyarrow()
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        offsets, child = values_in_use(array)
        values, extent, inner = values_and_inner(name, child)
        offsets = np.ascontiguousarray(offsets)
        keep: tuple = (values, offsets, array)
    else:
        if pa.types.is_fixed_size_list(array.type):
            values, extent, inner = values_and_inner(name, array)
        else:
            values, extent = primitive_values(name, array)
            inner = []
        offsets, keep = None, (values, array)
    dtype = dtype_name(values.dtype, f"column {name!r}")
    return dtype, inner, extent, offsets, len(array), keep


_NO_OFFSETS = np.zeros(0, np.int64)


def column_from_arrow(
    name: str, column: Any, first_example: int = 0, order: np.ndarray | None = None
) -> _core.RaggedColumn:
    """One core column from an Arrow array or chunked array, read in place:
    a chunked array (a file's record batches) becomes a gathered column over
    its chunks, copying no value. The core reads only the bytes of the Arrow
    buffers that hold the values (their real sizes) and refuses offsets or
    lengths past them. `order` (int64), if given, is the examples' order:
    example i is example order[i] of the column (a Hugging Face indices
    mapping; only the rows it selects are checked for nulls). Errors number
    examples from `first_example` (a row group's first example in its
    file), or with `order` by their place in it."""
    arrays = _chunks(name, column)
    if order is not None:  # None: as they are; an empty order: no examples
        order = np.ascontiguousarray(order, dtype=np.int64)
    if is_grid_type(arrays[0].type):
        return grid_from_arrow(name, arrays, first_example, order)
    refuse_nulls(name, arrays, first_example, order)
    parts = [_chunk_parts(name, array) for array in arrays]
    dtype, inner, extent, offsets, count, keep = parts[0]
    if len(parts) == 1 and order is None:
        if offsets is not None:
            return _core.RaggedColumn.ragged(name, dtype, inner, extent, offsets, keep)
        return _core.RaggedColumn.fixed(name, dtype, inner, extent, count, keep)
    chunks = [(p[2], _NO_OFFSETS if p[3] is None else p[3], p[4]) for p in parts]
    fixed = offsets is None
    return _core.RaggedColumn.gathered(
        name, dtype, inner, fixed, chunks, order, ([p[5] for p in parts], order)
    )
