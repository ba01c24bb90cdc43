"""jraph's own test cases, with jraph as the reference.

The cases are ported from jraph's ``jraph/_src/utils_test.py`` (the fixture
``_get_list_and_batched_graph`` with its nested features, ``_get_random_graph``,
``_get_list_matrix``'s feature-less graphs, ``_make_dynamic_batch_graph`` and
the tests that use them). Each case runs through ``jb.Dataset.from_graphs``,
``jb.GraphBudget`` / ``jb.GraphBuckets``, ``jb.plan`` and ``jb.collate`` (or
``jb.Loader``), and the batches must equal, field by field, what jraph builds
from the same graphs: ``jraph.pad_with_graphs(jraph.batch_np(...))`` for one
batch, ``jraph.dynamically_batch`` for a stream, jraph's padding masks, and
``jraph.unbatch_np(jraph.unpad_with_graphs(...))`` back to the input graphs.

Two differences from jraph are by design, and tested as such: jaxbatch takes
single graphs (n_node of shape [1]; jraph's dynamically_batch also takes
multi-graph GraphsTuples, which the ports below split with jraph.unbatch_np), and a
graph too big for the budget is a ValueError naming it when the batches are
planned, not a RuntimeError half-way through the stream. A third is worked
around, not tested: a feature leaf must have one dtype across graphs (jaxbatch
raises ValueError where jraph's concatenate would promote), so the fixture's empty feature
arrays take the dtype of the others (jraph's fixture mixes int32 and float32
and compares with assert_allclose)."""

from __future__ import annotations

import jax
import jraph
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb

GT = jraph.GraphsTuple
ALGORITHMS = ("next_fit", "first_fit", "best_fit")


# --- comparing GraphsTuples -------------------------------------------------


def assert_graphs_equal(got, want, what=""):
    """Field by field: feature leaves (nodes, edges, globals) by shape, dtype
    and value, in the order of jax.tree_util.tree_leaves (sorted dict keys) and
    with the same pytree structure; senders, receivers, n_node and n_edge by
    shape and value (jraph may give int64 or float64 where jaxbatch gives
    int32)."""
    for field in ("nodes", "edges", "globals"):
        g, w = getattr(got, field), getattr(want, field)
        g_leaves, w_leaves = jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(w)
        assert len(g_leaves) == len(w_leaves), f"{what} {field}: {g!r} vs {w!r}"
        if w_leaves:
            assert jax.tree_util.tree_structure(g) == jax.tree_util.tree_structure(w), (
                f"{what} {field}"
            )
        for k, (a, b) in enumerate(zip(g_leaves, w_leaves, strict=True)):
            a, b = np.asarray(a), np.asarray(b)
            assert a.shape == b.shape, f"{what} {field} leaf {k}: {a.shape} vs {b.shape}"
            assert a.dtype == b.dtype, f"{what} {field} leaf {k}: {a.dtype} vs {b.dtype}"
            np.testing.assert_array_equal(a, b, err_msg=f"{what} {field} leaf {k}")
    for field in ("senders", "receivers", "n_node", "n_edge"):
        a, b = np.asarray(getattr(got, field)), np.asarray(getattr(want, field))
        assert a.shape == b.shape, f"{what} {field}: {a.shape} vs {b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=f"{what} {field}")


def assert_masks_match_jraph(batch, what=""):
    """node/edge/graph masks equal jraph's padding masks of batch.graphs, and
    node_graph is each node's graph slot (np.repeat over n_node). jraph's
    node mask needs a node feature to read the node count from; a graph
    without one gets a dummy."""
    g = batch.graphs
    if not jax.tree_util.tree_leaves(g.nodes):
        g = g._replace(nodes=np.zeros((int(np.sum(g.n_node)), 1)))
    np.testing.assert_array_equal(
        batch["node_mask"], np.asarray(jraph.get_node_padding_mask(g)), err_msg=what
    )
    np.testing.assert_array_equal(
        batch["edge_mask"], np.asarray(jraph.get_edge_padding_mask(g)), err_msg=what
    )
    np.testing.assert_array_equal(
        batch["graph_mask"], np.asarray(jraph.get_graph_padding_mask(g)), err_msg=what
    )
    for key in ("node_mask", "edge_mask", "graph_mask"):
        assert batch[key].dtype == np.bool_, key
    n_node = np.asarray(g.n_node)
    np.testing.assert_array_equal(
        batch["node_graph"], np.repeat(np.arange(len(n_node)), n_node), err_msg=what
    )


def unbatch_np(graph):
    """jraph.unbatch_np on a copy: with numpy arrays it subtracts the node
    offsets from the senders and receivers of its input in place (np.split
    gives views), which would change the reference graph (or a batch's
    buffers) under the test."""
    return jraph.unbatch_np(jax.tree_util.tree_map(np.copy, graph))


