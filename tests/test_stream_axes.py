"""axes= for a file a Loader reads (issue 30 item 4): a Parquet file of tokens
and an L x L pair feature tied to them, read whole or streamed by row group,
gives the batches the in-memory Dataset with the same axes gives, through
shuffle, shard, restore and the bad-example policy; a tie broken in a later
row group is an error naming the file's example, the axis, both columns and
their sizes."""

from __future__ import annotations

import numpy as np
import pytest
from test_grid_columns import _drain, _same  # The grid tests' batch reading and comparing.

import jaxbatch as jb

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

AXES = {"tokens": ("L",), "pair": ("L", "L")}
ROW_GROUP = 8
# Row-group cache of a few row groups, far below the file: reads are streamed.
LIMIT = 60_000


def _data(n=50, seed=0, broken=None):
    """Tokens of lengths 1..9 and a pair feature [L, L, 2] each; `broken`:
    the example whose pair is one row and column short of its tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 10, size=n)
    tokens = [np.arange(k, dtype=np.int32) + i for i, k in enumerate(lengths)]
    pairs = [rng.standard_normal((k, k, 2)).astype(np.float32) for k in lengths]
    if broken is not None:
        k = max(int(lengths[broken]), 2)
        tokens[broken] = np.arange(k, dtype=np.int32)
        pairs[broken] = np.zeros((k - 1, k - 1, 2), np.float32)
    return tokens, pairs


def _parquet(path, tokens, pairs):
    typ = pa.list_(pa.list_(pa.list_(pa.float32(), 2)))
    table = pa.table(
        {
            "tokens": pa.array([t.tolist() for t in tokens], type=pa.list_(pa.int32())),
            "pair": pa.array([p.tolist() for p in pairs], type=typ),
        }
    )
    pq.write_table(table, path, row_group_size=ROW_GROUP)
    return str(path)


@pytest.mark.parametrize("stream", [True, False])
def test_file_with_axes_gives_the_in_memory_datasets_batches(tmp_path, stream):
    tokens, pairs = _data()
    path = _parquet(tmp_path / "pairs.parquet", tokens, pairs)
    ds = jb.Dataset.from_arrays({"tokens": tokens, "pair": pairs}, axes=AXES)
    planner = jb.PadToMax(batch_size=6)
    common = dict(column="tokens", seed=5, epochs=2, num_threads=2)
    read = dict(axes=AXES, host_memory_limit=LIMIT, stream=stream)
    want = _drain(jb.Loader(ds, planner, **common))
    with jb.Loader(path, planner, **common, **read) as loader:
        got = _drain(loader, 7)
        state = loader.get_state()
        got += _drain(loader)
    _same(want, got)
    assert got[0]["pair"].shape[1:3] == (got[0]["tokens"].shape[1],) * 2
    # Restored where it stopped: the same rest.
    with jb.Loader(path, planner, **common, **read, state=state) as loader:
        _same(want[7:], _drain(loader))
    # Two shards: each the in-memory dataset's shard.
    for i in range(2):
        sharded = dict(common, shard=(i, 2))
        _same(
            _drain(jb.Loader(ds, planner, **sharded)),
            _drain(jb.Loader(path, planner, **sharded, **read)),
        )


def test_bad_example_policy_skips_the_same_examples_as_in_memory(tmp_path):
    tokens, pairs = _data(seed=1)
    path = _parquet(tmp_path / "pairs.parquet", tokens, pairs)
    ds = jb.Dataset.from_arrays({"tokens": tokens, "pair": pairs}, axes=AXES)
    options = dict(
        column="tokens",
        shuffle=False,
        schema={"tokens": jb.ColumnSchema(max_length=6)},
        on_error="skip",
    )
    want = _drain(jb.Loader(ds, jb.PadToMax(batch_size=4), **options))
    got = _drain(
        jb.Loader(
            path,
            jb.PadToMax(batch_size=4),
            axes=AXES,
            stream=True,
            host_memory_limit=LIMIT,
            **options,
        )
    )
    _same(want, got)
    kept = sorted(int(e) for b in got for e in b["example_index"] if e >= 0)
    assert kept == [i for i, t in enumerate(tokens) if len(t) <= 6]


@pytest.mark.parametrize("stream", [True, False])
def test_a_broken_tie_names_the_files_example_axis_columns_and_sizes(tmp_path, stream):
    broken = 2 * ROW_GROUP + 3  # In the third row group.
    tokens, pairs = _data(seed=2, broken=broken)
    path = _parquet(tmp_path / "pairs.parquet", tokens, pairs)
    k = len(tokens[broken])
    with pytest.raises(ValueError) as raised:
        jb.Loader(
            path, jb.PadToMax(4), axes=AXES, stream=stream, host_memory_limit=LIMIT, column="tokens"
        )
    message = str(raised.value)
    assert f"example {broken}: axis 'L'" in message, message
    assert f"column 'tokens' axis 0 is {k}, column 'pair' axis 0 is {k - 1}" in message, message
    if stream:
        assert "row group 2" in message, message


def test_axes_are_refused_for_a_dataset_which_takes_them_where_it_is_built():
    tokens, pairs = _data(n=4)
    ds = jb.Dataset.from_arrays({"tokens": tokens, "pair": pairs}, axes=AXES)
    with pytest.raises(ValueError, match=r"axes=.*Dataset.from_arrays\(\.\.\., axes="):
        jb.Loader(ds, jb.PadToMax(2), axes=AXES)


def _pair_reference(tokens, pairs):
    """What job_functions.pair_summary gives each example, in NumPy."""
    return (
        np.array([t.sum() for t in tokens], np.float64),
        np.stack([p.sum(axis=(0, 1), dtype=np.float64) for p in pairs]),
    )


@pytest.mark.parametrize("stream", [True, False])
def test_a_job_reads_a_files_axes_and_keys_them(tmp_path, stream):
    """jb.run(axes=) reads the file's pair feature as the Loader does, whole
    or streamed: every example's sums equal NumPy's. The axes are part of
    the input key: a re-run with the same ones finds the job done, one with
    other axis names (the engine hashes them) is refused."""
    from job_functions import pair_summary

    tokens, pairs = _data(n=30, seed=2)
    path = _parquet(tmp_path / "pairs.parquet", tokens, pairs)
    read = dict(column="tokens", host_memory_limit=LIMIT, stream=stream, progress=False)
    out = tmp_path / "out"
    report = jb.run(pair_summary, path, out, planner=jb.PadToMax(4), axes=AXES, **read)
    assert report.complete and report.examples == len(tokens)
    got = jb.read_output(out)
    want_tokens, want_pair = _pair_reference(tokens, pairs)
    np.testing.assert_array_equal(got["example_index"], np.arange(len(tokens)))
    np.testing.assert_allclose(got["tokens_total"], want_tokens)
    np.testing.assert_allclose(np.stack(got["pair_total"]), want_pair, rtol=1e-5, atol=1e-5)
    again = jb.run(pair_summary, path, out, planner=jb.PadToMax(4), axes=AXES, **read)
    assert again.complete and again.runs == 1  # Done already: nothing run again.
    renamed = {"tokens": ("N",), "pair": ("N", "N")}
    with pytest.raises(jb.JobError, match="input"):
        jb.run(pair_summary, path, out, planner=jb.PadToMax(4), axes=renamed, **read)


def test_jaxbatch_run_takes_axes(tmp_path, capsys):
    """`jaxbatch run --axes` gives jb.run's axes=: the tie is checked (a file
    whose pair is a row short of its tokens is refused, naming the example;
    without the tie it would run); a malformed one is a usage error naming
    the flag and what it found."""
    from test_job import FUNCTIONS

    from jaxbatch._src.cli.main import main as cli_main

    tokens, pairs = _data(n=12, seed=3)
    path = _parquet(tmp_path / "pairs.parquet", tokens, pairs)
    args = [f"{FUNCTIONS}:pair_summary", "--input", path, "--column", "tokens"]
    args += ["--output", str(tmp_path / "out"), "--batch-size", "4", "--no-progress"]
    assert cli_main(["run", *args, "--axes", "tokens=L", "--axes", "pair=L,L"]) == 0
    got = jb.read_output(tmp_path / "out")
    want_tokens, want_pair = _pair_reference(tokens, pairs)
    np.testing.assert_allclose(got["tokens_total"], want_tokens)
    np.testing.assert_allclose(np.stack(got["pair_total"]), want_pair, rtol=1e-5, atol=1e-5)
    tied = ["--axes", "tokens=L", "--axes", "pair=L,L", "--overwrite"]
    capsys.readouterr()
    assert cli_main(["run", *args, "--axes", "pair", "--overwrite"]) == 2
    assert "--axes must be COLUMN=A or COLUMN=A,B (e.g. image=h,w), found 'pair'" in (
        capsys.readouterr().err
    )
    assert cli_main(["run", *args, "--axes", "pair=L,", "--overwrite"]) == 2
    assert "found 'pair=L,'" in capsys.readouterr().err
    tokens, pairs = _data(n=12, seed=3, broken=5)
    _parquet(tmp_path / "pairs.parquet", tokens, pairs)
    assert cli_main(["run", *args, *tied]) == 2
    assert "example 5: axis 'L'" in capsys.readouterr().err
