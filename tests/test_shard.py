"""Shards of one Loader stream, property-tested in one process: every shard
gets the same steps, with the same shapes, and together the examples of the
unsharded plan exactly once per epoch (tests/test_multihost.py runs the
shards as real jax.distributed processes)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import jaxbatch as jb


def planners(max_length):
    return st.one_of(
        st.builds(jb.PadToMax, st.integers(1, 7), remainder=st.sampled_from(["pad", "drop"])),
        st.builds(
            jb.FixedBuckets,
            st.just([max_length // 3 + 1, max_length]),
            token_budget=st.integers(max_length, 4 * max_length),
            remainder=st.sampled_from(["pad", "drop"]),
        ),
        st.builds(
            jb.AutoBuckets,
            st.integers(1, 4),
            batch_size=st.integers(1, 6),
            remainder=st.sampled_from(["pad", "drop"]),
        ),
        st.builds(
            jb.Pack,
            st.just(max_length),
            st.integers(1, 3),
            max_segments_per_row=st.integers(1, 4),
            remainder=st.sampled_from(["pad", "drop"]),
        ),
    )


def record(loader, limit=None):
    out = []
    for batch in loader:
        ids = np.asarray(batch["example_index"]).ravel()
        shapes = tuple((k, v.shape, v.dtype.str) for k, v in sorted(batch.items()))
        out.append((batch.epoch, shapes, sorted(int(e) for e in ids if e >= 0)))
        if limit is not None and len(out) == limit:
            break
    return out


@given(
    lengths=st.lists(st.integers(1, 24), min_size=0, max_size=60),
    planner=planners(24),
    count=st.integers(1, 5),
    shuffle=st.sampled_from([True, False, "block"]),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_shards_have_equal_steps_and_shapes_and_cover_the_data(
    lengths, planner, count, shuffle, seed, data
):
    ds = jb.Dataset.from_arrays(
        {"tokens": [np.full(n, i, np.int32) for i, n in enumerate(lengths)]},
        dtypes={"tokens": np.int32},
    )
    args = dict(shuffle=shuffle, block_size=7, seed=seed, num_threads=2)
    with jb.Loader(ds, planner, epochs=2, **args) as whole:
        unsharded = record(whole)
    streams = []
    for i in range(count):
        with jb.Loader(ds, planner, epochs=2, shard=(i, count), **args) as loader:
            streams.append(record(loader))
    steps = {len(s) for s in streams}
    assert len(steps) == 1
    for at_step in zip(*streams, strict=True):
        assert len({(epoch, shapes) for epoch, shapes, _ in at_step}) == 1
    for epoch in (0, 1):
        seen = sorted(e for s in streams for ep, _, ids in s if ep == epoch for e in ids)
        assert len(seen) == len(set(seen))
        planned = sorted(e for ep, _, ids in unsharded if ep == epoch for e in ids)
        if planner.remainder == "pad":
            assert seen == planned
        else:
            assert set(seen) <= set(planned)
    # Restored mid-stream, and run forever, each shard continues alike.
    i = data.draw(st.integers(0, count - 1))
    k = data.draw(st.integers(0, len(streams[i])))
    with jb.Loader(ds, planner, epochs=2, shard=(i, count), **args) as loader:
        if k:
            record(loader, limit=k)
        state = loader.get_state()
    with jb.Loader(ds, planner, epochs=2, shard=(i, count), state=state, **args) as resumed:
        assert record(resumed) == streams[i][k:]
    forever = []
    for j in range(count):
        with jb.Loader(ds, planner, epochs=None, shard=(j, count), **args) as loader:
            forever.append(record(loader, limit=len(streams[j]) + 3))
    for j in range(count):
        assert forever[j][: len(streams[j])] == streams[j]
    for at_step in zip(*forever, strict=True):
        assert len({(epoch, shapes) for epoch, shapes, _ in at_step}) == 1
