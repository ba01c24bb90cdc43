"""Memory planning from XLA's compiled memory analysis.

``jax.jit(f).lower(...).compile().memory_analysis()`` says how many bytes a
compiled program needs for its arguments, outputs and temporaries, without
running it. Compiling a vmapped function at a few batch sizes and fitting
bytes = a + b * batch gives the largest batch that fits a budget. Each
compiled program's bytes are kept across runs (plan_cache.py), so planning
the same function at the same shapes again lowers it but compiles nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np

from jaxbatch._src.base.words import counted
from jaxbatch._src.execute import plan_cache
from jaxbatch._src.execute.axes import broadcast_prefix
from jaxbatch._src.execute.failures import is_oom
from jaxbatch._src.execute.hoist import hoisted

#: A size or budget chosen from the device's free memory.
Auto = Literal["auto"]
#: Fraction of free device memory kept back when budget="auto".
DEFAULT_HEADROOM = 0.1
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16)


_YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="
_warned_ynn = False


def _uncounted(compiled: Any) -> bool:
    """Whether XLA's CPU backend handed fusions to YNNPACK: their
    intermediates are not in the memory analysis (measured in
    bench/bench_execute.py: a chunked vmap planned for 50 MB peaked at 470
    MB), so a budget planned from it may not hold."""
    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001 - the text is only a hint; no text, no warning
        return False
    return bool(text) and "ynn_fusion" in text


def _warn_uncounted() -> None:
    """Warns once a process that the analysis misses YNNPACK's fusions."""
    global _warned_ynn
    if _warned_ynn:
        return
    _warned_ynn = True
    import warnings

    warnings.warn(
        "memory planning: XLA's CPU backend runs parts of this program as YNNPACK fusions, "
        "whose intermediates its memory analysis does not count, so the planned peak may "
        f"be exceeded several times over; set XLA_FLAGS={_YNN_FLAG} before JAX starts to "
        "turn them off (the analysis then holds to within a matmul's scratch space)",
        RuntimeWarning,
        stacklevel=4,
    )


def compiled_bytes(compiled: Any) -> int:
    """Peak bytes of a compiled executable, normalised across backends and
    versions: ``peak_memory_in_bytes`` where XLA reports it, else arguments +
    outputs + temporaries - aliased (donated) bytes + generated code. Warns
    once when the program has fusions the analysis does not count."""
    if _uncounted(compiled):
        _warn_uncounted()
    return _analysed_bytes(compiled)


