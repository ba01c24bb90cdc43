"""Opening a source, once: what a Loader, jb.run and ``jaxbatch plan`` read.

Any source a user can give (a path to Parquet, Arrow IPC or a folder of
.npy files, a Parquet file streamed by row group, a Hugging Face dataset, a
:class:`Dataset`) is opened, checked against the options and its schema
here, and comes back as one :class:`OpenedSource`. A Loader takes that value
as it is: a job opens its source once and hands it on, so nothing is opened,
checked or planned twice. Messages start with ``who``, the call the user
wrote (``"Loader"``, ``"jb.run"``, ``"jaxbatch plan"``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from jaxbatch import _core
from jaxbatch._src.data.dataset import Columns, Dataset, graph_layout, mapped_files
from jaxbatch._src.data.dtypes import dtype_name
from jaxbatch._src.data.grids import Axes
from jaxbatch._src.data.mixture import Mixture
from jaxbatch._src.data.records import is_records
from jaxbatch._src.data.sources import (
    StreamedParquet,
    open_path,
    parquet_column_names,
    parquet_decoded_bytes,
)
from jaxbatch._src.integrations.huggingface import is_huggingface_dataset


class SourceOptions(Protocol):
    """What opening reads of a LoaderOptions (see load/loader.py)."""

    columns: Sequence[str] | None
    column: str | None
    aligned: Sequence[Sequence[str]] | None
    schema: Mapping[str, Any] | None
    stream: bool | None
    host_memory_limit: int | None
    axes: Axes | None


@dataclasses.dataclass(frozen=True)
class OpenedSource:
    """A source opened and checked: what a Loader consumes.

    ``dataset`` is a :class:`Dataset`, or the :class:`StreamedParquet` a
    streamed file becomes (``stream`` is then the same object); ``name`` is
    ``"dataset"`` or the path; ``length_column`` the column to batch by
    (``""`` for graphs, planned by node and edge counts); ``schema_rules``
    the engine's rules from the options' schema (a streamed file's were
    applied to every row group as it opened); ``graphs`` the graph layout
    for a graph planner, else None."""

    dataset: Columns
    name: str
    path: str | None
    length_column: str
    schema_rules: list
    graphs: Any
    who: str

    @property
    def stream(self) -> StreamedParquet | None:
        return self.dataset if isinstance(self.dataset, StreamedParquet) else None

    @property
    def core_schema(self) -> list:
        """The rules the engine's Loader applies itself (none for a
        streamed file: applied as it opened)."""
        return [] if self.stream is not None else self.schema_rules

    @property
    def fingerprint(self) -> int:
        """The engine's fingerprint of every value (a streamed file's, row
        group by row group)."""
        stream = self.stream
        return stream.fingerprint if stream else _core.dataset_fingerprint(self.dataset._core)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files the data is read from: the path given, or the files an
        in-memory Dataset maps (a job refuses to write over them)."""
        return (self.path,) if self.path else mapped_files(self.dataset)


def open_source(
    source: Any,
    options: SourceOptions,
    *,
    graphs: bool = False,
    who: str = "Loader",
    lengths_only: bool = False,
) -> OpenedSource:
    """`source` opened for `options`, checked once (see the module).

    `graphs`: for a graph planner (a streamed file counts each graph's nodes
    and edges as it opens). `lengths_only`: read only the column to batch by
    (``jaxbatch plan``). An OpenedSource comes back as it is.

    Example::

        opened = open_source("corpus.parquet", LoaderOptions(column="tokens"), who="jb.run")
        opened.dataset.lengths(opened.length_column)
    """
    if isinstance(source, OpenedSource):
        return source
    path = None
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        axes = None if lengths_only else options.axes  # Ties need the columns they tie.
        dataset = open_streamed(source, options, graphs, who) or open_path(
            source, options.columns, options.column, options.aligned, who, lengths_only, axes
        )
    elif is_huggingface_dataset(source):  # Read in place; columns= picks its columns.
        dataset = Dataset.from_huggingface(
            source, columns=options.columns, aligned=options.aligned, axes=options.axes
        )
        _refuse_file_options(options, who, grouped=False)
    elif isinstance(source, Dataset):
        dataset = source
        _refuse_file_options(options, who, grouped=True)
    elif isinstance(source, Mixture):
        if who != "Loader":  # jb.run and jb.map draw their pass first (load/mixture_pass.py).
            raise TypeError(
                f"{who}: does not take a mixture; jb.run and jb.map process one pass of its "
                f"stream (jb.run(fun, mixture, output, seed=...)), and jb.Dataset.concat([...]) "
                f"of its sources is every example once"
            )
        if options.stream:
            raise ValueError(
                f"{who}: stream=True reads one Parquet file by row group; a mixture reads its "
                f"sources whole (a .parquet source decoded into memory): the engine streams one "
                f"file's row groups through one cache, and a mixture's sources are datasets laid "
                f"end to end. A source larger than memory can be an Arrow IPC file (.arrow) or "
                f"a folder of .npy files, which are memory-mapped"
            )
        dataset = source
        _refuse_file_options(options, who, grouped=True)
    elif is_records(source):  # A list of dicts or a generator: read once, in memory.
        _refuse_file_options(options, who, grouped=False)
        if options.columns is not None:
            raise ValueError(f"{who}: columns= selects columns of a file; got examples")
        dataset = Dataset.from_examples(source, aligned=options.aligned, axes=options.axes)
    else:
        raise TypeError(
            f"{who}: expected a jb.Dataset, a Hugging Face dataset, a path, or examples (a list "
            f"of dicts or a generator of them), found {type(source).__name__}"
        )
    # What the data says of itself (its graph layout) before the options'
    # rules are checked against its columns.
    layout = graph_layout(dataset, who) if graphs else None
    if isinstance(dataset, StreamedParquet):
        rules = dataset.schema_rules
    else:
        rules = schema_rules(options.schema or {}, dataset.column_names, who)
    column = options.column
    return OpenedSource(
        dataset=dataset,
        name=str(source) if path is not None else "dataset",
        path=path,
        length_column="" if graphs and column is None else column or dataset.default_length_column,
        schema_rules=rules,
        graphs=layout,
        who=who,
    )


