"""The batch loop jb.map and jb.run share, in one place.

:class:`BatchLoop` runs every batch through the :class:`Executor` (an OOM
split-and-retry around it: rows for sequences, a re-plan for graphs) and
yields, per batch, what ran: each part's outputs, flags, the slots to keep
and the examples the checks flagged (or raises for the first, under
``on_error="raise"``). What happens to the outputs is the caller's: jb.map
gathers them in a dict, jb.run's writer puts them in Parquet shards. The
options both take are one :class:`LoopSettings`; the defaults they share
(the default planner, its batch size on CPU, the back-off) are named here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import numpy as np

from jaxbatch._src.base.choices import check_choice
from jaxbatch._src.collate import keys
from jaxbatch._src.collate.collate import Batch, GraphRole, collate
from jaxbatch._src.execute.executor import Executor
from jaxbatch._src.execute.failures import CHECK, FINITE, is_oom
from jaxbatch._src.execute.graph_batches import GraphOomSplitter, example_index
from jaxbatch._src.execute.memory import Auto, max_batch_size_for
from jaxbatch._src.execute.output_layout import per_token_leaves
from jaxbatch._src.load.loader import LoaderOptions
from jaxbatch._src.plan.plan import plan
from jaxbatch._src.plan.planners import (
    GRAPH_PLANNERS,
    AutoBuckets,
    Pack,
    PadToMax,
    PatchPack,
    Planner,
)

log = logging.getLogger("jaxbatch")

#: Rows per batch when batch_size="auto" cannot be planned from device memory (CPU).
DEFAULT_CPU_BATCH_SIZE = 32
#: Shapes of the default planner, AutoBuckets(DEFAULT_MAX_SHAPES, batch_size=...).
DEFAULT_MAX_SHAPES = 8
#: After an OOM, a batch runs in chunks of this share of the rows that failed.
DEFAULT_BACKOFF = 0.9
DEFAULT_MIN_BATCH_SIZE = 1

#: A batch that runs out of device memory: split it and retry, or re-raise.
OnOom = Literal["split", "raise"]
#: An example whose check fails: raise, or set it aside in result.quarantine.
MapOnError = Literal["raise", "quarantine"]
#: The engine's bad-record default ("raise") is the checks' too.
DEFAULT_ON_ERROR: MapOnError = LoaderOptions.on_error  # type: ignore[assignment]
DEFAULT_ON_OOM: OnOom = "split"


# --- settings --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """How the loop runs the function: its checks and what a failed one
    does, what an OOM does, and for graphs the function's view (see
    :func:`jaxbatch.map`). ``caller`` names the API in messages; ``hint``
    says how to go on past a flagged example."""

    check_finite: bool = False
    check: Callable | None = None
    on_error: MapOnError = DEFAULT_ON_ERROR
    on_oom: OnOom = DEFAULT_ON_OOM
    backoff: float = DEFAULT_BACKOFF
    min_batch_size: int = DEFAULT_MIN_BATCH_SIZE
    per_example: bool | None = None
    per: GraphRole | Mapping[str, GraphRole] | None = None
    caller: str = "jb.map"
    hint: str = "on_error='quarantine'"

    def __post_init__(self) -> None:
        check_choice(self.caller, "on_oom", self.on_oom, OnOom)
        check_choice(self.caller, "on_error", self.on_error, MapOnError)
        if not 0 < self.backoff < 1:
            raise ValueError(
                f"{self.caller}: backoff must be between 0 and 1, found {self.backoff!r}"
            )
        size = self.min_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{self.caller}: min_batch_size must be an int >= 1, found {size!r}")


# --- what one batch gave ---------------------------------------------------


@dataclasses.dataclass
class Ran:
    """One part of a batch as it ran (the batch itself, or one of the
    batches a graph batch's graphs were re-planned into): the outputs (numpy,
    batch layout), flags laid out as its example index (per row, segment or
    graph slot), ``keep`` (the slots whose
    outputs stand: real and not flagged), the flagged examples
    (``{"example", "batch", "reason"}``) and ``layout``: which output leaves
    are per token (a graph batch's: each leaf's role)."""

    batch: Batch
    outputs: Any
    flags: np.ndarray
    keep: np.ndarray
    bad: list[dict[str, Any]]
    layout: list


def flag_reason(flag: int) -> str:
    """Why the compiled checks flagged an example."""
    reasons = []
    if flag & FINITE:
        reasons.append("an output is not finite (NaN or Inf)")
    if flag & CHECK:
        reasons.append("check returned False")
    return " and ".join(reasons)


# --- the loop --------------------------------------------------------------


class BatchLoop:
    """The executor and its OOM splitter for one run over `batches` (a
    Loader, or any iterable of collated batches); ``shapes`` (the plan's,
    None when unknown) are compiled ahead of their first batch."""

    def __init__(self, fun: Callable, settings: LoopSettings, batches: Any, length_column: str):
        self.settings = settings
        self.executor = Executor(fun, settings.check_finite, settings.check, length_column)
        self.stats = self.executor.stats
        self.planner = getattr(batches, "planner", None)  # A Loader's; None for an iterable
        self.graph = isinstance(self.planner, GRAPH_PLANNERS)
        self.splitter = (
            GraphOomSplitter(
                self.executor, settings.on_oom, batches, settings.per_example, settings.per
            )
            if self.graph
            else OomSplitter(self.executor, settings)
        )
        self._layouts: dict[Any, list] = {}

    def compile_ahead(self, shapes: list | None) -> None:
        """Counts the plan's shapes (None: unknown) and compiles them ahead
        (graph batches compile as they come: their layout is known at the
        first)."""
        if shapes is None:
            return
        self.stats.expected_shapes = len(shapes)
        if not self.graph:
            self.executor.compile_ahead(shapes, isinstance(self.planner, Pack | PatchPack))

    def run(self, batches: Iterable[Batch]) -> Iterator[list[Ran]]:
        """Each batch's parts as they ran, in order; ``stats`` counts the
        batches, the examples (flagged ones too) and the time waited for each
        batch."""
        it = iter(batches)
        while True:
            start = time.perf_counter()
            batch = next(it, None)
            self.stats.load_seconds += time.perf_counter() - start
            if batch is None:
                return
            ran = [self._ran(*piece) for piece in self.splitter.pieces(batch)]
            self.stats.batches += 1
            yield ran

    def close(self) -> None:
        self.executor.close()

    def _ran(self, part: Batch, out: Any, flags: np.ndarray) -> Ran:
        index = example_index(part)
        real = index >= 0
        # Flags per row, per graph slot or per segment; a row's flag covers its segments.
        flags = np.asarray(flags).reshape(np.shape(flags) + (1,) * (index.ndim - np.ndim(flags)))
        flags = np.broadcast_to(flags, index.shape)
        ok = flags == 0
        flagged = real & ~ok
        rows = np.nonzero(flagged)[0]
        bad = [
            {"example": int(e), "batch": self.stats.batches, "reason": flag_reason(int(f))}
            for e, f in zip(index[flagged], flags[flagged], strict=True)
        ]
        if bad and self.settings.on_error == "raise":
            raise ValueError(
                f"{self.settings.caller}: example {bad[0]['example']} (batch "
                f"{self.stats.batches if part.index is None else part.index}, row {int(rows[0])}): "
                f"{bad[0]['reason']}; pass {self.settings.hint} to set such examples aside "
                f"and continue"
            )
        self.stats.examples += int(real.sum())
        signature = tuple((k, np.shape(v)) for k, v in part.items())
        if signature not in self._layouts:
            self._layouts[signature] = self.splitter.layout(part, out)
        return Ran(part, out, flags, real & ok, bad, self._layouts[signature])


# --- sequences: split the rows after an OOM --------------------------------


class OomSplitter:
    """Runs a batch through an Executor whole or, after an out-of-memory
    error, in chunks of fewer rows (each chunk padded to the same row count,
    so one shape per limit); the lowered limit is kept for later batches.
    (Graph batches: graph_batches.GraphOomSplitter, with the same face.)"""

    def __init__(self, executor: Executor, settings: LoopSettings):
        if settings.per_example is False or settings.per is not None:
            raise ValueError(
                f"{settings.caller}: per_example=False and per= are for graph batches "
                f"(GraphBudget, GraphBuckets); a sequence function is always per example"
            )
        self.executor, self.settings = executor, settings
        self.stats = executor.stats
        self.oom_limit: int | None = None

    def pieces(self, batch: Batch) -> list[tuple[Batch, Any, np.ndarray]]:
        """[(batch, outputs, flags)]: the batch's results, in the
        shape graph batches give theirs (which may come in several batches)."""
        if getattr(batch, "is_graphs", False):
            raise TypeError(
                f"{self.settings.caller}: graph batches come from a jb.Loader (or a Dataset with "
                f"planner=jb.GraphBudget(...)): pass that, not an iterable of its batches, so "
                f"that a batch that runs out of memory can be re-planned"
            )
        out, flags = self(batch)
        return [(batch, out, flags)]

    def layout(self, batch: Batch, out: Any) -> list[bool]:
        """Which output leaves are per token."""
        return per_token_leaves(self.executor.fun, batch)

    def __call__(self, batch: Batch) -> tuple[Any, np.ndarray]:
        """The batch's outputs (numpy, one leading row axis) and flags (per row,
        or per segment of a packed row)."""
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
                if not is_oom(e) or self.settings.on_oom == "raise":
                    raise
                limit = self._back_off(limit, e)
                continue
            count = stop - start
            pieces.append((_tree_slice(out, count), flags[:count]))
            start = stop
        return _concat([p for p, _ in pieces]), np.concatenate([f for _, f in pieces])

    def _back_off(self, limit: int, error: Exception) -> int:
        stats, least, who = self.stats, self.settings.min_batch_size, self.settings.caller
        if limit <= least:
            raise RuntimeError(
                f"{who}: out of memory at {limit} rows per chunk, already at "
                f"min_batch_size={least} (batch {stats.batches}, back-offs so far: "
                f"{stats.backoffs}); reduce the batch shape or the function's memory use"
            ) from error
        new = max(least, min(limit - 1, int(limit * self.settings.backoff)))
        log.warning("%s: out of memory at %d rows; retrying with %d", who, limit, new)
        stats.backoffs.append((limit, new))
        self.oom_limit = new
        stats.rows_limit = new
        return new


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


def _tree_slice(tree, count):
    import jax

    return jax.tree_util.tree_map(lambda x: x[:count], tree)


def _concat(trees):
    import jax

    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *trees)


# --- the default planner ---------------------------------------------------


def default_planner(rows: int) -> Planner:
    """What jb.map and jb.run plan when given no planner: AutoBuckets of
    DEFAULT_MAX_SHAPES shapes and `rows` per batch (:func:`rows_for`)."""
    return AutoBuckets(DEFAULT_MAX_SHAPES, batch_size=rows)


def rows_for(fun: Callable, dataset: Any, batch_size: int | Auto, memory_budget) -> int:
    """``batch_size``, checked, or for "auto" the rows that fit the memory
    budget (the device's free memory by default; on CPU, which reports
    none, DEFAULT_CPU_BATCH_SIZE)."""
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
