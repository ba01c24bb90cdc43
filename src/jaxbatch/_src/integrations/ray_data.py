"""A Ray Data stage: ``ds.map_batches(jbr.Stage, ...)`` that plans each
block it is given with a jaxbatch planner instead of running it as one
padded batch.

Ray Data hands a stage blocks of rows (``batch_size`` rows, or whatever its
read gave). The stage makes each block a :class:`Dataset` (Arrow columns
read in place), plans it (few shapes, or packed rows), runs ``fun`` on every
planned batch through jb.map's batch loop (one jit cache per actor, OOM
split-and-retry, the checks) and returns one output row per input row: the
input's columns, then each output leaf, then ``jaxbatch_status`` (``ok``,
``quarantined``, ``skipped`` or ``dropped``) and ``jaxbatch_reason``. A row
whose status is not ``ok`` has nulls for outputs: nothing is dropped
silently.

A block is planned alone, so the block bounds the plan: a planner fills
its shapes from the block's examples only, and each block ends in partly
filled batches (at most one per shape). Larger blocks plan better; see
docs/ray.md for the measured cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxbatch._src.base.optional import require
from jaxbatch._src.data.dataset import Dataset
from jaxbatch._src.integrations.ray_units import PlanRunner, check_settings
from jaxbatch._src.job.output import arrow_owned, to_table
from jaxbatch._src.plan.plan import plan as plan_batches
from jaxbatch._src.plan.planners import GRAPH_PLANNERS, PLANNERS, Planner

WHO = "jaxbatch.ray.Stage"
STATUS = "jaxbatch_status"
REASON = "jaxbatch_reason"
_ON_ERROR = ("raise", "skip", "quarantine")


class Stage:
    """A callable class for Ray Data's ``map_batches``: ``fun(example)`` on
    every row of each block, planned by ``planner`` (a sequence planner).

    * ``column``: the ragged column to plan by (default: the block's first
      list column); ``columns``: the columns ``fun`` sees (default: every
      list or numeric column).
    * ``on_error``: what a row whose ``check_finite``/``check`` fails
      does: ``"raise"``, or ``"quarantine"``/``"skip"``, marking the row in
      ``jaxbatch_status`` with its reason.
    * ``keep_input``: pass the input's columns through (default True).

    The column names: ``Stage.STATUS`` and ``Stage.REASON``.

    Example::

        ds = ray.data.read_parquet("/shared/corpus/")
        out = ds.map_batches(
            jbr.Stage,
            fn_constructor_kwargs=dict(fun=embed, planner=jb.FixedBuckets([64, 128, 256],
                                       batch_size=32), column="tokens"),
            batch_size=8192, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=4), num_gpus=1)
    """

    STATUS = STATUS
    REASON = REASON

    def __init__(
        self,
        fun: Callable,
        planner: Planner,
        *,
        column: str | None = None,
        columns: Sequence[str] | None = None,
        check_finite: bool = False,
        check: Callable | None = None,
        on_error: str = "quarantine",
        pad_value: float | Mapping[str, float] = 0,
        keep_input: bool = True,
    ):
        if not isinstance(planner, PLANNERS) or isinstance(planner, GRAPH_PLANNERS):
            raise TypeError(f"{WHO}: planner must be a sequence planner, found {planner!r}")
        if on_error not in _ON_ERROR:
            raise ValueError(f"{WHO}: on_error must be one of {_ON_ERROR}, found {on_error!r}")
        self.planner, self.column, self.columns = planner, column, columns
        self.on_error, self.keep_input = on_error, keep_input
        settings = check_settings(check_finite, check, on_error, WHO)
        self._make = lambda column: PlanRunner(fun, settings, planner, column, pad_value, None)
        self.runner: PlanRunner | None = None

    def __call__(self, block: Any) -> Any:
        """The block's rows with their outputs and status, as an Arrow table."""
        pa = require("pyarrow", WHO)
        table = _as_table(block, pa)
        dataset = Dataset.from_arrow(table, columns=self._columns(table, pa))
        column = self.column or dataset.default_length_column
        if self.runner is None:  # Warm from the first block on: one jit cache.
            self.runner = self._make(column)
        plan = plan_batches(dataset, self.planner, column=column)
        gathered = self.runner.run(dataset, plan)
        n = table.num_rows
        status = np.full(n, "ok", dtype=object)
        reason = np.full(n, None, dtype=object)
        status[plan.dropped_examples] = "dropped"
        reason[plan.dropped_examples] = "left out by the planner's remainder='drop'"
        status[plan.skipped_examples] = "skipped"
        reason[plan.skipped_examples] = "longer than the planner's longest shape (too_long='skip')"
        for bad in gathered.bad:
            status[bad["example"]] = "skipped" if self.on_error == "skip" else "quarantined"
            reason[bad["example"]] = bad["reason"]
        outputs = to_table(gathered.examples, gathered.columns or {})
        # Each input row's output row, or null where it has none.
        where = np.full(n, -1, np.int64)
        where[gathered.examples] = np.arange(len(gathered.examples))
        # (Arrow's own memory, as every array handed to Arrow here: job/output.py.)
        pc = require("pyarrow.compute", WHO)
        index = arrow_owned(where)
        index = pc.if_else(pc.less(index, 0), pa.scalar(None, pa.int64()), index)
        outputs = outputs.take(index)
        result = table if self.keep_input else table.select([])
        for field in outputs.schema:
            if field.name == "example_index":
                continue
            if field.name in result.column_names:
                raise ValueError(
                    f"{WHO}: the output {field.name!r} has the name of an input column; "
                    f"return it under another name or pass keep_input=False"
                )
            result = result.append_column(field, outputs.column(field.name))
        result = result.append_column(STATUS, pa.array(status, pa.string()))
        return result.append_column(REASON, pa.array(reason, pa.string()))

    def _columns(self, table: Any, pa: Any) -> list[str]:
        if self.columns is not None:
            return list(self.columns)
        kinds = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
        numeric = (pa.types.is_integer, pa.types.is_floating)
        return [
            f.name
            for f in table.schema
            if any(k(f.type) for k in kinds) or any(k(f.type) for k in numeric)
        ]


def _as_table(block: Any, pa: Any) -> Any:
    """A block as an Arrow table: Ray's "pyarrow" batches as they are, its
    "numpy" ones (a dict of arrays, a ragged column an object array of
    arrays) read into Arrow."""
    if isinstance(block, pa.Table):
        return block
    if isinstance(block, Mapping):
        return pa.table({k: _arrow_column(np.asarray(v), pa) for k, v in block.items()})
    raise TypeError(
        f"{WHO}: expected a block as a pyarrow Table or a dict of numpy arrays "
        f"(batch_format='pyarrow' or 'numpy'), found {type(block).__name__}"
    )


def _arrow_column(values: np.ndarray, pa: Any) -> Any:
    """A numpy column of a block in memory Arrow owns: a ragged (object)
    column's arrays and strings are converted, so copied; a flat numeric one
    is copied by arrow_owned, not wrapped (a wrapped one is released through
    the interpreter, which aborts a process whose Arrow thread drops it
    after shutdown began; see job/output.py)."""
    if values.dtype == object:
        return pa.array(list(values))
    if values.ndim == 1 and values.dtype.kind in "biuf":
        return arrow_owned(values)
    return pa.array(values)
