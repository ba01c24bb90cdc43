"""Grid columns (examples [h, w, *inner]) and tied axes, against NumPy.

The reference for collation is the obvious one: each row's example placed
at the top left of an [H, W] canvas of pad values, its mask True there and
its (h, w) in <k>_lengths.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb


def _images(shapes, inner=(), dtype=np.int16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-99, 99, size=(h, w, *inner)).astype(dtype) for h, w in shapes]


def _padded(arrays, rows, height, width, pad):
    """NumPy reference: [rows, H, W, *inner] values, mask, lengths."""
    inner = arrays[0].shape[2:] if arrays else ()
    dtype = arrays[0].dtype if arrays else np.int16
    values = np.full((rows, height, width, *inner), pad, dtype)
    mask = np.zeros((rows, height, width), bool)
    lengths = np.zeros((rows, 2), np.int32)
    for r, a in enumerate(arrays):
        h, w = a.shape[:2]
        values[r, :h, :w] = a
        mask[r, :h, :w] = True
        lengths[r] = (h, w)
    return values, mask, lengths


# ---- building grid columns ------------------------------------------------------


def test_from_arrays_keeps_shapes_and_values():
    images = _images([(2, 3), (1, 1), (0, 4), (3, 2)], inner=(3,))
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    col = ds._core.column("image")
    assert col.is_grid and col.axes == ["h", "w"]
    np.testing.assert_array_equal(col.heights(), [2, 1, 0, 3])
    np.testing.assert_array_equal(col.widths(), [3, 1, 4, 2])
    np.testing.assert_array_equal(ds.lengths("image"), [6, 1, 0, 6])  # cells
    for i, image in enumerate(images):
        np.testing.assert_array_equal(ds.example(i)["image"], image)
    assert "grid, max 3 x 4" in repr(ds)


def test_values_and_shapes_pair_is_read_without_a_copy():
    images = _images([(2, 2), (1, 3)], inner=(2,))
    cells = np.concatenate([a.reshape(-1, 2) for a in images])
    ds = jb.Dataset.from_arrays(
        {"image": (cells, np.array([[2, 2], [1, 3]]))}, axes={"image": ("h", "w")}
    )
    np.testing.assert_array_equal(ds.example(1)["image"], images[1])
    view = ds._core.column("image").example(0)
    assert np.shares_memory(view, cells)


def test_stacked_array_is_a_grid_of_one_shape():
    stacked = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    ds = jb.Dataset.from_arrays({"x": stacked}, axes={"x": ("h", "w")})
    np.testing.assert_array_equal(ds.example(1)["x"], stacked[1])


def test_pickle_keeps_grid_shapes_and_axes():
    images = _images([(2, 3), (1, 1)])
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    back = pickle.loads(pickle.dumps(ds))
    col = back._core.column("image")
    assert col.is_grid and col.axes == ["h", "w"]
    np.testing.assert_array_equal(back.example(0)["image"], images[0])


def test_a_bad_tie_is_an_error_naming_the_example_axes_and_sizes():
    tokens = [np.arange(3), np.arange(2), np.arange(4)]
    pairs = [np.zeros((3, 3)), np.zeros((2, 2)), np.zeros((4, 3))]
    with pytest.raises(ValueError, match=r"example 2: axis 'L' is tied") as info:
        jb.Dataset.from_arrays(
            {"tokens": tokens, "pair": pairs}, axes={"tokens": ("L",), "pair": ("L", "L")}
        )
    assert "column 'tokens' axis 0 is 4, column 'pair' axis 1 is 3" in str(info.value)
    pairs[2] = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"example 2: .*'tokens' axis 0 is 4.*'pair' axis 0 is 3"):
        jb.Dataset.from_arrays(
            {"tokens": tokens, "pair": pairs}, axes={"tokens": ("L",), "pair": ("L", "L")}
        )


def test_axes_declaration_is_checked():
    with pytest.raises(ValueError, match="axes= names column 'nope'"):
        jb.Dataset.from_arrays({"x": [np.zeros(2)]}, axes={"nope": ("L",)})
    with pytest.raises(ValueError, match="names 3 axes"):
        jb.Dataset.from_arrays({"x": [np.zeros((2, 2))]}, axes={"x": ("a", "b", "c")})
    with pytest.raises(ValueError, match="example 1: axes= declares two variable axes"):
        jb.Dataset.from_arrays({"x": [np.zeros((2, 2)), np.zeros(3)]}, axes={"x": ("h", "w")})


# ---- Arrow and Hugging Face -----------------------------------------------------


def test_arrow_nested_lists_are_grids_read_in_place():
    pa = pytest.importorskip("pyarrow")
    images = _images([(2, 3), (1, 2), (0, 0)], inner=(3,), dtype=np.float32)
    typ = pa.list_(pa.list_(pa.list_(pa.float32(), 3)))
    table = pa.table({"image": pa.array([a.tolist() for a in images], type=typ)})
    ds = jb.Dataset.from_arrow(table)
    for i, image in enumerate(images):
        np.testing.assert_array_equal(ds.example(i)["image"].reshape(image.shape), image)
    np.testing.assert_array_equal(ds._core.column("image").heights(), [2, 1, 0])
    uneven = pa.table(
        {"g": pa.array([[[1, 2], [3, 4]], [[1, 2], [3]]], pa.list_(pa.list_(pa.int32())))}
    )
    with pytest.raises(ValueError, match="column 'g', example 1: a grid example's rows"):
        jb.Dataset.from_arrow(uneven)


def test_arrow_fixed_shape_tensor_is_a_grid_of_one_shape():
    pa = pytest.importorskip("pyarrow")
    data = np.arange(2 * 2 * 3 * 2, dtype=np.int32).reshape(2, 2, 3, 2)
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(data)
    ds = jb.Dataset.from_arrow(pa.table({"t": tensor}))
    np.testing.assert_array_equal(ds.example(1)["t"], data[1])


def _variable_shape_tensor(pa, arrays, metadata=None, shapes=None):
    """A table with one arrow.variable_shape_tensor column "t", read back
    from Arrow IPC as pyarrow gives it (it has no constructor of its own)."""
    import json

    data = pa.array([a.reshape(-1).tolist() for a in arrays], pa.list_(pa.float32()))
    ndim = arrays[0].ndim
    dims = shapes if shapes is not None else [list(a.shape) for a in arrays]
    shape = pa.array(dims, pa.list_(pa.int32(), ndim))
    storage = pa.StructArray.from_arrays([data, shape], names=["data", "shape"])
    meta = {
        b"ARROW:extension:name": b"arrow.variable_shape_tensor",
        b"ARROW:extension:metadata": json.dumps(metadata or {}).encode(),
    }
    schema = pa.schema([pa.field("t", storage.type, metadata=meta)])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        half = len(arrays) // 2  # two record batches: two chunks
        for part in (storage.slice(0, half), storage.slice(half)):
            writer.write_batch(pa.record_batch([part], schema=schema))
    return pa.ipc.open_stream(sink.getvalue()).read_all()


def test_arrow_variable_shape_tensor_is_a_grid_of_each_examples_shape():
    pa = pytest.importorskip("pyarrow")
    images = _images([(2, 3), (1, 2), (0, 4), (3, 1), (2, 2)], inner=(2,), dtype=np.float32)
    table = _variable_shape_tensor(pa, images, {"dim_names": ["h", "w", "c"]})
    assert table.column("t").type.extension_name == "arrow.variable_shape_tensor"
    assert table.column("t").num_chunks == 2
    for t in (table, table.slice(1)):  # chunked, then sliced (offsets into the struct)
        ds = jb.Dataset.from_arrow(t)
        first = len(images) - len(t)
        np.testing.assert_array_equal(ds._core.column("t").heights(), [2, 1, 0, 3, 2][first:])
        np.testing.assert_array_equal(ds._core.column("t").widths(), [3, 2, 4, 1, 2][first:])
        for i, image in enumerate(images[first:]):
            np.testing.assert_array_equal(ds.example(i)["t"].reshape(image.shape), image)
    batch = jb.collate(jb.Dataset.from_arrow(table), jb.plan(jb.Dataset.from_arrow(table),
                       jb.PadToMax(batch_size=5))[0])  # fmt: skip
    for row, example in enumerate(batch["example_index"]):
        h, w = images[example].shape[:2]
        np.testing.assert_array_equal(batch["t"][row, :h, :w], images[example])
        assert batch["t_mask"][row].sum() == h * w


def test_parquet_variable_shape_tensor_streams_like_the_table(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    images = _images([(2, 3), (1, 2), (0, 4), (3, 1), (2, 2), (4, 4)], inner=(2,), dtype=np.float32)
    table = _variable_shape_tensor(pa, images)
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=2)

    def batches(source, **options):
        with jb.Loader(source, jb.PadToMax(batch_size=2), shuffle=False, **options) as loader:
            return [{k: np.asarray(v) for k, v in b.items()} for b in loader]

    expected = batches(jb.Dataset.from_arrow(table))
    for got in (
        batches(tmp_path / "t.parquet"),
        batches(tmp_path / "t.parquet", stream=True, host_memory_limit=1 << 26),
    ):
        assert len(got) == len(expected) == 3
        for a, b in zip(got, expected, strict=True):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])


def test_arrow_variable_shape_tensor_errors_name_the_column_and_example():
    pa = pytest.importorskip("pyarrow")
    images = [np.ones((2, 2, 1), np.float32), np.ones((1, 3, 1), np.float32)]
    with pytest.raises(ValueError, match="column 't': a variable_shape_tensor with permutation"):
        jb.Dataset.from_arrow(_variable_shape_tensor(pa, images, {"permutation": [1, 0, 2]}))
    mixed = [np.ones((2, 2, 1), np.float32), np.ones((1, 3, 2), np.float32)]
    with pytest.raises(ValueError, match=r"column 't', example 1: a grid's cells must share"):
        jb.Dataset.from_arrow(_variable_shape_tensor(pa, mixed))
    null = _variable_shape_tensor(pa, images)
    storage = null.column("t").combine_chunks().storage
    holed = pa.StructArray.from_arrays(storage.flatten(), names=["data", "shape"],
                                       mask=pa.array([False, True]))  # fmt: skip
    with pytest.raises(ValueError, match="column 't', example 1"):
        jb.Dataset.from_arrow(pa.table({"t": null.column("t").type.wrap_array(holed)}))
    # Negative dimensions are named (on main: "its shape [-1, 3, 1] holds -3
    # values, but its data has 3", or a cells mismatch for a negative cell).
    for shapes, named in (
        ([[2, 2, 1], [-1, 3, 1]], r"its shape \[-1, 3, 1\] has negative dimensions "
         r"\(dimension 0 is -1\); expected sizes >= 0"),
        ([[2, 2, 1], [1, -3, -1]], r".*\(dimension 1 is -3, dimension 2 is -1\)"),
    ):  # fmt: skip
        negative = _variable_shape_tensor(pa, images, shapes=shapes)
        with pytest.raises(ValueError, match=r"column 't', example 1: " + named):
            jb.Dataset.from_arrow(negative)
    lying = _variable_shape_tensor(pa, images, shapes=[[2, 2, 1], [2, 3, 1]])
    with pytest.raises(ValueError, match=r"example 1: its shape \[2, 3, 1\] holds 6 values, "
                       r"but its data has 3"):  # fmt: skip
        jb.Dataset.from_arrow(lying)


def test_huggingface_array2d_array3d_and_image_columns():
    datasets = pytest.importorskip("datasets")
    pil = pytest.importorskip("PIL.Image")
    a3 = _images([(2, 2), (2, 2)], inner=(3,), dtype=np.uint8)
    a2 = [np.ones((2, 3), np.float32), 2 * np.ones((1, 3), np.float32)]
    pixels = [np.full((3, 4, 3), 7, np.uint8), np.full((5, 2, 3), 9, np.uint8)]
    features = datasets.Features(
        {
            "a2": datasets.Array2D(shape=(None, 3), dtype="float32"),
            "a3": datasets.Array3D(shape=(2, 2, 3), dtype="uint8"),
            "img": datasets.Image(),
        }
    )
    hf = datasets.Dataset.from_dict(
        {"a2": a2, "a3": a3, "img": [pil.fromarray(p) for p in pixels]}, features=features
    )
    ds = jb.Dataset.from_huggingface(hf, columns=["a2", "a3", "img"])
    for i in range(2):
        np.testing.assert_array_equal(ds.example(i)["a2"], a2[i])
        np.testing.assert_array_equal(ds.example(i)["a3"], a3[i])
        np.testing.assert_array_equal(ds.example(i)["img"], pixels[i])
    picked = jb.Dataset.from_huggingface(hf.select([1]), columns=["img"])
    np.testing.assert_array_equal(picked.example(0)["img"], pixels[1])


# ---- collation ------------------------------------------------------------------

shape_lists = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None)
@given(shapes=shape_lists, inner=st.sampled_from([(), (2,)]), batch=st.integers(1, 5))
def test_loader_pads_grids_bottom_right_like_numpy(shapes, inner, batch):
    images = _images(shapes, inner)
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    with jb.Loader(ds, jb.PadToMax(batch_size=batch), pad_value=-5) as loader:
        seen = 0
        for b in loader:
            rows = b["example_index"]
            real = [images[i] for i in rows if i >= 0]
            height, width = b["image"].shape[1:3]
            # PadToMax: each axis to the batch's largest (an empty axis to
            # at least 1, or 0).
            assert max(a.shape[0] for a in real) <= height <= max(1, *(a.shape[0] for a in real))
            assert max(a.shape[1] for a in real) <= width <= max(1, *(a.shape[1] for a in real))
            want = _padded(real, len(rows), height, width, -5)
            np.testing.assert_array_equal(b["image"], want[0])
            np.testing.assert_array_equal(b["image_mask"], want[1])
            np.testing.assert_array_equal(b["image_lengths"], want[2])
            seen += len(real)
    assert seen == len(images)


def _drain(loader, limit=None):
    out = []
    for b in loader:
        out.append({k: np.array(v) for k, v in b.items()})
        if limit is not None and len(out) == limit:
            break
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def _image_dataset(n=30, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(s) for s in rng.integers(1, 9, size=2)) for _ in range(n)]
    return jb.Dataset.from_arrays(
        {"image": _images(shapes, (2,), seed=seed), "label": np.arange(n, dtype=np.int32)},
        axes={"image": ("h", "w")},
    )


def test_shuffle_shard_and_restore_equal_a_straight_read():
    ds = _image_dataset()
    planner = jb.PadToMax(batch_size=4)
    full = _drain(jb.Loader(ds, planner, seed=3, epochs=2, num_threads=2))
    for k in (0, 3, len(full) - 1):
        first = jb.Loader(ds, planner, seed=3, epochs=2, num_threads=1)
        _drain(first, k) if k else None
        state = first.get_state()
        first.close()
        _same(
            _drain(jb.Loader(ds, planner, seed=3, epochs=2, num_threads=3, state=state)), full[k:]
        )
    # Every example once per epoch, each batch's values its examples'.
    for b in full:
        for r, e in enumerate(b["example_index"]):
            if e >= 0:
                want = ds.example(int(e))["image"]
                h, w = want.shape[:2]
                np.testing.assert_array_equal(b["image"][r, :h, :w], want)
                assert tuple(b["image_lengths"][r]) == (h, w)
    shards = [
        [b["example_index"].tolist() for b in jb.Loader(ds, planner, shard=(i, 2), seed=3)]
        for i in range(2)
    ]
    seen = [e for s in shards for ids in s for e in ids if e >= 0]
    assert sorted(seen) == list(range(len(ds)))


def test_tied_pair_feature_is_l_by_l_in_a_token_batch():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 10, size=20)
    tokens = [np.arange(n, dtype=np.int32) for n in lengths]
    pairs = [rng.standard_normal((n, n, 2)).astype(np.float32) for n in lengths]
    ds = jb.Dataset.from_arrays(
        {"tokens": tokens, "pair": pairs}, axes={"tokens": ("L",), "pair": ("L", "L")}
    )
    for b in jb.Loader(ds, jb.PadToMax(batch_size=6), column="tokens", shuffle=False):
        rows, length = b["tokens"].shape
        assert b["pair"].shape == (rows, length, length, 2)
        real = [pairs[e] for e in b["example_index"] if e >= 0]
        want = _padded(real, rows, length, length, 0)
        np.testing.assert_array_equal(b["pair"], want[0])
        np.testing.assert_array_equal(b["pair_mask"], want[1])
        np.testing.assert_array_equal(b["pair_lengths"], want[2])


def test_square_grid_length_column_plans_square_batches():
    pairs = [np.ones((n, n), np.float32) for n in (3, 5, 2, 7)]
    ds = jb.Dataset.from_arrays({"pair": pairs}, axes={"pair": ("L", "L")})
    for b in jb.Loader(ds, jb.PadToMax(batch_size=2), shuffle=False):
        assert b["pair"].shape[1] == b["pair"].shape[2]


def test_bad_example_policy_skips_a_grid_example():
    images = _images([(2, 2), (3, 1), (1, 4)], dtype=np.float32)
    images[1][0, 0] = np.nan
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    schema = {"image": jb.ColumnSchema(finite=True)}
    loader = jb.Loader(ds, jb.PadToMax(2), schema=schema, on_error="skip", shuffle=False)
    assert sorted(e for b in loader for e in b["example_index"] if e >= 0) == [0, 2]
    with pytest.raises(ValueError, match="column 'image'"):
        next(jb.Loader(ds, jb.PadToMax(2), schema=schema, on_error="raise"))


def test_streamed_parquet_grid_equals_reading_it_whole(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(2)
    shapes = [tuple(int(s) for s in rng.integers(1, 7, size=2)) for _ in range(120)]
    images = _images(shapes, (3,), dtype=np.float32, seed=2)
    typ = pa.list_(pa.list_(pa.list_(pa.float32(), 3)))
    table = pa.table({"image": pa.array([a.tolist() for a in images], type=typ)})
    path = tmp_path / "images.parquet"
    pq.write_table(table, path, row_group_size=20)
    options = dict(seed=4, epochs=1, num_threads=2)
    whole = _drain(jb.Loader(str(path), jb.PadToMax(batch_size=8), **options))
    with jb.Loader(
        str(path), jb.PadToMax(batch_size=8), stream=True, host_memory_limit=200_000, **options
    ) as loader:
        _same(whole, _drain(loader))
