"""Loader: the GIL-free C++ input pipeline, as a Python iterator."""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._collate import Batch, _batch_from_core, _pad_values
from jaxbatch._dataset import Dataset
from jaxbatch._dtypes import dtype_name
from jaxbatch._plan import BatchShape
from jaxbatch._planners import AutoBuckets, FixedBuckets, Pack, PadToMax, Planner, planner_key

# 2: block shuffle keeps the planner's batch order (1 shuffled it); a
# version 1 state restores as before for every other shuffle.
_STATE_VERSION = 2
_SHUFFLE = {True: _core.ShuffleMode.global_, False: _core.ShuffleMode.none,
            "global": _core.ShuffleMode.global_, "block": _core.ShuffleMode.block,
            "none": _core.ShuffleMode.none}  # fmt: skip
_ON_ERROR = {"raise": _core.ErrorPolicy.raise_, "skip": _core.ErrorPolicy.skip,
             "quarantine": _core.ErrorPolicy.quarantine}  # fmt: skip
_STATE_FIELDS = ("seed", "epoch", "step", "batches", "examples", "skipped", "quarantined",
                 "dropped", "padding_batches", "truncated")  # fmt: skip
# Fields a state may lack (saved before they were added): they count from 0.
_OPTIONAL_STATE_FIELDS = ("truncated",)


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
    yielded, ``skipped`` and ``quarantined`` bad records, and ``dropped`` by a
    remainder policy (the plan's, or the shards' uneven tail). Counts add up
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
    #: Row groups a streaming loader read since it started (or set_state):
    #: more than the file's row groups per epoch means some were read again.
    chunk_reads: int = 0


