"""Arrow columns into core columns without copying their values (pyarrow optional)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._dtypes import as_bytes, dtype_name


def _require_pyarrow():
    try:
        import pyarrow as pa
    except ImportError as e:  # pragma: no cover - pyarrow is installed in tests
        raise ImportError("Dataset.from_arrow needs pyarrow: pip install 'jaxbatch[arrow]'") from e
    return pa


def _single_array(name: str, column: Any):
    pa = _require_pyarrow()
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if column.null_count:
        first = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise ValueError(
            f"column {name!r}, example {first}: expected no nulls, found {column.null_count}"
        )
    return column


def _primitive_values(name: str, array: Any) -> np.ndarray:
    pa = _require_pyarrow()
    if array.null_count:
        raise ValueError(f"column {name!r}: expected no null values, found {array.null_count}")
    if pa.types.is_boolean(array.type):  # Arrow packs bools in bits: one copy.
        return array.to_numpy(zero_copy_only=False).astype(np.bool_)
    try:
        return array.to_numpy(zero_copy_only=True)
    except (pa.ArrowInvalid, NotImplementedError) as e:
        raise ValueError(
            f"column {name!r}: unsupported Arrow value type {array.type}; expected a "
            f"numeric or bool type, maybe inside list / large_list / fixed_size_list"
        ) from e


def _values_and_inner(name: str, child: Any) -> tuple[np.ndarray, list[int]]:
    """The flat values of a list's child and the inner shape its nesting gives."""
    pa = _require_pyarrow()
    inner: list[int] = []
    while pa.types.is_fixed_size_list(child.type):
        inner.append(child.type.list_size)
        child = child.flatten()
    values = _primitive_values(name, child)
    return values.reshape([-1, *inner]) if inner else values, inner


def column_from_arrow(name: str, column: Any) -> _core.RaggedColumn:
    """One core column from an Arrow array or chunked array."""
    pa = _require_pyarrow()
    array = _single_array(name, column)
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        offsets = np.asarray(array.offsets).astype(np.int64, copy=False)
        values, inner = _values_and_inner(name, array.values)
        return _core.RaggedColumn.ragged(
            name,
            dtype_name(values.dtype, f"column {name!r}"),
            inner,
            as_bytes(values),
            np.ascontiguousarray(offsets),
            (values, offsets, array),
        )
    if pa.types.is_fixed_size_list(array.type):
        values, inner = _values_and_inner(name, array)
        return _core.RaggedColumn.fixed(
            name,
            dtype_name(values.dtype, f"column {name!r}"),
            inner,
            as_bytes(values),
            len(array),
            (values, array),
        )
    values = _primitive_values(name, array)
    return _core.RaggedColumn.fixed(
        name,
        dtype_name(values.dtype, f"column {name!r}"),
        [],
        as_bytes(values),
        len(array),
        (values, array),
    )
