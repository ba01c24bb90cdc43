"""Elastic resume (Loader.set_state(state, elastic=True)), in one process
that plays every shard: a state saved by shards (i, n) at any step restores on
m shards, which together yield exactly what the uninterrupted n shards had
left (each piece once, one shape per step on every shard), then the next
epoch dealt to m. tests/test_multihost.py runs it on real processes."""

import collections

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_graphs import random_graphs

import jaxbatch as jb


def planners(max_length):
    """Every planner kind: buckets, packing, packing that splits pieces
    (too_long="split", concat_then_split), each with remainder "pad"."""
    return st.one_of(
        st.builds(jb.PadToMax, st.integers(1, 7)),
        st.builds(
            jb.FixedBuckets,
            st.just([max_length // 3 + 1, max_length]),
            token_budget=st.integers(max_length, 4 * max_length),
        ),
        st.builds(jb.AutoBuckets, st.integers(1, 4), batch_size=st.integers(1, 6)),
        st.builds(jb.Pack, st.just(max_length), st.integers(1, 3)),
        st.builds(
            jb.Pack, st.integers(4, max_length - 1), st.integers(1, 3), too_long=st.just("split")
        ),
        st.builds(
            jb.Pack, st.integers(4, max_length), st.integers(1, 3),
            algorithm=st.just("concat_then_split"),
        ),
    )  # fmt: skip


def record(loader, limit=None):
    """(epoch, shapes, example_index pieces) of each batch."""
    out = []
    for batch in loader:
        ids = np.asarray(batch.get("graph_index", batch.get("example_index"))).ravel()
        if "source_index" in batch:  # a mixture: (source, example)
            ids = ids + 10**6 * np.asarray(batch["source_index"]).ravel()
        shapes = tuple((k, v.shape) for k, v in sorted(batch.items()))
        out.append((batch.epoch, shapes, sorted(int(e) for e in ids if e >= 0)))
        if limit is not None and len(out) == limit:
            break
    return out


def pieces(streams, epoch=None):
    """Every shard's pieces, as a multiset."""
    return collections.Counter(
        e for s in streams for ep, _, ids in s if epoch is None or ep == epoch for e in ids
    )


def save_and_resume(make, n, m, step, states_of="all"):
    """The uninterrupted n shards' streams, and the m shards' streams after a
    state saved by the n shards after `step` batches ("all" their states, or
    "one": shard n - 1's alone)."""
    full = []
    for i in range(n):
        with make((i, n)) as loader:
            full.append(record(loader))
    saved = []
    for i in range(n):
        with make((i, n)) as loader:
            if step:
                record(loader, limit=step)
            saved.append(loader.get_state())
    given_states = saved if states_of == "all" else saved[-1]
    rest = []
    for j in range(m):
        with make((j, m)) as loader:
            loader.set_state(given_states, elastic=True)
            rest.append(record(loader))
    return full, rest


def check_rest(full, rest, step):
    # One shape per step, on every shard.
    assert len({len(s) for s in rest}) == 1
    for at_step in zip(*rest, strict=True):
        assert len({(epoch, shapes) for epoch, shapes, _ in at_step}) == 1
    # The rest of the stream, each piece once.
    assert pieces(rest) == pieces(s[step:] for s in full)


@given(
    lengths=st.lists(st.integers(1, 24), min_size=1, max_size=60),
    planner=planners(24),
    n=st.integers(1, 5),
    m=st.integers(1, 5),
    shuffle=st.sampled_from([True, False, "block"]),
    seed=st.integers(0, 2**32),
    states_of=st.sampled_from(["all", "one"]),
    data=st.data(),
)
def test_resume_on_any_shard_count_yields_the_rest_once(
    lengths, planner, n, m, shuffle, seed, states_of, data
):
    ds = jb.Dataset.from_arrays(
        {"tokens": [np.full(k, i, np.int32) for i, k in enumerate(lengths)]},
        dtypes={"tokens": np.int32},
    )
    args = dict(shuffle=shuffle, block_size=7, seed=seed, num_threads=1, epochs=2)

    def make(shard):
        return jb.Loader(ds, planner, shard=shard, **args)

    with make((0, n)) as loader:
        total, first_epoch = len(loader), loader.steps(0)
    step = data.draw(st.integers(0, max(total - 1, 0)), label="step")
    full, rest = save_and_resume(make, n, m, step, states_of)
    check_rest(full, rest, step)
    # The epoch after the resumed one is an ordinary epoch on m shards.
    if step < first_epoch:
        with make((0, m)) as fresh:
            assert [b for b in record(fresh) if b[0] == 1] == [b for b in rest[0] if b[0] == 1]


def test_remainder_drop_drops_only_the_resumed_deals_tails():
    rng = np.random.default_rng(3)
    ds = jb.Dataset.from_arrays(
        {"tokens": [np.zeros(k, np.int32) for k in rng.integers(1, 30, 97)]}
    )
    planner = jb.AutoBuckets(3, batch_size=4, remainder="drop")

    def make(shard):
        return jb.Loader(ds, planner, shard=shard, seed=1, num_threads=1)

    full, rest = save_and_resume(make, 2, 3, 5)
    remaining = pieces(s[5:] for s in full)
    got = pieces(rest)
    assert not got - remaining  # nothing the n shards had yielded, or twice
    # What is missing: fewer than 3 batches per shape (at most 4 examples each).
    assert sum((remaining - got).values()) < 3 * 3 * 4


def test_mixture_resumes_mid_block_on_other_shards():
    rng = np.random.default_rng(5)

    def source(count, longest):
        return jb.Dataset.from_arrays(
            {"tokens": [np.zeros(k, np.int32) for k in rng.integers(1, longest, count)]}
        )

    mix = jb.Dataset.mix(
        {"web": source(80, 30), "code": source(50, 60)},
        weights={"web": 0.6, "code": 0.4}, unit="tokens", block_size=64,
    )  # fmt: skip

    def make(shard):
        return jb.Loader(mix, jb.Pack(64, 2, too_long="split"), shard=shard, seed=2, epochs=2)

    with make((0, 3)) as loader:
        step = loader.steps(0) + 1  # into the second block
    full, rest = save_and_resume(make, 3, 2, step)
    check_rest(full, rest, step)


def test_mixture_with_changed_weights_finishes_the_block_then_changes():
    """Resumed elastically into other weights: the rest of the saved block
    as drawn (what the n shards had left of it), the new weights after."""
    rng = np.random.default_rng(6)
    sources = {
        name: jb.Dataset.from_arrays(
            {"tokens": [np.zeros(k, np.int32) for k in rng.integers(1, 40, count)]}
        )
        for name, count in (("web", 90), ("code", 60))
    }

    def make(shard, weights=None):
        weights = weights or {"web": 0.5, "code": 0.5}
        mix = jb.Dataset.mix(sources, weights=weights, block_size=48)
        return jb.Loader(mix, jb.PadToMax(4), shard=shard, seed=3, epochs=2)

    with make((0, 2)) as loader:
        step = loader.steps(0) + 2
    full, saved = [], []
    for i in range(2):
        with make((i, 2)) as loader:
            full.append(record(loader))
        with make((i, 2)) as loader:
            record(loader, limit=step)
            saved.append(loader.get_state())
    rest = []
    for j in range(3):
        with make((j, 3), {"web": 0.9, "code": 0.1}) as loader:
            loader.set_state(saved, elastic=True)
            assert loader.mixture_changes  # logged and listed
            rest.append(record(loader))
    block = saved[0]["epoch"]
    left = pieces([s[step:] for s in full], epoch=block)
    assert pieces(rest, epoch=block) == left
    for s in rest:  # the saved block first, then the blocks of the new weights
        assert [b[0] for b in s] == sorted(b[0] for b in s) and s[0][0] == block


def test_streamed_parquet_resumes_on_other_shards(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "data.parquet"
    tokens = [np.arange(k, dtype=np.int32) for k in rng.integers(1, 30, 200)]
    pq.write_table(pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32()))}), path,
                   row_group_size=40)  # fmt: skip

    def make(shard):
        return jb.Loader(path, jb.PadToMax(8), shard=shard, seed=4, stream=True,
                         host_memory_limit=1 << 20, epochs=2)  # fmt: skip

    with make((0, 4)) as loader:
        assert loader.dataset.__class__.__name__ == "StreamedParquet"
    full, rest = save_and_resume(make, 4, 3, 6)
    check_rest(full, rest, 6)


