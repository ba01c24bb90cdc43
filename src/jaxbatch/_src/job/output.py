"""A job's per-example outputs: from a batch's outputs to columns, to
Parquet shards, and back (:func:`read_shards`).

Each output leaf becomes one column, keyed by ``example_index``:
* a per-example array of fixed shape (``[rows, *shape]`` in the batch; per
  segment ``[rows, S, *shape]`` for packed rows) -> one value per example
  (a scalar, or a fixed-size list of ``prod(shape)`` values);
* a per-token array (``[rows, L, *inner]``, L the batch's padded length)
  -> the example's own tokens only (a list of ``prod(inner)``-wide rows).
The shape and dtype ride in the Arrow field's metadata, so
:func:`read_output` (job/read.py) gives back numpy arrays of the shapes the
function returned. Everything here is vectorised per batch; no per-example
loop.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.collate import keys
from jaxbatch._src.collate.collate import Batch
from jaxbatch._src.data.dtypes import numpy_dtype
from jaxbatch._src.execute.output_layout import Column, leaf_names

_META_KIND, _META_SHAPE, _META_DTYPE = b"jaxbatch.kind", b"jaxbatch.shape", b"jaxbatch.dtype"
# Marks the column a table's rows are keyed on where it is not example_index.
_META_ROW_KEY = b"jaxbatch.row_key"
_ROW_KEY_METADATA = {_META_ROW_KEY: b"1"}
# What needs pyarrow here, for the ImportError without it.
_WRITING = "jb.run (it writes Parquet)"


def batch_columns(
    out: Any, keep: np.ndarray, batch: Batch, per_token: list[bool]
) -> tuple[np.ndarray, dict[str, Column]]:
    """The kept examples' indices and each output leaf's values, from a
    batch's outputs. ``keep`` marks the rows (padded) or segments (packed)
    whose outputs are written; ``per_token`` says which leaves are per token
    (:func:`per_token_leaves`)."""
    index = np.asarray(batch[keys.EXAMPLE_INDEX])
    examples = index[keep].astype(np.int64)
    length = batch.shape.length
    lengths = np.asarray(batch[keys.example_lengths(batch, batch.length_column)])
    columns = {}
    for (name, leaf), token_level in zip(leaf_names(out), per_token, strict=True):
        array = np.asarray(leaf)
        if array.ndim < 1 or array.shape[0] != index.shape[0]:
            raise ValueError(
                f"jb.run: output {name!r} has shape {array.shape}; expected a leading axis of "
                f"{index.shape[0]} rows (the function returns one value per example)"
            )
        if not token_level:
            if batch.packed and (array.ndim < 2 or array.shape[1] != index.shape[1]):
                raise ValueError(
                    f"jb.run: output {name!r} of a packed batch has shape {array.shape}; "
                    f"expected per-segment [rows, {index.shape[1]}, ...] or per-token "
                    f"[rows, {length}, ...]"
                )
            columns[name] = Column(array[keep])
        elif not batch.packed:
            n = lengths[keep]
            tokens = np.arange(length)[None, :] < n[:, None]
            columns[name] = Column(array[keep][tokens], n.astype(np.int64))
        else:
            # Segment k of a row holds slot k-1's tokens, back to back in slot
            # order, so the kept tokens in row-major order are the kept
            # segments' tokens in the order of lengths[keep].
            segment_ids = np.asarray(batch[keys.segment_ids(batch.length_column)])
            kept_slot = np.concatenate([np.zeros((keep.shape[0], 1), bool), keep], axis=1)
            tokens = np.take_along_axis(kept_slot, segment_ids.astype(np.int64), axis=1)
            columns[name] = Column(array[tokens], lengths[keep].astype(np.int64))
    return examples, columns


def concat_columns(pieces: list[dict[str, Column]]) -> dict[str, Column]:
    """One shard's columns from its batches' columns (same names and kinds)."""
    out = {}
    for name in pieces[0]:
        parts = [p[name] for p in pieces]
        kinds = {p.lengths is None for p in parts}
        shapes = {p.values.shape[1:] for p in parts}
        if len(kinds) != 1 or len(shapes) != 1:
            raise ValueError(
                f"jb.run: output {name!r} changes kind or shape between batches "
                f"({sorted(str(s) for s in shapes)}); every example must return the same "
                f"structure"
            )
        values = np.concatenate([p.values for p in parts])
        lengths = None if parts[0].lengths is None else np.concatenate([p.lengths for p in parts])
        out[name] = Column(values, lengths)
    return out


def to_table(examples: np.ndarray, columns: dict[str, Column], drawn: Any = None):
    """An Arrow table: ``example_index`` and one column per output. Over
    one pass of a mixture (`drawn`, a DrawnPass), `examples` are draw
    positions: the table holds each row's ``position`` (its key), its
    ``example_index`` within its source and its ``source_index``."""
    pa = require("pyarrow", _WRITING)

    examples = examples.astype(np.int64, copy=False)
    arrays, fields = [arrow_owned(examples)], [pa.field(keys.EXAMPLE_INDEX, pa.int64())]
    if drawn is not None:
        clash = sorted(set(columns) & set(keys.MIXTURE_KEYS))
        if clash:
            raise ValueError(
                f"jb.run: output {clash[0]!r} collides with the column a job over a mixture "
                f"writes beside each row ({', '.join(keys.MIXTURE_KEYS)}); rename it"
            )
        arrays = [arrays[0], arrow_owned(drawn.examples[examples])]
        arrays.append(arrow_owned(drawn.sources[examples]))
        fields = [
            pa.field(k, a.type, metadata=_ROW_KEY_METADATA if k == keys.POSITION else None)
            for k, a in zip(keys.MIXTURE_KEYS, arrays, strict=True)
        ]
    for name, column in columns.items():
        values = column.values
        inner = values.shape[1:]
        flat = _arrow_values(values.reshape(values.shape[0], -1) if inner else values)
        width = int(np.prod(inner)) if inner else 0
        if width:
            flat = pa.FixedSizeListArray.from_arrays(flat, width)
        kind = "fixed"
        if column.lengths is not None:
            offsets = np.zeros(len(column.lengths) + 1, dtype=np.int64)
            np.cumsum(column.lengths, out=offsets[1:])
            flat = pa.LargeListArray.from_arrays(arrow_owned(offsets), flat)
            kind = "tokens"
        metadata = {
            _META_KIND: kind.encode(),
            _META_SHAPE: json.dumps(list(inner)).encode(),
            _META_DTYPE: values.dtype.name.encode(),
        }
        arrays.append(flat)
        fields.append(pa.field(name, flat.type, metadata=metadata))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _arrow_values(values: np.ndarray):
    """A flat Arrow array of the values (bfloat16, which Arrow lacks, as uint16)."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.dtype.name == "bfloat16":
        flat = flat.view(np.uint16)
    return arrow_owned(flat)


