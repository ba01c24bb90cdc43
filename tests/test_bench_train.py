"""bench/bench_train.py --quick: the training ways (naive, expert, jaxbatch) run, see the same real
tokens, and their compilation counts have the structure their batching
implies. Nothing here depends on timing."""

import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_train  # noqa: E402
import harness  # noqa: E402
from conftest import run_bench_quick  # noqa: E402


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    return run_bench_quick(bench_train, "bench_train", tmp_path_factory.mktemp("results"))


def test_quick_run_reports_every_way_with_finite_losses(quick_result):
    runs = quick_result["runs"]
    assert set(runs) == set(bench_train.WAYS)
    reps = quick_result["config"]["reps"]
    assert reps == harness.QUICK_REPS
    for way, rs in runs.items():
        assert len(rs) == reps, way
        for r in rs:
            assert math.isfinite(r["held_out_loss"]), way
            # Trained: below the loss of a uniform guess over 256 bytes.
            assert r["held_out_loss"] < math.log(bench_train.VOCAB), way
            assert 0 <= r["padded_fraction"] < 1, way
            assert r["steps"] >= 1 and r["compilations"] >= 1, way
    summary = quick_result["summary"]
    assert set(summary) == set(bench_train.WAYS)
    assert summary["naive"]["held_out_loss"]["n"] == reps


def test_quick_run_trains_every_way_on_the_same_real_tokens(quick_result):
    train_set, _ = bench_train.split(bench_train.QUICK_TOKENS, bench_train.QUICK_EVAL_EXAMPLES)
    expected = sum(len(e) for e in train_set)
    assert quick_result["config"]["tokens"] == expected
    for way, rs in quick_result["runs"].items():
        assert {r["real_tokens"] for r in rs} == {expected}, way


def test_quick_run_compilations_follow_from_the_batching(quick_result):
    first = {way: rs[0] for way, rs in quick_result["runs"].items()}
    counts = {way: r["compilations"] for way, r in first.items()}
    assert counts["pack"] == 1
    assert counts["buckets"] <= bench_train.BUCKET_SHAPES
    assert counts["naive"] >= counts["pad64"]
    # One compilation per distinct shape, and every repetition recompiles.
    for way, rs in quick_result["runs"].items():
        assert {r["compilations"] for r in rs} == {len(first[way]["shapes"])}, way
    assert all(shape[1] % bench_train.PAD_MULTIPLE == 0 for shape in first["pad64"]["shapes"])
    assert first["pack"]["shapes"] == [[bench_train.PACK_ROWS, bench_train.MAX_LEN]]
    assert first["padmax"]["shapes"] == [[bench_train.NAIVE_BATCH, bench_train.MAX_LEN]]
    # Hand buckets: power-of-two lengths, each with the element budget's rows.
    for rows, length in first["hand_buckets"]["shapes"]:
        assert length >= bench_train.HAND_MIN_LENGTH and length & (length - 1) == 0
        assert rows == bench_train.BUCKET_BUDGET // length


def test_quick_run_reports_speedups_over_the_best_expert_way(quick_result):
    runs = quick_result["runs"]
    for way in bench_train.JAXBATCH_WAYS:
        s = quick_result["speedups"][way]
        assert s["n"] == quick_result["config"]["reps"]
        # The slowest of the repetitions against the faster expert of its own.
        best = [min(a["wall_seconds"], b["wall_seconds"]) for a, b in zip(runs["padmax"],
                runs["hand_buckets"], strict=True)]  # fmt: skip
        ratios = [b / r["wall_seconds"] for b, r in zip(best, runs[way], strict=True)]
        assert s["min"] == pytest.approx(min(ratios)) and s["max"] == pytest.approx(max(ratios))


def test_naive_compiles_once_per_distinct_padded_length():
    train_set, _ = bench_train.split(3 * 16 * 300, 16)
    longest = {
        max(len(e) for e in train_set[i : i + bench_train.NAIVE_BATCH])
        for i in range(0, len(train_set), bench_train.NAIVE_BATCH)
    }
    shapes = {b["tokens"].shape[1] for b in bench_train.batches("naive", train_set)}
    assert shapes == longest
    rounded = {b["tokens"].shape[1] for b in bench_train.batches("pad64", train_set)}
    assert rounded == {-(-n // 64) * 64 for n in longest}


def _run(real_tokens=100, loss=2.0, compilations=1):
    return {"real_tokens": real_tokens, "held_out_loss": loss, "compilations": compilations}


def _runs(**overrides):
    runs = {
        "naive": [_run(compilations=5)],
        "pad64": [_run(compilations=3)],
        "padmax": [_run()],
        "hand_buckets": [_run(compilations=5)],
        "buckets": [_run(compilations=4)],
        "pack": [_run()],
    }
    runs.update(overrides)
    return runs


def test_check_accepts_agreeing_runs():
    checks = bench_train.check(_runs(pack=[_run(loss=2.05)]), 100, 0.05)
    assert checks["loss_median"] == 2.0
    assert checks["loss_max_relative_gap"] == pytest.approx(0.025)


@pytest.mark.parametrize(
    "runs, message",
    [
        (_runs(pack=[_run(real_tokens=99)]), "pack trained on 99 real tokens, expected 100"),
        (_runs(buckets=[_run(loss=float("nan"), compilations=4)]), "held-out loss is nan"),
        (_runs(pack=[_run(loss=2.5)]), "held-out losses disagree"),
        (_runs(pack=[_run(compilations=2)]), "Pack compiled 2 shapes"),
        (_runs(buckets=[_run(compilations=5)]), "AutoBuckets compiled 5"),
        (_runs(pad64=[_run(compilations=6)]), "multiple of 64"),
        (_runs(padmax=[_run(compilations=2)]), "padding to 512 compiled 2"),
        (_runs(hand_buckets=[_run(compilations=7)]), "hand buckets compiled 7 > 6"),
    ],
)
def test_check_fails_loudly(runs, message):
    with pytest.raises(AssertionError, match=message):
        bench_train.check(runs, 100, 0.05)


def test_refuses_to_run_above_the_load(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "getloadavg", lambda: (1000.0, 0.0, 0.0))
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    assert bench_train.main(["--quick"]) == 1
    assert not (tmp_path / "bench_train.json").exists()
