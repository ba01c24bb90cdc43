"""FixedBuckets(too_long="split"): an example longer than the last boundary
cut into pieces of that length, each padded into the bucket its length falls
in, through the Loader (shuffle, shard, restore, streaming) and Grain, with
unbatch / join_pieces (tests/test_pack_split.py's unbatch case covers
FixedBuckets too), against a NumPy reference of the buckets.

Every token carries its own address (example * 1000 + position), so a batch
says by itself which tokens it holds: the reference is the data."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import balanced_rows

import jaxbatch as jb

STRIDE = 1000  # token = example * STRIDE + position: lengths stay below it


def tokens_of(lengths) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int32) + STRIDE * i for i, n in enumerate(lengths)]


def dataset(lengths) -> jb.Dataset:
    return jb.Dataset.from_arrays({"tokens": tokens_of(lengths)})


def collected(loader) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in b.items()} for b in loader]


def reference(lengths, boundaries, rows) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """The batches in order, each (padded length, [(example, piece, tokens)]):
    each example (in index order) cut into runs of the last boundary, each
    run to the first boundary >= its length (np.searchsorted); a bucket
    emits a batch when it holds rows[k] runs, and the partial batches
    follow in bucket order."""
    cut = boundaries[-1]
    pending: list[list] = [[] for _ in boundaries]
    out = []
    for example, n in enumerate(lengths):
        runs = [min(cut, n - s) for s in range(0, n, cut)] or [0]
        for piece, run in enumerate(runs):
            k = int(np.searchsorted(boundaries, run))
            pending[k].append((example, piece, run))
            if len(pending[k]) == rows[k]:
                out.append((boundaries[k], pending[k]))
                pending[k] = []
    out += [(boundaries[k], p) for k, p in enumerate(pending) if p]
    return out


def summary(batches) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """The loader's batches in the reference's form."""
    out = []
    for b in batches:
        index, piece, lens = b["example_index"], b["example_piece"], b["tokens_lengths"]
        assert index.shape == piece.shape == lens.shape == (b["tokens"].shape[0],)
        rows = [
            (int(e), int(p), int(n)) for e, p, n in zip(index, piece, lens, strict=True) if e >= 0
        ]
        out.append((b["tokens"].shape[1], rows))
    return out


def pieces_of(batches, cut, window=None) -> dict[int, dict[int, np.ndarray]]:
    """{example: {piece: tokens}} from padded split batches, checking each
    row's own invariants: one piece of at most `cut` tokens, padded to its
    bucket, its mask, and example_index / example_piece naming its tokens."""
    seen: dict[int, dict[int, np.ndarray]] = {}
    for batch in batches:
        tok, mask, lens = batch["tokens"], batch["tokens_mask"], batch["tokens_lengths"]
        index, piece = batch["example_index"], batch["example_piece"]
        for r in range(tok.shape[0]):
            n = int(lens[r])
            if index[r] < 0:
                assert n == 0 and piece[r] == -1 and not mask[r].any()
                continue
            assert n <= min(cut, tok.shape[1])
            np.testing.assert_array_equal(mask[r], np.arange(tok.shape[1]) < n)
            part = tok[r, :n]
            example, first = divmod(int(part[0]), STRIDE) if n else (int(index[r]), 0)
            assert index[r] == (example % window if window else example)
            assert first == piece[r] * cut  # a piece starts at its offset
            assert int(piece[r]) not in seen.setdefault(example, {}), "a piece twice"
            seen[example][int(piece[r])] = part.copy()
    return seen


def assert_every_token_once_in_order(seen, lengths, cut) -> None:
    assert sorted(seen) == list(range(len(lengths)))
    for example, n in enumerate(lengths):
        pieces = seen[example]
        assert sorted(pieces) == list(range(max(1, -(-n // cut))))
        joined = np.concatenate([pieces[k] for k in sorted(pieces)])
        np.testing.assert_array_equal(joined, np.arange(n) + STRIDE * example)
        assert all(len(pieces[k]) == cut for k in sorted(pieces)[:-1])


def assert_same(a_batches, b_batches) -> None:
    assert len(a_batches) == len(b_batches)
    for a, b in zip(a_batches, b_batches, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


boundary_lists = st.lists(st.integers(1, 24), min_size=1, max_size=4, unique=True).map(sorted)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 80), min_size=1, max_size=30),
    boundaries=boundary_lists,
    data=st.data(),
)
def test_batches_equal_the_numpy_reference(lengths, boundaries, data):
    sizing = data.draw(st.sampled_from(["batch_size", "token_budget", "batch_sizes"]))
    if sizing == "batch_size":
        n = data.draw(st.integers(1, 4))
        kwargs, rows = {"batch_size": n}, [n] * len(boundaries)
    elif sizing == "token_budget":
        budget = boundaries[-1] * data.draw(st.integers(1, 4))
        kwargs, rows = {"token_budget": budget}, [budget // b for b in boundaries]
    else:
        rows = [data.draw(st.integers(1, 4)) for _ in boundaries]
        kwargs = {"batch_sizes": rows}
    remainder = data.draw(st.sampled_from(["pad", "keep"]))
    if sizing == "token_budget" and remainder == "pad":
        # A budget's rows, spread evenly over each bucket's pieces.
        whole = reference(lengths, boundaries, [len(lengths) * 99] * len(boundaries))
        count = {length: len(segs) for length, segs in whole}
        rows = [balanced_rows(count.get(b, 0), r) for b, r in zip(boundaries, rows, strict=True)]
    planner = jb.FixedBuckets(boundaries, **kwargs, remainder=remainder, too_long="split")
    with jb.Loader(dataset(lengths), planner, shuffle=False, epochs=1) as loader:
        batches = collected(loader)
        stats = loader.stats
    want = reference(lengths, boundaries, rows)
    assert summary(batches) == want
    for b, (_, segs) in zip(batches, want, strict=True):
        k = boundaries.index(b["tokens"].shape[1])
        assert b["tokens"].shape[0] == (rows[k] if remainder == "pad" else len(segs))
    assert_every_token_once_in_order(pieces_of(batches, boundaries[-1]), lengths, boundaries[-1])
    assert stats.examples == len(lengths)  # an example counts once, not once a piece
    assert stats.truncated == 0 and stats.skipped == 0
    assert jb.plan(dataset(lengths), planner).stats.real_elements == sum(lengths)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 70), min_size=1, max_size=30),
    boundaries=boundary_lists,
    seed=st.integers(0, 5),
)
def test_shuffled_every_token_once_and_each_piece_in_its_bucket(lengths, boundaries, seed):
    cut = boundaries[-1]
    planner = jb.FixedBuckets(boundaries, batch_size=3, too_long="split")
    with jb.Loader(dataset(lengths), planner, shuffle=True, seed=seed, epochs=1) as loader:
        batches = collected(loader)
    assert_every_token_once_in_order(pieces_of(batches, cut), lengths, cut)
    for b in batches:  # each piece in the first bucket that holds it
        real = b["tokens_lengths"][b["example_index"] >= 0]
        want = np.asarray(boundaries)[np.searchsorted(boundaries, real)]
        assert (want == b["tokens"].shape[1]).all()


def test_shards_together_hold_every_token_once():
    lengths = list(np.random.default_rng(0).integers(1, 40, 50))
    seen: dict = {}
    for i in range(3):
        planner = jb.FixedBuckets([4, 10], batch_size=2, too_long="split")
        with jb.Loader(dataset(lengths), planner, shard=(i, 3), shuffle=True, seed=1) as loader:
            for example, parts in pieces_of(collected(loader), 10).items():
                assert not set(parts) & set(seen.get(example, {}))
                seen.setdefault(example, {}).update(parts)
    assert_every_token_once_in_order(seen, lengths, 10)


def test_restore_continues_the_same_stream():
    lengths = list(np.random.default_rng(1).integers(1, 40, 60))
    planner = jb.FixedBuckets([5, 12], token_budget=24, too_long="split")
    args = dict(shuffle=True, seed=4, epochs=2, num_threads=2)
    with jb.Loader(dataset(lengths), planner, **args) as whole:
        expected = collected(whole)
    with jb.Loader(dataset(lengths), planner, **args) as first:
        head = [{k: np.array(v) for k, v in next(first).items()} for _ in range(5)]
        state = json.loads(json.dumps(first.get_state()))
    assert "too_long='split'" in state["planner"]
    with jb.Loader(dataset(lengths), planner, state=state, **args) as resumed:
        rest = collected(resumed)
    assert_same(expected, head + rest)


def test_streamed_file_matches_the_whole_file(tmp_path):
    lengths = list(np.random.default_rng(2).integers(1, 50, 200))
    path = tmp_path / "data.parquet"
    table = pa.table({"tokens": pa.array(tokens_of(lengths), pa.list_(pa.int32()))})
    pq.write_table(table, path, row_group_size=20)
    planner = jb.FixedBuckets([6, 16], batch_size=2, too_long="split")
    whole = collected(jb.Loader(path, planner, shuffle="block", block_size=40, seed=2))
    streamed = jb.Loader(
        path, planner, stream=True, host_memory_limit=64_000, shuffle="block", block_size=40, seed=2
    )
    with streamed:
        got = collected(streamed)
    assert_same(whole, got)
    assert_every_token_once_in_order(pieces_of(got, 16), lengths, 16)


def test_grain_batch_iter_dataset():
    grain = pytest.importorskip("grain")
    jbg = pytest.importorskip("jaxbatch.grain")
    lengths = [30, 2, 17, 9, 40, 5, 12]
    exs = [{"tokens": t} for t in tokens_of(lengths)]
    window = 3
    source = grain.MapDataset.source(exs)
    planner = jb.FixedBuckets([4, 8], batch_size=2, too_long="split")
    batches = list(jbg.BatchIterDataset(source, planner, window=window))
    batches = [{k: np.asarray(v) for k, v in b.items()} for b in batches]
    assert_every_token_once_in_order(pieces_of(batches, 8, window=window), lengths, 8)


def test_refusals(tmp_path):
    ds = dataset([20, 3])
    split = jb.FixedBuckets([4, 8], batch_size=2, too_long="split")
    assert "too_long='split'" in split.key
    with pytest.raises(ValueError, match=r"jb.map: FixedBuckets\(too_long='split'\) yields"):
        jb.map(lambda b: b["tokens"], ds, planner=split)
    with jb.Loader(ds, split) as loader, pytest.raises(ValueError, match="jb.map: FixedBuckets"):
        jb.map(lambda b: b["tokens"], loader)
    with pytest.raises(ValueError, match=r"jb.run: FixedBuckets\(too_long='split'\)"):
        jb.run(lambda b: b["tokens"], ds, tmp_path / "out", planner=split)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match='remainder="drop" would drop some pieces'):
        jb.FixedBuckets([4, 8], batch_size=2, too_long="split", remainder="drop")
    two = jb.Dataset.from_arrays({"tokens": tokens_of([20, 3]), "other": tokens_of([1, 2])})
    with pytest.raises(ValueError, match="ragged column 'other' has other lengths"):
        list(jb.Loader(two, split, column="tokens"))
