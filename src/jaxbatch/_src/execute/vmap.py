"""jb.vmap: jax.vmap's semantics, checked before tracing, optionally chunked."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jaxbatch._src.execute.axes import (
    broadcast_prefix as _broadcast_prefix,
)
from jaxbatch._src.execute.axes import (
    check_axes,
    mapped_leaves,
)
from jaxbatch._src.execute.memory import Auto, max_batch_size_for


def vmap(
    fun: Callable,
    in_axes: Any = 0,
    out_axes: Any = 0,
    *,
    chunk_size: int | Auto | None = None,
    memory_budget: int | Auto | None = None,
) -> Callable:
    """``jax.vmap`` with axis checks before tracing and bounded peak memory.

    Semantics are jax.vmap's (pytree ``in_axes``/``out_axes``, ``None``,
    negative axes; keyword arguments mapped over axis 0). Before tracing,
    :func:`jaxbatch.check_axes` names any argument whose axes do not fit.

    With ``chunk_size=c`` the batch runs ``c`` examples at a time (a
    ``lax.scan`` over chunks of a ``vmap``, each sliced from the inputs in
    place), so peak memory is that of one chunk; when ``c`` does not divide
    the batch, the last chunk ends at the last example and overlaps the one
    before (its shared rows computed twice), so a batch of any size traces
    one chunk shape. Chunks are evened out (at most ``c``, as many as ``c``
    needs), so that overlap stays under one example per chunk. Like
    jax.vmap it is not jitted for you: each call traces ``fun`` afresh (a
    changed global is seen); wrap it in ``jax.jit`` to compile it once per
    batch shape. ``chunk_size="auto"`` takes the largest
    chunk whose compiled memory fits ``memory_budget`` (bytes, or ``"auto"``
    for the device's free memory; see :func:`jaxbatch.max_batch_size`).

    Example::

        pairwise = jb.vmap(lambda x: jnp.linalg.norm(x[:, None] - x[None], axis=-1),
                           chunk_size=64)
        d = pairwise(points)   # points [n, k, 3] -> d [n, k, k], 64 examples at a time
    """
    import jax

    if chunk_size is not None and chunk_size != "auto":
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(
                f"jb.vmap: chunk_size must be an int >= 1 or 'auto', found {chunk_size!r}"
            )
    if chunk_size == "auto" and memory_budget is None:
        raise ValueError("jb.vmap: chunk_size='auto' needs memory_budget (bytes, or 'auto')")

    plain = jax.vmap(fun, in_axes=in_axes, out_axes=out_axes)
    auto_sizes: dict[Any, int] = {}

    @functools.wraps(fun)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        n = check_axes(fun, in_axes, *args, **kwargs)
        if chunk_size is None:
            return plain(*args, **kwargs)
        size = chunk_size
        if size == "auto":
            key = _signature(args, kwargs)
            if key not in auto_sizes:
                auto_sizes[key] = _auto_chunk(fun, in_axes, args, kwargs, memory_budget, n)
            size = auto_sizes[key]
        if size >= n:
            return plain(*args, **kwargs)
        return _chunked(fun, in_axes, out_axes, _balanced(size, n), args, kwargs)

    return wrapped


def _balanced(size: int, n: int) -> int:
    """The smallest chunk that still covers n examples in as many chunks as
    `size` needs: 512 examples at 95 take 6 chunks of 86 (516 rows computed)
    rather than 6 of 95 (570)."""
    chunks = -(-n // size)
    return -(-n // chunks)


def _signature(args, kwargs):
    import jax
    import numpy as np

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    return tree, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves)


def _normalise_axes(in_axes, args):
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    return in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)


def _chunked_map(fun, in_axes, out_axes, size, kw_names, args, kw_values):
    """Not jitted, like jax.vmap: each call traces ``fun`` afresh (so it sees
    the current globals), and under an outer jit it is traced with it."""
    import jax
    import jax.numpy as jnp

    kwargs = dict(zip(kw_names, kw_values, strict=True))
    axes = _normalise_axes(in_axes, args)

    def to_front(tree, axis_tree):
        return jax.tree_util.tree_map(
            lambda ax, x: x if ax is None else jnp.moveaxis(x, ax, 0),
            axis_tree,
            tree,
            is_leaf=lambda a: a is None,
        )

    # Put every mapped axis first, so chunks are leading slices.
    front_args = tuple(
        to_front(a, _broadcast_prefix(ax, a)) for a, ax in zip(args, axes, strict=True)
    )
    front_axes = tuple(
        jax.tree_util.tree_map(
            lambda ax: None if ax is None else 0,
            _broadcast_prefix(ax, a),
            is_leaf=lambda x: x is None,
        )
        for a, ax in zip(args, axes, strict=True)
    )
    mapped = [
        leaf
        for a, ax in zip(front_args, front_axes, strict=True)
        for leaf, lax_ in zip(
            jax.tree_util.tree_leaves(a),
            jax.tree_util.tree_leaves(ax, is_leaf=lambda x: x is None),
            strict=True,
        )
        if lax_ is not None
    ] + jax.tree_util.tree_leaves(kwargs)
    n = mapped[0].shape[0]
    chunks = -(-n // size)

    # Every chunk is `size` examples sliced from the inputs where they are;
    # the last starts at n - size, overlapping the one before instead of
    # being padded, so no copy of the inputs is made and the function traces
    # one chunk shape.
    leaves, defs, leaf_axes = [], [], []
    for a, ax_tree in zip(front_args, front_axes, strict=True):
        arg_leaves, arg_def = jax.tree_util.tree_flatten(a)
        defs.append((arg_def, len(arg_leaves)))
        leaves.extend(arg_leaves)
        leaf_axes.extend(jax.tree_util.tree_leaves(ax_tree, is_leaf=lambda x: x is None))
    mapped_idx = [k for k, ax in enumerate(leaf_axes) if ax is not None]

    def one_chunk(start):
        take = lambda x: jax.lax.dynamic_slice_in_dim(x, start, size, axis=0)  # noqa: E731
        full = list(leaves)
        for k in mapped_idx:
            full[k] = take(leaves[k])
        rebuilt, at = [], 0
        for arg_def, count in defs:
            rebuilt.append(jax.tree_util.tree_unflatten(arg_def, full[at : at + count]))
            at += count
        chunk_kwargs = jax.tree_util.tree_map(take, kwargs)
        return jax.vmap(fun, in_axes=front_axes, out_axes=0)(*rebuilt, **chunk_kwargs)

    def body(carry, i):
        return carry, one_chunk(jnp.minimum(i * size, n - size))

    _, stacked = jax.lax.scan(body, None, jnp.arange(chunks))
    overlap = chunks * size - n  # rows the last chunk shares with the one before

    def unchunk(y):
        if overlap == 0:
            return y.reshape((n,) + y.shape[2:])
        head = y[:-1].reshape(((chunks - 1) * size,) + y.shape[2:])
        return jnp.concatenate([head, y[-1, overlap:]], axis=0)

    out = jax.tree_util.tree_map(unchunk, stacked)
    return _apply_out_axes(out, out_axes)


def _apply_out_axes(out, out_axes):
    import jax
    import jax.numpy as jnp

    axes = _broadcast_prefix(out_axes, out)

    def place(ax, y):
        if ax is None:
            return y[0]
        return jnp.moveaxis(y, 0, ax)

    return jax.tree_util.tree_map(place, axes, out, is_leaf=lambda x: x is None)


def _chunked(fun, in_axes, out_axes, size, args, kwargs):
    names = tuple(sorted(kwargs))
    return _chunked_map(fun, in_axes, out_axes, size, names, args, tuple(kwargs[k] for k in names))


def _auto_chunk(fun, in_axes, args, kwargs, budget, n):
    import jax
    import numpy as np

    def one(ax, x):  # One example: the mapped axis removed.
        if ax is None:
            return x
        shape = tuple(np.delete(np.shape(x), ax))
        return jax.ShapeDtypeStruct(shape, x.dtype)

    axes = _normalise_axes(in_axes, args)
    example = tuple(
        jax.tree_util.tree_map(one, _broadcast_prefix(ax, a), a, is_leaf=lambda v: v is None)
        for a, ax in zip(args, axes, strict=True)
    )
    kw_example = jax.tree_util.tree_map(lambda x: one(0, x), kwargs)
    return max(1, min(n, max_batch_size_for(fun, in_axes, example, kw_example, budget, upper=n)))


__all__ = ["vmap", "mapped_leaves"]
