"""What jaxbatch claims about a GPU, checked on one: a real device OOM split
and retried by jb.map and jb.run without losing an example, batch sizes
planned from XLA's memory analysis against the allocator's measured peak,
device prefetch, and cuDNN's fused packed attention against XLA's masked
form. Each test compares with a reference computed apart. Skipped without a
GPU; bench/gpu_check.sh runs it on one (and prints the lines starting with
"GPU-CHECK", the numbers docs/memory.md quotes)."""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbatch as jb

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason=f"needs a GPU (JAX's default backend here is {jax.default_backend()!r}); "
    "bench/gpu_check.sh runs these on one",
)


def report(name: str, **numbers) -> None:
    """One line of measurements for the log (run pytest with -s to see it)."""
    print(f"GPU-CHECK {name} {json.dumps(numbers, default=str)}", flush=True)


def device_limit() -> int:
    """What the allocator may hold on the first device, in bytes."""
    return int(jax.devices()[0].memory_stats()["bytes_limit"])


# --- a function that holds a given number of bytes per example -------------
#
# Each example materialises an int32 vector of `m` elements (the barrier keeps
# XLA from fusing it into the sum), so a batch of `rows` needs rows * 4m bytes
# of temporaries. Integer sums wrap the same in any order, so the result is
# exact and has a closed form to check against.


def hog(m: int):
    def per_example(example):
        s = jnp.sum(jnp.where(example["tokens_mask"], example["tokens"], 0))
        big = jax.lax.optimization_barrier(jnp.arange(m, dtype=jnp.int32) * 7 + s)
        return {"total": jnp.sum(big), "s": s}

    return per_example


