import ml_dtypes
import numpy as np
import pyarrow as pa
import pytest

import jaxbatch as jb

ALL_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips_through_collate(dtype):
    rng = np.random.default_rng(0)
    examples = [(rng.integers(0, 2, size=(n, 2))).astype(dtype) for n in (3, 0, 5)]
    ds = jb.Dataset.from_arrays({"x": examples})
    plan = jb.plan(ds, jb.PadToMax(batch_size=3))
    batch = jb.collate(ds, plan[0])
    assert batch["x"].dtype == np.dtype(dtype)
    assert batch["x"].shape == (3, 5, 2)
    back = jb.unbatch(batch, batch)
    for i, x in enumerate(examples):
        np.testing.assert_array_equal(back[i]["x"], x)
        assert back[i]["x"].dtype == np.dtype(dtype)


def test_values_offsets_pair_is_not_copied():
    values = np.arange(10, dtype=np.float32)
    offsets = np.array([0, 4, 4, 10])
    ds = jb.Dataset.from_arrays({"x": (values, offsets)})
    np.testing.assert_array_equal(ds.lengths("x"), [4, 0, 6])
    assert np.shares_memory(ds.example(2)["x"], values)


def test_fixed_column_is_not_copied_and_example_reads_back():
    labels = np.arange(6, dtype=np.int32).reshape(3, 2)
    ds = jb.Dataset.from_arrays({"t": [np.ones(2), np.ones(1), np.ones(3)], "y": labels})
    assert np.shares_memory(ds.example(1)["y"], labels)
    np.testing.assert_array_equal(ds.example(-1)["y"], [4, 5])
    assert ds.default_length_column == "t"
    assert "ragged, max length 3" in repr(ds)


def test_dataset_keeps_source_alive():
    def make():
        return jb.Dataset.from_arrays({"x": (np.arange(6.0), np.array([0, 2, 6]))})

    ds = make()
    import gc

    gc.collect()
    np.testing.assert_array_equal(ds.example(1)["x"], [2.0, 3.0, 4.0, 5.0])


@pytest.mark.parametrize(
    ("columns", "kwargs", "message"),
    [
        (
            {"x": (np.arange(5), np.array([0, 3, 2]))},
            {},
            "column 'x', example 1: offsets must not decrease",
        ),
        (
            {"x": (np.arange(5), np.array([0, 3, 9]))},
            {},
            "column 'x', example 1: offsets run past the values",
        ),
        (
            {"x": (np.arange(5), np.array([-1, 3]))},
            {},
            "column 'x', example 0: expected offsets[0] >= 0",
        ),
        ({"x": [np.ones(2), np.ones(3)], "y": np.ones(3)}, {}, "'x' has 2 but 'y' has 3"),
        (
            {"x": [np.ones(2), np.ones((3, 2))]},
            {},
            "column 'x', example 1: expected an array of rank 1",
        ),
        (
            {"x": [np.ones((2, 3)), np.ones((1, 4))]},
            {},
            "shape (n, 3), found rank 2 and shape (1, 4)",
        ),
        (
            {"x": [np.ones(2, np.float32), np.ones(2, np.float64)]},
            {},
            "column 'x', example 1: expected dtype float32, found float64",
        ),
        ({"x": [np.array(["a", "b"])]}, {}, "column 'x', example 0: holds text"),
        ({"x": [np.ones(2, np.complex64)]}, {}, "unsupported dtype 'complex64'"),
        ({"x": []}, {}, "cannot infer a dtype from an empty column"),
        ({"x": [np.float32(1.0)]}, {}, "column 'x', example 0: expected an array of rank >= 1"),
        (
            {"a": [np.ones(2), np.ones(3)], "b": [np.ones(2), np.ones(4)]},
            {"aligned": [["a", "b"]]},
            "aligned columns 'a' and 'b' differ at example 1: 'a' has length 3, 'b' has length 4",
        ),
        ({"a": [np.ones(2)]}, {"aligned": [["a", "zz"]]}, "aligned column 'zz' is not a column"),
        ({"a": [np.ones(2)], "y": np.ones(1)}, {"aligned": [["a", "y"]]}, "'y' is fixed-shape"),
        ({"x": "abc"}, {}, "column 'x': expected a list of per-example arrays"),
    ],
)
def test_bad_input_names_column_example_expected_and_found(columns, kwargs, message):
    with pytest.raises(ValueError) as info:
        jb.Dataset.from_arrays(columns, **kwargs)
    assert message in str(info.value)


def test_empty_column_with_declared_dtype():
    ds = jb.Dataset.from_arrays({"x": []}, dtypes={"x": np.int32})
    assert len(ds) == 0


