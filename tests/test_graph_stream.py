"""Graphs streamed from Parquet by row groups: the stream equals reading the
file whole for every graph planner, shuffle and shard; the engine counts and
checks each graph as its row group is read, with the same bad-graph policies;
memory stays bounded by host_memory_limit; a hostile file is an error that
names the row group or the graph, never a crash."""

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stream import RSS_SCRIPT as TOKENS_RSS_SCRIPT
from test_stream import assert_same_stream, batches

import jaxbatch as jb

BUDGET = dict(nodes=64, edges=96, graphs=8)
PLANNERS = {
    "next_fit": lambda: jb.GraphBudget(**BUDGET, algorithm="next_fit"),
    "first_fit": lambda: jb.GraphBudget(**BUDGET, algorithm="first_fit"),
    "best_fit": lambda: jb.GraphBudget(**BUDGET),
    "buckets_first_fit": lambda: jb.GraphBuckets(max_shapes=3, **BUDGET, algorithm="first_fit"),
    "buckets_best_fit": lambda: jb.GraphBuckets(max_shapes=3, **BUDGET),
}
# The 400-graph file's 25 row groups decode to about 3 kB each, some 75 kB
# in all; batch buffers and gathers take about 40 kB of this limit, so the
# cache holds a few row groups and a shuffled stream reads them again.
LIMIT = 64_000


def graph_columns(rng, n, n_node_column=False):
    """n random graphs as lists of arrays, one per graph: two node columns
    (nodes/x float32 [n_node, 2], nodes/z int8), one edge column, senders and
    receivers in [0, n_node), a per-graph label; optionally n_node."""
    nodes = rng.integers(1, 20, n)
    edges = np.where(nodes > 1, rng.integers(0, 30, n), 0)
    columns = {
        "nodes/x": [rng.random((k, 2), dtype=np.float32) for k in nodes],
        "nodes/z": [np.arange(k, dtype=np.int8) for k in nodes],
        "edges": [rng.random(m, dtype=np.float32) for m in edges],
        "senders": [
            rng.integers(0, k, m).astype(np.int32) for k, m in zip(nodes, edges, strict=True)
        ],
        "receivers": [
            rng.integers(0, k, m).astype(np.int32) for k, m in zip(nodes, edges, strict=True)
        ],
        "label": list(np.arange(n, dtype=np.float32) / 7),
    }
    if n_node_column:
        columns["n_node"] = list(nodes.astype(np.int32))
    return columns


def to_arrow(values):
    """A list column from per-graph arrays ([k] or [k, 2]), or a plain column."""
    if np.ndim(values[0]) == 0:
        return pa.array(np.array(values))
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in values])]).astype(np.int32)
    flat = np.concatenate(values)
    inner = pa.array(flat.ravel())
    if flat.ndim == 2:
        inner = pa.FixedSizeListArray.from_arrays(inner, flat.shape[1])
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def write_graphs(path, n=400, row_group_size=16, seed=0, change=None, n_node_column=False):
    """A graph Parquet file; `change(columns)` edits its columns (lists of
    per-graph arrays) first, to make hostile files."""
    columns = graph_columns(np.random.default_rng(seed), n, n_node_column)
    if change is not None:
        change(columns)
    table = pa.table({k: to_arrow(v) for k, v in columns.items()})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def stats(loader):
    return {**vars(loader.stats), "chunk_reads": 0}


# ---------------------------------------------------------------- equal streams


