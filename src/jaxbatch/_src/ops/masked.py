"""Masked reductions, attention masks and per-segment sums for padded and
packed batches, in pure ``jax.numpy``.

Every function is jit- and vmap-safe (no Python loop over examples, no
data-dependent shape) and gives a finite, documented value for a fully
masked row, in the forward pass and in its gradient. NaN-free gradients
need the "double where": padding is replaced *before* any op whose
derivative could blow up there (``exp``, division, ``log``) and again
after, so the discarded branch never computes ``inf * 0``.

Mask broadcasting: ``mask`` is a bool array that broadcasts to ``x``'s
shape under NumPy rules (axes line up from the right) without enlarging
``x``. For per-token features ``x: [rows, L, D]`` pass ``mask[..., None]``
(``[rows, L, 1]``) and reduce over ``axis=-2``.

16-bit floats are accumulated in float32 and the result is cast back to
the input's dtype; integer inputs give floats where the result is a
fraction (``mean``, ``var``, ``softmax``, ``logsumexp``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Axis = int | tuple[int, ...] | None


def _check_mask(op: str, x: jax.Array, mask: jax.Array) -> jax.Array:
    """The mask broadcast to ``x``'s shape, after checking its dtype and shape."""
    if mask.dtype != jnp.bool_:
        raise TypeError(
            f"jb.masked.{op}: mask must be a bool array (True = real value), found dtype "
            f"{mask.dtype}; for 0/1 or lengths data use `mask.astype(bool)` or "
            "`jnp.arange(L) < lengths[:, None]`"
        )
    try:
        fits = np.broadcast_shapes(mask.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"jb.masked.{op}: mask of shape {tuple(mask.shape)} does not broadcast to x of shape "
            f"{tuple(x.shape)}; the mask's axes line up with x's last axes (NumPy broadcasting), "
            "so for per-token features x [rows, L, D] pass mask[..., None] ([rows, L, 1])"
        )
    return jnp.broadcast_to(mask, x.shape)


def _inputs(op: str, x: Any, mask: Any) -> tuple[jax.Array, jax.Array]:
    x, mask = jnp.asarray(x), jnp.asarray(mask)
    return x, _check_mask(op, x, mask)


def _float_dtypes(x: jax.Array) -> tuple[Any, Any]:
    """(result dtype, accumulation dtype) for an op whose result is a fraction."""
    out = x.dtype if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.asarray(0.0).dtype
    return out, jnp.promote_types(out, jnp.float32)


def _sum_dtypes(x: jax.Array) -> tuple[Any, Any]:
    """(result dtype, accumulation dtype) of a sum, as jnp.sum's: small
    integers and bools (counted) widen to the default int before adding, so
    int8 [100, 100] sums to 200, not -56; 16-bit floats add in float32."""
    out = jnp.sum(jnp.zeros((), x.dtype)).dtype
    if jnp.issubdtype(out, jnp.floating):
        return out, jnp.promote_types(out, jnp.float32)
    return out, out


def _lowest(dtype: Any) -> Any:
    if jnp.issubdtype(dtype, jnp.inexact):
        return -jnp.inf
    if dtype == jnp.bool_:
        return False
    return jnp.iinfo(dtype).min


def _highest(dtype: Any) -> Any:
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.inf
    if dtype == jnp.bool_:
        return True
    return jnp.iinfo(dtype).max


def _counts(mask: jax.Array, axis: Axis, keepdims: bool) -> jax.Array:
    return jnp.sum(mask, axis=axis, keepdims=keepdims, dtype=jnp.int32)


def sum(x: Any, mask: Any, axis: Axis = -1, keepdims: bool = False) -> jax.Array:
    """Sum of the values where ``mask`` is True; a fully masked row sums to 0.

    Example::

        total = jb.masked.sum(batch["scores"], batch["scores_mask"])  # [rows]
    """
    x, mask = _inputs("sum", x, mask)
    out, acc = _sum_dtypes(x)
    total = jnp.sum(jnp.where(mask, x.astype(acc), 0), axis=axis, keepdims=keepdims)
    return total.astype(out)


def mean(
    x: Any, mask: Any, axis: Axis = -1, keepdims: bool = False, *, empty: float = 0.0
) -> jax.Array:
    """Mean of the values where ``mask`` is True; a fully masked row gives
    ``empty`` (default 0).

    Example::

        pooled = jb.masked.mean(hidden, batch["tokens_mask"][..., None], axis=-2)  # [rows, D]
    """
    x, mask = _inputs("mean", x, mask)
    return _mean(x, mask, axis, keepdims, empty)


