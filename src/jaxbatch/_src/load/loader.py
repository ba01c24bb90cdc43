"""Loader: the GIL-free C++ input pipeline, as a Python iterator."""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.choices import one_of
from jaxbatch._src.collate.collate import Batch, batch_from_core, pad_values
from jaxbatch._src.data.dataset import Dataset, mapped_files
from jaxbatch._src.data.grids import Axes
from jaxbatch._src.data.mixture import Mixture, SourceShare, source_shares
from jaxbatch._src.data.opening import OpenedSource, check_int_option, open_source
from jaxbatch._src.load.agree import agree, loader_settings
from jaxbatch._src.plan.plan import BatchShape
from jaxbatch._src.plan.planners import (
    GRAPH_PLANNERS,
    PATCH_PLANNERS,
    PLANNERS,
    Pack,
    PatchPack,
    Planner,
)

log = logging.getLogger("jaxbatch")


@dataclasses.dataclass(frozen=True)
class ColumnSchema:
    """What a valid example of one column looks like. ``dtype`` and
    ``inner_shape`` default to the column's own (inferred from the data and
    then enforced); ``min_length``/``max_length`` bound a ragged column's
    length; ``finite=True`` refuses NaN and Inf in floating columns."""

    dtype: Any = None
    inner_shape: Sequence[int] | None = None
    min_length: int = 0
    max_length: int | None = None
    finite: bool = False


@dataclasses.dataclass(frozen=True)
class LoaderStats:
    """Every example the loader has reached, accounted for: ``examples``
    yielded, ``skipped`` (bad records under ``on_error="skip"``, and what the
    planner leaves out under ``too_long="skip"`` or ``too_big="skip"``, as
    ``jb.plan``'s stats count it), ``quarantined`` bad records, and
    ``dropped`` by a remainder policy (the plan's, or the shards' uneven
    tail); ``max_errors`` counts bad records only. Counts add up
    over epochs: yielded + skipped + quarantined + dropped = epochs entered x
    dataset size. With ``shard``, ``batches`` and ``examples`` are this
    process's while ``skipped``, ``quarantined`` and ``dropped`` count the
    whole data set (every process plans it alike): sum ``examples`` across
    processes, not the others. ``truncated`` counts examples cut to their
    batch's shape under ``too_long="truncate"``, per epoch entered and over
    the whole data set, like ``dropped``."""

    batches: int
    examples: int
    skipped: int
    quarantined: int
    dropped: int
    padding_batches: int
    epoch: int
    truncated: int
    #: Of the batches yielded: real and padded elements (a graph batch's
    #: nodes), and a graph batch's real and padded edges.
    real_elements: int = 0
    padded_elements: int = 0
    real_edges: int = 0
    padded_edges: int = 0
    #: Row groups a streaming loader read since it started (or set_state):
    #: more than the file's row groups per epoch means some were read again.
    chunk_reads: int = 0
    #: A mixture's sources by name: what each yielded, its realised share of
    #: examples and tokens, and its weight (a :class:`SourceShare`); {} for
    #: one dataset. For a mixture ``epoch`` counts planning blocks.
    sources: Mapping[str, SourceShare] = dataclasses.field(default_factory=dict)

    @property
    def efficiency(self) -> float:
        """Real over padded elements of the batches yielded (a graph batch's
        nodes): 1.0 before the first."""
        return self.real_elements / self.padded_elements if self.padded_elements else 1.0

    @property
    def edge_efficiency(self) -> float:
        """Real over padded edges of the graph batches yielded."""
        return self.real_edges / self.padded_edges if self.padded_edges else 1.0


if TYPE_CHECKING:
    from typing_extensions import Unpack

_CORE = _core.LoaderOptions()  # The engine's defaults.
# The engine's names (ShuffleMode, ErrorPolicy), which it validates;
# tests/test_typing.py checks these types list exactly them.
Shuffle = Literal["global", "block", "none"]
OnError = Literal["raise", "skip", "quarantine"]
#: (index, count), or "jax": jax.process_index() of jax.process_count().
Shard = tuple[int, int] | Literal["jax"]


