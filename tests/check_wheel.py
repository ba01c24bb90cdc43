"""`pip wheel` of a read-only copy of the checkout: the build may write
nothing inside the source tree (pyproject.toml names no build-dir, so
scikit-build-core builds in a temporary folder), and the wheel ships the
extension with its type stubs and the py.typed marker.

Run by `make test-wheel` (part of `make test`), not by pytest: it builds the
C++ from scratch, a few minutes on 2 cores. As root, file modes do not stop
writes, so the tree is also compared before and after the build.

Usage: python tests/check_wheel.py [PIP_ARGS...]  (passed to pip wheel; e.g.
--config-settings=build-dir=build/x shows the check fail)
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 1800  # seconds; about 3 minutes on 2 cores
WANTED = ("jaxbatch/py.typed", "jaxbatch/_core.pyi", "jaxbatch/__init__.py")


def source_files() -> list[str]:
    """The checkout's files as git sees them (tracked and new, not ignored)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(tree)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in tree.rglob("*")
        if not p.is_symlink()
    }


def set_writable(tree: Path, writable: bool) -> None:
    for p in [tree, *tree.rglob("*")]:
        mode = p.stat().st_mode
        write = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        p.chmod(mode | stat.S_IWUSR if writable else mode & ~write)


def check_wheel(wheel: Path) -> list[str]:
    names = zipfile.ZipFile(wheel).namelist()
    problems = [f"the wheel lacks {w}" for w in WANTED if w not in names]
    if not any(n.startswith("jaxbatch/_core") and n.endswith((".so", ".pyd")) for n in names):
        problems.append("the wheel lacks the extension jaxbatch/_core*.so")
    return problems


def main(pip_args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="jaxbatch-wheel-") as tmp:
        source, wheels = Path(tmp) / "source", Path(tmp) / "wheels"
        for f in source_files():
            (source / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, source / f)
        set_writable(source, False)
        before = snapshot(source)
        start = time.perf_counter()
        env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
        # Under ccache (the Makefile's launcher), paths are hashed relative to
        # this folder, and scikit-build-core's own temporary build folder is
        # made inside it: every run compiles the same relative paths, so an
        # unchanged file is not compiled again.
        env.update(TMPDIR=tmp, CCACHE_BASEDIR=tmp)
        try:
            build = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                 "--no-deps", "-w", str(wheels), *pip_args, str(source)],
                cwd=tmp, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
            )  # fmt: skip
        finally:
            set_writable(source, True)  # so the folder can be removed
        seconds = time.perf_counter() - start
        if build.returncode != 0:
            print(build.stdout[-4000:], build.stderr[-4000:], sep="\n", file=sys.stderr)
            print(f"check_wheel: pip wheel of a read-only checkout failed ({seconds:.0f} s)")
            return 1
        written = sorted(set(snapshot(source).items()) - set(before.items()))
        problems = [f"the build wrote {path} in the source tree" for path, _ in written[:10]]
        built = sorted(wheels.glob("jaxbatch-*.whl"))
        problems += check_wheel(built[0]) if built else ["pip wheel made no jaxbatch wheel"]
        for p in problems:
            print(f"check_wheel: {p}", file=sys.stderr)
        if not problems:
            print(f"check_wheel: {built[0].name} from a read-only checkout in {seconds:.0f} s")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
