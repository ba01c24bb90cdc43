"""jb.map: a per-example function over every batch of a loader or dataset,
with OOM split-and-retry, per-example error isolation and compile accounting."""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import numpy as np

from jaxbatch._src.base.choices import check_choice
from jaxbatch._src.base.optional import install_hint, optional
from jaxbatch._src.base.words import counted
from jaxbatch._src.collate import keys
from jaxbatch._src.collate.collate import Batch, GraphRole, collate, unbatch
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.execute.failures import CHECK, FINITE, is_oom
from jaxbatch._src.execute.graph_batches import (
    GraphOomSplitter,
    example_index,
    per_example_outputs,
)
from jaxbatch._src.execute.hoist import hoisted
from jaxbatch._src.execute.memory import Auto, max_batch_size_for
from jaxbatch._src.execute.output_layout import unbatch_layout
from jaxbatch._src.load.loader import Loader
from jaxbatch._src.plan.plan import plan
from jaxbatch._src.plan.planners import (
    GRAPH_PLANNERS,
    AutoBuckets,
    Pack,
    PadToMax,
    Planner,
    refuse_several_features,
    refuse_split,
)

log = logging.getLogger("jaxbatch")

#: Rows per batch when batch_size="auto" cannot be planned from device memory (CPU).
DEFAULT_CPU_BATCH_SIZE = 32
DEFAULT_MAX_SHAPES = 8

#: A batch that runs out of device memory: split it and retry, or re-raise.
OnOom = Literal["split", "raise"]
#: An example whose check fails: raise, or set it aside in result.quarantine.
MapOnError = Literal["raise", "quarantine"]


@dataclasses.dataclass
class MapStats:
    """What a jb.map run did: batches and examples processed, distinct
    compiled shapes, seconds compiling and running, and every OOM back-off."""

    batches: int = 0
    examples: int = 0
    compilations: int = 0
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    # (rows, new rows) per back-off; a graph batch's ((nodes, edges, graphs), halved).
    backoffs: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)
    rows_limit: int | None = None  # rows per chunk after OOM back-offs (None: never backed off)
    expected_shapes: int | None = None

    @property
    def seconds_per_batch(self) -> float:
        return self.run_seconds / self.batches if self.batches else 0.0

    def __str__(self) -> str:
        return (
            f"{counted(self.examples, 'example')} in {counted(self.batches, 'batch', 'batches')}; "
            f"{counted(self.compilations, 'compilation')} ({self.compile_seconds:.2f} s), "
            f"{self.seconds_per_batch * 1e3:.2f} ms "
            f"per batch; OOM back-offs: {self.backoffs or 'none'}"
        )


@dataclasses.dataclass
class MapResult:
    """Per-example outputs (padding removed) keyed by example index, the
    quarantined examples with their reasons (those the function's checks
    failed, and with ``stage="loader"`` those a Loader's schema set aside),
    and the run's stats."""

    outputs: dict[int, Any]
    quarantine: list[dict[str, Any]]
    stats: MapStats


