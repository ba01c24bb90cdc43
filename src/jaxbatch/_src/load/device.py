"""device_prefetch: keep batches in flight to the accelerator."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

from jaxbatch._src.collate.batch_tree import batch_like
from jaxbatch._src.collate.collate import Batch
from jaxbatch._src.load.agree import agree, loader_settings, shard_problem
from jaxbatch._src.load.loader import Loader, register_prefetcher

if TYPE_CHECKING:
    import jax

#: What a DevicePrefetcher yields: a Batch of jax.Arrays from Batches, else a dict of them.
OutT = TypeVar("OutT", bound=Mapping[str, Any])


@overload
def device_prefetch(
    iterable: Iterable[Batch[Any]], size: int = 2, sharding: Any = None
) -> DevicePrefetcher[Batch[jax.Array]]: ...
@overload
def device_prefetch(
    iterable: Iterable[Mapping[str, Any]], size: int = 2, sharding: Any = None
) -> DevicePrefetcher[dict[str, jax.Array]]: ...
def device_prefetch(
    iterable: Iterable[Mapping[str, Any]], size: int = 2, sharding: Any = None
) -> DevicePrefetcher[Any]:
    """Yields the batches of `iterable` as JAX arrays, keeping `size` of them
    already transferred (``jax.device_put`` is asynchronous, so the copy of
    the next batches overlaps the work on this one).

    With a ``jax.sharding.Sharding`` each process's batch is its local part of
    a global array built with ``jax.make_array_from_process_local_data`` (the
    multi-host path: every process runs its own Loader shard; see
    :func:`global_batches`). Without one, arrays go to the default device.

    A :class:`jaxbatch.Batch` comes out a Batch, its arrays on device and
    its attributes as they were (``.graphs``, ``shape``, ``index``,
    ``epoch``), so ``jax.jit(step)(batch)`` takes it whole; other dicts come
    out dicts. ``len()`` is the source's (``len(loader)``).

    The prefetch reads the Loader ahead, so checkpoint the returned
    :class:`DevicePrefetcher` (its ``get_state()``, or
    ``jaxbatch.checkpoint.LoaderSave(batches)``), not the Loader.

    Example::

        batches = jb.device_prefetch(loader, size=2)
        for batch in batches:
            state = train_step(state, batch)   # batch["tokens"] is a jax.Array
        checkpoint = batches.get_state()
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"device_prefetch: size must be an int >= 1, found {size!r}")
    return DevicePrefetcher(iterable, size, sharding)