# --- Memory Arrow owns -------------------------------------------------------------------------
# pa.array(numpy) and pa.BufferReader(bytes) wrap the Python object's memory
# without a copy; Arrow then releases it through the interpreter, and when an
# Arrow thread drops the last reference after interpreter shutdown began the
# process aborts ("terminate called without an active exception"; a script
# that read a job's output and exited did, about 1 time in 15, with jax
# imported). So everything handed to Arrow here is first copied into memory
# Arrow allocated: one memcpy of data about to be encoded or decoded anyway.


def arrow_owned(values: np.ndarray):
    """A 1-D Arrow array of `values` (a numeric or bool numpy array) in
    memory Arrow allocated and owns."""
    pa = require("pyarrow", _WRITING)

    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.dtype == np.bool_:
        return pa.array(flat)  # packed into bits: a buffer of Arrow's own already
    buffer = pa.allocate_buffer(flat.nbytes)
    np.frombuffer(buffer, np.uint8)[:] = flat.view(np.uint8)
    return pa.Array.from_buffers(pa.from_numpy_dtype(flat.dtype), len(flat), [None, buffer])


def arrow_owned_bytes(data: bytes):
    """`data` copied into a buffer Arrow allocated and owns."""
    pa = require("pyarrow", _WRITING)

    buffer = pa.allocate_buffer(len(data))
    np.frombuffer(buffer, np.uint8)[:] = np.frombuffer(data, np.uint8)
    return buffer


