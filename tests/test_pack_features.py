"""Pack with several features, each its own row length
(``row_length={"inputs": 512, "targets": 128}``): Grain's packing cases
(grain/_src/python/dataset/transformations/testing_util.py: the two-feature
fixture at several row lengths, first-fit and best-fit scenarios,
max_sequences_per_bin, zero-length features) and seqio's trim_and_pack
cases (seqio/utils_test.py) with their numbers, rows compared as sets where
the peer's emission order is its own; hypothesis properties against a slow
reference packer (every token of every feature exactly once or counted as
truncated, per-feature bounds, segment k the same example in every
feature); and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb

# Grain's fixture: three examples of inputs and targets.
INPUTS = [[1, 2, 3], [4, 5], [6]]
TARGETS = [[10], [20, 30, 40], [50, 60]]


def dataset(**features) -> jb.Dataset:
    return jb.Dataset.from_arrays(
        {k: [np.asarray(v, dtype=np.int64) for v in vals] for k, vals in features.items()}
    )


def packed_rows(ds, planner, keys) -> list[tuple]:
    """Every row the loader yields, as a hashable tuple of its arrays' rows
    under `keys` (the peer's outputs), in the order they come."""
    rows = []
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        for batch in loader:
            index = np.asarray(batch["example_index"])
            for r in range(index.shape[0]):
                if (index[r] < 0).all():
                    continue  # a padding row of the last batch
                rows.append(tuple(tuple(np.asarray(batch[k])[r].tolist()) for k in keys))
    return rows


def as_rows(expected, keys) -> list[tuple]:
    return [tuple(tuple(np.asarray(e[k]).tolist()) for k in keys) for e in expected]


def grain_keys(features):
    return [f"{f}{s}" for f in features for s in ("", "_segment_ids", "_positions")]


# --- Grain: the two-feature fixture at several row lengths ---------------------------------

GRAIN_ROWS = {
    # test_pack_sequences_length_3
    (3, 3): [
        {"inputs": [1, 2, 3], "targets": [10, 0, 0], "inputs_segment_ids": [1, 1, 1],
         "targets_segment_ids": [1, 0, 0], "inputs_positions": [0, 1, 2],
         "targets_positions": [0, 0, 0]},
        {"inputs": [4, 5, 0], "targets": [20, 30, 40], "inputs_segment_ids": [1, 1, 0],
         "targets_segment_ids": [1, 1, 1], "inputs_positions": [0, 1, 0],
         "targets_positions": [0, 1, 2]},
        {"inputs": [6, 0, 0], "targets": [50, 60, 0], "inputs_segment_ids": [1, 0, 0],
         "targets_segment_ids": [1, 1, 0], "inputs_positions": [0, 0, 0],
         "targets_positions": [0, 1, 0]},
    ],
    # test_pack_sequences_length_4
    (4, 4): [
        {"inputs": [1, 2, 3, 6], "targets": [10, 50, 60, 0], "inputs_segment_ids": [1, 1, 1, 2],
         "targets_segment_ids": [1, 2, 2, 0], "inputs_positions": [0, 1, 2, 0],
         "targets_positions": [0, 0, 1, 0]},
        {"inputs": [4, 5, 0, 0], "targets": [20, 30, 40, 0], "inputs_segment_ids": [1, 1, 0, 0],
         "targets_segment_ids": [1, 1, 1, 0], "inputs_positions": [0, 1, 0, 0],
         "targets_positions": [0, 1, 2, 0]},
    ],
    # test_pack_sequences_length_5
    (5, 5): [
        {"inputs": [1, 2, 3, 4, 5], "targets": [10, 20, 30, 40, 0],
         "inputs_segment_ids": [1, 1, 1, 2, 2], "targets_segment_ids": [1, 2, 2, 2, 0],
         "inputs_positions": [0, 1, 2, 0, 1], "targets_positions": [0, 0, 1, 2, 0]},
        {"inputs": [6, 0, 0, 0, 0], "targets": [50, 60, 0, 0, 0],
         "inputs_segment_ids": [1, 0, 0, 0, 0], "targets_segment_ids": [1, 1, 0, 0, 0],
         "inputs_positions": [0, 0, 0, 0, 0], "targets_positions": [0, 1, 0, 0, 0]},
    ],
    # test_pack_sequences_length_6
    (6, 6): [
        {"inputs": [1, 2, 3, 4, 5, 6], "targets": [10, 20, 30, 40, 50, 60],
         "inputs_segment_ids": [1, 1, 1, 2, 2, 3], "targets_segment_ids": [1, 2, 2, 2, 3, 3],
         "inputs_positions": [0, 1, 2, 0, 1, 0], "targets_positions": [0, 0, 1, 2, 0, 1]},
    ],
    # test_pack_sequences_length_7
    (7, 7): [
        {"inputs": [1, 2, 3, 4, 5, 6, 0], "targets": [10, 20, 30, 40, 50, 60, 0],
         "inputs_segment_ids": [1, 1, 1, 2, 2, 3, 0], "targets_segment_ids": [1, 2, 2, 2, 3, 3, 0],
         "inputs_positions": [0, 1, 2, 0, 1, 0, 0], "targets_positions": [0, 0, 1, 2, 0, 1, 0]},
    ],
    # test_pack_sequences_different_lengths
    (3, 4): [
        {"inputs": [1, 2, 3], "targets": [10, 0, 0, 0], "inputs_segment_ids": [1, 1, 1],
         "targets_segment_ids": [1, 0, 0, 0], "inputs_positions": [0, 1, 2],
         "targets_positions": [0, 0, 0, 0]},
        {"inputs": [4, 5, 0], "targets": [20, 30, 40, 0], "inputs_segment_ids": [1, 1, 0],
         "targets_segment_ids": [1, 1, 1, 0], "inputs_positions": [0, 1, 0],
         "targets_positions": [0, 1, 2, 0]},
        {"inputs": [6, 0, 0], "targets": [50, 60, 0, 0], "inputs_segment_ids": [1, 0, 0],
         "targets_segment_ids": [1, 1, 0, 0], "inputs_positions": [0, 0, 0],
         "targets_positions": [0, 1, 0, 0]},
    ],
}  # fmt: skip

# The num_packing_bins Grain ran each case with (length 3 with 1, 2 and 3).
GRAIN_BINS = {(3, 3): [1, 2, 3], (4, 4): [2], (5, 5): [2], (6, 6): [2], (7, 7): [1], (3, 4): [3]}


@pytest.mark.parametrize("lengths", sorted(GRAIN_ROWS))
@pytest.mark.parametrize("algorithm", ["first_fit", "best_fit"])
def test_grain_two_feature_fixture(lengths, algorithm):
    keys = grain_keys(["inputs", "targets"])
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    expected = as_rows(GRAIN_ROWS[lengths], keys)
    row_length = {"inputs": lengths[0], "targets": lengths[1]}
    for bins in GRAIN_BINS[lengths]:
        # Grain's bins as open rows give Grain's rows; their order is each
        # packer's own (Grain flushes every bin when one example fits none,
        # Pack closes only the fullest row).
        got = packed_rows(ds, jb.Pack(row_length, 4, algorithm=algorithm, open_rows=bins), keys)
        assert sorted(got) == sorted(expected)
    # Without open rows (all examples at once) the rows hold the same
    # examples; best fit decreasing places the longest first within a row.
    whole = jb.Pack(row_length, 4, algorithm=algorithm)
    if algorithm == "first_fit":
        assert sorted(packed_rows(ds, whole, keys)) == sorted(expected)
    streamed = jb.Pack(row_length, 4, algorithm=algorithm, open_rows=GRAIN_BINS[lengths][0])
    assert groups(jb.plan(ds, whole)) == groups(jb.plan(ds, streamed))


def groups(plan) -> list[list[int]]:
    return sorted(sorted(int(e) for e in row) for spec in plan for row in spec.rows if len(row))


# --- Grain: the first-fit and best-fit bin scenarios --------------------------------------

SCENARIOS = [
    # (capacity, bins, lengths, first-fit rows, best-fit rows), as example ids per row.
    (10, 2, [4, 8, 2], [[0, 2], [1]], [[0], [1, 2]]),
    (20, 2, [10, 15, 4], [[0, 2], [1]], [[0], [1, 2]]),
    (100, 3, [50, 70, 25, 40], [[0, 2], [1], [3]], [[0, 3], [1, 2]]),
    (20, 3, [10, 15, 4, 10], [[0, 2], [1], [3]], [[0, 3], [1, 2]]),
]


@pytest.mark.parametrize("capacity, bins, lengths, first, best", SCENARIOS)
def test_grain_bin_scenarios(capacity, bins, lengths, first, best):
    # Grain's test_packing_scenario_{1..4}, features of value k + 1 for example k.
    ds = dataset(features=[[k + 1] * n for k, n in enumerate(lengths)])
    for algorithm, rows in (("first_fit", first), ("best_fit", best)):
        for row_length in (capacity, {"features": capacity}):
            planner = jb.Pack(row_length, 1, algorithm=algorithm, open_rows=bins)
            got = packed_rows(ds, planner, ["features"])
            want = [
                tuple(
                    [tuple(sum(([k + 1] * lengths[k] for k in row), []) + [0] * (capacity -
                     sum(lengths[k] for k in row)))]
                )
                for row in rows
            ]  # fmt: skip
            assert sorted(got) == sorted(want), (algorithm, row_length)


def test_grain_max_sequences_per_bin():
    # Grain's test_pack_max_sequences_per_bin: 6 and 6, at most 2 examples a row.
    keys = grain_keys(["inputs", "targets"])
    expected = [
        {"inputs": [1, 2, 3, 4, 5, 0], "targets": [10, 20, 30, 40, 0, 0],
         "inputs_segment_ids": [1, 1, 1, 2, 2, 0], "targets_segment_ids": [1, 2, 2, 2, 0, 0],
         "inputs_positions": [0, 1, 2, 0, 1, 0], "targets_positions": [0, 0, 1, 2, 0, 0]},
        {"inputs": [6, 0, 0, 0, 0, 0], "targets": [50, 60, 0, 0, 0, 0],
         "inputs_segment_ids": [1, 0, 0, 0, 0, 0], "targets_segment_ids": [1, 1, 0, 0, 0, 0],
         "inputs_positions": [0, 0, 0, 0, 0, 0], "targets_positions": [0, 1, 0, 0, 0, 0]},
    ]  # fmt: skip
    planner = jb.Pack(
        {"inputs": 6, "targets": 6}, 2, max_segments_per_row=2, algorithm="first_fit", open_rows=2
    )
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    assert packed_rows(ds, planner, keys) == as_rows(expected, keys)
    assert jb.plan(ds, planner).shapes[0].segments == 2
    with pytest.raises(ValueError, match="max_segments_per_row must be a positive integer"):
        jb.Pack({"inputs": 6, "targets": 6}, 2, max_segments_per_row=0)


def test_grain_zero_length_features_take_their_segment():
    # Grain's test_pack_sequences_with_zeros: an example empty in some
    # features (or all) still takes a segment; input_vectors has an inner axis.
    vectors = [np.empty((0, 3)), [[0, 1, 2], [1, 2, 3], [2, 3, 4]], [[3, 4, 5], [4, 5, 6]],
               [[5, 6, 7]], np.empty((0, 3))]  # fmt: skip
    ds = jb.Dataset.from_arrays(
        {
            "input_tokens": [np.asarray(v, np.int64) for v in [[8, 8], [1], [4, 5], [6], []]],
            "input_vectors": [np.asarray(v, np.int64).reshape(-1, 3) for v in vectors],
            "targets": [np.asarray(v, np.int64) for v in [[], [10], [20, 30, 40], [50, 60], []]],
        }
    )
    planner = jb.Pack(
        {"input_tokens": 5, "input_vectors": 3, "targets": 5},
        2,
        max_segments_per_row=3,
        algorithm="first_fit",
        open_rows=2,
    )
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        (batch,) = list(loader)
    b = {k: np.asarray(v).tolist() for k, v in batch.items()}
    assert b["input_tokens"] == [[8, 8, 1, 0, 0], [4, 5, 6, 0, 0]]
    assert b["input_tokens_segment_ids"] == [[1, 1, 2, 0, 0], [1, 1, 2, 0, 0]]
    assert b["input_tokens_positions"] == [[0, 1, 0, 0, 0], [0, 1, 0, 0, 0]]
    assert b["input_vectors"] == [[[0, 1, 2], [1, 2, 3], [2, 3, 4]],
                                  [[3, 4, 5], [4, 5, 6], [5, 6, 7]]]  # fmt: skip
    assert b["input_vectors_segment_ids"] == [[2, 2, 2], [1, 1, 2]]
    assert b["input_vectors_positions"] == [[0, 1, 2], [0, 1, 0]]
    assert b["targets"] == [[10, 0, 0, 0, 0], [20, 30, 40, 50, 60]]
    assert b["targets_segment_ids"] == [[2, 0, 0, 0, 0], [1, 1, 1, 2, 2]]
    assert b["targets_positions"] == [[0, 0, 0, 0, 0], [0, 1, 2, 0, 1]]
    # Grain shows no trace of the all-empty example 4; here it is segment 3
    # of the first row, of length 0 in every feature.
    assert b["example_index"] == [[0, 1, 4], [2, 3, -1]]
    assert b["targets_lengths"] == [[0, 1, 0], [3, 2, 0]]
    assert b["input_vectors_lengths"] == [[0, 3, 0], [2, 1, 0]]


# --- seqio: trim_and_pack_dataset ---------------------------------------------------------

SEQIO_CASES = [
    # test_trim_and_pack_dataset
    (
        {"inputs": [[7, 8, 5, 1], [8, 4, 9, 3, 1]], "targets": [[3, 9, 1], [4, 1]]},
        {"inputs": 10, "targets": 7},
        [{"inputs": [7, 8, 5, 1, 8, 4, 9, 3, 1, 0],
          "inputs_segment_ids": [1, 1, 1, 1, 2, 2, 2, 2, 2, 0],
          "inputs_positions": [0, 1, 2, 3, 0, 1, 2, 3, 4, 0],
          "targets": [3, 9, 1, 4, 1, 0, 0], "targets_positions": [0, 1, 2, 0, 1, 0, 0],
          "targets_segment_ids": [1, 1, 1, 2, 2, 0, 0]}],
    ),
    # test_trim_and_pack_dataset_no_eos
    (
        {"inputs": [[7, 8, 5], [8, 4, 9, 3]], "targets": [[3, 9], [4]]},
        {"inputs": 8, "targets": 5},
        [{"inputs": [7, 8, 5, 8, 4, 9, 3, 0], "inputs_segment_ids": [1, 1, 1, 2, 2, 2, 2, 0],
          "inputs_positions": [0, 1, 2, 0, 1, 2, 3, 0], "targets": [3, 9, 4, 0, 0],
          "targets_positions": [0, 1, 0, 0, 0], "targets_segment_ids": [1, 1, 2, 0, 0]}],
    ),
    # test_trim_and_pack_dataset_long_seq: the second example's inputs are trimmed
    (
        {"inputs": [[7, 8, 5, 6, 9, 4, 1], [8, 4, 9, 3, 5, 7, 9, 1]],
         "targets": [[3, 9, 1], [4, 1]]},
        {"inputs": 7, "targets": 3},
        [{"inputs": [7, 8, 5, 6, 9, 4, 1], "inputs_segment_ids": [1, 1, 1, 1, 1, 1, 1],
          "inputs_positions": [0, 1, 2, 3, 4, 5, 6], "targets": [3, 9, 1],
          "targets_positions": [0, 1, 2], "targets_segment_ids": [1, 1, 1]},
         {"inputs": [8, 4, 9, 3, 5, 7, 9], "inputs_segment_ids": [1, 1, 1, 1, 1, 1, 1],
          "inputs_positions": [0, 1, 2, 3, 4, 5, 6], "targets": [4, 1, 0],
          "targets_positions": [0, 1, 0], "targets_segment_ids": [1, 1, 0]}],
    ),
]  # fmt: skip


@pytest.mark.parametrize("features, lengths, expected", SEQIO_CASES)
@pytest.mark.parametrize("algorithm", ["first_fit", "best_fit"])
def test_seqio_trim_and_pack(features, lengths, expected, algorithm):
    keys = grain_keys(["inputs", "targets"])
    ds = dataset(**features)
    planner = jb.Pack(lengths, 2, too_long="truncate", algorithm=algorithm)
    assert sorted(packed_rows(ds, planner, keys)) == sorted(as_rows(expected, keys))
    plan = jb.plan(ds, planner)
    trimmed = sum(
        any(len(features[f][i]) > lengths[f] for f in lengths)
        for i in range(len(features["inputs"]))
    )
    assert plan.stats.truncated == trimmed
    real = sum(min(len(x), lengths[f]) for f in lengths for x in features[f])
    assert plan.stats.real_elements == real


# --- the slow reference packer and properties ---------------------------------------------


def reference_rows(lengths, caps, max_segments, algorithm, open_rows):
    """Rows of example ids, by brute force: `lengths[f][i]` (already cut),
    each row holding at most max_segments examples within every cap.
    Streaming (open_rows): in order, each example into the first (or the
    least-room-summed) open row where it fits, else a new row after closing
    the fullest when open_rows are open; a full row closes at once.
    Otherwise best fit takes the examples by total length, longest first,
    and every row stays open."""
    n, features = len(lengths[0]), range(len(caps))
    order = list(range(n))
    if algorithm == "best_fit" and not open_rows:
        order.sort(key=lambda i: -sum(lengths[f][i] for f in features))
    rows, out = [], []  # rows: [examples, room, open]

    def close(row):
        row[2] = False
        out.append(row[0])

    for i in order:
        need = [lengths[f][i] for f in features]
        fits = [r for r in rows if r[2] and all(r[1][f] >= need[f] for f in features)]
        if algorithm == "best_fit" and fits:
            fits = [min(fits, key=lambda r: sum(r[1]))]  # min keeps the earliest on ties
        if fits:
            row = fits[0]
        else:
            live = [r for r in rows if r[2]]
            if open_rows and len(live) >= open_rows:
                close(min(live, key=lambda r: sum(r[1])))
            row = [[], list(caps), True]
            rows.append(row)
        row[0].append(i)
        row[1] = [row[1][f] - need[f] for f in features]
        if len(row[0]) == max_segments:
            if open_rows:
                close(row)
            else:
                row[2] = False  # full: no longer a candidate, emitted in opening order
    if open_rows:
        return out + [r[0] for r in rows if r[2]]
    return [r[0] for r in rows]


def plan_rows(plan) -> list[list[int]]:
    return [[int(e) for e in row] for spec in plan for row in spec.rows if len(row)]


@st.composite
def packing_cases(draw):
    caps = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))
    n = draw(st.integers(1, 30))
    lengths = [draw(st.lists(st.integers(0, cap + 3), min_size=n, max_size=n)) for cap in caps]
    return caps, lengths


