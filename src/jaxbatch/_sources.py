"""Opening a data source by path: Parquet, Arrow IPC, or .npy pairs, memory-mapped."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxbatch._dataset import Dataset


def open_source(
    path: str | os.PathLike,
    columns: Sequence[str] | None,
    length_column: str | None,
    aligned: Sequence[Sequence[str]] | None,
) -> Dataset:
    """A Dataset over the file (or .npy folder) at `path`, memory-mapped.

    * ``*.parquet``: read in bulk (all row groups) with memory mapping.
    * ``*.arrow`` / ``*.feather`` / ``*.ipc``: Arrow IPC, memory-mapped, no copy.
    * a folder of ``NAME.values.npy`` + ``NAME.offsets.npy`` (ragged) and
      ``NAME.npy`` (fixed) files, memory-mapped with numpy.

    Raises before anything starts: FileNotFoundError for a missing path,
    ValueError for a missing column or a length column that is not a list.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"Loader: no such file or folder: {p}")
    if p.is_dir():
        return _open_npy_folder(p, columns, length_column, aligned)
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        schema = pq.read_schema(p)
        _check_columns(p, schema, columns, length_column)
        table = pq.read_table(p, columns=list(columns) if columns else None, memory_map=True)
    elif suffix in (".arrow", ".feather", ".ipc"):
        import pyarrow as pa

        source = pa.memory_map(str(p), "r")
        try:
            table = pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source = pa.memory_map(str(p), "r")
            table = pa.ipc.open_stream(source).read_all()
        _check_columns(p, table.schema, columns, length_column)
        if columns:
            table = table.select(list(columns))
    else:
        raise ValueError(
            f"Loader: cannot read {p}: expected a .parquet, .arrow/.feather/.ipc file or a "
            f"folder of .npy files, found suffix {suffix!r}"
        )
    return Dataset.from_arrow(table, aligned=aligned)


def _check_columns(path, schema, columns, length_column) -> None:
    import pyarrow as pa

    names = list(schema.names)
    for name in [*(columns or []), *([length_column] if length_column else [])]:
        if name not in names:
            raise ValueError(f"Loader: {path} has no column {name!r}; its columns are {names}")
    wanted = length_column or (columns[0] if columns else None)
    if wanted is None:
        wanted = next(
            (f.name for f in schema if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)),
            None,
        )
        if wanted is None:
            raise ValueError(f"Loader: {path} has no list column to batch by; columns are {names}")
    field = schema.field(wanted)
    if not (pa.types.is_list(field.type) or pa.types.is_large_list(field.type)):
        raise ValueError(
            f"Loader: column {wanted!r} of {path} must be a list or large_list column to batch "
            f"by its lengths, found type {field.type}"
        )


def _open_npy_folder(folder: Path, columns, length_column, aligned) -> Dataset:
    found: dict[str, object] = {}
    for f in sorted(folder.glob("*.npy")):
        if f.name.endswith(".values.npy"):
            name = f.name[: -len(".values.npy")]
            offsets = folder / f"{name}.offsets.npy"
            if not offsets.exists():
                raise ValueError(f"Loader: {f} has no matching {offsets.name}")
            found[name] = (np.load(f, mmap_mode="r"), np.load(offsets, mmap_mode="r"))
        elif not f.name.endswith(".offsets.npy"):
            found[f.name[: -len(".npy")]] = np.load(f, mmap_mode="r")
    names = list(columns) if columns else list(found)
    for name in [*names, *([length_column] if length_column else [])]:
        if name not in found:
            raise ValueError(f"Loader: {folder} has no column {name!r}; found {sorted(found)}")
    wanted = length_column or (names[0] if names else None)
    if wanted is not None and not isinstance(found[wanted], tuple):
        raise ValueError(
            f"Loader: column {wanted!r} of {folder} is fixed-shape ({wanted}.npy); batching "
            f"needs a ragged column ({wanted}.values.npy + {wanted}.offsets.npy)"
        )
    return Dataset.from_arrays({n: found[n] for n in names}, aligned=aligned)
