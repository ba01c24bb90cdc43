"""Hugging Face datasets as a source: their Arrow tables read in place.

A ``datasets.Dataset`` holds a pyarrow Table (memory-mapped from its cache
files, in record batches of 1,000 rows) and, after ``select``, ``shuffle``,
``train_test_split`` or ``filter``, an indices mapping: row i of the dataset
is row ``indices[i]`` of the table. Its columns become gathered core columns
over the table's chunks, in the mapping's order, without a copy of a value
and without ``flatten_indices()``. ``datasets`` itself is never imported
here: a caller that has a datasets.Dataset has imported it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.data.arrow import column_from_arrow, supported_type


def is_huggingface_dataset(obj: Any) -> bool:
    """Whether `obj` is a ``datasets.Dataset`` (without importing datasets)."""
    module = sys.modules.get("datasets")
    return module is not None and isinstance(obj, module.Dataset)


def _refuse_other_kinds(ds: Any, who: str) -> None:
    module = sys.modules.get("datasets")
    if module is None or not is_huggingface_dataset(ds):
        if module is not None and isinstance(ds, module.DatasetDict):
            raise TypeError(
                f"{who}: expected one split, found a DatasetDict of {sorted(ds)}; "
                f"pass one of them, e.g. ds[{sorted(ds)[0]!r}]"
            )
        streaming = module is not None and (module.IterableDataset, module.IterableDatasetDict)
        if streaming and isinstance(ds, streaming):
            raise TypeError(
                f"{who}: expected a datasets.Dataset, found a streaming {type(ds).__name__}; "
                f"load it with streaming=False (its Arrow files are then memory-mapped)"
            )
        raise TypeError(f"{who}: expected a datasets.Dataset, found {type(ds).__name__}")


def huggingface_columns(
    ds: Any, columns: Sequence[str] | None, who: str
) -> tuple[list[_core.RaggedColumn], list[str]]:
    """The core columns of a ``datasets.Dataset`` and the files they are
    memory-mapped from. ``columns=None`` takes every numeric column and
    leaves the others out with a warning naming them; a named column of
    another type is a ValueError naming it and its type."""
    _refuse_other_kinds(ds, who)
    table = ds.data.table
    names = list(table.column_names)
    if columns is None:
        chosen = [n for n in names if supported_type(table.schema.field(n).type)]
        left = [f"{n} ({table.schema.field(n).type})" for n in names if n not in chosen]
        if left and chosen:
            warnings.warn(
                f"{who}: left out {len(left)} column(s) that are not numeric: "
                f"{', '.join(left)}; name the columns to use with columns=[...] to silence this",
                stacklevel=3,
            )
    else:
        chosen = list(columns)
        missing = [n for n in chosen if n not in names]
        if missing:
            raise ValueError(f"{who}: no column {missing[0]!r}; the dataset has {names}")
        bad = [n for n in chosen if not supported_type(table.schema.field(n).type)]
        if bad:
            raise ValueError(
                f"{who}: column {bad[0]!r} is {table.schema.field(bad[0]).type}; expected "
                f"numbers or bools, maybe in lists (list, large_list, fixed_size_list); leave it "
                f"out of columns="
            )
    if not chosen:
        raise ValueError(
            f"{who}: the dataset has no numeric column (its columns: "
            f"{[f'{n} ({table.schema.field(n).type})' for n in names]}); tokenize it first"
        )
    order = None
    if ds._indices is not None:  # select / shuffle / split / filter: rows in this order.
        order = ds._indices.column(0).to_numpy().astype(np.int64, copy=False)
    built = [column_from_arrow(n, table.column(n), 0, order) for n in chosen]
    files = [f["filename"] for f in ds.cache_files] if _is_memory_mapped(ds) else []
    return built, files


def _is_memory_mapped(ds: Any) -> bool:
    """Whether the table is read through memory-mapped cache files (whose
    truncation a Loader checks for before each batch)."""
    return type(ds.data).__name__ in ("MemoryMappedTable", "ConcatenationTable") and bool(
        ds.cache_files
    )
