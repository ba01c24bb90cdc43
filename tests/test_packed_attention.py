"""Packed batches' <k>_segment_starts, the layouts fused attention kernels take
(cuDNN's packed offsets, flash-attention's cu_seqlens) and
jb.masked.packed_attention, each against a NumPy reference."""

from __future__ import annotations

import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from reference import map_quarantining_one

import jaxbatch as jb

# --- References -----------------------------------------------------------


def reference_starts(lengths: np.ndarray) -> np.ndarray:
    """Each slot's first cell: segments back to back from 0, so an unused
    slot (length 0) starts where the row's segments end."""
    out = np.zeros_like(lengths)
    for r in range(lengths.shape[0]):
        at = 0
        for s in range(lengths.shape[1]):
            out[r, s] = at
            at += lengths[r, s]
    return out


def reference_cu_seqlens(lengths, starts, row_length) -> np.ndarray:
    """Per row, its S slots then its padding tail, over the flattened rows."""
    bounds = []
    for r in range(lengths.shape[0]):
        for s in range(lengths.shape[1]):
            bounds.append(r * row_length + starts[r, s])
        bounds.append(r * row_length + int((starts[r] + lengths[r]).max(initial=0)))
    bounds.append(lengths.shape[0] * row_length)
    return np.asarray(bounds, np.int32)