def _mean(x, mask, axis, keepdims, empty):
    out, acc = _float_dtypes(x)
    total = jnp.sum(jnp.where(mask, x.astype(acc), 0), axis=axis, keepdims=keepdims)
    n = _counts(mask, axis, keepdims)
    result = jnp.where(n > 0, total / jnp.where(n > 0, n, 1).astype(acc), jnp.asarray(empty, acc))
    return result.astype(out)


def var(
    x: Any,
    mask: Any,
    axis: Axis = -1,
    keepdims: bool = False,
    *,
    ddof: int = 0,
    empty: float = 0.0,
) -> jax.Array:
    """Variance of the values where ``mask`` is True, dividing by ``n - ddof``
    (n = the number of True values); a row with ``n <= ddof`` (in particular a
    fully masked row) gives ``empty`` (default 0).
    """
    x, mask = _inputs("var", x, mask)
    out, acc = _float_dtypes(x)
    x = x.astype(acc)
    centre = _mean(x, mask, axis, True, 0.0)
    deviation = jnp.where(mask, x - centre, 0)
    squares = jnp.sum(deviation * deviation, axis=axis, keepdims=keepdims)
    dof = _counts(mask, axis, keepdims) - ddof
    result = jnp.where(
        dof > 0, squares / jnp.where(dof > 0, dof, 1).astype(acc), jnp.asarray(empty, acc)
    )
    return result.astype(out)


def max(
    x: Any, mask: Any, axis: Axis = -1, keepdims: bool = False, *, empty: float = 0.0
) -> jax.Array:
    """Largest value where ``mask`` is True; a fully masked row gives
    ``empty`` (default 0, cast to ``x``'s dtype)."""
    x, mask = _inputs("max", x, mask)
    return _extreme(jnp.max, _lowest(x.dtype), x, mask, axis, keepdims, empty)


def min(
    x: Any, mask: Any, axis: Axis = -1, keepdims: bool = False, *, empty: float = 0.0
) -> jax.Array:
    """Smallest value where ``mask`` is True; a fully masked row gives
    ``empty`` (default 0, cast to ``x``'s dtype)."""
    x, mask = _inputs("min", x, mask)
    return _extreme(jnp.min, _highest(x.dtype), x, mask, axis, keepdims, empty)


def _extreme(reduce, neutral, x, mask, axis, keepdims, empty):
    """``reduce`` (jnp.max or jnp.min) with padding set to its neutral value,
    then ``empty`` for rows with nothing to reduce."""
    found = reduce(jnp.where(mask, x, neutral), axis=axis, keepdims=keepdims)
    anything = jnp.any(mask, axis=axis, keepdims=keepdims)
    return jnp.where(anything, found, jnp.asarray(empty, x.dtype))


def _shifted_exp(x, mask, axis):
    """exp(x - m) where ``mask`` (m the masked max, without gradient), 0 elsewhere."""
    top = jnp.max(jnp.where(mask, x, -jnp.inf), axis=axis, keepdims=True)
    top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0))
    return top, jnp.where(mask, jnp.exp(jnp.where(mask, x, top) - top), 0)


def logsumexp(
    x: Any, mask: Any, axis: Axis = -1, keepdims: bool = False, *, empty: float = -jnp.inf
) -> jax.Array:
    """``log(sum(exp(x)))`` over the values where ``mask`` is True, computed
    stably; a fully masked row gives ``empty`` (default ``-inf``, the log of an
    empty sum; its gradient is 0, never NaN).
    """
    x, mask = _inputs("logsumexp", x, mask)
    out, acc = _float_dtypes(x)
    top, e = _shifted_exp(x.astype(acc), mask, axis)
    total = jnp.sum(e, axis=axis, keepdims=True)
    positive = total > 0
    # A row of only -inf values sums to 0: its logsumexp is -inf, whatever `empty` says.
    result = jnp.where(positive, jnp.log(jnp.where(positive, total, 1)) + top, -jnp.inf)
    result = jnp.where(jnp.any(mask, axis=axis, keepdims=True), result, jnp.asarray(empty, acc))
    if not keepdims:
        result = jnp.squeeze(result, axis=axis)
    return result.astype(out)


def softmax(x: Any, mask: Any, axis: Axis = -1) -> jax.Array:
    """Softmax over the values where ``mask`` is True, 0 where it is False; a
    fully masked row (or one whose values are all -inf) is all zeros.

    Example::

        scores = jnp.einsum("...qd,...kd->...qk", q, k)
        weights = jb.masked.softmax(scores, jb.masked.attention_mask(segment_ids))
    """
    x, mask = _inputs("softmax", x, mask)
    out, acc = _float_dtypes(x)
    _, e = _shifted_exp(x.astype(acc), mask, axis)
    total = jnp.sum(e, axis=axis, keepdims=True)
    return (e / jnp.where(total > 0, total, 1)).astype(out)


