"""Views: which examples a view takes, as the engine's views need them.

A view (``ds.select``, ``ds.filter``, ``jb.Dataset.concat``, ``ds[a:b]``,
``ds.shard``) is a :class:`Dataset` whose columns the engine gathers in
place (data/view.h): no value is copied. Here is what turns a user's
indices, mask or predicate into the index the engine takes; Dataset builds
the view and keeps how to make it again (for pickling).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.data.dtypes import numpy_dtype

# ---- which examples a view takes ---------------------------------------------------


def as_index(indices: Any, size: int, who: str) -> np.ndarray:
    """`indices` as a C-contiguous int64 array, negative ones counted from
    the end; the engine checks the range (naming the position)."""
    array = np.asarray(indices)
    if array.size == 0:
        return np.zeros(0, np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer) or array.ndim != 1:
        raise ValueError(
            f"{who}: expected a 1-D sequence of int indices, found {array.dtype} of shape "
            f"{array.shape} (a bool mask goes to Dataset.filter)"
        )
    if array.dtype == np.uint64 and array.max() >= 2**63:
        raise ValueError(f"{who}: index {array.max()} is past int64")
    array = array.astype(np.int64)
    return np.ascontiguousarray(np.where(array < 0, array + size, array))


def kept_index(core: _core.Dataset, predicate: Any, who: str) -> np.ndarray:
    """The examples where `predicate` holds, in order: a bool array of one
    entry per example, or a function called once with every column (see
    :class:`FilterColumns`) that returns one."""
    size = core.num_examples
    mask = predicate(FilterColumns(core)) if callable(predicate) else predicate
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (size,):
        raise ValueError(
            f"{who}: expected a bool array of shape ({size},) (one entry per example), "
            f"found {mask.dtype} of shape {mask.shape}"
        )
    return np.flatnonzero(mask)


def check_shard(index: Any, count: Any) -> tuple[int, int]:
    """(index, count) as ints; the engine checks their range."""
    for name, value in (("index", index), ("count", count)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"Dataset.shard: {name} must be an int, found {value!r}")
    return int(index), int(count)


def index_kind(key: Any) -> str:
    """What ``ds[key]`` asks for: "example", "slice", "select" or "filter";
    TypeError naming what is accepted for anything else."""
    if isinstance(key, int | np.integer) and not isinstance(key, bool):
        return "example"
    if isinstance(key, slice):
        return "slice"
    if isinstance(key, np.ndarray | list | tuple | range):
        return "filter" if np.asarray(key).dtype == np.bool_ else "select"
    raise TypeError(
        f"Dataset indices are an int (an example), a slice, a list or array of ints, or a bool "
        f"array; found {type(key).__name__}"
    )


# ---- what a filter sees ----------------------------------------------------------


class FilterColumns(Mapping[str, Any]):
    """Every column of a dataset at once, as a filter's predicate sees them:
    a fixed column ``name`` is its ``[num_examples, *inner]`` array; a ragged
    column ``name`` is its ``(values, offsets)`` pair (example ``i`` is
    ``values[offsets[i]:offsets[i + 1]]``, as ``from_arrays`` takes it) and
    ``name_lengths`` its lengths. Each is read once, when first asked for.

    Example::

        short_code = ds.filter(lambda c: (c["tokens_lengths"] < 512) & (c["lang"] == 3))
    """

    def __init__(self, core: _core.Dataset):
        self._core = core
        self._cache: dict[str, Any] = {}
        self._columns = core.column_names()
        ragged = [n for n in self._columns if not core.column(n).is_fixed]
        self._names = [*self._columns, *(f"{n}_lengths" for n in ragged)]

    def __getitem__(self, key: str) -> Any:
        if key not in self._cache:
            self._cache[key] = self._read(key)
        return self._cache[key]

    def _read(self, key: str) -> Any:
        if key not in self._names:
            raise KeyError(f"Dataset.filter: no column {key!r}; the predicate sees {self._names}")
        if key not in self._columns:
            return self._core.column(key.removesuffix("_lengths")).lengths()
        col = self._core.column(key)
        inner = tuple(col.inner_shape)
        values = col.copy_values().view(numpy_dtype(col.dtype)).reshape(-1, *inner)
        if col.is_fixed:
            return values
        offsets = np.zeros(col.num_examples + 1, np.int64)
        np.cumsum(col.lengths(), out=offsets[1:])
        return values, offsets

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
