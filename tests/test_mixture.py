"""Mixtures through the Loader: Grain's mix test cases with Grain's numbers
(unit="examples"), token shares within the stated bound in every window,
each source's examples at most once per source epoch, exact restores at any
batch, resumes into other weights or sources that repeat and skip nothing
(logged), the realised shares in stats, Orbax and Grain carrying the state,
and the errors."""

from __future__ import annotations

import logging
import threading

import grain
import numpy as np
import orbax.checkpoint as ocp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb
import jaxbatch.checkpoint as jbc
import jaxbatch.grain as jbg


def numbers(values) -> jb.Dataset:
    """One example per value: a token array [value] (Grain's range datasets)."""
    return jb.Dataset.from_arrays({"tokens": [np.array([v], np.int64) for v in values]})


def one_by_one(mixture, steps=None, state=None, **options) -> list[int]:
    """The values a Loader yields one example a batch, in order."""
    loader = jb.Loader(mixture, jb.PadToMax(batch_size=1), shuffle=False, state=state, **options)
    out = []
    for batch in loader if steps is None else (next(loader) for _ in range(steps)):
        out.append(int(batch["tokens"][0, 0]))
    return out, loader


# -- Grain's mix_test.py, with its numbers ---------------------------------------------


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ({"even": 1, "odd": 1}, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
        ({"even": 0.75, "odd": 0.25}, [0, 2, 4, 1, 6, 8, 0, 3, 2, 4, 6, 5]),
        ({"even": 1, "odd": 2}, [0, 1, 3, 2, 5, 7, 4, 9, 1, 6, 3, 5, 8, 7]),
    ],
)
def test_grain_map_mix_proportions(weights, expected):
    """MixedMapDatasetTest: evens and odds below 10, read past their end
    (MapDataset.repeat restarts a source: exhaustion="restart")."""
    mixture = jb.Dataset.mix({"even": numbers(range(0, 10, 2)), "odd": numbers(range(1, 10, 2))},
                             weights)  # fmt: skip
    got, _ = one_by_one(mixture, steps=len(expected), epochs=None)
    assert got == expected


def test_grain_iter_mix_stops_at_the_first_exhausted_draw():
    """MixedIterDatasetTest.test_len and test_stop_sampling_after_end_of_any_dataset."""
    three = {"a": numbers(range(10)), "b": numbers(range(20)), "c": numbers(range(5))}
    assert len(one_by_one(jb.Dataset.mix(three, exhaustion="stop"))[0]) == 17
    weighted = jb.Dataset.mix(three, {"a": 1, "b": 2, "c": 1}, exhaustion="stop")
    assert len(one_by_one(weighted)[0]) == 6 + 12 + 5
    two = jb.Dataset.mix(
        {"small": numbers(range(5)), "large": numbers(range(10))}, exhaustion="stop"
    )
    values, loader = one_by_one(two)
    assert len(values) == 10
    with pytest.raises(StopIteration):
        next(loader)


RANGES = {"ds1": range(10), "ds2": range(10, 20), "ds3": range(20, 30), "ds4": range(30, 40)}


def grain_mix(names, weights) -> jb.Mixture:
    # One position a block, so a state at position 10 is at a block's start
    # and new weights apply from there, as Grain's iterator applies them.
    sources = {n: numbers(RANGES[n]) for n in names}
    return jb.Dataset.mix(sources, dict(zip(names, weights, strict=True)), exhaustion="stop",
                          block_size=1)  # fmt: skip


