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

import io
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.ints import int64_array
from jaxbatch._src.data.arrow import column_from_arrow, supported_type
from jaxbatch._src.data.dtypes import text_message
from jaxbatch._src.data.grids import grid_from_arrays


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


# Formats whose rows hold the table's values in another container (ds[i]
# as numpy arrays, tensors, a DataFrame): reading the table reads them.
# "custom" (with_transform / set_transform) and any other registered format
# run code on each row that jaxbatch, reading Arrow in place, cannot run.
_TABLE_FORMATS = (None, "arrow", "numpy", "pandas", "polars", "torch", "tensorflow", "jax")
# Format options that place the values (on a device) without changing them;
# any other (dtype=) changes what ds[i] holds.
_PLACING_OPTIONS = frozenset({"device"})


def _shown_columns(ds: Any, names: list[str], who: str) -> list[str]:
    """The table's columns that ``ds[i]`` shows (a format's columns=, unless
    output_all_columns), after refusing a format whose rows are not the
    table's: its transform would have to run on every row."""
    fmt = ds.format
    kind = fmt.get("type")
    if kind not in _TABLE_FORMATS:
        how = "with_transform / set_transform" if kind == "custom" else f"format {kind!r}"
        raise ValueError(
            f"{who}: the dataset has a transform ({how}), so its rows ds[i] are what the "
            f"transform returns, not the rows of its Arrow table, which jaxbatch reads in "
            f"place; apply the transform with ds.with_format(None).map(transform, batched=True), "
            f"which writes its rows to Arrow files jaxbatch reads in place (a map of the "
            f"transformed ds would keep the transform, applied again on top)"
        )
    changing = sorted(set(fmt.get("format_kwargs") or {}) - _PLACING_OPTIONS)
    if changing:
        raise ValueError(
            f"{who}: the dataset's format {kind!r} has {', '.join(k + '=' for k in changing)} "
            f"which changes the values ds[i] holds, but jaxbatch reads its Arrow table's; "
            f"cast the dataset instead (ds.cast_column or ds.map write Arrow files jaxbatch "
            f"reads) or ds.reset_format() to read the table as it is"
        )
    if fmt.get("output_all_columns") or fmt.get("columns") is None:
        return names
    return [n for n in names if n in fmt["columns"]]


def huggingface_columns(
    ds: Any, columns: Sequence[str] | None, who: str
) -> tuple[list[_core.RaggedColumn], list[str]]:
    """The core columns of a ``datasets.Dataset`` and the files they are
    memory-mapped from. ``columns=None`` takes every numeric column that
    ``ds[i]`` shows (a format's columns=) and leaves the others out with a
    warning naming them; a named column of another type is a ValueError
    naming it and its type. A named column a format hides is read: its rows
    are the table's all the same. A transform is refused (_shown_columns)."""
    # What the dataset itself says first (its kind, format, images, order,
    # files) and its images decoded; then the Arrow columns, each read once.
    table, order = huggingface_table(ds, who)
    names = list(table.column_names)
    shown = _shown_columns(ds, names, who)
    missing = [n for n in columns or [] if n not in names]
    if missing:
        raise ValueError(f"{who}: no column {missing[0]!r}; the dataset has {names}")
    # An Image column is decoded only where named (its bytes are no numbers).
    images = set(_image_columns(ds)) if columns is not None else set()
    files = [f["filename"] for f in ds.cache_files] if _is_memory_mapped(ds) else []
    decoded = {  # Images are taken only where named.
        n: _decoded_images(n, table.column(n), order, ds.features[n].mode)
        for n in columns or []
        if n in images
    }
    chosen = _chosen(table, shown, columns, images, who)
    built = [
        decoded[n] if n in decoded else column_from_arrow(n, table.column(n), 0, order)
        for n in chosen
    ]
    return built, files


def huggingface_table(ds: Any, who: str) -> tuple[Any, np.ndarray | None]:
    """A ``datasets.Dataset``'s pyarrow Table, read in place, and the order
    of its rows (int64: row i of the dataset is row order[i] of the table),
    None when they are in the table's order. Refuses what is not one
    dataset (a DatasetDict, a streaming one) and a transform, which changes
    what ``ds[i]`` holds, naming them."""
    _refuse_other_kinds(ds, who)
    table = ds.data.table
    _shown_columns(ds, list(table.column_names), who)
    if ds._indices is None:
        return table, None
    # select / shuffle / split / filter: the rows in this order.
    indices = ds._indices.column(0).to_numpy()  # uint64
    return table, int64_array(indices, who, lambda k: f"indices[{k}]")


