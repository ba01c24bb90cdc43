import gc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import collate_packed, collate_padded
from test_plan import planners

import jaxbatch as jb


@st.composite
def datasets(draw):
    n = draw(st.integers(0, 30))
    lengths = draw(st.lists(st.integers(0, 24), min_size=n, max_size=n))
    inner = draw(st.sampled_from([(), (2,), (2, 3)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tokens = [rng.integers(1, 100, size=(k, *inner)).astype(np.int32) for k in lengths]
    labels = [rng.standard_normal(k).astype(np.float32) for k in lengths]
    other = [
        rng.standard_normal(int(rng.integers(0, 5))).astype(ml_dtypes.bfloat16) for _ in lengths
    ]
    y = rng.integers(0, 10, size=(n, 2)).astype(np.int64)
    cols = {"tokens": tokens, "labels": labels, "y": y}
    with_other = draw(st.booleans())
    if with_other:
        cols["other"] = other
    if n == 0:
        cols = {
            "tokens": (np.zeros((0, *inner), np.int32), np.zeros(1, np.int64)),
            "labels": (np.zeros(0, np.float32), np.zeros(1, np.int64)),
            "y": y,
        }
        tokens, labels, with_other = [], [], False
    ds = jb.Dataset.from_arrays(cols, aligned=[["tokens", "labels"]])
    return ds, {
        "tokens": tokens,
        "labels": labels,
        "y": list(y),
        "other": other if with_other else None,
    }


@given(datasets(), st.data())
def test_collate_matches_reference_and_unbatch_inverts_it(dataset, data):
    ds, source = dataset
    lengths = ds.lengths("tokens")
    planner = data.draw(planners(int(lengths.max()) if lengths.size else 1))
    plan = jb.plan(ds, planner)
    if isinstance(planner, jb.Pack) and source["other"] is not None and len(plan):
        with pytest.raises(ValueError, match="column 'other' is not"):
            jb.collate(ds, plan[0])
        return
    pad = {"tokens": -7, "labels": 0.5}
    seen = set()
    for spec in plan:
        batch = jb.collate(ds, spec, pad_value=pad)
        check_batch(batch, spec, source, pad)
        back = jb.unbatch(batch, batch)
        for e, cols in back.items():
            assert e not in seen
            seen.add(e)
            limit = spec.shape.length
            np.testing.assert_array_equal(cols["tokens"], source["tokens"][e][:limit])
            np.testing.assert_array_equal(cols["labels"], source["labels"][e][:limit])
            np.testing.assert_array_equal(cols["y"], source["y"][e])
            if source["other"] is not None:
                np.testing.assert_array_equal(cols["other"], source["other"][e])
    assert seen == set(plan._core.example_ids.tolist())


def check_batch(batch, spec, source, pad):
    shape = spec.shape
    rows = [list(r) for r in spec.rows]
    inner = batch["tokens"].shape[2:]
    if not batch.packed:
        ex = [source["tokens"][r[0]][: shape.length] if r else np.zeros((0, *inner)) for r in rows]
        values, mask, lengths = collate_padded(ex, shape.rows, shape.length, -7, np.int32, inner)
        np.testing.assert_array_equal(batch["tokens"], values)
        np.testing.assert_array_equal(batch["tokens_mask"], mask)
        np.testing.assert_array_equal(batch["tokens_lengths"], lengths)
        # A padded row is a packed row of one segment: the same ids and positions.
        _, seg, pos, _ = collate_packed(
            [[x] for x in ex], shape.rows, shape.length, 1, 0, np.int32, inner
        )
        for column in ("tokens", "labels"):
            np.testing.assert_array_equal(batch[f"{column}_segment_ids"], seg, strict=True)
            np.testing.assert_array_equal(batch[f"{column}_positions"], pos, strict=True)
        np.testing.assert_array_equal(batch["labels_mask"], mask)
        np.testing.assert_array_equal(batch["example_index"], [r[0] if r else -1 for r in rows])
        if source["other"] is not None:
            width = batch["other"].shape[1]
            ex = [source["other"][r[0]] if r else np.zeros(0) for r in rows]
            values, mask, _ = collate_padded(ex, shape.rows, width, 0, ml_dtypes.bfloat16, ())
            np.testing.assert_array_equal(batch["other"], values)
            assert batch["other"].dtype == ml_dtypes.bfloat16
        y = np.zeros((shape.rows, 2), np.int64)
        for i, r in enumerate(rows):
            if r:
                y[i] = source["y"][r[0]]
        np.testing.assert_array_equal(batch["y"], y)
    else:
        taken = []
        for r in rows:
            row, used = [], 0
            for e in r:
                x = source["tokens"][e][: shape.length - used]
                used += len(x)
                row.append(x)
            taken.append(row)
        values, seg, pos, lens = collate_packed(
            taken, shape.rows, shape.length, shape.segments, -7, np.int32, inner
        )
        np.testing.assert_array_equal(batch["tokens"], values)
        np.testing.assert_array_equal(batch["tokens_segment_ids"], seg)
        np.testing.assert_array_equal(batch["tokens_positions"], pos)
        np.testing.assert_array_equal(batch["tokens_lengths"], lens)
        np.testing.assert_array_equal(batch["labels_segment_ids"], seg)
        index = np.full((shape.rows, shape.segments), -1)
        for i, r in enumerate(rows):
            index[i, : len(r)] = r
        np.testing.assert_array_equal(batch["example_index"], index)
        assert batch["y"].shape == (shape.rows, shape.segments, 2)
        # No segment crosses a row: segment ids within a row are 1..n, contiguous.
        for i in range(shape.rows):
            ids = batch["tokens_segment_ids"][i]
            real = ids[ids > 0]
            assert np.all(np.diff(real) >= 0)
            assert np.all(ids[len(real) :] == 0)


def test_unbatch_model_outputs_per_token_and_per_example():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (3, 1, 4)]})
    plan = jb.plan(ds, jb.PadToMax(batch_size=4))
    batch = jb.collate(ds, plan[0])
    logits = np.arange(4 * 4 * 2).reshape(4, 4, 2)
    per_token = jb.unbatch(logits, batch)
    assert sorted(per_token) == [0, 1, 2]
    np.testing.assert_array_equal(per_token[2], logits[2, :4])
    np.testing.assert_array_equal(per_token[1], logits[1, :1])
    scores = jb.unbatch({"score": np.array([0.1, 0.2, 0.3, 0.4])}, batch)
    assert scores[2]["score"] == 0.3 and 3 not in scores
    with pytest.raises(ValueError, match="expected a leading axis of 4 rows"):
        jb.unbatch(np.zeros(3), batch)


