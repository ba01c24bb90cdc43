"""A finished job's output folder (jb.tokenize's token column, jb.run's
outputs) opened as a data source: what a Loader, jb.run and ``jaxbatch plan``
read when given the folder's path.

The folder is read as :func:`jaxbatch.read_output` reads it, changing
nothing: the shards its journal commits, each checked against its recorded
size and hash. Each shard's Parquet is decoded once, into Arrow buffers the
dataset's columns then read in place (a column of several shards is a
gathered column over them, no value copied), in example order; the
``example_index`` column, which collation adds to every batch itself, is
left out. A job run on several processes (``process-*`` folders) is read
with :func:`jaxbatch.read_output` instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.collate import keys
from jaxbatch._src.job.folder import JOURNAL_NAME, read_committed
from jaxbatch._src.job.output import row_key

# What the job's writer puts in a column's Arrow metadata (job/output.py):
# the output's per-example shape (or per-token inner shape) and dtype.
_META_SHAPE, _META_DTYPE = b"jaxbatch.shape", b"jaxbatch.dtype"


def is_job_output(path: Path) -> bool:
    """Whether `path` is a job's output folder (it holds a journal)."""
    return path.is_dir() and (path / JOURNAL_NAME).exists()


def job_output_table(path: Path, who: str):
    """The committed outputs of the finished job in `path` as one pyarrow
    Table in example order, without ``example_index``."""
    pa = require("pyarrow", f"{who}: reading {path}")
    pq = require("pyarrow.parquet", f"{who}: reading {path}")
    committed = read_committed(path)  # OSError for a damaged journal or shard.
    if not committed.done:
        raise ValueError(
            f"{who}: the job in {path} has not finished ({len(committed.shards)} shard(s) "
            f"committed); re-run it to finish, then read it"
        )
    if not committed.shards:
        raise ValueError(f"{who}: the job in {path} wrote no example")
    tables = []
    for shard in committed.shards:
        tables.append(pq.read_table(pa.BufferReader(shard.data)))
        shard.data = None  # Its bytes are decoded: let them go before the next.
    table = pa.concat_tables(tables)
    key = row_key(table.schema)  # A job over a mixture's pass: each draw's position.
    index = table.column(key).to_numpy()
    if len(index) > 1 and not (np.diff(index) > 0).all():  # jb.run's buckets: not in order.
        order = np.argsort(index, kind="stable")
        repeated = np.flatnonzero(np.diff(index[order]) == 0)
        if len(repeated):
            raise ValueError(
                f"{who}: {path} holds {key.replace('_index', '')} "
                f"{int(index[order][repeated[0]])} more than once"
            )
        table = table.take(pa.array(order))  # One copy, in example order.
    _refuse_reshaped(table, path, who)
    # The job's own columns; a plain job's output may be named "position".
    own = [keys.EXAMPLE_INDEX] if key == keys.EXAMPLE_INDEX else keys.MIXTURE_KEYS
    return table.drop_columns([k for k in own if k in table.column_names])


def _refuse_reshaped(table, path: Path, who: str) -> None:
    """Refuses an output a Dataset would read with another shape or dtype
    than the job's function returned: bfloat16 (stored as uint16) or a
    shape of rank 2 or more (stored flat)."""
    for field in table.schema:
        meta = field.metadata or {}
        dtype = meta.get(_META_DTYPE, b"").decode()
        shape = meta.get(_META_SHAPE, b"[]").decode()
        if dtype == "bfloat16" or shape.count(",") >= 1:
            raise ValueError(
                f"{who}: output {field.name!r} of the job in {path} has shape {shape} and dtype "
                f"{dtype}, which its Parquet column stores flat or as uint16; read it with "
                f"jb.read_output"
            )