class Executor:
    """Compiles the checked, vmapped function once per input signature."""

    def __init__(self, fun, check_finite, check, length_column):
        import jax

        self.compiled: dict[Any, Any] = {}
        self.stats = MapStats()
        self.fun = fun
        self.check_finite, self.check = check_finite, check

        def per_example(example):
            out = fun(example)
            flags = jax.numpy.int32(0)
            if check_finite:
                mask = example.get(keys.mask(length_column)) if isinstance(example, dict) else None
                finite = jax.numpy.bool_(True)
                for leaf in jax.tree_util.tree_leaves(out):
                    if not jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact):
                        continue
                    ok = jax.numpy.isfinite(leaf)
                    if mask is not None and leaf.ndim >= 1 and leaf.shape[0] == mask.shape[0]:
                        ok = ok | ~mask.reshape(mask.shape + (1,) * (leaf.ndim - 1))
                    finite = finite & ok.all()
                flags = flags | jax.numpy.where(finite, 0, FINITE)
            if check is not None:
                passed = jax.numpy.asarray(check(example, out), dtype=bool)
                flags = flags | jax.numpy.where(passed, 0, CHECK)
            return out, flags

        self.batched = jax.vmap(per_example)
        self.length_column = length_column
        self.pending: dict[Any, Any] = {}  # key -> Future of a compile_ahead compilation
        self._ahead: tuple[list, bool] | None = None

    def _compile(self, arrays) -> tuple[Any, list]:
        import jax

        # The arrays fun closes over (a model's weights) become arguments:
        # each new shape then compiles ~3x faster (see _hoist).
        run, consts = hoisted(self.batched, arrays)
        return jax.jit(run).lower(consts, arrays).compile(), consts

    def compile_ahead(self, shapes: list, packed: bool) -> None:
        """Compiles the plan's other batch shapes (``BatchShape``s, in the
        order the batches come) in a background thread, starting after the
        first batch shows the arrays' layout: XLA compiles the next shape
        while this one runs. A shape still compiling when its first batch
        comes is waited for; ``stats.compile_seconds`` is the time waited."""
        self._ahead = (list(shapes), packed)

    def _start_ahead(self, template: dict[str, np.ndarray]) -> None:
        import concurrent.futures

        import jax

        shapes, packed = self._ahead
        self._ahead = None
        specs = []
        for shape in shapes:
            spec = _spec_for(template, shape, packed, self.length_column)
            if spec is None:
                return  # A layout it cannot predict: compile each shape when it comes.
            key = _key(spec)
            if key not in self.compiled and key not in self.pending:
                specs.append((key, spec))
        if not specs:
            return
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxbatch-compile")
        for key, spec in specs:
            spec = {k: jax.ShapeDtypeStruct(*v) for k, v in spec.items()}
            self.pending[key] = pool.submit(self._compile, spec)
        pool.shutdown(wait=False)

    def close(self) -> None:
        """Cancels the compilations ahead that have not started (the run is
        over, or failed): the process does not wait for them at exit."""
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()
        self._ahead = None

    def __call__(self, arrays: dict[str, np.ndarray]):
        import jax

        key = _key({k: (v.shape, v.dtype) for k, v in arrays.items()})
        entry = self.compiled.get(key)
        if entry is None:
            start = time.perf_counter()
            future = self.pending.pop(key, None)
            if future is not None and not future.cancel():  # Compiling or done: wait.
                entry = future.result()
            else:  # Not started (or not planned): compile it now, here.
                entry = self._compile(arrays)
            self.stats.compile_seconds += time.perf_counter() - start
            self.stats.compilations += 1
            self.compiled[key] = entry
            if self._ahead is not None:
                self._start_ahead(arrays)
        compiled, consts = entry
        start = time.perf_counter()
        out, flags = compiled(consts, arrays)
        out = jax.block_until_ready(out)
        self.stats.run_seconds += time.perf_counter() - start
        return jax.tree_util.tree_map(np.asarray, out), np.asarray(flags)


def _key(layout: dict[str, tuple]) -> tuple:
    """A compiled program's key: every array's name, shape and dtype."""
    return tuple(
        (k, tuple(shape), np.dtype(dtype).str) for k, (shape, dtype) in sorted(layout.items())
    )


def _spec_for(template: dict[str, np.ndarray], shape, packed: bool, length_column: str):
    """{name: (shape, dtype)} of a batch of ``shape`` laid out as ``template``
    (a collated batch of another shape); None when the layout does not follow
    from the shape alone (other ragged columns have widths of their own)."""
    token_keys = {f"{length_column}{s}" for s in keys.TOKEN_SUFFIXES}
    ragged = {k for k in template if k.endswith(keys.MASK) and k != keys.mask(length_column)}
    if ragged:
        return None
    spec = {}
    for k, v in template.items():
        dims = list(v.shape)
        dims[0] = shape.rows
        if k in token_keys:
            dims[1] = shape.length
        elif packed and len(dims) >= 2:
            dims[1] = shape.segments
        spec[k] = (tuple(dims), v.dtype)
    return spec


def _rows(arrays: dict[str, np.ndarray], start: int, stop: int, size: int) -> dict[str, np.ndarray]:
    """Rows [start, stop) of every array, padded to `size` rows with zeros and
    example_index -1 (ignored in the results), so every chunk has one shape."""
    out = {}
    for k, v in arrays.items():
        part = v[start:stop]
        if stop - start < size:
            fill = -1 if k == keys.EXAMPLE_INDEX else 0
            pad = np.full((size - (stop - start),) + v.shape[1:], fill, dtype=v.dtype)
            part = np.concatenate([part, pad])
        out[k] = part
    return out