def test_a_view_resumes_on_other_shards():
    rng = np.random.default_rng(8)
    ds = jb.Dataset.from_arrays(
        {"tokens": [np.zeros(k, np.int32) for k in rng.integers(1, 40, 300)]}
    )
    view = ds.filter(lambda c: c["tokens_lengths"] % 3 != 0)[10:200]

    def make(shard):
        return jb.Loader(view, jb.AutoBuckets(3, token_budget=128), shard=shard, seed=6, epochs=2)

    full, rest = save_and_resume(make, 5, 2, 4)
    check_rest(full, rest, 4)


@pytest.mark.parametrize("planner", [jb.GraphBudget(nodes=30, edges=60, graphs=5),
                                     jb.GraphBuckets(2, nodes=30, edges=60, graphs=5)])  # fmt: skip
def test_graphs_resume_on_other_shards(planner):
    ds = jb.Dataset.from_graphs(random_graphs(120, seed=2))

    def make(shard):
        return jb.Loader(ds, planner, shard=shard, seed=9, epochs=2)

    full, rest = save_and_resume(make, 3, 4, 5)
    check_rest(full, rest, 5)


def test_refusals_name_what_and_where():
    ds = jb.Dataset.from_arrays({"tokens": [np.zeros(k, np.int32) for k in range(1, 40)]})
    saved = []
    for i in range(3):
        with jb.Loader(ds, jb.PadToMax(4), shard=(i, 3)) as loader:
            record(loader, limit=3 if i == 1 else 2)
            saved.append(loader.get_state())
    with jb.Loader(ds, jb.PadToMax(4), shard=(0, 2)) as loader:
        with pytest.raises(ValueError, match=r"saved at different steps \(shards 0, 2 at step 2 "
                           r"of epoch 0; shard 1 at step 3 of epoch 0\)"):  # fmt: skip
            loader.set_state(saved, elastic=True)
        with pytest.raises(ValueError, match="the state of shard 0 of 3 was given twice"):
            loader.set_state([saved[0], saved[0]], elastic=True)
        with pytest.raises(ValueError, match="shard=.0, 3. but this loader has shard=.0, 2."):
            loader.set_state(saved[0])  # without elastic=True: the shard must be the same
        with pytest.raises(ValueError, match="state must be a dict from get_state"):
            loader.set_state(saved)
        with pytest.raises(TypeError, match="elastic must be a bool"):
            loader.set_state(saved[0], elastic="yes")
    with jb.Loader(ds, jb.PadToMax(5), shard=(0, 2)) as other:
        with pytest.raises(ValueError, match="planner"):
            other.set_state(saved[0], elastic=True)
    prefetcher = jb.device_prefetch([{"x": np.zeros(2)}])
    with pytest.raises(ValueError, match="set_state.elastic=True. restores a jb.Loader's state"):
        prefetcher.set_state(saved[0], elastic=True)


def test_device_prefetch_restores_elastically():
    ds = jb.Dataset.from_arrays({"tokens": [np.zeros(k, np.int32) for k in range(1, 50)]})
    saved = []
    for i in range(2):
        with jb.Loader(ds, jb.PadToMax(4), shard=(i, 2), seed=3) as loader:
            record(loader, limit=2)
            saved.append(loader.get_state())
    want = []
    for j in range(3):
        with jb.Loader(ds, jb.PadToMax(4), shard=(j, 3), seed=3) as loader:
            loader.set_state(saved, elastic=True)
            want.append([np.asarray(b["example_index"]).tolist() for b in loader])
    with jb.Loader(ds, jb.PadToMax(4), shard=(1, 3), seed=3) as loader:
        prefetcher = jb.device_prefetch(loader)
        next(prefetcher)
        prefetcher.set_state(saved, elastic=True)
        got = [np.asarray(b["example_index"]).tolist() for b in prefetcher]
        assert got == want[1]
        assert prefetcher.get_state()["shard"] == [1, 3]