def jraph_padded(graphs, nodes, edges, n_graph):
    return jraph.pad_with_graphs(jraph.batch_np(list(graphs)), nodes, edges, n_graph)


def one_batch(graphs, nodes, edges, n_graph, algorithm="best_fit"):
    """jaxbatch's single batch of all `graphs` under the budget."""
    ds = jb.Dataset.from_graphs(graphs, validate=True)
    plan = jb.plan(
        ds, jb.GraphBudget(nodes=nodes, edges=edges, graphs=n_graph, algorithm=algorithm)
    )
    assert len(plan) == 1
    assert list(plan[0].example_ids) == list(range(len(graphs)))
    return jb.collate(ds, plan[0])


def assert_unbatches_to(batch, graphs, what=""):
    back = unbatch_np(jraph.unpad_with_graphs(batch.graphs))
    assert len(back) == len(graphs), what
    for i, (g, want) in enumerate(zip(back, graphs, strict=True)):
        assert_graphs_equal(g, want, f"{what} graph {i}")


# --- jraph's fixtures, in numpy -----------------------------------------------


def _make_nest(array):
    """jraph's _make_nest."""
    return {"a": array, "b": [np.ones_like(array), {"c": np.zeros_like(array)}]}


def _i32(x):
    return np.asarray(x, dtype=np.int32)


def _get_list_and_batched_graph():
    """jraph's _get_list_and_batched_graph: single node, multiple nodes, no
    edges, single edge, multiple edges, zero-node graphs, and a last
    GraphsTuple holding no graph at all. Features are int32 throughout (jraph's
    empty ones are float32)."""
    batched = GT(
        n_node=np.array([1, 3, 1, 0, 2, 0, 0]),
        n_edge=np.array([2, 5, 0, 0, 1, 0, 0]),
        nodes=_make_nest(_i32(np.arange(14).reshape(7, 2))),
        edges=_make_nest(_i32(np.arange(24).reshape(8, 3))),
        globals=_make_nest(_i32(np.arange(14).reshape(7, 2))),
        senders=np.array([0, 0, 1, 1, 2, 3, 3, 6]),
        receivers=np.array([0, 0, 2, 1, 3, 2, 1, 5]),
    )
    z2, z3 = _i32(np.zeros((0, 2))), _i32(np.zeros((0, 3)))
    empty = np.array([])  # float64, as jraph's jnp.array([]) is a float
    graphs = [
        GT(
            n_node=np.array([1]),
            n_edge=np.array([2]),
            nodes=_make_nest(_i32([[0, 1]])),
            edges=_make_nest(_i32([[0, 1, 2], [3, 4, 5]])),
            globals=_make_nest(_i32([[0, 1]])),
            senders=np.array([0, 0]),
            receivers=np.array([0, 0]),
        ),
        GT(
            n_node=np.array([3]),
            n_edge=np.array([5]),
            nodes=_make_nest(_i32([[2, 3], [4, 5], [6, 7]])),
            edges=_make_nest(
                _i32([[6, 7, 8], [9, 10, 11], [12, 13, 14], [15, 16, 17], [18, 19, 20]])
            ),
            globals=_make_nest(_i32([[2, 3]])),
            senders=np.array([0, 0, 1, 2, 2]),
            receivers=np.array([1, 0, 2, 1, 0]),
        ),
        GT(
            n_node=np.array([1]),
            n_edge=np.array([0]),
            nodes=_make_nest(_i32([[8, 9]])),
            edges=_make_nest(z3),
            globals=_make_nest(_i32([[4, 5]])),
            senders=empty,
            receivers=empty,
        ),
        GT(
            n_node=np.array([0]),
            n_edge=np.array([0]),
            nodes=_make_nest(z2),
            edges=_make_nest(z3),
            globals=_make_nest(_i32([[6, 7]])),
            senders=empty,
            receivers=empty,
        ),
        GT(
            n_node=np.array([2]),
            n_edge=np.array([1]),
            nodes=_make_nest(_i32([[10, 11], [12, 13]])),
            edges=_make_nest(_i32([[21, 22, 23]])),
            globals=_make_nest(_i32([[8, 9]])),
            senders=np.array([1]),
            receivers=np.array([0]),
        ),
        GT(
            n_node=np.array([0]),
            n_edge=np.array([0]),
            nodes=_make_nest(z2),
            edges=_make_nest(z3),
            globals=_make_nest(_i32([[10, 11]])),
            senders=empty,
            receivers=empty,
        ),
        GT(
            n_node=np.array([0]),
            n_edge=np.array([0]),
            nodes=_make_nest(z2),
            edges=_make_nest(z3),
            globals=_make_nest(_i32([[12, 13]])),
            senders=empty,
            receivers=empty,
        ),
        GT(
            n_node=np.array([], dtype=np.int64),
            n_edge=np.array([], dtype=np.int64),
            nodes=_make_nest(z2),
            edges=_make_nest(z3),
            globals=_make_nest(_i32(np.zeros((0, 2)))),
            senders=empty,
            receivers=empty,
        ),
    ]
    return graphs, batched


