"""jaxbatch inside Grain pipelines: a transformation that batches a Grain
dataset with any jaxbatch planner, and a Loader seen as a Grain iterator.

``BatchIterDataset`` reads its parent ``window`` examples at a time, as
Grain's own packers read a buffer: the window becomes a :class:`Dataset`,
the engine plans it (:func:`jaxbatch.plan`) and fills each planned batch
(:func:`jaxbatch.collate`), so every batch equals ``jb.collate`` of
``jb.Dataset.from_arrays(window)``. Its state is the parent's state at the
window's start and the next batch's index in the window: resuming reads
that window again and plans it again (a plan depends on the lengths alone),
so the following batches are the same. The state also holds what
identifies the pipeline, as a Loader's does: the planner's key, the window
and the engine's layout fingerprint of the window (its columns, dtypes and
lengths), so a state from a pipeline over other data is refused when the
window it resumes in is read again.

``LoaderIterator`` is a :class:`~jaxbatch.Loader` (or the iterator
``jb.device_prefetch`` returns) as a Grain ``DatasetIterator``: Grain's
checkpoint handler saves its ``get_state()`` as JSON and restores it in
place; ``LoaderIterDataset`` is the same as an ``IterDataset``, for
``.map`` and the rest of Grain's transformations after it.

Sections: the window as a Dataset (pure), the batching iterator and its
dataset, then the Loader adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxbatch import _core
from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.collate.collate import Batch, collate
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.records import records_columns
from jaxbatch._src.load.device import DevicePrefetcher
from jaxbatch._src.load.loader import Loader, check_not_read_ahead
from jaxbatch._src.plan.plan import BatchPlan, plan
from jaxbatch._src.plan.planners import GRAPH_PLANNERS, PLANNERS, Planner

# Here, not in jaxbatch/__init__.py: `import jaxbatch` never needs grain.
grain = require("grain", "jaxbatch.grain")

# What a BatchIterDataset's state holds besides its parent's: checked on
# set_state, so a state from another pipeline is refused, not misread.
_STATE_KEYS = ("parent", "next_batch", "position", "planner", "window")
# Checked when present: states saved before it was added lack it.
_FINGERPRINT_KEY = "fingerprint"


# -- the window as a Dataset ---------------------------------------------------


def window_layout(data: Dataset) -> dict[str, str]:
    """Each column's dtype, by key: what every window must share."""
    return {name: data._core.column(name).dtype for name in data.column_names}


def check_same_layout(layout: dict[str, str], last: dict[str, str], first: int) -> None:
    """Refuses a window (from stream position `first`) whose keys or dtypes
    differ from the last window's: its batches would change structure
    mid-stream (a jitted step would retrace, or fail on a missing key)."""
    for key in list(last) + [k for k in layout if k not in last]:
        if layout.get(key) != last.get(key):
            found = f"dtype {layout[key]}" if key in layout else "no such key"
            expected = f"dtype {last[key]}" if key in last else "no such key"
            raise ValueError(
                f"BatchIterDataset: key {key!r} in the window from example {first}: expected "
                f"{expected}, as in the window before, found {found}; every window must have "
                f"the same keys and dtypes (pass dtypes= to fix a key's dtype)"
            )


# -- the batching transformation ------------------------------------------------


