"""tensor2tensor's packing cases against jb.Pack, with t2t's numbers.

Ported: tensor2tensor/data_generators/ops/pack_sequences_ops_test.py (the
PackSequences2 / PackSequencesK op: the fixture at row lengths 3-7 and 3/4,
the three-feature case with an inner axis, int64 and bfloat16, and the
random comparison) and generator_utils_test.py (pack_examples and
pack_dataset on the same fixture).

t2t's packers and their jaxbatch configuration (read from
pack_sequences_ops.cc and generator_utils.py at tensor2tensor HEAD):
  * The op is first fit in input order over the rows it has created, looking
    only at the last 1000 (older rows are never reconsidered); rows come out
    in the order they were created. That is ``Pack(algorithm="first_fit")``:
    jaxbatch's first fit keeps every row open and emits rows in opening
    order, so with at most 1000 rows the rows and their order are t2t's.
  * ``pack_dataset(use_custom_ops=True)`` runs the op on padded batches of
    ``length`` examples, each packed on its own, after cutting every
    sequence to ``length``: ``lookahead=length, too_long="truncate"``.
  * ``pack_examples(queue_size=K)`` and ``pack_dataset(use_custom_ops=False)``
    (SequenceDatasetPacker, a queue of 10 rows) keep K rows open and, when an
    example fits none, close the OLDEST. ``Pack(open_rows=K)`` closes the
    FULLEST instead. The two agree until a row must close; where they part,
    test_bounded_rows_close_the_oldest_in_t2t_the_fullest_here says how.
Names: t2t's ``<k>_segmentation`` is ``<k>_segment_ids`` here and
``<k>_position`` is ``<k>_positions``; ``<k>_packed`` is ``<k>``.

t2t finds an example's length by counting the non-zero tokens of its padded
row (0 is padding); jaxbatch examples are ragged arrays with their own
lengths, so the ports strip t2t's trailing padding, and the cases where the
conventions part (a 0 inside a sequence, an empty example, a sequence
longer than the row) are asserted below with what each side does."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import jaxbatch as jb

# t2t's fixture, padded as t2t gives it to the op.
INPUTS = [[1, 2, 3], [4, 5, 0], [6, 0, 0]]
TARGETS = [[10, 0, 0], [20, 30, 40], [50, 60, 0]]


def unpad(matrix) -> list[np.ndarray]:
    """t2t's padded rows as ragged examples: the trailing zeros are padding
    (its fixtures have no 0 inside a sequence)."""
    out = []
    for row in np.asarray(matrix):
        nonzero = np.flatnonzero(row.reshape(len(row), -1).any(axis=1))
        out.append(row[: nonzero[-1] + 1 if nonzero.size else 0])
    return out


def dataset(dtype=np.int64, **padded) -> jb.Dataset:
    return jb.Dataset.from_arrays(
        {k: [np.asarray(v, dtype) for v in unpad(m)] for k, m in padded.items()}
    )


def outputs(ds, planner, features) -> dict[str, list]:
    """The loader's packed rows in order, under t2t's output names; the
    padding rows of a last batch (no example) are left out."""
    names = {f"{f}{s}": f"{f}{t}" for f in features for s, t in T2T_SUFFIXES}
    got: dict[str, list] = {t2t: [] for t2t in names.values()}
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        for batch in loader:
            real = (np.asarray(batch["example_index"]) >= 0).any(axis=1)
            for ours, t2t in names.items():
                got[t2t] += np.asarray(batch[ours])[real].tolist()
    return got


T2T_SUFFIXES = [("", "_packed"), ("_segment_ids", "_segmentation"), ("_positions", "_position")]

# do_test_pack_sequences_length{3,4,5,6,7} and ..._different_lengths:
# (inputs_max_length, targets_max_length) -> t2t's expected outputs.
FIXTURE_CASES = {
    (3, 3): {
        "inputs_packed": [[1, 2, 3], [4, 5, 0], [6, 0, 0]],
        "inputs_segmentation": [[1, 1, 1], [1, 1, 0], [1, 0, 0]],
        "inputs_position": [[0, 1, 2], [0, 1, 0], [0, 0, 0]],
        "targets_packed": [[10, 0, 0], [20, 30, 40], [50, 60, 0]],
        "targets_segmentation": [[1, 0, 0], [1, 1, 1], [1, 1, 0]],
        "targets_position": [[0, 0, 0], [0, 1, 2], [0, 1, 0]],
    },
    (4, 4): {
        "inputs_packed": [[1, 2, 3, 6], [4, 5, 0, 0]],
        "inputs_segmentation": [[1, 1, 1, 2], [1, 1, 0, 0]],
        "inputs_position": [[0, 1, 2, 0], [0, 1, 0, 0]],
        "targets_packed": [[10, 50, 60, 0], [20, 30, 40, 0]],
        "targets_segmentation": [[1, 2, 2, 0], [1, 1, 1, 0]],
        "targets_position": [[0, 0, 1, 0], [0, 1, 2, 0]],
    },
    (5, 5): {
        "inputs_packed": [[1, 2, 3, 4, 5], [6, 0, 0, 0, 0]],
        "inputs_segmentation": [[1, 1, 1, 2, 2], [1, 0, 0, 0, 0]],
        "inputs_position": [[0, 1, 2, 0, 1], [0, 0, 0, 0, 0]],
        "targets_packed": [[10, 20, 30, 40, 0], [50, 60, 0, 0, 0]],
        "targets_segmentation": [[1, 2, 2, 2, 0], [1, 1, 0, 0, 0]],
        "targets_position": [[0, 0, 1, 2, 0], [0, 1, 0, 0, 0]],
    },
    (6, 6): {
        "inputs_packed": [[1, 2, 3, 4, 5, 6]],
        "inputs_segmentation": [[1, 1, 1, 2, 2, 3]],
        "inputs_position": [[0, 1, 2, 0, 1, 0]],
        "targets_packed": [[10, 20, 30, 40, 50, 60]],
        "targets_segmentation": [[1, 2, 2, 2, 3, 3]],
        "targets_position": [[0, 0, 1, 2, 0, 1]],
    },
    (7, 7): {
        "inputs_packed": [[1, 2, 3, 4, 5, 6, 0]],
        "inputs_segmentation": [[1, 1, 1, 2, 2, 3, 0]],
        "inputs_position": [[0, 1, 2, 0, 1, 0, 0]],
        "targets_packed": [[10, 20, 30, 40, 50, 60, 0]],
        "targets_segmentation": [[1, 2, 2, 2, 3, 3, 0]],
        "targets_position": [[0, 0, 1, 2, 0, 1, 0]],
    },
    (3, 4): {
        "inputs_packed": [[1, 2, 3], [4, 5, 0], [6, 0, 0]],
        "inputs_segmentation": [[1, 1, 1], [1, 1, 0], [1, 0, 0]],
        "inputs_position": [[0, 1, 2], [0, 1, 0], [0, 0, 0]],
        "targets_packed": [[10, 0, 0, 0], [20, 30, 40, 0], [50, 60, 0, 0]],
        "targets_segmentation": [[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]],
        "targets_position": [[0, 0, 0, 0], [0, 1, 2, 0], [0, 1, 0, 0]],
    },
}

# The configurations that are t2t's op on this fixture (see the module
# docstring): first fit over all rows, over t2t's 1000-row window as open
# rows (no row ever has to close here), and over windows of `length`
# examples as pack_dataset(use_custom_ops=True) feeds the op.
OP_CONFIGS = {
    "all_rows": lambda lengths: {},
    "open_rows_1000": lambda lengths: {"open_rows": 1000},
    "lookahead_length": lambda lengths: {"lookahead": max(lengths)},
}


@pytest.mark.parametrize("config", sorted(OP_CONFIGS))
@pytest.mark.parametrize("lengths", sorted(FIXTURE_CASES))
def test_pack_sequences_fixture(lengths, config):
    # test_pack_sequences2 and test_pack_sequences_k run these same cases
    # through both ops; jaxbatch has one packer. Rows compare in order: t2t
    # emits them in the order it opens them, as jaxbatch's first fit does.
    row_length = {"inputs": lengths[0], "targets": lengths[1]}
    planner = jb.Pack(row_length, 2, algorithm="first_fit", **OP_CONFIGS[config](lengths))
    got = outputs(dataset(inputs=INPUTS, targets=TARGETS), planner, ["inputs", "targets"])
    assert got == FIXTURE_CASES[lengths]


def test_pack_sequences_k_multi_input():
    # Three features, one with an inner axis of 3: a vector is padding in
    # t2t when it is all zeros, so [0, 1, 2] is a real first vector.
    input_tokens = [[1, 2, 3], [4, 5, 0], [6, 0, 0]]
    input_vectors = [
        [[0, 1, 2], [1, 2, 3], [2, 3, 4]],
        [[3, 4, 5], [4, 5, 6], [0, 0, 0]],
        [[5, 6, 7], [0, 0, 0], [0, 0, 0]],
    ]
    ds = dataset(input_tokens=input_tokens, input_vectors=input_vectors, targets=TARGETS)
    planner = jb.Pack(
        {"input_tokens": 5, "input_vectors": 3, "targets": 5}, 2, algorithm="first_fit"
    )
    got = outputs(ds, planner, ["input_tokens", "input_vectors", "targets"])
    assert got == {
        "input_tokens_packed": [[1, 2, 3, 0, 0], [4, 5, 6, 0, 0]],
        "input_vectors_packed": [
            [[0, 1, 2], [1, 2, 3], [2, 3, 4]],
            [[3, 4, 5], [4, 5, 6], [5, 6, 7]],
        ],
        "input_tokens_segmentation": [[1, 1, 1, 0, 0], [1, 1, 2, 0, 0]],
        "input_vectors_segmentation": [[1, 1, 1], [1, 1, 2]],
        "input_tokens_position": [[0, 1, 2, 0, 0], [0, 1, 0, 0, 0]],
        "input_vectors_position": [[0, 1, 2], [0, 1, 0]],
        "targets_packed": [[10, 0, 0, 0, 0], [20, 30, 40, 50, 60]],
        "targets_segmentation": [[1, 0, 0, 0, 0], [1, 1, 1, 2, 2]],
        "targets_position": [[0, 0, 0, 0, 0], [0, 1, 2, 0, 1]],
    }


@pytest.mark.parametrize("dtype", [np.int64, ml_dtypes.bfloat16], ids=["int64", "bfloat16"])
def test_pack_sequences_k_one_feature_keeps_its_dtype(dtype):
    # test_pack_sequences_k_int64 and test_pack_sequences_k_bfloat16: one
    # feature, row length 5, the packed tokens keep the column's dtype.
    ds = dataset(dtype, inputs=INPUTS)
    for row_length in (5, {"inputs": 5}):
        planner = jb.Pack(row_length, 2, algorithm="first_fit")
        with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
            (batch,) = list(loader)
        assert np.asarray(batch["inputs"]).dtype == dtype
        assert np.asarray(batch["inputs"]).astype(np.int64).tolist() == [
            [1, 2, 3, 4, 5],
            [6, 0, 0, 0, 0],
        ]
        assert np.asarray(batch["inputs_segment_ids"]).tolist() == [
            [1, 1, 1, 2, 2],
            [1, 0, 0, 0, 0],
        ]
        assert np.asarray(batch["inputs_positions"]).tolist() == [
            [0, 1, 2, 0, 1],
            [0, 0, 0, 0, 0],
        ]


# --- a reference of t2t's op, written from pack_sequences_ops.cc ------------------------


def t2t_rows(lengths, caps, window=1000) -> list[list[int]]:
    """Example ids per row as t2t's op assigns them: in order, each example
    into the first of the last `window` rows created (None: all) where every
    feature fits, else into a new row; rows in creation order. `lengths[f][i]`
    is example i's length in feature f."""
    rows, room = [], []
    for i in range(len(lengths[0])):
        need = [lens[i] for lens in lengths]
        first = 0 if window is None else max(0, len(rows) - window)
        for r in range(first, len(rows) + 1):
            if r == len(rows):
                rows.append([])
                room.append(list(caps))
            if all(n <= left for n, left in zip(need, room[r], strict=True)):
                rows[r].append(i)
                room[r] = [left - n for n, left in zip(need, room[r], strict=True)]
                break
    return rows


