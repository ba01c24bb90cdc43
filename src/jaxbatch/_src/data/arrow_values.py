"""The values of Arrow arrays as the core reads them: flat numpy values (no
copy but for bools), the bytes the core may read, and the inner shape that
fixed_size_list nesting gives. Shared by arrow (lists) and arrow_grid
(grids)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.data.dtypes import as_bytes, text_message


def primitive_values(name: str, array: Any) -> tuple[np.ndarray, np.ndarray]:
    """The values of a primitive array (no copy, but bools) and the bytes
    the core may read: from its first value to the end of those it declares,
    cut at the end of the Arrow buffer that holds them (its real size)."""
    pa = require("pyarrow", "Dataset.from_arrow")
    if array.null_count:  # Only in rows no example reads (refuse_nulls checked).
        array = pa.Array.from_buffers(array.type, len(array), [None, array.buffers()[1]], 0,
                                      array.offset)  # fmt: skip
    if pa.types.is_boolean(array.type):  # Arrow packs bools in bits: one copy.
        values = array.to_numpy(zero_copy_only=False).astype(np.bool_)
        return values, as_bytes(values)
    if _is_text(pa, array.type):
        raise ValueError(text_message(f"column {name!r}", f"Arrow type {array.type}"))
    try:
        values = array.to_numpy(zero_copy_only=True)
    except (pa.ArrowInvalid, NotImplementedError) as e:
        raise ValueError(
            f"column {name!r}: unsupported Arrow value type {array.type}; expected a "
            f"numeric or bool type, maybe inside list / large_list / fixed_size_list"
        ) from e
    return values, _buffer_extent(array, values.dtype.itemsize)


def _is_text(pa: Any, arrow_type: Any) -> bool:
    return any(
        check(arrow_type)
        for check in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                      pa.types.is_large_binary)
    )  # fmt: skip


def _buffer_extent(array: Any, itemsize: int) -> np.ndarray:
    buffer = array.buffers()[1]
    if buffer is None or len(array) == 0:
        return np.zeros(0, np.uint8)
    start = array.offset * itemsize
    end = min(buffer.size, start + len(array) * itemsize)
    return np.frombuffer(buffer, np.uint8)[start:end]


def values_and_inner(name: str, child: Any) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The flat values of a list's child (or of a fixed_size_list column),
    the bytes the core may read (see primitive_values) and the inner shape
    its nesting gives. Nulls were refused before (refuse_nulls): those left
    are in rows no example reads, and only their values' bytes are used."""
    pa = require("pyarrow", "Dataset.from_arrow")
    inner: list[int] = []
    while pa.types.is_fixed_size_list(child.type):
        size = child.type.list_size
        inner.append(size)
        # Slice to the rows in use (a sliced parent's child starts at its offset).
        child = child.values.slice(child.offset * size, len(child) * size)
    # Flat: the core takes the bytes (`extent`) and the shape, and refuses
    # a child shorter than a fixed_size_list's offset and length claim.
    values, extent = primitive_values(name, child)
    return values, extent, inner
