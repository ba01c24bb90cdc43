"""device_prefetch: keep batches in flight to the accelerator."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


def device_prefetch(
    iterable: Iterable[Mapping[str, Any]], size: int = 2, sharding: Any = None
) -> Iterator[dict[str, Any]]:
    """Yields the batches of `iterable` as JAX arrays, keeping `size` of them
    already transferred (``jax.device_put`` is asynchronous, so the copy of
    the next batches overlaps the work on this one).

    With a ``jax.sharding.Sharding`` each process's batch is its local part of
    a global array built with ``jax.make_array_from_process_local_data`` (the
    multi-host path: every process runs its own Loader shard). Without one,
    arrays go to the default device.

    Example::

        for batch in jb.device_prefetch(loader, size=2):
            state = train_step(state, batch)   # batch["tokens"] is a jax.Array
    """
    import jax

    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"device_prefetch: size must be an int >= 1, found {size!r}")

    def put(batch: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"device_prefetch: expected batches that are dicts of arrays, found "
                f"{type(batch).__name__}"
            )
        if sharding is None:
            return jax.device_put(dict(batch))
        return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}

    queue: collections.deque = collections.deque()
    iterator = iter(iterable)
    for batch in iterator:
        queue.append(put(batch))
        if len(queue) > size - 1:
            break
    while queue:
        yield queue.popleft()
        for batch in iterator:
            queue.append(put(batch))
            break