@pytest.mark.parametrize("planner", sorted(PLANNERS))
@pytest.mark.parametrize("shuffle", [False, True, "block"])
@pytest.mark.parametrize("shard", [None, (1, 3)])
def test_stream_equals_the_whole_file(tmp_path, planner, shuffle, shard):
    path = write_graphs(tmp_path / "graphs.parquet")
    options = dict(shuffle=shuffle, block_size=48, seed=5, epochs=2, num_threads=2, prefetch=2,
                   shard=shard)  # fmt: skip
    whole = jb.Loader(path, PLANNERS[planner](), **options)
    shapes = whole.shapes
    expected = batches(whole)
    # The graph masks, the graph in each slot and every column come along.
    assert {"node_mask", "edge_mask", "graph_mask", "graph_index", "nodes/x"} <= expected[0].keys()
    with jb.Loader(path, PLANNERS[planner](), stream=True, host_memory_limit=LIMIT,
                   **options) as loader:  # fmt: skip
        assert loader.shapes == shapes
        assert_same_stream(expected, batches(loader))
        assert stats(loader) == stats(whole)
        assert loader.get_state() == whole.get_state()
        # Every row group at least once (a shard reads only its batches').
        assert loader.stats.chunk_reads >= (25 if shard is None else 2)
    ids = np.concatenate([b["graph_index"] for b in expected])
    if shard is None:  # Every graph once per epoch, none twice.
        assert sorted(ids[ids >= 0]) == sorted(2 * list(range(400)))


def test_batches_are_the_graphs_of_the_file(tmp_path):
    """The streamed batches hold the file's values (not only the whole-file
    loader's): each real graph's nodes, edges and label, as pyarrow reads them."""
    path = write_graphs(tmp_path / "graphs.parquet")
    table = pq.read_table(path).to_pylist()
    with jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT,
                   shuffle=True, seed=2) as loader:  # fmt: skip
        seen = 0
        for batch in loader:
            node_start = np.concatenate([[0], np.cumsum(batch["n_node"])])
            edge_start = np.concatenate([[0], np.cumsum(batch["n_edge"])])
            for slot, e in enumerate(batch["graph_index"]):
                if e < 0:
                    continue
                row, seen = table[e], seen + 1
                nodes = slice(node_start[slot], node_start[slot + 1])
                edges = slice(edge_start[slot], edge_start[slot + 1])
                np.testing.assert_array_equal(batch["nodes/z"][nodes], row["nodes/z"])
                np.testing.assert_array_equal(batch["edges"][edges], row["edges"])
                np.testing.assert_array_equal(
                    batch["senders"][edges] - node_start[slot], row["senders"]
                )
                assert batch["label"][slot] == np.float32(row["label"])
        assert seen == 400


def test_restore_mid_epoch_from_a_state_equal_to_the_whole_file_run(tmp_path):
    path = write_graphs(tmp_path / "graphs.parquet")
    planner = jb.GraphBuckets(max_shapes=3, **BUDGET)
    options = dict(shuffle=True, seed=9, epochs=2, num_threads=2, prefetch=2)
    whole = jb.Loader(path, planner, **options)
    head = batches(whole, 7)
    whole_state = json.loads(json.dumps(whole.get_state()))
    rest = batches(whole)
    streamed = jb.Loader(path, planner, stream=True, host_memory_limit=LIMIT, **options)
    assert_same_stream(head, batches(streamed, 7))
    state = json.loads(json.dumps(streamed.get_state()))
    streamed.close()
    assert state == whole_state
    with jb.Loader(path, planner, stream=True, host_memory_limit=LIMIT, state=state,
                   **options) as resumed:  # fmt: skip
        assert_same_stream(rest, batches(resumed))
    # The whole-file state resumes the stream, and the stream's the whole file.
    with jb.Loader(path, planner, stream=True, host_memory_limit=LIMIT, state=whole_state,
                   **options) as resumed:  # fmt: skip
        assert_same_stream(rest, batches(resumed))
    assert_same_stream(rest, batches(jb.Loader(path, planner, state=state, **options)))


@settings(max_examples=10, deadline=None)
@given(
    n=st.integers(1, 200),
    row_group_size=st.integers(1, 50),
    seed=st.integers(0, 2**32 - 1),
    shuffle=st.sampled_from([False, True, "block"]),
    algorithm=st.sampled_from(["next_fit", "first_fit", "best_fit"]),
)
def test_stream_equals_the_whole_file_for_any_row_groups(
    tmp_path_factory, n, row_group_size, seed, shuffle, algorithm
):
    path = write_graphs(tmp_path_factory.mktemp("g") / "g.parquet", n, row_group_size, seed)
    planner = jb.GraphBudget(**BUDGET, algorithm=algorithm)
    options = dict(shuffle=shuffle, block_size=16, seed=seed % 1000, num_threads=2, prefetch=2)
    expected = batches(jb.Loader(path, planner, **options))
    with jb.Loader(path, planner, stream=True, host_memory_limit=LIMIT, **options) as loader:
        assert_same_stream(expected, batches(loader))


