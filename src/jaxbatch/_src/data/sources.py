"""Opening a data source by path: Parquet, Arrow IPC, or .npy pairs, memory-mapped."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.data.arrow import refuse_repeated_names
from jaxbatch._src.data.arrow_grid import is_grid_type
from jaxbatch._src.data.dataset import (
    Columns,
    Dataset,
    file_stamp,
    set_mapped_files,
    set_reopen,
)
from jaxbatch._src.data.grids import Axes
from jaxbatch._src.data.job_output import is_job_output, job_output_table


def open_path(
    path: str | os.PathLike,
    columns: Sequence[str] | None,
    length_column: str | None,
    aligned: Sequence[Sequence[str]] | None,
    who: str = "Loader",
    lengths_only: bool = False,
    axes: Axes | None = None,
) -> Dataset:
    """A Dataset over the file (or .npy folder) at `path`, memory-mapped.

    * ``*.parquet``: read in bulk (all row groups) with memory mapping.
    * ``*.arrow`` / ``*.feather`` / ``*.ipc``: Arrow IPC, memory-mapped, no copy.
    * a folder of ``NAME.values.npy`` + ``NAME.offsets.npy`` (ragged) and
      ``NAME.npy`` (fixed) files, memory-mapped with numpy.
    * a finished job's output folder (jb.tokenize's, jb.run's): its
      committed shards, checked and decoded, in example order.

    Raises before anything starts: FileNotFoundError for a missing path,
    ValueError for a missing column or a length column that is not a list.
    Messages start with `who`, the call the user wrote. `lengths_only`: read
    just the column to batch by (what ``jaxbatch plan`` needs). `axes`
    names variable axes and ties, as :meth:`Dataset.from_arrays` takes them.
    """
    p = Path(path)
    check_path(p, who)
    dataset = _open(p, columns, length_column, aligned, who, lengths_only, axes)
    # A pickle of it (for a worker process) opens the file again.
    args = (os.path.abspath(p), None if columns is None else list(columns), length_column, aligned)
    set_reopen(dataset, open_path, (*args, who, lengths_only, axes))
    return dataset


def _open(p: Path, columns, length_column, aligned, who, lengths_only, axes) -> Dataset:
    suffix = p.suffix.lower()
    mapped = False  # Arrow IPC is read through its mapping; Parquet is decoded.
    if is_job_output(p):  # Its shards decoded, in example order (data/job_output.py).
        table = job_output_table(p, who)
        wanted = check_columns(p, table.schema, columns, length_column, who)
        columns = [wanted] if lengths_only else columns
        if columns:
            table = table.select(list(columns))
    elif p.is_dir():
        return _open_npy_folder(p, columns, length_column, aligned, who, lengths_only, axes)
    elif suffix == ".parquet":
        pq = require("pyarrow.parquet", f"{who}: reading {p}")

        with reading(p, "Parquet", who):
            wanted = check_columns(p, pq.read_schema(p), columns, length_column, who)
            columns = [wanted] if lengths_only else columns
            table = pq.read_table(p, columns=list(columns) if columns else None, memory_map=True)
    elif suffix in (".arrow", ".feather", ".ipc"):
        table, mapped = read_arrow_ipc(p, who), True
        wanted = check_columns(p, table.schema, columns, length_column, who)
        columns = [wanted] if lengths_only else columns
        if columns:
            table = table.select(list(columns))
    else:
        raise ValueError(
            f"{who}: cannot read {p}: expected a .parquet, .arrow/.feather/.ipc file, a "
            f"folder of .npy files or a job's output folder, found suffix {suffix!r}"
        )
    try:
        dataset = Dataset.from_arrow(table, aligned=aligned, axes=axes)
    except ValueError as e:
        raise ValueError(f"{who}: {p}: {e}") from e
    if mapped:
        set_mapped_files(dataset, [str(p)])
    return dataset


def check_path(p: Path, who: str) -> None:
    """Refuses what cannot be read as data before anything opens it: a
    missing path, a symlink loop, and anything that is neither a regular file
    nor a folder (a FIFO or device would block or never end)."""
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{who}: no such file or folder: {p}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, f"{who}: {p} is a symlink loop (too many levels of symbolic links)"
            ) from None
        raise OSError(e.errno, f"{who}: cannot read {p}: {e.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise ValueError(
            f"{who}: {p} is {kind}; expected a regular .parquet/.arrow file or a folder of .npy "
            f"files (a FIFO, socket or device would block or never end)"
        )


def _read_errors() -> tuple[type[BaseException], ...]:
    """What pyarrow raises for a file it cannot read: ArrowException (an
    ArrowInvalid is also a ValueError), a bare OSError ("Array length did
    not match record batch length") and UnicodeDecodeError (a mangled
    column name or metadata string)."""
    pa = require("pyarrow", "reading Arrow data")

    return (pa.ArrowException, OSError, UnicodeDecodeError)


@contextlib.contextmanager
def reading(p: Path | str, kind: str, who: str) -> Iterator[None]:
    """Turns what pyarrow raises while it reads `p` as `kind` into an
    OSError naming the file (and `who`, the caller); our own ValueErrors (a
    missing column) pass unchanged."""
    try:
        yield
    except _read_errors() as e:
        raise OSError(f"{who}: cannot read {p} as {kind} (corrupt or truncated?): {e}") from e


def read_arrow_ipc(p: Path, who: str):
    """An Arrow IPC file (or stream) at `p`, memory-mapped; OSError naming `p`
    for a corrupt or truncated file instead of Arrow's bare message."""
    pa = require("pyarrow", f"{who}: reading {p}")

    if p.stat().st_size == 0:
        raise OSError(f"{who}: {p} is empty; expected an Arrow IPC file")
    with reading(p, "an Arrow IPC file or stream", who):
        try:
            return pa.ipc.open_file(pa.memory_map(str(p), "r")).read_all()
        except _read_errors() as file_error:
            with contextlib.suppress(*_read_errors()):
                return pa.ipc.open_stream(pa.memory_map(str(p), "r")).read_all()
            raise file_error from None  # The file format's error says most.


