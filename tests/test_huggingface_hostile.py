"""Hugging Face datasets as their users see them, or refused: each case is
checked against ``ds[i]``, the row datasets itself gives. A transform or a
format that changes the rows is refused with what to do instead; a filter
that leaves out the rows with nulls reads, and a view that keeps one is
refused naming the example by its place in the view; views of views read
as they index; a cache file changed after the Loader was built is an
OSError naming it."""

from __future__ import annotations

import os
import re
import shutil

import datasets
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import jaxbatch as jb

datasets.disable_progress_bars()

FEATURES = datasets.Features(
    {
        "t": datasets.List(datasets.Value("int64")),
        "s": datasets.Value("int64"),
        "p": datasets.List(datasets.List(datasets.Value("int32"), length=2)),
    }
)


def has_null(value) -> bool:
    return value is None or (isinstance(value, list) and any(map(has_null, value)))


def assert_rows_equal(data: jb.Dataset, view, columns) -> None:
    """Every example of `data` equals the view's row ``view[i]``."""
    assert len(data) == len(view)
    for i in range(len(view)):
        row, got = view[i], data.example(i)
        for name in columns:
            want = np.asarray(row[name])
            np.testing.assert_array_equal(got[name].reshape(want.shape), want, err_msg=f"{i}")


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """Rows with nulls of every kind, saved and memory-mapped by
    load_from_disk, in record batches of 40 rows."""
    rng = np.random.default_rng(4)
    rows = {"t": [], "s": [], "p": [], "label": []}
    for i in range(300):
        t = rng.integers(0, 9, rng.integers(0, 5)).tolist()
        p = [[i, -i]] * int(rng.integers(0, 3))
        rows["t"].append(None if i % 7 == 3 else t)
        rows["s"].append(None if i % 11 == 5 else i)
        rows["p"].append([*p, None] if i % 13 == 6 else p)
        rows["label"].append(i)
    features = datasets.Features({**FEATURES, "label": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict(rows, features=features)
    path = tmp_path_factory.mktemp("hf") / "nulls"
    ds.save_to_disk(str(path), max_shard_size="8KB")
    return datasets.load_from_disk(str(path))


def no_nulls(row) -> bool:
    return not any(has_null(row[c]) for c in ("t", "s", "p"))


# ---- transforms and formats ------------------------------------------------------


def drop_first(batch):
    return {"t": [r[1:] for r in batch["t"]], "z": [len(r) for r in batch["t"]]}


@pytest.mark.parametrize("columns", [None, ["t"], ["z"]])
def test_a_transform_is_refused_saying_to_map_it_and_the_map_reads_as_ds_i(columns):
    ds = datasets.Dataset.from_dict({"t": [[0, 1, 2, 3], [4, 5]]})
    transformed = ds.with_transform(drop_first)
    assert transformed[0] == {"t": [1, 2, 3], "z": 4}  # what its user sees
    also = ds.select([1, 0])
    also.set_transform(drop_first)
    for view in (transformed, also):
        # Before "no column 'z'": the column exists once the transform runs.
        with pytest.raises(ValueError, match=r"has a transform .*with_format\(None\)\.map"):
            jb.Dataset.from_huggingface(view, columns=columns)
        with pytest.raises(ValueError, match=r"has a transform"):
            jb.Loader(view, jb.PadToMax(2), columns=columns)
    # What the message says to do gives the transformed rows, read in place.
    applied = transformed.with_format(None).map(drop_first, batched=True)
    assert_rows_equal(jb.Dataset.from_huggingface(applied), transformed, ["t", "z"])


@pytest.mark.parametrize("kind", [None, "numpy", "arrow", "pandas", "jax"])
def test_a_format_that_only_changes_the_container_reads_the_same_rows(kind):
    ds = datasets.Dataset.from_dict({"t": [[0, 1, 2], [3], [4, 5]], "y": [7, 8, 9]})
    view = ds.select([2, 0]).with_format(kind)
    data = jb.Dataset.from_huggingface(view)
    assert data.column_names == ["t", "y"]
    assert_rows_equal(data, ds.select([2, 0]), ["t", "y"])
    if kind in ("numpy", "jax"):  # the row its user sees, in its own arrays
        np.testing.assert_array_equal(np.asarray(view[0]["t"]), data.example(0)["t"])


def test_a_format_that_changes_values_is_refused_naming_the_option():
    ds = datasets.Dataset.from_dict({"x": [[0.1, 0.2]], "y": [1]})
    view = ds.with_format("numpy", dtype=np.float16)
    assert view[0]["x"].dtype == np.float16  # not the table's float64
    with pytest.raises(ValueError, match=r"format 'numpy' has dtype= which changes the values"):
        jb.Dataset.from_huggingface(view)


def test_a_formats_columns_are_the_default_and_a_named_hidden_column_is_read():
    ds = datasets.Dataset.from_dict({"t": [[1, 2], [3]], "y": [5, 6], "w": [[7], [8, 9]]})
    shown = ds.with_format("numpy", columns=["t", "w"])
    assert set(shown[0]) == {"t", "w"}
    assert jb.Dataset.from_huggingface(shown).column_names == ["t", "w"]
    # Named, a hidden column is read: its rows are the table's all the same.
    hidden = jb.Dataset.from_huggingface(shown, columns=["y"])
    assert [int(hidden.example(i)["y"]) for i in range(2)] == [5, 6]
    every = ds.with_format(None, columns=["t"], output_all_columns=True)
    assert set(every[0]) == {"t", "y", "w"}
    assert jb.Dataset.from_huggingface(every).column_names == ["t", "y", "w"]


# ---- nulls, as the view numbers its rows -----------------------------------------


def test_a_filter_to_the_non_null_rows_reads_and_a_view_with_a_null_names_its_own_example():
    ds = datasets.Dataset.from_dict({"x": [[1], None, [2, 3], None, [4, 5, 6]]})
    kept = ds.filter(lambda row: row["x"] is not None)
    assert kept[2] == {"x": [4, 5, 6]}
    assert_rows_equal(jb.Dataset.from_huggingface(kept), kept, ["x"])
    # Example 2 of the view is row 3 of the table.
    view = ds.select([4, 0, 3, 1])
    with pytest.raises(ValueError, match=r"column 'x', example 2: .* \(1 other example with nul"):
        jb.Dataset.from_huggingface(view)


SMALL = st.integers(-5, 5)


def nullable(strategy):
    """`strategy`, or None one time in twelve."""
    return st.integers(0, 11).flatmap(lambda k: st.none() if k == 0 else strategy)


@st.composite
def tables(draw):
    """Rows with nulls at every level, a view's rows (any, repeated), a
    record batch size and the order to name the columns in."""
    n = draw(st.integers(1, 12))
    pairs = st.lists(nullable(SMALL), min_size=2, max_size=2)
    rows = {
        "t": draw(
            st.lists(nullable(st.lists(nullable(SMALL), max_size=3)), min_size=n, max_size=n)
        ),
        "s": draw(st.lists(nullable(SMALL), min_size=n, max_size=n)),
        "p": draw(
            st.lists(nullable(st.lists(nullable(pairs), max_size=2)), min_size=n, max_size=n)
        ),
    }
    order = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))
    return rows, order, draw(st.integers(1, 4)), draw(st.permutations(["t", "s", "p"]))