def _analysed_bytes(compiled: Any) -> int:
    stats = compiled.memory_analysis()
    if stats is None:
        raise RuntimeError("memory planning: this backend reports no compiled memory analysis")
    if isinstance(stats, Sequence):  # Older JAX: one entry per device.
        stats = stats[0]
    peak = getattr(stats, "peak_memory_in_bytes", 0) or 0
    total = (
        getattr(stats, "argument_size_in_bytes", 0)
        + getattr(stats, "output_size_in_bytes", 0)
        + getattr(stats, "temp_size_in_bytes", 0)
        - getattr(stats, "alias_size_in_bytes", 0)
        + getattr(stats, "generated_code_size_in_bytes", 0)
    )
    return int(max(peak, total))


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """bytes(batch) = fixed_bytes + per_example_bytes * batch, fitted to
    compiled memory analyses at ``samples`` (batch, bytes)."""

    fixed_bytes: float
    per_example_bytes: float
    samples: tuple[tuple[int, int], ...]

    def predict(self, batch: int) -> int:
        return int(round(self.fixed_bytes + self.per_example_bytes * batch))

    def max_batch(self, budget: int) -> int:
        """The largest batch the fit says fits `budget` bytes (0 if none)."""
        if self.per_example_bytes <= 0:
            return 2**31 - 1 if self.fixed_bytes <= budget else 0
        return max(0, int((budget - self.fixed_bytes) // self.per_example_bytes))


def _batched_specs(args: Sequence[Any], kwargs: dict, in_axes: Any, batch: int):
    """ShapeDtypeStructs of the arguments with a batch axis of `batch` inserted."""
    import jax

    axes = tuple(in_axes) if isinstance(in_axes, list | tuple) else (in_axes,) * len(args)
    if len(axes) != len(args):
        raise ValueError(
            f"memory planning: in_axes has {counted(len(axes), 'entry', 'entries')} for "
            f"{counted(len(args), 'argument')}"
        )

    def spec(x, axis):
        x = np.asarray(x) if not hasattr(x, "shape") else x
        shape = tuple(x.shape)
        if axis is not None:
            a = axis % (len(shape) + 1)
            shape = shape[:a] + (batch,) + shape[a:]
        return jax.ShapeDtypeStruct(shape, x.dtype)

    out_args = tuple(
        jax.tree_util.tree_map(spec, a, broadcast_prefix(ax, a))
        for a, ax in zip(args, axes, strict=True)
    )
    out_kwargs = jax.tree_util.tree_map(lambda x: spec(x, 0), kwargs)
    return out_args, out_kwargs


def _bytes_at(fun: Callable, in_axes: Any, args, kwargs, batch: int) -> int:
    import jax

    specs, kw_specs = _batched_specs(args, kwargs, in_axes, batch)
    names = sorted(kw_specs)

    def batched(*a):  # Keyword arguments by position: hoisted takes positions.
        return jax.vmap(fun, in_axes=in_axes)(
            *a[: len(specs)], **dict(zip(names, a[len(specs) :], strict=True))
        )

    # Compiled as jb.map compiles it: closed-over arrays (weights) passed as
    # arguments, which are already resident and so not counted again.
    run, consts = hoisted(batched, *specs, *(kw_specs[k] for k in names))
    lowered = jax.jit(run).lower(consts, *specs, *(kw_specs[k] for k in names))
    resident = sum(c.nbytes for c in consts if isinstance(c, jax.Array))
    return program_bytes(lowered) - resident


def program_bytes(lowered: Any) -> int:
    """:func:`compiled_bytes` of a lowered program, from the plan cache when
    the same program was compiled by the same compiler before (a lowering
    costs a trace; a compilation, seconds for a transformer)."""
    key = plan_cache.program_key(lowered)
    entry = plan_cache.lookup(key)
    if entry is None:
        compiled = lowered.compile()
        entry = plan_cache.Entry(_analysed_bytes(compiled), _uncounted(compiled))
        plan_cache.store(key, entry)
        _count(compiled=1)
    else:
        _count(cached=1)
    if entry.uncounted:
        _warn_uncounted()
    return entry.bytes


# --- counting compilations -------------------------------------------------------------------


@dataclasses.dataclass
class PlanCount:
    """The compilations memory planning ran, and those the plan cache saved."""

    compiled: int = 0
    cached: int = 0

    def __str__(self) -> str:
        saved = f"saved {counted(self.cached, 'compilation')}"
        if not self.cached:
            return counted(self.compiled, "compilation")
        if not self.compiled:
            return f"cached ({saved})"
        return f"{counted(self.compiled, 'compilation')}, partly cached ({saved})"


_counting: list[PlanCount] = []


@contextlib.contextmanager
def counting() -> Iterator[PlanCount]:
    """Counts memory planning's compilations and cache hits in the block.

    Example::

        with counting() as count:
            jb.estimate_memory(f, x)
        print(f"memory plan: {count}")   # "memory plan: cached (saved 2 compilations)"
    """
    count = PlanCount()
    _counting.append(count)
    try:
        yield count
    finally:
        _counting.remove(count)


def _count(compiled: int = 0, cached: int = 0) -> None:
    for count in _counting:
        count.compiled += compiled
        count.cached += cached


def estimate_memory(
    fun: Callable,
    *example_args: Any,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    in_axes: Any = 0,
    **example_kwargs: Any,
) -> MemoryEstimate:
    """Fits the compiled memory of ``jax.vmap(fun, in_axes)`` as a line in the
    batch size, from ahead-of-time compilations at ``batch_sizes``.

    ``example_args`` are ONE example (no batch axis); nothing runs on device.

    Example::

        est = jb.estimate_memory(pairwise, jnp.zeros((512, 3)))
        est.predict(1024), est.per_example_bytes
    """
    sizes = sorted({int(b) for b in batch_sizes})
    if len(sizes) < 2 or sizes[0] < 1:
        raise ValueError(
            f"estimate_memory: expected at least two batch sizes >= 1, found {list(batch_sizes)}"
        )
    samples = tuple((b, _bytes_at(fun, in_axes, example_args, example_kwargs, b)) for b in sizes)
    x = np.array([b for b, _ in samples], dtype=np.float64)
    y = np.array([m for _, m in samples], dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    return MemoryEstimate(float(intercept), float(slope), samples)


def free_device_memory(device: Any = None, headroom: float = DEFAULT_HEADROOM) -> int:
    """Free bytes on `device` (default: the first) less `headroom`, from
    ``device.memory_stats()``; ValueError where the backend reports none (CPU)."""
    import jax

    device = device or jax.devices()[0]
    stats = device.memory_stats()
    if not stats or "bytes_limit" not in stats:
        raise ValueError(
            f"budget='auto' needs the device's memory statistics, but {device.platform} "
            f"device {device.id} reports none (the CPU backend never does); pass budget in bytes"
        )
    free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    return int(free * (1.0 - headroom))


def _resolve_budget(budget: int | Auto) -> int:
    if budget == "auto":
        return free_device_memory()
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget <= 0:
        raise ValueError(
            f"memory budget must be a positive number of bytes or 'auto', found {budget!r}"
        )
    return int(budget)


def max_batch_size(
    fun: Callable,
    *example_args: Any,
    budget: int | Auto,
    in_axes: Any = 0,
    upper: int = 1 << 20,
    **example_kwargs: Any,
) -> int:
    """The largest batch whose compiled ``jax.vmap(fun)`` fits `budget` bytes
    (``"auto"``: the device's free memory less 10% headroom).

    The linear fit gives a first guess; the guess is then compiled and
    stepped down until the compiled memory really fits, so the answer is
    checked, not only predicted. Raises ValueError if even one example does
    not fit.
    """
    return max_batch_size_for(fun, in_axes, example_args, example_kwargs, budget, upper)


def max_batch_size_for(fun, in_axes, args, kwargs, budget, upper: int = 1 << 20) -> int:
    """max_batch_size over already-batched `args` (the first mapped leaf's
    batch axis is removed to get one example), as jb.vmap's chunk_size='auto'
    needs it, or over one example when `args` are unbatched."""
    limit = _resolve_budget(budget)
    one = _compiled_bytes_or_none(fun, in_axes, args, kwargs, 1)
    if one is None or one > limit:
        needs = "more device memory than is free to compile it" if one is None else f"{one} bytes"
        raise ValueError(
            f"memory planning: one example needs {needs}, over the budget of {limit} bytes"
        )
    fit = _fit(fun, in_axes, args, kwargs, one)
    if fit is None:
        return 1
    guess = max(1, min(upper, MemoryEstimate(*fit).max_batch(limit)))
    while guess > 1 and not _fits(fun, in_axes, args, kwargs, guess, limit):
        guess = max(1, int(guess * 0.9))
    return guess


def _compiled_bytes_or_none(fun, in_axes, args, kwargs, batch: int) -> int | None:
    """_bytes_at, or None where compiling the batch ran out of device memory:
    XLA's GPU autotuner runs the program's fusions on buffers of their real
    size while it compiles (on an H100, planning at a batch of 64 examples of
    330 MB each stopped with RESOURCE_EXHAUSTED, tests/test_gpu.py), so such a
    batch does not fit, nor any larger one."""
    try:
        return _bytes_at(fun, in_axes, args, kwargs, batch)
    except Exception as e:
        if is_oom(e):
            return None
        raise


def _fits(fun, in_axes, args, kwargs, batch: int, limit: int) -> bool:
    measured = _compiled_bytes_or_none(fun, in_axes, args, kwargs, batch)
    return measured is not None and measured <= limit


def _fit(fun, in_axes, args, kwargs, one: int):
    """The line through batch 1 (`one` bytes, already compiled), 8 and 64,
    without the sizes whose compilation ran out of device memory (then
    through 1 and 2 if 8 is one of them); None if 2 is one of them too."""
    samples = [(1, one)]
    for batch in (8, 64):
        measured = _compiled_bytes_or_none(fun, in_axes, args, kwargs, batch)
        if measured is None:
            break
        samples.append((batch, measured))
    if len(samples) == 1:
        measured = _compiled_bytes_or_none(fun, in_axes, args, kwargs, 2)
        if measured is None:
            return None
        samples.append((2, measured))
    x = np.array([b for b, _ in samples], dtype=np.float64)
    y = np.array([m for _, m in samples], dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope), tuple(samples)
