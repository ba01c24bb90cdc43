#!/usr/bin/env bash
# jaxbatch's GPU checks, as one script for a GPU machine that has CPython 3.12
# with jax[cuda], numpy, nanobind, scikit-build-core, cmake, ninja, pytest,
# pytest-timeout, pytest-xdist, hypothesis and pyarrow, and no network.
#
# From the repository root:  bench/gpu_prepare.sh   (here: the committed tree
# and its extension for CPython 3.12, in build/gpu), then on the GPU machine
# bash bench/gpu_check.sh, with build/gpu beside it. Without build/gpu it
# takes the committed tree from .git, or the tree as it is, and builds there.
#
# It runs tests/test_gpu.py (a real OOM split and retried, memory planning
# against the measured peak, device prefetch, cuDNN packed attention; its
# numbers on lines starting with GPU-CHECK), then the CPU tests of those
# features on the GPU. Logs go to $OUT (default /tmp/jaxbatch-gpu): log (all),
# build.log, test_gpu.log, numbers.txt, cpu_tests.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/jaxbatch-gpu}
PY=${PYTHON:-python3}
PREPARED=${PREPARED:-build/gpu}
SRC=/tmp/jaxbatch-src
SITE=/tmp/jaxbatch-site
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# Tests that share the GPU (xdist workers, subprocesses) each take what they need.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
export HYPOTHESIS_PROFILE=dev

step() { echo "== $(date +%T) $*"; }

source_tree() {
  rm -rf "$SRC" && mkdir -p "$SRC"
  if [ -f "$PREPARED"/src.tar ]; then
    tar -xf "$PREPARED"/src.tar -C "$SRC"
    step "source: $PREPARED/src.tar, commit $(cat "$PREPARED"/commit 2>/dev/null)"
  elif git rev-parse HEAD >/dev/null 2>&1; then
    git archive HEAD | tar -x -C "$SRC"
    step "source: the committed tree, $(git log -1 --oneline)"
  else
    tar --exclude=./build --exclude=./.venv --exclude=./.git -cf - . | tar -x -C "$SRC"
    step "source: the tree as sent (no .git)"
  fi
}

# The same stamp as gpu_prepare.sh's: what the extension is built from.
core_stamp() {
  (cd "$1" && find cc cmake CMakeLists.txt pyproject.toml -type f | LC_ALL=C sort |
    xargs sha256sum | sha256sum | cut -d' ' -f1)
}

install_jaxbatch() {
  rm -rf "$SITE" && mkdir -p "$SITE"
  if [ "$(core_stamp "$SRC")" = "$(cat "$PREPARED"/core.stamp 2>/dev/null)" ]; then
    cp -r "$SRC/src/jaxbatch" "$SITE/" && cp "$PREPARED"/ext/_core.*.so "$SITE/jaxbatch/"
    if PYTHONPATH=$SITE "$PY" -c 'import jaxbatch._core' 2>>"$OUT/build.log"; then
      step "jaxbatch: this tree's Python, and its extension built by gpu_prepare.sh"
      return 0
    fi
    rm -rf "$SITE" && mkdir -p "$SITE"
  fi
  step "jaxbatch: building from $SRC ($CMAKE_BUILD_PARALLEL_LEVEL jobs)"
  "$PY" -m pip install --no-build-isolation --no-deps --no-index --no-compile \
    --target "$SITE" "$SRC" >>"$OUT/build.log" 2>&1 || {
    tail -40 "$OUT/build.log"
    return 1
  }
  step "jaxbatch: built"
}

main() {
  step "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c 'import sys, jax, jaxlib; print(sys.version.split()[0], "jax", jax.__version__,
jaxlib.__version__, jax.default_backend(), jax.devices())'
  source_tree
  install_jaxbatch || return 1
  export PYTHONPATH=$SITE
  # The tests must import this build, not another jaxbatch installed there.
  (cd "$SRC" && "$PY" -c 'import sys, jaxbatch; print("jaxbatch from", jaxbatch.__file__)
assert jaxbatch.__file__.startswith(sys.argv[1]), "not the build under test"' "$SITE") || return 1

  step "tests/test_gpu.py"
  (cd "$SRC" && timeout "${GPU_TESTS_SECONDS:-240}" "$PY" -m pytest tests/test_gpu.py \
    -p no:cacheprovider -s -q -rA --timeout 240) 2>&1 | tee "$OUT/test_gpu.log"
  local gpu_status=$?
  grep '^GPU-CHECK\|GPU-CHECK ' "$OUT/test_gpu.log" | sed 's/^.*GPU-CHECK /GPU-CHECK /' \
    >"$OUT/numbers.txt"

  step "the CPU tests of these features, on the GPU"
  # They compare float32 results with float64 NumPy at CPU tolerances (1e-5);
  # a GPU's float32 matmuls default to TF32 (on an H100 the graph and attention
  # tests were off by up to 4e-3 relative), so they run at full precision.
  (cd "$SRC" && JAX_DEFAULT_MATMUL_PRECISION=highest timeout "${CPU_TESTS_SECONDS:-150}" "$PY" -m pytest -p no:cacheprovider -v \
    -n "${WORKERS:-8}" --dist loadfile --timeout 150 -rfEs \
    tests/test_execute.py tests/test_packed_attention.py tests/test_masked.py \
    tests/test_loader.py tests/test_global.py tests/test_memory_plan_cache.py \
    tests/test_job.py tests/test_graph_jobs.py) 2>&1 | tee "$OUT/cpu_tests.log"
  local cpu_status=$?
  step "done: test_gpu.py exit $gpu_status, CPU tests exit $cpu_status"
  [ "$gpu_status" = 0 ] && [ "$cpu_status" = 0 ]
}

main 2>&1 | tee "$OUT/log"
