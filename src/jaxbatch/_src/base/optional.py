"""Optional dependencies: imported where a feature needs them, and when one
is missing, an ImportError naming the extra that installs it.

``EXTRAS`` is the one table of which optional package each feature needs
and which extra of pyproject.toml's ``[project.optional-dependencies]``
brings it (tests/test_optional.py checks the two agree).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Top-level module -> (the distribution pip installs, the jaxbatch extra
# that brings it).
EXTRAS: dict[str, tuple[str, str]] = {
    "pyarrow": ("pyarrow", "arrow"),
    "tqdm": ("tqdm", "progress"),
    "matplotlib": ("matplotlib", "plot"),
    "safetensors": ("safetensors", "demo"),
    "tokenizers": ("tokenizers", "tokenize"),
    "orbax": ("orbax-checkpoint", "orbax"),
    "grain": ("grain", "grain"),
    "datasets": ("datasets", "huggingface"),
    "ray": ("ray", "ray"),
}


def install_hint(module: str, extra: str | None = None) -> str:
    """The pip line that installs `module`'s extra (or `extra`, one that
    brings it with the rest a feature needs).

    Example::

        install_hint("pyarrow.parquet")  # "pip install 'jaxbatch[arrow]'"
    """
    _, own = EXTRAS[module.split(".")[0]]
    return f"pip install 'jaxbatch[{extra or own}]'"


def missing_message(module: str, what: str, extra: str | None = None) -> str:
    """What an ImportError says when `module`, which `what` needs, is missing."""
    distribution, _ = EXTRAS[module.split(".")[0]]
    return f"{what} needs {distribution}, which is not installed: {install_hint(module, extra)}"


def _is_missing(error: ModuleNotFoundError, module: str) -> bool:
    """Whether `error` is `module` (or a package above it) not being there,
    rather than something it imports in turn: that error is left as it is."""
    name = error.name or ""
    return module == name or module.startswith(name + ".")


def require(module: str, what: str, extra: str | None = None) -> ModuleType:
    """`module` imported (say ``"pyarrow.parquet"``), for the feature `what`;
    if it is not installed, an ImportError naming `what` and the extra
    (`extra`, where the feature needs more than the module's own: the demo).

    Example::

        pq = require("pyarrow.parquet", "jb.Loader reading Parquet")
        # without pyarrow: ImportError: jb.Loader reading Parquet needs
        # pyarrow, which is not installed: pip install 'jaxbatch[arrow]'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if not _is_missing(e, module):
            raise
        raise ImportError(missing_message(module, what, extra)) from e


def optional(module: str) -> ModuleType | None:
    """`module` imported, or None when it is not installed (a feature that
    does without it, such as a progress bar, says so with install_hint).

    Example::

        tqdm = optional("tqdm.auto")
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if not _is_missing(e, module):
            raise
        return None