def test_from_arrow_list_large_list_and_fixed_size_list_without_copy():
    tokens = pa.array([[1, 2, 3], [], [4, 5]], type=pa.list_(pa.int32()))
    large = pa.array([[1.0], [2.0, 3.0], [4.0]], type=pa.large_list(pa.float32()))
    coords = pa.array(
        [[[0, 1, 2]], [[3, 4, 5], [6, 7, 8]], []], type=pa.list_(pa.list_(pa.float64(), 3))
    )
    label = pa.array([7, 8, 9], type=pa.int64())
    table = pa.table({"tokens": tokens, "large": large, "coords": coords, "label": label})
    ds = jb.Dataset.from_arrow(table)
    np.testing.assert_array_equal(ds.lengths("tokens"), [3, 0, 2])
    np.testing.assert_array_equal(ds.lengths("large"), [1, 2, 1])
    np.testing.assert_array_equal(ds.example(1)["coords"], [[3, 4, 5], [6, 7, 8]])
    assert ds.example(2)["label"] == 9
    arrow_values = np.asarray(table.column("large").chunk(0).values)
    assert np.shares_memory(ds.example(1)["large"], arrow_values)


def test_from_arrow_sliced_and_chunked():
    arr = pa.array([[1], [2, 3], [4, 5, 6], [7]], type=pa.list_(pa.int64()))
    sliced = pa.table({"x": arr.slice(1, 2)})
    ds = jb.Dataset.from_arrow(sliced)
    np.testing.assert_array_equal(ds.example(0)["x"], [2, 3])
    np.testing.assert_array_equal(ds.example(1)["x"], [4, 5, 6])
    chunked = pa.table({"x": pa.chunked_array([arr.slice(0, 2), arr.slice(2, 2)])})
    ds = jb.Dataset.from_arrow(chunked)
    np.testing.assert_array_equal(ds.lengths(), [1, 2, 3, 1])


def test_from_arrow_errors():
    with pytest.raises(ValueError, match="column 'x', example 1: expected no nulls"):
        jb.Dataset.from_arrow(pa.table({"x": pa.array([[1], None], type=pa.list_(pa.int64()))}))
    with pytest.raises(ValueError, match="no column 'y'"):
        jb.Dataset.from_arrow(pa.table({"x": pa.array([[1]])}), columns=["y"])
    with pytest.raises(
        ValueError, match="column .x.: holds text \\(Arrow type string\\).*tokenize"
    ):
        jb.Dataset.from_arrow(pa.table({"x": pa.array([["a"]])}))


@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("dtype", ["i2", "i4", "i8", "u4", "f4", "f8"])
def test_big_endian_input_is_byteswapped_to_native(order, dtype):
    # '>i4' data read as little-endian gave 16777216, 33554432, ... instead of 1, 2, 3.
    rng = np.random.default_rng(1)
    pieces = [rng.integers(0, 100, size=n).astype(order + dtype) for n in (3, 1, 4)]
    offsets = np.array([0, 3, 4, 8], dtype=">i8")
    fixed = np.arange(6).reshape(3, 2).astype(order + dtype)
    ds = jb.Dataset.from_arrays(
        {"t": pieces, "pair": (np.concatenate(pieces), offsets), "f": fixed}
    )
    batch = jb.collate(ds, jb.plan(ds, jb.PadToMax(batch_size=3))[0])
    for i, piece in enumerate(pieces):
        native = piece.astype(np.dtype(dtype))
        np.testing.assert_array_equal(ds.example(i)["t"], native)
        np.testing.assert_array_equal(ds.example(i)["pair"], native)
        np.testing.assert_array_equal(batch["t"][i, : len(piece)], native)
    np.testing.assert_array_equal(batch["f"], fixed.astype(np.dtype(dtype)))


def test_big_endian_npy_folder_is_read_as_native(tmp_path):
    values = np.array([1, 2, 3, 4, 5], ">i4")
    np.save(tmp_path / "t.values.npy", values)
    np.save(tmp_path / "t.offsets.npy", np.array([0, 3, 5], ">i8"))
    np.save(tmp_path / "y.npy", np.array([7, 8], ">f8"))
    batches = list(jb.Loader(tmp_path, jb.PadToMax(2), shuffle=False))
    np.testing.assert_array_equal(batches[0]["t"], [[1, 2, 3], [4, 5, 0]])
    np.testing.assert_array_equal(batches[0]["y"], [7.0, 8.0])


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"t": [np.arange(3)], "t_lengths": [np.arange(3)]}, "'t_lengths'.*ragged column 't'"),
        ({"t": [np.arange(3)], "t_mask": np.ones((1, 3), bool)}, "'t_mask'.*ragged column 't'"),
        ({"t": [np.arange(3)], "t_segment_ids": [np.arange(3)]}, "'t_segment_ids'.*column 't'"),
        ({"t": [np.arange(3)], "t_positions": np.zeros(1)}, "'t_positions'.*column 't'"),
        ({"t": [np.arange(3)], "example_index": np.zeros(1)}, "'example_index' collides"),
    ],
)
def test_columns_colliding_with_collate_outputs_are_refused(columns, message):
    with pytest.raises(ValueError, match=message):
        jb.Dataset.from_arrays(columns)