@settings(max_examples=60, deadline=None)
@given(
    packing_cases(),
    st.sampled_from(["first_fit", "best_fit"]),
    st.one_of(st.none(), st.integers(1, 4)),
    st.integers(1, 5),
)
def test_plan_equals_slow_reference(case, algorithm, open_rows, max_segments):
    caps, lengths = case
    names = [f"f{k}" for k in range(len(caps))]
    ds = dataset(
        **{name: [[1] * x for x in lens] for name, lens in zip(names, lengths, strict=True)}
    )
    planner = jb.Pack(
        dict(zip(names, caps, strict=True)),
        3,
        max_segments_per_row=max_segments,
        algorithm=algorithm,
        open_rows=open_rows,
        too_long="truncate",
    )
    cut = [[min(x, cap) for x in lens] for lens, cap in zip(lengths, caps, strict=True)]
    expected = reference_rows(cut, caps, max_segments, algorithm, open_rows)
    plan = jb.plan(ds, planner)
    assert plan_rows(plan) == expected
    assert plan.stats.real_elements == sum(map(sum, cut))


STRIDE = 1000  # token = example * STRIDE + position (+ feature offset)


@settings(max_examples=30, deadline=None)
@given(packing_cases(), st.sampled_from(["first_fit", "best_fit"]), st.booleans(), st.data())
def test_every_token_once_per_feature_and_segments_agree(case, algorithm, streaming, data):
    caps, lengths = case
    names = [f"f{k}" for k in range(len(caps))]
    tokens = {
        name: [np.arange(x, dtype=np.int64) + STRIDE * i + 100_000 * k for i, x in enumerate(lens)]
        for k, (name, lens) in enumerate(zip(names, lengths, strict=True))
    }
    ds = jb.Dataset.from_arrays(tokens)
    planner = jb.Pack(
        dict(zip(names, caps, strict=True)),
        2,
        algorithm=algorithm,
        too_long="truncate",
        open_rows=data.draw(st.integers(1, 3)) if streaming else None,
    )
    seen = {name: {} for name in names}
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        shapes = loader.shapes
        for batch in loader:
            index = np.asarray(batch["example_index"])
            for name, cap in zip(names, caps, strict=True):
                assert batch.shape.feature_length(name) == cap
                assert shapes[0].feature_length(name) == cap
                tok, seg = np.asarray(batch[name]), np.asarray(batch[f"{name}_segment_ids"])
                pos, lens = (
                    np.asarray(batch[f"{name}_positions"]),
                    np.asarray(batch[f"{name}_lengths"]),
                )
                assert tok.shape[1] == cap  # each feature its own row length
                for r in range(index.shape[0]):
                    start = 0
                    for s in range(index.shape[1]):
                        e, n = int(index[r, s]), int(lens[r, s])
                        if e < 0:
                            assert n == 0
                            continue
                        # Segment s is example e in this feature too: its tokens say so.
                        part = tok[r, start : start + n]
                        np.testing.assert_array_equal(part, tokens[name][e][:n])
                        assert (seg[r, start : start + n] == s + 1).all()
                        np.testing.assert_array_equal(pos[r, start : start + n], np.arange(n))
                        assert e not in seen[name]
                        seen[name][e] = n
                        start += n
                    assert start <= cap and (seg[r, start:] == 0).all()
    for name, lens, cap in zip(names, lengths, caps, strict=True):
        # Every example once, every token kept or counted as cut to its row length.
        assert seen[name] == {i: min(x, cap) for i, x in enumerate(lens)}