class DevicePrefetcher(Generic[OutT]):
    """The iterator :func:`device_prefetch` and :func:`global_batches`
    return: batches of ``jax.Array`` values (a Batch stays a Batch), `size` of
    them in flight, and ``len()`` when the source has one. It
    reads ``size - 1`` batches ahead of the one it yields, so its source
    Loader's own state is ahead too; :meth:`get_state` here is the Loader's
    state right after the last batch yielded, the one to checkpoint, and
    :meth:`set_state` restores it in place.

    Example::

        batches = jb.device_prefetch(loader)
        next(batches)
        saved = batches.get_state()
        next(batches)
        batches.set_state(saved)   # the next batch is the second one again
    """

    def __init__(self, iterable: Iterable[Mapping[str, Any]], size: int, sharding: Any) -> None:
        self._iterator = iter(iterable)
        self._source = iterable
        self._size, self._sharding = size, sharding
        self._queue: collections.deque[tuple[Any, Any]] = collections.deque()
        self._state: dict[str, Any] | None = None
        self._started = False
        if isinstance(iterable, Loader):
            register_prefetcher(iterable, self)

    def __repr__(self) -> str:
        return f"DevicePrefetcher(size={self._size}, source={type(self._source).__name__})"

    def __len__(self) -> int:
        """The source's length: every batch this yields, counted from the start."""
        if not hasattr(type(self._source), "__len__"):
            # TypeError, as len() of an object without one: list() and
            # length_hint() read it as "no length" and go on.
            raise TypeError(
                f"device_prefetch: len() is the source's, and a "
                f"{type(self._source).__name__} has none; give a Loader (or a list) to know "
                f"the steps ahead"
            )
        return len(self._source)

    def __bool__(self) -> bool:
        return True  # Not len(): an endless source has none, and an iterator is truthy.

    def _put(self, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        import jax

        if not isinstance(batch, Mapping):
            raise TypeError(
                f"device_prefetch: expected batches that are dicts of arrays, found "
                f"{type(batch).__name__}"
            )
        if self._sharding is None:
            arrays = jax.device_put(dict(batch))
        else:
            arrays = {k: self._global(k, v) for k, v in batch.items()}
        # A Batch keeps what it is: .graphs, its shape and its step.
        return batch_like(batch, arrays) if isinstance(batch, Batch) else arrays

    def _global(self, key: str, value: Any) -> jax.Array:
        import jax

        try:
            return jax.make_array_from_process_local_data(self._sharding, value)
        except Exception as e:  # noqa: BLE001 - re-raised with the batch key and the fix
            raise ValueError(
                f"device_prefetch: cannot build the global array {key!r} from this process's "
                f"{np.shape(value)} rows with {self._sharding}: {e}. Each process's rows must "
                f"split evenly among its devices on the sharded axis: give the planner "
                f"rows_multiple=jax.local_device_count() = {jax.local_device_count()} (with a "
                f"batch_size or rows_per_batch that is a multiple of it)"
            ) from e

    def _source_state(self) -> Any:
        """The source's state now: a Loader's without its read-ahead check
        (this iterator is what reads it ahead)."""
        if isinstance(self._source, Loader):
            return self._source._read_state()
        return self._source.get_state() if hasattr(self._source, "get_state") else None

    def _pull(self) -> bool:
        for batch in self._iterator:
            self._queue.append((self._put(batch), self._source_state()))
            return True
        return False

    def __iter__(self) -> DevicePrefetcher[OutT]:
        return self

    def __next__(self) -> OutT:
        if not self._started:
            self._started = True
            while len(self._queue) < self._size - 1 and self._pull():
                pass
        self._pull()
        if not self._queue:
            raise StopIteration
        batch, self._state = self._queue.popleft()
        return batch

    def get_state(self) -> dict[str, Any]:
        """The source Loader's state after the last batch yielded (a small
        JSON-serialisable dict, as :meth:`Loader.get_state` gives)."""
        if self._state is not None:
            return self._state
        self._loader("get_state")  # Raises for a source without one.
        return self._source_state()

    def set_state(
        self,
        state: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        elastic: bool = False,
    ) -> None:
        """Restores `state` (from :meth:`get_state`) in place: the source
        Loader continues from it and the batches read ahead are dropped, so
        the next batch is the one after the saved one. ``elastic=True``: a
        state saved on another number of processes, as
        :meth:`Loader.set_state` takes it (the source must be a Loader). A
        refused state (the Loader's ValueError) leaves this iterator and its
        Loader as they were."""
        if isinstance(self._source, Loader):
            # This iterator is what reads it ahead.
            self._source._write_state(state, elastic=elastic)
        elif elastic:
            raise ValueError(
                f"device_prefetch: set_state(elastic=True) restores a jb.Loader's state on "
                f"another number of processes; this iterator reads a "
                f"{type(self._source).__name__}"
            )
        else:
            self._loader("set_state").set_state(state)
        self._queue.clear()
        self._iterator = iter(self._source)
        self._state, self._started = None, False

    def _loader(self, method: str) -> Any:
        if not hasattr(self._source, method):
            raise TypeError(
                f"device_prefetch: {method}() needs a Loader (or a source with one), found "
                f"{type(self._source).__name__}"
            )
        return self._source


@overload
def global_batches(
    iterable: Iterable[Batch[Any]], mesh: Any = None, axis: str = "data", size: int = 2
) -> DevicePrefetcher[Batch[jax.Array]]: ...
@overload
def global_batches(
    iterable: Iterable[Mapping[str, Any]], mesh: Any = None, axis: str = "data", size: int = 2
) -> DevicePrefetcher[dict[str, jax.Array]]: ...
def global_batches(
    iterable: Iterable[Mapping[str, Any]], mesh: Any = None, axis: str = "data", size: int = 2
) -> DevicePrefetcher[Any]:
    """Global batches for multi-process (multi-host) training: each process's
    Loader shard (``shard="jax"``) becomes its rows of global ``jax.Array``\\ s
    sharded over `axis` of `mesh` (default: every device of every process on
    one axis named ``"data"``). The global batch has ``process_count`` times
    the local rows, process 0's first. A jitted step over it runs one SPMD
    program; gradients are all-reduced over `axis` by XLA.

    With more than one process it first checks, as ``Loader(shard="jax")``
    does, that every process feeds the same stream (data, settings, position
    and mesh) and a shard of its own, raising ValueError on every process
    otherwise: call it in the same order on every process.

    Example::

        jax.distributed.initialize()
        loader = jb.Loader(ds, jb.AutoBuckets(8, batch_size=64), shard="jax", epochs=None)
        for batch in jb.global_batches(loader):
            params = train_step(params, batch)
    """
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if mesh is None:
        mesh = Mesh(np.array(jax.devices()), (axis,))
    if axis not in mesh.axis_names:
        raise ValueError(f"global_batches: mesh has axes {mesh.axis_names}, not {axis!r}")
    _agree_on_source(iterable, mesh, axis)
    return device_prefetch(iterable, size=size, sharding=NamedSharding(mesh, PartitionSpec(axis)))


def _agree_on_source(iterable: Any, mesh: Any, axis: str) -> None:
    """Under jax.distributed, every process must feed the same stream's own
    shard: raises on every process (see jaxbatch._src.load.agree) when a Loader's data,
    settings or position differ, or two processes load the same shard."""

    loader = iterable if isinstance(iterable, Loader) else None

    def settings() -> dict[str, str]:
        source = {"source": type(iterable).__name__} if loader is None else loader_settings(loader)
        return {"mesh": f"{dict(mesh.shape)} over {axis!r}", **source}

    if loader is None:
        agree("global_batches", "global_batches", settings)
        return
    shard_index, shard_count = loader.get_state()["shard"]
    shards = agree("global_batches", "global_batches", settings, shard_index)
    # One process: any shard is its own (a test of one shard of many, say).
    problem = len(shards) > 1 and shard_problem(shards, shard_count)
    if problem:
        raise ValueError(f"global_batches: {problem}: build every Loader with shard='jax'")


def process_local(tree: Any) -> Any:
    """This process's rows of global arrays sharded on their leading axis, as
    numpy, in order: per-example outputs of a global batch go back to the
    process whose Loader shard produced those rows, to be unbatched there
    (``jb.unbatch(jb.process_local(out), local_batch)``).

    Example::

        out = jax.jit(jax.vmap(f))(global_batch)
        per_example = jb.unbatch(jb.process_local(out), local_batch)
    """
    import jax

    def local(x):
        if not isinstance(x, jax.Array):
            return np.asarray(x)
        if x.ndim == 0:
            return np.asarray(x.addressable_shards[0].data)
        # One block per distinct row range (replicas on other devices repeat it).
        blocks = {}
        for shard in x.addressable_shards:
            blocks.setdefault(shard.index[0].start or 0, shard.data)
        return np.concatenate([np.asarray(blocks[start]) for start in sorted(blocks)])

    return jax.tree_util.tree_map(local, tree)
