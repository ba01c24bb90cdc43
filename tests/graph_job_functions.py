"""Graph functions the graph job tests run (in-process and in a killed
subprocess), and their per-graph NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np

W_NODE = np.linspace(-1, 1, 3 * 4, dtype=np.float32).reshape(3, 4)
W_EDGE = np.linspace(-0.5, 0.5, 2 * 4, dtype=np.float32).reshape(2, 4)


def molecules(n, seed=0, max_atoms=12):
    """`n` random tree-shaped graphs (3 node features, 2 edge features)."""
    rng = np.random.default_rng(seed)
    graphs = []
    for atoms in rng.integers(1, max_atoms + 1, n):
        atoms = int(atoms)
        senders = np.arange(1, atoms, dtype=np.int32)
        receivers = np.array([rng.integers(0, i) for i in range(1, atoms)], np.int32)
        graphs.append(
            {
                "nodes": {"x": rng.standard_normal((atoms, 3)).astype(np.float32)},
                "edges": rng.standard_normal((atoms - 1, 2)).astype(np.float32),
                "senders": senders,
                "receivers": receivers,
                "globals": np.array([[float(len(graphs))]], np.float32),  # the graph's id
                "n_node": np.array([atoms]),
                "n_edge": np.array([atoms - 1]),
            }
        )
    return graphs


def embed(batch):
    """One message-passing step on a padded graph batch: per-node states,
    per-edge messages and a per-graph readout (padding masked out)."""
    g = batch.graphs
    nodes = batch["node_mask"].shape[0]
    slots = batch["graph_mask"].shape[0]
    h = jnp.tanh(g.nodes["x"] @ W_NODE)
    messages = (h[g.senders] + g.edges @ W_EDGE) * batch["edge_mask"][:, None]
    h = h + jax.ops.segment_sum(messages, g.receivers, num_segments=nodes)
    h = h * batch["node_mask"][:, None]
    readout = jax.ops.segment_sum(h, batch["node_graph"], num_segments=slots)
    return {"node": h, "edge": messages, "graph": readout}


def embed_graph(graph):
    """`embed` written per graph (per_example=True): the readout is the
    graph's own vector."""
    out = embed(graph)
    return {"node": out["node"], "edge": out["edge"], "graph": out["graph"][0]}


def embed_reference(graph):
    """What `embed` gives for one graph alone, in NumPy."""
    x = graph["nodes"]["x"].astype(np.float64)
    h = np.tanh(x @ W_NODE)
    messages = h[graph["senders"]] + graph["edges"] @ W_EDGE
    out = h.copy()
    np.add.at(out, graph["receivers"], messages)
    return {"node": out, "edge": messages, "graph": out.sum(0)}


def nan_for_graph_5(batch):
    """`embed`, with NaN in every node state of the graph whose id is 5."""
    out = embed(batch)
    ids = batch["globals"][:, 0][batch["node_graph"]]
    out["node"] = jnp.where((ids == 5)[:, None], jnp.nan, out["node"])
    return out


def run_job(out, count, checkpoint_every):
    """The job the kill test runs in a subprocess (and, uninterrupted, as its reference)."""
    import jaxbatch as jb

    planner = jb.GraphBuckets(max_shapes=3, nodes=40, edges=40, graphs=6)
    ds = jb.Dataset.from_graphs(molecules(count, seed=9))
    return jb.run(embed, ds, out, planner=planner, checkpoint_every=checkpoint_every,
                  progress=False)  # fmt: skip


if __name__ == "__main__":
    import sys

    run_job(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
