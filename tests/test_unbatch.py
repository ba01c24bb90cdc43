"""jb.unbatch reads an output's layout from its shape exactly: per token of
one ragged column, per segment (packed), per row (padded); what fits two
layouts or none is refused naming the shapes that would fit, and a batch
that packs several features needs column= (issue 38, item 2).

Reference: a slow per-cell NumPy reading of the batch's own segment ids (an
example's tokens are the cells whose id is its slot + 1), never the
lengths and starts unbatch cuts by."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb


def reference(array, batch, layout, feature):
    """{example: value} read cell by cell: per token, the cells of the
    example's segment in `feature`; per segment, its slot; per row, the row."""
    index = np.asarray(batch["example_index"])
    out = {}
    for r in range(index.shape[0]):
        slots = index[r] if batch.packed else index[r : r + 1]
        for s, example in enumerate(slots):
            if example < 0:
                continue
            if layout == "token":
                ids = np.asarray(batch[f"{feature}_segment_ids"][r])
                out[int(example)] = array[r, ids == s + 1]
            elif layout == "segment":
                out[int(example)] = array[r, s]
            else:
                out[int(example)] = array[r]
    return out


@st.composite
def batches(draw):
    """(batch, features): a padded, packed or multi-feature packed batch of
    one or two ragged columns."""
    n = draw(st.integers(1, 8))
    inputs = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    targets = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    kind = draw(st.sampled_from(["padded", "packed", "features"]))
    columns = {"inputs": [np.arange(k, dtype=np.int32) + 1 for k in inputs]}
    if kind == "features":
        columns["targets"] = [np.arange(k, dtype=np.int32) + 1 for k in targets]
        rows = {"inputs": draw(st.integers(6, 9)), "targets": draw(st.integers(4, 9))}
        planner = jb.Pack(row_length=rows, rows_per_batch=2)
    elif kind == "packed":
        slots = draw(st.sampled_from([None, 2, 3, 7]))
        planner = jb.Pack(row_length=7, rows_per_batch=2, max_segments_per_row=slots)
    else:
        planner = jb.PadToMax(batch_size=3)
    ds = jb.Dataset.from_arrays(columns)
    plan = jb.plan(ds, planner)
    batch = jb.collate(ds, plan[draw(st.integers(0, len(plan) - 1))])
    return batch, list(columns)


def fitting_layouts(batch, feature, second):
    """The layouts an output whose second axis is `second` fits."""
    width = batch[feature].shape[1]
    if not batch.packed:
        return ["token"] if second == width else ["row"]
    fits = []
    if second == width:
        fits.append("token")
    if second == batch.shape.segments:
        fits.append("segment")
    return fits


@settings(max_examples=80, deadline=None)
@given(batches(), st.data())
def test_unbatch_reads_the_one_layout_a_shape_fits_or_refuses(drawn, data):
    batch, features = drawn
    several = len(features) > 1
    feature = data.draw(st.sampled_from(features))
    widths = {batch[f].shape[1] for f in features} | {batch.segments, 5}
    second = data.draw(st.sampled_from(sorted(widths)))
    array = np.arange(batch.shape.rows * second * 2).reshape(batch.shape.rows, second, 2)
    name_it = data.draw(st.booleans())
    kwargs = {"column": feature} if name_it else {}
    fits = fitting_layouts(batch, feature, second)
    if several and not name_it:
        with pytest.raises(ValueError, match="several features.*'inputs' or 'targets'"):
            jb.unbatch(array, batch)
        # Per segment needs no feature: segment k is one example in each.
        if "segment" in fitting_layouts(batch, "inputs", second):
            got = jb.unbatch(array, batch, per_token=False)
            assert_same(got, reference(array, batch, "segment", None))
        return
    if len(fits) != 1:
        expected = "could be per token or per segment" if fits else "no layout of this packed"
        with pytest.raises(ValueError, match=expected):
            jb.unbatch(array, batch, **kwargs)
        for forced, layout in ((True, "token"), (False, "segment")):
            if layout in fits:
                got = jb.unbatch(array, batch, per_token=forced, **kwargs)
                assert_same(got, reference(array, batch, layout, feature))
        return
    got = jb.unbatch({"out": array}, batch, column={"out": feature} if name_it else None)
    want = reference(array, batch, fits[0], feature)
    assert_same({e: v["out"] for e, v in got.items()}, want)


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for e, value in want.items():
        np.testing.assert_array_equal(got[e], value)