class BatchIterDataset(grain.IterDataset):
    """Batches a Grain ``MapDataset`` or ``IterDataset`` of variable-length
    examples (dicts of numpy arrays: 1-D or N-D, ragged along the first
    axis; scalars become fixed columns) with a jaxbatch planner: token
    budgets, buckets, padding or packing, which Grain's ``batch`` lacks.

    The parent is read ``window`` examples at a time; the engine plans each
    window on its own (as Grain's packers pack a buffer: a window's last
    batch follows the planner's ``remainder``) and fills the batches in C++.
    Each batch is a :class:`jaxbatch.Batch`, equal to
    ``jb.collate(jb.Dataset.from_arrays(window), spec)`` for its spec of
    ``jb.plan(...)`` over the window: the same keys, masks, lengths, segment
    ids, positions and ``example_index`` (an index into the window). Grain
    hands examples over as Python objects, so building the window is a loop
    over them here; planning and collation are not.

    ``column``, ``aligned`` and ``dtypes`` are :meth:`Dataset.from_arrays`'s
    and :func:`jaxbatch.plan`'s; ``pad_value`` and ``padded_segments`` are
    :func:`jaxbatch.collate`'s. The iterator's ``get_state()`` is a small
    JSON dict (the parent's state at the window's start and the next
    batch), so Grain's checkpoints (``grain.checkpoint``, Orbax) resume it
    at the next batch. A batch plans its shapes per window: ``AutoBuckets``
    may choose other boundaries in each window (more compilations), while
    ``FixedBuckets``, ``PadToMax`` with ``pad_to_multiple`` and ``Pack``
    give a bounded set of shapes.

    Example::

        ds = grain.MapDataset.source(examples).shuffle(seed=0).to_iter_dataset()
        ds = jaxbatch.grain.BatchIterDataset(
            ds, jb.Pack(row_length=512, rows_per_batch=8), window=1024)
        for batch in ds:
            batch["tokens"], batch["tokens_segment_ids"]
    """

    def __init__(
        self,
        parent: Any,
        planner: Planner,
        *,
        window: int,
        column: str | None = None,
        aligned: Sequence[Sequence[str]] | None = None,
        dtypes: Mapping[str, Any] | None = None,
        pad_value: int | float | Mapping[str, int | float] = _core.DEFAULT_PAD_VALUE,
        padded_segments: bool | None = None,
    ):
        if isinstance(parent, grain.MapDataset):
            parent = parent.to_iter_dataset()
        if not isinstance(parent, grain.IterDataset):
            raise TypeError(
                f"BatchIterDataset: expected a grain.MapDataset or grain.IterDataset, found "
                f"{type(parent).__name__}"
            )
        if not isinstance(planner, PLANNERS) or isinstance(planner, GRAPH_PLANNERS):
            raise TypeError(
                f"BatchIterDataset: expected a sequence planner (PadToMax, FixedBuckets, "
                f"AutoBuckets, Pack), found {type(planner).__name__}"
            )
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(
                f"BatchIterDataset: window must be a positive int (examples planned together), "
                f"found {window!r}"
            )
        super().__init__(parent)
        self._planner = planner
        self._window = window
        self._column = column
        self._aligned = aligned
        self._dtypes = dict(dtypes) if dtypes else None
        collate_options: dict[str, Any] = {"pad_value": pad_value}
        if padded_segments is not None:
            collate_options["padded_segments"] = padded_segments
        self._collate_options = collate_options

    def __iter__(self) -> PlannedBatchIterator:
        return PlannedBatchIterator(self._parent.__iter__(), self)

    def __str__(self) -> str:
        return f"BatchIterDataset({self._planner.key}, window={self._window})"


