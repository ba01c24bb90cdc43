"""Huge sizes: products that overflow int64 are refused naming the option,
stats never go negative, and a plan's memory follows the data, not the
batch size (padding rows are not stored)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jaxbatch as jb

INT64_MAX = 2**63 - 1
LENGTHS = [5, 3, 9, 2]


def small_dataset():
    return jb.Dataset.from_arrays({"tokens": [np.arange(k, dtype=np.int32) for k in LENGTHS]})


BIG_ROWS = 2**40
INT32_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: jb.PadToMax(BIG_ROWS, pad_to_multiple=2**30),
         ["batch_size=1099511627776", "pad_to_multiple=1073741824"]),
        # Refused when built: no data can make these fit.
        (lambda: jb.FixedBuckets([INT32_MAX], batch_size=BIG_ROWS),
         ["batch_size=1099511627776", "boundaries[0]=2147483647"]),
        (lambda: jb.Pack(row_length=INT32_MAX, rows_per_batch=BIG_ROWS),
         ["row_length=2147483647", "rows_per_batch=1099511627776"]),
        (lambda: jb.AutoBuckets(1, batch_size=BIG_ROWS, pad_to_multiple=2**30),
         ["batch_size=1099511627776", "pad_to_multiple=1073741824"]),
    ],
    ids=["PadToMax", "FixedBuckets", "Pack", "AutoBuckets"],
)  # fmt: skip
def test_shape_overflow_is_refused_naming_the_option(make, names):
    ds = small_dataset()
    # The Loader refuses it when it is made (from the options, or from them
    # and the longest example), not at its first batch.
    for run in (lambda: jb.plan(ds, make()), lambda: jb.Loader(ds, make())):
        with pytest.raises(ValueError) as error:
            run()
        message = str(error.value)
        for name in names:
            assert name in message, message
        assert f"more than {INT64_MAX}" in message


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: jb.PadToMax(1, pad_to_multiple=2**31), "PadToMax: pad_to_multiple="),
        (lambda: jb.FixedBuckets([4, 2**31], token_budget=2**62), "FixedBuckets: boundaries[1]="),
        (lambda: jb.AutoBuckets(2, batch_size=1, pad_to_multiple=2**31),
         "AutoBuckets: pad_to_multiple="),
        (lambda: jb.Pack(2**31, 1), "Pack: row_length="),
        (lambda: jb.Pack(8, 1, max_segments_per_row=2**31), "Pack: max_segments_per_row="),
        (lambda: jb.GraphBudget(nodes=2**31, edges=8, graphs=4), "GraphBudget: nodes="),
        (lambda: jb.GraphBudget(nodes=8, edges=2**31, graphs=4), "GraphBudget: edges="),
        (lambda: jb.GraphBuckets(2, nodes=8, edges=8, graphs=2**31), "GraphBuckets: graphs="),
    ],
    ids=["PadToMax", "FixedBuckets", "AutoBuckets", "Pack", "segments", "nodes", "edges", "graphs"],
)  # fmt: skip
def test_extents_past_int32_are_refused_when_built(make, option):
    # A batch's lengths, positions, segment ids, n_node, n_edge and node and
    # graph ids are int32: an option past that would plan, then fail at the
    # first batch. It fails where it is written, naming the option.
    with pytest.raises(ValueError) as error:
        make()
    assert f"{option}2147483648 exceeds 2147483647, the most a batch's int32 " in str(error.value)


def test_stats_saturate_instead_of_going_negative():
    lengths = [2**61] * 4  # two batches of 2 x 2**61: 2**63 elements in all
    plan = jb.plan(lengths, jb.PadToMax(2))
    assert len(plan) == 2
    assert plan.stats.padded_elements == INT64_MAX
    assert plan.stats.real_elements == INT64_MAX
    assert plan.stats.occupied_elements == INT64_MAX
    assert 0 <= plan.stats.efficiency <= 1


def naive_pad_to_max(lengths, batch_size):
    """Reference: consecutive batches, each padded to its longest example."""
    out = []
    for start in range(0, len(lengths), batch_size):
        ids = list(range(start, min(start + batch_size, len(lengths))))
        rows = [[i] for i in ids] + [[]] * (batch_size - len(ids))
        out.append(((batch_size, max(lengths[i] for i in ids)), rows))
    return out


@pytest.mark.parametrize("batch_size", [1, 3, 5, 2**27])
def test_plan_stores_only_rows_that_hold_examples(batch_size):
    plan = jb.plan(LENGTHS, jb.PadToMax(batch_size))
    want = naive_pad_to_max(LENGTHS, batch_size)
    assert len(plan) == len(want)
    core = plan._core
    assert len(core.row_example_begin) == len(LENGTHS) + 1  # O(examples), not O(rows)
    for spec, (shape, rows) in zip(plan, want, strict=True):
        assert (spec.shape.rows, spec.shape.length) == shape
        assert [int(e) for e in spec.example_ids] == [e for r in rows for e in r]
        if batch_size < 100:
            assert [list(r) for r in spec.rows] == rows
    assert plan.stats.padded_elements == sum(r * n for (r, n), _ in want)


# Run in a child process under a 2 GiB address-space limit: before, each
# of these stored one entry per padding row and needed 16+ GiB (bad_alloc
# or the OOM killer).
HUGE_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    import jaxbatch as jb
    from jaxbatch._src.cli.main import main

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    big = 2**31
    lengths = [5, 3, 9, 2]
    for planner, rows in [
        (jb.PadToMax(batch_size=big), big),
        # A budget's rows are spread evenly over the shape's batches: the
        # four examples fill one batch of 4 rows (plan/balance.h).
        (jb.FixedBuckets([16], token_budget=16 * big), 4),
        (jb.AutoBuckets(2, token_budget=big), None),
        (jb.Pack(16, rows_per_batch=big), big),
    ]:
        plan = jb.plan(lengths, planner)
        assert sorted(int(e) for s in plan for e in s.example_ids) == [0, 1, 2, 3], planner
        assert rows is None or all(s.shape.rows == rows for s in plan), planner
        assert plan.stats.padded_elements == sum(s.shape.rows * s.shape.length for s in plan)
    # 2**31 shards of a two-batch plan: shard 0 gets both batches, another none.
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(k) for k in lengths]})
    for index, want in [(0, [0, 1, 2, 3]), (big - 1, [])]:
        loader = jb.Loader(ds, jb.PadToMax(2), shuffle=False, shard=(index, big))
        got = [int(e) for b in loader for e in b["example_index"] if e >= 0]
        assert got == want, (index, got)
        assert loader.stats.padding_batches == 2 * big - 2
    with open(sys.argv[1], "w") as f:
        f.write("a b c d e\\na b c\\na b c d e f g h i\\na b\\n")
    assert main(["plan", sys.argv[1], "--token-budget", str(big)]) == 0
    print("ok")
    """
)


