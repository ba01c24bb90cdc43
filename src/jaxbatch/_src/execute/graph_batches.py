"""Graph batches through the executor: what jb.map and jb.run do
differently for GraphBudget / GraphBuckets batches, in one place.

* The function sees a padded graph batch (a :class:`Batch` of traced
  arrays, so ``batch.graphs`` is a GraphsTuple and the masks are there) or,
  with ``per_example=True``, one graph at a time under vmap: the graph
  padded as ``jraph.pad_with_graphs(graph, n + 1, e, 2)`` pads it, where
  ``n`` and ``e`` are the most nodes and edges of any graph of the data (so
  one shape per batch shape, whatever the graph).
* Each output leaf is per node, per edge or per graph. Which one is put to
  the function, as for per-token outputs (output_layout.py): its output
  shapes are evaluated (tracing only) on the batch and on the batch with one
  more node, edge or graph slot, and a leaf is per whatever it grows with.
  An output that happens to be as long as the node slots is never mistaken
  for per-node; ``per=`` overrides it, by leaf name.
* Outputs become per-graph columns (:func:`graph_columns`): per-node and
  per-edge leaves as a list of the graph's real nodes or edges, per-graph
  leaves as one value. jb.map and jb.run both unbatch through it.
* A batch that runs out of memory is handed back to the planner by name
  (``_core.replan_graphs_halved``): its graphs re-planned under half its
  budget, collated and run; no graph is lost or repeated.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.choices import check_choice
from jaxbatch._src.collate import keys
from jaxbatch._src.collate.collate import Batch, GraphRole, batch_from_core, collate
from jaxbatch._src.data import graphs as fields
from jaxbatch._src.execute.failures import is_oom
from jaxbatch._src.execute.graph_views import batch_function, key_role, per_graph_function
from jaxbatch._src.execute.output_layout import Column, leaf_names
from jaxbatch._src.plan.plan import BatchPlan, BatchShape
from jaxbatch._src.plan.planners import GraphBudget

log = logging.getLogger("jaxbatch")

_ROLES = ("node", "edge", "graph")


# --- pure logic: which axis a batch key and an output leaf follow ---------


def _grown(spec: dict[str, tuple], template: Batch, grow: str) -> dict[str, tuple]:
    """The batch's {key: (shape, dtype)} with one more `grow` slot."""
    out = {}
    for key, (shape, dtype) in spec.items():
        dims = list(shape)
        if key_role(key, template) == grow:
            dims[0] += 1
        out[key] = (tuple(dims), dtype)
    return out