class PlannedBatchIterator(grain.DatasetIterator):
    """The iterator of a :class:`BatchIterDataset` (see there)."""

    def __init__(self, parent: Any, spec: BatchIterDataset):
        super().__init__(parent)
        self._spec = spec
        self._key = spec._planner.key
        self._start_state = parent.get_state()  # The parent's, at this window's start.
        self._position = 0  # The stream position of this window's first example.
        self._layout: dict[str, str] | None = None  # The last window's keys and dtypes.
        self._expected_fingerprint: str | None = None  # A restored state's, for its window.
        self._reset(next_batch=0)

    def _reset(self, next_batch: int) -> None:
        self._data: Dataset | None = None
        self._plan: BatchPlan | None = None
        self._fingerprint: str | None = None  # The window's layout fingerprint, once read.
        self._next = next_batch
        self._end_state: Any = None  # The parent's, after this window.
        self._window_size = 0

    def _read_window(self) -> bool:
        """Reads and plans the next window; False when the parent has ended."""
        examples = []
        for example in self._parent:
            examples.append(example)
            if len(examples) == self._spec._window:
                break
        if not examples:
            return False
        s = self._spec
        columns = records_columns(examples, self._position, "BatchIterDataset")
        try:  # The engine's message numbers examples within the window: say where it is.
            self._data = Dataset.from_arrays(columns, aligned=s._aligned, dtypes=s._dtypes)
            self._plan = plan(self._data, s._planner, column=s._column)
        except ValueError as e:
            last = self._position + len(examples) - 1
            raise ValueError(
                f"BatchIterDataset: the window of examples {self._position} to {last}: {e}"
            ) from e
        layout = window_layout(self._data)
        if self._layout is not None:
            check_same_layout(layout, self._layout, self._position)
        self._layout = layout
        self._fingerprint = f"{_core.layout_fingerprint(self._data._core):016x}"
        self._check_restored_window()
        self._end_state = self._parent.get_state()
        self._window_size = len(examples)
        return True

    def __next__(self) -> Batch:
        self._assert_not_closed()
        while self._plan is None or self._next >= len(self._plan):
            if self._plan is not None:  # This window is done: the next starts here.
                self._start_state = self._end_state
                self._position += self._window_size
                self._reset(next_batch=0)
            skip = self._next
            if not self._read_window():
                raise StopIteration
            assert self._plan is not None
            if skip > len(self._plan):
                raise ValueError(
                    f"BatchIterDataset: the state resumes at batch {skip} of a window that "
                    f"plans {counted(len(self._plan), 'batch', 'batches')}; the state is not "
                    f"from this pipeline (another parent, planner or window)"
                )
        assert self._data is not None
        batch = collate(self._data, self._plan[self._next], **self._spec._collate_options)
        self._next += 1
        return batch

    def _check_restored_window(self) -> None:
        """Refuses a restored state whose window was other data than the
        window just read again (the parent's state is opaque: this is where
        the data shows)."""
        expected, self._expected_fingerprint = self._expected_fingerprint, None
        if expected is not None and expected != self._fingerprint:
            raise ValueError(
                f"BatchIterDataset: the state was saved over other data: its window from "
                f"example {self._position} had layout fingerprint {expected!r}, this pipeline's "
                f"has {self._fingerprint!r} (other keys, dtypes or lengths); restore it into "
                f"the pipeline that saved it"
            )

    def get_state(self) -> dict[str, Any]:
        # A finished window's state is its last batch's: a restore reads it
        # again, so its fingerprint is checked, and moves on to the next.
        return {
            "parent": self._start_state,
            "next_batch": self._next,
            "position": self._position,
            "planner": self._key,
            "window": self._spec._window,
            _FINGERPRINT_KEY: self._fingerprint,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if not isinstance(state, Mapping) or any(k not in state for k in _STATE_KEYS):
            raise ValueError(
                f"BatchIterDataset: expected a state from get_state() with keys "
                f"{list(_STATE_KEYS)}, found {state!r:.200}"
            )
        mine = {"planner": self._key, "window": self._spec._window}
        for key, value in mine.items():
            if state[key] != value:
                raise ValueError(
                    f"BatchIterDataset: the state is of {key} {state[key]!r}, this pipeline's "
                    f"is {value!r}; restore it into the pipeline that saved it"
                )
        for key in ("next_batch", "position"):
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"BatchIterDataset: the state's {key} must be an int >= 0, found {value!r}"
                )
        fingerprint = state.get(_FINGERPRINT_KEY)
        if fingerprint is not None and not (
            isinstance(fingerprint, str) and len(fingerprint) == 16
        ):
            raise ValueError(
                f"BatchIterDataset: the state's fingerprint must be 16 hex digits or None, "
                f"found {fingerprint!r:.100}"
            )
        self._parent.set_state(state["parent"])
        self._start_state = state["parent"]
        self._position = state["position"]
        self._layout = None  # The restored window sets it; its fingerprint covers the dtypes.
        self._reset(next_batch=state["next_batch"])
        self._expected_fingerprint = fingerprint

    def __str__(self) -> str:
        return f"PlannedBatchIterator({self._key}, window={self._spec._window})"


