"""bench/bench_ray.py --quick: every contender (jb.run, jaxbatch.ray.run with
1 and 2 workers, Ray Data's expert map_batches and jaxbatch.ray.Stage) runs in
a loopback-only network namespace and gives jb.run's outputs (the benchmark
checks them itself and fails otherwise); the JSON has what the page quotes.
Nothing depends on timing."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_ray  # noqa: E402
import loopback  # noqa: E402


@pytest.mark.timeout(900)
def test_quick_run_checks_every_contender_and_writes_its_results(tmp_path):
    reason = loopback.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    assert (
        bench_ray.main(["--quick", "--force", "--reps", "1", "--results-dir", str(tmp_path)]) == 0
    )
    result = json.loads((tmp_path / "bench_ray.json").read_text())
    assert set(result["contenders"]) == {
        "jb.run",
        "ray-1",
        "ray-2",
        "ray-data-expert",
        "ray-data-stage",
    }
    assert result["examples"] == bench_ray.QUICK_EXAMPLES
    contenders = result["contenders"]
    for name in ("jb.run", "ray-1", "ray-2"):
        # One plan, whoever runs it: the same padding.
        assert contenders[name]["padding_efficiency"] == contenders["jb.run"]["padding_efficiency"]
    # One worker compiles the plan's shapes once, as jb.run does.
    assert contenders["ray-1"]["compilations"] == contenders["jb.run"]["compilations"]
    # The expert pads each batch to its longest: more shapes, more padding.
    expert = contenders["ray-data-expert"]
    assert expert["padding_efficiency"] < contenders["jb.run"]["padding_efficiency"]
    blocks = result["block_planning"]
    assert [b["block"] for b in blocks] == [*bench_ray.BLOCK_SIZES, bench_ray.QUICK_EXAMPLES]
    assert blocks[-1]["shapes"] <= 8
    assert result["commit_rate"]["units"] > 1
