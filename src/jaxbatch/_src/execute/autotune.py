"""autotune: measure batching strategies and pick the fastest that fits.

``vmap`` is not always fastest: a huge vmap can spill memory, ``lax.map``
runs examples sequentially in one compiled loop, chunked vmap sits between,
and a Python loop of per-example calls avoids padding entirely. autotune
compiles each, measures compile time and steady-state time per example, and
returns the fastest whose compiled memory fits the budget.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxbatch._src.execute.axes import check_axes
from jaxbatch._src.execute.memory import compiled_bytes
from jaxbatch._src.execute.vmap import vmap as jb_vmap

STRATEGIES = ("vmap", "chunked_vmap", "lax_map", "loop")
_CACHE: dict[Any, AutotuneResult] = {}


@dataclasses.dataclass(frozen=True)
class StrategyResult:
    name: str
    compile_seconds: float
    seconds_per_example: float
    memory_bytes: int
    fits: bool


@dataclasses.dataclass(frozen=True)
class AutotuneResult:
    """The chosen strategy, a callable running it (same signature as the
    batched function), and every strategy's measurements."""

    best: str
    fn: Callable
    results: tuple[StrategyResult, ...]
    chunk_size: int

    def report(self) -> str:
        header = ("strategy", "compile s", "us/example", "memory MB", "fits", "")
        rows = [
            (
                r.name,
                f"{r.compile_seconds:.3f}",
                f"{r.seconds_per_example * 1e6:.2f}",
                f"{r.memory_bytes / 1e6:.2f}",
                "yes" if r.fits else "no",
                "<- best" if r.name == self.best else "",
            )
            for r in self.results
        ]
        widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
        fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True))  # noqa: E731
        return "\n".join([fmt(header), *map(fmt, rows)])

    def __str__(self) -> str:
        return self.report()


def _cache_key(fun, args, strategies, budget, chunk_size):
    import jax

    leaves, tree = jax.tree_util.tree_flatten(args)
    shapes = tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves)
    return (fun, tree, shapes, tuple(strategies), budget, chunk_size, str(jax.devices()[0]))


def autotune(
    fun: Callable,
    *example_args: Any,
    strategies: Sequence[str] = STRATEGIES,
    memory_budget: int | None = None,
    chunk_size: int | None = None,
    repeats: int = 5,
) -> AutotuneResult:
    """Measures ``fun`` (a per-example function) over the batch
    ``example_args`` (every argument batched on axis 0) with each strategy:

    * ``"vmap"``: ``jax.jit(jax.vmap(fun))``
    * ``"chunked_vmap"``: :func:`jaxbatch.vmap` with ``chunk_size`` (default:
      an eighth of the batch)
    * ``"lax_map"``: ``jax.jit(lambda xs: lax.map(fun, xs))``
    * ``"loop"``: a Python loop over ``jax.jit(fun)``, outputs stacked

    and returns the fastest steady-state strategy whose compiled memory
    (XLA's analysis; for ``loop``, one example's) fits ``memory_budget``
    bytes (no limit if None), with :meth:`AutotuneResult.report`. Results are
    cached per (function, shapes, dtypes, device).

    Example::

        tuned = jb.autotune(per_example_loss, tokens, labels)
        print(tuned.report()); out = tuned.fn(tokens, labels)
    """
    import jax

    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise ValueError(f"autotune: unknown strategies {unknown}; choose from {STRATEGIES}")

    n = check_axes(fun, 0, *example_args)
    chunk = chunk_size or max(1, n // 8)
    key = _cache_key(fun, example_args, strategies, memory_budget, chunk)
    if key in _CACHE:
        return _CACHE[key]

    candidates = {
        "vmap": jax.jit(jax.vmap(fun)),
        "chunked_vmap": jax.jit(jb_vmap(fun, chunk_size=chunk)),
        "lax_map": jax.jit(lambda *xs: jax.lax.map(lambda ex: fun(*ex), xs)),
    }
    one = jax.jit(fun)

    def loop(*xs):
        outs = [one(*(x[i] for x in xs)) for i in range(n)]
        return jax.tree_util.tree_map(lambda *ys: jax.numpy.stack(ys), *outs)

    results = []
    runners = {}
    for name in strategies:
        start = time.perf_counter()
        if name == "loop":
            first = tuple(x[0] for x in example_args)
            compiled_one = one.lower(*first).compile()
            memory = compiled_bytes(compiled_one)
            runner = loop
        else:
            compiled = candidates[name].lower(*example_args).compile()
            memory = compiled_bytes(compiled)
            runner = compiled
        compile_seconds = time.perf_counter() - start
        jax.block_until_ready(runner(*example_args))  # Warm-up (and the loop's first compile).
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            jax.block_until_ready(runner(*example_args))
            times.append(time.perf_counter() - t)
        fits = memory_budget is None or memory <= memory_budget
        results.append(
            StrategyResult(name, compile_seconds, statistics.median(times) / n, memory, fits)
        )
        runners[name] = runner if name == "loop" else candidates[name]
    fitting = [r for r in results if r.fits]
    if not fitting:
        raise ValueError(
            f"autotune: no strategy fits memory_budget={memory_budget} bytes; smallest needs "
            f"{min(r.memory_bytes for r in results)}"
        )
    best = min(fitting, key=lambda r: r.seconds_per_example)
    result = AutotuneResult(best.name, runners[best.name], tuple(results), chunk)
    _CACHE[key] = result
    return result
