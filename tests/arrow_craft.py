"""Crafted Arrow IPC data: a valid table written by pyarrow's IPC writer,
then the lengths, null counts and buffer sizes its record batches declare
edited in the bytes, as a hostile or damaged file has them.

pyarrow's builders (``pa.Array.from_buffers``) run ``Array.validate()``, so
an array that declares more than its buffers hold can only come from bytes:
this edits the flatbuffer metadata of each record batch message (its
``FieldNode`` and ``Buffer`` structs, fixed-size fields that are rewritten
in place) and the body those buffers point into.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pyarrow as pa

_FILE_MAGIC = b"ARROW1"
_RECORD_BATCH = 3  # MessageHeader.RecordBatch


@dataclasses.dataclass(frozen=True)
class RecordBatchLayout:
    """Where one record batch's declared fields lie in the bytes: each is
    the position of an int64 (see Message.fbs)."""

    length: int  # RecordBatch.length
    node_lengths: list[int]  # FieldNode.length, in depth-first field order
    node_null_counts: list[int]
    buffer_offsets: list[int]  # Buffer.offset (into the body)
    buffer_lengths: list[int]
    body: int  # where the body starts

    def fields(self) -> list[int]:
        return [
            self.length,
            *self.node_lengths,
            *self.node_null_counts,
            *self.buffer_offsets,
            *self.buffer_lengths,
        ]


def ipc_bytes(table: pa.Table, *, stream: bool) -> bytes:
    """`table` written as an Arrow IPC stream or file."""
    sink = pa.BufferOutputStream()
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _u32(data, pos: int) -> int:
    return struct.unpack_from("<I", data, pos)[0]


def _table_fields(data, table: int):
    """A flatbuffer table at `table`: field(i) -> its position, or None."""
    vtable = table - struct.unpack_from("<i", data, table)[0]
    vtable_size = struct.unpack_from("<H", data, vtable)[0]

    def field(i: int) -> int | None:
        entry = 4 + 2 * i
        if entry >= vtable_size:
            return None
        offset = struct.unpack_from("<H", data, vtable + entry)[0]
        return table + offset if offset else None

    return field


def _struct_vector(data, field_pos: int | None) -> list[int]:
    """Positions of the 16-byte structs of the vector a field points to."""
    if field_pos is None:
        return []
    vector = field_pos + _u32(data, field_pos)
    return [vector + 4 + 16 * k for k in range(_u32(data, vector))]


def record_batches(data: bytes) -> list[RecordBatchLayout]:
    """The record batch messages of an IPC stream or file."""
    pos = 8 if data.startswith(_FILE_MAGIC) else 0
    out = []
    while pos + 8 <= len(data):
        if _u32(data, pos) == 0xFFFFFFFF:  # continuation marker, then the length
            pos += 4
        size = struct.unpack_from("<i", data, pos)[0]
        if size <= 0:  # end of stream (the file's footer follows)
            break
        root = pos + 4
        message = _table_fields(data, root + _u32(data, root))
        header_type = message(1)
        body_length_pos = message(3)
        body_length = struct.unpack_from("<q", data, body_length_pos)[0] if body_length_pos else 0
        body = root + size
        if header_type is not None and data[header_type] == _RECORD_BATCH:
            header = message(2)
            batch = _table_fields(data, header + _u32(data, header))
            nodes = _struct_vector(data, batch(1))
            buffers = _struct_vector(data, batch(2))
            out.append(
                RecordBatchLayout(
                    length=batch(0),
                    node_lengths=nodes,
                    node_null_counts=[p + 8 for p in nodes],
                    buffer_offsets=buffers,
                    buffer_lengths=[p + 8 for p in buffers],
                    body=body,
                )
            )
        pos = body + body_length
    return out


def read_int64(data, pos: int) -> int:
    return struct.unpack_from("<q", data, pos)[0]


def write_int64(data: bytearray, pos: int, value: int) -> None:
    struct.pack_into("<q", data, pos, value)


DECLARED = 10_000_000  # values the crafted file of issue 15 declares, over 40 bytes


def issue_15_file(*, stream: bool, declared: int = DECLARED) -> bytes:
    """The crafted file of issue 15: a list<int32> column of 2 examples
    whose values child declares `declared` values (offsets 0, declared / 2,
    declared) over a values buffer of 40 bytes (10 int32)."""
    values = pa.array(np.arange(10, dtype=np.int32))
    offsets = pa.py_buffer(np.array([0, 5, 10], np.int32).tobytes())
    tokens = pa.ListArray.from_buffers(pa.list_(pa.int32()), 2, [None, offsets], children=[values])
    data = bytearray(ipc_bytes(pa.table({"tokens": tokens}), stream=stream))
    (batch,) = record_batches(bytes(data))
    write_int64(data, batch.node_lengths[1], declared)  # node 1: the values child
    # Buffers: the list's validity and offsets, then the child's validity and values.
    at = batch.body + read_int64(data, batch.buffer_offsets[1])
    struct.pack_into("<3i", data, at, 0, declared // 2, declared)
    return bytes(data)


def overstated_fixed_file(*, stream: bool, declared: int = DECLARED) -> bytes:
    """A fixed int64 column of 5 examples whose node declares `declared`
    examples over its 40-byte values buffer."""
    data = bytearray(ipc_bytes(pa.table({"label": np.arange(5, dtype=np.int64)}), stream=stream))
    (batch,) = record_batches(bytes(data))
    write_int64(data, batch.length, declared)
    write_int64(data, batch.node_lengths[0], declared)
    return bytes(data)
