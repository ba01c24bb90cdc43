import dataclasses
import gc
import json
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import jaxbatch as jb
from jaxbatch import _core

PLANNERS = [
    jb.PadToMax(batch_size=6),
    jb.FixedBuckets([8, 16, 32, 64], batch_size=4),
    jb.AutoBuckets(max_shapes=3, token_budget=256),
    jb.Pack(row_length=64, rows_per_batch=2),
]


def make_dataset(n=150, seed=0, max_length=60):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_length, n)
    tokens = [rng.integers(0, 1000, k).astype(np.int32) for k in lengths]
    labels = [rng.standard_normal(k).astype(np.float32) for k in lengths]
    return jb.Dataset.from_arrays(
        {"tokens": tokens, "labels": labels, "y": np.arange(n)}, aligned=[["tokens", "labels"]]
    )


def fingerprint(batch):
    return tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in sorted(batch.items()))


def drain(loader, limit=None):
    out = []
    for batch in loader:
        out.append(fingerprint(batch))
        if limit is not None and len(out) >= limit:
            break
    return out


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: type(p).__name__)
def test_stream_is_identical_for_any_thread_count(planner):
    ds = make_dataset()
    streams = [drain(jb.Loader(ds, planner, seed=3, epochs=2, num_threads=t)) for t in (1, 2, 3)]
    assert streams[0] and streams[0] == streams[1] == streams[2]


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: type(p).__name__)
def test_restore_at_every_step_equals_the_uninterrupted_stream(planner):
    ds = make_dataset(n=40)
    full = drain(jb.Loader(ds, planner, seed=1, epochs=2, num_threads=2))
    for k in range(len(full) + 1):
        first = jb.Loader(ds, planner, seed=1, epochs=2, num_threads=1)
        drain(first, limit=k) if k else None
        state = json.loads(json.dumps(first.get_state()))
        first.close()
        resumed = jb.Loader(ds, planner, seed=1, epochs=2, num_threads=3, state=state)
        assert drain(resumed) == full[k:], f"restored after {k} batches"
        other = jb.Loader(ds, planner, seed=1, epochs=2, num_threads=2)
        other.set_state(state)
        assert drain(other) == full[k:]


def test_epochs_none_repeats_with_a_new_permutation_each_epoch():
    ds = make_dataset(n=60)
    loader = jb.Loader(ds, jb.PadToMax(batch_size=10), epochs=None, seed=5)
    orders = {}
    for batch in loader:
        orders.setdefault(batch.epoch, []).extend(batch["example_index"].tolist())
        if len(orders) == 4:
            break
    loader.close()
    for epoch in range(3):
        assert sorted(orders[epoch]) == list(range(60))
    assert orders[0] != orders[1] != orders[2]
    unshuffled = jb.Loader(ds, jb.PadToMax(batch_size=10), shuffle=False)
    assert [i for b in unshuffled for i in b["example_index"]] == list(range(60))


@pytest.mark.parametrize("planner", PLANNERS, ids=lambda p: type(p).__name__)
@pytest.mark.parametrize("count", [2, 3])
def test_shards_are_disjoint_cover_and_agree_on_shapes(planner, count):
    ds = make_dataset(n=200)
    shards = [
        [
            (b.shape, b["example_index"][b["example_index"] >= 0].tolist())
            for b in jb.Loader(ds, planner, shard=(i, count), seed=2)
        ]
        for i in range(count)
    ]
    assert len({len(s) for s in shards}) == 1
    for steps in zip(*shards, strict=True):
        assert len({shape for shape, _ in steps}) == 1
    seen = [e for s in shards for _, ids in s for e in ids]
    assert len(seen) == len(set(seen)) == 200  # remainder "pad": nothing dropped


def test_uneven_shard_tail_under_drop_is_counted():
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(5)] * 70})
    loaders = [jb.Loader(ds, jb.PadToMax(10, remainder="drop"), shard=(i, 3)) for i in range(3)]
    seen = [e for loader in loaders for b in loader for e in b["example_index"]]
    stats = loaders[0].stats
    assert len(seen) + stats.dropped == 70
    assert stats.dropped == 10  # seven batches of one shape: one is dealt to no shard
    # PadToMax gives each batch its own shape, so with shards every tail is
    # dropped; the loss is counted, never silent.
    ragged = make_dataset(n=70)
    lonely = jb.Loader(ragged, jb.PadToMax(10, remainder="drop"), shard=(0, 3))
    assert list(lonely) == [] and lonely.stats.dropped == 70