def encode_parquet(table) -> bytes:
    pa = require("pyarrow", _WRITING)
    pq = require("pyarrow.parquet", _WRITING)

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def from_table(table) -> dict[str, Any]:
    """numpy arrays from an output table: ``example_index`` [n]; a fixed
    column as [n, *shape]; a per-token column as a list of [length, *inner]."""
    out: dict[str, Any] = {keys.EXAMPLE_INDEX: _numpy(table.column(keys.EXAMPLE_INDEX))}
    for field in table.schema:
        if field.name == keys.EXAMPLE_INDEX:
            continue
        meta = field.metadata or {}
        shape = tuple(json.loads(meta.get(_META_SHAPE, b"[]")))
        dtype = _numpy_dtype(meta.get(_META_DTYPE, b"").decode())
        column = table.column(field.name).combine_chunks()
        if meta.get(_META_KIND) == b"tokens":
            offsets = _numpy(column.offsets)
            flat = _flat_values(column.values, dtype).reshape((-1, *shape))
            out[field.name] = [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        else:
            out[field.name] = _flat_values(column, dtype).reshape((len(column), *shape))
    return out


def _flat_values(array, dtype):
    pa = require("pyarrow", "jb.read_output")

    if pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    values = _numpy(array)
    if dtype is not None and values.dtype != dtype:
        values = values.view(dtype) if values.dtype.itemsize == dtype.itemsize else values
    return values


def _numpy(array) -> np.ndarray:
    """An Arrow array's (or chunked array's) values as numpy: a view of the
    values buffer for numbers without nulls, which is what a job writes.
    Not to_numpy(): it imports pandas, a second of a first read_output."""
    pa = require("pyarrow", "jb.read_output")

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    numbers = pa.types.is_integer(array.type) or pa.types.is_floating(array.type)
    if not numbers or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    dtype = np.dtype(array.type.to_pandas_dtype())
    values = np.frombuffer(array.buffers()[1], dtype, count=array.offset + len(array))
    return values[array.offset :]


def _numpy_dtype(name: str):
    if not name:
        return None

    return numpy_dtype(name)


def read_shards(shards: list[bytes], *, key_only: bool = False):
    """The shards' bytes as one Arrow table (``key_only``: only the column
    the rows are keyed on, :func:`row_key`)."""
    pa = require("pyarrow", "jb.read_output (it reads Parquet)")
    pq = require("pyarrow.parquet", "jb.read_output (it reads Parquet)")

    def read(data: bytes):
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset,
        # whose import (pandas included) took 1.3 s of a first read of 4 shards.
        file = pq.ParquetFile(pa.BufferReader(arrow_owned_bytes(data)))
        return file.read(columns=[row_key(file.schema_arrow)] if key_only else None)

    return pa.concat_tables([read(d) for d in shards])


def example_indices(table) -> np.ndarray:
    """A shard table's row keys as numpy: its ``example_index`` column, or
    over a mixture's pass its ``position`` (``example_index`` repeats there)."""
    return _numpy(table.column(row_key(table.schema)))


def row_key(schema) -> str:
    """The column an output table's rows are keyed and ordered on: the one
    to_table marked (a job over a mixture's pass: ``position``; an output of
    a plain job may have that name too), else ``example_index``."""
    for field in schema:
        if field.metadata and field.metadata.get(_META_ROW_KEY) == b"1":
            return field.name
    return keys.EXAMPLE_INDEX