def _single_graphs():
    """The fixture's graphs that are one graph each (all but the last)."""
    graphs, _ = _get_list_and_batched_graph()
    return graphs[:-1]


def _get_random_graph(
    rng,
    max_n_graph=10,
    include_node_features=True,
    include_edge_features=True,
    include_globals=True,
):
    """jraph's _get_random_graph, on a numpy RandomState."""
    n_graph = rng.randint(1, max_n_graph + 1)
    n_node = rng.randint(0, 10, n_graph)
    n_edge = rng.randint(0, 20, n_graph)
    # We cannot have any edges if there are no nodes.
    n_edge[n_node == 0] = 0
    senders, receivers, offset = [], [], 0
    for n_node_in_graph, n_edge_in_graph in zip(n_node, n_edge, strict=True):
        if n_edge_in_graph != 0:
            senders += list(rng.randint(0, n_node_in_graph, n_edge_in_graph) + offset)
            receivers += list(rng.randint(0, n_node_in_graph, n_edge_in_graph) + offset)
        offset += n_node_in_graph
    return GT(
        n_node=n_node,
        n_edge=n_edge,
        nodes=rng.random_sample((np.sum(n_node), 4)) if include_node_features else None,
        edges=rng.random_sample((np.sum(n_edge), 3)) if include_edge_features else None,
        globals=rng.random_sample((n_graph, 5)) if include_globals else None,
        senders=np.asarray(senders, dtype=np.int64),
        receivers=np.asarray(receivers, dtype=np.int64),
    )


def _get_list_matrix_graphs():
    """The expected graphs of jraph's _get_list_matrix: no nodes, edges or
    globals features, one of them with no nodes and one with no edges."""
    empty = np.array([])
    return [
        GT(
            n_node=np.array([1]),
            n_edge=np.array([2]),
            nodes=None,
            edges=None,
            globals=None,
            senders=np.array([0, 0]),
            receivers=np.array([0, 0]),
        ),
        GT(
            n_node=np.array([3]),
            n_edge=np.array([5]),
            nodes=None,
            edges=None,
            globals=None,
            senders=np.array([0, 0, 1, 2, 2]),
            receivers=np.array([0, 1, 2, 0, 1]),
        ),
        GT(
            n_node=np.array([1]),
            n_edge=np.array([0]),
            nodes=None,
            edges=None,
            globals=None,
            senders=empty,
            receivers=empty,
        ),
        GT(
            n_node=np.array([0]),
            n_edge=np.array([0]),
            nodes=None,
            edges=None,
            globals=None,
            senders=empty,
            receivers=empty,
        ),
        GT(
            n_node=np.array([2]),
            n_edge=np.array([1]),
            nodes=None,
            edges=None,
            globals=None,
            senders=np.array([1]),
            receivers=np.array([0]),
        ),
    ]


# jraph's DynamicBatchTest graphs: each GraphsTuple holds two graphs.
_DB_NUM_NODES = (10, 15)
_DB_NODE_SHAPE = (3, 4, 1)
_DB_NUM_EDGES = (12, 17)
_DB_EDGE_SHAPE = (4, 3)
_DB_GLOBAL_SHAPE = (2, 3, 1, 4)


def _make_dynamic_batch_graph(rng, add_globals, num_nodes=_DB_NUM_NODES, num_edges=_DB_NUM_EDGES):
    """jraph's _make_dynamic_batch_graph (globals {} when add_globals is
    False, as jraph has it), except that each edge joins nodes of its own
    graph: jraph draws senders and receivers over all the tuple's nodes, which
    from_graphs(validate=True) rejects once the tuple is split."""
    total_num_edges, total_num_nodes = sum(num_edges), sum(num_nodes)
    g_ = _make_nest(rng.normal(size=_DB_GLOBAL_SHAPE)) if add_globals else {}
    offsets = np.repeat(np.cumsum((0,) + tuple(num_nodes[:-1])), num_edges)
    sizes = np.repeat(num_nodes, num_edges)
    return GT(
        nodes=_make_nest(rng.normal(size=(total_num_nodes,) + _DB_NODE_SHAPE)),
        edges=_make_nest(rng.normal(size=(total_num_edges,) + _DB_EDGE_SHAPE)),
        n_edge=np.array(num_edges),
        n_node=np.array(num_nodes),
        senders=(offsets + rng.randint(0, sizes)).astype(np.int32),
        receivers=(offsets + rng.randint(0, sizes)).astype(np.int32),
        globals=g_,
    )