BAD = {
    "dtype": (jb.ColumnSchema(dtype=np.int64), "expected dtype int64, found int32", 150),
    "rank": (jb.ColumnSchema(inner_shape=(2,)), "expected rank 2, found rank 1", 150),
    "empty": (jb.ColumnSchema(min_length=1), "expected length >= 1, found 0", 1),
    "too long": (jb.ColumnSchema(max_length=50), "expected length <= 50, found 5", 1),
}


def dataset_with_bad_records():
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 9, int(k)).astype(np.int32) for k in rng.integers(1, 40, 150)]
    tokens[17] = np.zeros(0, np.int32)
    tokens[42] = np.arange(55, dtype=np.int32)
    labels = [np.ones(len(t), np.float32) for t in tokens]
    labels[99][0] = np.nan
    return jb.Dataset.from_arrays(
        {"tokens": tokens, "labels": labels}, aligned=[["tokens", "labels"]]
    )


@pytest.mark.parametrize("kind", [*BAD, "nan"])
@pytest.mark.parametrize("policy", ["raise", "skip", "quarantine"])
def test_bad_records_under_each_policy(kind, policy, tmp_path):
    ds = dataset_with_bad_records()
    if kind == "nan":
        schema, message, count, column = (
            jb.ColumnSchema(finite=True),
            "found NaN or Inf",
            1,
            "labels",
        )
    else:
        (schema, message, count), column = BAD[kind], "tokens"
    qfile = tmp_path / "bad.jsonl"
    loader = jb.Loader(
        ds, jb.PadToMax(8), schema={column: schema}, on_error=policy, quarantine_file=qfile
    )
    if policy == "raise":
        with pytest.raises(ValueError) as info:
            next(loader)
        assert "dataset, example" in str(info.value) and f"column '{column}'" in str(info.value)
        assert message in str(info.value)
        return
    yielded = [e for b in loader for e in b["example_index"] if e >= 0]
    stats = loader.stats
    bad = stats.skipped + stats.quarantined
    assert bad == count
    assert stats.examples == len(yielded) == 150 - count
    if policy == "quarantine":
        records = loader.quarantine
        assert len(records) == count and message in records[0]["reason"]
        lines = [json.loads(line) for line in qfile.read_text().splitlines()]
        assert [r["example"] for r in lines] == [r["example"] for r in records]
        assert all(r["example"] not in yielded for r in records)
    else:
        assert loader.quarantine == [] and not qfile.exists()


def test_max_errors_count_and_fraction_stop_with_a_summary():
    ds = dataset_with_bad_records()
    schema = {"tokens": jb.ColumnSchema(min_length=1, max_length=50)}
    with pytest.raises(
        RuntimeError, match="too many bad records.*2 of 150 examples exceed max_errors=1"
    ):
        next(jb.Loader(ds, jb.PadToMax(8), schema=schema, on_error="skip", max_errors=1))
    with pytest.raises(RuntimeError, match="too many bad records"):
        next(jb.Loader(ds, jb.PadToMax(8), schema=schema, on_error="skip", max_errors=0.01))
    ok = jb.Loader(ds, jb.PadToMax(8), schema=schema, on_error="skip", max_errors=0.05)
    assert sum(1 for _ in ok) > 0


def test_an_error_reaches_the_consumer_with_its_message_and_ends_the_stream():
    ds = make_dataset(n=20, max_length=60)
    # What no batch can hold is the planner's error when the Loader is made.
    with pytest.raises(ValueError, match="example 0 has length 51, longer than row_length 30"):
        jb.Loader(ds, jb.Pack(row_length=30, rows_per_batch=2), num_threads=2)
    schema = {"tokens": jb.ColumnSchema(max_length=30)}
    loader = jb.Loader(ds, jb.Pack(row_length=64, rows_per_batch=2), num_threads=2, schema=schema)
    assert loader.shapes  # Before: the batches to come.
    with pytest.raises(ValueError, match="example 0: column 'tokens': expected length <= 30"):
        next(loader)
    assert loader.shapes == []  # Ended at the error: no batch is to come.
    assert next(loader, None) is None


