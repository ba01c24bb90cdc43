"""Dot-product attention over packed rows, and the layouts fused kernels take.

A packed batch (``jb.Pack``) carries, per ragged column ``k``:
``<k>_segment_ids [rows, L]`` (1..n, 0 for padding), ``<k>_lengths [rows, S]``
and ``<k>_segment_starts [rows, S]`` (each segment's first cell; segments lie
back to back from cell 0, and an unused slot has length 0 and starts at the
row's end, so ``starts[s] + lengths[s] == starts[s + 1]``). ``S`` is the plan's
``max_segments_per_row``, static for the epoch, so every layout below has a
static shape and can be built inside ``jit``.

- JAX's cuDNN attention with sequence packing wants per-row segment lengths
  ``[rows, S]`` and offsets ``[rows, S + 1]``, ``-1`` in unused slots:
  :func:`cudnn_packed_layout`.
- flash-attention's varlen kernels want cumulative lengths over the
  flattened rows: :func:`cu_seqlens`.
- :func:`packed_attention` runs attention where every token sees only its
  own segment: cuDNN's fused kernel on a GPU that takes the shapes,
  jaxbatch's C++ kernel on CPU (attention_kernel.py), else XLA.

Pure layout functions first, then the attention wrapper.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxbatch._src.collate import keys
from jaxbatch._src.ops import attention_kernel

Implementation = Literal["xla", "cudnn", "kernel"]
_IMPLEMENTATIONS = ("xla", "cudnn", "kernel")
_LAYOUTS = ("BTNH", "BNTH")
# cuDNN's flash attention with the packed layout takes 16-bit inputs, head
# sizes that are multiples of 8 up to 256, on Hopper (compute capability
# 9.0) or later (jax/_src/cudnn/fused_attention_stablehlo.py,
# check_is_flash_attention); anything else stays on XLA.
_CUDNN_DTYPES = (jnp.float16, jnp.bfloat16)
_CUDNN_MAX_HEAD = 256
_CUDNN_PACKED_CAPABILITY = "9.0"


# --- Layouts: pure functions of a batch's lengths and starts --------------


def _layout_arrays(op: str, lengths: Any, starts: Any) -> tuple[jax.Array, jax.Array]:
    lengths, starts = jnp.asarray(lengths), jnp.asarray(starts)
    if lengths.shape != starts.shape or lengths.ndim < 1:
        raise ValueError(
            f"jb.masked.{op}: lengths and starts must both be [..., S] (a packed batch's "
            f"<k>_lengths and <k>_segment_starts), found {tuple(lengths.shape)} and "
            f"{tuple(starts.shape)}"
        )
    return lengths.astype(jnp.int32), starts.astype(jnp.int32)


def cudnn_packed_layout(lengths: Any, starts: Any) -> tuple[jax.Array, jax.Array]:
    """``(seq_lengths [..., S], offsets [..., S + 1])`` int32 for JAX's cuDNN
    attention with sequence packing (``q_seqlen``/``kv_seqlen`` and
    ``q_offsets``/``kv_offsets`` of ``jax._src.cudnn.fused_attention_stablehlo
    .dot_product_attention``): each segment's length and first cell within
    its row, ``-1`` in unused (empty) slots and in the extra last offset
    column, as that function documents. An empty segment holds no token, so
    marking it unused changes nothing.

    Example::

        seqlens, offsets = jb.masked.cudnn_packed_layout(
            batch["tokens_lengths"], batch["tokens_segment_starts"])
    """
    lengths, starts = _layout_arrays("cudnn_packed_layout", lengths, starts)
    used = lengths > 0
    seqlens = jnp.where(used, lengths, -1)
    offsets = jnp.where(used, starts, -1)
    pad = jnp.full((*offsets.shape[:-1], 1), -1, jnp.int32)
    return seqlens, jnp.concatenate([offsets, pad], axis=-1)


def cu_seqlens(
    batch_or_lengths: Any,
    starts: Any = None,
    row_length: int | None = None,
    *,
    column: str | None = None,
) -> jax.Array:
    """flash-attention's cumulative sequence lengths for packed rows
    flattened to ``[rows * L]`` tokens: int32 ``[rows * (S + 1) + 1]``.

    Row ``r`` contributes ``S + 1`` sequences: its ``S`` segment slots (at
    ``r * L + starts[r, s]``, unused slots empty) and then its padding tail
    (from the end of its last segment to ``(r + 1) * L``), so padding never
    joins a real segment; the last entry is ``rows * L``. The shape depends
    only on the batch shape, so it builds under ``jit``; pass it as
    ``cu_seqlens_q``/``cu_seqlens_k`` with ``max_seqlen = L`` and ignore the
    outputs of padding tokens.

    Give a packed batch (``column=`` names the feature when it packs
    several), or ``lengths [rows, S]``, ``starts [rows, S]`` and
    ``row_length`` ``L``. A PatchPack batch's segments are its images (its
    ``<k>_patches``, laid back to back from cell 0).

    Example::

        cu = jb.masked.cu_seqlens(batch)  # or (lengths, starts, L)
        q_flat = q.reshape(-1, heads, head_size)  # [rows * L, heads, head_size]
    """
    if isinstance(batch_or_lengths, Mapping):
        ids, lengths, starts = _segments_of("cu_seqlens", batch_or_lengths, column)
        if lengths is None:
            raise ValueError(
                "jb.masked.cu_seqlens: the batch has segment ids but no per-segment lengths "
                f"for column {column!r}; give lengths, starts and row_length instead"
            )
        row_length = ids.shape[-1]
    elif starts is None or row_length is None:
        raise ValueError(
            "jb.masked.cu_seqlens: give a packed batch, or lengths, starts and row_length"
        )
    else:
        lengths = batch_or_lengths
    lengths, starts = _layout_arrays("cu_seqlens", lengths, starts)
    if lengths.ndim > 2:
        raise ValueError(
            "jb.masked.cu_seqlens: expected lengths [rows, S] or one row's [S], found shape "
            f"{tuple(lengths.shape)}"
        )
    rows = lengths.shape[0] if lengths.ndim == 2 else 1
    lengths, starts = lengths.reshape(rows, -1), starts.reshape(rows, -1)
    tail = jnp.max(starts + lengths, axis=-1, initial=0, keepdims=True)  # end of real tokens
    row_base = (jnp.arange(rows, dtype=jnp.int32) * int(row_length))[:, None]
    bounds = row_base + jnp.concatenate([starts, tail], axis=-1)
    total = jnp.full((1,), rows * int(row_length), jnp.int32)
    return jnp.concatenate([bounds.reshape(-1), total])


# --- Attention ------------------------------------------------------------


def _column_of(op: str, batch: Mapping, column: str | None) -> str:
    """The column whose segments to read. A batch that packs several
    features (``Pack(row_length={...})``: each its own segment ids, lengths
    and starts) has no default: the length column's segments are not the
    other features', so guessing would silently attend over the wrong cells."""
    found = sorted(k[: -len(keys.SEGMENT_IDS)] for k in batch if k.endswith(keys.SEGMENT_IDS))
    if column is None:
        if len(found) != 1:
            what = f"the features {found}" if found else "no column"
            raise ValueError(
                f"jb.masked.{op}: pass column= to say whose segments to use; the batch holds "
                f"segment ids of {what}"
            )
        column = found[0]
    if keys.segment_ids(column) not in batch:
        raise KeyError(
            f"jb.masked.{op}: the batch has no '{keys.segment_ids(column)}' (column {column!r}); "
            f"its keys are {sorted(batch)}"
        )
    return column