def _singles(graphs_tuples):
    """Multi-graph GraphsTuples as the single graphs from_graphs takes."""
    return [g for gt in graphs_tuples for g in unbatch_np(gt)]


def _next_fit_batches(graphs, nodes, edges, n_graph, loader=False):
    ds = jb.Dataset.from_graphs(graphs, validate=True)
    planner = jb.GraphBudget(nodes=nodes, edges=edges, graphs=n_graph, algorithm="next_fit")
    if loader:
        return list(jb.Loader(ds, planner, shuffle="none", epochs=1))
    return [jb.collate(ds, spec) for spec in jb.plan(ds, planner)]


# --- GraphTest: batch, pad, unpad, masks --------------------------------------


def test_fixture_batch_np_is_jraphs_batched_graph():
    """jraph's test_batch_np on the numpy fixture: the reference itself."""
    graphs, batched = _get_list_and_batched_graph()
    assert_graphs_equal(jraph.batch_np(graphs), batched, "batch_np(all 8)")
    assert_graphs_equal(jraph.batch_np(graphs[:-1]), batched, "batch_np(7 single graphs)")


def test_fixture_graph_holding_no_graph_is_rejected_by_name():
    """The fixture's last GraphsTuple holds zero graphs (n_node of shape
    [0]); jraph's batch_np takes it as nothing, from_graphs names it."""
    graphs, _ = _get_list_and_batched_graph()
    with pytest.raises(ValueError, match="graph 7"):
        jb.Dataset.from_graphs(graphs, validate=True)


def test_pad_with_graphs_literal_expectation_of_jraph():
    """jraph's test_pad_with_graphs: the batched fixture padded to 10 nodes,
    12 edges, 9 graphs, written out as jraph's test writes it."""
    graphs, batched = _get_list_and_batched_graph()

    def pad(rows):
        return lambda f: np.concatenate([f, np.zeros((rows,) + f.shape[1:], f.dtype)])

    expected = GT(
        n_node=np.concatenate([batched.n_node, [3, 0]]),
        n_edge=np.concatenate([batched.n_edge, [4, 0]]),
        nodes=jax.tree_util.tree_map(pad(3), batched.nodes),
        edges=jax.tree_util.tree_map(pad(4), batched.edges),
        globals=jax.tree_util.tree_map(pad(2), batched.globals),
        senders=np.concatenate([batched.senders, [7, 7, 7, 7]]),
        receivers=np.concatenate([batched.receivers, [7, 7, 7, 7]]),
    )
    assert_graphs_equal(jraph.pad_with_graphs(batched, 10, 12, 9), expected, "jraph")
    for algorithm in ALGORITHMS:
        batch = one_batch(graphs[:-1], 10, 12, 9, algorithm)
        assert_graphs_equal(batch.graphs, expected, algorithm)


@pytest.mark.parametrize(
    "nodes, edges, n_graph",
    [
        (10, 12, 9),  # test_pad_with_graphs
        (8, 8, 8),  # test_pad_unpad_with_graphs_exact_padding: no padding edge
        (8, 8, 9),  # no padding edge, empty padding graphs
        (8, 9, 8),  # one padding node and edge, one padding graph
        (101, 200, 11),  # test_pad_unpad_with_random_graphs' budget
        (30, 8, 40),
    ],
)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_nested_fixture_one_batch_equals_pad_with_graphs_of_batch_np(
    nodes, edges, n_graph, algorithm
):
    graphs = _single_graphs()
    batch = one_batch(graphs, nodes, edges, n_graph, algorithm)
    want = jraph_padded(graphs, nodes, edges, n_graph)
    assert_graphs_equal(batch.graphs, want, f"budget {(nodes, edges, n_graph)}")
    # batch.graphs' arrays are the batch's columns.
    np.testing.assert_array_equal(batch["nodes/b/1/c"], batch.graphs.nodes["b"][1]["c"])
    np.testing.assert_array_equal(batch["globals/a"], batch.graphs.globals["a"])
    assert_masks_match_jraph(batch)
    np.testing.assert_array_equal(
        batch["graph_index"], list(range(len(graphs))) + [-1] * (n_graph - len(graphs))
    )
    assert batch["graph_index"].dtype == np.int64
    assert_unbatches_to(batch, graphs)


def test_dict_graphs_give_the_same_batch_as_graphs_tuples():
    graphs = _single_graphs()
    as_dicts = [g._asdict() for g in graphs]
    assert_graphs_equal(
        one_batch(as_dicts, 10, 12, 9).graphs, jraph_padded(graphs, 10, 12, 9), "dicts"
    )


