"""Text in: the documents of a text column, read in batches of Arrow strings
(what jb.tokenize tokenizes), from

* a list or tuple of strings;
* a Parquet file, read by row group (a corpus larger than memory streams);
* an Arrow IPC file, memory-mapped;
* a JSON Lines file (one JSON object a line), read by pyarrow.json in blocks;
* a pyarrow Table, or a Hugging Face ``datasets.Dataset`` read in place in
  its indices' order (as ``ds[i]`` shows its rows).

Document i is the i-th item of the list, the i-th row of the table or file,
or the i-th non-blank line of a JSON Lines file. A document that is not a
text (a list item that is not a ``str``, a line that is not a JSON object, a
value that is not a string, bytes that are not UTF-8) is read as null, with
the reason, so that the job raises, skips or quarantines it as it does a
null one. Reading is vectorised (pyarrow); the per-document Python loops
here run only on a batch pyarrow refused, to find which documents it
refused and why.

A source's fingerprint keys a job on its documents: a file's bytes (the
engine's HashFile), or, for text in memory, every document's length and
bytes (the engine's TextFingerprint).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.data.sources import check_path, read_arrow_ipc, reading
from jaxbatch._src.integrations.huggingface import huggingface_table, is_huggingface_dataset

#: Documents a read hands on at a time (a Parquet file's batches, a list's slices).
READ_DOCUMENTS = 4096
#: Bytes pyarrow.json parses at a time, and at most (a longer line than a
#: block is read again in larger blocks, up to this; past it, line by line).
JSON_BLOCK_BYTES = 1 << 20
JSON_MAX_BLOCK_BYTES = 1 << 30
#: The text column of a JSON Lines file unless text_column= names another.
JSON_TEXT_FIELD = "text"
_SUFFIXES = {
    ".parquet": "Parquet",
    ".arrow": "Arrow IPC",
    ".feather": "Arrow IPC",
    ".ipc": "Arrow IPC",
    ".jsonl": "JSON Lines",
    ".ndjson": "JSON Lines",
}
# What JSON calls blank between values: a line of only these is no document.
_JSON_BLANK = b" \t\r\n"


def _pyarrow():
    return require("pyarrow", "jb.tokenize (it reads text with pyarrow)")


@dataclasses.dataclass(frozen=True)
class TextBatch:
    """Documents ``first, first + 1, ...`` as a pyarrow LargeStringArray
    (null where a document has no text) and, by position in the batch, why
    a document read as null is not a text."""

    first: int
    texts: Any
    problems: dict[int, str]

    def __len__(self) -> int:
        return len(self.texts)

    def slice(self, start: int, stop: int) -> TextBatch:
        """Positions [start, stop) of the batch, without a copy."""
        problems = {i - start: p for i, p in self.problems.items() if start <= i < stop}
        return TextBatch(self.first + start, self.texts.slice(start, stop - start), problems)

    @staticmethod
    def join(parts: list[TextBatch]) -> TextBatch:
        """Consecutive batches as one (one copy of their texts)."""
        if len(parts) == 1:
            return parts[0]
        pa = _pyarrow()
        problems, offset = {}, 0
        for part in parts:
            problems.update({offset + i: p for i, p in part.problems.items()})
            offset += len(part)
        texts = pa.concat_arrays([p.texts for p in parts])
        return TextBatch(parts[0].first, texts, problems)


class TextSource:
    """Documents to tokenize. ``name`` says where they come from in
    messages, ``path`` is the file read (None for text in memory), ``column``
    the text column (None for a list), ``count`` the documents (None where
    only reading them all tells: JSON Lines), ``null_reason`` what a null
    document is called."""

    name: str
    path: str | None = None
    column: str | None = None
    count: int | None = None
    null_reason = "no text (null)"

    def batches(self, start: int) -> Iterator[TextBatch]:
        """The documents from `start` on, in batches of any size."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """What a job keys its input on (hexadecimal)."""
        if self.path is not None:
            return f"{_core.hash_file(self.path):016x}"
        fingerprint = _core.TextFingerprint()
        for batch in self.batches(0):
            fingerprint.add(*_buffers(batch.texts))
        return f"{fingerprint.digest():016x}"


def open_text(source: Any, text_column: str | None, who: str) -> TextSource:
    """The documents of `source` (see the module), checked: a missing file,
    a file of another kind, a missing or non-text column are refused here,
    before anything is tokenized, with messages starting with `who`.

    Example::

        texts = open_text("corpus.jsonl", None, "jb.tokenize")  # its "text" field
        for batch in texts.batches(0):
            batch.texts  # pyarrow LargeStringArray
    """
    if isinstance(source, str | os.PathLike):
        return _open_file(Path(source), text_column, who)
    if isinstance(source, list | tuple):
        if text_column is not None:
            raise ValueError(
                f"{who}: text_column={text_column!r} names a column of a file or table; a "
                f"list of strings has none"
            )
        return ListText(source)
    if is_huggingface_dataset(source):
        table, order = huggingface_table(source, who)
        name = "the Hugging Face dataset"
        column = text_column_of(table.schema, text_column, name, who)
        return ArrowText(table.column(column), name, column, order=order)
    pa = _pyarrow()
    if isinstance(source, pa.Table | pa.RecordBatch):
        name = f"the {type(source).__name__}"
        column = text_column_of(source.schema, text_column, name, who)
        return ArrowText(source.column(column), name, column)
    raise TypeError(
        f"{who}: expected a list of strings, a path (Parquet, Arrow IPC or JSON Lines), a "
        f"pyarrow Table or a Hugging Face datasets.Dataset, found {type(source).__name__}"
    )


def _open_file(p: Path, text_column: str | None, who: str) -> TextSource:
    check_path(p, who)
    kind = _SUFFIXES.get(p.suffix.lower())
    if p.is_dir() or kind is None:
        raise ValueError(
            f"{who}: cannot read text from {p}: expected a file named {', '.join(_SUFFIXES)} "
            f"(Parquet, Arrow IPC or JSON Lines)"
        )
    if kind == "JSON Lines":
        return JsonLinesText(p, text_column or JSON_TEXT_FIELD, who)
    if kind == "Parquet":
        return ParquetText(p, text_column, who)
    table = read_arrow_ipc(p, who)
    column = text_column_of(table.schema, text_column, str(p), who)
    return ArrowText(table.column(column), str(p), column, path=str(p))


# -- Columns of text -----------------------------------------------------------


def _is_text(t: Any) -> bool:
    pa = _pyarrow()
    if pa.types.is_dictionary(t):
        t = t.value_type
    view = getattr(pa.types, "is_string_view", None)  # pyarrow >= 16
    return pa.types.is_string(t) or pa.types.is_large_string(t) or bool(view and view(t))


def text_column_of(schema: Any, text_column: str | None, where: str, who: str) -> str:
    """The text column of `schema`: the one named, or else the only string
    column (or the one named ``text`` among several). ValueError naming
    the columns when there is none, or the named one holds no text."""
    pa = _pyarrow()
    names = list(schema.names)
    if text_column is not None:
        if text_column not in names:
            raise ValueError(
                f"{who}: {where} has no column {text_column!r}; its columns are {names}"
            )
        t = schema.field(text_column).type
        if not _is_text(t):
            binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
            raise ValueError(
                f"{who}: column {text_column!r} of {where} holds {t}, not text (strings)"
                + ("; decode its bytes to strings first" if binary else "")
            )
        return text_column
    texts = [f.name for f in schema if _is_text(f.type)]
    if len(texts) == 1:
        return texts[0]
    if JSON_TEXT_FIELD in texts:
        return JSON_TEXT_FIELD
    found = f"string columns {texts}" if texts else f"no string column (columns: {names})"
    raise ValueError(f"{who}: {where} has {found}; name the text column with text_column=")


def large_strings(array: Any) -> Any:
    """`array` (strings of any Arrow kind) as a LargeStringArray."""
    pa = _pyarrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array if pa.types.is_large_string(array.type) else array.cast(pa.large_string())


def checked_utf8(array: Any, where: str, first: int) -> tuple[Any, dict[int, str]]:
    """`array` with documents that are not UTF-8 made null, and why, by
    position. Arrow checks UTF-8 at several GB/s; only a batch that fails
    is looked at document by document. A column whose offsets do not fit
    its buffers (a damaged file) is an OSError naming `where`."""
    pa = _pyarrow()
    try:
        array.validate(full=True)
        return array, {}
    except pa.ArrowInvalid:
        pass
    binary = array.view(pa.large_binary())
    try:
        binary.validate(full=True)
    except pa.ArrowInvalid as e:
        raise OSError(
            f"{where}: documents {first} to {first + len(array) - 1} are damaged (their "
            f"offsets do not fit their buffers): {e}"
        ) from e
    texts, problems = [], {}
    for i, value in enumerate(binary.to_pylist()):
        try:
            texts.append(None if value is None else value.decode("utf-8"))
        except UnicodeDecodeError as e:
            texts.append(None)
            problems[i] = f"not valid UTF-8 ({e.reason} at byte {e.start})"
    return pa.array(texts, pa.large_string()), problems


def arrow_strings(items: Sequence[Any]) -> tuple[Any, dict[int, str]]:
    """Python strings (or None) as a LargeStringArray; an item that is not
    a string, or one that cannot be UTF-8 (a lone surrogate), is null, with
    why, by position."""
    pa = _pyarrow()
    if set(map(type, items)) <= {str, type(None)}:
        try:
            return pa.array(items, pa.large_string()), {}
        except UnicodeEncodeError:
            pass  # A lone surrogate somewhere: found below.
    texts, problems = [], {}
    for i, item in enumerate(items):
        text, problem = _as_text(item)
        texts.append(text)
        if problem is not None:
            problems[i] = problem
    return pa.array(texts, pa.large_string()), problems


def _as_text(item: Any) -> tuple[str | None, str | None]:
    if item is None:
        return None, None
    if not isinstance(item, str):
        return None, f"not a string (found {type(item).__name__})"
    try:
        item.encode("utf-8")
    except UnicodeEncodeError as e:
        return None, f"not valid text ({e.reason} at character {e.start})"
    return str(item), None


def _buffers(texts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A LargeStringArray's offsets (int64, its own n + 1), data bytes and
    validity (one byte a document), as the engine's TextFingerprint reads
    them, without a copy of the text."""
    _, offsets, data = texts.buffers()
    n = len(texts)
    offsets = np.frombuffer(offsets, np.int64)[texts.offset : texts.offset + n + 1]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    valid = np.asarray(texts.is_valid().to_numpy(zero_copy_only=False), np.uint8)
    return offsets, data, valid


