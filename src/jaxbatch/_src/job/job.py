"""jb.run: a resumable, exactly-once batch job over a data source.

A job streams its source through a :class:`Loader` and the jb.map executor
(OOM split-and-retry, per-example checks, compile accounting) and writes
per-example outputs, keyed by example index, to Parquet shards in its output
folder. After each shard is durably on disk the job appends one record to
its journal (C++: append-only, checksummed, fsync'd): the shard's file, size
and hash, what it holds, and the loader state that follows it. That record
is the commit point, so after a crash or ``kill -9`` at any moment
re-running the same call redoes exactly the work after the last record:

* a shard file with no record (killed before the journal append) is
  deleted and redone; a torn journal tail is cut off (by the writer only:
  :func:`read_output` never changes a file);
* a recorded shard whose file is missing, truncated or corrupt (size or
  hash differ) is redone, with every shard after it;
* the finished output holds every example exactly once, the same as an
  uninterrupted run's.

The first record keys the job on its function, input and options; a run
with a different one in the same folder is refused (``overwrite=True``
starts over). The folder's files and which of them the job owns are
:mod:`jaxbatch._src.job.folder`'s.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import resource
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.interrupt import raise_lost
from jaxbatch._src.base.optional import require
from jaxbatch._src.base.words import counted
from jaxbatch._src.collate.collate import GraphRole, pad_values
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.data.grids import Axes
from jaxbatch._src.data.mixture import Mixture, SourceShare
from jaxbatch._src.data.opening import open_source
from jaxbatch._src.execute.batch_loop import (
    BatchLoop,
    LoopSettings,
    Ran,
    default_planner,
    rows_for,
)
from jaxbatch._src.execute.graph_batches import example_index, graph_columns
from jaxbatch._src.execute.memory import Auto, PlanCount, counting
from jaxbatch._src.job.chain import Place, differs_from_recorded, place
from jaxbatch._src.job.folder import (
    JobError,
    Journal,
    begin_run,
    claim,
    committed_any,
    reconcile,
    run_totals,
    start_over,
    write_shard,
)
from jaxbatch._src.job.key import (
    function_fingerprint,
    function_key,
    pad_key,
    same_as_recorded_text,
    schema_key,
)
from jaxbatch._src.job.output import batch_columns, concat_columns, encode_parquet, to_table
from jaxbatch._src.job.progress import ProgressBar
from jaxbatch._src.load.loader import (
    ColumnSchema,
    Loader,
    LoaderOptions,
    OnError,
    Shard,
    loader_for,
    resolve_shard,
)
from jaxbatch._src.load.mixture_pass import draw_pass, refuse_seed
from jaxbatch._src.plan.planners import (
    GRAPH_PLANNERS,
    PATCH_PLANNERS,
    PLANNERS,
    AutoBuckets,
    FixedBuckets,
    Pack,
    PadToMax,
    PatchPack,
    Planner,
    planner_from_key,
    planner_key,
    refuse_several_features,
    refuse_split,
    same_planner,
)

log = logging.getLogger("jaxbatch")

#: Examples per output shard (and per journal record) unless checkpoint_every says otherwise.
DEFAULT_CHECKPOINT_EVERY = 8192
# 2: on_error and checkpoint_every are keyed on; shards are named in a
# "writing" record before they are written. 3: schema and pad_value are
# keyed as the engine takes them (key.py), not as Python text. Jobs of
# formats 1 and 2 resume.
_FORMAT_VERSION = 3
_FORMATS_RESUMED = (1, 2, 3)
_OPTIONS_ADDED = ("on_error", "checkpoint_every")  # in format 2
_OPTIONS_REKEYED = ("schema", "pad_value")  # in format 3: text before
#: What a job's key covers, for the refusal of a changed job (folder.reconcile).
KEYED = "function, input or options"
#: The Loader's defaults (the engine's), which a job's loader options share.
_LOADER = LoaderOptions()


@dataclasses.dataclass
class JobReport:
    """What a job did, over all its runs (a resumed job adds up its shards).

    ``examples`` were written; ``skipped`` and ``quarantined`` were not (the
    loader's bad records and the function's failed checks, each with its
    reason in ``quarantine``). ``repairs`` lists the journal damage runs
    found and cut (a torn record from a crash, a corrupt one), each with
    the byte and record where it began, why, and the records dropped.
    ``seconds`` splits the committed work into loading, compiling, computing
    and writing; ``padding_efficiency`` is real over padded elements of the
    batches run. ``peak_host_bytes`` and ``peak_device_bytes`` are this run's."""

    output: str
    complete: bool
    total: int
    examples: int
    skipped: int
    quarantined: int
    quarantine: list[dict[str, Any]]
    shards: int
    runs: int
    redone_shards: int
    compilations: int
    seconds: dict[str, float]
    wall_seconds: float
    real_elements: int
    padded_elements: int
    peak_host_bytes: int
    peak_device_bytes: int | None
    repairs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The compilations planning batch_size="auto" ran and those the plan
    #: cache saved ({"compiled": n, "cached": m}); None for a job of before.
    memory_plan: dict[str, int] | None = None
    #: A job run by workers (jaxbatch.ray.run): per worker, the units and
    #: examples it committed, its seconds per stage, compilations and peak
    #: host memory (:func:`worker_breakdown`); None for a job of one process.
    workers: list[dict[str, Any]] | None = None
    #: A job over a mixture: each source's part of the examples written
    #: (examples and tokens, each also as a share, beside the weight of the
    #: pass's last block), by name in the mixture's order (``source_index``
    #: numbers them); {} for a job over one dataset.
    sources: dict[str, SourceShare] = dataclasses.field(default_factory=dict)

    @property
    def padding_efficiency(self) -> float:
        return self.real_elements / self.padded_elements if self.padded_elements else 1.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["padding_efficiency"] = self.padding_efficiency
        return out

    def __str__(self) -> str:
        s = self.seconds
        reasons: dict[str, int] = {}
        for q in self.quarantine:
            key = f"{q['stage']}: {q['reason']}"
            reasons[key] = reasons.get(key, 0) + 1
        lines = [
            f"job {self.output}: {'complete' if self.complete else 'NOT complete'}; "
            f"{self.examples} of {counted(self.total, 'example')} written in "
            f"{counted(self.shards, 'shard')} ({counted(self.runs, 'run')}"
            + (
                f", {counted(self.redone_shards, 'damaged shard')} redone"
                if self.redone_shards
                else ""
            )
            + ")",
            f"  skipped {self.skipped}, quarantined {self.quarantined}"
            + "".join(f"\n    {n} x {r}" for r, n in sorted(reasons.items())),
            f"  time: loading {s['loading']:.2f} s, compiling {s['compiling']:.2f} s "
            f"({counted(self.compilations, 'compilation')}), computing {s['computing']:.2f} s, "
            f"writing {s['writing']:.2f} s; this run's wall time {self.wall_seconds:.2f} s",
            f"  padding efficiency {self.padding_efficiency:.1%} ({self.real_elements} real of "
            f"{self.padded_elements} elements)",
            *_memory_plan_line(self.memory_plan),
            *(
                f"  journal repaired: damaged at byte {r['byte']} (record {r['record']}: "
                f"{r['reason']}); {counted(r['dropped'], 'record')} cut, their work redone"
                for r in self.repairs
            ),
            *_source_lines(self.sources),
            *_worker_lines(self.workers),
            f"  peak memory: host {self.peak_host_bytes / 2**20:.0f} MiB"
            + (
                f", device {self.peak_device_bytes / 2**20:.0f} MiB"
                if self.peak_device_bytes is not None
                else ""
            ),
        ]
        return "\n".join(lines)