def _check_segment_ids(op: str, segment_ids: Any) -> jax.Array:
    segment_ids = jnp.asarray(segment_ids)
    if not (jnp.issubdtype(segment_ids.dtype, jnp.integer) or segment_ids.dtype == jnp.bool_):
        raise TypeError(
            f"jb.masked.{op}: segment_ids must be an integer array (0 = padding, 1..n = "
            f"segments), found dtype {segment_ids.dtype}"
        )
    if segment_ids.ndim < 1:
        raise ValueError(
            f"jb.masked.{op}: segment_ids must have a length axis [..., L], found a scalar"
        )
    return segment_ids


def attention_mask(segment_ids: Any, causal: bool = False) -> jax.Array:
    """Block-diagonal attention mask ``[..., L, L]`` (query, key) from segment
    ids ``[..., L]`` (0 = padding, 1..n = packed segments): True where query
    and key are in the same nonzero segment, and (``causal=True``) the key
    is not after the query. Padding attends to nothing and nothing attends
    to it, so a padded query's row is fully masked (``softmax`` gives zeros).
    For a padded (not packed) batch use ``mask.astype(jnp.int32)`` as ids.

    Example::

        allowed = jb.masked.attention_mask(batch["tokens_segment_ids"], causal=True)
    """
    segment_ids = _check_segment_ids("attention_mask", segment_ids)
    query, key = segment_ids[..., :, None], segment_ids[..., None, :]
    allowed = (query == key) & (query != 0)
    if causal:
        length = segment_ids.shape[-1]
        allowed = allowed & jnp.tril(jnp.ones((length, length), jnp.bool_))
    return allowed


def _num_segments(op: str, num_segments: Any) -> int:
    if not isinstance(num_segments, (int, np.integer)) or num_segments < 1:
        raise ValueError(
            f"jb.masked.{op}: num_segments must be a positive Python int (a static shape), "
            f"found {num_segments!r}"
        )
    return int(num_segments)


def _segment_inputs(op, x, segment_ids, num_segments):
    x = jnp.asarray(x)
    segment_ids = _check_segment_ids(op, segment_ids)
    if x.shape[: segment_ids.ndim] != segment_ids.shape:
        raise ValueError(
            f"jb.masked.{op}: x of shape {tuple(x.shape)} does not start with segment_ids' "
            f"shape {tuple(segment_ids.shape)}; expected x [..., L, ...] for ids [..., L]"
        )
    return x, segment_ids.astype(jnp.int32), _num_segments(op, num_segments)


def _segment_sum(x, segment_ids, num_segments):
    """Per-segment sums ``[..., S, ...]``: one scatter-add over all rows, each
    row's ids offset into its own block; ids outside 1..S go to a dropped slot."""
    lead = segment_ids.shape
    rows = int(np.prod(lead[:-1], dtype=np.int64))
    inner = x.shape[len(lead) :]
    row = jnp.arange(rows, dtype=jnp.int32).reshape(lead[:-1] + (1,))
    valid = (segment_ids >= 1) & (segment_ids <= num_segments)
    slot = jnp.where(valid, row * num_segments + segment_ids - 1, rows * num_segments)
    total = jax.ops.segment_sum(
        x.reshape((-1,) + inner), slot.reshape(-1), num_segments=rows * num_segments + 1
    )
    return total[:-1].reshape(lead[:-1] + (num_segments,) + inner)


def segment_sum(x: Any, segment_ids: Any, num_segments: int) -> jax.Array:
    """Per-segment sums of packed rows: ``x [..., L, ...]`` and ``segment_ids
    [..., L]`` give ``[..., num_segments, ...]``, entry ``s - 1`` summing the
    positions whose id is ``s``. Id 0 (padding) and ids above
    ``num_segments`` are ignored; an empty segment sums to 0. The result's
    dtype is jnp.sum's (int8 adds as int32; bools are counted).

    Example::

        per_example = jb.masked.segment_sum(
            loss, batch["tokens_segment_ids"], num_segments=batch.segments
        )  # [rows, S] packed (lines up with batch["example_index"]), [rows, 1] padded
    """
    x, segment_ids, num_segments = _segment_inputs("segment_sum", x, segment_ids, num_segments)
    out, acc = _sum_dtypes(x)
    return _segment_sum(x.astype(acc), segment_ids, num_segments).astype(out)


def segment_mean(x: Any, segment_ids: Any, num_segments: int) -> jax.Array:
    """Per-segment means of packed rows, shaped like :func:`segment_sum`'s
    result; an empty segment (a slot with no example) gives 0."""
    x, segment_ids, num_segments = _segment_inputs("segment_mean", x, segment_ids, num_segments)
    out, acc = _float_dtypes(x)
    total = _segment_sum(x.astype(acc), segment_ids, num_segments)
    n = _segment_sum(jnp.ones(segment_ids.shape, jnp.int32), segment_ids, num_segments)
    n = n.reshape(n.shape + (1,) * (total.ndim - n.ndim))
    return jnp.where(n > 0, total / jnp.where(n > 0, n, 1).astype(acc), 0).astype(out)