@pytest.mark.parametrize(
    ("planner", "says"),
    [
        (jb.Pack(row_length=30, rows_per_batch=2),
         "Pack: example 0 has length 51, longer than row_length 30"),
        (jb.FixedBuckets([10, 30], batch_size=2),
         "FixedBuckets: example 0 has length 51, longer than the last boundary 30"),
    ],
    ids=["Pack", "FixedBuckets"],
)  # fmt: skip
def test_too_long_is_named_when_the_loader_is_made_and_skip_counts_as_plan_does(planner, says):
    ds = make_dataset(n=20, max_length=60)
    with pytest.raises(ValueError, match=says):  # Not at the first len(), .shapes or next().
        jb.Loader(ds, planner)
    skipping = dataclasses.replace(planner, too_long="skip")
    plan = jb.plan(ds, skipping)
    assert plan.stats.skipped > 0
    with jb.Loader(ds, skipping, epochs=2, max_errors=0) as loader:
        yielded = sum(int((np.asarray(b["example_index"]) >= 0).sum()) for b in loader)
        stats = loader.stats
        assert loader.shapes == []  # Exhausted.
    assert loader.shapes == []  # Exhausted and closed.
    # Skipped as jb.plan counts it, in each epoch; not a bad record (max_errors=0).
    assert (stats.skipped, stats.dropped) == (2 * plan.stats.skipped, 2 * plan.stats.dropped)
    assert yielded == stats.examples == 2 * (len(ds) - plan.stats.skipped - plan.stats.dropped)


def thread_ids():
    return set(os.listdir("/proc/self/task"))


def lingering(ids, seconds=2.0):
    """Which of `ids` still exist after up to `seconds`: a joined thread can
    stay in /proc/self/task a moment after join() returns (the kernel clears
    its tid before it releases the task)."""
    deadline = time.monotonic() + seconds
    while (alive := ids & thread_ids()) and time.monotonic() < deadline:
        time.sleep(0.001)
    return alive


def test_no_threads_remain_after_close_with_or_gc():
    """The loader's own threads (those that appeared with it) are all gone
    after close(), a with block, or garbage collection. Thread ids, not
    counts: JAX's runtime may start or end threads of its own meanwhile."""
    ds = make_dataset()

    def started(make):
        before = thread_ids()
        loader = make()
        batch = next(loader)
        new = thread_ids() - before
        return loader, batch, new

    loader, _, new = started(lambda: jb.Loader(ds, jb.PadToMax(4), num_threads=3, epochs=None))
    assert len(new) >= 3
    loader.close()
    assert not lingering(new)
    with jb.Loader(ds, jb.PadToMax(4), num_threads=2, epochs=None) as loader:
        before = thread_ids()
        next(loader)
        new = thread_ids() - before
    assert not lingering(new)
    loader, batch, new = started(lambda: jb.Loader(ds, jb.PadToMax(4), num_threads=2, epochs=None))
    assert len(new) >= 2
    del loader
    gc.collect()
    assert not lingering(new)
    assert batch["tokens"].shape[0] == 4  # arrays outlive their loader


def test_state_is_small_and_does_not_grow_with_data_or_prefetch():
    sizes = set()
    for n, prefetch in [(50, 1), (5000, 16)]:
        loader = jb.Loader(make_dataset(n=n), jb.PadToMax(8), prefetch=prefetch)
        next(loader)
        state = loader.get_state()
        # Counts of elements grow in digits only, as any count does.
        counts = ("num_examples", "real_elements", "padded_elements")
        sizes.add(len(json.dumps({k: v for k, v in state.items() if k not in counts})))
        assert len(json.dumps(state)) < 500
        loader.close()
    assert len(sizes) == 1 and sizes.pop() < 400