# -- Sources -------------------------------------------------------------------


class ListText(TextSource):
    """A list (or tuple) of strings."""

    def __init__(self, texts: Sequence[Any]):
        self.texts = texts
        self.count = len(texts)
        self.name = f"the list of {self.count} strings"

    def batches(self, start: int) -> Iterator[TextBatch]:
        for a in range(start, self.count, READ_DOCUMENTS):
            texts, problems = arrow_strings(self.texts[a : a + READ_DOCUMENTS])
            yield TextBatch(a, texts, problems)


class ArrowText(TextSource):
    """A text column in memory or memory-mapped (a Table's, an Arrow IPC
    file's, a Hugging Face dataset's), in `order` if given (row i is row
    order[i] of the column)."""

    def __init__(self, column: Any, name: str, column_name: str, *, order=None, path=None):
        self.data, self.order, self.name = column, order, name
        self.column, self.path = column_name, path
        self.count = len(column) if order is None else len(order)

    def batches(self, start: int) -> Iterator[TextBatch]:
        for a in range(start, self.count, READ_DOCUMENTS):
            if self.order is None:
                part = self.data.slice(a, READ_DOCUMENTS)
            else:
                part = self.data.take(self.order[a : a + READ_DOCUMENTS])
            texts, problems = checked_utf8(large_strings(part), self.name, a)
            yield TextBatch(a, texts, problems)


