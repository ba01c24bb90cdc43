"""Graphs as columns: jraph.GraphsTuple-like graphs to a graph Dataset's
columns, and batches' columns back to GraphsTuples.

A graph dataset names its columns as jraph names a GraphsTuple's fields,
with a pytree leaf's path after a slash (``nodes/x``, ``edges``,
``globals/y/0``); the engine (data/graph.h) finds the roles by these names
and checks every graph. Python only turns pytrees into columns and back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxbatch import _core
from jaxbatch._src.base.ints import int64_array
from jaxbatch._src.base.tree_names import joined_names

# The engine's column names (data/graph.h), which are jraph.GraphsTuple's
# field names.
NODES: str = _core.GRAPH_NODES
EDGES: str = _core.GRAPH_EDGES
GLOBALS: str = _core.GRAPH_GLOBALS
SENDERS: str = _core.GRAPH_SENDERS
RECEIVERS: str = _core.GRAPH_RECEIVERS
N_NODE: str = _core.GRAPH_N_NODE
N_EDGE: str = _core.GRAPH_N_EDGE
FIELDS = (NODES, EDGES, RECEIVERS, SENDERS, GLOBALS, N_NODE, N_EDGE)  # jraph's order
TREES = (NODES, EDGES, GLOBALS)


class GraphsTuple(NamedTuple):
    """jraph.GraphsTuple's fields in jraph's order, for when jraph is not
    installed (``batch.graphs`` is a real ``jraph.GraphsTuple`` when it is)."""

    nodes: Any
    edges: Any
    receivers: Any
    senders: Any
    globals: Any
    n_node: Any
    n_edge: Any


def graphs_tuple_type() -> type:
    try:
        import jraph
    except ImportError:
        return GraphsTuple
    return jraph.GraphsTuple


def _fields_of(graph: Any, index: int) -> dict[str, Any]:
    if isinstance(graph, Mapping):
        unknown = sorted(set(graph) - set(FIELDS))
        if unknown:
            raise ValueError(
                f"Dataset.from_graphs: graph {index} has field {unknown[0]!r}; a graph's fields "
                f"are {', '.join(FIELDS)}"
            )
        return {f: graph.get(f) for f in FIELDS}
    if all(hasattr(graph, f) for f in FIELDS):
        return {f: getattr(graph, f) for f in FIELDS}
    raise TypeError(
        f"Dataset.from_graphs: graph {index} is a {type(graph).__name__}; expected a "
        f"jraph.GraphsTuple or a mapping with the fields {', '.join(FIELDS)}"
    )


def _single(value: Any, field: str, index: int) -> int | None:
    """A single graph's n_node or n_edge: one integer (shape [1] or [])."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.size != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"Dataset.from_graphs: graph {index}: {field} must be one integer (a single "
            f"graph, as jraph.GraphsTuple holds it: shape [1]), found {array.dtype} of "
            f"shape {array.shape}; batch several graphs with jb.Loader, not before"
        )
    return int(int64_array(array, "Dataset.from_graphs", lambda _: f"graph {index}'s {field}")[0])


class GraphLayout:
    """How a graph dataset's columns make a GraphsTuple: each pytree field's
    treedef and leaf columns (from from_graphs), or nested dicts by the
    columns' paths (data read from Arrow)."""

    def __init__(self, trees: dict[str, tuple[Any, list[str]] | None]):
        self.trees = trees

    @functools.cached_property
    def _key(self) -> tuple:
        return tuple(
            (f, None if spec is None else (spec[0], tuple(spec[1])))
            for f, spec in sorted(self.trees.items())
        )

    # By value: a Batch carries its layout as static pytree data, and jit
    # must see two loaders' (or collate calls') equal layouts as one. jit
    # hashes it on every call, so the key is made once (trees never change).
    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphLayout) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @classmethod
    def from_columns(cls, core: Any, who: str) -> GraphLayout:
        """The layout of a core dataset's graph columns, as the engine finds
        them (its errors start with `who`)."""
        found = dict(zip(TREES, _core.graph_columns(core, who), strict=True))
        trees: dict[str, tuple[Any, list[str]] | None] = {}
        for field in TREES:
            leaves = list(found[field])
            if not leaves:
                trees[field] = None
            elif leaves == [field]:
                trees[field] = (jax.tree_util.tree_structure(0), leaves)
            else:
                nested: dict[str, Any] = {}
                for name in leaves:
                    node = nested
                    parts = name.split("/")[1:]
                    for part in parts[:-1]:
                        node = node.setdefault(part, {})
                    node[parts[-1]] = name
                flat, treedef = jax.tree_util.tree_flatten(nested)
                trees[field] = (treedef, flat)
        return cls(trees)

    def graphs_tuple(self, arrays: Mapping[str, Any]) -> Any:
        def tree(field: str) -> Any:
            spec = self.trees.get(field)
            if spec is None:
                return None
            treedef, leaves = spec
            return jax.tree_util.tree_unflatten(treedef, [arrays[n] for n in leaves])

        return graphs_tuple_type()(
            nodes=tree(NODES),
            edges=tree(EDGES),
            receivers=arrays[RECEIVERS],
            senders=arrays[SENDERS],
            globals=tree(GLOBALS),
            n_node=arrays[N_NODE],
            n_edge=arrays[N_EDGE],
        )

    def role_of(self, column: str) -> str | None:
        """'node', 'edge' or None for a column of this layout."""
        leaves = {f: spec[1] if spec else [] for f, spec in self.trees.items()}
        if column in leaves[NODES]:
            return "node"
        if column in leaves[EDGES] or column in (SENDERS, RECEIVERS):
            return "edge"
        return None


