"""jb.vmap, check_axes, memory planning, jb.map and autotune against jax itself."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb


def pairwise(x):
    return jnp.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)


def assert_trees_close(a, b, **kw):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), **kw)


# --- jb.vmap equals jax.vmap -------------------------------------------------------------


def f_tree(d, w, scale=1.0):
    return {"a": d["p"] * w + scale, "b": (d["q"] ** 2).sum(-1), "c": w.sum()}


@given(
    n=st.integers(1, 13),
    chunk=st.one_of(st.none(), st.integers(1, 16)),
    p_axis=st.sampled_from([0, 1, -1]),
    out_a=st.sampled_from([0, 1, -1]),
    jit=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float16]),
)
@settings(max_examples=30, deadline=None)
def test_vmap_equals_jax_vmap_over_pytrees_axes_and_chunks(n, chunk, p_axis, out_a, jit, dtype):
    rng = np.random.default_rng(n)
    p_shape = [4, 4]
    p_shape[p_axis] = n
    d = {
        "p": rng.standard_normal((n, 4) if p_axis == 0 else (4, n)).astype(dtype),
        "q": rng.standard_normal((n, 3)).astype(dtype),
    }
    w = rng.standard_normal(4).astype(dtype)
    in_axes = ({"p": p_axis, "q": 0}, None)
    out_axes = {"a": out_a, "b": 0, "c": None}
    ref = jax.vmap(f_tree, in_axes=in_axes, out_axes=out_axes)(d, w)
    ours = jb.vmap(f_tree, in_axes=in_axes, out_axes=out_axes, chunk_size=chunk)
    if jit:
        ours = jax.jit(ours)
    assert_trees_close(ours(d, w), ref, rtol=1e-3, atol=1e-3)


def test_chunked_vmap_with_mapped_and_unmapped_leaves_in_one_argument():
    x = jnp.arange(30.0).reshape(10, 3)
    for w in (jnp.arange(9.0).reshape(3, 3), jnp.arange(12.0).reshape(4, 3)[:3]):
        f = lambda p: p["x"] @ p["w"]  # noqa: E731
        ref = jax.vmap(f, in_axes=({"x": 0, "w": None},))({"x": x, "w": w})
        got = jb.vmap(f, in_axes=({"x": 0, "w": None},), chunk_size=3)({"x": x, "w": w})
        np.testing.assert_allclose(got, ref)
    w4 = jnp.ones((4, 3))  # leading size equal to the number of chunks: must not be scanned
    g = lambda p: p["x"].sum() + p["w"].sum()  # noqa: E731
    ref = jax.vmap(g, in_axes=({"x": 0, "w": None},))({"x": x, "w": w4})
    got = jb.vmap(g, in_axes=({"x": 0, "w": None},), chunk_size=3)({"x": x, "w": w4})
    np.testing.assert_allclose(got, ref)


def test_vmap_keyword_arguments_are_mapped_like_jax():
    x = jnp.arange(6.0).reshape(3, 2)
    s = jnp.arange(3.0)
    ref = jax.vmap(f_tree, in_axes=({"p": 0, "q": 0}, None))({"p": x, "q": x}, jnp.ones(2), scale=s)
    got = jb.vmap(f_tree, in_axes=({"p": 0, "q": 0}, None), chunk_size=2)(
        {"p": x, "q": x}, jnp.ones(2), scale=s
    )
    assert_trees_close(got, ref)


def test_chunked_vmap_does_not_retrace_for_a_remainder():
    traces = []

    def f(x):
        traces.append(x.shape)
        return x * 2

    g = jax.jit(jb.vmap(f, chunk_size=4))
    x = jnp.ones((10, 3))
    for _ in range(3):
        np.testing.assert_array_equal(g(x), x * 2)
    assert len(traces) == 1  # one chunk shape, traced once, for 10 = 4 + 4 + 2 rows


SCALE = 2.0


def scaled(x):
    return x * SCALE


def test_chunked_vmap_traces_afresh_like_jax_vmap():
    """Not jitted behind the user's back: a changed global is seen, as by jax.vmap."""
    global SCALE
    x = jnp.arange(10.0)
    g = jb.vmap(scaled, chunk_size=4)
    try:
        for SCALE in (2.0, 3.0):
            np.testing.assert_array_equal(g(x), jax.vmap(scaled)(x))
            np.testing.assert_array_equal(g(x), x * SCALE)
    finally:
        SCALE = 2.0


