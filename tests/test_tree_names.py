"""Every place that joins a pytree's keys into column names is injective or
refuses, naming both leaves: graph features (``nodes/a/b``, built by
from_graphs, or read back from columns made elsewhere: numpy, a Hugging Face
dataset), and a job's output columns (``a.b``). Hypothesis draws trees whose
keys hold the separators, so that two leaves often spell one name; the
reference is a slow walk of the tree, separate from jax's flattening."""

from __future__ import annotations

import re

import datasets
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import jaxbatch as jb
from jaxbatch._src.execute.output_layout import leaf_names

datasets.disable_progress_bars()

# Keys that hold "/" and "." spell the names of nested keys; "0" is also a
# list index's name.
KEYS = st.sampled_from(["a", "b", "0", "a/b", "a/0", "b/a", "a.b", "0.a"])
SHAPES = st.recursive(
    st.just(0),
    lambda kids: st.one_of(
        st.dictionaries(KEYS, kids, min_size=1, max_size=3),
        st.lists(kids, min_size=1, max_size=2),
    ),
    max_leaves=6,
)
NODES = (2, 1)  # two graphs: 2 nodes and 1 node


def trees(sep: str):
    """Drawn trees, most of them with one leaf's path spelled again from the
    top with its first two keys joined by `sep`: a second leaf of the same
    name (drawn keys alone rarely collide)."""

    @st.composite
    def draw_tree(draw):
        tree = draw(SHAPES)
        if draw(st.integers(0, 3)) == 0:
            return tree
        tree = tree if isinstance(tree, dict) else {"b": tree}
        paths = [p for p, _ in walk(tree) if len(p) >= 2]
        if not paths:
            return tree
        path = draw(st.sampled_from(paths))
        respelled = 0
        for key in reversed(path[2:]):
            respelled = {str(key): respelled}
        return {**tree, f"{path[0]}{sep}{path[1]}": respelled}

    return draw_tree()


# ---- the reference: a slow walk of the tree -------------------------------------


def walk(tree, path=()):
    """(path, leaf) for every leaf; a path is a tuple of dict keys (str) and
    list indices (int)."""
    if isinstance(tree, dict):
        return [pair for key in tree for pair in walk(tree[key], (*path, key))]
    if isinstance(tree, list):
        return [pair for i, kid in enumerate(tree) for pair in walk(kid, (*path, i))]
    return [(path, tree)]


def keystr(path) -> str:
    return "".join(f"[{k!r}]" if isinstance(k, str) else f"[{k}]" for k in path)


def name_of(path, sep: str, prefix: str = "") -> str:
    return sep.join([prefix, *map(str, path)] if prefix else list(map(str, path)))


def numbered(tree, values):
    """`tree` with leaf k (in walk order) replaced by values(k)."""
    count = iter(range(10**6))

    def go(t):
        if isinstance(t, dict):
            return {k: go(v) for k, v in t.items()}
        if isinstance(t, list):
            return [go(v) for v in t]
        return values(next(count))

    return go(tree)


def collisions(names: list[str]) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(names)) for j in range(i) if names[i] == names[j]]


def not_a_tree(names: list[str]) -> list[tuple[str, str]]:
    """Pairs (leaf, name below it): one name is a leaf where the other needs a subtree."""
    return [(a, b) for a in names for b in names if b.startswith(a + "/")]


def at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def node_values(k: int) -> list[np.ndarray]:
    """Leaf k's node values in each graph, different for every leaf and node."""
    return [np.arange(n, dtype=np.int32) + 100 * k + 10 * g for g, n in enumerate(NODES)]


def assert_names_both(message: str, pairs) -> None:
    assert any(all(p in message for p in pair) for pair in pairs), (message, pairs)


# ---- graphs --------------------------------------------------------------------


def graphs_of(tree):
    return [
        {
            "nodes": numbered(tree, lambda k, g=g: node_values(k)[g]),
            "senders": np.zeros(1, np.int32),
            "receivers": np.zeros(1, np.int32),
        }
        for g in range(len(NODES))
    ]


def one_batch(ds):
    plan = jb.plan(ds, jb.GraphBudget(nodes=8, edges=4, graphs=3))
    assert len(plan) == 1
    return jb.collate(ds, plan[0]).graphs