def test_fixed_column_named_like_another_fixed_columns_output_is_allowed():
    # Only ragged columns get _lengths/_mask outputs.
    ds = jb.Dataset.from_arrays({"t": [np.arange(3)], "y": np.zeros(1), "y_mask": np.zeros(1)})
    assert ds.column_names == ["t", "y", "y_mask"]


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"t": [np.array(["a", "b"])]}, r"column 't', example 0: holds text \(ndarray of <U1\)"),
        ({"t": [np.arange(2), np.array([2**64])]}, "column 't', example 1: unsupported dtype"),
        ({"t": np.array([{"a": 1}], dtype=object)}, "column 't', example 0"),
        ({"t": [np.arange(2)], "y": np.array(["x"])}, "column 'y': holds text .* tokenize"),
    ],
)
def test_non_numeric_input_is_refused_naming_column(columns, message):
    with pytest.raises(ValueError, match=message):
        jb.Dataset.from_arrays(columns)


def test_arrow_null_inside_list_of_fixed_size_list_is_refused_naming_example():
    # A null fixed_size_list entry used to be dropped by flatten(), shifting later values.
    inner = pa.array([[1, 2], [3, 4], None, [7, 8], [9, 10]], type=pa.list_(pa.int32(), 2))
    column = pa.ListArray.from_arrays(pa.array([0, 2, 3, 5], pa.int32()), inner)
    with pytest.raises(ValueError, match=r"column 'x', example 1: expected no nulls, found 1"):
        jb.Dataset.from_arrow(pa.table({"x": column}))
    values = pa.array([1, 2, 3, None, 5, 6], pa.int64())
    inner = pa.FixedSizeListArray.from_arrays(values, 2)
    column = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), inner)
    with pytest.raises(ValueError, match=r"column 'x', example 1: expected no null values"):
        jb.Dataset.from_arrow(pa.table({"x": column}))
    fixed = pa.FixedSizeListArray.from_arrays(pa.array([1, None, 3, 4], pa.int64()), 2)
    with pytest.raises(ValueError, match=r"column 'f', example 0: expected no null values"):
        jb.Dataset.from_arrow(pa.table({"f": fixed}))


def test_arrow_sliced_list_of_fixed_size_list_reads_the_slice():
    inner = pa.array([[i, i + 1] for i in range(0, 12, 2)], type=pa.list_(pa.int32(), 2))
    column = pa.ListArray.from_arrays(pa.array([0, 1, 3, 6], pa.int32()), inner)
    ds = jb.Dataset.from_arrow(pa.table({"x": column.slice(1, 2)}))
    np.testing.assert_array_equal(ds.example(0)["x"], [[2, 3], [4, 5]])
    np.testing.assert_array_equal(ds.example(1)["x"], [[6, 7], [8, 9], [10, 11]])


def test_arrow_sliced_list_ignores_nulls_of_the_examples_sliced_away():
    # A sliced list's child still holds the sliced-away examples' values: a
    # null among them was refused as "example -1" (or 2 of 2 examples).
    column = pa.array([[None, 5], [1], [2, 3], [4, None]], pa.list_(pa.int32()))
    ds = jb.Dataset.from_arrow(pa.table({"x": column.slice(1, 2)}))
    np.testing.assert_array_equal(ds.lengths("x"), [1, 2])
    np.testing.assert_array_equal(ds.example(1)["x"], [2, 3])
    with pytest.raises(ValueError, match=r"column 'x', example 2: expected no null values"):
        jb.Dataset.from_arrow(pa.table({"x": column.slice(1, 3)}))


def test_arrow_fixed_size_list_past_its_child_is_refused_by_the_engine():
    # pyarrow 26's validation checks a fixed_size_list's length against its
    # child but not its offset: 7 rows from row 2 of 8 values pass
    # validate(full=True) and would read a ninth value; the core refuses it.
    child = pa.array(np.arange(8, dtype=np.float32))
    fixed = pa.Array.from_buffers(pa.list_(pa.float32(), 1), 7, [None], 0, 2, [child])
    fixed.validate(full=True)
    with pytest.raises(ValueError, match=r"column 'x': expected 7 examples of 4 bytes, but the"):
        jb.Dataset.from_arrow(pa.table({"x": fixed}))
    offsets = pa.py_buffer(np.array([4, 7], np.int32).tobytes())
    ragged = pa.ListArray.from_buffers(pa.list_(fixed.type), 1, [None, offsets], children=[fixed])
    with pytest.raises(ValueError, match=r"column 'x', example 0: offsets run past the values"):
        jb.Dataset.from_arrow(pa.table({"x": ragged}))
    # Two such chunks: each is read in place, and checked as one column is.
    good = pa.array(np.arange(3, dtype=np.float32)).cast(pa.float32())
    good = pa.FixedSizeListArray.from_arrays(good, 1)
    with pytest.raises(ValueError, match=r"expected 7 examples .* first example is 3 of the col"):
        jb.Dataset.from_arrow(pa.table({"x": pa.chunked_array([good, fixed])}))


def test_offsets_past_int64_are_refused_naming_the_column():
    offsets = np.array([0, 2**63], np.uint64)
    with pytest.raises(ValueError, match=r"column 't': offsets must be below 2\*\*63 \(int64\)"):
        jb.Dataset.from_arrays({"t": (np.arange(3), offsets)})