def test_unpad_of_jraph():
    """jraph's test_unpad: its batched fixture read as padded (graphs 4-6
    padding) is what jaxbatch builds from the first four graphs under
    (7, 8, 7); unpad_with_graphs of it is jraph's expected graph."""
    graphs = _single_graphs()[:4]
    batch = one_batch(graphs, 7, 8, 7)
    expected_unpadded = GT(
        n_node=np.array([1, 3, 1, 0]),
        n_edge=np.array([2, 5, 0, 0]),
        nodes=_make_nest(_i32(np.arange(10).reshape(5, 2))),
        edges=_make_nest(_i32(np.arange(21).reshape(7, 3))),
        globals=_make_nest(_i32(np.arange(8).reshape(4, 2))),
        senders=np.array([0, 0, 1, 1, 2, 3, 3]),
        receivers=np.array([0, 0, 2, 1, 3, 2, 1]),
    )
    assert_graphs_equal(jraph.unpad_with_graphs(batch.graphs), expected_unpadded)
    assert_unbatches_to(batch, graphs)


def test_padding_masks_and_counts_of_jraph():
    """jraph's test_get_{node,edge,graph}_padding_mask and
    test_get_number_of_padding_with_graphs_{graphs,nodes,edges}: the fixture
    read as padded has 3 padding graphs, 2 padding nodes, 1 padding edge."""
    batch = one_batch(_single_graphs()[:4], 7, 8, 7)
    g = batch.graphs
    np.testing.assert_array_equal(batch["node_mask"], np.array([1, 1, 1, 1, 1, 0, 0], bool))
    np.testing.assert_array_equal(batch["edge_mask"], np.array([1, 1, 1, 1, 1, 1, 1, 0], bool))
    np.testing.assert_array_equal(batch["graph_mask"], np.array([1, 1, 1, 1, 0, 0, 0], bool))
    assert_masks_match_jraph(batch)
    assert int(jraph.get_number_of_padding_with_graphs_graphs(g)) == 3
    assert int(jraph.get_number_of_padding_with_graphs_nodes(g)) == 2
    assert int(jraph.get_number_of_padding_with_graphs_edges(g)) == 1
    np.testing.assert_array_equal(batch["node_graph"], [0, 1, 1, 1, 2, 4, 4])
    np.testing.assert_array_equal(batch["graph_index"], [0, 1, 2, 3, -1, -1, -1])


@pytest.mark.parametrize(
    "include_globals, include_nodes, include_edges",
    [(True, True, False), (True, False, True), (False, True, True), (False, False, False)],
)
def test_pad_unpad_with_random_graphs(include_globals, include_nodes, include_edges):
    """jraph's test_pad_unpad_with_random_graphs and
    test_batch_unbatch_with_random_graphs: random graphs (zero-node and
    zero-edge ones among them, a feature left out as None) padded to
    (101, 200, 11); (False, False, False) is beyond jraph's cases."""
    rng = np.random.RandomState(42)
    for trial in range(40):
        g = _get_random_graph(
            rng,
            include_globals=include_globals,
            include_node_features=include_nodes,
            include_edge_features=include_edges,
        )
        singles = unbatch_np(g)
        batch = one_batch(singles, 101, 200, 11)
        what = f"trial {trial}, n_node {g.n_node}, n_edge {g.n_edge}"
        assert_graphs_equal(batch.graphs, jraph.pad_with_graphs(g, 101, 200, 11), what)
        assert_masks_match_jraph(batch, what)
        assert_graphs_equal(jraph.unpad_with_graphs(batch.graphs), g, what)
        assert_unbatches_to(batch, singles, what)
        for field, present in (
            ("nodes", include_nodes),
            ("edges", include_edges),
            ("globals", include_globals),
        ):
            assert (getattr(batch.graphs, field) is None) == (not present), field


def test_pad_unpad_with_graphs_exact_padding():
    """jraph's test_pad_unpad_with_graphs_exact_padding: one padding node, no
    padding edge, one padding graph."""
    rng = np.random.RandomState(0)
    for _ in range(10):
        g = _get_random_graph(rng)
        n_node, n_edge, n_graph = int(g.n_node.sum()) + 1, int(g.n_edge.sum()), len(g.n_node) + 1
        batch = one_batch(unbatch_np(g), n_node, n_edge, n_graph)
        assert_graphs_equal(batch.graphs, jraph.pad_with_graphs(g, n_node, n_edge, n_graph))
        assert batch["edge_mask"].all() and batch["node_mask"].sum() == n_node - 1
        assert_graphs_equal(jraph.unpad_with_graphs(batch.graphs), g)


@pytest.mark.parametrize("budget", [(8, 8, 6), (8, 9, 7), (20, 20, 20)])
def test_featureless_graphs_of_get_list_matrix(budget):
    """_get_list_matrix's graphs (AdjacencyMatrixTest): nodes, edges and
    globals all None, a graph with no nodes and one with no edges."""
    graphs = _get_list_matrix_graphs()
    batch = one_batch(graphs, *budget)
    want = jraph_padded(graphs, *budget)
    assert want.nodes is None and want.edges is None and want.globals is None
    assert batch.graphs.nodes is None and batch.graphs.edges is None
    assert batch.graphs.globals is None
    assert_graphs_equal(batch.graphs, want)
    assert_masks_match_jraph(batch)
    assert_unbatches_to(batch, graphs)