class Loader:
    """Batches from C++ worker threads: shuffled, sharded, planned, collated
    into reused buffers and prefetched, with the GIL released.

    ``source`` is a :class:`Dataset` or a path (Parquet, Arrow IPC, or a
    folder of ``.npy`` values/offsets pairs; see ``columns``). Iterating
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
        number of steps and the same batch shape at every step.
      num_threads: worker threads (default: the CPU count, at most 8; at most
        1024). A thread the system cannot start raises RuntimeError.
      prefetch: ready batches kept ahead of the consumer.
      epochs: passes over the data; None repeats forever.
      on_error: ``"raise"``, ``"skip"`` or ``"quarantine"`` for records that
        break ``schema`` (a dict of column name to :class:`ColumnSchema`).
      max_errors: bad records allowed, a count (int) or a fraction of the
        examples reached (float < 1); beyond it the run stops with a summary.
      quarantine_file: JSONL file quarantined records are appended to (with
        ``shard``, by shard 0 only: every shard finds the same records).
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
        reads the file once for lengths and bad records, keeping one row
        group at a time; batches then read the row groups they touch, and
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
    """

    def __init__(
        self,
        source: Dataset | str | os.PathLike,
        planner: Planner,
        *,
        columns: Sequence[str] | None = None,
        column: str | None = None,
        aligned: Sequence[Sequence[str]] | None = None,
        shuffle: bool | str = True,
        block_size: int = 1024,
        seed: int = 0,
        shard: tuple[int, int] | str | None = None,
        num_threads: int | None = None,
        prefetch: int = 4,
        epochs: int | None = 1,
        on_error: str = "raise",
        max_errors: int | float | None = None,
        schema: Mapping[str, ColumnSchema] | None = None,
        quarantine_file: str | os.PathLike | None = None,
        pad_value: int | float | Mapping[str, int | float] = 0,
        host_memory_limit: int | None = None,
        stream: bool | None = None,
        state: Mapping[str, Any] | None = None,
    ):
        if not isinstance(planner, PadToMax | FixedBuckets | AutoBuckets | Pack):
            raise TypeError(f"Loader: expected a planner, found {type(planner).__name__}")
        if stream not in (None, True, False):
            raise ValueError(f"Loader: stream must be None, True or False, found {stream!r}")
        self._feeder: threading.Thread | None = None
        self._stream = None
        if isinstance(source, Dataset):
            if columns is not None:
                raise ValueError("Loader: columns= selects columns of a file; got a Dataset")
            if stream:
                raise ValueError("Loader: stream=True reads a Parquet file; got a Dataset")
            self.dataset, self.source = source, "dataset"
            core_schema = self._schema(schema or {})
        elif _should_stream(source, stream, host_memory_limit, columns):
            from jaxbatch._sources import StreamedParquet, parquet_column_names

            if not host_memory_limit:
                raise ValueError(
                    "Loader: stream=True needs host_memory_limit (bytes) to size the cache of "
                    "row groups"
                )
            names = parquet_column_names(source, columns)
            self._stream = StreamedParquet(
                source, columns, column, aligned, self._schema(schema or {}, names)
            )
            self.dataset, self.source = self._stream, str(source)
            core_schema = []  # Applied per row group while opening.
        else:
            from jaxbatch._sources import open_source

            self.dataset = open_source(source, columns, column, aligned)
            self.source = str(source)
            core_schema = self._schema(schema or {})
        mapped = list(self.dataset._mapped_files)
        self.planner = planner
        self._core_loader = None
        self._fingerprint_cache: str | None = None
        if shuffle not in _SHUFFLE:
            raise ValueError(f"Loader: shuffle must be True, False or 'block', found {shuffle!r}")
        if on_error not in _ON_ERROR:
            raise ValueError(
                f"Loader: on_error must be 'raise', 'skip' or 'quarantine', found {on_error!r}"
            )
        for option, value, low in (
            ("block_size", block_size, 1),
            ("prefetch", prefetch, 1),
            ("epochs", 1 if epochs is None else epochs, None),  # checked below
            ("host_memory_limit", host_memory_limit or 0, 0),
        ):
            _check_int_option(option, value, low)
        if isinstance(pad_value, Mapping):
            unknown = [k for k in pad_value if k not in self.dataset.column_names]
            if unknown:
                raise ValueError(
                    f"Loader: pad_value names column {unknown[0]!r}, which the data does not "
                    f"have; columns are {self.dataset.column_names}"
                )
        if (
            isinstance(seed, bool)
            or not isinstance(seed, int | np.integer)
            or not 0 <= seed < 2**64
        ):
            raise ValueError(f"Loader: seed must be an int in [0, 2**64), found {seed!r}")
        shard_index, shard_count = _resolve_shard(shard)
        errors, fraction = _resolve_max_errors(max_errors)
        pads, default_pad = _pad_values(pad_value, "Loader")
        self._args = dict(
            planner=planner._options(),
            length_column=column or "",
            shuffle=_SHUFFLE[shuffle],
            block_size=int(block_size),
            seed=int(seed),
            shard_index=shard_index,
            shard_count=shard_count,
            num_threads=0 if num_threads is None else int(num_threads),
            prefetch=int(prefetch),
            epochs=0 if epochs is None else int(epochs),
            on_error=_ON_ERROR[on_error],
            max_errors=errors,
            max_error_fraction=fraction,
            schema=core_schema,
            pad_values=pads,
            default_pad_value=default_pad,
            host_memory_limit=int(host_memory_limit or 0),
            quarantine_path=os.fspath(quarantine_file) if quarantine_file else "",
            source=self.source,
            mapped_files=mapped,
        )
        if epochs is not None and epochs < 1:
            raise ValueError(f"Loader: epochs must be >= 1 or None (forever), found {epochs}")
        most = _core.MAX_THREADS
        if num_threads is not None and not 1 <= num_threads <= most:
            raise ValueError(
                f"Loader: num_threads must be between 1 and {most}, found {num_threads}"
            )
        fixed = {n: self.dataset._core.column(n).is_fixed for n in self.dataset.column_names}
        self._ragged = tuple(n for n, f in fixed.items() if not f)
        self._fixed = tuple(n for n, f in fixed.items() if f)
        self._length_column = column or self.dataset.default_length_column
        self._start(state)

    def _schema(self, schema: Mapping[str, ColumnSchema], names: list[str] | None = None) -> list:
        names = self.dataset.column_names if names is None else names
        out = []
        for name, spec in schema.items():
            if name not in names:
                raise ValueError(f"Loader: schema names column {name!r}; columns are {names}")
            s = _core.ColumnSchema()
            s.name = name
            if spec.dtype is not None:
                s.dtype = dtype_name(spec.dtype, f"schema for column {name!r}")
            where = f"schema for column {name!r}"
            if spec.inner_shape is not None:
                for d in spec.inner_shape:
                    _check_int_option(f"{where}: inner_shape", d, 0)
                s.inner_shape = [int(d) for d in spec.inner_shape]
            _check_int_option(f"{where}: min_length", spec.min_length, 0)
            if spec.max_length is not None:
                _check_int_option(f"{where}: max_length", spec.max_length, 0)
            s.min_length = int(spec.min_length)
            s.max_length = -1 if spec.max_length is None else int(spec.max_length)
            s.finite = bool(spec.finite)
            out.append(s)
        return out

    def _start(self, state: Mapping[str, Any] | None) -> None:
        core_state = None if state is None else self._parse_state(state)
        self._start_core(core_state)

    def _start_core(self, core_state) -> None:
        if self._stream is None:
            self._core_loader = _core.Loader(self.dataset._core, state=core_state, **self._args)
            return
        self._core_loader = _core.Loader(self._stream._source, state=core_state, **self._args)
        if self._args["shuffle"] != _core.ShuffleMode.global_:  # A global shuffle re-reads.
            self._stream.watch_rereads(self.planner, self._args["host_memory_limit"])
        # The feeder holds the core loader and the file, never this Loader, so
        # dropping the Loader still closes it (and so ends the feeder).
        self._feeder = threading.Thread(
            target=_feed, args=(self._core_loader, self._stream), daemon=True,
            name=f"jaxbatch-feeder:{self._stream.path.name}",
        )  # fmt: skip
        self._feeder.start()
        _STREAMING.add(self)

    def _parse_state(self, state: Mapping[str, Any]):
        if not isinstance(state, Mapping):
            raise ValueError(
                f"Loader: state must be a dict from get_state(), found {type(state).__name__}"
            )
        version = state.get("version")
        if version not in (1, _STATE_VERSION):
            raise ValueError(
                f"Loader: expected a state of version {_STATE_VERSION}, found {version!r}"
            )
        if version == 1 and state.get("shuffle") == "block":
            raise ValueError(
                "Loader: the state (version 1) was saved by a jaxbatch whose block shuffle "
                "shuffled the batches' order too; this one keeps the blocks' order, so the "
                "stream would differ: restart the epoch (set the state's step to 0) or use "
                "that version"
            )
        required = [f for f in _STATE_FIELDS if f not in _OPTIONAL_STATE_FIELDS]
        missing = [k for k in ("num_examples", "planner", *required) if k not in state]
        if missing:
            raise ValueError(
                f"Loader: the state lacks {', '.join(map(repr, missing))}; expected a dict "
                f"from get_state()"
            )
        for field in ("num_examples", *_STATE_FIELDS):
            if field not in state:
                continue
            value, limit = state[field], 2**64 if field == "seed" else 2**63
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(
                    f"Loader: the state's {field} must be an int, found "
                    f"{type(value).__name__} {value!r}"
                )
            if not 0 <= value < limit:
                raise ValueError(
                    f"Loader: the state's {field} must be in [0, 2**{limit.bit_length() - 1}), "
                    f"found {value}"
                )
        if state["num_examples"] != self.dataset.num_examples:
            raise ValueError(
                f"Loader: the state was saved for {state['num_examples']} examples but this "
                f"source has {self.dataset.num_examples}"
            )
        # States saved before the fingerprint was added (same version) carry
        # none: they are accepted on the checks above.
        if "fingerprint" in state and state["fingerprint"] != self._fingerprint():
            raise ValueError(
                f"Loader: the state was saved for other data (fingerprint "
                f"{state['fingerprint']!r}) than this source ({self._fingerprint()!r}): the "
                f"same number of examples but other columns or lengths"
            )
        stream = self._stream_settings()
        for key, value in stream.items():
            if state.get(key) != value:
                raise ValueError(
                    f"Loader: the state was saved with {key}={state.get(key)!r} but this loader "
                    f"has {key}={value!r}; the stream would differ"
                )
        if state["planner"] != planner_key(self.planner):
            raise ValueError(
                f"Loader: the state was saved with planner {state['planner']} but this "
                f"loader has {planner_key(self.planner)}"
            )
        s = _core.LoaderState()
        for field in _STATE_FIELDS:
            setattr(s, field, int(state.get(field, 0)))
        return s

    def _fingerprint(self) -> str:
        """A hash of the columns' names, dtypes, shapes and every ragged
        column's lengths: what decides the stream's plan, without reading the
        values (so saving a state stays O(1) after the first)."""
        if self._fingerprint_cache is None:
            h = 0
            for name in self.dataset.column_names:
                col = self.dataset._core.column(name)
                kind = "fixed" if col.is_fixed else "ragged"
                h = _core.hash64(f"{name}:{col.dtype}:{list(col.inner_shape)}:{kind}".encode(), h)
                if not col.is_fixed:
                    lengths = self.dataset.lengths(name)
                    h = _core.hash64(np.ascontiguousarray(lengths).tobytes(), h)
            self._fingerprint_cache = f"{h:016x}"
        return self._fingerprint_cache

    def get_state(self) -> dict[str, Any]:
        """A small JSON-serialisable dict: seed, epoch, position and counts.
        Its size does not grow with the data or the prefetch depth."""
        s = self._live().state()
        out = {field: getattr(s, field) for field in _STATE_FIELDS}
        out.update(
            version=_STATE_VERSION,
            num_examples=self.dataset.num_examples,
            fingerprint=self._fingerprint(),
            planner=planner_key(self.planner),
            **self._stream_settings(),
        )
        return out

    def _stream_settings(self) -> dict[str, Any]:
        """What, beside the seed and planner, decides the stream."""
        return {
            "shuffle": self._args["shuffle"].name.rstrip("_"),
            "block_size": self._args["block_size"],
            "shard": [self._args["shard_index"], self._args["shard_count"]],
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continues from `state` (from :meth:`get_state`) with exactly the
        batches an uninterrupted run would have produced."""
        core_state = self._parse_state(state)
        self.close()
        self._start_core(core_state)

    @property
    def stats(self) -> LoaderStats:
        live = self._live()
        s = live.state()
        counts = {f.name: getattr(s, f.name) for f in dataclasses.fields(LoaderStats)[:-1]}
        return LoaderStats(**counts, chunk_reads=live.chunk_reads)

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
        if self._core_loader is None:
            raise StopIteration
        item = self._core_loader.next()
        if item is None:
            raise StopIteration
        arrays, epoch, step, _ = item
        if self._stream is not None:
            self._stream.note_reads(self._core_loader.chunk_reads, epoch)
        packed = isinstance(self.planner, Pack)
        rows = arrays[-1][2].shape
        shape = BatchShape(
            rows[0], _padded_length(arrays, self._length_column), rows[1] if packed else 0
        )
        batch = _batch_from_core(
            arrays, step, shape, packed, self._length_column, self._ragged, self._fixed
        )
        batch.epoch = epoch
        return batch

    def close(self) -> None:
        """Stops and joins every worker thread. Idempotent."""
        if self._core_loader is not None:
            self._core_loader.close()
            self._core_loader = None
        if self._feeder is not None:
            self._feeder.join()  # Sees the core closed within its next wait.
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


def _should_stream(source, stream, host_memory_limit, columns) -> bool:
    """Whether a path is read by row group: see the Loader's ``stream``."""
    if stream is not None:
        return stream
    if not host_memory_limit or Path(source).suffix.lower() != ".parquet":
        return False
    if not Path(source).is_file():
        return False  # open_source names what is wrong with it.
    from jaxbatch._sources import parquet_decoded_bytes

    try:
        return parquet_decoded_bytes(source, columns) > host_memory_limit
    except Exception:  # noqa: BLE001 - a corrupt file: open_source raises a clear error
        return False


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


def _padded_length(arrays, column: str) -> int:
    for name, _, array in arrays:
        if name == column:
            return int(array.shape[1])
    return 0


def _resolve_shard(shard) -> tuple[int, int]:
    if shard is None:
        return 0, 1
    if shard == "jax":
        import jax

        return jax.process_index(), jax.process_count()
    if (
        isinstance(shard, tuple | list)
        and len(shard) == 2
        and all(isinstance(v, int | np.integer) for v in shard)
    ):
        index, count = int(shard[0]), int(shard[1])
        if 1 <= count < 2**63 and 0 <= index < count:
            return index, count
    raise ValueError(
        f"Loader: shard must be (index, count) with 0 <= index < count or 'jax', found {shard!r}"
    )


def _check_int_option(option: str, value, low: int | None) -> None:
    """ValueError naming `option` unless `value` is an int in [low, 2**63)
    (what the core's int64 options hold)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"Loader: {option} must be an int, found {type(value).__name__} {value!r}")
    if low is not None and value < low:
        raise ValueError(f"Loader: {option} must be >= {low}, found {value}")
    if value >= 2**63:
        raise ValueError(f"Loader: {option} must be below 2**63, found {value}")


def _resolve_max_errors(max_errors) -> tuple[int, float]:
    if max_errors is None:
        return -1, -1.0
    if isinstance(max_errors, int | np.integer) and not isinstance(max_errors, bool):
        _check_int_option("max_errors", max_errors, 0)
    if isinstance(max_errors, bool) or max_errors < 0:
        raise ValueError(
            f"Loader: max_errors must be a count >= 0 or a fraction, found {max_errors!r}"
        )
    if isinstance(max_errors, int | np.integer):
        return int(max_errors), -1.0
    if max_errors < 1:
        return -1, float(max_errors)
    raise ValueError(
        "Loader: max_errors must be an int (a count) or a float below 1 (a fraction), "
        f"found {max_errors!r}"
    )
