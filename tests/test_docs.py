"""Every Python block in docs/*.md runs as written, top to bottom per page.
A page that starts Ray (docs/ray.md) runs in a process of its own in a
network namespace with only loopback up (bench/loopback.py), as the Ray
tests do; it is skipped, saying why, where one cannot be made or Ray is not
installed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = sorted((Path(__file__).parent.parent / "docs").glob("*.md"))
PAGES = [p for p in DOCS if "```python" in p.read_text()]


def test_every_pitfall_has_a_page_with_an_example():
    names = {p.stem for p in PAGES}
    assert names >= {
        "shapes-and-axes",
        "memory",
        "broadcasting",
        "data-loading",
        "errors",
        "performance",
        "padding-and-masking",
        "multi-host",
    }


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation but
    hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_index_links_each_integration_to_a_section_that_exists():
    """docs/index.md has an entry for Hugging Face, Grain, Orbax, multi-host
    and C++, and every link on it names a page and (after #) a heading of
    that page that exist."""
    index = (DOCS[0].parent / "index.md").read_text()
    rows = [line for line in index.splitlines() if line.startswith("| ")]
    for topic in ("Hugging Face", "Grain", "Orbax", "many hosts", "C++"):
        assert any(row.startswith(f"| {topic}") for row in rows), topic
    links = re.findall(r"\]\(([\w.-]+\.md)(?:#([\w-]+))?\)", index)
    assert len(links) >= 15, links
    for page, anchor in links:
        target = DOCS[0].parent / page
        assert target.is_file(), page
        if anchor:
            prose = re.sub(r"```.*?```", "", target.read_text(), flags=re.S)  # not code's #
            headings = re.findall(r"^#+ (.*)$", prose, re.M)
            assert anchor in {_anchor(h) for h in headings}, (page, anchor)


# Pages whose examples start Ray.
RAY_PAGES = {"ray"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
@pytest.mark.timeout(600)
def test_page_examples_run(page):
    if page.stem in RAY_PAGES:
        _run_in_loopback_namespace(page)
    else:
        run_page(page)


def _run_in_loopback_namespace(page: Path) -> None:
    pytest.importorskip("ray")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import loopback

    reason = loopback.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    done = subprocess.run(
        loopback.command([sys.executable, __file__, page]),
        env=loopback.env(),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def run_page(page: Path) -> None:
    """Runs every Python block of `page` in one scope, in order."""
    scope: dict = {}
    try:
        text = page.read_text()
        for block in re.finditer(r"```python\n(.*?)```", text, re.S):
            # Blank lines up to the block's first line: line numbers are the
            # page's, so a traceback points at the page's line and
            # inspect.getsource (Grain names its transforms with it) finds
            # the function's own source, not whatever a block-relative line
            # number lands on.
            padded = "\n" * text.count("\n", 0, block.start(1)) + block.group(1)
            exec(compile(padded, str(page), "exec"), scope)
    finally:
        # A class a page defines can outlive it (jax's pytree registry keeps
        # every Flax NNX Module class, and so its globals, this dict, until
        # exit); emptying the dict frees the page's loaders and datasets now.
        scope.clear()


def test_cpp_md_plans_and_collates_with_the_example_programs_own_lines():
    """docs/cpp.md's Plan and Collate blocks are lines of
    examples/cpp/plan_and_collate.cc, which ctest builds and runs, so what
    the page shows compiles and does what it says."""
    folder = DOCS[0].parent
    page = (folder / "cpp.md").read_text()
    section = page.split("## Planning and collating without a Loader")[1].split("\n## ")[0]
    program = (folder.parent / "examples" / "cpp" / "plan_and_collate.cc").read_text()
    lines = {line.strip() for line in program.splitlines()}
    blocks = re.findall(r"```cpp\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    for line in "".join(blocks).splitlines():
        assert not line.strip() or line.strip() in lines, line


if __name__ == "__main__":
    run_page(Path(sys.argv[1]))