@dataclasses.dataclass(frozen=True)
class LoaderOptions:
    """Everything about a :class:`Loader` but its source, planner and state,
    as one value: ``jb.Loader(ds, planner, options=opts)`` or keyword
    arguments of the same names (see :class:`Loader`). The defaults are the
    engine's, and an option the engine refuses fails here, where it was
    written; what needs the data (``schema``, ``pad_value`` per column,
    ``columns``) is checked when a Loader opens its source.

    Example::

        opts = jb.LoaderOptions(shuffle="block", block_size=4096, epochs=None,
                                host_memory_limit=2**30)
        loader = jb.Loader("corpus.parquet", jb.Pack(1024, 8), options=opts)
    """

    columns: Sequence[str] | None = None
    column: str | None = None
    aligned: Sequence[Sequence[str]] | None = None
    shuffle: bool | Shuffle = True
    block_size: int = _CORE.schedule.block_size
    seed: int = _CORE.schedule.seed
    shard: Shard | None = None
    num_threads: int | None = None
    prefetch: int = _CORE.prefetch
    epochs: int | None = _CORE.epochs
    on_error: OnError = _core.error_policy_name(_CORE.on_error)
    max_errors: int | float | None = None
    schema: Mapping[str, ColumnSchema] | None = None
    quarantine_file: str | os.PathLike | None = None
    pad_value: int | float | Mapping[str, int | float] = _CORE.default_pad_value
    padded_segments: bool = _CORE.padded_segments
    host_memory_limit: int | None = None
    stream: bool | None = None
    axes: Axes | None = None
    #: The call the user wrote, first in every message (jb.run builds the
    #: options of the Loader it opens); not an option, so not a field.
    who: dataclasses.InitVar[str] = "Loader"

    def __post_init__(self, who: str) -> None:
        if self.stream not in (None, True, False):
            raise ValueError(f"{who}: stream must be None, True or False, found {self.stream!r}")
        # A "jax" shard is known only where the Loader starts.
        shard = (0, 1) if self.shard == "jax" else resolve_shard(self.shard, who)
        _core.validate_loader_options(self._core(shard, who), who)

    def _core(self, shard: tuple[int, int], who: str = "Loader") -> _core.LoaderOptions:
        """The engine's options (source, schema and mapped files are the
        Loader's to fill). Only Python types are checked here."""
        o = _core.LoaderOptions()
        o.schedule.shuffle = _shuffle_mode(self.shuffle, who)
        for option in ("block_size", "prefetch"):
            _check_int(option, getattr(self, option), who)
        if self.epochs is not None:
            _check_int("epochs", self.epochs, who)
            if self.epochs == 0:  # The engine's "forever" is None here.
                raise ValueError(f"{who}: epochs must be >= 1 or None (forever), found 0")
        for option in ("num_threads", "host_memory_limit"):
            if getattr(self, option) is not None:
                _check_int(option, getattr(self, option), who)
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed >= 2**64:
            raise ValueError(f"{who}: seed must be an int in [0, 2**64), found {seed!r}")
        if seed < 0:
            raise ValueError(f"{who}: seed must be an int in [0, 2**64), found {seed!r}")
        o.schedule.block_size = int(self.block_size)
        o.schedule.seed = int(seed)
        o.schedule.shard_index, o.schedule.shard_count = shard
        o.length_column = self.column or ""
        o.num_threads = 0 if self.num_threads is None else int(self.num_threads)
        o.prefetch = int(self.prefetch)
        o.epochs = 0 if self.epochs is None else int(self.epochs)
        o.on_error = _core.parse_error_policy(str(self.on_error))
        o.max_errors, o.max_error_fraction = _resolve_max_errors(self.max_errors, who)
        o.pad_values, o.default_pad_value = pad_values(self.pad_value, who)
        if not isinstance(self.padded_segments, bool):
            raise ValueError(
                f"{who}: padded_segments must be True or False, found {self.padded_segments!r}"
            )
        o.padded_segments = self.padded_segments
        o.host_memory_limit = int(self.host_memory_limit or 0)
        o.quarantine_path = os.fspath(self.quarantine_file) if self.quarantine_file else ""
        return o


