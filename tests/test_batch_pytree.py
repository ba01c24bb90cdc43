"""A Batch keeps what it is through JAX: a registered pytree (arrays the
leaves, its layout static), so jit, device_put, tree_map, device_prefetch and
global_batches give back a Batch with ``.graphs``, masks and what unbatch
reads, for every planner. References: the Loader's own host batches, the
same computation in NumPy, and jraph's batch_np + pad_with_graphs."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jraph
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graphs_jraph import assert_graphs_equal, jraph_padded

import jaxbatch as jb

# The attributes a Batch carries (Batch's class body, plus the Loader's epoch).
ATTRIBUTES = (
    "index",
    "epoch",
    "shape",
    "packed",
    "length_column",
    "ragged_columns",
    "fixed_columns",
    "graph_layout",
)
BUDGET = dict(nodes=64, edges=128, graphs=8)


# --- data -----------------------------------------------------------------------


def molecule(rng, atoms):
    """A random tree of `atoms` atoms, each bond an edge both ways (docs/graphs.md)."""
    bonds = [(i, int(rng.integers(0, i))) for i in range(1, atoms)]
    a, b = np.array(bonds, np.int32).reshape(-1, 2).T
    x = rng.standard_normal((atoms, 4)).astype(np.float32)
    return jraph.GraphsTuple(
        nodes={"x": x},
        edges=rng.standard_normal((2 * len(bonds), 2)).astype(np.float32),
        senders=np.concatenate([a, b]),
        receivers=np.concatenate([b, a]),
        globals=x[:, :1].mean(0, keepdims=True),
        n_node=np.array([atoms]),
        n_edge=np.array([2 * len(bonds)]),
    )


def molecules(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return [molecule(rng, int(k)) for k in rng.integers(2, 25, n)]


def token_dataset(n=50, seed=0):
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(1, 100, k).astype(np.int32) for k in rng.integers(1, 30, n)]
    labels = rng.standard_normal(n).astype(np.float32)
    return jb.Dataset.from_arrays({"tokens": tokens, "label": labels})


PLANNERS = {
    "PadToMax": jb.PadToMax(4),
    "FixedBuckets": jb.FixedBuckets([10, 30], batch_size=4),
    "AutoBuckets": jb.AutoBuckets(3, batch_size=4),
    "Pack": jb.Pack(32, rows_per_batch=2),
    "Pack-split": jb.Pack(16, rows_per_batch=2, too_long="split"),
    "GraphBudget": jb.GraphBudget(**BUDGET),
    "GraphBuckets": jb.GraphBuckets(max_shapes=3, **BUDGET),
}


def dataset_for(name):
    return jb.Dataset.from_graphs(molecules()) if name.startswith("Graph") else token_dataset()


def loader_for(name, **options):
    return jb.Loader(dataset_for(name), PLANNERS[name], seed=3, shuffle="global", **options)


# --- comparing batches ----------------------------------------------------------


def assert_same_batch(got, want, what=""):
    """A Batch with want's keys in want's order, equal arrays, equal attributes."""
    assert type(got) is jb.Batch, f"{what}: {type(got).__name__}"
    assert list(got) == list(want), what
    for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=f"{what} {k}")
        # JAX's dtype for it (int64 is int32 without jax_enable_x64).
        assert got[k].dtype == jax.dtypes.canonicalize_dtype(want[k].dtype), f"{what} {k}"
    for name in ATTRIBUTES:
        assert getattr(got, name) == getattr(want, name), f"{what} .{name}"


def assert_same_layout(got, want, what=""):
    """What JAX rebuilds: a Batch with the same keys and layout; the
    per-step index and epoch are not part of the pytree."""
    assert type(got) is jb.Batch, what
    assert sorted(got) == sorted(want), what
    for name in ATTRIBUTES[2:]:
        assert getattr(got, name) == getattr(want, name), f"{what} .{name}"
    assert got.index is None and got.epoch is None, what


# --- the pytree -----------------------------------------------------------------


def test_a_batch_flattens_to_its_arrays_in_sorted_key_order_and_back():
    with loader_for("GraphBudget") as loader:
        batch = next(loader)
    flat, treedef = jax.tree_util.tree_flatten_with_path(batch)
    assert [jax.tree_util.keystr(p) for p, _ in flat] == [f"[{k!r}]" for k in sorted(batch)]
    assert all(leaf is batch[k] for (_, leaf), k in zip(flat, sorted(batch), strict=True))
    back = jax.tree_util.tree_unflatten(treedef, [leaf for _, leaf in flat])
    assert_same_layout(back, batch)
    assert all(back[k] is batch[k] for k in batch)
    # Still a dict to code that indexes it (and not a leaf to JAX).
    assert isinstance(back, dict) and back["node_mask"] is batch["node_mask"]
    assert jax.tree_util.tree_structure(batch) != jax.tree_util.tree_structure(dict(batch))


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_flattening_does_not_depend_on_insertion_order(random):
    with loader_for("Pack") as loader:
        batch = next(loader)
    order = list(batch)
    random.shuffle(order)
    shuffled = jb.Batch((k, batch[k]) for k in order)
    vars(shuffled).update(vars(batch))
    assert jax.tree_util.tree_structure(shuffled) == jax.tree_util.tree_structure(batch)
    leaves = jax.tree_util.tree_leaves(shuffled)
    assert all(a is b for a, b in zip(leaves, jax.tree_util.tree_leaves(batch), strict=True))


def test_two_loaders_over_the_same_data_give_equal_treedefs():
    """The graph layout is compared by value: a jitted step does not compile
    again for a second Loader or for jb.collate over the same data."""
    ds, again = (jb.Dataset.from_graphs(molecules()) for _ in range(2))
    with (
        jb.Loader(ds, jb.GraphBudget(**BUDGET)) as a,
        jb.Loader(again, jb.GraphBudget(**BUDGET)) as b,
    ):
        first, second = next(a), next(b)
    collated = jb.collate(ds, jb.plan(ds, jb.GraphBudget(**BUDGET))[0])
    assert first.graph_layout is not second.graph_layout
    trees = {jax.tree_util.tree_structure(x) for x in (first, second, collated)}
    assert len(trees) == 1


# --- device_prefetch, for every planner -----------------------------------------


@pytest.mark.parametrize("name", PLANNERS)
def test_device_prefetch_yields_the_loaders_batches(name):
    with loader_for(name, epochs=2) as loader:
        want = list(loader)  # A batch's arrays stay valid while it is held.
    with loader_for(name, epochs=2) as loader:
        batches = jb.device_prefetch(loader, size=3)
        assert len(batches) == len(loader) == len(want)
        got = list(batches)
    assert len(got) == len(want)
    assert [b.epoch for b in got] == [b.epoch for b in want] and got[-1].epoch == 1
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_same_batch(g, w, f"{name} step {step}")
        assert all(isinstance(v, jax.Array) for v in g.values())
        if w.is_graphs:
            assert isinstance(g.graphs, jraph.GraphsTuple)
            assert all(isinstance(x, jax.Array) for x in jax.tree_util.tree_leaves(g.graphs))
            assert_graphs_equal(g.graphs, w.graphs, f"{name} step {step}")
        # The device batch is what unbatch needs: per example, as on the host.
        host_back, device_back = jb.unbatch(w, w), jb.unbatch(g, g)
        assert sorted(host_back) == sorted(device_back)
        for example, parts in host_back.items():
            for k, v in parts.items():
                np.testing.assert_array_equal(np.asarray(device_back[example][k]), v)


@pytest.mark.parametrize("name", PLANNERS)
def test_a_batch_survives_tree_map_device_put_and_jit(name):
    with loader_for(name) as loader:
        batch = next(loader)
        mapped = jax.tree_util.tree_map(lambda x: x, batch)
        put = jax.device_put(batch)
        through = jax.jit(lambda b: b)(batch)
    for what, got in (("tree_map", mapped), ("device_put", put), ("jit", through)):
        assert_same_layout(got, batch, f"{name} {what}")
        for k in batch:
            np.testing.assert_array_equal(np.asarray(got[k]), batch[k], err_msg=f"{what} {k}")
    assert all(isinstance(v, jax.Array) for v in put.values())
    if batch.is_graphs:
        assert_graphs_equal(through.graphs, batch.graphs, f"{name} jit")


# --- jit: one compilation per shape, the host result ----------------------------


def graph_step(batch):
    """A message-passing readout that reads .graphs, the masks and the static shape."""
    g = batch.graphs
    h = g.nodes["x"].sum(-1)
    messages = h[g.senders] * g.edges[:, 0] * batch["edge_mask"]
    h = h + jax.ops.segment_sum(messages, g.receivers, num_segments=batch.shape.length)
    per_graph = jax.ops.segment_sum(h, batch["node_graph"], num_segments=batch.shape.rows)
    return per_graph * batch["graph_mask"]


def graph_step_np(batch):
    g = batch.graphs
    h = np.asarray(g.nodes["x"], np.float64).sum(-1)
    messages = h[g.senders] * g.edges[:, 0] * batch["edge_mask"]
    h = h + np.bincount(g.receivers, messages, minlength=batch.shape.length)
    per_graph = np.bincount(batch["node_graph"], h, minlength=batch.shape.rows)
    return per_graph * batch["graph_mask"]


def token_step(batch):
    lengths = batch["tokens_lengths"].astype(jnp.float32)
    return (batch["tokens"] * batch["tokens_mask"]).sum(1) / lengths.clip(1) + batch["label"]


def token_step_np(batch):
    lengths = np.asarray(batch["tokens_lengths"], np.float64)
    sums = (batch["tokens"] * batch["tokens_mask"]).sum(1)
    return sums / lengths.clip(1) + batch["label"]


@pytest.mark.parametrize(
    "name, planner, step, reference",
    [
        ("graphs", jb.GraphBudget(**BUDGET), graph_step, graph_step_np),
        ("tokens", jb.FixedBuckets([30], batch_size=4), token_step, token_step_np),
    ],
)
def test_a_jitted_step_compiles_once_for_batches_of_one_shape(name, planner, step, reference):
    ds = dataset_for("Graph") if name == "graphs" else token_dataset()
    traces = []

    @jax.jit
    def jitted(batch):
        traces.append(batch.shape)  # Python runs only while jit traces
        return step(batch)

    results = 0
    with jb.Loader(ds, planner, seed=0, shuffle="global", epochs=None) as loader:
        shapes = loader.shapes
        limit = max(10, loader.steps(0) + 2)  # into the second epoch: index and epoch change
        batches = jb.device_prefetch(loader)
        host_loader = jb.Loader(ds, planner, seed=0, shuffle="global", epochs=None)
        for batch, host in zip(batches, host_loader, strict=False):
            np.testing.assert_allclose(jitted(batch), reference(host), rtol=1e-5, atol=1e-5)
            results += 1
            if results == limit:
                break
        host_loader.close()
    assert batch.epoch >= 1 and len({b.epoch for b in [batch, host]}) == 1
    assert len(shapes) == 1 and traces == shapes, traces


# --- jax.device_put(batch).graphs against jraph ---------------------------------


def test_device_put_graphs_equal_jraphs_batch_padded():
    graphs = molecules()
    ds = jb.Dataset.from_graphs(graphs)
    with jb.Loader(ds, jb.GraphBuckets(max_shapes=3, **BUDGET), seed=5, shuffle="global") as ld:
        checked, steps = 0, len(ld)
        for batch in ld:
            device = jax.device_put(batch)
            g = device.graphs
            assert isinstance(g, jraph.GraphsTuple)
            leaves = jax.tree_util.tree_leaves(g)
            assert leaves and all(isinstance(x, jax.Array) for x in leaves)
            ids = [int(i) for i in batch["graph_index"] if i >= 0]
            shape = batch.shape
            want = jraph_padded([graphs[i] for i in ids], shape.length, shape.edges, shape.rows)
            assert_graphs_equal(jax.device_get(g), want, f"batch {batch.index}")
            checked += 1
    assert checked == steps > 1


# --- len() ----------------------------------------------------------------------


def test_len_is_the_sources_and_a_clear_type_error_without_one():
    ds = token_dataset()
    with jb.Loader(ds, jb.PadToMax(4), epochs=3) as loader:
        assert len(jb.device_prefetch(loader)) == len(loader) == 3 * 13
    host = [dict(tokens=np.arange(4)) for _ in range(5)]
    assert len(jb.device_prefetch(host)) == 5

    endless = (dict(tokens=np.arange(4)) for _ in range(3))
    batches = jb.device_prefetch(endless)
    with pytest.raises(TypeError, match=r"device_prefetch: len\(\) is the source's, and a "):
        len(batches)
    assert batches  # truthy, without a length
    got = list(batches)  # list() takes the TypeError as "no length hint"
    assert len(got) == 3 and all(type(b) is dict for b in got)  # plain dicts stay dicts

    with jb.Loader(ds, jb.PadToMax(4), epochs=None) as loader:
        with pytest.raises(TypeError, match=r"Loader: len\(\) of an endless stream"):
            len(jb.device_prefetch(loader))


# --- global_batches on one process ----------------------------------------------


@pytest.mark.parametrize("name", ["GraphBudget", "Pack", "PadToMax"])
def test_global_batches_on_one_process_yield_the_loaders_batches(name):
    with loader_for(name) as loader:
        want = list(loader)
    with loader_for(name) as loader:
        batches = jb.global_batches(loader)
        assert len(batches) == len(loader)
        got = list(batches)
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert type(g) is jb.Batch and g.index == step and g.shape == w.shape
        assert all(v.sharding.spec == jax.sharding.PartitionSpec("data") for v in g.values())
        local = jb.process_local(g)
        assert_same_layout(local, w)
        for k in w:
            np.testing.assert_array_equal(local[k], w[k])
        if w.is_graphs:
            np.testing.assert_allclose(
                jax.jit(graph_step)(g), graph_step_np(w), rtol=1e-5, atol=1e-5
            )


GRAPHS_ON_TWO_DEVICES = """
import jax, numpy as np, jaxbatch as jb, jraph
from test_batch_pytree import BUDGET, graph_step, graph_step_np, molecules
ds = jb.Dataset.from_graphs(molecules())
traces = []
@jax.jit
def step(batch):
    traces.append(1)
    return graph_step(batch)
a, b = (jb.Loader(ds, jb.GraphBudget(**BUDGET), seed=1) for _ in range(2))
with a, b:
    n = len(a)
    for got, host in zip(jb.global_batches(a), b, strict=True):
        assert isinstance(got.graphs, jraph.GraphsTuple)
        assert len(got["node_mask"].sharding.device_set) == 2
        np.testing.assert_allclose(step(got), graph_step_np(host), rtol=1e-5, atol=1e-5)
print("ok", n, len(traces))
"""


def test_global_graph_batches_sharded_over_two_devices_run_a_jitted_step():
    """Every axis of GraphBudget(64, 128, 8) splits over 2 host devices."""
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]),
    )
    run = subprocess.run(
        [sys.executable, "-c", GRAPHS_ON_TWO_DEVICES],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    ok, steps, traces = run.stdout.split()
    assert ok == "ok" and int(steps) > 1 and traces == "1"