@pytest.mark.parametrize(
    ("first", "then", "before", "after"),
    [
        (  # test_checkpoint_recovery_with_changed_weights (the same weights)
            (["ds1", "ds2", "ds3"], [0.2, 0.3, 0.5]),
            (["ds1", "ds2", "ds3"], [0.2, 0.3, 0.5]),
            [0, 10, 20, 11, 21, 1, 22, 12, 23, 24],
            [2, 13, 25, 14, 26, 3, 27, 15, 28, 29, 4, 16],
        ),
        (  # test_checkpoint_recovery_with_fewer_datasets
            (["ds1", "ds2", "ds3"], [0.2, 0.3, 0.5]),
            (["ds1", "ds2"], [0.2, 0.3]),
            [0, 10, 20, 11, 21, 1, 22, 12, 23, 24],
            [2, 13, 3, 14, 15, 4, 16, 5, 17, 18, 6, 19, 7],
        ),
        (  # test_checkpoint_recovery_with_more_datasets
            (["ds1", "ds2"], [1, 1]),
            (["ds1", "ds2", "ds3"], [1, 1, 1]),
            [0, 10, 1, 11, 2, 12, 3, 13, 4, 14],
            [15, 20, 5, 16, 21, 6, 17, 22, 7, 18, 23, 8, 19, 24, 9],
        ),
        (  # test_checkpoint_recovery_with_different_mixture
            (["ds1", "ds2", "ds3"], [1, 1, 1]),
            (["ds2", "ds4"], [0.6, 0.4]),
            [0, 10, 20, 1, 11, 21, 2, 12, 22, 3],
            [13, 14, 30, 15, 31, 16, 17, 32, 18, 33, 19],
        ),
    ],
)
def test_grain_iter_mix_restores_into_changed_mixtures(first, then, before, after):
    got, loader = one_by_one(grain_mix(*first), steps=10)
    assert got == before
    state = loader.get_state()
    rest, _ = one_by_one(grain_mix(*then), state=state)
    assert rest == after


# -- token shares, epochs, restores ------------------------------------------------------

ROW = 256


def sources_from(spec, seed: int) -> dict[str, jb.Dataset]:
    """Sources of random lengths: (count, longest) per source."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, (count, longest) in enumerate(spec):
        lengths = rng.integers(1, longest + 1, count)
        offset = 100_000 * k
        out[f"s{k}"] = jb.Dataset.from_arrays(
            {
                "tokens": [
                    np.arange(offset + 1000 * i, offset + 1000 * i + n, dtype=np.int32)
                    for i, n in enumerate(lengths)
                ]
            }  # fmt: skip
        )
    return out


def tokens_by_source(batch, count: int) -> np.ndarray:
    """Real tokens per source in a packed batch."""
    out = np.zeros(count, np.int64)
    np.add.at(out, batch["source_index"][batch["source_index"] >= 0],
              batch["tokens_lengths"][batch["source_index"] >= 0])  # fmt: skip
    return out


source_spec = st.lists(st.tuples(st.integers(5, 60), st.integers(1, ROW)), min_size=1, max_size=4)


@settings(max_examples=20)
@given(source_spec, st.data())
def test_token_shares_stay_within_the_stated_bound(spec, data):
    """Over any whole blocks, each source's tokens are within
    L_s + w_s * sum_j L_j of its share w_s (the schedule's bound; a block's
    batches hold exactly its draws); over any window of W batches, within
    that plus the tokens of the two blocks the window's ends cut."""
    sources = sources_from(spec, seed=len(spec))
    shares = data.draw(st.lists(st.floats(0.05, 1.0), min_size=len(spec), max_size=len(spec)))
    weights = dict(zip(sources, shares, strict=True))
    block = data.draw(st.sampled_from([16, 64]))
    mixture = jb.Dataset.mix(sources, weights, unit="tokens", block_size=block)
    loader = jb.Loader(mixture, jb.Pack(ROW, rows_per_batch=2), seed=3, epochs=None)
    w = np.array(jb._core.mixture_weights(shares, list(sources)), float)
    w /= w.sum()
    longest = np.array([s.lengths().max() for s in sources.values()], float)
    bound = longest + w * longest.sum()
    per_batch, blocks = [], []
    for batch in (next(loader) for _ in range(120)):
        per_batch.append(tokens_by_source(batch, len(spec)))
        blocks.append(batch.epoch)  # a mixture's epoch is its block
    per_batch = np.array(per_batch, float)
    blocks = np.array(blocks)
    whole = [b for b in np.unique(blocks)[:-1]]  # the last may be cut
    block_tokens = np.array([per_batch[blocks == b].sum(0) for b in whole])
    for i in range(len(whole)):
        for j in range(i + 1, len(whole) + 1):
            t = block_tokens[i:j].sum(0)
            assert np.all(np.abs(t - w * t.sum()) <= bound + 1e-6), (i, j)
    most = block_tokens.sum(1).max() if len(whole) else per_batch.sum()
    window = data.draw(st.integers(1, 40))
    for start in range(len(per_batch) - window + 1):
        t = per_batch[start : start + window].sum(0)
        assert np.all(np.abs(t - w * t.sum()) <= bound + 2 * most + 1e-6)