def test_unbatch_packed_per_segment_outputs():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (3, 2, 4)]})
    plan = jb.plan(ds, jb.Pack(row_length=5, rows_per_batch=2, max_segments_per_row=2))
    batch = jb.collate(ds, plan[0])
    per_segment = np.arange(4).reshape(2, 2) * 10
    out = jb.unbatch(per_segment, batch)
    for (r, s), e in np.ndenumerate(batch["example_index"]):
        if e >= 0:
            assert out[e] == per_segment[r, s]
    tokens = jb.unbatch(batch["tokens"], batch)
    for e, x in tokens.items():
        np.testing.assert_array_equal(x, np.arange(len(x)))
        assert len(x) == ds.lengths()[e]


def test_unbatch_ambiguous_shapes_follow_per_token():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (3, 2, 4)]})
    # By default the segment axis is sized from the lengths (2 + 3 fit a row
    # of 6, 2 + 3 + 4 do not: 2), so per-segment outputs are not per-token.
    batch = jb.collate(ds, jb.plan(ds, jb.Pack(row_length=6, rows_per_batch=2))[0])
    assert batch.shape.segments == 2
    per_segment = batch["tokens_lengths"] * 10  # [rows, 2]
    out = jb.unbatch({"score": per_segment}, batch)
    for (r, s), e in np.ndenumerate(batch["example_index"]):
        if e >= 0:
            assert out[e]["score"] == per_segment[r, s] == 10 * ds.lengths()[e]
    # Set to the row length, the segment axis is ambiguous: unbatch asks.
    pack = jb.Pack(row_length=6, rows_per_batch=2, max_segments_per_row=6)
    batch = jb.collate(ds, jb.plan(ds, pack)[0])
    per_segment = batch["tokens_lengths"] * 10  # [rows, 6]: S == L == 6
    with pytest.raises(ValueError, match="'score'.*could be per token or per segment"):
        jb.unbatch({"score": per_segment}, batch)
    out = jb.unbatch({"score": per_segment}, batch, per_token=False)
    for (r, s), e in np.ndenumerate(batch["example_index"]):
        if e >= 0:
            assert out[e]["score"] == per_segment[r, s] == 10 * ds.lengths()[e]
    tokens = jb.unbatch({"t": batch["tokens"]}, batch, per_token=True)
    for e, x in tokens.items():
        np.testing.assert_array_equal(x["t"], np.arange(ds.lengths()[e]))
    padded = jb.collate(ds, jb.plan(ds, jb.PadToMax(batch_size=3))[0])
    logits = np.arange(12).reshape(3, 4)  # per-row, with 4 == L by chance
    rows = jb.unbatch({"logits": logits}, padded, per_token={"logits": False})
    np.testing.assert_array_equal(rows[2]["logits"], logits[2])
    with pytest.raises(ValueError, match="is per-token but its second axis"):
        jb.unbatch({"p": np.zeros((3, 5))}, padded, per_token=True)