def _source_lines(sources: dict[str, SourceShare]) -> list[str]:
    """The report's lines on each source of a job over a mixture."""
    if not sources:
        return []
    return [
        f"  source {k} {name!r}: {counted(s.examples, 'example')} ({s.example_share:.1%}), "
        f"{counted(s.tokens, 'token')} ({s.token_share:.1%}); weight {s.weight:.1%}"
        for k, (name, s) in enumerate(sources.items())
    ]


def _worker_lines(workers: list[dict[str, Any]] | None) -> list[str]:
    """The report's lines on each worker of a job on a cluster."""
    if not workers:
        return []
    lines = [f"  {counted(len(workers), 'worker')}:"]
    for w in workers:
        s = w["seconds"]
        lines.append(
            f"    {w['worker']} on {w['node']}: {counted(w['units'], 'unit')}, "
            f"{counted(w['examples'], 'example')}; loading {s['loading']:.2f} s, compiling "
            f"{s['compiling']:.2f} s ({counted(w['compilations'], 'compilation')}), computing "
            f"{s['computing']:.2f} s, writing {s['writing']:.2f} s; peak host "
            f"{w['peak_host_bytes'] / 2**20:.0f} MiB"
        )
    return lines


def _memory_plan_line(memory_plan: dict[str, int] | None) -> list[str]:
    """The report's line on memory planning, where the job planned any."""
    if not memory_plan or not (memory_plan.get("compiled") or memory_plan.get("cached")):
        return []
    return [f"  memory plan: {PlanCount(**memory_plan)}"]