def test_graph_with_no_nodes_and_no_edges_alone():
    graphs = [_single_graphs()[3]]  # n_node 0, n_edge 0, nested features
    for budget in [(2, 0, 2), (3, 2, 4)]:
        batch = one_batch(graphs, *budget)
        assert_graphs_equal(batch.graphs, jraph_padded(graphs, *budget), str(budget))
        assert_masks_match_jraph(batch)
        assert_unbatches_to(batch, graphs)


# --- ZeroOutTest ----------------------------------------------------------------


def test_zero_out_padding_of_jraph_leaves_jaxbatch_padding_unchanged(monkeypatch):
    """jraph's test_zero_padding_values: jaxbatch pads with zeros, so
    zero_out_padding changes nothing, and after features are made non-zero it
    zeroes exactly the padding jaxbatch's masks name. (jraph 0.0.6.dev0's
    zero_out_padding calls jax.tree_map, which this jax no longer has.)"""
    if not hasattr(jax, "tree_map"):
        monkeypatch.setattr(jax, "tree_map", jax.tree_util.tree_map, raising=False)
    rng = np.random.RandomState(3)
    g = _get_random_graph(rng, max_n_graph=1)
    n, e = int(g.n_node.sum()), int(g.n_edge.sum())
    for budget in [(20, 20, 3), (n + 1, e, 3), (n + 1, e, 2)]:
        batch = one_batch(unbatch_np(g), *budget)
        padded = batch.graphs
        same = jax.device_get(jraph.zero_out_padding(padded))
        for field in ("nodes", "edges", "globals"):
            # jax arrays: float32 unless jax_enable_x64.
            z, p = np.asarray(getattr(same, field)), getattr(padded, field)
            np.testing.assert_array_equal(z, p.astype(z.dtype), err_msg=f"{budget} {field}")
        shifted = padded._replace(
            nodes=padded.nodes - 1.0, edges=padded.edges - 1.0, globals=padded.globals - 1.0
        )
        zeroed = jax.device_get(jraph.zero_out_padding(shifted))
        for field, mask in (
            ("nodes", "node_mask"),
            ("edges", "edge_mask"),
            ("globals", "graph_mask"),
        ):
            values, keep = getattr(zeroed, field), batch[mask]
            want = getattr(shifted, field)[keep].astype(values.dtype)
            np.testing.assert_array_equal(values[keep], want)
            np.testing.assert_array_equal(values[~keep], 0.0)


# --- DynamicBatchTest -------------------------------------------------------------

_DB_CASES = {
    "graph_with_globals_n_node_hit": (
        True,
        dict(n_node=sum(_DB_NUM_NODES) + 1, n_edge=sum(_DB_NUM_EDGES) + 100, n_graph=102),
    ),
    "graph_with_globals_n_edge_hit": (
        True,
        dict(n_node=sum(_DB_NUM_NODES) + 100, n_edge=sum(_DB_NUM_EDGES), n_graph=102),
    ),
    "graph_with_globals_n_graph_hit": (
        True,
        dict(n_node=sum(_DB_NUM_NODES) + 100, n_edge=sum(_DB_NUM_EDGES) + 100, n_graph=3),
    ),
    # jraph's names; its use_globals is False for all three.
    "graph_with_globals_no_budget_hit": (
        False,
        dict(n_node=sum(_DB_NUM_NODES) + 5, n_edge=sum(_DB_NUM_EDGES) + 5, n_graph=7),
    ),
    "graph_no_globals_no_budget_hit": (
        False,
        dict(n_node=sum(_DB_NUM_NODES) + 5, n_edge=sum(_DB_NUM_EDGES) + 5, n_graph=7),
    ),
    "graph_nests_no_globals_no_budget_hit": (
        False,
        dict(n_node=sum(_DB_NUM_NODES) + 5, n_edge=sum(_DB_NUM_EDGES) + 5, n_graph=7),
    ),
}


