"""Dataset: named ragged and fixed-shape columns, held by the C++ core."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.words import counted
from jaxbatch._src.data.arrow import column_from_arrow, refuse_repeated_names
from jaxbatch._src.data.dtypes import (
    as_bytes,
    dtype_name,
    is_text_dtype,
    numpy_dtype,
    text_message,
)
from jaxbatch._src.data.graphs import GraphLayout, graph_columns
from jaxbatch._src.data.grids import (
    Axes,
    axes_of,
    grid_from_arrays,
    grid_from_pair,
    grid_state,
    is_grid,
    named,
    rebuilt,
)
from jaxbatch._src.data.records import records_columns
from jaxbatch._src.data.views import as_index, check_shard, index_kind, kept_index
from jaxbatch._src.integrations.huggingface import huggingface_columns


class Columns:
    """The column names a Loader asks of its data, from a core dataset
    (`_core`): a Dataset's own, or a streamed file's one-example prototype."""

    _core: Any

    @property
    def column_names(self) -> list[str]:
        return self._core.column_names()

    @property
    def default_length_column(self) -> str:
        """The first ragged column: what planners look at unless told."""
        return self._core.default_length_column


class Dataset(Columns):
    """Named columns with the same number of examples.

    A ragged column stores every example's rows back to back with int64
    offsets (an Arrow list array's layout); a fixed column holds one element
    of the same shape per example. Build one with :meth:`from_arrays` or
    :meth:`from_arrow`.

    Example::

        ds = jb.Dataset.from_arrays(
            {"tokens": [np.arange(5), np.arange(3)], "label": np.array([0, 1])}
        )
        ds.lengths("tokens")  # array([5, 3])
    """

    def __init__(self, core: _core.Dataset):
        if not isinstance(core, _core.Dataset):
            raise TypeError(
                "Dataset: build one with Dataset.from_arrays({...}) or "
                f"Dataset.from_arrow(table), found Dataset({type(core).__name__})"
            )
        self._core = core
        # Files numpy memory-maps for this dataset's columns: a Loader re-checks
        # them before each batch (a truncated mapping would be SIGBUS).
        self._mapped_files: tuple[str, ...] = ()
        # How to open this dataset again from where it was read (see
        # set_reopen): a pickle of it is then that recipe, not its values.
        self._reopen: tuple[Any, tuple, dict[str, Any], tuple] | None = None
        # A view's recipe (views.py): how to make it again from its parents.
        self._view: tuple | None = None

    def __reduce__(self):
        """Pickles (for worker processes, e.g. Grain's ``mp_prefetch``): a
        dataset read from a file (by a Loader, or from_huggingface) as the
        recipe that opens it again, memory-mapped, with each file's stamp
        (a replaced or changed file is an OSError when unpickled); any
        other as its values, one copy per column (the engine's, in C++)."""
        layout = getattr(self, "_graph_layout", None)
        if self._view is not None:  # Its parents pickle as they do, and the view again.
            return (_rebuilt_view, (self._view,))
        if self._reopen is not None:
            return (_reopened, (*self._reopen, layout))
        columns = [_column_state(self._core.column(n)) for n in self.column_names]
        return (_from_values, (columns, list(self._core.aligned_groups), layout))

    @classmethod
    def from_arrays(
        cls,
        columns: Mapping[str, Any],
        *,
        aligned: Sequence[Sequence[str]] | None = None,
        dtypes: Mapping[str, Any] | None = None,
        axes: Axes | None = None,
    ) -> Dataset:
        """Builds a dataset from numpy data, per column one of:

        * a list of per-example arrays (ragged; copied once into one buffer),
        * a tuple ``(values, offsets)`` (ragged; used without a copy): example
          ``i`` is ``values[offsets[i]:offsets[i+1]]``,
        * a numpy array ``[num_examples, *inner]`` (fixed-shape, no copy).

        ``aligned`` lists groups of ragged columns that must have equal
        lengths in every example (tokens and labels). ``dtypes`` fixes a
        column's dtype (needed for an empty list; examples are converted).
        Raises ``ValueError`` naming the column and example for bad input.

        ``axes`` names a column's variable axes: one name for a ragged
        column, two for a *grid* column whose examples are ``[h, w, *inner]``
        (images, L x L pair features), given as a list of such arrays (one
        copy), a tuple ``(values, shapes)`` of the cells ``[sum h*w, *inner]``
        and ``[num_examples, 2]`` sizes (no copy), or a stacked array
        ``[num_examples, h, w, *inner]``. An axis name used twice is a tie,
        checked for every example: ``("L", "L")`` is square, and beside
        ``tokens`` named ``("L",)`` as long as the tokens on both axes::

            jb.Dataset.from_arrays(
                {"tokens": tokens, "pair": pairs, "image": images},
                axes={"tokens": ("L",), "pair": ("L", "L"), "image": ("h", "w")},
            )
        """
        dtypes = dict(dtypes or {})
        declared = axes_of(axes, list(columns), "Dataset.from_arrays")
        built = [
            named(_make_column(name, data, dtypes.get(name), is_grid(declared, name)), declared)
            for name, data in columns.items()
        ]
        groups = [list(g) for g in (aligned or [])]
        dataset = cls(_core.Dataset(built, groups))
        set_mapped_files(dataset, _memmap_files(columns.values()))
        return dataset

    @classmethod
    def from_graphs(cls, graphs: Iterable[Any], *, validate: bool = True) -> Dataset:
        """Builds a graph dataset, one example per graph, from single graphs:
        each a ``jraph.GraphsTuple`` (``n_node`` and ``n_edge`` of length 1)
        or a mapping with its field names (``nodes``, ``edges``, ``senders``,
        ``receivers``, ``globals``, ``n_node``, ``n_edge``; any may be left
        out but senders and receivers). ``nodes``, ``edges`` and ``globals``
        are arrays or pytrees (dicts, lists, tuples) of arrays whose leading
        axis is the graph's node count, edge count, or 1 for globals. Graphs
        with no nodes or no edges are fine.

        Columns are named by field and leaf path (``nodes``, ``nodes/x``,
        ``edges/bond/0``): plan them with :class:`jaxbatch.GraphBudget` or
        :class:`jaxbatch.GraphBuckets`; a batch's ``.graphs`` is a
        GraphsTuple again. With ``validate`` (the default) every graph is
        checked by the engine (every node and edge leaf the right length,
        n_node and n_edge agreeing with the arrays, senders and receivers
        within ``[0, n_node)``), and the first bad one is a ValueError naming
        it; with ``validate=False`` a Loader finds them instead and follows
        its ``on_error`` (raise, skip or quarantine, counted).

        Example::

            ds = jb.Dataset.from_graphs(molecules)   # [jraph.GraphsTuple, ...]
            loader = jb.Loader(ds, jb.GraphBudget(nodes=512, edges=1024, graphs=33))
            for batch in loader:
                loss = step(params, batch.graphs, batch["graph_mask"])
        """
        columns, dtypes, layout = graph_columns(list(graphs))
        dataset = cls.from_arrays(columns, dtypes=dtypes)
        dataset._graph_layout = layout
        if validate:
            bad = _core.find_bad_graphs(dataset._core, "Dataset.from_graphs")
            if bad:
                example, reason = bad[0]
                more = f" ({counted(len(bad) - 1, 'other bad graph')} too)" if len(bad) > 1 else ""
                reason = reason.removeprefix("graph: ")
                raise ValueError(f"Dataset.from_graphs: graph {example}: {reason}{more}")
        return dataset

    @property
    def is_graphs(self) -> bool:
        """Whether this dataset holds graphs (it has senders and receivers)."""
        return _core.is_graph_dataset(self._core)

    @classmethod
    def from_arrow(
        cls,
        table: Any,
        *,
        columns: Sequence[str] | None = None,
        aligned: Sequence[Sequence[str]] | None = None,
        axes: Axes | None = None,
    ) -> Dataset:
        """Builds a dataset from a ``pyarrow.Table`` (or RecordBatch).

        ``list`` and ``large_list`` columns become ragged columns without a
        copy of their values (``list``'s int32 offsets are widened to int64,
        a copy of the offsets only); ``fixed_size_list`` children give the
        inner shape; primitive columns become fixed columns. A column of
        several chunks (a file's record batches) is read in place, chunk by
        chunk, without a copy either. Nulls are refused, and so are two
        columns of one name. Nested lists ``list<list<...>>`` (each example
        rows of equal length) and ``fixed_shape_tensor`` columns of rank >= 2
        become grid columns ``[h, w, *inner]``, their values read in place;
        ``axes`` names variable axes and ties as in :meth:`from_arrays`.
        """
        refuse_repeated_names(list(table.column_names), "Dataset.from_arrow")
        names = list(columns) if columns is not None else list(table.column_names)
        missing = [n for n in names if n not in table.column_names]
        if missing:
            raise ValueError(
                f"Dataset.from_arrow: no column {missing[0]!r}; "
                f"the table has {list(table.column_names)}"
            )
        return cls._from_arrow_part(table, names, aligned, first_example=0, axes=axes)

    @classmethod
    def from_huggingface(
        cls,
        ds: Any,
        *,
        columns: Sequence[str] | None = None,
        aligned: Sequence[Sequence[str]] | None = None,
        axes: Axes | None = None,
    ) -> Dataset:
        """Builds a dataset from a Hugging Face ``datasets.Dataset``, reading
        its memory-mapped Arrow files in place: no value is copied, whatever
        its record batches, and an indices mapping (after ``select``,
        ``shuffle``, ``train_test_split`` or ``filter``) is the examples'
        order, so ``flatten_indices()`` is not needed.

        ``columns`` names the columns to use; by default every numeric column
        (numbers or bools, maybe in lists) is used and the others (text,
        images) are left out with a warning naming them. A named column that
        is not numeric is a ValueError naming it. ``aligned`` groups ragged
        columns of equal lengths per example, as in :meth:`from_arrow` (a
        tokenizer's ``input_ids`` and ``attention_mask``: packing needs every
        ragged column aligned with the length column).

        The rows are those ``ds[i]`` gives: a transform (``with_transform``,
        ``set_transform``) or a format option that changes values
        (``dtype=``) is a ValueError saying what to do instead (apply it with
        ``.map()``); a format's ``columns=`` are the default columns; nulls
        are refused only in the rows an indices mapping selects, and errors
        number examples as ``ds[i]`` does.

        ``Array2D`` and ``Array3D`` columns are grid columns ``[h, w, *inner]``
        read in place; an ``Image`` column named in ``columns=`` is decoded
        (Pillow) into a grid column of its pixels ``[h, w]`` or
        ``[h, w, channels]`` (one copy: the file holds compressed bytes).
        ``axes`` names variable axes and ties as in :meth:`from_arrays`.

        Example::

            ds = datasets.load_from_disk("tokenized")  # input_ids, attention_mask, text
            data = jb.Dataset.from_huggingface(
                ds["train"], columns=["input_ids", "attention_mask"],
                aligned=[["input_ids", "attention_mask"]],
            )
            loader = jb.Loader(data, jb.Pack(row_length=512, rows_per_batch=8))
        """
        built, files = huggingface_columns(ds, columns, "Dataset.from_huggingface")
        declared = axes_of(axes, [c.name for c in built], "Dataset.from_huggingface")
        built = [named(c, declared) for c in built]
        groups = [list(g) for g in (aligned or [])]
        dataset = cls(_core.Dataset(built, groups))
        set_mapped_files(dataset, files)
        # Pickled as the datasets.Dataset itself: datasets pickles a
        # memory-mapped one as its cache files, an in-memory one with its table.
        set_reopen(
            dataset,
            Dataset.from_huggingface,
            (ds,),
            {"columns": columns, "aligned": aligned, "axes": axes},
        )
        return dataset

    @classmethod
    def _from_arrow_part(
        cls, table: Any, names: Sequence[str], aligned, first_example: int, axes: Axes | None = None
    ) -> Dataset:
        """from_arrow for a part of a file (a row group) that starts at
        example `first_example` of the file: errors number examples so."""
        declared = axes_of(axes, list(names), "Dataset.from_arrow")
        built = [
            named(column_from_arrow(n, table.column(n), first_example), declared) for n in names
        ]
        groups = [list(g) for g in (aligned or [])]
        return cls(_core.Dataset(built, groups, first_example))

    @classmethod
    def from_examples(
        cls,
        examples: Iterable[Mapping[str, Any]],
        *,
        fixed: Sequence[str] = (),
        aligned: Sequence[Sequence[str]] | None = None,
        dtypes: Mapping[str, Any] | None = None,
        axes: Axes | None = None,
    ) -> Dataset:
        """Builds a dataset from examples given one by one: a list of dicts
        or a generator of them, read once (one copy of the values). Each
        key is a column: scalars make a fixed column, arrays a ragged one
        (their first axis varies), unless ``fixed`` names the key (then its
        arrays are stacked). Every example needs the first one's keys.

        Example::

            ds = jb.Dataset.from_examples(
                {"tokens": tokenizer.encode(t).ids, "label": y} for t, y in rows
            )
        """
        columns = records_columns(list(examples), 0, "Dataset.from_examples", list(fixed))
        return cls.from_arrays(columns, aligned=aligned, dtypes=dtypes, axes=axes)

    @classmethod
    def concat(cls, datasets: Sequence[Dataset]) -> Dataset:
        """`datasets` end to end, as a view (no value is copied): they need
        the same columns (names in one order, dtypes, inner shapes, kinds,
        axes) and aligned groups; a ValueError names the first that differs.

        Example::

            both = jb.Dataset.concat([train_a, train_b])
        """
        parts = list(datasets)
        for k, part in enumerate(parts):
            if not isinstance(part, Dataset):
                raise TypeError(
                    f"Dataset.concat: expected jb.Dataset values, found {type(part).__name__} at "
                    f"position {k}"
                )
        core = _core.concat_datasets([p._core for p in parts])
        return _view(core, ("concat", tuple(parts)), *parts)

    @classmethod
    def mix(
        cls,
        sources: Mapping[str, Any],
        weights: Any = None,
        unit: str = "examples",
        **options: Any,
    ) -> Any:
        """Named `sources` drawn by `weights` into one stream, in ``unit``
        ("tokens" or "examples"), for a :class:`jaxbatch.Loader`: returns a
        :class:`jaxbatch.Mixture` (its other options: ``exhaustion``,
        ``block_size``).

        Example::

            mix = jb.Dataset.mix({"web": web, "code": code},
                                 weights={"web": 0.7, "code": 0.3}, unit="tokens")
        """
        if _MIXTURE is None:
            raise RuntimeError("Dataset.mix: jaxbatch._src.data.mixture was not imported")
        return _MIXTURE(sources, weights, unit=unit, **options)

    def select(self, indices: Any) -> Dataset:
        """The examples `indices` (ints, any order, repeats allowed;
        negative ones count from the end) as a view: the engine holds the
        index, no value is copied. An empty selection is an empty dataset."""
        index = as_index(indices, len(self), "Dataset.select")
        return _view(_core.select_examples(self._core, index), ("select", self, index), self)

    def filter(self, predicate: Any) -> Dataset:
        """The examples where `predicate` holds, in order, as a view. The
        predicate is a bool array (one entry per example) or a function
        called once with every column at once (a fixed column's
        ``[n, ...]`` array, a ragged column's ``(values, offsets)`` and its
        ``<name>_lengths``) that returns one: vectorised, never per example.

        Example::

            short = ds.filter(lambda c: c["tokens_lengths"] <= 512)
        """
        return self.select(kept_index(self._core, predicate, "Dataset.filter"))

    def shard(self, index: int, count: int) -> Dataset:
        """Part `index` of `count` contiguous parts, as a view: examples
        ``[index * n // count, (index + 1) * n // count)``, so the parts
        cover the data once and differ in size by at most one."""
        index, count = check_shard(index, count)
        core = _core.shard_examples(self._core, index, count)
        return _view(core, ("shard", self, index, count), self)

    def __getitem__(self, key: Any) -> Any:
        """``ds[i]`` is example i as a dict of arrays (as :meth:`example`);
        ``ds[a:b]`` (any slice), ``ds[[i, j, ...]]`` and ``ds[mask]`` are
        views (:meth:`select`, :meth:`filter`)."""
        kind = index_kind(key)
        if kind == "example":
            return self.example(int(key))
        if kind == "filter":
            return self.select(kept_index(self._core, np.asarray(key), "Dataset[...]"))
        if kind == "select":
            return self.select(key)
        begin, end, step = key.indices(len(self))
        if step != 1:
            return self.select(np.arange(begin, end, step, dtype=np.int64))
        end = max(begin, end)
        core = _core.slice_examples(self._core, begin, end)
        return _view(core, ("slice", self, begin, end), self)

    @property
    def num_examples(self) -> int:
        return self._core.num_examples

    def __len__(self) -> int:
        return self._core.num_examples

    def lengths(self, column: str | None = None) -> np.ndarray:
        """Per-example lengths (int64) of a ragged column."""
        name = column if column is not None else self._core.default_length_column
        return self._core.column(name).lengths()

    def example(self, index: int) -> dict[str, np.ndarray]:
        """Example ``index`` as a dict of numpy arrays (read-only views)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"Dataset: example {index} out of range; there are {len(self)}")
        index %= max(len(self), 1)
        out = {}
        for name in self.column_names:
            col = self._core.column(name)
            raw = col.example(index).view(numpy_dtype(col.dtype))
            lead = () if col.is_fixed else (-1,)
            if col.is_grid:
                lead = (int(col.heights()[index]), int(col.widths()[index]))
            out[name] = raw.reshape(lead + tuple(col.inner_shape))
        return out

    def __repr__(self) -> str:
        cols = []
        for name in self.column_names:
            col = self._core.column(name)
            kind = "fixed" if col.is_fixed else f"ragged, max length {col.max_length}"
            if col.is_grid:
                high, wide = col.heights().max(initial=0), col.widths().max(initial=0)
                kind = f"grid, max {high} x {wide}"
            cols.append(f"{name}: {col.dtype}{list(col.inner_shape)} ({kind})")
        return f"Dataset({counted(len(self), 'example')}; " + "; ".join(cols) + ")"


def graph_layout(columns: Columns, who: str) -> Any:
    """How `columns`' graph columns make a GraphsTuple (see data/graphs.py):
    the pytrees from_graphs was given, else nested dicts by column path."""
    layout = getattr(columns, "_graph_layout", None)
    return layout if layout is not None else GraphLayout.from_columns(columns._core, who)


def mapped_files(columns: Columns) -> tuple[str, ...]:
    """The files numpy or Arrow memory-maps for `columns` (a Dataset or a
    streamed file): a Loader re-checks them before each batch, and a job
    refuses to write over them."""
    return getattr(columns, "_mapped_files", ())


def set_mapped_files(columns: Columns, files: Iterable[str]) -> None:
    """Records the files `columns` are read through (see mapped_files)."""
    columns._mapped_files = tuple(files)


def set_reopen(
    dataset: Dataset, opener: Any, args: tuple, kwargs: Mapping[str, Any] | None = None
) -> None:
    """Records that ``opener(*args, **kwargs)`` opens `dataset` again (a
    picklable function of the absolute path it was read from, so that a
    process in another working folder opens the same file): a pickle of
    `dataset` is then that call, checked against the engine's stamps of the
    files it reads (file_stamp), not a copy of its values."""
    paths = [p for p in (args[0], *mapped_files(dataset)) if isinstance(p, str | os.PathLike)]
    absolute = dict.fromkeys(os.path.abspath(p) for p in paths)
    stamps = tuple((p, file_stamp(p)) for p in absolute)
    dataset._reopen = (opener, tuple(args), dict(kwargs or {}), stamps)


def file_stamp(path: str | os.PathLike) -> _core.FileStamp:
    """The engine's stamp of the file at `path` (device, inode, size,
    modification and status-change times): what tells that another file is
    there now, or that it changed, even at its old size and time.
    FileNotFoundError naming `path` when nothing is there."""
    stamp = _core.stamp_file(os.fspath(path))
    if stamp is None:
        raise FileNotFoundError(f"no such file: {path}")
    return stamp


def _reopened(opener: Any, args: tuple, kwargs: dict, stamps: tuple, layout: Any) -> Dataset:
    """A pickled file-backed dataset opened again (Dataset.__reduce__)."""
    for path, was in stamps:
        try:
            change = was.describe_change(file_stamp(path))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"Dataset: unpickling a dataset read from {path}, which no longer exists"
            ) from None
        if change:
            raise OSError(
                f"Dataset: unpickling a dataset read from {path}, which changed since it was "
                f"read: {change}; the values would differ from the pickled dataset's"
            )
    dataset = opener(*args, **kwargs)
    if layout is not None:
        dataset._graph_layout = layout
    return dataset


def _view(core: _core.Dataset, recipe: tuple, *parents: Dataset) -> Dataset:
    """A Dataset over the view `core`, knowing its `recipe` (how to make it
    again from its parents, for pickling) and what its parents read."""
    view = Dataset(core)
    view._view = recipe
    set_mapped_files(view, dict.fromkeys(f for p in parents for f in mapped_files(p)))
    layout = getattr(parents[0], "_graph_layout", None)
    if layout is not None:
        view._graph_layout = layout
    return view


def _rebuilt_view(recipe: tuple) -> Dataset:
    """A pickled view made again over its unpickled parents (Dataset.__reduce__)."""
    kind, *args = recipe
    if kind == "select":
        return args[0].select(args[1])
    if kind == "slice":
        return args[0][args[1] : args[2]]
    if kind == "shard":
        return args[0].shard(args[1], args[2])
    return Dataset.concat(args[0])


# The class Dataset.mix makes (data/mixture.py's Mixture, which reads
# Datasets and so cannot be imported here): set when that module is imported,
# which `import jaxbatch` does.
_MIXTURE: Any = None


def register_mixture(mixture_type: Any) -> None:
    """Makes `mixture_type` what Dataset.mix builds (data/mixture.py calls it)."""
    global _MIXTURE
    _MIXTURE = mixture_type


def _column_state(col: _core.RaggedColumn) -> tuple:
    """A column as a pickle holds it: its values copied back to back (by
    the engine) and its lengths (None for a fixed column)."""
    lengths = None if col.is_fixed else col.lengths()
    return (
        col.name,
        col.dtype,
        list(col.inner_shape),
        col.copy_values(),
        lengths,
        col.num_examples,
        *grid_state(col),
    )


def _from_values(columns: list[tuple], aligned: list[list[str]], layout: Any) -> Dataset:
    """A pickled in-memory dataset rebuilt over its unpickled values
    (Dataset.__reduce__); the engine checks them as it checks any input."""
    built = []
    for name, dtype, inner, values, lengths, count, shapes, axes in columns:
        if lengths is None:
            built.append(_core.RaggedColumn.fixed(name, dtype, inner, values, count, values))
        else:
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            cells = _core.RaggedColumn.ragged(
                name, dtype, inner, values, offsets, (values, offsets)
            )
            built.append(rebuilt(cells, shapes, axes))
    dataset = Dataset(_core.Dataset(built, aligned))
    if layout is not None:
        dataset._graph_layout = layout
    return dataset


def _memmap_files(columns: Iterable[Any]) -> tuple[str, ...]:
    """The files behind read-only np.memmap inputs (np.load(..., mmap_mode="r"))
    used without a copy (a byteswapped one is not read later; one mapped for
    writing is the caller's to change)."""
    files: list[str] = []
    for data in columns:
        for part in data if isinstance(data, tuple) else (data,):
            mapped = isinstance(part, np.memmap) and part.filename and part.mode in ("r", "c")
            if mapped and _native(part) is part:
                files.append(str(part.filename))
    return tuple(dict.fromkeys(files))


def _native(array: np.ndarray) -> np.ndarray:
    """`array` in native byte order: the core reads values as the machine's
    own (little-endian) integers and floats, so a '>i4' array is byteswapped
    (one copy) rather than read as garbage."""
    if array.dtype.byteorder not in ("=", "|") and not array.dtype.isnative:
        return array.astype(array.dtype.newbyteorder("="))
    return array


def _make_column(name: str, data: Any, dtype: Any, grid: bool = False) -> _core.RaggedColumn:
    if grid:
        return _grid_column(name, data, dtype)
    if isinstance(data, tuple) and len(data) == 2:
        return _ragged_from_pair(name, data, dtype)
    if isinstance(data, np.ndarray) and data.dtype != object:
        return _fixed_from_array(name, data, dtype)
    if isinstance(data, Iterable) and not isinstance(data, str | bytes):
        return _ragged_from_pieces(name, list(data), dtype)
    raise ValueError(
        f"column {name!r}: expected a list of per-example arrays, a (values, offsets) "
        f"tuple or a stacked numpy array, found {type(data).__name__}"
    )


def _grid_column(name: str, data: Any, dtype: Any) -> _core.RaggedColumn:
    """A column declared with two axes: (values, shapes), a stacked array
    [n, h, w, ...] (both without a copy) or a list of [h, w, ...] arrays."""
    if isinstance(data, tuple) and len(data) == 2:
        return grid_from_pair(name, _native(_as_array(name, data[0], dtype)), data[1])
    if isinstance(data, np.ndarray) and data.dtype != object:
        array = _native(_as_array(name, data, dtype))
        if array.ndim < 3:
            raise ValueError(
                f"column {name!r}: a stacked grid column needs [num_examples, h, w, ...], "
                f"found shape {array.shape}"
            )
        shapes = np.tile(np.array(array.shape[1:3], np.int64), (array.shape[0], 1))
        return grid_from_pair(name, array.reshape(-1, *array.shape[3:]), shapes)
    if isinstance(data, Iterable) and not isinstance(data, str | bytes):
        arrays = [_native(_as_array(name, a, dtype, example=i)) for i, a in enumerate(data)]
        return grid_from_arrays(name, arrays, dtype)
    raise ValueError(
        f"column {name!r}: expected a list of [h, w, ...] arrays, a (values, shapes) tuple or "
        f"a stacked [num_examples, h, w, ...] array, found {type(data).__name__}"
    )


def _ragged_from_pair(name: str, pair: tuple, dtype: Any) -> _core.RaggedColumn:
    values, offsets = pair
    values = _as_array(name, values, dtype)
    offsets = _native(np.asarray(offsets))
    if values.ndim < 1:
        raise ValueError(f"column {name!r}: expected values of rank >= 1, found a scalar")
    if offsets.ndim != 1 or offsets.size < 1 or not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError(
            f"column {name!r}: expected 1-D integer offsets with num_examples + 1 entries, "
            f"found shape {offsets.shape} and dtype {offsets.dtype}"
        )
    if offsets.size and offsets.max() >= 2**63:
        raise ValueError(
            f"column {name!r}: offsets must be below 2**63 (int64), found {offsets.max()}"
        )
    values = np.ascontiguousarray(_native(values))
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    return _core.RaggedColumn.ragged(
        name,
        dtype_name(values.dtype, f"column {name!r}"),
        list(values.shape[1:]),
        as_bytes(values),
        offsets,
        (values, offsets),
    )


def _fixed_from_array(name: str, array: np.ndarray, dtype: Any) -> _core.RaggedColumn:
    array = _as_array(name, array, dtype)
    array = np.ascontiguousarray(_native(array))
    if array.ndim < 1:
        raise ValueError(f"column {name!r}: expected [num_examples, ...], found a scalar")
    return _core.RaggedColumn.fixed(
        name,
        dtype_name(array.dtype, f"column {name!r}"),
        list(array.shape[1:]),
        as_bytes(array),
        array.shape[0],
        array,
    )


def _as_array(name: str, data: Any, dtype: Any, example: int | None = None) -> np.ndarray:
    """`data` as a numpy array of a supported dtype; ValueError naming the
    column (and example) for anything numpy cannot make numeric: ragged
    nested lists, strings, Python ints past int64/uint64, object arrays."""
    where = f"column {name!r}" + ("" if example is None else f", example {example}")
    try:
        array = np.asarray(data) if dtype is None else np.asarray(data, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{where}: cannot convert to a numeric array: {e}") from e
    if is_text_dtype(array.dtype) or (array.dtype == object and _holds_text(array)):
        raise ValueError(text_message(where, f"{type(data).__name__} of {array.dtype}"))
    if array.dtype == object or array.dtype.kind in "USMmO":
        raise ValueError(
            f"{where}: unsupported dtype '{array.dtype}'; expected a numeric or bool array "
            f"(found {type(data).__name__} of {array.dtype})"
        )
    return array


def _holds_text(array: np.ndarray) -> bool:
    """Whether an object array's first element is a string (text a user
    meant as a column, not numbers numpy could not stack)."""
    return array.size > 0 and isinstance(array.reshape(-1)[0], str | bytes)


def _ragged_from_pieces(name: str, items: list, dtype: Any) -> _core.RaggedColumn:
    if not items and dtype is None:
        raise ValueError(
            f"column {name!r}: cannot infer a dtype from an empty column; "
            f"pass dtypes={{{name!r}: ...}}"
        )
    arrays = [_native(_as_array(name, a, dtype, example=i)) for i, a in enumerate(items)]
    target = np.dtype(dtype).newbyteorder("=") if dtype is not None else arrays[0].dtype
    first = arrays[0] if arrays else np.zeros((0,), target)
    if first.ndim < 1:
        raise ValueError(
            f"column {name!r}, example 0: expected an array of rank >= 1 (a sequence), "
            f"found a scalar; pass a stacked numpy array for a fixed-shape column"
        )
    pieces = [(as_bytes(a), a.dtype.name, list(a.shape)) for a in arrays]
    return _core.RaggedColumn.from_pieces(
        name, dtype_name(target, f"column {name!r}"), list(first.shape[1:]), False, pieces
    )
