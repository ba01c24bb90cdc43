"""Packed attention over rows of 256 tokens at MiniLM's heads (12 of 32),
forward and forward+backward: jaxbatch's C++ kernel (the CPU default) and
its masked XLA form against the dense masked attention an expert writes in
jax.numpy (an additive mask bias, or jax.nn.dot_product_attention with a
boolean mask: both are timed and the faster is the baseline). Two layouts:
the demo corpus's packed rows (about 30% of each row's query-key pairs lie
within a text) and rows of one full segment (no work to skip).

The baselines import nothing from jaxbatch; every contender's outputs and
gradients are checked against the first baseline's on real tokens before a
time is taken. bench_pack_rows.py prints the table.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import harness
import numpy as np

HEADS, HEAD_SIZE = 12, 32


# --- The expert's dense masked attention (no jaxbatch) -------------------


def dense_bias(q, k, v, ids):
    """Scores plus an additive bias of -1e9 across segments, softmax, sum."""
    import jax
    import jax.numpy as jnp

    same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] != 0)
    bias = jnp.where(same, 0.0, -1e9)[:, None].astype(q.dtype)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1]) + bias
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def dense_dpa(q, k, v, ids):
    """jax.nn.dot_product_attention with the same-segment boolean mask."""
    import jax

    same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] != 0)
    return jax.nn.dot_product_attention(q, k, v, mask=same[:, None])


# --- Contenders -----------------------------------------------------------


def _contenders() -> dict[str, Callable]:
    import jaxbatch as jb

    def ours(implementation):
        return lambda q, k, v, ids: jb.masked.packed_attention(
            q, k, v, ids, implementation=implementation
        )

    return {
        "dense, additive bias": dense_bias,
        "dense, dot_product_attention": dense_dpa,
        "jaxbatch XLA form": ours("xla"),
        "jaxbatch kernel": ours("kernel"),
    }


def _compiled(fn, with_grad: bool):
    import jax
    import jax.numpy as jnp

    if not with_grad:
        return jax.jit(fn)

    def loss(q, k, v, ids, ct):
        return jnp.sum(fn(q, k, v, ids) * ct)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def _check(name, got, want, real, with_grad):
    leaves = [got] if not with_grad else list(got[1])
    wanted = [want] if not with_grad else list(want[1])
    for g, w in zip(leaves, wanted, strict=True):
        np.testing.assert_allclose(
            np.asarray(g)[real], np.asarray(w)[real], atol=2e-4, rtol=2e-3, err_msg=name
        )


def _timed(fn, args):
    import jax

    def run():
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        return {"ms": (time.perf_counter() - t0) * 1e3}

    return run


def layouts(example_lengths: np.ndarray, rows: int, length: int = 256) -> dict[str, np.ndarray]:
    """Segment ids [rows, length] of the corpus's packed rows and of one full
    segment a row."""
    import jaxbatch as jb

    ds = jb.Dataset.from_arrays({"t": [np.zeros(int(n), np.int8) for n in example_lengths]})
    packed = [
        row
        for spec in jb.plan(ds, jb.Pack(row_length=length, rows_per_batch=rows))
        for row in np.asarray(jb.collate(ds, spec)["t_segment_ids"])
    ]
    # Rows evenly over the plan (best fit fills the first rows with the
    # longest texts), so their real work is the whole corpus's.
    packed = [packed[i] for i in np.linspace(0, len(packed) - 1, rows).astype(int)]
    return {
        "corpus rows": np.stack(packed[:rows]).astype(np.int32),
        "one full segment": np.ones((rows, length), np.int32),
    }


def real_work(ids: np.ndarray) -> float:
    """The share of a row's query-key pairs within one segment."""
    same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] != 0)
    return float(same.sum() / (ids.shape[0] * ids.shape[1] ** 2))


def compare(layout_ids: dict[str, np.ndarray], reps: int) -> list[list[str]]:
    """Rows of the table: per layout and pass, each contender's median
    milliseconds (spread) and the kernel's and XLA form's speed over the
    faster dense baseline."""
    import jax

    table = [["layout", "pass", "contender", "ms (min-max)", "vs dense"]]
    rng = np.random.default_rng(0)
    for layout, ids in layout_ids.items():
        shape = (*ids.shape, HEADS, HEAD_SIZE)
        q, k, v, ct = (rng.normal(size=shape).astype(np.float32) for _ in range(4))
        real = ids != 0
        ct[~real] = 0  # a model's loss ignores padding outputs
        q, k, v, ct, ids_d = (jax.device_put(a) for a in (q, k, v, ct, ids))
        for with_grad in (False, True):
            args = (q, k, v, ids_d) + ((ct,) if with_grad else ())
            fns = {n: _compiled(f, with_grad) for n, f in _contenders().items()}
            want = None
            for name, fn in fns.items():
                got = jax.block_until_ready(fn(*args))  # compiles, and is checked
                want = got if want is None else want
                _check(name, got, want, real, with_grad)

            runs = harness.alternate({n: _timed(f, args) for n, f in fns.items()}, reps)
            ms = {n: [r["ms"] for r in rs] for n, rs in runs.items()}
            dense = min(
                float(np.median(ms["dense, additive bias"])),
                float(np.median(ms["dense, dot_product_attention"])),
            )
            for name, values in ms.items():
                ratio = dense / float(np.median(values))
                table.append(
                    [
                        f"{layout} ({real_work(ids):.0%} real)",
                        "fwd+bwd" if with_grad else "fwd",
                        name,
                        harness.spread(values, ".1f"),
                        f"{ratio:.2f}x",
                    ]
                )
    return table