def map(  # noqa: A001 - the name users expect, as jax.lax.map
    fun: Callable,
    data: Loader | Dataset | Iterable[Batch],
    *,
    planner: Planner | None = None,
    batch_size: int | Auto = "auto",
    on_oom: OnOom = "split",
    backoff: float = 0.9,
    min_batch_size: int = 1,
    check_finite: bool = False,
    check: Callable | None = None,
    on_error: MapOnError = "raise",
    memory_budget: int | Auto | None = None,
    progress: bool = False,
    per_example: bool | None = None,
    per: GraphRole | Mapping[str, GraphRole] | None = None,
) -> MapResult:
    """Runs a per-example function over every batch, safely.

    ``fun(example)`` takes one example as the collated batch's row (a dict:
    ``tokens [L]``, ``tokens_mask [L]``, ``tokens_lengths``, ...) and returns
    a pytree; jb.map vmaps it over each batch's rows, under jit, and returns
    each example's outputs with the padding removed (:func:`jaxbatch.unbatch`).

    * ``data``: a :class:`Loader`, or a :class:`Dataset` planned with
      ``planner`` (default ``AutoBuckets(8, batch_size=...)``, not shuffled).
      ``batch_size="auto"`` plans rows from device memory
      (:func:`jaxbatch.max_batch_size` with ``memory_budget``, default the
      free device memory); on CPU, which reports none, it uses 32.
    * ``on_oom="split"``: a batch that raises RESOURCE_EXHAUSTED is run in
      chunks of ``backoff`` times as many rows, and the new limit is kept for
      the following batches; each back-off is logged and counted in
      ``stats.backoffs``; below ``min_batch_size`` the run stops with a
      summary. No example is lost or duplicated. ``on_oom="raise"``
      re-raises.
    * ``check_finite`` / ``check(example, output) -> bool``: evaluated inside
      the compiled function per example; failing examples are quarantined
      (``on_error="quarantine"``, their index and reason in
      ``result.quarantine``) or the first one raises (``"raise"``).
    * ``progress=True`` shows a tqdm bar of examples (when tqdm is installed;
      otherwise a log line every 100 batches).
    * Compile accounting: ``stats`` holds compilations (distinct shapes),
      compile and run time; a warning is issued when compilations exceed the
      planner's shape count (times one plus the number of OOM back-offs).
    * Graphs (a Loader or ``planner`` of :class:`GraphBudget` /
      :class:`GraphBuckets`): ``fun(batch)`` gets the whole padded batch
      (``batch.graphs``, ``batch["node_mask"]``, ...) and returns per-node
      ``[nodes, ...]``, per-edge ``[edges, ...]`` or per-graph
      ``[graphs, ...]`` outputs; with ``per_example=True`` ``fun(graph)``
      gets one graph at a time under vmap, padded as
      ``jraph.pad_with_graphs`` pads it to the data's largest graph.
      Which leaf is per what is found from the function (the leaves that
      grow with one more node, edge or graph slot); ``per=`` declares it
      (``"node"``, ``"edge"``, ``"graph"``, or a dict by output name).
      ``result.outputs[graph]`` holds the graph's own nodes or edges only.
      An OOM re-plans the batch's graphs under half its budget; checks
      quarantine single graphs (docs/graphs.md).
    """
    check_choice("jb.map", "on_oom", on_oom, OnOom)
    check_choice("jb.map", "on_error", on_error, MapOnError)
    if not 0 < backoff < 1:
        raise ValueError(f"jb.map: backoff must be between 0 and 1, found {backoff!r}")
    if (
        isinstance(min_batch_size, bool)
        or not isinstance(min_batch_size, int)
        or min_batch_size < 1
    ):
        raise ValueError(f"jb.map: min_batch_size must be an int >= 1, found {min_batch_size!r}")

    batches, shapes, length_column = _batches(fun, data, planner, batch_size, memory_budget)
    executor = Executor(fun, check_finite, check, length_column)
    graph = isinstance(getattr(batches, "planner", None), GRAPH_PLANNERS)
    run = (
        GraphOomSplitter(executor, on_oom, batches, per_example, per)
        if graph
        else OomSplitter(executor, on_oom, backoff, min_batch_size, per_example, per)
    )
    expected_shapes = None
    if shapes is not None:
        expected_shapes = len(shapes)
        if not graph:
            executor.compile_ahead(shapes, isinstance(batches.planner, Pack))
    stats = executor.stats
    stats.expected_shapes = expected_shapes
    outputs: dict[int, Any] = {}
    quarantine: list[dict[str, Any]] = []
    bar = _progress_bar(progress)
    try:
        _run_batches(batches, run, stats, outputs, quarantine, on_error, bar)
        if isinstance(batches, Loader):  # Bad records the loader set aside, too.
            quarantine.extend(dict(q, batch=None, stage="loader") for q in batches.quarantine)
    finally:
        executor.close()
        if isinstance(batches, Loader) and batches is not data:
            batches.close()  # The loader jb.map made for a Dataset.
    return _finish(stats, expected_shapes, outputs, quarantine, bar)


