"""The C++ packed-attention kernel (implementation="kernel", the CPU default)
against the masked reference: outputs and gradients under jit, vmap, grad
and remat, bfloat16, NaN isolation, segments from ids, and the choice."""

from __future__ import annotations

import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from test_packed_attention import (
    _qkv,
    check_isolation,
    ids_of,
    packed_rows,
    planted,
    reference_attention,
)

import jaxbatch as jb
from jaxbatch._src.ops import attention_kernel

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu" or not attention_kernel.available(),
    reason="the kernel runs on CPU",
)


@functools.partial(jax.jit, static_argnames=("causal", "implementation", "remat"))
def _grads(q, k, v, ids, weights, causal, implementation, remat):
    """Loss sum(out * weights) and its gradients in q, k, v: over the rows,
    and one row at a time under vmap."""

    def attend(q, k, v, ids):
        return jb.masked.packed_attention(
            q, k, v, ids, is_causal=causal, implementation=implementation
        )

    if remat:
        attend = jax.checkpoint(attend)

    def loss(q, k, v, ids, w):
        return jnp.sum(attend(q, k, v, ids) * w)

    rows = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, ids, weights)
    per_row = jax.vmap(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v, ids, weights)
    return rows, per_row


def _fixed_shape(lengths, length, rows=4, cells=12):
    """ids_of padded with padding rows and cells to [rows, cells]: one
    compilation for every layout drawn."""
    ids = ids_of(lengths, length)
    return np.pad(ids, ((0, rows - ids.shape[0]), (0, cells - ids.shape[1])))


@settings(max_examples=20, deadline=None)
@given(packed_rows(max_length=12), st.booleans(), st.booleans(), st.integers(0, 2**31))
def test_gradients_equal_the_masked_forms(rows, causal, remat, seed):
    ids = _fixed_shape(*rows)
    q, k, v = _qkv(seed, *ids.shape)
    weights = np.random.default_rng(seed + 1).normal(size=q.shape).astype(np.float32)
    (loss, got), got_rows = _grads(q, k, v, ids, weights, causal, "kernel", remat)
    (want_loss, want), _ = _grads(q, k, v, ids, weights, causal, "xla", False)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-5)
    for name, g, r, w in zip("qkv", got, got_rows, want, strict=True):
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4, err_msg=f"d{name}")
        np.testing.assert_allclose(r, w, atol=2e-5, rtol=1e-4, err_msg=f"d{name} per row")
        assert (np.asarray(g)[ids == 0] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16_accumulates_in_float32(causal):
    ids = ids_of(np.array([[5, 1, 9, 0], [16, 0, 0, 0], [3, 3, 3, 3]]), 16)
    q, k, v = (jnp.asarray(a, jnp.bfloat16) for a in _qkv(3, 3, 16, heads=2, d=32))
    got = jb.masked.packed_attention(q, k, v, ids, is_causal=causal, implementation="kernel")
    assert got.dtype == jnp.bfloat16
    f32 = [np.asarray(a, np.float32) for a in (q, k, v)]
    want = reference_attention(*f32, ids, 1 / np.sqrt(32), causal)
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=2e-2, rtol=2e-2)

    def loss(impl, *qkv):
        out = jb.masked.packed_attention(*qkv, ids, is_causal=causal, implementation=impl)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    got_grads = jax.jit(jax.grad(functools.partial(loss, "kernel"), (0, 1, 2)))(q, k, v)
    want_grads = jax.jit(jax.grad(functools.partial(loss, "xla"), (0, 1, 2)))(*f32)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert g.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(g, np.float32), w, atol=5e-2, rtol=5e-2)


@settings(max_examples=25, deadline=None)
@given(planted())
def test_a_non_finite_input_never_leaves_its_segment(case):
    check_isolation(case, "kernel")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.sampled_from([1, 4, 70]))
def test_segments_from_ids_are_the_runs_of_equal_nonzero_ids(runs, slots):
    """Runs of any labels (not only 1..n in order), padding anywhere between;
    more slots than cells too."""
    ids = np.repeat(np.arange(len(runs)) % 3, runs).astype(np.int32)  # labels 0, 1, 2, 0, ...
    ids = np.pad(ids, (0, 64 - ids.size))  # one compilation a slot count
    want = [(a, b - a) for a, b in _runs(ids)]
    lengths, starts = jax.jit(attention_kernel.segments_from_ids, static_argnums=1)(ids, slots)
    got = [(int(s), int(n)) for s, n in zip(starts, lengths, strict=True) if n]
    assert got == want[:slots]
    assert lengths.shape == starts.shape == (slots,)
    assert (np.asarray(starts)[np.asarray(lengths) == 0] == ids.size).all()


def _runs(ids):
    out, t = [], 0
    while t < len(ids):
        u = t
        while u < len(ids) and ids[u] == ids[t]:
            u += 1
        if ids[t]:
            out.append((t, u))
        t = u
    return out


def test_the_kernel_is_chosen_on_cpu_for_the_dtypes_it_takes():
    ids = np.ones((2, 8), np.int32)
    q = jnp.zeros((2, 8, 2, 4), jnp.float32)

    def lowered(x):
        return jax.jit(lambda a: jb.masked.packed_attention(a, a, a, ids)).lower(x).as_text()

    assert "jaxbatch_packed_attention_fwd" in lowered(q)
    assert "jaxbatch_packed_attention_fwd" in lowered(q.astype(jnp.bfloat16))
    assert "jaxbatch_packed_attention_fwd" not in lowered(q.astype(jnp.float16))
    with pytest.raises(ValueError, match="'kernel' takes float32 or bfloat16 on CPU"):
        jb.masked.packed_attention(*(q.astype(jnp.float16),) * 3, ids, implementation="kernel")
