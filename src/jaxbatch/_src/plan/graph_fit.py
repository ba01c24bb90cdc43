"""Graph budgets fitted to a dataset: what ``GraphBudget.fit`` and
``GraphBuckets.fit`` translate for the engine (plan/graph_fit.h), which
plans candidate budgets over the graphs' node and edge counts and keeps the
one that wastes least of node and edge slots and of steps together."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.data.dataset import Dataset

_FIT = _core.GraphFitOptions
DEFAULT_MULTIPLE: int = _FIT().multiple
DEFAULT_SEED: int = _FIT().seed


def fit_planner(
    cls: Any,
    fit_core: Any,
    data: Any,
    graphs: Any,
    multiple: Any,
    seed: Any,
    order: Any,
    options: dict[str, Any],
) -> Any:
    """A `cls` (GraphBudget or GraphBuckets) over the budget the engine's
    `fit_core` fits to `data`'s graphs; `options` are the planner's other
    fields (algorithm, open_batches, too_big, max_shapes)."""
    from jaxbatch._src.plan.planners import _integer, _to_core  # planners imports this module

    who = f"{cls.__name__}.fit"
    if not isinstance(data, Dataset):
        raise TypeError(
            f"{who}: expected a graph Dataset (jb.Dataset.from_graphs(...), or a Parquet/Arrow "
            f"file's read with jb.Dataset.from_arrow), found {type(data).__name__}"
        )
    fit = _FIT()
    fit.graphs = _integer(who, "graphs", graphs)
    fit.multiple = _integer(who, "multiple", multiple)
    seed = _integer(who, "seed", seed)
    if seed < 0:
        raise ValueError(f"{who}: seed must be an integer >= 0, found {seed}")
    fit.seed = seed
    planner = cls._core_type()
    for name, value in options.items():
        setattr(planner, name, _to_core(cls.__name__, name, value, getattr(planner, name)))
    nodes, edges = _core.graph_counts(data._core, who)
    fitted, _ = fit_core(nodes, edges, _order(order, who), fit, planner)
    return cls._from_options(fitted)


def _order(order: Any, who: str) -> np.ndarray | None:
    if order is None:
        return None
    ids = np.asarray(order)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(
            f"{who}: order must be 1-D integer graph ids, found shape {ids.shape} and dtype "
            f"{ids.dtype}"
        )
    if ids.size == 0:
        raise ValueError(f"{who}: order must name at least one graph, found none")
    return np.ascontiguousarray(ids, dtype=np.int64)