def _segments_of(op: str, segments: Any, column: str | None):
    """(segment ids, lengths or None, starts or None) from a batch or ids.
    A padded batch's ``<k>_lengths [rows]`` is one segment a row from cell
    0; a PatchPack batch's ``<k>_patches [rows, S]`` (no starts: its images
    lie back to back from cell 0) gives starts as the running sum."""
    if not isinstance(segments, Mapping):
        return jnp.asarray(segments), None, None
    column = _column_of(op, segments, column)
    ids = jnp.asarray(segments[keys.segment_ids(column)])
    lengths = segments.get(keys.example_lengths(segments, column))
    starts = segments.get(keys.segment_starts(column))
    if lengths is None:
        return ids, None, None
    lengths = jnp.asarray(lengths, jnp.int32)
    if starts is None and lengths.ndim == ids.ndim - 1:  # padded: one segment a row, from 0
        lengths = lengths[..., None]
        starts = jnp.zeros_like(lengths)
    elif starts is None:  # PatchPack: back to back from cell 0
        starts = jnp.cumsum(lengths, axis=-1, dtype=jnp.int32) - lengths
    return ids, lengths, jnp.asarray(starts, jnp.int32)


def _check_qkv(query, key, value, ids, layout):
    if layout not in _LAYOUTS:
        raise ValueError(
            f"jb.masked.packed_attention: layout must be one of {_LAYOUTS}, found {layout!r}"
        )
    if query.ndim not in (3, 4) or key.shape != value.shape or query.shape != key.shape:
        raise ValueError(
            "jb.masked.packed_attention: query, key and value must have one shape, "
            f"{layout} or {layout[1:]} (self-attention over the packed rows), found "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    lead = query.shape[:-3]
    length = query.shape[-3] if layout == "BTNH" else query.shape[-2]
    if ids.shape != (*lead, length):
        raise ValueError(
            f"jb.masked.packed_attention: segment ids of shape {tuple(ids.shape)} do not match "
            f"query {tuple(query.shape)} in layout {layout}: expected {(*lead, length)}"
        )
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(
            "jb.masked.packed_attention: segment ids must be integers (0 = padding, 1..n), "
            f"found {ids.dtype}"
        )


def _xla_attention(query, key, value, ids, *, scale, is_causal, layout):
    """Attention under the same-segment mask, in XLA: scores and the
    weighted sum take their operands in the inputs' dtype and accumulate in
    float32, the softmax runs in float32, and a query that may see no key
    (padding) gives zeros. The weights are selected (not multiplied) to
    exact zeros outside the mask, so with finite inputs (see
    :func:`_isolated`) no product across segments is anything but 0."""
    f32 = jnp.float32
    if layout == "BTNH":
        score_spec, out_spec = "...qnh,...knh->...nqk", "...nqk,...knh->...qnh"
    else:
        score_spec, out_spec = "...nqh,...nkh->...nqk", "...nqk,...nkh->...nqh"
    scores = jnp.einsum(score_spec, query, key, preferred_element_type=f32) * scale
    real = ids != 0
    allowed = (ids[..., :, None] == ids[..., None, :]) & real[..., None, :]
    if is_causal:
        length = ids.shape[-1]
        allowed = allowed & jnp.tril(jnp.ones((length, length), jnp.bool_))
    allowed = allowed[..., None, :, :]  # one mask for every head
    # A finite floor, not -inf: a padding query's row is all floor, whose
    # softmax is finite (uniform), and its output is zeroed below.
    weights = jax.nn.softmax(jnp.where(allowed, scores, jnp.finfo(f32).min), axis=-1)
    weights = jnp.where(allowed, weights, 0)  # a row's overflow stays in its segment
    out = jnp.einsum(out_spec, weights.astype(value.dtype), value, preferred_element_type=f32)
    return jnp.where(_real_cells(real, layout), out, 0).astype(query.dtype)


def _finite_or_zero_fwd(x, dirty):
    return jnp.where(jnp.isfinite(x), x, jnp.zeros((), x.dtype)), dirty


def _finite_or_zero_bwd(dirty, g):
    return jnp.where(dirty, jnp.full((), jnp.nan, g.dtype), g), None


@jax.custom_vjp
def _finite_or_zero(x: jax.Array, dirty: jax.Array) -> jax.Array:
    """``x`` with non-finite cells set to 0; the gradient passes unchanged
    except in the ``dirty`` cells (a segment that held a non-finite input),
    where it is NaN, as the segment's outputs are."""
    return _finite_or_zero_fwd(x, dirty)[0]


_finite_or_zero.defvjp(_finite_or_zero_fwd, _finite_or_zero_bwd)


def _isolated(attend, query, key, value, ids, *, layout):
    """``attend`` (a dense or fused attention) with every non-finite input
    kept in its own segment and head. The kernels multiply weights that are
    exactly 0 by the other segments' values and 0 x NaN is NaN, so a NaN or
    Inf anywhere in a row would reach every segment (and in the backward
    pass every gradient). Here the kernel sees only finite inputs (non-finite
    cells replaced by 0), and each segment and head that held a non-finite
    q, k or v is selected to NaN afterwards, outputs and gradients alike;
    every other segment's outputs and gradients are those of the clean run,
    bit for bit, and padding gives exact zeros."""
    f32 = jnp.float32
    to_tokens = (lambda x: x) if layout == "BTNH" else (lambda x: jnp.swapaxes(x, -1, -2))
    bad = jnp.zeros(query.shape[:-1], jnp.bool_)
    for x in (query, key, value):
        bad = bad | ~jnp.all(jnp.isfinite(x), axis=-1)
    real = ids != 0
    same = (ids[..., :, None] == ids[..., None, :]) & real[..., :, None]
    # Per token and head [..., L, N]: does its segment hold a bad cell in that
    # head? Counts of 0/1 in float32 are exact.
    hits = jnp.einsum(
        "...qk,...kn->...qn",
        same.astype(f32),
        to_tokens(bad).astype(f32),
        preferred_element_type=f32,
        precision=jax.lax.Precision.HIGHEST,
    )
    dirty = to_tokens(hits > 0)[..., None]  # back to q's layout, one flag per cell row
    keep = _real_cells(real, layout)
    query, key, value = (_finite_or_zero(x, dirty) for x in (query, key, value))
    out = attend(query, key, value)
    nan = jnp.full((), jnp.nan, out.dtype)
    return jnp.where(dirty, nan, jnp.where(keep, out, jnp.zeros((), out.dtype)))


def _real_cells(real: jax.Array, layout: str) -> jax.Array:
    """Segment ids != 0 [..., L] broadcast against q/k/v in ``layout``."""
    return jnp.expand_dims(real, axis=(-1, -2) if layout == "BTNH" else (-3, -1))


def cudnn_supported(query: Any, layout: str = "BTNH") -> bool:
    """Whether :func:`packed_attention` would run cuDNN's fused kernel for
    ``query``: the default backend is a GPU, the query has its rows axis
    (JAX's vmap rule for cuDNN attention takes per-row lengths only, not the
    packed layout, so one row inside ``jax.vmap`` stays on XLA), cuDNN is
    there on a Hopper or later GPU (the packed layout's need), and the dtype
    (float16 or bfloat16) and head size (a multiple of 8, at most 256) are
    ones it takes."""
    if jax.default_backend() != "gpu" or np.ndim(query) != 4:
        return False
    head = np.shape(query)[-1]
    if jnp.asarray(query).dtype not in _CUDNN_DTYPES or head % 8 or head > _CUDNN_MAX_HEAD:
        return False
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    try:
        cudnn.check_cudnn_version()
        return bool(cudnn.check_compute_capability(_CUDNN_PACKED_CAPABILITY))
    except (RuntimeError, ValueError):  # no cuDNN, or no CUDA device to ask
        return False


def _cudnn_attention(query, key, value, ids, lengths, starts, *, scale, is_causal, layout):
    """cuDNN's fused attention with the packed layout (GPU only; rows axis
    first). jax.nn.dot_product_attention(implementation="cudnn") takes only
    per-row lengths in this JAX, so the packed layout goes to the cuDNN
    function it calls, with the arguments that function documents."""
    from jax._src.cudnn.fused_attention_stablehlo import MaskType
    from jax._src.cudnn.fused_attention_stablehlo import dot_product_attention as cudnn_attention

    mask = MaskType.PADDING_CAUSAL if is_causal else MaskType.PADDING
    if lengths.shape[-1] == 1:  # one segment per row: plain padding lengths
        seqlens, offsets = lengths[:, 0].astype(jnp.int32), None
    else:
        seqlens, offsets = cudnn_packed_layout(lengths, starts)
    keep = jnp.expand_dims(ids != 0, axis=(-1, -2) if layout == "BTNH" else (-3, -1))
    # The kernel leaves padding cells unwritten: its output there and, in the
    # backward pass, the gradients there (on an H100, dq at padding cells held
    # values up to 4e34: tests/test_gpu.py). Selecting around the call zeroes
    # both, NaN or not (a select's gradient selects too).
    query, key, value = (jnp.where(keep, x, jnp.zeros((), x.dtype)) for x in (query, key, value))
    out = cudnn_attention(
        query,
        key,
        value,
        q_seqlen=seqlens,
        kv_seqlen=seqlens,
        q_offsets=offsets,
        kv_offsets=offsets,
        scale=scale,
        mask_type=mask,
        qkv_layout=layout,
    )
    return jnp.where(keep, out, 0).astype(query.dtype)


def packed_attention(
    query: Any,
    key: Any,
    value: Any,
    segments: Any,
    *,
    column: str | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    layout: str = "BTNH",
    implementation: Implementation | None = None,
    num_segments: int | None = None,
) -> jax.Array:
    """Self-attention over packed rows: each token attends only to the
    tokens of its own segment (and, ``is_causal``, not to later ones);
    padding tokens (segment 0) attend to nothing and give zeros.

    ``query``, ``key``, ``value``: ``[rows, L, heads, head_size]``
    (``layout="BTNH"``, ``jax.nn.dot_product_attention``'s) or ``[rows,
    heads, L, head_size]`` (``"BNTH"``), or the same without ``rows`` for one
    row (inside ``jax.vmap`` / ``jb.map``; XLA then, see
    :func:`cudnn_supported`). ``segments``: a packed batch or row (its
    ``<column>_segment_ids``, ``_lengths`` and ``_segment_starts``;
    ``column=`` is needed when the batch packs several features) or segment ids
    ``[rows, L]`` (1..n back to back, 0 for padding; a padded batch's mask
    as int works too). ``scale`` defaults to ``1 / sqrt(head_size)``.

    ``implementation``: ``None`` picks ``"cudnn"`` where
    :func:`cudnn_supported` (a Hopper or later GPU with cuDNN, float16 or
    bfloat16, head size a multiple of 8 up to 256), ``"kernel"`` on CPU for
    float32 and bfloat16, and ``"xla"`` elsewhere. ``"cudnn"`` calls JAX's
    fused cuDNN kernel with the packed layout (:func:`cudnn_packed_layout`)
    and ``"kernel"`` jaxbatch's C++ kernel through XLA's FFI; both compute
    only within segments (the kernel's work is the sum of the squared
    segment lengths), and from segment ids alone take each segment as one
    run of equal ids, with ``num_segments`` slots (default L). ``"xla"`` is
    the dense masked form: the same result, computed over whole rows.

    A NaN or Inf in one segment's q, k or v (or in a padding cell) never
    reaches another segment, forward or backward: every other segment's
    outputs and gradients are those of the clean run, and padding gives
    zeros. With ``"xla"`` and ``"cudnn"`` the segment's outputs (in that
    head) and gradients are NaN.

    Example::

        out = jb.masked.packed_attention(q, k, v, batch)   # q [rows, L, heads, d]
    """
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    ids, lengths, starts = _segments_of("packed_attention", segments, column)
    _check_qkv(query, key, value, ids, layout)
    if scale is None:
        scale = 1.0 / float(np.sqrt(query.shape[-1]))
    if implementation is None:
        implementation = _choose(query, layout)
    if implementation not in _IMPLEMENTATIONS:
        raise ValueError(
            f"jb.masked.packed_attention: implementation must be None or one of "
            f"{_IMPLEMENTATIONS}, found {implementation!r}"
        )
    if implementation == "xla":
        attend = functools.partial(
            _xla_attention, ids=ids, scale=scale, is_causal=is_causal, layout=layout
        )
        return _isolated(attend, query, key, value, ids, layout=layout)
    if lengths is None:
        lengths, starts = attention_kernel.segments_from_ids(ids, num_segments or ids.shape[-1])
    if implementation == "kernel":
        if query.dtype not in attention_kernel.DTYPES or not attention_kernel.available():
            raise ValueError(
                "jb.masked.packed_attention: implementation='kernel' takes float32 or bfloat16 "
                f"on CPU, found {query.dtype}"
                + ("" if attention_kernel.available() else " (the kernel is not registered)")
            )
        # The kernel reads only the segments' cells: padding never enters.
        return attention_kernel.attention(
            query, key, value, lengths, starts, scale=scale, is_causal=is_causal, layout=layout
        )
    if query.ndim != 4:
        raise ValueError(
            "jb.masked.packed_attention: implementation='cudnn' needs the rows axis "
            f"({layout}, found {tuple(query.shape)}): JAX's vmap rule for cuDNN attention takes "
            "per-row lengths only, not the packed layout; call it on the whole batch"
        )
    attend = functools.partial(
        _cudnn_attention,
        ids=ids,
        lengths=jnp.asarray(lengths),
        starts=jnp.asarray(starts),
        scale=scale,
        is_causal=is_causal,
        layout=layout,
    )
    return _isolated(attend, query, key, value, ids, layout=layout)


def _choose(query: jax.Array, layout: str) -> str:
    """cuDNN on a GPU that takes the shapes, the C++ kernel on CPU for the
    dtypes it takes, the masked XLA form elsewhere."""
    if cudnn_supported(query, layout):
        return "cudnn"
    return "kernel" if attention_kernel.supported(query) else "xla"


__all__ = ["cu_seqlens", "cudnn_packed_layout", "cudnn_supported", "packed_attention"]