def graph_columns(graphs: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any], GraphLayout]:
    """(columns for Dataset.from_arrays, their dtypes, the layout) of single graphs."""
    fields = [_fields_of(g, i) for i, g in enumerate(graphs)]
    if not fields:
        raise ValueError("Dataset.from_graphs: expected at least one graph, found none")
    columns: dict[str, Any] = {}
    dtypes: dict[str, Any] = {}
    trees: dict[str, tuple[Any, list[str]] | None] = {}
    for field in TREES:
        first = jax.tree_util.tree_flatten_with_path(fields[0][field])
        if not first[0]:
            trees[field] = None
            for i, f in enumerate(fields):
                if jax.tree_util.tree_leaves(f[field]):
                    raise ValueError(
                        f"Dataset.from_graphs: graph {i} has {field} but graph 0 has none; "
                        f"every graph needs the same fields"
                    )
            continue
        paths = [path for path, _ in first[0]]
        names = joined_names(paths, "/", field, f"Dataset.from_graphs: graph 0's {field}")
        trees[field] = (first[1], names)
        leaves: list[list[Any]] = [[] for _ in names]
        for i, f in enumerate(fields):
            flat, treedef = jax.tree_util.tree_flatten(f[field])
            if treedef != first[1]:
                raise ValueError(
                    f"Dataset.from_graphs: graph {i}: {field} has structure {treedef}, but "
                    f"graph 0's is {first[1]}; every graph needs the same pytree"
                )
            for k, leaf in enumerate(flat):
                array = np.asarray(leaf)
                if array.ndim < 1:
                    raise ValueError(
                        f"Dataset.from_graphs: graph {i}: {names[k]} is a scalar; expected a "
                        f"leading axis of the graph's {field} count"
                        + (" (1 for globals)" if field == GLOBALS else "")
                    )
                if field == GLOBALS and array.shape[0] != 1:
                    raise ValueError(
                        f"Dataset.from_graphs: graph {i}: {names[k]} has shape {array.shape}; "
                        f"a single graph's globals have a leading axis of 1"
                    )
                leaves[k].append(array[0] if field == GLOBALS else array)
        for name, pieces in zip(names, leaves, strict=True):
            columns[name] = np.stack(pieces) if field == GLOBALS else pieces
    for field in (SENDERS, RECEIVERS):
        pieces = []
        for i, f in enumerate(fields):
            array = np.asarray(f[field] if f[field] is not None else np.zeros(0, np.int32))
            if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
                raise ValueError(
                    f"Dataset.from_graphs: graph {i}: {field} must be a 1-D integer array of "
                    f"node ids, found {array.dtype} of shape {array.shape}"
                )
            pieces.append(array)
        for i, array in enumerate(pieces):  # a uint64 id past int64 is refused, unsigned
            name = functools.partial("graph {}'s {}[{}]".format, i, field)
            int64_array(array, "Dataset.from_graphs", name)
        wide = any(p.size and (p.max() > np.iinfo(np.int32).max or p.min() < 0) for p in pieces)
        dtypes[field] = np.int64 if wide else np.int32
        columns[field] = pieces
    for field in (N_NODE, N_EDGE):
        counts = [_single(f[field], field, i) for i, f in enumerate(fields)]
        if all(c is None for c in counts):
            continue
        if any(c is None for c in counts):
            missing = counts.index(None)
            raise ValueError(
                f"Dataset.from_graphs: graph {missing} has no {field} but others do; give it "
                f"for every graph or for none"
            )
        columns[field] = np.asarray(counts, dtype=np.int64)
        if max(counts) <= np.iinfo(np.int32).max and min(counts) >= np.iinfo(np.int32).min:
            columns[field] = columns[field].astype(np.int32)
    return columns, dtypes, GraphLayout(trees)
