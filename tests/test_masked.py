"""jb.masked against NumPy on the unpadded examples: eager, under jit and under vmap,
for float32 and bfloat16, with fully masked rows and NaN/inf garbage in the padding."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxbatch as jb
from jaxbatch import masked

BF16 = ml_dtypes.bfloat16
TOLERANCE = {np.float32: {"rtol": 2e-5, "atol": 2e-5}, BF16: {"rtol": 1e-2, "atol": 1e-2}}
GARBAGE = [np.nan, np.inf, -np.inf, 1e30, 0.0]


# References on the real values `v` of one example (float64), reducing axis 0.
def _np_logsumexp(v):
    top = np.max(v, axis=0)
    return top + np.log(np.sum(np.exp(v - top), axis=0))


def _np_softmax(v):
    e = np.exp(v - np.max(v, axis=0))
    return e / np.sum(e, axis=0)


def _var_ddof1(x, mask, axis=-1, keepdims=False, **kwargs):
    return masked.var(x, mask, axis, keepdims, ddof=1, **kwargs)


REDUCTIONS = {
    "sum": (masked.sum, np.sum, 0.0),
    "mean": (masked.mean, np.mean, 0.0),
    "max": (masked.max, np.max, 0.0),
    "min": (masked.min, np.min, 0.0),
    "var": (masked.var, np.var, 0.0),
    "var_ddof1": (_var_ddof1, lambda v, axis: np.var(v, axis=axis, ddof=1), 0.0),
    "logsumexp": (masked.logsumexp, lambda v, axis: _np_logsumexp(v), -np.inf),
}
# The same ops on one unpadded example, in jnp, for reference gradients.
JNP_REFS = {
    "sum": jnp.sum,
    "mean": jnp.mean,
    "max": jnp.max,
    "min": jnp.min,
    "var": jnp.var,
    "var_ddof1": lambda v: jnp.var(v, ddof=1),
    "logsumexp": jax.nn.logsumexp,
    "softmax": jax.nn.softmax,
}
OPS = {name: op for name, (op, _, _) in REDUCTIONS.items()} | {"softmax": masked.softmax}
JITTED = {name: jax.jit(op, static_argnames=("axis",)) for name, op in OPS.items()}
VMAPPED = {name: jax.jit(jax.vmap(op)) for name, op in OPS.items()}


def _reference(name, v, axis=0):
    """The op on one example's real values, or its documented empty value."""
    if name == "softmax":
        return _np_softmax(v) if len(v) else v
    _, ref, empty = REDUCTIONS[name]
    needed = 2 if name == "var_ddof1" else 1
    if v.shape[0] < needed:
        return np.full(v.shape[1:], empty)
    return ref(v, axis=axis)


@st.composite
def padded(draw, inner=()):
    """x [rows, L, *inner] with garbage padding, mask [rows, L] and the lengths. One
    batch shape (as a plan gives), so jit compiles once per dtype; lengths vary."""
    rows, length = 3, 6
    lengths = draw(st.lists(st.integers(0, length), min_size=rows, max_size=rows))
    dtype = draw(st.sampled_from([np.float32, BF16]))
    size = rows * length * int(np.prod(inner, dtype=int))
    values = draw(st.lists(st.floats(-10, 10, width=32), min_size=size, max_size=size))
    x = np.asarray(values, np.float32).reshape(rows, length, *inner).astype(dtype)
    mask = np.arange(length) < np.asarray(lengths)[:, None]
    x[~mask] = draw(st.sampled_from(GARBAGE))
    return x, mask, lengths


def _check_rows(name, out, x, lengths, axis=0):
    """Row r of `out` against the reference on x[r, :lengths[r]]."""
    assert not np.isnan(np.asarray(out, np.float64)).any()
    assert out.dtype == x.dtype
    for r, n in enumerate(lengths):
        want = _reference(name, x[r, :n].astype(np.float64), axis)
        got = np.asarray(out[r], np.float64)
        if name == "softmax":
            np.testing.assert_allclose(got[:n], want, **TOLERANCE[x.dtype.type])
            np.testing.assert_array_equal(got[n:], 0)
        else:
            np.testing.assert_allclose(got, want, **TOLERANCE[x.dtype.type])


@pytest.mark.parametrize("name", OPS)
@given(padded())
def test_matches_unpadded_reference_eager_jit_and_vmap(name, example):
    x, mask, lengths = example
    for out in (OPS[name](x, mask), JITTED[name](x, mask), VMAPPED[name](x, mask)):
        _check_rows(name, out, x, lengths)


