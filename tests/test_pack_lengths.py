"""Pack(row_length=[96, 256]): one column packed into a few row lengths, with
a token budget per batch, through jb.plan and the Loader (shuffle, shard,
restore, loader.shapes).

Every token carries its own address (example * 1000 + position), so a batch
says by itself which tokens it holds: the reference is the data, and each
segment's row length is checked against the smallest that holds it."""

from __future__ import annotations

import bisect
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import balanced_rows

import jaxbatch as jb

STRIDE = 1000


def dataset(lengths) -> jb.Dataset:
    return jb.Dataset.from_arrays(
        {"tokens": [np.arange(n, dtype=np.int32) + STRIDE * i for i, n in enumerate(lengths)]}
    )


def collected(loader) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in b.items()} for b in loader]


def segments_of(batches, row_lengths, budget=None) -> dict[int, list[np.ndarray]]:
    """{example: [its tokens, per segment]}, checking each batch against the
    rules: a row length of the list, rows within the budget, each segment
    with positions from 0 in a row no longer than needed unless borrowed."""
    seen: dict[int, list[np.ndarray]] = {}
    borrowing: dict[int, int] = {}
    for batch in batches:
        tok, seg = batch["tokens"], batch["tokens_segment_ids"]
        pos, lens, index = (
            batch["tokens_positions"],
            batch["tokens_lengths"],
            batch["example_index"],
        )
        rows, length = tok.shape
        assert length in row_lengths
        if budget is not None:  # the budget's rows, or fewer when balanced
            assert rows <= budget // length and rows * length <= budget
        borrows = False
        for r in range(rows):
            start = 0
            for s in range(index.shape[1]):
                n = int(lens[r, s])
                if index[r, s] < 0:
                    assert n == 0
                    continue
                part = tok[r, start : start + n]
                np.testing.assert_array_equal(pos[r, start : start + n], np.arange(n))
                assert (seg[r, start : start + n] == s + 1).all()
                if n:
                    assert int(part[0]) // STRIDE == index[r, s]
                # The smallest row length that holds the segment, or a longer
                # one only in the one batch per row length that is filled.
                own = row_lengths[min(bisect.bisect_left(row_lengths, n), len(row_lengths) - 1)]
                assert own <= length
                borrows |= own < length
                seen.setdefault(int(index[r, s]), []).append(part.copy())
                start += n
            assert start <= length and (seg[r, start:] == 0).all()
        borrowing[length] = borrowing.get(length, 0) + borrows
    assert all(count <= 1 for count in borrowing.values()), borrowing
    return seen


def assert_every_example_once(seen, lengths) -> None:
    assert sorted(seen) == list(range(len(lengths)))
    for example, parts in seen.items():
        assert len(parts) == 1
        expected = np.arange(lengths[example]) + STRIDE * example
        np.testing.assert_array_equal(parts[0], expected)


