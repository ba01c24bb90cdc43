"""The compiled functions of a graph run (graph_batches.py's GraphMode):
the checked function over a whole graph batch, and the per-graph function
vmapped over single-graph views cut from the batch, its outputs put back in
the batch's layout so both unbatch the same way. JAX code only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxbatch._src.collate import keys
from jaxbatch._src.data import graphs as fields
from jaxbatch._src.execute.failures import CHECK, FINITE
from jaxbatch._src.execute.output_layout import leaf_names

_NODE_KEYS = (keys.NODE_MASK, keys.NODE_GRAPH)
_EDGE_KEYS = (keys.EDGE_MASK,)


def key_role(key: str, template: Any) -> str:
    """'node', 'edge' or 'graph': what a graph batch key's leading axis counts."""
    role = template.graph_layout.role_of(key)
    if role is not None:
        return role
    if key in _NODE_KEYS:
        return "node"
    if key in _EDGE_KEYS:
        return "edge"
    return "graph"


def _spec(arrays) -> dict[str, tuple]:
    return {k: (tuple(v.shape), v.dtype) for k, v in arrays.items()}


def _starts(counts):
    import jax.numpy as jnp

    return jnp.cumsum(counts) - counts


def _edge_graph(arrays):
    """Each edge slot's graph slot (padding edges: the padding graph's)."""
    import jax.numpy as jnp

    n_edge = arrays[fields.N_EDGE]
    slots = jnp.arange(arrays[keys.EDGE_MASK].shape[0])
    owner = jnp.searchsorted(jnp.cumsum(n_edge), slots, side="right")
    return jnp.minimum(owner, n_edge.shape[0] - 1)


def _owners(arrays, role: str):
    """(graph slot, real) of each node or edge slot."""
    if role == "node":
        return arrays[keys.NODE_GRAPH], arrays[keys.NODE_MASK]
    return _edge_graph(arrays), arrays[keys.EDGE_MASK]


def _not_finite(leaf, real=None):
    """Per leading-axis slot: any non-finite value (False where not real)."""
    import jax.numpy as jnp

    bad = (
        ~jnp.isfinite(leaf).reshape(leaf.shape[0], -1).all(1) if leaf.ndim else ~jnp.isfinite(leaf)
    )
    return bad if real is None else bad & real


def _inexact(leaf) -> bool:
    import jax.numpy as jnp

    return jnp.issubdtype(leaf.dtype, jnp.inexact)


def batch_function(mode: Any, fun: Callable, check_finite: bool, check: Callable | None):
    """arrays -> (fun's outputs, flags [graph slots]) for the batch form."""
    import jax
    import jax.numpy as jnp

    def run(arrays):
        roles = mode.roles(fun, _spec(arrays))
        view = mode.view(arrays)
        out = fun(view)
        graphs = arrays[fields.N_NODE].shape[0]
        flags = jnp.zeros(graphs, jnp.int32)
        if check_finite:
            bad = jnp.zeros(graphs, bool)
            for (_, leaf), role in zip(leaf_names(out), roles, strict=True):
                if not _inexact(leaf):
                    continue
                if role == "graph":
                    bad = bad | _not_finite(leaf)
                else:
                    owner, real = _owners(arrays, role)
                    hits = _not_finite(leaf, real).astype(jnp.int32)
                    bad = bad | (jax.ops.segment_sum(hits, owner, num_segments=graphs) > 0)
            flags = flags | jnp.where(bad, FINITE, 0)
        if check is not None:
            passed = jnp.broadcast_to(jnp.asarray(check(view, out), bool), (graphs,))
            flags = flags | jnp.where(passed, 0, CHECK)
        return out, flags

    return run