def expected_total(m: int, s: int) -> int:
    """sum(7k + s for k < m) as int32 arithmetic (wrapping) computes it."""
    v = (7 * m * (m - 1) // 2 + m * int(s)) % 2**32
    return v - 2**32 if v >= 2**31 else v


def oom_case():
    """(m, rows): a batch of `rows` needs more than twice the device's
    memory, half of it still more than all of it."""
    limit = device_limit()
    per_example = min(limit // 12, 4 << 30)  # int32 elements stay below 2**31
    rows = 1
    while rows * per_example <= 2 * limit:
        rows *= 2
    return per_example // 4, rows


def int_tokens(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 100, int(k)).astype(np.int32) for k in rng.integers(1, 17, n)]


def check_outputs(outputs: dict, tokens: list[np.ndarray], m: int) -> None:
    assert sorted(outputs) == list(range(len(tokens))), "an example is missing or extra"
    for i, t in enumerate(tokens):
        s = int(t.sum())
        assert int(outputs[i]["s"]) == s, f"example {i}"
        assert int(outputs[i]["total"]) == expected_total(m, s), f"example {i}"


# --- a real out-of-memory error ------------------------------------------------


@pytest.mark.timeout(240)
def test_a_real_oom_is_split_and_retried_by_jb_map_without_losing_an_example(caplog):
    m, rows = oom_case()
    limit = device_limit()
    tokens = int_tokens(2 * rows)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="jaxbatch"):
        result = jb.map(hog(m), jb.Loader(ds, jb.PadToMax(rows), shuffle=False), backoff=0.5)
    seconds = time.perf_counter() - start
    check_outputs(result.outputs, tokens, m)
    stats = result.stats
    assert stats.examples == len(tokens) and stats.batches == 2
    # The first batch really ran out of memory, and the back-off went on until it fit.
    assert stats.backoffs[0] == (rows, rows // 2)
    assert f"out of memory at {rows} rows; retrying with {rows // 2}" in caplog.text
    assert stats.rows_limit * 4 * m <= limit < rows * 4 * m
    assert result.quarantine == []
    report(
        "oom_map",
        device=jax.devices()[0].device_kind,
        bytes_limit=limit,
        bytes_per_example=4 * m,
        rows=rows,
        backoffs=stats.backoffs,
        rows_limit=stats.rows_limit,
        examples=stats.examples,
        seconds=round(seconds, 2),
    )


@pytest.mark.timeout(240)
def test_a_real_oom_in_jb_run_loses_nothing(tmp_path, caplog):
    m, rows = oom_case()
    tokens = int_tokens(rows, seed=1)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    with caplog.at_level(logging.WARNING, logger="jaxbatch"):
        job = jb.run(hog(m), ds, tmp_path / "job", planner=jb.PadToMax(rows), progress=False)
    assert job.complete and job.examples == len(tokens) and job.quarantined == 0
    assert f"out of memory at {rows} rows" in caplog.text
    out = jb.read_output(tmp_path / "job")
    assert list(out["example_index"]) == list(range(len(tokens)))
    got = {
        int(e): {"s": s, "total": t}
        for e, s, t in zip(out["example_index"], out["s"], out["total"], strict=True)
    }
    check_outputs(got, tokens, m)
    backoffs = caplog.text.count("out of memory at")
    report("oom_run", rows=rows, backoffs_logged=backoffs, peak_device_bytes=job.peak_device_bytes)


# --- memory planning against the measured peak ---------------------------------
#
# peak_bytes_in_use only grows in a process, so each measurement runs in a
# fresh one, without XLA's autotuner: it runs a program's fusions on buffers
# of their real size while compiling (on an H100, compiling a 64-example
# sample of 21 GB ran out of a 64 GB limit), which the peak would count as
# the run's.

_PLANNED = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
import jaxbatch as jb

mode = sys.argv[1]
device = jax.devices()[0]
stats = device.memory_stats
limit = stats()["bytes_limit"]
budget = limit // 8
m = budget // 4 // 24  # an example holds about 1/24 of the budget

def per_example(x):
    s = jnp.sum(x)
    big = jax.lax.optimization_barrier(jnp.arange(m, dtype=jnp.int32) * 7 + s)
    return jnp.sum(big)

example = jnp.zeros(16, jnp.int32)
rows = jb.max_batch_size(per_example, example, budget=budget)
predicted = jb.estimate_memory(per_example, example).predict(rows)
x = np.random.default_rng(0).integers(0, 100, (4 * rows, 16)).astype(np.int32)
out = {"mode": mode, "device": device.device_kind, "bytes_limit": limit, "budget": budget,
       "bytes_per_example": 4 * m, "rows": rows, "predicted": predicted}
if mode == "vmap":
    on_device = jax.device_put(x)
    run = jax.jit(jb.vmap(per_example, chunk_size="auto", memory_budget=budget))
    compiled = run.lower(on_device).compile()
    base = stats()["bytes_in_use"]
    got = np.asarray(compiled(on_device))
    out["auto_rows"] = jb.max_batch_size(per_example, example, budget="auto")
else:
    ds = jb.Dataset.from_arrays({"tokens": list(x)})
    base = stats()["bytes_in_use"]
    result = jb.map(lambda e: per_example(jnp.where(e["tokens_mask"], e["tokens"], 0)), ds,
                    batch_size="auto", memory_budget=budget)
    got = np.array([result.outputs[i] for i in range(len(x))])
    out["backoffs"] = result.stats.backoffs
    out["batches"] = result.stats.batches
out["base"] = base
out["peak"] = stats()["peak_bytes_in_use"]
out["totals"] = got.tolist()
out["sums"] = x.sum(1).tolist()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["vmap", "map"])
def test_the_planned_batch_runs_within_the_budget_it_was_planned_for(mode, tmp_path):
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0"
    env["JAXBATCH_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _PLANNED, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT ") :])
    m = out["bytes_per_example"] // 4
    assert out["totals"] == [expected_total(m, s) for s in out["sums"]]
    used = out["peak"] - out["base"]  # the run's own peak, above what was resident
    assert out["rows"] >= 8  # planning left room for a real batch
    assert used <= out["budget"], f"the run peaked at {used} bytes over a {out['budget']} budget"
    # One planned chunk is what fills the budget: the plan did not leave it mostly empty.
    assert used >= out["rows"] * out["bytes_per_example"] * 0.9
    if mode == "vmap":
        assert out["auto_rows"] > out["rows"]  # the free memory is more than an eighth
    else:
        assert out["backoffs"] == []
    report(
        f"planned_{mode}",
        device=out["device"],
        budget=out["budget"],
        rows=out["rows"],
        predicted=out["predicted"],
        peak_over_base=used,
        peak_over_predicted=round(used / out["predicted"], 4),
        peak_over_budget=round(used / out["budget"], 4),
        auto_rows=out.get("auto_rows"),
    )


@pytest.mark.timeout(120)
def test_planning_past_what_can_be_compiled_still_plans():
    """With the autotuner on, compiling the planner's sample of 64 examples
    (each 1/24 of the budget) ran out of memory on an H100; such a size now
    counts as not fitting, and the plan is the batch that fits the budget."""
    budget = device_limit() // 8
    m = budget // 4 // 24

    def per_example(x):
        big = jax.lax.optimization_barrier(jnp.arange(m, dtype=jnp.int32) * 7 + jnp.sum(x))
        return jnp.sum(big)

    rows = jb.max_batch_size(per_example, jnp.zeros(16, jnp.int32), budget=budget)
    assert 8 <= rows <= 24
    x = np.random.default_rng(6).integers(0, 100, (rows, 16)).astype(np.int32)
    got = np.asarray(jax.jit(jax.vmap(per_example))(x))
    assert got.tolist() == [expected_total(m, s) for s in x.sum(1)]
    report("planned_with_autotuner", budget=budget, bytes_per_example=4 * m, rows=rows)


