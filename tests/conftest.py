import json
import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def run_bench_quick(module, name: str, results_dir) -> dict:
    """Runs a benchmark's main(["--quick", "--force"]) with its JSON written
    to `results_dir` (not bench/results/); returns the JSON."""
    import harness  # bench/, put on sys.path by the test that calls this

    saved = harness.RESULTS_DIR
    harness.RESULTS_DIR = results_dir
    try:
        assert module.main(["--quick", "--force"]) == 0
    finally:
        harness.RESULTS_DIR = saved
    return json.loads((results_dir / f"{name}.json").read_text())
