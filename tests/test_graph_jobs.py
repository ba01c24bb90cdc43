"""jb.map and jb.run over graph batches, against each graph run alone in
NumPy: per-node, per-edge and per-graph outputs, per_example, resume,
OOM re-planning and per-graph quarantine."""

import logging
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graph_job_functions import (
    embed,
    embed_graph,
    embed_reference,
    molecules,
    nan_for_graph_5,
    run_job,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kill_resume import Stopped, finish, kill_at_random_moments, shard_bytes, stop_after_shards

import jaxbatch as jb

GRAPHS = molecules(60, seed=3)
BUDGET = dict(nodes=40, edges=40, graphs=6)  # nodes == edges: the leading axis alone is ambiguous
PLANNERS = {
    "budget": jb.GraphBudget(**BUDGET),
    "buckets": jb.GraphBuckets(max_shapes=3, **BUDGET),
}


def dataset():
    return jb.Dataset.from_graphs(GRAPHS)


def assert_matches(outputs, skip=()):
    expected = [i for i in range(len(GRAPHS)) if i not in set(skip)]
    assert sorted(outputs) == expected
    for i in expected:
        ref = embed_reference(GRAPHS[i])
        for key in ("node", "edge", "graph"):
            np.testing.assert_allclose(outputs[i][key], ref[key], rtol=1e-5, atol=1e-5)


def planner_shapes(planner):
    """Every shape the planner may give a batch: GraphBuckets' chosen shapes,
    the full budget among them even where one plan's batches all fit smaller
    ones (jb.plan(...).shapes lists only the shapes its batches use)."""
    with jb.Loader(dataset(), planner) as loader:
        return loader.shapes


@pytest.mark.parametrize("planner", PLANNERS.values(), ids=PLANNERS.keys())
def test_map_equals_each_graph_alone(planner):
    loader = jb.Loader(dataset(), planner, shuffle=True, seed=7)
    result = jb.map(embed, loader)
    assert_matches(result.outputs)
    assert result.stats.examples == len(GRAPHS)
    assert result.stats.compilations <= result.stats.expected_shapes == len(planner_shapes(planner))


@pytest.mark.parametrize("planner", PLANNERS.values(), ids=PLANNERS.keys())
def test_per_example_equals_the_batch_form(planner):
    batch_form = jb.map(embed, jb.Loader(dataset(), planner, shuffle=True, seed=1))
    per_graph = jb.map(
        embed_graph, jb.Loader(dataset(), planner, shuffle=True, seed=2), per_example=True
    )
    assert_matches(per_graph.outputs)
    for i in range(len(GRAPHS)):
        for key in ("node", "edge", "graph"):
            np.testing.assert_allclose(
                per_graph.outputs[i][key], batch_form.outputs[i][key], rtol=1e-5, atol=1e-6
            )


def test_an_iterable_of_graph_batches_is_refused_naming_the_loader():
    loader = jb.Loader(dataset(), PLANNERS["budget"])
    with pytest.raises(TypeError, match="graph batches come from a jb.Loader"):
        jb.map(embed, iter(list(loader)))


def test_an_output_of_no_kind_asks_for_per():
    def total(batch):
        return jnp.sum(batch.graphs.nodes["x"])  # one number per batch

    with pytest.raises(ValueError, match=r"not per node, edge or graph.*per=\{'output'"):
        jb.map(total, dataset(), planner=PLANNERS["budget"])


def test_per_declares_a_function_that_traces_at_one_shape_only():
    def fixed(batch):
        nodes = batch.graphs.nodes["x"]
        assert nodes.shape[0] == BUDGET["nodes"]  # refuses any other shape
        return nodes[:, :2].reshape(BUDGET["nodes"], 2)

    with pytest.raises(ValueError, match="could be per node or per edge"):
        jb.map(fixed, dataset(), planner=PLANNERS["budget"])
    result = jb.map(fixed, dataset(), planner=PLANNERS["budget"], per="node")
    for i, g in enumerate(GRAPHS):
        np.testing.assert_array_equal(result.outputs[i], g["nodes"]["x"][:, :2])


def read_rows(folder):
    out = jb.read_output(folder)
    rows = {}
    for r, e in enumerate(out["example_index"]):
        rows[int(e)] = {k: np.asarray(out[k][r]) for k in ("node", "edge", "graph")}
    return out, rows


@pytest.mark.parametrize("per_example", [False, True])
def test_run_writes_each_graph_once_as_alone(tmp_path, per_example):
    fun = embed_graph if per_example else embed
    report = jb.run(
        fun,
        dataset(),
        tmp_path / "job",
        planner=PLANNERS["buckets"],
        per_example=per_example,
        checkpoint_every=16,
        progress=False,
    )
    out, rows = read_rows(tmp_path / "job")
    np.testing.assert_array_equal(np.sort(out["example_index"]), np.arange(len(GRAPHS)))
    assert len(out["example_index"]) == len(GRAPHS)
    assert_matches(rows)
    assert report.examples == len(GRAPHS) and report.complete and report.shards > 1
    assert 0 < report.padding_efficiency < 1


def test_run_resumes_after_a_crash_byte_identical(tmp_path):
    planner = PLANNERS["buckets"]
    jb.run(embed, dataset(), tmp_path / "reference", planner=planner, checkpoint_every=16,
           progress=False)  # fmt: skip
    job = tmp_path / "job"

    with stop_after_shards(2), pytest.raises(Stopped):  # The third is written, not recorded.
        jb.run(embed, dataset(), job, planner=planner, checkpoint_every=16, progress=False)
    report = jb.run(embed, dataset(), job, planner=planner, checkpoint_every=16, progress=False)
    assert report.runs == 2 and report.examples == len(GRAPHS)
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")
    assert_matches(read_rows(job)[1])


def test_a_graph_job_stopped_on_2_processes_finishes_on_3_elastically(tmp_path):
    options = dict(planner=PLANNERS["buckets"], checkpoint_every=8, progress=False)
    for i in range(2):
        with stop_after_shards(1), pytest.raises(Stopped):
            jb.run(embed, dataset(), tmp_path, shard=(i, 2), **options)
    reports = [
        jb.run(embed, dataset(), tmp_path, shard=(j, 3), elastic=True, **options) for j in range(3)
    ]
    out, rows = read_rows(tmp_path)
    np.testing.assert_array_equal(out["example_index"], np.arange(len(GRAPHS)))
    assert_matches(rows)
    assert 0 < sum(r.examples for r in reports) < len(GRAPHS)


@pytest.mark.timeout(600)
def test_kill_9_mid_run_then_resume_gives_the_uninterrupted_output(tmp_path):
    count, every = 800, 20
    script = Path(__file__).parent / "graph_job_functions.py"

    def start(out):
        return subprocess.Popen(
            [sys.executable, str(script), str(out), str(count), str(every)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    run_job(tmp_path / "reference", count, every)
    job, journal = tmp_path / "job", tmp_path / "job" / "journal.jbj"
    sizes = kill_at_random_moments(
        lambda: start(job), journal, kills=2, seed=3, grown=1500, pause=0.2
    )
    assert len(sizes) >= 1  # Killed at least once.
    finish(start(job))
    assert shard_bytes(job) == shard_bytes(tmp_path / "reference")
    out = jb.read_output(job)
    np.testing.assert_array_equal(np.sort(out["example_index"]), np.arange(count))
    assert len(out["example_index"]) == count


def oom_above(node_slots):
    """`embed`, whose runtime raises XLA's RESOURCE_EXHAUSTED for batches of
    more than `node_slots` node slots (the callback sees the whole batch)."""

    def host(x):
        if x.shape[0] > node_slots:
            raise MemoryError(f"RESOURCE_EXHAUSTED: Out of memory for {x.shape[0]} nodes")
        return np.float32(0)

    def f(batch):
        out = embed(batch)
        zero = jax.pure_callback(
            host, jax.ShapeDtypeStruct((), jnp.float32), batch["node_mask"].astype(jnp.float32)
        )
        return dict(out, node=out["node"] + zero)

    return f


@pytest.mark.parametrize("planner", PLANNERS.values(), ids=PLANNERS.keys())
def test_an_oom_replans_the_graphs_at_half_budget(planner, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxbatch"):
        result = jb.map(oom_above(20), jb.Loader(dataset(), planner, shuffle=True, seed=4))
    assert_matches(result.outputs)
    assert result.stats.backoffs
    shapes = {(s.length, s.edges, s.rows) for s in planner_shapes(planner)}
    for failed, half in result.stats.backoffs:  # a shape of the plan, halved rounding up
        assert failed in shapes and half == tuple((x + 1) // 2 for x in failed)
    if isinstance(planner, jb.GraphBudget):
        assert ((40, 40, 6), (20, 20, 3)) in result.stats.backoffs
    # Each failing shape is tried once; its later batches are re-planned at once.
    assert len({failed for failed, _ in result.stats.backoffs}) == len(result.stats.backoffs)
    assert "re-planned its" in caplog.text


def test_an_oom_in_a_job_loses_nothing(tmp_path):
    report = jb.run(oom_above(20), dataset(), tmp_path / "job", planner=PLANNERS["budget"],
                    checkpoint_every=16, progress=False)  # fmt: skip
    assert report.examples == len(GRAPHS)
    assert_matches(read_rows(tmp_path / "job")[1])


def test_an_oom_that_cannot_shrink_says_so():
    with pytest.raises(RuntimeError, match="cannot be halved"):
        jb.map(oom_above(1), dataset(), planner=PLANNERS["budget"])


@pytest.mark.parametrize("per_example", [False, True])
def test_a_nan_quarantines_only_its_graph(per_example):
    result = jb.map(
        nan_for_graph_5,
        jb.Loader(dataset(), PLANNERS["budget"], shuffle=True, seed=5),
        check_finite=True,
        on_error="quarantine",
        per_example=per_example,
    )
    assert [q["example"] for q in result.quarantine] == [5]
    assert "not finite" in result.quarantine[0]["reason"]
    if per_example:  # The per-graph readout of nan_for_graph_5 keeps the padding graph's row.
        result.outputs = {i: dict(o, graph=o["graph"][0]) for i, o in result.outputs.items()}
    assert_matches(result.outputs, skip=[5])


@pytest.mark.parametrize("per_example", [False, True])
def test_check_quarantines_the_graphs_it_fails(per_example):
    def id_not_3_mod_7(batch, out):  # one bool per graph slot, or per graph under per_example
        ids = batch["globals"][:, 0]
        return (ids[0] if per_example else ids) % 7 != 3

    result = jb.map(
        embed_graph if per_example else embed,
        jb.Loader(dataset(), PLANNERS["buckets"], shuffle=True, seed=6),
        check=id_not_3_mod_7,
        on_error="quarantine",
        per_example=per_example,
    )
    failing = [i for i in range(len(GRAPHS)) if i % 7 == 3]
    assert sorted(q["example"] for q in result.quarantine) == failing
    assert {q["reason"] for q in result.quarantine} == {"check returned False"}
    assert_matches(result.outputs, skip=failing)


def test_a_nan_in_a_job_quarantines_its_graph(tmp_path):
    report = jb.run(nan_for_graph_5, dataset(), tmp_path / "job", planner=PLANNERS["buckets"],
                    check_finite=True, on_error="quarantine", progress=False)  # fmt: skip
    assert report.quarantined == 1 and report.quarantine[0]["example"] == 5
    assert_matches(read_rows(tmp_path / "job")[1], skip=[5])
    with pytest.raises(ValueError, match="example 5"):
        jb.map(nan_for_graph_5, dataset(), planner=PLANNERS["budget"], check_finite=True)


@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 12)), min_size=1, max_size=30),
    slots=st.sampled_from([(10, 12, 2), (16, 16, 4), (30, 40, 7)]),
    seed=st.integers(0, 3),
    per_example=st.booleans(),
)
def test_every_graph_comes_back_once_with_its_own_nodes_and_edges(sizes, slots, seed, per_example):
    graphs = [
        {
            "nodes": np.full((n, 1), i, np.float32) + np.arange(n, dtype=np.float32)[:, None] / 10,
            "edges": np.full((m if n else 0, 2), -i, np.int32),
            "senders": np.zeros(m if n else 0, np.int32),
            "receivers": np.zeros(m if n else 0, np.int32),
            "n_node": np.array([n]),
            "n_edge": np.array([m if n else 0]),
        }
        for i, (n, m) in enumerate(sizes)
    ]
    nodes, edges, count = slots
    loader = jb.Loader(
        jb.Dataset.from_graphs(graphs),
        jb.GraphBuckets(max_shapes=2, nodes=nodes, edges=edges, graphs=count),
        shuffle=True,
        seed=seed,
    )

    def parts(b):
        real = b["node_mask"].astype(jnp.int32)
        per_graph = (
            real.sum()
            if per_example
            else jax.ops.segment_sum(real, b["node_graph"], b["graph_mask"].shape[0])
        )
        return {"x": b.graphs.nodes, "e": b.graphs.edges, "n": per_graph}

    result = jb.map(parts, loader, per_example=per_example)
    assert sorted(result.outputs) == list(range(len(graphs)))
    for i, g in enumerate(graphs):
        out = result.outputs[i]
        np.testing.assert_array_equal(out["x"], g["nodes"])
        np.testing.assert_array_equal(out["e"], g["edges"])
        assert int(out["n"]) == g["n_node"][0]