# --- device prefetch -------------------------------------------------------------


def test_device_prefetch_puts_the_loaders_batches_on_the_gpu_in_order():
    tokens = int_tokens(200, seed=2)
    ds = jb.Dataset.from_arrays({"tokens": tokens})
    planner = jb.AutoBuckets(4, batch_size=16)
    host = [dict(b) for b in jb.Loader(ds, planner, seed=3, shuffle=True)]
    gpu = jax.devices()[0]
    got = list(jb.device_prefetch(jb.Loader(ds, planner, seed=3, shuffle=True), size=3))
    assert len(got) == len(host)
    for step, (h, d) in enumerate(zip(host, got, strict=True)):
        assert set(d) == set(h), f"step {step}"
        for k, v in d.items():
            assert isinstance(v, jax.Array) and v.devices() == {gpu}, f"step {step} {k}"
            np.testing.assert_array_equal(np.asarray(v), h[k], err_msg=f"step {step} {k}")
    seen = np.concatenate([h["example_index"][h["example_index"] >= 0] for h in host])
    assert sorted(seen.tolist()) == list(range(len(tokens)))
    report("prefetch", batches=len(got), platform=gpu.platform, device=gpu.device_kind)


@pytest.mark.timeout(60)
def test_closing_the_loader_ends_a_prefetch_loop_on_the_gpu():
    """close() from another thread wakes the loop that reads through the
    prefetcher: it raises (the stream was cut) rather than hanging."""
    ds = jb.Dataset.from_arrays({"tokens": int_tokens(64, seed=4)})
    loader = jb.Loader(ds, jb.PadToMax(8), epochs=None)
    batches = jb.device_prefetch(loader, size=2)
    first = next(batches)
    assert first["tokens"].devices() == {jax.devices()[0]}
    closer = threading.Timer(0.2, loader.close)
    closer.start()
    steps = 0
    with pytest.raises(RuntimeError, match="closed"):
        for _ in range(10**7):  # an endless stream: only close() ends it
            next(batches)
            steps += 1
    closer.join()
    report("prefetch_close", steps_before_close=steps)


# --- cuDNN packed attention ------------------------------------------------------


def packed_batch(row_length: int, rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, row_length // 2, 6 * rows)
    ds = jb.Dataset.from_arrays({"tokens": [np.zeros(int(k), np.int32) for k in lengths]})
    for spec in jb.plan(ds, jb.Pack(row_length=row_length, rows_per_batch=rows)):
        batch = jb.collate(ds, spec)
        if batch["tokens_lengths"].shape[0] == rows:
            return batch
    raise AssertionError("no full batch")


def qkv(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(shape), dtype) for _ in range(3))


def segments_of(batch) -> dict[str, jax.Array]:
    keys = ("tokens_segment_ids", "tokens_lengths", "tokens_segment_starts")
    return {k: jnp.asarray(batch[k]) for k in keys}


@functools.partial(jax.jit, static_argnames=("implementation", "causal"))
def attend(q, k, v, segments, implementation, causal):
    return jb.masked.packed_attention(
        q, k, v, segments, column="tokens", is_causal=causal, implementation=implementation
    )


def cudnn_can_run() -> bool:
    """Hopper or later: what cudnn_supported asks of the card."""
    capability = getattr(jax.devices()[0], "compute_capability", "0.0")
    return tuple(int(p) for p in str(capability).split(".")) >= (9, 0)


def test_cudnn_supported_says_where_the_kernel_runs():
    q = jnp.zeros((2, 128, 4, 64), jnp.bfloat16)
    assert jb.masked.cudnn_supported(q) == cudnn_can_run()
    assert jb.masked.cudnn_supported(q.astype(jnp.float16)) == cudnn_can_run()
    assert not jb.masked.cudnn_supported(q.astype(jnp.float32))
    assert not jb.masked.cudnn_supported(jnp.zeros((2, 128, 4, 12), jnp.bfloat16))
    assert not jb.masked.cudnn_supported(jnp.zeros((2, 128, 4, 264), jnp.bfloat16))
    assert not jb.masked.cudnn_supported(q[0])  # one row (under vmap)


needs_cudnn = pytest.mark.skipif(
    not (jax.default_backend() == "gpu" and cudnn_can_run()),
    reason="cuDNN's packed attention needs a Hopper or later GPU",
)