class LoaderKwargs(TypedDict, total=False):
    """LoaderOptions' fields as keyword arguments of :class:`Loader`, so a
    type checker sees ``jb.Loader(ds, planner, shuffle="sometimes")`` is
    wrong (tests/test_typing.py keeps the two alike)."""

    columns: Sequence[str] | None
    column: str | None
    aligned: Sequence[Sequence[str]] | None
    shuffle: bool | Shuffle
    block_size: int
    seed: int
    shard: Shard | None
    num_threads: int | None
    prefetch: int
    epochs: int | None
    on_error: OnError
    max_errors: int | float | None
    schema: Mapping[str, ColumnSchema] | None
    quarantine_file: str | os.PathLike | None
    pad_value: int | float | Mapping[str, int | float]
    padded_segments: bool
    host_memory_limit: int | None
    stream: bool | None
    axes: Axes | None


def _shuffle_mode(shuffle, who: str):
    if shuffle is True:
        return _core.ShuffleMode.global_
    if shuffle is False:
        return _core.ShuffleMode.none
    if not isinstance(shuffle, str):
        names = one_of(tuple(_core.shuffle_mode_name(m) for m in _core.ShuffleMode))
        raise ValueError(f"{who}: shuffle must be True, False, {names}, found {shuffle!r}")
    return _core.parse_shuffle_mode(shuffle)