# --- The cases the issue found ---------------------------------------------


def t5_batch(rows=None):
    ds = jb.Dataset.from_arrays(
        {
            "inputs": [np.arange(n, dtype=np.int32) + 1 for n in (7, 3, 9, 2, 12)],
            "targets": [np.arange(n, dtype=np.int32) + 1 for n in (2, 4, 1, 3, 5)],
        }
    )
    pack = jb.Pack(row_length=rows or {"inputs": 16, "targets": 8}, rows_per_batch=2)
    return ds, jb.collate(ds, jb.plan(ds, pack)[0])


def test_a_multi_feature_batch_needs_the_feature():
    # On main, unbatch(b["inputs"], b) gave one int per example, read at
    # the wrong cells (the second axis, 16, is not the summed 24, so it was
    # taken for per segment and indexed [r, s]).
    ds, batch = t5_batch()
    with pytest.raises(ValueError, match=r"'inputs' \(16 long\), 'targets' \(8 long\)"):
        jb.unbatch(batch["inputs"], batch)
    for feature in ("inputs", "targets"):
        got = jb.unbatch(batch[feature], batch, column=feature)
        assert sorted(got) == sorted(int(e) for e in batch["example_index"].ravel() if e >= 0)
        for e, tokens in got.items():
            np.testing.assert_array_equal(tokens, ds.example(e)[feature])
    # A feature's name as the key follows that feature, as before.
    named = jb.unbatch({"targets": batch["targets"]}, batch)
    assert all(len(v["targets"]) == len(ds.example(e)["targets"]) for e, v in named.items())
    with pytest.raises(ValueError, match="column='labels'.*'inputs' or 'targets'"):
        jb.unbatch(batch["inputs"], batch, column="labels")
    # The wrong feature's shape is refused, naming the one it expected.
    with pytest.raises(ValueError, match="not 'targets'.s padded length 8"):
        jb.unbatch(batch["inputs"], batch, column="targets", per_token=True)
    with pytest.raises(ValueError, match=r"per token of 'targets' \[2, 8, \.\.\.\]"):
        jb.unbatch(batch["inputs"], batch, column="targets")


def test_equal_row_lengths_still_need_the_feature():
    # Equal row lengths: the shape cannot tell inputs' tokens from targets'.
    _, batch = t5_batch({"inputs": 12, "targets": 12})
    with pytest.raises(ValueError, match="several features"):
        jb.unbatch(np.zeros((2, 12)), batch)


def test_an_output_that_is_no_layout_of_a_packed_batch_is_refused():
    # On main a [rows, 5] output with S = 3 was indexed [r, s] silently.
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in (3, 2, 4, 1)]})
    pack = jb.Pack(row_length=8, rows_per_batch=2, max_segments_per_row=3)
    batch = jb.collate(ds, jb.plan(ds, pack)[0])
    assert batch.segments == 3
    expected = r"per token of 'tokens' \[2, 8, \.\.\.\] or per segment \[2, 3, \.\.\.\]"
    for shape in ((2, 5), (2,), (2, 5, 3)):
        with pytest.raises(ValueError, match=expected):
            jb.unbatch(np.zeros(shape), batch)
    with pytest.raises(ValueError, match=expected):
        jb.unbatch(np.zeros((2, 5)), batch, per_token=False)
    with pytest.raises(ValueError, match=r"'y'.*per segment \[2, 3"):
        jb.unbatch({"y": np.zeros((2, 5))}, batch)


def test_a_patch_pack_output_follows_its_patches():
    images = [np.ones((h, w, 1), np.float32) for h, w in [(4, 4), (2, 4), (4, 2)]]
    ds = jb.Dataset.from_arrays({"image": images}, axes={"image": ("h", "w")})
    planner = jb.PatchPack(patch=(2, 2), row_length=8, rows_per_batch=2)
    batch = jb.collate(ds, jb.plan(ds, planner)[0])
    rows, length = batch["image"].shape[:2]
    got = jb.unbatch(np.arange(rows * length).reshape(rows, length), batch)
    assert {e: len(v) for e, v in got.items()} == {0: 4, 1: 2, 2: 2}
    with pytest.raises(ValueError, match="no layout of this packed batch"):
        jb.unbatch(np.zeros((rows, length + 1)), batch)
