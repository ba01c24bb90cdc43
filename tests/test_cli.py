import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jaxbatch as jb
from jaxbatch._src.cli.main import main
from jaxbatch._src.cli.plan import compare, load_lengths
from jaxbatch._src.data.default_data import pydoc_lengths


def test_plan_default_prints_a_table_of_every_planner(capsys):
    assert main(["plan", "--default"]) == 0
    out = capsys.readouterr().out
    for name in ("PadToMax", "FixedBuckets(powers of 2", "AutoBuckets(max_shapes=8)", "Pack("):
        assert name in out
    assert f"{len(pydoc_lengths())} examples" in out


def test_table_numbers_are_the_plans_stats():
    lengths = pydoc_lengths()
    results = dict((name.split("(")[0], p) for name, p, _ in compare(lengths, 8, 4096))
    direct = jb.plan(lengths, jb.AutoBuckets(8, token_budget=4096))
    assert results["AutoBuckets"].stats == direct.stats
    assert results["AutoBuckets"].stats.shapes <= 8
    assert results["Pack"].stats.efficiency > results["AutoBuckets"].stats.efficiency


def test_text_and_parquet_files(tmp_path, capsys):
    text = tmp_path / "data.txt"
    text.write_text("a b c\n\nd e\nf g h i\n")
    lengths, _ = load_lengths(str(text), None)
    np.testing.assert_array_equal(lengths, [3, 0, 2, 4])
    table = pa.table({"id": [1, 2], "tokens": pa.array([[1, 2, 3], [4]], pa.list_(pa.int32()))})
    pq.write_table(table, tmp_path / "data.parquet")
    lengths, source = load_lengths(str(tmp_path / "data.parquet"), None)
    np.testing.assert_array_equal(lengths, [3, 1])
    assert "'tokens'" in source
    assert main(["plan", str(text), "--max-shapes", "2", "--token-budget", "16"]) == 0
    assert "AutoBuckets(max_shapes=2)" in capsys.readouterr().out
    text.write_text("one\n")
    assert main(["plan", str(text)]) == 0
    assert "\n1 example, 1 element; lengths" in capsys.readouterr().out