def test_a_version_1_state_restores_unless_its_block_shuffle_order_changed():
    """States saved before rows_multiple/open_rows existed (version 1, the
    planner's repr without them) restore exactly; a version 1 block-shuffle
    state is refused, since block shuffle now keeps the blocks' batch order."""
    ds = make_dataset(n=60)
    planner = jb.AutoBuckets(3, batch_size=4)
    with jb.Loader(ds, planner, seed=2) as loader:
        stream = [b["example_index"].tolist() for b in loader]
    with jb.Loader(ds, planner, seed=2) as loader:
        for _ in range(3):
            next(loader)
        state = loader.get_state()
    assert state["version"] == _core.LOADER_STATE_VERSION
    assert state["planner"] == "AutoBuckets(max_shapes=3, token_budget=None, batch_size=4, " \
        "pad_to_multiple=1, remainder='pad')"  # fmt: skip
    old = {**state, "version": 1}
    with jb.Loader(ds, planner, seed=2, state=old) as resumed:
        assert [b["example_index"].tolist() for b in resumed] == stream[3:]
    block = dict(seed=2, shuffle="block", block_size=16)
    with jb.Loader(ds, planner, **block) as loader:
        next(loader)
        old_block = {**loader.get_state(), "version": 1}
    with pytest.raises(ValueError, match="version 1.*block shuffle"):
        jb.Loader(ds, planner, **block, state=old_block)
    with pytest.raises(ValueError, match="saved with planner"):
        jb.Loader(ds, jb.AutoBuckets(3, batch_size=4, rows_multiple=2), seed=2, state=state)


def test_state_from_another_dataset_or_planner_is_refused():
    loader = jb.Loader(make_dataset(n=30), jb.PadToMax(8))
    state = loader.get_state()
    with pytest.raises(ValueError, match="saved with shard"):
        jb.Loader(make_dataset(n=30), jb.PadToMax(8), shard=(0, 2), state=state)
    with pytest.raises(ValueError, match="saved with shuffle"):
        jb.Loader(make_dataset(n=30), jb.PadToMax(8), shuffle="block", state=state)
    with pytest.raises(ValueError, match="saved for 30 examples but this source has 31"):
        jb.Loader(make_dataset(n=31), jb.PadToMax(8), state=state)
    with pytest.raises(ValueError, match="saved with planner"):
        jb.Loader(make_dataset(n=30), jb.PadToMax(9), state=state)


def test_host_memory_limit():
    ds = make_dataset(n=100)
    limited = jb.Loader(ds, jb.PadToMax(8), host_memory_limit=1 << 20, prefetch=2)
    assert sum(b["example_index"].size for b in limited) >= 100
    with pytest.raises(
        ValueError, match=r"host_memory_limit 64 bytes holds fewer than prefetch \+ 2"
    ):
        jb.Loader(ds, jb.PadToMax(8), host_memory_limit=64)


def write_sources(tmp_path):
    rng = np.random.default_rng(1)
    tokens = [
        rng.integers(0, 50, int(k)).astype(np.int32).tolist() for k in rng.integers(1, 20, 40)
    ]
    table = pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32())), "id": np.arange(40)})
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=7)
    feather.write_feather(table, tmp_path / "d.arrow", compression="uncompressed")
    folder = tmp_path / "npy"
    folder.mkdir()
    np.save(folder / "tokens.values.npy", np.concatenate([np.array(t, np.int32) for t in tokens]))
    np.save(folder / "tokens.offsets.npy", np.cumsum([0] + [len(t) for t in tokens]))
    np.save(folder / "id.npy", np.arange(40))
    return tokens


def test_sources_by_path_give_the_same_stream(tmp_path):
    tokens = write_sources(tmp_path)
    expected = drain(
        jb.Loader(
            jb.Dataset.from_arrays(
                {"tokens": [np.array(t, np.int32) for t in tokens], "id": np.arange(40)}
            ),
            jb.PadToMax(8),
        )
    )
    for path in ("d.parquet", "d.arrow", "npy"):
        loader = jb.Loader(tmp_path / path, jb.PadToMax(8), columns=["tokens", "id"])
        assert drain(loader) == expected, path


