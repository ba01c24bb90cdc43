"""Parquet streamed by row groups: the stream equals reading the file whole,
memory stays bounded by host_memory_limit, and failures name the row group."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbatch as jb

PLANNERS = {
    "pad": lambda: jb.PadToMax(8),
    "fixed": lambda: jb.FixedBuckets([8, 16, 32], batch_size=6),
    "auto": lambda: jb.AutoBuckets(3, token_budget=256),
}


def write_parquet(path, n=600, row_group_size=40, seed=0, packable=False):
    """tokens (the length column), noise (ragged, not aligned: padded to its
    longest example in the whole file) and label (fixed); `packable` leaves
    noise out (packing needs every ragged column aligned)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, n)
    columns = {
        "tokens": pa.array(
            [np.arange(k, dtype=np.int32) + 100 * i for i, k in enumerate(lengths)],
            pa.list_(pa.int32()),
        ),
        "label": pa.array(np.arange(n, dtype=np.int64) * 7),
    }
    if not packable:
        columns["noise"] = pa.array(
            [rng.random(int(k), dtype=np.float32) for k in rng.integers(0, 6, n)],
            pa.list_(pa.float32()),
        )
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def batches(loader, count=None):
    """Copies of the loader's batches (a streaming loader's buffers are few)."""
    out = []
    for batch in loader:
        out.append({k: np.array(v) for k, v in batch.items()})
        if count is not None and len(out) == count:
            break
    return out


def assert_same_stream(expected, got):
    assert len(got) == len(expected)
    for step, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert a.keys() == b.keys(), f"batch {step}"
        for key in a:
            assert a[key].dtype == b[key].dtype, f"batch {step}, {key}"
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"batch {step}, {key}")


# Batch buffers and gathers take about 17 kB of it; the cache holds 2 to 4
# of the 600-example file's 15 row groups (about 4 kB each), so batches
# evict row groups and read them again. The limits here are sized for
# batches without padded segment ids and positions (LEAN), which would
# double the buffers of the padded columns.
LIMIT = 32_000
LEAN = dict(padded_segments=False)
# Pack(32, 4)'s batches carry [rows, S] lengths, segment starts and example
# index beside the rows: about 34.5 kB of buffers with two workers.
PACK_LIMIT = 40_000


@pytest.mark.parametrize("planner", sorted(PLANNERS))
@pytest.mark.parametrize("shuffle", [False, True, "block"])
def test_stream_equals_the_whole_file(tmp_path, planner, shuffle):
    path = write_parquet(tmp_path / "data.parquet")
    options = dict(
        shuffle=shuffle, block_size=80, seed=5, epochs=2, num_threads=2, prefetch=2, **LEAN
    )
    whole = batches(jb.Loader(path, PLANNERS[planner](), **options))
    with jb.Loader(
        path, PLANNERS[planner](), stream=True, host_memory_limit=LIMIT, **options
    ) as loader:
        assert_same_stream(whole, batches(loader))
        # Every row group at least once per epoch: 15 groups, 2 epochs.
        assert loader.stats.chunk_reads >= 30
        assert loader.stats.examples == 1200


def test_block_shuffle_with_row_group_blocks_reads_each_row_group_about_once(tmp_path):
    """shuffle="block" keeps the planner's batch order, which follows the
    shuffled blocks: with blocks of one row group a batch reads the row group
    its predecessor read (at most one more), not one anywhere in the file.
    One worker, so the count does not hang on the scheduler (with two, one
    running ahead evicts a group the other needs: 15-19 reads under load)."""
    path = write_parquet(tmp_path / "data.parquet")  # 15 row groups of 40
    reads = {}
    for shuffle in ("block", True):
        options = dict(shuffle=shuffle, block_size=40, seed=5, num_threads=1, prefetch=2)
        with jb.Loader(path, jb.PadToMax(8), stream=True, host_memory_limit=LIMIT, **options) as ld:
            order = [e for b in ld for e in b["example_index"] if e >= 0]
            reads[shuffle] = ld.stats.chunk_reads
        assert sorted(order) == list(range(600))
    # Every row group once (measured: 15 in 15 runs under load), with room
    # for a re-read where a batch straddles two blocks.
    assert 15 <= reads["block"] <= 20
    assert reads[True] > 2 * reads["block"]