def single_views(arrays, mode: Any) -> dict[str, Any]:
    """Every graph slot's view [graphs, ...]: the graph padded as
    jraph.pad_with_graphs(graph, node_pad + 1, edge_pad, 2) pads it, its
    senders and receivers its own node ids."""
    import jax.numpy as jnp

    n_node, n_edge = arrays[fields.N_NODE], arrays[fields.N_EDGE]
    node_start, edge_start = _starts(n_node), _starts(n_edge)
    nodes = jnp.minimum(n_node, mode.node_pad)[:, None]  # [G, 1] real nodes shown
    edges = jnp.minimum(n_edge, mode.edge_pad)[:, None]
    node_slot = jnp.arange(mode.node_pad + 1)[None, :]
    edge_slot = jnp.arange(mode.edge_pad)[None, :]
    node_mask, edge_mask = node_slot < nodes, edge_slot < edges

    def gather(leaf, start, slot, mask, pad_row):
        ids = jnp.clip(start[:, None] + slot, 0, max(leaf.shape[0] - 1, 0))
        taken = leaf[ids] if leaf.shape[0] else jnp.zeros(ids.shape + leaf.shape[1:], leaf.dtype)
        keep = mask.reshape(mask.shape + (1,) * (leaf.ndim - 1))
        return jnp.where(keep, taken, jnp.zeros((), leaf.dtype))

    def per_graph(leaf, second):
        return jnp.stack([leaf, jnp.broadcast_to(jnp.asarray(second, leaf.dtype), leaf.shape)], 1)

    out = {}
    for key, leaf in arrays.items():
        role = key_role(key, mode.template)
        if key == keys.NODE_MASK:
            out[key] = node_mask
        elif key == keys.NODE_GRAPH:
            out[key] = jnp.where(node_mask, 0, 1).astype(leaf.dtype)
        elif key == keys.EDGE_MASK:
            out[key] = edge_mask
        elif key in (fields.SENDERS, fields.RECEIVERS):
            local = gather(leaf, edge_start, edge_slot, edge_mask, False) - node_start[:, None]
            out[key] = jnp.where(edge_mask, local, nodes).astype(leaf.dtype)
        elif role == "node":
            out[key] = gather(leaf, node_start, node_slot, node_mask, True)
        elif role == "edge":
            out[key] = gather(leaf, edge_start, edge_slot, edge_mask, False)
        elif key == fields.N_NODE:
            out[key] = jnp.concatenate([nodes, mode.node_pad + 1 - nodes], 1).astype(leaf.dtype)
        elif key == fields.N_EDGE:
            out[key] = jnp.concatenate([edges, mode.edge_pad - edges], 1).astype(leaf.dtype)
        elif key == keys.GRAPH_INDEX:
            out[key] = per_graph(leaf, -1)
        else:  # graph_mask, globals, per-graph columns: the padding graph's are 0.
            out[key] = per_graph(leaf, 0)
    return out


def per_graph_function(mode: Any, fun: Callable, check_finite: bool, check: Callable | None):
    """arrays -> (outputs in the batch's layout, flags [graph slots]) for
    per_example=True: fun vmapped over the graph slots' views."""
    import jax
    import jax.numpy as jnp

    def one(view_arrays, roles):
        view = mode.view(view_arrays)
        out = fun(view)
        flags = jnp.int32(0)
        if check_finite:
            bad = jnp.bool_(False)
            leaves = jax.tree_util.tree_leaves(out)
            for leaf, role in zip(leaves, roles, strict=True):
                if not _inexact(leaf):
                    continue
                real = {"node": view_arrays[keys.NODE_MASK], "edge": view_arrays[keys.EDGE_MASK]}
                bad = bad | _not_finite(leaf, real.get(role)).any()
            flags = flags | jnp.where(bad, FINITE, 0)
        if check is not None:
            flags = flags | jnp.where(jnp.asarray(check(view, out), bool), 0, CHECK)
        return out, flags

    def run(arrays):
        roles = mode.roles(fun, _spec(arrays))
        outs, flags = jax.vmap(lambda v: one(v, roles))(single_views(arrays, mode))
        leaves, treedef = jax.tree_util.tree_flatten(outs)
        placed = [
            _to_batch(leaf, role, arrays, mode) for leaf, role in zip(leaves, roles, strict=True)
        ]
        return jax.tree_util.tree_unflatten(treedef, placed), flags

    return run


def _to_batch(leaf, role: str, arrays, mode: Any):
    """A per-graph-view output [graphs, slots, ...] back in the batch's
    layout: per node [nodes, ...], per edge [edges, ...]; per graph as is."""
    import jax.numpy as jnp

    if role == "graph":
        return leaf
    owner, real = _owners(arrays, role)
    counts = arrays[fields.N_NODE if role == "node" else fields.N_EDGE]
    position = jnp.arange(owner.shape[0]) - _starts(counts)[owner]
    position = jnp.clip(position, 0, leaf.shape[1] - 1)
    taken = leaf[owner, position]
    keep = real.reshape(real.shape + (1,) * (taken.ndim - 1))
    return jnp.where(keep, taken, jnp.zeros((), leaf.dtype))