def run(
    fun: Callable,
    source: Dataset | Mixture | str | os.PathLike,
    output: str | os.PathLike,
    *,
    planner: Planner | PatchPack | None = None,
    seed: int | None = None,
    column: str | None = None,
    columns: list[str] | None = None,
    batch_size: int | Auto = "auto",
    memory_budget: int | Auto | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    on_error: OnError = _LOADER.on_error,
    max_errors: int | float | None = None,
    schema: Mapping[str, ColumnSchema] | None = None,
    check_finite: bool = False,
    check: Callable | None = None,
    pad_value: float | Mapping[str, float] = _LOADER.pad_value,
    num_threads: int | None = None,
    prefetch: int | None = None,
    stream: bool | None = None,
    host_memory_limit: int | None = None,
    axes: Axes | None = None,
    progress: bool = True,
    overwrite: bool = False,
    tag: str | None = None,
    name: str | None = None,
    shard: Shard | None = None,
    per_example: bool | None = None,
    per: GraphRole | Mapping[str, GraphRole] | None = None,
    elastic: bool = False,
) -> JobReport:
    """Runs ``fun`` over every example of ``source`` and writes the outputs to
    ``output``, resumably and exactly once.

    ``fun(example)`` takes one example as a collated row (a dict: the
    column ``[L]``, ``<column>_mask [L]``, ...) and returns a pytree, as for
    :func:`jaxbatch.map`. Each leaf becomes a Parquet column of
    ``output/part-NNNNNN.parquet`` beside ``example_index``; read them back
    with :func:`jaxbatch.read_output`. Re-running the same call after a
    crash or kill resumes where the journal says; the finished output is the
    same as an uninterrupted run's.

    * ``source``: a :class:`Dataset` or a path a :class:`Loader` reads
      (Parquet, Arrow IPC, a folder of .npy), with ``columns`` / ``column``,
      opened as the Loader opens it: ``stream`` and ``host_memory_limit``
      as for :class:`Loader`, so a Parquet file larger than memory is read
      by row group (its input is then keyed on its row groups' values, and
      ``batch_size="auto"`` needs a planner or a batch size instead).
      ``axes`` names a file's variable axes and ties as for :class:`Loader`
      (``{"image": ("h", "w")}`` reads images as a grid column); the input
      key holds the axes, so a job resumed with other axes is refused.
    * ``source`` may be a mixture (``jb.Dataset.mix``): the job processes
      one pass of its stream, the draws (in their order) a
      ``jb.Loader(mixture, ..., seed=seed, epochs=1)`` yields, each once
      (with ``exhaustion="restart"`` a source that runs out repeats, as in
      the stream). Rows are keyed on each draw's ``position`` and carry
      ``example_index`` within its source and ``source_index``; the report
      gives each source's examples and tokens written (``sources``). The
      job is keyed on the mixture (each source's data and name, weights,
      unit, exhaustion, block size) and ``seed`` (default the Loader's), so
      a resume with other weights or another seed is refused, naming it.
    * ``planner`` (default ``AutoBuckets(8, batch_size=...)``) and
      ``batch_size`` / ``memory_budget`` as for jb.map (a :class:`PatchPack`
      too: one output per image); the planner is resolved once, on the
      first run, and kept for every resume.
    * ``checkpoint_every``: examples per shard and journal record. A shard
      closes at the first batch end at or past it (the loader's state is
      kept between batches), so a crash costs at most that plus one batch;
      a batch_size="auto" batch on a GPU can hold many examples.
    * ``on_error``: ``"raise"``, ``"skip"`` or ``"quarantine"`` for records
      that break ``schema`` and examples whose ``check_finite``/``check``
      fail; skipped and quarantined examples are not written, and are
      counted (quarantined with their reasons) in the report.
    * ``progress``: a tqdm bar (examples/s, padding efficiency, ETA).
    * ``overwrite=True`` deletes a previous job's files in ``output``;
      otherwise a different function, input or options is refused.
      ``tag`` is keyed on too: name the model version there (the function's
      source is hashed, the values it closes over are not).
    * ``shard``: ``(index, count)`` or ``"jax"`` (``jax.process_index()``,
      ``jax.process_count()``) to run the job on several processes or hosts:
      each runs every ``count``-th batch of the same plan and writes its own
      shards and journal in ``output/process-IIIII-of-NNNNN/``; run them all
      (again, after a crash of any); :func:`jaxbatch.read_output` on
      ``output`` reads every process's part, each example exactly once.
    * ``elastic=True``: continue a job of ``output`` run on another number
      of processes (preempted on 4, back on 3): each process takes what
      every earlier part committed as done (reading, never changing them)
      and runs its share of the examples left, in
      ``output/process-IIIII-of-NNNNN-generation-G/``; without it, a folder
      holding parts of another count is refused.
    * Graphs (``planner`` a :class:`GraphBudget` or :class:`GraphBuckets`):
      ``fun`` gets a padded graph batch, or with ``per_example=True`` one
      graph, as for :func:`jaxbatch.map` (``per=`` likewise); each graph is
      one row: per-node and per-edge outputs a list of its own nodes' or
      edges' values, per-graph outputs one value. An OOM re-plans the
      batch's graphs under half its budget; checks quarantine single graphs.

    Returns the :class:`JobReport`, also written to ``report.json`` in the
    job's folder (``output``, or this process's folder in it with ``shard``).

    Example::

        report = jb.run(embed, "corpus.parquet", "out/", column="tokens",
                        planner=jb.AutoBuckets(8, token_budget=16384))
        vectors = jb.read_output("out/")["output"]
    """
    start_time = time.perf_counter()
    raise_lost()
    require("pyarrow", "jb.run (it writes Parquet)")
    check_checkpoint_every(checkpoint_every)
    if planner is not None:
        planner_record(planner)  # Refused before anything is made on disk.
    graph = isinstance(planner, GRAPH_PLANNERS)  # Planned by node and edge counts: no column.
    # The job's loader reads in example order, once. The source is opened and
    # checked here, before any folder is made, and handed to the loader as it is.
    options = LoaderOptions(
        columns=columns,
        column=column,
        shuffle=False,
        epochs=1,
        shard=shard,
        on_error=on_error,
        max_errors=max_errors,
        schema=schema,
        pad_value=pad_value,
        num_threads=num_threads,
        host_memory_limit=host_memory_limit,
        stream=stream,
        axes=axes,
        **({} if prefetch is None else {"prefetch": prefetch}),
        who="jb.run",
    )
    refuse_seed(source, seed, "jb.run")
    if not isinstance(elastic, bool):
        raise TypeError(f"jb.run: elastic must be a bool, found {elastic!r}")
    drawn = None
    if isinstance(source, Mixture):  # One pass of its stream, as the engine draws it.
        drawn = draw_pass(source, planner, seed=seed, column=column, schema=schema, who="jb.run")
    opened = open_source(
        source if drawn is None else drawn.dataset, options, graphs=graph, who="jb.run"
    )
    if opened.stream is not None and planner is None and batch_size == "auto":
        raise ValueError(
            f"jb.run: batch_size='auto' plans memory from an example's values, which a "
            f"streamed {source} keeps on disk; give planner= or batch_size="
        )
    dataset, length_column = opened.dataset, opened.length_column
    # Before the folder is made, as the Loader's engine checks it.
    _core.check_pad_values(dataset._core, pad_values(pad_value, "jb.run")[0], "jb.run")
    # The function's flagged examples: raised, or set aside (quarantined or skipped).
    settings = LoopSettings(
        check_finite,
        check,
        on_error="raise" if on_error == "raise" else "quarantine",
        per_example=per_example,
        per=per,
        caller="jb.run",
        hint="on_error='quarantine' (or 'skip')",
    )
    options = dataclasses.replace(options, column=length_column)
    shard_index, shard_count = resolve_shard(shard)
    fingerprint = job_fingerprint(
        fun,
        opened,
        name=name,
        tag=tag,
        planner=planner,
        batch_size=batch_size,
        memory_budget=memory_budget,
        schema=schema,
        check_finite=check_finite,
        check=check,
        pad_value=pad_value,
        shard=(shard_index, shard_count),
        on_error=on_error,
        checkpoint_every=checkpoint_every,
        graph=graph,
        per_example=per_example,
        per=per,
        mixture=None if drawn is None else drawn.key(),
    )
    given = {"schema": schema, "pad_value": pad_value}

    def same_job(record: dict[str, Any]) -> list[str]:  # An earlier part's, its shard aside.
        recorded_shard = record["fingerprint"].get("options", {}).get("shard")
        options = {**fingerprint["options"], "shard": recorded_shard}
        return run_differences([record], {**fingerprint, "options": options}, given)

    here = place(
        Path(output),
        shard_index,
        shard_count,
        elastic=elastic,
        same_job=same_job,
        total=dataset.num_examples,
    )
    if here.remaining is not None and opened.stream is not None:
        raise JobError(
            f"jb.run: elastic=True continues a job over a Dataset or a file read whole; "
            f"{source} is streamed by row group (stream=True), which has no view of the "
            f"examples left: run it on the count it began on"
        )
    folder, journal = claim(here.folder, overwrite=overwrite, inputs=opened.inputs)
    with journal:
        reconcile(folder, journal, run_differences(journal.records, fingerprint, given), KEYED)
        if differs_from_recorded(journal.records, here):
            if committed_any(journal):
                raise JobError(
                    f"jb.run: {folder.path} continued other parts than {output} now holds "
                    f"(a part run again, or a shard damaged, since): move this generation's "
                    f"parts away to continue anew"
                )
            start_over(folder, journal)
        if journal.records:
            resolved = planner_from(journal.records[0]["planner"])
        elif here.planner is not None:  # The job continued runs its planner on.
            resolved = planner_from(here.planner)
            plan_count = PlanCount()
        else:
            with counting() as plan_count:
                resolved = planner or default_planner(
                    rows_for(fun, dataset, batch_size, memory_budget)
                )
        if not journal.records:
            journal.append(
                {
                    "kind": "job",
                    "fingerprint": fingerprint,
                    "planner": planner_record(resolved),
                    "memory_plan": dataclasses.asdict(plan_count),
                    "source": opened.name
                    if opened.path
                    else ("a Dataset" if drawn is None else "a mixture"),
                    "created": time.time(),
                    **({"continues": here.continues} if here.continues else {}),
                }
            )
        shards, done = begin_run(folder, journal, on_error=on_error)
        if not done:
            finished: dict[str, Any] = {"loader_quarantine": [], "loader_skipped": 0}
            if here.remaining is None or len(here.remaining):  # Else earlier parts did it all.
                job = _Job(
                    fun,
                    opened,
                    here,
                    resolved,
                    length_column,
                    journal,
                    folder,
                    shards,
                    loader_options=dataclasses.replace(options, shard=(shard_index, shard_count)),
                    settings=settings,
                    checkpoint_every=checkpoint_every,
                    progress=progress,
                    drawn=drawn,
                )
                shards = job.run()
                finished = {
                    "loader_quarantine": job.loader_quarantine,
                    "loader_skipped": job.loader_skipped,
                }
            journal.append({"kind": "done", "time": time.time(), **finished})
        else:
            log.info("jb.run: the job in %s is already complete", folder.path)
        # A shard's total is what it handled.
        total = dataset.num_examples if shard_count == 1 and here.generation == 0 else None
        report = journal_report(folder, journal, total, shards, time.perf_counter() - start_time)
    if drawn is not None:
        report.sources = drawn.shares([s["sources"] for s in shards])
    folder.write_report(report.to_dict())
    return report