def _run_batches(batches, run, stats, outputs, quarantine, on_error, bar):
    layouts = {}
    for batch in batches:
        before = stats.examples
        for part, out, flags in run.pieces(batch):
            signature = tuple((k, np.shape(v)) for k, v in part.items())
            if signature not in layouts:
                layouts[signature] = run.layout(part, out)
            _collect(out, flags, part, stats, outputs, quarantine, on_error, layouts[signature])
        stats.batches += 1
        if bar is not None:
            bar(stats.examples - before, stats)


class OomSplitter:
    """Runs a batch through an Executor whole or, after an out-of-memory
    error, in chunks of fewer rows (each chunk padded to the same row count,
    so one shape per limit); the lowered limit is kept for later batches.
    (Graph batches: graph_batches.GraphOomSplitter, with the same face.)"""

    def __init__(self, executor, on_oom, backoff, min_batch_size, per_example=None, per=None):
        if per_example is False or per is not None:
            raise ValueError(
                "jb.map: per_example=False and per= are for graph batches (GraphBudget, "
                "GraphBuckets); a sequence function is always per example"
            )
        self.executor, self.on_oom = executor, on_oom
        self.backoff, self.min_batch_size = backoff, min_batch_size
        self.stats = executor.stats
        self.oom_limit = None

    def pieces(self, batch):
        """[(batch, outputs, flags per row)]: the batch's results, in the
        shape graph batches give theirs (which may come in several batches)."""
        if getattr(batch, "is_graphs", False):
            raise TypeError(
                "jb.map: graph batches come from a jb.Loader (or a Dataset with planner="
                "jb.GraphBudget(...)): pass that, not an iterable of its batches, so that a "
                "batch that runs out of memory can be re-planned"
            )
        out, flags = self(batch)
        return [(batch, out, flags)]

    def layout(self, batch, out):
        """per_token= for unbatching `out`: which leaves are per token."""
        return unbatch_layout(self.executor.fun, batch, out)

    def __call__(self, batch):
        """The batch's outputs (numpy, one leading row axis) and per-row flags."""
        arrays = dict(batch)
        rows = len(arrays[keys.EXAMPLE_INDEX])
        limit = rows if self.oom_limit is None else min(self.oom_limit, rows)
        start = 0
        pieces = []
        while start < rows:
            stop = min(rows, start + limit)
            try:
                out, flags = self.executor(_rows(arrays, start, stop, limit))
            except Exception as e:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not is_oom(e) or self.on_oom == "raise":
                    raise
                limit = self._back_off(limit, e)
                continue
            count = stop - start
            pieces.append((jax_tree_slice(out, count), flags[:count]))
            start = stop
        return _concat([p for p, _ in pieces]), np.concatenate([f for _, f in pieces])

    def _back_off(self, limit: int, error: Exception) -> int:
        stats = self.stats
        if limit <= self.min_batch_size:
            raise RuntimeError(
                f"jb.map: out of memory at {limit} rows per chunk, already at "
                f"min_batch_size={self.min_batch_size} (batch {stats.batches}, "
                f"back-offs so far: {stats.backoffs}); reduce the batch shape or the "
                f"function's memory use"
            ) from error
        new = max(self.min_batch_size, min(limit - 1, int(limit * self.backoff)))
        log.warning("jb.map: out of memory at %d rows; retrying with %d", limit, new)
        stats.backoffs.append((limit, new))
        self.oom_limit = new
        stats.rows_limit = new
        return new


def _finish(stats, expected_shapes, outputs, quarantine, bar):
    if bar is not None:
        bar(0, stats, done=True)
    # Each back-off may give every shape one new chunk shape.
    allowed = (expected_shapes or 0) * (1 + len(stats.backoffs))
    if expected_shapes is not None and stats.compilations > allowed:
        warnings.warn(
            f"jb.map: {counted(stats.compilations, 'compilation')} for a plan of "
            f"{counted(expected_shapes, 'shape')} "
            f"({counted(len(stats.backoffs), 'OOM back-off')}); "
            f"something varies the input shapes",
            stacklevel=3,
        )
    return MapResult(outputs, quarantine, stats)


