"""jb.map: a per-example function over every batch of a loader or dataset,
with OOM split-and-retry, per-example error isolation and compile accounting
(the loop itself is batch_loop.py's, shared with jb.run)."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from jaxbatch._src.base.optional import install_hint, optional
from jaxbatch._src.base.words import counted
from jaxbatch._src.collate.collate import Batch, GraphRole
from jaxbatch._src.collate.unbatch import unbatch
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.mixture import Mixture
from jaxbatch._src.execute.batch_loop import (
    DEFAULT_BACKOFF,
    DEFAULT_MIN_BATCH_SIZE,
    DEFAULT_ON_ERROR,
    DEFAULT_ON_OOM,
    BatchLoop,
    LoopSettings,
    MapOnError,
    OnOom,
    Ran,
    default_planner,
    rows_for,
)
from jaxbatch._src.execute.executor import Executor as Executor
from jaxbatch._src.execute.executor import MapStats
from jaxbatch._src.execute.graph_batches import per_example_outputs
from jaxbatch._src.execute.memory import Auto
from jaxbatch._src.execute.output_layout import unbatch_per_token
from jaxbatch._src.load.loader import Loader
from jaxbatch._src.load.mixture_pass import draw_pass, refuse_seed
from jaxbatch._src.plan.planners import (
    GRAPH_PLANNERS,
    PatchPack,
    Planner,
    refuse_several_features,
    refuse_split,
)

__all__ = ["MapOnError", "MapResult", "MapStats", "OnOom", "map"]

log = logging.getLogger("jaxbatch")


@dataclasses.dataclass
class MapResult:
    """Per-example outputs (padding removed) keyed by example index, the
    quarantined examples with their reasons (those the function's checks
    failed, and with ``stage="loader"`` those a Loader's schema set aside),
    and the run's stats. Over a mixture, outputs are keyed by each draw's
    position in the stream, and ``source_index[p]`` and ``example_index[p]``
    say which source and which of its examples draw ``p`` is."""

    outputs: dict[int, Any]
    quarantine: list[dict[str, Any]]
    stats: MapStats
    source_index: np.ndarray | None = None
    example_index: np.ndarray | None = None


def map(  # noqa: A001 - the name users expect, as jax.lax.map
    fun: Callable,
    data: Loader | Dataset | Mixture | Iterable[Batch],
    *,
    planner: Planner | PatchPack | None = None,
    seed: int | None = None,
    batch_size: int | Auto = "auto",
    on_oom: OnOom = DEFAULT_ON_OOM,
    backoff: float = DEFAULT_BACKOFF,
    min_batch_size: int = DEFAULT_MIN_BATCH_SIZE,
    check_finite: bool = False,
    check: Callable | None = None,
    on_error: MapOnError = DEFAULT_ON_ERROR,
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
      free device memory); on CPU, which reports none, it uses 32. Or a
      mixture (``jb.Dataset.mix``), planned likewise: one pass of its
      stream, drawn under ``seed`` as ``jb.Loader(mixture, ..., seed=seed,
      epochs=1)`` draws it; outputs are keyed by each draw's position,
      ``result.source_index`` and ``result.example_index`` name its source
      and example, and ``stats.sources`` each source's realised share.
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
    * Packed rows (:class:`Pack`, :class:`PatchPack`): ``fun(row)`` gets one
      packed row and returns per-segment outputs ``[S, ...]`` (e.g.
      ``jb.masked.segment_mean(x, row["image_segment_ids"], S)``, one per
      image) or per-token (per-patch) ``[L, ...]``; ``result.outputs`` has
      each example's own, its patches in order. Checks are per segment:
      ``check_finite`` flags the segment whose outputs (per segment, or its
      tokens') are not finite, and ``check`` may return ``[S]`` bools (one
      bool flags the whole row); only the flagged examples are set aside.
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
    settings = LoopSettings(check_finite, check, on_error, on_oom, backoff, min_batch_size)
    settings = dataclasses.replace(settings, per_example=per_example, per=per)
    refuse_seed(data, seed, "jb.map")
    drawn = None
    if isinstance(data, Mixture):  # One pass of its stream, as the engine draws it.
        drawn = draw_pass(data, planner, seed=seed, column=None, schema=None, who="jb.map")
        data = drawn.dataset
    batches, shapes, length_column = _batches(fun, data, planner, batch_size, memory_budget)
    loop = BatchLoop(fun, settings, batches, length_column)
    loop.compile_ahead(shapes)
    stats = loop.stats
    outputs: dict[int, Any] = {}
    quarantine: list[dict[str, Any]] = []
    bar = _progress_bar(progress)
    try:
        seen = 0
        for parts in loop.run(batches):
            for ran in parts:
                quarantine.extend(ran.bad)
                outputs.update(_outputs(ran))
            if bar is not None:
                bar(stats.examples - seen, stats)
            seen = stats.examples
        if isinstance(batches, Loader):  # Bad records the loader set aside, too.
            quarantine.extend(dict(q, batch=None, stage="loader") for q in batches.quarantine)
    finally:
        loop.close()
        if isinstance(batches, Loader) and batches is not data:
            batches.close()  # The loader jb.map made for a Dataset.
    result = _finish(stats, outputs, quarantine, bar)
    if drawn is not None:
        positions = np.fromiter(outputs, np.int64, len(outputs))
        stats.sources = drawn.shares([drawn.tally(positions)])
        result.source_index, result.example_index = drawn.sources, drawn.examples
    return result


def _outputs(ran: Ran) -> dict[int, Any]:
    """The part's kept examples' outputs, padding removed."""
    if ran.batch.is_graphs:  # The layout: each leaf's role (node, edge, graph).
        return per_example_outputs(ran.outputs, ran.batch, ran.layout, ran.keep)
    per_token = unbatch_per_token(ran.outputs, ran.layout)
    bad = {q["example"] for q in ran.bad}
    return {
        e: v
        for e, v in unbatch(ran.outputs, ran.batch, per_token=per_token).items()
        if e not in bad
    }


def _finish(stats, outputs, quarantine, bar):
    if bar is not None:
        bar(0, stats, done=True)
    # Each back-off may give every shape one new chunk shape.
    expected_shapes = stats.expected_shapes
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
        # batch_size is checked even with a planner, but a PatchPack's rows are
        # its own: fun takes a packed row, not the one image "auto" would try.
        if not (isinstance(planner, PatchPack) and batch_size == "auto"):
            rows = rows_for(fun, data, batch_size, memory_budget)
        planner = planner or default_planner(rows)
        loader = Loader(data, planner, shuffle=False)
        return loader, loader.shapes, loader._length_column
    return data, None, getattr(data, "length_column", "")