def t2t_matrices(examples, rows, cap) -> dict[str, list]:
    """One feature's packed, segmentation and position matrices for `rows`,
    laid out as the op lays them out (segment k + 1 for a row's k-th example,
    zeros after the last token)."""
    packed = np.zeros((len(rows), cap), np.int64)
    segmentation = np.zeros((len(rows), cap), np.int32)
    position = np.zeros((len(rows), cap), np.int32)
    for r, row in enumerate(rows):
        at = 0
        for k, i in enumerate(row):
            n = len(examples[i])
            packed[r, at : at + n] = examples[i]
            segmentation[r, at : at + n] = k + 1
            position[r, at : at + n] = np.arange(n)
            at += n
    return {"_packed": packed.tolist(), "_segmentation": segmentation.tolist(),
            "_position": position.tolist()}  # fmt: skip


def random_padded(rng, n, seqlen) -> np.ndarray:
    """t2t's random rows: 1 to seqlen tokens in 1..9, then zeros."""
    out = np.zeros((n, seqlen), np.int64)
    for row in out:
        pads = rng.integers(0, seqlen)
        row[: seqlen - pads] = rng.integers(1, 10, size=seqlen - pads)
    return out


@pytest.mark.parametrize("seed", range(10))
def test_random_inputs(seed):
    # t2t's test_random_inputs draws, per repetition, 900-1100 examples of up
    # to 1-9 tokens and row lengths at least as long, and checks its two ops
    # agree; here jaxbatch's first fit must equal the reference of the op.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(900, 1100))
    input_seqlen, target_seqlen = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    inputs, targets = random_padded(rng, n, input_seqlen), random_padded(rng, n, target_seqlen)
    caps = [int(rng.integers(input_seqlen, input_seqlen + 10)),
            int(rng.integers(target_seqlen, target_seqlen + 10))]  # fmt: skip
    examples = [unpad(inputs), unpad(targets)]
    lengths = [[len(x) for x in feature] for feature in examples]
    rows = t2t_rows(lengths, caps)
    # The op's 1000-row window never turned an example away from an older
    # row here, so "every row open" is the op exactly.
    assert rows == t2t_rows(lengths, caps, window=None)
    expected = {}
    for name, feature, cap in zip(("inputs", "targets"), examples, caps, strict=True):
        expected |= {name + s: m for s, m in t2t_matrices(feature, rows, cap).items()}
    ds = dataset(inputs=inputs, targets=targets)
    planner = jb.Pack({"inputs": caps[0], "targets": caps[1]}, 64, algorithm="first_fit")
    assert outputs(ds, planner, ["inputs", "targets"]) == expected