def _refuse_file_options(options: SourceOptions, who: str, grouped: bool) -> None:
    """Refuses what selects from a file where the columns are made already
    (`grouped`: a Dataset, whose column groups were given where it was built)."""
    if grouped and options.columns is not None:
        raise ValueError(f"{who}: columns= selects columns of a file; got a Dataset")
    if grouped and options.axes is not None:
        raise ValueError(
            f"{who}: axes= names the axes of a file's or a Hugging Face dataset's columns; "
            "got a Dataset, whose axes are given where it is built "
            "(jb.Dataset.from_arrays(..., axes=...))"
        )
    if grouped and options.aligned is not None:
        raise ValueError(
            f"{who}: aligned= groups the columns of a file or a Hugging Face dataset; "
            "got a Dataset, whose groups are given where it is built "
            "(jb.Dataset.from_arrays(..., aligned=...))"
        )
    if options.stream:
        raise ValueError(f"{who}: stream=True reads a Parquet file; got a Dataset")


def schema_rules(schema: Mapping[str, Any], names: list[str], who: str) -> list:
    """The engine's column rules from a schema (column name to a
    ColumnSchema), for a source with columns `names`."""
    out = []
    for name, spec in schema.items():
        if name not in names:
            raise ValueError(f"{who}: schema names column {name!r}; columns are {names}")
        s = _core.ColumnSchema()
        s.name = name
        if spec.dtype is not None:
            s.dtype = dtype_name(spec.dtype, f"schema for column {name!r}")
        where = f"schema for column {name!r}"
        if spec.inner_shape is not None:
            for d in spec.inner_shape:
                check_int_option(f"{where}: inner_shape", d, 0, who)
            s.inner_shape = [int(d) for d in spec.inner_shape]
        check_int_option(f"{where}: min_length", spec.min_length, 0, who)
        if spec.max_length is not None:
            check_int_option(f"{where}: max_length", spec.max_length, 0, who)
        s.min_length = int(spec.min_length)
        s.max_length = -1 if spec.max_length is None else int(spec.max_length)
        s.finite = bool(spec.finite)
        out.append(s)
    return out


def check_int_option(option: str, value, low: int | None, who: str) -> None:
    """ValueError naming `option` unless `value` is an int in [low, 2**63)
    (what the core's int64 options hold)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{who}: {option} must be an int, found {type(value).__name__} {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{who}: {option} must be >= {low}, found {value}")
    if value >= 2**63:
        raise ValueError(f"{who}: {option} must be below 2**63, found {value}")


def open_streamed(source, options: SourceOptions, graphs: bool, who: str) -> StreamedParquet | None:
    """The Parquet file at `source` opened to be read by row group, when
    `options` say so (``stream``; see the Loader), else None. `graphs`: for
    a graph planner, which plans by each graph's node and edge count (the
    engine counts and checks the graphs row group by row group)."""
    if not _should_stream(source, options, who):
        return None
    if not options.host_memory_limit:
        raise ValueError(
            f"{who}: stream=True needs host_memory_limit (bytes) to size the cache of row groups"
        )
    names = parquet_column_names(source, options.columns, who)
    rules = schema_rules(options.schema or {}, names, who)
    return StreamedParquet(
        source,
        options.columns,
        options.column,
        options.aligned,
        rules,
        graphs=graphs,
        who=who,
        axes=options.axes,
    )


def _should_stream(source, options: SourceOptions, who: str) -> bool:
    """Whether a path is read by row group: see the Loader's ``stream``."""
    if options.stream is not None:
        return options.stream
    limit = options.host_memory_limit
    if not limit or Path(source).suffix.lower() != ".parquet" or not Path(source).is_file():
        return False  # open_path names what is wrong with a path that is no file.
    try:
        return parquet_decoded_bytes(source, options.columns, who) > limit
    except Exception:  # noqa: BLE001 - a corrupt file: open_path raises a clear error
        return False