class ParquetText(TextSource):
    """A Parquet file's text column, read by row group from the one that
    holds the first document asked for."""

    def __init__(self, path: Path, text_column: str | None, who: str):
        pq = require("pyarrow.parquet", f"{who}: reading {path}")
        self.name, self.path, self.who = str(path), str(path), who
        with reading(path, "Parquet", who):
            metadata = pq.ParquetFile(path).metadata
            schema = pq.read_schema(path)
        self.column = text_column_of(schema, text_column, self.name, who)
        self.count = metadata.num_rows
        self.group_rows = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]

    def batches(self, start: int) -> Iterator[TextBatch]:
        pq = require("pyarrow.parquet", f"{self.who}: reading {self.path}")
        first_row = np.concatenate([[0], np.cumsum(self.group_rows, dtype=np.int64)])
        group = int(np.searchsorted(first_row, start, side="right")) - 1
        if group >= len(self.group_rows):
            return
        position = int(first_row[group])
        with reading(self.path, "Parquet", self.who):
            file = pq.ParquetFile(self.path, memory_map=True)
            groups = list(range(group, len(self.group_rows)))
            for record_batch in file.iter_batches(
                batch_size=READ_DOCUMENTS, row_groups=groups, columns=[self.column]
            ):
                texts = large_strings(record_batch.column(0))
                skip = min(max(0, start - position), len(texts))
                if skip < len(texts):
                    texts, problems = checked_utf8(texts.slice(skip), self.name, position + skip)
                    yield TextBatch(position + skip, texts, problems)
                position += len(record_batch)