def _chosen(table: Any, shown: list[str], columns, images: set[str], who: str) -> list[str]:
    """The columns to build: `columns` (each numeric or an image), or every
    numeric column shown, with a warning naming the ones left out."""
    candidates = shown if columns is None else [n for n in columns if n not in images]
    numeric = [n for n in candidates if supported_type(table.schema.field(n).type)]
    if columns is None:
        chosen = numeric
        left = [f"{n} ({table.schema.field(n).type})" for n in shown if n not in chosen]
        if left and chosen:
            warnings.warn(
                f"{who}: left out {len(left)} column(s) that are not numeric: "
                f"{', '.join(left)}; name the columns to use with columns=[...] to silence this",
                stacklevel=4,
            )
    else:
        chosen = list(columns)
        bad = [n for n in candidates if n not in numeric]
        text = [n for n in bad if str(table.schema.field(n).type) in ("string", "large_string")]
        if text:
            found = f"Arrow type {table.schema.field(text[0]).type}"
            raise ValueError(text_message(f"{who}: column {text[0]!r}", found))
        if bad:
            raise ValueError(
                f"{who}: column {bad[0]!r} is {table.schema.field(bad[0]).type}; expected "
                f"numbers or bools, maybe in lists (list, large_list, fixed_size_list); leave it "
                f"out of columns="
            )
    if not chosen:
        raise ValueError(
            f"{who}: the dataset has no numeric column (its columns: "
            f"{[f'{n} ({table.schema.field(n).type})' for n in shown]}); tokenize it first: "
            f"jb.tokenize(dataset, output_folder, tokenizer) writes a folder a jb.Loader reads"
        )
    return chosen


def _is_memory_mapped(ds: Any) -> bool:
    """Whether the table is read through memory-mapped cache files (whose
    truncation a Loader checks for before each batch)."""
    return type(ds.data).__name__ in ("MemoryMappedTable", "ConcatenationTable") and bool(
        ds.cache_files
    )


def _image_columns(ds: Any) -> list[str]:
    """The columns whose feature is ``datasets.Image`` (PNG/JPEG bytes)."""
    module = sys.modules.get("datasets")
    kind = getattr(module, "Image", None)
    return [n for n, f in (ds.features or {}).items() if kind is not None and isinstance(f, kind)]


def _decoded_images(
    name: str, column: Any, order: np.ndarray | None, mode: str | None
) -> _core.RaggedColumn:
    """An Image column decoded with Pillow into a grid column of pixels
    [h, w] or [h, w, channels] (one copy: the file holds compressed bytes).
    Every image must decode to one dtype and channel count; the error names
    the first that does not, so a user converts them (ds.cast_column with
    Image(mode=...)) instead of jaxbatch converting silently."""
    from PIL import Image  # datasets' own dependency for Image columns

    rows = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    picked = range(len(rows)) if order is None else order
    arrays = []
    for i, row in enumerate(picked):
        item = rows[int(row)].as_py()
        if item is None:
            raise ValueError(f"column {name!r}, example {i}: expected an image, found a null")
        source = io.BytesIO(item["bytes"]) if item.get("bytes") is not None else item["path"]
        with Image.open(source) as image:
            # What ds[i] holds: a feature's mode= converts on decoding.
            pixels = np.asarray(image.convert(mode) if mode and image.mode != mode else image)
        if arrays and (pixels.dtype, pixels.shape[2:]) != (arrays[0].dtype, arrays[0].shape[2:]):
            raise ValueError(
                f"column {name!r}, example {i}: decodes to {pixels.dtype} pixels of shape "
                f"{pixels.shape[2:]} but example 0 to {arrays[0].dtype} of {arrays[0].shape[2:]}; "
                f"give every image one mode (ds.cast_column({name!r}, datasets.Image(mode='RGB')))"
            )
        arrays.append(pixels)
    return grid_from_arrays(name, arrays, np.uint8 if not arrays else None)
