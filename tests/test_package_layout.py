"""The package's structure, read from its source (the AST): no import
cycle among jaxbatch's modules, no module importing another's private name,
no import of a jaxbatch module inside a function (the usual way to hide a
cycle), and every public option default equal to the engine's."""

import ast
import dataclasses
from pathlib import Path

import jaxbatch as jb
from jaxbatch import _core

PACKAGE = Path(jb.__file__).parent
# Public faces may import what they re-export; nothing imports them back.
FACES = {
    "jaxbatch",
    "jaxbatch.masked",
    "jaxbatch.checkpoint",
    "jaxbatch.grain",
    "jaxbatch.ray",
    "jaxbatch.__main__",
}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]):
    """(target module, imported name or None, inside a function?) for every
    import of a jaxbatch module in `path`."""
    tree = ast.parse(path.read_text())
    nested = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
    }
    for node in ast.walk(tree):
        local = id(node) in nested
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jaxbatch":
                    yield alias.name, None, local
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] != "jaxbatch":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    yield sub, None, local
                else:
                    yield node.module, alias.name, local


def graph():
    known = modules()
    edges = {m: set() for m in known}
    problems = []
    for name, path in known.items():
        for target, imported, local in imports(name, path, known):
            if target == "jaxbatch._core" or (target == "jaxbatch" and imported == "_core"):
                continue  # The engine's binding: every layer's to use.
            if name in FACES and imported == "__all__":
                continue
            if name not in FACES and target in FACES:
                problems.append(f"{name} imports the public face {target}")
            if local:
                problems.append(f"{name} imports {target} inside a function")
            if imported and imported.startswith("_"):
                problems.append(f"{name} imports the private name {target}.{imported}")
            edges[name].add(target)
    return edges, problems


def test_no_import_cycle_no_private_names_no_hidden_imports():
    edges, problems = graph()
    assert not problems, "\n".join(problems)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(n) :], n]))
            if n in edges and not state.get(n):
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m)


def test_the_implementation_mirrors_the_engine():
    """jaxbatch._src has the engine's areas (cc/jaxbatch) and holds every
    module but the public faces."""
    areas = {p.name for p in (PACKAGE / "_src").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {"data", "plan", "collate", "load", "job", "base"} <= areas
    loose = [m for m in modules() if m not in FACES and not m.startswith("jaxbatch._src")]
    assert loose == [], loose


def test_integrations_have_an_area_of_their_own():
    """Hugging Face, Grain, Orbax and Ray code lives in _src/integrations (each
    with an optional dependency), so load/ holds loading and data/ the
    engine's sources; every module of the area names its optional package."""
    area = PACKAGE / "_src" / "integrations"
    assert {p.stem for p in area.glob("*.py")} == {
        "__init__",
        "grain",
        "grain_checkpoint",
        "huggingface",
        "orbax",
        "ray",
        "ray_data",
        "ray_units",
        "state_files",  # The checkpoint's state files, read by orbax and grain_checkpoint.
    }
    for other in ("load", "data"):
        held = {p.stem for p in (PACKAGE / "_src" / other).glob("*.py")}
        assert not held & {"grain", "checkpoint", "huggingface", "orbax", "ray"}, (other, held)
    needs = {"grain": "grain", "grain_checkpoint": "grain", "huggingface": "datasets"}
    needs.update(orbax="orbax")
    needs.update(ray="ray", ray_data="ray", ray_units="ray")
    for name, package in needs.items():
        assert package in (area / f"{name}.py").read_text(), name


def test_public_option_defaults_are_the_engines():
    """Every planner's and LoaderOptions' defaults, against the core's
    options types (an engine default changed in C++ reaches Python)."""
    for planner, core in (
        (jb.PadToMax, _core.PadToMaxOptions),
        (jb.FixedBuckets, _core.FixedBucketsOptions),
        (jb.AutoBuckets, _core.AutoBucketsOptions),
        (jb.Pack, _core.PackOptions),
    ):
        defaults = core()
        for f in dataclasses.fields(planner):
            if f.default is dataclasses.MISSING:
                continue
            value = getattr(defaults, f.name)
            value = value.name if hasattr(value, "name") else value
            value = tuple(value) if isinstance(value, list) else value  # as _to_python holds it
            assert f.default == value, (planner.__name__, f.name, f.default, value)
    core = _core.LoaderOptions()
    options = jb.LoaderOptions()
    assert options.block_size == core.schedule.block_size
    assert options.seed == core.schedule.seed
    assert options.prefetch == core.prefetch
    assert options.epochs == core.epochs
    assert options.on_error == _core.error_policy_name(core.on_error)
    assert options.pad_value == core.default_pad_value
    assert _core.shuffle_mode_name(core.schedule.shuffle) == "global" and options.shuffle is True
