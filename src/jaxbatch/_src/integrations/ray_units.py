"""What a Ray worker runs: planned batches through jb.map's batch loop.

A worker (a warm actor of :func:`jaxbatch.ray.run`, or the Ray Data stage)
holds one :class:`BatchLoop`: one jit cache, the plan's shapes compiled
ahead, OOM split-and-retry and the checks. It collates the batches of a
plan it is given (a unit's slice of the job's plan, or a block's own plan)
in the engine and gathers the outputs as jb.run's writer does; a unit's are
then committed under the unit's name, once (:meth:`UnitRunner.run_unit`).
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.collate import keys
from jaxbatch._src.collate.collate import Batch, collate
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.execute.batch_loop import BatchLoop, LoopSettings, Ran
from jaxbatch._src.execute.output_layout import Column
from jaxbatch._src.job.folder import shard_name, shard_record
from jaxbatch._src.job.job import ran_columns, shard_work
from jaxbatch._src.job.output import concat_columns, encode_parquet, to_table
from jaxbatch._src.plan.plan import BatchPlan, BatchShape
from jaxbatch._src.plan.planners import PatchPack, Planner

_STAGES = ("loading", "compiling", "computing", "writing")


@dataclasses.dataclass
class Gathered:
    """A plan's batches as they ran: the kept examples' indices (ascending)
    and output columns, the examples the checks flagged (with their
    reasons, each once), and the real and padded elements collated."""

    examples: np.ndarray
    columns: dict[str, Column] | None
    bad: list[dict[str, Any]]
    real_elements: int
    padded_elements: int


class PlanRunner:
    """A BatchLoop over a dataset's planned batches, warm across plans."""

    def __init__(
        self,
        fun: Callable,
        settings: LoopSettings,
        planner: Planner | PatchPack,
        length_column: str,
        pad_value: float | Mapping[str, float],
        shapes: list[BatchShape] | None,
    ):
        self.planner, self.pad_value = planner, pad_value
        # BatchLoop reads the planner off what it runs over (a Loader's).
        self.loop = BatchLoop(fun, settings, _Planned(planner), length_column)
        self.loop.compile_ahead(shapes)

    def run(self, dataset: Dataset, plan: BatchPlan) -> Gathered:
        """Every batch of `plan` over `dataset`, gathered in example order."""
        pending: list[tuple[np.ndarray, dict[str, Column]]] = []
        bad: list[dict[str, Any]] = []
        real = padded = 0
        for parts in self.loop.run(self._batches(dataset, plan)):
            for ran in parts:
                examples, columns = ran_columns(ran)
                pending.append((examples, columns))
                bad.extend(ran.bad)
                r, p = _elements(ran)
                real, padded = real + r, padded + p
        examples = np.concatenate([e for e, _ in pending]) if pending else np.zeros(0, np.int64)
        columns = concat_columns([c for _, c in pending]) if pending else None
        order = np.argsort(examples, kind="stable")
        if columns is not None:
            columns = {name: _take(column, order) for name, column in columns.items()}
        return Gathered(examples[order], columns, bad, real, padded)

    def _batches(self, dataset: Dataset, plan: BatchPlan):
        for spec in plan:
            yield collate(dataset, spec, pad_value=self.pad_value)

    @property
    def stats(self):
        return self.loop.stats

    def close(self) -> None:
        self.loop.close()


class _Planned:
    """What BatchLoop asks of the batches it runs over: their planner."""

    def __init__(self, planner: Planner | PatchPack):
        self.planner = planner


def _elements(ran: Ran) -> tuple[int, int]:
    """The real and padded elements of a batch as it ran (a part after an
    OOM split counts its own rows): what the Loader counts per batch."""
    batch: Batch = ran.batch
    index = np.asarray(batch[keys.EXAMPLE_INDEX])
    lengths = np.asarray(batch[keys.example_lengths(batch, batch.length_column)])
    real = int(lengths[index >= 0].sum())
    shape = batch.shape
    padded = index.shape[0] * shape.length * (shape.width or 1)
    return real, padded


