"""Opening sources by path: what cannot be read is refused naming the file."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import jaxbatch as jb


def write_arrow(path, n=20):
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 50, int(k)).astype(np.int32) for k in rng.integers(1, 9, n)]
    table = pa.table({"tokens": pa.array([t.tolist() for t in tokens], pa.list_(pa.int32()))})
    feather.write_feather(table, path, compression="uncompressed")
    return tokens


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "x.arrow"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=f"Loader: {fifo} is a FIFO; expected a regular"):
        jb.Loader(fifo, jb.PadToMax(4))


def test_symlink_loop_is_refused_as_a_loop(tmp_path):
    a, b = tmp_path / "a.arrow", tmp_path / "b.arrow"
    os.symlink(b, a)
    os.symlink(a, b)
    with pytest.raises(OSError, match=f"Loader: {a} is a symlink loop"):
        jb.Loader(a, jb.PadToMax(4))


def test_folder_without_npy_files_is_named(tmp_path):
    folder = tmp_path / "x.arrow"
    folder.mkdir()
    with pytest.raises(ValueError, match=f"Loader: folder {folder} holds no .npy files"):
        jb.Loader(folder, jb.PadToMax(4))


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
@pytest.mark.parametrize("keep", [0, 7, 100, -10])
def test_truncated_or_corrupt_files_are_named(tmp_path, suffix, keep):
    path = tmp_path / f"d{suffix}"
    table = pa.table({"tokens": pa.array([[1, 2], [3]], pa.list_(pa.int32()))})
    if suffix == ".arrow":
        feather.write_feather(table, path, compression="uncompressed")
    else:
        pq.write_table(table, path)
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep else b"")
    with pytest.raises(OSError, match=f"Loader: (cannot read )?{path}"):
        jb.Loader(path, jb.PadToMax(4))


def test_garbage_npy_file_is_named(tmp_path):
    np.save(tmp_path / "t.values.npy", np.arange(4, dtype=np.int32))
    (tmp_path / "t.offsets.npy").write_bytes(b"not a numpy file")
    with pytest.raises(OSError, match=f"cannot read {tmp_path / 't.offsets.npy'} as a .npy"):
        jb.Loader(tmp_path, jb.PadToMax(4))


def test_npy_folder_batches_by_the_first_ragged_column_whatever_the_file_order(tmp_path):
    # label.npy sorts before tokens.values.npy: it used to be taken as the length column.
    tokens = [np.arange(k, dtype=np.int32) for k in (3, 1, 2)]
    np.save(tmp_path / "label.npy", np.array([5, 6, 7]))
    np.save(tmp_path / "tokens.values.npy", np.concatenate(tokens))
    np.save(tmp_path / "tokens.offsets.npy", np.array([0, 3, 4, 6]))
    (batch,) = list(jb.Loader(tmp_path, jb.PadToMax(3), shuffle=False))
    np.testing.assert_array_equal(batch["tokens"], [[0, 1, 2], [0, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(batch["tokens_lengths"], [3, 1, 2])
    np.testing.assert_array_equal(batch["label"], [5, 6, 7])


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_arrow_and_parquet_batch_by_the_first_list_column_of_columns(tmp_path, suffix):
    path = tmp_path / f"d{suffix}"
    table = pa.table(
        {"label": [5, 6, 7], "tokens": pa.array([[0, 1, 2], [0], [0, 1]], pa.list_(pa.int32()))}
    )
    if suffix == ".arrow":
        feather.write_feather(table, path, compression="uncompressed")
    else:
        pq.write_table(table, path)
    (batch,) = list(jb.Loader(path, jb.PadToMax(3), columns=["label", "tokens"], shuffle=False))
    np.testing.assert_array_equal(batch["tokens"], [[0, 1, 2], [0, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(batch["label"], [5, 6, 7])


def test_parquet_with_a_column_name_that_is_not_utf8_is_an_oserror_naming_it(tmp_path):
    # pyarrow decodes the names of the Parquet schema into str when asked for
    # them (schema.names, schema_arrow, read_row_group): a mangled byte there
    # raised UnicodeDecodeError out of the Loader and `jaxbatch plan`.
    from jaxbatch._src.cli.main import main

    table = pa.table({"tokens": pa.array([[1, 2], [3]], pa.list_(pa.int32())), "label": [4, 5]})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path)
    data = bytearray(path.read_bytes())
    data[data.index(b"label")] = 0xFF  # the schema's name of the column
    path.write_bytes(data)
    with pytest.raises(UnicodeDecodeError):
        list(pq.read_schema(path).names)
    for options in ({}, {"stream": True, "host_memory_limit": 1 << 20}):
        with pytest.raises(OSError, match=f"Loader: cannot read {path} as Parquet .*utf-8"):
            jb.Loader(path, jb.PadToMax(2), **options)
    assert main(["plan", str(path)]) == 2


def test_ipc_file_whose_column_is_longer_than_its_batch_is_an_oserror_naming_it(tmp_path):
    # pyarrow raises a bare OSError ("Array length did not match record batch
    # length"), which the Loader let through without the file's name.
    from arrow_craft import ipc_bytes, record_batches, write_int64

    data = bytearray(ipc_bytes(pa.table({"t": pa.array([[1], [2, 3]])}), stream=False))
    (batch,) = record_batches(bytes(data))
    write_int64(data, batch.length, 1)
    path = tmp_path / "d.arrow"
    path.write_bytes(data)
    with pytest.raises(OSError, match=f"Loader: cannot read {path} as an Arrow IPC .*length"):
        jb.Loader(path, jb.PadToMax(2))


# -- A pickled file-backed dataset and the file it was read from ---------------------


def write_tokens(path, tokens):
    table = pa.table({"tokens": pa.array([t.tolist() for t in tokens], pa.list_(pa.int32()))})
    feather.write_feather(table, path, compression="uncompressed")


@pytest.mark.parametrize("how", ["rewritten in place", "renamed over"])
def test_a_pickled_dataset_refuses_a_replacement_of_equal_size_and_time(tmp_path, how):
    """`cp -p`, `rsync -t` and `tar x` restore the modification time: a file
    of equal size put in place of the one a dataset was read from used to
    unpickle without error, yielding other values. Its inode (renamed over)
    or status-change time (rewritten in place) now tell."""
    import pickle
    import time

    path = tmp_path / "data.arrow"
    tokens = write_arrow(path)
    blob = pickle.dumps(jb.Loader(path, jb.PadToMax(4)).dataset)
    before = os.stat(path)
    time.sleep(0.05)  # File times come from a coarse clock: let it tick.
    other = [t + 1 for t in tokens]  # Same lengths: the same size.
    target = path if how == "rewritten in place" else tmp_path / "other.arrow"
    write_tokens(target, other)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    if target != path:
        os.replace(target, path)
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    reopened = jb.Loader(path, jb.PadToMax(4)).dataset  # Other values: a pickle must not pass.
    assert reopened.example(0)["tokens"].tolist() == other[0].tolist() != tokens[0].tolist()
    change = "modified in place" if how == "rewritten in place" else "replaced by another file"
    with pytest.raises(OSError, match=f"read from {path}, which changed since it was read: "
                       f"{change} \\(still {before.st_size} bytes\\)"):  # fmt: skip
        pickle.loads(blob)


def test_a_dataset_pickled_with_a_relative_path_unpickles_in_another_folder(tmp_path, monkeypatch):
    import pickle

    (tmp_path / "data").mkdir()
    tokens = write_arrow(tmp_path / "data" / "x.arrow")
    monkeypatch.chdir(tmp_path / "data")
    blob = pickle.dumps(jb.Loader("x.arrow", jb.PadToMax(4)).dataset)
    monkeypatch.chdir(tmp_path)  # A worker process started elsewhere.
    back = pickle.loads(blob)
    assert [back.example(i)["tokens"].tolist() for i in range(len(tokens))] == [
        t.tolist() for t in tokens
    ]
    assert back._mapped_files == (str(tmp_path / "data" / "x.arrow"),)
