"""Execute benchmark: memory-heavy per-example work four ways, timed and with
peak memory measured, not only estimated.

Strategies, all giving the same [n] outputs (checked against jax.vmap's):
  jax.vmap                       the whole batch at once;
  lax.map(batch_size=c)          stock JAX chunking, c chosen as an expert would without
                                 jaxbatch: XLA's compiled memory analysis (JAX's AOT API) of
                                 the vmapped function at 1 and 2 examples, as many examples
                                 as the budget holds (lax_map_chunk);
  jb.vmap(chunk_size="auto")     jaxbatch's chunking at the same memory budget;
  Python loop over jit(f)        one example per call.

Times: each configuration runs in its own process; the strategies run in
alternating repetitions (bench/harness.py) and each figure is the median
with its min-max. Memory: each strategy runs in a fresh process of its own
that creates its inputs, compiles, runs once, then resets the kernel's peak
resident set (``/proc/self/clear_refs``, "5") and runs again: the figure is
VmHWM minus VmRSS just before that run (what the run allocated, its output
included, the inputs not), beside XLA's compiled memory analysis
(temporaries + outputs). A no-op program run the same way gives the floor.

On CPU, XLA hands some fusions to YNNPACK (``ynn_fusion`` in the optimised
HLO), whose internal intermediates the compiled memory analysis does not
count: with the default flags the measured peak is several times the
analysis, and a budget planned from the analysis does not hold. So every
measurement is made twice: with the default flags, and with
``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` (YNNPACK fusions off),
where the analysis accounts for what runs but for the matmul's own scratch
space: a control, the same chunked function without its matmul, measures
what the analysis says to 0.1 MB, while with the matmul the measurement is
3-11 MB above it (the gap by which jb.vmap misses its budget).

    python bench/bench_execute.py [--quick] [--reps N] [--force]

Writes bench/results/bench_execute.json. Then, in the default process:
autotune's pick against the best measured strategy, and the memory estimate
against XLA's analysis at unseen batch sizes.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

CONFIGS = {
    "default": "",
    "ynn off": "--xla_cpu_experimental_ynn_fusion_type=",
}
STRATEGIES = ("jax.vmap", "lax.map", "jb.vmap", "python loop")
# Outputs of the chunked and looped strategies against jax.vmap's: float32
# sums of k*k terms, summed in another order when the batch is split.
RTOL = 1e-5


def pairwise_energy(points):
    """[k, 3] -> scalar through a [k, k] distance matrix that a matmul consumes."""
    import jax.numpy as jnp

    d = jnp.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    return jnp.trace(d @ d) / points.shape[0]


def distance_sum(points):
    """pairwise_energy without its matmul: the control for the memory measurement."""
    import jax.numpy as jnp

    return jnp.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1).sum()


def sizes(quick: bool) -> tuple[int, int, int]:
    """(examples, points per example, memory budget in bytes)."""
    n, k = (128, 96) if quick else (512, 256)
    budget = (n // 8) * k * k * 4 * 3  # room for about an eighth of the batch's intermediates
    return n, k, budget


# --------------------------------------------------------------------------- workers


def lax_map_chunk(points, budget: int) -> int:
    """lax.map's batch_size as one picks it by hand, without jaxbatch: the
    compiled memory analysis of jax.vmap(pairwise_energy) at one and two
    examples (temporaries and outputs) gives a fixed part and a part per
    example; as many examples as the budget then holds (at least 1)."""
    import jax

    def program_bytes(count: int) -> int:
        stats = jax.jit(jax.vmap(pairwise_energy)).lower(points[:count]).compile()
        stats = stats.memory_analysis()
        return stats.temp_size_in_bytes + stats.output_size_in_bytes

    one, two = program_bytes(1), program_bytes(2)
    per_example = max(1, two - one)
    return int(max(1, min(len(points), (budget - (one - per_example)) // per_example)))


def _strategies(n: int, k: int, budget: int):
    """(inputs, {name: callable}, jaxbatch's chunk, {name: jitted or None},
    one example's jitted function, lax.map's chunk) in this process."""
    import jax
    import jax.numpy as jnp

    import jaxbatch as jb

    points = jnp.asarray(np.random.default_rng(0).standard_normal((n, k, 3)), jnp.float32)
    chunk = jb.max_batch_size(pairwise_energy, points[0], budget=budget)
    lax_chunk = lax_map_chunk(points, budget)  # the baseline's own choice
    one = jax.jit(pairwise_energy)
    jitted = {
        "jax.vmap": jax.jit(jax.vmap(pairwise_energy)),
        "lax.map": jax.jit(lambda x: jax.lax.map(pairwise_energy, x, batch_size=lax_chunk)),
        "jb.vmap": jax.jit(jb.vmap(pairwise_energy, chunk_size="auto", memory_budget=budget)),
    }
    fns = dict(jitted)
    fns["python loop"] = lambda x: jnp.stack([one(p) for p in x])
    jitted["python loop"] = None
    return points, fns, chunk, jitted, one, lax_chunk


def worker_time(n: int, k: int, budget: int, reps: int) -> dict:
    import jax

    points, fns, chunk, _, _, lax_chunk = _strategies(n, k, budget)
    reference = np.asarray(fns["jax.vmap"](points))
    for name, fn in fns.items():  # Compiles each, and checks its outputs.
        np.testing.assert_allclose(np.asarray(fn(points)), reference, rtol=RTOL, err_msg=name)

    def timer(fn):
        def run():
            start, cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(points))
            return {
                "seconds": time.perf_counter() - start,
                "cpu_seconds": time.process_time() - cpu,
            }

        return run

    runs = harness.alternate({name: timer(fn) for name, fn in fns.items()}, reps)
    return {
        "chunk": chunk,
        "lax_map_chunk": lax_chunk,
        "seconds": {name: [r["seconds"] for r in rs] for name, rs in runs.items()},
        "cpu_seconds": {name: [r["cpu_seconds"] for r in rs] for name, rs in runs.items()},
    }


def _rss() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Resets VmHWM to the current VmRSS (Linux >= 4.0).


def worker_memory(n: int, k: int, budget: int, strategy: str) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxbatch as jb
    from jaxbatch._src.execute.memory import compiled_bytes

    points, fns, chunk, jitted, one, _ = _strategies(n, k, budget)
    if strategy == "no-op":
        compiled = jax.jit(lambda x: x[:, 0, 0] + 1).lower(points).compile()
        fn = compiled
    elif strategy == "jb.vmap without matmul":
        f = jb.vmap(distance_sum, chunk_size=chunk)
        compiled = jax.jit(f).lower(points).compile()
        fn = compiled
    elif jitted[strategy] is not None:
        compiled = jitted[strategy].lower(points).compile()
        fn = compiled
    else:  # The loop's program is one example's; its outputs add n scalars.
        compiled = one.lower(points[0]).compile()
        fn = lambda x: jnp.stack([compiled(p) for p in x])  # noqa: E731
    stats = compiled.memory_analysis()
    analysis = {
        "compiled_bytes": compiled_bytes(compiled),
        "temp_bytes": stats.temp_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "argument_bytes": stats.argument_size_in_bytes,
    }
    jax.block_until_ready(fn(points))  # First run: one-time allocations (thread pools).
    gc.collect()
    _reset_peak()
    before = _rss()
    out = fn(points)
    jax.block_until_ready(out)
    after = _rss()
    hlo = compiled.as_text()
    return {
        "strategy": strategy,
        "chunk": chunk,
        "analysis": analysis,
        "ynn_fusions": hlo.count("ynn_fusion") > 0,
        "rss_before": before["VmRSS"],
        "peak_above_before": after["VmHWM"] - before["VmRSS"],
    }


def run_worker(config: str, args: list[str]) -> dict:
    """Runs this file as a worker in a fresh process with `config`'s XLA flags."""
    env = dict(os.environ, XLA_FLAGS=CONFIGS[config], JAX_PLATFORMS="cpu")
    cmd = [sys.executable, __file__, "--worker", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} ({config}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- main


def measure(n: int, k: int, budget: int, reps: int) -> dict:
    common = ["--n", str(n), "--k", str(k), "--budget", str(budget)]
    out = {}
    for config in CONFIGS:
        timing = run_worker(config, ["time", *common, "--reps", str(reps)])
        memory = {
            s: run_worker(config, ["memory", *common, "--strategy", s])
            for s in ("no-op", "jb.vmap without matmul", *STRATEGIES)
        }
        out[config] = {**timing, "memory": memory}
    return out


def print_tables(results: dict, n: int, budget: int) -> None:
    from jaxbatch._src.execute.vmap import _balanced

    for config, r in results.items():
        base = harness.summary(r["seconds"]["jax.vmap"])["median"]
        cpu_base = harness.summary(r["cpu_seconds"]["jax.vmap"])["median"]
        floor = r["memory"]["no-op"]["peak_above_before"]
        rows = [
            ["strategy", "ms (min-max)", "x jax.vmap", "CPU ms (min-max)", "x jax.vmap"]
            + ["XLA temp+out MB", "measured MB", "ratio"]
        ]
        for s in STRATEGIES:
            m = r["memory"][s]
            a = m["analysis"]
            est = a["temp_bytes"] + a["output_bytes"]
            label = f"lax.map(batch_size={r['lax_map_chunk']})" if s == "lax.map" else s
            if s == "python loop":
                label = "Python loop over jit(f)"
                est = a["temp_bytes"] + n * a["output_bytes"]
            if s == "jb.vmap":
                label = 'jb.vmap(chunk_size="auto")'
            med = harness.summary(r["seconds"][s])["median"]
            cpu = harness.summary(r["cpu_seconds"][s])["median"]
            rows.append(
                [
                    label,
                    harness.spread([1e3 * t for t in r["seconds"][s]], ".1f"),
                    f"{med / base:.2f}",
                    harness.spread([1e3 * t for t in r["cpu_seconds"][s]], ".1f"),
                    f"{cpu / cpu_base:.2f}",
                    f"{est / 1e6:.1f}",
                    f"{m['peak_above_before'] / 1e6:.1f}",
                    f"{m['peak_above_before'] / max(est, 1):.2f}",
                ]
            )
        jbm = r["memory"]["jb.vmap"]
        ctl = r["memory"]["jb.vmap without matmul"]
        ctl_est = ctl["analysis"]["temp_bytes"] + ctl["analysis"]["output_bytes"]
        ynn = any(r["memory"][s]["ynn_fusions"] for s in STRATEGIES)
        print(f"\n== {config} XLA flags ({CONFIGS[config] or 'none'}); YNNPACK fusions: {ynn}")
        print(harness.format_table(rows))
        print(
            f"   chunks of at most {r['chunk']} examples for the {budget / 1e6:.1f} MB budget "
            f"(jb.vmap evens them out to {_balanced(r['chunk'], n)}); "
            f"jb.vmap measured {jbm['peak_above_before'] / 1e6:.1f} MB = "
            f"{jbm['peak_above_before'] / budget:.2f}x the budget. "
            f"No-op program's measured peak (floor): {floor / 1e6:.1f} MB.\n"
            f"   control, the same jb.vmap of f without its matmul: measured "
            f"{ctl['peak_above_before'] / 1e6:.1f} MB, XLA {ctl_est / 1e6:.1f} MB."
        )
    print(
        "   CPU ms: the process's CPU time over the run (all of XLA's threads): steadier\n"
        "   than wall time while other work shares the cores.\n"
        "   measured: VmHWM - VmRSS around the second run in a fresh process per strategy\n"
        "   (inputs created before). XLA temp+out: compiled memory analysis (the loop: one\n"
        "   example's temporaries + n outputs)."
    )


def estimate_sections(n: int, k: int, reps: int) -> dict:
    """autotune's pick and the memory estimate at unseen sizes (default flags)."""
    import jax
    import jax.numpy as jnp

    import jaxbatch as jb
    from jaxbatch._src.execute.memory import compiled_bytes

    points = jnp.asarray(np.random.default_rng(0).standard_normal((n, k, 3)), jnp.float32)

    def timed(fn):
        jax.block_until_ready(fn(points))
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            jax.block_until_ready(fn(points))
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    tuned = jb.autotune(pairwise_energy, points, repeats=reps)
    print("\n" + tuned.report())
    measured = {}
    for r in tuned.results:
        fn = tuned.fn
        if r.name != tuned.best:
            fn = jb.autotune(pairwise_energy, points, strategies=(r.name,), repeats=reps).fn
        measured[r.name] = timed(fn) / n
    best = min(measured, key=measured.get)
    pick_ratio = measured[tuned.best] / measured[best]
    print(
        f"   autotune picked {tuned.best}; best re-measured: {best}; "
        f"pick / best = {pick_ratio:.3f} (target <= 1.10)"
    )

    est = jb.estimate_memory(pairwise_energy, points[0], batch_sizes=(1, 2, 4, 8))
    rows = [["batch", "estimated MB", "XLA analysis MB", "error"]]
    errors = []
    for b in (3, 24, 100, 333):
        spec = jax.ShapeDtypeStruct((b, k, 3), jnp.float32)
        real = compiled_bytes(jax.jit(jax.vmap(pairwise_energy)).lower(spec).compile())
        err = abs(est.predict(b) - real) / real
        errors.append({"batch": b, "estimated": est.predict(b), "analysis": real, "error": err})
        rows.append([str(b), f"{est.predict(b) / 1e6:.2f}", f"{real / 1e6:.2f}", f"{err:.1%}"])
    print("\n" + harness.format_table(rows))
    print("   the fit (on 1, 2, 4, 8) against XLA's analysis at unseen sizes; target within 10%")
    return {
        "autotune": {
            "pick": tuned.best,
            "best_measured": best,
            "pick_over_best": pick_ratio,
            "per_example_seconds": measured,
        },
        "memory_estimate": errors,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_arguments(parser)
    parser.add_argument("--worker", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--strategy", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "time":
        print(json.dumps(worker_time(args.n, args.k, args.budget, args.reps)))
        return
    if args.worker == "memory":
        print(json.dumps(worker_memory(args.n, args.k, args.budget, args.strategy)))
        return

    machine = harness.check_load(args.force)
    reps = harness.repetitions(args)
    n, k, budget = sizes(args.quick)
    print(
        f"jaxbatch execute benchmark: {n} examples of [{k}, 3] on CPU, {reps} alternating "
        f"repetitions, memory budget {budget / 1e6:.1f} MB; {harness.describe(machine)}"
    )
    results = measure(n, k, budget, reps)
    print_tables(results, n, budget)
    extra = estimate_sections(n, k, reps)
    path = harness.write_json(
        "bench_execute",
        {
            "examples": n,
            "points": k,
            "budget_bytes": budget,
            "reps": reps,
            "machine": machine,
            "xla_flags": CONFIGS,
            "strategies": results,
            **extra,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