def journal_report(folder, journal: Journal, total, shards, wall: float) -> JobReport:
    """The report of a finished job: its shards and every run's start
    record added up (job_report)."""
    runs, redone, repairs = run_totals(journal)
    return job_report(
        folder,
        total,
        shards,
        next(r for r in journal.records if r.get("kind") == "done"),
        runs,
        redone,
        repairs,
        wall,
        memory_plan=journal.records[0].get("memory_plan"),
    )


def job_fingerprint(
    fun: Callable,
    opened,
    *,
    name: str | None,
    tag: str | None,
    planner: Planner | PatchPack | None,
    batch_size: int | Auto,
    memory_budget: int | Auto | None,
    schema: Mapping[str, ColumnSchema] | None,
    check_finite: bool,
    check: Callable | None,
    pad_value: float | Mapping[str, float],
    shard: tuple[int, int],
    on_error: OnError,
    checkpoint_every: int,
    graph: bool = False,
    per_example: bool | None = None,
    per: GraphRole | Mapping[str, GraphRole] | None = None,
    mixture: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the first record keys a job on (its function, input and
    options): a run whose key differs is refused (:func:`run_differences`).
    Shared by every runner of a job (jb.run, jaxbatch.ray.run)."""
    fingerprint = {
        "format": _FORMAT_VERSION,
        "function": name or function_key(fun),
        "function_source": function_fingerprint(fun, tag, "the function"),
        "input": f"{opened.fingerprint:016x}",
        "examples": opened.dataset.num_examples,
        "options": {
            "planner": planner_key(planner),
            "column": opened.length_column,
            "batch_size": batch_size,
            "memory_budget": memory_budget,
            "schema": schema_key(schema),
            "check_finite": check_finite,
            "check": None
            if check is None
            else [function_key(check), function_fingerprint(check, tag, "check=")],
            "pad_value": pad_key(pad_value),
            "tag": tag,
            "shard": list(shard),
            "on_error": on_error,
            "checkpoint_every": int(checkpoint_every),
        },
    }
    if mixture is not None:  # A mixture's options and seed, each by name (DrawnPass.key).
        fingerprint["options"].update(mixture)
    if graph:  # Keyed only where they apply: older jobs resume.
        fingerprint["options"]["per_example"] = bool(per_example)
        fingerprint["options"]["per"] = per if per is None or isinstance(per, str) else dict(per)
    return fingerprint


def check_checkpoint_every(checkpoint_every, who: str = "jb.run") -> None:
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int | np.integer)
        or checkpoint_every < 1
    ):
        raise ValueError(
            f"{who}: checkpoint_every must be an int >= 1 (examples per shard), found "
            f"{checkpoint_every!r}"
        )


def planner_record(planner: Planner | PatchPack, who: str = "jb.run") -> dict[str, Any]:
    """The job record's planner (the engine's key); a planner no job takes is refused."""
    if not isinstance(planner, PLANNERS + PATCH_PLANNERS):
        raise TypeError(f"{who}: planner must be a jaxbatch planner, found {planner!r}")
    refuse_split(planner, who)
    refuse_several_features(planner, who)
    return {"key": planner.key}


def planner_from(record: dict[str, Any]) -> Planner | PatchPack:
    """The planner a job record holds: the engine's key, or (format 1) the
    planner's type and fields."""
    if "key" in record:
        return planner_from_key(record["key"])
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in record["fields"].items()}
    return {c.__name__: c for c in (PadToMax, FixedBuckets, AutoBuckets, Pack)}[record["type"]](
        **fields
    )


