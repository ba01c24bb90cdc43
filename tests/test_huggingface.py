"""Hugging Face datasets as a source, checked against the rows datasets itself
gives (``ds[i]``, ``flatten_indices()``): read in place from the memory-mapped
record batches (checked by buffer address), in the order of an indices mapping,
through Dataset.from_huggingface, jb.Loader and jb.run."""

import warnings

import datasets
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from job_functions import summarise

import jaxbatch as jb
from jaxbatch import _core

datasets.disable_progress_bars()


def token_rows(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, rng.integers(0, 24)).tolist() for _ in range(n)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tokenized dataset as `save_to_disk` writes it and `load_from_disk`
    maps it: 3,500 rows in record batches of 1,000, a text column beside."""
    rows = token_rows(3500)
    ds = datasets.Dataset.from_dict(
        {
            "tokens": rows,
            "text": [f"row {i}" for i in range(3500)],
            "label": np.arange(3500),
            "xy": np.arange(7000, dtype=np.float32).reshape(3500, 2),
        },
        features=datasets.Features(
            {
                "tokens": datasets.List(datasets.Value("int32")),
                "text": datasets.Value("string"),
                "label": datasets.Value("int64"),
                "xy": datasets.List(datasets.Value("float32"), length=2),
            }
        ),
    )
    path = tmp_path_factory.mktemp("hf") / "tokenized"
    ds.save_to_disk(str(path))
    return datasets.load_from_disk(str(path)), rows


def numeric(ds):
    return jb.Dataset.from_huggingface(ds, columns=["tokens", "label", "xy"])


def address(view: np.ndarray) -> int:
    return view.__array_interface__["data"][0]


def test_multi_chunk_memory_mapped_columns_are_read_in_place(saved):
    ds, rows = saved
    table = ds.data.table
    assert table.column("tokens").num_chunks == 4  # the case that used to be copied
    data = numeric(ds)
    assert data._mapped_files == tuple(f["filename"] for f in ds.cache_files)
    tokens, xy = data._core.column("tokens"), data._core.column("xy")
    first = 0
    for chunk, xy_chunk in zip(
        table.column("tokens").chunks, table.column("xy").chunks, strict=True
    ):
        values = chunk.values
        start = values.buffers()[1].address + (values.offset + chunk.offsets[0].as_py()) * 4
        nonempty = next(i for i in range(len(chunk)) if len(rows[first + i]))
        skipped = sum(len(rows[first + i]) for i in range(nonempty)) * 4
        assert address(tokens.example(first + nonempty)) == start + skipped
        inner = xy_chunk.values
        assert address(xy.example(first)) == inner.buffers()[1].address + inner.offset * 4
        first += len(chunk)
    for i in (0, 999, 1000, 3499):
        example = data.example(i)
        assert example["tokens"].tolist() == rows[i]
        assert example["label"] == i and example["xy"].tolist() == [2 * i, 2 * i + 1]


@pytest.mark.parametrize(
    "view",
    [
        lambda ds: ds.shuffle(seed=3),
        lambda ds: ds.select(range(3499, -1, -7)),
        lambda ds: ds.filter(lambda e: e["label"] % 3 == 0),
        lambda ds: ds.train_test_split(test_size=0.25, seed=1)["test"],
        lambda ds: ds.shuffle(seed=1).select(range(100)).shuffle(seed=2),
    ],
    ids=["shuffle", "select", "filter", "split", "nested"],
)
def test_an_indices_mapping_is_the_example_order_without_flattening(saved, view):
    ds, _ = saved
    mapped = view(ds)
    assert mapped._indices is not None
    data = numeric(mapped)
    flat = mapped.flatten_indices()  # the reference: the rows copied in order
    assert len(data) == len(flat)
    for i in range(0, len(flat), max(1, len(flat) // 50)):
        want = flat[i]
        got = data.example(i)
        assert got["tokens"].tolist() == want["tokens"] and got["label"] == want["label"]
    # In place: example i's bytes are the table's row indices[i], where the
    # record batch that holds it has them.
    indices = mapped._indices.column(0).to_numpy()
    for i in (0, len(flat) // 2, len(flat) - 1):
        assert address(data._core.column("xy").example(i)) == xy_address(mapped, indices[i])


def xy_address(ds, row: int) -> int:
    """Where row `row` of the table's fixed_size_list<float32, 2> column "xy" is."""
    for chunk in ds.data.table.column("xy").chunks:
        if row < len(chunk):
            child = chunk.values
            return child.buffers()[1].address + (child.offset + (chunk.offset + row) * 2) * 4
        row -= len(chunk)
    raise IndexError(row)


def test_fingerprint_equals_the_same_rows_built_from_numpy(saved):
    ds, rows = saved
    view = ds.select(range(10, 2500, 3))
    flat = view.flatten_indices()
    reference = jb.Dataset.from_arrays(
        {
            "tokens": [np.asarray(r, np.int32) for r in flat["tokens"]],
            "label": np.asarray(flat["label"], np.int64),
            "xy": np.asarray(flat["xy"], np.float32),
        }
    )
    assert _core.dataset_fingerprint(numeric(view)._core) == _core.dataset_fingerprint(
        reference._core
    )