@pytest.mark.parametrize("loader", [False, True], ids=["plan", "loader"])
@pytest.mark.parametrize("case", list(_DB_CASES))
def test_dynamically_batch(case, loader):
    """jraph's test_dynamically_batch: four two-graph GraphsTuples and the
    last one unbatched; each budget is hit (or nearly) by one pair, so five
    batches. jaxbatch's next_fit over the same graphs, one at a time, gives
    jraph's batches field by field (both from the two-graph elements and from
    the single graphs), by plan + collate and by the Loader."""
    use_globals, kw = _DB_CASES[case]
    rng = np.random.RandomState(sorted(_DB_CASES).index(case))
    tuples = [_make_dynamic_batch_graph(rng, add_globals=use_globals) for _ in range(4)]
    stream = tuples + unbatch_np(tuples[-1])
    want = list(jraph.dynamically_batch(iter(stream), **kw))
    singles = _singles(stream)
    want_singles = list(jraph.dynamically_batch(iter(singles), **kw))
    got = _next_fit_batches(singles, kw["n_node"], kw["n_edge"], kw["n_graph"], loader)
    # jraph's own checks.
    assert len(want) == 5 and len(want_singles) == 5 and len(got) == 5
    for k, (batch, w, ws) in enumerate(zip(got, want, want_singles, strict=True)):
        assert_graphs_equal(ws, w, f"jraph singles batch {k}")
        assert_graphs_equal(batch.graphs, w, f"batch {k}")
        g = batch.graphs
        for leaf in jax.tree_util.tree_leaves(g.nodes):
            assert leaf.shape[0] == kw["n_node"]
        for leaf in jax.tree_util.tree_leaves(g.edges):
            assert leaf.shape[0] == kw["n_edge"]
        assert len(g.n_node) == kw["n_graph"]
        assert int(jraph.get_number_of_padding_with_graphs_nodes(g)) == kw["n_node"] - sum(
            _DB_NUM_NODES
        )
        assert int(jraph.get_number_of_padding_with_graphs_edges(g)) == kw["n_edge"] - sum(
            _DB_NUM_EDGES
        )
        assert_masks_match_jraph(batch, f"batch {k}")
        np.testing.assert_array_equal(
            batch["graph_index"], [2 * k, 2 * k + 1] + [-1] * (kw["n_graph"] - 2)
        )


def test_too_big_graphs_tuple():
    """jraph's test_too_big_graphs_tuple: jraph raises RuntimeError when it
    reaches the graph; jaxbatch raises ValueError naming the graph (a single
    graph of jraph's two-graph element) when the batches are planned."""
    rng = np.random.RandomState(7)
    global_graph = _make_dynamic_batch_graph(rng, add_globals=True)
    small = _make_dynamic_batch_graph(rng, add_globals=True, num_nodes=(5, 7), num_edges=(6, 8))
    ds = jb.Dataset.from_graphs(_singles([global_graph]), validate=True)

    # test_too_big_nodes: graph 1 has 15 nodes, the budget 14 real ones.
    with pytest.raises(RuntimeError, match="Found graph bigger than batch size"):
        next(jraph.dynamically_batch(iter([global_graph]), n_node=15, n_edge=50, n_graph=10))
    with pytest.raises(ValueError, match="graph 1 has 15 nodes and 17 edges"):
        jb.plan(ds, jb.GraphBudget(nodes=15, edges=50, graphs=10, algorithm="next_fit"))

    # test_too_big_edges: graph 1 has 17 edges, the budget 15.
    with pytest.raises(RuntimeError, match="Found graph bigger than batch size"):
        next(jraph.dynamically_batch(iter([global_graph]), n_node=26, n_edge=15, n_graph=10))
    for algorithm in ALGORITHMS:
        with pytest.raises(ValueError, match="graph 1 has 15 nodes and 17 edges"):
            jb.plan(ds, jb.GraphBudget(nodes=26, edges=15, graphs=10, algorithm=algorithm))

    # test_too_big_graphs: n_graph=1.
    with pytest.raises(ValueError, match="The number of graphs"):
        next(jraph.dynamically_batch(iter([global_graph]), n_node=50, n_edge=50, n_graph=1))
    with pytest.raises(ValueError, match="graphs must be at least 2"):
        jb.GraphBudget(nodes=50, edges=50, graphs=1)

    # test_too_big_fails_gracefully: jraph yields the first batch, then
    # raises; jaxbatch refuses the plan, or with too_big="skip" leaves the
    # graph out and its first batch is jraph's.
    stream = [small, global_graph]
    it = jraph.dynamically_batch(iter(stream), n_node=15, n_edge=15, n_graph=10)
    first = next(it)
    with pytest.raises(RuntimeError, match="Found graph bigger than batch size"):
        next(it)
    ds2 = jb.Dataset.from_graphs(_singles(stream), validate=True)
    with pytest.raises(ValueError, match="graph 3 has 15 nodes and 17 edges"):
        jb.plan(ds2, jb.GraphBudget(nodes=15, edges=15, graphs=10, algorithm="next_fit"))
    plan = jb.plan(
        ds2, jb.GraphBudget(nodes=15, edges=15, graphs=10, algorithm="next_fit", too_big="skip")
    )
    assert plan.stats.skipped == 1
    assert [list(s.example_ids) for s in plan] == [[0, 1], [2]]
    assert_graphs_equal(jb.collate(ds2, plan[0]).graphs, first, "first batch")