def _check_int(option: str, value, who: str) -> None:
    """ValueError naming `option` unless `value` is an int the core's int64
    holds (the engine checks its range)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{who}: {option} must be an int, found {type(value).__name__} {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{who}: {option} must be below 2**63, found {value}")


class Loader:
    """Batches from C++ worker threads: shuffled, sharded, planned, collated
    into reused buffers and prefetched, with the GIL released.

    ``source`` is a :class:`Dataset`, a Hugging Face ``datasets.Dataset``
    (read in place, see :meth:`Dataset.from_huggingface`; ``columns`` picks
    its columns) or a path (Parquet, Arrow IPC, or a folder of ``.npy``
    values/offsets pairs; see ``columns``). Iterating
    yields :class:`Batch` dicts as :func:`jaxbatch.collate` returns them. The
    stream is identical, byte for byte, for the same seed whatever
    ``num_threads``; :meth:`get_state` / ``state=`` resume it exactly.

    Example::

        with jb.Loader(ds, jb.AutoBuckets(8, token_budget=65536), epochs=None) as loader:
            for batch in loader:
                train_step(batch["tokens"], batch["tokens_mask"])

    Arguments:
      shuffle: True (a seeded global permutation per epoch, batch order
        shuffled too), False, or ``"block"``: contiguous blocks of
        ``block_size`` examples in random order, shuffled within each block,
        batches in the order the blocks give them, so reads from disk stay
        sequential at the cost of a weaker shuffle.
      shard: ``(index, count)`` or ``"jax"`` (``jax.process_index()``,
        ``jax.process_count()``): processes get disjoint batches, the same
        number of steps and the same batch shape at every step. With
        ``"jax"`` under ``jax.distributed`` the processes first check, through
        JAX's key-value store, that they were given the same data and
        settings, and raise ValueError on every process naming what differs
        on which process; every process must build its ``"jax"`` Loaders in
        the same order (see docs/multi-host.md). ``(index, count)`` is not
        checked.
      num_threads: worker threads (default: the CPU count, at most 8, and for
        a streamed file as many as ``host_memory_limit`` holds beside its
        batches and chunk cache, one at least; at most 1024). A thread the
        system cannot start raises RuntimeError.
      prefetch: ready batches kept ahead of the consumer.
      epochs: passes over the data; None repeats forever.
      on_error: ``"raise"``, ``"skip"`` or ``"quarantine"`` for records that
        break ``schema`` (a dict of column name to :class:`ColumnSchema`).
      max_errors: bad records allowed, a count (int) or a fraction of the
        examples reached (float < 1); beyond it the run stops with a summary.
      quarantine_file: JSONL file quarantined records are appended to (with
        ``shard``, by shard 0 only: every shard finds the same records).
      padded_segments: padded batches carry ``<k>_segment_ids`` (1 on real
        elements, 0 padding) and ``<k>_positions`` (0..length-1, 0 padding)
        as packed ones do, so one attention and position code path serves
        both; False leaves them out (8 of the 13 bytes a cell of int32
        tokens; measured, 28% less collation time).
      host_memory_limit: bytes of batch buffers alive at once (they come
        back when your arrays are freed); must hold ``prefetch + 2`` batches
        plus any you keep. Keeping every batch it holds makes ``next()``
        raise RuntimeError (instead of waiting forever for memory only you
        can give back). When the loader streams (below) it bounds everything
        the loader holds: ``prefetch + 2`` batch buffers, one gather of up
        to a batch per thread, one row group being decoded, and a cache of
        decoded row groups (the rest, at least one row group).
      stream: read a Parquet file one row group at a time instead of whole.
        None (default) streams a ``.parquet`` path when ``host_memory_limit``
        is set and the file's columns decode to more bytes than it; True
        always streams (it needs ``host_memory_limit``), False never. Opening
        reads the file once for lengths and bad records (for a graph
        planner: each graph's node and edge count, and every malformed
        graph), keeping one row group at a time; batches then read the row
        groups they touch, and
        the stream is identical to reading the file whole. ``shuffle=False``,
        or ``"block"`` with ``block_size`` the row-group size, reads each row
        group about once per epoch, except with ``Pack`` without a window:
        it keeps rows open over the whole file (best fit sorts all examples
        by length), so every batch takes examples from across it (measured:
        3,043 reads of 29 row groups); pass ``lookahead=`` the row-group
        size, and past 4 reads per row group and epoch the loader warns. A
        global shuffle touches most row groups in every batch, so with a
        cache smaller than the file it reads row groups many times over
        (``stats.chunk_reads`` counts reads).
        ``loader.dataset`` is then a ``StreamedParquet``: column names and
        lengths, no values. See docs/data-loading.md.
      axes: a file's (or Hugging Face dataset's) variable axes and ties, as
        :meth:`Dataset.from_arrays` takes them (``{"tokens": ("L",), "pair":
        ("L", "L")}``); a streamed file's ties are checked row group by row
        group, and a broken one names the file's example, the axis, both
        columns and their sizes.
    """

    def __init__(
        self,
        source: Dataset | str | os.PathLike,
        planner: Planner | PatchPack,
        *,
        options: LoaderOptions | None = None,
        state: Mapping[str, Any] | None = None,
        **kwargs: Unpack[LoaderKwargs],
    ):
        if not isinstance(planner, PLANNERS + PATCH_PLANNERS):
            raise TypeError(f"Loader: expected a planner, found {type(planner).__name__}")
        if options is None:
            options = LoaderOptions(**kwargs)
        elif kwargs:
            options = dataclasses.replace(options, **kwargs)
        graphs = isinstance(planner, GRAPH_PLANNERS)
        self._take(open_source(source, options, graphs=graphs), planner, options, state)

    def _take(
        self,
        opened: OpenedSource,
        planner: Planner | PatchPack,
        options: LoaderOptions,
        state: Mapping[str, Any] | None,
    ) -> None:
        """Starts loading `opened` (see open_source) with `planner`."""
        self.options = o = options
        self._feeder: threading.Thread | None = None
        self._stream = opened.stream
        self.dataset, self.source = opened.dataset, opened.name
        self._schema_rules = opened.schema_rules
        self.planner = planner
        self._core_loader = None
        self._core_options = o._core(resolve_shard(o.shard))
        self._core_options.schedule.planner = planner._options()
        self._core_options.schema = opened.core_schema
        self._core_options.source = self.source
        self._core_options.mapped_files = list(mapped_files(self.dataset))
        fixed = {n: self.dataset._core.column(n).is_fixed for n in self.dataset.column_names}
        self._ragged = tuple(n for n, f in fixed.items() if not f)
        self._fixed = tuple(n for n, f in fixed.items() if f)
        self._graphs = opened.graphs
        # A graph planner plans by node and edge counts (the engine refuses column=).
        self._length_column = opened.length_column
        # A Pack of several features: each one's row length, in the engine's order.
        row_lengths = self._core_options.schedule.planner
        row_lengths = row_lengths.row_length if isinstance(planner, Pack) else None
        self._feature_lengths = tuple(row_lengths.items()) if isinstance(row_lengths, dict) else ()
        if self._feature_lengths:
            self._length_column = self._feature_lengths[0][0]
        self._start(state)
        if o.shard == "jax":
            try:
                agree("loader", "Loader(shard='jax')", lambda: loader_settings(self))
            except BaseException:
                self.close()
                raise

    def _start(self, state: Mapping[str, Any] | None) -> None:
        core_state = None if state is None else self._parse_state(state)
        self._start_core(core_state)

    def _start_core(self, core_state) -> None:
        self._ended = False  # Set once next() reached the end of the data.
        if isinstance(self.dataset, Mixture):
            self._core_loader = _core.Loader(self.dataset._mixture, self._core_options, core_state)
            for change in self._core_loader.mixture_changes():
                log.warning("%s", change)
            return
        if self._stream is None:
            self._core_loader = _core.Loader(self.dataset._core, self._core_options, core_state)
            return
        self._core_loader = _core.Loader(self._stream._source, self._core_options, core_state)
        if self.options.shuffle not in (True, "global"):  # A global shuffle re-reads.
            self._stream.watch_rereads(self.planner, self.options.host_memory_limit)
        # The feeder holds the core loader and the file, never this Loader, so
        # dropping the Loader still closes it (and so ends the feeder).
        self._feeder = threading.Thread(
            target=_feed, args=(self._core_loader, self._stream), daemon=True,
            name=f"jaxbatch-feeder:{self._stream.path.name}",
        )  # fmt: skip
        self._feeder.start()
        _STREAMING.add(self)

    def _parse_state(self, state: Mapping[str, Any]):
        """The core's LoaderState from a get_state() dict. The engine reads
        it as the JSON text it wrote (fields, types, ranges and older
        releases' states: load/state_json.h) and checks it against this
        loader (version, data, planner, shuffle, shard, position)."""
        if not isinstance(state, Mapping):
            raise ValueError(
                f"Loader: state must be a dict from get_state(), found {type(state).__name__}"
            )
        try:
            text = json.dumps(dict(state), default=_json_int, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"Loader: the state is not a dict from get_state(): {e}") from None
        return _core.loader_state_from_json(text)

    def get_state(self) -> dict[str, Any]:
        """A small JSON-serialisable dict: seed, epoch, position and counts,
        and the key of the stream they belong to (the engine's: data
        fingerprint, planner, shuffle, shard). Its size does not grow with
        the data or the prefetch depth.

        Refused (ValueError) while a ``jb.device_prefetch`` /
        ``jb.global_batches`` iterator reads this Loader ahead: the Loader
        is past the batches queued there, so that iterator's ``get_state()``
        is the one to save."""
        check_not_read_ahead(
            self, "Loader.get_state", "save", "call get_state() on that iterator instead"
        )
        return self._read_state()

    def _read_state(self) -> dict[str, Any]:
        """get_state() without the read-ahead check (for the prefetcher itself)."""
        return json.loads(_core.loader_state_to_json(self._live().state()))

    def set_state(
        self,
        state: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        elastic: bool = False,
    ) -> None:
        """Continues from `state` (from :meth:`get_state`) with exactly the
        batches an uninterrupted run would have produced.

        A state that does not fit (another stream, a field missing, a
        position past the end) is a ValueError naming why, and the Loader
        goes on exactly as it was.

        ``elastic=True`` restores a state saved by processes ``(i, n)`` on
        this Loader's ``shard``, which may have another count ``m``: the m
        processes continue the same global stream from the step the n
        processes reached, no example repeated or skipped (with
        ``remainder="drop"`` the rest of that epoch drops its own uneven
        tails, fewer than ``m`` batches per shape), every process getting a
        batch of the same shape at every step; later epochs are dealt to m
        as usual. `state` is one process's state or a list of several
        (every process's, say), which must be of one stream and one step:
        states saved at different steps are refused (ValueError) naming the
        processes and their steps. Counts in :attr:`stats` start from the
        restore. With ``shard="jax"`` the processes then check they agree
        (the check ``Loader(shard="jax")`` makes). See docs/multi-host.md.

        Refused (ValueError) while a ``jb.device_prefetch`` /
        ``jb.global_batches`` iterator reads this Loader ahead: the batches
        queued there would come first; restore that iterator instead."""
        check_not_read_ahead(
            self,
            "Loader.set_state",
            "restore",
            "call set_state() on that iterator instead (it drops what it read ahead)",
        )
        self._write_state(state, elastic=elastic)

    def _write_state(
        self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, elastic: bool = False
    ) -> None:
        """set_state() without the read-ahead check (for the prefetcher itself).
        The engine checks the state against the running loader first, so a
        refused one leaves it running exactly as it was."""
        if not isinstance(elastic, bool):
            raise TypeError(f"Loader.set_state: elastic must be a bool, found {elastic!r}")
        if elastic:
            saved = [state] if isinstance(state, Mapping) else state
            if not isinstance(saved, Sequence) or isinstance(saved, str | bytes):
                raise ValueError(
                    f"Loader.set_state(elastic=True): expected a state from get_state() or a "
                    f"list of them, found {type(state).__name__}"
                )
            o = self._core_options.schedule
            core_state = _core.elastic_start(
                [self._parse_state(s) for s in saved], o.shard_index, o.shard_count
            )
        else:
            core_state = self._parse_state(state)
        if self._core_loader is not None:
            self._core_loader.check_state(core_state)
        self.close()
        self._start_core(core_state)
        if elastic and self.options.shard == "jax":
            agree("loader", "Loader.set_state(elastic=True)", lambda: loader_settings(self))

    @property
    def stats(self) -> LoaderStats:
        live = self._live()
        s = live.state()
        counts = {f.name: getattr(s, f.name) for f in dataclasses.fields(LoaderStats)[:-2]}
        return LoaderStats(**counts, chunk_reads=live.chunk_reads, sources=source_shares(s))

    @property
    def mixture_changes(self) -> list[str]:
        """What the state this loader started from changed of its mixture
        (weights, sources added or removed, from which block on), one line
        each, as logged (logger "jaxbatch", WARNING); [] when nothing did."""
        return list(self._live().mixture_changes())

    @property
    def quarantine(self) -> list[dict[str, Any]]:
        """Quarantined records: ``{"example": index, "reason": ...}``."""
        return [{"example": e, "reason": r} for e, r in self._live().quarantine()]

    @property
    def num_threads(self) -> int:
        return self._live().num_threads

    def _live(self):
        if self._core_loader is None:
            raise RuntimeError("Loader: closed")
        return self._core_loader

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        core = self._core_loader  # Once: close() from another thread may clear it.
        if core is None:
            if self._ended:
                raise StopIteration
            # Not StopIteration: a loop would take a stream cut short for the
            # end of the data and carry on as if it had finished.
            raise RuntimeError(
                "Loader: closed; next() after close() has no batch to give (the data had not "
                "ended): open a new Loader, with state= from get_state() to continue"
            )
        item = core.next()  # Raises RuntimeError when close() cuts its wait short.
        if item is None:
            self._ended = True
            raise StopIteration
        arrays, epoch, step, _, planned, packed = item
        if self._stream is not None:
            self._stream.note_reads(core.chunk_reads, epoch)
        shape = BatchShape.from_core(planned, self._feature_lengths)
        batch = batch_from_core(
            arrays, step, shape, packed, self._length_column, self._ragged, self._fixed,
            self._graphs,
        )  # fmt: skip
        batch.epoch = epoch
        return batch

    def steps(self, epoch: int = 0) -> int:
        """This process's steps (batches) in `epoch`, exactly: the engine
        plans that epoch (a shuffled packer's epochs can differ in length).
        For an Optax schedule, ``len(loader)`` counts all of them."""
        return self._live().steps(int(epoch))

    def __len__(self) -> int:
        """Every step of the stream, over all its epochs; TypeError for an
        endless stream (``epochs=None``): use :meth:`steps` per epoch."""
        if self.options.epochs is None:
            raise TypeError(
                "Loader: len() of an endless stream (epochs=None) has no answer; count one "
                "epoch's steps with loader.steps(epoch)"
            )
        return self._live().total_steps()

    def __bool__(self) -> bool:
        return True  # Not len(): a loader is a loader, however many steps it has left.

    @property
    def shapes(self) -> list[BatchShape]:
        """The distinct batch shapes this process's stream will yield from
        its current epoch on (every remaining epoch's, or just the current
        one's for an endless stream), in the order the batches first use
        them: what to compile ahead, after shuffle, shard and bad records.
        ``[]`` once the stream has ended (at its end or at an error), closed
        or not."""
        if self._core_loader is None and self._ended:
            return []
        live = self._live()
        planned = live.planned_shapes(live.state().epoch)
        return [BatchShape.from_core(s, self._feature_lengths) for s in planned]

    def close(self) -> None:
        """Stops and joins every worker thread. Idempotent, and safe from
        another thread: a ``next()`` waiting there, and every later one,
        raises RuntimeError saying the loader was closed (unless the data had
        ended: then StopIteration, as before)."""
        # Read once each: another thread may be closing too (the core
        # serialises closers, so each returns with every thread joined).
        core = self._core_loader
        if core is not None:
            core.close()
            self._core_loader = None
        feeder = self._feeder
        if feeder is not None:
            feeder.join()  # Sees the core closed within its next wait.
            self._feeder = None

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass


def loader_for(
    opened: OpenedSource,
    planner: Planner,
    options: LoaderOptions,
    state: Mapping[str, Any] | None = None,
) -> Loader:
    """A Loader over a source already opened and checked for `options`
    (jb.run's, see open_source): nothing is opened or checked again."""
    loader = Loader.__new__(Loader)
    loader._take(opened, planner, options, state)
    return loader


# How long the feeder waits for a request before it checks for close again.
_FEED_WAIT_MS = 50
# Streaming loaders whose feeder may run: closed at exit, before the
# interpreter freezes daemon threads (a feeder frozen while it takes the GIL
# back from C++ would abort the process).
_STREAMING: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_streaming_loaders() -> None:
    for loader in list(_STREAMING):
        loader.close()


def _feed(core_loader, stream) -> None:
    """The feeder thread of a streaming Loader: reads the row groups the
    core's workers ask for and hands them over (the core copies them, so no
    Python object reaches a C++ worker). An error ends the stream with a
    message naming the file and row group, raised by the consumer's next()."""
    try:
        reader = stream.open_reader()
        while True:
            chunk = core_loader.next_chunk_request(_FEED_WAIT_MS)
            if chunk == _core.Loader.CHUNKS_CLOSED:
                return
            if chunk < 0:
                continue
            try:
                decoded = stream.read_chunk(reader, chunk)
            except (OSError, ValueError) as e:
                core_loader.fail_chunk(chunk, str(e))
                continue
            try:
                core_loader.provide_chunk(chunk, decoded._core)
            except (OSError, ValueError):
                pass  # The core failed this row group with the message.
            del decoded
    except BaseException as e:  # noqa: BLE001 - every failure must reach the consumer
        try:
            core_loader.fail_chunk(-1, f"Loader: the reader of {stream.path} stopped: {e!r}")
        except Exception:  # noqa: BLE001 - closed already
            pass


def resolve_shard(shard, who: str = "Loader") -> tuple[int, int]:
    """(index, count) from a shard option; the engine checks the range."""
    if shard is None:
        return 0, 1
    if shard == "jax":
        import jax

        return jax.process_index(), jax.process_count()
    if (
        isinstance(shard, tuple | list)
        and len(shard) == 2
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in shard)
        and all(-(2**63) <= v < 2**63 for v in shard)
    ):
        return int(shard[0]), int(shard[1])
    raise ValueError(f"{who}: shard must be (index, count) or 'jax', found {shard!r}")


def _json_int(value: Any) -> int:
    """A NumPy integer in a state dict as the int JSON writes (json.dumps'
    `default`); anything else stays unwritable, so it is refused."""
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"{type(value).__name__} {value!r:.80} is not a JSON value")


def _resolve_max_errors(max_errors, who: str) -> tuple[int, float]:
    if max_errors is None:
        return -1, -1.0
    if isinstance(max_errors, int | np.integer) and not isinstance(max_errors, bool):
        check_int_option("max_errors", max_errors, 0, who)
    if isinstance(max_errors, bool) or max_errors < 0:
        raise ValueError(
            f"{who}: max_errors must be a count >= 0 or a fraction, found {max_errors!r}"
        )
    if isinstance(max_errors, int | np.integer):
        return int(max_errors), -1.0
    if max_errors < 1:
        return -1, float(max_errors)
    raise ValueError(
        f"{who}: max_errors must be an int (a count) or a float below 1 (a fraction), "
        f"found {max_errors!r}"
    )


# Each Loader's prefetching iterator (a jb.DevicePrefetcher), while both live:
# the Loader's own state is then past the batches queued in the iterator, so
# saving it would skip them (Loader.get_state and the checkpoint handlers
# refuse it).
_READ_AHEAD: weakref.WeakKeyDictionary[Loader, weakref.ref[Any]] = weakref.WeakKeyDictionary()


def register_prefetcher(loader: Loader, prefetcher: Any) -> None:
    """Records that `prefetcher` reads `loader` ahead, for as long as it lives."""
    _READ_AHEAD[loader] = weakref.ref(prefetcher)


def prefetcher_of(loader: Loader) -> Any:
    """The live prefetching iterator reading `loader` ahead, or None."""
    ref = _READ_AHEAD.get(loader)
    return None if ref is None else ref()


def check_not_read_ahead(loader: Loader, who: str, action: str, fix: str) -> None:
    """Raises ValueError, naming `who` and the `fix`, when a live
    prefetching iterator reads `loader` ahead: the Loader's own state is
    past the batches queued there, so saving it would skip them on restore
    (`action` "save") and restoring it would yield them first ("restore")."""
    wrapper = prefetcher_of(loader)
    if wrapper is None:
        return
    harm = {
        "save": "a restore would skip them",
        "restore": "they would come before the restored stream",
    }[action]
    raise ValueError(
        f"{who}: this Loader is read ahead by {wrapper} (jb.device_prefetch or "
        f"jb.global_batches over it), so its own state is past the batches queued there and "
        f"{harm}; {fix}"
    )