@needs_cudnn
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("row_length", [128, 96])
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_packed_attention_equals_the_xla_masked_form(causal, row_length, dtype):
    batch = packed_batch(row_length, rows=4, seed=row_length)
    segments = segments_of(batch)
    q, k, v = qkv((4, row_length, 4, 64), dtype, seed=1)
    assert jb.masked.cudnn_supported(q)
    got = attend(q, k, v, segments, "cudnn", causal)
    assert got.dtype == q.dtype and got.shape == q.shape
    # The reference: XLA's masked form over the same 16-bit values in float32.
    f32 = [a.astype(jnp.float32) for a in (q, k, v)]
    want = np.asarray(attend(*f32, segments, "xla", causal))
    same_dtype = np.asarray(attend(q, k, v, segments, "xla", causal), np.float32)
    got = np.asarray(got, np.float32)
    error = float(np.abs(got - want).max())
    xla_error = float(np.abs(same_dtype - want).max())
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)
    # Padding cells give zeros (docs/padding-and-masking.md), exactly.
    padding = np.asarray(batch["tokens_segment_ids"]) == 0
    assert padding.any() and (got[padding] == 0).all()
    # The default picks cuDNN here (the same kernel, outside jit).
    chosen = jb.masked.packed_attention(q, k, v, segments, column="tokens", is_causal=causal)
    np.testing.assert_allclose(np.asarray(chosen, np.float32), got, atol=1e-3)
    report(
        "cudnn_attention",
        dtype=dtype,
        causal=causal,
        row_length=row_length,
        max_abs_error_cudnn=error,
        max_abs_error_xla_same_dtype=xla_error,
        segments=int(np.asarray(batch["tokens_lengths"] > 0).sum()),
    )


@needs_cudnn
def test_cudnn_takes_segment_ids_alone_padded_rows_and_an_empty_row():
    length, heads, d = 64, 2, 32
    ids = np.zeros((3, length), np.int32)
    ids[0, :10], ids[0, 10:40], ids[0, 40:] = 1, 2, 3  # a full row
    ids[1, :5] = 1  # one short segment, the rest padding; row 2 empty
    q, k, v = qkv((3, length, heads, d), "bfloat16", seed=2)
    f32 = [a.astype(jnp.float32) for a in (q, k, v)]
    for causal in (False, True):
        want = np.asarray(
            jb.masked.packed_attention(*f32, ids, is_causal=causal, implementation="xla")
        )
        got = jb.masked.packed_attention(q, k, v, ids, is_causal=causal, implementation="cudnn")
        got = np.asarray(got, np.float32)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)
        assert (got[ids == 0] == 0).all()
    # A padded (not packed) batch: one segment a row, the plain-lengths path.
    ds = jb.Dataset.from_arrays({"tokens": [np.zeros(n, np.int32) for n in (64, 20, 1)]})
    batch = jb.collate(ds, jb.plan(ds, jb.PadToMax(batch_size=3))[0])
    got = jb.masked.packed_attention(q, k, v, batch, implementation="cudnn")
    want = jb.masked.packed_attention(*f32, batch, implementation="xla")
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=2e-2, rtol=2e-2)


@needs_cudnn
def test_cudnn_packed_attention_gradient_equals_xlas():
    batch = packed_batch(128, rows=2, seed=7)
    segments = segments_of(batch)
    q, k, v = qkv((2, 128, 2, 64), "bfloat16", seed=3)

    def loss(q, k, v, implementation):
        out = attend(q, k, v, segments, implementation, True)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    got = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, "cudnn")
    f32 = [a.astype(jnp.float32) for a in (q, k, v)]
    want = jax.grad(loss, argnums=(0, 1, 2))(*f32, "xla")
    errors = []
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w)
        scale = np.abs(w).max()
        errors.append(float(np.abs(g - w).max() / scale))
        np.testing.assert_allclose(g, w, atol=0.05 * scale)
    report("cudnn_gradient", max_error_over_largest=errors)


# --- bfloat16 through jb.map ---------------------------------------------------------


def test_a_bfloat16_column_runs_through_jb_map_on_the_gpu():
    import ml_dtypes

    rng = np.random.default_rng(5)
    values = [
        rng.standard_normal(int(n)).astype(ml_dtypes.bfloat16) for n in rng.integers(1, 40, 90)
    ]
    ds = jb.Dataset.from_arrays({"x": values})

    def per_example(e):
        return {
            "mean": jb.masked.mean(e["x"], e["x_mask"]),
            "max": jb.masked.max(e["x"], e["x_mask"]),
            "soft": jb.masked.softmax(e["x"], e["x_mask"]),
        }

    result = jb.map(per_example, ds, batch_size=16)
    assert sorted(result.outputs) == list(range(len(values)))
    for i, x in enumerate(values):
        x64 = x.astype(np.float64)
        out = result.outputs[i]
        np.testing.assert_allclose(np.float64(out["mean"]), x64.mean(), atol=2e-2, rtol=1e-2)
        assert np.float64(out["max"]) == x64.max()
        soft = np.exp(x64 - x64.max()) / np.exp(x64 - x64.max()).sum()
        np.testing.assert_allclose(np.asarray(out["soft"], np.float64), soft, atol=1e-2)
