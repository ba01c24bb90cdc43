"""Errors that name the caller the user wrote, not the helper that raised."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def named_for(caller: str, helper: str = "Loader") -> Iterator[None]:
    """Inside, an error whose message starts ``"<helper>: "`` is re-raised,
    same type and traceback, starting ``"<caller>: "`` instead: jb.run opens
    its source with the Loader's code, and its user called jb.run.

    Example::

        with named_for("jb.run"):
            options = LoaderOptions(stream="yes")  # ValueError: jb.run: stream must be ...
    """
    try:
        yield
    except Exception as e:
        prefix = f"{helper}: "
        if len(e.args) == 1 and isinstance(e.args[0], str) and e.args[0].startswith(prefix):
            e.args = (f"{caller}: {e.args[0][len(prefix) :]}",)
        raise