# ----------------------------------------------------------------- bad graphs


def disagreeing_node_columns(columns):  # graph 37 (row group 2): nodes/z one node short
    columns["nodes/z"][37] = columns["nodes/z"][37][:-1]


def negative_sender(columns):  # graph 100 (row group 6)
    if len(columns["senders"][100]) == 0:
        columns["senders"][100] = columns["receivers"][100] = np.zeros(1, np.int32)
        columns["edges"][100] = np.zeros(1, np.float32)
    columns["senders"][100] = np.concatenate([[-1], columns["senders"][100][1:]])


def receiver_past_the_nodes(columns):  # graph 250 (row group 15)
    columns["receivers"][250] = columns["receivers"][250].copy()
    columns["receivers"][250][:] = len(columns["nodes/z"][250])


def n_node_disagrees(columns):  # graph 399, the last row group's last graph
    columns["n_node"][399] = columns["n_node"][399] + 1


HOSTILE = {
    "nodes": (disagreeing_node_columns, 37, r"'nodes/z' has \d+ rows"),
    "negative": (negative_sender, 100, r"senders\[0\] = -1 is not a node id"),
    "past": (receiver_past_the_nodes, 250, r"receivers\[0\] = \d+ is not a node id"),
    "n_node": (n_node_disagrees, 399, r"n_node"),
}


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_a_bad_graph_under_raise_is_named_by_its_example(tmp_path, hostile):
    change, example, reason = HOSTILE[hostile]
    path = write_graphs(tmp_path / "bad.parquet", change=change, n_node_column=hostile == "n_node")
    for stream in (False, True):
        loader = jb.Loader(path, jb.GraphBudget(**BUDGET), stream=stream, host_memory_limit=LIMIT)
        with pytest.raises(ValueError, match=f"{path}, example {example}: graph: .*{reason}"):
            next(loader)
        loader.close()


@pytest.mark.parametrize("on_error", ["skip", "quarantine"])
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_bad_graphs_are_dropped_as_reading_whole_drops_them(tmp_path, hostile, on_error):
    change, example, _ = HOSTILE[hostile]
    path = write_graphs(tmp_path / "bad.parquet", change=change, n_node_column=hostile == "n_node")
    options = dict(on_error=on_error, shuffle=True, seed=1, num_threads=2)
    whole = jb.Loader(path, jb.GraphBudget(**BUDGET), **options)
    expected = batches(whole)
    with jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT,
                   **options) as loader:  # fmt: skip
        assert_same_stream(expected, batches(loader))
        assert loader.quarantine == whole.quarantine
        assert stats(loader) == stats(whole)
        assert loader.stats.skipped + loader.stats.quarantined == 1
    ids = np.concatenate([b["graph_index"] for b in expected])
    assert example not in ids and len(ids[ids >= 0]) == 399


def test_a_graph_over_the_budget_is_named_when_the_loader_is_made(tmp_path):
    def big(columns):  # graph 55: 70 nodes, more than the budget's 63
        columns["nodes/z"][55] = np.zeros(70, np.int8)
        columns["nodes/x"][55] = np.zeros((70, 2), np.float32)

    path = write_graphs(tmp_path / "big.parquet", change=big)
    with pytest.raises(ValueError, match="GraphBudget: graph 55 has 70 nodes"):
        jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT)
    skipping = jb.GraphBudget(**BUDGET, too_big="skip")
    expected = batches(jb.Loader(path, skipping))
    with jb.Loader(path, skipping, stream=True, host_memory_limit=LIMIT) as loader:
        assert_same_stream(expected, batches(loader))
        assert loader.stats.skipped == 1


def test_a_truncated_file_is_an_os_error_naming_it(tmp_path):
    path = write_graphs(tmp_path / "graphs.parquet")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError, match=str(path)):
        jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT)