# --- where t2t's conventions and jaxbatch's part --------------------------------------


def plan_rows(ds, planner) -> list[list[int]]:
    return [[int(e) for e in row] for spec in jb.plan(ds, planner) for row in spec.rows if len(row)]


def test_bounded_rows_close_the_oldest_in_t2t_the_fullest_here():
    # pack_examples(queue_size=2), SequenceDatasetPacker's queue and the op's
    # window all drop the OLDEST row when an example fits none; open_rows
    # closes the FULLEST (the oldest may still have room). Rows of 10,
    # lengths 2, 9, 9, 1: example 2 fits neither open row; t2t gives up the
    # row of example 0 (8 free), jaxbatch the row of example 1 (1 free), so
    # example 3 joins a different row. Same row count here; each side is
    # asserted against its own rule.
    lengths = [2, 9, 9, 1]
    ds = jb.Dataset.from_arrays({"tokens": [np.ones(n, np.int64) for n in lengths]})
    assert t2t_rows([lengths], [10], window=2) == [[0], [1, 3], [2]]
    assert plan_rows(ds, jb.Pack(10, 1, algorithm="first_fit", open_rows=2)) == [
        [1],  # closed first, when example 2 came
        [0, 3],
        [2],
    ]
    # With every row open both are plain first fit.
    expected = t2t_rows([lengths], [10], window=None)
    assert expected == [[0, 3], [1], [2]]
    assert plan_rows(ds, jb.Pack(10, 1, algorithm="first_fit")) == expected