# --- options, key, shapes and refusals ----------------------------------------------------


def test_key_and_equality_do_not_depend_on_the_order_given():
    a = jb.Pack({"targets": 128, "inputs": 512}, 8)
    b = jb.Pack({"inputs": 512, "targets": 128}, 8)
    assert a == b and a.key == b.key
    assert "row_length={'inputs': 512, 'targets': 128}" in a.key
    assert jb.Pack(8, 2).key.startswith("Pack(row_length=8, rows_per_batch=2")


def test_shapes_report_each_feature():
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    planner = jb.Pack({"inputs": 4, "targets": 6}, 2)
    (shape,) = jb.plan(ds, planner).shapes
    assert shape.feature_lengths == (("inputs", 4), ("targets", 6))
    assert shape.length == 10 and shape.feature_length("targets") == 6
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        assert loader.shapes == [shape]
        batch = next(iter(loader))
        assert batch["inputs"].shape == (2, 4) and batch["targets"].shape == (2, 6)
        assert batch["inputs_segment_ids"].shape == (2, 4)
        assert batch["targets_positions"].shape == (2, 6)


def test_an_aligned_column_follows_its_feature_and_others_are_refused():
    inputs = [np.asarray(v, np.int64) for v in INPUTS]
    targets = [np.asarray(v, np.int64) for v in TARGETS]
    weights = [np.ones(len(v), np.float32) for v in TARGETS]
    ds = jb.Dataset.from_arrays(
        {"inputs": inputs, "targets": targets, "weights": weights}, aligned=[["targets", "weights"]]
    )
    planner = jb.Pack({"inputs": 4, "targets": 4}, 2, algorithm="first_fit")
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        batch = next(iter(loader))
    np.testing.assert_array_equal(batch["weights"], [[1, 1, 1, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(batch["weights_segment_ids"], batch["targets_segment_ids"])
    loose = jb.Dataset.from_arrays({"inputs": inputs, "targets": targets, "weights": weights})
    with pytest.raises(ValueError, match="ragged column 'weights' is none of them"):
        with jb.Loader(loose, planner, shuffle="none", epochs=1) as loader:
            next(iter(loader))
    with pytest.raises(ValueError, match="no ragged column of that name"):
        jb.Loader(ds, jb.Pack({"inputs": 4, "labels": 4}, 2), shuffle="none", epochs=1)


def test_refusals_name_why():
    with pytest.raises(ValueError, match='too_long="split" with several features'):
        jb.Pack({"inputs": 4, "targets": 4}, 2, too_long="split")
    with pytest.raises(ValueError, match='"concat_then_split" with several features'):
        jb.Pack({"inputs": 4, "targets": 4}, 2, algorithm="concat_then_split")
    with pytest.raises(ValueError, match=r"row_length\['targets'\] must be a positive integer"):
        jb.Pack({"inputs": 4, "targets": 0}, 2)
    with pytest.raises(ValueError, match="must map column names"):
        jb.Pack({1: 4}, 2)
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    with pytest.raises(ValueError, match="example 0 has 3 elements in feature 'inputs'"):
        jb.Loader(ds, jb.Pack({"inputs": 2, "targets": 4}, 2), shuffle="none", epochs=1)


def test_jaxbatch_plan_pack_reports_each_feature(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from jaxbatch._src.cli.main import main

    path = tmp_path / "t5.parquet"
    pq.write_table(pa.table({"inputs": INPUTS, "targets": TARGETS, "other": [[1], [2], [3]]}), path)
    argv = ["plan", str(path), "--pack", "inputs=4", "--pack", "targets=6", "--token-budget", "20"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "row_length={'inputs': 4, 'targets': 6}, rows_per_batch=2" in out
    assert "shape: inputs [2, 4], targets [2, 6]" in out
    assert "100.0%" not in out and "12 of 20" in out  # 6 + 6 real elements in 2 rows of 4 + 6
    assert main(["plan", str(path), "--pack", "labels=4"]) == 2
    assert "--pack names column 'labels'" in capsys.readouterr().err


def test_map_and_run_refuse_several_features(tmp_path):
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    planner = jb.Pack({"inputs": 4, "targets": 4}, 2)
    with pytest.raises(ValueError, match=r"jb.map: Pack\(row_length=\{'inputs': 4, 'targets': 4\}"):
        jb.map(lambda b: b["inputs"], ds, planner=planner)
    with jb.Loader(ds, planner) as loader, pytest.raises(ValueError, match="jb.map: Pack"):
        jb.map(lambda b: b["inputs"], loader)
    with pytest.raises(ValueError, match="jb.run: Pack.*several features"):
        jb.run(lambda b: b["inputs"], ds, tmp_path / "out", planner=planner)
    assert not (tmp_path / "out").exists()


# --- the Loader's restore, streaming and the Grain adapter ----------------------------------


def two_feature_tokens(n: int, seed: int) -> dict[str, list[np.ndarray]]:
    """Tokens that say where they come from: example * STRIDE + position
    (+ 100_000 in targets), lengths 0..9 and 0..5."""
    rng = np.random.default_rng(seed)
    return {
        name: [np.arange(x, dtype=np.int64) + STRIDE * i + offset for i, x in enumerate(lens)]
        for name, lens, offset in (
            ("inputs", rng.integers(0, 10, n), 0),
            ("targets", rng.integers(0, 6, n), 100_000),
        )
    }


def batches_of(loader) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in loader]


def assert_same_batches(expected, got):
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


FEATURES_PLANNER = jb.Pack({"inputs": 12, "targets": 8}, 2, algorithm="best_fit")


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_restore_mid_epoch_continues_the_same_stream(steps):
    import json

    ds = jb.Dataset.from_arrays(two_feature_tokens(60, 1))
    args = dict(shuffle=True, seed=3, epochs=2, num_threads=2)
    with jb.Loader(ds, FEATURES_PLANNER, **args) as whole:
        expected = batches_of(whole)
    with jb.Loader(ds, FEATURES_PLANNER, **args) as first:
        head = [{k: np.array(v) for k, v in next(first).items()} for _ in range(steps)]
        state = json.loads(json.dumps(first.get_state()))
    with jb.Loader(ds, FEATURES_PLANNER, state=state, **args) as resumed:
        got = head + batches_of(resumed)
    assert_same_batches(expected, got)
    # A state saved with other row lengths is another stream: refused, not continued.
    other = jb.Pack({"inputs": 12, "targets": 9}, 2, algorithm="best_fit")
    with pytest.raises(ValueError, match="planner"):
        jb.Loader(ds, other, state=state, **args)


def test_streamed_file_matches_the_whole_file(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    tokens = two_feature_tokens(200, 2)
    path = tmp_path / "data.parquet"
    table = pa.table({k: pa.array(v, pa.list_(pa.int64())) for k, v in tokens.items()})
    pq.write_table(table, path, row_group_size=20)
    planner = jb.Pack({"inputs": 12, "targets": 8}, 2, open_rows=4)
    args = dict(shuffle="block", block_size=40, seed=2)
    with jb.Loader(path, planner, **args) as whole_loader:
        whole = batches_of(whole_loader)
    with jb.Loader(path, planner, stream=True, host_memory_limit=64_000, **args) as streamed:
        got = batches_of(streamed)
    assert_same_batches(whole, got)
    seen = sorted(int(e) for b in got for e in b["example_index"].ravel() if e >= 0)
    assert seen == list(range(200))


def test_grain_batch_iter_dataset_packs_every_feature():
    grain = pytest.importorskip("grain")
    jbg = pytest.importorskip("jaxbatch.grain")
    tokens = two_feature_tokens(30, 3)
    records = [{"inputs": i, "targets": t} for i, t in zip(*tokens.values(), strict=True)]
    source = grain.MapDataset.source(records)
    planner = jb.Pack({"inputs": 12, "targets": 8}, 2, algorithm="first_fit")
    window = 10
    seen: dict[str, dict[int, np.ndarray]] = {"inputs": {}, "targets": {}}
    segments = 0
    for batch in jbg.BatchIterDataset(source, planner, window=window):
        index = np.asarray(batch["example_index"])
        segments += int((index >= 0).sum())
        for name, cap, offset in (("inputs", 12, 0), ("targets", 8, 100_000)):
            values, lens = np.asarray(batch[name]), np.asarray(batch[f"{name}_lengths"])
            assert values.shape[1] == cap
            for r in range(index.shape[0]):
                start = 0
                for s in range(index.shape[1]):
                    n = int(lens[r, s])
                    part = values[r, start : start + n]
                    if n:  # Its tokens name the record; example_index is its place in the window.
                        example = int(part[0] - offset) // STRIDE
                        assert index[r, s] == example % window
                        assert example not in seen[name]
                        seen[name][example] = part
                    start += n
    assert segments == len(records)  # every record once, an empty one too
    for name in ("inputs", "targets"):
        want = {e: t for e, t in enumerate(tokens[name]) if len(t)}
        assert sorted(seen[name]) == sorted(want)
        for e, got in seen[name].items():
            np.testing.assert_array_equal(got, want[e])