def gram_trace(x):
    d = pairwise(x)  # [k, k], materialised: a matmul consumes it
    return (d @ d).trace()


def test_chunked_vmap_bounds_compiled_memory():
    x = jax.ShapeDtypeStruct((256, 128, 3), jnp.float32)
    full = jax.jit(jax.vmap(gram_trace)).lower(x).compile()
    chunked = jax.jit(jb.vmap(gram_trace, chunk_size=16)).lower(x).compile()
    temp = lambda c: c.memory_analysis().temp_size_in_bytes  # noqa: E731
    per_example = 128 * 128 * 4
    assert temp(full) >= 256 * per_example  # every example's [k, k] at once
    # One chunk's, give or take the loop: its carry and scratch (1,056 bytes
    # on an H100, none on CPU) are not per example.
    assert temp(chunked) <= 2 * 16 * per_example + 16 * 1024


# --- check_axes --------------------------------------------------------------------------


def model(tokens, mask, *, scale=1.0):
    return tokens["ids"] * mask


def test_inconsistent_sizes_name_argument_path_and_sizes():
    with pytest.raises(jb.AxisError) as info:
        jb.check_axes(model, 0, {"ids": np.ones((32, 4))}, np.ones((31, 4)))
    assert str(info.value).startswith(
        "jb.vmap: inconsistent batch sizes: tokens['ids'] (arg 0) has 32 on axis 0 but "
        "mask (arg 1) has 31 on axis 0"
    )
    with pytest.raises(jb.AxisError, match="inconsistent batch sizes"):
        jb.vmap(model)({"ids": np.ones((32, 4))}, np.ones((31, 4)))


def test_keyword_argument_mismatch_is_explained():
    with pytest.raises(jb.AxisError) as info:
        jb.check_axes(model, (0, None), {"ids": np.ones((8, 2))}, np.ones(2), scale=np.ones(3))
    message = str(info.value)
    assert "scale (keyword) has 3 on axis 0" in message
    assert "keyword arguments are always mapped over axis 0" in message


def test_not_a_prefix_shows_both_structures():
    with pytest.raises(jb.AxisError) as info:
        jb.check_axes(model, ({"ids": 0, "pos": 0}, 0), {"ids": np.ones((8, 2))}, np.ones((8, 2)))
    message = str(info.value)
    assert "not a tree prefix of the arguments at tokens (arg 0)" in message
    assert "in_axes:   PyTreeDef({'ids': *, 'pos': *})" in message
    assert "argument:  PyTreeDef({'ids': *})" in message


def test_axis_out_of_range_names_the_rank_and_tuple_length_is_checked():
    with pytest.raises(
        jb.AxisError, match=r"axis 2 of mask \(arg 1\), which has shape \(8, 2\) \(rank 2\)"
    ):
        jb.check_axes(model, (0, 2), {"ids": np.ones((8, 2))}, np.ones((8, 2)))
    with pytest.raises(jb.AxisError, match="in_axes is a tuple of 3 but the function got 2"):
        jb.check_axes(model, (0, 0, 0), {"ids": np.ones((8, 2))}, np.ones((8, 2)))
    assert jb.check_axes(model, ({"ids": -1}, None), {"ids": np.ones((8, 5))}, np.ones(2)) == 5