@pytest.mark.parametrize("name", OPS)
@given(padded(inner=(3,)))
def test_per_token_features_reduce_over_the_length_axis(name, example):
    x, mask, lengths = example
    out = JITTED[name](x, mask[..., None], axis=-2)
    assert out.shape == (x.shape if name == "softmax" else (x.shape[0], 3))
    _check_rows(name, out, x, lengths)


def test_axes_tuples_none_and_keepdims():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    mask = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], bool)[..., None]
    real = [x[0, :2], x[1, :1]]
    got = masked.sum(x, mask, axis=(1, 2))
    np.testing.assert_allclose(got, [v.sum() for v in real], rtol=1e-6)
    assert masked.mean(x, mask, axis=(1, 2), keepdims=True).shape == (2, 1, 1)
    np.testing.assert_allclose(
        masked.max(x, mask, axis=None), np.concatenate([v.ravel() for v in real]).max()
    )
    np.testing.assert_allclose(
        masked.logsumexp(x, mask, axis=(1, 2)),
        [_np_logsumexp(v.ravel()) for v in real],
        rtol=1e-6,
    )
    assert masked.logsumexp(x, mask, axis=-2, keepdims=True).shape == (2, 1, 3)
    weights = masked.softmax(x, mask, axis=(1, 2))
    np.testing.assert_allclose(weights.sum(axis=(1, 2)), 1, rtol=1e-6)


def test_integer_and_bool_inputs():
    x = np.array([[3, -7, 5, 100], [1, 2, 3, 4]], np.int32)
    mask = np.array([[1, 1, 1, 0], [0, 0, 0, 0]], bool)
    np.testing.assert_array_equal(masked.sum(x, mask), [1, 0])
    np.testing.assert_array_equal(masked.max(x, mask), [5, 0])
    np.testing.assert_array_equal(masked.min(x, mask, empty=-1), [-7, -1])
    assert masked.max(x, mask).dtype == jnp.int32
    np.testing.assert_allclose(masked.mean(x, mask), [1 / 3, 0], rtol=1e-6)
    np.testing.assert_array_equal(masked.sum(x > 2, mask), [2, 0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, bool])
def test_sums_of_small_integers_and_bools_widen_like_jnp_sum(dtype):
    """int8 [100, 100] must sum to 200 in segment_sum as in sum (not wrap to
    -56); bools are counted. The reference adds in int64."""
    rng = np.random.default_rng(3)
    hi = 2 if dtype is bool else min(int(np.iinfo(dtype).max), 1000)
    x = rng.integers(0, hi, (3, 40)).astype(dtype)
    ids = rng.integers(0, 4, (3, 40)).astype(np.int32)
    want_dtype = jnp.sum(jnp.zeros((), dtype)).dtype
    got = masked.segment_sum(x, ids, 3)
    assert got.dtype == want_dtype
    np.testing.assert_array_equal(got, _segment_loop(x.astype(np.int64), ids, 3, np.sum))
    got = masked.sum(x, ids > 0)
    assert got.dtype == want_dtype
    np.testing.assert_array_equal(got, np.where(ids > 0, x.astype(np.int64), 0).sum(-1))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_fully_masked_rows_give_documented_values(dtype):
    x = np.full((2, 3), np.nan, dtype)
    x[0] = [1, 2, 3]
    mask = np.array([[True, True, False], [False, False, False]])
    empty_row = {
        "sum": 0,
        "mean": 0,
        "var": 0,
        "max": 0,
        "min": 0,
        "logsumexp": -np.inf,
    }
    for name, want in empty_row.items():
        out = np.asarray(OPS[name](x, mask), np.float64)
        assert out[1] == want, name
        assert not np.isnan(out).any(), name
    np.testing.assert_array_equal(np.asarray(masked.softmax(x, mask)[1], np.float64), 0)
    for name in ("mean", "var", "max", "min", "logsumexp"):
        assert float(OPS[name](x, mask, empty=-5.0)[1]) == -5.0, name
    # A row of only -inf values: logsumexp is -inf, softmax zeros (jax.nn gives NaN).
    y = np.array([[-np.inf, -np.inf, 0]], dtype)
    only_neg_inf = np.array([[True, True, False]])
    assert float(masked.logsumexp(y, only_neg_inf, empty=0.0)[0]) == -np.inf
    np.testing.assert_array_equal(np.asarray(masked.softmax(y, only_neg_inf), np.float64), 0)
    for op in (masked.logsumexp, masked.softmax):
        grad = jax.grad(lambda y, op=op: jnp.sum(op(y, only_neg_inf).astype(jnp.float32)))(y)
        np.testing.assert_array_equal(np.asarray(grad, np.float64), 0)
    # Under vmap the empty row is one example of its own.
    assert float(jax.vmap(masked.mean)(x, mask)[1]) == 0


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("name", OPS)
def test_gradients_are_finite_zero_on_padding_and_match_unpadded(name, dtype):
    x = np.full((3, 5), np.nan, np.float32)
    x[0] = [0.3, -1.2, 2.5, 0.9, -0.4]
    x[1, :2] = [1.5, -0.7]
    x = x.astype(dtype)
    lengths = [5, 2, 0]
    mask = np.arange(5) < np.asarray(lengths)[:, None]
    w = np.linspace(0.5, 2.0, 15).reshape(3, 5).astype(np.float32)
    weights = w if name == "softmax" else w[:, 0]

    def loss(x):
        return jnp.sum(weights * OPS[name](x, mask).astype(jnp.float32))

    for grad in (jax.grad(loss)(x), jax.jit(jax.grad(loss))(x)):
        grad = np.asarray(grad, np.float64)
        assert np.isfinite(grad).all()
        np.testing.assert_array_equal(grad[~mask], 0)
        if dtype is not np.float32:
            continue
        for r, n in enumerate(lengths[:2]):

            def ref_loss(v, r=r, n=n):
                return jnp.sum((w[r, :n] if name == "softmax" else w[r, 0]) * JNP_REFS[name](v))

            want = jax.grad(ref_loss)(jnp.asarray(x[r, :n]))
            np.testing.assert_allclose(grad[r, :n], want, rtol=1e-5, atol=1e-6)