def test_each_source_example_at_most_once_per_source_epoch():
    """At every block boundary, each source's examples have been drawn
    equally often, within one: a source epoch yields each example once."""
    sources = sources_from([(17, 40), (50, 100), (9, 200)], seed=1)
    mixture = jb.Dataset.mix(sources, {"s0": 0.5, "s1": 0.2, "s2": 0.3}, unit="tokens",
                             block_size=32)  # fmt: skip
    loader = jb.Loader(mixture, jb.Pack(ROW, rows_per_batch=2, too_long="split"), seed=5,
                       epochs=None)  # fmt: skip
    counts = [np.zeros(len(s), np.int64) for s in sources.values()]
    block = 0
    for batch in (next(loader) for _ in range(300)):
        if batch.epoch != block:
            for c in counts:
                assert c.max() - c.min() <= 1
            block = batch.epoch
        first = batch["example_piece"] == 0  # a split example counts once
        for s, e in zip(batch["source_index"][first], batch["example_index"][first], strict=True):
            counts[s][e] += 1
    assert min(c.min() for c in counts) >= 1


def test_batches_hold_their_sources_examples():
    sources = sources_from([(30, 60), (20, 90)], seed=2)
    mixture = jb.Dataset.mix(sources, {"s0": 0.5, "s1": 0.5}, unit="tokens", block_size=16)
    names = list(sources)
    for batch in jb.Loader(mixture, jb.Pack(ROW, rows_per_batch=2), seed=1, epochs=2):
        seg, pos = batch["tokens_segment_ids"], batch["tokens_positions"]
        for r in range(seg.shape[0]):
            for k in range(batch["source_index"].shape[1]):
                s, e = batch["source_index"][r, k], batch["example_index"][r, k]
                if s < 0:
                    continue
                cells = seg[r] == k + 1
                want = sources[names[s]][int(e)]["tokens"]
                np.testing.assert_array_equal(batch["tokens"][r][cells], want[pos[r][cells]])


