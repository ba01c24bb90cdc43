"""bench/bench_loader.py --quick and its output contract: every framework
present yields the reference's arrays, the vectorised collate equals the
per-example reference, and the packing anchors rebuild jaxbatch's rows.
The anchors not installed here (tf.data, Grain, torch, numba) are left out
of the run; nothing depends on timing."""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_loader  # noqa: E402
import contract  # noqa: E402
import harness  # noqa: E402
import packers  # noqa: E402
from conftest import run_bench_quick  # noqa: E402

import jaxbatch as jb  # noqa: E402


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    return run_bench_quick(bench_loader, "bench_loader", tmp_path_factory.mktemp("results"))


def test_quick_run_times_every_framework_present_on_both_plans(quick_result):
    reps = quick_result["reps"]
    assert reps == harness.QUICK_REPS
    for name in ("padded", "packed"):
        r = quick_result["plans"][name]
        assert {"jaxbatch", "NumPy"} <= set(r["runs"])
        for fw, runs in r["runs"].items():
            assert len(runs) == reps, fw
            # Every framework timed the same batches, so the same bytes.
            assert {run["bytes"] for run in runs} == {r["runs"]["jaxbatch"][0]["bytes"]}, fw
            assert {run["examples"] for run in runs} == {r["runs"]["jaxbatch"][0]["examples"]}
        assert set(r["ratios"]) == set(r["cpu_ratios"]) == set(r["runs"]) - {"jaxbatch"}
        assert r["ratios"]["NumPy"]["n"] == reps
        assert r["padded_per_real_token"] >= 1.0


def test_quick_run_packing_rows_checked(quick_result):
    packing = quick_result["packing"]
    assert set(packing["rows"]) == {
        f"{scope} {alg}"
        for scope in ("whole data set", f"window {packing['window']}")
        for alg in ("first_fit", "best_fit")
    }
    for row in packing["rows"].values():
        assert row["rows"] >= 1 and row["padded_per_token"] >= 1.0


def tokens_from(lengths) -> contract.Tokens:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.arange(1, offsets[-1] + 1, dtype=np.int32)  # distinct: a wrong copy shows
    return contract.Tokens(values, offsets)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    packed=st.booleans(),
    data=st.data(),
)
def test_vectorised_collate_matches_the_reference(lengths, packed, data):
    tokens = tokens_from(lengths)
    n = len(lengths)
    if packed:
        rows, segments = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
        ids = np.full((rows, segments), -1, np.int64)
        perm = np.array(data.draw(st.permutations(range(n))), np.int64)
        k = 0
        for r in range(rows):
            take = min(data.draw(st.integers(0, segments)), n - k)
            ids[r, :take] = perm[k : k + take]
            k += take
        boundaries = np.array([segments * 40])
    else:
        picks = data.draw(st.lists(st.integers(-1, n - 1), min_size=1, max_size=8))
        ids = np.array(picks, np.int64)
        boundaries = np.array(sorted({8, 16, 41}))
    if not (ids >= 0).any():
        ids.flat[0] = 0
    plan = contract.BatchPlan("t", "t", packed, boundaries, [ids])
    want = contract.reference_batch(tokens, plan, ids)
    got = contract.Collate(tokens, plan)(ids)
    contract.check_batch("vectorised", 0, got, want)


def test_check_batch_catches_a_changed_byte_dtype_or_name():
    tokens = tokens_from([3, 1, 4])
    ids = np.array([2, -1, 0], np.int64)
    plan = contract.BatchPlan("t", "t", False, np.array([4, 8]), [ids])
    want = contract.reference_batch(tokens, plan, ids)
    np.testing.assert_array_equal(want["tokens"][0], [5, 6, 7, 8])
    assert want["tokens"].shape == (3, 4) and want["tokens_lengths"].tolist() == [4, 0, 3]
    for change in ("byte", "dtype", "name"):
        got = {k: v.copy() for k, v in want.items()}
        if change == "byte":
            got["tokens"][1, 0] = 9
        elif change == "dtype":
            got["tokens_lengths"] = got["tokens_lengths"].astype(np.int64)
        else:
            got["mask"] = got.pop("tokens_mask")
        with pytest.raises(AssertionError):
            contract.check_batch("changed", 0, got, want)


def test_jaxbatch_loader_meets_the_contract():
    tokens = tokens_from(np.random.default_rng(0).integers(1, 300, 500))
    for planner in bench_loader.planners().values():
        plan = bench_loader.capture_plan(tokens, "t", planner, 4)
        reference = [contract.reference_batch(tokens, plan, ids) for ids in plan.batches]
        it = bench_loader.jaxbatch_variant(tokens, planner).make(len(plan.batches))
        contract.check_stream("jaxbatch", it, reference)
        it.close()


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, packers.ROW_LENGTH), min_size=1, max_size=80),
    algorithm=st.sampled_from(["first_fit", "best_fit"]),
    lookahead=st.integers(0, 20),
    short=st.booleans(),
)
def test_packers_rebuild_jaxbatch_rows(lengths, algorithm, lookahead, short):
    lengths = np.array(lengths, np.int64)
    if short:  # many examples per row: the segment cap and ties in room matter
        lengths = lengths % 97 + 1
    want = packers.jaxbatch_rows(jb.plan(lengths, packers.pack_planner(algorithm, lookahead)))
    got = packers.pack_rows(algorithm, lengths, packers.ROW_LENGTH, packers.MAX_SEGMENTS, lookahead)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