def test_source_errors_before_any_thread_starts(tmp_path):
    write_sources(tmp_path)
    before = thread_ids()
    with pytest.raises(FileNotFoundError, match="no such file"):
        jb.Loader(tmp_path / "missing.parquet", jb.PadToMax(8))
    with pytest.raises(ValueError, match="has no column 'nope'"):
        jb.Loader(tmp_path / "d.parquet", jb.PadToMax(8), columns=["nope"])
    with pytest.raises(ValueError, match="column 'id' of .* must be a list or large_list column"):
        jb.Loader(tmp_path / "d.parquet", jb.PadToMax(8), columns=["id"])
    with pytest.raises(ValueError, match="has no column 'nope'"):
        jb.Loader(tmp_path / "npy", jb.PadToMax(8), columns=["nope"])
    with pytest.raises(ValueError, match="is fixed-shape"):
        jb.Loader(tmp_path / "npy", jb.PadToMax(8), columns=["id"])
    assert thread_ids() <= before  # no thread was started


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shuffle": "maybe"}, "shuffle must be 'none', 'global' or 'block', found 'maybe'"),
        ({"shuffle": 1.5}, "shuffle must be True, False, 'none', 'global' or 'block'"),
        ({"on_error": "ignore"}, "on_error must be 'raise', 'skip' or 'quarantine'"),
        ({"shard": (2, 2)}, "shard must satisfy 0 <= index < count, found \\(2, 2\\)"),
        ({"shard": "all"}, "shard must be \\(index, count\\) or 'jax'"),
        ({"nonsense": 1}, "unexpected keyword argument 'nonsense'"),
        ({"max_errors": 2.5}, "max_errors must be an int"),
        ({"epochs": 0}, "epochs must be >= 1 or None"),
        ({"prefetch": 0}, "prefetch must be >= 1"),
        ({"seed": -1}, "seed must be an int in"),
        ({"shuffle": "block", "block_size": 0}, "block_size must be >= 1"),
        ({"schema": {"nope": jb.ColumnSchema()}}, "schema names column 'nope'"),
    ],
)
def test_bad_loader_arguments(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        jb.Loader(make_dataset(n=10), jb.PadToMax(4), **kwargs)
    if "schema" not in kwargs and "nonsense" not in kwargs:  # Needs no data: refused when written.
        with pytest.raises(ValueError, match=message):
            jb.LoaderOptions(**kwargs)


def test_loader_options_take_the_engines_defaults_and_are_shared():
    core = _core.LoaderOptions()
    options = jb.LoaderOptions()
    assert options.prefetch == core.prefetch and options.block_size == core.schedule.block_size
    assert options.epochs == core.epochs and options.seed == core.schedule.seed
    assert options.on_error == _core.error_policy_name(core.on_error)
    ds = make_dataset(n=40)
    shared = jb.LoaderOptions(shuffle="block", block_size=8, seed=3, epochs=2)
    by_options = drain(jb.Loader(ds, jb.PadToMax(4), options=shared))
    by_keywords = drain(jb.Loader(ds, jb.PadToMax(4), shuffle="block", block_size=8, seed=3,
                                  epochs=2))  # fmt: skip
    assert by_options == by_keywords
    # Keywords beside options= override them.
    overridden = drain(jb.Loader(ds, jb.PadToMax(4), options=shared, seed=4))
    assert overridden != by_options


def test_block_shuffle_reads_contiguous_blocks():
    ds = make_dataset(n=100)
    order = [
        e
        for b in jb.Loader(ds, jb.PadToMax(100), shuffle="block", block_size=10)
        for e in b["example_index"]
    ]
    assert sorted(order) == list(range(100))
    blocks = [order[i : i + 10] for i in range(0, 100, 10)]
    assert all(len({e // 10 for e in block}) == 1 for block in blocks)


def test_device_prefetch_puts_batches_on_device_in_order():
    import jax

    ds = make_dataset(n=50)
    host = [dict(b) for b in jb.Loader(ds, jb.PadToMax(8), seed=4)]
    device = list(jb.device_prefetch(jb.Loader(ds, jb.PadToMax(8), seed=4), size=3))
    assert len(device) == len(host)
    for h, d in zip(host, device, strict=True):
        assert set(h) == set(d)
        for k in h:
            assert isinstance(d[k], jax.Array)
            np.testing.assert_array_equal(np.asarray(d[k]), h[k])
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    sharded = next(jb.device_prefetch(jb.Loader(ds, jb.PadToMax(8), seed=4), sharding=sharding))
    assert sharded["tokens"].sharding == sharding
    np.testing.assert_array_equal(np.asarray(sharded["tokens"]), host[0]["tokens"])
    with pytest.raises(ValueError, match="size must be an int >= 1"):
        next(jb.device_prefetch([], size=0))


def small_batches_dataset(length=None):
    # PadToMax(4) batches of at most 128 bytes: host_memory_limit=624 holds 4.
    return jb.Dataset.from_arrays(
        {"t": [np.arange(length or k % 4 + 1, dtype=np.int32) for k in range(40)]}
    )


def test_keeping_more_batches_than_host_memory_limit_holds_raises_instead_of_hanging():
    ds = small_batches_dataset()
    with pytest.raises(
        RuntimeError,
        match=r"host_memory_limit=624 holds 4 batches of up to 128 bytes and all are still "
        r"referenced by the caller",
    ):
        list(
            jb.Loader(ds, jb.PadToMax(4), prefetch=1, host_memory_limit=624, padded_segments=False)
        )
    # A consumer that lets go of its batches gets every example.
    loader = jb.Loader(
        ds, jb.PadToMax(4), prefetch=1, host_memory_limit=624, padded_segments=False, shuffle=False
    )
    assert [i for b in loader for i in b["example_index"].tolist()] == list(range(40))


def test_next_is_interruptible_while_it_waits():
    import signal
    import time

    def interrupt(signum, frame):
        raise KeyboardInterrupt("from the test's timer")

    ds = small_batches_dataset(length=4)  # 128 bytes each: 4 fit, never 5
    loader = jb.Loader(ds, jb.PadToMax(4), prefetch=1, host_memory_limit=624, padded_segments=False)
    kept = [next(loader) for _ in range(4)]  # every buffer the limit allows
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt, match="from the test's timer"):
            next(loader)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 0.9  # before the deadlock check would raise (1 s)
    del kept
    assert next(loader)["example_index"].size == 4  # the loader still works
    loader.close()


def test_state_from_other_data_of_the_same_size_is_refused():
    loader = jb.Loader(make_dataset(n=30, seed=0), jb.PadToMax(8))
    next(loader)
    state = loader.get_state()
    with pytest.raises(ValueError, match="the state was saved for other data \\(fingerprint"):
        jb.Loader(make_dataset(n=30, seed=1), jb.PadToMax(8), state=state)
    # A version-2 state without a fingerprint (saved before it was added)
    # still restores exactly; a version-3 one always has it (test_loader_state.py).
    old = {k: v for k, v in state.items() if k != "fingerprint"} | {"version": 2}
    expected = drain(jb.Loader(make_dataset(n=30), jb.PadToMax(8)))[1:]
    assert drain(jb.Loader(make_dataset(n=30), jb.PadToMax(8), state=old)) == expected


@pytest.mark.parametrize(
    ("change", "epochs", "message"),
    [
        ({"step": 4}, 1, "the state's step 4 is past the end of epoch 0, which has 4 steps"),
        ({"epoch": 2, "step": 0}, 1, r"past the end of the stream; expected epoch < 1 \(epochs=1"),
        ({"epoch": 1, "step": 1}, 1, r"position \(epoch 1, step 1\) is past the end"),
        ({"epoch": 2**63 - 1}, None, "past the end of the stream; expected epoch <"),
        ({"epoch": 2**63}, None, r"the state's epoch must be in \[0, 2\*\*63\), found"),
        ({"step": -1}, 1, r"the state's step must be in \[0, 2\*\*63\), found -1"),
        ({"batches": 1.5}, 1, "the state's batches must be an int, found float 1.5"),
        ({"examples": True}, 1, "the state's examples must be an int, found bool"),
        ({"seed": None}, 1, "the state's seed must be an int, found null"),
        ({"step": None, "epoch": None}, 1, "the state's epoch must be an int"),
        ({"version": 7}, 1, "expected a state of version 4, found 7"),
        ({"fingerprint": "not hex"}, 1, "the state's fingerprint must be 16 hex digits"),
        ({"shuffle": "sorted"}, 1, "shuffle must be 'none', 'global' or 'block', found 'sorted'"),
        ({"shard": [0]}, 1, r"the state's shard must be \[index, count\], found \[0\]"),
    ],
)
def test_malformed_or_out_of_range_state_is_refused(change, epochs, message):
    ds = make_dataset(n=30)  # PadToMax(8): 4 steps per epoch
    state = jb.Loader(ds, jb.PadToMax(8), epochs=epochs).get_state()
    with pytest.raises(ValueError, match=message):
        jb.Loader(ds, jb.PadToMax(8), epochs=epochs, state={**state, **change})


def test_get_state_is_the_engines_text_and_restores_through_json():
    """get_state() is the JSON text the engine writes (load/state_json.h),
    parsed: every field, in the engine's order; saved as JSON (or holding
    NumPy ints) it restores the rest of the stream exactly."""
    from jaxbatch import _core

    ds = make_dataset(n=30)
    loader = jb.Loader(ds, jb.PadToMax(8), epochs=2, shuffle="block", block_size=8)
    expected = drain(jb.Loader(ds, jb.PadToMax(8), epochs=2, shuffle="block", block_size=8))[3:]
    drain(loader, 3)
    state = loader.get_state()
    fields = ["seed", "epoch", "step", "batches", "examples", "skipped", "quarantined",
              "dropped", "padding_batches", "truncated", "real_elements", "padded_elements",
              "real_edges", "padded_edges", "version", "num_examples", "fingerprint", "planner",
              "shuffle", "block_size", "shard"]  # fmt: skip
    assert list(state) == fields
    assert (state["step"], state["batches"], state["shuffle"], state["block_size"]) == (
        3, 3, "block", 8,
    )  # fmt: skip
    assert state["shard"] == [0, 1] and len(state["fingerprint"]) == 16
    assert json.loads(
        _core.loader_state_to_json(_core.loader_state_from_json(json.dumps(state)))
    ) == (state)
    options = {"epochs": 2, "shuffle": "block", "block_size": 8}
    from_file = json.loads(json.dumps(state))
    assert drain(jb.Loader(ds, jb.PadToMax(8), state=from_file, **options)) == expected
    as_numpy = {k: np.int64(v) if isinstance(v, int) else v for k, v in state.items()}
    assert drain(jb.Loader(ds, jb.PadToMax(8), state=as_numpy, **options)) == expected
    with pytest.raises(ValueError, match="the state is not a dict from get_state\\(\\): set"):
        jb.Loader(ds, jb.PadToMax(8), state={**state, "step": {1}}, **options)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ([1, 2], "state must be a dict from get_state\\(\\), found list"),
        ({"version": 1}, "the state lacks 'num_examples', 'planner', 'seed'"),
    ],
)
def test_state_that_is_not_a_get_state_dict_is_refused(state, message):
    with pytest.raises(ValueError, match=message):
        jb.Loader(make_dataset(n=30), jb.PadToMax(8), state=state)


def test_state_at_the_end_of_the_stream_restores_to_an_empty_stream():
    loader = jb.Loader(make_dataset(n=30), jb.PadToMax(8), epochs=2)
    drain(loader)
    state = loader.get_state()
    assert (state["epoch"], state["step"]) == (2, 0)
    assert drain(jb.Loader(make_dataset(n=30), jb.PadToMax(8), epochs=2, state=state)) == []


@pytest.mark.parametrize("epochs", [1, 3])
def test_stats_count_truncated_examples(epochs):
    ds = make_dataset(n=80)  # lengths 1..59
    planner = jb.FixedBuckets([16, 32], batch_size=4, too_long="truncate")
    loader = jb.Loader(ds, planner, epochs=epochs)
    batches = list(loader)
    expected = int((ds.lengths() > 32).sum())  # the NumPy reference
    assert expected > 0
    assert loader.stats.truncated == epochs * expected
    # What was yielded agrees: lengths are cut to 32.
    cut = sum(int((b["tokens_lengths"] == 32).sum()) for b in batches)
    assert cut == epochs * int((ds.lengths() >= 32).sum())
    state = loader.get_state()
    assert state["truncated"] == epochs * expected
    resumed = jb.Loader(ds, planner, epochs=epochs, state=state)
    assert list(resumed) == [] and resumed.stats.truncated == epochs * expected


def test_loader_without_truncation_counts_none():
    loader = jb.Loader(make_dataset(n=30), jb.PadToMax(8))
    list(loader)
    assert loader.stats.truncated == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"column": "y"},
            ValueError,
            "column 'y' is fixed-shape; batching by length needs a ragged column, such as 'tokens'",
        ),
        ({"column": "nope"}, ValueError, "no column 'nope'"),
        ({"pad_value": {"nope": 1}}, ValueError, "pad_value names column 'nope', which the data"),
        ({"prefetch": 2**63}, ValueError, "prefetch must be below 2\\*\\*63, found"),
        ({"block_size": 2**63}, ValueError, "block_size must be below 2\\*\\*63"),
        ({"host_memory_limit": 2**64}, ValueError, "host_memory_limit must be below 2\\*\\*63"),
        ({"epochs": 2**63}, ValueError, "epochs must be below 2\\*\\*63"),
        ({"max_errors": 2**63}, ValueError, "max_errors must be below 2\\*\\*63"),
        ({"prefetch": "2"}, ValueError, "prefetch must be an int, found str '2'"),
        ({"seed": 2**70}, ValueError, "seed must be an int in \\[0, 2\\*\\*64\\), found"),
    ],
)
def test_bad_loader_options_name_the_option(kwargs, error, message):
    with pytest.raises(error, match=message):
        jb.Loader(make_dataset(n=10), jb.PadToMax(4), **kwargs)