def test_an_empty_example_takes_a_segment_as_in_t2t():
    # The op gives an all-padding example a row and a segment number with no
    # tokens (segment_counter still counts it), so the next example of that
    # row is segment 3; jaxbatch keeps the empty example as segment 2 of
    # length 0 the same way. (The t2t rows follow from the op's code; t2t has
    # no test of it.)
    ds = dataset(inputs=[[1, 0], [0, 0], [2, 3]], targets=[[4, 0], [0, 0], [5, 0]])
    planner = jb.Pack({"inputs": 5, "targets": 5}, 1, algorithm="first_fit")
    got = outputs(ds, planner, ["inputs", "targets"])
    assert got == {
        "inputs_packed": [[1, 2, 3, 0, 0]],
        "inputs_segmentation": [[1, 3, 3, 0, 0]],
        "inputs_position": [[0, 0, 1, 0, 0]],
        "targets_packed": [[4, 5, 0, 0, 0]],
        "targets_segmentation": [[1, 3, 0, 0, 0]],
        "targets_position": [[0, 0, 0, 0, 0]],
    }
    with jb.Loader(ds, planner, shuffle="none", epochs=1) as loader:
        (batch,) = list(loader)
    assert np.asarray(batch["example_index"])[0, :3].tolist() == [0, 1, 2]