def test_collated_arrays_own_their_memory():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(3, dtype=np.int32)] * 4})
    plan = jb.plan(ds, jb.PadToMax(batch_size=4))
    batch = jb.collate(ds, plan[0])
    tokens = batch["tokens"]
    del ds, plan, batch
    gc.collect()
    np.testing.assert_array_equal(tokens, np.tile(np.arange(3), (4, 1)))
    assert tokens.flags.owndata is False  # a view of the C++ buffer, not a copy


def test_pad_value_errors():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(3, dtype=np.uint8)]})
    spec = jb.plan(ds, jb.PadToMax(batch_size=2))[0]
    with pytest.raises(
        ValueError,
        match="pad value for column 'tokens': expected a value representable as uint8, found -1",
    ):
        jb.collate(ds, spec, pad_value=-1)
    with pytest.raises(ValueError, match="pad_value names column 'nope'"):
        jb.collate(ds, spec, pad_value={"nope": 1})


def test_plan_from_other_lengths_is_refused():
    short = jb.Dataset.from_arrays({"t": [np.arange(2)] * 3})
    long = jb.Dataset.from_arrays({"t": [np.arange(9)] * 3})
    spec = jb.plan(short, jb.PadToMax(batch_size=3))[0]
    with pytest.raises(ValueError, match="example 0 has length 9 but batch 0 has room for 2"):
        jb.collate(long, spec)
    small = jb.Dataset.from_arrays({"t": [np.arange(2)]})
    with pytest.raises(IndexError, match="refers to example 1 but the dataset has 1 examples"):
        jb.collate(small, spec)


# (dtype, pad value): integers a float64 cannot hold, each end of each range,
# and floats; numpy scalars of the column's type as well as Python numbers.
EXACT_PADS = [
    (np.int64, 2**53 + 1),
    (np.int64, 2**63 - 1),
    (np.int64, -(2**63)),
    (np.uint64, 2**64 - 1),
    (np.uint64, np.uint64(2**64 - 1)),
    (np.int64, np.int64(-(2**53) - 1)),
    (np.uint32, 2**32 - 1),
    (np.int8, -128),
    (np.bool_, True),
    (np.float64, 0.1),
    (np.float32, np.float32(1.5)),
    (ml_dtypes.bfloat16, -2.0),
    (np.float64, 2**53 + 1),  # rounds to the nearest float64, as numpy does
]


