import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jaxbatch as jb
from jaxbatch._cli import compare, load_lengths, main
from jaxbatch._default_data import pydoc_lengths


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


def test_plot_is_written(tmp_path):
    out = tmp_path / "hist.png"
    assert main(["plan", "--default", "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_exit_with_a_message(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        main(["plan", str(tmp_path / "missing.txt")])
    with pytest.raises(SystemExit, match="smaller than the longest example"):
        main(["plan", "--default", "--token-budget", "10"])
    with pytest.raises(SystemExit, match="give a FILE or --default"):
        main(["plan"])


def test_console_script_runs():
    result = subprocess.run(
        [sys.executable, "-m", "jaxbatch._cli", "plan", "--default", "--max-shapes", "4"],
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
        [sys.executable, "-m", "jaxbatch._cli", "plan", str(path)], capture_output=True, text=True
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jaxbatch plan: ")
    assert message.format(path=path) in lines[0]


def test_directories_fifos_and_symlink_loops_are_named(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo.txt")
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(SystemExit, match=f"{tmp_path} is a directory; expected a file"):
        main(["plan", str(tmp_path)])
    for name in ("fifo.txt", "a"):
        with pytest.raises(SystemExit, match=f"{tmp_path / name} is not a regular file"):
            main(["plan", str(tmp_path / name)])