def test_a_damaged_row_group_is_an_os_error_naming_it(tmp_path):
    path = write_graphs(tmp_path / "graphs.parquet")
    meta = pq.ParquetFile(path).metadata.row_group(9).column(4)  # receivers of row group 9
    with open(path, "r+b") as f:
        f.seek(meta.data_page_offset + meta.total_compressed_size // 3)
        f.write(b"\xff" * (meta.total_compressed_size // 3))
    with pytest.raises((OSError, ValueError), match=f"row group 9 of {path}|{path}, row group 9"):
        jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT)


def test_a_file_that_is_not_graphs_is_refused_naming_what_is_missing(tmp_path):
    path = tmp_path / "tokens.parquet"
    pq.write_table(pa.table({"senders": pa.array([[0]], pa.list_(pa.int32()))}), path)
    for stream in (False, True):
        with pytest.raises(ValueError, match="receivers"):
            jb.Loader(path, jb.GraphBudget(**BUDGET), stream=stream, host_memory_limit=LIMIT)
    graphs = write_graphs(tmp_path / "graphs.parquet")
    for stream in (False, True):
        with pytest.raises(ValueError, match="length_column='edges' does not apply"):
            jb.Loader(graphs, jb.GraphBudget(**BUDGET), column="edges", stream=stream,
                      host_memory_limit=LIMIT)  # fmt: skip


# ---------------------------------------------------------------------- memory


def test_a_limit_too_small_is_refused_and_a_sufficient_one_streams_many_row_groups(tmp_path):
    path = write_graphs(tmp_path / "graphs.parquet", n=3000, row_group_size=20)  # 150 groups
    decoded = sum(pq.ParquetFile(path).metadata.row_group(g).total_byte_size for g in range(150))
    with pytest.raises(ValueError, match=r"host_memory_limit 20000 bytes"):
        jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=20_000)
    # Blocks of one row group: each batch reads the row group its predecessor read.
    options = dict(shuffle="block", block_size=20, seed=4, num_threads=2, prefetch=2)
    expected = batches(jb.Loader(path, jb.GraphBudget(**BUDGET), **options))
    assert decoded > 10 * LIMIT  # The file is far larger than the limit.
    with jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT,
                   **options) as loader:  # fmt: skip
        # The cache holds a few row groups of the 150 (8 kB each, decoded).
        assert 0 < loader._core_loader.chunk_cache_bytes < LIMIT
        assert_same_stream(expected, batches(loader))
        assert loader.stats.chunk_reads >= 150
    # stream=None streams a file whose decoded size exceeds the limit.
    with jb.Loader(path, jb.GraphBudget(**BUDGET), host_memory_limit=LIMIT, **options) as auto:
        assert_same_stream(expected, batches(auto))
        assert auto.stats.chunk_reads >= 150


def test_a_graph_file_changed_while_streaming_is_named(tmp_path):
    path = write_graphs(tmp_path / "graphs.parquet")
    loader = jb.Loader(path, jb.GraphBudget(**BUDGET), stream=True, host_memory_limit=LIMIT)
    next(loader)
    write_graphs(path, seed=3)
    changed = "changed (while the loader reads it|since the loader opened it)"
    with pytest.raises(OSError, match=f"{path}.*{changed}"):
        batches(loader)
    loader.close()


# test_stream.py's measuring script, run over graphs: peak RSS growth while
# streaming (or reading whole) and a digest of every batch.
RSS_SCRIPT = TOKENS_RSS_SCRIPT.replace(
    "jb.PadToMax(64)", "jb.GraphBudget(nodes=1024, edges=2048, graphs=64)"
)
assert RSS_SCRIPT.count("GraphBudget") == 2