@dataclasses.dataclass
class GraphMode:
    """How a graph run calls the function: the batch layout (a template
    batch's metadata), per_example and the single-graph padding, per=."""

    template: Batch
    per_example: bool
    per: GraphRole | Mapping[str, GraphRole] | None
    node_pad: int  # per_example: a graph's node slots before the padding node
    edge_pad: int
    _roles: dict[Any, list[str]] = dataclasses.field(default_factory=dict)

    def view(self, arrays: Mapping[str, Any]) -> Batch:
        """A Batch over `arrays` (traced or not) laid out as the template."""
        t = self.template
        shape = BatchShape(
            rows=arrays[fields.N_NODE].shape[0],
            length=arrays[keys.NODE_MASK].shape[0],
            edges=arrays[keys.EDGE_MASK].shape[0],
        )
        triples = [(k, "", v) for k, v in arrays.items()]
        return batch_from_core(triples, -1, shape, False, "", (), t.fixed_columns, t.graph_layout)

    # --- output roles -----------------------------------------------------

    def roles(self, fun: Callable, spec: dict[str, tuple]) -> list[str]:
        """Each output leaf's role for a batch of layout `spec` ({key:
        (shape, dtype)}), in leaf_names order; cached per layout."""
        key = tuple(sorted((k, tuple(s), np.dtype(d).str) for k, (s, d) in spec.items()))
        if key not in self._roles:
            self._roles[key] = self._find_roles(fun, spec)
        return self._roles[key]

    def _find_roles(self, fun: Callable, spec: dict[str, tuple]) -> list[str]:
        import jax

        call = self._probe(fun)
        if self.per_example:
            spec = self._single_spec(spec)
        base = leaf_names(jax.eval_shape(call, _structs(spec)))
        grown = {}
        for role in _ROLES if not self.per_example else ("node", "edge"):
            try:
                bigger = _grown(spec, self.template, role)
                grown[role] = leaf_names(jax.eval_shape(call, _structs(bigger)))
            except Exception:  # noqa: BLE001 - a function fixed to its shapes: read the axes
                grown[role] = None
        sizes = self._sizes(spec)
        return [self._leaf_role(name, leaf, i, grown, sizes) for i, (name, leaf) in enumerate(base)]

    def _leaf_role(self, name, leaf, i, grown, sizes) -> str:
        forced = self.per.get(name) if isinstance(self.per, Mapping) else self.per
        if forced is not None:
            check_choice("jb.map", "per", forced, GraphRole)
            if self.per_example and forced == "graph":
                return "graph"
            if len(leaf.shape) < 1 or leaf.shape[0] != sizes[forced]:
                raise ValueError(
                    f"jb.map: output {name!r} has shape {tuple(leaf.shape)}, declared per "
                    f"{forced} (per=), but the batch has {sizes[forced]} {forced} slots"
                )
            return forced
        lead = leaf.shape[0] if len(leaf.shape) else None
        if all(g is not None for g in grown.values()):
            found = [r for r, g in grown.items() if len(g[i][1].shape) and g[i][1].shape[0] != lead]
        else:  # The function does not trace at other shapes: read the leading axis.
            found = [r for r in grown if lead == sizes[r]]
        if self.per_example and not found:
            return "graph"  # A per-graph function's own value, of any shape.
        if len(found) == 1:
            return found[0]
        listed = ", ".join(f"{sizes[r]} {r} slots" for r in grown)
        raise ValueError(
            f"jb.map: output {name!r} has shape {tuple(leaf.shape)}; "
            + (
                f"it could be per {' or per '.join(found)} ({listed})"
                if found
                else f"its leading axis is not per node, edge or graph ({listed})"
            )
            + f": declare it with per={{{name!r}: 'node' | 'edge' | 'graph'}} (or one role "
            f"for every output)"
        )

    def _sizes(self, spec) -> dict[str, int]:
        return {
            "node": spec[keys.NODE_MASK][0][0],
            "edge": spec[keys.EDGE_MASK][0][0],
            "graph": spec[fields.N_NODE][0][0],
        }

    def _probe(self, fun: Callable) -> Callable:
        return lambda arrays: fun(self.view(arrays))

    def _single_spec(self, spec: dict[str, tuple]) -> dict[str, tuple]:
        """The layout of one graph's view (per_example)."""
        slots = {"node": self.node_pad + 1, "edge": self.edge_pad, "graph": 2}
        out = {}
        for key, (shape, dtype) in spec.items():
            out[key] = ((slots[key_role(key, self.template)], *shape[1:]), dtype)
        return out

    # --- the compiled function --------------------------------------------

    def checked(self, fun: Callable, check_finite: bool, check: Callable | None) -> Callable:
        """arrays -> (outputs in batch layout, int32 flags per graph slot)."""
        if self.per_example:
            return per_graph_function(self, fun, check_finite, check)
        return batch_function(self, fun, check_finite, check)


def _structs(spec: dict[str, tuple]) -> dict[str, Any]:
    import jax

    return {k: jax.ShapeDtypeStruct(tuple(s), d) for k, (s, d) in spec.items()}


def graph_mode(
    template: Batch, dataset: Any, planner: Any, per_example: bool, per: Any
) -> GraphMode:
    """The GraphMode of a run whose batches look like `template`: a graph's
    padding for per_example is the most nodes and edges of any graph of the
    data (the budget's, for data not in memory)."""
    node_pad, edge_pad = planner.nodes - 1, planner.edges
    core = getattr(dataset, "_core", None)
    if per_example and core is not None:
        nodes, edges = _core.graph_counts(core, "jb.map")
        if len(nodes):
            node_pad = min(node_pad, int(np.max(nodes)))
            edge_pad = min(edge_pad, int(np.max(edges)))
    return GraphMode(template, per_example, per, max(node_pad, 1), edge_pad)


# --- outputs to per-graph columns -----------------------------------------


def graph_columns(out: Any, keep: np.ndarray, batch: Batch, roles: list[str]):
    """The kept graphs' example ids and each output leaf's Column: per-node
    and per-edge leaves cut to each graph's own nodes or edges (a list per
    graph), per-graph leaves one value per graph. `keep` marks graph slots."""
    index = np.asarray(batch[keys.GRAPH_INDEX])
    examples = index[keep].astype(np.int64)
    counts = {"node": np.asarray(batch[fields.N_NODE]), "edge": np.asarray(batch[fields.N_EDGE])}
    columns = {}
    for (name, leaf), role in zip(leaf_names(out), roles, strict=True):
        array = np.asarray(leaf)
        if role == "graph":
            columns[name] = Column(array[keep])
            continue
        owner = np.repeat(np.arange(len(index)), counts[role])  # each slot's graph
        kept = np.zeros(array.shape[0], bool)
        kept[: len(owner)] = keep[owner]
        columns[name] = Column(array[kept], counts[role][keep].astype(np.int64))
    return examples, columns