class JsonLinesText(TextSource):
    """A JSON Lines file's text field: pyarrow.json parses it in blocks; a
    file it refuses (a line that is not JSON, a value that is not a string)
    is read again from the block that failed with the standard library, a
    line at a time, so that each bad line is one bad document."""

    null_reason = "no text (null, or no such field)"

    def __init__(self, path: Path, field: str, who: str):
        self.name, self.path, self.column, self.who = str(path), str(path), field, who

    def batches(self, start: int) -> Iterator[TextBatch]:
        pa = _pyarrow()
        handed = 0  # Documents read so far (from 0), handed on or skipped.
        block = JSON_BLOCK_BYTES
        while True:
            try:
                for texts in self._blocks(block, max(start, handed)):
                    texts, problems = checked_utf8(texts, self.name, max(start, handed))
                    yield TextBatch(max(start, handed), texts, problems)
                    handed = max(start, handed) + len(texts)
                return
            except pa.ArrowInvalid as e:
                # A line longer than a block: read again in larger blocks.
                if "straddl" not in str(e) or block >= JSON_MAX_BLOCK_BYTES:
                    break
                block *= 8
        yield from self._lines(max(start, handed))

    def _blocks(self, block: int, skip: int) -> Iterator[Any]:
        """The text field as pyarrow.json parses it, from document `skip`
        (from 0) on; ArrowInvalid where pyarrow refuses a block."""
        pa = _pyarrow()
        pj = require("pyarrow.json", f"{self.who}: reading {self.path}")
        options = pj.ParseOptions(
            explicit_schema=pa.schema([(self.column, pa.large_string())]),
            unexpected_field_behavior="ignore",
        )
        reader = pj.open_json(
            self.path, read_options=pj.ReadOptions(block_size=block), parse_options=options
        )
        for record_batch in reader:
            texts = large_strings(record_batch.column(self.column))
            if skip < len(texts):
                yield texts.slice(skip)
            skip = max(0, skip - len(texts))

    def _lines(self, start: int) -> Iterator[TextBatch]:
        """Documents from `start` on, read with the standard library."""
        index, items, problems = 0, [], {}
        with open(self.path, "rb") as f:
            for number, line in enumerate(f, 1):
                if not line.strip(_JSON_BLANK):
                    continue
                index += 1
                if index <= start:
                    continue
                text, problem = _json_text(line, self.column, number)
                if problem is not None:
                    problems[len(items)] = problem
                items.append(text)
                if len(items) == READ_DOCUMENTS:
                    yield _batch(index - len(items), items, problems)
                    items, problems = [], {}
        if items:
            yield _batch(index - len(items), items, problems)


def _batch(first: int, items: list, problems: dict[int, str]) -> TextBatch:
    texts, more = arrow_strings(items)
    return TextBatch(first, texts, {**problems, **more})


def _json_text(line: bytes, field: str, number: int) -> tuple[str | None, str | None]:
    """A JSON Lines line's text, or None and why it has none (None for a
    null or missing field: a null document)."""
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        return None, f"line {number}: not valid UTF-8 ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return None, f"line {number}: not JSON ({e.msg} at column {e.colno})"
    except RecursionError:
        return None, f"line {number}: JSON nested too deeply to read"
    if not isinstance(value, dict):
        return None, f"line {number}: a JSON {_json_kind(value)}, not an object"
    text = value.get(field)
    if text is None:
        return None, None
    if not isinstance(text, str):
        return None, f"line {number}: field {field!r} is a JSON {_json_kind(text)}, not a string"
    return text, None


def _json_kind(value: Any) -> str:
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}
    return kinds.get(type(value), "object")