@settings(max_examples=80, deadline=None)
@given(tree=trees("/"))
def test_graph_feature_names_are_injective_or_refused_naming_both_leaves(tree):
    leaves = walk(tree)
    names = [name_of(path, "/", "nodes") for path, _ in leaves]
    same = collisions(names)
    event("two leaves, one name" if same else "names unique")
    if same:
        with pytest.raises(ValueError, match="would both be the column") as caught:
            jb.Dataset.from_graphs(graphs_of(tree))
        pairs = [(keystr(leaves[i][0]), keystr(leaves[j][0])) for i, j in same]
        assert_names_both(str(caught.value), pairs)
        return
    below = not_a_tree(names)
    event("not a tree" if below else "a tree")
    if below:
        with pytest.raises(ValueError, match="cannot both be nodes columns") as caught:
            jb.Dataset.from_graphs(graphs_of(tree))
        assert_names_both(str(caught.value), [(f"'{a}'", f"'{b}'") for a, b in below])
        return
    ds = jb.Dataset.from_graphs(graphs_of(tree))
    assert sorted(ds.column_names) == sorted([*names, "senders", "receivers"])
    nodes = one_batch(ds).nodes
    for k, (path, _) in enumerate(leaves):  # every leaf its own values, where it was
        np.testing.assert_array_equal(at(nodes, path)[: sum(NODES)], np.concatenate(node_values(k)))


@settings(max_examples=40, deadline=None)
@given(tree=trees("/"), huggingface=st.booleans())
def test_graph_columns_made_elsewhere_read_back_by_their_paths_or_refused(tree, huggingface):
    """Columns named by paths, from numpy or a Hugging Face dataset (no pytree
    kept): each lands at its name's path in batch.graphs, or two names that
    do not make a tree are refused naming both."""
    names = sorted({name_of(path, "/", "nodes") for path, _ in walk(tree)})
    columns = {name: node_values(k) for k, name in enumerate(names)}
    edges = {"senders": [np.zeros(1, np.int32)] * 2, "receivers": [np.zeros(1, np.int32)] * 2}
    if huggingface:
        rows = {name: [v.tolist() for v in values] for name, values in {**columns, **edges}.items()}
        features = datasets.Features({n: datasets.List(datasets.Value("int32")) for n in rows})
        ds = jb.Dataset.from_huggingface(datasets.Dataset.from_dict(rows, features=features))
        assert ds.column_names == list(rows)  # names as they are: nothing joined or split
    else:
        ds = jb.Dataset.from_arrays({**columns, **edges})
    below = not_a_tree(names)
    event("not a tree" if below else "a tree")
    if below:
        with pytest.raises(ValueError, match="cannot both be nodes columns") as caught:
            one_batch(ds)
        assert_names_both(str(caught.value), [(f"'{a}'", f"'{b}'") for a, b in below])
        return
    nodes = one_batch(ds).nodes
    for k, name in enumerate(names):
        parts = name.split("/")[1:]
        got = at(nodes, parts) if parts else nodes
        np.testing.assert_array_equal(got[: sum(NODES)], np.concatenate(node_values(k)))


# ---- a job's output columns -------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(tree=trees("."))
def test_output_column_names_are_injective_or_refused_naming_both_leaves(tree):
    leaves = walk(tree)
    names = [name_of(path, ".") or "output" for path, _ in leaves]
    out = numbered(tree, lambda k: np.full(3, k))
    same = collisions(names)
    event("two leaves, one name" if same else "names unique")
    if same:
        with pytest.raises(ValueError, match="would both be the column") as caught:
            leaf_names(out)
        pairs = [(keystr(leaves[i][0]), keystr(leaves[j][0])) for i, j in same]
        assert_names_both(str(caught.value), pairs)
        return
    got = dict(leaf_names(out))
    assert len(got) == len(names)
    for k, name in enumerate(names):  # each name holds its own leaf
        np.testing.assert_array_equal(got[name], np.full(3, k))


def test_a_job_whose_output_leaves_share_a_name_is_refused_before_it_writes(tmp_path):
    ds = jb.Dataset.from_arrays({"t": [np.arange(3), np.arange(2)]})

    def colliding(row):
        return {"a.b": row["t"].sum(), "a": {"b": row["t"].max()}}

    with pytest.raises(ValueError, match=r"\['a'\]\['b'\] and \['a.b'\] would both be"):
        jb.run(colliding, ds, tmp_path / "out", progress=False)
    assert not list((tmp_path / "out").glob("*.arrow"))


# ---- Arrow columns of one name ---------------------------------------------------


def test_two_arrow_columns_of_one_name_are_refused_naming_it(tmp_path):
    """An Arrow schema may repeat a name; pyarrow finds neither column by it."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_arrays(
        [pa.array([[1], [2, 3]]), pa.array([[4], [5, 6]]), pa.array([0, 1])],
        names=["x", "y", "x"],
    )
    with pytest.raises(ValueError, match=r"Dataset.from_arrow: 2 columns are named 'x'"):
        jb.Dataset.from_arrow(table, columns=["y"])
    pq.write_table(table, tmp_path / "two.parquet")
    with pa.ipc.new_file(str(tmp_path / "two.arrow"), table.schema) as writer:
        writer.write_table(table)
    for name, stream in (("two.parquet", False), ("two.parquet", True), ("two.arrow", False)):
        path = tmp_path / name
        with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: 2 columns are named 'x'"):
            jb.Loader(path, jb.PadToMax(2), stream=stream, host_memory_limit=1 << 20)