def test_a_zero_token_is_a_token_here_and_padding_in_t2t():
    # t2t measures an example by counting its non-zero tokens, then copies
    # that many from the front: [7, 0, 8] counts 2 and packs as [7, 0] (8 is
    # lost), and SequenceDatasetPacker marks every 0 with segment 0. jaxbatch
    # examples carry their lengths, so the 0 is an ordinary token of segment
    # 1 and every token arrives.
    ds = jb.Dataset.from_arrays({"inputs": [np.asarray([7, 0, 8], np.int64)]})
    got = outputs(ds, jb.Pack(5, 1, algorithm="first_fit"), ["inputs"])
    assert got == {
        "inputs_packed": [[7, 0, 8, 0, 0]],
        "inputs_segmentation": [[1, 1, 1, 0, 0]],
        "inputs_position": [[0, 1, 2, 0, 0]],
    }


def test_too_long_truncates_like_the_op_and_skips_like_the_dataset_packer():
    # The op measures only the first max_length columns, so a longer example
    # is cut to its row length: too_long="truncate". SequenceDatasetPacker
    # (pack_dataset without custom ops) filters such examples out:
    # too_long="skip". jaxbatch's default refuses them, naming the example.
    ds = dataset(inputs=[[1, 2, 3, 4], [5, 0, 0, 0], [6, 7, 0, 0]])
    truncated = outputs(ds, jb.Pack(3, 2, algorithm="first_fit", too_long="truncate"), ["inputs"])
    assert truncated == {
        "inputs_packed": [[1, 2, 3], [5, 6, 7]],
        "inputs_segmentation": [[1, 1, 1], [1, 2, 2]],
        "inputs_position": [[0, 1, 2], [0, 0, 1]],
    }
    skipped = outputs(ds, jb.Pack(3, 2, algorithm="first_fit", too_long="skip"), ["inputs"])
    assert skipped == {
        "inputs_packed": [[5, 6, 7]],
        "inputs_segmentation": [[1, 2, 2]],
        "inputs_position": [[0, 0, 1]],
    }
    with pytest.raises(ValueError, match="example 0"):
        outputs(ds, jb.Pack(3, 2, algorithm="first_fit"), ["inputs"])


# --- generator_utils_test.py: pack_examples and pack_dataset ------------------------------


def test_pack_examples_queue_of_two():
    # testPacking: pack_examples(has_inputs=True, packed_length=5,
    # queue_size=2, spacing=0) yields rows without padding (its reference is
    # trim_right of the padded rows); no row has to close before the end, so
    # open_rows=2 gives its rows in its order, padded to 5.
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    planner = jb.Pack({"inputs": 5, "targets": 5}, 2, algorithm="first_fit", open_rows=2)
    got = outputs(ds, planner, ["inputs", "targets"])
    assert got == FIXTURE_CASES[(5, 5)]
    unpadded = {"inputs": [[1, 2, 3, 4, 5], [6]], "targets": [[10, 20, 30, 40], [50, 60]]}
    for feature, trimmed in unpadded.items():
        real = [sum(s > 0 for s in row) for row in got[f"{feature}_segmentation"]]
        assert [row[:n] for row, n in zip(got[f"{feature}_packed"], real, strict=True)] == trimmed


@pytest.mark.parametrize("use_custom_ops", [False, True])
def test_pack_dataset(use_custom_ops):
    # testDatasetPacking: pack_dataset(length=5, keys=("inputs", "targets")).
    # Without custom ops it is SequenceDatasetPacker (a queue of 10 rows,
    # the oldest closing): open_rows=10, too-long examples skipped. With them
    # the op packs each padded batch of `length` examples, sequences cut to
    # `length`: lookahead=5, too_long="truncate". Both give the length-5 rows.
    ds = dataset(inputs=INPUTS, targets=TARGETS)
    lengths = {"inputs": 5, "targets": 5}
    if use_custom_ops:
        planner = jb.Pack(lengths, 2, algorithm="first_fit", lookahead=5, too_long="truncate")
    else:
        planner = jb.Pack(lengths, 2, algorithm="first_fit", open_rows=10, too_long="skip")
    assert outputs(ds, planner, ["inputs", "targets"]) == FIXTURE_CASES[(5, 5)]