def run_differences(records: list[dict], fingerprint: dict, given: dict[str, Any]) -> list[str]:
    """What differs between the job a journal's `records` hold (none for a
    new job) and this call's key (job_fingerprint), for folder.reconcile;
    `given` holds this call's schema and pad_value, for a record of before
    format 3, which keyed them as text. Shared by every runner of a job
    (jb.run, jaxbatch.ray.run)."""
    if not records:
        return []
    old = records[0]["fingerprint"]
    differences = []
    if old.get("format") not in _FORMATS_RESUMED:
        differences.append(f"format: was {old.get('format')!r}, now {fingerprint['format']!r}")
    for key in ("function", "function_source", "input", "examples"):
        if old.get(key) != fingerprint[key]:
            differences.append(f"{key}: was {old.get(key)!r}, now {fingerprint[key]!r}")
    recorded = old.get("options", {})
    for key in sorted(recorded.keys() - fingerprint["options"].keys() - set(_OPTIONS_ADDED)):
        # Keyed by the job's runner but not by this call's (jaxbatch.ray's "runner").
        differences.append(f"option {key}: was {recorded[key]!r}, now not given")
    for key, value in fingerprint["options"].items():
        if key not in recorded and key in _OPTIONS_ADDED:
            continue  # A job of an older format did not record it.
        if key == "planner" and _same_planner_keys(recorded.get(key), value):
            continue
        if key in _OPTIONS_REKEYED and isinstance(recorded.get(key), str):
            if same_as_recorded_text(key, recorded[key], given["schema"], given["pad_value"]):
                continue
        if recorded.get(key) != json.loads(json.dumps(value)):
            differences.append(f"option {key}: was {recorded.get(key)!r}, now {value!r}")
    return differences


