"""FixedBuckets(batch_sizes=...): tf.data's bucket_by_sequence_length with
per-bucket ``bucket_batch_sizes``.

TensorFlow's own tests (tensorflow/python/data/kernel_tests/
bucket_by_sequence_length_test.py) are ported with their numbers. tf.data's
buckets are ``[0, b0), [b0, b1), ..., [b_last, inf)`` (one more than its
boundaries); jaxbatch's bucket k holds ``(b_{k-1}, b_k]`` and its last
boundary closes the last bucket, so tf's boundaries ``B`` are jaxbatch's
``[b - 1 for b in B]`` plus one for tf's open bucket, and a batch pads to its
boundary (tf's ``pad_to_bucket_boundary=True`` pads to ``b - 1`` too).
"""

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb
from jaxbatch._src.plan.planners import planner_from_key, same_planner

TF_BOUNDARIES = [10, 20, 30]
TF_BATCH_SIZES = [10, 8, 4, 2]


def jb_boundaries(tf_boundaries, last):
    """tf.data's boundaries as jaxbatch's, `last` closing tf's open bucket."""
    return [b - 1 for b in tf_boundaries] + [last]


def ones(lengths):
    return jb.Dataset.from_arrays({"x": [np.ones(n, np.int32) for n in lengths]})


def batches_of(ds, planner):
    plan = jb.plan(ds, planner)
    return [jb.collate(ds, spec)["x"] for spec in plan]


def test_tf_bucket_drop_remainder():
    # testBucketDropReminder: 28, 7, 6 and 5 examples of lengths 8, 13, 25
    # and 35, drop_remainder=True: 5 batches, each bucket's sum its full
    # batches' elements.
    lengths = [8, 13, 25, 35]
    n_bucket_elements = [28, 7, 6, 5]
    elements = [
        n for n, count in zip(lengths, n_bucket_elements, strict=True) for _ in range(count)
    ]
    random.Random(0).shuffle(elements)
    boundaries = jb_boundaries(TF_BOUNDARIES, 35)
    planner = jb.FixedBuckets(boundaries, batch_sizes=TF_BATCH_SIZES, remainder="drop")
    batches = batches_of(ones(elements), planner)
    assert len(batches) == 5
    sums = dict.fromkeys(boundaries, 0)
    sizes = {b: [] for b in boundaries}
    for x in batches:
        sums[x.shape[1]] += int(x.sum())
        sizes[x.shape[1]].append(x.shape[0])
    for boundary, length, size, count in zip(
        boundaries, lengths, TF_BATCH_SIZES, n_bucket_elements, strict=True
    ):
        assert sums[boundary] == (count - count % size) * length
        assert sizes[boundary] == [size] * (count // size)


def test_tf_bucket():
    # testBucket: one batch per bucket, its first example one shorter; each
    # batch sums to batch_size * length - 1.
    lengths = [8, 13, 25, 35]
    elements = []
    for size, length in zip(TF_BATCH_SIZES, lengths, strict=True):
        elements += [length - 1] + [length] * (size - 1)
    random.Random(1).shuffle(elements)
    boundaries = jb_boundaries(TF_BOUNDARIES, 35)
    batches = batches_of(ones(elements), jb.FixedBuckets(boundaries, batch_sizes=TF_BATCH_SIZES))
    assert len(batches) == 4
    assert sorted(x.shape[0] for x in batches) == sorted(TF_BATCH_SIZES)
    # tf pads to the longest (8, 13, 25, 35); jaxbatch to the boundary.
    assert sorted(x.shape[1] for x in batches) == boundaries
    by_boundary = dict(zip(boundaries, zip(TF_BATCH_SIZES, lengths, strict=True), strict=True))
    for x in batches:
        size, length = by_boundary[x.shape[1]]
        assert x.shape[0] == size and int(x.sum()) == size * length - 1


def test_tf_pad_to_boundary():
    # testPadToBoundary: examples past the last boundary are an error naming
    # it; without them (too_long="skip") the batches pad to boundary - 1.
    lengths = [8, 13, 25]
    elements = [
        n for size, n in zip(TF_BATCH_SIZES[:-1], lengths, strict=True) for _ in range(size)
    ]
    random.Random(2).shuffle(elements)
    elements += [TF_BOUNDARIES[-1] + 5] * TF_BATCH_SIZES[-1]
    boundaries = [b - 1 for b in TF_BOUNDARIES]
    ds = ones(elements)
    with pytest.raises(ValueError, match="longer than the last boundary 29"):
        jb.plan(ds, jb.FixedBuckets(boundaries, batch_sizes=TF_BATCH_SIZES[:-1]))
    planner = jb.FixedBuckets(boundaries, batch_sizes=TF_BATCH_SIZES[:-1], too_long="skip")
    batches = batches_of(ds, planner)
    assert len(batches) == 3
    assert sorted(x.shape[0] for x in batches) == sorted(TF_BATCH_SIZES[:-1])
    assert sorted(x.shape[1] for x in batches) == [b - 1 for b in TF_BOUNDARIES]
    assert jb.plan(ds, planner).stats.skipped == TF_BATCH_SIZES[-1]


def test_tf_pad_to_boundary_no_extraneous_padding():
    # testPadToBoundaryNoExtraneousPadding: boundaries [3, 7, 11], batch
    # sizes 2, lengths 1..10 in order: the same five batches, value for value.
    planner = jb.FixedBuckets([2, 6, 10], batch_sizes=[2, 2, 2])
    batches = batches_of(ones(range(1, 11)), planner)
    want = [
        [[1, 0], [1, 1]],
        [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]],
        [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]],
        [[1, 1, 1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]],
        [[1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]],
    ]
    assert len(batches) == len(want)
    for got, expected in zip(batches, want, strict=True):
        np.testing.assert_array_equal(got, expected)