def test_plot_is_written(tmp_path):
    out = tmp_path / "hist.png"
    assert main(["plan", "--default", "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def exits_2_with_one_line(capsys, argv: list[str]) -> str:
    """Runs `jaxbatch ARGV`, which must fail as a usage error: exit 2, one
    line on stderr, nothing on stdout. Returns the line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_bad_arguments_exit_with_a_message(tmp_path, capsys):
    assert "no such file" in exits_2_with_one_line(capsys, ["plan", str(tmp_path / "missing.txt")])
    line = exits_2_with_one_line(capsys, ["plan", "--default", "--token-budget", "10"])
    assert "smaller than the longest example" in line
    assert exits_2_with_one_line(capsys, ["plan"]) == "jaxbatch plan: give a FILE or --default"


def test_plan_refuses_a_column_that_is_not_a_list_like_the_loader(tmp_path, capsys):
    path = tmp_path / "data.parquet"
    table = pa.table({"label": np.arange(3), "tokens": pa.array([[1, 2], [3], [4]])})
    pq.write_table(table, path)
    line = exits_2_with_one_line(capsys, ["plan", str(path), "--column", "label"])
    assert line == (
        f"jaxbatch plan: column 'label' of {path} must be a list or large_list column to batch "
        f"by its lengths, found type int64"
    )
    with pytest.raises(ValueError, match="must be a list or large_list column") as loader_error:
        jb.Loader(path, jb.PadToMax(2), column="label")
    assert line.removeprefix("jaxbatch plan: ") in str(loader_error.value)  # one rule, one text
    line = exits_2_with_one_line(capsys, ["plan", str(path), "--column", "nope"])
    assert f"{path} has no column 'nope'" in line


def test_plot_to_a_missing_or_unwritable_folder_fails_before_planning(tmp_path, capsys):
    missing = tmp_path / "out" / "missing" / "x.png"
    line = exits_2_with_one_line(capsys, ["plan", "--default", "--plot", str(missing)])
    assert line == f"jaxbatch plan: --plot {missing}: no such folder {missing.parent}"
    line = exits_2_with_one_line(capsys, ["plan", "--default", "--plot", str(tmp_path)])
    assert "is a folder" in line
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "nomodule:f", "--input", "x.parquet", "--output", "out"], "No module named"),
        (["run", "f", "--input", "x.parquet", "--output", "out"], "expected MODULE:FUNCTION"),
        (
            ["run", "json:dumps", "--input", "x", "--output", "o", "--shard", "1of2"],
            "--shard must be I/N",
        ),
        (["demo", "--corpus", "missing.txt", "--no-naive"], "no such corpus file"),
        (["plan", "--default", "--max-shapes", "0"], "max_shapes"),
    ],
)
def test_usage_errors_of_every_command_exit_2_with_one_line(
    argv, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    line = exits_2_with_one_line(capsys, argv)
    assert line.startswith(f"jaxbatch {argv[0]}: "), line
    assert message in line, line


def test_console_script_runs():
    result = subprocess.run(
        [sys.executable, "-m", "jaxbatch", "plan", "--default", "--max-shapes", "4"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "AutoBuckets(max_shapes=4)" in result.stdout


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "blank.txt",
            b"\n  \n\n",
            "blank.txt, one example per line, whitespace tokens holds 3 "
            "examples, all empty (0 tokens); there is nothing to plan",
        ),
        (
            "bad.parquet",
            b"PAR1 not really parquet",
            "cannot read {path} as Parquet (corrupt or truncated?)",
        ),
        (
            "bad.arrow",
            b"ARROW1\0\0 truncated",
            "cannot read {path} as Arrow IPC (corrupt or truncated?)",
        ),
    ],
)
def test_unreadable_or_empty_files_print_one_line_and_exit_non_zero(
    tmp_path, name, content, message
):
    path = tmp_path / name
    path.write_bytes(content)
    result = subprocess.run(
        [sys.executable, "-m", "jaxbatch", "plan", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jaxbatch plan: ")
    assert message.format(path=path) in lines[0]


def test_directories_fifos_and_symlink_loops_are_named(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "fifo.txt")
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    line = exits_2_with_one_line(capsys, ["plan", str(tmp_path)])
    assert f"{tmp_path} is a directory; expected a file" in line
    for name in ("fifo.txt", "a"):
        line = exits_2_with_one_line(capsys, ["plan", str(tmp_path / name)])
        assert f"{tmp_path / name} is not a regular file" in line


def graph_file(tmp_path, count=120, seed=0):
    """A graph Parquet file as the Loader reads graphs (node features, senders,
    receivers, a label), molecule-like sizes; and its Dataset."""
    rng = np.random.default_rng(seed)
    nodes = rng.integers(1, 30, count)
    edges = 2 * (nodes - 1) + rng.integers(0, 3, count)
    path = tmp_path / "graphs.parquet"
    senders = [rng.integers(0, n, m).astype(np.int32) for n, m in zip(nodes, edges, strict=True)]
    pq.write_table(
        pa.table(
            {
                "nodes/x": pa.array(
                    [np.ones(n, np.float32) for n in nodes], pa.list_(pa.float32())
                ),
                "senders": pa.array(senders, pa.list_(pa.int32())),
                "receivers": pa.array(senders, pa.list_(pa.int32())),
                "label": np.arange(count, dtype=np.float32),
            }
        ),
        path,
    )
    return path, jb.Dataset.from_arrow(pq.read_table(path))


def test_plan_of_a_graph_file_prints_the_fitted_budgets_and_their_plans(tmp_path, capsys):
    path, ds = graph_file(tmp_path)
    assert main(["plan", str(path), "--graphs", "8", "--multiple", "4", "--max-shapes", "3"]) == 0
    out = capsys.readouterr().out
    budget = jb.GraphBudget.fit(ds, 8, multiple=4)
    buckets = jb.GraphBuckets.fit(ds, 8, max_shapes=3, multiple=4)
    order = np.random.default_rng(0).permutation(len(ds))  # the seeded shuffle it plans in
    assert "120 graphs" in out
    for name, planner in (
        (f"GraphBudget(nodes={budget.nodes}, edges={budget.edges}, graphs=8)", budget),
        (
            f"GraphBuckets(max_shapes=3, nodes={buckets.nodes}, edges={buckets.edges}, graphs=8)",
            buckets,
        ),
    ):
        s = jb.plan(ds, planner, order=order).stats
        row = next(line for line in out.splitlines() if line.startswith(name))
        cells = row[len(name) :].split()
        expected = [f"{s.node_efficiency:.1%}", f"{s.edge_efficiency:.1%}"]
        expected += [f"{s.graph_efficiency:.1%}", str(s.shapes), str(s.batches)]
        assert cells[:5] == expected, (row, expected)
    shapes = jb.plan(ds, buckets, order=order).shapes
    assert ", ".join(f"({s.rows}, {s.length}, {s.edges})" for s in shapes) in out


def test_plan_of_a_graph_file_refuses_what_does_not_apply_to_graphs(tmp_path, capsys):
    path, _ = graph_file(tmp_path, count=10)
    line = exits_2_with_one_line(capsys, ["plan", str(path), "--token-budget", "64"])
    assert line.startswith(f"jaxbatch plan: --token-budget does not apply to graph data ({path})")
    line = exits_2_with_one_line(capsys, ["plan", str(path), "--pack", "senders=8"])
    assert line.startswith("jaxbatch plan: --pack does not apply to graph data")
    line = exits_2_with_one_line(capsys, ["plan", str(path), "--graphs", "1"])
    assert line.startswith("jaxbatch plan: GraphBudget.fit: graphs must be at least 2")
    assert line.endswith("found 1")
    line = exits_2_with_one_line(capsys, ["plan", "--default", "--graphs", "8"])
    assert line == (
        "jaxbatch plan: --graphs applies to graph data (senders and receivers columns) only"
    )


def _images_parquet(path, n=60, seed=0):
    """Images of 2..40 x 2..40 pixels as nested lists, and their sizes."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 41, size=(n, 2))
    images = [np.zeros((h, w), np.float32).tolist() for h, w in sizes]
    pq.write_table(pa.table({"image": pa.array(images, pa.list_(pa.list_(pa.float32())))}), path)
    return sizes


def _row(out: str, planner: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(planner))
    return line[len(planner) :].split()


def test_plan_of_images_is_by_height_and_width(tmp_path, capsys):
    """A column of images is planned in two axes, as a Loader plans it: the
    sizes are each image's (height, width), not its flattened cell count;
    PadToMax's and PatchPack's efficiencies equal NumPy's count of real and
    padded cells (patches), AutoBuckets' equals jb.plan's on the sizes."""
    path = tmp_path / "images.parquet"
    sizes = _images_parquet(path)
    got, source = load_lengths(str(path), None)
    np.testing.assert_array_equal(got, sizes)
    assert source.endswith("column 'image' (height x width)")
    assert main(["plan", str(path), "--token-budget", "4000", "--patch", "8"]) == 0
    out = capsys.readouterr().out
    areas = sizes[:, 0] * sizes[:, 1]
    assert f"60 examples, {areas.sum()} cells" in out
    # PadToMax: index order, 4000 // largest rows a batch, the last padded to full rows.
    rows = 4000 // areas.max()
    padded = sum(
        rows * sizes[i : i + rows, 0].max() * sizes[i : i + rows, 1].max()
        for i in range(0, len(sizes), rows)
    )
    assert _row(out, f"PadToMax(batch_size={rows})")[0] == f"{areas.sum() / padded:.1%}"
    auto = jb.plan(sizes, jb.AutoBuckets(8, token_budget=4000))
    cells = _row(out, "AutoBuckets(max_shapes=8)")
    assert cells[0] == f"{auto.stats.efficiency:.1%}" and int(cells[2]) == auto.stats.shapes <= 8
    # PatchPack: real patches over the rows' patch slots.
    patches = -(-sizes[:, 0] // 8) * -(-sizes[:, 1] // 8)
    row = 1 << int(patches.max() - 1).bit_length()
    packed = _row(out, f"PatchPack(patch=(8, 8), row_length={row})")
    slots = int(packed[3]) * max(1, 4000 // (row * 64)) * row
    assert packed[0] == f"{patches.sum() / slots:.1%}" and packed[2] == "1"


def test_plan_of_images_refuses_what_does_not_apply(tmp_path, capsys):
    path = tmp_path / "images.parquet"
    _images_parquet(path)
    assert main(["plan", str(path), "--plot", str(tmp_path / "p.png")]) == 2
    assert "planned in two axes" in capsys.readouterr().err
    assert main(["plan", str(path), "--token-budget", "100"]) == 2
    assert "smaller than the largest example" in capsys.readouterr().err
    assert main(["plan", str(path), "--patch", "0"]) == 2
    assert "PatchPack: patch[0] must be a positive integer, found 0" in capsys.readouterr().err
    # A patch whose pixels no int32 counts (on main 2**31 x 2**31 was planned).
    assert main(["plan", str(path), "--patch", str(2**31)]) == 2
    assert (
        "PatchPack: patch 2147483648 x 2147483648 has 4611686018427387904 pixels; at most "
        "2147483647" in capsys.readouterr().err
    )
    assert main(["plan", "--default", "--patch", "16"]) == 2
    assert "--patch plans a column of images" in capsys.readouterr().err