def test_padded_segments_false_leaves_segment_ids_and_positions_out():
    ds = jb.Dataset.from_arrays({"x": [np.arange(3), np.arange(1)]})
    spec = jb.plan(ds, jb.PadToMax(batch_size=2))[0]
    on = jb.collate(ds, spec)
    np.testing.assert_array_equal(on["x_segment_ids"], [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(on["x_positions"], [[0, 1, 2], [0, 0, 0]])
    off = jb.collate(ds, spec, padded_segments=False)
    assert set(on) - set(off) == {"x_segment_ids", "x_positions"}
    [loaded] = jb.Loader(ds, jb.PadToMax(batch_size=2), shuffle=False, padded_segments=False)
    assert set(loaded) == set(off)
    with pytest.raises(ValueError, match=r"padded_segments must be True or False, found 1"):
        jb.LoaderOptions(padded_segments=1)
    with pytest.raises(TypeError, match=r"padded_segments must be a bool, found 'no'"):
        jb.collate(ds, spec, padded_segments="no")


@pytest.mark.parametrize(("dtype", "pad"), EXACT_PADS, ids=lambda x: repr(x))
def test_pad_values_are_exact_for_every_dtype(dtype, pad):
    examples = [np.array([1, 0, 1], dtype=dtype), np.array([0], dtype=dtype)]
    ds = jb.Dataset.from_arrays({"x": examples})
    spec = jb.plan(ds, jb.PadToMax(batch_size=3))[0]
    want, _, _ = collate_padded(examples, 3, 3, pad, dtype, ())
    for pad_value in (pad, {"x": pad}):
        batch = jb.collate(ds, spec, pad_value=pad_value)
        np.testing.assert_array_equal(batch["x"], want, strict=True)
        [loaded] = jb.Loader(ds, jb.PadToMax(batch_size=3), shuffle=False, pad_value=pad_value)
        np.testing.assert_array_equal(loaded["x"], want, strict=True)
    assert want[2, 0] == np.array(pad, dtype=dtype)  # the reference kept it exactly
    if np.issubdtype(dtype, np.integer):
        assert int(want[2, 0]) == int(pad)


@pytest.mark.parametrize(
    ("dtype", "pad", "found"),
    [
        (np.int64, 2**63, "found 9223372036854775808"),
        (np.uint64, -1, "found -1"),
        (np.int32, 2**31, "found 2147483648"),
        (np.uint8, 1.5, "found 1.5"),
        (np.bool_, 2, "found 2"),
    ],
)
def test_pad_value_out_of_range_names_the_column(dtype, pad, found):
    ds = jb.Dataset.from_arrays({"x": [np.zeros(2, dtype=dtype), np.zeros(1, dtype=dtype)]})
    spec = jb.plan(ds, jb.PadToMax(batch_size=2))[0]
    for run in (
        lambda: jb.collate(ds, spec, pad_value={"x": pad}),
        lambda: jb.collate(ds, spec, pad_value=pad),
        lambda: list(jb.Loader(ds, jb.PadToMax(2), pad_value={"x": pad})),
    ):
        with pytest.raises(ValueError, match=f"pad value for column 'x'.*{found}"):
            run()


def test_pad_value_outside_every_64_bit_integer_or_not_a_number():
    ds = jb.Dataset.from_arrays({"x": [np.zeros(2, np.uint64)]})
    spec = jb.plan(ds, jb.PadToMax(batch_size=2))[0]
    with pytest.raises(
        ValueError, match="collate: pad_value for column 'x'.*found 18446744073709551616"
    ):
        jb.collate(ds, spec, pad_value={"x": 2**64})
    with pytest.raises(ValueError, match="Loader: pad_value: .*found -9223372036854775809"):
        jb.Loader(ds, jb.PadToMax(2), pad_value=-(2**63) - 1)
    with pytest.raises(
        TypeError, match="collate: pad_value: expected an int or a float, found str"
    ):
        jb.collate(ds, spec, pad_value="0")
