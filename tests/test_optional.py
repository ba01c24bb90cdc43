"""Optional dependencies: each feature that needs one, run with it missing
(``sys.modules[name] = None``, as Python marks a module that must not be
imported), raises an ImportError naming the feature and the extra that
installs it; and the extras named are pyproject.toml's."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jaxbatch as jb
from jaxbatch._src.base.optional import EXTRAS, optional, require
from jaxbatch._src.cli.main import main

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"


def hide(monkeypatch, name: str) -> None:
    """Makes `name` and its submodules unimportable, as if not installed."""
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, name, None)


def extra_error(extra: str, what: str) -> str:
    """The ImportError's text, as a pattern."""
    return (
        re.escape(what)
        + r".* needs .*, which is not installed: "
        + re.escape(f"pip install 'jaxbatch[{extra}]'")
    )


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_every_extra_named_is_pyprojects_and_lists_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    for module, (distribution, extra) in EXTRAS.items():
        assert extra in extras, (module, extra)
        assert distribution in {requirement_name(r) for r in extras[extra]}, (module, extra)
    # And every extra has a message: no extra that no ImportError names.
    assert set(extras) == {extra for _, extra in EXTRAS.values()}


def test_loader_reading_parquet_or_arrow_without_pyarrow(tmp_path, monkeypatch):
    for name in ("x.parquet", "x.arrow"):
        (tmp_path / name).write_bytes(b"PAR1")
    hide(monkeypatch, "pyarrow")
    for name in ("x.parquet", "x.arrow"):
        path = tmp_path / name
        with pytest.raises(ImportError, match=extra_error("arrow", f"Loader: reading {path}")):
            jb.Loader(path, jb.PadToMax(4))
    path = tmp_path / "x.parquet"
    with pytest.raises(ImportError, match=extra_error("arrow", f"Loader: reading {path}")):
        jb.Loader(path, jb.PadToMax(4), stream=True, host_memory_limit=2**20)


def test_from_arrow_run_and_read_output_without_pyarrow(tmp_path, monkeypatch):
    table = pa.table({"tokens": [[1, 2], [3]]})
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(3), np.arange(2)]})
    hide(monkeypatch, "pyarrow")
    with pytest.raises(ImportError, match=extra_error("arrow", "Dataset.from_arrow")):
        jb.Dataset.from_arrow(table)
    with pytest.raises(ImportError, match=extra_error("arrow", "jb.run (it writes Parquet)")):
        jb.run(lambda e: e["tokens"], ds, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything was made
    with pytest.raises(ImportError, match=extra_error("arrow", "jb.read_output")):
        jb.read_output(tmp_path)


def test_cli_without_pyarrow_or_matplotlib(tmp_path, monkeypatch, capsys):
    path = tmp_path / "lengths.parquet"
    path.write_bytes(b"PAR1")
    with monkeypatch.context() as m:
        hide(m, "pyarrow")
        assert main(["plan", str(path)]) == 2
        line = capsys.readouterr().err.strip()
        assert re.fullmatch(
            "jaxbatch plan: " + extra_error("arrow", f"jaxbatch plan reading {path}"), line
        ), line
    hide(monkeypatch, "matplotlib")
    assert main(["plan", "--default", "--plot", str(tmp_path / "x.png")]) == 2
    line = capsys.readouterr().err.strip()
    assert re.fullmatch("jaxbatch plan: " + extra_error("plot", "jaxbatch plan --plot"), line)


@pytest.mark.parametrize("module", ["safetensors", "tokenizers"])
def test_demo_model_without_its_packages(monkeypatch, module):
    from jaxbatch._src.cli.demo.minilm import MiniLM

    hide(monkeypatch, module)
    with pytest.raises(ImportError, match=extra_error("demo", "the demo model")):
        MiniLM()


def test_tokenize_without_tokenizers_names_its_extra(tmp_path, monkeypatch):
    hide(monkeypatch, "tokenizers")
    with pytest.raises(ImportError, match=extra_error("tokenize", "jb.tokenize")):
        jb.tokenize(["a text"], tmp_path / "out", "tokenizer.json")
    assert not (tmp_path / "out").exists()  # refused before anything was made


def test_progress_without_tqdm_logs_the_extra_and_still_maps(monkeypatch, caplog):
    ds = jb.Dataset.from_arrays({"tokens": [np.arange(3), np.arange(2)]})
    hide(monkeypatch, "tqdm")
    with caplog.at_level(logging.INFO, logger="jaxbatch"):
        result = jb.map(lambda e: e["tokens"].sum(), ds, batch_size=2, progress=True)
    assert "pip install 'jaxbatch[progress]'" in caplog.text
    assert {i: int(v) for i, v in result.outputs.items()} == {0: 3, 1: 1}


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("orbax.checkpoint", "orbax"),
        ("grain", "grain"),
        ("datasets", "huggingface"),
        ("ray", "ray"),
    ],
)
def test_integrations_name_their_extra(monkeypatch, module, extra):
    hide(monkeypatch, module.split(".")[0])
    with pytest.raises(ImportError, match=extra_error(extra, "the feature")):
        require(module, "the feature")
    assert optional(module) is None


def test_a_broken_install_is_not_reported_as_missing(tmp_path, monkeypatch):
    """A package that is there but fails to import (here: a module it needs
    is gone) keeps its own error instead of "not installed"."""
    (tmp_path / "fakepkg").mkdir()
    (tmp_path / "fakepkg" / "__init__.py").write_text("import not_there_at_all_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(EXTRAS, "fakepkg", ("fakepkg", "fake"))
    with pytest.raises(ModuleNotFoundError, match="not_there_at_all_xyz") as e:
        require("fakepkg", "the feature")
    assert "jaxbatch[fake]" not in str(e.value)
    with pytest.raises(ModuleNotFoundError, match="not_there_at_all_xyz"):
        optional("fakepkg")
