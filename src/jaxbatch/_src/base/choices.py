"""String options that Python itself decides (jb.map's ``on_oom``,
unbatch's ``per``): the ``Literal`` type a signature declares is the one
list of accepted values, read back here to validate, so the type a checker
sees and the check at run time cannot differ. Options the engine decides
(``shuffle``, ``remainder``, ...) are validated by the engine; their
``Literal`` types are tested against its enums instead."""

from __future__ import annotations

import typing
from typing import Any


def choices(literal: Any) -> tuple[str, ...]:
    """The values of a ``Literal`` type.

    Example::

        choices(Literal["split", "raise"])  # ("split", "raise")
    """
    return typing.get_args(literal)


def check_choice(who: str, option: str, value: Any, literal: Any) -> None:
    """ValueError naming `who`, `option`, the accepted values and `value`
    unless `value` is one of `literal`'s.

    Example::

        check_choice("jb.map", "on_oom", "retry", OnOom)
        # ValueError: jb.map: on_oom must be 'split' or 'raise', found 'retry'
    """
    allowed = choices(literal)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{who}: {option} must be {one_of(allowed)}, found {value!r}")


def one_of(values: tuple[str, ...]) -> str:
    """``'a', 'b' or 'c'``."""
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