def test_sharded_stream_with_aligned_columns_equals_the_whole_file(tmp_path):
    rng = np.random.default_rng(4)
    tokens = [np.arange(k, dtype=np.int32) for k in rng.integers(1, 30, 300)]
    table = pa.table({
        "tokens": pa.array(tokens, pa.list_(pa.int32())),
        "labels": pa.array([t[::-1].astype(np.int64) for t in tokens], pa.list_(pa.int64())),
    })  # fmt: skip
    path = tmp_path / "aligned.parquet"
    pq.write_table(table, path, row_group_size=25)
    for shard in [(0, 3), (2, 3)]:
        options = dict(aligned=[["tokens", "labels"]], shard=shard, seed=3, prefetch=2, **LEAN)
        whole = batches(jb.Loader(path, jb.AutoBuckets(3, token_budget=256), **options))
        streamed = jb.Loader(
            path, jb.AutoBuckets(3, token_budget=256), stream=True, host_memory_limit=48_000,
            **options,
        )  # fmt: skip
        assert_same_stream(whole, batches(streamed))
        streamed.close()


def test_packed_stream_equals_the_whole_file(tmp_path):
    path = write_parquet(tmp_path / "data.parquet", packable=True)
    options = dict(seed=2, num_threads=2, prefetch=2)
    whole = batches(jb.Loader(path, jb.Pack(32, 2), **options))
    with jb.Loader(path, jb.Pack(32, 2), stream=True, host_memory_limit=LIMIT, **options) as s:
        assert_same_stream(whole, batches(s))


@pytest.mark.parametrize("algorithm", ["best_fit", "first_fit"])
def test_packed_stream_without_shuffle_reads_each_row_group_once_with_a_window(tmp_path, algorithm):
    """Pack without a window keeps every row open over the whole file (best
    fit also sorts every example by length), so each batch takes examples
    from across the file and reads row groups again and again (measured:
    228 and 149 reads of 15 row groups here, 3,043 of 29 in
    docs/data-loading.md), and the loader warns; with a lookahead of the
    row-group size each row group is read about once. Both streams equal
    reading the file whole.

    The reads are counted with one worker: with two, a worker running ahead
    can evict a row group the other still needs, and how often depends on
    the scheduler (15-17 reads on an idle machine, 21 seen on a loaded one)."""
    path = write_parquet(tmp_path / "data.parquet", packable=True)  # 15 row groups of 40
    options = dict(shuffle=False, prefetch=2, **LEAN)
    windowed = jb.Pack(32, 4, algorithm=algorithm, lookahead=40)
    whole = batches(jb.Loader(path, windowed, num_threads=2, **options))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No re-read warning.
        for threads in (2, 1):
            with jb.Loader(
                path, windowed, stream=True, host_memory_limit=PACK_LIMIT, num_threads=threads,
                **options,
            ) as s:  # fmt: skip
                assert_same_stream(whole, batches(s))
                reads = s.stats.chunk_reads
        # One worker: once each (measured: 15 in 30 runs of each algorithm),
        # with room for a re-read where a batch straddles two row groups.
        assert 15 <= reads <= 20
    unbounded = jb.Pack(32, 4, algorithm=algorithm)
    options["num_threads"] = 2
    whole = batches(jb.Loader(path, unbounded, **options))
    with pytest.warns(RuntimeWarning, match=r"more than 4 per row group .* lookahead=<the row"):
        with jb.Loader(path, unbounded, stream=True, host_memory_limit=PACK_LIMIT, **options) as s:
            assert_same_stream(whole, batches(s))
            assert s.stats.chunk_reads > 4 * 15


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 300),
    row_group_size=st.integers(1, 64),
    seed=st.integers(0, 2**32 - 1),
    shuffle=st.sampled_from([False, True, "block"]),
)
def test_stream_equals_the_whole_file_for_any_row_groups(
    tmp_path_factory, n, row_group_size, seed, shuffle
):
    path = write_parquet(
        tmp_path_factory.mktemp("p") / "d.parquet", n=n, row_group_size=row_group_size, seed=seed
    )
    options = dict(shuffle=shuffle, block_size=16, seed=seed, num_threads=2, prefetch=2)
    whole = batches(jb.Loader(path, jb.AutoBuckets(3, token_budget=128), **options))
    # Row groups of up to 64 examples: about 10 kB each. The limit must hold
    # prefetch + 2 batches and 2 gathers: 6 x ~11.4 kB when one short example
    # makes AutoBuckets' whole 128-token batch (n=1, seed=482 needed 68,472),
    # plus two row groups.
    streamed = jb.Loader(
        path, jb.AutoBuckets(3, token_budget=128), stream=True, host_memory_limit=128_000, **options
    )
    assert_same_stream(whole, batches(streamed))
    streamed.close()