def test_not_enough_graphs():
    """jraph's test_not_enough_graphs: a budget of one graph slot leaves none
    for the padding graph."""
    rng = np.random.RandomState(8)
    global_graph = _make_dynamic_batch_graph(rng, add_globals=True)
    with pytest.raises(ValueError, match="The number of graphs"):
        next(jraph.dynamically_batch(iter([global_graph]), n_node=5, n_edge=5, n_graph=1))
    for planner in (jb.GraphBudget, lambda **kw: jb.GraphBuckets(max_shapes=2, **kw)):
        for n_graph in (1, 0):
            with pytest.raises(ValueError, match="graphs must be at least 2"):
                planner(nodes=5, edges=5, graphs=n_graph)


# --- random graph lists ---------------------------------------------------------


def _random_single_graphs(seed, sizes, node_kind, edge_kind, with_globals):
    rng = np.random.RandomState(seed)

    def features(kind, count, width):
        if kind == "none":
            return None
        x = rng.normal(size=(count, width)).astype(np.float32)
        if kind == "array":
            return x
        return {"x": x, "k": [np.arange(count, dtype=np.int64), {"z": -x[:, :1]}]}

    graphs = []
    for i, (k, m) in enumerate(sizes):
        graphs.append(
            GT(
                n_node=np.array([k]),
                n_edge=np.array([m]),
                nodes=features(node_kind, k, 2),
                edges=features(edge_kind, m, 3),
                globals={"g": np.array([[i, -i]], np.float64)} if with_globals else None,
                senders=rng.randint(0, max(k, 1), m).astype(np.int32),
                receivers=rng.randint(0, max(k, 1), m).astype(np.int32),
            )
        )
    return graphs


graph_size = st.integers(0, 8).flatmap(
    lambda k: st.tuples(st.just(k), st.integers(0, 12) if k else st.just(0))
)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(graph_size, min_size=1, max_size=14),
    extra=st.tuples(st.integers(0, 10), st.integers(0, 12), st.integers(2, 6)),
    node_kind=st.sampled_from(["array", "nest", "none"]),
    edge_kind=st.sampled_from(["array", "nest", "none"]),
    with_globals=st.booleans(),
    open_batches=st.sampled_from([None, 1, 3]),
    seed=st.integers(0, 2**16),
)
def test_random_graph_lists_match_jraph(
    sizes, extra, node_kind, edge_kind, with_globals, open_batches, seed
):
    """next_fit is jraph.dynamically_batch, batch for batch; first_fit,
    best_fit and GraphBuckets place every graph exactly once, each batch
    equal to jraph's pad_with_graphs(batch_np) of its graphs under its shape,
    with jraph's masks."""
    graphs = _random_single_graphs(seed, sizes, node_kind, edge_kind, with_globals)
    # jraph takes nodes=1 when every graph is empty; GraphBudget wants 2.
    nodes = max(2, max(k for k, _ in sizes) + 1 + extra[0])
    edges = max(m for _, m in sizes) + extra[1]
    n_graph = extra[2]
    want = list(jraph.dynamically_batch(iter(graphs), nodes, edges, n_graph))
    got = _next_fit_batches(graphs, nodes, edges, n_graph)
    assert len(got) == len(want)
    for k, (batch, w) in enumerate(zip(got, want, strict=True)):
        assert_graphs_equal(batch.graphs, w, f"next_fit batch {k}")
        assert_masks_match_jraph(batch, f"next_fit batch {k}")

    ds = jb.Dataset.from_graphs(graphs, validate=True)
    budget = dict(nodes=nodes, edges=edges, graphs=n_graph, open_batches=open_batches)
    planners = [jb.GraphBudget(algorithm=a, **budget) for a in ("first_fit", "best_fit")]
    planners.append(jb.GraphBuckets(max_shapes=2, algorithm="best_fit", **budget))
    for planner in planners:
        plan = jb.plan(ds, planner)
        placed = [int(i) for spec in plan for i in spec.example_ids]
        assert sorted(placed) == list(range(len(graphs))), planner
        assert plan.stats.skipped == 0
        for spec in plan:
            ids = [int(i) for i in spec.example_ids]
            shape = spec.shape
            assert shape.rows <= n_graph and shape.length <= nodes and shape.edges <= edges
            batch = jb.collate(ds, spec)
            what = f"{planner} batch {spec.index} {ids}"
            want_one = jraph_padded([graphs[i] for i in ids], shape.length, shape.edges, shape.rows)
            assert_graphs_equal(batch.graphs, want_one, what)
            assert_masks_match_jraph(batch, what)
            np.testing.assert_array_equal(
                batch["graph_index"], ids + [-1] * (shape.rows - len(ids)), err_msg=what
            )
            assert int(batch["node_mask"].sum()) == sum(sizes[i][0] for i in ids)
            assert int(batch["edge_mask"].sum()) == sum(sizes[i][1] for i in ids)