def reference(lengths, planner):
    """tf.data's semantics, slowly: a bucket's batch is emitted when it holds
    its bucket's size; at the end each bucket's partial batch, in bucket
    order, is padded, kept or dropped. Returns (batches as (rows, length,
    ids), dropped, skipped)."""
    bounds, sizes = list(planner.boundaries), list(planner.batch_sizes)
    open_ = [[] for _ in bounds]
    batches, skipped = [], []
    for i, n in enumerate(lengths):
        k = next((k for k, b in enumerate(bounds) if n <= b), None)
        if k is None:
            if planner.too_long == "skip":
                skipped.append(i)
                continue
            k = len(bounds) - 1
        open_[k].append(i)
        if len(open_[k]) == sizes[k]:
            batches.append((sizes[k], bounds[k], open_[k]))
            open_[k] = []
    dropped = []
    for k, ids in enumerate(open_):
        if not ids:
            continue
        if planner.remainder == "drop":
            dropped += ids
            continue
        rows = sizes[k]
        if planner.remainder == "keep":
            rows = -(-len(ids) // planner.rows_multiple) * planner.rows_multiple
        batches.append((rows, bounds[k], ids))
    return batches, dropped, skipped


@st.composite
def bucket_planners(draw):
    bounds = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=5)))
    multiple = draw(st.integers(1, 3))
    sizes = [multiple * draw(st.integers(1, 5)) for _ in bounds]
    return jb.FixedBuckets(
        bounds,
        batch_sizes=sizes,
        remainder=draw(st.sampled_from(["pad", "keep", "drop"])),
        too_long=draw(st.sampled_from(["truncate", "skip"])),
        rows_multiple=multiple,
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 45), max_size=80), bucket_planners())
def test_every_example_once_in_its_bucket_with_its_bucket_size(lengths, planner):
    plan = jb.plan(lengths, planner)
    placed = []
    for spec in plan:
        ids = spec.example_ids.tolist()
        placed += ids
        k = planner.boundaries.index(spec.shape.length)  # each batch is one bucket's
        # Full batches have their bucket's size; a kept remainder fewer rows.
        if planner.remainder == "keep":
            assert spec.shape.rows <= planner.batch_sizes[k]
            assert spec.shape.rows % planner.rows_multiple == 0
        else:
            assert spec.shape.rows == planner.batch_sizes[k]
        for i in ids:  # each example in the bucket its length selects
            selected = next((b for b in planner.boundaries if lengths[i] <= b), None)
            assert spec.shape.length == (selected or planner.boundaries[-1])
    every = placed + plan.dropped_examples.tolist() + plan.skipped_examples.tolist()
    assert sorted(every) == list(range(len(lengths)))
    batches, dropped, skipped = reference(lengths, planner)
    got = [(s.shape.rows, s.shape.length, s.example_ids.tolist()) for s in plan]
    assert got == batches
    assert plan.dropped_examples.tolist() == dropped
    assert plan.skipped_examples.tolist() == skipped