def write_big_graphs(path, groups, per_group):
    """Molecule-sized graphs (5-39 nodes of 8 float32 features, twice as many
    edges of 4), written row group by row group: about 1.8 kB per graph."""
    rng = np.random.default_rng(0)
    writer = None
    for _ in range(groups):
        nodes = rng.integers(5, 40, per_group)
        edges = 2 * nodes
        node_offsets = np.concatenate([[0], np.cumsum(nodes)]).astype(np.int32)
        edge_offsets = np.concatenate([[0], np.cumsum(edges)]).astype(np.int32)
        ends = rng.random(edge_offsets[-1]) * np.repeat(nodes, edges)

        def column(values, offsets, width=None):  # noqa: E306 - a local helper
            inner = pa.array(values.ravel())
            if width:
                inner = pa.FixedSizeListArray.from_arrays(inner, width)
            return pa.ListArray.from_arrays(pa.array(offsets), inner)

        table = pa.table({
            "nodes": column(rng.random((node_offsets[-1], 8), np.float32), node_offsets, 8),
            "edges": column(rng.random((edge_offsets[-1], 4), np.float32), edge_offsets, 4),
            "senders": column(ends.astype(np.int32), edge_offsets),
            "receivers": column(ends[::-1].copy().astype(np.int32) % np.repeat(nodes, edges),
                                edge_offsets),
        })  # fmt: skip
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


# What the process adds beside the limit while it streams: a fixed part
# (pyarrow's reader and pools, malloc's arenas, thread stacks) and a part per
# graph (the columns' lengths, the node and edge counts, the epoch's plan),
# which a loader reading the file whole keeps too. Measured over a 32 MB
# limit on Linux with glibc: 31, 47 and 69 MB for 50,000, 100,000 and
# 200,000 graphs, i.e. about 18 MB + 254 bytes per graph, the same (39-47 MB
# for 100,000) under limits of 16, 32 and 64 MB.
FIXED_OVERHEAD = 32 << 20
OVERHEAD_PER_GRAPH = 320


@pytest.mark.timeout(660)  # Two subprocesses of up to 300 s each.
def test_streaming_graphs_keeps_memory_under_the_limit_plus_overhead(tmp_path):
    big, small = tmp_path / "big.parquet", tmp_path / "small.parquet"
    write_big_graphs(big, groups=60, per_group=1000)  # about 110 MB decoded
    write_big_graphs(small, groups=2, per_group=100)
    limit = 16 << 20
    meta = pq.ParquetFile(big).metadata
    decoded = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
    assert decoded > 4 * limit

    def run(stream):
        out = subprocess.run(
            [sys.executable, "-c", RSS_SCRIPT, str(big), str(small), str(limit), str(int(stream))],
            capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
        return json.loads(out.stdout)

    streamed, whole = run(stream=True), run(stream=False)
    assert streamed["digest"] == whole["digest"]  # Every batch, byte for byte.
    assert streamed["examples"] == whole["examples"] == 60_000
    assert streamed["reads"] == 60  # shuffle=False: each row group read once.
    assert whole["growth"] > 4 * limit  # Read whole, it does not fit the limit.
    overhead = FIXED_OVERHEAD + OVERHEAD_PER_GRAPH * 60_000  # 52.7 MB
    assert streamed["growth"] < limit + overhead, (streamed, whole)


# ------------------------------------------------------------------- graph jobs


def test_a_graph_job_over_a_streamed_file_writes_what_reading_whole_writes(tmp_path):
    from graph_job_functions import embed, molecules

    graphs = molecules(200, seed=1)
    columns = {
        "nodes/x": [g["nodes"]["x"] for g in graphs],
        "edges": [g["edges"] for g in graphs],
        "senders": [g["senders"] for g in graphs],
        "receivers": [g["receivers"] for g in graphs],
    }
    path = tmp_path / "molecules.parquet"
    pq.write_table(pa.table({k: to_arrow(v) for k, v in columns.items()}), path, row_group_size=16)
    planner = jb.GraphBuckets(max_shapes=3, nodes=64, edges=64, graphs=8)
    options = dict(planner=planner, checkpoint_every=16, progress=False)
    whole = jb.run(embed, path, tmp_path / "whole", **options)
    streamed = jb.run(
        embed, path, tmp_path / "streamed", stream=True, host_memory_limit=1 << 20, **options
    )
    assert whole.examples == streamed.examples == 200 and streamed.complete

    def output(folder):
        return pq.read_table(sorted(folder.glob("part-*.parquet"))).sort_by("example_index")

    got, expected = output(tmp_path / "streamed"), output(tmp_path / "whole")
    assert got.column_names == expected.column_names
    assert got.equals(expected)
    np.testing.assert_array_equal(got["example_index"].to_numpy(), np.arange(200))