def _take(column: Column, order: np.ndarray) -> Column:
    """A column's examples in `order` (a per-token column's tokens with them)."""
    if column.lengths is None:
        return Column(column.values[order])
    offsets = np.zeros(len(column.lengths) + 1, np.int64)
    np.cumsum(column.lengths, out=offsets[1:])
    lengths = column.lengths[order]
    # Token t of the result is token (t - its example's first) of the example.
    firsts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=firsts[1:])
    tokens = np.arange(int(lengths.sum())) + np.repeat(offsets[:-1][order] - firsts, lengths)
    return Column(column.values[tokens], lengths)


# --- a job's unit: run, then committed once under its name --------------------


@dataclasses.dataclass
class WorkerJob:
    """Everything a job's worker needs, sent once (Ray's object store): the
    function, the dataset (a file's pickles as the recipe that opens it
    again, memory-mapped, checking the file is unchanged), how to run it
    and where its units go."""

    fun: Callable
    dataset: Dataset
    planner: Planner | PatchPack
    length_column: str
    settings: LoopSettings
    pad_value: float | Mapping[str, float]
    shapes: list[BatchShape]
    output: str
    on_error: str


class UnitRunner:
    """A warm worker of one job (a Ray actor): its PlanRunner compiled the
    job's shapes when it started; each call runs one work unit and commits
    its output. A restarted actor (Ray's max_restarts) starts here again."""

    def __init__(self, job: WorkerJob, worker: str):
        self.job, self.worker, self.node = job, worker, _node()
        self.runner = PlanRunner(
            job.fun,
            job.settings,
            job.planner,
            job.length_column,
            job.pad_value,
            job.shapes,
        )
        # From zero: the first unit's record counts the compilations ahead
        # (made in the background as the worker starts), so each worker's
        # add up to all it compiled.
        self.mark = dict.fromkeys(_tally(self.runner.stats), 0.0)

    def run_unit(self, number: int, plan: Any) -> dict[str, Any]:
        """Runs unit `number` (its slice of the job's plan, an engine plan)
        and commits its output as shard `number`; returns the unit's shard
        record for the job's journal."""
        gathered = self.runner.run(self.job.dataset, BatchPlan(plan, self.job.planner))
        t0 = time.perf_counter()
        data = encode_parquet(to_table(gathered.examples, gathered.columns or {}))
        path = str(Path(self.job.output) / shard_name(number))
        # Written aside and linked into place only if no other attempt of the
        # unit got there first: a retried or duplicated unit commits once.
        if not _core.publish_file_once(path, data):
            data = _core.read_owned_file(path)  # The first attempt's output stands.
        writing = time.perf_counter() - t0
        now = _tally(self.runner.stats)
        spent = {k: now[k] - self.mark[k] for k in now}
        self.mark = now
        stage = "function" if self.job.on_error == "quarantine" else "function-skip"
        bad = [
            {"example": b["example"], "reason": b["reason"], "stage": stage} for b in gathered.bad
        ]
        spent.update(
            writing=writing,
            real_elements=gathered.real_elements,
            padded_elements=gathered.padded_elements,
        )
        worker = {
            "id": self.worker,
            "node": self.node,
            "pid": os.getpid(),
            "peak_host_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        }
        work = shard_work(len(gathered.examples), bad, None, spent)
        return shard_record(number, data, **work, worker=worker)

    def pid(self) -> int:
        """This worker's process id (the failure tests kill it)."""
        return os.getpid()


def check_settings(check_finite: bool, check: Callable | None, on_error: str, who: str):
    """The batch loop's settings for a job's or a stage's checks: a flagged
    example raises, or is set aside (skipped or quarantined: the caller
    records which)."""
    return LoopSettings(
        check_finite,
        check,
        on_error="raise" if on_error == "raise" else "quarantine",
        caller=who,
        hint="on_error='quarantine' (or 'skip')",
    )


def _node() -> str:
    """The Ray node this worker runs on (its id's first hex digits)."""
    import ray

    return ray.get_runtime_context().get_node_id()[:12]


def _tally(stats) -> dict[str, float]:
    """The loop's times and compilations so far, by the names records use."""
    names = ("loading", "load_seconds"), ("compiling", "compile_seconds")
    names += ("computing", "run_seconds"), ("compilations", "compilations")
    return {name: getattr(stats, field) for name, field in names}