# -- a Loader as a Grain iterator --------------------------------------------------


def _loader_source(loader: Any, who: str) -> Loader | DevicePrefetcher:
    """`loader` if it is a Loader or a prefetcher over one; else TypeError."""
    if not isinstance(loader, Loader | DevicePrefetcher):
        raise TypeError(
            f"{who}: expected a jb.Loader or the iterator jb.device_prefetch returns, found "
            f"{type(loader).__name__}"
        )
    return loader


class LoaderIterator(grain.DatasetIterator):
    """A :class:`jaxbatch.Loader` (or the iterator ``jb.device_prefetch`` /
    ``jb.global_batches`` return) as a Grain ``DatasetIterator``: ``next``
    is the loader's next batch, ``get_state()`` / ``set_state()`` its
    state (a JSON dict), so Grain's checkpoint handler
    (``grain.checkpoint.CheckpointSave`` / ``CheckpointRestore`` with Orbax)
    saves and restores it; ``jaxbatch.grain.CheckpointRestore(it,
    elastic=True)`` restores a checkpoint saved by another number of
    processes (every process's file). Closing the iterator (Grain closes iterators it
    drops) leaves the loader open: its owner closes it (``with jb.Loader(...)
    as loader``), as several iterators may read one loader. A Loader that
    ``jb.device_prefetch`` reads ahead is refused at ``get_state()``: wrap
    that iterator instead (its state is the last batch it yielded).

    Example::

        it = jaxbatch.grain.LoaderIterator(jb.Loader(ds, planner, epochs=None))
        manager.save(step, args=grain.checkpoint.CheckpointSave(it))
    """

    def __init__(self, loader: Loader | DevicePrefetcher):
        super().__init__()
        self._loader = _loader_source(loader, "LoaderIterator")

    def __next__(self) -> Any:
        self._assert_not_closed()
        return next(self._loader)

    def get_state(self) -> dict[str, Any]:
        self._check_not_read_ahead("save")
        return self._loader.get_state()

    def set_state(self, state: Any, elastic: bool = False) -> None:
        """Restores `state` in place; ``elastic=True`` takes the states of
        every process that saved (or one of them) on this Loader's shard,
        whatever their number (:meth:`jaxbatch.Loader.set_state`)."""
        self._check_not_read_ahead("restore")
        self._loader.set_state(state, elastic=elastic)

    def _check_not_read_ahead(self, action: str) -> None:
        if isinstance(self._loader, Loader):
            check_not_read_ahead(
                self._loader,
                "LoaderIterator",
                action,
                "wrap that iterator instead: LoaderIterator(batches)",
            )

    def __str__(self) -> str:
        return f"LoaderIterator({type(self._loader).__name__})"


class LoaderIterDataset(grain.IterDataset):
    """A :class:`jaxbatch.Loader` as a Grain ``IterDataset``, for Grain's
    transformations after it (``.map``, ``.filter``, ``.prefetch``); its
    iterator is a :class:`LoaderIterator` over the loader, checkpointed by
    Grain as any Grain iterator. A Loader is one stream, so every
    ``iter()`` continues it. It does not pickle (a Loader runs threads of
    its own): put it after Grain's ``mp_prefetch``, never under it.

    Example::

        ds = jaxbatch.grain.LoaderIterDataset(jb.Loader(ds, planner)).map(to_model_inputs)
        it = iter(ds)
        it.get_state()   # the Loader's state, under Grain's map
    """

    def __init__(self, loader: Loader | DevicePrefetcher):
        super().__init__()
        self._loader = _loader_source(loader, "LoaderIterDataset")

    def __iter__(self) -> LoaderIterator:
        return LoaderIterator(self._loader)

    def __reduce__(self):
        raise TypeError(
            "LoaderIterDataset: a Loader cannot be sent to another process (it runs threads "
            "of its own); use it after grain's mp_prefetch, or BatchIterDataset under it"
        )

    def __str__(self) -> str:
        return f"LoaderIterDataset({type(self._loader).__name__})"
