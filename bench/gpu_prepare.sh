#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu_check.sh runs on a GPU machine
# (CPython 3.12 there, no network): the committed tree as a tar, and
# jaxbatch's extension built from it for CPython 3.12, so the GPU's minutes
# are not spent compiling. Carry the folder it writes (default build/gpu,
# ignored by git, a few MB). gpu_check.sh uses the extension only when the
# tar's C++ and build files are the ones it was built from (core.stamp), and
# builds there otherwise. The build folder (build/gpu-cmake) stays here, so
# a commit that changes no C++ rebuilds nothing.
#
#   bench/gpu_prepare.sh    # then, there: bash bench/gpu_check.sh, carrying build/gpu
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu}
cmake_dir=${out}-cmake
py=${PY312:-$HOME/.pyenv/versions/3.12.1/bin/python3.12}
venv=${VENV:-.venv}

# What the extension is built from: the C++, CMake files and pyproject.toml
# (gpu_check.sh computes the same over the tree it unpacks).
core_stamp() {
  (cd "$1" && find cc cmake CMakeLists.txt pyproject.toml -type f | LC_ALL=C sort |
    xargs sha256sum | sha256sum | cut -d' ' -f1)
}

mkdir -p "$out/ext"
rm -rf "$out/src"
git rev-parse HEAD >"$out/commit"
git archive HEAD -o "$out/src.tar"
mkdir -p "$out/src" && tar -xf "$out/src.tar" -C "$out/src"
stamp=$(core_stamp "$out/src")
if [ "$stamp" != "$(cat "$out/core.stamp" 2>/dev/null)" ] || ! ls "$out"/ext/_core.cpython-312-*.so >/dev/null 2>&1; then
  # Built where the sources stay put, so ninja rebuilds only what changed.
  mkdir -p "$cmake_dir/src"
  (cd "$out/src" && find . -type f) | while read -r f; do
    cmp -s "$out/src/$f" "$cmake_dir/src/$f" ||
      { mkdir -p "$(dirname "$cmake_dir/src/$f")" && cp "$out/src/$f" "$cmake_dir/src/$f"; }
  done
  "$venv/bin/cmake" -S "$cmake_dir/src" -B "$cmake_dir/build" -G Ninja -DSKBUILD=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_MAKE_PROGRAM="$PWD/$venv/bin/ninja" \
    -DPython_EXECUTABLE="$py" -Dnanobind_DIR="$("$venv/bin/python" -m nanobind --cmake_dir)" \
    >"$cmake_dir/cmake.log"
  "$venv/bin/cmake" --build "$cmake_dir/build" -j"${JOBS:-2}" --target _core >>"$cmake_dir/cmake.log"
  rm -f "$out"/ext/_core.*.so
  cp "$cmake_dir"/build/_core.cpython-312-*.so "$out/ext/"
  echo "$stamp" >"$out/core.stamp"
fi
rm -rf "$out/src"
echo "prepared $out for $(git log -1 --oneline)"
du -sh "$out"