PLANNERS = [
    jb.Pack(ROW, rows_per_batch=2),
    jb.Pack(ROW // 2, rows_per_batch=2, too_long="split"),
    jb.Pack(ROW // 2, rows_per_batch=2, algorithm="concat_then_split"),
    jb.AutoBuckets(max_shapes=3, token_budget=1024),
]


@settings(max_examples=15)
@given(st.sampled_from(PLANNERS), st.integers(0, 40), st.integers(1, 4))
def test_restore_at_any_batch_equals_the_uninterrupted_stream(planner, at, threads):
    sources = sources_from([(25, 100), (40, 200), (10, 60)], seed=3)
    mixture = jb.Dataset.mix(sources, {"s0": 0.2, "s1": 0.5, "s2": 0.3}, unit="tokens",
                             block_size=24)  # fmt: skip
    whole = list(jb.Loader(mixture, planner, seed=2, epochs=2))
    head = jb.Loader(mixture, planner, seed=2, epochs=2, num_threads=threads)
    for _ in range(min(at, len(whole))):
        next(head)
    tail = list(jb.Loader(mixture, planner, seed=2, epochs=2, state=head.get_state()))
    assert len(tail) == len(whole) - min(at, len(whole))
    for got, want in zip(tail, whole[min(at, len(whole)) :], strict=True):
        assert sorted(got) == sorted(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_a_resume_that_changes_the_mixture_repeats_and_skips_nothing(caplog):
    sources = sources_from([(40, 50), (30, 80), (20, 60)], seed=4)
    names = list(sources)
    before = jb.Dataset.mix({n: sources[n] for n in names[:2]}, {"s0": 0.6, "s1": 0.4},
                            unit="tokens", block_size=20)  # fmt: skip
    planner = jb.Pack(ROW, rows_per_batch=2)
    head = jb.Loader(before, planner, seed=8, epochs=None)
    given_ = {n: [] for n in names}

    def take(batch, mixture_names):
        first = batch["source_index"] >= 0
        for s, e in zip(batch["source_index"][first], batch["example_index"][first], strict=True):
            given_[mixture_names[s]].append(int(e))

    for _ in range(5):
        take(next(head), names[:2])
    state = head.get_state()
    after = jb.Dataset.mix(sources, {"s0": 0.2, "s1": 0.3, "s2": 0.5}, unit="tokens",
                           block_size=20)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="jaxbatch"):
        tail = jb.Loader(after, planner, seed=8, epochs=None, state=state)
    assert tail.mixture_changes == [r.getMessage() for r in caplog.records]
    block = state["epoch"] + (state["step"] > 0)  # the block after the one it was saved in
    added = f"mixture: source 's2' added at 50.0% from block {block} (position {block * 20})"
    assert added in tail.mixture_changes
    while True:  # to a block's end: then each source gave a prefix of its order
        batch = next(tail)
        take(batch, names)
        if tail.get_state()["step"] == 0 and tail.get_state()["epoch"] >= 6:
            break
    for k, name in enumerate(names):
        counts = np.bincount(given_[name], minlength=len(sources[name]))
        assert counts.max() - counts.min() <= 1, name  # no repeat before every one came
        assert counts.sum() == tail.get_state()["mixture"]["sources"][k]["draws"], name
    shares = tail.stats.sources
    assert set(shares) == set(names)
    assert shares["s2"].weight == pytest.approx(0.5, abs=1e-6)


def test_stats_give_each_sources_realised_share():
    sources = sources_from([(50, 40), (50, 200)], seed=5)
    mixture = jb.Dataset.mix(sources, {"s0": 0.5, "s1": 0.5}, unit="tokens", block_size=64)
    loader = jb.Loader(mixture, jb.Pack(ROW, rows_per_batch=4), seed=1, epochs=3)
    tokens = np.zeros(2, np.int64)
    examples = np.zeros(2, np.int64)
    for batch in loader:
        tokens += tokens_by_source(batch, 2)
        s = batch["source_index"]
        examples += np.bincount(s[s >= 0], minlength=2)
    stats = loader.stats.sources
    assert [stats[n].tokens for n in sources] == list(tokens)
    assert [stats[n].examples for n in sources] == list(examples)
    assert stats["s0"].token_share == pytest.approx(tokens[0] / tokens.sum())
    assert stats["s1"].token_share == pytest.approx(0.5, abs=0.03)
    assert stats["s0"].example_share > 0.7  # s0's examples are short: more of them
    assert loader.stats.examples == examples.sum()


def test_staged_weights_change_on_their_block(tmp_path):
    sources = sources_from([(60, 30), (60, 30)], seed=6)
    mixture = jb.Dataset.mix(sources, [(0, {"s0": 1, "s1": 0}), (64, {"s0": 0, "s1": 1})],
                             block_size=32)  # fmt: skip
    loader = jb.Loader(mixture, jb.PadToMax(8), seed=1, epochs=None)
    for batch in (next(loader) for _ in range(40)):
        s = batch["source_index"][batch["source_index"] >= 0]
        assert np.all(s == (0 if batch.epoch < 2 else 1)), batch.epoch
    with pytest.raises(ValueError, match="stage 1 starts at position 50, which is not a block"):
        jb.Dataset.mix(sources, [(0, {"s0": 1, "s1": 1}), (50, {"s0": 1, "s1": 0})], block_size=32)


def test_orbax_and_grain_carry_a_mixtures_state(tmp_path):
    sources = sources_from([(30, 80), (30, 120)], seed=7)
    mixture = jb.Dataset.mix(sources, {"s0": 0.3, "s1": 0.7}, unit="tokens", block_size=16)
    planner = jb.Pack(ROW, rows_per_batch=2)
    with jb.Loader(mixture, planner, seed=4, epochs=None) as loader:
        for _ in range(6):
            next(loader)
        manager = ocp.CheckpointManager(tmp_path)
        manager.save(6, args=ocp.args.Composite(loader=jbc.LoaderSave(loader)))
        manager.wait_until_finished()
        want = [next(loader) for _ in range(5)]
    with jb.Loader(mixture, planner, seed=4, epochs=None) as fresh:
        manager.restore(6, args=ocp.args.Composite(loader=jbc.LoaderRestore(fresh)))
        for w in want:
            got = next(fresh)
            for key in w:
                np.testing.assert_array_equal(got[key], w[key], err_msg=key)
    manager.close()
    iterator = iter(jbg.LoaderIterDataset(jb.Loader(mixture, planner, seed=4, epochs=None)))
    for _ in range(6):
        next(iterator)
    saved = iterator.get_state()
    ahead = [next(iterator) for _ in range(4)]
    again = iter(jbg.LoaderIterDataset(jb.Loader(mixture, planner, seed=4, epochs=None)))
    again.set_state(saved)
    for w in ahead:
        np.testing.assert_array_equal(next(again)["tokens"], w["tokens"])
    assert isinstance(grain.DatasetIterator, type)


def test_threads_and_state_do_not_grow_with_the_sources():
    """K sources cost K entries of state and no thread of their own."""
    for k in (1, 10, 100):
        sources = {f"s{i}": jb.Dataset.from_arrays({"tokens": [np.arange(3 + i % 5)] * 4})
                   for i in range(k)}  # fmt: skip
        before = threading.active_count()
        loader = jb.Loader(jb.Dataset.mix(sources, unit="tokens"), jb.Pack(64, rows_per_batch=2),
                           num_threads=2, epochs=None)  # fmt: skip
        next(loader)
        assert loader.num_threads == 2
        assert threading.active_count() == before  # C++ threads are not Python's: none added
        assert len(loader.get_state()["mixture"]["sources"]) == k
        loader.close()


def test_errors_name_what_is_wrong():
    a, b = numbers(range(4)), numbers(range(4))
    with pytest.raises(ValueError, match="weights names source 'c', which is not one of"):
        jb.Dataset.mix({"a": a, "b": b}, {"a": 1, "c": 1})
    with pytest.raises(ValueError, match="gives no weight for source 'b'"):
        jb.Dataset.mix({"a": a, "b": b}, {"a": 1})
    with pytest.raises(ValueError, match="the weight of source 'b' must be a finite number >= 0"):
        jb.Dataset.mix({"a": a, "b": b}, {"a": 1, "b": -1})
    with pytest.raises(ValueError, match="unit must be 'tokens' or 'examples'"):
        jb.Dataset.mix({"a": a}, unit="bytes")
    with pytest.raises(ValueError, match="exhaustion must be 'restart', 'stop' or 'drop'"):
        jb.Dataset.mix({"a": a}, exhaustion="loop")
    other = jb.Dataset.from_arrays({"ids": [np.arange(3)]})
    with pytest.raises(ValueError, match=r"the sources need the same columns \(dataset 0 is 'a'"):
        jb.Dataset.mix({"a": a, "o": other})
    mixture = jb.Dataset.mix({"a": a, "b": b}, exhaustion="drop")
    with pytest.raises(ValueError, match="epochs must be 1, found None"):
        jb.Loader(mixture, jb.PadToMax(2), epochs=None)
    with pytest.raises(ValueError, match="jb.run: seed= drives a mixture's draws"):
        jb.run(lambda x: x, a, "/tmp/never", seed=1, progress=False)
    with pytest.raises(ValueError, match="stage 0 must be"):
        jb.Dataset.mix({"a": a}, [0, {"a": 1}])


def test_processes_agree_on_a_mixtures_sources_and_weights():
    """shard="jax"'s agreement check compares each source's data and weight."""
    from jaxbatch._src.load import agree

    a, b = numbers(range(4)), numbers(range(4, 9))

    def settings(mixture):
        with jb.Loader(mixture, jb.PadToMax(2)) as loader:
            return agree.loader_settings(loader)

    reference = settings(jb.Dataset.mix({"a": a, "b": b}))
    for other in (
        jb.Dataset.mix({"a": a, "b": jb.Dataset.from_arrays({"tokens": [np.arange(3)] * 5})}),
        jb.Dataset.mix({"a": a, "b": b}, {"a": 2, "b": 1}),
    ):
        diffs = agree.differences([reference, settings(other)])
        assert [d[0] for d in diffs] == ["mixture"], diffs


def test_bad_records_are_counted_per_draw_and_named_by_source():
    good = numbers(range(6))
    rule = {"tokens": jb.ColumnSchema(finite=True, max_length=1)}
    long_one = jb.Dataset.from_arrays({"tokens": [np.arange(1), np.arange(3), np.arange(1)]})
    mixture = jb.Dataset.mix({"good": good, "long": long_one}, exhaustion="drop")
    loader = jb.Loader(mixture, jb.PadToMax(2), schema=rule, on_error="skip")
    examples = [e for b in loader for e, s in zip(b["example_index"], b["source_index"],
                                                   strict=True) if s == 1]  # fmt: skip
    assert sorted(examples) == [0, 2]  # example 1 of 'long' is bad: never yielded
    assert loader.stats.skipped == 1 and loader.stats.examples == 8
    with pytest.raises(
        ValueError, match=r"^mixture: source 'long', example 1: .*length <= 1, found 3"
    ):
        list(jb.Loader(mixture, jb.PadToMax(2), schema=rule))
    quarantined = jb.Loader(mixture, jb.PadToMax(2), schema=rule, on_error="quarantine")
    assert sum(int((b["source_index"] >= 0).sum()) for b in quarantined) == 8
    assert quarantined.stats.quarantined == 1
    assert quarantined.quarantine[0]["reason"].startswith("source 'long', example 1: ")


def test_graphs_mix_by_nodes_under_graph_budget():
    """A mixture of graph datasets: GraphBudget plans it, every graph slot
    says its source beside graph_index, and every graph of each source
    comes once (exhaustion="drop")."""
    from test_graphs import random_graphs

    small = jb.Dataset.from_graphs(random_graphs(40, seed=1, max_nodes=4))
    large = jb.Dataset.from_graphs(random_graphs(25, seed=2, max_nodes=9))
    mixture = jb.Dataset.mix({"small": small, "large": large}, {"small": 0.5, "large": 0.5},
                             unit="tokens", exhaustion="drop", block_size=16)  # fmt: skip
    seen = {0: [], 1: []}
    for batch in jb.Loader(mixture, jb.GraphBudget(nodes=64, edges=128, graphs=8), seed=3):
        assert batch["source_index"].shape == batch["graph_index"].shape
        for s, g in zip(batch["source_index"], batch["graph_index"], strict=True):
            if g >= 0:
                seen[int(s)].append(int(g))
    assert sorted(seen[0]) == list(range(40)) and sorted(seen[1]) == list(range(25))


def test_a_parquet_source_is_read_whole_and_stream_is_refused(tmp_path):
    """A .parquet source gives the stream its values give in memory (it is
    read whole), as does an Arrow IPC file (memory-mapped); stream=True,
    which streams one file by row group, is refused for a mixture, saying
    why (docs/mixtures.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sources = sources_from([(30, 60), (20, 90)], seed=6)
    path = tmp_path / "s1.parquet"
    values = [sources["s1"][i]["tokens"] for i in range(len(sources["s1"]))]
    pq.write_table(pa.table({"tokens": values}), path, row_group_size=4)
    planner = jb.Pack(ROW, rows_per_batch=2)

    def stream(s1):
        mixture = jb.Dataset.mix({"s0": sources["s0"], "s1": s1}, unit="tokens", block_size=16)
        return [{k: np.array(v) for k, v in b.items()}
                for b in jb.Loader(mixture, planner, seed=1, epochs=2)]  # fmt: skip

    arrow = tmp_path / "s1.arrow"  # the form a source larger than memory takes: mapped
    with pa.ipc.new_file(arrow, pq.read_schema(path)) as writer:
        writer.write_table(pq.read_table(path))
    in_memory = stream(sources["s1"])
    for from_file in (stream(str(path)), stream(str(arrow))):
        assert len(from_file) == len(in_memory)
        for got, want in zip(from_file, in_memory, strict=True):
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    mixture = jb.Dataset.mix({"s0": sources["s0"], "s1": str(path)})
    with pytest.raises(ValueError, match="a mixture reads its sources whole"):
        jb.Loader(mixture, planner, stream=True, host_memory_limit=1 << 24)