def _same_planner_keys(a: Any, b: str) -> bool:
    """Keys of one planner however they were written (an earlier release's
    repr of a tuple of boundaries, say)."""
    if a == b or not isinstance(a, str) or "None" in (a, b):
        return a == b
    try:
        return same_planner(a, planner_from_key(b))
    except ValueError:
        return False


class _Job:
    """One run of a job: the loader from the last committed state, the
    batch loop jb.map runs on, and shards appended as they fill."""

    def __init__(
        self,
        fun,
        opened,
        here: Place,
        planner,
        length_column,
        journal,
        folder,
        shards,
        *,
        loader_options,
        settings,
        checkpoint_every,
        progress,
        drawn=None,
    ):
        self.journal, self.folder, self.shards = journal, folder, list(shards)
        self.drawn = drawn  # A mixture's pass: rows keyed on its positions.
        self.on_error, self.checkpoint_every = loader_options.on_error, checkpoint_every
        # A continued job runs over the examples left (a view); its batches
        # number the view's examples, which `examples` maps back to the input's.
        self.examples = here.remaining
        if self.examples is not None:
            opened = dataclasses.replace(opened, dataset=opened.dataset.select(self.examples))
        count = loader_options.shard[1]
        self.total = -(-opened.dataset.num_examples // count)  # A shard's, about.
        state = shards[-1]["state"] if shards else None
        # The source opened by jb.run, taken as it is: nothing is opened again.
        self.loader = loader_for(opened, planner, loader_options, state)
        self.loop = BatchLoop(fun, settings, self.loader, length_column)
        if not shards:  # A resumed job may need only some shapes: compile as they come.
            self.loop.compile_ahead(self.loader.shapes)
        self.bar = ProgressBar(
            progress, self.total, sum(s["examples"] for s in shards), who="jb.run", unit="ex"
        )
        self.loader_quarantine: list[dict[str, Any]] = []
        self.loader_skipped = 0

    def run(self) -> list[dict]:
        """Runs to the end; returns every shard record of the job."""
        try:
            self._loop()
            self.loader_quarantine = [
                dict(q, stage="loader", example=self._input_index(q["example"]))
                for q in self.loader.quarantine
            ]
            self.loader_skipped = self.loader.stats.skipped
        finally:
            self.loop.close()
            self.loader.close()
            self.bar.close()
        return self.shards

    def _loop(self) -> None:
        pending: list[tuple[np.ndarray, dict]] = []
        bad: list[dict[str, Any]] = []
        written = 0
        mark = self._tally()
        for parts in self.loop.run(_real_batches(self.loader)):
            for ran in parts:
                examples, columns = ran_columns(ran)
                pending.append((examples, columns))
                bad.extend(self._set_aside(ran))
                written += len(examples)
                self.bar.update(
                    len(examples) + len(ran.bad),
                    padding_eff=f"{self.loader.stats.efficiency:.0%}",
                    compiles=self.loop.stats.compilations,
                )
            if written + len(bad) >= self.checkpoint_every:
                mark = self._commit(pending, bad, written, mark)
                pending, bad, written = [], [], 0
        if pending:
            self._commit(pending, bad, written, mark)

    def _set_aside(self, ran: Ran) -> list[dict[str, Any]]:
        """The part's flagged examples as the job records them."""
        stage = "function" if self.on_error == "quarantine" else "function-skip"
        return [
            {"example": self._input_index(b["example"]), "reason": b["reason"], "stage": stage}
            for b in ran.bad
        ]

    def _input_index(self, example: Any) -> Any:
        """The input's index of one of the loader's examples (an array of them too)."""
        return example if self.examples is None else self.examples[example].tolist()

    def _tally(self) -> dict[str, float]:
        """The run's counts so far: the loop's times and compilations, the
        engine's real and padded elements (a shard's are the difference)."""
        loop, loader = self.loop.stats, self.loader.stats
        return {
            "loading": loop.load_seconds,
            "compiling": loop.compile_seconds,
            "computing": loop.run_seconds,
            "compilations": loop.compilations,
            "real_elements": loader.real_elements,
            "padded_elements": loader.padded_elements,
        }

    def _commit(self, pending, bad, written: int, mark: dict[str, float]) -> dict[str, float]:
        """Writes one shard and its journal record (the commit point);
        returns the counts it was recorded at."""
        t0 = time.perf_counter()
        examples = np.concatenate([e for e, _ in pending])
        if self.examples is not None:
            examples = self.examples[examples]
        columns = concat_columns([c for _, c in pending])
        data = encode_parquet(to_table(examples, columns, self.drawn))
        named = write_shard(self.folder, self.journal, len(self.shards), data)
        writing = time.perf_counter() - t0
        now = self._tally()
        spent = {k: now[k] - mark[k] for k in now}
        work = shard_work(written, bad, self.loader.get_state(), {**spent, "writing": writing})
        record = {**named, **work}
        if self.drawn is not None:  # Each source's part, for the report's shares.
            record["sources"] = self.drawn.tally(examples)
        self.journal.append(record)
        self.shards.append(record)
        return now


def shard_work(examples: int, bad: list, state: Any, spent: dict[str, float]) -> dict[str, Any]:
    """What a shard record of jb.run's (or of a work unit's) holds beside
    its file (folder.shard_record): the examples kept and set aside, the
    loader state after them (None for a unit), and from `spent` the seconds
    per stage (loading, compiling, computing, writing) and the counts
    (compilations, real and padded elements) of its work."""
    return {
        "examples": examples,
        "bad": bad,
        "state": state,
        "seconds": {k: spent[k] for k in ("loading", "compiling", "computing", "writing")},
        "compilations": int(spent["compilations"]),
        "real_elements": int(spent["real_elements"]),
        "padded_elements": int(spent["padded_elements"]),
    }


def _real_batches(loader: Loader):
    """The loader's batches but a shard's padding batches (equal step
    counts, nothing to run); a Ctrl-C the garbage collector swallowed while
    JAX worked is raised before each."""
    it = iter(loader)
    while True:
        raise_lost()
        batch = next(it, None)
        if batch is None:
            return
        if (example_index(batch) >= 0).any():
            yield batch


def ran_columns(ran: Ran):
    """The kept examples' indices and their output columns."""
    put = graph_columns if ran.batch.is_graphs else batch_columns
    return put(ran.outputs, ran.keep, ran.batch, ran.layout)


def job_report(folder, total, shards, done, runs, redone, repairs, wall, memory_plan) -> JobReport:
    """Adds up the committed shards of every run."""
    records = shards
    seconds = dict.fromkeys(("loading", "compiling", "computing", "writing"), 0.0)
    quarantine, skipped = [], 0
    for r in records:
        for k in seconds:
            seconds[k] += r["seconds"][k]
        for b in r["bad"]:
            if b["stage"] == "function-skip":
                skipped += 1
            else:
                quarantine.append(b)
    skipped += done["loader_skipped"]
    quarantine.extend(done["loader_quarantine"])
    device_peak = None
    try:
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        device_peak = stats.get("peak_bytes_in_use")
    except Exception:  # noqa: BLE001 - a report never fails on a missing statistic
        device_peak = None
    examples = sum(r["examples"] for r in records)
    workers = worker_breakdown(records)
    peak_host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return JobReport(
        output=str(folder.path),
        complete=True,
        total=examples + skipped + len(quarantine) if total is None else total,
        examples=examples,
        skipped=skipped,
        quarantined=len(quarantine),
        quarantine=sorted(quarantine, key=lambda q: q["example"]),
        shards=len(shards),
        runs=runs,
        redone_shards=redone,
        compilations=sum(r["compilations"] for r in records),
        seconds=seconds,
        wall_seconds=wall,
        real_elements=sum(r["real_elements"] for r in records),
        padded_elements=sum(r["padded_elements"] for r in records),
        peak_host_bytes=max([peak_host, *(w["peak_host_bytes"] for w in workers)]),
        peak_device_bytes=device_peak,
        repairs=repairs,
        memory_plan=memory_plan,
        workers=workers or None,
    )


def worker_breakdown(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per worker that committed any of `records` (shard records that name
    their ``worker``: a job on a cluster), what it did, in worker order."""
    workers: dict[str, dict[str, Any]] = {}
    for r in records:
        if "worker" not in r:
            continue
        who = r["worker"]
        w = workers.setdefault(
            who["id"],
            {
                "worker": who["id"],
                "node": who["node"],
                "units": 0,
                "examples": 0,
                "seconds": dict.fromkeys(("loading", "compiling", "computing", "writing"), 0.0),
                "compilations": 0,
                "peak_host_bytes": 0,
            },
        )
        w["units"] += 1
        w["examples"] += r["examples"]
        for k in w["seconds"]:
            w["seconds"][k] += r["seconds"][k]
        w["compilations"] += r["compilations"]
        w["peak_host_bytes"] = max(w["peak_host_bytes"], who["peak_host_bytes"])
    return [workers[k] for k in sorted(workers)]
