import json
import os
from pathlib import Path

import pytest

# XLA's executables persist between runs (JAX's persistent compilation cache,
# keyed by the program's HLO, the compiler options and JAX's version, so a
# changed program compiles anew), for the processes the suite starts too: a
# warm run skips the compilations that took over a second (MiniLM's, the
# benchmarks' training steps). At most 1 GiB, least recently used dropped.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / "build" / "jax-cache")
)
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(1 << 30))
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _memory_plan_cache(tmp_path_factory):
    """Memory plans are cached per user (execute/plan_cache.py): the suite,
    and the processes it starts, keep theirs apart from the user's."""
    saved = os.environ.get("JAXBATCH_CACHE_DIR")
    os.environ["JAXBATCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("jaxbatch-cache"))
    yield
    if saved is None:
        os.environ.pop("JAXBATCH_CACHE_DIR", None)
    else:
        os.environ["JAXBATCH_CACHE_DIR"] = saved


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