def test_mask_errors_name_the_problem():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(TypeError, match=r"mask must be a bool array.*int32"):
        masked.sum(x, np.ones((3, 4), np.int32))
    with pytest.raises(TypeError, match=r"mask must be a bool array.*float32"):
        jax.jit(masked.mean)(x, np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\).*x of shape \(3, 4\)"):
        masked.max(x, np.ones((3, 5), bool))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 4\).*x of shape \(3, 4\)"):
        jax.jit(masked.softmax)(x, np.ones((2, 3, 4), bool))
    with pytest.raises(ValueError, match=r"mask\[\.\.\., None\]"):
        masked.mean(np.zeros((3, 4, 8), np.float32), np.ones((3, 4), bool), axis=-2)
    # Broadcasting that fits is fine: one mask for every row, or per token for features.
    np.testing.assert_array_equal(masked.sum(x + 1, np.array([True, True, False, False])), 2)
    assert masked.sum(np.ones((3, 4, 8)), np.ones((3, 4, 1), bool), axis=-2).shape == (3, 8)


def _attention_loop(ids, causal):
    ids = np.asarray(ids)
    out = np.zeros(ids.shape + ids.shape[-1:], bool)
    for row in np.ndindex(ids.shape[:-1]):
        for q in range(ids.shape[-1]):
            for k in range(ids.shape[-1]):
                same = ids[row + (q,)] == ids[row + (k,)] != 0
                out[row + (q, k)] = same and (k <= q or not causal)
    return out


@st.composite
def segment_ids(draw):
    """[rows, L] ids: packed (contiguous 1..n then zeros) or arbitrary small ints."""
    rows, length = 2, 6
    if draw(st.booleans()):
        values = draw(st.lists(st.integers(0, 3), min_size=rows * length, max_size=rows * length))
        return np.asarray(values, np.int32).reshape(rows, length)
    ids = np.zeros((rows, length), np.int32)
    for r in range(rows):
        pieces = draw(st.lists(st.integers(1, length), max_size=4))
        start = 0
        for s, n in enumerate(pieces, 1):
            ids[r, start : start + n] = s
            start = min(start + n, length)
    return ids


ATTENTION = {
    False: jax.jit(masked.attention_mask),
    True: jax.jit(lambda ids: masked.attention_mask(ids, causal=True)),
}


@pytest.mark.parametrize("causal", [False, True])
@given(segment_ids())
def test_attention_mask_matches_double_loop(causal, ids):
    want = _attention_loop(ids, causal)
    for got in (
        masked.attention_mask(ids, causal=causal),
        ATTENTION[causal](ids),
        jax.vmap(ATTENTION[causal])(ids),
        masked.attention_mask(ids[None], causal=causal)[0],
    ):
        assert got.dtype == jnp.bool_
        np.testing.assert_array_equal(got, want)