__all__ = [
    "attention_mask",
    "logsumexp",
    "max",
    "mean",
    "min",
    "segment_mean",
    "segment_sum",
    "softmax",
    "sum",
    "var",
]


def _scatter_inputs(op, data, segment_ids, num_segments, mask):
    data, segment_ids, mask = jnp.asarray(data), jnp.asarray(segment_ids), jnp.asarray(mask)
    if not jnp.issubdtype(segment_ids.dtype, jnp.integer) or segment_ids.ndim != 1:
        raise TypeError(
            f"jb.masked.{op}: segment_ids must be 1-D integer ids (0-based, as "
            f"jax.ops.segment_sum takes them: batch['node_graph'], batch['receivers']), found "
            f"{segment_ids.dtype} of shape {tuple(segment_ids.shape)}"
        )
    if mask.dtype != jnp.bool_ or mask.shape != segment_ids.shape:
        raise ValueError(
            f"jb.masked.{op}: mask must be a bool array shaped like segment_ids "
            f"{tuple(segment_ids.shape)} (batch['node_mask'] for node_graph, batch['edge_mask'] "
            f"for senders/receivers), found {mask.dtype} of shape {tuple(mask.shape)}"
        )
    if data.ndim < 1 or data.shape[0] != segment_ids.shape[0]:
        raise ValueError(
            f"jb.masked.{op}: data of shape {tuple(data.shape)} needs a leading axis of "
            f"{segment_ids.shape[0]}, one row per id"
        )
    num_segments = _num_segments(op, num_segments)
    # Padding goes to one extra segment that is dropped: it touches no real one.
    slot = jnp.where(mask, segment_ids.astype(jnp.int32), num_segments)
    rows = mask.reshape(mask.shape + (1,) * (data.ndim - 1))
    return data, slot, rows, num_segments


def scatter_sum(data: Any, segment_ids: Any, num_segments: int, mask: Any) -> jax.Array:
    """``jax.ops.segment_sum`` that leaves padding out: the rows of ``data``
    where ``mask`` is False add to no segment (not merely a zero: a NaN or
    inf in a padding row cannot leak into a real one). Ids are 0-based, as
    jraph's message passing uses them: aggregate messages over
    ``batch["receivers"]`` with ``batch["edge_mask"]``, or read out per graph
    over ``batch["node_graph"]`` with ``batch["node_mask"]``.

    Example::

        agg = jb.masked.scatter_sum(messages, batch["receivers"], nodes, batch["edge_mask"])
    """
    data, slot, rows, n = _scatter_inputs("scatter_sum", data, segment_ids, num_segments, mask)
    out, acc = _sum_dtypes(data)
    clean = jnp.where(rows, data, 0).astype(acc)
    return jax.ops.segment_sum(clean, slot, num_segments=n + 1)[:n].astype(out)


def scatter_mean(data: Any, segment_ids: Any, num_segments: int, mask: Any) -> jax.Array:
    """:func:`scatter_sum` divided by each segment's count of real rows; a
    segment with none gives 0."""
    data, slot, rows, n = _scatter_inputs("scatter_mean", data, segment_ids, num_segments, mask)
    out, acc = _float_dtypes(data)
    total = jax.ops.segment_sum(jnp.where(rows, data, 0).astype(acc), slot, num_segments=n + 1)[:n]
    count = jax.ops.segment_sum(jnp.ones(slot.shape, jnp.int32), slot, num_segments=n + 1)[:n]
    count = count.reshape(count.shape + (1,) * (total.ndim - 1))
    return jnp.where(count > 0, total / jnp.where(count > 0, count, 1).astype(acc), 0).astype(out)


def scatter_max(data: Any, segment_ids: Any, num_segments: int, mask: Any) -> jax.Array:
    """Per-segment maxima of the real rows (``jax.ops.segment_max`` without
    the padding); a segment with none gives 0, not ``-inf``."""
    data, slot, rows, n = _scatter_inputs("scatter_max", data, segment_ids, num_segments, mask)
    low = _lowest(data.dtype)
    best = jax.ops.segment_max(jnp.where(rows, data, low), slot, num_segments=n + 1)[:n]
    count = jax.ops.segment_sum(jnp.ones(slot.shape, jnp.int32), slot, num_segments=n + 1)[:n]
    count = count.reshape(count.shape + (1,) * (best.ndim - 1))
    return jnp.where(count > 0, best, jnp.zeros((), data.dtype))


__all__ += ["scatter_max", "scatter_mean", "scatter_sum"]