def check_columns(path, schema, columns, length_column, who: str) -> str:
    """The column to batch by (`length_column`, else the first list column
    of `columns` or of all); ValueError for a missing column or one that is
    not a list or large_list or a grid (a tensor extension type)."""
    pa = require("pyarrow", f"{who}: reading {path}")
    prefix = f"{who}: "

    def ragged(t) -> bool:
        return pa.types.is_list(t) or pa.types.is_large_list(t) or is_grid_type(t)

    names = list(schema.names)
    refuse_repeated_names(names, f"{prefix}{path}")
    for name in [*(columns or []), *([length_column] if length_column else [])]:
        if name not in names:
            raise ValueError(f"{prefix}{path} has no column {name!r}; its columns are {names}")
    # Batch by the named column, else the first list column (of `columns` if given).
    lists = [f.name for f in schema if ragged(f.type) and (not columns or f.name in columns)]
    wanted = length_column or (lists[0] if lists else (columns[0] if columns else None))
    if wanted is None:
        raise ValueError(f"{prefix}{path} has no list column to batch by; columns are {names}")
    field = schema.field(wanted)
    if not ragged(field.type):
        raise ValueError(
            f"{prefix}column {wanted!r} of {path} must be a list or large_list column to batch "
            f"by its lengths, found type {field.type}"
        )
    return wanted


def _open_npy_folder(
    folder: Path, columns, length_column, aligned, who, lengths_only, axes
) -> Dataset:
    found: dict[str, object] = {}
    for f in sorted(folder.glob("*.npy")):
        if f.name.endswith(".values.npy"):
            name = f.name[: -len(".values.npy")]
            offsets = folder / f"{name}.offsets.npy"
            if not offsets.exists():
                raise ValueError(f"{who}: {f} has no matching {offsets.name}")
            found[name] = (_load_npy(f, who), _load_npy(offsets, who))
        elif not f.name.endswith(".offsets.npy"):
            found[f.name[: -len(".npy")]] = _load_npy(f, who)
    if not found:
        raise ValueError(
            f"{who}: folder {folder} holds no .npy files; expected NAME.values.npy + "
            f"NAME.offsets.npy (ragged) and NAME.npy (fixed) files"
        )
    names = list(columns) if columns else list(found)
    for name in [*names, *([length_column] if length_column else [])]:
        if name not in found:
            raise ValueError(f"{who}: {folder} has no column {name!r}; found {sorted(found)}")
    # Batch by the named column, else the first ragged one (NAME.npy files may
    # sort before the values/offsets pairs).
    wanted = length_column or next((n for n in names if isinstance(found[n], tuple)), None)
    if wanted is None or not isinstance(found[wanted], tuple):
        shown = wanted or names[0]
        raise ValueError(
            f"{who}: column {shown!r} of {folder} is fixed-shape ({shown}.npy); batching "
            f"needs a ragged column ({shown}.values.npy + {shown}.offsets.npy)"
        )
    names = [wanted] if lengths_only else names
    try:
        return Dataset.from_arrays({n: found[n] for n in names}, aligned=aligned, axes=axes)
    except ValueError as e:
        raise ValueError(f"{who}: {folder}: {e}") from e


