"""Views: datasets over another dataset's examples, held by the engine.

A view (``ds.select``, ``ds.filter``, ``jb.Dataset.concat``, ``ds[a:b]``,
``ds.shard``) is a :class:`Dataset` whose columns the engine gathers in
place (data/view.h): no value is copied, and everything that takes a
Dataset takes a view. Python keeps only how to make it again (for pickling)
and what its parents read (mapped files, a graph layout).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.data.dataset import Dataset, mapped_files, set_mapped_files
from jaxbatch._src.data.dtypes import numpy_dtype

# ---- making views -------------------------------------------------------------


def select(dataset: Dataset, indices: Any, who: str = "Dataset.select") -> Dataset:
    """Examples `indices` of `dataset` (any order, repeats allowed; a
    negative index counts from the end). An empty selection is an empty
    dataset."""
    index = _as_index(indices, len(dataset), who)
    return _view(_core.select_examples(dataset._core, index), ("select", dataset, index), dataset)


def filter_examples(dataset: Dataset, predicate: Any, who: str = "Dataset.filter") -> Dataset:
    """The examples where `predicate` holds, in order: a bool array of one
    entry per example, or a function called once with every column (see
    :class:`FilterColumns`) that returns one."""
    mask = predicate(FilterColumns(dataset)) if callable(predicate) else predicate
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (len(dataset),):
        raise ValueError(
            f"{who}: expected a bool array of shape ({len(dataset)},) (one entry per example), "
            f"found {mask.dtype} of shape {mask.shape}"
        )
    return select(dataset, np.flatnonzero(mask), who)


def slice_examples(dataset: Dataset, key: slice) -> Dataset:
    """``dataset[key]``: a range (no index stored for a step of 1)."""
    begin, end, step = key.indices(len(dataset))
    if step != 1:
        return select(dataset, np.arange(begin, end, step, dtype=np.int64), "Dataset[...]")
    end = max(begin, end)
    core = _core.slice_examples(dataset._core, begin, end)
    return _view(core, ("slice", dataset, begin, end), dataset)


def shard(dataset: Dataset, index: int, count: int) -> Dataset:
    """Part `index` of `count` contiguous parts (sizes within one)."""
    for name, value in (("index", index), ("count", count)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"Dataset.shard: {name} must be an int, found {value!r}")
    core = _core.shard_examples(dataset._core, int(index), int(count))
    return _view(core, ("shard", dataset, int(index), int(count)), dataset)


def concat(datasets: Sequence[Dataset]) -> Dataset:
    """`datasets` end to end; they need the same columns."""
    parts = list(datasets)
    for k, part in enumerate(parts):
        if not isinstance(part, Dataset):
            raise TypeError(
                f"Dataset.concat: expected jb.Dataset values, found {type(part).__name__} at "
                f"position {k}"
            )
    core = _core.concat_datasets([p._core for p in parts])
    return _view(core, ("concat", tuple(parts)), *parts)


def getitem(dataset: Dataset, key: Any) -> Any:
    """``dataset[key]``: an int gives the example (a dict of arrays), a slice
    a view of the range, a list or array of ints the selection, a bool array
    the examples where it is True."""
    if isinstance(key, int | np.integer) and not isinstance(key, bool):
        return dataset.example(int(key))
    if isinstance(key, slice):
        return slice_examples(dataset, key)
    if isinstance(key, np.ndarray | list | tuple | range):
        array = np.asarray(key)
        if array.dtype == np.bool_:
            return filter_examples(dataset, array, "Dataset[...]")
        return select(dataset, array, "Dataset[...]")
    raise TypeError(
        f"Dataset indices are an int (an example), a slice, a list or array of ints, or a bool "
        f"array; found {type(key).__name__}"
    )


def _as_index(indices: Any, size: int, who: str) -> np.ndarray:
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


def _view(core: _core.Dataset, recipe: tuple, *parents: Dataset) -> Dataset:
    """A Dataset over `core`, knowing its `recipe` (how to make it again
    from its parents, for pickling) and what its parents read."""
    view = Dataset(core)
    view._view = recipe
    set_mapped_files(view, dict.fromkeys(f for p in parents for f in mapped_files(p)))
    layout = getattr(parents[0], "_graph_layout", None)
    if layout is not None:
        view._graph_layout = layout
    return view


def rebuild(recipe: tuple) -> Dataset:
    """A pickled view made again over its unpickled parents."""
    kind, *args = recipe
    if kind == "select":
        return select(args[0], args[1])
    if kind == "slice":
        return slice_examples(args[0], slice(args[1], args[2]))
    if kind == "shard":
        return shard(*args)
    return concat(args[0])


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

    def __init__(self, dataset: Dataset):
        self._dataset = dataset
        self._cache: dict[str, Any] = {}
        names = dataset.column_names
        ragged = [n for n in names if not dataset._core.column(n).is_fixed]
        self._names = [*names, *(f"{n}_lengths" for n in ragged)]

    def __getitem__(self, key: str) -> Any:
        if key not in self._cache:
            self._cache[key] = self._read(key)
        return self._cache[key]

    def _read(self, key: str) -> Any:
        if key not in self._names:
            raise KeyError(f"Dataset.filter: no column {key!r}; the predicate sees {self._names}")
        core = self._dataset._core
        if key not in self._dataset.column_names:
            return core.column(key.removesuffix("_lengths")).lengths()
        col = core.column(key)
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
