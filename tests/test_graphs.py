"""Graph batches: from_graphs, GraphBudget / GraphBuckets through plan, collate
and the Loader (shuffle, shards, resume, bad graphs), unbatch and the masked
scatter ops, each checked against a plain NumPy reference. jraph's own cases
are in test_graphs_jraph.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb


def random_graphs(n, seed=0, max_nodes=9, with_globals=True):
    rng = np.random.default_rng(seed)
    graphs = []
    for i in range(n):
        k = int(rng.integers(0, max_nodes + 1))
        m = int(rng.integers(0, 3 * k + 1)) if k else 0
        graphs.append(
            {
                "nodes": {
                    "x": rng.normal(size=(k, 3)).astype(np.float32),
                    "kind": [np.full((k,), i, np.int32), np.arange(k, dtype=np.int64)],
                },
                "edges": rng.normal(size=(m, 2)).astype(np.float32),
                "senders": rng.integers(0, max(k, 1), m).astype(np.int32),
                "receivers": rng.integers(0, max(k, 1), m).astype(np.int32),
                "globals": np.array([[i, -i]], np.float32) if with_globals else None,
                "n_node": np.array([k]),
                "n_edge": np.array([m]),
            }
        )
    return graphs


def ids_of(batches):
    return [[int(i) for i in b["graph_index"] if i >= 0] for b in batches]


def test_batch_graphs_rebuild_the_input_pytrees_and_unbatch_gives_each_graph_back():
    graphs = random_graphs(30)
    ds = jb.Dataset.from_graphs(graphs)
    assert ds.is_graphs
    plan = jb.plan(ds, jb.GraphBudget(nodes=40, edges=60, graphs=8))
    seen = []
    for spec in plan:
        batch = jb.collate(ds, spec)
        g = batch.graphs
        # The pytree of from_graphs, lists included, with jraph's field order.
        assert isinstance(g.nodes["kind"], list) and g.nodes["x"].shape == (40, 3)
        assert g._fields == (
            "nodes",
            "edges",
            "receivers",
            "senders",
            "globals",
            "n_node",
            "n_edge",
        )
        assert int(g.n_node.sum()) == 40 and int(g.n_edge.sum()) == 60
        outputs = {"nodes/x": batch["nodes/x"], "edges": batch["edges"],
                   "senders": batch["senders"], "globals": batch["globals"]}  # fmt: skip
        for example, parts in jb.unbatch(outputs, batch).items():
            seen.append(example)
            want = graphs[example]
            np.testing.assert_array_equal(parts["nodes/x"], want["nodes"]["x"])
            np.testing.assert_array_equal(parts["edges"], want["edges"])
            np.testing.assert_array_equal(parts["senders"], want["senders"])
            np.testing.assert_array_equal(parts["globals"], want["globals"][0])
    assert sorted(seen) == list(range(30))


def test_unbatch_reads_per_node_edge_or_graph_from_the_leading_axis_or_per():
    ds = jb.Dataset.from_graphs(random_graphs(12, seed=1))
    batch = jb.collate(ds, jb.plan(ds, jb.GraphBudget(nodes=30, edges=30, graphs=5))[0])
    counts = jb.unbatch({"h": np.arange(30), "g": np.arange(5) * 10}, batch, per={"h": "node"})
    for example, parts in counts.items():
        slot = list(batch["graph_index"]).index(example)
        start = int(batch["n_node"][:slot].sum())
        np.testing.assert_array_equal(parts["h"], np.arange(start, start + batch["n_node"][slot]))
        assert parts["g"] == slot * 10
    with pytest.raises(ValueError, match="could be per node or per edge: pass per="):
        jb.unbatch({"h": np.arange(30)}, batch)
    with pytest.raises(ValueError, match="is none of them"):
        jb.unbatch({"h": np.arange(7)}, batch)


def test_from_graphs_names_the_graph_and_field_of_bad_input():
    graphs = random_graphs(5, seed=2)
    graphs[3] = dict(graphs[3], senders=np.array([0, 99], np.int32),
                     receivers=np.array([0, 0], np.int32), edges=np.zeros((2, 2), np.float32),
                     n_edge=np.array([2]), n_node=np.array([4]),
                     nodes={"x": np.zeros((4, 3), np.float32),
                            "kind": [np.zeros(4, np.int32), np.zeros(4, np.int64)]})  # fmt: skip
    with pytest.raises(ValueError, match=r"graph 3: senders\[1\] = 99 is not a node id; the graph "
                                         r"has 4 nodes"):  # fmt: skip
        jb.Dataset.from_graphs(graphs)
    graphs = random_graphs(5, seed=2)
    graphs[2]["n_node"] = np.array([graphs[2]["n_node"][0] + 1])
    with pytest.raises(ValueError, match=r"graph 2: column 'nodes/kind/0' has \d+ rows but the "
                                         r"graph has \d+ nodes \(n_node\)"):  # fmt: skip
        jb.Dataset.from_graphs(graphs)
    graphs = random_graphs(5, seed=2)
    graphs[1]["nodes"] = {"x": graphs[1]["nodes"]["x"]}
    with pytest.raises(ValueError, match="graph 1: nodes has structure .* every graph needs the"):
        jb.Dataset.from_graphs(graphs)
    graphs = random_graphs(3)
    graphs[0]["n_node"] = np.array([1, 2])
    with pytest.raises(ValueError, match="graph 0: n_node must be one integer"):
        jb.Dataset.from_graphs(graphs)
    with pytest.raises(TypeError, match="graph 0 is a int"):
        jb.Dataset.from_graphs([3])


def test_bad_graphs_follow_the_loaders_on_error_and_are_counted():
    graphs = random_graphs(20, seed=3)
    graphs[5] = dict(graphs[5], n_node=np.array([0]), nodes={
        "x": np.zeros((0, 3), np.float32), "kind": [np.zeros(0, np.int32), np.zeros(0, np.int64)]},
        senders=np.array([0], np.int32), receivers=np.array([0], np.int32),
        edges=np.zeros((1, 2), np.float32), n_edge=np.array([1]))  # fmt: skip
    ds = jb.Dataset.from_graphs(graphs, validate=False)
    planner = jb.GraphBudget(nodes=40, edges=80, graphs=6)
    with pytest.raises(ValueError, match=r"example 5: graph: senders\[0\] = 0 is not a node id"):
        list(jb.Loader(ds, planner, shuffle=False))
    loader = jb.Loader(ds, planner, shuffle=False, on_error="skip")
    got = sorted(sum(ids_of(loader), []))
    assert got == [i for i in range(20) if i != 5]
    assert loader.stats.skipped == 1 and loader.stats.examples == 19


def test_loader_yields_every_graph_once_per_epoch_in_its_planned_shapes():
    ds = jb.Dataset.from_graphs(random_graphs(200, seed=4))
    planner = jb.GraphBuckets(max_shapes=3, nodes=64, edges=128, graphs=10)
    loader = jb.Loader(ds, planner, shuffle="global", seed=5, epochs=2)
    shapes = set(loader.shapes)
    assert 1 <= len(shapes) <= 3
    batches = list(loader)
    assert len(batches) == len(loader)
    for epoch in (0, 1):
        ids = sum(ids_of(b for b in batches if b.epoch == epoch), [])
        assert sorted(ids) == list(range(200))
    assert {b.shape for b in batches} <= shapes
    for b in batches:
        assert b["nodes/x"].shape[0] == b.shape.length and b["edges"].shape[0] == b.shape.edges
        assert int(b["n_node"].sum()) == b.shape.length


def test_a_restored_graph_loader_continues_with_exactly_the_same_batches():
    ds = jb.Dataset.from_graphs(random_graphs(120, seed=6))
    planner = jb.GraphBudget(nodes=50, edges=90, graphs=8, algorithm="first_fit")
    full = [dict(b) for b in jb.Loader(ds, planner, shuffle="global", seed=9, epochs=2)]
    loader = jb.Loader(ds, planner, shuffle="global", seed=9, epochs=2)
    head = [dict(next(loader)) for _ in range(7)]
    state = loader.get_state()
    loader.close()
    rest = [dict(b) for b in jb.Loader(ds, planner, shuffle="global", seed=9, epochs=2,
                                       state=state)]  # fmt: skip
    assert len(head) + len(rest) == len(full)
    for got, want in zip(head + rest, full, strict=True):
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    other = jb.GraphBudget(nodes=50, edges=91, graphs=8, algorithm="first_fit")
    with pytest.raises(ValueError, match="planner"):
        jb.Loader(ds, other, shuffle="global", seed=9, epochs=2, state=state)


def test_shards_split_the_graphs_with_equal_shapes_at_every_step():
    ds = jb.Dataset.from_graphs(random_graphs(150, seed=7))
    planner = jb.GraphBuckets(max_shapes=4, nodes=40, edges=70, graphs=6)
    shards = [list(jb.Loader(ds, planner, shuffle="global", seed=2, shard=(i, 3)))
              for i in range(3)]  # fmt: skip
    assert len({len(s) for s in shards}) == 1
    for step in zip(*shards, strict=True):
        assert len({b.shape for b in step}) == 1
    ids = sorted(sum((sum(ids_of(s), []) for s in shards), []))
    assert ids == list(range(150))


def test_too_big_graphs_are_named_when_planned_or_skipped_and_counted():
    graphs = random_graphs(10, seed=8, max_nodes=5)
    graphs[4] = dict(graphs[4], nodes={"x": np.zeros((30, 3), np.float32),
                     "kind": [np.zeros(30, np.int32), np.zeros(30, np.int64)]},
                     n_node=np.array([30]))  # fmt: skip
    ds = jb.Dataset.from_graphs(graphs)
    with pytest.raises(ValueError, match="GraphBudget: graph 4 has 30 nodes"):
        jb.plan(ds, jb.GraphBudget(nodes=20, edges=40, graphs=4))
    # A Loader names it when it is made (as docs/graphs.md says), not at
    # the first len(), .shapes or next(): never mid-stream.
    with pytest.raises(ValueError, match=r"GraphBudget: graph 4 has 30 nodes and \d+ edges, but "
                       r"a batch holds at most 19 real nodes"):  # fmt: skip
        jb.Loader(ds, jb.GraphBudget(nodes=20, edges=40, graphs=4))
    plan = jb.plan(ds, jb.GraphBudget(nodes=20, edges=40, graphs=4, too_big="skip"))
    assert plan.stats.skipped == 1 and list(plan.skipped_examples) == [4]
    loader = jb.Loader(ds, jb.GraphBudget(nodes=20, edges=40, graphs=4, too_big="skip"),
                       epochs=2, max_errors=0)  # fmt: skip
    ids = sum(ids_of(loader), [])
    assert sorted(ids) == sorted(2 * [i for i in range(10) if i != 4])
    # Counted as jb.plan counts it, in each epoch entered, and not a bad record.
    assert (loader.stats.skipped, loader.stats.dropped) == (2 * plan.stats.skipped, 0)
    with pytest.raises(ValueError, match="graphs must be at least 2"):
        jb.GraphBudget(nodes=20, edges=40, graphs=1)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        jb.GraphBudget(nodes=20, edges=40, graphs=3, algorithm="worst_fit")


@pytest.mark.parametrize("validate", [True, False])
def test_a_uint64_node_id_past_int64_is_named_as_it_is(validate):
    graph = {"nodes": np.zeros((3, 2), np.float32), "edges": np.zeros((2, 1), np.float32),
             "senders": np.array([0, 2**63], np.uint64),  # As int64: -9223372036854775808.
             "receivers": np.array([1, 2], np.uint64)}  # fmt: skip
    with pytest.raises(ValueError) as error:
        jb.Dataset.from_graphs([graph], validate=validate)
    message = str(error.value)
    assert "graph 0's senders[1] is 9223372036854775808, past the largest int64" in message
    assert "-9223372036854775808" not in message


def test_graph_plan_stats_count_real_and_padded_nodes_edges_and_graphs():
    graphs = random_graphs(60, seed=9)
    ds = jb.Dataset.from_graphs(graphs)
    plan = jb.plan(ds, jb.GraphBuckets(max_shapes=2, nodes=48, edges=64, graphs=7))
    nodes = sum(int(g["n_node"][0]) for g in graphs)
    edges = sum(int(g["n_edge"][0]) for g in graphs)
    s = plan.stats
    assert (s.real_elements, s.real_edges, s.real_graphs) == (nodes, edges, 60)
    assert s.padded_elements == sum(spec.shape.length for spec in plan)
    assert s.padded_edges == sum(spec.shape.edges for spec in plan)
    assert s.node_efficiency == nodes / s.padded_elements
    assert s.edge_efficiency == edges / s.padded_edges
    assert "real nodes" in str(s)
    one = jb.plan(ds, jb.GraphBudget(nodes=48, edges=64, graphs=7)).stats
    assert s.padded_elements + s.padded_edges <= one.padded_elements + one.padded_edges


def test_graphs_from_arrow_list_columns_plan_and_collate_like_from_graphs():
    pa = pytest.importorskip("pyarrow")
    graphs = random_graphs(15, seed=10, with_globals=False)
    table = pa.table({
        "nodes": [g["nodes"]["x"][:, 0].tolist() for g in graphs],
        "senders": pa.array([g["senders"].tolist() for g in graphs], pa.list_(pa.int32())),
        "receivers": pa.array([g["receivers"].tolist() for g in graphs], pa.list_(pa.int32())),
        "label": [float(i) for i in range(15)],
    })  # fmt: skip
    ds = jb.Dataset.from_arrow(table)
    plan = jb.plan(ds, jb.GraphBudget(nodes=40, edges=60, graphs=6))
    batch = jb.collate(ds, plan[0])
    g = batch.graphs
    assert g.edges is None and g.globals is None and g.nodes.shape == (40,)
    index = [int(i) for i in batch["graph_index"] if i >= 0]
    np.testing.assert_array_equal(batch["label"][: len(index)], np.array(index, float))
    want = np.concatenate([graphs[i]["nodes"]["x"][:, 0] for i in index])
    np.testing.assert_allclose(g.nodes[: len(want)], want)


def test_scatter_ops_leave_padding_out_even_when_it_holds_nan():
    ds = jb.Dataset.from_graphs(random_graphs(25, seed=11))
    batch = jb.collate(ds, jb.plan(ds, jb.GraphBudget(nodes=40, edges=70, graphs=6))[0])
    n, e = batch.shape.length, batch.shape.edges
    rng = np.random.default_rng(0)
    messages = rng.normal(size=(e, 4)).astype(np.float32)
    messages[~batch["edge_mask"]] = np.nan
    receivers, mask = batch["receivers"], batch["edge_mask"]
    want_sum = np.zeros((n, 4), np.float32)
    want_max = np.full((n, 4), -np.inf, np.float32)
    count = np.zeros(n)
    for k in np.flatnonzero(mask):
        want_sum[receivers[k]] += messages[k]
        want_max[receivers[k]] = np.maximum(want_max[receivers[k]], messages[k])
        count[receivers[k]] += 1
    got = jax.jit(jb.masked.scatter_sum, static_argnums=2)(messages, receivers, n, mask)
    np.testing.assert_allclose(got, want_sum, rtol=1e-6, atol=1e-6)
    mean = jb.masked.scatter_mean(messages, receivers, n, mask)
    np.testing.assert_allclose(mean, np.where(count[:, None] > 0, want_sum / np.maximum(count, 1)
                                              [:, None], 0), rtol=1e-5, atol=1e-6)  # fmt: skip
    top = jb.masked.scatter_max(messages, receivers, n, mask)
    np.testing.assert_allclose(top, np.where(count[:, None] > 0, want_max, 0))
    grad = jax.grad(lambda m: jb.masked.scatter_sum(m, receivers, n, mask).sum())(
        jnp.asarray(np.nan_to_num(messages))
    )
    np.testing.assert_array_equal(
        np.asarray(grad), np.broadcast_to(np.where(mask[:, None], 1.0, 0.0), grad.shape)
    )
    with pytest.raises(ValueError, match="mask must be a bool array shaped like segment_ids"):
        jb.masked.scatter_sum(messages, receivers, n, batch["node_mask"])


@pytest.mark.parametrize("per_example", [False, True])
def test_map_gives_each_graph_its_own_columns_back(tmp_path, per_example):
    """Empty graphs and graphs without edges included: every graph's nodes,
    edges and globals come back as they went in (graph jobs: test_graph_jobs.py)."""
    graphs = random_graphs(40, seed=2)
    ds = jb.Dataset.from_graphs(graphs)
    planner = jb.GraphBudget(nodes=40, edges=60, graphs=6)

    def columns(b):
        g = b.graphs
        one = (lambda x: x[0]) if per_example else (lambda x: x)
        return {"x": g.nodes["x"], "e": g.edges, "y": one(g.globals), "k": g.nodes["kind"][1]}

    result = jb.map(columns, jb.Loader(ds, planner, shuffle=True, seed=3), per_example=per_example)
    assert sorted(result.outputs) == list(range(40))
    for i, g in enumerate(graphs):
        out = result.outputs[i]
        np.testing.assert_array_equal(out["x"], g["nodes"]["x"])
        np.testing.assert_array_equal(out["k"], g["nodes"]["kind"][1])
        np.testing.assert_array_equal(out["e"], g["edges"])
        np.testing.assert_array_equal(out["y"], g["globals"][0])
    jb.run(columns, ds, tmp_path / "out", planner=planner, per_example=per_example, progress=False)
    written = jb.read_output(tmp_path / "out")
    for r, i in enumerate(written["example_index"]):
        np.testing.assert_array_equal(written["x"][r], graphs[i]["nodes"]["x"])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 20)), min_size=1, max_size=60),
    algorithm=st.sampled_from(["next_fit", "first_fit", "best_fit"]),
    buckets=st.booleans(),
    open_batches=st.integers(1, 6),
    seed=st.integers(0, 3),
)
def test_every_graph_is_placed_once_within_its_shape(sizes, algorithm, buckets, open_batches, seed):
    graphs = []
    for k, m in sizes:
        m = m if k else 0
        graphs.append({"nodes": np.ones((k, 1), np.float32), "senders": np.zeros(m, np.int32),
                       "receivers": np.zeros(m, np.int32), "n_node": np.array([k]),
                       "n_edge": np.array([m])})  # fmt: skip
    ds = jb.Dataset.from_graphs(graphs)
    extra = {} if algorithm == "next_fit" else {"open_batches": open_batches}
    budget = {"nodes": 13 + seed * 5, "edges": 20 + seed * 7, "graphs": 2 + seed}
    planner = (
        jb.GraphBuckets(max_shapes=3, algorithm=algorithm, **budget, **extra)
        if buckets
        else jb.GraphBudget(algorithm=algorithm, **budget, **extra)
    )
    plan = jb.plan(ds, planner)
    placed = []
    for spec in plan:
        batch = jb.collate(ds, spec)
        ids = [int(i) for i in batch["graph_index"] if i >= 0]
        placed += ids
        assert sum(sizes[i][0] for i in ids) <= spec.shape.length - 1
        assert sum(sizes[i][1] if sizes[i][0] else 0 for i in ids) <= spec.shape.edges
        assert len(ids) <= spec.shape.rows - 1
        np.testing.assert_array_equal(
            batch["node_graph"], np.repeat(np.arange(spec.shape.rows), batch["n_node"])
        )
        assert batch["node_mask"].sum() == int(batch["n_node"][: len(ids)].sum())
        assert batch["graph_mask"].sum() == len(ids)
    assert sorted(placed) == list(range(len(sizes)))


def test_loader_stats_count_real_and_padded_nodes_and_edges_as_the_plan_does():
    ds = jb.Dataset.from_graphs(random_graphs(80, seed=12))
    planner = jb.GraphBuckets(max_shapes=3, nodes=40, edges=70, graphs=6)
    plan = jb.plan(ds, planner).stats
    loader = jb.Loader(ds, planner, shuffle=False)
    list(loader)
    s = loader.stats
    assert (s.real_elements, s.padded_elements) == (plan.real_elements, plan.padded_elements)
    assert (s.real_edges, s.padded_edges) == (plan.real_edges, plan.padded_edges)
    assert s.efficiency == plan.node_efficiency and s.edge_efficiency == plan.edge_efficiency
    # Sequences too: padded rows x length, real lengths cut as the collator cuts.
    tokens = jb.Dataset.from_arrays({"t": [np.arange(n) for n in range(1, 40)]})
    for p in (jb.Pack(row_length=16, rows_per_batch=2, too_long="truncate"),
              jb.AutoBuckets(max_shapes=3, batch_size=4)):  # fmt: skip
        loader = jb.Loader(tokens, p, shuffle=False)
        list(loader)
        want = jb.plan(tokens, p).stats
        assert loader.stats.real_elements == want.real_elements
        assert loader.stats.padded_elements == want.padded_elements