def test_loader_and_run_take_a_datasets_dataset(saved, tmp_path):
    ds, rows = saved
    view = ds.shuffle(seed=5).select(range(300))
    flat = view.flatten_indices()
    reference = jb.Dataset.from_arrays(
        {"tokens": [np.asarray(r, np.int32) for r in flat["tokens"]]}
    )
    options = dict(shuffle=True, seed=2, epochs=1, num_threads=2)
    with jb.Loader(view, jb.AutoBuckets(3, batch_size=16), columns=["tokens"], **options) as a:
        with jb.Loader(reference, jb.AutoBuckets(3, batch_size=16), **options) as b:
            got, want = list(a), list(b)
    assert len(got) == len(want) > 0
    for x, y in zip(got, want, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    jb.run(summarise, view, tmp_path / "hf", columns=["tokens"], progress=False)
    jb.run(summarise, reference, tmp_path / "np", progress=False)
    out, ref = jb.read_output(tmp_path / "hf"), jb.read_output(tmp_path / "np")
    np.testing.assert_array_equal(out["total"], ref["total"])
    np.testing.assert_array_equal(out["moments"], ref["moments"])


def test_non_numeric_columns_are_left_out_by_name_or_refused(saved):
    ds, _ = saved
    with pytest.warns(UserWarning, match=r"left out 1 column.*text \(string\).*columns="):
        data = jb.Dataset.from_huggingface(ds)
    assert data.column_names == ["tokens", "label", "xy"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jb.Dataset.from_huggingface(ds, columns=["tokens"])
    with pytest.raises(
        ValueError, match=r"column 'text': holds text \(Arrow type string\).*tokenize"
    ):
        jb.Dataset.from_huggingface(ds, columns=["tokens", "text"])
    with pytest.raises(ValueError, match=r"no column 'input_ids'; the dataset has \['tokens'"):
        jb.Dataset.from_huggingface(ds, columns=["input_ids"])
    pointer = r"no numeric column .*text \(string\).*tokenize it first: jb\.tokenize\("
    with pytest.raises(ValueError, match=pointer):
        jb.Dataset.from_huggingface(ds.select_columns(["text"]))


def test_other_kinds_of_datasets_are_refused_naming_what_to_pass(saved):
    ds, _ = saved
    splits = ds.train_test_split(test_size=0.5)
    with pytest.raises(TypeError, match=r"a DatasetDict of \['test', 'train'\].*ds\['test'\]"):
        jb.Dataset.from_huggingface(splits)
    with pytest.raises(TypeError, match=r"streaming IterableDataset; load it with streaming=F"):
        jb.Dataset.from_huggingface(ds.to_iterable_dataset())
    with pytest.raises(TypeError, match=r"expected a datasets.Dataset, found dict"):
        jb.Dataset.from_huggingface({"tokens": [[1]]})


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    batch=st.integers(1, 9),
    data=st.data(),
)
def test_any_record_batches_and_any_order_give_the_rows_datasets_gives(lengths, batch, data):
    rows = [list(range(i, i + n)) for i, n in enumerate(lengths)]
    table = pa.Table.from_pydict({"tokens": pa.array(rows, pa.list_(pa.int64()))})
    table = pa.Table.from_batches(table.to_batches(max_chunksize=batch))
    ds = datasets.Dataset(datasets.table.InMemoryTable(table))
    order = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=60))
    # An earlier mapping (reversed) under the selection, so that an empty
    # selection is an empty mapping, not a table of no rows.
    view = ds.select(range(len(rows) - 1, -1, -1)).select(order)
    got = jb.Dataset.from_huggingface(view)
    want = [rows[::-1][i] for i in order]
    assert [got.example(i)["tokens"].tolist() for i in range(len(got))] == want
    np.testing.assert_array_equal(got.lengths(), [len(r) for r in want])


def test_a_mapping_that_keeps_no_row_is_an_empty_dataset(saved):
    """A filter() that keeps nothing leaves an indices mapping of no rows
    over the whole table: no examples, not every row of the table."""
    ds, _ = saved
    for view in (
        ds.filter(lambda row: False),
        ds.shuffle(seed=0).filter(lambda row: len(row["tokens"]) > 10**6),
    ):
        assert view._indices is not None and len(view) == 0
        assert len(jb.Dataset.from_huggingface(view, columns=["tokens"])) == 0


def test_aligned_columns_of_a_datasets_dataset_pack_together(saved):
    """A tokenizer's output has input_ids and attention_mask of one length
    per row: aligned= reaches the dataset the Loader builds, so they pack
    together (segment for segment the same rows), as from_arrays' would."""
    ds, rows = saved
    view = ds.select(range(400)).map(lambda row: {"mask": [1] * len(row["tokens"])})
    columns, aligned = ["tokens", "mask"], [["tokens", "mask"]]
    data = jb.Dataset.from_arrays(
        {"tokens": [np.asarray(r, np.int32) for r in rows[:400]],
         "mask": [np.ones(len(r), np.int64) for r in rows[:400]]},
        aligned=aligned,
    )  # fmt: skip
    options = dict(shuffle=True, seed=3, num_threads=2)
    with jb.Loader(view, jb.Pack(32, 4), columns=columns, aligned=aligned, **options) as a:
        with jb.Loader(data, jb.Pack(32, 4), **options) as b:
            got, want = list(a), list(b)
    assert len(got) == len(want) > 0
    for x, y in zip(got, want, strict=True):
        for key in y:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)
    with pytest.raises(ValueError, match=r"aligned= groups the columns of a file or a Hugging"):
        jb.Loader(data, jb.Pack(32, 4), aligned=aligned)
    with pytest.raises(ValueError, match="declare it aligned or leave it out"):
        next(iter(jb.Loader(view, jb.Pack(32, 4), columns=columns)))
