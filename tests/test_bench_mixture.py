"""bench/bench_mixture.py --quick: every section runs and its checks pass
(each jaxbatch segment is its source's example, Grain's rows hold only its
sources' tokens); the shares, padding and scale figures are in range. No
assertion depends on timing."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_mixture  # noqa: E402
from conftest import run_bench_quick  # noqa: E402


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    return run_bench_quick(bench_mixture, "bench_mixture", tmp_path_factory.mktemp("results"))


@pytest.mark.timeout(600)
def test_quick_run_measures_every_section(quick_result):
    shares = quick_result["shares"]["worst_pp"]
    # Token weights hold within a point in every window; example weights
    # on sources of eightfold lengths cannot (their token shares differ).
    assert shares['jaxbatch unit="tokens"'] < 1.0
    assert shares['jaxbatch unit="examples"'] > 10.0
    padding = quick_result["padding"]
    assert 0.5 < padding["alone_weighted"] <= 1.0 and 0.5 < padding["mixture"] <= 1.0
    assert set(quick_result["throughput"]) >= {"jaxbatch mixture", "jaxbatch one source"}
    scale = quick_result["scale"]
    for k in bench_mixture.SCALE_KS:
        jaxbatch = scale[f"jaxbatch K={k}"]
        assert jaxbatch["threads"] == scale["jaxbatch K=1"]["threads"]  # not one per source
        assert jaxbatch["state_bytes"] < 300 * k + 1000  # a few integers per source