def _progress_bar(enabled: bool):
    """A callback advancing a tqdm bar (or logging) by examples, or None."""
    if not enabled:
        return None
    tqdm = optional("tqdm.auto")
    if tqdm is None:
        log.info("jb.map: no tqdm, so a log line every 100 batches: %s", install_hint("tqdm"))
    bar = tqdm.tqdm(unit="ex", desc="jb.map") if tqdm is not None else None

    def update(examples: int, stats: MapStats, done: bool = False) -> None:
        if bar is not None:
            bar.update(examples)
            bar.set_postfix(compiles=stats.compilations, backoffs=len(stats.backoffs))
            if done:
                bar.close()
        elif done or stats.batches % 100 == 0:
            log.info("jb.map: %s", stats)

    return update


def jax_tree_slice(tree, count):
    import jax

    return jax.tree_util.tree_map(lambda x: x[:count], tree)


def _concat(trees):
    import jax

    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *trees)


def flag_reason(flag: int) -> str:
    """Why the compiled checks flagged an example."""
    reasons = []
    if flag & FINITE:
        reasons.append("an output is not finite (NaN or Inf)")
    if flag & CHECK:
        reasons.append("check returned False")
    return " and ".join(reasons)


def _collect(out, flags, batch, stats, outputs, quarantine, on_error, per_token=None):
    index = example_index(batch)
    per_row = index if index.ndim == 1 else None
    real = (
        np.flatnonzero(per_row >= 0) if per_row is not None else np.flatnonzero((index >= 0).any(1))
    )
    bad_rows = [r for r in real if flags[r]]
    for r in bad_rows:
        examples = [int(index[r])] if per_row is not None else [int(e) for e in index[r] if e >= 0]
        reason = flag_reason(flags[r])
        if on_error == "raise":
            raise ValueError(
                f"jb.map: example {examples[0]} (batch {stats.batches}, row {r}): {reason}; pass "
                f"on_error='quarantine' to set such examples aside and continue"
            )
        for e in examples:
            quarantine.append({"example": e, "batch": stats.batches, "reason": reason})
    if batch.is_graphs:  # per_token: the leaves' roles (node, edge, graph)
        per_example = per_example_outputs(out, batch, per_token, index >= 0)
    else:
        per_example = unbatch(out, batch, per_token=per_token)
    bad = {q["example"] for q in quarantine}
    for e, value in per_example.items():
        if e not in bad:
            outputs[e] = value
    stats.examples += len(real) if per_row is not None else int((index >= 0).sum())


def _batches(fun, data, planner, batch_size, memory_budget):
    """The batches to run, the shapes they will have (None: unknown), and the
    length column. A Loader says its shapes itself (the engine's, after
    shuffle, shard and bad records), so nothing is planned twice."""
    if isinstance(data, Dataset) and isinstance(planner, GRAPH_PLANNERS):
        loader = Loader(data, planner, shuffle=False)
        return loader, loader.shapes, ""
    refuse_split(data.planner if isinstance(data, Loader) else planner, "jb.map")
    refuse_several_features(data.planner if isinstance(data, Loader) else planner, "jb.map")
    if isinstance(data, Loader):
        if planner is not None:
            raise ValueError("jb.map: planner= is for a Dataset; the Loader has its own")
        return data, data.shapes, data._length_column
    if isinstance(data, Dataset):
        rows = rows_for(fun, data, batch_size, memory_budget)
        planner = planner or AutoBuckets(DEFAULT_MAX_SHAPES, batch_size=rows)
        loader = Loader(data, planner, shuffle=False)
        return loader, loader.shapes, loader._length_column
    return data, None, getattr(data, "length_column", "")


def rows_for(fun, dataset, batch_size, memory_budget) -> int:
    if batch_size != "auto":
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"jb.map: batch_size must be an int >= 1 or 'auto', found {batch_size!r}"
            )
        return batch_size
    import jax

    budget = memory_budget or "auto"
    if budget == "auto" and not (jax.devices()[0].memory_stats() or {}).get("bytes_limit"):
        log.info("jb.map: no device memory statistics (CPU); batch_size=%d", DEFAULT_CPU_BATCH_SIZE)
        return DEFAULT_CPU_BATCH_SIZE

    # One example padded to the longest: the worst case of any bucket.
    longest = int(np.argmax(dataset.lengths()))
    spec = plan(dataset, PadToMax(1), order=[longest])[0]
    example = {k: v[0] for k, v in collate(dataset, spec).items()}
    return max(1, max_batch_size_for(fun, 0, (example,), {}, budget))