def reference_attention(q, k, v, ids, scale, causal=False) -> np.ndarray:
    """[rows, L, heads, d] attention, token by token: softmax over the keys of
    the query's own segment (not after it, causal); padding queries give 0."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    out = np.zeros_like(q)
    rows, length, heads, _ = q.shape
    for r in range(rows):
        for t in range(length):
            if ids[r, t] == 0:
                continue
            keys_ = [u for u in range(length) if ids[r, u] == ids[r, t] and (not causal or u <= t)]
            for h in range(heads):
                scores = np.array([q[r, t, h] @ k[r, u, h] for u in keys_]) * scale
                w = np.exp(scores - scores.max())
                out[r, t, h] = (w / w.sum()) @ v[r, keys_, h]
    return out


@st.composite
def packed_rows(draw, max_rows=4, max_length=12, max_segments=4):
    """Segment lengths [rows, S] laid back to back in rows of L: rows empty,
    full, or anything between (empty slots only after the used ones)."""
    rows = draw(st.integers(1, max_rows))
    length = draw(st.integers(1, max_length))
    segments = draw(st.integers(1, max_segments))
    lengths = np.zeros((rows, segments), np.int32)
    for r in range(rows):
        kind = draw(st.sampled_from(["empty", "full", "any"]))
        room, n = length, 0 if kind == "empty" else draw(st.integers(1, segments))
        for s in range(n):
            take = draw(st.integers(1, room)) if room else 0
            if kind == "full" and s == n - 1:
                take = room
            lengths[r, s], room = take, room - take
            if not room:
                break
    return lengths, length


def ids_of(lengths: np.ndarray, length: int) -> np.ndarray:
    ids = np.zeros((lengths.shape[0], length), np.int32)
    for r, row in enumerate(lengths):
        at = 0
        for s, n in enumerate(row):
            ids[r, at : at + n] = s + 1
            at += n
    return ids


# --- <k>_segment_starts in collated batches --------------------------------


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 20), min_size=1, max_size=30),
    row_length=st.integers(4, 16),
    too_long=st.sampled_from(["truncate", "split"]),
)
def test_segment_starts_are_where_each_segments_ids_begin(lengths, row_length, too_long):
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in lengths]})
    pack = jb.Pack(row_length=row_length, rows_per_batch=3, too_long=too_long)
    for spec in jb.plan(ds, pack):
        batch = jb.collate(ds, spec)
        seg_lengths = batch["tokens_lengths"]
        starts = batch["tokens_segment_starts"]
        assert starts.dtype == np.int32 and starts.shape == seg_lengths.shape
        np.testing.assert_array_equal(starts, reference_starts(seg_lengths))
        ids = batch["tokens_segment_ids"]
        for r in range(ids.shape[0]):
            for s in range(seg_lengths.shape[1]):
                cells = np.flatnonzero(ids[r] == s + 1)
                if seg_lengths[r, s]:
                    assert cells[0] == starts[r, s] and len(cells) == seg_lengths[r, s]


def test_loader_shapes_and_batches_carry_segment_starts_and_unbatch_leaves_them_out():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in [3, 1, 2, 5]]})
    pack = jb.Pack(row_length=6, rows_per_batch=2, max_segments_per_row=3)
    loader = jb.Loader(ds, pack)
    (shape,) = loader.shapes
    batch = next(iter(loader))
    assert batch["tokens_segment_starts"].shape == (shape.rows, shape.segments) == (2, 3)
    assert "tokens_segment_starts" in batch.aux_keys
    examples = jb.unbatch(dict(batch), batch)
    assert all(set(v) == {"tokens"} for v in examples.values())


def test_each_feature_of_a_joint_pack_has_its_own_segment_starts():
    # An example empty in one feature keeps its slot there: length 0, starting
    # where the previous segment ends.
    ds = jb.Dataset.from_arrays(
        {
            "inputs": [np.arange(n, dtype=np.int32) for n in [3, 1, 5, 2]],
            "targets": [np.arange(n, dtype=np.int32) for n in [1, 2, 0, 3]],
        }
    )
    pack = jb.Pack(row_length={"inputs": 8, "targets": 4}, rows_per_batch=2)
    batch = jb.collate(ds, jb.plan(ds, pack)[0])
    for k, width in (("inputs", 8), ("targets", 4)):
        lengths, starts = batch[f"{k}_lengths"], batch[f"{k}_segment_starts"]
        np.testing.assert_array_equal(starts, reference_starts(lengths))
        assert (starts + lengths <= width).all()
    r, slot = np.argwhere(batch["example_index"] == 2)[0]  # example 2: no targets
    assert batch["inputs_lengths"][r, slot] == 5 and batch["targets_lengths"][r, slot] == 0


def test_a_column_named_like_segment_starts_is_refused():
    with pytest.raises(ValueError, match="tokens_segment_starts"):
        jb.Dataset.from_arrays(
            {"tokens": [np.arange(3)], "tokens_segment_starts": np.zeros((1,), np.int32)}
        )


# --- Layouts --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(packed_rows())
def test_cu_seqlens_matches_the_reference(rows):
    lengths, length = rows
    starts = reference_starts(lengths)
    got = np.asarray(jb.masked.cu_seqlens(lengths, starts, length))
    want = reference_cu_seqlens(lengths, starts, length)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32 and got[-1] == lengths.shape[0] * length
    assert (np.diff(got) >= 0).all()  # every sequence, padding tails too, has a length
    # The real segments are exactly the nonzero ones' cells of the flat ids.
    flat = ids_of(lengths, length).reshape(-1)
    s = lengths.shape[1] + 1
    for r in range(lengths.shape[0]):
        for slot in range(lengths.shape[1]):
            a, b = got[r * s + slot], got[r * s + slot + 1]
            assert (flat[a:b] == slot + 1).all() and b - a == lengths[r, slot]


def test_cu_seqlens_of_a_batch_and_under_jit():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in [3, 1, 2, 5]]})
    batch = jb.collate(ds, next(iter(jb.plan(ds, jb.Pack(row_length=6, rows_per_batch=2)))))
    want = reference_cu_seqlens(batch["tokens_lengths"], batch["tokens_segment_starts"], 6)
    np.testing.assert_array_equal(jb.masked.cu_seqlens(batch), want)
    jitted = jax.jit(jb.masked.cu_seqlens, static_argnums=2)
    got = jitted(batch["tokens_lengths"], batch["tokens_segment_starts"], 6)
    np.testing.assert_array_equal(got, want)


def test_cudnn_packed_layout_is_jaxs_documented_example():
    # fused_attention_stablehlo.dot_product_attention's docstring: 2 rows of
    # 3 and 2 one-token segments -> offsets [[0,1,2,-1],[0,1,-1,-1]].
    lengths = np.array([[1, 1, 1], [1, 1, 0]], np.int32)
    seqlens, offsets = jb.masked.cudnn_packed_layout(lengths, reference_starts(lengths))
    np.testing.assert_array_equal(seqlens, [[1, 1, 1], [1, 1, -1]])
    np.testing.assert_array_equal(offsets, [[0, 1, 2, -1], [0, 1, -1, -1]])


@settings(max_examples=40, deadline=None)
@given(packed_rows())
def test_cudnn_packed_layout_matches_the_reference(rows):
    lengths, _ = rows
    starts = reference_starts(lengths)
    seqlens, offsets = (np.asarray(a) for a in jb.masked.cudnn_packed_layout(lengths, starts))
    for r in range(lengths.shape[0]):
        for s in range(lengths.shape[1]):
            used = lengths[r, s] > 0
            assert seqlens[r, s] == (lengths[r, s] if used else -1)
            assert offsets[r, s] == (starts[r, s] if used else -1)
    assert (offsets[:, -1] == -1).all() and offsets.dtype == np.int32


def test_layouts_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="lengths and starts"):
        jb.masked.cudnn_packed_layout(np.zeros((2, 3), np.int32), np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match="row_length"):
        jb.masked.cu_seqlens(np.zeros((2, 3), np.int32))


# --- packed_attention -----------------------------------------------------


def _qkv(seed, rows, length, heads=2, d=4):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(rows, length, heads, d)).astype(np.float32) for _ in range(3))


@functools.partial(jax.jit, static_argnames=("causal", "implementation"))
def _three_ways(q, k, v, ids, causal, implementation):
    """packed_attention over the rows, heads first, and one row at a time
    under vmap. Jitted together: one compilation an input shape, where eager
    calls compiled every op for every shape hypothesis draws (2 s an example)."""
    attend = functools.partial(
        jb.masked.packed_attention, is_causal=causal, implementation=implementation
    )
    rows = attend(q, k, v, ids)
    bnth = [jnp.swapaxes(a, 1, 2) for a in (q, k, v)]
    heads_first = attend(*bnth, ids, layout="BNTH")
    per_row = jax.vmap(attend)
    return rows, jnp.swapaxes(heads_first, 1, 2), per_row(q, k, v, ids)


@settings(max_examples=30, deadline=None)
@given(
    packed_rows(max_length=10),
    st.booleans(),
    st.integers(0, 2**31),
    st.sampled_from(["xla", "kernel"]),
)
def test_packed_attention_matches_the_masked_reference(rows, causal, seed, implementation):
    lengths, length = rows
    ids = ids_of(lengths, length)
    q, k, v = _qkv(seed, lengths.shape[0], length)
    want = reference_attention(q, k, v, ids, 0.5, causal)
    # Over the rows, heads first, and one row at a time under vmap: each agrees.
    ways = zip(
        ("rows", "heads first", "per row"),
        _three_ways(q, k, v, ids, causal, implementation),
        strict=True,
    )
    for way, got in ways:
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5, err_msg=way)


def test_packed_attention_takes_a_batch_and_its_gradient_is_finite():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in [3, 1, 2, 5]]})
    batch = jb.collate(ds, next(iter(jb.plan(ds, jb.Pack(row_length=8, rows_per_batch=2)))))
    q, k, v = _qkv(0, 2, 8)
    want = reference_attention(q, k, v, batch["tokens_segment_ids"], 0.5)
    np.testing.assert_allclose(jb.masked.packed_attention(q, k, v, batch), want, atol=2e-5)

    def loss(q):
        return jnp.sum(jb.masked.packed_attention(q, k, v, batch) ** 2)

    grad = jax.grad(loss)(jnp.asarray(q))
    assert np.isfinite(grad).all()
    padding = batch["tokens_segment_ids"] == 0
    assert padding.any() and (np.asarray(grad)[padding] == 0).all()


def test_packed_attention_refuses_what_does_not_line_up():
    q, k, v = _qkv(0, 2, 8)
    with pytest.raises(ValueError, match="expected \\(2, 8\\)"):
        jb.masked.packed_attention(q, k, v, np.ones((2, 7), np.int32))
    with pytest.raises(ValueError, match="layout must be one of"):
        jb.masked.packed_attention(q, k, v, np.ones((2, 8), np.int32), layout="TBNH")
    with pytest.raises(ValueError, match="implementation must be"):
        jb.masked.packed_attention(q, k, v, np.ones((2, 8), np.int32), implementation="flash")
    with pytest.raises(TypeError, match="must be integers"):
        jb.masked.packed_attention(q, k, v, np.ones((2, 8), np.float32))


def test_cudnn_is_chosen_only_on_a_gpu_for_the_shapes_it_takes():
    q = jnp.zeros((2, 8, 2, 64), jnp.bfloat16)
    if jax.default_backend() != "gpu":  # on a GPU it also depends on the card (Hopper+)
        assert not jb.masked.cudnn_supported(q)
    assert not jb.masked.cudnn_supported(q.astype(jnp.float32))
    assert not jb.masked.cudnn_supported(jnp.zeros((2, 8, 2, 12), jnp.bfloat16))
    assert not jb.masked.cudnn_supported(jnp.zeros((2, 8, 2, 264), jnp.bfloat16))
    assert not jb.masked.cudnn_supported(q[0])  # one row (under vmap): XLA
    with pytest.raises(ValueError, match="needs the rows axis"):
        jb.masked.packed_attention(q[0], q[0], q[0], np.ones(8, np.int32), implementation="cudnn")


def test_a_padded_batch_is_one_segment_a_row():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in [3, 1, 5]]})
    batch = jb.collate(ds, jb.plan(ds, jb.PadToMax(batch_size=3))[0])
    lengths = batch["tokens_lengths"][:, None]
    want = reference_cu_seqlens(lengths, np.zeros_like(lengths), 5)
    np.testing.assert_array_equal(jb.masked.cu_seqlens(batch), want)
    q, k, v = _qkv(1, 3, 5)
    np.testing.assert_allclose(
        jb.masked.packed_attention(q, k, v, batch),
        reference_attention(q, k, v, batch["tokens_segment_ids"], 0.5),
        atol=2e-5,
    )


# --- what the cuDNN kernel leaves in padding cells -----------------------------


def _ids_from_layout(length, seqlens, offsets):
    """Segment ids [rows, L] from the arguments the cuDNN kernel gets."""
    t = jnp.arange(length)
    if offsets is None:  # one segment a row
        return jnp.where(t[None] < seqlens[:, None], 1, 0)
    starts = offsets[:, :-1, None]
    inside = (seqlens[..., None] > 0) & (t >= starts) & (t < starts + seqlens[..., None])
    slots = jnp.arange(1, seqlens.shape[-1] + 1)[None, :, None]
    return jnp.sum(inside * slots, axis=1)


def kernel_leaving_padding_unwritten(query, key, value, *, q_seqlen, q_offsets, scale, mask_type,
                                     qkv_layout, **_):  # fmt: skip
    """Stands in for cuDNN's packed attention (BTNH) off a GPU: right within
    segments, NaN in the padding cells of its output and of the gradients it
    gives back, where the real kernel leaves whatever the memory held (on an
    H100, dq there held values up to 4e34: tests/test_gpu.py)."""
    from jax._src.cudnn.fused_attention_stablehlo import MaskType

    from jaxbatch._src.ops.attention import _xla_attention

    ids = _ids_from_layout(query.shape[1], q_seqlen, q_offsets)
    padding = (ids == 0)[:, :, None, None]
    causal = mask_type == MaskType.PADDING_CAUSAL

    def attend(q, k, v):
        return _xla_attention(q, k, v, ids, scale=scale, is_causal=causal, layout=qkv_layout)

    def unwritten(x):
        return jnp.where(padding, jnp.nan, x)

    @jax.custom_vjp
    def kernel(q, k, v):
        return unwritten(attend(q, k, v))

    def forward(q, k, v):
        out, vjp = jax.vjp(attend, q, k, v)
        return unwritten(out), vjp

    def backward(vjp, cotangent):
        return tuple(unwritten(g) for g in vjp(cotangent))

    kernel.defvjp(forward, backward)
    return kernel(query, key, value)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("planner", [jb.Pack(row_length=16, rows_per_batch=3), jb.PadToMax(3)])
def test_the_cudnn_path_zeroes_what_the_kernel_leaves_in_padding_cells(
    monkeypatch, planner, causal
):
    from jax._src.cudnn import fused_attention_stablehlo

    monkeypatch.setattr(
        fused_attention_stablehlo, "dot_product_attention", kernel_leaving_padding_unwritten
    )
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n, dtype=np.int32) for n in [5, 9, 3, 2]]})
    batch = jb.collate(ds, jb.plan(ds, planner)[0])
    ids = batch["tokens_segment_ids"]
    assert (ids == 0).any() and (ids != 0).any()
    q, k, v = _qkv(4, *ids.shape)

    def loss(q, k, v, implementation):
        out = jb.masked.packed_attention(
            q, k, v, batch, is_causal=causal, implementation=implementation
        )
        return jnp.sum(out**2), out

    (_, got), got_grads = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)(q, k, v, "cudnn")
    (_, want), want_grads = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)(q, k, v, "xla")
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (np.asarray(got)[ids == 0] == 0).all()
    for g, w in zip(got_grads, want_grads, strict=True):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w, atol=1e-5)
        assert (np.asarray(g)[ids == 0] == 0).all()


# --- a non-finite input stays in its segment ----------------------------------


def _attention_and_grads(q, k, v, ids, weights, causal, implementation):
    """Outputs and the gradients of q, k and v for the cotangent out x
    weights: NaN wherever the outputs are (as a loss over them gives)."""

    def attend(q, k, v):
        return jb.masked.packed_attention(
            q, k, v, ids, is_causal=causal, implementation=implementation
        )

    out, vjp = jax.vjp(attend, q, k, v)
    return out, vjp(out * weights)


_attention_and_grads_jit = jax.jit(
    _attention_and_grads, static_argnames=("causal", "implementation")
)


@st.composite
def planted(draw):
    """A layout, and one non-finite cell in q, k or v: in one segment's
    token or in a padding cell."""
    lengths, length = draw(packed_rows(max_rows=3, max_length=9, max_segments=3))
    ids = ids_of(lengths, length)
    where = draw(st.sampled_from(["segment", "padding"]))
    cells = np.argwhere(ids != 0) if where == "segment" else np.argwhere(ids == 0)
    if not len(cells):
        cells = np.argwhere(ids == ids)  # nothing of that kind: anywhere
    r, t = (int(a) for a in cells[draw(st.integers(0, len(cells) - 1))])
    return dict(
        ids=ids,
        cell=(r, t, draw(st.integers(0, 1)), draw(st.integers(0, 3))),  # row, token, head, feature
        tensor=draw(st.integers(0, 2)),
        value=draw(st.sampled_from([np.nan, np.inf, -np.inf])),
        causal=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31)),
    )


def check_isolation(case, implementation):
    """Every other segment's outputs and gradients are the clean run's, bit
    for bit; padding gives exact zeros; with implementation="xla" (or
    cuDNN's wrapper) the planted segment's head is NaN."""
    ids, (r, t, h, f) = case["ids"], case["cell"]
    clean = list(_qkv(case["seed"], *ids.shape))
    dirty = [a.copy() for a in clean]
    dirty[case["tensor"]][r, t, h, f] = case["value"]
    weights = np.random.default_rng(case["seed"] + 1).normal(size=clean[0].shape)
    run = functools.partial(
        _attention_and_grads_jit, causal=case["causal"], implementation=implementation
    )
    want_out, want_grads = run(*clean, ids, weights)
    got_out, got_grads = run(*dirty, ids, weights)
    others = ids != ids[r, t] if ids[r, t] else np.ones_like(ids, bool)
    for name, got, want in zip(
        ("out", "dq", "dk", "dv"), (got_out, *got_grads), (want_out, *want_grads), strict=True
    ):
        got, want = np.asarray(got), np.asarray(want)
        np.testing.assert_array_equal(got[others], want[others], err_msg=name)
        assert (got[ids == 0] == 0).all(), name
        assert np.isfinite(want).all(), name
    if ids[r, t] and implementation != "kernel":
        segment = ids[r] == ids[r, t]
        assert np.isnan(np.asarray(got_out)[r, segment, h]).all()


@settings(max_examples=40, deadline=None)
@given(planted())
def test_a_non_finite_input_never_leaves_its_segment(case):
    check_isolation(case, "xla")


@settings(max_examples=15, deadline=None)
@given(planted())
def test_the_cudnn_wrapper_keeps_a_non_finite_input_in_its_segment(case):
    from jax._src.cudnn import fused_attention_stablehlo

    with pytest.MonkeyPatch.context() as mp:
        # The stand-in multiplies across segments as a dense kernel would.
        mp.setattr(fused_attention_stablehlo, "dot_product_attention", dense_cudnn_stand_in)
        check_isolation(case, "cudnn")


def dense_cudnn_stand_in(query, key, value, *, q_seqlen, q_offsets, scale, mask_type,
                         qkv_layout, **_):  # fmt: skip
    """Stands in for cuDNN's packed attention off a GPU with the dense
    masked product (no selects), which lets 0 x NaN cross segments."""
    from jax._src.cudnn.fused_attention_stablehlo import MaskType

    ids = _ids_from_layout(query.shape[1], q_seqlen, q_offsets)
    allowed = (ids[:, :, None] == ids[:, None, :]) & (ids != 0)[:, None, :]
    if mask_type == MaskType.PADDING_CAUSAL:
        allowed = allowed & jnp.tril(jnp.ones(allowed.shape[-2:], bool))
    scores = jnp.einsum("bqhd,bkhd->bhqk", query, key) * scale
    weights = jax.nn.softmax(jnp.where(allowed[:, None], scores, -1e30), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights * allowed[:, None], value)


def test_jb_map_quarantines_exactly_the_example_with_a_nan_token():
    """A NaN token's example alone is set aside; its row-mates, which attend
    beside it in the same packed rows, equal attention over each alone."""
    rng = np.random.default_rng(7)
    feats = [rng.normal(size=(int(n), 8)).astype(np.float32) for n in rng.integers(1, 7, 16)]
    feats[5][1, 3] = np.nan
    ds = jb.Dataset.from_arrays({"x": feats})

    def attend(row):
        x = row["x"].reshape(row["x"].shape[0], 2, 4)  # [L, heads, d]
        return jb.masked.packed_attention(x, x * 0.5, x + 1, row).reshape(-1, 8)

    outputs = map_quarantining_one(attend, ds, jb.Pack(row_length=16, rows_per_batch=2), 5, 16)
    for i, output in outputs.items():
        x = feats[i].reshape(1, -1, 2, 4)
        ids = np.ones(x.shape[:2], np.int32)
        want = reference_attention(x, x * 0.5, x + 1, ids, 0.5)[0].reshape(-1, 8)
        np.testing.assert_allclose(output, want, atol=2e-5, rtol=1e-5)


# --- batches that pack several features --------------------------------------


def _two_feature_batch():
    ds = jb.Dataset.from_arrays(
        {
            "inputs": [np.arange(n, dtype=np.int32) for n in [3, 1, 5, 2]],
            "targets": [np.arange(n, dtype=np.int32) for n in [1, 2, 0, 3]],
        }
    )
    return jb.collate(
        ds, jb.plan(ds, jb.Pack(row_length={"inputs": 8, "targets": 8}, rows_per_batch=2))[0]
    )


def test_a_batch_of_several_packed_features_needs_column():
    batch = _two_feature_batch()
    q = jnp.ones((batch["targets"].shape[0], 8, 1, 4))
    for call in (
        lambda: jb.masked.packed_attention(q, q, q, batch),
        lambda: jb.masked.cu_seqlens(batch),
    ):
        with pytest.raises(ValueError, match=r"column=.*\['inputs', 'targets'\]"):
            call()
    ids = batch["targets_segment_ids"]
    want = reference_attention(q, q, q, ids, 0.5)
    got = jb.masked.packed_attention(q, q, q, batch, column="targets")
    np.testing.assert_allclose(got, want, atol=2e-5)
    lengths, starts = batch["targets_lengths"], batch["targets_segment_starts"]
    np.testing.assert_array_equal(
        jb.masked.cu_seqlens(batch, column="targets"), reference_cu_seqlens(lengths, starts, 8)
    )


def test_cu_seqlens_of_a_patch_pack_batch_takes_its_images():
    images = [np.zeros((h, w, 3), np.float32) for h, w in [(4, 4), (8, 4), (4, 8), (2, 2)]]
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    batch = jb.collate(
        ds, jb.plan(ds, jb.PatchPack(patch=(2, 2), row_length=32, rows_per_batch=2))[0]
    )
    patches = batch["image_patches"]
    cu = np.asarray(jb.masked.cu_seqlens(batch))
    np.testing.assert_array_equal(cu, reference_cu_seqlens(patches, reference_starts(patches), 32))
    flat = batch["image_segment_ids"].reshape(-1)
    slots = patches.shape[1]
    for r in range(patches.shape[0]):
        for s in range(slots):
            a, b = cu[r * (slots + 1) + s], cu[r * (slots + 1) + s + 1]
            assert (flat[a:b] == s + 1).all() and b - a == patches[r, s]