@pytest.mark.parametrize("on_error", ["skip", "quarantine"])
def test_bad_records_are_found_per_row_group_as_in_the_whole_file(tmp_path, on_error):
    path = write_parquet(tmp_path / "data.parquet")
    options = dict(
        schema={"tokens": jb.ColumnSchema(max_length=20)}, on_error=on_error, seed=1, num_threads=2
    )
    whole = jb.Loader(path, jb.PadToMax(8), **options)
    expected = batches(whole)
    with jb.Loader(path, jb.PadToMax(8), stream=True, host_memory_limit=LIMIT, **options) as s:
        assert_same_stream(expected, batches(s))
        assert s.quarantine == whole.quarantine
        lengths = pq.read_table(path).column("tokens").combine_chunks().value_lengths()
        bad = int((np.asarray(lengths) > 20).sum())
        assert s.stats.skipped + s.stats.quarantined == bad > 0
        assert {**vars(s.stats), "chunk_reads": 0} == vars(whole.stats)


def test_bad_record_under_raise_names_the_example(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")
    first_bad = int(
        np.argmax(np.asarray(pq.read_table(path)["tokens"].combine_chunks().value_lengths()) > 20)
    )
    loader = jb.Loader(
        path, jb.PadToMax(8), schema={"tokens": jb.ColumnSchema(max_length=20)}, stream=True,
        host_memory_limit=LIMIT,
    )  # fmt: skip
    with pytest.raises(ValueError, match=f"example {first_bad}: column 'tokens'"):
        next(loader)
    loader.close()


def test_null_in_a_later_row_group_is_named_by_its_example_index_in_the_file(tmp_path):
    tokens = [[1, 2]] * 30
    tokens[23] = [1, None]  # row group 2 (of 10 examples each), its example 3
    labels = [[0]] * 30
    labels[17] = None  # row group 1, a null list
    path = tmp_path / "data.parquet"
    table = pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32())), "label": labels})
    pq.write_table(table, path, row_group_size=10)
    for columns, row_group, example in ((["tokens"], 2, 23), (["label"], 1, 17)):
        options = dict(columns=columns, host_memory_limit=LIMIT)
        with pytest.raises(ValueError, match=f"row group {row_group}: .*, example {example}: "):
            jb.Loader(path, jb.PadToMax(4), stream=True, **options)
        with pytest.raises(ValueError, match=f", example {example}: expected no null"):
            jb.Loader(path, jb.PadToMax(4), stream=False, **options)


