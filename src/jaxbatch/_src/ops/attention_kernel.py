"""The C++ packed-attention kernel (cc/jaxbatch/kernels/) on CPU, through
XLA's FFI: forward and FlashAttention-2 backward paired with
``jax.custom_vjp``.

The kernel computes, for every row, head and segment, that segment's queries
against that segment's keys only, so its work is the sum of the squared
segment lengths instead of the row length squared; padding cells are exact
zeros, and nothing crosses a segment (a NaN stays in its own). It takes the
segments as ``lengths``/``starts`` ``[..., S]`` int32 (a packed batch's
``<k>_lengths`` and ``<k>_segment_starts``); :func:`segments_from_ids` makes
them from segment ids.

Registration first, then the layout helper, then the custom_vjp wrapper.
"""

from __future__ import annotations

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np

from jaxbatch import _core

_FORWARD = "jaxbatch_packed_attention_fwd"
_BACKWARD = "jaxbatch_packed_attention_bwd"
DTYPES = (jnp.float32, jnp.bfloat16)

# --- Registration ---------------------------------------------------------

_lock = threading.Lock()
_registered: bool | None = None


def available() -> bool:
    """Whether the kernel is registered with XLA's CPU platform (once per
    process; False where this jax has no FFI registration)."""
    global _registered
    with _lock:
        if _registered is None:
            try:
                targets = _core.packed_attention_ffi()
                jax.ffi.register_ffi_target(_FORWARD, targets["forward"], platform="cpu")
                jax.ffi.register_ffi_target(_BACKWARD, targets["backward"], platform="cpu")
                _registered = True
            except (AttributeError, RuntimeError, ValueError):
                _registered = False
        return _registered


def supported(query: jax.Array) -> bool:
    """Whether the kernel takes ``query``: float32 or bfloat16, CPU."""
    return jax.default_backend() == "cpu" and query.dtype in DTYPES and available()


# --- Segments from ids ------------------------------------------------------


def segments_from_ids(ids: jax.Array, num_segments: int) -> tuple[jax.Array, jax.Array]:
    """``(lengths, starts)`` ``[..., num_segments]`` int32 of the runs of
    equal nonzero ids in ``ids [..., L]``, in order; unused slots are empty
    and start at L. Each segment must be one run (as collation lays them);
    its label does not matter."""
    length = ids.shape[-1]
    real = ids != 0
    before = jnp.concatenate([jnp.zeros_like(ids[..., :1]), ids[..., :-1]], axis=-1)
    after = jnp.concatenate([ids[..., 1:], jnp.zeros_like(ids[..., :1])], axis=-1)
    cells = jnp.arange(length, dtype=jnp.int32)
    firsts = jnp.where(real & (ids != before), cells, length)
    lasts = jnp.where(real & (ids != after), cells + 1, length)
    take = min(num_segments, length)
    starts = jnp.sort(firsts, axis=-1)[..., :take]
    ends = jnp.sort(lasts, axis=-1)[..., :take]
    if take < num_segments:  # more slots than cells: the rest empty
        pad = [(0, 0)] * (ids.ndim - 1) + [(0, num_segments - take)]
        starts = jnp.pad(starts, pad, constant_values=length)
        ends = jnp.pad(ends, pad, constant_values=length)
    return (ends - starts).astype(jnp.int32), starts.astype(jnp.int32)


# --- The kernel with its gradient -----------------------------------------


def _attributes(scale: float, causal: bool, heads_first: bool) -> dict:
    return {
        "scale": np.float32(scale),
        "causal": np.int64(causal),
        "heads_first": np.int64(heads_first),
    }


def _forward_call(q, k, v, lengths, starts, scale, causal, heads_first):
    lse_shape = q.shape[:-1] if heads_first else (*q.shape[:-3], q.shape[-2], q.shape[-3])
    call = jax.ffi.ffi_call(
        _FORWARD,
        (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(lse_shape, jnp.float32)),
        vmap_method="broadcast_all",
    )
    return call(q, k, v, lengths, starts, **_attributes(scale, causal, heads_first))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _attention(q, k, v, lengths, starts, scale, causal, heads_first):
    return _forward_call(q, k, v, lengths, starts, scale, causal, heads_first)[0]


def _attention_fwd(q, k, v, lengths, starts, scale, causal, heads_first):
    out, lse = _forward_call(q, k, v, lengths, starts, scale, causal, heads_first)
    return out, (q, k, v, lengths, starts, out, lse)


def _attention_bwd(scale, causal, heads_first, residuals, d_out):
    q, k, v, lengths, starts, out, lse = residuals
    grads = jax.ffi.ffi_call(
        _BACKWARD,
        tuple(jax.ShapeDtypeStruct(q.shape, q.dtype) for _ in range(3)),
        vmap_method="broadcast_all",
    )(
        q,
        k,
        v,
        lengths,
        starts,
        out,
        lse,
        d_out.astype(q.dtype),
        **_attributes(scale, causal, heads_first),
    )
    return (*grads, None, None)


_attention.defvjp(_attention_fwd, _attention_bwd)


def attention(query, key, value, lengths, starts, *, scale, is_causal, layout):
    """Packed attention by the kernel: ``query``/``key``/``value`` in
    ``layout`` (rows axes first, any number), ``lengths``/``starts``
    ``[..., S]`` with the same leading axes. Differentiable in q, k, v."""
    lead = query.shape[:-3]
    lengths = jnp.broadcast_to(jnp.asarray(lengths, jnp.int32), (*lead, lengths.shape[-1]))
    starts = jnp.broadcast_to(jnp.asarray(starts, jnp.int32), lengths.shape)
    return _attention(
        query, key, value, lengths, starts, float(scale), bool(is_causal), layout == "BNTH"
    )