def test_attention_mask_on_a_packed_batch_and_errors():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (3, 2, 4, 1)]})
    plan = jb.plan(ds, jb.Pack(row_length=6, rows_per_batch=2, max_segments_per_row=3))
    batch = jb.collate(ds, plan[0])
    ids = batch["tokens_segment_ids"]
    allowed = masked.attention_mask(ids, causal=True)
    np.testing.assert_array_equal(allowed, _attention_loop(ids, True))
    # Softmax over keys with it: padded queries get all zeros, real ones sum to 1.
    weights = masked.softmax(np.zeros(allowed.shape, np.float32), allowed)
    np.testing.assert_allclose(weights.sum(-1), (ids != 0).astype(np.float32), rtol=1e-6)
    with pytest.raises(TypeError, match="segment_ids must be an integer array"):
        masked.attention_mask(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="length axis"):
        masked.attention_mask(np.int32(1))


@st.composite
def packed_batches(draw):
    """A real packed batch from jb.plan(Pack) + jb.collate, NaN in the padding."""
    row_length, segments = 6, 3
    inner = draw(st.sampled_from([(), (2,)]))
    dtype = draw(st.sampled_from([np.float32, BF16]))
    lengths = draw(st.lists(st.integers(1, row_length), min_size=1, max_size=8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    examples = [rng.uniform(-10, 10, (n, *inner)).astype(dtype) for n in lengths]
    ds = jb.Dataset.from_arrays({"x": examples})
    plan = jb.plan(
        ds, jb.Pack(row_length=row_length, rows_per_batch=2, max_segments_per_row=segments)
    )
    batch = jb.collate(ds, plan[draw(st.integers(0, len(plan) - 1))], pad_value=np.nan)
    return batch, examples, segments


def _segment_loop(x, ids, segments, reduce):
    out = np.zeros(ids.shape[:-1] + (segments,) + x.shape[ids.ndim :])
    for r in np.ndindex(ids.shape[:-1]):
        for s in range(1, segments + 1):
            values = x[r][ids[r] == s].astype(np.float64)
            if len(values):
                out[r + (s - 1,)] = reduce(values, axis=0)
    return out


SEGMENT_OPS = {"sum": (masked.segment_sum, np.sum), "mean": (masked.segment_mean, np.mean)}
JITTED_SEGMENT = {k: jax.jit(lambda x, i, op=op: op(x, i, 3)) for k, (op, _) in SEGMENT_OPS.items()}
VMAPPED_SEGMENT = {k: jax.jit(jax.vmap(f)) for k, f in JITTED_SEGMENT.items()}


@pytest.mark.parametrize("name", SEGMENT_OPS)
@given(packed_batches())
def test_segment_ops_match_loop_and_unpacked_examples(name, packed):
    batch, examples, segments = packed
    op, reduce = SEGMENT_OPS[name]
    x, ids = batch["x"], batch["x_segment_ids"]
    tolerance = TOLERANCE[x.dtype.type]
    want = _segment_loop(x, ids, segments, reduce)
    for got in (op(x, ids, segments), JITTED_SEGMENT[name](x, ids), VMAPPED_SEGMENT[name](x, ids)):
        assert got.dtype == x.dtype
        assert got.shape == ids.shape[:-1] + (segments,) + x.shape[2:]
        np.testing.assert_allclose(np.asarray(got, np.float64), want, **tolerance)
    # Slot s - 1 holds example_index[r, s - 1]'s result; empty slots are 0.
    got = np.asarray(op(x, ids, segments), np.float64)
    for (r, s), e in np.ndenumerate(batch["example_index"]):
        want = reduce(examples[e].astype(np.float64), axis=0) if e >= 0 else 0
        np.testing.assert_allclose(got[r, s], want, **tolerance)


def test_segment_ops_leading_dims_gradients_and_errors():
    # Ids above num_segments are ignored, not spilled into the next row's segments.
    ids = np.array([[[1, 1, 2, 5], [3, 3, 3, 1]], [[0, 0, 0, 0], [1, 2, 4, 2]]], np.int32)
    x = np.arange(16, dtype=np.float32).reshape(2, 2, 4)
    want = _segment_loop(x, ids, 3, np.sum)
    np.testing.assert_allclose(masked.segment_sum(x, ids, 3), want)
    x[0, 0, 3] = x[1, 0] = np.nan
    grad = jax.grad(lambda x: jnp.sum(masked.segment_mean(x, ids, 3)))(x)
    assert np.isfinite(np.asarray(grad)).all()
    np.testing.assert_allclose(grad[0, 0], [0.5, 0.5, 1, 0])
    np.testing.assert_array_equal(grad[1, 0], 0)
    with pytest.raises(ValueError, match=r"x of shape \(2, 2, 4\).*shape \(2, 4\)"):
        masked.segment_sum(x, ids[0], 3)
    with pytest.raises(ValueError, match="num_segments must be a positive Python int"):
        masked.segment_mean(x, ids, 0)
    with pytest.raises(TypeError, match="segment_ids must be an integer array"):
        masked.segment_sum(x, ids.astype(np.float32), 3)
