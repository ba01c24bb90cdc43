"""Graph budgets fitted to a dataset: what ``GraphBudget.fit`` and
``GraphBuckets.fit`` translate for the engine (plan/graph_fit.h), which
plans candidate budgets over the graphs' node and edge counts and keeps the
one that wastes least of node and edge slots and of steps together."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.ints import int64_array
from jaxbatch._src.data.dataset import Dataset

_FIT = _core.GraphFitOptions
DEFAULT_MULTIPLE: int = _FIT().multiple
DEFAULT_SEED: int = _FIT().seed


def fit_planner(
    who: str,
    fit_core: Any,
    data: Any,
    graphs: int,
    multiple: int,
    seed: int,
    order: Any,
    planner: Any,
) -> Any:
    """The core options the engine's `fit_core` fits to `data`'s graphs:
    `planner` (the core options of the planner's other fields) with nodes,
    edges and graphs filled in. `who` names the fit in errors."""
    if not isinstance(data, Dataset):
        raise TypeError(
            f"{who}: expected a graph Dataset (jb.Dataset.from_graphs(...), or a Parquet/Arrow "
            f"file's read with jb.Dataset.from_arrow), found {type(data).__name__}"
        )
    if seed < 0:
        raise ValueError(f"{who}: seed must be an integer >= 0, found {seed}")
    fit = _FIT()
    fit.graphs, fit.multiple, fit.seed = graphs, multiple, seed
    nodes, edges = _core.graph_counts(data._core, who)
    fitted, _ = fit_core(nodes, edges, _order(order, who), fit, planner)
    return fitted


def _order(order: Any, who: str) -> np.ndarray | None:
    if order is None:
        return None
    ids = np.asarray(order)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(
            f"{who}: order must be 1-D integer graph ids, found shape {ids.shape} and dtype "
            f"{ids.dtype}"
        )
    return int64_array(ids, who, lambda k: f"order[{k}]")
