"""Reading a job's output back (:func:`read_output`): one folder, the parts
of a job on several processes, or the chain of generations an elastic
resume made (job/chain.py decides which parts and shards are read).
Nothing here writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.collate import keys
from jaxbatch._src.job.chain import check_covered, read_chain
from jaxbatch._src.job.folder import Committed
from jaxbatch._src.job.output import (
    arrow_owned,
    example_indices,
    from_table,
    read_shards,
    row_key,
)


def read_output(output: str | os.PathLike, *, partial: bool = False) -> dict[str, Any]:
    """A job's outputs as numpy, in example order: ``example_index`` and one
    entry per output (fixed-shape outputs stacked ``[n, *shape]``, per-token
    outputs as a list of arrays). A job over a mixture's pass
    (``jb.run(fun, mixture, ...)``) reads in draw order, with each row's
    ``position`` in the stream, ``example_index`` within its source and
    ``source_index``.

    Reads the shards the journal lists, each checked against its recorded
    size and hash, and changes nothing: the folder may be read-only, and a
    running job's committed shards can be read while it runs. Raises
    ``ValueError`` for a job that has not finished unless ``partial=True``,
    and ``OSError`` naming the record or shard when the journal or a shard
    is damaged (re-running the job repairs it).

    A job continued on another number of processes (``jb.run(...,
    elastic=True)``) is read as its chain of generations: of each earlier
    part the shards the latest generation took as done, then the latest
    generation's parts; every example once, or a ``ValueError`` naming the
    parts that do not continue each other.

    Example::

        out = jb.read_output("embeddings/")
        vectors = out["output"]            # [examples, 384]
    """
    require("pyarrow", "jb.read_output (it reads Parquet)")  # Before anything is read.
    output = Path(output)
    chain = read_chain(output, partial)
    _check_same_job(output, chain.parts)
    for folder, part in chain.latest:
        if not part.done and not partial:
            raise ValueError(
                f"jb.read_output: the job in {folder} has not finished ({len(part.shards)} "
                f"shard{'' if len(part.shards) == 1 else 's'} committed"
                + ("; its journal ends in a torn record: a run was interrupted or is running"
                   if part.interrupted else "")
                + "); re-run it to finish, or pass partial=True to read what is committed"
            )  # fmt: skip
    data = [shard.data for _, part in chain.parts for shard in part.shards]
    if not data:
        return {keys.EXAMPLE_INDEX: np.zeros(0, dtype=np.int64)}
    table = read_shards(data)
    index = example_indices(table)
    order = np.argsort(index, kind="stable")
    repeated = index[order][1:][np.diff(index[order]) == 0]
    if len(repeated):
        raise ValueError(
            f"jb.read_output: {output} holds "
            f"{row_key(table.schema).replace('_index', '')} "
            f"{int(repeated[0])} more than once "
            f"({len(repeated)} repeats): parts of different jobs are mixed in it"
        )
    if chain.continues is not None and not partial:
        job = next(c.job for _, c in chain.parts if c.job is not None)
        check_covered(output, chain, index, job["fingerprint"]["examples"])
    return from_table(table.take(arrow_owned(order)))


def _check_same_job(output, parts: list[tuple[Path, Committed]]) -> None:
    """Refuses process parts whose journals key different jobs: another
    function, input or options (the process's shard aside)."""
    keyed = [(folder, _job_key(part.job)) for folder, part in parts if part.job is not None]
    for folder, other in keyed[1:]:
        first_folder, first = keyed[0]
        differ = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        if differ:
            k = differ[0]
            raise ValueError(
                f"jb.read_output: {output} mixes parts of different jobs: {folder.name} was "
                f"computed with {k} {other.get(k)!r}, {first_folder.name} with {first.get(k)!r}"
                + (f" ({', '.join(differ[1:])} differ too)" if len(differ) > 1 else "")
                + "; run every process of one job into one folder"
            )


def _job_key(job: dict[str, Any]) -> dict[str, Any]:
    """A job record's fingerprint, flat, without the process's own shard."""
    fingerprint = job["fingerprint"]
    flat = {k: v for k, v in fingerprint.items() if k != "options"}
    options = fingerprint.get("options", {})
    flat.update({f"option {k}": v for k, v in options.items() if k != "shard"})
    return flat
