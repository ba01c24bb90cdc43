"""Pack(too_long="split"): examples longer than a row cut into pieces, each
packed as a segment of its own, through the Loader (shuffle, shard, restore,
streaming), Grain and Hugging Face sources, unbatch / join_pieces, and the
refusals of jb.map, jb.run and remainder="drop".

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

import jaxbatch as jb

STRIDE = 1000  # token = example * STRIDE + position: lengths stay below it


def dataset(lengths) -> jb.Dataset:
    return jb.Dataset.from_arrays({"tokens": tokens_of(lengths)})


def tokens_of(lengths) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int32) + STRIDE * i for i, n in enumerate(lengths)]


def pieces_of(batches, row_length, window=None) -> dict[int, dict[int, np.ndarray]]:
    """{example: {piece: tokens}} from packed split batches, checking each
    segment's own invariants: at most row_length tokens, positions from 0,
    segment ids 1.., example_index and example_piece naming its tokens."""
    seen: dict[int, dict[int, np.ndarray]] = {}
    for batch in batches:
        tok, seg = np.asarray(batch["tokens"]), np.asarray(batch["tokens_segment_ids"])
        pos, lens = np.asarray(batch["tokens_positions"]), np.asarray(batch["tokens_lengths"])
        index, piece = np.asarray(batch["example_index"]), np.asarray(batch["example_piece"])
        assert index.shape == piece.shape == lens.shape
        for r in range(tok.shape[0]):
            start = 0
            for s in range(index.shape[1]):
                n = int(lens[r, s])
                if index[r, s] < 0:
                    assert n == 0 and piece[r, s] == -1
                    continue
                assert 1 <= n <= row_length
                part = tok[r, start : start + n]
                np.testing.assert_array_equal(pos[r, start : start + n], np.arange(n))
                assert (seg[r, start : start + n] == s + 1).all()
                example, first = divmod(int(part[0]), STRIDE)
                assert index[r, s] == (example % window if window else example)
                assert first == piece[r, s] * row_length  # a piece starts at its offset
                assert int(piece[r, s]) not in seen.setdefault(example, {}), "a piece twice"
                seen[example][int(piece[r, s])] = part.copy()
                start += n
            assert (seg[r, start:] == 0).all() and (pos[r, start:] == 0).all()
    return seen


def assert_every_token_once_in_order(seen, lengths, row_length) -> None:
    assert sorted(seen) == list(range(len(lengths)))
    for example, n in enumerate(lengths):
        pieces = seen[example]
        assert sorted(pieces) == list(range(-(-n // row_length)))
        joined = np.concatenate([pieces[k] for k in sorted(pieces)])
        np.testing.assert_array_equal(joined, np.arange(n) + STRIDE * example)
        assert all(len(pieces[k]) == row_length for k in sorted(pieces)[:-1])


def collected(loader) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in b.items()} for b in loader]


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=40),
    row_length=st.integers(1, 16),
    rows=st.integers(1, 4),
    algorithm=st.sampled_from(["first_fit", "best_fit"]),
    window=st.sampled_from([{}, {"lookahead": 5}, {"open_rows": 3}]),
    shuffle=st.booleans(),
)
def test_every_token_exactly_once_in_order_pieces_fit_positions_restart(
    lengths, row_length, rows, algorithm, window, shuffle
):
    planner = jb.Pack(row_length, rows, algorithm=algorithm, too_long="split", **window)
    with jb.Loader(dataset(lengths), planner, shuffle=shuffle, seed=3, epochs=1) as loader:
        batches = collected(loader)
        stats = loader.stats
    seen = pieces_of(batches, row_length)
    assert_every_token_once_in_order(seen, lengths, row_length)
    assert stats.examples == len(lengths)  # an example counts once, not once a piece
    assert stats.truncated == 0 and stats.skipped == 0
    plan = jb.plan(dataset(lengths), planner)
    assert plan.stats.real_elements == sum(lengths)


@pytest.mark.parametrize(
    "planner",
    [jb.Pack(8, 2, too_long="split"), jb.FixedBuckets([4, 8], batch_size=2, too_long="split")],
    ids=["Pack", "FixedBuckets"],
)
def test_unbatch_keys_pieces_and_join_pieces_gives_back_the_examples(planner):
    lengths = [11, 3, 25, 1, 8]
    ds = dataset(lengths)
    pieces: dict = {}
    for spec in jb.plan(ds, planner):
        batch = jb.collate(ds, spec)
        assert "example_piece" in batch.aux_keys
        got = jb.unbatch({"tokens": batch["tokens"], "double": 2 * batch["tokens"]}, batch)
        assert all(isinstance(k, tuple) for k in got)
        assert not set(got) & set(pieces)
        pieces.update(got)
    joined = jb.join_pieces(pieces)
    for example, want in enumerate(tokens_of(lengths)):
        np.testing.assert_array_equal(joined[example]["tokens"], want)
        np.testing.assert_array_equal(joined[example]["double"], 2 * want)
    del pieces[(2, 1)]
    with pytest.raises(ValueError, match=r"example 2 has pieces \[0, 2, 3\]"):
        jb.join_pieces(pieces)
    with pytest.raises(ValueError, match="expected \\(example, piece\\) keys"):
        jb.join_pieces({3: np.zeros(2)})


def test_shards_together_hold_every_token_once():
    lengths = list(np.random.default_rng(0).integers(1, 40, 50))
    seen: dict = {}
    for i in range(3):
        planner = jb.Pack(10, 2, too_long="split")
        with jb.Loader(dataset(lengths), planner, shard=(i, 3), shuffle=True, seed=1) as loader:
            for example, parts in pieces_of(collected(loader), 10).items():
                assert not set(parts) & set(seen.get(example, {}))
                seen.setdefault(example, {}).update(parts)
    assert_every_token_once_in_order(seen, lengths, 10)


def test_restore_continues_the_same_stream():
    lengths = list(np.random.default_rng(1).integers(1, 40, 60))
    planner = jb.Pack(12, 2, too_long="split")
    args = dict(shuffle=True, seed=4, epochs=2, num_threads=2)
    with jb.Loader(dataset(lengths), planner, **args) as whole:
        expected = collected(whole)
    with jb.Loader(dataset(lengths), planner, **args) as first:
        head = [{k: np.array(v) for k, v in next(first).items()} for _ in range(5)]
        state = json.loads(json.dumps(first.get_state()))
    assert "too_long='split'" in state["planner"]
    with jb.Loader(dataset(lengths), planner, state=state, **args) as resumed:
        rest = collected(resumed)
    got = head + rest
    assert len(got) == len(expected)
    for a, b in zip(expected, got, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_streamed_file_matches_the_whole_file(tmp_path):
    lengths = list(np.random.default_rng(2).integers(1, 50, 200))
    path = tmp_path / "data.parquet"
    table = pa.table({"tokens": pa.array(tokens_of(lengths), pa.list_(pa.int32()))})
    pq.write_table(table, path, row_group_size=20)
    planner = jb.Pack(16, 2, too_long="split")
    whole = collected(jb.Loader(path, planner, shuffle="block", block_size=40, seed=2))
    streamed = jb.Loader(
        path, planner, stream=True, host_memory_limit=64_000, shuffle="block", block_size=40, seed=2
    )
    with streamed:
        got = collected(streamed)
    assert len(got) == len(whole)
    for a, b in zip(whole, got, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    assert_every_token_once_in_order(pieces_of(got, 16), lengths, 16)


def test_huggingface_source():
    datasets = pytest.importorskip("datasets")
    lengths = [30, 2, 17, 9]
    hf = datasets.Dataset.from_dict({"tokens": [t.tolist() for t in tokens_of(lengths)]})
    with jb.Loader(hf, jb.Pack(8, 2, too_long="split")) as loader:
        seen = pieces_of(collected(loader), 8)
    assert_every_token_once_in_order(seen, lengths, 8)


def test_grain_batch_iter_dataset():
    grain = pytest.importorskip("grain")
    jbg = pytest.importorskip("jaxbatch.grain")
    lengths = [30, 2, 17, 9, 40, 5, 12]
    exs = [{"tokens": t} for t in tokens_of(lengths)]
    window = 3
    source = grain.MapDataset.source(exs)
    batches = list(jbg.BatchIterDataset(source, jb.Pack(8, 2, too_long="split"), window=window))
    assert_every_token_once_in_order(pieces_of(batches, 8, window=window), lengths, 8)


def test_map_run_and_fixed_buckets_refuse_split(tmp_path):
    ds = dataset([20, 3])
    split = jb.Pack(8, 2, too_long="split")
    with pytest.raises(ValueError, match=r"jb.map: Pack\(too_long='split'\) yields pieces"):
        jb.map(lambda b: b["tokens"], ds, planner=split)
    with jb.Loader(ds, split) as loader, pytest.raises(ValueError, match="jb.map: Pack"):
        jb.map(lambda b: b["tokens"], loader)
    with pytest.raises(ValueError, match=r"jb.run: Pack\(too_long='split'\)"):
        jb.run(lambda b: b["tokens"], ds, tmp_path / "out", planner=split)
    assert not (tmp_path / "out").exists()
    # FixedBuckets splits too (tests/test_bucket_split.py), but not with drop.
    with pytest.raises(ValueError, match='FixedBuckets: too_long="split" with remainder="drop"'):
        jb.FixedBuckets([8, 16], batch_size=2, too_long="split", remainder="drop")
    with pytest.raises(ValueError, match='remainder="drop" would drop some pieces'):
        jb.Pack(8, 2, too_long="split", remainder="drop")
