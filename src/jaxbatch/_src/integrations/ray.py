"""jaxbatch.ray.run: a jb.run job on a Ray cluster, exactly once.

The driver (the process that calls it) does what only one process may do:
it opens the source, keys the job and claims its output folder exactly as
jb.run does (the same fingerprint, journal, folder rules and report), plans
the whole input once in the engine and cuts the plan into work units of
about ``checkpoint_every`` examples (the engine's CutIntoUnits: a unit is a
shard). Warm Ray actors run units: each gets its unit's slice of the plan
(SliceBatches, O(its examples)), collates and runs it through jb.map's
batch loop and commits the unit's output as ``part-<unit>.parquet`` once
(written aside, fsync'd, linked into place only if no other attempt got
there first). The driver appends each unit's record to the journal in the
output folder as it returns: the record is the commit point, so rerunning
the same call after the driver dies settles the folder as jb.run does (an
unrecorded unit's file is deleted and redone) and runs the rest.

Failures are Ray's to handle, configured here: an actor that dies (its
process killed, its node gone) is restarted (``max_restarts``) and the
calls it held are retried on it (``max_task_retries``); nothing here
schedules, retries or tracks membership itself.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jaxbatch import _core
from jaxbatch._src.base.interrupt import raise_lost
from jaxbatch._src.base.optional import require
from jaxbatch._src.collate.collate import pad_values
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.grids import Axes
from jaxbatch._src.data.opening import open_source
from jaxbatch._src.execute.batch_loop import default_planner, rows_for
from jaxbatch._src.execute.memory import Auto, counting
from jaxbatch._src.integrations.ray_units import UnitRunner, WorkerJob, check_settings
from jaxbatch._src.job.folder import JobError, begin_run, claim, reconcile
from jaxbatch._src.job.job import (
    DEFAULT_CHECKPOINT_EVERY,
    KEYED,
    JobReport,
    check_checkpoint_every,
    job_fingerprint,
    journal_report,
    planner_from,
    planner_record,
    run_differences,
)
from jaxbatch._src.job.progress import ProgressBar
from jaxbatch._src.load.loader import LoaderOptions, OnError
from jaxbatch._src.plan.plan import plan as plan_batches
from jaxbatch._src.plan.planners import GRAPH_PLANNERS, PATCH_PLANNERS, Planner

log = logging.getLogger("jaxbatch")

WHO = "jaxbatch.ray.run"
#: Units queued on each actor at once: the next is there when one ends.
UNITS_IN_FLIGHT = 2
#: How often the driver looks up from waiting (Ctrl-C, progress).
_POLL_SECONDS = 0.2
#: Restarts of a dead actor, and retries of each call it held, unless told.
DEFAULT_MAX_RETRIES = 3
_LOADER = LoaderOptions()


def run(
    fun: Callable,
    source: Dataset | str | os.PathLike,
    output: str | os.PathLike,
    *,
    planner: Planner | None = None,
    column: str | None = None,
    columns: list[str] | None = None,
    batch_size: int | Auto = "auto",
    memory_budget: int | Auto | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    on_error: OnError = _LOADER.on_error,
    check_finite: bool = False,
    check: Callable | None = None,
    pad_value: float | Mapping[str, float] = _LOADER.pad_value,
    axes: Axes | None = None,
    progress: bool = True,
    overwrite: bool = False,
    tag: str | None = None,
    name: str | None = None,
    workers: int = 1,
    num_cpus: float = 1,
    num_gpus: float = 0,
    resources: Mapping[str, float] | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> JobReport:
    """Runs ``fun`` over every example of ``source`` on the Ray cluster this
    process is connected to (``ray.init(address=...)``; a local one is
    started when there is none) and writes the outputs to ``output``,
    resumably and exactly once: the same call, keywords and output as
    :func:`jaxbatch.run`, read back with :func:`jaxbatch.read_output` (or
    ``ray.data.read_parquet(output)``).

    * ``source``: a path every node can read at the same place (Parquet,
      Arrow IPC, a folder of .npy, read whole or memory-mapped, not
      streamed), or a :class:`Dataset` (a file's is reopened on each node;
      one built in memory travels through Ray's object store). A mixture
      is refused: :func:`jaxbatch.run` processes one pass of one.
    * ``output``: a folder every node can write at the same place (a
      shared filesystem): the workers write the units' files, the driver
      the journal and report.
    * ``checkpoint_every``: examples per work unit (and per output shard).
    * ``workers`` actors, each with ``num_cpus``, ``num_gpus`` and custom
      ``resources`` (``{"TPU": 4}``); a dead actor is restarted up to
      ``max_retries`` times and each unit it held retried as often.
    * ``on_error``, ``check_finite``, ``check``: as for :func:`jaxbatch.run`
      (a function's flagged examples raised, skipped or quarantined).

    Returns the :class:`JobReport` (``workers`` breaks it down per worker),
    also written to ``output/report.json``.

    Example::

        ray.init(address="auto")
        report = jaxbatch.ray.run(embed, "/shared/corpus.parquet", "/shared/out/",
                                  column="tokens", workers=8, num_gpus=1,
                                  planner=jb.AutoBuckets(8, token_budget=16384))
    """
    start_time = time.perf_counter()
    ray = require("ray", WHO)
    require("pyarrow", f"{WHO} (it writes Parquet)")
    raise_lost()
    check_checkpoint_every(checkpoint_every, WHO)
    _check_pool(workers, max_retries)
    if planner is not None:
        _refuse_planner(planner)
    options = LoaderOptions(
        columns=columns,
        column=column,
        shuffle="none",
        epochs=1,
        pad_value=pad_value,
        axes=axes,
        who=WHO,
    )
    opened = open_source(source, options, who=WHO)
    if opened.stream is not None:
        raise ValueError(f"{WHO}: {source} is streamed; the workers read a source whole")
    dataset, length_column = opened.dataset, opened.length_column
    _core.check_pad_values(dataset._core, pad_values(pad_value, WHO)[0], WHO)
    settings = check_settings(check_finite, check, on_error, WHO)
    keyed = dict(name=name, tag=tag, planner=planner, batch_size=batch_size, check=check)
    keyed.update(memory_budget=memory_budget, check_finite=check_finite, on_error=on_error)
    keyed.update(pad_value=pad_value, checkpoint_every=checkpoint_every)
    fingerprint = job_fingerprint(fun, opened, schema=None, shard=(0, 1), **keyed)
    fingerprint["options"]["runner"] = "ray"  # Its shards are units: jb.run cannot resume it.
    folder, journal = claim(Path(output), overwrite=overwrite, inputs=opened.inputs, who=WHO)
    with journal:
        given = {"schema": None, "pad_value": pad_value}
        reconcile(folder, journal, run_differences(journal.records, fingerprint, given), KEYED)
        if journal.records:
            resolved = planner_from(journal.records[0]["planner"])
            memory_plan = None
        else:
            with counting() as memory_plan:
                resolved = planner or default_planner(
                    rows_for(fun, dataset, batch_size, memory_budget)
                )
        plan = plan_batches(dataset, resolved, column=length_column)
        bounds = _core.cut_into_units(plan._core, int(checkpoint_every))
        units = len(bounds) - 1
        if not journal.records:
            journal.append(
                {
                    "kind": "job",
                    "fingerprint": fingerprint,
                    "planner": planner_record(resolved, WHO),
                    "memory_plan": dataclasses.asdict(memory_plan),
                    "source": opened.name if opened.path else "a Dataset",
                    "created": time.time(),
                    "units": units,
                }
            )
        elif journal.records[0].get("units") != units:
            raise JobError(
                f"{WHO}: {folder.path} holds a job cut into {journal.records[0].get('units')} "
                f"units, but its plan now makes {units}; pass overwrite=True to start over"
            )
        shards, done = begin_run(folder, journal, on_error=on_error, workers=workers)
        if not done:
            job = WorkerJob(
                fun,
                dataset,
                resolved,
                length_column,
                settings,
                pad_value,
                plan.shapes,
                str(folder.path.resolve()),
                on_error,
            )
            left = [u for u in range(units) if u not in {s["shard"] for s in shards}]
            pool = _Pool(
                ray, job, min(workers, len(left)), num_cpus, num_gpus, resources, max_retries
            )
            bar = ProgressBar(progress, dataset.num_examples, _handled(shards), who=WHO, unit="ex")
            try:
                units_plan = _UnitSlices(plan, bounds)
                for record in pool.run(left, units_plan):
                    record["committed"] = time.time()
                    journal.append(record)
                    shards.append(record)
                    bar.update(
                        record["examples"] + len(record["bad"]),
                        padding_eff=f"{_efficiency(shards):.0%}",
                        compiles=sum(s["compilations"] for s in shards),
                        units=f"{len(shards)}/{units}",
                    )
            finally:
                pool.close()
                bar.close()
            journal.append(
                {"kind": "done", "time": time.time(), "loader_quarantine": [], "loader_skipped": 0}
            )
        shards = sorted(shards, key=lambda s: s["shard"])
        report = journal_report(
            folder, journal, dataset.num_examples, shards, time.perf_counter() - start_time
        )
    folder.write_report(report.to_dict())
    return report


class _UnitSlices:
    """Unit u's batches as a plan of their own, made when it is sent."""

    def __init__(self, plan, bounds):
        self.plan, self.bounds = plan, bounds

    def __call__(self, unit: int):
        return _core.slice_batches(
            self.plan._core, int(self.bounds[unit]), int(self.bounds[unit + 1])
        )


def _refuse_planner(planner: Any) -> None:
    planner_record(planner, WHO)
    if isinstance(planner, GRAPH_PLANNERS + PATCH_PLANNERS):
        raise ValueError(
            f"{WHO}: {type(planner).__name__} is not run on a cluster yet (graph batches are "
            f"re-planned after an OOM, and patch packing needs its epoch); use jb.run"
        )


def _check_pool(workers: Any, max_retries: Any) -> None:
    for what, value, least in (("workers", workers, 1), ("max_retries", max_retries, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{WHO}: {what} must be an int >= {least}, found {value!r}")


def _refuse_infeasible(ray, num_cpus, num_gpus, resources) -> None:
    """A worker's resources that the whole cluster does not have: Ray would
    wait for them forever, so the job says so instead."""
    asked = {"CPU": num_cpus, "GPU": num_gpus, **dict(resources or {})}
    have = ray.cluster_resources()
    short = {k: v for k, v in asked.items() if v and have.get(k, 0) < v}
    if short:
        raise ValueError(
            f"{WHO}: each worker asks for {short}, but the cluster has "
            f"{ {k: have.get(k, 0) for k in short} } in all; ask for less per worker "
            f"(num_cpus=, num_gpus=, resources=) or add nodes that have it"
        )


def _handled(shards: list[dict[str, Any]]) -> int:
    return sum(s["examples"] + len(s["bad"]) for s in shards)


def _efficiency(shards: list[dict[str, Any]]) -> float:
    padded = sum(s["padded_elements"] for s in shards)
    return sum(s["real_elements"] for s in shards) / padded if padded else 1.0


class _Pool:
    """The job's actors and the units queued on them: each actor gets up to
    UNITS_IN_FLIGHT units at a time, a new one whenever one returns."""

    def __init__(self, ray, job, workers, num_cpus, num_gpus, resources, max_retries):
        self.ray = ray
        if not ray.is_initialized():
            ray.init()
        _refuse_infeasible(ray, num_cpus, num_gpus, resources)
        remote = ray.remote(UnitRunner).options(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            resources=dict(resources or {}),
            max_restarts=max_retries,
            max_task_retries=max_retries,
        )
        # Held as long as the pool: a restarted actor is made from it again.
        self.job_ref = ray.put(job)
        self.actors = [remote.remote(self.job_ref, f"worker-{i}") for i in range(workers)]

    def run(self, units: list[int], slice_of: Callable[[int], Any]):
        """Yields each unit's record as it returns (in no fixed order)."""
        queue = collections.deque(units)
        running: dict[Any, tuple[int, Any]] = {}
        load = dict.fromkeys(range(len(self.actors)), 0)
        while queue or running:
            for i, actor in enumerate(self.actors):
                while queue and load[i] < UNITS_IN_FLIGHT:
                    unit = queue.popleft()
                    running[actor.run_unit.remote(unit, slice_of(unit))] = (unit, i)
                    load[i] += 1
            ready, _ = self.ray.wait(list(running), num_returns=1, timeout=_POLL_SECONDS)
            raise_lost()
            for ref in ready:
                unit, i = running.pop(ref)
                load[i] -= 1
                yield self._result(ref, unit)

    def _result(self, ref, unit: int) -> dict[str, Any]:
        exceptions = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except exceptions.RayTaskError as e:  # The function's own error, as it was raised.
            raise e.as_instanceof_cause() from None
        except exceptions.RayActorError as e:
            raise JobError(
                f"{WHO}: the worker running unit {unit} died and was restarted as often as "
                f"max_retries allows ({e}); the committed units are kept: run the same call "
                f"again to resume"
            ) from e

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