@pytest.mark.timeout(360)  # Above its subprocess's own 300 s limit.
def test_huge_batch_sizes_and_shard_counts_plan_in_memory_of_the_data(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", HUGE_SCRIPT, str(tmp_path / "lines.txt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize("threads", [1025, 10**6])
def test_absurd_thread_counts_are_refused_naming_num_threads(threads):
    ds = small_dataset()
    with pytest.raises(
        ValueError, match=f"num_threads must be at most 1024 threads, found {threads}"
    ):
        jb.Loader(ds, jb.PadToMax(2), num_threads=threads)
    plan = jb.plan(ds, jb.PadToMax(2))
    with pytest.raises(
        ValueError, match=f"collate: num_threads must be at most 1024 threads, found {threads}"
    ):
        jb.collate(ds, plan[0], num_threads=threads)


def test_negative_thread_counts_are_refused_by_the_engine_with_one_rule():
    ds = small_dataset()
    plan = jb.plan(ds, jb.PadToMax(2))
    for call, who in (
        (lambda: jb.Loader(ds, jb.PadToMax(2), num_threads=-1), "Loader"),
        (lambda: jb.collate(ds, plan[0], num_threads=-1), "collate"),
    ):
        with pytest.raises(
            ValueError, match=f"{who}: num_threads must be >= 1 \\(or 0 for automatic\\), found -1"
        ):
            call()
    # 0 asks the engine for the CPU count, as for the Loader.
    np.testing.assert_array_equal(
        jb.collate(ds, plan[0], num_threads=0)["tokens"],
        jb.collate(ds, plan[0], num_threads=1)["tokens"],
    )


# 1000 workers of 8 MiB stacks under a 3 GiB address space: std::thread
# fails part way. Before, that was std::terminate ("terminate called
# without an active exception"); now a RuntimeError naming num_threads, the
# started workers joined, and the process carries on.
THREADS_SCRIPT = textwrap.dedent(
    """
    import resource
    import numpy as np
    import jaxbatch as jb

    ds = jb.Dataset.from_arrays({"tokens": [np.arange(k) for k in [5, 3, 9, 2]]})
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    try:
        jb.Loader(ds, jb.PadToMax(2), num_threads=1000)
        print("started")
    except RuntimeError as e:
        assert "Loader: num_threads=1000" in str(e), e
        print("refused")
    got = [b["example_index"].tolist() for b in jb.Loader(ds, jb.PadToMax(2), shuffle=False)]
    assert got == [[0, 1], [2, 3]], got
    print("ok")
    """
)


@pytest.mark.timeout(360)  # Above its subprocess's own 300 s limit.
def test_thread_that_cannot_start_raises_instead_of_aborting():
    result = subprocess.run(
        [sys.executable, "-c", THREADS_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["refused", "ok"]


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: jb.PadToMax(8, pad_to_multiple=2**64), "pad_to_multiple"),
        (lambda: jb.PadToMax(2**63), "batch_size"),
        (lambda: jb.FixedBuckets([2**64], batch_size=2), r"boundaries\[0\]"),
        (lambda: jb.FixedBuckets([4], token_budget=2**63), "token_budget"),
        (lambda: jb.Pack(row_length=2**70, rows_per_batch=1), "row_length"),
        (lambda: jb.AutoBuckets(2**63, batch_size=1), "max_shapes"),
    ],
)
def test_options_past_int64_are_refused_naming_the_option(make, name):
    with pytest.raises(ValueError, match=f"{name} must be .*at most 2\\*\\*63 - 1"):
        jb.plan(LENGTHS, make())
    with pytest.raises(ValueError, match=r"shard must be \(index, count\)"):
        jb.Loader(small_dataset(), jb.PadToMax(2), shard=(0, 2**64))