row_length_lists = st.lists(st.integers(1, 64), min_size=1, max_size=3, unique=True).map(sorted)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 64), min_size=1, max_size=50),
    row_lengths=row_length_lists,
    budget=st.one_of(st.none(), st.integers(64, 400)),
    algorithm=st.sampled_from(["first_fit", "best_fit"]),
    seed=st.integers(0, 3),
)
def test_every_example_once_in_the_smallest_row_length(
    lengths, row_lengths, budget, algorithm, seed
):
    lengths = [min(n, row_lengths[-1]) for n in lengths]
    sizes = dict(token_budget=budget) if budget else dict(rows_per_batch=3)
    planner = jb.Pack(row_lengths, algorithm=algorithm, **sizes)
    with jb.Loader(dataset(lengths), planner, shuffle=True, seed=seed) as loader:
        shapes = {(s.rows, s.length) for s in loader.shapes}
        batches = collected(loader)
    assert {b["tokens"].shape for b in batches} == shapes
    assert len(shapes) <= len(row_lengths)
    assert_every_example_once(segments_of(batches, row_lengths, budget), lengths)
    if budget is not None and algorithm == "best_fit":
        # Best fit's rows follow the lengths alone: a budget's rows are
        # spread evenly over each row length's batches.
        for rows, length in shapes:
            used = sum(
                int((b["example_index"][:, 0] >= 0).sum())
                for b in batches
                if b["tokens"].shape[1] == length
            )
            assert rows == balanced_rows(used, budget // length), (rows, length, used)


def test_short_rows_fill_the_long_row_lengths_last_batch():
    # As in pack_lengths_test.cc: ten texts of 20 tokens and three of 200 are
    # one batch of four rows of 256, not a padded batch per row length.
    lengths = [20] * 10 + [200] * 3
    stats = jb.plan(lengths, jb.Pack([96, 256], 4)).stats
    assert (stats.batches, stats.shapes) == (1, 1)
    assert jb.plan(lengths, jb.Pack([96, 256], 4, remainder="keep")).stats.batches == 2


def test_shuffle_is_deterministic_and_shards_hold_every_example_once():
    lengths = list(np.random.default_rng(0).integers(1, 256, 300))
    planner = jb.Pack([96, 256], token_budget=1024)
    runs = []
    for _ in range(2):
        with jb.Loader(dataset(lengths), planner, shuffle=True, seed=7) as loader:
            runs.append(collected(loader))
    for a, b in zip(*runs, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    seen: dict = {}
    for i in range(3):
        with jb.Loader(dataset(lengths), planner, shard=(i, 3), shuffle=True, seed=1) as loader:
            part = segments_of(collected(loader), [96, 256], 1024)
        assert not set(part) & set(seen)
        seen.update(part)
    assert_every_example_once(seen, lengths)


def test_restore_continues_the_same_stream():
    lengths = list(np.random.default_rng(1).integers(1, 256, 200))
    planner = jb.Pack([64, 128, 256], token_budget=1024)
    args = dict(shuffle=True, seed=4, epochs=2, num_threads=2)
    with jb.Loader(dataset(lengths), planner, **args) as whole:
        expected = collected(whole)
    with jb.Loader(dataset(lengths), planner, **args) as first:
        head = [{k: np.array(v) for k, v in next(first).items()} for _ in range(5)]
        state = json.loads(json.dumps(first.get_state()))
    assert "row_length=[64, 128, 256]" in state["planner"]
    assert "token_budget=1024" in state["planner"]
    with jb.Loader(dataset(lengths), planner, state=state, **args) as resumed:
        got = head + collected(resumed)
    assert len(got) == len(expected)
    for a, b in zip(expected, got, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_split_cuts_at_the_largest_row_length():
    lengths = [700, 30, 260, 90]
    planner = jb.Pack([96, 256], token_budget=1024, too_long="split")
    with jb.Loader(dataset(lengths), planner) as loader:
        batches = collected(loader)
    tokens = np.concatenate([b["tokens"][b["tokens_segment_ids"] > 0] for b in batches])
    assert sorted(tokens.tolist()) == sorted(
        (np.arange(n) + STRIDE * i).tolist()[k] for i, n in enumerate(lengths) for k in range(n)
    )
    for b in batches:
        assert (b["tokens_lengths"] <= 256).all()


def test_the_engine_keeps_the_rules():
    assert jb.Pack((96, 256), 8).key.startswith("Pack(row_length=[96, 256], rows_per_batch=8")
    with pytest.raises(ValueError, match="strictly increasing"):
        jb.Pack([256, 96], 8)
    with pytest.raises(ValueError, match="not both"):
        jb.Pack([96, 256], 8, token_budget=4096)
    with pytest.raises(ValueError, match="rows_per_batch must be a positive integer"):
        jb.Pack([96, 256])
    with pytest.raises(ValueError, match="holds no row of row_length 256"):
        jb.Pack([96, 256], token_budget=200)
    with pytest.raises(ValueError, match="concat_then_split"):
        jb.Pack([96, 256], 8, algorithm="concat_then_split")
    with pytest.raises(ValueError, match="longer than row_length 256"):
        jb.plan([10, 300], jb.Pack([96, 256], 8))
    # A single row length takes a token budget too: 4096 // 512 rows.
    assert jb.plan([500] * 24, jb.Pack(512, token_budget=4096)).shapes[0].rows == 8


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 64), min_size=1, max_size=60),
    max_shapes=st.integers(1, 4),
    attention=st.sampled_from([0, 34, 90]),
)
def test_chosen_row_lengths_pack_like_the_given_list(lengths, max_shapes, attention):
    chooser = jb.Pack(64, token_budget=256, max_shapes=max_shapes, attention_percent=attention)
    shapes = jb.plan(lengths, chooser).shapes
    chosen = sorted({s.length for s in shapes} | {64})
    assert len(chosen) <= max_shapes and chosen[-1] == 64
    with jb.Loader(dataset(lengths), chooser, shuffle=True, seed=2) as loader:
        batches = collected(loader)
    assert_every_example_once(segments_of(batches, chosen, 256), lengths)


def test_the_chooser_prefers_short_rows_for_short_texts_and_is_keyed():
    # Most texts short, a few long: two row lengths, the short one near them.
    lengths = [30] * 200 + [250] * 10
    planner = jb.Pack(256, token_budget=4096, max_shapes=2)
    assert sorted(s.length for s in jb.plan(lengths, planner).shapes) == [30, 256]
    assert "max_shapes=2" in planner.key and "attention_percent" not in planner.key
    with pytest.raises(ValueError, match="not both"):
        jb.Pack([96, 256], 8, max_shapes=2)
    with pytest.raises(ValueError, match="attention_percent must be in 0..99"):
        jb.Pack(256, 8, max_shapes=2, attention_percent=100)