def test_old_state_without_truncated_still_restores():
    loader = jb.Loader(make_dataset(n=30), jb.PadToMax(8))
    next(loader)
    saved = loader.get_state()
    # Saved by version 2, before either was added.
    state = {k: v for k, v in saved.items() if k not in ("truncated", "fingerprint")}
    state["version"] = 2
    expected = drain(jb.Loader(make_dataset(n=30), jb.PadToMax(8)))[1:]
    assert drain(jb.Loader(make_dataset(n=30), jb.PadToMax(8), state=state)) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (jb.ColumnSchema(max_length=2**63), "schema for column 'tokens': max_length must be below"),
        (jb.ColumnSchema(min_length=-1), "schema for column 'tokens': min_length must be >= 0"),
        (jb.ColumnSchema(inner_shape=[2**63]), "column 'tokens': inner_shape must be below 2"),
        (jb.ColumnSchema(max_length="9"), "column 'tokens': max_length must be an int, found str"),
    ],
)
def test_bad_schema_values_name_the_column_and_field(spec, message):
    with pytest.raises(ValueError, match=message):
        jb.Loader(make_dataset(n=10), jb.PadToMax(4), schema={"tokens": spec})


def test_next_after_close_raises_unless_the_data_had_ended():
    # A stream cut short must not pass for one that ended (StopIteration).
    cut = jb.Loader(make_dataset(n=40), jb.PadToMax(8))
    next(cut)
    cut.close()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Loader: closed; next\\(\\) after close\\(\\)"):
            next(cut)
    ended = jb.Loader(make_dataset(n=40), jb.PadToMax(8))
    assert len(drain(ended)) == 5
    ended.close()
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(ended)


@pytest.mark.parametrize(
    "planner",
    [jb.Pack(8, 2), jb.Pack(8, 2, too_long="split"), jb.PadToMax(2),
     jb.AutoBuckets(2, batch_size=2), jb.FixedBuckets([4, 8], batch_size=2)],
    ids=lambda p: type(p).__name__,
)  # fmt: skip
def test_batch_packed_is_the_engines_layout(planner):
    """Each batch's `packed` comes from the engine's batch (the binding passes
    it), the same as the plan's for collate: packed rows for Pack, padded
    rows otherwise, with the segment slots to match."""
    # 11 is longer than the rows: split into pieces by the second Pack.
    lengths = (
        (3, 5, 2, 7, 11, 1) if getattr(planner, "too_long", "") == "split" else (3, 5, 2, 7, 1)
    )
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(n) for n in lengths]})
    planned = jb.plan(ds, planner)
    with jb.Loader(ds, planner, shuffle=False) as loader:
        batches = list(loader)
    assert len(batches) == len(planned)
    for batch, spec in zip(batches, planned, strict=True):
        assert batch.packed is jb.collate(ds, spec).packed is isinstance(planner, jb.Pack)
        assert batch.segments == (batch.shape.segments if batch.packed else 1)
