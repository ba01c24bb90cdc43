"""bench/bench_tokenize.py --quick: every contender's Parquet holds the
tokenizer's own ids (the benchmark checks it before printing and fails
otherwise), and its figures are there for each; nothing depends on timing."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_tokenize  # noqa: E402
import harness  # noqa: E402
from conftest import run_bench_quick  # noqa: E402


def test_quick_run_checks_every_contender_and_times_them(tmp_path):
    result = run_bench_quick(bench_tokenize, "bench_tokenize", tmp_path)
    assert result["documents"] == 300 and result["tokens"] > 300
    for name in bench_tokenize.CONTENDERS:
        runs = result["runs"][name]
        assert len(runs) == harness.QUICK_REPS
        assert {r["tokens"] for r in runs} == {result["tokens"]}, name
    assert set(result["ratios"]) == {
        "jb.tokenize/expert",
        "jb.tokenize/expert-numpy",
        "expert/expert-numpy",
        "expert-numpy/expert",
    }