def per_example_outputs(out: Any, batch: Batch, roles: list[str], keep: np.ndarray):
    """{example: output pytree} of the kept graphs, from graph_columns."""
    import jax

    examples, columns = graph_columns(out, keep, batch, roles)
    treedef = jax.tree_util.tree_structure(out)
    per_leaf = []
    for column in columns.values():
        if column.lengths is None:
            per_leaf.append(list(column.values))
        else:
            per_leaf.append(np.split(column.values, np.cumsum(column.lengths)[:-1]))
    return {
        int(e): jax.tree_util.tree_unflatten(treedef, [leaf[i] for leaf in per_leaf])
        for i, e in enumerate(examples)
    }


def example_index(batch: Batch) -> np.ndarray:
    """Each row's (a graph batch: each graph slot's) example, -1 for padding."""
    return np.asarray(batch[keys.GRAPH_INDEX if batch.is_graphs else keys.EXAMPLE_INDEX])


def real_and_padded(batch: Batch) -> tuple[int, int]:
    """A graph batch's real and padded node slots (padding efficiency)."""
    mask = np.asarray(batch[keys.NODE_MASK])
    return int(mask.sum()), int(mask.shape[0])


# --- out of memory: the planner re-plans the batch's graphs ---------------


class GraphOomSplitter:
    """Runs a graph batch through an Executor, or after an out-of-memory
    error asks the planner for its graphs under half the budget (by name:
    ``_core.replan_graphs_halved``) and runs those batches, halving again
    where one fails. A later batch of a shape that failed is re-planned
    without being tried (``stats.backoffs`` lists each failed shape once)."""

    def __init__(self, executor, on_oom: str, loader: Any, per_example: bool | None, per: Any):
        self.executor, self.on_oom = executor, on_oom
        self.dataset, self.planner = loader.dataset, loader.planner
        self.pad_value = loader.options.pad_value
        self.per_example, self.per = bool(per_example), per
        if per is not None and not isinstance(per, Mapping):
            check_choice("jb.map", "per", per, GraphRole)
        self.stats = executor.stats
        self.mode: GraphMode | None = None
        self.failed: set[BatchShape] = set()  # shapes that ran out of memory

    def layout(self, batch: Batch, out: Any) -> list[str]:
        """Each output leaf's role in `batch` ('node', 'edge' or 'graph')."""
        spec = {k: (np.shape(v), np.asarray(v).dtype) for k, v in batch.items()}
        return self.mode.roles(self.executor.fun, spec)

    def pieces(self, batch: Batch) -> list[tuple[Batch, Any, np.ndarray]]:
        """(batch, outputs, flags per graph slot) for the batch or the batches
        its graphs were re-planned into; every graph in exactly one."""

        if self.mode is None:  # The first batch shows the layout.
            self.mode = graph_mode(batch, self.dataset, self.planner, self.per_example, self.per)
            e = self.executor
            e.batched = self.mode.checked(e.fun, e.check_finite, e.check)
        error = None
        if batch.shape not in self.failed:
            try:
                out, flags = self.executor(dict(batch))
                return [(batch, out, flags)]
            except Exception as e:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not is_oom(e) or self.on_oom == "raise":
                    raise
                self.failed.add(batch.shape)
                error = e
        done = []
        for part in self._replan(batch, error):
            done.extend(self.pieces(part))
        return done

    def _replan(self, batch: Batch, error: Exception | None) -> list[Batch]:
        core = getattr(self.dataset, "_core", None)
        if core is None:
            raise RuntimeError(
                "jb.map: a graph batch ran out of memory and its graphs cannot be re-planned: "
                "the data is not in memory; give a smaller budget"
            ) from error
        index = np.asarray(batch[keys.GRAPH_INDEX])
        ids = index[index >= 0].astype(np.int64)
        nodes, edges = _core.graph_counts(core, "jb.map")
        shape = batch.shape
        try:
            plan = _core.replan_graphs_halved(
                nodes, edges, ids, shape.rows, shape.length, shape.edges
            )
        except ValueError as e:
            raise RuntimeError(
                f"jb.map: out of memory on graph batch {batch.index} ({shape.length} nodes, "
                f"{shape.edges} edges, {shape.rows} graphs): {e}"
            ) from error
        rows, length, _, edge_slots, _ = plan.batch_shape(0)
        half = GraphBudget(nodes=length, edges=edge_slots, graphs=rows)
        if error is not None:  # Once per shape: later batches of it come straight here.
            log.warning(
                "jb.map: out of memory at (%d nodes, %d edges, %d graphs); re-planned its %d "
                "graphs into %d batches of (%d, %d, %d)",
                shape.length, shape.edges, shape.rows, len(ids), plan.num_batches,
                length, edge_slots, rows,
            )  # fmt: skip
            self.stats.backoffs.append(
                ((shape.length, shape.edges, shape.rows), (length, edge_slots, rows))
            )
        parts = BatchPlan(plan, half)
        out = []
        for spec in parts:
            part = collate(self.dataset, spec, pad_value=self.pad_value)
            part.index = batch.index
            out.append(part)
        return out