@settings(max_examples=60, deadline=None)
@given(drawn=tables())
def test_only_the_rows_a_view_selects_are_checked_and_errors_number_the_views_rows(drawn):
    rows, order, batch, columns = drawn
    table = datasets.Dataset.from_dict(rows, features=FEATURES).data.table
    table = pa.Table.from_batches(table.to_batches(max_chunksize=batch))
    ds = datasets.Dataset(datasets.table.InMemoryTable(table))
    view = ds.select(order)
    for name in columns:  # the reference: the first column with a null in a row of the view
        bad = [i for i in range(len(view)) if has_null(view[i][name])]
        if bad:
            event(f"refused: a null in {name}")
            more = f" ({len(bad) - 1} other example" if len(bad) > 1 else ""
            with pytest.raises(ValueError) as caught:
                jb.Dataset.from_huggingface(view, columns=columns)
            message = str(caught.value)
            assert message.startswith(f"column '{name}', example {bad[0]}: "), message
            assert more in message and ("other" in message) == bool(more), message
            return
    left_out = any(has_null(rows[c][r]) for c in columns for r in range(len(rows["t"])))
    event("read, with nulls in rows left out" if left_out else "read: no null anywhere")
    assert_rows_equal(jb.Dataset.from_huggingface(view, columns=columns), view, columns)


# ---- views of views --------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda ds: ds.filter(no_nulls).shuffle(seed=1).select(range(50)),
        lambda ds: (
            ds.filter(no_nulls)
            .train_test_split(0.3, seed=2)["test"]
            .filter(lambda row: row["label"] % 2 == 0)
        ),
        lambda ds: ds.shuffle(seed=3).filter(no_nulls).sort("s", reverse=True),
        lambda ds: ds.filter(no_nulls).select_columns(["t", "p", "label"]).shuffle(seed=4),
        lambda ds: ds.filter(no_nulls).flatten_indices().shuffle(seed=5).select(range(9, 0, -2)),
        lambda ds: datasets.concatenate_datasets(
            [ds.select(range(0, 300, 2)).filter(no_nulls), ds.filter(no_nulls).shuffle(seed=6)]
        ).shuffle(seed=7),
    ],
    ids=["filter-shuffle-select", "split-filter", "sort", "select_columns", "flatten", "concat"],
)
@pytest.mark.filterwarnings("ignore:Specifying null_placement:FutureWarning")  # datasets' sort
def test_views_of_views_of_a_mapped_dataset_read_as_they_index(mapped, make):
    view = make(mapped)
    columns = [c for c in ("t", "s", "p", "label") if c in view.column_names]
    data = jb.Dataset.from_huggingface(view, columns=columns)
    assert len(data) > 0
    assert_rows_equal(data, view, columns)
    with jb.Loader(view, jb.PadToMax(16), columns=columns, shuffle=False) as loader:
        seen = [int(i) for b in loader for i in b["example_index"] if i >= 0]
    assert seen == list(range(len(view)))


# ---- cache files changed underneath ------------------------------------------------


def appended(path: str) -> None:
    with open(path, "ab") as f:
        f.write(b"\0" * 64)


def replaced(path: str) -> None:
    """Another file of the same bytes and modification time put there."""
    shutil.copy2(path, path + ".new")
    os.replace(path + ".new", path)


@pytest.mark.parametrize("change", [appended, replaced, os.remove])
def test_a_cache_file_changed_after_the_loader_was_built_is_an_oserror_naming_it(tmp_path, change):
    ds = datasets.Dataset.from_dict({"t": [[i] * (i % 5) for i in range(200)]})
    ds.save_to_disk(str(tmp_path / "saved"))
    view = datasets.load_from_disk(str(tmp_path / "saved")).shuffle(seed=0)
    path = view.cache_files[0]["filename"]
    # 25 batches, one read ahead at most: those after it are read after the change.
    loader = jb.Loader(view, jb.PadToMax(8), columns=["t"], prefetch=1, num_threads=1)
    change(path)
    with pytest.raises(OSError, match=re.escape(path)):
        list(loader)
    loader.close()