@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
@settings(max_examples=30, deadline=None)
def test_check_axes_agrees_with_jax_vmap(sizes, data):
    args = [np.ones((s, 2)) for s in sizes]
    axes = tuple(data.draw(st.sampled_from([0, 1, None])) for _ in sizes)
    f = lambda *xs: sum(x.sum() for x in xs)  # noqa: E731
    try:
        expected = jax.vmap(f, in_axes=axes)(*args)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(jb.AxisError):
            jb.check_axes(f, axes, *args)
    else:
        n = jb.check_axes(f, axes, *args)
        assert n == expected.shape[0]


# --- memory planning ---------------------------------------------------------------------


def compiled_bytes_at(fun, example, batch):
    spec = jax.ShapeDtypeStruct((batch, *example.shape), example.dtype)
    from jaxbatch._src.execute.memory import compiled_bytes

    return compiled_bytes(jax.jit(jax.vmap(fun)).lower(spec).compile())


YNN_CHECK = """
import warnings, jax.numpy as jnp, jaxbatch as jb
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    jb.estimate_memory(lambda x: jnp.trace((x @ x.T) @ x), jnp.ones((96, 96)))
print(sum("YNNPACK" in str(w.message) for w in caught))
"""


@pytest.mark.parametrize(
    "flags, expected", [("", None), ("--xla_cpu_experimental_ynn_fusion_type=", "0")]
)
def test_memory_planning_warns_when_cpu_fusions_escape_the_analysis(flags, expected):
    """Where XLA's CPU backend uses YNNPACK fusions (uncounted by the memory
    analysis), planning warns once and names the flag; with them off, no
    warning. Whether this jaxlib fuses the matmul decides the first case."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    run = subprocess.run([sys.executable, "-c", YNN_CHECK], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    probe = "import jax, jax.numpy as jnp; x = jnp.ones((96, 96)); print('ynn_fusion' in "
    probe += "jax.jit(lambda x: jnp.trace((x @ x.T) @ x)).lower(x).compile().as_text())"
    fused = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert run.stdout.strip() == (expected or ("1" if "True" in fused.stdout else "0"))


def test_memory_estimate_predicts_unseen_sizes():
    example = jnp.zeros((96, 3), jnp.float32)
    est = jb.estimate_memory(pairwise, example, batch_sizes=(1, 2, 4, 8))
    for batch in (13, 50, 300):
        measured = compiled_bytes_at(pairwise, example, batch)
        assert abs(est.predict(batch) - measured) <= 0.1 * measured


def test_max_batch_size_fits_the_budget_and_is_the_largest():
    example = jnp.zeros((64, 3), jnp.float32)
    budget = 3_000_000
    b = jb.max_batch_size(pairwise, example, budget=budget)
    assert compiled_bytes_at(pairwise, example, b) <= budget
    assert compiled_bytes_at(pairwise, example, b + 1) > budget


def compile_runs_out_of_memory_above(monkeypatch, rows):
    """Compiling a program over more than `rows` examples raises XLA's
    RESOURCE_EXHAUSTED, as on a GPU, whose autotuner runs a program's fusions
    on buffers of their real size while it compiles (tests/test_gpu.py saw it
    plan a batch of 64 on an H100). The plan cache is off, so each size compiles."""
    real = jax.stages.Lowered.compile

    def compile(self, *args, **kwargs):
        shapes = [a.shape for a in jax.tree_util.tree_leaves(self.args_info)]
        if any(s and s[0] > rows for s in shapes):
            raise jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 19.81GiB with "
                "allocator GPU_0_bfc on device 0."
            )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile)
    monkeypatch.setenv("JAXBATCH_MEMORY_PLAN_CACHE", "0")


@pytest.mark.parametrize(("compiles", "least"), [(40, 36), (5, 4), (1, 1)])
def test_a_batch_whose_compilation_runs_out_of_memory_does_not_fit(monkeypatch, compiles, least):
    example = jnp.zeros((32, 3), jnp.float32)
    budget = 2_000_000  # hundreds of examples, by the analysis alone
    assert jb.max_batch_size(pairwise, example, budget=budget) > 64
    compile_runs_out_of_memory_above(monkeypatch, compiles)
    rows = jb.max_batch_size(pairwise, example, budget=budget)
    assert least <= rows <= compiles
    x = jnp.asarray(np.random.default_rng(0).standard_normal((100, 32, 3)), jnp.float32)
    out = jb.vmap(pairwise, chunk_size="auto", memory_budget=budget)(x)
    np.testing.assert_allclose(out, jax.vmap(pairwise)(x), rtol=1e-5, atol=1e-5)
    compile_runs_out_of_memory_above(monkeypatch, 0)
    with pytest.raises(ValueError, match="more device memory than is free to compile it"):
        jb.max_batch_size(pairwise, example, budget=budget)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a GPU reports its memory")
def test_auto_budget_on_cpu_asks_for_bytes():
    with pytest.raises(ValueError, match="pass budget in bytes"):
        jb.max_batch_size(pairwise, jnp.zeros((8, 3)), budget="auto")
    with pytest.raises(ValueError, match="one example needs"):
        jb.max_batch_size(pairwise, jnp.zeros((64, 3)), budget=100)


def test_vmap_auto_chunk_size_from_budget():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((40, 32, 3)), jnp.float32)
    out = jb.vmap(pairwise, chunk_size="auto", memory_budget=50_000)(x)
    np.testing.assert_allclose(out, jax.vmap(pairwise)(x), rtol=1e-5, atol=1e-5)


# --- jb.map ------------------------------------------------------------------------------


def ragged_dataset(n=60, seed=0):
    rng = np.random.default_rng(seed)
    tokens = [rng.standard_normal(int(k)).astype(np.float32) for k in rng.integers(1, 30, n)]
    return tokens, jb.Dataset.from_arrays({"tokens": tokens})


def masked_sum(ex):
    return {"sum": jnp.sum(jnp.where(ex["tokens_mask"], ex["tokens"], 0.0)), "x2": ex["tokens"] * 2}


def test_map_matches_a_per_example_reference():
    tokens, ds = ragged_dataset()
    result = jb.map(masked_sum, ds, batch_size=8)
    assert sorted(result.outputs) == list(range(len(tokens)))
    for i, t in enumerate(tokens):
        np.testing.assert_allclose(result.outputs[i]["sum"], t.sum(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result.outputs[i]["x2"], t * 2)
    assert result.stats.examples == len(tokens)
    assert result.stats.compilations <= result.stats.expected_shapes


def callback_oom_above(limit):
    """A function whose *runtime* raises XLA's RESOURCE_EXHAUSTED error for
    batches of more than `limit` rows (the callback sees the whole batch)."""

    def host(x):
        if x.shape[0] > limit:
            raise MemoryError(f"RESOURCE_EXHAUSTED: Out of memory for {x.shape[0]} rows")
        return np.asarray(x).sum(-1)

    def f(ex):
        values = jnp.where(ex["tokens_mask"], ex["tokens"], 0.0)
        return jax.pure_callback(
            host, jax.ShapeDtypeStruct((), jnp.float32), values, vmap_method="broadcast_all"
        )

    return f


def test_map_splits_on_real_oom_errors_without_losing_examples(caplog):
    tokens, ds = ragged_dataset(n=50)
    with caplog.at_level(logging.WARNING, logger="jaxbatch"):
        result = jb.map(callback_oom_above(5), ds, batch_size=16, backoff=0.5)
    assert sorted(result.outputs) == list(range(50))
    for i, t in enumerate(tokens):
        np.testing.assert_allclose(result.outputs[i], t.sum(), rtol=1e-5, atol=1e-5)
    assert result.stats.backoffs == [(16, 8), (8, 4)]
    assert result.stats.rows_limit == 4
    assert "out of memory at 16 rows; retrying with 8" in caplog.text


def test_a_small_batch_does_not_shrink_later_batches():
    _, ds = ragged_dataset(n=60)
    planner = jb.FixedBuckets([8, 32], token_budget=64)  # shapes (8, 8) and (2, 32)
    result = jb.map(masked_sum, jb.Loader(ds, planner, shuffle=True, seed=3))
    assert result.stats.rows_limit is None and result.stats.backoffs == []
    assert result.stats.compilations == 2 == result.stats.expected_shapes


def test_map_raises_a_summary_below_min_batch_size():
    _, ds = ragged_dataset(n=20)
    with pytest.raises(RuntimeError, match="already at min_batch_size=6"):
        jb.map(callback_oom_above(5), ds, batch_size=8, min_batch_size=6)
    with pytest.raises(jax.errors.JaxRuntimeError):
        jb.map(callback_oom_above(5), ds, batch_size=8, on_oom="raise")


def test_map_quarantines_non_finite_and_failed_checks():
    tokens, ds = ragged_dataset(n=40)
    tokens_bad = [t.copy() for t in tokens]
    tokens_bad[7][0] = np.nan
    ds_bad = jb.Dataset.from_arrays({"tokens": tokens_bad})
    result = jb.map(
        masked_sum,
        ds_bad,
        batch_size=8,
        check_finite=True,
        check=lambda ex, out: out["sum"] < 3.0,
        on_error="quarantine",
    )
    bad = {q["example"]: q["reason"] for q in result.quarantine}
    expected_check = {i for i, t in enumerate(tokens) if i != 7 and not t.sum() < 3.0}
    assert bad[7].startswith("an output is not finite")
    assert set(bad) == expected_check | {7}
    assert set(result.outputs) == set(range(40)) - set(bad)
    with pytest.raises(
        ValueError, match=r"jb.map: example 7 \(batch \d+, row \d+\): an output is not finite"
    ):
        jb.map(masked_sum, ds_bad, batch_size=8, check_finite=True)


def test_map_reports_the_loaders_quarantine_too():
    tokens, _ = ragged_dataset(n=20)
    tokens[3] = np.zeros(0, np.float32)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    schema = {"tokens": jb.ColumnSchema(min_length=1)}
    loader = jb.Loader(ds, jb.PadToMax(8), schema=schema, on_error="quarantine", shuffle=False)
    result = jb.map(masked_sum, loader)
    assert [q["example"] for q in result.quarantine] == [3]
    assert result.quarantine[0]["stage"] == "loader" and 3 not in result.outputs


def test_padding_positions_do_not_count_as_non_finite():
    _, ds = ragged_dataset(n=20)
    log_of_padding = lambda ex: jnp.log(jnp.where(ex["tokens_mask"], 1.0, 0.0))  # noqa: E731
    result = jb.map(log_of_padding, ds, batch_size=8, check_finite=True)
    assert result.quarantine == [] and len(result.outputs) == 20


def test_map_over_a_loader_warns_when_compilations_exceed_the_plan(monkeypatch):
    _, ds = ragged_dataset(n=30)
    loader = jb.Loader(ds, jb.AutoBuckets(2, batch_size=8), shuffle=False)
    result = jb.map(masked_sum, loader)
    assert result.stats.compilations <= 2 == result.stats.expected_shapes
    batches = [jb.collate(ds, spec) for spec in jb.plan(ds, jb.PadToMax(4))]
    plain = jb.map(masked_sum, batches)
    assert plain.stats.compilations > 2
    # A Loader that tells fewer shapes than it yields (as if its plan were wrong).
    original = jb.Loader.shapes.fget
    monkeypatch.setattr(jb.Loader, "shapes", property(lambda self: original(self)[:1]))
    with pytest.warns(UserWarning, match="compilations for a plan of 1 shape"):
        jb.map(masked_sum, jb.Loader(ds, jb.PadToMax(4), shuffle=False))


def test_a_loader_tells_its_steps_and_shapes_before_it_runs():
    """len(loader), loader.steps(epoch) and loader.shapes against what the
    loader then yields, for a shuffled packer over 3 epochs and 2 shards."""
    _, ds = ragged_dataset(n=200)
    for planner in (jb.Pack(64, 2, algorithm="first_fit"), jb.AutoBuckets(3, batch_size=8)):
        loader = jb.Loader(ds, planner, shuffle=True, epochs=3, shard=(1, 2))
        steps, shapes = [loader.steps(e) for e in range(3)], loader.shapes
        total = len(loader)
        seen_steps, seen_shapes = [0, 0, 0], []
        for batch in loader:
            seen_steps[batch.epoch] += 1
            if batch.shape not in seen_shapes:
                seen_shapes.append(batch.shape)
        assert steps == seen_steps and total == sum(seen_steps)
        assert shapes == seen_shapes
    with pytest.raises(TypeError, match="endless stream"):
        len(jb.Loader(ds, jb.PadToMax(4), epochs=None))


def test_map_progress_bar_counts_examples(capsys):
    _, ds = ragged_dataset(n=20)
    result = jb.map(masked_sum, ds, batch_size=8, progress=True)
    assert len(result.outputs) == 20
    err = capsys.readouterr().err
    assert "jb.map: 20ex" in err and "compiles=" in err


def test_map_argument_errors():
    _, ds = ragged_dataset(n=5)
    for kwargs, message in [
        ({"on_oom": "ignore"}, "on_oom must be"),
        ({"on_error": "skip"}, "on_error must be"),
        ({"backoff": 1.5}, "backoff must be between 0 and 1"),
        ({"min_batch_size": 0}, "min_batch_size must be an int >= 1"),
        ({"batch_size": 0}, "batch_size must be an int >= 1 or 'auto'"),
    ]:
        with pytest.raises(ValueError, match=message):
            jb.map(masked_sum, ds, **kwargs)


# --- autotune ----------------------------------------------------------------------------


def test_autotune_measures_every_strategy_and_picks_the_fastest_that_fits():
    x = jnp.asarray(np.random.default_rng(1).standard_normal((32, 24, 3)), jnp.float32)
    f = lambda x: pairwise(x).sum()  # noqa: E731
    tuned = jb.autotune(f, x, repeats=2)
    names = [r.name for r in tuned.results]
    assert names == ["vmap", "chunked_vmap", "lax_map", "loop"]
    fastest = min(tuned.results, key=lambda r: r.seconds_per_example)
    assert tuned.best == fastest.name
    np.testing.assert_allclose(tuned.fn(x), jax.vmap(f)(x), rtol=1e-4)
    assert "<- best" in tuned.report()
    assert jb.autotune(f, x, repeats=2) is tuned  # cached
    vmap_bytes = next(r.memory_bytes for r in tuned.results if r.name == "vmap")
    small = jb.autotune(f, x, repeats=2, memory_budget=vmap_bytes - 1)
    assert small.best != "vmap" and not next(r for r in small.results if r.name == "vmap").fits
    with pytest.raises(ValueError, match="unknown strategies"):
        jb.autotune(f, x, strategies=("pmap",))


def test_hoisted_passes_closed_over_arrays_as_arguments():
    """jb.map compiles the function with the arrays it closes over (weights)
    as arguments, not constants: same results as calling it directly."""
    from jaxbatch._src.execute.hoist import hoisted

    w = jnp.arange(12.0).reshape(3, 4)
    b = np.float32(0.5)

    def f(example):
        return {"y": jnp.tanh(example["x"] @ w + b), "n": example["x"].sum()}

    x = {"x": np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)}
    run, consts = hoisted(jax.vmap(f), x)
    assert any(c.shape == w.shape and np.array_equal(c, w) for c in consts)
    got = jax.jit(run)(consts, x)
    want = jax.vmap(f)(x)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)


def test_map_with_pack_takes_per_segment_outputs_and_refuses_per_row_ones():
    rng = np.random.default_rng(5)
    tokens = [rng.normal(size=n).astype(np.float32) for n in rng.integers(1, 7, 30)]
    ds = jb.Dataset.from_arrays({"t": tokens})
    pack = jb.Pack(row_length=8, rows_per_batch=3)
    segments = jb.plan(ds, pack).shapes[0].segments
    result = jb.map(
        lambda row: {
            "sum": jb.masked.segment_sum(row["t"], row["t_segment_ids"], segments),
            "double": 2 * row["t"],
        },
        ds,
        planner=pack,
    )
    assert sorted(result.outputs) == list(range(30))
    for e, x in enumerate(tokens):
        np.testing.assert_allclose(result.outputs[e]["sum"], x.sum(), rtol=1e-5)
        np.testing.assert_allclose(result.outputs[e]["double"], 2 * x)
    with pytest.raises(ValueError, match=r"output 'output' has shape \(\) per packed row"):
        jb.map(lambda row: row["t"].sum(), ds, planner=pack)


@pytest.mark.parametrize(
    "planner",
    [jb.AutoBuckets(4, batch_size=8), jb.Pack(row_length=32, rows_per_batch=3)],
    ids=["buckets", "pack"],
)
def test_compile_ahead_predicts_every_shape_the_batches_have(planner):
    """The shapes compiled in the background are exactly those the batches
    bring (none wasted, none compiled twice), and the outputs are unchanged."""
    from jaxbatch._src.execute.map import Executor

    tokens, ds = ragged_dataset(n=80, seed=2)
    ds = jb.Dataset.from_arrays({"tokens": tokens, "label": np.arange(80, dtype=np.int32)})

    plan = jb.plan(ds, planner)
    segments = plan.shapes[0].segments

    def fun(row):
        if segments:  # packed (padded rows carry segment ids too)
            return {
                "sum": jb.masked.segment_sum(row["tokens"], row["tokens_segment_ids"], segments)
            }
        return {"sum": jb.masked.sum(row["tokens"], row["tokens_mask"])}

    executor = Executor(fun, False, None, "tokens")
    executor.compile_ahead(plan.shapes, isinstance(planner, jb.Pack))
    seen = set()
    for spec in plan:
        batch = jb.collate(ds, spec)
        seen.add(tuple((k, v.shape) for k, v in sorted(batch.items())))
        out, _ = executor(dict(batch))
        for e, value in jb.unbatch(out, batch, per_token=False).items():
            np.testing.assert_allclose(value["sum"], tokens[e].sum(), rtol=1e-5, atol=1e-6)
    assert executor.pending == {}  # Every shape compiled ahead was used.
    assert executor.stats.compilations == len(executor.compiled) == len(seen) == len(plan.shapes)


def test_chunked_vmap_slices_chunks_in_place_without_copying_the_inputs():
    """A remainder overlaps the chunk before instead of padding the inputs,
    so the compiled program holds no copy of the batch (4 MB here)."""
    x = jax.ShapeDtypeStruct((4099, 256), jnp.float32)
    chunked = jax.jit(jb.vmap(lambda row: (row * row).sum(), chunk_size=64)).lower(x).compile()
    assert chunked.memory_analysis().temp_size_in_bytes < 4099 * 256 * 4 // 8
    values = np.random.default_rng(0).standard_normal((4099, 256)).astype(np.float32)
    np.testing.assert_allclose(chunked(values), (values * values).sum(1), rtol=1e-5)


@given(data=st.data(), n=st.integers(2, 3000))
def test_chunks_are_evened_out_without_adding_chunks(data, n):
    from jaxbatch._src.execute.vmap import _balanced

    size = data.draw(st.integers(1, n - 1))
    chunks = -(-n // size)
    # Reference: the smallest chunk that needs no more chunks than `size` does.
    want = next(c for c in range(1, size + 1) if -(-n // c) == chunks)
    even = _balanced(size, n)
    assert even == want
    assert chunks * even - n < chunks  # the overlap: under one row per chunk