def test_restore_resumes_exactly_and_states_move_between_bulk_and_stream(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")
    options = dict(seed=9, epochs=2, num_threads=2, prefetch=2, **LEAN)
    whole = jb.Loader(path, jb.AutoBuckets(3, token_budget=256), **options)
    expected = batches(whole)
    streamed = jb.Loader(
        path, jb.AutoBuckets(3, token_budget=256), stream=True, host_memory_limit=LIMIT, **options
    )
    head = batches(streamed, 7)
    state = json.loads(json.dumps(streamed.get_state()))
    streamed.close()
    resumed = jb.Loader(
        path, jb.AutoBuckets(3, token_budget=256), stream=True, host_memory_limit=LIMIT,
        state=state, **options,
    )  # fmt: skip
    assert_same_stream(expected, head + batches(resumed))
    # A state saved by the bulk reader resumes the stream, and back.
    bulk = jb.Loader(path, jb.AutoBuckets(3, token_budget=256), **options)
    batches(bulk, 11)
    resumed.set_state(bulk.get_state())
    assert_same_stream(expected[11:], batches(resumed))
    resumed.close()


def corrupt_row_group(path, group):
    """Overwrites the middle of row group `group`'s first column chunk,
    keeping the file's size and modification time (so only reading it shows
    the damage)."""
    meta = pq.ParquetFile(path).metadata.row_group(group).column(0)
    start = meta.data_page_offset + meta.total_compressed_size // 3
    stat = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * (meta.total_compressed_size // 3))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_corrupt_row_group_mid_run_ends_the_stream_naming_it(tmp_path, monkeypatch):
    path = write_parquet(tmp_path / "data.parquet", n=400, row_group_size=40)
    # Row group 8 (examples 320..359: batches 40.. need it) reads as damaged
    # when the feeder reads it again, as the disk's bit rot would: through a
    # damaged copy, for no write to the file could keep its stamp (a Loader
    # sees the status-change time move) and only reading may show this.
    rotten = tmp_path / "rotten.parquet"
    rotten.write_bytes(path.read_bytes())
    corrupt_row_group(rotten, 8)
    from jaxbatch._src.data.sources import StreamedParquet

    read_chunk, opened = StreamedParquet.read_chunk, []

    def damage_first(self, reader, group):
        if opened and group == 8 and not opened[0]:
            opened[0] = True
            reader = pq.ParquetFile(rotten)
        return read_chunk(self, reader, group)

    monkeypatch.setattr(StreamedParquet, "read_chunk", damage_first)
    # One thread, one batch ahead: row group 8 is far from what is read ahead.
    loader = jb.Loader(
        path, jb.PadToMax(8), shuffle=False, stream=True, host_memory_limit=LIMIT,
        num_threads=1, prefetch=1,
    )  # fmt: skip
    opened.append(False)  # Opening read every row group; now the stream runs.
    got = []
    with pytest.raises(OSError, match=f"row group 8 of {path}|{path}, chunk 8"):
        for batch in loader:
            got.append(np.array(batch["example_index"]))
    assert len(got) == 40
    np.testing.assert_array_equal(np.concatenate(got), np.arange(320))
    loader.close()


def test_file_changed_while_streaming_is_named(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")
    loader = jb.Loader(path, jb.PadToMax(8), stream=True, host_memory_limit=LIMIT, **LEAN)
    next(loader)
    write_parquet(path, n=500, seed=3)
    # Found before a batch (the core), before or after a read (the feeder), or
    # in a row group that no longer matches what opening recorded.
    changed = "changed (while the loader reads it|since the loader opened it)"
    with pytest.raises(OSError, match=f"{path}.*{changed}"):
        batches(loader)
    loader.close()


def test_options_that_cannot_stream_are_refused(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")
    with pytest.raises(ValueError, match="stream=True needs host_memory_limit"):
        jb.Loader(path, jb.PadToMax(8), stream=True)
    with pytest.raises(ValueError, match="stream=True reads a Parquet file; got a Dataset"):
        jb.Loader(jb.Dataset.from_arrow(pq.read_table(path)), jb.PadToMax(8), stream=True)
    with pytest.raises(ValueError, match="stream must be None, True or False"):
        jb.Loader(path, jb.PadToMax(8), stream="yes")
    arrow = tmp_path / "data.arrow"
    feather.write_feather(pq.read_table(path), arrow)
    with pytest.raises(ValueError, match="stream=True reads Parquet files by row group"):
        jb.Loader(arrow, jb.PadToMax(8), stream=True, host_memory_limit=LIMIT)
    with pytest.raises(ValueError, match=r"twice the largest chunk \(\d+ bytes decoded"):
        jb.Loader(
            path, jb.PadToMax(8), stream=True, host_memory_limit=20_000, num_threads=2, **LEAN
        )


def test_threads_left_to_the_loader_fit_the_limit(tmp_path):
    """A limit too small for two asked-for threads streams with the threads
    the loader picks itself (one), whatever the machine's cores, and gives
    the batches of reading the file whole."""
    path = write_parquet(tmp_path / "data.parquet")
    with jb.Loader(path, jb.PadToMax(8), stream=True, host_memory_limit=20_000, **LEAN) as loader:
        assert loader.num_threads == 1
        got = batches(loader)
    assert_same_stream(batches(jb.Loader(path, jb.PadToMax(8), **LEAN)), got)


def test_streams_by_itself_when_the_file_exceeds_the_limit(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")
    table = pq.read_table(path)
    decoded = sum(len(table[n].combine_chunks().flatten()) * 4 for n in ("tokens", "noise"))
    assert LIMIT < decoded  # The file decodes to more than the limit: it streams.
    with jb.Loader(path, jb.PadToMax(8), host_memory_limit=LIMIT, **LEAN) as loader:
        batches(loader)
        assert loader.stats.chunk_reads >= 15
    with jb.Loader(path, jb.PadToMax(8), host_memory_limit=10 * decoded) as loader:
        batches(loader)
        assert loader.stats.chunk_reads == 0  # Small enough: read whole.


RSS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import pyarrow.parquet  # noqa: F401 - its memory belongs to the baseline
    import jaxbatch as jb
    from jaxbatch import _core

    def status(key):  # VmRSS now, VmHWM the peak: this process's own (ru_maxrss
        with open("/proc/self/status") as f:  # would start at the forking parent's)
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key))

    big, small, limit, stream = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    options = dict(shuffle=False, num_threads=2)
    if stream:
        options.update(stream=True, host_memory_limit=limit)
    for _ in jb.Loader(small, jb.PadToMax(64), **options):  # Threads, reader, pools: warm.
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # The peak restarts from here.
    baseline = status("VmRSS")
    loader = jb.Loader(big, jb.PadToMax(64), **options)
    digest = 0
    for batch in loader:
        for name in sorted(batch):
            digest = _core.hash64(np.ascontiguousarray(batch[name]).tobytes(), digest)
    peak = status("VmHWM")
    stats = loader.stats
    print(json.dumps({"growth": peak - baseline, "examples": stats.examples,
                      "reads": stats.chunk_reads, "digest": digest}))
    """
)


def write_big(path, groups, per_group, length):
    writer = None
    rng = np.random.default_rng(0)
    for _ in range(groups):
        lengths = rng.integers(length // 2, length * 3 // 2, per_group)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = (np.arange(offsets[-1], dtype=np.int32) % 1000).astype(np.int32)
        tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        table = pa.table({"tokens": tokens})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


# What the process adds beside the limit while it streams: a fixed part
# (pyarrow's reader and allocator pools, malloc's per-thread arenas, thread
# stacks) and a part per example (every ragged column's lengths, and the
# plans of the current and the next epoch, as an in-memory loader keeps).
# Measured over the limit on Linux with glibc: 25, 35 and 55 MB for 100,000,
# 200,000 and 400,000 examples, i.e. about 15 MB + 100 bytes per example.
FIXED_OVERHEAD = 32 << 20
OVERHEAD_PER_EXAMPLE = 128


@pytest.mark.timeout(660)  # Two subprocesses of up to 300 s each.
def test_streaming_equals_reading_whole_with_rss_under_the_limit_plus_overhead(tmp_path):
    big, small = tmp_path / "big.parquet", tmp_path / "small.parquet"
    write_big(big, groups=200, per_group=1000, length=500)  # ~400 MB of tokens decoded
    write_big(small, groups=2, per_group=100, length=500)
    limit = 64 << 20
    decoded = pq.ParquetFile(big).metadata.row_group(0).column(0).num_values * 4 * 200
    assert decoded > 5 * limit  # int32 tokens alone, about 400 MB

    def run(stream):
        out = subprocess.run(
            [sys.executable, "-c", RSS_SCRIPT, str(big), str(small), str(limit), str(int(stream))],
            capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
        return json.loads(out.stdout)

    streamed, whole = run(stream=True), run(stream=False)
    assert streamed["digest"] == whole["digest"]  # Every batch, byte for byte.
    assert streamed["examples"] == whole["examples"] == 200_000
    assert streamed["reads"] == 200  # shuffle=False: each row group read once.
    assert whole["growth"] > 5 * limit  # Read whole, it does not fit the limit.
    overhead = FIXED_OVERHEAD + OVERHEAD_PER_EXAMPLE * 200_000  # 57.6 MB
    assert streamed["growth"] < limit + overhead, (streamed, whole)


def test_map_over_a_streaming_loader_equals_map_over_the_whole_file(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")

    def total(example):
        return example["tokens"].sum() + example["label"]

    whole = jb.map(total, jb.Loader(path, jb.PadToMax(8), shuffle=False))
    streamed = jb.Loader(
        path, jb.PadToMax(8), shuffle=False, stream=True, host_memory_limit=LIMIT, **LEAN
    )
    got = jb.map(total, streamed)
    assert sorted(got.outputs) == sorted(whole.outputs) == list(range(600))
    table = pq.read_table(path)
    for e in range(600):
        expected = sum(table["tokens"][e].as_py()) + 7 * e
        assert int(got.outputs[e]) == int(whole.outputs[e]) == expected


def test_keeping_more_batches_than_the_buffers_share_is_named(tmp_path):
    path = write_parquet(tmp_path / "data.parquet")
    # One thread: with two, a later batch can take the last buffer before the
    # one the consumer waits for, which then stalls one kept batch sooner.
    loader = jb.Loader(
        path, jb.PadToMax(8), shuffle=False, stream=True, host_memory_limit=LIMIT, prefetch=2,
        num_threads=1,
    )  # fmt: skip
    kept = []
    with pytest.raises(RuntimeError, match=r"\(\d+ for batch buffers, the rest for row groups\)"):
        for batch in loader:
            kept.append(batch)  # Never released: the buffers' share runs out.
    assert len(kept) >= 4  # prefetch + 2 batches fit.
    loader.close()


EXIT_SCRIPT = textwrap.dedent(
    """
    import faulthandler, os, signal, sys, threading
    import jaxbatch as jb

    # Ctrl-C raises KeyboardInterrupt as at a terminal, even when this runs
    # under a background job, which inherits SIGINT ignored (then the kill
    # below did nothing and the endless stream ran until the timeout).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A hang shows every thread's stack and fails, instead of a bare timeout.
    faulthandler.dump_traceback_later(50, exit=True)

    loader = jb.Loader(sys.argv[1], jb.PadToMax(8), stream=True, host_memory_limit=32_000,
                       padded_segments=False, epochs=None)
    next(loader)
    if sys.argv[2] == "interrupt":  # Ctrl-C while the stream runs, never caught.
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        for batch in loader:
            pass
    print("left without close")  # The feeder still runs: closed at exit.
    """
)


@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_ctrl_c_and_exit_without_close_end_the_feeder_cleanly(tmp_path, how):
    path = write_parquet(tmp_path / "data.parquet")
    out = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(path), how],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert "Timeout (0:00:50)!" not in out.stderr, out.stderr  # faulthandler's dump of a hang
    assert "terminate called" not in out.stderr and "Fatal Python error" not in out.stderr
    if how == "exit":
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "left without close"
    else:
        assert "KeyboardInterrupt" in out.stderr, out.stderr
        assert out.returncode in (1, -signal.SIGINT), out.stderr


CLOSE_CYCLES_SCRIPT = textwrap.dedent(
    """
    import faulthandler, hashlib, json, random, sys, time
    import numpy as np
    import jaxbatch as jb

    path, cycles = sys.argv[1], int(sys.argv[2])
    options = dict(seed=3, num_threads=2, prefetch=2)

    def digest(batch):
        h = hashlib.sha256()
        for key in sorted(batch):
            h.update(key.encode() + np.ascontiguousarray(batch[key]).tobytes())
        return h.hexdigest()

    # The reference: every batch of the file read whole, and the state before each.
    whole = jb.Loader(path, jb.Pack(32, 2), **options)
    states, expected = [whole.get_state()], []
    for batch in whole:
        expected.append(digest(batch))
        states.append(whole.get_state())
    rng = random.Random(0)
    read = 0
    for cycle in range(cycles):
        # A hang anywhere in the cycle (a close that never returns) prints
        # every thread's stack and exits 1, instead of stalling the suite.
        faulthandler.dump_traceback_later(30, exit=True)
        start = rng.randrange(len(expected) - 3)
        loader = jb.Loader(path, jb.Pack(32, 2), stream=True, host_memory_limit=32_000,
                           padded_segments=False, state=states[start], **options)
        for k in range(rng.randrange(4)):
            time.sleep(rng.random() * 0.001)
            assert digest(next(loader)) == expected[start + k], (cycle, start, k)
            read += 1
        time.sleep(rng.random() * 0.001)
        loader.close()
        faulthandler.cancel_dump_traceback_later()
    print(json.dumps({"cycles": cycles, "batches": read}))
    """
)


def test_streaming_loaders_restored_mid_epoch_always_close(tmp_path):
    # Closing a streaming loader could hang (7 closes in 400): one landing
    # while a worker used a row group left that worker waiting for another
    # that the feeder, gone, never read. Every batch must also be the one
    # reading the file whole gives.
    path = write_parquet(tmp_path / "data.parquet", n=300, row_group_size=20, packable=True)
    cycles = 400
    out = subprocess.run(
        [sys.executable, "-c", CLOSE_CYCLES_SCRIPT, str(path), str(cycles)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert "Timeout (0:00:30)!" not in out.stderr, out.stderr  # faulthandler's dump of a hang
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["cycles"] == cycles
    assert result["batches"] > cycles  # The cycles read batches, not only opened and closed.


@pytest.mark.parametrize("when", ["before", "during"])
def test_close_before_or_during_next_raises_instead_of_ending(tmp_path, monkeypatch, when):
    # Ending quietly (StopIteration) would pass a stream cut short for one
    # that reached the end of its data.
    from jaxbatch._src.data.sources import StreamedParquet

    path = write_parquet(tmp_path / "data.parquet")
    held = threading.Event()  # Set: the reader reads nothing more.
    go_on = threading.Event()
    read_chunk = StreamedParquet.read_chunk

    def held_back(self, reader, group):
        if held.is_set():
            go_on.wait(timeout=60)
        return read_chunk(self, reader, group)

    monkeypatch.setattr(StreamedParquet, "read_chunk", held_back)
    loader = jb.Loader(
        path, jb.PadToMax(8), stream=True, host_memory_limit=LIMIT, epochs=None, **LEAN
    )
    next(loader)
    held.set()  # Once the batches read ahead are taken, next() waits.
    closer = threading.Timer(0.2, loader.close)
    if when == "before":
        loader.close()
    else:
        closer.start()  # From another thread, while next() waits.
    try:
        with pytest.raises(RuntimeError, match="Loader: closed"):
            for _ in range(100):
                next(loader)
    finally:
        go_on.set()  # The feeder may end: close() joins it.
    if when == "during":
        closer.join(timeout=60)
        assert not closer.is_alive()
    with pytest.raises(RuntimeError, match="Loader: closed; next\\(\\) after close\\(\\)"):
        next(loader)  # And on every later call.
