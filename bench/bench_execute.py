"""Execute benchmark: memory-heavy per-example work through jax.vmap,
lax.map(batch_size=), jb.vmap(chunk_size="auto") and a Python loop over a
jitted per-example function; autotune's pick against the best measured
strategy, and the memory estimate against XLA's analysis at unseen batch
sizes. Prints ratios and writes bench/results/bench_execute.json.

Memory is XLA's compiled memory analysis. (Peak resident memory sampled
during each run in a fresh subprocess was tried and left out: XLA's CPU
allocator keeps and reuses freed buffers, so the samples read from 0.01x to
7x the analysis for the same program.) Times are medians of alternating
repetitions with their spread.

    python bench/bench_execute.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxbatch as jb
from jaxbatch._memory import compiled_bytes

RESULTS = Path(__file__).parent / "results"


def pairwise_energy(points):
    """[k, 3] -> scalar through a [k, k] distance matrix that a matmul consumes."""
    d = jnp.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    return jnp.trace(d @ d) / points.shape[0]


def timed(fn, *args, repeats):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sizes(quick: bool) -> tuple[int, int, int, int]:
    """(examples, points per example, repeats, memory budget in bytes)."""
    n, k, repeats = (128, 96, 2) if quick else (512, 256, 5)
    budget = (n // 8) * k * k * 4 * 3  # room for about an eighth of the batch's intermediates
    return n, k, repeats, budget


def make_strategies(points, budget) -> tuple[dict, int]:
    chunk = jb.max_batch_size(pairwise_energy, points[0], budget=budget)
    one = jax.jit(pairwise_energy)
    return {
        "jax.vmap": jax.jit(jax.vmap(pairwise_energy)),
        f"lax.map(batch_size={chunk})": jax.jit(
            lambda x: jax.lax.map(pairwise_energy, x, batch_size=chunk)
        ),
        'jb.vmap(chunk_size="auto")': jax.jit(
            jb.vmap(pairwise_energy, chunk_size="auto", memory_budget=budget)
        ),
        "Python loop over jit(f)": lambda x: jnp.stack([one(p) for p in x]),
    }, chunk


def inputs(n: int, k: int):
    return jnp.asarray(np.random.default_rng(0).standard_normal((n, k, 3)), jnp.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    n, k, repeats, budget = sizes(args.quick)
    points = inputs(n, k)
    spec = jax.ShapeDtypeStruct(points.shape, points.dtype)
    print(f"jaxbatch execute benchmark: {n} examples of [{k}, 3], {jax.devices()[0].platform}")
    print(f"memory budget for chunking: {budget / 1e6:.1f} MB\n")

    strategies, chunk = make_strategies(points, budget)
    rows = []
    reference = np.asarray(strategies["jax.vmap"](points))
    for name, fn in strategies.items():
        memory = compiled_bytes(fn.lower(spec).compile()) if hasattr(fn, "lower") else None
        np.testing.assert_allclose(np.asarray(fn(points)), reference, rtol=1e-4)
        rows.append({"strategy": name, "peak_bytes": memory, "seconds": []})
    for _ in range(repeats):  # Alternating, so load changes hit every strategy alike.
        for r, fn in zip(rows, strategies.values(), strict=True):
            r["seconds"].append(timed(fn, points, repeats=1))
    for r in rows:
        r["spread"] = [min(r["seconds"]), max(r["seconds"])]
        r["seconds"] = statistics.median(r["seconds"])
    base = rows[0]
    print(f"{'strategy':32} {'XLA MB':>8} {'x vmap':>7} {'ms (min-max)':>22} {'x vmap':>7}")
    for r in rows:
        mb = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 1e6:.2f}"
        ratio = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / base['peak_bytes']:.2f}"
        lo, hi = r["spread"]
        print(
            f"{r['strategy']:32} {mb:>8} {ratio:>7} {r['seconds'] * 1e3:9.2f} "
            f"({lo * 1e3:.1f}-{hi * 1e3:.1f}) {r['seconds'] / base['seconds']:7.2f}"
        )
    print(f"   jb.vmap chose chunks of {chunk} examples for the budget\n")

    tuned = jb.autotune(pairwise_energy, points, repeats=repeats)
    print(tuned.report())
    # Re-measure every strategy the same way, independently of autotune.
    measured = {}
    for r in tuned.results:
        fn = tuned.fn if r.name == tuned.best else None
        if fn is None:
            sub = jb.autotune(pairwise_energy, points, strategies=(r.name,), repeats=repeats)
            fn = sub.fn
        measured[r.name] = timed(fn, points, repeats=repeats) / n
    best_measured = min(measured, key=measured.get)
    pick_ratio = measured[tuned.best] / measured[best_measured]
    print(
        f"   autotune picked {tuned.best}; best re-measured: {best_measured}; "
        f"pick / best = {pick_ratio:.3f} (target <= 1.10)\n"
    )

    est = jb.estimate_memory(pairwise_energy, points[0], batch_sizes=(1, 2, 4, 8))
    print(f"{'batch':>6} {'estimated MB':>13} {'measured MB':>12} {'error':>7}")
    errors = []
    for b in (3, 24, 100, 333):
        batch_spec = jax.ShapeDtypeStruct((b, k, 3), jnp.float32)
        real = compiled_bytes(jax.jit(jax.vmap(pairwise_energy)).lower(batch_spec).compile())
        err = abs(est.predict(b) - real) / real
        errors.append({"batch": b, "estimated": est.predict(b), "measured": real, "error": err})
        print(f"{b:6d} {est.predict(b) / 1e6:13.2f} {real / 1e6:12.2f} {err:7.1%}")
    print("   target: within 10% at sizes not used for the fit (fit on 1, 2, 4, 8)")

    RESULTS.mkdir(exist_ok=True)
    out = {
        "examples": n,
        "points": k,
        "budget_bytes": budget,
        "strategies": rows,
        "autotune": {
            "pick": tuned.best,
            "best_measured": best_measured,
            "pick_over_best": pick_ratio,
            "per_example_seconds": measured,
        },
        "memory_estimate": errors,
    }
    (RESULTS / "bench_execute.json").write_text(json.dumps(out, indent=2))
    print(f"\nwrote {RESULTS / 'bench_execute.json'}")


if __name__ == "__main__":
    main()