def _load_npy(f: Path, who: str) -> np.ndarray:
    """A .npy file memory-mapped; OSError naming the file when it is not one."""
    try:
        array = np.load(f, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise OSError(f"{who}: cannot read {f} as a .npy file (corrupt or truncated?): {e}") from e
    if array.dtype == object:
        raise ValueError(f"{who}: {f} holds objects; expected a numeric .npy array")
    return array


def _parquet_path(path, who: str) -> Path:
    p = Path(path)
    check_path(p, who)
    if p.suffix.lower() != ".parquet":
        raise ValueError(
            f"{who}: stream=True reads Parquet files by row group; {p} is not a .parquet file"
        )
    return p


def parquet_column_names(
    path: str | os.PathLike, columns: Sequence[str] | None, who: str
) -> list[str]:
    """The columns a Loader reads from a Parquet file: `columns`, or all."""
    pq = require("pyarrow.parquet", f"{who}: reading {path}")

    p = _parquet_path(path, who)
    with reading(p, "Parquet", who):
        names = list(pq.read_schema(p).names)
    return list(columns) if columns else names


# Bytes per value of Parquet's fixed-width physical types once decoded.
_PHYSICAL_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def parquet_decoded_bytes(path: str | os.PathLike, columns: Sequence[str] | None, who: str) -> int:
    """About the bytes the Parquet file's columns (all, or `columns`) take
    decoded, from its footer: values x width for fixed-width types (a
    dictionary-encoded column is far smaller on disk, even uncompressed),
    the uncompressed size for others."""
    pq = require("pyarrow.parquet", f"{who}: reading {path}")

    wanted = set(columns) if columns else None
    total = 0
    with reading(path, "Parquet", who):
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for j in range(group.num_columns):
                chunk = group.column(j)
                if wanted is None or chunk.path_in_schema.split(".")[0] in wanted:
                    width = _PHYSICAL_WIDTH.get(chunk.physical_type)
                    total += chunk.num_values * width if width else chunk.total_uncompressed_size
    return total


# Reads per row group and epoch past which a streaming loader without a
# global shuffle warns (StreamedParquet.note_reads): sequential reads take
# one, or two where a batch straddles a row group and a worker runs ahead.
REREAD_WARNING = 4


class StreamedParquet(Columns):
    """A Parquet file read one row group at a time, for a Loader whose data
    does not fit in memory.

    Opening reads every row group once (only `columns`) and keeps what
    planning needs: every ragged column's lengths, the row groups' example
    boundaries and decoded sizes, and the bad records `schema` finds (with
    `graphs`, each graph's node and edge count and every malformed graph). Each
    row group is checked by the core as a whole (``ChunkedSourceBuilder``),
    with no loop over examples here; memory holds one row group at a time.
    `axes` names variable axes and ties as :meth:`Dataset.from_arrays` takes
    them: every row group's ties are checked as it is read, and an error
    numbers the example as the whole file does.
    The Loader's feeder thread reads row groups again (:meth:`read_chunk`)
    as batches need them.
    """

    def __init__(
        self,
        path,
        columns,
        length_column,
        aligned,
        schema: list,
        graphs=False,
        who="Loader",
        axes: Axes | None = None,
    ):
        pa = require("pyarrow", f"{who}: streaming {path}")
        pq = require("pyarrow.parquet", f"{who}: streaming {path}")

        self.who = who  # The call the user wrote, first in every message.
        self.path = _parquet_path(path, who)
        self.columns = list(columns) if columns else None
        self.aligned = aligned
        self.axes = axes
        self._stamp = file_stamp(self.path)
        with reading(self.path, "Parquet", who):
            reader = pq.ParquetFile(self.path)
            check_columns(self.path, reader.schema_arrow, columns, length_column, who)
            self.num_row_groups = reader.metadata.num_row_groups
            rows = [reader.metadata.row_group(g).num_rows for g in range(self.num_row_groups)]
        # The file's example index of each row group's first example.
        self._group_begin = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
        if self.num_row_groups == 0:
            raise ValueError(
                f"{self.who}: {self.path} has no row groups to stream; it holds no data"
            )
        self.schema_rules = schema  # Applied below, to every row group.
        # Graphs: the engine counts each graph's nodes and edges and checks it
        # as its row group is added; a column= is refused by the Loader.
        builder = _core.ChunkedSourceBuilder(
            "" if graphs else length_column or "", schema, graphs=graphs
        )
        for g in range(self.num_row_groups):
            chunk = self.read_chunk(reader, g)
            try:
                builder.add(chunk._core)
            except ValueError as e:
                raise ValueError(f"{self.who}: {self.path}, row group {g}: {e}") from e
            del chunk
        self._source = builder.finish()
        # pyarrow's allocator keeps the pages of the row groups just decoded
        # (some 20 MB): give them back before the loader fills its cache.
        pa.default_memory_pool().release_unused()
        self._core = self._source.prototype  # Columns, dtypes, shapes: what planning asks.
        set_mapped_files(self, [str(self.path)])  # Checked before each batch for changes.

    def open_reader(self):
        pq = require("pyarrow.parquet", f"{self.who}: streaming {self.path}")

        return pq.ParquetFile(self.path)

    def read_chunk(self, reader, group: int) -> Dataset:
        """Row group `group` decoded into a Dataset (pyarrow releases the GIL
        while it decodes). OSError naming the file and row group when it
        cannot be read; ValueError for data the core refuses (nulls)."""

        # Reading a replaced file through the old footer fails as if corrupt:
        # say what happened instead (checked again after a failed read, which
        # a file rewritten meanwhile causes).
        self._check_unchanged()
        try:
            table = reader.read_row_group(group, columns=self.columns)
        except _read_errors() as e:
            self._check_unchanged()
            raise OSError(
                f"{self.who}: cannot read row group {group} of {self.path} "
                f"(corrupt or truncated?): {e}"
            ) from e
        begin = int(self._group_begin[group])
        try:
            return Dataset._from_arrow_part(
                table, table.column_names, self.aligned, begin, self.axes
            )
        except ValueError as e:
            raise ValueError(f"{self.who}: {self.path}, row group {group}: {e}") from e

    @property
    def num_examples(self) -> int:
        return self._source.num_examples

    @property
    def fingerprint(self) -> int:
        """Every value's fingerprint, row group by row group (the engine's)."""
        return self._source.fingerprint

    def watch_rereads(self, planner, host_memory_limit: int) -> None:
        """Starts counting epochs for :meth:`note_reads` (a loader started or
        restored): reads are counted from then on."""
        self._rereads = dict(planner=planner, limit=host_memory_limit, first_epoch=None)

    def note_reads(self, reads: int, epoch: int) -> None:
        """Warns, once, when a loader that keeps reads sequential (no global
        shuffle) has read the row groups more than REREAD_WARNING times each
        per epoch: its plan's batches take examples from across the file
        (Pack without a window keeps every row open over the whole file;
        best fit also sorts every example by length), and no cache smaller
        than the file helps (even an optimal one: 96 reads per row group for
        29 row groups and a cache of 8, simulated). The stream stays right;
        only the reads multiply."""
        watch = getattr(self, "_rereads", None)
        if watch is None:
            return
        if watch["first_epoch"] is None:
            watch["first_epoch"] = epoch
        epochs = epoch - watch["first_epoch"] + 1
        if reads <= REREAD_WARNING * self.num_row_groups * epochs:
            return
        self._rereads = None
        warnings.warn(
            f"{self.who}: {counted(reads, 'row-group read')} of {self.path} in "
            f"{counted(epochs, 'epoch')} so far, more than {REREAD_WARNING} per row group and "
            f"epoch ({counted(self.num_row_groups, 'row group')}): the batches of "
            f"{watch['planner']} take examples from across the file, so a cache smaller than "
            f"the file (host_memory_limit={watch['limit']}) reads row groups again and again. "
            f"Pack reads each row group once with lookahead=<the row-group size> (rows packed "
            f"within each row group); or raise host_memory_limit to hold the file",
            RuntimeWarning,
            stacklevel=3,
        )

    def _check_unchanged(self) -> None:
        change = self._stamp.describe_change(file_stamp(self.path))
        if change:
            raise OSError(
                f"{self.who}: {self.path} changed while the loader reads it: {change}; files must "
                f"not be changed while a Loader reads them: write new data to a new path or "
                f"close the Loader first"
            )

    def lengths(self, column: str | None = None) -> np.ndarray:
        """Per-example lengths (int64) of a ragged column, over the whole file."""
        return self._source.lengths(column if column is not None else self.default_length_column)

    def __repr__(self) -> str:
        return (
            f"StreamedParquet({self.path}: {counted(self.num_examples, 'example')} in "
            f"{counted(self.num_row_groups, 'row group')}; columns {self.column_names})"
        )