def test_key_round_trips_and_an_unset_list_keeps_the_old_key():
    old = "FixedBuckets(boundaries=[8, 16], batch_size=2, token_budget=None, remainder='pad', "
    assert jb.FixedBuckets([8, 16], batch_size=2).key == old + "too_long='error')"
    planner = jb.FixedBuckets((8, 16), batch_sizes=(8, 4), remainder="keep")
    assert planner.key == (
        "FixedBuckets(boundaries=[8, 16], batch_size=None, token_budget=None, "
        "remainder='keep', too_long='error', batch_sizes=[8, 4])"
    )
    assert planner_from_key(planner.key) == planner
    assert same_planner(planner.key, jb.FixedBuckets([8, 16], batch_sizes=[8, 4], remainder="keep"))
    assert not same_planner(planner.key, jb.FixedBuckets([8, 16], batch_sizes=[8, 2]))
    with pytest.raises(ValueError, match="found 3 batch_sizes"):
        planner_from_key("FixedBuckets(boundaries=[8, 16], batch_sizes=[8, 4, 2])")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: jb.FixedBuckets([8, 16], batch_size=4, batch_sizes=[4, 2]),
         "give batch_sizes or batch_size, not both"),
        (lambda: jb.FixedBuckets([8, 16], token_budget=64, batch_sizes=[4, 2]),
         "give batch_sizes or token_budget, not both"),
        (lambda: jb.FixedBuckets([8, 16, 32], batch_sizes=[4, 2]),
         r"expected one batch size per boundary \(3; the last boundary closes"),
        (lambda: jb.FixedBuckets([8, 16], batch_sizes=[4, -2]),
         r"batch_sizes\[1\] must be a positive integer, found -2"),
        (lambda: jb.FixedBuckets([8, 16], batch_sizes=[4, 2.5]), r"batch_sizes\[1\]"),
        (lambda: jb.FixedBuckets([8, 16], batch_sizes=[4, 6], rows_multiple=4),
         r"batch_sizes\[1\]=6 is not a multiple of rows_multiple=4"),
        (lambda: jb.FixedBuckets([8, 2**30], batch_sizes=[1, 2**40]),
         r"batch_sizes\[1\]=1099511627776 with boundaries\[1\]=1073741824"),
    ],
)  # fmt: skip
def test_bad_batch_sizes_fail_where_written(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_loader_yields_each_buckets_size_and_restores_across_a_state():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 33, 60)
    ds = jb.Dataset.from_arrays({"x": [np.full(n, n, np.int32) for n in lengths]})
    planner = jb.FixedBuckets([8, 16, 32], batch_sizes=[8, 4, 2], remainder="keep")

    def drain(loader, limit=None):
        out = []
        for batch in loader:
            out.append((batch["x"].shape, batch["x"].tobytes(), batch["example_index"].tolist()))
            if limit is not None and len(out) == limit:
                break
        return out

    full = drain(jb.Loader(ds, planner, seed=1, epochs=2, num_threads=2))
    sizes = {8: 8, 16: 4, 32: 2}
    for shape, _, index in full:
        assert shape[0] <= sizes[shape[1]]
        real = [i for i in index if i >= 0]
        assert all(
            next(b for b in sizes if lengths[i] <= b) == shape[1] for i in real
        )  # each example in its bucket
    assert sorted(i for _, _, index in full for i in index if i >= 0) == sorted(list(range(60)) * 2)
    # Only a bucket's last batch of an epoch (remainder="keep") is short.
    assert sum(shape[0] < sizes[shape[1]] for shape, _, _ in full) <= len(sizes) * 2
    # Stop mid-stream, keep the state as JSON, and the rest comes back as is.
    half = len(full) // 2
    first = jb.Loader(ds, planner, seed=1, epochs=2, num_threads=1)
    assert drain(first, limit=half) == full[:half]
    state = json.loads(json.dumps(first.get_state()))
    first.close()
    assert (
        drain(jb.Loader(ds, planner, seed=1, epochs=2, num_threads=3, state=state)) == full[half:]
    )
    # A state made with other batch sizes is refused, not silently continued.
    other = jb.FixedBuckets([8, 16, 32], batch_sizes=[8, 4, 4], remainder="keep")
    with pytest.raises(ValueError, match=r"state was saved with planner .*batch_sizes=\[8, 4, 2\]"):
        jb.Loader(ds, other, seed=1, epochs=2, state=state)
